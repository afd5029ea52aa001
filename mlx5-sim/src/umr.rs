//! The UMR WQE (opcode 0x25, docs/mlx5-wire-format.md §3.7): how rdma-core binds a
//! memory window (`ibv_bind_mw`, `ibv_wr_bind_mw`), invalidates one (`ibv_wr_local_inv`)
//! and points an indirect mkey at a list of KLM entries (`mlx5dv_wr_mr_list`). Decoded
//! here from the bytes, with the model's own offsets:
//!
//! ```text
//! DS 0      ctrl            imm = the key (window or mkey) the UMR modifies
//! DS 1..3   UMR ctrl        @0 flags, @4 BE16 klm_octowords, @8 BE64 mkey_mask
//! DS 4..7   mkey context    @0 free (0x40), @2 access, @4 BE32 qpn_mkey, @16 BE64 start,
//!                           @24 BE64 len
//! DS 8..    KLM entries     16 B each: BE32 byte_count, BE32 mkey, BE64 address
//! ```
//!
//! The UMR names its key by index (`imm >> 8`): rdma-core's LOCAL_INV gives the new
//! variant 0 and leaves the window's rkey as it was, so its next bind names the window
//! with a variant the NIC no longer holds. A refusal of a well-formed UMR completes with
//! MW_BIND_ERR and moves the QP to ERR; a malformed one with LOCAL_QP_OP_ERR, as other
//! malformed WQEs do [unverified: which syndrome mlx5 gives each refusal].

use crate::mkey::{Bound, Freed, Klm, Layout, MkeyKind, Repeat};
use crate::responder::{fail, Outcome};
use crate::wire::{get_u16, get_u32, get_u64, syndrome, CtrlRepr, DS_SIZE};
use crate::{access, why};

/// `flags` of the UMR ctrl segment.
mod flag {
    pub const INLINE: u8 = 0x80;
    pub const CHECK_FREE: u8 = 0x20;
    pub const CHECK_QPN: u8 = 0x08;
}

/// `mkey_mask` bits: which mkey context fields the UMR sets.
mod mask {
    pub const LEN: u64 = 1 << 0;
    pub const START_ADDR: u64 = 1 << 6;
    pub const MKEY: u64 = 1 << 13;
    pub const QPN: u64 = 1 << 14;
    pub const LOCAL_WRITE: u64 = 1 << 18;
    pub const REMOTE_READ: u64 = 1 << 19;
    pub const REMOTE_WRITE: u64 = 1 << 20;
    pub const ATOMIC: u64 = 1 << 21;
    pub const FREE: u64 = 1 << 29;
}

/// The mkey context's access byte, as `access::*` bits (local read is always granted).
fn access_of(b: u8, m: u64) -> u32 {
    let mut a = 0;
    for (bit, mbit, acc) in [
        (0x08, mask::LOCAL_WRITE, access::LOCAL_WRITE),
        (0x10, mask::REMOTE_READ, access::REMOTE_READ),
        (0x20, mask::REMOTE_WRITE, access::REMOTE_WRITE),
        (0x40, mask::ATOMIC, access::REMOTE_ATOMIC),
    ] {
        if b & bit != 0 && m & mbit != 0 {
            a |= acc;
        }
    }
    a
}

/// A UMR WQE, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Umr {
    pub key: u32,
    pub flags: u8,
    pub mask: u64,
    pub free: bool,
    pub access: u8,
    pub qpn_mkey: u32,
    pub start: u64,
    pub len: u64,
    /// The inline translation: a KLM list (its non-empty entries: entries of 0 bytes
    /// pad the list to 64 bytes) or a repeated block.
    pub layout: Layout,
}

/// The `op` of a repeated block's first DS (`mlx5_wqe_umr_repeat_block_seg`), where a
/// KLM entry has its mkey: what tells the two apart [model choice: the model's MR keys
/// are never 0x400].
const REPEAT_BLOCK_OP: u32 = 0x400;

