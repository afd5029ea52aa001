//! Send-queue ring bookkeeping (spec §1.2–1.7): the free-running WQEBB
//! producer counter, WQE-slot addressing with wrap-around, per-WQE wr-id
//! tracking, and the doorbell sequence (WQE stores, barrier, doorbell record,
//! doorbell or BlueFlame write, BlueFlame offset toggle).

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::backend::{Backend, QpResources};
use crate::barrier::udma_to_device_barrier;
use crate::error::{Error, Result};
use crate::sizing::{DS_BYTES, WQEBB_BYTES};

/// Bookkeeping of one posted WQE, kept at the slot of its first WQEBB.
struct Slot<T> {
    /// WQEBBs the WQE occupies (1..=16).
    nbb: Cell<u8>,
    /// The mlx5 opcode, to name the completion.
    opcode: Cell<u8>,
    /// The user's entry; `None` once returned or dropped.
    entry: UnsafeCell<Option<T>>,
}

/// What the CQ learns when it retires the WQE a CQE names.
pub(crate) struct Retired<T> {
    pub entry: T,
    pub opcode: u8,
}

/// The send side of a QP. Single-threaded: `Cell`s, no locks, no atomics
/// except the doorbell-record store the device reads.
pub(crate) struct SendQueue<B: Backend, T> {
    buf: *mut u8,
    /// Ring size in bytes minus one (ring bytes are a power of two).
    byte_mask: usize,
    wqe_cnt: u32,
    /// Free-running WQEBB producer counter (`sq.cur_post`).
    pi: Cell<u32>,
    /// Free-running counter of the oldest WQEBB not yet retired by a CQE.
    ci: Cell<u32>,
    /// Counter of the last WQE written (its ctrl goes into the doorbell).
    last: Cell<u32>,
    /// WQEs written since the last doorbell.
    unrung: Cell<u32>,
    dbrec_sq: *const AtomicU32,
    uar: B::Uar,
    bf_size: u32,
    bf_offset: Cell<u32>,
    slots: Box<[Slot<T>]>,
    pub(crate) qpn: u32,
    pub(crate) max_sge: u32,
    pub(crate) max_inline: u32,
    pub(crate) max_ds: u32,
    /// Largest message (UD: the path MTU; otherwise 2^31).
    pub(crate) max_msg: u32,
}

impl<B: Backend, T> SendQueue<B, T> {
    /// Take over the SQ half of `res` (the RQ half is the caller's).
    /// A QP without a send queue (DCT) has none.
    pub(crate) fn new(
        res: QpResources<B::Uar>,
        max_sge: u32,
        max_inline: u32,
        max_ds: u32,
        max_msg: u32,
    ) -> Self {
        let wqe_cnt = res.sq_wqe_cnt;
        let slots = (0..wqe_cnt)
            .map(|_| Slot { nbb: Cell::new(0), opcode: Cell::new(0), entry: UnsafeCell::new(None) })
            .collect();
        SendQueue {
            buf: res.sq_buf,
            byte_mask: (wqe_cnt * WQEBB_BYTES) as usize - 1,
            wqe_cnt,
            pi: Cell::new(0),
            ci: Cell::new(0),
            last: Cell::new(0),
            unrung: Cell::new(0),
            // SAFETY: dbrec points at two BE32 words owned by the backend for the QP's lifetime.
            dbrec_sq: unsafe { res.dbrec.add(1) } as *const AtomicU32,
            uar: res.uar,
            bf_size: res.bf_size,
            bf_offset: Cell::new(0),
            slots,
            qpn: res.qpn,
            max_sge,
            max_inline,
            max_ds,
            max_msg,
        }
    }

    /// Producer counter of the next WQE.
    #[inline(always)]
    pub(crate) fn pi(&self) -> u32 {
        self.pi.get()
    }

    /// Free WQEBBs.
    #[inline(always)]
    pub(crate) fn free(&self) -> u32 {
        self.wqe_cnt - self.pi.get().wrapping_sub(self.ci.get())
    }

