//! The responder: what an RC or DC request does at its target (spec §4, §6): receive
//! consumption (RQ or SRQ), memory access through the checked DMA layer, atomics, the
//! receive CQE, and the NAK a failed check causes. [`Outcome`] is what the requester learns.

use crate::completer::*;
use crate::dma::{self, Ask, DmaError, MrTable, Region, Sgl, Src, MAX_SGL};
use crate::host::*;
use crate::qp::{Qp, MAX_RQ_STRIDE};
use crate::wire::{cqe_opcode, opcode, syndrome, Cqe64, CqeRepr, RecvDataSeg, DS_SIZE};
use crate::wqe::SendWqe;
use crate::{access, why, AsyncEvent, AtomicEndianness, QpState, QpType};

#[derive(Debug)]
pub(crate) enum Outcome {
    Done {
        byte_cnt: u32,
    },
    /// Done, and the data the requester reads (READ response, atomic result) goes into its
    /// CQE instead of its memory (requester scatter-to-CQE, spec §5.7). Boxed: an
    /// `Outcome` is moved and copied on every path, and 64 inline bytes made each copy
    /// of it 72 bytes (on the packet wire, a train's bookkeeping holds sixteen).
    DoneInline {
        byte_cnt: u32,
        data: Box<[u8; 64]>,
    },
    Rnr,
    Fail {
        synd: u8,
        /// The RC responder QP (host, QPN) that NAKed and moved to ERR ([`respond`]);
        /// the packet wire drops what follows to it. (Only whether there is one is used
        /// now; a `bool` here cost 35 instructions per message in the generated code.)
        responder: Option<(usize, u32)>,
    },
    /// Nothing was done: the hosts were taken again in order ([`FabricState::need`]);
    /// execute the WQE afresh.
    Restart,
    /// The message is on the UDP wire to another process ([`crate::udp_wire`]): the send
    /// queue waits at it until its answer comes.
    Pending,
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

pub(crate) fn store_u64(v: u64, e: AtomicEndianness) -> [u8; 8] {
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
            Err(DmaError::Spans { .. }) => {
                let a = Ask {
                    key: seg.lkey(),
                    addr: seg.addr(),
                    len: l,
                    need: access::LOCAL_WRITE,
                    pdn,
                    remote: None,
                };
                mrs.check_sgl(a, &mut sgl).ok()?;
            }
            _ => return None,
        }
    }
    Some(sgl)
}

/// An RDMA WRITE or READ whose rkey check found `e`: when that is an indirect mkey's
/// range across several KLM entries, the regions it resolves to
/// ([`crate::dma::MrTable::check_sgl`]); else `e`.
#[cold]
#[inline(never)]
fn spanned(mrs: &MrTable, e: DmaError, a: Ask) -> Result<Box<Sgl>, DmaError> {
    if !matches!(e, DmaError::Spans { .. }) {
        return Err(e);
    }
    let mut sgl = Box::new(Sgl::new());
    mrs.check_sgl(a, &mut sgl)?;
    Ok(sgl)
}

