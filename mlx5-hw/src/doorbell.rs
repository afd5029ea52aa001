//! The doorbell / BlueFlame register write (spec §1.6–1.7): the only MMIO
//! this backend does. The front-end has already written the WQE, issued
//! barrier A and stored the doorbell record; here come
//!
//! ```text
//!   barrier B  mmio_wc_start      x86: sfence; arm64: dsb st
//!   the UAR write                 one 8-byte store, or the WQE in 64-byte chunks
//!   barrier C  mmio_flush_writes  x86: sfence; arm64: dsb st
//! ```
//!
//! The BlueFlame copy never uses `memcpy` (which may use string
//! instructions that do not keep order): every store is volatile, in
//! ascending address order. Two paths exist: eight 8-byte stores per 64-byte
//! chunk (portable), and four 16-byte SSE2 stores per chunk on x86_64 (SSE2
//! is part of the x86_64 baseline: selected at compile time, no run-time
//! detection, no AVX/AVX-512, no `target-cpu=native`).

use std::ptr;
use std::rc::Rc;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
use std::sync::atomic::fence;
use std::sync::atomic::{compiler_fence, Ordering};

/// Bytes of one BlueFlame chunk (a WQEBB).
pub const BF_CHUNK: usize = 64;

/// `mmio_flush_writes`: drain write-combining buffers. x86_64: `sfence`;
/// arm64: `dsb st`. The compiler fences keep the compiler from moving
/// memory accesses across it (the `sfence` intrinsic alone is not a
/// compiler barrier).
#[inline(always)]
pub fn mmio_flush_writes() {
    compiler_fence(Ordering::SeqCst);
    #[cfg(target_arch = "x86_64")]
    #[allow(unused_unsafe)]
    // SAFETY: SSE is part of the x86_64 baseline; sfence accesses no memory.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it accesses no memory.
    unsafe {
        std::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
    compiler_fence(Ordering::SeqCst);
}

/// `mmio_wc_start`: order the doorbell record (and WQE) stores before the
/// write-combining UAR stores. Same instruction as [`mmio_flush_writes`]
/// on both architectures (rdma-core `util/udma_barrier.h`).
#[inline(always)]
pub fn mmio_wc_start() {
    mmio_flush_writes();
}

/// The doorbell / BlueFlame register of a QP (`mlx5dv_qp.bf.reg`), kept
/// valid by the device context it was mapped by.
pub struct HwUar {
    reg: *mut u8,
    /// `bf.size` (0: doorbell only).
    size: u32,
    /// Keeps the UAR mapping (the device context) alive.
    _owner: Option<Rc<dyn std::any::Any>>,
}

impl std::fmt::Debug for HwUar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwUar").field("reg", &self.reg).field("bf_size", &self.size).finish()
    }
}

impl HwUar {
    /// A register at `reg` of BlueFlame half size `size`, kept mapped by `owner`.
    ///
    /// # Safety
    /// `reg` must stay mapped and writable for `2 * max(size, 8)` bytes as
    /// long as `owner` lives, and be 64-byte aligned (a UAR register is).
    pub(crate) unsafe fn new(reg: *mut u8, size: u32, owner: Option<Rc<dyn std::any::Any>>) -> Self {
        HwUar { reg, size, _owner: owner }
    }

    /// The register's address (`bf.reg`).
    pub fn reg(&self) -> *mut u8 {
        self.reg
    }

    /// `bf.size`: the BlueFlame half size, 0 for a doorbell-only register.
    pub fn bf_size(&self) -> u32 {
        self.size
    }

    /// Barrier B, one 8-byte store of `ctrl` at `offset`, barrier C.
    #[inline(always)]
    pub fn ring_doorbell(&self, offset: u32, ctrl: [u8; 8]) {
        debug_assert!(offset == 0 || offset == self.size, "bf offset {offset} with bf.size {}", self.size);
        mmio_wc_start();
        // SAFETY: offset is 0 or bf.size: inside the register (`new`'s
        // contract); a UAR register is 8-byte aligned. The bytes of `ctrl`
        // are already big-endian in memory order, and `from_ne_bytes` keeps
        // that order in the store.
        unsafe { ptr::write_volatile(self.reg.add(offset as usize) as *mut u64, u64::from_ne_bytes(ctrl)) };
        mmio_flush_writes();
    }

