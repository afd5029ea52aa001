//! wr-id tracking of the handle layer: the user's entry of type `T` for
//! every posted WQE, returned with its completion. The ring core knows
//! nothing of `T`; these tables sit beside its descriptors.

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::pool::PoolSlice;

/// Send side: per SQ slot of a WQE's first WQEBB, the counter just past
/// the WQE and the entry. Entries are live exactly at the WQE starts in
/// `[ci, pi)` of the send queue; the queue passes its counters in. (The
/// WQE's opcode is not kept: a requester CQE reports it, spec §5.1.)
pub struct Tracker<T> {
    /// `mask + 1` slots in the driver's pool ([`crate::pool`], with the
    /// other QPs' tables, not on a page of their own), held as a pointer
    /// and a mask, so that the table takes 16 bytes, not 24, and the send
    /// queue keeps every field its post reads on two cache lines.
    slots: NonNull<Slot<T>>,
    mask: u32,
}

// SAFETY: the table owns its slots as a Box<[Slot<T>]> would, and that is
// Send when T is (Slot holds a Cell and the entry).
unsafe impl<T: Send> Send for Tracker<T> {}

impl<T> Drop for Tracker<T> {
    fn drop(&mut self) {
        // SAFETY: `slots` came from the pool with this layout in `new` and
        // is given back once, here. Entries are `MaybeUninit` (live ones are
        // dropped by the queue's `clear`) and the counters plain, so nothing
        // needs dropping.
        unsafe { crate::pool::dealloc(self.slots.cast(), Self::layout(self.mask)) };
    }
}

struct Slot<T> {
    /// The producer counter after the WQE (its start plus its WQEBBs): the
    /// consumer counter once it retires.
    next: Cell<u32>,
    entry: UnsafeCell<MaybeUninit<T>>,
}

/// What retiring a WQE gives back.
pub struct Retired<T> {
    /// The user's entry.
    pub entry: T,
    /// The consumer counter after the WQE.
    pub ci: u32,
}

impl<T> Tracker<T> {
    /// A table for a ring of `wqe_cnt` WQEBBs (a power of two).
    pub fn new(wqe_cnt: u32) -> Self {
        let mask = wqe_cnt.max(1) - 1;
        let slots = crate::pool::alloc(Self::layout(mask)).cast::<Slot<T>>();
        for i in 0..=mask as usize {
            // SAFETY: in bounds of the fresh table; each slot written once.
            unsafe {
                slots
                    .as_ptr()
                    .add(i)
                    .write(Slot { next: Cell::new(0), entry: UnsafeCell::new(MaybeUninit::uninit()) })
            };
        }
        Tracker { slots, mask }
    }

    /// The table's memory: `mask + 1` slots (`mask` from a `u32` ring size,
    /// so the array fits; a table that would not aborts, as a `Box` does).
    fn layout(mask: u32) -> std::alloc::Layout {
        std::alloc::Layout::array::<Slot<T>>(mask as usize + 1).unwrap_or_else(|_| std::process::abort())
    }

    #[inline(always)]
    fn slot(&self, counter: u32) -> &Slot<T> {
        // SAFETY: masked by len - 1 (len is a power of two).
        unsafe { self.at(counter & self.mask) }
    }

    /// Slot `i` of the table.
    ///
    /// # Safety
    /// `i <= mask`.
    #[inline(always)]
    unsafe fn at(&self, i: u32) -> &Slot<T> {
        // SAFETY: in range (caller contract); the slots live as long as `self`.
        unsafe { &*self.slots.as_ptr().add(i as usize) }
    }

    /// Ask for the line of the slot counter `counter` records into, ahead of
    /// the post (see [`crate::ring::sq::SqDesc::prefetch_next`]). A hint:
    /// the slot is not read.
    #[inline(always)]
    pub fn prefetch(&self, counter: u32) {
        crate::ring::hint::prefetch_w(self.slot(counter));
    }

    /// Record the WQE whose first WQEBB is ring slot `slot` (a free slot)
    /// and that ends before counter `next`.
    ///
    /// # Safety
    /// `slot` is below the `wqe_cnt` the table was made for (the ring's);
    /// `next` is the WQE's start counter plus its WQEBBs, 1 to 255 of them
    /// (`retire` moves the entry out and the consumer to `next` unchecked:
    /// a WQE of 0 WQEBBs would let it move the entry out twice).
    #[inline(always)]
    pub unsafe fn record(&self, slot: u32, next: u32, entry: T) {
        debug_assert!(slot <= self.mask);
        // SAFETY: in range (caller contract).
        let s = unsafe { self.at(slot) };
        s.next.set(next);
        // SAFETY: single-threaded; the slot is free (outside [ci, pi)), so
        // nothing live is overwritten and no reference into it exists.
        unsafe { (*s.entry.get()).write(entry) };
        // The line after this slot's, which this queue's next WQEs record
        // into: with many QPs taking turns, it was last touched a whole
        // ring lap ago and is out of every cache by now. One instruction;
        // past the table's end (once a lap) it is a hint about nothing.
        crate::ring::hint::prefetch_w((s as *const Slot<T>).cast::<u8>().wrapping_add(64));
    }

