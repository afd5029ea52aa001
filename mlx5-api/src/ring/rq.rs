//! The receive queue of a QP as plain data (spec §4.1, §4.2): receive WQEs
//! are scatter lists of `stride / 16` data segments, terminated by an
//! invalid-lkey entry when shorter; the producer counter goes to doorbell
//! record word 0 (16 bits). There is no MMIO doorbell for receives.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::ring::barrier::udma_to_device_barrier;
use crate::ring::error::{check_pow2, check_ptr, DescArg, DescError, PostError};
use crate::ring::seg::{set_data_ptr_seg, Sge, INVALID_LKEY};
use crate::ring::sq::Retired;

/// Largest receive ring in WQEs (16-bit counters in the doorbell record
/// and in a CQE's `wqe_counter`).
pub const MAX_RQ_WQES: u32 = 1 << 15;
/// Largest receive WQE stride in bytes (64 scatter entries).
pub const MAX_RQ_STRIDE: u32 = 1024;

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

/// Check each entry and write it into the free slot at `wqe`, skipping
/// empty ones: the number written.
///
/// # Safety
/// `wqe` is writable for `max_sge` data segments.
#[inline(never)]
unsafe fn write_list(wqe: *mut [u8; 16], sges: &[Sge], max_sge: u32) -> Result<u32, PostError> {
    let mut n = 0u32;
    for s in sges {
        if s.len == 0 {
            continue;
        }
        if s.len > i32::MAX as u32 {
            return Err(PostError::SgeTooLong { len: s.len as u64 });
        }
        if n >= max_sge {
            return Err(too_many(sges, max_sge));
        }
        // SAFETY: n < max_sge (caller contract).
        set_data_ptr_seg(unsafe { &mut *wqe.add(n as usize) }, s.len, s.lkey, s.addr);
        n += 1;
    }
    Ok(n)
}

/// The error for a list with more non-empty entries than `max`.
#[cold]
fn too_many(sges: &[Sge], max: u32) -> PostError {
    PostError::TooManySge { count: sges.iter().filter(|s| s.len != 0).count() as u32, max }
}

// SAFETY: as for `SqDesc`: atomic counters, memory reached through `unsafe`
// methods (one posting thread, one retiring thread).
unsafe impl Send for RqDesc {}
// SAFETY: as above.
unsafe impl Sync for RqDesc {}

impl RqDesc {
    /// A receive queue over memory described as `mlx5dv_init_obj` does.
    ///
    /// Checks what every method relies on and refuses the rest with a
    /// [`DescError`]: `buf` non-null, `dbrec` non-null and 4-byte aligned,
    /// `wqe_cnt` a power of two up to [`MAX_RQ_WQES`] (the doorbell record
    /// and a CQE's `wqe_counter` carry 16 bits), `stride` a power of two
    /// from 16 to [`MAX_RQ_STRIDE`]. `max_sge` is capped at `stride / 16`.
    /// A QP without a receive queue of its own uses [`RqDesc::empty`].
    pub fn new(
        buf: *mut u8,
        wqe_cnt: u32,
        stride: u32,
        dbrec: *mut u32,
        max_sge: u32,
    ) -> Result<Self, DescError> {
        check_ptr(DescArg::Buf, buf, 1)?;
        check_ptr(DescArg::Dbrec, dbrec, 4)?;
        check_pow2(DescArg::Count, wqe_cnt, 1, MAX_RQ_WQES)?;
        check_pow2(DescArg::Stride, stride, 16, MAX_RQ_STRIDE)?;
        Ok(RqDesc {
            buf,
            dbrec,
            wrid: core::ptr::null_mut(),
            wqe_cnt,
            stride,
            max_sge: if max_sge < stride / 16 { max_sge } else { stride / 16 },
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
        })
    }

    /// The receive queue of a QP without one of its own (SRQ, DCT, or
    /// none): no ring, no room; every post is refused as
    /// [`PostError::RqFull`] before anything is written.
    pub const fn empty() -> Self {
        RqDesc {
            buf: core::ptr::null_mut(),
            dbrec: core::ptr::null_mut(),
            wrid: core::ptr::null_mut(),
            wqe_cnt: 0,
            stride: 16,
            max_sge: 0,
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
        }
    }

    /// Receives posted and not yet completed.
    #[inline(always)]
    pub fn outstanding(&self) -> u32 {
        self.pi.load(Ordering::Relaxed).wrapping_sub(self.ci.load(Ordering::Acquire))
    }

    /// Write one receive WQE at the producer slot, store `wr_id` in the
    /// wr-id array (when there is one) and publish the WQE in the doorbell
    /// record (barrier A first). Zero-length entries are skipped
    /// (rdma-core's RQ path). On error nothing is published (the free slot
    /// may hold part of the list: the device never reads it). Returns the
    /// slot.
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread posts at a time.
    #[inline(always)]
    pub unsafe fn post(&self, sges: &[Sge], wr_id: u64) -> Result<u32, PostError> {
        let end = self.ci.load(Ordering::Acquire).wrapping_add(self.wqe_cnt);
        // SAFETY: forwarded; `end` is the ring's own bound.
        unsafe { self.post_inner::<true>(sges, Some(wr_id), end) }
    }

