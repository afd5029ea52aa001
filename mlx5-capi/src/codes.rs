//! Return codes of the C ABI, and the mapping from the ring core's
//! [`PostError`] and the front-end's [`Error`].

use std::ffi::c_char;

use mlx5_api::ring::PostError;
use mlx5_api::Error;

/// Success.
pub const MLX5R_OK: i32 = 0;
/// The send queue has not enough free WQEBBs.
pub const MLX5R_ERR_SQ_FULL: i32 = -1;
/// The receive queue is full.
pub const MLX5R_ERR_RQ_FULL: i32 = -2;
/// The shared receive queue is full.
pub const MLX5R_ERR_SRQ_FULL: i32 = -3;
/// More SGEs than the queue allows.
pub const MLX5R_ERR_TOO_MANY_SGE: i32 = -4;
/// Inline data larger than the QP's limit.
pub const MLX5R_ERR_INLINE_TOO_LARGE: i32 = -5;
/// The WQE exceeds the maximum WQE size.
pub const MLX5R_ERR_WQE_TOO_LARGE: i32 = -6;
/// The message exceeds what the QP carries (UD: the path MTU).
pub const MLX5R_ERR_MESSAGE_TOO_LONG: i32 = -7;
/// An SGE of 2^31 bytes or more.
pub const MLX5R_ERR_SGE_TOO_LONG: i32 = -8;
/// An opcode this QP type cannot send.
pub const MLX5R_ERR_BAD_OPCODE: i32 = -9;
/// An atomic without one 8-byte result SGE or with an unaligned address.
pub const MLX5R_ERR_BAD_ATOMIC: i32 = -10;
/// A UD or DCI WQE without an address vector.
pub const MLX5R_ERR_MISSING_AV: i32 = -11;
/// Inline data for RDMA READ or an atomic.
pub const MLX5R_ERR_INLINE_NOT_ALLOWED: i32 = -12;
/// No outstanding work request matches (retirement).
pub const MLX5R_ERR_NOT_FOUND: i32 = -13;
/// A CQE in a format this library does not decode (consumed, reported).
pub const MLX5R_ERR_CQE_FORMAT: i32 = -14;
/// A null pointer or an argument out of range.
pub const MLX5R_ERR_INVALID: i32 = -20;
/// The backend (simulator or rdma-core) refused a control-path request.
pub const MLX5R_ERR_BACKEND: i32 = -21;
/// rdma-core is not installed, or no (such) mlx5 device exists.
pub const MLX5R_ERR_NO_DEVICE: i32 = -22;
/// Objects of different backends or contexts were mixed.
pub const MLX5R_ERR_MISMATCH: i32 = -23;
/// The QP is not in a state that allows this.
pub const MLX5R_ERR_QP_STATE: i32 = -24;
/// The device put the CQ in error: it overran (more completions than
/// entries arrived unpolled).
pub const MLX5R_ERR_CQ_OVERRUN: i32 = -25;
/// The device (its capabilities) does not support what was asked.
pub const MLX5R_ERR_UNSUPPORTED: i32 = -26;
/// A QP capability (`max_send_wr`, `max_inline_data`, ...) above what the
/// device can size for this QP type.
pub const MLX5R_ERR_CAPS_EXCEEDED: i32 = -27;
/// A wait ran out of time.
pub const MLX5R_ERR_TIMEOUT: i32 = -28;
/// The device reported a fatal error: close its objects and the context.
pub const MLX5R_ERR_DEVICE_FATAL: i32 = -29;
/// The memory the backend gave for a queue is not a usable ring.
pub const MLX5R_ERR_BAD_QUEUE: i32 = -30;
/// A UMR (memory window bind, LOCAL_INV, mkey list) the NIC would refuse,
/// or a misuse of a window or indirect mkey.
pub const MLX5R_ERR_BAD_UMR: i32 = -31;

pub(crate) fn post_code(e: PostError) -> i32 {
    match e {
        PostError::SqFull { .. } => MLX5R_ERR_SQ_FULL,
        PostError::RqFull { .. } => MLX5R_ERR_RQ_FULL,
        PostError::SrqFull { .. } => MLX5R_ERR_SRQ_FULL,
        PostError::TooManySge { .. } => MLX5R_ERR_TOO_MANY_SGE,
        PostError::InlineTooLarge { .. } => MLX5R_ERR_INLINE_TOO_LARGE,
        PostError::WqeTooLarge { .. } => MLX5R_ERR_WQE_TOO_LARGE,
        PostError::MessageTooLong { .. } => MLX5R_ERR_MESSAGE_TOO_LONG,
        PostError::SgeTooLong { .. } => MLX5R_ERR_SGE_TOO_LONG,
        PostError::BadOpcode { .. } => MLX5R_ERR_BAD_OPCODE,
        PostError::BadAtomic => MLX5R_ERR_BAD_ATOMIC,
        PostError::MissingAv => MLX5R_ERR_MISSING_AV,
        PostError::InlineNotAllowed => MLX5R_ERR_INLINE_NOT_ALLOWED,
        PostError::BadUmr { .. } => MLX5R_ERR_BAD_UMR,
        _ => MLX5R_ERR_INVALID,
    }
}

