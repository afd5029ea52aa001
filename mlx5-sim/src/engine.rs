//! The execution engine: doorbell handling, send-queue processing of RC WQEs (both sides,
//! under the fabric lock), receive-queue consumption, RNR, error and flush semantics, and
//! CQE generation (spec §5–§8).

use std::collections::{HashMap, HashSet};

use crate::cq::Cq;
use crate::dma::{self, MrTable, Region, Sgl, Src, MAX_SGL};
use crate::qp::{Qp, Shadow, MAX_RQ_STRIDE};
use crate::wire::{
    cqe_opcode, opcode, syndrome, Cqe64, CqeRepr, CtrlSeg, ErrCqe, ErrCqeRepr, RecvDataSeg, DS_SIZE,
    MAX_WQE_DS, WQEBB_SIZE,
};
use crate::wqe::{self, Piece, SendWqe};
use crate::{
    access, AsyncEvent, AtomicEndianness, ExecMode, FabricConfig, HostConfig, LinkLayer, NicStats, QpState,
    QpType,
};

/// BlueFlame register half size (spec §1.6).
pub(crate) const BF_SIZE: u32 = 256;
/// Cap on queued async events per NIC.
const MAX_EVENTS: usize = 4096;

/// Vendor syndromes written with each syndrome (spec §5.4 and §11.7: firmware-specific;
/// 0xf9, 0x81 and 0x8a are observed values, the others are this model's choice).
pub(crate) fn vendor_syndrome(s: u8) -> u8 {
    match s {
        syndrome::LOCAL_LENGTH_ERR => 0x68,
        syndrome::LOCAL_QP_OP_ERR => 0x51,
        syndrome::LOCAL_PROT_ERR => 0x56,
        syndrome::WR_FLUSH_ERR => 0xf9,
        syndrome::REMOTE_INVAL_REQ_ERR => 0x8a,
        syndrome::REMOTE_ACCESS_ERR => 0x88,
        syndrome::REMOTE_OP_ERR => 0x89,
        syndrome::TRANSPORT_RETRY_EXC_ERR => 0x81,
        syndrome::RNR_RETRY_EXC_ERR => 0x82,
        _ => 0x00,
    }
}

/// One UAR register (one per QP in this model).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Uar {
    pub expected_offset: u32,
}

/// State of one simulated host / NIC.
#[derive(Debug)]
pub(crate) struct Host {
    pub cfg: HostConfig,
    pub pds: HashSet<u32>,
    pub mrs: MrTable,
    pub cqs: HashMap<u32, Cq>,
    pub qps: HashMap<u32, Qp>,
    pub uars: HashMap<u32, Uar>,
    pub stats: NicStats,
    pub events: Vec<AsyncEvent>,
    pub next_pdn: u32,
    pub next_key: u32,
    pub next_cqn: u32,
    pub next_qpn: u32,
    pub next_uar: u32,
    scratch: Vec<u32>,
}

impl Host {
    pub(crate) fn new(idx: usize, cfg: HostConfig) -> Host {
        // Distinct number ranges per host make cross-host mix-ups fail loudly.
        let base = (idx as u32 % 0xff) + 1;
        Host {
            cfg,
            pds: HashSet::new(),
            mrs: MrTable::default(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            uars: HashMap::new(),
            stats: NicStats::default(),
            events: Vec::new(),
            next_pdn: base << 8,
            next_key: base << 16,
            next_cqn: base << 8,
            next_qpn: base << 12,
            next_uar: 0,
            scratch: Vec::new(),
        }
    }

    fn push_event(&mut self, e: AsyncEvent) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(e);
        }
    }
}

/// Everything behind the fabric lock.
#[derive(Debug)]
pub(crate) struct FabricState {
    pub cfg: FabricConfig,
    pub hosts: Vec<Host>,
    /// Virtual clock, used as CQE timestamp.
    pub clock: u64,
}

// ---------------------------------------------------------------------------------------
// CQE construction and delivery

fn req_cqe(qp: &Qp, op: u8, counter: u16, byte_cnt: u32, ts: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    CqeRepr {
        opcode: cqe_opcode::REQ,
        srqn_uidx: qp.user_index,
        byte_cnt,
        timestamp: ts,
        sop_drop_qpn: (u32::from(op) << 24) | qp.qpn,
        wqe_counter: counter,
        ..Default::default()
    }
    .emit(&mut Cqe64::new_unchecked(&mut b[..]));
    b
}