impl Ask {
    /// Request `rq`'s rkey access of `len` bytes needing `need` at responder `tgt`.
    fn remote(rq: &Request<'_, '_>, len: u64, need: u32, tgt: &Target) -> Ask {
        Ask { key: rq.rkey, addr: rq.raddr, len, need, pdn: tgt.pdn, remote: Some(tgt.qpn) }
    }
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

/// Whether RC QP `dest_qpn` of `host` (host `h`) takes a request from QP `src_qpn` with
/// PSN `psn`: it must be a connected RC QP in RTR or RTS pointing back at that QP, and
/// expect that PSN. `None`: no answer, and the requester's retries run out.
///
/// PSNs (IB spec 9.7): the responder executes only the PSN it expects. Ahead of it, it
/// answers a PSN sequence error NAK naming a PSN the requester never sent; behind it, the
/// request is a duplicate it does not execute again. Either way nothing the requester can
/// retransmit fixes it [model: its retries run out at once, as for an unreachable peer;
/// the network model runs them on a clock]. Such a request is counted (`psn_errors`).
pub(crate) fn accept_rc(host: &mut Host, h: usize, dest_qpn: u32, src_qpn: u32, psn: u32) -> Option<Target> {
    let r = host.qps.get(&dest_qpn)?;
    if !matches!(r.state, QpState::Rtr | QpState::Rts)
        || r.qp_type != QpType::Rc
        || r.attrs.path.map(|rp| rp.dest_qpn) != Some(src_qpn)
    {
        return None;
    }
    if r.attrs.rq_psn != psn {
        host.stats.psn_errors += 1;
        return None;
    }
    Some(Target::of(h, r, r.qpn))
}

/// Whether DCT number `num` of `host` (host `h`) takes a request with DC key `key`: a DCT
/// in RTR with that key. A wrong key is dropped by the DCT and counted
/// (`dc_key_violations`); to the DCI it is silence [unverified]. `None`: no answer.
pub(crate) fn accept_dc(host: &mut Host, h: usize, num: u32, key: u64) -> Option<Target> {
    let r = host.dcts.get(&num).and_then(|d| host.qps.get(d))?;
    if r.state != QpState::Rtr || r.qp_type != QpType::Dct {
        return None;
    }
    if r.dc_key != key {
        host.stats.dc_key_violations += 1;
        return None;
    }
    Some(Target::of(h, r, num))
}

/// The responder of an RDMA WRITE or READ the lean path carries ([`crate::lean`]: no
/// immediate, so no receive consumed; no requester scatter-to-CQE) from RC QP
/// `rq.src_qpn` with PSN `psn`, arriving at RC QP `dest_qpn` of `host` (host `h`).
/// [`accept_rc`]'s checks, then [`respond`]'s for the operation, in the same order and
/// with the same results; `None` where [`accept_rc`] gives no answer.
pub(crate) fn respond_rdma(
    host: &mut Host,
    h: usize,
    dest_qpn: u32,
    psn: u32,
    rq: &Request<'_, '_>,
) -> Option<Outcome> {
    let r = host.qps.get(&dest_qpn)?;
    if !matches!(r.state, QpState::Rtr | QpState::Rts)
        || r.qp_type != QpType::Rc
        || r.attrs.path.map(|rp| rp.dest_qpn) != Some(rq.src_qpn)
    {
        return None;
    }
    if r.attrs.rq_psn != psn {
        host.stats.psn_errors += 1;
        return None;
    }
    let (pdn, granted) = (r.pdn, r.attrs.access_flags);
    host.tick_clock();
    let write = rq.op == opcode::RDMA_WRITE;
    let need = if write { access::REMOTE_WRITE } else { access::REMOTE_READ };
    let nak = |host: &mut Host, synd| {
        enter_err(host, dest_qpn);
        Some(Outcome::Fail { synd, responder: Some((h, dest_qpn)) })
    };
    if granted & need == 0 {
        let (right, what) =
            if write { ("REMOTE_WRITE", "an RDMA WRITE") } else { ("REMOTE_READ", "an RDMA READ") };
        why::qp_lacks(dest_qpn, right, what);
        return nak(host, syndrome::REMOTE_INVAL_REQ_ERR);
    }
    if rq.len > 0 {
        match host.mrs.check_remote(rq.rkey, rq.raddr, rq.len, need, pdn, dest_qpn) {
            Ok(d) if write => match rq.srcs {
                [one] => {
                    dma::copy_one(one, &d);
                }
                srcs => {
                    dma::stream(srcs, &[d]);
                }
            },
            Ok(s) => match rq.sink.regions() {
                [one] => {
                    dma::copy_one(&Src::Mem(s), one);
                }
                sink => {
                    dma::stream(&[Src::Mem(s)], sink);
                }
            },
            Err(e) => {
                let op = if write { "RDMA WRITE" } else { "RDMA READ" };
                let a = Ask { key: rq.rkey, addr: rq.raddr, len: rq.len, need, pdn, remote: Some(dest_qpn) };
                match spanned(&host.mrs, e, a) {
                    Ok(many) if write => {
                        dma::stream(rq.srcs, many.regions());
                    }
                    Ok(many) => {
                        dma::stream(&many.sources(), rq.sink.regions());
                    }
                    Err(e) => {
                        why::key(&host.mrs, e, "rkey", op);
                        return nak(host, syndrome::REMOTE_ACCESS_ERR);
                    }
                }
            }
        }
    }
    if let Some(q) = host.qps.get_mut(&dest_qpn) {
        q.attrs.rq_psn = q.attrs.rq_psn.wrapping_add(rq.pkts) & 0xff_ffff;
    }
    Some(Outcome::Done { byte_cnt: rq.len as u32 })
}

/// A UD datagram as it arrives: the header bytes its receive buffer's 40-byte GRH slot
/// takes (none on IB without a GRH, an IPv4 header on RoCE v2 over IPv4, else a GRH or
/// IPv6 header), the fields the receive CQE reports from its headers, and its payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Datagram<'a, 'w> {
    /// SEND with immediate: the immediate.
    pub imm: Option<[u8; 4]>,
    /// Solicited event.
    pub se: bool,
    pub len: u64,
    pub qkey: u32,
    /// Destination QP.
    pub dqpn: u32,
    pub hdr: &'a [u8],
    /// What the receive CQE reports: source LID (0 on RoCE) and `flags_rqpn`.
    pub slid: u16,
    pub flags_rqpn: u32,
    pub srcs: &'a [Src<'w>],
}

