//! The static `Backend` trait: what a backend (the simulator or ConnectX
//! hardware through mlx5dv) hands the generic front-end, mirroring what
//! `mlx5dv_init_obj` returns on hardware (spec §1.5–1.8), plus the doorbell
//! write itself (spec §1.6–1.7).
//!
//! Everything else — WQE encoding, ring bookkeeping, wr-id tracking and CQE
//! polling — is generic code in this crate, shared by every backend.

use crate::error::Result;
use crate::ring::Mmio;

use crate::connect::RemoteQpInfo;
use crate::types::{AccessFlags, DeviceCaps, PortInfo, QpState};

/// Raw CQ resources (`struct mlx5dv_cq`).
#[derive(Clone, Copy, Debug)]
pub struct CqResources {
    /// CQE ring: `cqe_cnt` entries of `cqe_size` bytes.
    pub buf: *mut u8,
    /// Number of CQEs, a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// CQ doorbell record: word 0 set_ci, word 1 arm (BE32 each).
    pub dbrec: *mut u32,
    /// The CQ number.
    pub cqn: u32,
    /// The UAR page whose offset 0x20 takes the arm doorbell (`cq_uar`).
    pub cq_uar: *mut u8,
}

/// CQ creation attributes handed to the backend (`mlx5dv_create_cq`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CqCreate {
    /// Entries requested (the backend rounds up as rdma-core does).
    pub cqe: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// CQE compression with this responder mini-CQE layout
    /// ([`crate::ring::mini_format`] value).
    pub compression: Option<u32>,
}

/// Raw QP resources (`struct mlx5dv_qp`).
#[derive(Debug)]
pub struct QpResources<U> {
    /// The QP number.
    pub qpn: u32,
    /// SQ ring: `sq_wqe_cnt` WQEBBs of 64 bytes.
    pub sq_buf: *mut u8,
    /// Number of WQEBBs, a power of two.
    pub sq_wqe_cnt: u32,
    /// RQ ring: `rq_wqe_cnt` WQEs of `rq_stride` bytes (may be empty).
    pub rq_buf: *mut u8,
    /// Receive queue WQEs (a power of two; 0: none).
    pub rq_wqe_cnt: u32,
    /// Bytes per receive WQE (a power of two).
    pub rq_stride: u32,
    /// QP doorbell record: word 0 RQ counter, word 1 SQ counter (BE32).
    pub dbrec: *mut u32,
    /// How doorbells reach the QP's register.
    pub uar: U,
    /// The register (`bf.reg`). QPs that share a register report the same
    /// address; the front-end keeps one BlueFlame toggle per register.
    pub bf_reg: *mut u8,
    /// BlueFlame half size (`bf.size`), 0 when the register is doorbell-only.
    pub bf_size: u32,
}

/// Queue sizes requested at QP creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue entries.
    pub max_send_wr: u32,
    /// Receive queue entries.
    pub max_recv_wr: u32,
    /// SGEs per send WQE.
    pub max_send_sge: u32,
    /// SGEs per receive WQE.
    pub max_recv_sge: u32,
    /// Inline bytes per send WQE.
    pub max_inline_data: u32,
}

/// Transport of a QP to create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QpKind {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
    /// DC initiator (send side of Dynamically Connected), `mlx5dv_create_qp` with `MLX5DV_DCTYPE_DCI`.
    Dci,
    /// DC target (receive side, on an SRQ), `MLX5DV_DCTYPE_DCT`.
    Dct,
}

/// Raw SRQ resources (`struct mlx5dv_srq`).
#[derive(Clone, Copy, Debug)]
pub struct SrqResources {
    /// The SRQ number.
    pub srqn: u32,
    /// `wqe_cnt` WQEs of `stride` bytes; the front-end initialises the
    /// next-WQE-index list (spec §4.3).
    pub buf: *mut u8,
    /// WQEs in the ring (a power of two).
    pub wqe_cnt: u32,
    /// Bytes per WQE (a power of two).
    pub stride: u32,
    /// Word 0: BE count of WQEs posted.
    pub dbrec: *mut u32,
}

/// SRQ creation attributes.
#[derive(Clone, Debug)]
pub struct SrqCreate {
    /// WQEs (power of two; one more than the usable capacity).
    pub wqe_cnt: u32,
    /// Bytes per WQE (power of two, >= 32).
    pub stride: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// CQE version 1 user index (reported in each CQE).
    pub user_index: u32,
}

