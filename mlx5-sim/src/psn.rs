//! Packet sequence numbers of RC / DC messages: how many packets a message takes at the
//! path MTU, and both ends' PSNs moving past a message.

use crate::hosts::FabricState;

use crate::wire::opcode;

pub(crate) fn path_mtu_of(st: &FabricState, h: usize, qpn: u32) -> u32 {
    st.hosts[h].qps.get(&qpn).map_or(4096, |q| q.attrs.path_mtu.max(256))
}

/// PSNs an RC message takes (IB spec 9.7.1): one per packet of the request (SEND,
/// WRITE: `ceil(len / MTU)`, at least one), or of the response (READ: the same for the
/// bytes read; atomic: one).
pub(crate) fn packets(op: u8, byte_cnt: u32, mtu: u32) -> u32 {
    match op {
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => 1,
        _ => byte_cnt.div_ceil(mtu).max(1),
    }
}

/// Moves the requester's next send PSN and the responder's expected PSN on by `n`
/// (24-bit arithmetic).
pub(crate) fn advance_psns(st: &mut FabricState, req: (usize, u32), resp: (usize, u32), n: u32) {
    if let Some(q) = st.hosts[req.0].qps.get_mut(&req.1) {
        q.attrs.sq_psn = q.attrs.sq_psn.wrapping_add(n) & 0xff_ffff;
    }
    if let Some(q) = st.hosts[resp.0].qps.get_mut(&resp.1) {
        q.attrs.rq_psn = q.attrs.rq_psn.wrapping_add(n) & 0xff_ffff;
    }
}
