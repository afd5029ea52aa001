//! The lean path: the common RC RDMA WRITE, RDMA READ and SEND, with every check the
//! general path makes, and none of its generality. On the direct wire a WRITE or READ
//! goes to the responder's own lean code ([`crate::responder::respond_rdma`]); on the packet wire (one
//! WQE at a time: several ready together go as a train, [`crate::train`]) the message
//! travels as the general path's would.
//!
//! A WQE takes this path when its shape is one of the few most WQEs have (below), decided
//! from its bytes before anything is done; any other WQE (another opcode, several data
//! segments, a malformed one, a READ whose data may go into the CQE) takes the general
//! path ([`crate::wqe::parse_with_ctrl`], `requester::execute`), which also answers
//! every malformed WQE. What this path does after the decoding is what the general path
//! does for the same WQE, in the same order, through the same functions: the local key
//! check ([`crate::dma::MrTable::check`]), the routing ([`route::resolve_peer`]), the
//! responder's acceptance ([`accept_rc`]: state, connection, PSN) and the responder
//! itself ([`DirectWire`], [`PacketWire`], [`crate::responder::respond`]: access, keys, bounds, receive
//! consumption, RNR, NAKs). The property test `mlx5-sim/tests/lean_path.rs` runs the same
//! traffic with this path on and off and finds the same memory, CQEs and counters.
//!
//! Shapes (DS = 16 bytes, spec §3.8):
//! - RDMA WRITE: ctrl, raddr, then one data segment (`ds` = 3) or one inline segment
//!   that ends exactly at `ds`;
//! - RDMA READ: ctrl, raddr, one data segment (`ds` = 3), on a QP without requester
//!   scatter-to-CQE;
//! - SEND: ctrl, then one data segment (`ds` = 2) or one inline segment ending at `ds`.

use crate::dma::{Sgl, Src};
use crate::hosts::FabricState;
use crate::psn::packets;
use crate::responder::{accept_rc, fail, Outcome, Request};
use crate::route::{resolve_peer, unanswered, Sender};
use crate::wire::{get_u32, get_u64, opcode, syndrome, CtrlRepr, DS_SIZE};
use crate::wires::{DirectWire, PacketWire, Wire};
use crate::{access, QpType};

/// The one data segment of a lean WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Data {
    /// Inline bytes at `off..off + len` of the WQE.
    Inline { off: usize, len: usize },
    /// A data pointer segment.
    Sge { len: u32, lkey: u32, addr: u64 },
}

impl Data {
    fn len(&self) -> u64 {
        match *self {
            Data::Inline { len, .. } => len as u64,
            Data::Sge { len, .. } => u64::from(len),
        }
    }
}

/// A WQE of a lean shape, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lean {
    pub op: u8,
    pub raddr: u64,
    pub rkey: u32,
    pub data: Data,
}

/// The data segment at DS `i` of `wqe`, when it is the WQE's last: a data pointer segment
/// at DS `ds - 1`, or an inline segment (bit 31 of its first word, spec §3.3) whose
/// `ceil((4 + len) / 16)` DS end exactly at `ds`. `None` for anything else.
#[inline]
fn last_data(wqe: &[u8], i: usize, ds: usize, inline_ok: bool) -> Option<Data> {
    let at = i * DS_SIZE;
    let w0 = get_u32(wqe, at..at + 4);
    if w0 & 0x8000_0000 != 0 {
        let len = (w0 & 0x7fff_ffff) as usize;
        (inline_ok && i + (4 + len).div_ceil(DS_SIZE) == ds).then_some(Data::Inline { off: at + 4, len })
    } else {
        // One data segment holds at most 2^31 - 1 bytes: never past MAX_MSG.
        (i + 1 == ds).then(|| Data::Sge {
            len: w0,
            lkey: get_u32(wqe, at + 4..at + 8),
            addr: get_u64(wqe, at + 8..at + 16),
        })
    }
}

/// Whether WQE `wqe` (its `ctrl.ds` DS, decoded ctrl `ctrl`) of an RC QP has a lean
/// shape; `req_scatter`: the QP has requester scatter-to-CQE. `None`: the general path.
#[inline]
pub(crate) fn shape(ctrl: &CtrlRepr, wqe: &[u8], req_scatter: bool) -> Option<Lean> {
    let ds = usize::from(ctrl.ds);
    if wqe.len() < ds * DS_SIZE {
        return None;
    }
    let (op, raddr, rkey) = match ctrl.opcode {
        opcode::SEND if ds >= 2 => (opcode::SEND, 0, 0),
        op @ (opcode::RDMA_WRITE | opcode::RDMA_READ) if ds >= 3 => {
            if op == opcode::RDMA_READ && req_scatter {
                return None;
            }
            (op, get_u64(wqe, DS_SIZE..DS_SIZE + 8), get_u32(wqe, DS_SIZE + 8..DS_SIZE + 12))
        }
        _ => return None,
    };
    let first = if op == opcode::SEND { 1 } else { 2 };
    let data = last_data(wqe, first, ds, op != opcode::RDMA_READ)?;
    Some(Lean { op, raddr, rkey, data })
}

