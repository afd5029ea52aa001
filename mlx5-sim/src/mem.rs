//! Device-owned memory: CQ/QP rings and doorbell records that the simulated NIC allocates
//! and hands to the driver as raw pointers (the `mlx5dv_init_obj` view, spec §1.8).
//!
//! The driver reads and writes these bytes concurrently with the model, so the model never
//! forms Rust references over them: it copies through [`crate::shared`] (atomic accesses,
//! its module documentation says why that is sound), loads doorbell-record
//! words with `Acquire` and publishes a CQE's `op_own` byte with `Release` (spec §1.7, §5.5).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The page size the model's device memory is laid out in.
pub(crate) const PAGE: usize = 4096;

/// A zeroed, aligned block owned by the model; freed on drop.
#[derive(Debug)]
pub(crate) struct DevMem {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Carved from the huge-page arena (else from the heap with `layout`).
    arena: bool,
    /// Bytes from the allocation's start to the block's ([`DevMem::new_at`]).
    off: u16,
    /// The program's memory ([`DevMem::borrowed`]): never freed here.
    borrowed: bool,
}

// SAFETY: DevMem owns its allocation; all accesses go through raw pointers with explicit
// atomics where the driver synchronises with us, so sharing the handle across threads is
// sound (the memory itself is meant to be shared with the driver).
unsafe impl Send for DevMem {}
// SAFETY: see above; `&DevMem` only exposes raw-pointer copies and atomic accesses.
unsafe impl Sync for DevMem {}

impl DevMem {
    /// Allocates `len` zeroed bytes (at least 1) aligned to `align` (a power of two):
    /// blocks of up to 512 KiB (rings, doorbell records, UAR pages) from the arena of
    /// huge-page chunks (see `arena`: out of the heap, they no longer spread the QPs'
    /// small objects over pages of their own), larger blocks, or all where the arena
    /// has no memory, from the heap.
    pub(crate) fn new(len: usize, align: usize) -> Option<DevMem> {
        let layout = Layout::from_size_align(len.max(1), align).ok()?;
        if let Some(ptr) = crate::arena::alloc(layout.size(), layout.align()) {
            return Some(DevMem { ptr, layout, arena: true, off: 0, borrowed: false });
        }
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        NonNull::new(p).map(|ptr| DevMem { ptr, layout, arena: false, off: 0, borrowed: false })
    }

    /// A zeroed block of `len` bytes (at least 1) that starts `off` bytes into a
    /// page-aligned allocation of `off + len` (`off` a multiple of 64 below [`PAGE`],
    /// else `None`): 64-byte aligned, at the line of its page that `off` names.
    pub(crate) fn new_at(len: usize, off: usize) -> Option<DevMem> {
        if off >= PAGE || !off.is_multiple_of(64) {
            return None;
        }
        let mut m = DevMem::new(len.max(1).checked_add(off)?, PAGE)?;
        // SAFETY: pointer arithmetic only; off < the allocation's length, so the result is
        // inside it and non-null.
        m.ptr = unsafe { NonNull::new_unchecked(m.ptr.as_ptr().add(off)) };
        m.off = off as u16;
        Some(m)
    }

