//! Human-readable dissection of send WQEs in ring memory and of CQEs (spec §2–§5, in the
//! format of the golden examples of spec §9).

use std::fmt;

pub use crate::wire::DecodeError;
use crate::wire::{
    cqe_opcode, opcode, syndrome, AtomicSeg, Cqe64, CtrlSeg, DataSeg, DatagramSeg, ErrCqe, InlineSeg,
    RaddrSeg, DS_SIZE, WQEBB_SIZE,
};
use crate::wqe::{self, DsKind};
use crate::QpType;

/// One DS of a dissected WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DsLine {
    /// Byte offset of the DS in the ring.
    pub ring_offset: usize,
    /// DS number inside the WQE.
    pub ds_index: usize,
    /// The 16 bytes.
    pub bytes: [u8; 16],
    /// Field decoding.
    pub text: String,
}

/// A dissected WQE: one line per DS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WqeDissection {
    /// Lines, DS0 first.
    pub lines: Vec<DsLine>,
}

fn hex16(b: &[u8; 16]) -> String {
    let mut s = String::with_capacity(52);
    for (i, x) in b.iter().enumerate() {
        if i > 0 {
            s.push(' ');
            if i % 4 == 0 {
                s.push(' ');
            }
        }
        s.push_str(&format!("{x:02x}"));
    }
    s
}

impl fmt::Display for DsLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ring+0x{:03x} DS{}: {}  {}",
            self.ring_offset,
            self.ds_index,
            hex16(&self.bytes),
            self.text
        )
    }
}

impl fmt::Display for WqeDissection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.lines {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}

fn printable(b: &[u8]) -> String {
    b.iter().map(|&c| if c.is_ascii_graphic() || c == b' ' { c as char } else { '.' }).collect()
}

fn describe(kind: DsKind, b: &[u8; 16], inline_left: &mut usize) -> String {
    match kind {
        DsKind::Ctrl => {
            let c = CtrlSeg::new_unchecked(&b[..]);
            let mut s = format!(
                "ctrl: opc 0x{:02x} {}, idx 0x{:04x}, qpn 0x{:x}, ds {}, fm_ce_se 0x{:02x} (FM {}, CE {}, SE {}), imm 0x{:08x}",
                c.opcode(),
                opcode::name(c.opcode()),
                c.wqe_index(),
                c.qpn(),
                c.ds(),
                c.fm_ce_se(),
                c.fm(),
                c.ce(),
                u8::from(c.se()),
                u32::from_be_bytes(c.imm())
            );
            if c.opmod() != 0 {
                s.push_str(&format!(", opmod 0x{:02x}", c.opmod()));
            }
            if c.signature() != 0 || c.dci_stream_channel_id() != 0 {
                s.push_str(&format!(", sig 0x{:02x}, stream {}", c.signature(), c.dci_stream_channel_id()));
            }
            s
        }
        DsKind::Raddr => {
            let r = RaddrSeg::new_unchecked(&b[..]);
            format!("raddr: raddr 0x{:016x}, rkey 0x{:x}", r.raddr(), r.rkey())
        }
        DsKind::Atomic => {
            let a = AtomicSeg::new_unchecked(&b[..]);
            format!("atomic: swap_add 0x{:016x}, compare 0x{:016x}", a.swap_add(), a.compare())
        }
        DsKind::Data => {
            let d = DataSeg::new_unchecked(&b[..]);
            format!(
                "data: byte_count 0x{:x}, lkey 0x{:x}, addr 0x{:016x}",
                d.byte_count(),
                d.lkey(),
                d.addr()
            )
        }
        DsKind::InlineHead(len) => {
            let i = InlineSeg::new_unchecked(&b[..]);
            let n = (len as usize).min(12);
            *inline_left = len as usize - n;
            format!(
                "inline: byte_count 0x{:08x} (len {}), data \"{}\"",
                i.byte_count(),
                len,
                printable(&b[4..4 + n])
            )
        }
        DsKind::InlineCont => {
            let n = (*inline_left).min(16);
            *inline_left -= n;
            format!("inline data (cont.) \"{}\"", printable(&b[..n]))
        }
        DsKind::Av(k) => format!("av[{k}]"),
        DsKind::Unknown => "unknown".to_string(),
    }
}

