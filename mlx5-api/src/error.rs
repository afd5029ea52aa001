//! Typed errors of the front-end: post-time limits (checked before any byte
//! of the offending segment lands in the ring) and control-path failures.

use crate::types::QpState;

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
    /// A configuration value out of range (queue sizes, CQE size, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend (simulator or hardware) refused a control-path request.
    #[error("{op} failed: {reason}")]
    Backend {
        /// The operation (the verbs call or step).
        op: &'static str,
        /// Why it failed.
        reason: String,
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
    /// The device or this library cannot do what was asked (e.g. CQE
    /// compression with 128-byte CQEs, a format the device's caps lack).
    #[error("unsupported: {0}")]
    Unsupported(String),
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
            other => Error::InvalidArgument(other.to_string()),
        }
    }
}