    /// [`RqDesc::post`] without touching the wr-id array, for a poster that
    /// keeps its own entries and its own bound: it accepts while the
    /// producer counter is before `end` (free-running: `end - pi`, read as
    /// signed, above 0). The handle layer keeps `end` at `ci + wqe_cnt`
    /// while the QP may post receives and at `ci` while it may not (RESET,
    /// or no receive queue of its own), so that the state, the queue and
    /// the room are one compare, with no load of the consumer counter. A
    /// refusal for the bound is [`PostError::RqFull`] with `end - ci` as
    /// capacity.
    ///
    /// # Safety
    /// As [`RqDesc::post`]; `end - ci` is at most `wqe_cnt`, and `max_sge`
    /// is at least 1 unless `end == ci` (a single entry is written without
    /// looking at `max_sge`).
    #[inline(always)]
    pub unsafe fn post_untracked(&self, sges: &[Sge], end: u32) -> Result<u32, PostError> {
        debug_assert!(end.wrapping_sub(self.ci.load(Ordering::Relaxed)) <= self.wqe_cnt);
        debug_assert!(end == self.ci.load(Ordering::Relaxed) || self.max_sge >= 1);
        // SAFETY: forwarded.
        unsafe { self.post_inner::<false>(sges, None, end) }
    }

    /// The post. `CHECK_ONE`: whether a single entry is checked against
    /// `max_sge` (the ring core's own post, whose descriptor may say 0).
    #[inline(always)]
    unsafe fn post_inner<const CHECK_ONE: bool>(
        &self,
        sges: &[Sge],
        wr_id: Option<u64>,
        end: u32,
    ) -> Result<u32, PostError> {
        // What the post reads from the descriptor.
        let (buf, wqe_cnt, stride) = (self.buf, self.wqe_cnt, self.stride);
        let pi = self.pi.load(Ordering::Relaxed);
        if end.wrapping_sub(pi) as i32 <= 0 {
            return Err(self.full(end));
        }
        let slot = pi & wqe_cnt.wrapping_sub(1);
        let wqe = buf.wrapping_add((slot * stride) as usize) as *mut [u8; 16];
        // A single entry (the common receive) goes straight through; longer
        // lists, empty entries and errors take the general pass.
        match sges {
            [s] if s.len.wrapping_sub(1) < i32::MAX as u32 && (!CHECK_ONE || self.max_sge != 0) => {
                // SAFETY: 0 < max_sge <= stride / 16 (checked, or the
                // caller's contract): inside the free slot.
                set_data_ptr_seg(unsafe { &mut *wqe }, s.len, s.lkey, s.addr);
                if stride > 16 {
                    // SAFETY: as above; the terminator after the one entry.
                    set_data_ptr_seg(unsafe { &mut *wqe.add(1) }, 0, INVALID_LKEY, 0);
                }
            }
            _ => {
                // SAFETY: the free slot of stride bytes; max_sge <= stride / 16.
                let n = unsafe { write_list(wqe, sges, self.max_sge)? };
                if n < stride / 16 {
                    // SAFETY: as above; the terminator of a shorter list.
                    set_data_ptr_seg(unsafe { &mut *wqe.add(n as usize) }, 0, INVALID_LKEY, 0);
                }
            }
        }
        if let Some(w) = wr_id {
            if !self.wrid.is_null() {
                // SAFETY: `wrid` has wqe_cnt entries (field contract).
                unsafe { *self.wrid.add(slot as usize) = w };
            }
        }
        let pi = pi.wrapping_add(1);
        self.pi.store(pi, Ordering::Relaxed);
        udma_to_device_barrier();
        // SAFETY: the doorbell record word is live (caller contract).
        unsafe { AtomicU32::from_ptr(self.dbrec) }.store((pi & 0xffff).to_be(), Ordering::Release);
        Ok(slot)
    }

    /// The refusal of a post at bound `end`.
    #[cold]
    fn full(&self, end: u32) -> PostError {
        PostError::RqFull { capacity: end.wrapping_sub(self.ci.load(Ordering::Relaxed)) }
    }

    /// Retire the receive with counter `wqe_counter` (receives complete in
    /// order; spec §5.9). `None` when no outstanding receive has it.
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread retires at a time.
    #[inline(always)]
    pub unsafe fn retire(&self, wqe_counter: u16) -> Option<Retired> {
        // SAFETY: forwarded.
        let (_, idx) = unsafe { self.retire_span(wqe_counter)? };
        let slot = idx & self.wqe_cnt.wrapping_sub(1);
        // SAFETY: `wrid` has wqe_cnt entries when not null (field contract).
        let wr_id = (!self.wrid.is_null()).then(|| unsafe { *self.wrid.add(slot as usize) });
        Some(Retired { slot, wr_id })
    }

    /// [`RqDesc::retire`] as free-running counters: the oldest outstanding
    /// receive before the call and the one `wqe_counter` names (equal
    /// unless completions were lost: the receives between are retired
    /// without one). For a poster that keeps its own entries by slot.
    ///
    /// # Safety
    /// As [`RqDesc::retire`].
    #[inline(always)]
    pub unsafe fn retire_span(&self, wqe_counter: u16) -> Option<(u32, u32)> {
        if self.wqe_cnt == 0 {
            return None;
        }
        // The consumer is this thread's own counter: one load serves both.
        let ci = self.ci.load(Ordering::Relaxed);
        let dist = (wqe_counter as u32).wrapping_sub(ci) & 0xffff;
        if dist >= self.pi.load(Ordering::Relaxed).wrapping_sub(ci) {
            return None;
        }
        let idx = ci.wrapping_add(dist);
        self.ci.store(idx.wrapping_add(1), Ordering::Release);
        Some((ci, idx))
    }

    /// Forget every receive (QP to RESET).
    pub fn reset(&self) {
        self.pi.store(0, Ordering::Relaxed);
        self.ci.store(0, Ordering::Relaxed);
    }
}
