//! Typed errors of the front-end: post-time limits (checked before any byte
//! of the offending segment lands in the ring) and control-path failures.

use crate::backend::QpKind;
use crate::types::{LinkLayer, QpState};

/// Every failure the front-end reports. Post-path variants carry the values
/// that were out of range so that a caller can act on them.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The send queue has not enough free WQEBBs for the WQE being built.
    #[error("send queue full: WQE needs {needed} WQEBB(s), {free} free")]
    SqFull {
        /// WQEBBs the WQE needs.
        needed: u32,
        /// WQEBBs free.
        free: u32,
    },
    /// The receive queue has no free slot.
    #[error("receive queue full ({capacity} WQEs outstanding)")]
    RqFull {
        /// How many the queue holds.
        capacity: u32,
    },
    /// More scatter/gather entries than the queue was created for.
    #[error("too many SGEs: {count} > max {max}")]
    TooManySge {
        /// How many were given.
        count: u32,
        /// The most allowed.
        max: u32,
    },
    /// Inline payload larger than the QP's `max_inline_data`.
    #[error("inline data of {len} bytes exceeds max_inline_data {max}")]
    InlineTooLarge {
        /// The length in bytes.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// The WQE would exceed the maximum WQE size (in 16-byte DS units).
    #[error("WQE of {ds} DS exceeds the maximum of {max} DS")]
    WqeTooLarge {
        /// The size in 16-byte DS units.
        ds: u32,
        /// The most allowed.
        max: u32,
    },
    /// The message exceeds what the QP can carry (UD: the path MTU).
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    MessageTooLong {
        /// The length in bytes.
        len: u64,
        /// The most allowed.
        max: u32,
    },
    /// The shared receive queue has no free WQE.
    #[error("shared receive queue full ({capacity} WQEs outstanding)")]
    SrqFull {
        /// How many the queue holds.
        capacity: u32,
    },
    /// The DCT has no number yet: it is assigned at INIT→RTR.
    #[error("DCT has no number before RTR (state {state:?})")]
    DctNotReady {
        /// The current state.
        state: QpState,
    },
    /// An SGE length that does not fit the 31-bit byte_count field.
    #[error("SGE length {len} exceeds 2^31-1")]
    SgeTooLong {
        /// The length in bytes.
        len: u64,
    },
    /// Posting requires a state the QP is not in.
    #[error("QP 0x{qpn:x} is in state {state:?}, posting needs {needed:?}")]
    QpState {
        /// The QP number.
        qpn: u32,
        /// The QP's state.
        state: QpState,
        /// The state posting needs.
        needed: QpState,
    },
    /// A state transition that the QP state machine (spec §7) does not allow.
    #[error("invalid QP transition {from:?} -> {to:?}")]
    InvalidTransition {
        /// The state before.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    /// A configuration value out of range or a call that does not apply
    /// to this object: [`InvalidArgument`] says which and why.
    #[error("invalid argument: {0}")]
    InvalidArgument(InvalidArgument),
    /// The backend (simulator or hardware) refused a control-path request:
    /// [`BackendError`] says what it refused, with its errno where it has one
    /// (match it with `Error::Backend { reason, .. } if matches!(*reason, ..)`).
    /// Boxed: its largest kinds hold two strings, and every `Result` of the
    /// post path carries an `Error`; at 72 bytes the builder's results no
    /// longer stayed in registers (an inline SEND cost 8 instructions more).
    #[error("{op} failed: {reason}")]
    Backend {
        /// The operation (the verbs call or step).
        op: &'static str,
        /// Why it failed.
        reason: Box<BackendError>,
    },
    /// An object of one context used with another (each `open()` is its own
    /// context; the kernel keeps objects per context and refuses the mix).
    #[error("{what} belongs to context {owner}, not to context {used_with}")]
    ForeignObject {
        /// The object (`PD`, `send CQ`, `receive CQ`, `SRQ`, `completion channel`).
        what: &'static str,
        /// The context it was created on ([`Context::id`](crate::Context::id)).
        owner: u64,
        /// The context it was used with.
        used_with: u64,
    },
    /// A QP asked for more than the device can size (`what`: the
    /// capability; `max`: the most this QP type and device accept, computed
    /// the way rdma-core's mlx5 provider sizes send WQEs), refused before
    /// anything is created.
    #[error("{what} = {asked} exceeds the device's limit of {max} for this QP")]
    CapsExceeded {
        /// The capability (`max_inline_data`, `max_send_sge`, `max_send_wr`, …).
        what: &'static str,
        /// What was asked for.
        asked: u32,
        /// The largest value accepted.
        max: u32,
    },
    /// The device or this library cannot do what was asked:
    /// [`Unsupported`] says what.
    #[error("unsupported: {0}")]
    Unsupported(Unsupported),
    /// The CQ is in error: it received more CQEs than it holds (the user
    /// stopped polling), completions were lost and the QPs using it moved to
    /// ERR. Recreate the CQ and its QPs.
    #[error("CQ 0x{cqn:x} is in error (overrun: completions were lost)")]
    CqOverrun {
        /// The CQ number.
        cqn: u32,
    },
    /// A wait ran out of time.
    #[error("timed out")]
    Timeout,
    /// The device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`): nothing
    /// on it works any more (outstanding work completes with flush errors);
    /// close its objects and the context.
    #[error("the device reported a fatal error")]
    DeviceFatal,
    /// The memory a backend gave for a queue does not describe a usable
    /// ring (the ring core's descriptor refused it): nothing was posted.
    #[error("the backend's {queue} is unusable: {source}")]
    BadQueue {
        /// Which queue.
        queue: Queue,
        /// What the descriptor refused.
        #[source]
        source: crate::ring::DescError,
    },
    /// An errno-carrying verbs failure (hardware backend).
    #[error("{op} failed: errno {errno} ({msg})")]
    Verbs {
        /// The operation (the verbs call or step).
        op: &'static str,
        /// The errno the call returned.
        errno: i32,
        /// The errno's text (`strerror`).
        msg: String,
    },
}

/// Which of an object's queues an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Queue {
    /// A QP's send queue.
    Send,
    /// A QP's own receive queue.
    Recv,
    /// A shared receive queue.
    Srq,
    /// A completion queue.
    Cq,
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Send => "send queue",
            Queue::Recv => "receive queue",
            Queue::Srq => "shared receive queue",
            Queue::Cq => "completion queue",
        })
    }
}

