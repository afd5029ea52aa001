//! The two wires a request travels on from its requester to its responder, behind one
//! interface ([`Wire`]); the requester picks one per message ([`requester`]).
//!
//! - [`DirectWire`]: the responder is handed the whole message at once (its sources
//!   borrowed, no packets, no copy beyond the DMA itself). Used when the fabric is
//!   lossless and nothing captures.
//! - [`PacketWire`]: the network model ([`crate::lossy`], [`crate::net`]): packets with
//!   PSNs, ACKs and NAKs on simulated time, faults, retransmission, capture.
//!
//! Both drive the same responder ([`crate::responder`]) and hand back the same
//! [`Outcome`], so the same traffic gives the same results on either (the property test
//! `mlx5-sim/tests/wires.rs`).
//!
//! [`requester`]: crate::requester

use crate::hosts::FabricState;
use crate::psn::advance_sq_psn;
use crate::responder::{receive_datagram, respond, respond_rdma, Datagram, Outcome, Request, Target};

/// How an RC / DC request and a UD datagram reach their responder.
pub(crate) trait Wire {
    /// Carries request `rq` of QP `qpn` on host `h` to `tgt`; what the requester learns.
    /// The requester's send PSN moves past a request the responder carried out.
    fn request(st: &mut FabricState, h: usize, qpn: u32, tgt: Target, rq: &Request<'_, '_>) -> Outcome;

    /// Carries datagram `dg` of UD QP `qpn` on host `h` (PSN `psn`) to host `rh`.
    fn datagram(st: &mut FabricState, h: usize, qpn: u32, psn: u32, rh: usize, dg: &Datagram<'_, '_>);
}

/// The responder handed each whole message.
#[derive(Debug)]
pub(crate) struct DirectWire;

impl Wire for DirectWire {
    #[inline]
    fn request(st: &mut FabricState, h: usize, qpn: u32, tgt: Target, rq: &Request<'_, '_>) -> Outcome {
        let endian = st.cfg.atomic_endianness;
        let out = respond(&mut st.hosts[tgt.h], endian, tgt, rq);
        if matches!(out, Outcome::Done { .. } | Outcome::DoneInline { .. }) {
            advance_sq_psn(&mut st.hosts[h], qpn, rq.pkts);
        }
        out
    }

    #[inline]
    fn datagram(st: &mut FabricState, _h: usize, _qpn: u32, _psn: u32, rh: usize, dg: &Datagram<'_, '_>) {
        receive_datagram(&mut st.hosts[rh], rh, dg);
    }
}

impl DirectWire {
    /// The lean path's RDMA WRITE or READ ([`crate::lean`]) of QP `qpn` on host `h`,
    /// with PSN `psn`, to RC QP `dest_qpn` on host `rh`: the responder accepts it and
    /// carries it out ([`respond_rdma`]), and the requester's send PSN moves past it.
    /// `None`: no answer.
    #[inline]
    pub(crate) fn rdma(
        st: &mut FabricState,
        h: usize,
        qpn: u32,
        (rh, dest_qpn): (usize, u32),
        psn: u32,
        rq: &Request<'_, '_>,
    ) -> Option<Outcome> {
        let out = respond_rdma(&mut st.hosts[rh], rh, dest_qpn, psn, rq)?;
        if matches!(out, Outcome::Done { .. }) {
            advance_sq_psn(&mut st.hosts[h], qpn, rq.pkts);
        }
        Some(out)
    }
}

/// Packets over the network model.
#[derive(Debug)]
pub(crate) struct PacketWire;

impl PacketWire {
    /// Carries the requests `rqs` of QP `qpn` on host `h`, consecutive on its send queue,
    /// to `tgt` as one train ([`crate::lossy::execute_train`]): what the requester learns
    /// of each (into `outcomes`), in order, up to the one the train ended at.
    pub(crate) fn train(
        st: &mut FabricState,
        h: usize,
        qpn: u32,
        tgt: Target,
        rqs: &[Request<'_, '_>],
        outcomes: &mut crate::lossy::Outcomes<{ crate::net::transport::MAX_TRAIN }>,
    ) {
        crate::lossy::execute_train(st, h, qpn, tgt, rqs, outcomes)
    }
}

impl Wire for PacketWire {
    fn request(st: &mut FabricState, h: usize, qpn: u32, tgt: Target, rq: &Request<'_, '_>) -> Outcome {
        crate::lossy::execute(st, h, qpn, tgt, rq)
    }

    fn datagram(st: &mut FabricState, h: usize, qpn: u32, psn: u32, rh: usize, dg: &Datagram<'_, '_>) {
        if crate::lossy::datagram(st, h, rh, qpn, psn, dg) {
            receive_datagram(&mut st.hosts[rh], rh, dg);
        }
    }
}
