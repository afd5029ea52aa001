//! Trains on the packet wire: the RC WQEs of a send queue that are ready together (those
//! one doorbell covers, or that waited while the NIC was busy) travel as one train of
//! messages, their request packets back to back with consecutive PSNs and no waiting for
//! acknowledgements between them ([`crate::net::transport`]), instead of one message and
//! then its ACK. The requester concludes them in order as the train's answers say.
//!
//! A train is at most [`MAX_TRAIN`] WQEs, each one the general path would carry out as a
//! message (SEND, WRITE, READ, atomic; valid; local keys good); it stops before the first
//! that is not, and before a fenced WQE (FM bits of `fm_ce_se`, spec §2.2: it waits for
//! what is before it). A WQE the train did not take is executed alone afterwards, as
//! before; a train of one is not formed at all.

use crate::dma::{Sgl, SrcList};
use crate::hosts::{FabricState, Restart};
use crate::local::local_side;
use crate::psn::packets;
use crate::responder::{accept_rc, scatter_limit, Outcome, Request};
use crate::route::{resolve_peer, unanswered, Sender};
use crate::wire::{opcode, CtrlRepr, DS_SIZE, MAX_WQE_DS};
use crate::wires::PacketWire;
use crate::wqe::{self, SendWqe};
use crate::QpType;

pub(crate) use crate::net::transport::MAX_TRAIN;

/// A WQE of a train and what became of it, for the requester to conclude.
#[derive(Debug)]
pub(crate) struct Ran {
    pub counter: u16,
    pub ctrl8: [u8; 8],
    pub nbb: u16,
    pub opcode: u8,
    pub fm_ce_se: u8,
    pub outcome: Outcome,
}

/// A WQE fetched for a train.
struct Fetched {
    buf: Box<[u8; MAX_WQE_DS * DS_SIZE]>,
    len: usize,
    ctrl: CtrlRepr,
    w: SendWqe,
    counter: u16,
}

/// Sends the WQEs of RC QP `qpn` on host `h` from `counter` up to `producer` as a train
/// over the packet wire. `None`: fewer than two WQEs make a train (the caller executes
/// the one at `counter` alone); `Err(Restart)`: nothing was done (a host it needs was
/// busy); else what became of each WQE the train carried, in order, up to the one it
/// ended at.
pub(crate) fn send(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    me: &Sender,
    counter: u16,
    producer: u16,
) -> Option<Result<Vec<Ran>, Restart>> {
    let fetched = fetch(st, h, qpn, me, counter, producer);
    if fetched.len() < 2 {
        return None;
    }
    let ran = |f: &Fetched, outcome| Ran {
        counter: f.counter,
        ctrl8: first8(&f.buf[..]),
        nbb: f.ctrl.wqebbs(),
        opcode: f.ctrl.opcode,
        fm_ce_se: f.ctrl.fm_ce_se,
        outcome,
    };
    // The responder: by path, connected back to this QP, expecting the train's first PSN
    // (what `requester::execute` checks for one message).
    let found = me.path.and_then(|p| resolve_peer(st, h, qpn, &p, me.peer).map(|f| (p, f)));
    let Some((p, found)) = found else {
        return Some(Ok(vec![ran(&fetched[0], unanswered(st, h, qpn))]));
    };
    if st.need(found).is_err() {
        return Some(Err(Restart));
    }
    let rh = found.h;
    // A peer in another process: no train; each message goes on the UDP wire
    // ([`crate::udp_wire`]) as the WQE at the counter runs alone.
    if st.hosts[h].wire.is_some() && !st.hosts[rh].qps.contains_key(&p.dest_qpn) {
        return None;
    }
    let Some(tgt) = accept_rc(&mut st.hosts[rh], rh, p.dest_qpn, qpn, me.sq_psn) else {
        return Some(Ok(vec![ran(&fetched[0], unanswered(st, h, qpn))]));
    };
    // The messages (their local sides were checked when fetched).
    let mut sides: Vec<(SrcList, Sgl)> = Vec::with_capacity(fetched.len());
    for f in &fetched {
        let (mut srcs, mut sink) = (SrcList::new(), Sgl::new());
        // Checked when fetched: the same again.
        let checked = local_side(&st.hosts[h].mrs, me.pdn, &f.w, &f.buf[..f.len], &mut srcs, &mut sink);
        debug_assert!(checked);
        sides.push((srcs, sink));
    }
    let src_lid = st.hosts[h].cfg.lid;
    let limit = if me.scatter_to_cqe { scatter_limit(&st.hosts[h], me.send_cqn) } else { 0 };
    let rqs: Vec<Request> = fetched
        .iter()
        .zip(&sides)
        .map(|(f, (srcs, sink))| {
            // Requester scatter-to-CQE only for a signaled WQE, as `requester::execute`.
            let req_scatter = if f.ctrl.fm_ce_se & 0x08 != 0 { limit } else { 0 };
            let pkts = packets(f.ctrl.opcode, f.w.len as u32, me.mtu);
            Request::of(&f.w, srcs.as_slice(), sink, qpn, src_lid, req_scatter, pkts)
        })
        .collect();
    let mut outcomes = crate::lossy::Outcomes::<MAX_TRAIN>::new();
    PacketWire::train(st, h, qpn, tgt, &rqs, &mut outcomes);
    Some(Ok(fetched.iter().zip(outcomes).map(|(f, o)| ran(f, o)).collect()))
}

fn first8(buf: &[u8]) -> [u8; 8] {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[..8]);
    b
}

/// The WQEs from `counter` that may go in one train (see the module's rules).
fn fetch(st: &FabricState, h: usize, qpn: u32, me: &Sender, counter: u16, producer: u16) -> Vec<Fetched> {
    let mut out = Vec::new();
    let Some(qp) = st.hosts[h].qps.get(&qpn) else {
        return out;
    };
    let mrs = &st.hosts[h].mrs;
    let mut c = counter;
    while out.len() < MAX_TRAIN && c != producer {
        let mut buf = Box::new([0u8; MAX_WQE_DS * DS_SIZE]);
        let (ctrl, len) = qp.fetch_wqe(c, &mut buf);
        let Some(len) = len else { break };
        if ctrl.qpn != qpn || ctrl.wqe_index != c || ctrl.wqebbs() > producer.wrapping_sub(c) {
            break;
        }
        if !out.is_empty() && ctrl.fm_ce_se & 0xe0 != 0 {
            break; // fenced: after what is before it
        }
        let Ok(w) = wqe::parse_with_ctrl(QpType::Rc, ctrl, &buf[..len]) else { break };
        let message = matches!(
            ctrl.opcode,
            opcode::SEND
                | opcode::SEND_IMM
                | opcode::SEND_INVAL
                | opcode::RDMA_WRITE
                | opcode::RDMA_WRITE_IMM
                | opcode::RDMA_READ
                | opcode::ATOMIC_CS
                | opcode::ATOMIC_FA
        );
        let (mut srcs, mut sink) = (SrcList::new(), Sgl::new());
        if !message || !local_side(mrs, me.pdn, &w, &buf[..len], &mut srcs, &mut sink) {
            break;
        }
        out.push(Fetched { buf, len, ctrl, w, counter: c });
        c = c.wrapping_add(ctrl.wqebbs());
    }
    out
}