    /// Barrier B, the WQE (`head` then `tail`, each a multiple of 64 bytes)
    /// in ascending 64-byte chunks at `offset`, barrier C.
    #[inline(always)]
    pub fn ring_blueflame(&self, offset: u32, head: &[u8], tail: &[u8]) {
        debug_assert!(head.len() + tail.len() <= self.size as usize, "BlueFlame WQE larger than bf.size");
        debug_assert!(offset == 0 || offset == self.size);
        mmio_wc_start();
        // SAFETY: offset + len <= 2 * bf.size: inside the register, which
        // is 64-byte aligned (`new`'s contract).
        unsafe { bf_copy(self.reg.add(offset as usize), head, tail) };
        mmio_flush_writes();
    }
}

/// One 64-byte chunk as eight volatile 8-byte stores, ascending.
///
/// # Safety
/// `src` readable for 64 bytes; `dst` writable for 64 bytes, 8-aligned.
#[inline(always)]
unsafe fn chunk_u64(dst: *mut u8, src: *const u8) {
    let d = dst as *mut u64;
    let s = src as *const u64;
    for i in 0..8 {
        // SAFETY: i < 8 keeps both inside their 64 bytes (caller contract).
        unsafe { ptr::write_volatile(d.add(i), ptr::read_unaligned(s.add(i))) };
    }
}

/// One 64-byte chunk as four volatile 16-byte SSE2 stores, ascending.
///
/// # Safety
/// `src` readable for 64 bytes; `dst` writable for 64 bytes, 16-aligned.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn chunk_sse2(dst: *mut u8, src: *const u8) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128};
    let d = dst as *mut __m128i;
    let s = src as *const __m128i;
    // SAFETY: SSE2 is baseline on x86_64; loads are unaligned-safe; the
    // stores are 16-aligned and inside the 64 bytes (caller contract). A
    // volatile store of `__m128i` is one 16-byte vector store.
    unsafe {
        let (a, b, c, e) = (
            _mm_loadu_si128(s),
            _mm_loadu_si128(s.add(1)),
            _mm_loadu_si128(s.add(2)),
            _mm_loadu_si128(s.add(3)),
        );
        ptr::write_volatile(d, a);
        ptr::write_volatile(d.add(1), b);
        ptr::write_volatile(d.add(2), c);
        ptr::write_volatile(d.add(3), e);
    }
}

/// Copy `head` then `tail` to `dst` in ascending 64-byte chunks with the
/// portable 8-byte stores.
///
/// # Safety
/// `dst` writable for `head.len() + tail.len()` bytes and 8-aligned; both
/// lengths multiples of 64.
pub unsafe fn bf_copy_u64(dst: *mut u8, head: &[u8], tail: &[u8]) {
    debug_assert!(head.len() % BF_CHUNK == 0 && tail.len() % BF_CHUNK == 0);
    let mut d = dst;
    for part in [head, tail] {
        for c in part.chunks_exact(BF_CHUNK) {
            // SAFETY: caller contract; d advances by exactly the bytes copied.
            unsafe {
                chunk_u64(d, c.as_ptr());
                d = d.add(BF_CHUNK);
            }
        }
    }
}

/// Copy `head` then `tail` to `dst` in ascending 64-byte chunks with
/// 16-byte SSE2 stores.
///
/// # Safety
/// `dst` writable for `head.len() + tail.len()` bytes and 16-aligned; both
/// lengths multiples of 64.
#[cfg(target_arch = "x86_64")]
pub unsafe fn bf_copy_sse2(dst: *mut u8, head: &[u8], tail: &[u8]) {
    debug_assert!(head.len() % BF_CHUNK == 0 && tail.len() % BF_CHUNK == 0);
    let mut d = dst;
    for part in [head, tail] {
        for c in part.chunks_exact(BF_CHUNK) {
            // SAFETY: caller contract; d advances by exactly the bytes copied.
            unsafe {
                chunk_sse2(d, c.as_ptr());
                d = d.add(BF_CHUNK);
            }
        }
    }
}

