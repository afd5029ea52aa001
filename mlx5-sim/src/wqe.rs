//! Send WQE layout: which segment each DS of a WQE is, per QP type and opcode
//! (spec §3.8), and validation of a WQE before execution (spec §8 step 3).

use crate::wire::{opcode, AtomicSeg, CtrlRepr, CtrlSeg, DataSeg, InlineSeg, RaddrSeg, DS_SIZE};
use crate::QpType;

/// The fixed segments that follow the ctrl segment for an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedLayout {
    /// An address vector (UD/DCI) follows the ctrl segment.
    pub av: bool,
    /// A raddr segment follows.
    pub raddr: bool,
    /// An atomic segment follows the raddr segment.
    pub atomic: bool,
    /// Data/inline segments may follow.
    pub data: bool,
    /// Inline segments are legal in the data part.
    pub inline_ok: bool,
}

/// Fixed layout of `op` on a QP of type `t`, `None` when the opcode is not supported there.
pub(crate) fn fixed_layout(t: QpType, op: u8) -> Option<FixedLayout> {
    let base = |raddr, atomic, data, inline_ok| FixedLayout { av: false, raddr, atomic, data, inline_ok };
    let rc = match op {
        opcode::NOP => Some(base(false, false, false, false)),
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => Some(base(false, false, true, true)),
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => Some(base(true, false, true, true)),
        opcode::RDMA_READ => Some(base(true, false, true, false)),
        opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA => {
            Some(base(true, true, true, false))
        }
        _ => None,
    };
    match t {
        QpType::Rc => rc,
        QpType::Ud => match op {
            opcode::NOP => rc,
            opcode::SEND | opcode::SEND_IMM => rc.map(|l| FixedLayout { av: true, ..l }),
            _ => None,
        },
        QpType::Dci => match op {
            opcode::NOP => rc,
            opcode::SEND_INVAL => None,
            _ => rc.map(|l| FixedLayout { av: true, ..l }),
        },
        // A DCT has no send queue.
        QpType::Dct => None,
    }
}

/// A masked atomic's argument width in bytes from its `opmod` (spec §3.5:
/// `0x08 | (log2(bytes) - 2)`), for the sizes the model carries out: 4 and 8.
/// Larger arguments (16 bytes and up) and the "indirect" form are not modelled.
pub(crate) fn masked_width(opmod: u8) -> Option<u8> {
    match opmod {
        0x08 => Some(4),
        0x09 => Some(8),
        _ => None,
    }
}

/// DS of a masked atomic's operands (spec §3.5): two for an 8-byte
/// compare-and-swap (values, then masks), else one.
fn masked_ds(op: u8, width: u8) -> usize {
    if op == opcode::ATOMIC_MASKED_CS && width == 8 {
        2
    } else {
        1
    }
}

fn is_masked(op: u8) -> bool {
    matches!(op, opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA)
}

/// Kind of one DS of a WQE, for dissection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DsKind {
    Ctrl,
    /// Address vector, part `0..n` of it.
    Av(u8),
    Raddr,
    Atomic,
    Data,
    /// First DS of an inline segment (payload length).
    InlineHead(u32),
    InlineCont,
    /// Beyond what the layout explains.
    Unknown,
}

/// A piece of the payload / scatter list, in WQE order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Inline bytes at `off..off+len` of the WQE bytes.
    Inline { off: usize, len: usize },
    /// A data pointer segment.
    Sge { len: u32, lkey: u32, addr: u64 },
}

/// A validated send WQE (its bytes live in a separate buffer, unwrapped from the ring).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendWqe {
    pub ctrl: CtrlRepr,
    pub raddr: u64,
    pub rkey: u32,
    /// CS: swap; FA: add.
    pub swap_add: u64,
    /// CS: compare; masked FA: the field boundary.
    pub compare: u64,
    /// Masked CS: which bits the swap writes, and which the comparison looks at.
    pub swap_mask: u64,
    pub compare_mask: u64,
    /// Masked atomics: the argument width (4 or 8); else 0.
    pub width: u8,
    /// First DS of the data part.
    pub data_ds: usize,
    /// Number of data pieces.
    pub n_pieces: usize,
    /// Sum of piece lengths (payload of SEND/WRITE, scatter length of READ/atomics).
    pub len: u64,
}