    /// A view of `len` bytes of the program's own memory at `ptr` (a ring or doorbell
    /// record that the driver allocated and handed over in a command's udata, as libmlx5
    /// does): read and written like device memory, never freed here. `None` for a null
    /// pointer, an empty or wrapping range, or a misaligned one (`align`).
    ///
    /// # Safety
    /// `[ptr, ptr + len)` stays mapped and writable while the view lives; the driver
    /// shares it with the model only through the ring and doorbell protocols, as with
    /// model-owned memory (accesses are atomic copies, see [`crate::shared`]).
    pub(crate) unsafe fn borrowed(ptr: *mut u8, len: usize, align: usize) -> Option<DevMem> {
        let ptr = NonNull::new(ptr)?;
        if len == 0 || !align.is_power_of_two() || !(ptr.as_ptr() as usize).is_multiple_of(align) {
            return None;
        }
        (ptr.as_ptr() as usize).checked_add(len)?;
        let layout = Layout::from_size_align(len, 1).ok()?;
        Some(DevMem { ptr, layout, arena: false, off: 0, borrowed: true })
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size() - usize::from(self.off)
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `out.len()` bytes starting at `off` into `out`; false if out of range.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> bool {
        match off.checked_add(out.len()) {
            Some(end) if end <= self.len() => {
                // SAFETY: [off, end) lies inside our allocation; the driver may write it
                // meanwhile, hence the shared-memory copy.
                unsafe { crate::shared::load(self.ptr().add(off), out) };
                true
            }
            _ => false,
        }
    }

    /// Copies `data` to `off`; false (and nothing written) if out of range.
    pub(crate) fn write(&self, off: usize, data: &[u8]) -> bool {
        match off.checked_add(data.len()) {
            Some(end) if end <= self.len() => {
                // SAFETY: [off, end) lies inside our allocation; the driver may read it
                // meanwhile, hence the shared-memory copy.
                unsafe { crate::shared::store(self.ptr().add(off), data) };
                true
            }
            _ => false,
        }
    }

    /// Copies bytes 0..63 of `cqe` to `off`, all but the last one (`op_own`, which the
    /// caller publishes after with [`DevMem::store_u8_release`]): seven words and then
    /// four, two and one bytes, where `off` is 8-aligned, as a CQE slot is; else as
    /// [`DevMem::write`]. False (and nothing written) if out of range.
    #[inline]
    pub(crate) fn write_cqe_body(&self, off: usize, cqe: &[u8; 64]) -> bool {
        if off.checked_add(64).is_none_or(|end| end > self.len()) {
            return false;
        }
        let p = self.ptr().wrapping_add(off);
        if !(p as usize).is_multiple_of(8) {
            return self.write(off, &cqe[..63]);
        }
        // SAFETY: [off, off + 64) lies inside the block and `p` is 8-aligned, so each
        // access below is aligned and in range; atomics, as everywhere in shared memory.
        unsafe {
            for w in 0..7 {
                let v = u64::from_ne_bytes(cqe[8 * w..8 * w + 8].try_into().expect("8 bytes"));
                AtomicU64::from_ptr(p.add(8 * w).cast::<u64>()).store(v, Ordering::Relaxed);
            }
            let v = u32::from_ne_bytes(cqe[56..60].try_into().expect("4 bytes"));
            AtomicU32::from_ptr(p.add(56).cast::<u32>()).store(v, Ordering::Relaxed);
            let v = u16::from_ne_bytes(cqe[60..62].try_into().expect("2 bytes"));
            std::sync::atomic::AtomicU16::from_ptr(p.add(60).cast::<u16>()).store(v, Ordering::Relaxed);
            AtomicU8::from_ptr(p.add(62)).store(cqe[62], Ordering::Relaxed);
        }
        true
    }

    /// The 8 bytes at `off`: one word load where `off` is 8-aligned (a WQE's ctrl
    /// segment), else as [`DevMem::read`]; zeros if out of range.
    #[inline]
    pub(crate) fn read8(&self, off: usize) -> [u8; 8] {
        let mut b = [0u8; 8];
        if off.checked_add(8).is_none_or(|end| end > self.len()) {
            return b;
        }
        let p = self.ptr().wrapping_add(off);
        if (p as usize).is_multiple_of(8) {
            // SAFETY: in range and 8-aligned; the driver may write it meanwhile, hence
            // the atomic load.
            let v = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.load(Ordering::Relaxed);
            return v.to_ne_bytes();
        }
        self.read(off, &mut b);
        b
    }

    /// Acquire-loads the big-endian u32 at `off` (4-aligned), as a doorbell-record word.
    pub(crate) fn load_be32(&self, off: usize) -> u32 {
        if !off.is_multiple_of(4) || off + 4 > self.len() {
            return 0;
        }
        // SAFETY: in range and 4-aligned (the block is at least 4-aligned); the driver only
        // accesses this word atomically or before handing it to us.
        let a = unsafe { AtomicU32::from_ptr(self.ptr().add(off).cast::<u32>()) };
        u32::from_be(a.load(Ordering::Acquire))
    }

    /// Release-stores a big-endian u32 at `off` (tests play the driver with it).
    #[cfg(test)]
    pub(crate) fn store_be32(&self, off: usize, v: u32) {
        if !off.is_multiple_of(4) || off + 4 > self.len() {
            return;
        }
        // SAFETY: as in `load_be32`.
        let a = unsafe { AtomicU32::from_ptr(self.ptr().add(off).cast::<u32>()) };
        a.store(v.to_be(), Ordering::Release)
    }

    /// Release-stores `v` big-endian in the 8 bytes at `off` (8-aligned) in one store, so
    /// a reader never sees half of it (a free-running clock's high and low words).
    pub(crate) fn store_be64(&self, off: usize, v: u64) {
        if !off.is_multiple_of(8) || off + 8 > self.len() || !(self.ptr() as usize).is_multiple_of(8) {
            return;
        }
        // SAFETY: in range and 8-aligned; the reader only loads it.
        let a = unsafe { AtomicU64::from_ptr(self.ptr().add(off).cast::<u64>()) };
        a.store(v.to_be(), Ordering::Release)
    }

    /// Release-stores one byte (a CQE's `op_own`, written last).
    pub(crate) fn store_u8_release(&self, off: usize, v: u8) {
        if off >= self.len() {
            return;
        }
        // SAFETY: in range; AtomicU8 has alignment 1.
        let a = unsafe { AtomicU8::from_ptr(self.ptr().add(off)) };
        a.store(v, Ordering::Release)
    }

    /// Zeroes the whole block.
    pub(crate) fn zero(&self) {
        // SAFETY: the whole allocation is ours; shared with the driver.
        unsafe { crate::shared::zero(self.ptr(), self.len()) }
    }
}

/// Asks the cache for the line holding `p` ahead of a write to it: `prefetchw` where the
/// target has it, else `prefetcht0` (x86-64), `prfm pstl1keep` (AArch64), nothing
/// elsewhere. A hint only: it reads and writes no bytes and cannot fault, whatever `p` is.
/// (The front-end has its own, `ring::hint::prefetch_w`: the simulator shares no code
/// with the driver it checks.)
#[inline(always)]
pub(crate) fn prefetch_line<T>(p: *const T) {
    prefetch(p, true)
}

/// Asks the cache for the line holding `p` ahead of a read of it, leaving it shared:
/// `prefetcht0` (x86-64), `prfm pldl1keep` (AArch64), nothing elsewhere. For lines
/// another core writes (the driver's ring and doorbell record, threaded mode), which a
/// prefetch for writing would take away from it. A hint only, as [`prefetch_line`].
#[inline(always)]
pub(crate) fn prefetch_read<T>(p: *const T) {
    prefetch(p, false)
}

/// [`prefetch_line`] (`write`) or [`prefetch_read`]; `write` is a constant where inlined.
#[inline(always)]
fn prefetch<T>(p: *const T, write: bool) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch touches no memory the program can observe and never faults.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        if write {
            _mm_prefetch::<_MM_HINT_ET0>(p.cast::<i8>())
        } else {
            _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>())
        }
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above: PRFM is a hint and never faults.
    unsafe {
        if write {
            std::arch::asm!("prfm pstl1keep, [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
        } else {
            std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
        }
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = (p, write);
}

impl Drop for DevMem {
    fn drop(&mut self) {
        if self.borrowed {
            return;
        }
        // SAFETY: `new_at` moved the pointer `off` bytes into the allocation.
        let start = unsafe { self.ptr.as_ptr().sub(usize::from(self.off)) };
        if self.arena {
            // SAFETY: carved in `new`; the block is ours and dies here.
            return unsafe { crate::arena::free(NonNull::new_unchecked(start)) };
        }
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { dealloc(start, self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let m = DevMem::new(64, 4096).unwrap();
        assert_eq!(m.ptr() as usize % 4096, 0);
        let mut b = [0u8; 8];
        assert!(m.read(56, &mut b));
        assert!(!m.read(57, &mut b));
        assert!(!m.write(usize::MAX, &b));
        m.store_be32(4, 0x11);
        let mut w = [0u8; 4];
        m.read(4, &mut w);
        assert_eq!(w, [0, 0, 0, 0x11]);
        assert_eq!(m.load_be32(4), 0x11);
        assert_eq!(m.load_be32(62), 0);
        // Hints in and out of the block (and at no address at all) fault on nothing
        // and change nothing.
        prefetch_line(m.ptr());
        prefetch_line(m.ptr().wrapping_add(usize::MAX / 2));
        prefetch_line(std::ptr::null::<u8>());
        prefetch_line(usize::MAX as *const u8);
        m.read(4, &mut w);
        assert_eq!(w, [0, 0, 0, 0x11]);
    }

    #[test]
    fn a_block_placed_in_its_page_starts_at_that_line_and_keeps_its_length() {
        for (len, off) in [(1, 0), (100, 64), (8256, 4032), (600 << 10, 128)] {
            let m = DevMem::new_at(len, off).unwrap();
            assert_eq!(m.ptr() as usize % 4096, off);
            assert_eq!(m.len(), len);
            let mut b = [0u8; 1];
            assert!(m.read(len - 1, &mut b), "its last byte is inside");
            assert_eq!(b, [0], "zeroed");
            assert!(!m.read(len, &mut b), "the byte after it is not");
            assert!(m.write(0, &[7]) && m.write(len - 1, &[9]));
        }
        assert!(DevMem::new_at(64, 4096).is_none());
        assert!(DevMem::new_at(64, 100).is_none());
    }

    /// A CQE's body: bytes 0..63 exactly, at an aligned slot and (through the generic
    /// copy) at a misaligned one; byte 63 and everything around untouched; a slot past
    /// the end refused with nothing written.
    #[test]
    fn a_cqe_body_is_its_63_bytes_and_nothing_else() {
        let mut cqe = [0u8; 64];
        for (i, b) in cqe.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        for off in [0usize, 64, 8, 3] {
            let m = DevMem::new(256, 64).unwrap();
            m.write(0, &[0xee; 256]);
            assert!(m.write_cqe_body(off, &cqe));
            let mut all = [0u8; 256];
            m.read(0, &mut all);
            assert_eq!(&all[off..off + 63], &cqe[..63], "offset {off}");
            assert_eq!(all[off + 63], 0xee, "op_own left to the caller");
            assert!(all[..off].iter().chain(&all[off + 64..]).all(|&b| b == 0xee));
        }
        let m = DevMem::new(128, 64).unwrap();
        assert!(!m.write_cqe_body(65, &cqe) && !m.write_cqe_body(usize::MAX, &cqe));
        let mut all = [0u8; 128];
        m.read(0, &mut all);
        assert!(all.iter().all(|&b| b == 0));
    }

    /// `read8`: the 8 bytes at an aligned or a misaligned offset, zeros past the end.
    #[test]
    fn read8_reads_the_eight_bytes_there() {
        let m = DevMem::new(64, 64).unwrap();
        let all: Vec<u8> = (1..=64).collect();
        m.write(0, &all);
        assert_eq!(m.read8(0), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(m.read8(8), [9, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(m.read8(3), [4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(m.read8(56), [57, 58, 59, 60, 61, 62, 63, 64]);
        assert_eq!(m.read8(57), [0; 8]);
        assert_eq!(m.read8(usize::MAX), [0; 8]);
    }
}