/// Size of the GRH slot at the start of every UD receive buffer (spec §6.6).
pub(crate) const GRH_SLOT: u64 = 40;

/// A UD datagram arriving at `host` (host `h`): a UD QP in RTR, RTS or SQE (an SQE QP
/// still receives, spec §7) with the datagram's Q_Key takes it into its next receive,
/// header bytes at the end of the GRH slot, payload after it; else it is dropped and
/// counted (`ud_dropped`; no RNR for UD). A receive too short or naming memory it may
/// not write completes in error and the QP stays operational [unverified, spec §11.9].
pub(crate) fn receive_datagram(host: &mut Host, h: usize, dg: &Datagram<'_, '_>) {
    let tgt = match host.qps.get(&dg.dqpn) {
        Some(r)
            if r.qp_type == QpType::Ud
                && matches!(r.state, QpState::Rtr | QpState::Rts | QpState::Sqe)
                && r.attrs.qkey == dg.qkey =>
        {
            Target::of(h, r, dg.dqpn)
        }
        _ => {
            host.stats.ud_dropped += 1;
            return;
        }
    };
    let mut rbuf = [0u8; MAX_RQ_STRIDE as usize];
    let Some((counter, from, to)) = peek_recv(host, tgt.recv, &mut rbuf) else {
        host.stats.ud_dropped += 1;
        return;
    };
    let sgl = recv_sgl(&host.mrs, &rbuf[from..to], tgt.pdn);
    let resp_err = match &sgl {
        None => Some(syndrome::LOCAL_PROT_ERR),
        Some(s) if dg.len + GRH_SLOT > s.total() => Some(syndrome::LOCAL_LENGTH_ERR),
        Some(_) => None,
    };
    let (Some(sgl), None) = (sgl, resp_err) else {
        let synd = resp_err.unwrap_or(syndrome::LOCAL_PROT_ERR);
        let why = match &sgl {
            None => format!(
                "the receive WQE {counter} of UD QP 0x{:x} has an lkey or range that is not valid",
                dg.dqpn
            ),
            Some(s) => format!(
                "a {}-byte datagram arrived at UD QP 0x{:x}, whose receive WQE {counter} holds {} bytes \
                 (the datagram and the 40-byte GRH slot before it)",
                dg.len,
                dg.dqpn,
                s.total()
            ),
        };
        host.why.keep(dg.dqpn, counter, why);
        let cqe = err_cqe(cqe_opcode::RESP_ERR, synd, tgt.uidx, 0, dg.dqpn, counter);
        consume_recv(host, tgt.recv);
        push_cqe(host, tgt.cqn, &cqe, None);
        return;
    };
    // Skip the untouched part of the slot: all 40 bytes without a GRH, 20 before IPv4.
    let dst = sgl.skip(GRH_SLOT - dg.hdr.len() as u64);
    let mut all = [Src::Bytes(&[]); MAX_SGL + 1];
    all[0] = Src::Bytes(dg.hdr);
    all[1..=dg.srcs.len()].copy_from_slice(dg.srcs);
    dma::stream(&all[..=dg.srcs.len()], dst.regions());
    let c = RecvCqe {
        cop: if dg.imm.is_some() { cqe_opcode::RESP_SEND_IMM } else { cqe_opcode::RESP_SEND },
        se: dg.se,
        imm: dg.imm.unwrap_or_default(),
        counter,
        slid: dg.slid,
        flags_rqpn: dg.flags_rqpn,
        byte_cnt: (dg.len + GRH_SLOT) as u32,
        ts: host.tick_clock(),
    };
    complete_recv(host, &tgt, c);
}

/// Most bytes scatter-to-CQE puts into a CQE of CQ `cqn`: 32 with 64-byte CQEs, 64 with
/// 128-byte CQEs (spec §5.7).
pub(crate) fn scatter_limit(host: &Host, cqn: u32) -> u64 {
    host.cqs.get(&cqn).map_or(0, |c| u64::from(c.cqe_size / 2))
}