/// Result alias of the front-end.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::ring::PostError> for Error {
    #[cold]
    fn from(e: crate::ring::PostError) -> Self {
        use crate::ring::PostError as P;
        match e {
            P::SqFull { needed, free } => Error::SqFull { needed, free },
            P::RqFull { capacity } => Error::RqFull { capacity },
            P::SrqFull { capacity } => Error::SrqFull { capacity },
            P::TooManySge { count, max } => Error::TooManySge { count, max },
            P::InlineTooLarge { len, max } => Error::InlineTooLarge { len, max },
            P::WqeTooLarge { ds, max } => Error::WqeTooLarge { ds, max },
            P::MessageTooLong { len, max } => Error::MessageTooLong { len, max },
            P::SgeTooLong { len } => Error::SgeTooLong { len },
            other => Error::InvalidArgument(InvalidArgument::Wqe(other)),
        }
    }
}

/// Which configuration value [`InvalidArgument::OutOfRange`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Arg {
    /// A CQ's number of entries (`create_cq`).
    CqSize,
    /// A QP's starting packet sequence number (24 bits).
    Psn,
    /// A QP's `max_send_wr`.
    MaxSendWr,
    /// The length of an atomic's result buffer.
    AtomicResultLen,
    /// A port number.
    Port,
}

impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arg::CqSize => "CQ size",
            Arg::Psn => "PSN",
            Arg::MaxSendWr => "max_send_wr",
            Arg::AtomicResultLen => "atomic result length",
            Arg::Port => "port",
        })
    }
}

