//! Decoding of the C enums the verbs API returns (port state, link layer,
//! MTU, QP state) with `match` and an `Unknown(n)` arm: a value a newer
//! kernel or rdma-core invents is reported, never transmuted (PITFALLS).

use mlx5_api::LinkLayer;

use crate::ffi::*;

/// `enum ibv_port_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_NOP`.
    Nop,
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_INIT`.
    Init,
    /// `IBV_PORT_ARMED`.
    Armed,
    /// `IBV_PORT_ACTIVE`.
    Active,
    /// `IBV_PORT_ACTIVE_DEFER`.
    ActiveDefer,
    /// A value this header version did not know.
    Unknown(u32),
}

impl PortState {
    /// Decode the raw value.
    pub fn from_raw(v: u32) -> Self {
        match v {
            IBV_PORT_NOP => Self::Nop,
            IBV_PORT_DOWN => Self::Down,
            IBV_PORT_INIT => Self::Init,
            IBV_PORT_ARMED => Self::Armed,
            IBV_PORT_ACTIVE => Self::Active,
            IBV_PORT_ACTIVE_DEFER => Self::ActiveDefer,
            n => Self::Unknown(n),
        }
    }
    /// The raw `enum ibv_port_state` value.
    pub fn raw(self) -> u32 {
        match self {
            Self::Nop => IBV_PORT_NOP,
            Self::Down => IBV_PORT_DOWN,
            Self::Init => IBV_PORT_INIT,
            Self::Armed => IBV_PORT_ARMED,
            Self::Active => IBV_PORT_ACTIVE,
            Self::ActiveDefer => IBV_PORT_ACTIVE_DEFER,
            Self::Unknown(n) => n,
        }
    }
    /// `ibv_devinfo`'s spelling.
    pub fn name(self) -> String {
        match self {
            Self::Nop => "PORT_NOP".into(),
            Self::Down => "PORT_DOWN".into(),
            Self::Init => "PORT_INIT".into(),
            Self::Armed => "PORT_ARMED".into(),
            Self::Active => "PORT_ACTIVE".into(),
            Self::ActiveDefer => "PORT_ACTIVE_DEFER".into(),
            Self::Unknown(n) => format!("unknown ({n})"),
        }
    }
}

/// `ibv_port_attr.link_layer` as the kernel reported it (including values
/// the front-end has no name for); [`LinkLayerRaw::to_api`] gives the one
/// link-layer type of the API, `mlx5_api::LinkLayer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayerRaw {
    /// `IBV_LINK_LAYER_UNSPECIFIED`: kernels that predate the field; it
    /// means InfiniBand (as in `ibv_devinfo`).
    Unspecified,
    /// `IBV_LINK_LAYER_INFINIBAND`.
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (RoCE).
    Ethernet,
    /// A value this header version did not know.
    Unknown(u8),
}

impl LinkLayerRaw {
    /// Decode the raw value.
    pub fn from_raw(v: u8) -> Self {
        match v {
            IBV_LINK_LAYER_UNSPECIFIED => Self::Unspecified,
            IBV_LINK_LAYER_INFINIBAND => Self::InfiniBand,
            IBV_LINK_LAYER_ETHERNET => Self::Ethernet,
            n => Self::Unknown(n),
        }
    }
    /// The front-end's link layer; `None` for a value we do not know.
    pub fn to_api(self) -> Option<LinkLayer> {
        match self {
            Self::Unspecified | Self::InfiniBand => Some(LinkLayer::InfiniBand),
            Self::Ethernet => Some(LinkLayer::Ethernet),
            Self::Unknown(_) => None,
        }
    }
}

/// `enum ibv_mtu` → bytes (`IBV_MTU_256` = 1 … `IBV_MTU_4096` = 5).
pub fn mtu_to_bytes(v: u32) -> Option<u32> {
    match v {
        IBV_MTU_256 => Some(256),
        IBV_MTU_512 => Some(512),
        IBV_MTU_1024 => Some(1024),
        IBV_MTU_2048 => Some(2048),
        IBV_MTU_4096 => Some(4096),
        _ => None,
    }
}

/// Bytes → `enum ibv_mtu`; only the five IB MTUs are valid.
pub fn mtu_from_bytes(bytes: u32) -> Option<u32> {
    match bytes {
        256 => Some(IBV_MTU_256),
        512 => Some(IBV_MTU_512),
        1024 => Some(IBV_MTU_1024),
        2048 => Some(IBV_MTU_2048),
        4096 => Some(IBV_MTU_4096),
        _ => None,
    }
}

/// `enum ibv_qp_state`, as read from `ibv_qp.state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpStateRaw {
    /// A state the front-end knows.
    Known(mlx5_api::QpState),
    /// A value this header version did not know.
    Unknown(u32),
}

