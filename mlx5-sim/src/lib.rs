//! Bit-accurate software model of an NVIDIA mlx5 (ConnectX) RDMA NIC (spec §1–§9).
//!
//! The model sees only what real hardware sees: WQE bytes in send-queue ring memory,
//! receive WQEs in the receive ring or an SRQ, doorbell records and doorbell (UAR / BlueFlame)
//! writes. It executes RC, UD and DC operations between simulated hosts of one [`Fabric`] and writes
//! real 64-byte CQEs (owner bit, opcode, syndromes) into CQ ring memory.
//!
//! Simplification: both sides of an RC operation are executed by the requester's NIC,
//! holding both hosts' locks (one lock per host; hosts meet only where a message
//! crosses), when the requester's WQE is processed (see README.md). The
//! fabric is perfect unless faults are set ([`Fabric::set_faults`]): then RC and DC
//! messages travel as packets, retransmitted on a simulated clock and executed exactly
//! once, and UD datagrams may be lost. [`Fabric::start_capture`] writes the packets to a
//! pcap file.

#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod arena;
mod completer;
mod cq;
pub mod dissect;
pub mod dma;
mod engine;
mod fabric;
mod fabric_net;
mod fixed;
mod host;
mod hosts;
mod idmap;
mod lean;
mod local;
mod lossy;
mod mem;
mod mkey;
mod net;
mod psn;
mod qp;
pub mod registry;
mod requester;
mod responder;
mod route;
mod shared;
mod slots;
mod srq;
mod train;
mod udp_wire;
mod umr;
mod why;
pub mod wire;
mod wires;
mod wqe;

pub use cq::{MiniCqeFormat, MAX_SESSION};
pub use fabric::{Fabric, ForkGuard, Nic};
pub use mkey::MkeyKind;
pub use net::noise as wire_noise;
pub use net::udp::WireDrops;
pub use net::LinkFaults;
pub use udp_wire::LOSS_ENV as WIRE_LOSS_ENV;

/// How the NICs of a fabric process doorbells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecMode {
    /// UAR writes are processed synchronously in the caller's thread; virtual clock; no threads.
    #[default]
    Deterministic,
    /// Each NIC has its own thread fed by a bounded queue of UAR writes. Out
    /// of work, the thread spins briefly, then yields, then parks; a doorbell
    /// unparks it only when it is parked. A poller that finds its CQ empty
    /// handles what waits in the queue itself when the NIC thread is not at
    /// work ([`Nic::help`], called by the front-end's poll), so progress does
    /// not wait for the scheduler when busy processes share the cores.
    /// Whoever handles them, doorbells are handled one at a time, holding the
    /// NIC's queue, in the order they were rung. Each host has a lock of its
    /// own: NIC threads whose messages share no host run in parallel.
    ///
    /// A doorbell the application waits for runs at once in the poster's
    /// thread, as every doorbell of [`ExecMode::Deterministic`] does: one rung
    /// while nothing is queued, nobody handles the queue, the NIC thread is
    /// not paused ([`Nic::set_thread_paused`]) and the driver has taken every
    /// CQE of the QP's send CQ (a pingpong). A NIC thread would cost such a
    /// doorbell a cache-line trip to its core and back. An application with
    /// completions still to take has other work, so its doorbells are queued
    /// and the NIC thread runs beside it; after a doorbell was queued for that
    /// reason, the poster looks again only once a poller has found its CQ
    /// empty with nothing queued. The poster's thread never waits for a host:
    /// a WQE that needs a busy host (or a poster that holds its own,
    /// [`Nic::hold`]) is left to the NIC thread.
    /// [`NicStats::doorbells_in_poster`] counts these.
    Threaded,
    /// Each NIC has its own thread that notices work from memory alone, as
    /// a NIC does when a foreign executor (a C program, another thread, a
    /// GPU kernel) rings it: doorbell-record advances and 8-byte / 64-byte
    /// stores into its UAR pages, which are ordinary memory. The thread
    /// spins briefly, then yields, then sleeps with a growing period (up to
    /// 1 ms); [`Nic::kick`] wakes it at once. Memory keeps only the last
    /// store to each register half: when the thread gets no core for longer
    /// than a poster takes to write a half twice, it sees only the last of
    /// them, and the half alternation check may count a `bf_offset_mismatch`
    /// for a poster that alternated correctly (the work itself still runs:
    /// the send queue runs to its doorbell record).
    Watch,
}

