//! The shared receive queue as plain data (spec §4.3): a linked list
//! through each WQE's `next_wqe_index`. At creation WQE i points to i+1;
//! software posts at `head` and follows the list, and re-links each WQE
//! freed by a completion behind `tail`. The list is never rewritten on post
//! (PITFALLS: a library that zeroed it landed every receive in slot 0). The
//! tail WQE is a spare that is never posted, so `head == tail` means full.
//! The doorbell record counts posted WQEs (16 bits).

use core::sync::atomic::{AtomicU32, Ordering};

use crate::ring::barrier::udma_to_device_barrier;
use crate::ring::error::{check_pow2, check_ptr, DescArg, DescError, PostError};
use crate::ring::seg::{set_scatter_list, set_srq_next_seg, Sge};

/// Largest shared receive queue in WQEs (16-bit `next_wqe_index`).
pub const MAX_SRQ_WQES: u32 = 1 << 15;
/// Largest shared receive WQE stride in bytes.
pub const MAX_SRQ_STRIDE: u32 = 1024;

/// A shared receive queue (`struct mlx5dv_srq` plus its list state).
#[derive(Debug)]
#[repr(C)]
pub struct SrqDesc {
    /// `wqe_cnt` WQEs of `stride` bytes: a 16-byte next segment, then
    /// scatter entries.
    pub buf: *mut u8,
    /// Doorbell record word 0: WQEs posted.
    pub dbrec: *mut u32,
    /// Optional `wqe_cnt` wr-ids by WQE index (null: not tracked here).
    pub wrid: *mut u64,
    /// Number of WQEs, a power of two.
    pub wqe_cnt: u32,
    /// Bytes per WQE.
    pub stride: u32,
    /// Largest scatter list (at most `stride / 16 - 1`).
    pub max_sge: u32,
    /// Index of the next WQE to post.
    pub head: AtomicU32,
    /// Index of the list's last WQE (the spare).
    pub tail: AtomicU32,
    /// WQEs posted (the doorbell record's counter).
    pub counter: AtomicU32,
}

// SAFETY: as for `SqDesc`; post and free run on one thread at a time.
unsafe impl Send for SrqDesc {}
// SAFETY: as above.
unsafe impl Sync for SrqDesc {}

impl SrqDesc {
    /// A shared receive queue over memory described as `mlx5dv_init_obj`
    /// does; call [`SrqDesc::init_list`] before the first post.
    ///
    /// Checks what every method relies on and refuses the rest with a
    /// [`DescError`]: `buf` non-null, `dbrec` non-null and 4-byte aligned,
    /// `wqe_cnt` a power of two from 2 (one WQE is the list's spare) to
    /// [`MAX_SRQ_WQES`] (16-bit `next_wqe_index`), `stride` a power of two
    /// from 32 (the next segment and one scatter entry) to
    /// [`MAX_SRQ_STRIDE`]. `max_sge` is capped at `stride / 16 - 1`.
    pub fn new(
        buf: *mut u8,
        wqe_cnt: u32,
        stride: u32,
        dbrec: *mut u32,
        max_sge: u32,
    ) -> Result<Self, DescError> {
        check_ptr(DescArg::Buf, buf, 1)?;
        check_ptr(DescArg::Dbrec, dbrec, 4)?;
        check_pow2(DescArg::Count, wqe_cnt, 2, MAX_SRQ_WQES)?;
        check_pow2(DescArg::Stride, stride, 32, MAX_SRQ_STRIDE)?;
        let gs = stride / 16 - 1;
        Ok(SrqDesc {
            buf,
            dbrec,
            wrid: core::ptr::null_mut(),
            wqe_cnt,
            stride,
            max_sge: if max_sge < gs { max_sge } else { gs },
            head: AtomicU32::new(0),
            tail: AtomicU32::new(wqe_cnt - 1),
            counter: AtomicU32::new(0),
        })
    }

