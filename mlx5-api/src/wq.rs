//! The work queues of one QP as a CQ sees them: a small, named view
//! ([`WorkQueues`]) holding the ring-core descriptors, the wr-id trackers,
//! the QP's state and what a completion needs to name itself. A CQ's QPN
//! table maps each QPN to this view, never to the QP handle, so `cq` does
//! not depend on `qp`.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use crate::backend::{Backend, QpKind};
use crate::ctx::UarReg;
use crate::ring::scatter::DoesNotFit;
use crate::ring::seg::ctrl_qpn_word;
use crate::ring::{PostError, RqDesc, Sge, SqDesc};
use crate::srq::SrqShared;
use crate::tracker::{RqTracker, Tracker};
use crate::types::{LinkLayer, QpState};

/// The send side of a QP: the ring-core descriptor (whose register view
/// lives in `reg`, shared with the QPs on the same register), the entries
/// and a wr-id array for ring-core posters (the C ABI's `send_wqe`). A QP
/// without one (a DCT) has an empty one: no slots, no register, always
/// closed, so that a requester CQE naming it finds nothing outstanding
/// with no check of its own.
///
/// Laid out for the post: its fields and the descriptor's it reads come
/// first, on the struct's first two cache lines (`align(64)`), the
/// tracker's table pointer among them. With thousands of QPs taking turns
/// each post finds the queue a ring lap out of cache, and lines it reads
/// together arrive together; fields in the compiler's own order spread
/// over four lines, one of them (the tracker's) read only after the
/// doorbell, a trip to memory of its own.
#[repr(C, align(64))]
pub(crate) struct SendQueue<B: Backend, T> {
    pub(crate) desc: SqDesc,
    /// WQEBBs that may be outstanding: `wqe_cnt` in RTS, 0 in every other
    /// state. The post checks it in the capacity compare; a refusal is
    /// sorted out afterwards (`QpShared::send_refused`).
    pub(crate) open: Cell<u32>,
    /// Whole WQEBBs of the largest WQE (`max_ds / 4`): the builder's
    /// compare in WQEBBs stays within the DS limit below it.
    pub(crate) max_bbs: u32,
    /// Largest inline payload that passes every limit:
    /// `min(max_inline, max_msg)`. One compare for the common post.
    pub(crate) inline_max: u32,
    /// Largest first gather entry that passes every limit (0 when the QP
    /// takes no gather list): `min(max_msg, 2^31 - 1)`. One compare for
    /// the common post; the separate checks give the error.
    pub(crate) first_sge_max: u32,
    /// The QPN's part of every ctrl segment (`ctrl_qpn_word`), encoded
    /// once: the QPN of a QP with a send queue never changes.
    pub(crate) ctrl_qpn: u64,
    pub(crate) tracker: Tracker<T>,
    /// The register (`None` for the empty queue only).
    reg: Option<Rc<UarReg<B>>>,
    _wrid: Box<[u64]>,
}

impl<B: Backend, T> SendQueue<B, T> {
    /// A send queue over `desc` (whose `bf` and `wrid` are set here).
    pub(crate) fn new(desc: SqDesc, reg: Rc<UarReg<B>>) -> Self {
        Self::with_reg(desc, Some(reg))
    }

    /// The empty queue of a QP without one (a DCT).
    pub(crate) fn empty() -> Self {
        Self::with_reg(SqDesc::empty(), None)
    }

    fn with_reg(mut desc: SqDesc, reg: Option<Rc<UarReg<B>>>) -> Self {
        let mut wrid = vec![0u64; desc.wqe_cnt as usize].into_boxed_slice();
        desc.bf = reg.as_ref().map_or(std::ptr::null_mut(), |r| &r.bf as *const _ as *mut _);
        desc.wrid = wrid.as_mut_ptr();
        let first_sge_max = if desc.max_sge == 0 { 0 } else { desc.max_msg.min(i32::MAX as u32) };
        let inline_max = desc.max_inline.min(desc.max_msg);
        SendQueue {
            ctrl_qpn: ctrl_qpn_word(desc.qpn),
            max_bbs: desc.max_ds / 4,
            tracker: Tracker::new(desc.wqe_cnt),
            first_sge_max,
            inline_max,
            open: Cell::new(0),
            desc,
            reg,
            _wrid: wrid,
        }
    }

    /// Open the queue to WQEs (the QP entered RTS) or close it.
    pub(crate) fn set_open(&self, open: bool) {
        self.open.set(if open { self.desc.wqe_cnt } else { 0 });
    }