/// Carries out lean WQE `m` (bytes `wqe`, ctrl `ctrl`) of RC QP `qpn` on host `h`: what
/// `requester::execute` does for the same WQE.
#[inline]
pub(crate) fn execute(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    me: &Sender,
    wqe: &[u8],
    ctrl: &CtrlRepr,
    m: &Lean,
) -> Outcome {
    debug_assert!(me.qtype == QpType::Rc);
    st.hosts[h].stats.lean_wqes += 1;
    let len = m.data.len();
    // 1. Local side: the source (SEND / WRITE) or the sink (READ), its lkey checked.
    let mut src = [Src::Bytes(&[])];
    let mut sink = Sgl::new();
    match m.data {
        Data::Inline { off, len } => src[0] = Src::Bytes(&wqe[off..off + len]),
        Data::Sge { len: 0, .. } => {} // zero-length SGE: 0 bytes, not checked
        Data::Sge { len, lkey, addr } => {
            let read = m.op == opcode::RDMA_READ;
            let need = if read { access::LOCAL_WRITE } else { 0 };
            match st.hosts[h].mrs.check(lkey, addr, u64::from(len), need, me.pdn) {
                Ok(r) if read => {
                    sink.push(r);
                }
                Ok(r) => src[0] = Src::Mem(r),
                Err(crate::dma::DmaError::Spans { .. }) => {
                    // An indirect mkey's range across KLM entries: the general path's.
                    st.hosts[h].stats.lean_wqes -= 1;
                    return crate::requester::general(st, h, qpn, me, wqe, *ctrl);
                }
                Err(e) => {
                    let op = if read { "writing the READ's data" } else { "reading the gather list" };
                    crate::why::key(&st.hosts[h].mrs, e, "lkey", op);
                    return fail(syndrome::LOCAL_PROT_ERR);
                }
            }
        }
    }
    let srcs: &[Src<'_>] = if m.op == opcode::RDMA_READ || len == 0 { &[] } else { &src };
    let src_lid = st.hosts[h].cfg.lid;

    // 2. The responder: by path, connected back to this QP, expecting this PSN.
    let Some(p) = me.path else {
        return unanswered(st, h, qpn);
    };
    let Some(found) = resolve_peer(st, h, qpn, &p, me.peer) else {
        return unanswered(st, h, qpn);
    };
    if st.need(found).is_err() {
        return Outcome::Restart;
    }
    let rh = found.h;

    // 3. The message: a WRITE or READ to the responder's lean code; a SEND through the
    // responder's acceptance and its receive side.
    let rq = Request {
        op: m.op,
        len,
        se: ctrl.fm_ce_se & 2 != 0,
        imm: ctrl.imm,
        raddr: m.raddr,
        rkey: m.rkey,
        compare: 0,
        swap_add: 0,
        swap_mask: 0,
        compare_mask: 0,
        width: 0,
        srcs,
        sink: &sink,
        src_qpn: qpn,
        src_lid,
        req_scatter: 0,
        pkts: packets(m.op, len as u32, me.mtu),
    };
    let answer = if st.lossy() {
        accept_rc(&mut st.hosts[rh], rh, p.dest_qpn, qpn, me.sq_psn)
            .map(|tgt| PacketWire::request(st, h, qpn, tgt, &rq))
    } else if m.op == opcode::SEND {
        accept_rc(&mut st.hosts[rh], rh, p.dest_qpn, qpn, me.sq_psn)
            .map(|tgt| DirectWire::request(st, h, qpn, tgt, &rq))
    } else {
        DirectWire::rdma(st, h, qpn, (rh, p.dest_qpn), me.sq_psn, &rq)
    };
    match answer {
        Some(o) => o,
        // No local QP answers: one in another process may (the UDP wire).
        None => crate::udp_wire::requester::request(
            st,
            h,
            qpn,
            me,
            crate::udp_wire::requester::Peer::Rc { dqpn: p.dest_qpn },
            rh,
            &rq,
        )
        .unwrap_or_else(|| unanswered(st, h, qpn)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wqe::{parse_with_ctrl, Piece};

    fn ctrl(op: u8, ds: u8) -> CtrlRepr {
        CtrlRepr { opcode: op, ds, ..Default::default() }
    }

    fn wqe(words: &[(usize, u32)]) -> [u8; 128] {
        let mut b = [0u8; 128];
        for &(at, v) in words {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        b
    }

    #[test]
    fn the_lean_shapes() {
        // WRITE with one SGE: raddr 0x1000, rkey 7, 64 bytes at 0x2000 with lkey 9.
        let w = wqe(&[(20, 0x1000), (24, 7), (32, 64), (36, 9), (44, 0x2000)]);
        let got = shape(&ctrl(opcode::RDMA_WRITE, 3), &w, false).unwrap();
        assert_eq!(
            got,
            Lean {
                op: opcode::RDMA_WRITE,
                raddr: 0x1000,
                rkey: 7,
                data: Data::Sge { len: 64, lkey: 9, addr: 0x2000 },
            }
        );
        // WRITE of 64 inline bytes: 4 + 64 bytes take 5 DS, ds = 7.
        let w = wqe(&[(32, 0x8000_0040)]);
        assert_eq!(
            shape(&ctrl(opcode::RDMA_WRITE, 7), &w, false).unwrap().data,
            Data::Inline { off: 36, len: 64 }
        );
        // SEND with one SGE, and with 12 inline bytes (one DS).
        let w = wqe(&[(16, 5), (20, 3), (28, 0x40)]);
        assert_eq!(
            shape(&ctrl(opcode::SEND, 2), &w, false).unwrap().data,
            Data::Sge { len: 5, lkey: 3, addr: 0x40 }
        );
        let w = wqe(&[(16, 0x8000_000c)]);
        assert_eq!(shape(&ctrl(opcode::SEND, 2), &w, false).unwrap().data, Data::Inline { off: 20, len: 12 });
        // READ with one SGE, unless the QP scatters READ data to its CQEs.
        let w = wqe(&[(32, 64)]);
        assert!(shape(&ctrl(opcode::RDMA_READ, 3), &w, false).is_some());
        assert!(shape(&ctrl(opcode::RDMA_READ, 3), &w, true).is_none());
    }

    #[test]
    fn other_shapes_take_the_general_path() {
        let sge = wqe(&[(32, 64), (48, 64)]);
        // Two data segments.
        assert!(shape(&ctrl(opcode::RDMA_WRITE, 4), &sge, false).is_none());
        assert!(shape(&ctrl(opcode::SEND, 3), &sge, false).is_none());
        // No data segment, no raddr segment.
        assert!(shape(&ctrl(opcode::RDMA_WRITE, 2), &sge, false).is_none());
        assert!(shape(&ctrl(opcode::SEND, 1), &sge, false).is_none());
        // Inline data shorter or longer than ds, inline READ.
        let inl = wqe(&[(32, 0x8000_0040)]);
        assert!(shape(&ctrl(opcode::RDMA_WRITE, 6), &inl, false).is_none());
        assert!(shape(&ctrl(opcode::RDMA_WRITE, 8), &inl, false).is_none());
        assert!(shape(&ctrl(opcode::RDMA_READ, 7), &inl, false).is_none());
        // Other opcodes.
        for op in
            [opcode::NOP, opcode::SEND_IMM, opcode::RDMA_WRITE_IMM, opcode::ATOMIC_FA, opcode::SEND_INVAL]
        {
            assert!(shape(&ctrl(op, 3), &sge, false).is_none(), "opcode {op:#x}");
        }
        // A WQE shorter than its ds.
        assert!(shape(&ctrl(opcode::RDMA_WRITE, 3), &sge[..32], false).is_none());
    }

    proptest::proptest! {
        /// Every WQE with a lean shape is one the general decoder accepts, with the same
        /// raddr, rkey, length and one piece: the lean path never takes a WQE the general
        /// path would refuse, nor reads it differently.
        #[test]
        fn a_lean_shape_is_what_the_general_decoder_reads(
            op in proptest::sample::select(vec![opcode::RDMA_WRITE, opcode::RDMA_READ, opcode::SEND]),
            ds in 1u8..=8,
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 112),
            inline_len in proptest::option::of(0u32..120),
        ) {
            let mut w = [0u8; 128];
            w[16..].copy_from_slice(&body);
            let first = if op == opcode::SEND { 16 } else { 32 };
            match inline_len {
                Some(l) => w[first..first + 4].copy_from_slice(&(0x8000_0000 | l).to_be_bytes()),
                None => w[first] &= 0x7f,
            }
            let c = ctrl(op, ds);
            c.emit(&mut crate::wire::CtrlSeg::new_unchecked(&mut w[..DS_SIZE]));
            let Some(m) = shape(&c, &w, false) else { return Ok(()) };
            let g = parse_with_ctrl(QpType::Rc, c, &w[..usize::from(ds) * DS_SIZE]);
            proptest::prop_assert!(g.is_ok(), "{:?}", g);
            let g = g.unwrap();
            proptest::prop_assert_eq!(g.n_pieces, 1);
            proptest::prop_assert_eq!(g.len, m.data.len());
            if op != opcode::SEND {
                proptest::prop_assert_eq!((g.raddr, g.rkey), (m.raddr, m.rkey));
            }
            let mut pieces = Vec::new();
            crate::wqe::data_pieces(&g, &w, |p| pieces.push(p));
            let want = match m.data {
                Data::Inline { off, len } => Piece::Inline { off, len },
                Data::Sge { len, lkey, addr } => Piece::Sge { len, lkey, addr },
            };
            proptest::prop_assert_eq!(pieces, vec![want]);
        }
    }
}
