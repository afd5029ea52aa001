//! Copies to and from memory another executor uses at the same time: the
//! rings, doorbell records and UAR pages the model shares with the driver
//! (a Rust handle, a C program, another thread, later the real libmlx5).
//!
//! # Why atomics, and why that is sound
//! The driver writes these bytes with its own stores (a WQE into the ring,
//! a BlueFlame copy into a register half) while the model may read them,
//! and reads CQE slots while the model writes them. The protocol (spec
//! §1.7, §5.5) orders the bytes that matter: a doorbell-record word or a
//! CQE's `op_own` is published with Release and taken with Acquire, and
//! the bytes before it are read only after it. But the model also looks at
//! bytes the protocol does not order: a BlueFlame half the writer may still
//! be filling (watch mode re-reads it until it matches the ring), a ring
//! slot a buggy or racing driver rewrites, the WQE a BlueFlame write is
//! compared with. A plain or `volatile` read racing a write is a data race,
//! undefined behaviour in Rust's memory model however benign on x86 and
//! arm64.
//!
//! So every access the model makes to shared memory goes through this
//! module, and every one of them is an atomic access: `Relaxed` loads and
//! stores of whole aligned `u64` words where the range allows, of single
//! bytes at its unaligned edges. An atomic access racing another access is
//! not a data race when both are atomic, and where the other side is not
//! atomic (a C program's plain stores, a NIC's DMA) the model still only
//! ever sees some value each word or byte held, never invents one: it
//! treats what it read as untrusted input (checked against the ring, the
//! doorbell record, the spec) and the ordering that matters comes from the
//! Acquire/Release pairs above, not from these copies. On x86-64 and arm64
//! a `Relaxed` aligned load or store is the plain `mov`/`ldr`/`str` a
//! `memcpy` would use, so the copies cost what the old ones did, less the
//! vector width.
//!
//! The `unsafe` contract of each function is the usual one for a raw copy:
//! the range lies inside a live allocation the model owns (a [`DevMem`]
//! block), and the local side is a distinct buffer.
//!
//! [`DevMem`]: crate::mem::DevMem

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// Copies `out.len()` bytes from shared memory at `src` into `out`.
///
/// # Safety
/// `src .. src + out.len()` lies inside a live allocation.
#[inline]
pub(crate) unsafe fn load(src: *const u8, out: &mut [u8]) {
    let n = out.len();
    // The common case, a WQEBB or a CQE: aligned whole words, copied word by word.
    if (src as usize).is_multiple_of(8) && n.is_multiple_of(8) {
        let dst = out.as_mut_ptr();
        for w in 0..n / 8 {
            // SAFETY: inside the range and 8-aligned (caller contract; checked above);
            // `dst` has `n` bytes, written unaligned.
            unsafe {
                let v = AtomicU64::from_ptr(src.add(8 * w).cast::<u64>().cast_mut()).load(Relaxed);
                dst.add(8 * w).cast::<u64>().write_unaligned(v);
            }
        }
        return;
    }
    // Bytes up to the first 8-aligned address, then whole words, then the tail. The
    // slices are split once, so the word loop has no bounds check per word.
    let head = src.align_offset(8).min(n);
    let (first, rest) = out.split_at_mut(head);
    for (i, o) in first.iter_mut().enumerate() {
        // SAFETY: inside the range (caller contract); AtomicU8 has alignment 1.
        *o = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
    }
    // SAFETY: `head` <= n, inside the range.
    let words = unsafe { src.add(head) };
    let mut chunks = rest.chunks_exact_mut(8);
    let mut at = 0;
    for c in &mut chunks {
        // SAFETY: inside the range and 8-aligned (`head` reached the alignment).
        let v = unsafe { AtomicU64::from_ptr(words.add(at).cast::<u64>().cast_mut()) }.load(Relaxed);
        c.copy_from_slice(&v.to_ne_bytes());
        at += 8;
    }
    for (i, o) in chunks.into_remainder().iter_mut().enumerate() {
        // SAFETY: inside the range (caller contract).
        *o = unsafe { AtomicU8::from_ptr(words.add(at + i).cast_mut()) }.load(Relaxed);
    }
}

/// Copies `data` into shared memory at `dst`.
///
/// # Safety
/// `dst .. dst + data.len()` lies inside a live allocation.
#[inline]
pub(crate) unsafe fn store(dst: *mut u8, data: &[u8]) {
    let n = data.len();
    // As in `load`: aligned whole words, word by word.
    if (dst as usize).is_multiple_of(8) && n.is_multiple_of(8) {
        let src = data.as_ptr();
        for w in 0..n / 8 {
            // SAFETY: inside the range and 8-aligned (caller contract; checked above);
            // `src` has `n` bytes, read unaligned.
            unsafe {
                let v = src.add(8 * w).cast::<u64>().read_unaligned();
                AtomicU64::from_ptr(dst.add(8 * w).cast::<u64>()).store(v, Relaxed);
            }
        }
        return;
    }
    let head = dst.align_offset(8).min(n);
    let words = (n - head) / 8;
    for (i, &b) in data[..head].iter().enumerate() {
        // SAFETY: inside the range (caller contract).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(b, Relaxed);
    }
    for w in 0..words {
        let at = head + 8 * w;
        let v = u64::from_ne_bytes(data[at..at + 8].try_into().expect("8 bytes"));
        // SAFETY: inside the range and 8-aligned.
        unsafe { AtomicU64::from_ptr(dst.add(at).cast::<u64>()) }.store(v, Relaxed);
    }
    for (i, &b) in data.iter().enumerate().skip(head + 8 * words) {
        // SAFETY: inside the range (caller contract).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(b, Relaxed);
    }
}

/// Stores `len` zero bytes into shared memory at `dst`.
///
/// # Safety
/// `dst .. dst + len` lies inside a live allocation.
#[inline]
pub(crate) unsafe fn zero(dst: *mut u8, len: usize) {
    let head = dst.align_offset(8).min(len);
    let words = (len - head) / 8;
    for i in 0..head {
        // SAFETY: inside the range (caller contract).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(0, Relaxed);
    }
    for w in 0..words {
        // SAFETY: inside the range and 8-aligned.
        unsafe { AtomicU64::from_ptr(dst.add(head + 8 * w).cast::<u64>()) }.store(0, Relaxed);
    }
    for i in head + 8 * words..len {
        // SAFETY: inside the range (caller contract).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every offset and length in a small buffer: the copies move exactly
    /// the bytes asked for, at any alignment, and touch nothing around them.
    #[test]
    fn copies_move_exactly_the_range_at_every_alignment() {
        let src: Vec<u8> = (0..64u8).collect();
        for off in 0..24 {
            for len in 0..32 {
                let mut out = vec![0xeeu8; len];
                // SAFETY: off + len <= 56 < 64.
                unsafe { load(src.as_ptr().add(off), &mut out) };
                assert_eq!(out, src[off..off + len]);

                let mut dst = vec![0x77u8; 64];
                // SAFETY: as above.
                unsafe { store(dst.as_mut_ptr().add(off), &src[..len]) };
                assert_eq!(dst[off..off + len], src[..len]);
                assert!(dst[..off].iter().chain(&dst[off + len..]).all(|&b| b == 0x77));

                // SAFETY: as above.
                unsafe { zero(dst.as_mut_ptr().add(off), len) };
                assert!(dst[off..off + len].iter().all(|&b| b == 0));
                assert!(dst[..off].iter().chain(&dst[off + len..]).all(|&b| b == 0x77));
            }
        }
    }
}
