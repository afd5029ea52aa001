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
    /// A UMR (memory window bind, LOCAL_INV, mkey list) the NIC would refuse.
    #[error("UMR refused: {why}")]
    BadUmr {
        /// Why.
        why: &'static str,
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

/// Which argument of a descriptor constructor was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DescArg {
    /// The ring's memory (`buf`).
    Buf,
    /// The doorbell record word (`dbrec`).
    Dbrec,
    /// The number of WQEs, WQEBBs or CQEs.
    Count,
    /// Bytes per receive WQE.
    Stride,
    /// Bytes per CQE slot.
    CqeSize,
    /// A 24-bit queue number (QPN, CQN).
    Number,
    /// The largest WQE in DS units.
    MaxDs,
}

impl core::fmt::Display for DescArg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            DescArg::Buf => "ring buffer",
            DescArg::Dbrec => "doorbell record",
            DescArg::Count => "entry count",
            DescArg::Stride => "WQE stride",
            DescArg::CqeSize => "CQE size",
            DescArg::Number => "queue number",
            DescArg::MaxDs => "maximum WQE size (DS)",
        })
    }
}

/// Why a queue descriptor constructor ([`crate::ring::SqDesc::new`],
/// [`crate::ring::RqDesc::new`], [`crate::ring::SrqDesc::new`],
/// [`crate::ring::CqDesc::new`]) refused its arguments. A descriptor that
/// was built is one every method can use without overflow or a stray
/// address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DescError {
    /// A pointer the queue needs is null.
    #[error("{arg} is a null pointer")]
    Null {
        /// Which pointer.
        arg: DescArg,
    },
    /// A pointer is not aligned as the hardware and the atomics need.
    #[error("{arg} at {addr:#x} is not {align}-byte aligned")]
    Misaligned {
        /// Which pointer.
        arg: DescArg,
        /// Its address.
        addr: usize,
        /// The alignment required.
        align: usize,
    },
    /// A count, stride or size that must be a power of two is not.
    #[error("{arg} {value} is not a power of two")]
    NotPowerOfTwo {
        /// Which argument.
        arg: DescArg,
        /// The value given.
        value: u32,
    },
    /// A value outside the range the wire format or the counters allow.
    #[error("{arg} {value} is outside {min}..={max}")]
    OutOfRange {
        /// Which argument.
        arg: DescArg,
        /// The value given.
        value: u32,
        /// The smallest accepted.
        min: u32,
        /// The largest accepted.
        max: u32,
    },
}

/// `Ok` when `value` is a power of two in `min..=max` (both powers of two).
pub(crate) const fn check_pow2(arg: DescArg, value: u32, min: u32, max: u32) -> Result<(), DescError> {
    if !value.is_power_of_two() {
        return Err(DescError::NotPowerOfTwo { arg, value });
    }
    check_range(arg, value, min, max)
}

/// `Ok` when `value` lies in `min..=max`.
pub(crate) const fn check_range(arg: DescArg, value: u32, min: u32, max: u32) -> Result<(), DescError> {
    if value < min || value > max {
        return Err(DescError::OutOfRange { arg, value, min, max });
    }
    Ok(())
}

/// `Ok` when `p` is non-null and `align`-aligned.
pub(crate) fn check_ptr<T>(arg: DescArg, p: *const T, align: usize) -> Result<(), DescError> {
    if p.is_null() {
        return Err(DescError::Null { arg });
    }
    let addr = p as usize;
    if !addr.is_multiple_of(align) {
        return Err(DescError::Misaligned { arg, addr, align });
    }
    Ok(())
}