/// Byte order of the 8-byte atomic operand in remote memory and of the result written to
/// the local SGE (spec §6.5, `atomic_req_8B_endianness_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtomicEndianness {
    /// Mode 1: host byte order (what upstream Linux configures).
    #[default]
    Host,
    /// Mode 0: big-endian.
    BigEndian,
}

/// Fabric-wide configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FabricConfig {
    /// Execution mode.
    pub mode: ExecMode,
    /// Atomic byte order.
    pub atomic_endianness: AtomicEndianness,
    /// Every WQE takes the general path: the lean path for the common RC RDMA WRITE,
    /// RDMA READ and SEND on the direct wire is off. Results are the same either way (a
    /// property test compares the two); this is for that comparison and for measuring.
    pub general_path_only: bool,
}

/// Link layer of a simulated port: the device model's own copy (the model
/// imports nothing from the front-end). Front-end users meet
/// `mlx5::LinkLayer`, which converts to and from this one with `From`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand: RC paths are resolved by DLID.
    InfiniBand,
    /// RoCE: RC paths are resolved by destination GID.
    Ethernet,
}

/// Identity of one simulated host (one single-port NIC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Device name (e.g. `mlx5_0`).
    pub name: String,
    /// Port LID (IB), 0 on RoCE.
    pub lid: u16,
    /// Port GID 0.
    pub gid: [u8; 16],
    /// Port MAC (RoCE), 0 on IB.
    pub mac: [u8; 6],
    /// Link layer.
    pub link_layer: LinkLayer,
    /// The capabilities the NIC reports and enforces ([`NicCaps::default`]: a
    /// ConnectX-5-like device with DC).
    pub caps: NicCaps,
    /// InfiniBand: the port requires a GRH on every address (`IBV_QPF_GRH_REQUIRED`,
    /// as on SR-IOV virtual functions): RC paths without a destination GID are
    /// refused at INIT→RTR, UD and DC address vectors without a GRH are dropped.
    pub grh_required: bool,
}

impl HostConfig {
    /// The same host with other capabilities (e.g. no DC, like a ConnectX-4 Lx).
    pub fn with_caps(mut self, caps: NicCaps) -> Self {
        self.caps = caps;
        self
    }

    /// The same host on a port that requires a GRH (an InfiniBand SR-IOV VF).
    pub fn requiring_grh(mut self) -> Self {
        self.grh_required = true;
        self
    }

    /// An InfiniBand host with link-local GID `fe80::<lid>` and MAC 0.
    pub fn infiniband(name: &str, lid: u16) -> Self {
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[14..16].copy_from_slice(&lid.to_be_bytes());
        HostConfig {
            name: name.to_string(),
            lid,
            gid,
            mac: [0; 6],
            link_layer: LinkLayer::InfiniBand,
            caps: NicCaps::default(),
            grh_required: false,
        }
    }

    /// A RoCE v2 host with GID `::ffff:a.b.c.d` and LID 0.
    pub fn roce(name: &str, ipv4: [u8; 4], mac: [u8; 6]) -> Self {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..16].copy_from_slice(&ipv4);
        HostConfig {
            name: name.to_string(),
            lid: 0,
            gid,
            mac,
            link_layer: LinkLayer::Ethernet,
            caps: NicCaps::default(),
            grh_required: false,
        }
    }
}