/// Why a call's arguments were refused ([`Error::InvalidArgument`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidArgument {
    /// A value outside the range this device or the wire format accepts.
    #[error("{arg} {value:#x} not in {min:#x}..={max:#x}")]
    OutOfRange {
        /// Which value.
        arg: Arg,
        /// What was given.
        value: u64,
        /// The smallest accepted.
        min: u64,
        /// The largest accepted.
        max: u64,
    },
    /// A byte range that does not lie inside the memory region.
    #[error("range {offset}+{len} outside MR of {mr_len} bytes")]
    OutsideMr {
        /// Bytes from the region's start.
        offset: usize,
        /// Bytes asked for.
        len: usize,
        /// The region's length.
        mr_len: usize,
    },
    /// The port requires a GRH (RoCE, or an InfiniBand port that says so)
    /// and the peer's connection info has no GID.
    #[error("port {port} requires a GRH: the peer (QPN {peer_qpn:#x}) must send its GID")]
    GrhRequired {
        /// The local port.
        port: u8,
        /// The peer's QP number.
        peer_qpn: u32,
    },
    /// The peer's address does not fit the local port's link layer
    /// (InfiniBand: a LID; RoCE: a GID and a MAC).
    #[error(
        "peer address (GID {}, MAC {}) does not fit the local {link} port",
        if *.gid { "given" } else { "missing" },
        if *.mac { "given" } else { "missing" }
    )]
    PeerAddress {
        /// The local port's link layer.
        link: LinkLayer,
        /// Whether the peer gave a GID.
        gid: bool,
        /// Whether the peer gave a MAC.
        mac: bool,
    },
    /// An RC QP was activated without its peer's connection info.
    #[error("an RC QP connects to a peer: ConnectParams::to(peer.local_info()?)")]
    RcNeedsPeer,
    /// Connection info given to a QP type that addresses each WQE instead.
    #[error("ConnectParams::remote is for RC QPs; {kind:?} addresses each WQE")]
    RemoteNotForThisKind {
        /// The QP's type.
        kind: QpKind,
    },
    /// `skip_sq` on a send queue with work outstanding.
    #[error("skip_sq needs an empty send queue ({outstanding} WQEBBs outstanding)")]
    SendQueueNotEmpty {
        /// WQEBBs posted and not retired.
        outstanding: u32,
    },
    /// A receive posted to a QP whose receives come from an SRQ.
    #[error("this QP receives from an SRQ: post there")]
    ReceivesFromSrq,
    /// A receive posted to a QP with no receive queue (a DCI, a DCT).
    #[error("this QP has no receive queue")]
    NoReceiveQueue,
    /// A DCT-only call on another QP type.
    #[error("not a DCT")]
    NotADct,
    /// A DCT created without the SRQ it receives on.
    #[error("a DCT needs an SRQ")]
    DctNeedsSrq,
    /// The device's largest send descriptor is smaller than one WQEBB.
    #[error("the device's send descriptor ({bytes} bytes) is smaller than one WQEBB")]
    DeviceDescriptorTooSmall {
        /// `max_wqe_sz_sq` as the device reports it.
        bytes: u32,
    },
    /// An SRQ larger than the device allows.
    #[error(
        "SRQ of {max_wr} WQEs x {max_sge} SGEs exceeds the device limits ({dev_wr} WQEs, {dev_sge} SGEs)"
    )]
    SrqTooLarge {
        /// WQEs asked for.
        max_wr: u32,
        /// SGEs per WQE asked for.
        max_sge: u32,
        /// The device's `max_qp_wr`.
        dev_wr: u32,
        /// The device's `max_sge`.
        dev_sge: u32,
    },
    /// A QP state change the hardware backend cannot express (its attribute
    /// mask table has no entry for it).
    #[error("{kind:?}: {why}")]
    Transition {
        /// The QP's type.
        kind: QpKind,
        /// What is missing or not allowed.
        why: TransitionProblem,
    },
    /// A WQE the ring core refused for a reason the front-end has no
    /// variant of its own for (an opcode this QP cannot send, a malformed
    /// atomic, a missing address vector, inline data where not allowed).
    #[error("{0}")]
    Wqe(crate::ring::PostError),
    /// A memory window bind, invalidation or mkey list the NIC would refuse.
    #[error("{0}")]
    Mkey(MkeyMisuse),
    /// Memory could not be allocated for a buffer of this many bytes.
    #[error("cannot allocate {bytes} bytes")]
    Alloc {
        /// Bytes asked for.
        bytes: usize,
    },
}

