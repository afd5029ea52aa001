//! The responder: what an RC or DC request does at its target (spec §4, §6): receive
//! consumption (RQ or SRQ), memory access through the checked DMA layer, atomics, the
//! receive CQE, and the NAK a failed check causes. [`Outcome`] is what the requester learns.

use crate::hosts::FabricState;

use crate::completer::*;
use crate::dma::{self, MrTable, Region, Sgl, Src};
use crate::host::*;
use crate::qp::{Qp, MAX_RQ_STRIDE};
use crate::wire::{cqe_opcode, opcode, syndrome, Cqe64, CqeRepr, RecvDataSeg, DS_SIZE};
use crate::wqe::SendWqe;
use crate::{access, AsyncEvent, AtomicEndianness, QpType};

#[derive(Debug)]
pub(crate) enum Outcome {
    Done {
        byte_cnt: u32,
    },
    /// Done, and the data the requester reads (READ response, atomic result) goes into its
    /// CQE instead of its memory (requester scatter-to-CQE, spec §5.7).
    DoneInline {
        byte_cnt: u32,
        data: [u8; 64],
    },
    Rnr,
    Fail {
        synd: u8,
        /// Responder QP to move to ERR once the requester's error CQE is written.
        responder: Option<(usize, u32)>,
    },
    /// Nothing was done: the hosts were taken again in order ([`FabricState::need`]);
    /// execute the WQE afresh.
    Restart,
}

pub(crate) fn fail(synd: u8) -> Outcome {
    Outcome::Fail { synd, responder: None }
}

pub(crate) fn load_u64(b: [u8; 8], e: AtomicEndianness) -> u64 {
    match e {
        AtomicEndianness::Host => u64::from_ne_bytes(b),
        AtomicEndianness::BigEndian => u64::from_be_bytes(b),
    }
}

fn store_u64(v: u64, e: AtomicEndianness) -> [u8; 8] {
    match e {
        AtomicEndianness::Host => v.to_ne_bytes(),
        AtomicEndianness::BigEndian => v.to_be_bytes(),
    }
}

/// Where a responder's receive WQEs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvQ {
    /// The QP's own RQ.
    Rq(u32),
    /// An SRQ of the responder's host.
    Srq(u32),
}

fn recv_q(qp: &Qp) -> RecvQ {
    match qp.srqn {
        Some(s) => RecvQ::Srq(s),
        None => RecvQ::Rq(qp.qpn),
    }
}

/// Copies the receive WQE that `q` would hand out next into `out`; returns its CQE
/// `wqe_counter` (RQ counter or SRQ index) and the byte range of its scatter entries.
pub(crate) fn peek_recv(
    host: &Host,
    q: RecvQ,
    out: &mut [u8; MAX_RQ_STRIDE as usize],
) -> Option<(u16, usize, usize)> {
    match q {
        RecvQ::Rq(qpn) => {
            let qp = host.qps.get(&qpn)?;
            if qp.rq_wqe_cnt == 0 || qp.rq_ci == qp.rq_producer() {
                return None;
            }
            let n = qp.read_rq(qp.rq_ci, out);
            Some((qp.rq_ci, 0, n))
        }
        RecvQ::Srq(srqn) => {
            let (idx, n) = host.srqs.get(&srqn)?.peek(&mut out[..])?;
            // Scatter entries follow the 16-byte next segment (spec §4.3).
            Some((idx, DS_SIZE, n))
        }
    }
}

/// Consumes the receive WQE `peek_recv` returned.
pub(crate) fn consume_recv(host: &mut Host, q: RecvQ) {
    match q {
        RecvQ::Rq(qpn) => {
            if let Some(qp) = host.qps.get_mut(&qpn) {
                qp.rq_ci = qp.rq_ci.wrapping_add(1);
            }
        }
        RecvQ::Srq(srqn) => {
            if let Some(srq) = host.srqs.get_mut(&srqn) {
                srq.consume();
                if srq.limit_crossed() {
                    host.push_event(AsyncEvent::SrqLimitReached { srqn });
                }
            }
        }
    }
}

/// Checks the scatter entries of a receive WQE (until `lkey == 0x100` or the end): every
/// non-empty entry needs LOCAL_WRITE in PD `pdn` and must lie inside its MR. Zero-length
/// entries are 0 bytes and not checked.
pub(crate) fn recv_sgl(mrs: &MrTable, entries: &[u8], pdn: u32) -> Option<Sgl> {
    let mut sgl = Sgl::new();
    for e in entries.chunks_exact(DS_SIZE) {
        let seg = RecvDataSeg::new_unchecked(e);
        if seg.is_terminator() {
            break;
        }
        let l = u64::from(seg.byte_count() & 0x7fff_ffff);
        if l == 0 {
            continue;
        }
        match mrs.check(seg.lkey(), seg.addr(), l, access::LOCAL_WRITE, pdn) {
            Ok(reg) if sgl.push(reg) => {}
            _ => return None,
        }
    }
    Some(sgl)
}

