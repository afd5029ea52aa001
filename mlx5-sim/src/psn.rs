//! Packet sequence numbers of RC / DC messages: how many packets a message takes at the
//! path MTU, and the requester's PSN moving past a message.

use crate::host::Host;

use crate::wire::opcode;

/// PSNs an RC message takes (IB spec 9.7.1): one per packet of the request (SEND,
/// WRITE: `ceil(len / MTU)`, at least one), or of the response (READ: the same for the
/// bytes read; atomic: one).
#[inline]
pub(crate) fn packets(op: u8, byte_cnt: u32, mtu: u32) -> u32 {
    match op {
        opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA => 1,
        _ => byte_cnt.div_ceil(mtu).max(1),
    }
}

/// Moves the requester's next send PSN on by `n` (24-bit arithmetic), past a message it
/// sent; the responder moves its expected PSN itself when it takes the message
/// ([`crate::responder::respond`]).
#[inline]
pub(crate) fn advance_sq_psn(host: &mut Host, qpn: u32, n: u32) {
    if let Some(q) = host.qps.get_mut(&qpn) {
        q.attrs.sq_psn = q.attrs.sq_psn.wrapping_add(n) & 0xff_ffff;
    }
}