/// Device capabilities (the subset of `ibv_device_attr` / HCA caps the driver needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicCaps {
    /// Max SQ/RQ entries.
    pub max_qp_wr: u32,
    /// Max SGEs per WQE.
    pub max_sge: u32,
    /// Max CQ entries, as `ibv_query_device` reports it: `(1 << log_max_cq_sz) - 1`
    /// (rdma-core allocates `cqe + 1` rounded up to a power of two).
    pub max_cqe: u32,
    /// Max send WQE size in bytes (63 DS).
    pub max_wqe_sz_sq: u32,
    /// BlueFlame register half size.
    pub bf_size: u32,
    /// Max outstanding RDMA READ/atomic per QP (`max_qp_rd_atom`); more at
    /// INIT→RTR / RTR→RTS is refused, as the kernel does.
    pub max_rd_atomic: u8,
    /// The dynamically connected transport (DCI, DCT) is available (not on a
    /// ConnectX-4 Lx): without it, creating a DCI or DCT is refused.
    pub dc: bool,
}

impl Default for NicCaps {
    fn default() -> Self {
        NicCaps {
            max_qp_wr: 32768,
            max_sge: 30,
            max_cqe: 4_194_303,
            max_wqe_sz_sq: 1008,
            bf_size: 256,
            max_rd_atomic: 16,
            dc: true,
        }
    }
}

/// What `ibv_query_device`/`ibv_query_port` would report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicInfo {
    /// Device name.
    pub name: String,
    /// Port number (always 1).
    pub port_num: u8,
    /// LID.
    pub lid: u16,
    /// GID 0.
    pub gid: [u8; 16],
    /// MAC.
    pub mac: [u8; 6],
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active MTU in bytes (4096 IB, 1024 RoCE).
    pub active_mtu: u32,
    /// The port requires a GRH (see [`HostConfig::grh_required`]).
    pub grh_required: bool,
    /// Capabilities.
    pub caps: NicCaps,
}

/// `ibv_access_flags` values used for MRs and QP access flags.
pub mod access {
    /// Local write.
    pub const LOCAL_WRITE: u32 = 1;
    /// Remote write.
    pub const REMOTE_WRITE: u32 = 2;
    /// Remote read.
    pub const REMOTE_READ: u32 = 4;
    /// Remote atomic.
    pub const REMOTE_ATOMIC: u32 = 8;
    /// Memory windows may be bound to the MR (`IBV_ACCESS_MW_BIND`).
    pub const MW_BIND: u32 = 0x10;
    /// On-demand paging (`IBV_ACCESS_ON_DEMAND`): the MR's pages are not in the NIC's
    /// page table until an SRQ receive first uses them, which faults them in
    /// (`MrTable::odp_fault`; docs/mlx5-wire-format.md §3.7).
    pub const ON_DEMAND: u32 = 0x40;

    /// The names of the bits of `bits` ("REMOTE_WRITE and REMOTE_READ").
    pub fn names(bits: u32) -> String {
        let all = [
            (LOCAL_WRITE, "LOCAL_WRITE"),
            (REMOTE_WRITE, "REMOTE_WRITE"),
            (REMOTE_READ, "REMOTE_READ"),
            (REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (MW_BIND, "MW_BIND"),
            (ON_DEMAND, "ON_DEMAND"),
        ];
        let v: Vec<&str> = all.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| *n).collect();
        if v.is_empty() {
            "no right".into()
        } else {
            v.join(" and ")
        }
    }
}

/// Keys of a registered MR (the model returns the same value for both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// The driver's view of a CQ (like `struct mlx5dv_cq`).
#[derive(Debug, Clone, Copy)]
pub struct CqResources {
    /// CQ number.
    pub cqn: u32,
    /// Ring of `cqe_cnt * cqe_size` bytes, 4096-aligned, owned by the model.
    pub buf: *mut u8,
    /// Number of entries (power of two).
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// Two BE32 words: `[0]` = consumer index (set_ci), `[1]` = arm word.
    pub dbrec: *mut u32,
    /// The page whose offset 0x20 takes the CQ doorbell (arm requests) in watch mode
    /// (`mlx5dv_cq.cq_uar`); other modes use [`Nic::cq_uar_write64`].
    pub cq_uar: *mut u8,
}