/// The responder of an RC or DC operation: an RC QP or a DCT.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub h: usize,
    /// QP handle (for state changes).
    pub qpn: u32,
    /// What CQEs carry in `sop_drop_qpn` / `s_wqe_opcode_qpn`: the QPN, or the DCT number.
    pub report_qpn: u32,
    pub pdn: u32,
    pub access: u32,
    pub cqn: u32,
    pub uidx: u32,
    pub recv: RecvQ,
    /// RC: every NAK this responder causes moves it to ERR. DCT: never (one initiator must
    /// not be able to kill a target shared by many).
    pub err_on_nak: bool,
    /// Responder scatter-to-CQE enabled on the QP.
    pub scatter: bool,
}

impl Target {
    pub(crate) fn of(h: usize, q: &Qp, report_qpn: u32) -> Target {
        Target {
            h,
            qpn: q.qpn,
            report_qpn,
            pdn: q.pdn,
            access: q.attrs.access_flags,
            cqn: q.recv_cqn,
            uidx: q.user_index,
            recv: recv_q(q),
            err_on_nak: q.qp_type != QpType::Dct,
            scatter: q.scatter_to_cqe,
        }
    }
}

/// Most bytes scatter-to-CQE puts into a CQE of CQ `cqn`: 32 with 64-byte CQEs, 64 with
/// 128-byte CQEs (spec §5.7).
pub(crate) fn scatter_limit(st: &FabricState, h: usize, cqn: u32) -> u64 {
    st.hosts[h].cqs.get(&cqn).map_or(0, |c| u64::from(c.cqe_size / 2))
}