/// What [`InvalidArgument::Transition`] found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransitionProblem {
    /// A path MTU that is not 256, 512, 1024, 2048 or 4096 bytes.
    PathMtu(u32),
    /// A UD QP needs a Q_Key at RESET→INIT.
    NoQkey,
    /// RC INIT→RTR needs the remote QP's info.
    NoRemote,
    /// A DCT has no RTS state: it is final at RTR.
    DctRts,
    /// SQE→RTS is for UD QPs.
    SqeToRts,
    /// Only RESET and ERR are direct moves.
    DirectMove(QpState),
    /// A transition the table does not list.
    NotInTable,
    /// A RoCE peer without a GID, or an InfiniBand peer whose GID the port cannot route.
    PeerAddress,
}

impl std::fmt::Display for TransitionProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransitionProblem::PathMtu(b) => {
                write!(f, "path MTU {b} is not one of 256, 512, 1024, 2048, 4096")
            }
            TransitionProblem::NoQkey => f.write_str("a UD QP needs a Q_Key at RESET→INIT"),
            TransitionProblem::NoRemote => f.write_str("RC INIT→RTR needs the remote QP's info"),
            TransitionProblem::DctRts => f.write_str("a DCT has no RTS state: it is final at RTR"),
            TransitionProblem::SqeToRts => f.write_str("SQE→RTS is for UD QPs"),
            TransitionProblem::DirectMove(s) => {
                write!(f, "QpTransition::To({s:?}): only Reset and Err are direct moves")
            }
            TransitionProblem::NotInTable => f.write_str("a transition the state table does not list"),
            TransitionProblem::PeerAddress => f.write_str("the peer's address does not fit the port"),
        }
    }
}

/// What the device or this library cannot do ([`Error::Unsupported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unsupported {
    /// CQE compression with 128-byte CQEs.
    #[error("CQE compression with 128-byte CQEs")]
    CompressionWith128ByteCqes,
    /// The device has no dynamically connected transport (a ConnectX-4 Lx),
    /// or refused a DC QP (EOPNOTSUPP).
    #[error("DC: this device has no dynamically connected transport (e.g. a ConnectX-4 Lx)")]
    DcTransport,
    /// The backend has no completion channels (the ring-only backend).
    #[error("this backend has no completion channels")]
    CompletionChannels,
    /// A dedicated doorbell register (a thread domain) on hardware.
    #[error("a dedicated doorbell register (thread domain) is not supported on hardware yet")]
    DedicatedUar,
    /// Memory windows and indirect mkeys on this backend (the hardware
    /// backend does not allocate them yet; the ring-only backend has none).
    #[error("memory windows and indirect mkeys are not supported by this backend")]
    Mkeys,
    /// A memory window longer than a KLM entry holds (2 GiB, rdma-core's
    /// `set_bind_wr`: EOPNOTSUPP).
    #[error("a memory window of {len} bytes: a window covers at most 2 GiB")]
    WindowTooLong {
        /// The length asked for.
        len: u64,
    },
    /// A resource the hardware backend's device description lacks
    /// (e.g. a BlueFlame register size it cannot use).
    #[error("{op}: the device's {what} is not usable")]
    Resource {
        /// The call or step.
        op: &'static str,
        /// The resource.
        what: &'static str,
    },
}

