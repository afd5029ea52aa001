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

impl AddressVector {
    /// The address vector that reaches `remote` from `local`: InfiniBand by
    /// LID (service level `sl`), RoCE v2 by GID and MAC with the local
    /// source GID index (priority `sl & 7`).
    pub fn between(local: &PortInfo, remote: &PortInfo, sl: u8) -> Self {
        match remote.link_layer {
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
    /// (RoCE v2, source GID index of `local`). A RoCE peer without a GID,
    /// or a peer on the other link layer than `local`, is
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
    /// };
    /// let av = AddressVector::to_peer(&port, &RemoteQpInfo::ib(0x108, 2), 0)?;
    /// assert_eq!(av, AddressVector::ib(2, 0));
    /// # Ok::<(), mlx5_api::Error>(())
    /// ```
    pub fn to_peer(local: &PortInfo, remote: &RemoteQpInfo, sl: u8) -> Result<Self> {
        match (local.link_layer, remote.gid, remote.mac) {
            (LinkLayer::InfiniBand, _, None) => Ok(Self::ib(remote.lid, sl)),
            (LinkLayer::Ethernet, Some(gid), Some(mac)) => {
                Ok(Self::roce_v2(&RoceAv { priority: sl & 7, ..RoceAv::from_port(local, gid, mac) }))
            }
            (l, gid, mac) => Err(Error::InvalidArgument(format!(
                "peer address (GID {}, MAC {}) does not fit the local {l} port",
                if gid.is_some() { "given" } else { "missing" },
                if mac.is_some() { "given" } else { "missing" },
            ))),
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
    }
}
