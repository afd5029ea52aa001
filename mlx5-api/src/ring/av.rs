//! Address vectors (spec §3.6): the 48-byte datagram segment of UD and DCI
//! WQEs. An [`AddressVector`] is encoded once (like rdma-core's address
//! handle); each WQE then copies it behind the per-WQE key and destination.

use super::Gid;

/// `grh_gid_fl` bit 30: GRH present (InfiniBand only; implicit on RoCE).
const GRH_PRESENT: u32 = 1 << 30;

/// Global routing fields of an InfiniBand GRH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct IbGrh {
    /// Destination GID.
    pub dgid: Gid,
    /// Source GID index in the local port's table.
    pub sgid_index: u8,
    /// Traffic class (IPv6) / DSCP and ECN (IPv4).
    pub traffic_class: u8,
    /// Hop limit (IPv6) / TTL (IPv4).
    pub hop_limit: u8,
    /// 20 bits.
    pub flow_label: u32,
}

/// RoCE v2 addressing of a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct RoceAv {
    /// Destination GID (`::ffff:a.b.c.d` for IPv4).
    pub dgid: Gid,
    /// Destination MAC address.
    pub dmac: [u8; 6],
    /// Source GID index in the local port's table.
    pub sgid_index: u8,
    /// IPv6 traffic class / IPv4 DSCP+ECN.
    pub traffic_class: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// 20 bits.
    pub flow_label: u32,
    /// Ethernet priority (3 bits).
    pub priority: u8,
    /// UDP source port (carried in the AV's `rlid` field).
    pub udp_sport: u16,
}

impl RoceAv {
    /// A RoCE v2 destination with the usual defaults: sgid index 0, traffic
    /// class 0, hop limit 64, priority 0, UDP source port 0xc000.
    ///
    /// GID index 0 of an mlx5 port is usually its RoCE **v1** entry: on
    /// hardware use `RoceAv::from_port` (the port's RoCE v2 index), or let
    /// the device build the whole AV with `ProtectionDomain::create_av`
    /// (which also resolves a router's MAC).
    pub fn new(dgid: Gid, dmac: [u8; 6]) -> Self {
        RoceAv {
            dgid,
            dmac,
            sgid_index: 0,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            priority: 0,
            udp_sport: 0xc000,
        }
    }
}

/// A pre-encoded address vector: bytes 12..48 of the datagram segment
/// (bytes 0..12, the key and destination QP/DCT number, are written per WQE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct AddressVector {
    bytes: [u8; 48],
}

impl AddressVector {
    /// InfiniBand, no GRH: destination LID and service level.
    pub fn ib(dlid: u16, sl: u8) -> Self {
        let mut b = [0u8; 48];
        b[12] = sl & 0x0f;
        b[14..16].copy_from_slice(&dlid.to_be_bytes());
        AddressVector { bytes: b }
    }

    /// InfiniBand with a GRH (routed or GID-addressed).
    pub fn ib_grh(dlid: u16, sl: u8, grh: &IbGrh) -> Self {
        let mut av = Self::ib(dlid, sl);
        let b = &mut av.bytes;
        b[26] = grh.traffic_class;
        b[27] = grh.hop_limit;
        let fl = GRH_PRESENT | ((grh.sgid_index as u32) << 20) | (grh.flow_label & 0xf_ffff);
        b[28..32].copy_from_slice(&fl.to_be_bytes());
        b[32..48].copy_from_slice(&grh.dgid.0);
        av
    }

    /// RoCE v2: GID, MAC, priority in `stat_rate_sl[3:1]`, UDP source port
    /// in `rlid`; the GRH bit stays 0 (the IP header is implicit).
    pub fn roce_v2(r: &RoceAv) -> Self {
        let mut b = [0u8; 48];
        b[12] = (r.priority & 7) << 1;
        b[14..16].copy_from_slice(&r.udp_sport.to_be_bytes());
        b[20..26].copy_from_slice(&r.dmac);
        b[26] = r.traffic_class;
        b[27] = r.hop_limit;
        let fl = ((r.sgid_index as u32) << 20) | (r.flow_label & 0xf_ffff);
        b[28..32].copy_from_slice(&fl.to_be_bytes());
        b[32..48].copy_from_slice(&r.dgid.0);
        AddressVector { bytes: b }
    }

    /// The encoded segment; bytes 0..12 (key, `dqp_dct`) are zero and are
    /// filled per WQE by [`crate::ring::seg::set_datagram_seg`].
    #[inline(always)]
    pub fn as_bytes(&self) -> &[u8; 48] {
        &self.bytes
    }

    /// An address vector from its 48 encoded bytes (bytes 0..12 are ignored).
    pub fn from_bytes(bytes: [u8; 48]) -> Self {
        AddressVector { bytes }
    }
}