/// The responder side of an RC or DC operation. `req_scatter`: how many bytes of a READ
/// response or atomic result may go into the requester's CQE (0: none).
#[allow(clippy::too_many_arguments)]
pub(crate) fn respond(
    st: &mut FabricState,
    tgt: Target,
    w: &SendWqe,
    srcs: &[Src<'_>],
    sink: &Sgl,
    src_qpn: u32,
    src_lid: u16,
    req_scatter: u64,
) -> Outcome {
    let op = w.ctrl.opcode;
    let endian = st.cfg.atomic_endianness;
    let rh = tgt.h;
    let ts = st.hosts[rh].tick_clock();
    let nak = |synd| Outcome::Fail { synd, responder: tgt.err_on_nak.then_some((rh, tgt.qpn)) };
    let len = w.len;
    let consumes =
        matches!(op, opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL | opcode::RDMA_WRITE_IMM);
    // The receive WQE's copy, zeroed only when a receive is consumed (not per WRITE).
    let mut rbuf_store: Option<[u8; MAX_RQ_STRIDE as usize]> = None;
    let recv = if consumes {
        let b = rbuf_store.insert([0u8; MAX_RQ_STRIDE as usize]);
        peek_recv(&st.hosts[rh], tgt.recv, b)
    } else {
        None
    };
    let rbuf: &[u8] = rbuf_store.as_ref().map_or(&[], |b| &b[..]);
    let rmrs = &st.hosts[rh].mrs;
    // The CQE for a consumed receive WQE: source QPN only in flags_rqpn (g/SL/L3 bits 0
    // for RC and DC [unverified, spec §11.2]).
    let resp = |cop: u8, counter: u16| RecvCqe {
        cop,
        se: w.ctrl.fm_ce_se & 2 != 0,
        imm: w.ctrl.imm,
        counter,
        slid: src_lid,
        flags_rqpn: src_qpn & 0xff_ffff,
        byte_cnt: len as u32,
        ts,
    };

    match op {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if tgt.access & access::REMOTE_WRITE == 0 {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let dst = if len == 0 {
                Region::EMPTY
            } else {
                match rmrs.check(w.rkey, w.raddr, len, access::REMOTE_WRITE, tgt.pdn) {
                    Ok(d) => d,
                    Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
                }
            };
            if op == opcode::RDMA_WRITE_IMM && recv.is_none() {
                return Outcome::Rnr;
            }
            dma::stream(srcs, &[dst]);
            if let (opcode::RDMA_WRITE_IMM, Some((counter, _, _))) = (op, recv) {
                complete_recv(st, &tgt, resp(cqe_opcode::RESP_WR_IMM, counter));
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {
            let Some((counter, from, to)) = recv else {
                return Outcome::Rnr;
            };
            let sgl = recv_sgl(rmrs, &rbuf[from..to], tgt.pdn);
            let resp_err = match &sgl {
                None => Some((syndrome::LOCAL_PROT_ERR, syndrome::REMOTE_OP_ERR)),
                Some(s) if len > s.total() => {
                    Some((syndrome::LOCAL_LENGTH_ERR, syndrome::REMOTE_INVAL_REQ_ERR))
                }
                Some(_) => None,
            };
            if let Some((resp_synd, req_synd)) = resp_err {
                let cqe = err_cqe(cqe_opcode::RESP_ERR, resp_synd, tgt.uidx, 0, tgt.report_qpn, counter);
                consume_recv(&mut st.hosts[rh], tgt.recv);
                let fatal = tgt.err_on_nak.then_some(tgt.qpn);
                push_cqe(&mut st.hosts[rh], tgt.cqn, &cqe, fatal);
                return nak(req_synd);
            }
            let cop = match op {
                opcode::SEND => cqe_opcode::RESP_SEND,
                opcode::SEND_IMM => cqe_opcode::RESP_SEND_IMM,
                _ => cqe_opcode::RESP_SEND_INV,
            };
            // Responder scatter-to-CQE (spec §5.7): RC with either CQE size, a DCT only
            // with 128-byte CQEs; non-empty messages only [model choice]. The receive WQE
            // is still checked (lkey, length) and consumed; its memory is not written.
            let mut limit = if tgt.scatter { scatter_limit(st, rh, tgt.cqn) } else { 0 };
            if !tgt.err_on_nak && limit != 64 {
                limit = 0;
            }
            if len > 0 && len <= limit {
                let mut d = [0u8; 64];
                dma::gather(srcs, &mut d[..len as usize]);
                complete_recv_data(st, &tgt, resp(cop, counter), &d[..len as usize]);
            } else {
                if let Some(s) = &sgl {
                    dma::stream(srcs, s.regions());
                }
                complete_recv(st, &tgt, resp(cop, counter));
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::RDMA_READ => {
            if tgt.access & access::REMOTE_READ == 0 {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            if len > 0 {
                match rmrs.check(w.rkey, w.raddr, len, access::REMOTE_READ, tgt.pdn) {
                    Ok(s) if len <= req_scatter => {
                        let mut data = [0u8; 64];
                        dma::read(&s, 0, &mut data[..len as usize]);
                        return Outcome::DoneInline { byte_cnt: len as u32, data };
                    }
                    Ok(s) => {
                        dma::stream(&[Src::Mem(s)], sink.regions());
                    }
                    Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
                }
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            if tgt.access & access::REMOTE_ATOMIC == 0 || !w.raddr.is_multiple_of(8) {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let target = match rmrs.check(w.rkey, w.raddr, 8, access::REMOTE_ATOMIC, tgt.pdn) {
                Ok(t) => t,
                Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
            };
            let Some(result) = sink.regions().first().copied() else {
                return fail(syndrome::LOCAL_QP_OP_ERR);
            };
            let mut cur = [0u8; 8];
            dma::read(&target, 0, &mut cur);
            let old = load_u64(cur, endian);
            let new = if op == opcode::ATOMIC_CS {
                if old == w.compare {
                    w.swap_add
                } else {
                    old
                }
            } else {
                old.wrapping_add(w.swap_add)
            };
            dma::write(&target, 0, &store_u64(new, endian));
            if req_scatter >= 8 {
                // The result in the CQE, in the byte order it would have had in memory
                // [model choice, spec §6.5 open question].
                let mut data = [0u8; 64];
                data[..8].copy_from_slice(&store_u64(old, endian));
                return Outcome::DoneInline { byte_cnt: 8, data };
            }
            dma::write(&result, 0, &store_u64(old, endian));
            Outcome::Done { byte_cnt: 8 }
        }
        _ => fail(syndrome::LOCAL_QP_OP_ERR),
    }
}

/// A responder success CQE to write for a consumed receive WQE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvCqe {
    pub cop: u8,
    /// The sender's SE bit.
    pub se: bool,
    /// The sender's ctrl `imm` bytes (reported unless the opcode is RESP_SEND).
    pub imm: [u8; 4],
    pub counter: u16,
    pub slid: u16,
    pub flags_rqpn: u32,
    pub byte_cnt: u32,
    pub ts: u64,
}

/// The responder CQE bytes: `sop_drop_qpn` = QPN or DCT number, `srqn_uidx` = user index,
/// `wqe_counter` = RQ counter or SRQ index.
pub(crate) fn recv_cqe(tgt: &Target, c: &RecvCqe) -> [u8; 64] {
    let imm = if c.cop == cqe_opcode::RESP_SEND { [0; 4] } else { c.imm };
    let mut b = [0u8; 64];
    CqeRepr {
        opcode: c.cop,
        se: c.se,
        owner: 0,
        slid: c.slid,
        flags_rqpn: c.flags_rqpn,
        srqn_uidx: tgt.uidx,
        imm_inval_pkey: imm,
        byte_cnt: c.byte_cnt,
        timestamp: c.ts,
        sop_drop_qpn: tgt.report_qpn,
        wqe_counter: c.counter,
    }
    .emit(&mut Cqe64::new_unchecked(&mut b[..]));
    b
}

/// Consumes the responder's next receive WQE and writes its success CQE.
pub(crate) fn complete_recv(st: &mut FabricState, tgt: &Target, c: RecvCqe) {
    consume_recv(&mut st.hosts[tgt.h], tgt.recv);
    let b = recv_cqe(tgt, &c);
    push_cqe(&mut st.hosts[tgt.h], tgt.cqn, &b, None);
}

/// [`complete_recv`] with the message in the CQE (scatter-to-CQE).
fn complete_recv_data(st: &mut FabricState, tgt: &Target, c: RecvCqe, data: &[u8]) {
    consume_recv(&mut st.hosts[tgt.h], tgt.recv);
    let b = recv_cqe(tgt, &c);
    push_cqe_data(&mut st.hosts[tgt.h], tgt.cqn, &b, Some(data), None);
}
