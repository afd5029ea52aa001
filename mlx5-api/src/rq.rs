//! Receive-queue ring of a QP (spec §4.1–4.2): receive WQEs are arrays of
//! data pointer segments, terminated by an invalid-lkey entry when shorter
//! than the stride; the producer counter goes to doorbell record word 0.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::barrier::udma_to_device_barrier;
use crate::error::{Error, Result};

/// `MLX5_INVALID_LKEY`: terminates a short scatter list.
pub const INVALID_LKEY: u32 = 0x100;

/// One scatter/gather entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

pub(crate) struct RecvQueue<T> {
    buf: *mut u8,
    wqe_cnt: u32,
    stride: u32,
    /// Data segments per WQE (`stride / 16`).
    max_gs: u32,
    max_sge: u32,
    pi: Cell<u32>,
    ci: Cell<u32>,
    dbrec_rq: *const AtomicU32,
    entries: Box<[UnsafeCell<Option<T>>]>,
}

impl<T> RecvQueue<T> {
    pub(crate) fn new(buf: *mut u8, wqe_cnt: u32, stride: u32, dbrec: *mut u32, max_sge: u32) -> Self {
        RecvQueue {
            buf,
            wqe_cnt,
            stride,
            max_gs: stride / 16,
            max_sge: max_sge.min(stride / 16),
            pi: Cell::new(0),
            ci: Cell::new(0),
            dbrec_rq: dbrec as *const AtomicU32,
            entries: (0..wqe_cnt).map(|_| UnsafeCell::new(None)).collect(),
        }
    }

    /// Outstanding receive WQEs.
    pub(crate) fn outstanding(&self) -> u32 {
        self.pi.get().wrapping_sub(self.ci.get())
    }

    /// Write one receive WQE and publish it in the doorbell record. Checks
    /// come first; nothing is written on error.
    #[inline(always)]
    pub(crate) fn post(&self, entry: T, sges: &[Sge]) -> Result<()> {
        let n = sges.iter().filter(|s| s.len != 0).count() as u32;
        if n > self.max_sge {
            return Err(Error::TooManySge { count: n, max: self.max_sge });
        }
        if let Some(s) = sges.iter().find(|s| s.len > i32::MAX as u32) {
            return Err(Error::SgeTooLong { len: s.len as u64 });
        }
        if self.outstanding() >= self.wqe_cnt {
            return Err(Error::RqFull { capacity: self.wqe_cnt });
        }
        let pi = self.pi.get();
        let slot = pi & (self.wqe_cnt - 1);
        // SAFETY: the slot is free (checked above) and inside the RQ ring.
        let wqe = unsafe { self.buf.add((slot * self.stride) as usize) };
        let mut i = 0usize;
        for s in sges.iter().filter(|s| s.len != 0) {
            let mut seg = [0u8; 16];
            seg[0..4].copy_from_slice(&s.len.to_be_bytes());
            seg[4..8].copy_from_slice(&s.lkey.to_be_bytes());
            seg[8..16].copy_from_slice(&s.addr.to_be_bytes());
            // SAFETY: i < max_gs, so the segment is inside this WQE's stride.
            unsafe { (wqe.add(i * 16) as *mut [u8; 16]).write(seg) };
            i += 1;
        }
        if (i as u32) < self.max_gs {
            let mut seg = [0u8; 16];
            seg[4..8].copy_from_slice(&INVALID_LKEY.to_be_bytes());
            // SAFETY: as above.
            unsafe { (wqe.add(i * 16) as *mut [u8; 16]).write(seg) };
        }
        // SAFETY: single-threaded; the slot's entry is not borrowed.
        unsafe { *self.entries[slot as usize].get() = Some(entry) };
        let pi = pi.wrapping_add(1);
        self.pi.set(pi);
        udma_to_device_barrier();
        // SAFETY: the doorbell record lives as long as the QP.
        unsafe { &*self.dbrec_rq }.store((pi & 0xffff).to_be(), Ordering::Release);
        Ok(())
    }

    /// Retire the receive WQE with counter `wqe_counter` (in order).
    #[inline(always)]
    pub(crate) fn retire(&self, wqe_counter: u16) -> Option<T> {
        if self.wqe_cnt == 0 {
            return None;
        }
        let ci = self.ci.get();
        let dist = (wqe_counter as u32).wrapping_sub(ci) & 0xffff;
        if dist >= self.outstanding() {
            return None;
        }
        let idx = ci.wrapping_add(dist);
        // SAFETY: single-threaded.
        let entry = unsafe { (*self.entries[(idx & (self.wqe_cnt - 1)) as usize].get()).take() };
        self.ci.set(idx.wrapping_add(1));
        entry
    }

    pub(crate) fn reset(&self) {
        for e in self.entries.iter() {
            // SAFETY: single-threaded.
            unsafe { *e.get() = None };
        }
        self.pi.set(0);
        self.ci.set(0);
    }
}