fn err_cqe(op: u8, synd: u8, user_index: u32, wqe_op: u8, qpn: u32, counter: u16) -> [u8; 64] {
    let mut b = [0u8; 64];
    ErrCqeRepr {
        opcode: op,
        owner: 0,
        srqn: user_index,
        vendor_err_synd: vendor_syndrome(synd),
        syndrome: synd,
        s_wqe_opcode_qpn: (u32::from(wqe_op) << 24) | qpn,
        wqe_counter: counter,
    }
    .emit(&mut ErrCqe::new_unchecked(&mut b[..]));
    b
}

/// Delivers a CQE to CQ `cqn` of host `h`, or counts an overrun.
fn push_cqe(st: &mut FabricState, h: usize, cqn: u32, cqe: &[u8; 64], fatal_qpn: Option<u32>) {
    let host = &mut st.hosts[h];
    let Some(cq) = host.cqs.get_mut(&cqn) else {
        return;
    };
    match cq.push(cqe) {
        Ok(()) => {
            cq.overrun = false;
            host.stats.cqes_written += 1;
        }
        Err(_) => {
            let first = !cq.overrun;
            cq.overrun = true;
            host.stats.cq_overruns += 1;
            if first {
                host.push_event(AsyncEvent::CqOverrun { cqn });
            }
            if let Some(qpn) = fatal_qpn {
                host.push_event(AsyncEvent::QpFatal { qpn });
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Error state and flushes

fn record_shadow(qp: &mut Qp, counter: u16, wqebbs: u16) {
    let mut ctrl8 = [0u8; 8];
    qp.read_sq(counter, 0, &mut ctrl8);
    let slot = usize::from(counter) & (qp.sq_wqe_cnt as usize - 1);
    qp.shadow[slot] = Shadow { valid: true, counter, ctrl8, wqebbs };
}

/// Completes every send WQE up to the producer with REQ_ERR WR_FLUSH_ERR.
fn flush_sq(st: &mut FabricState, h: usize, qpn: u32) {
    loop {
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return;
        };
        let p = qp.sq_producer();
        if qp.sq_ci == p {
            return;
        }
        let c = qp.sq_ci;
        let ctrl = qp.read_ctrl(c);
        let n = ctrl.wqebbs().min(p.wrapping_sub(c));
        record_shadow(qp, c, n);
        qp.sq_ci = c.wrapping_add(n);
        qp.rnr = None;
        let cqe = err_cqe(cqe_opcode::REQ_ERR, syndrome::WR_FLUSH_ERR, qp.user_index, ctrl.opcode, qpn, c);
        let cqn = qp.send_cqn;
        push_cqe(st, h, cqn, &cqe, None);
    }
}

/// Completes every posted receive WQE with RESP_ERR WR_FLUSH_ERR.
fn flush_rq(st: &mut FabricState, h: usize, qpn: u32) {
    loop {
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return;
        };
        let p = qp.rq_producer();
        if qp.rq_wqe_cnt == 0 || qp.rq_ci == p {
            return;
        }
        let c = qp.rq_ci;
        qp.rq_ci = c.wrapping_add(1);
        let cqe = err_cqe(cqe_opcode::RESP_ERR, syndrome::WR_FLUSH_ERR, qp.user_index, 0, qpn, c);
        let cqn = qp.recv_cqn;
        push_cqe(st, h, cqn, &cqe, None);
    }
}

/// Moves a QP to ERR and flushes both of its queues.
pub(crate) fn enter_err(st: &mut FabricState, h: usize, qpn: u32) {
    let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
        return;
    };
    qp.state = QpState::Err;
    qp.rnr = None;
    flush_sq(st, h, qpn);
    flush_rq(st, h, qpn);
}

// ---------------------------------------------------------------------------------------
// Execution of one RC WQE

enum Outcome {
    Done {
        byte_cnt: u32,
    },
    Rnr,
    Fail {
        synd: u8,
        /// Responder QP to move to ERR once the requester's error CQE is written.
        responder: Option<(usize, u32)>,
    },
}

fn fail(synd: u8) -> Outcome {
    Outcome::Fail { synd, responder: None }
}

/// Finds the host a path leads to (DLID on IB, DGID on RoCE).
fn resolve(st: &FabricState, h: usize, dlid: u16, dgid: Option<[u8; 16]>) -> Option<usize> {
    let ll = st.hosts[h].cfg.link_layer;
    st.hosts.iter().position(|o| {
        o.cfg.link_layer == ll
            && match ll {
                LinkLayer::InfiniBand => o.cfg.lid == dlid && dlid != 0,
                LinkLayer::Ethernet => Some(o.cfg.gid) == dgid,
            }
    })
}

fn load_u64(b: [u8; 8], e: AtomicEndianness) -> u64 {
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

/// Executes the validated WQE `w` (bytes in `wqe`) of QP `qpn` on host `h`, including the
/// responder side (the model's simplification: the requester's NIC runs both ends under the
/// fabric lock). Nothing is written to memory unless every check passed.
///
/// Choices where the spec is silent (see README.md): zero-length SGEs are 0 bytes and not
/// checked [unverified, §11.4]; a zero-length RDMA WRITE/READ does not check the rkey; an
/// unreachable or unconnected destination fails at once with TRANSPORT_RETRY_EXC_ERR
/// (retries assumed exhausted instantly); every NAK the responder causes moves the responder
/// QP to ERR [IB semantics, unverified on mlx5, §6.2].
fn execute(st: &mut FabricState, h: usize, qpn: u32, wqe: &[u8], w: &SendWqe) -> Outcome {
    let op = w.ctrl.opcode;
    if op == opcode::NOP {
        return Outcome::Done { byte_cnt: 0 };
    }
    let endian = st.cfg.atomic_endianness;
    let ts = st.clock;
    let Some(me) = st.hosts[h].qps.get(&qpn) else {
        return fail(syndrome::LOCAL_QP_OP_ERR);
    };
    let (pdn, path) = (me.pdn, me.attrs.path);

    // 1. Local side: gather sources (SEND/WRITE) or scatter sinks (READ/atomic).
    let gather = matches!(
        op,
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL | opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM
    );
    let mut srcs = [Src::Bytes(&[]); MAX_SGL];
    let mut n_src = 0;
    let mut sink = Sgl::new();
    let mut local_err = false;
    {
        let mrs = &st.hosts[h].mrs;
        wqe::pieces(QpType::Rc, wqe, |p| {
            if local_err {
                return;
            }
            match p {
                Piece::Inline { off, len } => {
                    if n_src < MAX_SGL {
                        srcs[n_src] = Src::Bytes(&wqe[off..off + len]);
                        n_src += 1;
                    }
                }
                Piece::Sge { len: 0, .. } => {} // zero-length SGE: 0 bytes, not checked
                Piece::Sge { len, lkey, addr } => {
                    let need = if gather { 0 } else { access::LOCAL_WRITE };
                    match mrs.check(lkey, addr, u64::from(len), need, pdn) {
                        Ok(r) if gather && n_src < MAX_SGL => {
                            srcs[n_src] = Src::Mem(r);
                            n_src += 1;
                        }
                        Ok(r) if !gather && sink.push(r) => {}
                        _ => local_err = true,
                    }
                }
            }
        });
    }
    if local_err {
        return fail(syndrome::LOCAL_PROT_ERR);
    }
    let srcs = &srcs[..n_src];

    // 2. Destination: host by path, QP by dest_qpn; it must be a connected RC QP in
    //    RTR/RTS pointing back at us, else packets are lost and retries run out.
    let Some(p) = path else {
        return fail(syndrome::TRANSPORT_RETRY_EXC_ERR);
    };
    let Some(rh) = resolve(st, h, p.dlid, p.dgid) else {
        return fail(syndrome::TRANSPORT_RETRY_EXC_ERR);
    };
    let rqpn = p.dest_qpn;
    let src_lid = st.hosts[h].cfg.lid;
    let Some(r) = st.hosts[rh].qps.get(&rqpn) else {
        return fail(syndrome::TRANSPORT_RETRY_EXC_ERR);
    };
    if !matches!(r.state, QpState::Rtr | QpState::Rts)
        || r.qp_type != QpType::Rc
        || r.attrs.path.map(|rp| rp.dest_qpn) != Some(qpn)
    {
        return fail(syndrome::TRANSPORT_RETRY_EXC_ERR);
    }
    let (r_pdn, r_access, r_cqn, r_uidx) = (r.pdn, r.attrs.access_flags, r.recv_cqn, r.user_index);
    let r_has_recv = r.rq_wqe_cnt != 0 && r.rq_ci != r.rq_producer();
    let r_counter = r.rq_ci;
    let nak = |synd| Outcome::Fail { synd, responder: Some((rh, rqpn)) };
    let len = w.len;
    let rmrs = &st.hosts[rh].mrs;

    match op {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if r_access & access::REMOTE_WRITE == 0 {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let dst = if len == 0 {
                Region::EMPTY
            } else {
                match rmrs.check(w.rkey, w.raddr, len, access::REMOTE_WRITE, r_pdn) {
                    Ok(d) => d,
                    Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
                }
            };
            if op == opcode::RDMA_WRITE_IMM && !r_has_recv {
                return Outcome::Rnr;
            }
            dma::stream(srcs, &[dst]);
            if op == opcode::RDMA_WRITE_IMM {
                complete_recv(st, rh, rqpn, cqe_opcode::RESP_WR_IMM, w, qpn, src_lid, ts);
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {
            if !r_has_recv {
                return Outcome::Rnr;
            }
            let mut rbuf = [0u8; MAX_RQ_STRIDE as usize];
            let Some(r) = st.hosts[rh].qps.get(&rqpn) else {
                return fail(syndrome::TRANSPORT_RETRY_EXC_ERR);
            };
            let stride = r.read_rq(r_counter, &mut rbuf);
            let mut sgl = Sgl::new();
            let mut bad = false;
            for e in rbuf[..stride].chunks_exact(DS_SIZE) {
                let seg = RecvDataSeg::new_unchecked(e);
                if seg.is_terminator() {
                    break;
                }
                let l = u64::from(seg.byte_count() & 0x7fff_ffff);
                if l == 0 {
                    continue;
                }
                match rmrs.check(seg.lkey(), seg.addr(), l, access::LOCAL_WRITE, r_pdn) {
                    Ok(reg) if sgl.push(reg) => {}
                    _ => {
                        bad = true;
                        break;
                    }
                }
            }
            let resp_err = if bad {
                Some((syndrome::LOCAL_PROT_ERR, syndrome::REMOTE_OP_ERR))
            } else if len > sgl.total() {
                Some((syndrome::LOCAL_LENGTH_ERR, syndrome::REMOTE_INVAL_REQ_ERR))
            } else {
                None
            };
            if let Some((resp_synd, req_synd)) = resp_err {
                let cqe = err_cqe(cqe_opcode::RESP_ERR, resp_synd, r_uidx, 0, rqpn, r_counter);
                if let Some(r) = st.hosts[rh].qps.get_mut(&rqpn) {
                    r.rq_ci = r.rq_ci.wrapping_add(1);
                }
                push_cqe(st, rh, r_cqn, &cqe, Some(rqpn));
                return nak(req_synd);
            }
            dma::stream(srcs, sgl.regions());
            let cop = match op {
                opcode::SEND => cqe_opcode::RESP_SEND,
                opcode::SEND_IMM => cqe_opcode::RESP_SEND_IMM,
                _ => cqe_opcode::RESP_SEND_INV,
            };
            complete_recv(st, rh, rqpn, cop, w, qpn, src_lid, ts);
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::RDMA_READ => {
            if r_access & access::REMOTE_READ == 0 {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            if len > 0 {
                match rmrs.check(w.rkey, w.raddr, len, access::REMOTE_READ, r_pdn) {
                    Ok(s) => {
                        dma::stream(&[Src::Mem(s)], sink.regions());
                    }
                    Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
                }
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            if r_access & access::REMOTE_ATOMIC == 0 || w.raddr % 8 != 0 {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let target = match rmrs.check(w.rkey, w.raddr, 8, access::REMOTE_ATOMIC, r_pdn) {
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
            dma::write(&result, 0, &store_u64(old, endian));
            Outcome::Done { byte_cnt: 8 }
        }
        _ => fail(syndrome::LOCAL_QP_OP_ERR),
    }
}

/// Consumes the responder's next receive WQE and writes its success CQE.
#[allow(clippy::too_many_arguments)]
fn complete_recv(
    st: &mut FabricState,
    rh: usize,
    rqpn: u32,
    cop: u8,
    w: &SendWqe,
    src_qpn: u32,
    src_lid: u16,
    ts: u64,
) {
    let Some(r) = st.hosts[rh].qps.get_mut(&rqpn) else {
        return;
    };
    let counter = r.rq_ci;
    r.rq_ci = counter.wrapping_add(1);
    let imm = if cop == cqe_opcode::RESP_SEND { [0; 4] } else { w.ctrl.imm };
    let mut b = [0u8; 64];
    CqeRepr {
        opcode: cop,
        se: w.ctrl.fm_ce_se & 2 != 0,
        owner: 0,
        slid: src_lid,
        // Source QPN only; g/SL/L3 bits stay 0 for RC [unverified, spec §11.2].
        flags_rqpn: src_qpn & 0xff_ffff,
        srqn_uidx: r.user_index,
        imm_inval_pkey: imm,
        byte_cnt: w.len as u32,
        timestamp: ts,
        sop_drop_qpn: rqpn,
        wqe_counter: counter,
    }
    .emit(&mut Cqe64::new_unchecked(&mut b[..]));
    let cqn = r.recv_cqn;
    push_cqe(st, rh, cqn, &b, None);
}

// ---------------------------------------------------------------------------------------
// Send queue processing

/// Executes WQEs of QP `qpn` from its hardware counter up to the producer in dbrec word 1.
/// `retry`: retry the WQE the SQ is RNR-blocked at (one tick elapsed).
pub(crate) fn process_sq(st: &mut FabricState, h: usize, qpn: u32, mut retry: bool) {
    let mut buf = [0u8; MAX_WQE_DS * DS_SIZE];
    loop {
        let Some(qp) = st.hosts[h].qps.get(&qpn) else {
            return;
        };
        match qp.state {
            QpState::Err => return flush_sq(st, h, qpn),
            QpState::Rts => {}
            _ => return,
        }
        let producer = qp.sq_producer();
        let counter = qp.sq_ci;
        if counter == producer || (qp.rnr.is_some() && !retry) {
            return;
        }
        let avail = producer.wrapping_sub(counter);
        let (ctrl, len) = qp.fetch_wqe(counter, &mut buf);
        let parsed = match len {
            None => Err("WQE larger than the ring"),
            Some(_) if ctrl.qpn != qpn => Err("QPN in ctrl is not this QP"),
            Some(_) if ctrl.wqe_index != counter => Err("wqe_index is not the hardware counter"),
            Some(_) if ctrl.wqebbs() > avail => Err("WQE extends past the producer"),
            Some(l) => wqe::parse(QpType::Rc, &buf[..l]),
        };
        let nbb = ctrl.wqebbs().min(avail);
        st.clock += 1;
        st.hosts[h].stats.wqes_executed += 1;
        let outcome = match &parsed {
            Err(_) => {
                st.hosts[h].stats.malformed_wqes += 1;
                fail(syndrome::LOCAL_QP_OP_ERR)
            }
            Ok(w) => {
                let l = usize::from(w.ctrl.ds) * DS_SIZE;
                execute(st, h, qpn, &buf[..l], w)
            }
        };
        let ts = st.clock;
        let outcome = match outcome {
            Outcome::Rnr => {
                st.hosts[h].stats.rnr_naks += 1;
                let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
                    return;
                };
                let limit = qp.attrs.rnr_retry;
                let tries = match qp.rnr {
                    Some(n) => n.saturating_add(1),
                    None => 0,
                };
                if limit == 0 || (limit != 7 && tries >= limit) {
                    fail(syndrome::RNR_RETRY_EXC_ERR)
                } else {
                    qp.rnr = Some(tries);
                    return;
                }
            }
            o => o,
        };
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return;
        };
        record_shadow(qp, counter, nbb);
        qp.sq_ci = counter.wrapping_add(nbb);
        qp.rnr = None;
        match outcome {
            Outcome::Done { byte_cnt } => {
                // CE = 2 or 3 asks for a CQE; CE = 1 ("only on first error") is treated like
                // CE = 0 on success [unverified, spec §2.2]. byte_cnt: message length for
                // SEND/WRITE [unverified, §6.3], bytes read for READ, 8 for atomics.
                if ctrl.fm_ce_se & 0x08 != 0 {
                    let cqe = req_cqe(qp, ctrl.opcode, counter, byte_cnt, ts);
                    let cqn = qp.send_cqn;
                    push_cqe(st, h, cqn, &cqe, None);
                }
            }
            Outcome::Fail { synd, responder } => {
                let cqe = err_cqe(cqe_opcode::REQ_ERR, synd, qp.user_index, ctrl.opcode, qpn, counter);
                let cqn = qp.send_cqn;
                push_cqe(st, h, cqn, &cqe, Some(qpn));
                if let Some((rh, rqpn)) = responder {
                    enter_err(st, rh, rqpn);
                }
                return enter_err(st, h, qpn);
            }
            Outcome::Rnr => return,
        }
        retry = false;
    }
}

// ---------------------------------------------------------------------------------------
// Doorbells and ticks

/// Checks an 8-byte doorbell against the WQE it names (spec §1.6, §8 step 1).
fn doorbell_matches(qp: &Qp, value: &[u8; 8], strict: bool) -> bool {
    let idx = u16::from_be_bytes([value[1], value[2]]);
    let p = qp.sq_producer();
    let ci = qp.sq_ci;
    let (ctrl8, nbb) = if idx.wrapping_sub(ci) < p.wrapping_sub(ci) {
        let mut c = [0u8; 16];
        qp.read_sq(idx, 0, &mut c);
        let mut c8 = [0u8; 8];
        c8.copy_from_slice(&c[..8]);
        let n = crate::wire::CtrlRepr::parse(&CtrlSeg::new_unchecked(&c[..])).wqebbs();
        (c8, n)
    } else {
        let s = qp.shadow[usize::from(idx) & (qp.sq_wqe_cnt as usize - 1)];
        if !strict && s.valid && s.counter.wrapping_sub(idx).wrapping_sub(1) < 0x7fff {
            // Threaded mode: the slot was reused by a newer WQE before this (queued)
            // doorbell was handled; it can no longer be verified.
            return true;
        }
        if !s.valid || s.counter != idx {
            return false;
        }
        (s.ctrl8, s.wqebbs)
    };
    let end = idx.wrapping_add(nbb);
    let end_ok = if strict { end == p } else { p.wrapping_sub(end) < 0x8000 };
    ctrl8 == *value && end_ok
}

/// Checks BlueFlame data against the ring copy of the WQE it carries.
fn bf_matches(qp: &Qp, data: &[u8]) -> bool {
    if data.is_empty() || data.len() % WQEBB_SIZE != 0 || data.len() > BF_SIZE as usize {
        return false;
    }
    let ctrl = match CtrlSeg::new_checked(data) {
        Ok(c) => crate::wire::CtrlRepr::parse(&c),
        Err(_) => return false,
    };
    if ctrl.ds == 0 || usize::from(ctrl.wqebbs()) * WQEBB_SIZE != data.len() {
        return false;
    }
    let idx = ctrl.wqe_index;
    let p = qp.sq_producer();
    if idx.wrapping_sub(qp.sq_ci) >= p.wrapping_sub(qp.sq_ci) {
        // Already executed (threaded race): only the ctrl bytes remain to compare, and
        // doorbell_matches does that.
        return true;
    }
    let mut ring = [0u8; BF_SIZE as usize];
    qp.read_sq(idx, 0, &mut ring[..data.len()]);
    ring[..data.len()] == *data
}

/// Handles one UAR write (plain doorbell when `bf` is `None`).
pub(crate) fn doorbell(
    st: &mut FabricState,
    h: usize,
    uar_index: u32,
    offset: u32,
    value: [u8; 8],
    bf: Option<&[u8]>,
) {
    let strict = st.cfg.mode == ExecMode::Deterministic;
    let host = &mut st.hosts[h];
    host.stats.doorbells += 1;
    if bf.is_some() {
        host.stats.bf_writes += 1;
    }
    let Some(uar) = host.uars.get_mut(&uar_index) else {
        host.stats.doorbell_mismatch += 1;
        return;
    };
    if offset != uar.expected_offset {
        host.stats.bf_offset_mismatch += 1;
        uar.expected_offset = offset ^ BF_SIZE;
    } else {
        uar.expected_offset ^= BF_SIZE;
    }
    let qpn = u32::from_be_bytes([value[4], value[5], value[6], value[7]]) >> 8;
    let Some(qp) = host.qps.get(&qpn) else {
        host.stats.doorbell_mismatch += 1;
        return;
    };
    let db_ok = qp.uar_index == uar_index && doorbell_matches(qp, &value, strict);
    let bf_ok = bf.is_none_or(|d| bf_matches(qp, d));
    if !db_ok {
        host.stats.doorbell_mismatch += 1;
    }
    if !bf_ok {
        host.stats.bf_content_mismatch += 1;
    }
    process_sq(st, h, qpn, false);
}

/// One RNR-timer period: retry RNR-blocked SQs, run SQs whose producer moved without a
/// doorbell, flush WQEs posted to QPs in ERR.
pub(crate) fn tick(st: &mut FabricState, h: usize) {
    st.clock += 1;
    let mut qpns = std::mem::take(&mut st.hosts[h].scratch);
    qpns.clear();
    qpns.extend(st.hosts[h].qps.keys().copied());
    qpns.sort_unstable(); // deterministic order
    for &qpn in &qpns {
        match st.hosts[h].qps.get(&qpn).map(|q| q.state) {
            Some(QpState::Err) => {
                flush_sq(st, h, qpn);
                flush_rq(st, h, qpn);
            }
            Some(QpState::Rts) => process_sq(st, h, qpn, true),
            _ => {}
        }
    }
    st.hosts[h].scratch = qpns;
}

/// How soon host `h` wants a tick without doorbells: RNR-blocked SQs need one every RNR
/// period; QPs in ERR are polled slowly for receive WQEs posted later.
pub(crate) fn tick_interval(st: &FabricState, h: usize) -> Option<std::time::Duration> {
    let qps = st.hosts[h].qps.values();
    let mut any_err = false;
    for q in qps {
        if q.rnr.is_some() {
            return Some(std::time::Duration::from_micros(20));
        }
        any_err |= q.state == QpState::Err;
    }
    any_err.then_some(std::time::Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
    }

    /// Pushes `cqe` through a real CQ at producer index `pi` and returns the slot bytes.
    fn through_cq(cqe: &[u8; 64], cnt: u32, pi: u32) -> [u8; 64] {
        let mut cq = Cq::new(cnt, 64).unwrap();
        let filler = [0u8; 64];
        for i in 0..pi {
            cq.dbrec.store_be32(0, i); // the consumer keeps up
            cq.push(&filler).unwrap();
        }
        cq.push(cqe).unwrap();
        let mut out = [0u8; 64];
        cq.mem.read((pi & (cnt - 1)) as usize * 64, &mut out);
        out
    }

    fn test_qp(qpn: u32, uidx: u32) -> Qp {
        let attr = crate::QpInitAttr {
            qp_type: QpType::Rc,
            pdn: 1,
            send_cqn: 1,
            recv_cqn: 1,
            sq_wqe_cnt: 8,
            rq_wqe_cnt: 0,
            rq_stride: 16,
            user_index: uidx,
        };
        Qp::new(qpn, 0, &attr).unwrap()
    }

    #[test]
    fn golden_c1_from_the_engine_writer() {
        let qp = test_qp(0x123, 1);
        let cqe = req_cqe(&qp, opcode::RDMA_READ, 0x12, 0x200, 0x0000_0001_0203_0405);
        let got = through_cq(&cqe, 256, 0x105);
        let want = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 02 00
             00 00 00 01  02 03 04 05  10 00 01 23  00 12 00 01");
        assert_eq!(got[..], want[..]);
    }

    #[test]
    fn golden_c3_c4_from_the_engine_writer() {
        let c3 =
            err_cqe(cqe_opcode::REQ_ERR, syndrome::REMOTE_ACCESS_ERR, 1, opcode::RDMA_WRITE, 0x123, 0x10);
        let want3 = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 88 13  08 00 01 23  00 10 00 d0");
        assert_eq!(through_cq(&c3, 256, 8)[..], want3[..]);
        let c4 = err_cqe(cqe_opcode::REQ_ERR, syndrome::WR_FLUSH_ERR, 1, opcode::RDMA_WRITE_IMM, 0x123, 0x11);
        let want4 = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 f9 05  09 00 01 23  00 11 00 d0");
        assert_eq!(through_cq(&c4, 256, 9)[..], want4[..]);
    }

    #[test]
    fn vendor_table_is_total() {
        for s in 0..=255u8 {
            let _ = vendor_syndrome(s);
        }
        assert_eq!(vendor_syndrome(syndrome::WR_FLUSH_ERR), 0xf9);
        assert_eq!(vendor_syndrome(syndrome::TRANSPORT_RETRY_EXC_ERR), 0x81);
    }
}
