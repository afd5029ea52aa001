//! Address vectors (spec §3.6): the encoders live in the ring core
//! ([`crate::ring::av`]); this adds the constructors that take a port's
//! description.

use crate::connect::RemoteQpInfo;
use crate::error::{Error, Result};
pub use crate::ring::av::{AddressVector, IbGrh, RoceAv};
use crate::ring::Gid;
use crate::types::{LinkLayer, PortInfo};

impl RoceAv {
    /// A RoCE v2 destination reached from `local`: the source GID index is
    /// the local port's (on hardware, its RoCE v2 entry; index 0 is usually
    /// RoCE v1).
    pub fn from_port(local: &PortInfo, dgid: Gid, dmac: [u8; 6]) -> Self {
        RoceAv { sgid_index: local.sgid_index, ..Self::new(dgid, dmac) }
    }
}

impl IbGrh {
    /// A GRH to `dgid` from `local`'s source GID index: traffic class 0,
    /// hop limit 64 (rdma-core's default for routed paths), flow label 0.
    pub fn from_port(local: &PortInfo, dgid: Gid) -> Self {
        IbGrh { dgid, sgid_index: local.sgid_index, traffic_class: 0, hop_limit: 64, flow_label: 0 }
    }
}

impl AddressVector {
    /// The address vector that reaches `remote` from `local`: InfiniBand by
    /// LID (service level `sl`; with a GRH to `remote.gid` when `local`
    /// requires one), RoCE v2 by GID and MAC with the local source GID index
    /// (priority `sl & 7`).
    pub fn between(local: &PortInfo, remote: &PortInfo, sl: u8) -> Self {
        match remote.link_layer {
            LinkLayer::InfiniBand if local.grh_required => {
                Self::ib_grh(remote.lid, sl, &IbGrh::from_port(local, remote.gid))
            }
            LinkLayer::InfiniBand => Self::ib(remote.lid, sl),
            LinkLayer::Ethernet => Self::roce_v2(&RoceAv {
                priority: sl & 7,
                ..RoceAv::from_port(local, remote.gid, remote.mac)
            }),
        }
    }

    /// The address vector that reaches a peer known only by what it sent
    /// out of band (its [`local_info`](crate::UdQp::local_info)): by LID
    /// when `remote` carries no MAC (InfiniBand), by GID and MAC otherwise
    /// (RoCE v2, source GID index of `local`). On an InfiniBand port that
    /// requires a GRH ([`PortInfo::grh_required`]) the AV carries one, to the
    /// peer's GID. A RoCE peer without a GID, a peer without a GID behind a
    /// GRH-required port, or a peer on the other link layer than `local`, is
    /// [`Error::InvalidArgument`].
    ///
    /// ```
    /// # use mlx5_api::{AddressVector, Gid, LinkLayer, PortInfo, RemoteQpInfo};
    /// let port = PortInfo {
    ///     port_num: 1,
    ///     lid: 1,
    ///     gid: Gid::default(),
    ///     sgid_index: 0,
    ///     mac: [0; 6],
    ///     link_layer: LinkLayer::InfiniBand,
    ///     active_mtu: 4096,
    ///     grh_required: false,
    /// };
    /// let av = AddressVector::to_peer(&port, &RemoteQpInfo::ib(0x108, 2), 0)?;
    /// assert_eq!(av, AddressVector::ib(2, 0));
    /// # Ok::<(), mlx5_api::Error>(())
    /// ```
    pub fn to_peer(local: &PortInfo, remote: &RemoteQpInfo, sl: u8) -> Result<Self> {
        match (local.link_layer, remote.gid, remote.mac) {
            (LinkLayer::InfiniBand, Some(gid), None) if local.grh_required => {
                Ok(Self::ib_grh(remote.lid, sl, &IbGrh::from_port(local, gid)))
            }
            (LinkLayer::InfiniBand, None, None) if local.grh_required => {
                Err(Error::InvalidArgument(crate::error::InvalidArgument::GrhRequired {
                    port: local.port_num,
                    peer_qpn: remote.qpn,
                }))
            }
            (LinkLayer::InfiniBand, _, None) => Ok(Self::ib(remote.lid, sl)),
            (LinkLayer::Ethernet, Some(gid), Some(mac)) => {
                Ok(Self::roce_v2(&RoceAv { priority: sl & 7, ..RoceAv::from_port(local, gid, mac) }))
            }
            (link, gid, mac) => Err(Error::InvalidArgument(crate::error::InvalidArgument::PeerAddress {
                link,
                gid: gid.is_some(),
                mac: mac.is_some(),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_peer_picks_the_local_link_layer() {
        let ib = PortInfo {
            port_num: 1,
            lid: 1,
            gid: Gid::default(),
            sgid_index: 0,
            mac: [0; 6],
            link_layer: LinkLayer::InfiniBand,
            active_mtu: 4096,
            grh_required: false,
        };
        let eth = PortInfo { lid: 0, link_layer: LinkLayer::Ethernet, sgid_index: 3, ..ib.clone() };
        let gid = Gid::from_ipv4([10, 0, 0, 2]);
        let mac = [2, 0, 0, 0, 0, 2];
        assert_eq!(AddressVector::to_peer(&ib, &RemoteQpInfo::ib(9, 7), 2).unwrap(), AddressVector::ib(7, 2));
        let av = AddressVector::to_peer(&eth, &RemoteQpInfo::roce(9, gid, mac), 0).unwrap();
        // The source GID index is the local port's (bits 20..28 of byte 28's word).
        assert_eq!(av, AddressVector::roce_v2(&RoceAv { sgid_index: 3, ..RoceAv::new(gid, mac) }));
        assert!(matches!(
            AddressVector::to_peer(&eth, &RemoteQpInfo::ib(9, 7), 0),
            Err(Error::InvalidArgument(_))
        ));
        assert!(AddressVector::to_peer(&ib, &RemoteQpInfo::roce(9, gid, mac), 0).is_err());
        // A port that requires a GRH: the AV carries one (GRH bit, the peer's GID).
        let vf = PortInfo { grh_required: true, ..ib.clone() };
        let peer = RemoteQpInfo { gid: Some(gid), ..RemoteQpInfo::ib(9, 7) };
        let av = AddressVector::to_peer(&vf, &peer, 0).unwrap();
        assert_eq!(av, AddressVector::ib_grh(7, 0, &IbGrh::from_port(&vf, gid)));
        assert_eq!(av.as_bytes()[28] & 0x40, 0x40, "grh bit (spec §3.6)");
        assert_eq!(&av.as_bytes()[32..48], &gid.0);
        assert!(AddressVector::to_peer(&vf, &RemoteQpInfo::ib(9, 7), 0).is_err(), "no GID to address");
    }
}