    /// Retire WQEs from `ci` up to and including the one whose `wqe_index`
    /// is `wqe_counter`; entries of the unsignaled WQEs before it are
    /// dropped. `None` (and nothing changed) when no WQE in `[ci, pi)`
    /// starts at that index.
    ///
    /// `pi` is read where it is needed, plainly: the caller is the only
    /// thread that writes it (so the fast path's compare takes it straight
    /// from memory, and the walk reads it again for itself).
    ///
    /// # Safety
    /// No other thread writes `pi` during the call.
    #[inline(always)]
    pub unsafe fn retire(&self, pi: &AtomicU32, ci: u32, wqe_counter: u16) -> Option<Retired<T>> {
        // SAFETY: no concurrent writer (caller contract).
        if ci as u16 == wqe_counter && unsafe { *pi.as_ptr() } != ci {
            // The oldest WQE (every WQE signaled): no walk.
            let s = self.slot(ci);
            // SAFETY: `ci` is a WQE start in [ci, pi): its entry is live; it
            // is moved out once and the counter moves past it (`record`
            // stored a WQE of at least 1 WQEBB).
            let entry = unsafe { (*s.entry.get()).assume_init_read() };
            return Some(Retired { entry, ci: s.next.get() });
        }
        self.retire_walk(pi, ci, wqe_counter)
    }

    /// [`Tracker::retire`] past unsignaled WQEs.
    #[inline(never)]
    #[cold]
    fn retire_walk(&self, pi: &AtomicU32, ci: u32, wqe_counter: u16) -> Option<Retired<T>> {
        let pi = pi.load(Ordering::Relaxed);
        let dist = (wqe_counter as u32).wrapping_sub(ci) & 0xffff;
        if dist >= pi.wrapping_sub(ci) {
            return None;
        }
        if dist != 0 && !self.starts_a_wqe(ci, dist) {
            return None;
        }
        let mut at = ci;
        loop {
            let s = self.slot(at);
            // SAFETY: `at` is a WQE start in [ci, pi): its entry is live;
            // it is moved out once and the counter moves past it.
            let entry = unsafe { (*s.entry.get()).assume_init_read() };
            let next = self.next_of(at);
            if at as u16 == wqe_counter {
                return Some(Retired { entry, ci: next });
            }
            drop(entry);
            at = next;
        }
    }

    /// Whether walking the WQEs from `ci` lands exactly `dist` WQEBBs on.
    #[cold]
    fn starts_a_wqe(&self, ci: u32, dist: u32) -> bool {
        let mut off = 0;
        while off < dist {
            off = self.next_of(ci.wrapping_add(off)).wrapping_sub(ci);
        }
        off == dist
    }

    /// The counter after the WQE that starts at `at`, at least one on (so
    /// that a walk ends whatever the table holds).
    #[inline]
    fn next_of(&self, at: u32) -> u32 {
        at.wrapping_add(self.slot(at).next.get().wrapping_sub(at).clamp(1, self.mask + 1))
    }

    /// Drop every live entry (`[ci, pi)`), e.g. when the QP goes to RESET
    /// or is destroyed.
    pub fn clear(&self, pi: u32, ci: u32) {
        let mut at = ci;
        while at != pi && pi.wrapping_sub(at) <= self.mask + 1 {
            let s = self.slot(at);
            // SAFETY: a live entry, dropped once; the caller resets the counters.
            unsafe { (*s.entry.get()).assume_init_drop() };
            at = self.next_of(at);
        }
    }
}

/// Receive side of a QP's own queue: the entry of each receive by ring
/// slot. Receives complete in order, so the entries are live exactly at
/// the counters in `[ci, pi)` of the queue, which passes its counters in.
pub struct RqTracker<T> {
    entries: PoolSlice<UnsafeCell<MaybeUninit<T>>>,
    mask: u32,
}

impl<T> RqTracker<T> {
    /// A table for a ring of `n` receives (a power of two, or 0: a queue
    /// that never takes one).
    pub fn new(n: u32) -> Self {
        RqTracker {
            entries: PoolSlice::from_fn(n as usize, |_| UnsafeCell::new(MaybeUninit::uninit())),
            mask: n.max(1) - 1,
        }
    }