    pub(crate) fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }

    /// The error for a WQE of `ds` DS that exceeds its budget: the WQE size
    /// limit or the free part of the ring, whichever is smaller (computed
    /// once per WQE by the builder; each segment then costs one compare).
    #[cold]
    pub(crate) fn over_budget(&self, ds: u32) -> Error {
        if ds > self.max_ds {
            return Error::WqeTooLarge { ds, max: self.max_ds };
        }
        Error::SqFull { needed: ds.div_ceil(4), free: self.free() }
    }

    /// Address of DS `i` of the WQE at counter `start`, with the modulo rule
    /// of spec §1.3.
    #[inline(always)]
    pub(crate) fn ds_ptr(&self, start: u32, i: u32) -> *mut u8 {
        let off = ((start as usize) * WQEBB_BYTES as usize + (i * DS_BYTES) as usize) & self.byte_mask;
        // SAFETY: off is inside the ring.
        unsafe { self.buf.add(off) }
    }

    /// Write one 16-byte DS.
    #[inline(always)]
    pub(crate) fn write_ds(&self, start: u32, i: u32, ds: [u8; 16]) {
        // SAFETY: a DS never straddles the ring end (both are 16-aligned);
        // the slot is free (checked by `reserve`), so the device is not reading it.
        unsafe { (self.ds_ptr(start, i) as *mut [u8; 16]).write(ds) }
    }

    /// Copy `data` into the ring starting `byte_off` bytes after the WQE
    /// start, splitting at the ring end at byte granularity (spec §3.3).
    #[inline(always)]
    pub(crate) fn write_bytes(&self, start: u32, byte_off: u32, data: &[u8]) {
        let ring = self.byte_mask + 1;
        let off = ((start as usize) * WQEBB_BYTES as usize + byte_off as usize) & self.byte_mask;
        let first = data.len().min(ring - off);
        // SAFETY: both copies stay inside the ring; the bytes belong to free slots.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.buf.add(off), first);
            std::ptr::copy_nonoverlapping(data.as_ptr().add(first), self.buf, data.len() - first);
        }
    }

    /// Record a finished WQE of `ds` DS at `start` and advance the producer.
    #[inline(always)]
    pub(crate) fn commit(&self, start: u32, ds: u32, opcode: u8, entry: T) {
        let nbb = ds.div_ceil(4);
        // SAFETY: the index is masked by wqe_cnt - 1 and slots has wqe_cnt
        // entries (a power of two).
        let slot = unsafe { self.slots.get_unchecked((start & (self.wqe_cnt - 1)) as usize) };
        slot.nbb.set(nbb as u8);
        slot.opcode.set(opcode);
        // SAFETY: single-threaded; no reference into the slot outlives this call.
        unsafe { *slot.entry.get() = Some(entry) };
        self.last.set(start);
        self.unrung.set(self.unrung.get() + 1);
        self.pi.set(start.wrapping_add(nbb));
    }

    /// Publish the producer counter in the doorbell record (barrier A first).
    #[inline(always)]
    fn write_dbrec(&self) {
        udma_to_device_barrier();
        // SAFETY: the doorbell record word lives as long as the QP.
        unsafe { &*self.dbrec_sq }.store((self.pi.get() & 0xffff).to_be(), Ordering::Release);
    }

    /// Ring the doorbell for every WQE written since the last one: doorbell
    /// record, then one 8-byte store of the last WQE's first 8 ctrl bytes.
    #[inline(always)]
    pub(crate) fn ring_doorbell(&self) {
        if self.unrung.get() == 0 {
            return;
        }
        // SAFETY: the first 8 bytes of a ctrl segment never straddle the ring end.
        let ctrl = unsafe { (self.ds_ptr(self.last.get(), 0) as *const [u8; 8]).read() };
        self.ring_doorbell_with(ctrl);
    }

    /// Ring for the WQE just committed, whose first 8 ctrl bytes the caller
    /// still holds (saves reading them back from the ring).
    #[inline(always)]
    pub(crate) fn ring_doorbell_with(&self, ctrl: [u8; 8]) {
        self.write_dbrec();
        B::ring_doorbell(&self.uar, self.bf_offset.get(), ctrl);
        self.after_doorbell();
    }

    /// BlueFlame for the last WQE when it is the only unrung one and fits
    /// `bf_size`; otherwise a plain doorbell (rdma-core's rule, spec §1.6).
    #[inline(always)]
    pub(crate) fn ring_blueflame(&self) {
        let start = self.last.get();
        let bytes = self.pi.get().wrapping_sub(start) * WQEBB_BYTES;
        if self.unrung.get() != 1 || self.bf_size == 0 || bytes > self.bf_size {
            return self.ring_doorbell();
        }
        self.write_dbrec();
        let ring = self.byte_mask + 1;
        let off = (start as usize * WQEBB_BYTES as usize) & self.byte_mask;
        let head = (bytes as usize).min(ring - off);
        // SAFETY: both ranges lie inside the ring and hold the WQE just written.
        let (h, t) = unsafe {
            (
                std::slice::from_raw_parts(self.buf.add(off), head),
                std::slice::from_raw_parts(self.buf, bytes as usize - head),
            )
        };
        B::ring_blueflame(&self.uar, self.bf_offset.get(), h, t);
        self.after_doorbell();
    }

    #[inline(always)]
    fn after_doorbell(&self) {
        self.bf_offset.set(self.bf_offset.get() ^ self.bf_size);
        self.unrung.set(0);
    }

    /// Retire WQEs up to and including the one whose `wqe_index` is
    /// `wqe_counter`; entries of earlier (unsignaled) WQEs are dropped.
    /// Returns `None` when no outstanding WQE has that index (a CQE that does
    /// not match the ring: reported by the caller, never trusted).
    #[inline(always)]
    pub(crate) fn retire(&self, wqe_counter: u16) -> Option<Retired<T>> {
        let pi = self.pi.get();
        let mut ci = self.ci.get();
        // The named WQE must lie in [ci, pi).
        let dist = (wqe_counter as u32).wrapping_sub(ci) & 0xffff;
        if dist >= pi.wrapping_sub(ci) {
            return None;
        }
        let start = ci;
        loop {
            let slot = &self.slots[(ci & (self.wqe_cnt - 1)) as usize];
            // SAFETY: single-threaded; the entry is moved out, no reference kept.
            let entry = unsafe { (*slot.entry.get()).take() };
            let nbb = slot.nbb.get().max(1) as u32;
            let here = ci as u16 == wqe_counter;
            ci = ci.wrapping_add(nbb);
            if here {
                self.ci.set(ci);
                return entry.map(|entry| Retired { entry, opcode: slot.opcode.get() });
            }
            if ci.wrapping_sub(start) > dist {
                return None;
            }
        }
    }

    pub(crate) fn buf(&self) -> *mut u8 {
        self.buf
    }

    /// Copy of the ring bytes.
    pub(crate) fn ring_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.byte_mask + 1];
        // SAFETY: the ring is byte_mask + 1 bytes long.
        unsafe { std::ptr::copy(self.buf, v.as_mut_ptr(), v.len()) };
        v
    }

    /// The doorbell record word (host value).
    pub(crate) fn dbrec(&self) -> u32 {
        // SAFETY: lives as long as the QP.
        u32::from_be(unsafe { &*self.dbrec_sq }.load(Ordering::Acquire))
    }

    /// See `RcQp::skip_sq`.
    pub(crate) fn skip(&self, wqebbs: u32) -> Result<()> {
        if self.pi.get() != self.ci.get() {
            return Err(Error::InvalidArgument("skip_sq needs an empty send queue".into()));
        }
        let pi = self.pi.get().wrapping_add(wqebbs);
        self.pi.set(pi);
        self.ci.set(pi);
        self.last.set(pi);
        Ok(())
    }

    /// Forget every outstanding WQE (QP to RESET).
    pub(crate) fn reset(&self) {
        for s in self.slots.iter() {
            // SAFETY: single-threaded.
            unsafe { *s.entry.get() = None };
        }
        self.pi.set(0);
        self.ci.set(0);
        self.last.set(0);
        self.unrung.set(0);
        self.bf_offset.set(0);
    }
}
