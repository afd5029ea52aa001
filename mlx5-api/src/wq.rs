//! The work queues of one QP as a CQ sees them: a small, named view
//! ([`WorkQueues`]) holding the ring-core descriptors, the wr-id trackers,
//! the QP's state and what a completion needs to name itself. A CQ's QPN
//! table maps each QPN to this view, never to the QP handle, so `cq` does
//! not depend on `qp`.

use std::cell::Cell;
use std::rc::Rc;

use crate::backend::{Backend, QpKind};
use crate::ctx::UarReg;
use crate::ring::scatter::DoesNotFit;
use crate::ring::{PostError, RqDesc, Sge, SqDesc};
use crate::srq::SrqShared;
use crate::tracker::{RecvTracker, Tracker};
use crate::types::{LinkLayer, QpState};

/// The send side of a QP: the ring-core descriptor (whose register view
/// lives in `reg`, shared with the QPs on the same register), the entries
/// and a wr-id array for ring-core posters (the C ABI's `send_wqe`).
pub(crate) struct SendQueue<B: Backend, T> {
    pub(crate) desc: SqDesc,
    /// Largest first gather entry that passes every limit (0 when the QP
    /// takes no gather list): `min(max_msg, 2^31 - 1)`. One compare for
    /// the common post; the separate checks give the error.
    pub(crate) first_sge_max: u32,
    /// Largest inline payload that passes every limit:
    /// `min(max_inline, max_msg)`. One compare for the common post.
    pub(crate) inline_max: u32,
    pub(crate) tracker: Tracker<T>,
    pub(crate) reg: Rc<UarReg<B>>,
    _wrid: Box<[u64]>,
}

impl<B: Backend, T> SendQueue<B, T> {
    /// A send queue over `desc` (whose `bf` and `wrid` are set here).
    pub(crate) fn new(mut desc: SqDesc, reg: Rc<UarReg<B>>) -> Self {
        let mut wrid = vec![0u64; desc.wqe_cnt as usize].into_boxed_slice();
        desc.bf = &reg.bf as *const _ as *mut _;
        desc.wrid = wrid.as_mut_ptr();
        let first_sge_max = if desc.max_sge == 0 { 0 } else { desc.max_msg.min(i32::MAX as u32) };
        let inline_max = desc.max_inline.min(desc.max_msg);
        SendQueue { tracker: Tracker::new(desc.wqe_cnt), first_sge_max, inline_max, desc, reg, _wrid: wrid }
    }

    /// Ring the doorbell for every WQE committed since the last one.
    #[inline(always)]
    pub(crate) fn ring_doorbell(&self) {
        // SAFETY: the descriptor describes the backend QP's live ring and
        // register; handles are single-threaded.
        unsafe { self.desc.ring_db(&self.reg.mmio) }
    }

    /// Forget every WQE (QP to RESET).
    pub(crate) fn reset(&self) {
        self.tracker.clear(self.desc.producer(), self.desc.consumer());
        self.desc.reset();
    }
}

impl<B: Backend, T> Drop for SendQueue<B, T> {
    fn drop(&mut self) {
        self.tracker.clear(self.desc.producer(), self.desc.consumer());
    }
}

/// The QP's own receive queue.
pub(crate) struct RecvQueue<T> {
    pub(crate) desc: RqDesc,
    tracker: RecvTracker<T>,
    _wrid: Box<[u64]>,
}

impl<T> RecvQueue<T> {
    pub(crate) fn new(mut desc: RqDesc) -> Self {
        let mut wrid = vec![0u64; desc.wqe_cnt as usize].into_boxed_slice();
        desc.wrid = wrid.as_mut_ptr();
        RecvQueue { tracker: RecvTracker::new(desc.wqe_cnt), desc, _wrid: wrid }
    }