/// What arrives at a responder: one RC or DC request message as the requester's NIC sends
/// it (its operation, RETH or AtomicETH fields, immediate, payload), and where a READ
/// response or an atomic's original value goes back to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a, 'w> {
    /// The operation, as the mlx5 WQE opcode that asked for it (spec §2.3).
    pub op: u8,
    /// Payload bytes (SEND / WRITE), or bytes asked for (READ; 8 for an atomic).
    pub len: u64,
    /// Solicited event.
    pub se: bool,
    pub imm: [u8; 4],
    pub raddr: u64,
    pub rkey: u32,
    /// Compare-and-swap: the compare value; masked fetch-and-add: the field boundary.
    pub compare: u64,
    /// Compare-and-swap: the swap value; fetch-and-add: the addend.
    pub swap_add: u64,
    /// Masked compare-and-swap: which bits the swap writes and the comparison reads.
    pub swap_mask: u64,
    pub compare_mask: u64,
    /// Masked atomics: the argument width (4 or 8 bytes); 0 for the others.
    pub width: u8,
    /// SEND / WRITE payload: the requester's memory or the WQE's inline bytes.
    pub srcs: &'a [Src<'w>],
    /// READ / atomic: where the response lands (the requester's scatter list).
    pub sink: &'a Sgl,
    pub src_qpn: u32,
    pub src_lid: u16,
    /// Bytes of a READ response or atomic result that go into the requester's CQE
    /// instead of its memory (requester scatter-to-CQE; 0: none).
    pub req_scatter: u64,
    /// PSNs the message takes on an RC connection ([`crate::psn::packets`]); 0 to a DCT,
    /// which keeps no PSN.
    pub pkts: u32,
}

impl<'a, 'w> Request<'a, 'w> {
    /// The message WQE `w` sends, taking `pkts` PSNs.
    pub(crate) fn of(
        w: &SendWqe,
        srcs: &'a [Src<'w>],
        sink: &'a Sgl,
        src_qpn: u32,
        src_lid: u16,
        req_scatter: u64,
        pkts: u32,
    ) -> Request<'a, 'w> {
        Request {
            op: w.ctrl.opcode,
            len: w.len,
            se: w.ctrl.fm_ce_se & 2 != 0,
            imm: w.ctrl.imm,
            raddr: w.raddr,
            rkey: w.rkey,
            compare: w.compare,
            swap_add: w.swap_add,
            swap_mask: w.swap_mask,
            compare_mask: w.compare_mask,
            width: w.width,
            srcs,
            sink,
            src_qpn,
            src_lid,
            req_scatter,
            pkts,
        }
    }
}

/// The responder side of an RC or DC request `rq` arriving at `tgt` on its own `host`:
/// everything it does touches that host's state and the message, nothing else (the
/// requester's memory only as the message's sources and response sink). A request
/// carried out moves the RC responder's expected PSN past the message; one it NAKs moves
/// an RC responder to ERR.
pub(crate) fn respond(
    host: &mut Host,
    endian: AtomicEndianness,
    tgt: Target,
    rq: &Request<'_, '_>,
) -> Outcome {
    let out = carry_out(host, endian, tgt, rq);
    match out {
        Outcome::Done { .. } | Outcome::DoneInline { .. } if rq.pkts != 0 => {
            if let Some(q) = host.qps.get_mut(&tgt.qpn) {
                q.attrs.rq_psn = q.attrs.rq_psn.wrapping_add(rq.pkts) & 0xff_ffff;
            }
        }
        // An RC responder that NAKs a request moves to ERR as it sends the NAK, and
        // flushes its receive queue (before the requester learns of it, as on a NIC).
        Outcome::Fail { responder: Some(_), .. } => enter_err(host, tgt.qpn),
        _ => {}
    }
    out
}