/// The code of a front-end error: one code per kind of failure, the
/// post-path limits with the same codes as [`post_code`], a WQE the ring
/// core refused with the code of its [`PostError`].
pub(crate) fn error_code(e: &Error) -> i32 {
    use mlx5_api::{BackendError as B, InvalidArgument as I};
    match e {
        Error::SqFull { .. } => MLX5R_ERR_SQ_FULL,
        Error::RqFull { .. } => MLX5R_ERR_RQ_FULL,
        Error::SrqFull { .. } => MLX5R_ERR_SRQ_FULL,
        Error::TooManySge { .. } => MLX5R_ERR_TOO_MANY_SGE,
        Error::InlineTooLarge { .. } => MLX5R_ERR_INLINE_TOO_LARGE,
        Error::WqeTooLarge { .. } => MLX5R_ERR_WQE_TOO_LARGE,
        Error::MessageTooLong { .. } => MLX5R_ERR_MESSAGE_TOO_LONG,
        Error::SgeTooLong { .. } => MLX5R_ERR_SGE_TOO_LONG,
        Error::QpState { .. } | Error::InvalidTransition { .. } | Error::DctNotReady { .. } => {
            MLX5R_ERR_QP_STATE
        }
        Error::InvalidArgument(I::Wqe(p)) => post_code(*p),
        Error::InvalidArgument(I::Mkey(_)) => MLX5R_ERR_BAD_UMR,
        Error::InvalidArgument(_) => MLX5R_ERR_INVALID,
        Error::ForeignObject { .. } => MLX5R_ERR_MISMATCH,
        Error::CapsExceeded { .. } => MLX5R_ERR_CAPS_EXCEEDED,
        Error::CqOverrun { .. } => MLX5R_ERR_CQ_OVERRUN,
        Error::Unsupported(_) => MLX5R_ERR_UNSUPPORTED,
        Error::Timeout => MLX5R_ERR_TIMEOUT,
        Error::DeviceFatal => MLX5R_ERR_DEVICE_FATAL,
        Error::BadQueue { .. } => MLX5R_ERR_BAD_QUEUE,
        Error::Backend { reason, .. }
            if matches!(
                **reason,
                B::NoDevice { .. }
                    | B::NotMlx5 { .. }
                    | B::DeviceNotFound { .. }
                    | B::LibraryNotFound { .. }
                    | B::SymbolMissing { .. }
            ) =>
        {
            MLX5R_ERR_NO_DEVICE
        }
        _ => MLX5R_ERR_BACKEND,
    }
}