/// Largest message the model accepts (2 GiB, the 31-bit length field).
pub(crate) const MAX_MSG: u64 = 0x8000_0000;

/// Length of the address vector at DS `i`: 48 bytes, 16 when the ext bit is clear.
/// Only the first DS is needed to decide (the ext bit is in `dqp_dct`, bytes 8..11).
fn av_ds(wqe: &[u8], i: usize) -> usize {
    match wqe.get(i * DS_SIZE..(i + 1) * DS_SIZE) {
        Some(first) if first[8] & 0x80 == 0 => 1,
        _ => 3,
    }
}

/// Walks the DS of `wqe` (`ds` units present in `wqe`), reporting each kind to `f`.
/// Returns an error string for the first inconsistency; kinds are reported up to it.
pub(crate) fn walk(
    t: QpType,
    wqe: &[u8],
    ds: usize,
    mut f: impl FnMut(usize, DsKind, Option<Piece>),
) -> Result<(), &'static str> {
    if ds == 0 {
        return Err("ds is 0");
    }
    if wqe.len() < ds * DS_SIZE {
        return Err("WQE shorter than ds");
    }
    f(0, DsKind::Ctrl, None);
    let ctrl = CtrlSeg::new_unchecked(&wqe[..DS_SIZE]);
    let unknown_rest = |from: usize, f: &mut dyn FnMut(usize, DsKind, Option<Piece>)| {
        for i in from..ds {
            f(i, DsKind::Unknown, None);
        }
    };
    let Some(lay) = fixed_layout(t, ctrl.opcode()) else {
        unknown_rest(1, &mut f);
        return Err("unknown opcode");
    };
    let mut i = 1;
    if lay.av {
        let n = av_ds(wqe, i.min(ds - 1));
        if i + n > ds {
            unknown_rest(i, &mut f);
            return Err("ds too small for the address vector");
        }
        for k in 0..n {
            f(i + k, DsKind::Av(k as u8), None);
        }
        i += n;
    }
    let atomic_ds = if is_masked(ctrl.opcode()) {
        match masked_width(ctrl.opmod()) {
            Some(w) => masked_ds(ctrl.opcode(), w),
            None => {
                unknown_rest(1, &mut f);
                return Err("masked atomic of a size the model does not carry out (opmod)");
            }
        }
    } else {
        1
    };
    for (present, kind, n, what) in [
        (lay.raddr, DsKind::Raddr, 1, "ds too small for the raddr segment"),
        (lay.atomic, DsKind::Atomic, atomic_ds, "ds too small for the atomic segment"),
    ] {
        if present {
            if i + n > ds {
                return Err(what);
            }
            for k in 0..n {
                f(i + k, kind, None);
            }
            i += n;
        }
    }
    if !lay.data {
        // NOP: extra DS are ignored.
        unknown_rest(i, &mut f);
        return Ok(());
    }
    let mut inlines = 0;
    while i < ds {
        let seg = DataSeg::new_unchecked(&wqe[i * DS_SIZE..(i + 1) * DS_SIZE]);
        if seg.is_inline() {
            let inl = InlineSeg::new_unchecked(&wqe[i * DS_SIZE..]);
            let n = inl.ds_count();
            let len = inl.len();
            if !lay.inline_ok {
                unknown_rest(i, &mut f);
                return Err("inline segment not allowed for this opcode");
            }
            inlines += 1;
            if inlines > 1 {
                unknown_rest(i, &mut f);
                return Err("more than one inline segment");
            }
            if i + n > ds {
                unknown_rest(i, &mut f);
                return Err("inline data longer than ds");
            }
            let piece = Piece::Inline { off: i * DS_SIZE + 4, len: len as usize };
            f(i, DsKind::InlineHead(len), Some(piece));
            for k in 1..n {
                f(i + k, DsKind::InlineCont, None);
            }
            i += n;
        } else {
            let piece = Piece::Sge { len: seg.byte_count(), lkey: seg.lkey(), addr: seg.addr() };
            f(i, DsKind::Data, Some(piece));
            i += 1;
        }
    }
    Ok(())
}