/// CQ creation attributes ([`Nic::create_cq_ex`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqInitAttr {
    /// Entries, a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// CQE compression with this responder mini-CQE format (spec §5.8); 64-byte CQEs only.
    pub compression: Option<MiniCqeFormat>,
    /// Completion channel that gets this CQ's events.
    pub channel: Option<u32>,
}

impl Default for CqInitAttr {
    fn default() -> Self {
        CqInitAttr { cqe_cnt: 256, cqe_size: 64, compression: None, channel: None }
    }
}

// SAFETY: the pointers refer to model-owned memory that stays valid until destroy_cq; the
// struct is plain data, like mlx5dv_cq.
unsafe impl Send for CqResources {}
// SAFETY: as above.
unsafe impl Sync for CqResources {}

/// Rings in the program's own memory ([`Nic::create_qp_in`], [`Nic::create_cq_in`]): the
/// buffer and doorbell record a driver such as libmlx5 allocates itself and hands to the
/// kernel in its create command's udata (`buf_addr`, `db_addr`).
#[derive(Debug, Clone, Copy)]
pub struct UserRings {
    /// The ring (CQ: the entries; QP: RQ at offset 0, then the SQ), 64-byte aligned.
    pub buf: *mut u8,
    /// The doorbell record (two big-endian 32-bit words), 4-byte aligned.
    pub dbrec: *mut u8,
}

/// QP transport type.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram (SEND / SEND_IMM with an address vector per WQE).
    Ud,
    /// DC initiator: send queue only; every WQE carries an address vector naming a DCT.
    Dci,
    /// DC target: no send queue, no receive queue; receives from an SRQ. Its number (what
    /// DCIs address) is assigned at INIT→RTR, see [`Nic::dct_number`].
    Dct,
}

/// QP creation attributes.
///
/// Per type: RC and UD use both CQs and either an RQ (`rq_wqe_cnt > 0`) or an SRQ (`srqn`).
/// DCI: SQ only (`rq_wqe_cnt` 0, `srqn` None); `recv_cqn` is ignored (the model stores
/// `send_cqn` there). DCT: `sq_wqe_cnt` 0, `rq_wqe_cnt` 0, `srqn` required, `recv_cqn` gets its
/// receive CQEs; `send_cqn` is ignored (the model stores `recv_cqn` there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain.
    pub pdn: u32,
    /// CQ for send completions.
    pub send_cqn: u32,
    /// CQ for receive completions.
    pub recv_cqn: u32,
    /// SQ size in WQEBBs (power of two).
    pub sq_wqe_cnt: u32,
    /// RQ size in WQEs (power of two, or 0 for no RQ).
    pub rq_wqe_cnt: u32,
    /// RQ stride in bytes (power of two, 16..=1024).
    pub rq_stride: u32,
    /// 24-bit user index reported in CQE `srqn_uidx`.
    pub user_index: u32,
    /// RC, UD or DCT: receive from this SRQ instead of an own RQ (`rq_wqe_cnt` must then be
    /// 0). Required for a DCT.
    pub srqn: Option<u32>,
    /// DCT: the DC access key DCIs must present in their address vector (ignored otherwise).
    pub dc_key: u64,
    /// The device context ([`Nic::open_context`]) whose registers the QP uses; 0 is the
    /// host's default context.
    pub context: u32,
    /// A doorbell register of its own (rdma-core's thread domain) instead of one of the
    /// context's 16: shared with no other QP.
    pub dedicated_uar: bool,
    /// Scatter-to-CQE (spec §5.7): small receives (RC; DCT with 128-byte CQEs) and, for
    /// RC, small READ responses and atomic results of signaled WQEs land in the CQE.
    pub scatter_to_cqe: bool,
}

