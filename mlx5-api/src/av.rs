//! Address vectors (spec §3.6): the 48-byte datagram segment of UD and DCI
//! WQEs. An [`AddressVector`] is encoded once (like rdma-core's address
//! handle); each WQE then copies it behind the per-WQE key and destination.

/// `MLX5_EXTENDED_UD_AV`: bit 31 of `dqp_dct`, always set (48-byte AV).
const EXTENDED_AV: u32 = 0x8000_0000;
/// `grh_gid_fl` bit 30: GRH present (InfiniBand only; implicit on RoCE).
const GRH_PRESENT: u32 = 1 << 30;

/// Global routing fields of an InfiniBand GRH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbGrh {
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 20 bits.
    pub flow_label: u32,
}

/// RoCE v2 addressing of a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceAv {
    /// Destination GID (`::ffff:a.b.c.d` for IPv4).
    pub dgid: [u8; 16],
    pub dmac: [u8; 6],
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
    /// class 0, hop limit 64, priority 0, UDP source port 0xc000. On
    /// hardware prefer [`RoceAv::from_port`].
    pub fn new(dgid: [u8; 16], dmac: [u8; 6]) -> Self {
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

    /// A RoCE v2 destination reached from `local`: the source GID index is
    /// the local port's (on hardware, its RoCE v2 entry; index 0 is usually
    /// RoCE v1).
    pub fn from_port(local: &crate::types::PortInfo, dgid: [u8; 16], dmac: [u8; 6]) -> Self {
        RoceAv { sgid_index: local.sgid_index, ..Self::new(dgid, dmac) }
    }
}

impl AddressVector {
    /// The address vector that reaches `remote` from `local`: InfiniBand by
    /// LID (service level `sl`), RoCE v2 by GID and MAC with the local
    /// source GID index (priority `sl & 7`).
    pub fn between(local: &crate::types::PortInfo, remote: &crate::types::PortInfo, sl: u8) -> Self {
        match remote.link_layer {
            crate::types::LinkLayer::InfiniBand => Self::ib(remote.lid, sl),
            crate::types::LinkLayer::Ethernet => Self::roce_v2(&RoceAv {
                priority: sl & 7,
                ..RoceAv::from_port(local, remote.gid, remote.mac)
            }),
        }
    }
}

/// A pre-encoded address vector: bytes 12..48 of the datagram segment
/// (bytes 0..12, the key and destination QP/DCT number, are written per WQE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
        b[32..48].copy_from_slice(&grh.dgid);
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
        b[32..48].copy_from_slice(&r.dgid);
        AddressVector { bytes: b }
    }

    /// The three DS of the datagram segment for a WQE: `key` (the Q_Key in
    /// the high half for UD, the 64-bit DC key for DCI) and the destination
    /// QPN / DCT number.
    #[inline(always)]
    pub(crate) fn segment(&self, key: u64, dqpn: u32) -> [[u8; 16]; 3] {
        let mut ds0 = [0u8; 16];
        ds0[0..8].copy_from_slice(&key.to_be_bytes());
        ds0[8..12].copy_from_slice(&(EXTENDED_AV | (dqpn & 0xff_ffff)).to_be_bytes());
        ds0[12..16].copy_from_slice(&self.bytes[12..16]);
        let mut ds1 = [0u8; 16];
        ds1.copy_from_slice(&self.bytes[16..32]);
        let mut ds2 = [0u8; 16];
        ds2.copy_from_slice(&self.bytes[32..48]);
        [ds0, ds1, ds2]
    }
}