/// Decodes UMR WQE `wqe` (ctrl `ctrl`); why not, when malformed.
pub(crate) fn parse(ctrl: &CtrlRepr, wqe: &[u8]) -> Result<Umr, &'static str> {
    let ds = usize::from(ctrl.ds);
    if ds < 8 || wqe.len() < ds * DS_SIZE {
        return Err("a UMR WQE holds at least the ctrl, UMR ctrl and mkey context segments (8 DS)");
    }
    let flags = wqe[16];
    let octowords = usize::from(get_u16(wqe, 20..22));
    let mask = get_u64(wqe, 24..32);
    let m = &wqe[64..128];
    if octowords > 0 && flags & flag::INLINE == 0 {
        return Err("the UMR's KLM list is not inline (the model takes inline lists only)");
    }
    if 8 + octowords > ds {
        return Err("the UMR's klm_octowords reach past its DS count");
    }
    let data = &wqe[128..128 + octowords * DS_SIZE];
    let layout = if octowords > 0 && get_u32(data, 4..8) == REPEAT_BLOCK_OP {
        // byte_count @0, op @4, repeat_count @8, num_ent @14; then entries of stride @0,
        // byte_count @2 (both BE16), memkey @4, va @8.
        let n = usize::from(get_u16(data, 14..16));
        if n == 0 || 1 + n > octowords {
            return Err("the UMR's repeated block has no entry, or more than its klm_octowords hold");
        }
        let ents: Vec<(Klm, u64)> = data[16..16 * (1 + n)]
            .chunks_exact(16)
            .map(|e| {
                let k =
                    Klm { len: u32::from(get_u16(e, 2..4)), key: get_u32(e, 4..8), addr: get_u64(e, 8..16) };
                (k, u64::from(get_u16(e, 0..2)))
            })
            .collect();
        let sum: u64 = ents.iter().map(|(k, _)| u64::from(k.len)).sum();
        if u64::from(get_u32(data, 0..4)) != sum {
            return Err("the UMR's repeated block's byte_count is not the sum of its entries'");
        }
        Layout::Repeat(Repeat { ents, count: get_u32(data, 8..12) })
    } else {
        let klms = data
            .chunks_exact(16)
            .map(|e| Klm { len: get_u32(e, 0..4), key: get_u32(e, 4..8), addr: get_u64(e, 8..16) })
            .filter(|k| k.len != 0)
            .collect();
        Layout::List(klms)
    };
    Ok(Umr {
        key: u32::from_be_bytes(ctrl.imm),
        flags,
        mask,
        free: m[0] & 0x40 != 0 && mask & mask::FREE != 0,
        access: m[2],
        qpn_mkey: get_u32(m, 4..8),
        start: get_u64(m, 16..24),
        len: get_u64(m, 24..32),
        layout,
    })
}

/// A well-formed UMR refused: why, for the error CQE's explanation.
#[cold]
#[inline(never)]
fn refuse(f: impl FnOnce() -> String) -> Outcome {
    why::note(f);
    fail(syndrome::MW_BIND_ERR)
}