impl Default for QpInitAttr {
    /// An RC QP with no queues and no CQs (fill in what you need).
    fn default() -> Self {
        QpInitAttr {
            qp_type: QpType::Rc,
            pdn: 0,
            send_cqn: 0,
            recv_cqn: 0,
            sq_wqe_cnt: 0,
            rq_wqe_cnt: 0,
            rq_stride: 0,
            user_index: 0,
            srqn: None,
            dc_key: 0,
            context: 0,
            dedicated_uar: false,
            scatter_to_cqe: false,
        }
    }
}

/// SRQ creation attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// Protection domain.
    pub pdn: u32,
    /// Number of WQEs (power of two, 1..=32768).
    pub wqe_cnt: u32,
    /// WQE stride in bytes (power of two, 32..=1024): 16-byte next segment + scatter entries.
    pub stride: u32,
    /// 24-bit user index (reported by QP CQEs; kept for the driver's bookkeeping).
    pub user_index: u32,
}

/// The driver's view of an SRQ (like `struct mlx5dv_srq`).
#[derive(Debug, Clone, Copy)]
pub struct SrqResources {
    /// SRQ number.
    pub srqn: u32,
    /// `wqe_cnt * stride` zeroed bytes, 4096-aligned. The driver initialises the free list
    /// (`next_wqe_index` of WQE i = i+1) before posting; the device starts at index 0.
    pub buf: *mut u8,
    /// Number of WQEs.
    pub wqe_cnt: u32,
    /// Stride in bytes.
    pub stride: u32,
    /// Doorbell record: word 0 = BE32 whose low 16 bits count the WQEs posted (spec §4.3).
    pub dbrec: *mut u32,
}

// SAFETY: plain data describing model-owned memory valid until destroy_srq.
unsafe impl Send for SrqResources {}
// SAFETY: as above.
unsafe impl Sync for SrqResources {}

/// The driver's view of a QP (like `struct mlx5dv_qp`).
#[derive(Debug, Clone, Copy)]
pub struct QpResources {
    /// QP number.
    pub qpn: u32,
    /// Send ring (`sq_wqe_cnt * 64` bytes), inside the QP buffer after the RQ.
    pub sq_buf: *mut u8,
    /// SQ size in WQEBBs.
    pub sq_wqe_cnt: u32,
    /// Receive ring at offset 0 of the QP buffer (4096-aligned).
    pub rq_buf: *mut u8,
    /// RQ size in WQEs.
    pub rq_wqe_cnt: u32,
    /// RQ stride in bytes.
    pub rq_stride: u32,
    /// Doorbell record: `[0]` = RQ counter, `[1]` = SQ counter, both BE32.
    pub dbrec: *mut u32,
    /// UAR register index to pass to `uar_write64` / `uar_write_bf`.
    pub uar_index: u32,
    /// The register in its UAR page (`bf.reg`: page + 0x800 + k·0x200): two BlueFlame
    /// halves of `bf_size` bytes, ordinary memory the NIC watches in
    /// [`ExecMode::Watch`] (and scans at every [`Nic::tick`]). QPs sharing a register
    /// report the same address.
    pub bf_reg: *mut u8,
    /// BlueFlame half size (256).
    pub bf_size: u32,
}

// SAFETY: plain data describing model-owned memory valid until destroy_qp.
unsafe impl Send for QpResources {}
// SAFETY: as above.
unsafe impl Sync for QpResources {}

/// QP states (spec §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Reset.
    Reset,
    /// Initialized.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error.
    Err,
}

/// Remote end of an RC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RcPath {
    /// Destination QPN.
    pub dest_qpn: u32,
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Destination GID (RoCE; required there).
    pub dgid: Option<[u8; 16]>,
    /// RoCE: destination MAC; must equal the destination host's MAC (`None`: not checked).
    pub dmac: Option<[u8; 6]>,
    /// Service level (IB) / priority (RoCE); stored, not otherwise used by the model.
    pub sl: u8,
}