/// Validates and decodes a send WQE whose `ds*16` bytes are in `wqe` (the engine
/// decodes the ctrl segment once and calls [`parse_with_ctrl`]).
#[cfg(test)]
pub(crate) fn parse(t: QpType, wqe: &[u8]) -> Result<SendWqe, &'static str> {
    let ctrl_seg = CtrlSeg::new_checked(wqe).map_err(|_| "WQE shorter than the ctrl segment")?;
    parse_with_ctrl(t, CtrlRepr::parse(&ctrl_seg), wqe)
}

/// [`parse`] when the ctrl segment at the start of `wqe` is already decoded as `ctrl`.
pub(crate) fn parse_with_ctrl(t: QpType, ctrl: CtrlRepr, wqe: &[u8]) -> Result<SendWqe, &'static str> {
    if wqe.len() < DS_SIZE {
        return Err("WQE shorter than the ctrl segment");
    }
    let ds = usize::from(ctrl.ds);
    let mut w = SendWqe {
        ctrl,
        raddr: 0,
        rkey: 0,
        swap_add: 0,
        compare: 0,
        swap_mask: 0,
        compare_mask: 0,
        width: 0,
        data_ds: ds,
        n_pieces: 0,
        len: 0,
    };
    let masked = is_masked(ctrl.opcode);
    if masked {
        w.width = masked_width(ctrl.opmod).unwrap_or(0);
    }
    let result_len = if masked { u32::from(w.width) } else { 8 };
    let mut raddr_ds = None;
    let mut atomic_ds = None;
    let mut first_piece = None;
    let mut atomic_bad_len = false;
    walk(t, wqe, ds, |i, kind, piece| {
        match kind {
            DsKind::Raddr => raddr_ds = Some(i),
            DsKind::Atomic => {
                atomic_ds.get_or_insert(i);
            }
            _ => {}
        }
        if let Some(p) = piece {
            first_piece.get_or_insert(i);
            w.n_pieces += 1;
            let l = match p {
                Piece::Inline { len, .. } => len as u64,
                Piece::Sge { len, .. } => u64::from(len),
            };
            if matches!(p, Piece::Sge { len, .. } if len != result_len) {
                atomic_bad_len = true;
            }
            w.len += l;
        }
    })?;
    if let Some(i) = raddr_ds {
        let r = RaddrSeg::new_unchecked(&wqe[i * DS_SIZE..(i + 1) * DS_SIZE]);
        w.raddr = r.raddr();
        w.rkey = r.rkey();
    }
    if let Some(i) = atomic_ds {
        let seg = |k: usize| &wqe[(i + k) * DS_SIZE..(i + k + 1) * DS_SIZE];
        let be32 =
            |b: &[u8], at: usize| u64::from(u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]));
        let be64 = |b: &[u8], at: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(x)
        };
        match (ctrl.opcode, w.width) {
            // Masked, spec §3.5 (UCX's uct_ib_mlx5_atomic_masked_* segments).
            (opcode::ATOMIC_MASKED_CS, 4) => {
                let s = seg(0);
                (w.swap_add, w.compare, w.swap_mask, w.compare_mask) =
                    (be32(s, 0), be32(s, 4), be32(s, 8), be32(s, 12));
            }
            (opcode::ATOMIC_MASKED_CS, _) => {
                let (a, b) = (seg(0), seg(1));
                (w.swap_add, w.compare, w.swap_mask, w.compare_mask) =
                    (be64(a, 0), be64(a, 8), be64(b, 0), be64(b, 8));
            }
            (opcode::ATOMIC_MASKED_FA, 4) => (w.swap_add, w.compare) = (be32(seg(0), 0), be32(seg(0), 4)),
            (opcode::ATOMIC_MASKED_FA, _) => (w.swap_add, w.compare) = (be64(seg(0), 0), be64(seg(0), 8)),
            _ => {
                let a = AtomicSeg::new_unchecked(seg(0));
                w.swap_add = a.swap_add();
                w.compare = a.compare();
            }
        }
        if w.n_pieces != 1 || atomic_bad_len {
            return Err(if masked {
                "masked atomic WQE needs exactly one data segment of its argument width"
            } else {
                "atomic WQE needs exactly one 8-byte data segment"
            });
        }
    }
    if let Some(i) = first_piece {
        w.data_ds = i;
    }
    if w.len > MAX_MSG {
        return Err("message longer than 2 GiB");
    }
    Ok(w)
}