/// What a backend refused ([`Error::Backend`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    /// The backend refused with this errno (the simulator answers as the
    /// kernel would: `ENOENT` for an unknown object, `EINVAL`, `EBUSY`,
    /// `EOPNOTSUPP`, `ENOMEM`); `detail` is its own account.
    #[error("errno {errno}: {detail}")]
    Refused {
        /// The errno.
        errno: i32,
        /// The backend's words.
        detail: String,
    },
    /// A shared library of rdma-core could not be loaded.
    #[error("{file} could not be loaded: {reason}")]
    LibraryNotFound {
        /// The file name.
        file: String,
        /// The dynamic loader's words.
        reason: String,
    },
    /// rdma-core lacks a symbol this backend needs (too old).
    #[error("symbol {symbol} is missing from {file}")]
    SymbolMissing {
        /// The file name.
        file: String,
        /// The symbol.
        symbol: &'static str,
    },
    /// No RDMA device at all (`errno` from `ibv_get_device_list`, if any).
    #[error("no RDMA device{}", match errno { Some(e) => format!(" (errno {e})"), None => String::new() })]
    NoDevice {
        /// The errno.
        errno: Option<i32>,
    },
    /// The device named is not an mlx5 (ConnectX) device.
    #[error("device {name} is not an mlx5 (ConnectX) device")]
    NotMlx5 {
        /// Its name.
        name: String,
    },
    /// No device of that name.
    #[error("no RDMA device named {name} (found: {})", available.join(", "))]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The devices there are.
        available: Vec<String>,
    },
    /// A port attribute this library does not know.
    #[error("port {port}: unknown {what}")]
    UnknownPortAttr {
        /// The port.
        port: u8,
        /// `link layer` or `active MTU`.
        what: &'static str,
    },
    /// A DCT asked for its number before RTR.
    #[error("the DCT has no number (not in RTR?)")]
    NoDctNumber,
    /// The backend failed without an errno (`detail` says how).
    #[error("{detail}")]
    Other {
        /// The backend's words.
        detail: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `Result` of the post path carries an `Error`, so its size is
    /// part of the hot path: at 72 bytes (an unboxed `BackendError`) the
    /// WQE builder's results stopped fitting in registers and a 32-byte
    /// inline SEND cost 74 instructions instead of 66 (benches/callgrind.sh).
    /// A new variant that makes `Error` larger should box its payload.
    #[test]
    fn error_stays_small() {
        let size = core::mem::size_of::<Error>();
        eprintln!("Error: {size} bytes");
        assert!(size <= 48, "Error is {size} bytes");
    }
}

/// A misuse of a memory window or indirect mkey, refused before any byte of
/// its UMR WQE is written ([`InvalidArgument::Mkey`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MkeyMisuse {
    /// A window bound to a region registered without `MW_BIND`.
    #[error("MR 0x{lkey:x} was registered without MW_BIND: no memory window may be bound to it")]
    MrWithoutMwBind {
        /// The region's lkey.
        lkey: u32,
    },
    /// A window and its region in different protection domains.
    #[error("the memory window and MR 0x{lkey:x} belong to different protection domains")]
    DifferentPd {
        /// The region's lkey.
        lkey: u32,
    },
    /// Rights a window cannot grant: `MW_BIND`, or remote write or atomic
    /// over a region without local write.
    #[error("a memory window cannot grant {asked:?} over MR 0x{lkey:x} (registered with {mr:?})")]
    Access {
        /// The rights asked for.
        asked: crate::AccessFlags,
        /// The region's lkey.
        lkey: u32,
        /// The region's rights.
        mr: crate::AccessFlags,
    },
    /// An operation for another kind of key: `local_inv` of a type-1
    /// window, `mr_list` of a window, a window bind of an indirect mkey.
    #[error("{needs}, and key 0x{key:x} is a {is:?}")]
    WrongKind {
        /// The call and what it needs ("bind_mw needs a memory window").
        needs: &'static str,
        /// The key.
        key: u32,
        /// What the key is.
        is: crate::MkeyKind,
    },
    /// A zero-based type-1 window (rdma-core's `mlx5_bind_mw`: EINVAL).
    #[error("a type-1 memory window cannot be zero-based")]
    ZeroBasedType1,
    /// More KLM entries than the indirect mkey was created for.
    #[error("{count} KLM entries for an indirect mkey of at most {max}")]
    TooManyEntries {
        /// Entries given.
        count: usize,
        /// Its `max_entries`.
        max: u32,
    },
    /// A KLM entry of 2 GiB or more.
    #[error("a KLM entry of {len} bytes: each holds less than 2 GiB")]
    EntryTooLong {
        /// The entry's length.
        len: u32,
    },
}