fn describe_av(av: &[u8; 48]) -> [String; 3] {
    let a = DatagramSeg::new_unchecked(&av[..]);
    let m = a.rmac();
    let g = a.rgid();
    let mut gid = String::new();
    for (i, pair) in g.chunks(2).enumerate() {
        if i > 0 {
            gid.push(':');
        }
        gid.push_str(&format!("{:02x}{:02x}", pair[0], pair[1]));
    }
    [
        format!(
            "av: key 0x{:016x}, dqp_dct 0x{:08x} (ext {}, dqpn 0x{:x}), stat_rate_sl 0x{:02x}, fl_mlid 0x{:02x}, rlid 0x{:04x}",
            a.dc_key(),
            a.dqp_dct(),
            u8::from(a.ext()),
            a.dqpn(),
            a.stat_rate_sl(),
            a.fl_mlid(),
            a.rlid()
        ),
        format!(
            "av: rmac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, tclass 0x{:02x}, hop_limit {}, grh_gid_fl 0x{:08x} (grh {}, sgid_index {}, fl 0x{:x})",
            m[0], m[1], m[2], m[3], m[4], m[5],
            a.tclass(),
            a.hop_limit(),
            a.grh_gid_fl(),
            u8::from(a.grh()),
            a.sgid_index(),
            a.flow_label()
        ),
        format!("av: rgid {gid}"),
    ]
}

/// DS `i` of a masked atomic's operands (spec §3.5), by the ctrl segment's opcode and
/// opmod: 4-byte compare-and-swap fields, an 8-byte one's values or masks, or a
/// fetch-and-add's addend and field boundary. `None` for any other DS.
fn masked_part(wqe: &[u8], kinds: &[DsKind], i: usize) -> Option<String> {
    if kinds.get(i) != Some(&DsKind::Atomic) {
        return None;
    }
    let c = CtrlSeg::new_unchecked(&wqe[..DS_SIZE]);
    let width = wqe::masked_width(c.opmod())
        .filter(|_| matches!(c.opcode(), opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA))?;
    let b = &wqe[i * DS_SIZE..(i + 1) * DS_SIZE];
    let second = i > 0 && kinds[i - 1] == DsKind::Atomic;
    let be32 = |k: usize| u32::from_be_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
    let be64 = |k: usize| u64::from(be32(2 * k)) << 32 | u64::from(be32(2 * k + 1));
    Some(match (c.opcode(), width, second) {
        (opcode::ATOMIC_MASKED_CS, 4, _) => format!(
            "masked cs 4B: swap 0x{:08x}, compare 0x{:08x}, swap_mask 0x{:08x}, compare_mask 0x{:08x}",
            be32(0),
            be32(1),
            be32(2),
            be32(3)
        ),
        (opcode::ATOMIC_MASKED_CS, _, false) => {
            format!("masked cs 8B: swap 0x{:016x}, compare 0x{:016x}", be64(0), be64(1))
        }
        (opcode::ATOMIC_MASKED_CS, _, true) => {
            format!("masked cs 8B: swap_mask 0x{:016x}, compare_mask 0x{:016x}", be64(0), be64(1))
        }
        (_, 4, _) => format!("masked fa 4B: add 0x{:08x}, field_boundary 0x{:08x}", be32(0), be32(1)),
        _ => format!("masked fa 8B: add 0x{:016x}, field_boundary 0x{:016x}", be64(0), be64(1)),
    })
}

