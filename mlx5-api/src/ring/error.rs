//! [`PostError`]: why a WQE was refused. Every check runs before the
//! offending bytes could become visible to the NIC; the C ABI maps each
//! variant to a negative code.

/// A post-path limit or a malformed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// The send queue has not enough free WQEBBs for the WQE.
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
        /// WQEs the queue holds.
        capacity: u32,
    },
    /// The shared receive queue has no free WQE.
    #[error("shared receive queue full ({capacity} WQEs outstanding)")]
    SrqFull {
        /// WQEs the queue holds.
        capacity: u32,
    },
    /// More scatter/gather entries than the queue was created for.
    #[error("too many SGEs: {count} > max {max}")]
    TooManySge {
        /// Entries given.
        count: u32,
        /// The queue's limit.
        max: u32,
    },
    /// Inline payload larger than the QP's `max_inline_data`.
    #[error("inline data of {len} bytes exceeds max_inline_data {max}")]
    InlineTooLarge {
        /// Bytes given.
        len: usize,
        /// The QP's limit.
        max: usize,
    },
    /// The WQE would exceed the maximum WQE size (in 16-byte DS units).
    #[error("WQE of {ds} DS exceeds the maximum of {max} DS")]
    WqeTooLarge {
        /// DS the WQE needs.
        ds: u32,
        /// The QP's limit.
        max: u32,
    },
    /// The message exceeds what the QP can carry (UD: the path MTU).
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    MessageTooLong {
        /// Message bytes.
        len: u64,
        /// The QP's limit.
        max: u32,
    },
    /// An SGE length that does not fit the 31-bit byte_count field.
    #[error("SGE length {len} exceeds 2^31-1")]
    SgeTooLong {
        /// The length given.
        len: u64,
    },
    /// An opcode this QP type cannot send (UD: RDMA/atomics; DCI: SEND_INV)
    /// or that the library does not know.
    #[error("opcode 0x{opcode:02x} is not valid on this QP type")]
    BadOpcode {
        /// The mlx5 opcode.
        opcode: u8,
    },
    /// An atomic needs exactly one 8-byte result SGE and an 8-byte aligned
    /// remote address.
    #[error("atomic needs one 8-byte result SGE and an 8-byte aligned remote address")]
    BadAtomic,
    /// UD and DCI WQEs need an address vector.
    #[error("UD and DCI WQEs need an address vector")]
    MissingAv,
    /// Inline data where the opcode has a local scatter list (READ, atomics).
    #[error("inline data is not allowed for RDMA READ and atomics")]
    InlineNotAllowed,
}