/// A static, NUL-terminated description of a return code.
#[no_mangle]
pub extern "C" fn mlx5r_strerror(code: i32) -> *const c_char {
    let s: &'static [u8] = match code {
        MLX5R_OK => b"success\0",
        MLX5R_ERR_SQ_FULL => b"send queue full\0",
        MLX5R_ERR_RQ_FULL => b"receive queue full\0",
        MLX5R_ERR_SRQ_FULL => b"shared receive queue full\0",
        MLX5R_ERR_TOO_MANY_SGE => b"too many SGEs\0",
        MLX5R_ERR_INLINE_TOO_LARGE => b"inline data too large\0",
        MLX5R_ERR_WQE_TOO_LARGE => b"WQE too large\0",
        MLX5R_ERR_MESSAGE_TOO_LONG => b"message too long\0",
        MLX5R_ERR_SGE_TOO_LONG => b"SGE length exceeds 2^31-1\0",
        MLX5R_ERR_BAD_OPCODE => b"opcode not valid on this QP type\0",
        MLX5R_ERR_BAD_ATOMIC => b"atomic needs one 8-byte result SGE and an 8-byte aligned address\0",
        MLX5R_ERR_MISSING_AV => b"UD and DCI WQEs need an address vector\0",
        MLX5R_ERR_INLINE_NOT_ALLOWED => b"inline data not allowed for READ and atomics\0",
        MLX5R_ERR_NOT_FOUND => b"no outstanding work request matches\0",
        MLX5R_ERR_CQE_FORMAT => b"CQE format not decoded (scatter-to-CQE: use mlx5r_cqe_poll_scatter)\0",
        MLX5R_ERR_INVALID => b"invalid argument\0",
        MLX5R_ERR_BACKEND => b"backend refused the request\0",
        MLX5R_ERR_NO_DEVICE => b"rdma-core or the mlx5 device not found\0",
        MLX5R_ERR_MISMATCH => b"objects of different backends or contexts\0",
        MLX5R_ERR_QP_STATE => b"QP state does not allow this\0",
        MLX5R_ERR_CQ_OVERRUN => b"CQ overrun: the device put the CQ in error\0",
        MLX5R_ERR_UNSUPPORTED => b"not supported by the device\0",
        MLX5R_ERR_CAPS_EXCEEDED => b"QP capabilities exceed the device's limits\0",
        MLX5R_ERR_TIMEOUT => b"timed out\0",
        MLX5R_ERR_DEVICE_FATAL => b"the device reported a fatal error\0",
        MLX5R_ERR_BAD_QUEUE => b"the backend's queue memory is not a usable ring\0",
        MLX5R_ERR_BAD_UMR => b"memory window bind, LOCAL_INV or mkey list refused\0",
        _ => b"unknown error\0",
    };
    s.as_ptr() as *const c_char
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_api::ring::{DescArg, DescError};
    use mlx5_api::{Arg, BackendError, InvalidArgument, QpState, Queue, Unsupported};

    /// Each kind of front-end error has its own code, written out here from
    /// the header's list, and every code has its own text.
    #[test]
    fn every_error_kind_has_its_own_code() {
        let st = QpState::Reset;
        let cases: Vec<(Error, i32)> = vec![
            (Error::SqFull { needed: 1, free: 0 }, -1),
            (Error::RqFull { capacity: 1 }, -2),
            (Error::SrqFull { capacity: 1 }, -3),
            (Error::TooManySge { count: 2, max: 1 }, -4),
            (Error::InlineTooLarge { len: 9, max: 8 }, -5),
            (Error::WqeTooLarge { ds: 9, max: 8 }, -6),
            (Error::MessageTooLong { len: 9, max: 8 }, -7),
            (Error::SgeTooLong { len: 1 << 31 }, -8),
            (Error::InvalidArgument(InvalidArgument::Wqe(PostError::BadOpcode { opcode: 0x1f })), -9),
            (Error::InvalidArgument(InvalidArgument::Wqe(PostError::BadAtomic)), -10),
            (Error::InvalidArgument(InvalidArgument::Wqe(PostError::MissingAv)), -11),
            (Error::InvalidArgument(InvalidArgument::Wqe(PostError::InlineNotAllowed)), -12),
            (
                Error::InvalidArgument(InvalidArgument::OutOfRange {
                    arg: Arg::Psn,
                    value: 1 << 24,
                    min: 0,
                    max: 1,
                }),
                -20,
            ),
            (Error::Backend { op: "x", reason: Box::new(BackendError::NoDctNumber) }, -21),
            (Error::Verbs { op: "x", errno: 22, msg: String::new() }, -21),
            (Error::Backend { op: "x", reason: Box::new(BackendError::NoDevice { errno: None }) }, -22),
            (Error::Backend { op: "x", reason: Box::new(BackendError::NotMlx5 { name: "y".into() }) }, -22),
            (Error::ForeignObject { what: "PD", owner: 1, used_with: 2 }, -23),
            (Error::QpState { qpn: 1, state: st, needed: QpState::Rts }, -24),
            (Error::InvalidTransition { from: st, to: QpState::Rts }, -24),
            (Error::DctNotReady { state: st }, -24),
            (Error::CqOverrun { cqn: 1 }, -25),
            (Error::Unsupported(Unsupported::DcTransport), -26),
            (Error::CapsExceeded { what: "max_send_wr", asked: 2, max: 1 }, -27),
            (Error::Timeout, -28),
            (Error::DeviceFatal, -29),
            (Error::BadQueue { queue: Queue::Cq, source: DescError::Null { arg: DescArg::Buf } }, -30),
        ];
        for (e, code) in &cases {
            assert_eq!(error_code(e), *code, "{e:?}");
            // SAFETY: the returned text is static and NUL-terminated.
            let text = unsafe { std::ffi::CStr::from_ptr(mlx5r_strerror(*code)) };
            assert_ne!(text.to_str().unwrap(), "unknown error", "{code}");
        }
    }
}