/// The lines of a UMR WQE (docs/mlx5-wire-format.md §3.7): ctrl, UMR ctrl (DS 1-3),
/// mkey context (DS 4-7), KLM entries.
fn umr_lines(wqe: &[u8], n: usize, off: impl Fn(usize) -> usize) -> WqeDissection {
    let be16 = |a: usize| u16::from_be_bytes([wqe[a], wqe[a + 1]]);
    let be32 = |a: usize| u32::from_be_bytes([wqe[a], wqe[a + 1], wqe[a + 2], wqe[a + 3]]);
    let be64 = |a: usize| u64::from(be32(a)) << 32 | u64::from(be32(a + 4));
    let names = |bits: u64, table: &[(u64, &str)]| {
        let v: Vec<&str> = table.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| *n).collect();
        v.join("|")
    };
    let mut lines = Vec::with_capacity(n);
    for i in 0..n {
        let mut b = [0u8; 16];
        b.copy_from_slice(&wqe[i * DS_SIZE..(i + 1) * DS_SIZE]);
        let a = i * DS_SIZE;
        let text = match i {
            0 => describe(DsKind::Ctrl, &b, &mut 0),
            1 => {
                let flags = u64::from(wqe[a]);
                let mask = be64(a + 8);
                format!(
                    "umr ctrl: flags 0x{flags:02x} ({}), klm_octowords {}, translation_offset {}, mkey_mask 0x{mask:016x} ({})",
                    names(flags, &[(0x80, "INLINE"), (0x20, "CHECK_FREE"), (0x10, "TRANSLATION_OFFSET"), (0x08, "CHECK_QPN")]),
                    be16(a + 4),
                    be16(a + 6),
                    names(
                        mask,
                        &[
                            (1 << 0, "LEN"),
                            (1 << 6, "START_ADDR"),
                            (1 << 13, "MKEY"),
                            (1 << 14, "QPN"),
                            (1 << 18, "LOCAL_WRITE"),
                            (1 << 19, "REMOTE_READ"),
                            (1 << 20, "REMOTE_WRITE"),
                            (1 << 21, "ATOMIC"),
                            (1 << 29, "FREE"),
                        ]
                    )
                )
            }
            2 | 3 => "umr ctrl: reserved".into(),
            4 => {
                let q = be32(a + 4);
                let qp =
                    if q >> 8 == 0xff_ffff { "any QP".to_string() } else { format!("qpn 0x{:x}", q >> 8) };
                format!(
                    "mkey ctx: free 0x{:02x}, access 0x{:02x} ({}), qpn_mkey 0x{q:08x} ({qp}, variant 0x{:02x})",
                    wqe[a],
                    wqe[a + 2],
                    names(
                        u64::from(wqe[a + 2]),
                        &[(0x04, "LR"), (0x08, "LW"), (0x10, "RR"), (0x20, "RW"), (0x40, "A")]
                    ),
                    q & 0xff
                )
            }
            5 => format!("mkey ctx: start_addr 0x{:016x}, len 0x{:x}", be64(a), be64(a + 8)),
            6 | 7 => "mkey ctx: reserved".into(),
            _ if b == [0; 16] => "klm: padding".into(),
            _ => format!(
                "klm: byte_count 0x{:x}, mkey 0x{:x}, address 0x{:016x}",
                be32(a),
                be32(a + 4),
                be64(a + 8)
            ),
        };
        lines.push(DsLine { ring_offset: off(i), ds_index: i, bytes: b, text });
    }
    WqeDissection { lines }
}

/// Decodes the send WQE whose ctrl segment is at WQEBB counter `pi` of `ring`
/// (`wqe_cnt = ring.len() / 64`, a power of two), following wrap-around (spec §1.3).
/// Inconsistent WQEs are still dissected; DS the layout cannot explain read "unknown".
pub fn dissect_send_wqe(ring: &[u8], pi: u16, qp_type: QpType) -> Result<WqeDissection, DecodeError> {
    let cnt = ring.len() / WQEBB_SIZE;
    if !ring.len().is_multiple_of(WQEBB_SIZE) || !cnt.is_power_of_two() {
        return Err(DecodeError::BadRing { len: ring.len() });
    }
    let start = (usize::from(pi) & (cnt - 1)) * WQEBB_SIZE;
    let off = |i: usize| (start + i * DS_SIZE) % ring.len();
    let ds = usize::from(CtrlSeg::new_unchecked(&ring[start..start + DS_SIZE]).ds());
    let n = ds.clamp(1, ring.len() / DS_SIZE);
    let mut wqe = vec![0u8; n * DS_SIZE];
    for i in 0..n {
        wqe[i * DS_SIZE..(i + 1) * DS_SIZE].copy_from_slice(&ring[off(i)..off(i) + DS_SIZE]);
    }
    if CtrlSeg::new_unchecked(&wqe[..DS_SIZE]).opcode() == opcode::UMR {
        return Ok(umr_lines(&wqe, n, off));
    }
    let mut kinds = vec![DsKind::Unknown; n];
    let _ = wqe::walk(qp_type, &wqe, n, |i, k, _| {
        if let Some(slot) = kinds.get_mut(i) {
            *slot = k;
        }
    });
    let mut lines = Vec::with_capacity(n);
    let mut inline_left = 0;
    let mut i = 0;
    while i < n {
        let mut b = [0u8; 16];
        b.copy_from_slice(&wqe[i * DS_SIZE..(i + 1) * DS_SIZE]);
        if kinds[i] == DsKind::Av(0) && i + 3 <= n && kinds.get(i + 2) == Some(&DsKind::Av(2)) {
            let mut av = [0u8; 48];
            av.copy_from_slice(&wqe[i * DS_SIZE..(i + 3) * DS_SIZE]);
            for (k, text) in describe_av(&av).into_iter().enumerate() {
                let mut bk = [0u8; 16];
                bk.copy_from_slice(&av[k * 16..(k + 1) * 16]);
                lines.push(DsLine { ring_offset: off(i + k), ds_index: i + k, bytes: bk, text });
            }
            i += 3;
            continue;
        }
        let text = match masked_part(&wqe, &kinds, i) {
            Some(t) => t,
            None => describe(kinds[i], &b, &mut inline_left),
        };
        lines.push(DsLine { ring_offset: off(i), ds_index: i, bytes: b, text });
        i += 1;
    }
    Ok(WqeDissection { lines })
}

