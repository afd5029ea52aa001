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

#[cfg(test)]
mod tests {
    use super::*;

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