    /// Ring the doorbell for every WQE committed since the last one (the
    /// empty queue never has one).
    #[inline(always)]
    pub(crate) fn ring_doorbell(&self) {
        if let Some(reg) = &self.reg {
            // SAFETY: the descriptor describes the backend QP's live ring
            // and register; handles are single-threaded.
            unsafe { self.desc.ring_db(&reg.mmio) }
        }
    }

    /// How writes reach the register, for a builder's doorbell.
    ///
    /// # Safety
    /// The queue has slots. A builder exists only then: `WqeBuilder::new`
    /// refuses a closed queue, and the empty queue is never open
    /// (`set_open` opens it to its `wqe_cnt`, 0).
    #[inline(always)]
    pub(crate) unsafe fn mmio(&self) -> &B::Uar {
        debug_assert!(self.desc.wqe_cnt != 0);
        match &self.reg {
            Some(r) => &r.mmio,
            // SAFETY: only the empty queue has no register (caller contract).
            None => unsafe { std::hint::unreachable_unchecked() },
        }
    }

    /// Ask for every line the next post writes: the next WQE's ring lines
    /// and the doorbell record (`SqDesc::prefetch_next`), and the entry's
    /// slot. A hint: no state changes (the empty queue's too).
    #[inline(always)]
    pub(crate) fn prefetch_next(&self) {
        self.desc.prefetch_next();
        self.tracker.prefetch(self.desc.producer());
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

/// The QP's own receive queue. A QP without one (it receives from an SRQ,
/// or takes no receives) has an empty one: no slots, always closed.
pub(crate) struct RecvQueue<T> {
    pub(crate) desc: RqDesc,
    /// The producer counter the next post may not reach: `ci + wqe_cnt`
    /// while the QP may post receives (INIT onwards), `ci` while it may not
    /// (RESET), and always `ci` (0) for an empty queue. The post checks
    /// state, queue and room in one compare against it, with no load of
    /// the consumer counter; a refusal is sorted out afterwards
    /// (`QpShared::recv_refused`). `end - ci` is kept across retires.
    end: Cell<u32>,
    tracker: RqTracker<T>,
    _wrid: Box<[u64]>,
}

impl<T> RecvQueue<T> {
    /// A receive queue over `desc`, closed (the QP starts in RESET).
    pub(crate) fn new(mut desc: RqDesc) -> Self {
        let mut wrid = vec![0u64; desc.wqe_cnt as usize].into_boxed_slice();
        desc.wrid = wrid.as_mut_ptr();
        RecvQueue { tracker: RqTracker::new(desc.wqe_cnt), end: Cell::new(0), desc, _wrid: wrid }
    }

    /// The empty queue of a QP without its own.
    pub(crate) fn empty() -> Self {
        Self::new(RqDesc::empty())
    }

    /// Whether the QP has a receive queue of its own.
    pub(crate) fn exists(&self) -> bool {
        self.desc.wqe_cnt != 0
    }

    /// Open the queue to posts (the QP left RESET) or close it (RESET).
    pub(crate) fn set_open(&self, open: bool) {
        let ci = self.desc.ci.load(Ordering::Relaxed);
        self.end.set(if open { ci.wrapping_add(self.desc.wqe_cnt) } else { ci });
    }

    /// Whether the queue is closed to posts.
    pub(crate) fn is_closed(&self) -> bool {
        self.end.get() == self.desc.ci.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn post(&self, entry: T, sges: &[Sge]) -> Result<(), PostError> {
        // SAFETY: the descriptor describes the backend QP's live ring (or
        // is empty, and then `end` is `ci` and nothing is written);
        // single-threaded; `end - ci` is 0 or wqe_cnt, and an own queue
        // takes at least one entry (`max_sge` is its stride's capacity,
        // set at creation). The wr-id array is left to C posters: entries
        // are tracked here.
        let slot = unsafe { self.desc.post_untracked(sges, self.end.get())? };
        // SAFETY: the free slot the ring just filled, of the ring whose
        // wqe_cnt sized the tracker.
        unsafe { self.tracker.put(slot, entry) };
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn retire(&self, wqe_counter: u16) -> Option<T> {
        // SAFETY: as in `post` (an empty ring retires nothing).
        let (ci, at) = unsafe { self.desc.retire_span(wqe_counter)? };
        if at == ci {
            // The bound moves with the consumer.
            self.end.set(self.end.get().wrapping_add(1));
        } else {
            self.retire_lost(ci, at);
        }
        // SAFETY: `at` was live; the consumer moved past it.
        Some(unsafe { self.tracker.take(at) })
    }

    /// Completions were lost: the receives `[ci, at)` before the one
    /// retired leave the queue without one.
    #[cold]
    #[inline(never)]
    fn retire_lost(&self, ci: u32, at: u32) {
        self.end.set(self.end.get().wrapping_add(at.wrapping_add(1).wrapping_sub(ci)));
        // SAFETY: [ci, at) was live; the consumer moved past it.
        unsafe { self.tracker.drop_range(ci, at) };
    }

    /// Drop every outstanding entry and forget the receives (QP to RESET);
    /// the queue stays open or closed.
    pub(crate) fn reset(&self) {
        self.drop_outstanding();
        let window = self.end.get().wrapping_sub(self.desc.ci.load(Ordering::Relaxed));
        self.desc.reset();
        self.end.set(window);
    }

    fn drop_outstanding(&self) {
        let (pi, ci) = (self.desc.pi.load(Ordering::Relaxed), self.desc.ci.load(Ordering::Relaxed));
        // SAFETY: [ci, pi) is live; the caller resets the counters or
        // drops the queue.
        unsafe { self.tracker.drop_range(ci, pi) };
    }
}

impl<T> Drop for RecvQueue<T> {
    fn drop(&mut self) {
        self.drop_outstanding();
    }
}

/// The view of a QP's work queues that its CQs dispatch to.
#[doc(hidden)]
pub struct WorkQueues<B: Backend, T> {
    /// QPN; for a DCT, the DCT number once in RTR (0 before).
    pub(crate) qpn: Cell<u32>,
    pub(crate) state: Cell<QpState>,
    pub(crate) kind: QpKind,
    pub(crate) link: LinkLayer,
    /// The send queue (empty for a DCT).
    pub(crate) sq: SendQueue<B, T>,
    /// The own receive queue (empty when the QP has none).
    pub(crate) rq: RecvQueue<T>,
    /// The SRQ the QP receives from, if any.
    pub(crate) srq: Option<Rc<SrqShared<B, T>>>,
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
            self.set_state(s);
        }
    }

    /// Enter state `s`: the send queue is open in RTS only, the own receive
    /// queue in every state but RESET.
    pub(crate) fn set_state(&self, s: QpState) {
        self.state.set(s);
        self.sq.set_open(s == QpState::Rts);
        self.rq.set_open(s != QpState::Reset);
    }

    /// Retire the send WQE a requester CQE names: its entry.
    #[inline(always)]
    pub(crate) fn retire_send(&self, wqe_counter: u16) -> Option<T> {
        let sq = &self.sq;
        // SAFETY: only this thread writes the counters (the handle layer is
        // single-threaded, and WQEs posted through the raw descriptor are
        // never retired here: `sq_desc`'s contract).
        let r = unsafe { sq.tracker.retire(&sq.desc.pi, sq.desc.consumer(), wqe_counter)? };
        sq.desc.ci.store(r.ci, std::sync::atomic::Ordering::Release);
        Some(r.entry)
    }

    /// Copy scattered data into the send WQE a requester CQE names.
    #[cold]
    pub(crate) fn copy_scattered_send(
        &self,
        wqe_counter: u16,
        op: u8,
        data: &[u8],
    ) -> Result<(), DoesNotFit> {
        let sq = &self.sq;
        // SAFETY: the live SQ ring; the WQE is posted and not yet retired.
        unsafe { sq.desc.copy_scattered(wqe_counter, op, data) }
    }

    /// Copy scattered data into the receive WQE a responder CQE names.
    #[cold]
    pub(crate) fn copy_scattered_recv(&self, wqe_counter: u16, data: &[u8]) -> Result<(), DoesNotFit> {
        match &self.srq {
            // SAFETY: the live ring; the WQE is posted and not yet retired.
            Some(srq) => unsafe { srq.desc.copy_scattered(wqe_counter, data) },
            // SAFETY: as above (an empty queue has no WQE: `DoesNotFit`).
            None => unsafe { self.rq.desc.copy_scattered(wqe_counter, data) },
        }
    }

    /// Retire the receive a responder CQE names.
    #[inline(always)]
    pub(crate) fn retire_recv(&self, wqe_counter: u16) -> Option<T> {
        // The own queue first: an empty one retires nothing.
        match self.rq.retire(wqe_counter) {
            Some(e) => Some(e),
            None => self.retire_srq(wqe_counter),
        }
    }

    /// [`WorkQueues::retire_recv`] from the SRQ, out of the poll loop.
    #[inline(never)]
    fn retire_srq(&self, wqe_counter: u16) -> Option<T> {
        self.srq.as_ref()?.retire(wqe_counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a post reads of its send queue lies on the queue's first two
    /// cache lines, and the queue starts a line: the descriptor's fields, the
    /// queue's limits and the tracker's table (read after the doorbell).
    #[test]
    fn what_a_post_reads_lies_on_the_first_two_lines() {
        use core::mem::{align_of, offset_of, size_of};
        type Sq = SendQueue<crate::ring_only::RingOnly, u64>;
        assert_eq!(align_of::<Sq>(), 64);
        assert_eq!(offset_of!(Sq, desc), 0);
        let ends = [
            offset_of!(Sq, desc) + size_of::<SqDesc>(),
            offset_of!(Sq, open) + 4,
            offset_of!(Sq, max_bbs) + 4,
            offset_of!(Sq, inline_max) + 4,
            offset_of!(Sq, first_sge_max) + 4,
            offset_of!(Sq, ctrl_qpn) + 8,
            offset_of!(Sq, tracker) + size_of::<Tracker<u64>>(),
            // The doorbell's register.
            offset_of!(Sq, reg) + size_of::<Option<Rc<UarReg<crate::ring_only::RingOnly>>>>(),
        ];
        assert!(ends.iter().all(|&e| e <= 128), "{ends:?}");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Post,
        /// Retire the receive `k` after the oldest (k > 0: completions lost).
        Retire(u32),
        Reset,
        Open(bool),
    }

    proptest::proptest! {
        /// Random posts, in-order and lossy retires, RESETs and state changes
        /// against a model: a post is taken exactly when the queue is open and
        /// has room (it is refused with its capacity otherwise), no post ever
        /// overwrites the WQE of an outstanding receive, retires hand back the
        /// entry the counter names and drop the ones before it, and every
        /// entry is dropped exactly once.
        #[test]
        fn the_receive_queue_agrees_with_a_model(ops in proptest::collection::vec(
            proptest::prop_oneof![
                4 => proptest::strategy::Just(Op::Post),
                3 => (0u32..5).prop_map(Op::Retire),
                1 => proptest::strategy::Just(Op::Reset),
                1 => proptest::bool::ANY.prop_map(Op::Open),
            ],
            1..200,
        )) {
            let (mut buf, mut dbrec) = ([[0u8; 16]; 4], 0u32);
            let ring = buf.as_mut_ptr();
            let rq = RecvQueue::new(RqDesc::new(ring.cast(), 4, 16, &mut dbrec, 1).unwrap());
            let (mut open, mut pi, mut ci) = (false, 0u32, 0u32);
            let mut live: std::collections::VecDeque<(u32, Rc<u32>)> = Default::default();
            let mut all = Vec::new();
            for op in ops {
                match op {
                    Op::Post => {
                        let e = Rc::new(pi);
                        all.push(e.clone());
                        let r = rq.post(e.clone(), &[Sge::new(u64::from(pi) << 8, 8, 1)]);
                        if open && pi - ci < 4 {
                            prop_assert_eq!(r, Ok(()));
                            live.push_back((pi, e));
                            pi += 1;
                        } else {
                            let capacity = if open { 4 } else { 0 };
                            prop_assert_eq!(r, Err(PostError::RqFull { capacity }));
                        }
                    }
                    Op::Retire(k) => {
                        let got = rq.retire((ci + k) as u16);
                        if (k as usize) < live.len() {
                            live.drain(..k as usize);
                            let (n, e) = live.pop_front().unwrap();
                            prop_assert_eq!(got.as_ref(), Some(&e));
                            ci = n + 1;
                        } else {
                            prop_assert!(got.is_none());
                        }
                    }
                    Op::Reset => {
                        rq.reset();
                        live.clear();
                        (pi, ci) = (0, 0);
                    }
                    Op::Open(o) => {
                        rq.set_open(o);
                        open = o;
                    }
                }
                prop_assert_eq!(rq.is_closed(), !open);
                // Every outstanding receive's WQE is still its own: the SGE
                // address carries the counter it was posted at.
                for (n, _) in &live {
                    // SAFETY: a slot of the local ring (read, no reference kept).
                    let w = unsafe { *ring.add((n & 3) as usize) };
                    prop_assert_eq!(u64::from_be_bytes(w[8..16].try_into().unwrap()), u64::from(*n) << 8);
                }
                for e in &all {
                    let held = live.iter().any(|(_, x)| Rc::ptr_eq(x, e));
                    // Ours, and the model's and the queue's while outstanding.
                    prop_assert_eq!(Rc::strong_count(e), 1 + 2 * usize::from(held), "entry {}", **e);
                }
            }
            drop(rq);
            prop_assert!(all.iter().all(|e| Rc::strong_count(e) == 1 + usize::from(live.iter().any(|(_, x)| Rc::ptr_eq(x, e)))));
        }
    }

    /// A receive queue over 4 slots of local memory, open.
    fn queue(buf: &mut [[u8; 16]; 4], dbrec: &mut u32) -> RecvQueue<Rc<u32>> {
        let rq = RecvQueue::new(RqDesc::new(buf.as_mut_ptr().cast(), 4, 16, dbrec, 1).unwrap());
        rq.set_open(true);
        rq
    }

    #[test]
    fn receives_retire_in_order_across_the_wrap_and_lost_ones_are_dropped() {
        let (mut buf, mut dbrec) = ([[0u8; 16]; 4], 0u32);
        let rq = queue(&mut buf, &mut dbrec);
        let sge = [Sge::new(0x1000, 8, 1)];
        let e: Vec<Rc<u32>> = (0..7).map(Rc::new).collect();
        for x in &e[..3] {
            rq.post(x.clone(), &sge).unwrap();
        }
        // Counter 2 completes: the completions of 0 and 1 were lost.
        assert_eq!(*rq.retire(2).unwrap(), 2);
        assert!(e[..3].iter().all(|x| Rc::strong_count(x) == 1), "0 and 1 dropped, 2 returned");
        assert!(rq.retire(1).is_none(), "no longer outstanding");
        // Around the wrap (counters 3..7 are slots 3, 0, 1, 2), in order.
        for x in &e[3..7] {
            rq.post(x.clone(), &sge).unwrap();
        }
        assert!(rq.post(Rc::new(9), &sge).is_err(), "full");
        for (i, x) in e[3..6].iter().enumerate() {
            assert_eq!(rq.retire(3 + i as u16).as_ref(), Some(x));
        }
        assert_eq!(Rc::strong_count(&e[6]), 2);
        // Each retire gave its slot back: three more fit, a fourth does not.
        let more: Vec<Rc<u32>> = (10..13).map(Rc::new).collect();
        for x in &more {
            rq.post(x.clone(), &sge).unwrap();
        }
        assert_eq!(rq.post(Rc::new(13), &sge), Err(PostError::RqFull { capacity: 4 }));
        drop(rq);
        assert!(
            e.iter().chain(&more).all(|x| Rc::strong_count(x) == 1),
            "the queue dropped its outstanding entries"
        );
    }

    #[test]
    fn a_reset_queue_keeps_its_open_state_and_gets_its_whole_room_back() {
        let (mut buf, mut dbrec) = ([[0u8; 16]; 4], 0u32);
        let rq = queue(&mut buf, &mut dbrec);
        let sge = [Sge::new(0x1000, 8, 1)];
        for i in 0..3 {
            rq.post(Rc::new(i), &sge).unwrap();
        }
        assert!(rq.retire(0).is_some());
        rq.reset();
        for i in 0..4 {
            rq.post(Rc::new(i), &sge).unwrap();
        }
        assert_eq!(rq.post(Rc::new(4), &sge), Err(PostError::RqFull { capacity: 4 }));
        rq.set_open(false);
        rq.reset();
        assert!(rq.is_closed());
        assert_eq!(rq.post(Rc::new(5), &sge), Err(PostError::RqFull { capacity: 0 }));
    }

    #[test]
    fn a_closed_or_empty_queue_takes_nothing() {
        let (mut buf, mut dbrec) = ([[0u8; 16]; 4], 0u32);
        let rq = queue(&mut buf, &mut dbrec);
        rq.set_open(false);
        let x = Rc::new(0);
        assert_eq!(rq.post(x.clone(), &[]), Err(PostError::RqFull { capacity: 0 }));
        assert_eq!((Rc::strong_count(&x), dbrec), (1, 0), "nothing published");
        let empty = RecvQueue::<Rc<u32>>::empty();
        empty.set_open(true);
        assert!(!empty.exists() && empty.is_closed());
        assert_eq!(empty.post(x.clone(), &[]), Err(PostError::RqFull { capacity: 0 }));
        assert!(empty.retire(0).is_none());
    }
}
