//! QPN → value in O(1): what a CQ uses to find the work queues a CQE
//! names. Open addressing with linear probing over a power-of-two table,
//! a multiplicative hash of the 24-bit QPN, and a last hit (its key as the
//! CQE carries it, big-endian, and a pointer to what its value points at)
//! that makes the common case (a CQ serving one QP, or bursts from one QP)
//! a single compare with no byte swap. Values are owning pointers (`Rc`,
//! `Box`): lookups give their target. Inserts and removals are control
//! path; lookups allocate nothing.

use std::cell::Cell;
use std::ops::Deref;
use std::ptr::NonNull;

/// Marks a free slot (QPNs are 24 bits, so no QPN equals it).
const EMPTY: u32 = u32::MAX;

/// The lookup key of `sop_drop_qpn` read from a CQE as it lies in memory
/// (big-endian, loaded without a byte swap): its 24 QPN bits in the order
/// the load left them, without the `sop` byte. One shift on a
/// little-endian host.
#[inline(always)]
fn key_of_raw(raw: u32) -> u32 {
    if cfg!(target_endian = "little") {
        raw >> 8
    } else {
        raw & 0xff_ffff
    }
}

/// The QPN of a key.
fn qpn_of_key(key: u32) -> u32 {
    if cfg!(target_endian = "little") {
        u32::from_be(key << 8)
    } else {
        key
    }
}

/// A QPN-keyed table.
pub struct QpnTable<V: Deref> {
    keys: Box<[u32]>,
    vals: Box<[Option<V>]>,
    len: usize,
    /// Key of the last hit (`key_of_raw`: the QPN as a CQE carries it),
    /// EMPTY when none (reset by every change; keys are 24 bits).
    last_key: Cell<u32>,
    /// What its value points at (valid while `last_key` is not EMPTY: the
    /// table has not changed since, so the value is alive and owns it).
    last_val: Cell<NonNull<V::Target>>,
}

impl<V: Deref> Default for QpnTable<V>
where
    V::Target: Sized,
{
    fn default() -> Self {
        Self::with_capacity(8)
    }
}