    /// Usable capacity (one WQE is the list's spare).
    pub fn capacity(&self) -> u32 {
        self.wqe_cnt.saturating_sub(1)
    }

    #[inline(always)]
    fn wqe(&self, index: u32) -> *mut u8 {
        self.buf.wrapping_add(((index & self.wqe_cnt.wrapping_sub(1)).wrapping_mul(self.stride)) as usize)
    }

    /// The `next_wqe_index` of WQE `index`.
    ///
    /// # Safety
    /// The descriptor describes live memory.
    #[inline(always)]
    pub unsafe fn next(&self, index: u32) -> u32 {
        // SAFETY: bytes 2..4 of the WQE's next segment.
        u16::from_be(unsafe { (self.wqe(index).add(2) as *const u16).read_unaligned() }) as u32
    }

    /// Link every WQE i to i + 1 (the state at creation, spec §4.3).
    ///
    /// # Safety
    /// The descriptor describes live memory the device does not use yet.
    pub unsafe fn init_list(&self) {
        for i in 0..self.wqe_cnt {
            // SAFETY: the next segment of WQE i (caller contract).
            set_srq_next_seg(
                unsafe { &mut *(self.wqe(i) as *mut [u8; 16]) },
                ((i + 1) & self.wqe_cnt.wrapping_sub(1)) as u16,
            );
        }
    }

    /// Post one receive at `head` (its next segment is left as it is) and
    /// publish the new count. Checks first; nothing written on error.
    /// Returns the WQE index.
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread posts and frees.
    #[inline(always)]
    pub unsafe fn post(&self, sges: &[Sge], wr_id: u64) -> Result<u32, PostError> {
        let n = sges.len() as u32;
        if n > self.max_sge {
            return Err(PostError::TooManySge { count: n, max: self.max_sge });
        }
        if let Some(s) = sges.iter().find(|s| s.len > i32::MAX as u32) {
            return Err(PostError::SgeTooLong { len: s.len as u64 });
        }
        let head = self.head.load(Ordering::Relaxed);
        if head == self.tail.load(Ordering::Relaxed) {
            return Err(PostError::SrqFull { capacity: self.capacity() });
        }
        // SAFETY: the WQE at head is free; scatter entries follow the next segment.
        unsafe {
            set_scatter_list(self.wqe(head).add(16), (self.stride / 16).wrapping_sub(1), sges, false);
            if !self.wrid.is_null() {
                *self.wrid.add(head as usize) = wr_id;
            }
            self.head.store(self.next(head), Ordering::Relaxed);
        }
        let counter = self.counter.load(Ordering::Relaxed).wrapping_add(1) & 0xffff;
        self.counter.store(counter, Ordering::Relaxed);
        udma_to_device_barrier();
        // SAFETY: the doorbell record word is live (caller contract).
        unsafe { AtomicU32::from_ptr(self.dbrec) }.store(counter.to_be(), Ordering::Release);
        Ok(head)
    }

    /// Free WQE `index` (a CQE's `wqe_counter`) and link it behind the tail
    /// (`mlx5_free_srq_wqe`). Returns its wr-id when tracked here. The
    /// caller checks that the index names an outstanding WQE.
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread posts and frees.
    #[inline(always)]
    pub unsafe fn free_wqe(&self, index: u32) -> Option<u64> {
        let tail = self.tail.load(Ordering::Relaxed);
        // SAFETY: bytes 2..4 of the tail WQE's next segment.
        unsafe { (self.wqe(tail).add(2) as *mut u16).write_unaligned((index as u16).to_be()) };
        self.tail.store(index & self.wqe_cnt.wrapping_sub(1), Ordering::Relaxed);
        // SAFETY: `wrid` has wqe_cnt entries when not null (field contract).
        (!self.wrid.is_null())
            .then(|| unsafe { *self.wrid.add((index & self.wqe_cnt.wrapping_sub(1)) as usize) })
    }
}
