//! The receive queue of a QP as plain data (spec §4.1, §4.2): receive WQEs
//! are scatter lists of `stride / 16` data segments, terminated by an
//! invalid-lkey entry when shorter; the producer counter goes to doorbell
//! record word 0 (16 bits). There is no MMIO doorbell for receives.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::ring::barrier::udma_to_device_barrier;
use crate::ring::error::PostError;
use crate::ring::seg::{set_scatter_list, Sge};
use crate::ring::sq::Retired;

/// A QP's receive queue (the RQ half of `struct mlx5dv_qp`).
#[derive(Debug)]
#[repr(C)]
pub struct RqDesc {
    /// `wqe_cnt` WQEs of `stride` bytes.
    pub buf: *mut u8,
    /// The RQ word of the doorbell record (`dbrec[0]`, `MLX5_RCV_DBR`).
    pub dbrec: *mut u32,
    /// Optional `wqe_cnt` wr-ids by slot (null: not tracked here).
    pub wrid: *mut u64,
    /// Number of WQEs, a power of two.
    pub wqe_cnt: u32,
    /// Bytes per WQE, a power of two (16 per scatter entry).
    pub stride: u32,
    /// Largest scatter list accepted (at most `stride / 16`).
    pub max_sge: u32,
    /// Receives posted (free-running).
    pub pi: AtomicU32,
    /// Receives completed (free-running).
    pub ci: AtomicU32,
}

// SAFETY: as for `SqDesc`: atomic counters, memory reached through `unsafe`
// methods (one posting thread, one retiring thread).
unsafe impl Send for RqDesc {}
// SAFETY: as above.
unsafe impl Sync for RqDesc {}

impl RqDesc {
    /// A receive queue over memory described as `mlx5dv_init_obj` does.
    pub const fn new(buf: *mut u8, wqe_cnt: u32, stride: u32, dbrec: *mut u32, max_sge: u32) -> Self {
        let gs = stride / 16;
        RqDesc {
            buf,
            dbrec,
            wrid: core::ptr::null_mut(),
            wqe_cnt,
            stride,
            max_sge: if max_sge < gs { max_sge } else { gs },
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
        }
    }

    /// Receives posted and not yet completed.
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        self.pi.load(Ordering::Relaxed).wrapping_sub(self.ci.load(Ordering::Acquire))
    }

    /// Write one receive WQE at the producer slot and publish it in the
    /// doorbell record (barrier A first). Zero-length entries are skipped
    /// (rdma-core's RQ path). Every check comes first: nothing is written on
    /// error. Returns the slot.
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread posts at a time.
    #[inline(always)]
    pub unsafe fn post(&self, sges: &[Sge], wr_id: u64) -> Result<u32, PostError> {
        let mut n = 0u32;
        for s in sges {
            if s.len > i32::MAX as u32 {
                return Err(PostError::SgeTooLong { len: s.len as u64 });
            }
            n += (s.len != 0) as u32;
        }
        if n > self.max_sge {
            return Err(PostError::TooManySge { count: n, max: self.max_sge });
        }
        if self.outstanding() >= self.wqe_cnt {
            return Err(PostError::RqFull { capacity: self.wqe_cnt });
        }
        let pi = self.pi.load(Ordering::Relaxed);
        let slot = pi & (self.wqe_cnt - 1);
        // SAFETY: the slot is free and inside the ring; n <= stride / 16.
        unsafe {
            set_scatter_list(self.buf.add((slot * self.stride) as usize), self.stride / 16, sges, true);
            if !self.wrid.is_null() {
                *self.wrid.add(slot as usize) = wr_id;
            }
        }
        let pi = pi.wrapping_add(1);
        self.pi.store(pi, Ordering::Relaxed);
        udma_to_device_barrier();
        // SAFETY: the doorbell record word is live (caller contract).
        unsafe { AtomicU32::from_ptr(self.dbrec) }.store((pi & 0xffff).to_be(), Ordering::Release);
        Ok(slot)
    }

    /// Retire the receive with counter `wqe_counter` (receives complete in
    /// order; spec §5.9). `None` when no outstanding receive has it.
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread retires at a time.
    #[inline(always)]
    pub unsafe fn retire(&self, wqe_counter: u16) -> Option<Retired> {
        if self.wqe_cnt == 0 {
            return None;
        }
        let ci = self.ci.load(Ordering::Relaxed);
        let dist = (wqe_counter as u32).wrapping_sub(ci) & 0xffff;
        if dist >= self.outstanding() {
            return None;
        }
        let idx = ci.wrapping_add(dist);
        let slot = idx & (self.wqe_cnt - 1);
        // SAFETY: `wrid` has wqe_cnt entries when not null (field contract).
        let wr_id = (!self.wrid.is_null()).then(|| unsafe { *self.wrid.add(slot as usize) });
        self.ci.store(idx.wrapping_add(1), Ordering::Release);
        Some(Retired { slot, wr_id })
    }

    /// Forget every receive (QP to RESET).
    pub fn reset(&self) {
        self.pi.store(0, Ordering::Relaxed);
        self.ci.store(0, Ordering::Relaxed);
    }
}
