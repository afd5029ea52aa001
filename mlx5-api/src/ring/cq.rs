//! The completion queue as plain data (spec §5.5, §5.6): [`CqDesc`] is
//! `struct mlx5dv_cq` plus the consumer index. Ownership: entry
//! `ci & (cqe_cnt - 1)` belongs to software iff its opcode is not INVALID
//! and its owner bit equals `(ci >> log2(cqe_cnt)) & 1`; then the read
//! barrier, then the rest of the CQE. The consumer index goes to doorbell
//! record word 0 (24 bits) once the CQE has been read.

use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::ring::barrier::udma_from_device_barrier;
use crate::ring::cqe::{cqe_opcode, Cqe};

/// A completion queue.
#[derive(Debug)]
#[repr(C)]
pub struct CqDesc {
    /// `cqe_cnt` slots of `cqe_size` bytes.
    pub buf: *mut u8,
    /// Doorbell record: word 0 set_ci, word 1 arm.
    pub dbrec: *mut u32,
    /// Number of slots, a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128 (the CQE proper is the second half of a 128-byte slot).
    pub cqe_size: u32,
    /// CQ number.
    pub cqn: u32,
    /// Free-running consumer index.
    pub ci: AtomicU32,
}

// SAFETY: atomic consumer index; the ring is read through `unsafe` methods
// (one polling thread).
unsafe impl Send for CqDesc {}
// SAFETY: as above.
unsafe impl Sync for CqDesc {}

impl CqDesc {
    /// A CQ over memory described as `mlx5dv_init_obj` does.
    pub const fn new(buf: *mut u8, cqe_cnt: u32, cqe_size: u32, dbrec: *mut u32, cqn: u32) -> Self {
        CqDesc { buf, dbrec, cqe_cnt, cqe_size, cqn, ci: AtomicU32::new(0) }
    }

    /// The consumer index.
    #[inline(always)]
    pub fn consumer(&self) -> u32 {
        self.ci.load(Ordering::Relaxed)
    }

    /// The CQE proper (64 bytes) at the consumer index if software owns it,
    /// after the read barrier; `None` when there is nothing yet.
    ///
    /// # Safety
    /// The descriptor describes live memory.
    #[inline(always)]
    pub unsafe fn next(&self) -> Option<*const u8> {
        let ci = self.consumer();
        let mask = self.cqe_cnt - 1;
        // SAFETY: slot < cqe_cnt; a 128-byte slot holds the CQE in its second half.
        let cqe = unsafe { self.buf.add(((ci & mask) * self.cqe_size + (self.cqe_size - 64)) as usize) };
        // SAFETY: op_own is byte 63 of the CQE; the device stores it last.
        let op_own = unsafe { AtomicU8::from_ptr(cqe.add(63)) }.load(Ordering::Acquire);
        let pass = (ci & self.cqe_cnt != 0) as u8;
        if op_own >> 4 == cqe_opcode::INVALID || (op_own & 1) != pass {
            return None;
        }
        udma_from_device_barrier();
        Some(cqe)
    }

    /// Hand the CQE at the consumer index back to the device: advance the
    /// index and publish it in doorbell record word 0.
    ///
    /// # Safety
    /// The descriptor describes live memory; the CQE was read.
    #[inline(always)]
    pub unsafe fn advance(&self) {
        let ci = self.consumer().wrapping_add(1);
        self.ci.store(ci, Ordering::Relaxed);
        // SAFETY: the doorbell record is live (caller contract).
        unsafe { AtomicU32::from_ptr(self.dbrec) }.store((ci & 0xff_ffff).to_be(), Ordering::Release);
    }

    /// The next CQE decoded and handed back, or `None` when there is
    /// nothing yet. An error CQE is a result (its `error` is set).
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread polls.
    #[inline(always)]
    pub unsafe fn poll(&self) -> Option<Cqe> {
        // SAFETY: forwarded.
        unsafe {
            let p = self.next()?;
            let c = Cqe::read(p);
            self.advance();
            Some(c)
        }
    }
}
