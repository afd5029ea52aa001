//! Asynchronous events (`ibv_get_async_event`): which object an event type
//! names, and its typed form. The unsafe part (reading the element union
//! and the object it points at) is in `hw.rs`; this is the pure mapping.

use mlx5_api::AsyncEvent;

use crate::ffi::*;

/// What the element union of an `ibv_async_event` holds, by event type
/// (verbs.h's comment on `enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Element {
    Cq,
    Qp,
    Srq,
    Port,
    /// Nothing (device-wide, or a WQ: not used by this library).
    None,
}

pub(crate) fn element(event_type: u32) -> Element {
    match event_type {
        IBV_EVENT_CQ_ERR => Element::Cq,
        IBV_EVENT_QP_FATAL
        | IBV_EVENT_QP_REQ_ERR
        | IBV_EVENT_QP_ACCESS_ERR
        | IBV_EVENT_COMM_EST
        | IBV_EVENT_SQ_DRAINED
        | IBV_EVENT_PATH_MIG
        | IBV_EVENT_PATH_MIG_ERR
        | IBV_EVENT_QP_LAST_WQE_REACHED => Element::Qp,
        IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => Element::Srq,
        IBV_EVENT_PORT_ACTIVE
        | IBV_EVENT_PORT_ERR
        | IBV_EVENT_LID_CHANGE
        | IBV_EVENT_PKEY_CHANGE
        | IBV_EVENT_SM_CHANGE
        | IBV_EVENT_CLIENT_REREGISTER
        | IBV_EVENT_GID_CHANGE => Element::Port,
        _ => Element::None,
    }
}

/// The typed event; `num` is the CQN / QPN / SRQN or the port number, as
/// [`element`] says (ignored for the others).
pub(crate) fn to_event(event_type: u32, num: u32) -> AsyncEvent {
    let port = num as u8;
    match event_type {
        IBV_EVENT_CQ_ERR => AsyncEvent::CqError { cqn: num },
        IBV_EVENT_QP_FATAL => AsyncEvent::QpFatal { qpn: num },
        IBV_EVENT_QP_REQ_ERR => AsyncEvent::QpRequestError { qpn: num },
        IBV_EVENT_QP_ACCESS_ERR => AsyncEvent::QpAccessError { qpn: num },
        IBV_EVENT_COMM_EST => AsyncEvent::CommEstablished { qpn: num },
        IBV_EVENT_SQ_DRAINED => AsyncEvent::SqDrained { qpn: num },
        IBV_EVENT_PATH_MIG => AsyncEvent::PathMigrated { qpn: num },
        IBV_EVENT_PATH_MIG_ERR => AsyncEvent::PathMigrationError { qpn: num },
        IBV_EVENT_QP_LAST_WQE_REACHED => AsyncEvent::QpLastWqeReached { qpn: num },
        IBV_EVENT_SRQ_ERR => AsyncEvent::SrqError { srqn: num },
        IBV_EVENT_SRQ_LIMIT_REACHED => AsyncEvent::SrqLimitReached { srqn: num },
        IBV_EVENT_DEVICE_FATAL => AsyncEvent::DeviceFatal,
        IBV_EVENT_PORT_ACTIVE => AsyncEvent::PortActive { port },
        IBV_EVENT_PORT_ERR => AsyncEvent::PortError { port },
        IBV_EVENT_LID_CHANGE => AsyncEvent::LidChange { port },
        IBV_EVENT_PKEY_CHANGE => AsyncEvent::PkeyChange { port },
        IBV_EVENT_SM_CHANGE => AsyncEvent::SmChange { port },
        IBV_EVENT_CLIENT_REREGISTER => AsyncEvent::ClientReregister { port },
        IBV_EVENT_GID_CHANGE => AsyncEvent::GidChange { port },
        other => AsyncEvent::Other { event_type: other },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numeric values are verbs.h's (checked by the layout test); here
    /// the raw numbers are spelled out so a renumbering shows.
    #[test]
    fn event_types_map_to_their_objects() {
        assert_eq!((element(0), to_event(0, 0x45)), (Element::Cq, AsyncEvent::CqError { cqn: 0x45 }));
        assert_eq!((element(1), to_event(1, 9)), (Element::Qp, AsyncEvent::QpFatal { qpn: 9 }));
        assert_eq!(to_event(3, 9), AsyncEvent::QpAccessError { qpn: 9 });
        assert_eq!((element(8), to_event(8, 0)), (Element::None, AsyncEvent::DeviceFatal));
        assert_eq!((element(10), to_event(10, 1)), (Element::Port, AsyncEvent::PortError { port: 1 }));
        assert_eq!((element(9), to_event(9, 2)), (Element::Port, AsyncEvent::PortActive { port: 2 }));
        assert_eq!((element(14), to_event(14, 7)), (Element::Srq, AsyncEvent::SrqError { srqn: 7 }));
        assert_eq!((element(16), to_event(16, 3)), (Element::Qp, AsyncEvent::QpLastWqeReached { qpn: 3 }));
        assert_eq!((element(19), to_event(19, 0)), (Element::None, AsyncEvent::Other { event_type: 19 }));
        assert_eq!(to_event(42, 0), AsyncEvent::Other { event_type: 42 });
    }

    #[test]
    fn errors_are_told_from_state_changes() {
        assert!(to_event(IBV_EVENT_CQ_ERR, 1).is_error());
        assert!(to_event(IBV_EVENT_DEVICE_FATAL, 0).is_error());
        assert!(to_event(IBV_EVENT_PORT_ERR, 1).is_error());
        assert!(!to_event(IBV_EVENT_PORT_ACTIVE, 1).is_error());
        assert!(!to_event(IBV_EVENT_COMM_EST, 1).is_error());
    }
}