/// The BlueFlame copy this build uses: SSE2 on x86_64, 8-byte stores elsewhere.
///
/// # Safety
/// As [`bf_copy_sse2`] (16-aligned `dst`).
#[inline(always)]
pub unsafe fn bf_copy(dst: *mut u8, head: &[u8], tail: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded.
    unsafe {
        bf_copy_sse2(dst, head, tail)
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded.
    unsafe {
        bf_copy_u64(dst, head, tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake doorbell register: two 256-byte BlueFlame halves plus guard
    /// bytes after them, 64-byte aligned like a UAR register.
    #[repr(C, align(64))]
    struct FakeReg([u8; 1024]);

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
    }

    type CopyFn = unsafe fn(*mut u8, &[u8], &[u8]);

    fn copies() -> Vec<(&'static str, CopyFn)> {
        #[allow(unused_mut)] // only x86_64 adds a path
        let mut v: Vec<(&'static str, CopyFn)> = vec![("u64", bf_copy_u64), ("selected", bf_copy)];
        #[cfg(target_arch = "x86_64")]
        v.push(("sse2", bf_copy_sse2));
        v
    }

    #[test]
    fn chunk_copy_matches_for_every_path_and_shape() {
        for (name, copy) in copies() {
            // (head, tail) in WQEBBs: no wrap, wrap after 1, wrap after 2, 4 BBs total.
            for (h, t) in [(1, 0), (2, 0), (4, 0), (1, 1), (2, 2), (3, 1), (1, 3)] {
                let head = pattern(h * 64, 1);
                let tail = pattern(t * 64, 100);
                let mut reg = FakeReg([0xee; 1024]);
                let off = 256;
                // SAFETY: off + 256 <= 1024, aligned to 64.
                unsafe { copy(reg.0.as_mut_ptr().add(off), &head, &tail) };
                let n = head.len() + tail.len();
                assert_eq!(&reg.0[off..off + head.len()], &head[..], "{name} {h}+{t}: head");
                assert_eq!(&reg.0[off + head.len()..off + n], &tail[..], "{name} {h}+{t}: tail after head");
                assert!(reg.0[..off].iter().all(|&b| b == 0xee), "{name}: nothing before");
                assert!(reg.0[off + n..].iter().all(|&b| b == 0xee), "{name}: nothing after");
            }
        }
    }

    #[test]
    fn source_alignment_does_not_matter() {
        // The ring is page-aligned on hardware, but the copy must not rely on it.
        let buf = pattern(64 * 3 + 8, 9);
        let src = &buf[8..8 + 128];
        for (name, copy) in copies() {
            let mut reg = FakeReg([0; 1024]);
            // SAFETY: 128 bytes at an aligned offset.
            unsafe { copy(reg.0.as_mut_ptr(), src, &[]) };
            assert_eq!(&reg.0[..128], src, "{name}");
        }
    }

    #[test]
    fn uar_doorbell_and_blueflame_on_ordinary_memory() {
        let mut reg = FakeReg([0; 1024]);
        // SAFETY: the fake register outlives the HwUar; 512 bytes = 2 halves of 256.
        let uar = unsafe { HwUar::new(reg.0.as_mut_ptr(), 256, None) };
        let ctrl = [0x00, 0x00, 0x11, 0x08, 0x00, 0x01, 0x23, 0x03];
        uar.ring_doorbell(0, ctrl);
        uar.ring_doorbell(256, [9; 8]);
        let head = pattern(128, 3);
        let tail = pattern(64, 77);
        uar.ring_blueflame(256, &head, &tail);
        drop(uar);
        assert_eq!(&reg.0[..8], &ctrl, "the ctrl bytes land in memory order");
        assert!(reg.0[8..256].iter().all(|&b| b == 0));
        assert_eq!(&reg.0[256..384], &head[..]);
        assert_eq!(&reg.0[384..448], &tail[..]);
        assert!(reg.0[448..].iter().all(|&b| b == 0));
    }

    #[test]
    fn barriers_run() {
        mmio_wc_start();
        mmio_flush_writes();
    }
}
