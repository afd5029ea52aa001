//! UD datagrams on the UDP wire: a UD SEND to a QP another process owns leaves as one
//! RoCE v2 datagram (DETH: Q_Key and source QP), and one that arrives is received as a
//! datagram from a QP of this process is ([`receive_datagram`]): the Q_Key checked, the
//! next receive WQE consumed, the network header in its 40-byte GRH slot.
//!
//! The network header an arriving datagram leaves is rebuilt from the two GIDs (IPv4 when
//! both are IPv4-mapped, else IPv6; traffic class 0, hop limit 64) on RoCE; on
//! InfiniBand the model sends no GRH between processes [model choice: the sender's
//! address vector is not on the wire], so the slot is left as it was.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use super::{send, From};
use crate::dma::{self, Src};
use crate::hosts::FabricState;
use crate::net::packet::{op, Packet};
use crate::net::roce::{self, Parsed};
use crate::responder::{receive_datagram, Datagram};
use crate::LinkLayer;

/// How long a UD sender trusts the registry's answer for a destination QPN.
const DEST_TTL: Duration = Duration::from_secs(1);

/// Where a datagram of UD QP `qpn` on host `h` for QPN `dqpn` on host `rh` goes when
/// another process owns that QP (`None`: it does not; the datagram stays here).
pub(crate) fn remote(st: &mut FabricState, h: usize, qpn: u32, rh: usize, dqpn: u32) -> Option<SocketAddrV4> {
    st.hosts[h].wire.as_ref()?;
    let now = Instant::now();
    let cached = st.hosts[h].qps.get(&qpn)?.wire.as_ref().and_then(|w| w.ud_dest);
    if let Some((q, r, to, at)) = cached {
        if q == dqpn && r == rh && now.duration_since(at) < DEST_TTL {
            return Some(to);
        }
    }
    let to = super::remote_owner(st, rh, dqpn)?;
    st.hosts[h].qps.get_mut(&qpn)?.wire.get_or_insert_with(Default::default).ud_dest =
        Some((dqpn, rh, to, now));
    Some(to)
}

/// A UD datagram's fields as the sender's WQE gives them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out<'a, 'w> {
    pub qpn: u32,
    pub dqpn: u32,
    pub psn: u32,
    pub qkey: u32,
    pub imm: Option<[u8; 4]>,
    pub se: bool,
    pub len: u64,
    pub srcs: &'a [Src<'w>],
}

/// Sends datagram `o` from host `h` to the host with GID `gid` at `to`.
pub(crate) fn send_datagram(
    st: &mut FabricState,
    h: usize,
    o: &Out<'_, '_>,
    gid: &[u8; 16],
    to: SocketAddrV4,
) {
    let Some(end) = st.hosts[h].wire.clone() else { return };
    let mut data = vec![0u8; o.len as usize];
    dma::gather(o.srcs, &mut data);
    let opc = if o.imm.is_some() { op::UD_SEND_ONLY_IMM } else { op::UD_SEND_ONLY };
    let mut p = Packet::new(h, h, opc, o.qpn, o.dqpn, o.psn);
    p.qkey = Some(o.qkey);
    p.imm = o.imm;
    p.se = o.se;
    p.payload = &data;
    st.hosts[h].stats.wire_payload_bytes += data.len() as u64;
    send(st, h, &end, &p, gid, to);
}

/// UD datagram `p` arrived at host `h` from `from`.
pub(crate) fn receive(st: &mut FabricState, h: usize, p: &Parsed<'_>, from: From) {
    let Some((qkey, sqpn)) = p.deth else { return };
    let host = &mut st.hosts[h];
    let roce = host.cfg.link_layer == LinkLayer::Ethernet;
    let own = host.cfg.gid;
    // The transport bytes after the IP and UDP headers: BTH, DETH, ImmDt, payload, pad.
    let tp = 12 + 8 + if p.imm.is_some() { 4 } else { 0 } + p.payload.len().next_multiple_of(4);
    let (hdr, hlen, l3) = if roce {
        let (b, n) = roce::ip_udp(&from.gid, &own, from.at.port(), tp);
        // The IP header alone: 20 bytes of IPv4 (L3 type 2) or 40 of IPv6 (type 1).
        let ip = n - 8;
        (b, ip, if ip == 20 { 2u32 } else { 1 })
    } else {
        ([0u8; 48], 0, 0)
    };
    let flags_rqpn = if roce { (1 << 28) | (l3 << 24) } else { 0 } | (sqpn & 0xff_ffff);
    let srcs = [Src::Bytes(p.payload)];
    let dg = Datagram {
        imm: p.imm,
        se: p.se,
        len: p.payload.len() as u64,
        qkey,
        dqpn: p.dqpn,
        hdr: &hdr[..hlen],
        slid: if roce { 0 } else { from.lid },
        flags_rqpn,
        srcs: &srcs,
    };
    receive_datagram(host, h, &dg);
}
