//! Shared receive queue handle (spec §4.3) over the ring core's
//! [`SrqDesc`] (the linked list, the doorbell record) with the entries of
//! the handle layer. Each WQE freed by a completion is re-linked at the
//! tail; the tail WQE is the list's spare.

use std::cell::Cell;
use std::rc::Rc;

use crate::backend::{Backend, SrqResources};
use crate::ctx::PdInner;
use crate::error::{Error, Queue, Result};
use crate::ring::{Sge, SrqDesc};
use crate::tracker::RecvTracker;

#[doc(hidden)]
pub struct SrqShared<B: Backend, T> {
    /// Destroyed before the PD below.
    raw: B::Srq,
    pub(crate) desc: SrqDesc,
    entries: RecvTracker<T>,
    outstanding: Cell<u32>,
    pub(crate) srqn: u32,
    _wrid: Box<[u64]>,
    _pd: Rc<PdInner<B>>,
}

impl<B: Backend, T> SrqShared<B, T> {
    /// The id of the context the SRQ was created on.
    pub(crate) fn ctx_id(&self) -> u64 {
        self._pd.ctx.id
    }
}

impl<B: Backend, T> std::fmt::Debug for SrqShared<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrqShared").finish_non_exhaustive()
    }
}

impl<B: Backend, T> SrqShared<B, T> {
    pub(crate) fn new(raw: B::Srq, res: SrqResources, max_sge: u32, pd: Rc<PdInner<B>>) -> Result<Self> {
        let mut desc = SrqDesc::new(res.buf, res.wqe_cnt, res.stride, res.dbrec, max_sge)
            .map_err(|source| Error::BadQueue { queue: Queue::Srq, source })?;
        let mut wrid = vec![0u64; res.wqe_cnt as usize].into_boxed_slice();
        desc.wrid = wrid.as_mut_ptr();
        // SAFETY: the backend's SRQ memory, not yet in use by the device.
        unsafe { desc.init_list() };
        Ok(SrqShared {
            raw,
            desc,
            entries: RecvTracker::new(res.wqe_cnt),
            outstanding: Cell::new(0),
            srqn: res.srqn,
            _wrid: wrid,
            _pd: pd,
        })
    }

    /// Usable capacity (one WQE is the list's spare).
    pub(crate) fn capacity(&self) -> u32 {
        self.desc.capacity()
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.outstanding.get()
    }

    /// Post one receive WQE at `head`; checks first, nothing written on error.
    #[inline(always)]
    pub(crate) fn post(&self, entry: T, sges: &[Sge]) -> Result<()> {
        // SAFETY: the backend's live SRQ memory; single-threaded.
        let index = unsafe { self.desc.post(sges, 0)? };
        self.entries.put(index, entry);
        self.outstanding.set(self.outstanding.get() + 1);
        Ok(())
    }

    /// Retire the WQE at `index` (the CQE's `wqe_counter`) and link it
    /// behind the tail (`mlx5_free_srq_wqe`). `None` when that WQE is not
    /// outstanding.
    #[inline(always)]
    pub(crate) fn retire(&self, index: u16) -> Option<T> {
        if index as u32 >= self.desc.wqe_cnt {
            return None;
        }
        let entry = self.entries.take(index as u32)?;
        // SAFETY: the backend's live SRQ memory; the WQE was outstanding.
        unsafe { self.desc.free_wqe(index as u32) };
        self.outstanding.set(self.outstanding.get() - 1);
        Some(entry)
    }

    /// The bytes of WQE `index` (for dissection and snapshots).
    pub(crate) fn wqe_bytes(&self, index: u16) -> Vec<u8> {
        let mut v = vec![0u8; self.desc.stride as usize];
        let off = (index as u32 % self.desc.wqe_cnt * self.desc.stride) as usize;
        // SAFETY: one stride inside the buffer.
        unsafe { std::ptr::copy(self.desc.buf.add(off), v.as_mut_ptr(), v.len()) };
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

impl<B: Backend, T> std::fmt::Debug for SharedReceiveQueue<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("srqn", &format_args!("{:#x}", self.srqn()))
            .field("capacity", &self.capacity())
            .field("outstanding", &self.outstanding())
            .finish()
    }
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
        self.shared.desc.head.load(std::sync::atomic::Ordering::Relaxed) as u16
    }
    /// A copy of WQE `index` (next segment and data segments).
    pub fn wqe_bytes(&self, index: u16) -> Vec<u8> {
        self.shared.wqe_bytes(index)
    }
    /// The ring-core descriptor, for executors that post with their own
    /// code (the C ABI).
    ///
    /// # Safety
    /// Posting through it bypasses this handle's entries: use one or the other.
    pub unsafe fn desc(&self) -> &SrqDesc {
        &self.shared.desc
    }
}