impl QpStateRaw {
    /// Decode the raw value.
    pub fn from_raw(v: u32) -> Self {
        use mlx5_api::QpState as S;
        match v {
            IBV_QPS_RESET => Self::Known(S::Reset),
            IBV_QPS_INIT => Self::Known(S::Init),
            IBV_QPS_RTR => Self::Known(S::Rtr),
            IBV_QPS_RTS => Self::Known(S::Rts),
            IBV_QPS_SQD => Self::Known(S::Sqd),
            IBV_QPS_SQE => Self::Known(S::Sqe),
            IBV_QPS_ERR => Self::Known(S::Err),
            n => Self::Unknown(n),
        }
    }
}

/// The front-end's QP state → `enum ibv_qp_state`.
pub fn qp_state_to_raw(s: mlx5_api::QpState) -> u32 {
    use mlx5_api::QpState as S;
    match s {
        S::Reset => IBV_QPS_RESET,
        S::Init => IBV_QPS_INIT,
        S::Rtr => IBV_QPS_RTR,
        S::Rts => IBV_QPS_RTS,
        S::Sqd => IBV_QPS_SQD,
        S::Sqe => IBV_QPS_SQE,
        S::Err => IBV_QPS_ERR,
    }
}

/// `struct ibv_device_attr.fw_ver` (NUL-terminated within 64 bytes).
pub fn c_string(bytes: &[std::os::raw::c_char]) -> String {
    let b: Vec<u8> = bytes.iter().take_while(|&&c| c != 0).map(|&c| c.to_ne_bytes()[0]).collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// A GID as `ibv_devinfo` prints it: eight groups of four hex digits.
pub fn format_gid(gid: &[u8; 16]) -> String {
    gid.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
}

/// A big-endian GUID (`node_guid`) as `xxxx:xxxx:xxxx:xxxx`.
pub fn format_guid(be: u64) -> String {
    let b = u64::from_be(be).to_be_bytes();
    b.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_api::QpState;

    #[test]
    fn mtu_round_trips_and_rejects_the_rest() {
        for (e, b) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            assert_eq!(mtu_to_bytes(e), Some(b));
            assert_eq!(mtu_from_bytes(b), Some(e));
        }
        for bad in [0, 6, 7, 0xff, u32::MAX] {
            assert_eq!(mtu_to_bytes(bad), None);
        }
        for bad in [0, 1, 128, 1500, 4095, 8192, 9000] {
            assert_eq!(mtu_from_bytes(bad), None);
        }
    }

    #[test]
    fn link_layer_decoding() {
        assert_eq!(LinkLayerRaw::from_raw(0).to_api(), Some(LinkLayer::InfiniBand));
        assert_eq!(LinkLayerRaw::from_raw(1).to_api(), Some(LinkLayer::InfiniBand));
        assert_eq!(LinkLayerRaw::from_raw(2).to_api(), Some(LinkLayer::Ethernet));
        assert_eq!(LinkLayerRaw::from_raw(3), LinkLayerRaw::Unknown(3));
        assert_eq!(LinkLayerRaw::from_raw(0xff).to_api(), None);
    }

    #[test]
    fn port_state_decoding() {
        assert_eq!(PortState::from_raw(4), PortState::Active);
        assert_eq!(PortState::from_raw(1), PortState::Down);
        assert_eq!(PortState::from_raw(5), PortState::ActiveDefer);
        assert_eq!(PortState::from_raw(99), PortState::Unknown(99));
        assert_eq!(PortState::from_raw(4).name(), "PORT_ACTIVE");
        assert_eq!(PortState::from_raw(99).name(), "unknown (99)");
    }

    #[test]
    fn qp_state_decoding_round_trips() {
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
        ] {
            assert_eq!(QpStateRaw::from_raw(qp_state_to_raw(s)), QpStateRaw::Known(s));
        }
        // IBV_QPS_UNKNOWN (7) and garbage.
        assert_eq!(QpStateRaw::from_raw(7), QpStateRaw::Unknown(7));
        assert_eq!(QpStateRaw::from_raw(1000), QpStateRaw::Unknown(1000));
    }

    #[test]
    fn formatting() {
        let mut fw = [0 as std::os::raw::c_char; 64];
        for (i, c) in b"16.35.2000".iter().enumerate() {
            fw[i] = *c as std::os::raw::c_char;
        }
        assert_eq!(c_string(&fw), "16.35.2000");
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[15] = 1;
        assert_eq!(format_gid(&gid), "fe80:0000:0000:0000:0000:0000:0000:0001");
        let guid_be = 0x0002_c903_0010_abcd_u64.to_be();
        assert_eq!(format_guid(guid_be), "0002:c903:0010:abcd");
    }
}
