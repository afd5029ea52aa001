//! Asynchronous events of a device (`ibv_get_async_event`): errors that no
//! CQE reports (a CQ overrun, a QP that failed with no CQE to carry it, a
//! fatal device error) and state changes (port up / down).
//!
//! Read them with [`Context::async_event`](crate::Context::async_event);
//! [`CompletionQueue::wait`](crate::CompletionQueue::wait) also watches them,
//! so a waiter whose CQ was put in error returns
//! [`Error::CqOverrun`](crate::Error::CqOverrun) instead of sleeping until its
//! deadline.

/// One asynchronous event, named after `enum ibv_event_type`. Objects are
/// named by number (CQN, QPN, SRQN), ports by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// `IBV_EVENT_CQ_ERR`: the CQ overran (a CQE had no free slot) or its
    /// access failed; the CQ and the QPs using it are in error.
    CqError {
        /// The CQ number.
        cqn: u32,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP failed with an error no CQE reports.
    QpFatal {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_REQ_ERR`: an invalid request was received by the QP.
    QpRequestError {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_ACCESS_ERR`: a remote access violation on the QP.
    QpAccessError {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_COMM_EST`: the first packet arrived on a QP in RTR.
    CommEstablished {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_SQ_DRAINED`: a QP in SQD has no outstanding send.
    SqDrained {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_PATH_MIG`: the QP migrated to its alternate path.
    PathMigrated {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_PATH_MIG_ERR`: path migration failed.
    PathMigrationError {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ left the SRQ for good.
    QpLastWqeReached {
        /// The QP number.
        qpn: u32,
    },
    /// `IBV_EVENT_SRQ_ERR`: the SRQ failed; its QPs are in error.
    SrqError {
        /// The SRQ number.
        srqn: u32,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: the SRQ fell below its armed limit.
    SrqLimitReached {
        /// The SRQ number.
        srqn: u32,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable; close everything.
    DeviceFatal,
    /// `IBV_EVENT_PORT_ACTIVE`: the port came up.
    PortActive {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port went down.
    PortError {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_SM_CHANGE`.
    SmChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_GID_CHANGE`.
    GidChange {
        /// The port number.
        port: u8,
    },
    /// An event type this library does not know (`IBV_EVENT_WQ_FATAL` and
    /// later additions), with its raw `enum ibv_event_type` value.
    Other {
        /// The raw `enum ibv_event_type` value.
        event_type: u32,
    },
}

impl AsyncEvent {
    /// Whether the event reports an error (as opposed to a state change).
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            AsyncEvent::CqError { .. }
                | AsyncEvent::QpFatal { .. }
                | AsyncEvent::QpRequestError { .. }
                | AsyncEvent::QpAccessError { .. }
                | AsyncEvent::PathMigrationError { .. }
                | AsyncEvent::SrqError { .. }
                | AsyncEvent::DeviceFatal
                | AsyncEvent::PortError { .. }
        )
    }
}