/// `ibv_modify_qp` attributes; `state` is required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpModify {
    /// Target state.
    pub state: Option<QpState>,
    /// Port (must be 1).
    pub port: Option<u8>,
    /// Remote access enabled on this QP (`access::REMOTE_*`).
    pub access_flags: Option<u32>,
    /// Remote end.
    pub path: Option<RcPath>,
    /// Path MTU in bytes (256..=4096).
    pub path_mtu: Option<u32>,
    /// RNR NAK timer code (0..=31).
    pub min_rnr_timer: Option<u8>,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry: Option<u8>,
    /// Transport retries (0..=7).
    pub retry_cnt: Option<u8>,
    /// Local ACK timeout code (0..=31).
    pub timeout: Option<u8>,
    /// Send PSN (24 bits).
    pub sq_psn: Option<u32>,
    /// Receive PSN (24 bits).
    pub rq_psn: Option<u32>,
    /// Outstanding READ/atomic as requester.
    pub max_rd_atomic: Option<u8>,
    /// Outstanding READ/atomic as responder.
    pub max_dest_rd_atomic: Option<u8>,
    /// UD: Q_Key (required at RESET→INIT).
    pub qkey: Option<u32>,
}

/// Asynchronous events (the `ibv_get_async_event` subset the model raises).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A CQE was dropped because the CQ was full (raised once per overrun episode).
    CqOverrun {
        /// CQ number.
        cqn: u32,
    },
    /// A QP entered ERR and its error CQE could not be delivered (CQ overrun).
    QpFatal {
        /// QP number.
        qpn: u32,
    },
    /// The port went down ([`Nic::set_port_active`]`(false)`): nothing is sent or
    /// received until it comes back.
    PortError,
    /// The port came (back) up.
    PortActive,
    /// The device failed ([`Nic::inject_fatal`]): every QP is in ERR and its work
    /// flushed; nothing works any more.
    DeviceFatal,
    /// An SRQ armed with a limit ([`Nic::arm_srq_limit`]) has fewer WQEs posted than
    /// the limit after a receive took one (raised once; the limit disarms).
    SrqLimitReached {
        /// SRQ number.
        srqn: u32,
    },
}

/// Objects a NIC holds ([`Nic::objects`]): what a leak check compares
/// before and after a program, or after a context closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectCounts {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs (DCTs included).
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// Completion channels.
    pub channels: usize,
    /// Device contexts ([`Nic::open_context`]).
    pub contexts: usize,
}

