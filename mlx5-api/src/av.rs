//! Address vectors (spec §3.6): the encoders live in the ring core
//! ([`crate::ring::av`]); this adds the constructors that take a port's
//! description.

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
}