/// Creation attributes handed to the backend.
#[derive(Clone, Debug)]
pub struct QpCreate {
    /// The transport.
    pub kind: QpKind,
    /// The queue sizes asked for.
    pub caps: QpCaps,
    /// SQ size in WQEBBs (power of two), computed by [`crate::sizing`].
    pub sq_wqe_cnt: u32,
    /// RQ WQE count (power of two) and stride, computed by [`crate::sizing`].
    pub rq_wqe_cnt: u32,
    /// Bytes per receive WQE (a power of two).
    pub rq_stride: u32,
    /// CQE version 1 user index (reported in every CQE's `srqn_uidx`).
    pub user_index: u32,
    /// DCT: the DC access key checked against every initiator's AV.
    pub dc_key: u64,
    /// A register of its own, shared with no other QP (rdma-core's thread
    /// domain): for a send queue driven from another thread.
    pub dedicated_uar: bool,
    /// Scatter-to-CQE (spec §5.7): small receives and, for RC, small READ
    /// responses and atomic results may arrive in the CQE.
    pub scatter_to_cqe: bool,
}

/// One step of the QP state machine with the attributes it needs (spec §7).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum QpTransition {
    /// RESET→INIT: port, P_Key index 0, responder access rights (RC, DCT),
    /// Q_Key (UD).
    Init {
        /// The port number.
        port: u8,
        /// Responder access rights (RC, DCT).
        access: AccessFlags,
        /// The Q_Key (UD).
        qkey: Option<u32>,
    },
    /// INIT→RTR: remote path (RC only) and receive parameters.
    Rtr {
        /// The peer (RC only).
        remote: Option<RemoteQpInfo>,
        /// Path MTU in bytes.
        path_mtu: u32,
        /// Responder RNR NAK timer code.
        min_rnr_timer: u8,
        /// Outstanding READs / atomics as responder.
        max_dest_rd_atomic: u8,
        /// The path's service level (RC).
        sl: u8,
    },
    /// RTR→RTS: send parameters.
    Rts {
        /// Local ACK timeout exponent.
        timeout: u8,
        /// Transport retries.
        retry_cnt: u8,
        /// RNR retries (7: forever).
        rnr_retry: u8,
        /// Start PSN of the send queue.
        sq_psn: u32,
        /// Outstanding READs / atomics as requester.
        max_rd_atomic: u8,
    },
    /// SQE→RTS: a UD QP sends again after a send error (no attributes).
    Recover,
    /// Any→ERR or Any→RESET.
    To(QpState),
}