/// Iterates the pieces of a WQE that [`parse`] accepted as `w`: its data part, from
/// `w.data_ds` to `ds`, whose layout `parse` checked (so nothing is checked again).
pub(crate) fn data_pieces(w: &SendWqe, wqe: &[u8], mut f: impl FnMut(Piece)) {
    let ds = usize::from(w.ctrl.ds);
    let mut i = w.data_ds;
    while i < ds {
        let seg = DataSeg::new_unchecked(&wqe[i * DS_SIZE..(i + 1) * DS_SIZE]);
        if seg.is_inline() {
            let inl = InlineSeg::new_unchecked(&wqe[i * DS_SIZE..]);
            f(Piece::Inline { off: i * DS_SIZE + 4, len: inl.len() as usize });
            i += inl.ds_count();
        } else {
            f(Piece::Sge { len: seg.byte_count(), lkey: seg.lkey(), addr: seg.addr() });
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctrl(op: u8, ds: u8) -> [u8; 16] {
        let mut b = [0u8; 16];
        CtrlRepr { opcode: op, ds, qpn: 0x123, ..Default::default() }
            .emit(&mut CtrlSeg::new_unchecked(&mut b[..]));
        b
    }

    /// A masked atomic WQE from spec §3.5's layout: ctrl with `opmod`, raddr, the
    /// operand DS, one data segment of `result` bytes.
    fn masked(op: u8, opmod: u8, operands: &[[u8; 16]], result: u32) -> Vec<u8> {
        let ds = (3 + operands.len()) as u8;
        let mut b = [0u8; 16];
        CtrlRepr { opcode: op, opmod, ds, qpn: 0x123, ..Default::default() }
            .emit(&mut CtrlSeg::new_unchecked(&mut b[..]));
        let mut w = b.to_vec();
        let mut raddr = [0u8; 16];
        raddr[..8].copy_from_slice(&0x1000u64.to_be_bytes());
        raddr[8..12].copy_from_slice(&0x77u32.to_be_bytes());
        w.extend(raddr);
        for o in operands {
            w.extend(o);
        }
        let mut data = [0u8; 16];
        data[..4].copy_from_slice(&result.to_be_bytes());
        data[4..8].copy_from_slice(&0x55u32.to_be_bytes());
        data[8..].copy_from_slice(&0x2000u64.to_be_bytes());
        w.extend(data);
        w
    }

    fn hex16(s: &str) -> [u8; 16] {
        let v: Vec<u8> = s.split_whitespace().map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
        v.try_into().unwrap()
    }

    #[test]
    fn masked_atomics_decode_by_opmod() {
        // 8-byte compare-and-swap: values, then masks (two DS).
        let w = masked(
            opcode::ATOMIC_MASKED_CS,
            0x09,
            &[
                hex16("00 00 00 00 00 00 00 01  00 00 00 00 00 00 00 02"),
                hex16("00 00 00 00 00 00 00 03  00 00 00 00 00 00 00 04"),
            ],
            8,
        );
        let p = parse(QpType::Rc, &w).unwrap();
        assert_eq!((p.width, p.swap_add, p.compare, p.swap_mask, p.compare_mask), (8, 1, 2, 3, 4));
        assert_eq!((p.raddr, p.rkey, p.len, p.data_ds), (0x1000, 0x77, 8, 4));
        // 4-byte compare-and-swap: one DS of four BE32.
        let w = masked(
            opcode::ATOMIC_MASKED_CS,
            0x08,
            &[hex16("00 00 00 05 00 00 00 06 00 00 00 07 ff ff ff ff")],
            4,
        );
        let p = parse(QpType::Rc, &w).unwrap();
        assert_eq!((p.width, p.swap_add, p.compare, p.swap_mask, p.compare_mask), (4, 5, 6, 7, 0xffff_ffff));
        // Fetch-and-add: addend and boundary.
        let w = masked(
            opcode::ATOMIC_MASKED_FA,
            0x08,
            &[hex16("00 00 00 09 80 80 80 80 00 00 00 00 00 00 00 00")],
            4,
        );
        let p = parse(QpType::Rc, &w).unwrap();
        assert_eq!((p.width, p.swap_add, p.compare), (4, 9, 0x8080_8080));
        let w = masked(
            opcode::ATOMIC_MASKED_FA,
            0x09,
            &[hex16("00 00 00 00 00 00 00 0a 80 00 00 00 00 00 00 00")],
            8,
        );
        assert_eq!(parse(QpType::Rc, &w).unwrap().compare, 1 << 63);
    }

    #[test]
    fn malformed_masked_atomics_are_refused() {
        let op = hex16("00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00");
        // A result buffer of the other width.
        let w = masked(opcode::ATOMIC_MASKED_FA, 0x08, &[op], 8);
        assert!(parse(QpType::Rc, &w).unwrap_err().contains("argument width"));
        // 16-byte arguments (opmod 0x0a) and the indirect form (0x0f) are not modelled.
        for opmod in [0x00, 0x0a, 0x0f] {
            let w = masked(opcode::ATOMIC_MASKED_FA, opmod, &[op], 4);
            assert!(parse(QpType::Rc, &w).unwrap_err().contains("opmod"), "opmod {opmod:#x}");
        }
        // An 8-byte compare-and-swap whose masks DS is missing: the data segment is
        // taken as the masks and no data segment is left.
        let w = masked(opcode::ATOMIC_MASKED_CS, 0x09, &[op], 8);
        assert!(parse(QpType::Rc, &w).is_err());
        // Not on UD.
        assert!(parse(QpType::Ud, &masked(opcode::ATOMIC_MASKED_FA, 0x08, &[op], 4)).is_err());
    }

    #[test]
    fn ds_zero_is_malformed() {
        let w = ctrl(opcode::SEND, 0);
        assert_eq!(parse(QpType::Rc, &w).unwrap_err(), "ds is 0");
    }

    #[test]
    fn write_without_raddr_is_malformed() {
        let w = ctrl(opcode::RDMA_WRITE, 1);
        assert!(parse(QpType::Rc, &w).is_err());
    }

    #[test]
    fn unknown_opcode_is_malformed() {
        let w = ctrl(0x33, 1);
        assert_eq!(parse(QpType::Rc, &w).unwrap_err(), "unknown opcode");
    }

    #[test]
    fn two_inline_segments_are_malformed() {
        let mut w = [0u8; 48];
        w[..16].copy_from_slice(&ctrl(opcode::SEND, 3));
        w[16..20].copy_from_slice(&0x8000_0004u32.to_be_bytes());
        w[32..36].copy_from_slice(&0x8000_0004u32.to_be_bytes());
        assert_eq!(parse(QpType::Rc, &w).unwrap_err(), "more than one inline segment");
    }

    #[test]
    fn inline_past_ds_is_malformed() {
        let mut w = [0u8; 32];
        w[..16].copy_from_slice(&ctrl(opcode::SEND, 2));
        w[16..20].copy_from_slice(&0x8000_0020u32.to_be_bytes());
        assert_eq!(parse(QpType::Rc, &w).unwrap_err(), "inline data longer than ds");
    }

    /// The pieces `walk` reports for a WQE (the reference `data_pieces` must match).
    fn walked(t: QpType, wqe: &[u8]) -> Vec<Piece> {
        let ds = usize::from(CtrlSeg::new_unchecked(wqe).ds());
        let mut v = Vec::new();
        walk(t, wqe, ds, |_, _, p| v.extend(p)).unwrap();
        v
    }

    fn iterated(t: QpType, wqe: &[u8]) -> Vec<Piece> {
        let w = parse(t, wqe).unwrap();
        let mut v = Vec::new();
        data_pieces(&w, wqe, |p| v.push(p));
        v
    }

    #[test]
    fn data_pieces_of_a_write_with_sges_and_of_a_send_with_inline_data() {
        // WRITE: ctrl, raddr, two SGEs.
        let mut w = [0u8; 64];
        w[..16].copy_from_slice(&ctrl(opcode::RDMA_WRITE, 4));
        w[32..36].copy_from_slice(&100u32.to_be_bytes());
        w[36..40].copy_from_slice(&7u32.to_be_bytes());
        w[40..48].copy_from_slice(&0x1000u64.to_be_bytes());
        w[48..52].copy_from_slice(&8u32.to_be_bytes());
        w[52..56].copy_from_slice(&9u32.to_be_bytes());
        w[56..64].copy_from_slice(&0x2000u64.to_be_bytes());
        let expect =
            [Piece::Sge { len: 100, lkey: 7, addr: 0x1000 }, Piece::Sge { len: 8, lkey: 9, addr: 0x2000 }];
        assert_eq!(iterated(QpType::Rc, &w), expect);
        assert_eq!(walked(QpType::Rc, &w), expect);
        // SEND: ctrl, 20 inline bytes over two DS.
        let mut s = [0u8; 48];
        s[..16].copy_from_slice(&ctrl(opcode::SEND, 3));
        s[16..20].copy_from_slice(&0x8000_0014u32.to_be_bytes());
        assert_eq!(iterated(QpType::Rc, &s), [Piece::Inline { off: 20, len: 20 }]);
    }

    proptest::proptest! {
        /// For every WQE `parse` accepts, iterating its data part gives exactly the
        /// pieces the checked layout walk reports.
        #[test]
        fn data_pieces_match_the_layout_walk(
            t in proptest::sample::select(vec![QpType::Rc, QpType::Ud, QpType::Dci]),
            op in proptest::sample::select(vec![
                opcode::NOP, opcode::SEND, opcode::SEND_IMM, opcode::SEND_INVAL, opcode::RDMA_WRITE,
                opcode::RDMA_WRITE_IMM, opcode::RDMA_READ, opcode::ATOMIC_CS, opcode::ATOMIC_FA,
            ]),
            ds in 1u8..=16,
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 240),
            inline_at in proptest::option::of((1usize..15, 0u32..200)),
        ) {
            let mut w = vec![0u8; usize::from(ds) * DS_SIZE];
            w[..16].copy_from_slice(&ctrl(op, ds));
            let n = w.len() - 16;
            w[16..].copy_from_slice(&body[..n]);
            // Clear the inline bit everywhere, then maybe set one inline segment.
            for i in 1..usize::from(ds) {
                w[i * DS_SIZE] &= 0x7f;
            }
            if let Some((at, len)) = inline_at {
                if at < usize::from(ds) {
                    w[at * DS_SIZE..at * DS_SIZE + 4].copy_from_slice(&(0x8000_0000 | len).to_be_bytes());
                }
            }
            if parse(t, &w).is_ok() {
                proptest::prop_assert_eq!(iterated(t, &w), walked(t, &w));
            }
        }
    }

    #[test]
    fn nop_ignores_extra_ds() {
        let mut w = [0u8; 32];
        w[..16].copy_from_slice(&ctrl(opcode::NOP, 2));
        let p = parse(QpType::Rc, &w).unwrap();
        assert_eq!(p.n_pieces, 0);
    }
}
