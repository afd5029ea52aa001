//! Maps keyed by the model's own object numbers (QPN, CQN, lkey, …): hashed with
//! one multiplication instead of SipHash. The keys are chosen by the model, not
//! by an adversary, so flooding resistance buys nothing here, and SipHash was a
//! visible share of every message.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of a `u32` (or `u64`) key.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        // hashbrown takes the top 7 bits for its control bytes and the low bits for
        // the bucket: the multiplication spreads a small key over both.
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map from object numbers.
pub(crate) type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;
/// A set of object numbers.
pub(crate) type IdSet = HashSet<u32, BuildHasherDefault<IdHasher>>;

/// Objects whose numbers the model chooses (QPNs, CQNs): a direct table. Number `n` lives in
/// slot `(n - base) & mask`. The model takes each new number from
/// [`DirectMap::next_free`], the first number at or after its counter whose slot is
/// free, so a lookup is one index and one compare, numbers still only grow (a number is
/// not handed out again until the 32-bit counter wraps), and the table holds at most
/// twice the live objects: it doubles when half full, and doubling never makes two
/// numbers collide (equal under the larger mask means equal under the smaller).
#[derive(Debug)]
pub(crate) struct DirectMap<V> {
    base: u32,
    slots: Vec<Option<(u32, V)>>,
    len: usize,
}

impl<V> DirectMap<V> {
    /// An empty table for numbers counted from `base`.
    pub(crate) fn new(base: u32) -> Self {
        DirectMap { base, slots: (0..16).map(|_| None).collect(), len: 0 }
    }

    #[inline]
    fn slot(&self, k: u32) -> usize {
        (k.wrapping_sub(self.base) as usize) & (self.slots.len() - 1)
    }

    #[inline]
    pub(crate) fn get(&self, k: &u32) -> Option<&V> {
        match &self.slots[self.slot(*k)] {
            Some((n, v)) if n == k => Some(v),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, k: &u32) -> Option<&mut V> {
        let i = self.slot(*k);
        match &mut self.slots[i] {
            Some((n, v)) if n == k => Some(v),
            _ => None,
        }
    }

    pub(crate) fn contains_key(&self, k: &u32) -> bool {
        self.get(k).is_some()
    }

    /// The first number at or after `from` whose slot is free, after growing the table
    /// if it is half full (so inserting it keeps the table at most half full).
    pub(crate) fn next_free(&mut self, from: u32) -> u32 {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mut k = from;
        while self.slots[self.slot(k)].is_some() {
            k = k.wrapping_add(1);
        }
        k
    }

    /// Inserts `v` as number `k` (replacing and returning what `k` held). A slot held by
    /// another number (a `k` not from [`DirectMap::next_free`]) makes the table grow
    /// until the two part.
    pub(crate) fn insert(&mut self, k: u32, v: V) -> Option<V> {
        loop {
            let i = self.slot(k);
            match &mut self.slots[i] {
                Some((n, old)) if *n == k => return Some(std::mem::replace(old, v)),
                Some(_) => self.grow(),
                e @ None => {
                    *e = Some((k, v));
                    self.len += 1;
                    return None;
                }
            }
        }
    }

    pub(crate) fn remove(&mut self, k: &u32) -> Option<V> {
        let i = self.slot(*k);
        match &self.slots[i] {
            Some((n, _)) if n == k => {
                self.len -= 1;
                self.slots[i].take().map(|(_, v)| v)
            }
            _ => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u32, &V)> {
        self.slots.iter().flatten().map(|(k, v)| (k, v))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &u32> {
        self.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, (0..n).map(|_| None).collect());
        for (k, v) in old.into_iter().flatten() {
            let i = self.slot(k);
            debug_assert!(self.slots[i].is_none(), "doubling parted two numbers that shared a slot");
            self.slots[i] = Some((k, v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_map_hands_out_free_numbers_and_finds_them() {
        let mut m: DirectMap<u32> = DirectMap::new(0x1000);
        let mut next = 0x1000;
        let mut live = Vec::new();
        for round in 0..2000u32 {
            let k = m.next_free(next);
            assert!(k >= next, "numbers only grow");
            assert_eq!(m.insert(k, round), None);
            next = k + 1;
            live.push((k, round));
            if round % 3 == 0 {
                // Remove an older one: its slot is free for a later number.
                let (old, v) = live.remove(live.len() / 2);
                assert_eq!(m.remove(&old), Some(v));
                assert_eq!(m.get(&old), None, "a removed number is not found");
            }
            assert!(m.len() * 2 <= m.slots.len(), "at most half full");
        }
        assert_eq!(m.len(), live.len());
        for &(k, v) in &live {
            assert_eq!(m.get(&k), Some(&v));
        }
        // A number that shares a live number's slot but is not live is not found.
        let (k, _) = live[0];
        assert_eq!(m.get(&(k + m.slots.len() as u32)), None);
        // Iteration sees every live object once.
        let mut seen: Vec<u32> = m.keys().copied().collect();
        seen.sort_unstable();
        let mut want: Vec<u32> = live.iter().map(|&(k, _)| k).collect();
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    #[test]
    fn direct_map_insert_of_a_colliding_number_grows_until_they_part() {
        let mut m: DirectMap<u8> = DirectMap::new(0);
        m.insert(5, 1);
        m.insert(5 + 16, 2); // same slot in 16 slots
        m.insert(5 + 16 * 1024, 3);
        assert_eq!((m.get(&5), m.get(&21), m.get(&(5 + 16 * 1024))), (Some(&1), Some(&2), Some(&3)));
        assert_eq!(m.insert(21, 9), Some(2));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn sequential_keys_spread_over_buckets_and_top_bits() {
        let h = |k: u32| {
            let mut s = IdHasher::default();
            s.write_u32(k);
            s.finish()
        };
        let low: std::collections::HashSet<u64> = (0..1024u32).map(|k| h(k) & 1023).collect();
        let top: std::collections::HashSet<u64> = (0..1024u32).map(|k| h(k) >> 57).collect();
        assert!(low.len() > 600, "low bits: {}", low.len());
        assert!(top.len() > 100, "top 7 bits: {}", top.len());
        let mut m: IdMap<u32> = IdMap::default();
        for k in 0..5000 {
            m.insert(k * 0x100, k);
        }
        assert!((0..5000).all(|k| m[&(k * 0x100)] == k));
    }
}
