//! Typed views over the mlx5 wire formats: send/receive WQE segments and CQEs (spec §2–§5).
//!
//! Every view follows the smoltcp shape: a wrapper around `T: AsRef<[u8]>`, a private
//! `mod field` with byte ranges from the spec tables, `new_checked` refusing short
//! buffers, and big-endian getters (plus setters when `T: AsMut<[u8]>`).

pub(crate) mod cqe;
mod ctrl;
mod datagram;
mod recv;
mod segments;

pub use cqe::{cqe_opcode, syndrome, Cqe64, CqeRepr, ErrCqe, ErrCqeRepr};
pub use ctrl::{opcode, wqebbs_of, CtrlRepr, CtrlSeg};
pub use datagram::DatagramSeg;
pub use recv::{RecvDataSeg, SrqNextSeg, INVALID_LKEY};
pub use segments::{AtomicSeg, DataSeg, InlineSeg, RaddrSeg, INLINE_SEG};

/// A byte range inside a segment.
pub(crate) type Field = core::ops::Range<usize>;

/// One 16-byte unit ("octoword"), the unit of the `ds` field (spec §1.1).
pub const DS_SIZE: usize = 16;
/// One WQE basic block (spec §1.1).
pub const WQEBB_SIZE: usize = 64;
/// Largest WQE: 63 DS (spec §1.4).
pub const MAX_WQE_DS: usize = 63;

/// Why some bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The buffer is shorter than the structure.
    #[error("{what}: buffer of {got} bytes, need {need}")]
    Truncated {
        /// Structure being decoded.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// The ring is not a power-of-two number of 64-byte WQEBBs.
    #[error("ring of {len} bytes is not a power-of-two number of 64-byte WQEBBs")]
    BadRing {
        /// Ring length in bytes.
        len: usize,
    },
    /// A field holds a value the decoder cannot accept.
    #[error("{what}: invalid value {value:#x}")]
    Invalid {
        /// Field name.
        what: &'static str,
        /// Offending value.
        value: u64,
    },
}

pub(crate) fn check_len(what: &'static str, got: usize, need: usize) -> Result<(), DecodeError> {
    if got < need {
        Err(DecodeError::Truncated { what, need, got })
    } else {
        Ok(())
    }
}

// The helpers below index with ranges that `new_checked` has validated; views built
// with `new_unchecked` over a short buffer panic like smoltcp's do.
#[inline]
pub(crate) fn get_u16(b: &[u8], f: Field) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[f]);
    u16::from_be_bytes(a)
}
#[inline]
pub(crate) fn get_u32(b: &[u8], f: Field) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    u32::from_be_bytes(a)
}
#[inline]
pub(crate) fn get_u64(b: &[u8], f: Field) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f]);
    u64::from_be_bytes(a)
}
pub(crate) fn set_u16(b: &mut [u8], f: Field, v: u16) {
    b[f].copy_from_slice(&v.to_be_bytes());
}
pub(crate) fn set_u32(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_be_bytes());
}
pub(crate) fn set_u64(b: &mut [u8], f: Field, v: u64) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

/// Generates the common constructor/accessor boilerplate of a typed view.
macro_rules! view_common {
    ($name:ident, $len:expr, $what:expr) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Size of the structure in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length (getters panic if it is short).
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer, refusing one shorter than [`Self::LEN`].
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::DecodeError> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole structure.
            pub fn check_len(&self) -> Result<(), $crate::wire::DecodeError> {
                $crate::wire::check_len($what, self.buffer.as_ref().len(), $len)
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use view_common;