/// A backend: the simulator (`mlx5_api::sim::Sim`) or ConnectX hardware.
///
/// All object types own the backend object and destroy it on drop; the
/// front-end keeps them in an order that makes destruction correct (QPs before
/// CQs, MRs and QPs before their PD).
pub trait Backend: Sized + 'static {
    /// A device that can be opened.
    type Device;
    /// An opened device (`ibv_context`).
    type Context;
    /// A protection domain (`ibv_pd`).
    type Pd;
    /// A memory registration (`ibv_mr`).
    type Mr;
    /// A completion queue (`ibv_cq`).
    type Cq;
    /// A queue pair (`ibv_qp`, or a DCT).
    type Qp;
    /// A shared receive queue (`ibv_srq`).
    type Srq;
    /// How doorbell and BlueFlame writes reach a QP's register (real MMIO
    /// on hardware; the simulator's register otherwise).
    type Uar: Mmio;
    /// A completion channel (`ibv_comp_channel`).
    type Channel;

    /// The device's name (`mlx5_0`, `sim0`).
    fn device_name(dev: &Self::Device) -> String;
    /// Open the device (`ibv_open_device`).
    fn open(dev: &Self::Device) -> Result<Self::Context>;
    /// A port's addressing and MTU (`ibv_query_port`, `ibv_query_gid`).
    fn query_port(ctx: &Self::Context, port: u8) -> Result<PortInfo>;
    /// The device's limits (`ibv_query_device`).
    fn device_caps(ctx: &Self::Context) -> DeviceCaps;

    /// Allocate a protection domain (`ibv_alloc_pd`).
    fn alloc_pd(ctx: &Self::Context) -> Result<Self::Pd>;
    /// The address vector the device uses to reach `remote` from `port`
    /// (`ibv_create_ah`, then the 48-byte `mlx5_wqe_av` of
    /// `mlx5dv_init_obj(MLX5DV_OBJ_AH)`): on RoCE the kernel resolves the
    /// next hop's MAC (a router's, across subnets) and picks the port's
    /// RoCE v2 GID. The default builds it from the port's description
    /// ([`AddressVector::to_peer`](crate::AddressVector::to_peer)), which is
    /// what a fabric without routers resolves to.
    fn create_av(
        ctx: &Self::Context,
        pd: &Self::Pd,
        port: u8,
        remote: &crate::connect::RemoteQpInfo,
    ) -> Result<crate::AddressVector> {
        let _ = pd;
        crate::AddressVector::to_peer(&Self::query_port(ctx, port)?, remote, 0)
    }
    /// Register `[addr, addr+len)`; returns the object and (lkey, rkey).
    ///
    /// # Safety
    /// The memory must stay valid until the returned object is dropped.
    unsafe fn reg_mr(
        ctx: &Self::Context,
        pd: &Self::Pd,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<(Self::Mr, u32, u32)>;
    /// Allocate a memory window or an indirect mkey in `pd`, free (not yet
    /// bound): its key. Backends without them refuse (the default).
    fn alloc_mkey(ctx: &Self::Context, pd: &Self::Pd, kind: crate::MkeyKind) -> Result<u32> {
        let _ = (ctx, pd, kind);
        Err(crate::Error::Unsupported(crate::error::Unsupported::Mkeys))
    }
    /// Free the memory window or indirect mkey of `key` ([`Backend::alloc_mkey`]).
    fn dealloc_mkey(ctx: &Self::Context, key: u32) -> Result<()> {
        let _ = (ctx, key);
        Err(crate::Error::Unsupported(crate::error::Unsupported::Mkeys))
    }
    /// Create a CQ; its events go to `channel`.
    fn create_cq(
        ctx: &Self::Context,
        attr: &CqCreate,
        channel: Option<&Self::Channel>,
    ) -> Result<(Self::Cq, CqResources)>;
    /// How the arm doorbell reaches the CQ's UAR page.
    fn cq_uar(cq: &Self::Cq) -> &Self::Uar;
    /// Whether the device put the CQ in error (overrun: an async CQ error).
    /// Called by waiters when idle, never on the poll path.
    fn cq_in_error(_cq: &Self::Cq) -> bool {
        false
    }
    /// Whether the CQ's device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`).
    /// Called by waiters when idle, never on the poll path.
    fn device_fatal(_cq: &Self::Cq) -> bool {
        false
    }
    /// A descriptor that becomes readable when an async event is pending
    /// for the CQ's device (waiters sleep on it too), if the backend has one.
    fn cq_async_fd(_cq: &Self::Cq) -> Option<std::os::fd::RawFd> {
        None
    }
    /// The oldest pending asynchronous event of the context, without
    /// blocking; consumed and acknowledged.
    fn async_event(ctx: &Self::Context) -> Result<Option<crate::AsyncEvent>>;
    /// Why the error completion of WQE `wqe_counter` of QP `qpn` on `cq`'s device was
    /// written, beyond its syndrome (the simulator names the failed check); `None` on
    /// hardware, where the CQE is all there is.
    fn failure_reason(_cq: &Self::Cq, _qpn: u32, _wqe_counter: u16) -> Option<String> {
        None
    }
    /// Whether nothing completes unless the poller drives the device (the
    /// deterministic simulator): waits then poll instead of blocking.
    fn cq_needs_progress(_cq: &Self::Cq) -> bool {
        false
    }
    /// A completion channel.
    fn create_channel(ctx: &Self::Context) -> Result<Self::Channel>;
    /// Its file descriptor: readable while events are pending.
    fn channel_fd(ch: &Self::Channel) -> std::os::fd::RawFd;
    /// The oldest pending event (CQ number), without blocking; consumed and
    /// acknowledged.
    fn get_cq_event(ch: &Self::Channel) -> Result<Option<u32>>;
    /// Whether events arrive only when the channel's owner drives the
    /// device, and a step of that (the deterministic simulator).
    fn channel_progress(_ch: &Self::Channel) -> bool {
        false
    }
    /// Create an SRQ of `attr.wqe_cnt` WQEs (`mlx5dv_init_obj` gives its ring).
    fn create_srq(ctx: &Self::Context, pd: &Self::Pd, attr: &SrqCreate) -> Result<(Self::Srq, SrqResources)>;
    /// Create a QP. `send_cq` is `None` for a DCT; `srq` replaces the own
    /// receive queue (required for a DCT).
    fn create_qp(
        ctx: &Self::Context,
        pd: &Self::Pd,
        send_cq: Option<&Self::Cq>,
        recv_cq: &Self::Cq,
        srq: Option<&Self::Srq>,
        attr: &QpCreate,
    ) -> Result<(Self::Qp, QpResources<Self::Uar>)>;
    /// Move a QP one step through the state machine (`ibv_modify_qp`).
    fn modify_qp(ctx: &Self::Context, qp: &Self::Qp, t: &QpTransition) -> Result<()>;
    /// The DCT number of a DCT, assigned by the device at INIT→RTR (read
    /// live: it does not exist before).
    fn dct_number(ctx: &Self::Context, qp: &Self::Qp) -> Result<u32>;

    /// Called by `poll` when the CQ had nothing: the simulator advances its
    /// virtual clock (RNR retries); hardware does nothing.
    #[inline(always)]
    fn cq_idle(_cq: &Self::Cq) {}
}