/// Counters of one NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicStats {
    /// UAR writes, plain and BlueFlame.
    pub doorbells: u64,
    /// BlueFlame writes.
    pub bf_writes: u64,
    /// Send WQEs executed (successfully or not; flushes excluded).
    pub wqes_executed: u64,
    /// CQEs written.
    pub cqes_written: u64,
    /// UAR writes at the wrong half of the BF register.
    pub bf_offset_mismatch: u64,
    /// BlueFlame data different from the ring copy of the WQE.
    pub bf_content_mismatch: u64,
    /// Doorbells not matching the last posted WQE (or naming an unknown QP / UAR).
    pub doorbell_mismatch: u64,
    /// UAR writes (counted in `doorbells`) at an offset that is neither half of the
    /// register (0 or the BlueFlame size): ignored, as a NIC ignores a store outside its
    /// registers.
    pub doorbell_bad_offset: u64,
    /// CQEs dropped on a full CQ.
    pub cq_overruns: u64,
    /// RNR NAKs received by requesters of this NIC.
    pub rnr_naks: u64,
    /// WQEs failed as malformed (LOCAL_QP_OP_ERR).
    pub malformed_wqes: u64,
    /// UD datagrams dropped (unreachable host, unknown QPN, wrong Q_Key, no receive WQE),
    /// counted at the sender's NIC for unresolvable destinations, else at the receiver's.
    pub ud_dropped: u64,
    /// DCI requests refused by a DCT of this NIC because of a wrong DC access key.
    pub dc_key_violations: u64,
    /// RC requests refused by a responder QP of this NIC because their PSN
    /// was not the one it expected (PSN sequence error or duplicate).
    pub psn_errors: u64,
    /// Packets this NIC sent that the link lost ([`LinkFaults`]).
    pub link_drops: u64,
    /// Corrupted packets this NIC received and dropped (ICRC check failed).
    pub icrc_errors: u64,
    /// Request packets requesters of this NIC sent again (after a timeout or a NAK).
    pub retransmits: u64,
    /// Local ACK timeouts of requesters of this NIC.
    pub ack_timeouts: u64,
    /// NAKs for a PSN sequence error received by requesters of this NIC.
    pub seq_naks: u64,
    /// Duplicate requests responders of this NIC answered without executing again.
    pub duplicates: u64,
    /// Threaded mode: plain doorbells (counted in `doorbells`) that a doorbell of
    /// the same QP still waiting in the NIC's queue covered, so none was queued for
    /// them (the NIC runs a send queue up to its doorbell record). Their values are
    /// not checked, and the register's half alternation resumes from the next write.
    pub doorbells_coalesced: u64,
    /// WQEs of this NIC that needed another host while a NIC or a handle was using it,
    /// with that host numbered below this one: this NIC let its own host go, took both
    /// in order and started the WQE afresh (nothing of it had been done). Each host has
    /// a lock of its own, taken in ascending order so NICs never wait for each other.
    pub lock_restarts: u64,
    /// Threaded mode: UAR writes (counted in `doorbells`) handled at once in the
    /// poster's thread instead of the NIC thread's: rung while nothing was queued,
    /// the NIC thread was not paused and the driver had taken every CQE of the QP's
    /// send CQ (the application waits for this work, as in a pingpong).
    pub doorbells_in_poster: u64,
    /// Send WQEs (counted in `wqes_executed`) that took the lean path: RC RDMA WRITE,
    /// RDMA READ and SEND of the common shapes on the direct wire, with the same checks
    /// and results as the general path ([`FabricConfig::general_path_only`] turns it off).
    pub lean_wqes: u64,
    /// RoCE v2 datagrams this NIC sent to other processes on the UDP wire.
    pub datagrams_sent: u64,
    /// Datagrams from the UDP wire this NIC accepted (ICRC and headers good).
    pub datagrams_received: u64,
    /// Payload bytes of the messages this NIC sent on the UDP wire, each byte once however
    /// often it was sent again: SEND and WRITE data and UD datagrams as requester, READ
    /// responses as responder.
    pub wire_payload_bytes: u64,
    /// Datagrams from the UDP wire this NIC dropped: malformed, corrupt or foreign
    /// (by reason in `Nic::wire_drops`), or naming no QP it has (`stray`).
    pub datagrams_dropped: u64,
}

/// Control-path errors (what `ibv_*` calls would return as errno).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Unknown protection domain.
    #[error("no such PD {0:#x}")]
    NoSuchPd(u32),
    /// Unknown CQ.
    #[error("no such CQ {0:#x}")]
    NoSuchCq(u32),
    /// Unknown QP.
    #[error("no such QP {0:#x}")]
    NoSuchQp(u32),
    /// Unknown MR (lkey).
    #[error("no such MR (lkey {0:#x})")]
    NoSuchMr(u32),
    /// Unknown SRQ.
    #[error("no such SRQ {0:#x}")]
    NoSuchSrq(u32),
    /// An argument is out of range.
    #[error("invalid argument: {what}")]
    InvalidArgument {
        /// Which argument and why.
        what: &'static str,
    },
    /// The QP state transition is not in the table of spec §7.
    #[error("invalid QP transition {from:?} -> {to:?}")]
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// The object is still in use.
    #[error("busy: {what}")]
    Busy {
        /// What still uses it.
        what: &'static str,
    },
    /// Not modelled yet.
    #[error("unsupported: {what}")]
    Unsupported {
        /// What.
        what: &'static str,
    },
    /// The model could not allocate ring memory.
    #[error("out of memory")]
    OutOfMemory,
}