/// Dissects a CQE (64 bytes, or a 128-byte slot whose second half is the CQE proper):
/// one line per 16 bytes with field names.
pub fn dissect_cqe(cqe: &[u8]) -> Result<String, DecodeError> {
    let c = if cqe.len() == 128 { &cqe[64..] } else { &cqe[..cqe.len().min(64)] };
    let v = Cqe64::new_checked(c)?;
    let row = |k: usize| {
        let mut b = [0u8; 16];
        b.copy_from_slice(&c[k * 16..(k + 1) * 16]);
        format!("+0x{:02x}: {}", k * 16, hex16(&b))
    };
    let op = v.opcode();
    let mut out = String::new();
    let own = format!(
        "op_own 0x{:02x} ({} {}, format {}, se {}, owner {})",
        v.op_own(),
        op,
        cqe_opcode::name(op),
        v.format(),
        u8::from(v.se()),
        v.owner()
    );
    if op == cqe_opcode::REQ_ERR || op == cqe_opcode::RESP_ERR {
        let e = ErrCqe::new_checked(c)?;
        out.push_str(&format!("{}  reserved\n", row(0)));
        out.push_str(&format!("{}  reserved\n", row(1)));
        out.push_str(&format!("{}  srqn 0x{:x}\n", row(2), e.srqn()));
        out.push_str(&format!(
            "{}  hw_err_synd 0x{:02x}, hw_synd_type 0x{:02x}, vendor_err_synd 0x{:02x}, syndrome 0x{:02x} {}, s_wqe_opcode_qpn 0x{:08x} (opc 0x{:02x}, qpn 0x{:x}), wqe_counter 0x{:04x}, signature 0x{:02x}, {}",
            row(3),
            e.hw_err_synd(),
            e.hw_synd_type(),
            e.vendor_err_synd(),
            e.syndrome(),
            syndrome::name(e.syndrome()),
            e.s_wqe_opcode_qpn(),
            e.s_wqe_opcode_qpn() >> 24,
            e.s_wqe_opcode_qpn() & 0xff_ffff,
            e.wqe_counter(),
            e.signature(),
            own
        ));
    } else {
        out.push_str(&format!(
            "{}  wqe_id 0x{:04x}, rss_hash_result 0x{:08x}\n",
            row(0),
            v.wqe_id(),
            v.rss_hash_result()
        ));
        out.push_str(&format!(
            "{}  ml_path 0x{:02x}, check_sum 0x{:04x}, slid 0x{:04x}, flags_rqpn 0x{:08x} (rqpn 0x{:x}), hds_ip_ext 0x{:02x}, l4_hdr_type_etc 0x{:02x}, vlan_info 0x{:04x}\n",
            row(1),
            v.ml_path(),
            v.check_sum(),
            v.slid(),
            v.flags_rqpn(),
            v.flags_rqpn() & 0xff_ffff,
            v.hds_ip_ext(),
            v.l4_hdr_type_etc(),
            v.vlan_info()
        ));
        out.push_str(&format!(
            "{}  srqn_uidx 0x{:x}, imm_inval_pkey 0x{:08x}, app {}, app_op {}, app_info 0x{:04x}, byte_cnt 0x{:x}\n",
            row(2),
            v.srqn_uidx(),
            u32::from_be_bytes(v.imm_inval_pkey()),
            v.app(),
            v.app_op(),
            v.app_info(),
            v.byte_cnt()
        ));
        out.push_str(&format!(
            "{}  timestamp 0x{:016x}, sop_drop_qpn 0x{:08x} (opc 0x{:02x}, qpn 0x{:x}), wqe_counter 0x{:04x}, signature 0x{:02x}, {}",
            row(3),
            v.timestamp(),
            v.sop_drop_qpn(),
            v.sop_drop_qpn() >> 24,
            v.sop_drop_qpn() & 0xff_ffff,
            v.wqe_counter(),
            v.signature(),
            own
        ));
    }
    Ok(out)
}
