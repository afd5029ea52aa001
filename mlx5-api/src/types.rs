//! Plain values shared by the front-end and the backends: access flags, WQE
//! flags (spec §2.2), QP states (spec §7), port and capability records.

use core::fmt;

use crate::ring::Gid;

bitflags::bitflags! {
    /// Memory-region and QP access rights; the values are `ibv_access_flags`.
    /// Prints by name: `AccessFlags(LOCAL_WRITE | REMOTE_READ)`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct AccessFlags: u32 {
        /// The NIC may write the memory locally (receive buffers, READ sinks, atomic results).
        const LOCAL_WRITE = 1;
        /// Remote RDMA WRITE into the memory.
        const REMOTE_WRITE = 2;
        /// Remote RDMA READ of the memory.
        const REMOTE_READ = 4;
        /// Remote atomics on the memory.
        const REMOTE_ATOMIC = 8;
        /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`).
        const MW_BIND = 0x10;
        /// On-demand paging (`IBV_ACCESS_ON_DEMAND`): the NIC faults pages in on
        /// first use. A fault on an SRQ receive buffer hands the receive back as an
        /// error completion (REMOTE_ABORTED, vendor syndrome 0x93) to post again;
        /// the SEND is retried and lands in the next receive.
        const ON_DEMAND = 0x40;
    }
}

impl AccessFlags {
    /// No right at all.
    pub const NONE: Self = Self::empty();
    /// Local write and all remote rights (not `MW_BIND`, which is a region's only).
    pub const ALL: Self =
        Self::LOCAL_WRITE.union(Self::REMOTE_WRITE).union(Self::REMOTE_READ).union(Self::REMOTE_ATOMIC);
}

/// What a memory key allocated without memory of its own is: a memory window
/// (`ibv_alloc_mw`) or an indirect mkey (`mlx5dv_create_mkey` with
/// `MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT`). A UMR WQE binds or fills it
/// (docs/mlx5-wire-format.md §3.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MkeyKind {
    /// A type-1 memory window: bound to no QP; rebinding replaces the binding.
    Window1,
    /// A type-2 memory window: bound to the QP that posts the bind, freed by
    /// LOCAL_INV or a peer's SEND with invalidate before its next bind.
    Window2,
    /// An indirect mkey of at most `max_entries` KLM entries.
    Indirect {
        /// Most entries one `mr_list` may give it.
        max_entries: u32,
        /// A peer's SEND with invalidate may free it
        /// (`MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE`).
        remote_invalidate: bool,
    },
}

bitflags::bitflags! {
    /// Per-WQE flags, encoded into the ctrl segment's `fm_ce_se` byte (spec §2.2).
    /// Prints by name: `WqeFlags(SIGNALED | FENCE)`.
    ///
    /// ```
    /// use mlx5_api::WqeFlags;
    /// let f = WqeFlags::SIGNALED | WqeFlags::FENCE;
    /// assert_eq!(f.bits(), 0x88); // fm_ce_se: FM = 4 (fence), CE = 2 (CQ update)
    /// assert_eq!(format!("{f:?}"), "WqeFlags(SIGNALED | FENCE)");
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct WqeFlags: u8 {
        /// Generate a CQE on success (CE = 2, `MLX5_WQE_CTRL_CQ_UPDATE`).
        const SIGNALED = 0x08;
        /// Solicited event at the responder (SE).
        const SOLICITED = 0x02;
        /// Fence: wait for prior READ/atomic WQEs (FM = 4, "small and fence", as rdma-core's `IBV_SEND_FENCE`).
        const FENCE = 0x80;
        /// Initiator small fence: wait for prior UMR WQEs (a window bind,
        /// LOCAL_INV, an mkey list) to take effect (FM = 1,
        /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`, what libmlx5 gives the WQE
        /// after a UMR).
        const SMALL_FENCE = 0x20;
    }
}

impl WqeFlags {
    /// No flag: an unsignaled WQE.
    pub const NONE: Self = Self::empty();
    /// Alias of [`WqeFlags::SIGNALED`], the seed library's name.
    pub const COMPLETION: Self = Self::SIGNALED;
}

/// QP states (spec §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created, or reset: no work is accepted.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained (not entered by this library).
    Sqd,
    /// Send queue error (UD): the receive side keeps working.
    Sqe,
    /// Error: outstanding work completes with flush errors.
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

/// Link layer of a port: the one type the front-end, both backends' port
/// queries and the tools use. Prints as `ibv_devinfo` does
/// (`InfiniBand`, `Ethernet`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID (and GID across subnets).
    InfiniBand,
    /// Ethernet: RoCE, addressed by GID and MAC.
    Ethernet,
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        })
    }
}

/// What `ibv_query_port` / `ibv_query_gid` tell about a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (1-based).
    pub port_num: u8,
    /// Base LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID this port sends from (RoCE: the RoCE v2 entry).
    pub gid: Gid,
    /// The index of `gid` in the port's GID table: what address vectors
    /// built for this port must carry as their source GID index.
    pub sgid_index: u8,
    /// The port's MAC address (RoCE; 0 on InfiniBand).
    pub mac: [u8; 6],
    /// InfiniBand or Ethernet.
    pub link_layer: LinkLayer,
    /// Active path MTU in bytes.
    pub active_mtu: u32,
    /// InfiniBand: every address must carry a GRH (`IBV_QPF_GRH_REQUIRED` in
    /// `ibv_port_attr.flags`, set on SR-IOV virtual functions). Address
    /// vectors built for this port then carry one, and RC peers must send
    /// their GID ([`local_info`](crate::RcQp::local_info) includes it).
    pub grh_required: bool,
}

/// Device limits the front-end checks against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Most WQEs per send or receive queue (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Most scatter/gather entries per WQE (`max_sge`).
    pub max_sge: u32,
    /// Most CQEs per CQ (`max_cqe`).
    pub max_cqe: u32,
    /// Maximum send WQE size in bytes (`max_sq_desc_sz`), at most 1008 (63 DS).
    pub max_wqe_sz_sq: u32,
    /// BlueFlame half-register size when the device reports one for all QPs
    /// (the simulator); 0 when it is per QP or unknown (hardware: each QP's
    /// `QpResources::bf_size` is what the send queue uses).
    pub bf_size: u32,
    /// Most outstanding RDMA READs / atomics per QP (`max_qp_rd_atom`):
    /// `ConnectParams::{max_rd_atomic, max_dest_rd_atomic}` are clamped to it.
    pub max_rd_atomic: u8,
    /// The dynamically connected transport is available (DCI, DCT); a
    /// ConnectX-4 Lx has none: `create_dci` / `create_dct` are then
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    pub dc: bool,
}
