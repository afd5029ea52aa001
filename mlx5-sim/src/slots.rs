//! An append-only vector whose elements never move: readers on any thread index it
//! without a lock while one writer at a time appends (the fabric's hosts, each
//! behind a lock of its own, see [`crate::hosts`]).

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Elements of the first bucket; bucket `b` holds `FIRST << b`.
const FIRST: usize = 8;
/// Buckets: enough for any index a `usize` can hold.
const BUCKETS: usize = usize::BITS as usize - 2;

/// Buckets allocated on first use and never moved or freed before the vector; element
/// `i` is written before `len` passes it (Release), so an index below `len` (Acquire)
/// names a written element.
pub(crate) struct Slots<T> {
    buckets: [AtomicPtr<MaybeUninit<T>>; BUCKETS],
    len: AtomicUsize,
}

// SAFETY: elements are shared between threads (`&T` from any thread: `T: Sync`) and
// dropped by whichever thread drops the vector (`T: Send`); the vector's own state is
// atomics.
unsafe impl<T: Send + Sync> Sync for Slots<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for Slots<T> {}

/// The bucket and the offset in it of element `i`.
#[inline]
fn place(i: usize) -> (usize, usize) {
    // Bucket b covers [FIRST * (2^b - 1), FIRST * (2^(b+1) - 1)).
    let j = i / FIRST + 1;
    let b = (usize::BITS - 1 - j.leading_zeros()) as usize;
    (b, i - FIRST * ((1 << b) - 1))
}

impl<T> Slots<T> {
    pub(crate) fn new() -> Slots<T> {
        Slots { buckets: [const { AtomicPtr::new(std::ptr::null_mut()) }; BUCKETS], len: AtomicUsize::new(0) }
    }

    /// Elements appended so far.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Element `i`, once appended.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len() {
            return None;
        }
        let (b, off) = place(i);
        let p = self.buckets[b].load(Ordering::Relaxed);
        // SAFETY: `i < len` (Acquire): its bucket was stored and the element written
        // before `len` passed `i` (Release, in `push`); `off` is inside the bucket.
        Some(unsafe { (*p.add(off)).assume_init_ref() })
    }

    /// Appends `v` and returns its index. Appends must not race each other (the caller
    /// serialises them); reads may run alongside.
    pub(crate) fn push(&self, v: T) -> usize {
        let i = self.len.load(Ordering::Relaxed);
        let (b, off) = place(i);
        let mut p = self.buckets[b].load(Ordering::Relaxed);
        if p.is_null() {
            let bucket: Box<[MaybeUninit<T>]> = (0..FIRST << b).map(|_| MaybeUninit::uninit()).collect();
            p = Box::into_raw(bucket).cast::<MaybeUninit<T>>();
            self.buckets[b].store(p, Ordering::Relaxed);
        }
        // SAFETY: `off` is inside bucket `b`; slot `i` is not written yet and nobody
        // reads it before `len` passes it.
        unsafe { (*p.add(off)).write(v) };
        self.len.store(i + 1, Ordering::Release);
        i
    }

    /// The first element appended so far for which `f` holds, and its index.
    #[inline]
    pub(crate) fn find(&self, mut f: impl FnMut(&T) -> bool) -> Option<(usize, &T)> {
        let len = self.len();
        let mut start = 0;
        let mut b = 0;
        while start < len {
            let n = (FIRST << b).min(len - start);
            let p = self.buckets[b].load(Ordering::Relaxed);
            for k in 0..n {
                // SAFETY: `start + k < len` (see `get`).
                let v = unsafe { (*p.add(k)).assume_init_ref() };
                if f(v) {
                    return Some((start + k, v));
                }
            }
            start += FIRST << b;
            b += 1;
        }
        None
    }

    /// The elements appended so far, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        let len = *self.len.get_mut();
        for i in 0..len {
            let (b, off) = place(i);
            // SAFETY: element `i < len` was written and is dropped once, here.
            unsafe { (*self.buckets[b].get_mut().add(off)).assume_init_drop() };
        }
        for (b, p) in self.buckets.iter_mut().enumerate() {
            let p = *p.get_mut();
            if !p.is_null() {
                // SAFETY: made by `Box::into_raw` of a slice of `FIRST << b` in `push`.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, FIRST << b)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_cover_every_index_once_in_order() {
        let mut next = (0, 0);
        for i in 0..10_000 {
            let p = place(i);
            assert_eq!(p, next, "index {i}");
            next = if p.1 + 1 == FIRST << p.0 { (p.0 + 1, 0) } else { (p.0, p.1 + 1) };
        }
    }

    #[test]
    fn elements_stay_where_they_were_put() {
        let s = Slots::new();
        let mut addrs = Vec::new();
        for i in 0..1000u32 {
            assert_eq!(s.push(i), i as usize);
            addrs.push(s.get(i as usize).unwrap() as *const u32);
        }
        assert_eq!(s.len(), 1000);
        assert!(s.get(1000).is_none());
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(s.get(i).unwrap() as *const u32, *a);
            assert_eq!(*s.get(i).unwrap(), i as u32);
        }
        assert_eq!(s.iter().count(), 1000);
        for i in [0, 7, 8, 23, 24, 999] {
            assert_eq!(s.find(|&v| v == i as u32).map(|(k, v)| (k, *v)), Some((i, i as u32)));
        }
        assert!(s.find(|&v| v == 1000).is_none());
    }

    #[test]
    fn every_element_is_dropped_once() {
        let token = std::sync::Arc::new(());
        let s = Slots::new();
        for _ in 0..100 {
            s.push(std::sync::Arc::clone(&token));
        }
        assert_eq!(std::sync::Arc::strong_count(&token), 101);
        drop(s);
        assert_eq!(std::sync::Arc::strong_count(&token), 1);
    }
}
