//! Plain values shared by the front-end and the backends: access flags, WQE
//! flags (spec §2.2), QP states (spec §7), port and capability records.

use std::ops::{BitOr, BitOrAssign};

macro_rules! flag_type {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$fm:meta])* $f:ident = $v:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name($t);
        impl $name {
            $($(#[$fm])* pub const $f: Self = Self($v);)*
            /// No flag set.
            pub const NONE: Self = Self(0);
            /// The raw bits.
            #[inline(always)]
            pub const fn bits(self) -> $t { self.0 }
            /// Build from raw bits (unknown bits are kept).
            #[inline(always)]
            pub const fn from_bits(bits: $t) -> Self { Self(bits) }
            /// Whether every bit of `other` is set.
            #[inline(always)]
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
        }
        impl BitOr for $name {
            type Output = Self;
            #[inline(always)]
            fn bitor(self, rhs: Self) -> Self { Self(self.0 | rhs.0) }
        }
        impl BitOrAssign for $name {
            #[inline(always)]
            fn bitor_assign(&mut self, rhs: Self) { self.0 |= rhs.0 }
        }
    };
}

flag_type! {
    /// Memory-region and QP access rights; the values are `ibv_access_flags`.
    AccessFlags: u32 {
        /// The NIC may write the memory locally (receive buffers, READ sinks, atomic results).
        LOCAL_WRITE = 1;
        /// Remote RDMA WRITE into the memory.
        REMOTE_WRITE = 2;
        /// Remote RDMA READ of the memory.
        REMOTE_READ = 4;
        /// Remote atomics on the memory.
        REMOTE_ATOMIC = 8;
    }
}

impl AccessFlags {
    /// Everything: local write and all remote rights.
    pub const ALL: Self = Self(1 | 2 | 4 | 8);
}

flag_type! {
    /// Per-WQE flags, encoded into the ctrl segment's `fm_ce_se` byte (spec §2.2).
    WqeFlags: u8 {
        /// Generate a CQE on success (CE = 2, `MLX5_WQE_CTRL_CQ_UPDATE`).
        SIGNALED = 0x08;
        /// Alias of [`WqeFlags::SIGNALED`], the seed library's name.
        COMPLETION = 0x08;
        /// Solicited event at the responder (SE).
        SOLICITED = 0x02;
        /// Fence: wait for prior READ/atomic WQEs (FM = 4, "small and fence", as rdma-core's `IBV_SEND_FENCE`).
        FENCE = 0x80;
    }
}

/// QP states (spec §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
}

impl QpState {
    /// Whether the mlx5 transition table (kernel `optab`, spec §7) allows `self -> to`.
    pub fn can_transition_to(self, to: QpState) -> bool {
        use QpState::*;
        matches!(
            (self, to),
            (_, Reset)
                | (_, Err)
                | (Reset, Init)
                | (Init, Init)
                | (Init, Rtr)
                | (Rtr, Rts)
                | (Rts, Rts)
                | (Sqd, Rts)
                | (Sqe, Rts)
        )
    }
}

/// Link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
}

/// What `ibv_query_port` / `ibv_query_gid` tell about a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub port_num: u8,
    pub lid: u16,
    /// The GID this port sends from (RoCE: the RoCE v2 entry).
    pub gid: [u8; 16],
    /// The index of `gid` in the port's GID table: what address vectors
    /// built for this port must carry as their source GID index.
    pub sgid_index: u8,
    pub mac: [u8; 6],
    pub link_layer: LinkLayer,
    /// Active path MTU in bytes.
    pub active_mtu: u32,
}

/// Device limits the front-end checks against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    /// Maximum send WQE size in bytes (`max_sq_desc_sz`), at most 1008 (63 DS).
    pub max_wqe_sz_sq: u32,
    /// BlueFlame half-register size when the device reports one for all QPs
    /// (the simulator); 0 when it is per QP or unknown (hardware: each QP's
    /// `QpResources::bf_size` is what the send queue uses).
    pub bf_size: u32,
    pub max_rd_atomic: u8,
}

/// Everything a peer needs to connect an RC QP to ours (exchanged out of band).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteQpInfo {
    pub qpn: u32,
    /// Destination LID (InfiniBand).
    pub lid: u16,
    /// Destination GID; `Some` selects GRH/RoCE addressing.
    pub gid: Option<[u8; 16]>,
    /// Destination MAC (RoCE).
    pub mac: Option<[u8; 6]>,
    /// Start packet sequence number of the peer's send queue.
    pub psn: u32,
}

impl RemoteQpInfo {
    /// An InfiniBand peer, addressed by LID.
    pub fn ib(qpn: u32, lid: u16) -> Self {
        RemoteQpInfo { qpn, lid, gid: None, mac: None, psn: 0 }
    }
    /// A RoCE v2 peer, addressed by GID and MAC.
    pub fn roce(qpn: u32, gid: [u8; 16], mac: [u8; 6]) -> Self {
        RemoteQpInfo { qpn, lid: 0, gid: Some(gid), mac: Some(mac), psn: 0 }
    }
}

/// Connection parameters for RESET→INIT→RTR→RTS (spec §7 attribute table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    pub port: u8,
    /// Remote operations this QP accepts as responder.
    pub access: AccessFlags,
    /// Path MTU in bytes (256..4096).
    pub path_mtu: u32,
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (4.096 µs · 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    /// RNR retries; 7 means retry forever.
    pub rnr_retry: u8,
    pub sq_psn: u32,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectParams {
    fn default() -> Self {
        ConnectParams {
            port: 1,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
            path_mtu: 1024,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}