/// Carries out UMR `u` posted on RC QP `qpn` of PD `pdn` against host `host`'s keys.
pub(crate) fn execute(host: &mut crate::host::Host, qpn: u32, pdn: u32, u: &Umr) -> Outcome {
    let key = u.key;
    let mrs = &host.mrs;
    let Some(mk) = mrs.mkeys.by_index(key) else {
        return refuse(|| {
            format!("the UMR names key 0x{key:x}, which is neither a memory window nor an indirect mkey of this device")
        });
    };
    let (kind, noun) = (mk.kind, mk.kind.noun());
    if mk.pdn != pdn {
        let p = mk.pdn;
        return refuse(|| {
            format!("the {noun} 0x{key:x} belongs to PD 0x{p:x}, and QP 0x{qpn:x} to PD 0x{pdn:x}")
        });
    }
    let qpn_field = u.qpn_mkey >> 8;
    if u.free {
        // Invalidation: LOCAL_INV (type 2, CHECK_QPN), a type-1 bind of length 0.
        if u.flags & flag::CHECK_QPN != 0 && kind == MkeyKind::Mw1 {
            return refuse(|| {
                format!(
                    "LOCAL_INV of type-1 window 0x{key:x}: a type-1 window is unbound by a bind of length 0"
                )
            });
        }
        if u.flags & flag::CHECK_QPN != 0 {
            // A type-2 window must be bound to this QP; an mkey (bound to any QP) bound.
            let bound = mk.bound.as_ref().map(|b| b.qpn);
            if bound.is_none() || bound.is_some_and(|b| b.is_some_and(|b| b != qpn)) {
                return refuse(|| match bound.flatten() {
                    Some(b) => {
                        format!("LOCAL_INV of {noun} 0x{key:x} on QP 0x{qpn:x}: it is bound to QP 0x{b:x}")
                    }
                    None => format!("LOCAL_INV of {noun} 0x{key:x} on QP 0x{qpn:x}: it is not bound"),
                });
            }
        }
        let mk = host.mrs.mkeys.by_index_mut(key).expect("looked up above");
        mk.bound = None;
        mk.freed = Freed::Local(qpn);
        if u.mask & mask::MKEY != 0 {
            mk.variant = u.qpn_mkey as u8;
        }
        return Outcome::Done { byte_cnt: 0 };
    }
    // A bind.
    let acc = access_of(u.access, u.mask);
    let qp_bound = match (kind, u.mask & mask::QPN != 0) {
        (MkeyKind::Mw2, true) if qpn_field == qpn => Some(qpn),
        (MkeyKind::Mw2, true) => {
            return refuse(|| {
                format!("the bind of type-2 window 0x{key:x} names QP 0x{qpn_field:x}; it was posted on QP 0x{qpn:x}")
            })
        }
        (MkeyKind::Mw2, false) => {
            return refuse(|| {
                format!("the bind of type-2 window 0x{key:x} binds it to no QP (a type-1 bind)")
            })
        }
        (_, true) if qpn_field != 0xff_ffff => {
            return refuse(|| {
                format!("the UMR binds the {noun} 0x{key:x} to QP 0x{qpn_field:x}; only a type-2 window is bound to a QP")
            })
        }
        _ => None,
    };
    if kind == MkeyKind::Mw2 && u.flags & flag::CHECK_FREE != 0 && mk.bound.is_some() {
        return refuse(|| {
            format!("type-2 window 0x{key:x} is still bound: it must be invalidated before it is bound again")
        });
    }
    let total = u.layout.total();
    match kind {
        MkeyKind::Mw1 | MkeyKind::Mw2 => {
            let Layout::List(klms) = &u.layout else {
                return refuse(|| {
                    format!(
                        "the bind of window 0x{key:x} carries a repeated block; a window covers one MR range"
                    )
                });
            };
            let [k] = klms[..] else {
                let n = klms.len();
                return refuse(|| {
                    format!("the bind of window 0x{key:x} has {n} KLM entries; a window covers one MR range")
                });
            };
            if total != u.len || u.len > 1 << 31 {
                let l = u.len;
                return refuse(|| {
                    format!("the bind of window 0x{key:x} covers {l} bytes with an entry of {total}")
                });
            }
            let Some(mr) = mrs.mr(k.key) else {
                return refuse(|| {
                    format!("the bind of window 0x{key:x} names MR 0x{:x}, which is not registered", k.key)
                });
            };
            if mr.pdn != pdn {
                let p = mr.pdn;
                return refuse(|| {
                    format!(
                        "window 0x{key:x} and its MR 0x{:x} are in different PDs (0x{pdn:x}, 0x{p:x})",
                        k.key
                    )
                });
            }
            if mr.access & access::MW_BIND == 0 {
                return refuse(|| {
                    format!("MR 0x{:x} was registered without MW_BIND: no window may be bound to it", k.key)
                });
            }
            let end = k.addr.checked_add(total);
            if k.addr < mr.addr || end.is_none_or(|e| e > mr.addr + mr.len) {
                let (a, e) = (mr.addr, mr.addr + mr.len);
                return refuse(|| {
                    format!(
                    "the bind of window 0x{key:x} covers [0x{:x}, +0x{total:x}), outside its MR 0x{:x} [0x{a:x}, 0x{e:x})",
                    k.addr, k.key
                )
                });
            }
            if acc & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
                && mr.access & access::LOCAL_WRITE == 0
            {
                return refuse(|| {
                    format!(
                    "window 0x{key:x} would grant remote write or atomic access to MR 0x{:x}, which lacks LOCAL_WRITE",
                    k.key
                )
                });
            }
        }
        MkeyKind::Indirect { max_entries, .. } => {
            let n = match &u.layout {
                Layout::List(k) => k.len(),
                Layout::Repeat(r) => r.ents.len(),
            } as u32;
            if n > max_entries {
                return refuse(|| {
                    format!("the UMR gives indirect mkey 0x{key:x} {n} KLM entries; it was created for {max_entries}")
                });
            }
            if total < u.len {
                let l = u.len;
                return refuse(|| {
                    format!("indirect mkey 0x{key:x} is {l} bytes long, its entries cover {total}")
                });
            }
        }
    }
    let mk = host.mrs.mkeys.by_index_mut(key).expect("looked up above");
    if u.mask & mask::MKEY != 0 {
        mk.variant = u.qpn_mkey as u8;
    }
    let start = if u.mask & mask::START_ADDR != 0 { u.start } else { 0 };
    let len = if u.mask & mask::LEN != 0 { u.len } else { total };
    mk.bound = Some(Bound { start, len, access: acc, qpn: qp_bound, layout: u.layout.clone() });
    Outcome::Done { byte_cnt: 0 }
}

