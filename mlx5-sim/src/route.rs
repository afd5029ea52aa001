//! Routing a request: the host an RC path or an address vector leads to (spec §3.6), and
//! what a request nobody answers does to its requester. Used by the general requester
//! ([`crate::requester`]) and the lean path ([`crate::lean`]).

use crate::hosts::{FabricState, Found};
use crate::responder::{fail, Outcome};
use crate::wire::{syndrome, DatagramSeg};
use crate::{LinkLayer, QpType, RcPath};

/// Finds the host an RC path leads to: DLID on IB; DGID on RoCE, and the host's MAC must
/// equal `dmac` when one is given.
fn resolve<'a>(
    st: &FabricState<'a>,
    h: usize,
    dlid: u16,
    dgid: Option<[u8; 16]>,
    dmac: Option<[u8; 6]>,
) -> Option<Found<'a>> {
    let ll = st.hosts[h].cfg.link_layer;
    if !st.hosts[h].reachable() {
        return None;
    }
    st.find_host(|o| {
        o.link_layer == ll
            && match ll {
                LinkLayer::InfiniBand => o.lid == dlid && dlid != 0,
                LinkLayer::Ethernet => Some(o.gid) == dgid && dmac.is_none_or(|m| m == o.mac),
            }
    })
}

/// [`resolve`] for RC QP `qpn`'s path `p`, through the QP's cache of the host it found
/// last (`peer`, as read from `Qp::peer` with the path): kept while nothing [`FabricState::find_host`] sees has changed since
/// (the fabric's address epoch) and the path is the same (a new path forgets it).
#[inline(always)]
pub(crate) fn resolve_peer<'a>(
    st: &mut FabricState<'a>,
    h: usize,
    qpn: u32,
    p: &RcPath,
    peer: u32,
) -> Option<Found<'a>> {
    let epoch = st.addr_epoch();
    if u64::from(peer >> 16) == epoch && st.hosts[h].reachable() {
        return Some(st.found((peer & 0xffff) as usize));
    }
    let found = resolve(st, h, p.dlid, p.dgid, p.dmac)?;
    if found.h < 1 << 16 && epoch < 1 << 16 {
        if let Some(me) = st.hosts[h].qps.get_mut(&qpn) {
            me.peer = (epoch as u32) << 16 | found.h as u32;
        }
    }
    Some(found)
}

/// Finds the host an address vector leads to (spec §3.6): IB by `rlid`, and when the GRH
/// bit is set also by `rgid`; RoCE by `rgid`, and `rmac` must be the host's MAC.
pub(crate) fn resolve_av<'a>(st: &FabricState<'a>, h: usize, av: &DatagramSeg<&[u8]>) -> Option<Found<'a>> {
    let ll = st.hosts[h].cfg.link_layer;
    let (rlid, rgid, rmac, grh) = (av.rlid(), av.rgid(), av.rmac(), av.grh());
    if !st.hosts[h].reachable() {
        return None;
    }
    st.find_host(|o| {
        o.link_layer == ll
            && match ll {
                LinkLayer::InfiniBand => rlid != 0 && o.lid == rlid && (!grh || o.gid == rgid),
                LinkLayer::Ethernet => o.gid == rgid && o.mac == rmac,
            }
    })
}

/// A request nobody answers (no such peer, not connected, wrong PSN or DC key): the
/// requester's retries run out (on the simulated clock when the network model runs).
pub(crate) fn unanswered(st: &mut FabricState, h: usize, qpn: u32) -> Outcome {
    if st.lossy() {
        crate::lossy::silent_peer(st, h, qpn);
    }
    crate::why::note(|| {
        let q = st.hosts[h].qps.get(&qpn);
        match q.and_then(|q| q.attrs.path.as_ref().map(|p| (p.dlid, p.dest_qpn))) {
            Some((dlid, dqpn)) => format!(
                "nothing answered QP 0x{qpn:x}: no QP 0x{dqpn:x} at LID 0x{dlid:x} that is in RTR or RTS and connected back to it"
            ),
            None => format!("nothing answered QP 0x{qpn:x}: its destination is not connected"),
        }
    });
    fail(syndrome::TRANSPORT_RETRY_EXC_ERR)
}

/// What the requester needs of its QP for one WQE, taken when the WQE is fetched (one
/// look-up of the QP per WQE, not one per use).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sender {
    pub pdn: u32,
    pub path: Option<RcPath>,
    pub peer: u32,
    pub qtype: QpType,
    /// Path MTU, at least 256.
    pub mtu: u32,
    pub sq_psn: u32,
    pub scatter_to_cqe: bool,
    pub send_cqn: u32,
}

impl Sender {
    pub(crate) fn of(q: &crate::qp::Qp) -> Sender {
        Sender {
            pdn: q.pdn,
            path: q.attrs.path,
            peer: q.peer,
            qtype: q.qp_type,
            mtu: q.attrs.path_mtu.max(256),
            sq_psn: q.attrs.sq_psn,
            scatter_to_cqe: q.scatter_to_cqe,
            send_cqn: q.send_cqn,
        }
    }
}