/// [`respond`] but for the PSN.
fn carry_out(host: &mut Host, endian: AtomicEndianness, tgt: Target, rq: &Request<'_, '_>) -> Outcome {
    let op = rq.op;
    let rh = tgt.h;
    let (srcs, sink, src_qpn, src_lid, req_scatter) =
        (rq.srcs, rq.sink, rq.src_qpn, rq.src_lid, rq.req_scatter);
    let ts = host.tick_clock();
    let nak = |synd| Outcome::Fail { synd, responder: tgt.err_on_nak.then_some((rh, tgt.qpn)) };
    let len = rq.len;
    let consumes =
        matches!(op, opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL | opcode::RDMA_WRITE_IMM);
    // The receive WQE's copy, zeroed only when a receive is consumed (not per WRITE).
    let mut rbuf_store: Option<[u8; MAX_RQ_STRIDE as usize]> = None;
    let recv = if consumes {
        let b = rbuf_store.insert([0u8; MAX_RQ_STRIDE as usize]);
        peek_recv(host, tgt.recv, b)
    } else {
        None
    };
    let rbuf: &[u8] = rbuf_store.as_ref().map_or(&[], |b| &b[..]);
    let rmrs = &host.mrs;
    // The CQE for a consumed receive WQE: source QPN only in flags_rqpn (g/SL/L3 bits 0
    // for RC and DC [unverified, spec §11.2]).
    let resp = |cop: u8, counter: u16| RecvCqe {
        cop,
        se: rq.se,
        imm: rq.imm,
        counter,
        slid: src_lid,
        flags_rqpn: src_qpn & 0xff_ffff,
        byte_cnt: len as u32,
        ts,
    };

    match op {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if tgt.access & access::REMOTE_WRITE == 0 {
                why::qp_lacks(tgt.qpn, "REMOTE_WRITE", "an RDMA WRITE");
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let mut many = None;
            let dst = if len == 0 {
                Region::EMPTY
            } else {
                let need = access::REMOTE_WRITE;
                match rmrs.check_remote(rq.rkey, rq.raddr, len, need, tgt.pdn, tgt.qpn) {
                    Ok(d) => d,
                    Err(e) => match spanned(rmrs, e, Ask::remote(rq, len, need, &tgt)) {
                        Ok(m) => {
                            many = Some(m);
                            Region::EMPTY
                        }
                        Err(e) => {
                            if let (opcode::RDMA_WRITE_IMM, Some((counter, _, _))) = (op, recv) {
                                write_imm_refused(host, &tgt, counter, e);
                            } else {
                                why::key(rmrs, e, "rkey", "RDMA WRITE");
                            }
                            return nak(syndrome::REMOTE_ACCESS_ERR);
                        }
                    },
                }
            };
            if op == opcode::RDMA_WRITE_IMM && recv.is_none() {
                return Outcome::Rnr;
            }
            match &many {
                None => dma::stream(srcs, &[dst]),
                Some(m) => dma::stream(srcs, m.regions()),
            };
            if let (opcode::RDMA_WRITE_IMM, Some((counter, _, _))) = (op, recv) {
                complete_recv(host, &tgt, resp(cqe_opcode::RESP_WR_IMM, counter));
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {
            let Some((counter, from, to)) = recv else {
                return Outcome::Rnr;
            };
            let sgl = recv_sgl(rmrs, &rbuf[from..to], tgt.pdn);
            let mut resp_err = match &sgl {
                None => Some((syndrome::LOCAL_PROT_ERR, syndrome::REMOTE_OP_ERR)),
                Some(s) if len > s.total() => {
                    Some((syndrome::LOCAL_LENGTH_ERR, syndrome::REMOTE_INVAL_REQ_ERR))
                }
                Some(_) => None,
            };
            if resp_err.is_none() && matches!(tgt.recv, RecvQ::Srq(_)) && host.mrs.has_odp() {
                // A page fault on the receive buffer aborts the SRQ WQE (the NIC hands
                // it back) and the SEND is retried after an RNR NAK.
                if odp_aborted(host, &tgt, counter, &rbuf[from..to]) {
                    return Outcome::Rnr;
                }
            }
            if resp_err.is_none() && op == opcode::SEND_INVAL {
                resp_err = invalidation_refused(host, &tgt, u32::from_be_bytes(rq.imm), counter);
            }
            if let Some((resp_synd, req_synd)) = resp_err {
                if resp_synd != syndrome::REMOTE_INVAL_REQ_ERR {
                    recv_refused(host, tgt.report_qpn, counter, len, sgl.as_ref().map(|s| s.total()));
                }
                let cqe = err_cqe(cqe_opcode::RESP_ERR, resp_synd, tgt.uidx, 0, tgt.report_qpn, counter);
                consume_recv(host, tgt.recv);
                let fatal = tgt.err_on_nak.then_some(tgt.qpn);
                push_cqe(host, tgt.cqn, &cqe, fatal);
                return nak(req_synd);
            }
            let cop = match op {
                opcode::SEND => cqe_opcode::RESP_SEND,
                opcode::SEND_IMM => cqe_opcode::RESP_SEND_IMM,
                _ => {
                    crate::umr::invalidate(&mut host.mrs, u32::from_be_bytes(rq.imm), tgt.qpn);
                    cqe_opcode::RESP_SEND_INV
                }
            };
            // Responder scatter-to-CQE (spec §5.7): RC with either CQE size, a DCT only
            // with 128-byte CQEs; non-empty messages only [model choice]. The receive WQE
            // is still checked (lkey, length) and consumed; its memory is not written.
            let mut limit = if tgt.scatter { scatter_limit(host, tgt.cqn) } else { 0 };
            if !tgt.err_on_nak && limit != 64 {
                limit = 0;
            }
            if len > 0 && len <= limit {
                let mut d = [0u8; 64];
                dma::gather(srcs, &mut d[..len as usize]);
                complete_recv_data(host, &tgt, resp(cop, counter), &d[..len as usize]);
            } else {
                if let Some(s) = &sgl {
                    dma::stream(srcs, s.regions());
                }
                complete_recv(host, &tgt, resp(cop, counter));
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::RDMA_READ => {
            if tgt.access & access::REMOTE_READ == 0 {
                why::qp_lacks(tgt.qpn, "REMOTE_READ", "an RDMA READ");
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            if len > 0 {
                let need = access::REMOTE_READ;
                match rmrs.check_remote(rq.rkey, rq.raddr, len, need, tgt.pdn, tgt.qpn) {
                    Ok(s) if len <= req_scatter => {
                        let mut data = Box::new([0u8; 64]);
                        dma::read(&s, 0, &mut data[..len as usize]);
                        return Outcome::DoneInline { byte_cnt: len as u32, data };
                    }
                    Ok(s) => {
                        dma::stream(&[Src::Mem(s)], sink.regions());
                    }
                    Err(e) => match spanned(rmrs, e, Ask::remote(rq, len, need, &tgt)) {
                        Ok(m) if len <= req_scatter => {
                            let mut data = Box::new([0u8; 64]);
                            dma::gather(&m.sources(), &mut data[..len as usize]);
                            return Outcome::DoneInline { byte_cnt: len as u32, data };
                        }
                        Ok(m) => {
                            dma::stream(&m.sources(), sink.regions());
                        }
                        Err(e) => {
                            why::key(rmrs, e, "rkey", "RDMA READ");
                            return nak(syndrome::REMOTE_ACCESS_ERR);
                        }
                    },
                }
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            if tgt.access & access::REMOTE_ATOMIC == 0 || !rq.raddr.is_multiple_of(8) {
                atomic_refused(tgt.qpn, tgt.access, rq.raddr, 8);
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let target =
                match rmrs.check_remote(rq.rkey, rq.raddr, 8, access::REMOTE_ATOMIC, tgt.pdn, tgt.qpn) {
                    Ok(t) => t,
                    Err(e) => {
                        why::key(rmrs, e, "rkey", "an atomic");
                        return nak(syndrome::REMOTE_ACCESS_ERR);
                    }
                };
            let Some(result) = sink.regions().first().copied() else {
                return fail(syndrome::LOCAL_QP_OP_ERR);
            };
            let mut cur = [0u8; 8];
            dma::read(&target, 0, &mut cur);
            let old = load_u64(cur, endian);
            let new = if op == opcode::ATOMIC_CS {
                if old == rq.compare {
                    rq.swap_add
                } else {
                    old
                }
            } else {
                old.wrapping_add(rq.swap_add)
            };
            dma::write(&target, 0, &store_u64(new, endian));
            if req_scatter >= 8 {
                // The result in the CQE, in the byte order it would have had in memory
                // [model choice, spec §6.5 open question].
                let mut data = Box::new([0u8; 64]);
                data[..8].copy_from_slice(&store_u64(old, endian));
                return Outcome::DoneInline { byte_cnt: 8, data };
            }
            dma::write(&result, 0, &store_u64(old, endian));
            Outcome::Done { byte_cnt: 8 }
        }
        opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA => {
            let width = u64::from(rq.width);
            if tgt.access & access::REMOTE_ATOMIC == 0 || width == 0 || !rq.raddr.is_multiple_of(width) {
                atomic_refused(tgt.qpn, tgt.access, rq.raddr, width);
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let need = access::REMOTE_ATOMIC;
            let target = match rmrs.check_remote(rq.rkey, rq.raddr, width, need, tgt.pdn, tgt.qpn) {
                Ok(t) => t,
                Err(e) => {
                    why::key(rmrs, e, "rkey", "a masked atomic");
                    return nak(syndrome::REMOTE_ACCESS_ERR);
                }
            };
            let Some(result) = sink.regions().first().copied() else {
                return fail(syndrome::LOCAL_QP_OP_ERR);
            };
            let w = width as usize;
            let mut cur = [0u8; 8];
            dma::read(&target, 0, &mut cur[..w]);
            let old = load_masked(cur, rq.width, endian);
            let new = if op == opcode::ATOMIC_MASKED_CS {
                masked_cs(old, rq.compare, rq.compare_mask, rq.swap_add, rq.swap_mask)
            } else {
                masked_fa(old, rq.swap_add, rq.compare, rq.width)
            };
            dma::write(&target, 0, &store_masked(new, rq.width, endian)[..w]);
            let back = store_masked(old, rq.width, endian);
            if req_scatter >= width {
                let mut data = Box::new([0u8; 64]);
                data[..w].copy_from_slice(&back[..w]);
                return Outcome::DoneInline { byte_cnt: rq.width.into(), data };
            }
            dma::write(&result, 0, &back[..w]);
            Outcome::Done { byte_cnt: rq.width.into() }
        }
        _ => fail(syndrome::LOCAL_QP_OP_ERR),
    }
}

/// An RDMA WRITE with immediate that arrived at `tgt`, receive WQE `counter` ready, was
/// refused by its rkey check `e`: the receive completes with LOCAL_ACCESS_ERR (IBA's
/// Local Access Error, "a protection error on a local data buffer during an RDMA Write
/// with Immediate" [unverified on mlx5]), before the NAK moves the QP to ERR; the reason
/// is kept for that CQE and noted for the requester's REMOTE_ACCESS_ERR.
#[cold]
#[inline(never)]
fn write_imm_refused(host: &mut Host, tgt: &Target, counter: u16, e: DmaError) {
    let s = host.mrs.explain(&e, "rkey", "RDMA WRITE with immediate");
    host.why.keep(tgt.report_qpn, counter, format!("{s}; so the receive it consumed completed in error"));
    why::note(|| s);
    let cqe = err_cqe(cqe_opcode::RESP_ERR, syndrome::LOCAL_ACCESS_ERR, tgt.uidx, 0, tgt.report_qpn, counter);
    consume_recv(host, tgt.recv);
    let fatal = tgt.err_on_nak.then_some(tgt.qpn);
    push_cqe(host, tgt.cqn, &cqe, fatal);
}

/// A SEND arrived at `tgt`, whose receive comes from an SRQ, its WQE `counter` with
/// scatter entries `entries`: when an entry lies on an on-demand-paging page the NIC has
/// not touched yet, the page faults in and the WQE is aborted: REMOTE_ABORTED_ERR with
/// vendor syndrome 0x93 (`MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`), the WQE consumed, the QP
/// left as it is. libmlx5 posts such a WQE again itself (`mlx5_complete_odp_fault`); the
/// requester is sent an RNR NAK, and its retry finds the page in [model of mlx5's ODP on
/// SRQs: the page fault is resolved before the retry]. True when aborted.
#[cold]
#[inline(never)]
fn odp_aborted(host: &mut Host, tgt: &Target, counter: u16, entries: &[u8]) -> bool {
    let mut fault = None;
    for e in entries.chunks_exact(DS_SIZE) {
        let seg = RecvDataSeg::new_unchecked(e);
        if seg.is_terminator() {
            break;
        }
        let l = u64::from(seg.byte_count() & 0x7fff_ffff);
        if l == 0 {
            continue;
        }
        if let Some(page) = host.mrs.odp_fault(seg.lkey(), seg.addr(), l) {
            fault.get_or_insert((seg.lkey(), page));
        }
    }
    let Some((lkey, page)) = fault else { return false };
    let srqn = match tgt.recv {
        RecvQ::Srq(n) => n,
        RecvQ::Rq(_) => 0,
    };
    host.why.keep(
        tgt.report_qpn,
        counter,
        format!(
            "an on-demand-paging page fault: receive WQE {counter} of SRQ 0x{srqn:x} names page 0x{page:x} of lkey \
             0x{lkey:x}, not yet in the NIC's page table; the page is brought in, the SEND retried after an RNR NAK, \
             and the WQE is handed back (post it again, as libmlx5 does)"
        ),
    );
    let cqe =
        err_cqe(cqe_opcode::RESP_ERR, syndrome::REMOTE_ABORTED_ERR, tgt.uidx, 0, tgt.report_qpn, counter);
    consume_recv(host, tgt.recv);
    push_cqe(host, tgt.cqn, &cqe, None);
    true
}

/// A SEND with invalidate naming `rkey` arrived at `tgt`, its receive WQE `counter`
/// ready: `None` when the rkey may be invalidated ([`crate::umr::remote_invalidate`]);
/// else the responder's and the requester's syndromes, REMOTE_INVAL_REQ_ERR for both
/// (the NAK is an invalid request) [unverified: Soft-RoCE's `rxe_resp.c` does the same,
/// mlx5 unknown], the reason kept for both CQEs.
#[cold]
#[inline(never)]
fn invalidation_refused(host: &mut Host, tgt: &Target, rkey: u32, counter: u16) -> Option<(u8, u8)> {
    let why = crate::umr::remote_invalidate(&host.mrs, rkey, tgt.pdn, tgt.qpn).err()?;
    host.why.keep(tgt.report_qpn, counter, why.clone());
    why::note(|| why);
    Some((syndrome::REMOTE_INVAL_REQ_ERR, syndrome::REMOTE_INVAL_REQ_ERR))
}

/// Why receive WQE `counter` of QP `qpn` could not take a `len`-byte SEND (its scatter
/// list holds `room` bytes; `None`: an lkey or range not valid), for the responder's own
/// error CQE and the requester's ([`why`]).
#[cold]
#[inline(never)]
fn recv_refused(host: &mut Host, qpn: u32, counter: u16, len: u64, room: Option<u64>) {
    let s = match room {
        None => format!("the receive WQE {counter} of QP 0x{qpn:x} has an lkey or range that is not valid"),
        Some(r) => {
            format!("a {len}-byte SEND arrived at QP 0x{qpn:x}, whose receive WQE {counter} holds {r} bytes")
        }
    };
    host.why.keep(qpn, counter, s.clone());
    why::note(|| s);
}

/// Why an atomic of `width` bytes at `raddr` is an invalid request at QP `qpn`
/// ([`why`]).
#[cold]
#[inline(never)]
fn atomic_refused(qpn: u32, qp_access: u32, raddr: u64, width: u64) {
    if qp_access & access::REMOTE_ATOMIC == 0 {
        why::qp_lacks(qpn, "REMOTE_ATOMIC", "an atomic");
    } else {
        why::note(|| format!("the atomic's address 0x{raddr:x} is not aligned to its {width} bytes"));
    }
}

/// A masked atomic's remote value as a number: 8-byte arguments in the device's
/// `atomic_req_8B_endianness_mode` (as standard atomics), 4-byte ones big-endian
/// [model choice, spec §3.5 and §6.5: the mode names 8-byte requests only, and UCX
/// reads 4-byte masked results as big-endian in either mode].
pub(crate) fn load_masked(b: [u8; 8], width: u8, e: AtomicEndianness) -> u64 {
    if width == 8 {
        load_u64(b, e)
    } else {
        u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// The bytes of `v` as [`load_masked`] reads them (the first `width` are meaningful).
pub(crate) fn store_masked(v: u64, width: u8, e: AtomicEndianness) -> [u8; 8] {
    if width == 8 {
        store_u64(v, e)
    } else {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&(v as u32).to_be_bytes());
        b
    }
}

/// Masked compare-and-swap (spec §3.5): where the bits `compare_mask` selects equal
/// `compare`'s, the bits `swap_mask` selects take `swap`'s; else nothing changes.
pub(crate) fn masked_cs(old: u64, compare: u64, compare_mask: u64, swap: u64, swap_mask: u64) -> u64 {
    if (old ^ compare) & compare_mask == 0 {
        (old & !swap_mask) | (swap & swap_mask)
    } else {
        old
    }
}

/// Masked fetch-and-add on `width` bytes (spec §3.5): `old + add` where a carry out of
/// a bit that `boundary` sets (a field's top bit) is dropped, as is the carry out of the
/// argument's top bit.
pub(crate) fn masked_fa(old: u64, add: u64, boundary: u64, width: u8) -> u64 {
    let bits = u32::from(width) * 8;
    let (mut sum, mut carry) = (0u64, 0u64);
    for i in 0..bits {
        let (a, b) = ((old >> i) & 1, (add >> i) & 1);
        sum |= (a ^ b ^ carry) << i;
        carry = ((a & b) | (a & carry) | (b & carry)) & !((boundary >> i) & 1);
    }
    sum
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
    .emit(&mut Cqe64::new_unchecked(&mut b));
    b
}

/// Consumes the responder's next receive WQE and writes its success CQE.
pub(crate) fn complete_recv(host: &mut Host, tgt: &Target, c: RecvCqe) {
    consume_recv(host, tgt.recv);
    let b = recv_cqe(tgt, &c);
    push_cqe(host, tgt.cqn, &b, None);
}

/// [`complete_recv`] with the message in the CQE (scatter-to-CQE).
fn complete_recv_data(host: &mut Host, tgt: &Target, c: RecvCqe, data: &[u8]) {
    consume_recv(host, tgt.recv);
    let b = recv_cqe(tgt, &c);
    push_cqe_data(host, tgt.cqn, &b, Some(data), None);
}