impl<V: Deref> QpnTable<V>
where
    V::Target: Sized,
{
    fn with_capacity(cap: usize) -> Self {
        QpnTable {
            keys: vec![EMPTY; cap].into_boxed_slice(),
            vals: (0..cap).map(|_| None).collect(),
            len: 0,
            last_key: Cell::new(EMPTY),
            // Never read while `last_key` is EMPTY.
            last_val: Cell::new(NonNull::dangling()),
        }
    }

    #[inline(always)]
    fn home(&self, qpn: u32) -> usize {
        // Fibonacci hashing: the top bits of the product.
        let bits = self.keys.len().trailing_zeros();
        (qpn.wrapping_mul(0x9e37_79b9) >> (32 - bits)) as usize & (self.keys.len() - 1)
    }

    /// What the value of `qpn` (its low 24 bits: a QPN) points at.
    #[cfg(test)]
    pub fn get(&self, qpn: u32) -> Option<&V::Target> {
        self.get_raw(qpn.to_be())
    }

    /// [`QpnTable::get`] of the QPN in a CQE's `sop_drop_qpn` word, loaded
    /// as it lies in memory (big-endian, not swapped; the `sop` byte is
    /// ignored): the last hit costs a shift and a compare.
    #[inline(always)]
    pub fn get_raw(&self, raw: u32) -> Option<&V::Target> {
        let key = key_of_raw(raw);
        if self.last_key.get() == key {
            // SAFETY: `last_key` is not EMPTY (`key` never is), so the
            // table has not changed since `last_val` pointed at the target
            // of this live value.
            return Some(unsafe { self.last_val.get().as_ref() });
        }
        self.get_slow(key)
    }

    /// A lookup that missed the last hit.
    #[inline(never)]
    #[cold]
    fn get_slow(&self, key: u32) -> Option<&V::Target> {
        let i = self.find(qpn_of_key(key))?;
        let v: &V::Target = self.vals[i].as_ref()?;
        self.last_key.set(key);
        self.last_val.set(NonNull::from(v));
        Some(v)
    }

    #[inline]
    fn find(&self, qpn: u32) -> Option<usize> {
        let mask = self.keys.len() - 1;
        let mut i = self.home(qpn);
        loop {
            match self.keys[i] {
                k if k == qpn => return Some(i),
                EMPTY => return None,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Insert or replace the value of `qpn` (its low 24 bits, as `get`).
    pub fn insert(&mut self, qpn: u32, v: V) {
        debug_assert!(qpn <= 0xff_ffff, "QPNs are 24 bits: {qpn:#x}");
        let qpn = qpn & 0xff_ffff;
        self.last_key.set(EMPTY);
        if let Some(i) = self.find(qpn) {
            self.vals[i] = Some(v);
            return;
        }
        if (self.len + 1) * 4 > self.keys.len() * 3 {
            let mut bigger = Self::with_capacity(self.keys.len() * 2);
            for (k, v) in self.keys.iter().zip(self.vals.iter_mut()) {
                if *k != EMPTY {
                    bigger.insert(*k, v.take().expect("occupied slots hold a value"));
                }
            }
            *self = bigger;
        }
        let mask = self.keys.len() - 1;
        let mut i = self.home(qpn);
        while self.keys[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.keys[i] = qpn;
        self.vals[i] = Some(v);
        self.len += 1;
    }

    /// Remove `qpn`; returns its value. Later entries of the probe run move
    /// back (no tombstones).
    pub fn remove(&mut self, qpn: u32) -> Option<V> {
        let qpn = qpn & 0xff_ffff;
        let mask = self.keys.len() - 1;
        self.last_key.set(EMPTY);
        let mut hole = self.find(qpn)?;
        let v = self.vals[hole].take();
        self.keys[hole] = EMPTY;
        self.len -= 1;
        let mut i = (hole + 1) & mask;
        while self.keys[i] != EMPTY {
            let home = self.home(self.keys[i]);
            // Move entry i into the hole if its home is not in (hole, i].
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.keys[hole] = self.keys[i];
                self.vals[hole] = self.vals[i].take();
                self.keys[i] = EMPTY;
                hole = i;
            }
            i = (i + 1) & mask;
        }
        v
    }

    /// Entries.
    #[cfg(test)]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The last hit is forgotten by every change: after a removal neither
    /// the removed key nor u32::MAX (the marker of no last hit and of a
    /// free slot) matches; after a replacement the new value is found.
    #[test]
    fn a_free_slot_never_matches() {
        let mut t = QpnTable::default();
        t.insert(5, Box::new(50));
        assert_eq!(t.get(5), Some(&50));
        t.insert(5, Box::new(51));
        assert_eq!(t.get(5), Some(&51));
        assert_eq!(t.remove(5).as_deref(), Some(&51));
        assert_eq!(t.get(u32::MAX), None);
        assert_eq!(t.get(5), None);
        t.insert(0x12_3456, Box::new(7));
        assert_eq!(t.get(0xff12_3456), Some(&7), "only the 24 QPN bits count");
    }

    /// A last hit does not survive the table growing under it (the values
    /// move to a new allocation).
    #[test]
    fn the_last_hit_does_not_survive_growth() {
        let mut t = QpnTable::default();
        t.insert(7, Box::new(70u64));
        assert_eq!(t.get(7), Some(&70));
        for k in 100..200 {
            t.insert(k, Box::new(u64::from(k)));
        }
        assert_eq!(t.get(7), Some(&70));
        assert_eq!(t.get(150), Some(&150));
        assert_eq!(t.get(150 | 0xff00_0000), Some(&150));
    }

    proptest! {
        /// Random inserts and removals agree with a HashMap, lookups included.
        #[test]
        fn agrees_with_a_hash_map(ops in proptest::collection::vec((any::<bool>(), 0u32..64, 0u32..4), 1..400)) {
            let mut t = QpnTable::default();
            let mut m = HashMap::new();
            for (ins, k, hi) in ops {
                // Keys collide on purpose: few distinct values, some far apart.
                let qpn = k | (hi << 20);
                if ins {
                    t.insert(qpn, Box::new(qpn * 3));
                    m.insert(qpn, qpn * 3);
                } else {
                    prop_assert_eq!(t.remove(qpn).map(|b| *b), m.remove(&qpn));
                }
                prop_assert_eq!(t.len(), m.len());
                for probe in [qpn, qpn ^ 1, k] {
                    prop_assert_eq!(t.get(probe), m.get(&probe));
                }
            }
            for (k, v) in &m {
                prop_assert_eq!(t.get(*k), Some(v));
            }
        }
    }
}