/// A SEND with invalidate naming `rkey` arrived at RC QP `qpn` (PD `pdn`): the type-2
/// window it names, bound to that QP, becomes free. `Err`: why it may not (IB: only a
/// type-2 window bound to the QP the SEND arrived at is remotely invalidated; an MR or a
/// type-1 window never is).
pub(crate) fn remote_invalidate(
    mrs: &crate::dma::MrTable,
    rkey: u32,
    pdn: u32,
    qpn: u32,
) -> Result<(), String> {
    let Some(mk) = mrs.mkeys.by_index(rkey) else {
        return Err(format!(
            "the SEND with invalidate names rkey 0x{rkey:x}, which is not a memory window (an MR is never invalidated remotely)"
        ));
    };
    let noun = mk.kind.noun();
    let by_mkey = matches!(mk.kind, MkeyKind::Indirect { remote_invalidate: true, .. });
    if mk.kind != MkeyKind::Mw2 && !by_mkey {
        return Err(format!(
            "the SEND with invalidate names the {noun} 0x{rkey:x}: only a type-2 window, or an mkey created for \
             remote invalidation, is invalidated remotely"
        ));
    }
    if mk.variant != rkey as u8 {
        return Err(format!(
            "the SEND with invalidate names rkey 0x{rkey:x}, a stale key of {noun} 0x{:x}",
            mk.key(rkey)
        ));
    }
    match mk.bound.as_ref().map(|b| b.qpn) {
        None => Err(format!("the SEND with invalidate names {noun} 0x{rkey:x}, which is not bound")),
        Some(Some(b)) if b != qpn => Err(format!(
            "the SEND with invalidate names window 0x{rkey:x}, bound to QP 0x{b:x}; it arrived at QP 0x{qpn:x}"
        )),
        Some(_) if mk.pdn != pdn => Err(format!("the {noun} 0x{rkey:x} is in another PD than QP 0x{qpn:x}")),
        Some(_) => Ok(()),
    }
}

/// Frees the window of `rkey` (checked by [`remote_invalidate`]) on behalf of QP `qpn`.
pub(crate) fn invalidate(mrs: &mut crate::dma::MrTable, rkey: u32, qpn: u32) {
    if let Some(mk) = mrs.mkeys.by_index_mut(rkey) {
        mk.bound = None;
        mk.freed = Freed::Remote(qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::CtrlSeg;

    fn bytes(hex: &str) -> Vec<u8> {
        let h: String = hex.split_whitespace().collect();
        (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap()).collect()
    }

    /// W10 of docs/mlx5-wire-format.md §9: the type-2 bind libmlx5's `ibv_wr_bind_mw`
    /// wrote on QP 0x1001 (REMOTE_WRITE | REMOTE_READ, 512 bytes of lkey 0x10001).
    #[test]
    fn libmlx5s_type_2_bind_decodes() {
        let w = bytes(
            "00000025 0010010c 00000008 80000000  b0000000 00040000 00000000 203c6041
             00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000
             00003000 00100101 00000000 00000000  000056238eb4a100 0000000000000200
             00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000
             00000200 00010001 000056238eb4a100   00000000 00000000 00000000 00000000
             00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000",
        );
        let ctrl = CtrlRepr::parse(&CtrlSeg::new_unchecked(&w[..16]));
        let u = parse(&ctrl, &w).unwrap();
        assert_eq!((u.key, u.flags, u.mask, u.free), (0x8000_0000, 0xb0, 0x203c_6041, false));
        assert_eq!((u.access, u.qpn_mkey, u.start, u.len), (0x30, 0x0010_0101, 0x5623_8eb4_a100, 0x200));
        assert_eq!(u.layout, Layout::List(vec![Klm { len: 0x200, key: 0x10001, addr: 0x5623_8eb4_a100 }]));
        assert_eq!(access_of(u.access, u.mask), access::REMOTE_READ | access::REMOTE_WRITE);
    }

    /// W15: libmlx5's interleaved layout (16 bytes every 64, 8 every 16, 4 times).
    #[test]
    fn libmlx5s_interleaved_layout_decodes() {
        let mut w = bytes(
            "00000325 0010010c 00000028 80000100  80000000 00040000 00000000 203c2001
             00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000
             00003800 ffffff00 00000000 00000000  00000000 00000000 00000000 00000060
             00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000
             00000018 00000400 00000004 00000002  00400010 00010001 000055fa54b4a000
             00100008 00010001 000055fa54b4b800   00000000 00000000 00000000 00000000",
        );
        let ctrl = CtrlRepr::parse(&CtrlSeg::new_unchecked(&w[..16]));
        let u = parse(&ctrl, &w).unwrap();
        let Layout::Repeat(r) = &u.layout else { panic!("{:?}", u.layout) };
        assert_eq!(r.count, 4);
        assert_eq!(r.ents[0], (Klm { len: 16, key: 0x10001, addr: 0x55fa_54b4_a000 }, 64));
        assert_eq!(r.ents[1], (Klm { len: 8, key: 0x10001, addr: 0x55fa_54b4_b800 }, 16));
        assert_eq!((u.len, u.layout.total()), (0x60, 96));
        // A block whose byte_count is not its entries' is malformed.
        w[131] = 0x19;
        assert!(parse(&ctrl, &w).is_err());
    }
}
