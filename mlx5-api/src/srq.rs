//! Shared receive queue (spec §4.3). The SRQ is a linked list through each
//! WQE's `next_wqe_index`: at creation WQE i points to i+1; software posts at
//! `head` and follows the list, and re-links each WQE freed by a completion
//! at the `tail`. The list is never rewritten on post (PITFALLS: a library
//! that zeroed it landed every receive in slot 0). The tail WQE is a spare
//! that is never posted, so `head == tail` means full; the device consumes
//! in list order from index 0, bounded by the posted count in the doorbell
//! record.

use std::cell::{Cell, UnsafeCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::backend::{Backend, SrqResources};
use crate::barrier::udma_to_device_barrier;
use crate::device::PdInner;
use crate::error::{Error, Result};
use crate::rq::{Sge, INVALID_LKEY};

#[doc(hidden)]
pub struct SrqShared<B: Backend, T> {
    /// Destroyed before the PD below.
    raw: B::Srq,
    buf: *mut u8,
    wqe_cnt: u32,
    stride: u32,
    /// Data segments per WQE (`stride / 16 - 1`).
    max_gs: u32,
    max_sge: u32,
    /// Next WQE to post.
    head: Cell<u16>,
    /// Last WQE of the free list (the spare).
    tail: Cell<u16>,
    /// WQEs posted (16-bit counter of the doorbell record).
    counter: Cell<u16>,
    outstanding: Cell<u32>,
    dbrec: *const AtomicU32,
    entries: Box<[UnsafeCell<Option<T>>]>,
    pub(crate) srqn: u32,
    _pd: Rc<PdInner<B>>,
}

impl<B: Backend, T> SrqShared<B, T> {
    pub(crate) fn new(raw: B::Srq, res: SrqResources, max_sge: u32, pd: Rc<PdInner<B>>) -> Self {
        let srq = SrqShared {
            raw,
            buf: res.buf,
            wqe_cnt: res.wqe_cnt,
            stride: res.stride,
            max_gs: res.stride / 16 - 1,
            max_sge: max_sge.min(res.stride / 16 - 1),
            head: Cell::new(0),
            tail: Cell::new((res.wqe_cnt - 1) as u16),
            counter: Cell::new(0),
            outstanding: Cell::new(0),
            dbrec: res.dbrec as *const AtomicU32,
            entries: (0..res.wqe_cnt).map(|_| UnsafeCell::new(None)).collect(),
            srqn: res.srqn,
            _pd: pd,
        };
        for i in 0..res.wqe_cnt {
            srq.set_next(i as u16, ((i + 1) & (res.wqe_cnt - 1)) as u16);
        }
        srq
    }

    #[inline(always)]
    fn wqe(&self, index: u16) -> *mut u8 {
        // SAFETY: index < wqe_cnt (callers mask or take it from the list).
        unsafe { self.buf.add((index as u32 % self.wqe_cnt * self.stride) as usize) }
    }

    #[inline(always)]
    fn next(&self, index: u16) -> u16 {
        // SAFETY: bytes 2..4 of the WQE's next segment.
        u16::from_be(unsafe { (self.wqe(index).add(2) as *const u16).read_unaligned() })
    }

    #[inline(always)]
    fn set_next(&self, index: u16, next: u16) {
        // SAFETY: bytes 2..4 of the WQE's next segment.
        unsafe { (self.wqe(index).add(2) as *mut u16).write_unaligned(next.to_be()) }
    }

    /// Usable capacity (one WQE is the list's spare).
    pub(crate) fn capacity(&self) -> u32 {
        self.wqe_cnt - 1
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.outstanding.get()
    }

    /// Post one receive WQE at `head`; checks first, nothing written on error.
    #[inline(always)]
    pub(crate) fn post(&self, entry: T, sges: &[Sge]) -> Result<()> {
        let n = sges.len() as u32;
        if n > self.max_sge {
            return Err(Error::TooManySge { count: n, max: self.max_sge });
        }
        if let Some(s) = sges.iter().find(|s| s.len > i32::MAX as u32) {
            return Err(Error::SgeTooLong { len: s.len as u64 });
        }
        let head = self.head.get();
        if head == self.tail.get() {
            return Err(Error::SrqFull { capacity: self.capacity() });
        }
        let wqe = self.wqe(head);
        for (i, s) in sges.iter().enumerate() {
            let mut seg = [0u8; 16];
            seg[0..4].copy_from_slice(&s.len.to_be_bytes());
            seg[4..8].copy_from_slice(&s.lkey.to_be_bytes());
            seg[8..16].copy_from_slice(&s.addr.to_be_bytes());
            // SAFETY: i < max_gs: inside this WQE, after its 16-byte next segment.
            unsafe { (wqe.add(16 + i * 16) as *mut [u8; 16]).write(seg) };
        }
        if n < self.max_gs {
            let mut seg = [0u8; 16];
            seg[4..8].copy_from_slice(&INVALID_LKEY.to_be_bytes());
            // SAFETY: as above.
            unsafe { (wqe.add(16 + n as usize * 16) as *mut [u8; 16]).write(seg) };
        }
        // SAFETY: single-threaded; the slot's entry is not borrowed.
        unsafe { *self.entries[head as usize].get() = Some(entry) };
        self.head.set(self.next(head));
        self.outstanding.set(self.outstanding.get() + 1);
        let counter = self.counter.get().wrapping_add(1);
        self.counter.set(counter);
        udma_to_device_barrier();
        // SAFETY: the doorbell record lives as long as the SRQ.
        unsafe { &*self.dbrec }.store((counter as u32).to_be(), Ordering::Release);
        Ok(())
    }

    /// Retire the WQE at `index` (the CQE's `wqe_counter`) and link it
    /// behind the tail (`mlx5_free_srq_wqe`).
    #[inline(always)]
    pub(crate) fn retire(&self, index: u16) -> Option<T> {
        if index as u32 >= self.wqe_cnt {
            return None;
        }
        // SAFETY: single-threaded.
        let entry = unsafe { (*self.entries[index as usize].get()).take() }?;
        self.set_next(self.tail.get(), index);
        self.tail.set(index);
        self.outstanding.set(self.outstanding.get() - 1);
        Some(entry)
    }

    /// The bytes of WQE `index` (for dissection and snapshots).
    pub(crate) fn wqe_bytes(&self, index: u16) -> Vec<u8> {
        let mut v = vec![0u8; self.stride as usize];
        // SAFETY: one stride inside the buffer.
        unsafe { std::ptr::copy(self.wqe(index), v.as_mut_ptr(), v.len()) };
        v
    }

    pub(crate) fn raw(&self) -> &B::Srq {
        &self.raw
    }
}

/// A shared receive queue: receive WQEs usable by RC and UD QPs and DCTs.
pub struct SharedReceiveQueue<B: Backend, T> {
    pub(crate) shared: Rc<SrqShared<B, T>>,
}

impl<B: Backend, T> SharedReceiveQueue<B, T> {
    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.shared.srqn
    }
    /// Receives that can be outstanding at once.
    pub fn capacity(&self) -> u32 {
        self.shared.capacity()
    }
    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.shared.outstanding()
    }
    /// Post one receive; `entry` comes back with its completion, whichever
    /// QP or DCT consumed it.
    #[inline(always)]
    pub fn post_recv(&self, entry: T, sges: &[Sge]) -> Result<()> {
        self.shared.post(entry, sges)
    }
    /// The index of the WQE the next post will use.
    pub fn head(&self) -> u16 {
        self.shared.head.get()
    }
    /// A copy of WQE `index` (next segment and data segments).
    pub fn wqe_bytes(&self, index: u16) -> Vec<u8> {
        self.shared.wqe_bytes(index)
    }
}