    #[inline(always)]
    pub(crate) fn post(&self, entry: T, sges: &[Sge]) -> Result<(), PostError> {
        // SAFETY: the descriptor describes the backend QP's live ring;
        // single-threaded. The wr-id array is left to C posters: entries
        // are tracked here.
        let slot = unsafe { self.desc.post_untracked(sges)? };
        // SAFETY: a slot of the ring, whose wqe_cnt sized the tracker.
        unsafe { self.tracker.put_unchecked(slot, entry) };
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn retire(&self, wqe_counter: u16) -> Option<T> {
        // SAFETY: as in `post`.
        let r = unsafe { self.desc.retire(wqe_counter)? };
        // SAFETY: `r.slot` is masked by the ring's wqe_cnt, which sized the tracker.
        unsafe { self.tracker.take_unchecked(r.slot) }
    }

    pub(crate) fn reset(&self) {
        self.tracker.clear();
        self.desc.reset();
    }
}

/// Where a QP's receives come from.
pub(crate) enum RecvSide<B: Backend, T> {
    None,
    Rq(RecvQueue<T>),
    Srq(Rc<SrqShared<B, T>>),
}

/// The view of a QP's work queues that its CQs dispatch to.
#[doc(hidden)]
pub struct WorkQueues<B: Backend, T> {
    /// QPN; for a DCT, the DCT number once in RTR (0 before).
    pub(crate) qpn: Cell<u32>,
    pub(crate) state: Cell<QpState>,
    pub(crate) kind: QpKind,
    pub(crate) link: LinkLayer,
    pub(crate) sq: Option<SendQueue<B, T>>,
    pub(crate) recv: RecvSide<B, T>,
}

impl<B: Backend, T> std::fmt::Debug for WorkQueues<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueues").finish_non_exhaustive()
    }
}

impl<B: Backend, T> WorkQueues<B, T> {
    /// An error CQE moved the QP to ERR (spec §6.1); a UD send error to SQE.
    #[inline]
    pub(crate) fn enter_error(&self, send_side: bool) {
        let s = if send_side && self.kind == QpKind::Ud { QpState::Sqe } else { QpState::Err };
        if self.state.get() != QpState::Err {
            self.state.set(s);
        }
    }

    /// Retire the send WQE a requester CQE names: its entry and opcode.
    #[inline(always)]
    pub(crate) fn retire_send(&self, wqe_counter: u16) -> Option<(T, u8)> {
        let sq = self.sq.as_ref()?;
        let r = sq.tracker.retire(sq.desc.producer(), sq.desc.consumer(), wqe_counter)?;
        sq.desc.ci.store(r.ci, std::sync::atomic::Ordering::Release);
        Some((r.entry, r.opcode))
    }

    /// Copy scattered data into the send WQE a requester CQE names.
    #[cold]
    pub(crate) fn copy_scattered_send(
        &self,
        wqe_counter: u16,
        op: u8,
        data: &[u8],
    ) -> Result<(), DoesNotFit> {
        let sq = self.sq.as_ref().ok_or(DoesNotFit)?;
        // SAFETY: the live SQ ring; the WQE is posted and not yet retired.
        unsafe { sq.desc.copy_scattered(wqe_counter, op, data) }
    }

    /// Copy scattered data into the receive WQE a responder CQE names.
    #[cold]
    pub(crate) fn copy_scattered_recv(&self, wqe_counter: u16, data: &[u8]) -> Result<(), DoesNotFit> {
        match &self.recv {
            // SAFETY: the live ring; the WQE is posted and not yet retired.
            RecvSide::Rq(rq) => unsafe { rq.desc.copy_scattered(wqe_counter, data) },
            // SAFETY: as above.
            RecvSide::Srq(srq) => unsafe { srq.desc.copy_scattered(wqe_counter, data) },
            RecvSide::None => Err(DoesNotFit),
        }
    }

    /// Retire the receive a responder CQE names.
    #[inline(always)]
    pub(crate) fn retire_recv(&self, wqe_counter: u16) -> Option<T> {
        match &self.recv {
            RecvSide::Rq(rq) => rq.retire(wqe_counter),
            RecvSide::Srq(srq) => srq.retire(wqe_counter),
            RecvSide::None => None,
        }
    }
}