    /// Store the entry of slot `slot`.
    ///
    /// # Safety
    /// `slot` is below the table's size and free (its counter is outside
    /// `[ci, pi)`); single-threaded.
    #[inline(always)]
    pub unsafe fn put(&self, slot: u32, entry: T) {
        debug_assert!((slot as usize) < self.entries.len());
        // SAFETY: in range and free (caller contract): nothing live is
        // overwritten and no reference into it exists.
        unsafe { (*self.entries.get_unchecked(slot as usize).get()).write(entry) };
    }

    /// Move out the entry of the receive with counter `at`.
    ///
    /// # Safety
    /// `at` is in `[ci, pi)` and the caller moves the consumer past it, so
    /// that the entry is taken once.
    #[inline(always)]
    pub unsafe fn take(&self, at: u32) -> T {
        // SAFETY: masked by len - 1 (len a power of two, not 0: the
        // counter is live); live and taken once (caller contract).
        unsafe { (*self.entries.get_unchecked((at & self.mask) as usize).get()).assume_init_read() }
    }

    /// Drop the entries of the receives `[from, to)`: live ones that
    /// leave the queue without being taken (lost completions, RESET,
    /// destruction).
    ///
    /// # Safety
    /// `[from, to)` lies within `[ci, pi)` and the caller moves the
    /// consumer past it (or resets the counters).
    #[cold]
    #[inline(never)]
    pub unsafe fn drop_range(&self, from: u32, to: u32) {
        let mut at = from;
        while at != to {
            // SAFETY: live (caller contract), dropped once.
            unsafe { (*self.entries.get_unchecked((at & self.mask) as usize).get()).assume_init_drop() };
            at = at.wrapping_add(1);
        }
    }
}

/// Receive side of an SRQ: one optional entry per WQE index (an SRQ's
/// receives complete in any order).
pub struct RecvTracker<T> {
    entries: PoolSlice<UnsafeCell<Option<T>>>,
}

impl<T> RecvTracker<T> {
    /// A table of `n` entries.
    pub fn new(n: u32) -> Self {
        RecvTracker { entries: PoolSlice::from_fn(n as usize, |_| UnsafeCell::new(None)) }
    }

    /// Store the entry of slot `i` (in range: the ring checked it).
    #[inline(always)]
    pub fn put(&self, i: u32, entry: T) {
        // SAFETY: single-threaded; no reference into the slot outlives this call.
        unsafe { *self.entries[i as usize].get() = Some(entry) };
    }

    /// Take the entry of slot `i`, if any.
    #[inline(always)]
    pub fn take(&self, i: u32) -> Option<T> {
        // SAFETY: as in `put`.
        self.entries.get(i as usize).and_then(|e| unsafe { (*e.get()).take() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn tables_live_in_the_drivers_pool() {
        let t: Tracker<u64> = Tracker::new(64);
        let rq: RqTracker<u64> = RqTracker::new(64);
        let srq: RecvTracker<u64> = RecvTracker::new(64);
        let ptrs = [t.slots.as_ptr().cast::<u8>(), rq.entries.as_ptr().cast(), srq.entries.as_ptr().cast()];
        assert!(ptrs.iter().all(|&p| crate::pool::in_chunk(p)), "{ptrs:?}");
    }

    #[test]
    fn retire_walks_unsignaled_wqes_and_drops_their_entries() {
        let t = Tracker::new(8);
        let live = Rc::new(());
        // SAFETY: slots below 8.
        unsafe {
            t.record(0, 1, live.clone());
            t.record(1, 3, live.clone());
            t.record(3, 4, live.clone());
        }
        assert_eq!(Rc::strong_count(&live), 4);
        let pi = AtomicU32::new(4);
        // SAFETY: no other thread retires.
        assert!(unsafe { t.retire(&pi, 0, 2) }.is_none(), "2 is inside a WQE, not its start");
        // SAFETY: as above.
        assert!(unsafe { t.retire(&pi, 0, 4) }.is_none(), "4 is not posted");
        assert_eq!(Rc::strong_count(&live), 4, "a failed retire changes nothing");
        // SAFETY: as above.
        let r = unsafe { t.retire(&pi, 0, 3) }.unwrap();
        assert_eq!(r.ci, 4);
        drop(r);
        assert_eq!(Rc::strong_count(&live), 1, "the two unsignaled entries were dropped");
    }

    #[test]
    fn clear_drops_live_entries_across_the_wrap() {
        let t = Tracker::new(4);
        let live = Rc::new(());
        // SAFETY: counters 6 and 7 are slots 2 and 3 of 4.
        unsafe {
            t.record(6 & 3, 7, live.clone());
            t.record(7 & 3, 9, live.clone());
        }
        t.clear(9, 6);
        assert_eq!(Rc::strong_count(&live), 1);
    }
}
