//! Scatter-to-CQE on the consumer side (spec §5.7): data the device put
//! into a CQE is copied into the scatter list of the WQE it completes, as
//! rdma-core's poller does: a receive WQE's data segments (RQ, or SRQ after
//! its 16-byte next segment), or the data segments of a send WQE after its
//! remote-address (READ) or remote-address and atomic (atomics) segments.

use crate::ring::seg::opcode;
use crate::ring::{RqDesc, SqDesc, SrqDesc};

/// The data did not fit the WQE's scatter list (`IBV_WC_LOC_LEN_ERR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoesNotFit;

/// Copy `data` into the data segments `seg(0..n)` (BE32 byte count, BE32
/// lkey, BE64 address), stopping at the terminator (lkey 0x100).
///
/// # Safety
/// Every segment `seg` returns is readable, and the addresses in them are
/// writable for their byte counts (memory the caller registered).
unsafe fn copy_to_segments(
    n: u32,
    seg: impl Fn(u32) -> *const [u8; 16],
    data: &[u8],
) -> Result<(), DoesNotFit> {
    let mut at = 0usize;
    for i in 0..n {
        if at == data.len() {
            return Ok(());
        }
        // SAFETY: caller contract.
        let s = unsafe { *seg(i) };
        let len = (u32::from_be_bytes([s[0], s[1], s[2], s[3]]) & 0x7fff_ffff) as usize;
        let lkey = u32::from_be_bytes([s[4], s[5], s[6], s[7]]);
        if lkey == 0x100 {
            break;
        }
        let addr = u64::from_be_bytes([s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]]);
        let m = len.min(data.len() - at);
        // SAFETY: caller contract: the segment's buffer is writable for `len` bytes.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(at), addr as usize as *mut u8, m) };
        at += m;
    }
    if at == data.len() {
        Ok(())
    } else {
        Err(DoesNotFit)
    }
}

impl RqDesc {
    /// Copy scattered `data` into the RQ WQE with counter `wqe_counter`.
    ///
    /// # Safety
    /// The descriptor describes live memory; the WQE is posted and not yet
    /// retired; its buffers are writable.
    pub unsafe fn copy_scattered(&self, wqe_counter: u16, data: &[u8]) -> Result<(), DoesNotFit> {
        if self.wqe_cnt == 0 {
            // An empty queue (a QP without its own) holds no WQE.
            return Err(DoesNotFit);
        }
        let base =
            self.buf.wrapping_add(((u32::from(wqe_counter) & (self.wqe_cnt - 1)) * self.stride) as usize);
        // SAFETY: forwarded; segments inside the WQE's stride.
        unsafe {
            copy_to_segments(self.stride / 16, |i| base.wrapping_add(16 * i as usize) as *const _, data)
        }
    }
}

impl SrqDesc {
    /// Copy scattered `data` into SRQ WQE `index`.
    ///
    /// # Safety
    /// As [`RqDesc::copy_scattered`].
    pub unsafe fn copy_scattered(&self, index: u16, data: &[u8]) -> Result<(), DoesNotFit> {
        let base =
            self.buf.wrapping_add(((u32::from(index) & (self.wqe_cnt - 1)) * self.stride) as usize + 16);
        let n = self.stride / 16 - 1;
        // SAFETY: forwarded; segments after the next segment, inside the stride.
        unsafe { copy_to_segments(n, |i| base.wrapping_add(16 * i as usize) as *const _, data) }
    }
}

impl SqDesc {
    /// Copy a scattered READ response or atomic result into the data
    /// segments of the send WQE with index `wqe_counter` (ring wrap by the
    /// modulo rule). Other opcodes carry no requester data.
    ///
    /// # Safety
    /// The descriptor describes live memory; the WQE is posted and not yet
    /// retired; its local buffers are writable.
    pub unsafe fn copy_scattered(
        &self,
        wqe_counter: u16,
        wqe_opcode: u8,
        data: &[u8],
    ) -> Result<(), DoesNotFit> {
        let start = u32::from(wqe_counter);
        let first = match wqe_opcode {
            opcode::RDMA_READ => 2,
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => 3,
            _ => return Err(DoesNotFit),
        };
        // SAFETY: the ctrl segment of a posted WQE.
        let ds = u32::from(unsafe { (*self.ds_ptr(start, 0))[7] } & 0x3f);
        // SAFETY: forwarded; DS units of the WQE.
        unsafe {
            copy_to_segments(ds.saturating_sub(first), |i| self.ds_ptr(start, first + i) as *const _, data)
        }
    }
}
