//! An append-only vector whose elements never move: readers on any thread index it
//! without a lock while one writer at a time appends (the fabric's hosts, each
//! behind a lock of its own, see [`crate::hosts`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Elements of the first bucket; bucket `b` holds `FIRST << b`.
const FIRST: usize = 8;
/// Buckets: enough for any index a `usize` can hold.
const BUCKETS: usize = usize::BITS as usize - 2;

pub(crate) struct Slots<T> {
    buckets: [OnceLock<Box<[OnceLock<T>]>>; BUCKETS],
    len: AtomicUsize,
}

/// The bucket and the offset in it of element `i`.
fn place(i: usize) -> (usize, usize) {
    // Bucket b covers [FIRST * (2^b - 1), FIRST * (2^(b+1) - 1)).
    let j = i / FIRST + 1;
    let b = (usize::BITS - 1 - j.leading_zeros()) as usize;
    (b, i - FIRST * ((1 << b) - 1))
}

impl<T> Slots<T> {
    pub(crate) fn new() -> Slots<T> {
        Slots { buckets: [const { OnceLock::new() }; BUCKETS], len: AtomicUsize::new(0) }
    }

    /// Elements appended so far.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Element `i`, once appended.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        let (b, off) = place(i);
        self.buckets.get(b)?.get()?.get(off)?.get()
    }

    /// Appends `v` and returns its index. Appends must not race each other (the caller
    /// serialises them); reads may run alongside.
    pub(crate) fn push(&self, v: T) -> usize {
        let i = self.len.load(Ordering::Relaxed);
        let (b, off) = place(i);
        let bucket = self.buckets[b].get_or_init(|| (0..FIRST << b).map(|_| OnceLock::new()).collect());
        // Unset: `i` is the length, and appends are serialised.
        let _ = bucket[off].set(v);
        self.len.store(i + 1, Ordering::Release);
        i
    }

    /// The elements appended so far, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
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
    }
}
