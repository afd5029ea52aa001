//! The doorbell register (spec §1.6, §1.7): [`BfReg`], the view of one
//! UAR/BlueFlame register that several send queues may share, and [`Mmio`],
//! how a store reaches it. [`HostMmio`] is the real thing (volatile stores
//! between the MMIO barriers, what ConnectX and the simulator's watch mode
//! see); backends that deliver doorbells otherwise (the deterministic
//! simulator, the ring-only recorder) implement [`Mmio`] themselves.

use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::ring::barrier::{mmio_flush_writes, mmio_wc_start};

/// Bytes of one BlueFlame chunk (a WQEBB).
pub const BF_CHUNK: usize = 64;

/// One doorbell / BlueFlame register (rdma-core `struct mlx5_bf`): its
/// address, the BlueFlame half size (`bf.size`, 0 for a doorbell-only
/// register) and the half the next write goes to. The offset belongs to
/// the register, not to a QP: QPs that share a register share this view,
/// and each doorbell of any of them toggles it.
///
/// A register view is used by one thread at a time (rdma-core's
/// single-threaded or thread-domain case): there is no lock. A QP whose
/// send queue is driven from another thread gets a register of its own.
#[derive(Debug)]
#[repr(C)]
pub struct BfReg {
    /// `bf.reg`: the register's first half.
    pub reg: *mut u8,
    /// `bf.size`: the half size in bytes (0: doorbell only).
    pub size: u32,
    /// 0 or `size`: where the next write goes; toggled after every write.
    pub offset: AtomicU32,
}

impl BfReg {
    /// A register view whose next write goes to the first half.
    pub const fn new(reg: *mut u8, size: u32) -> Self {
        BfReg { reg, size, offset: AtomicU32::new(0) }
    }

    /// The half the next write goes to.
    #[inline(always)]
    pub fn next_offset(&self) -> u32 {
        self.offset.load(Ordering::Relaxed)
    }

    /// Where the next write goes (`off ^ size` after a write at `off`:
    /// what [`BfReg::toggle`] does, without reading the offset again).
    #[inline(always)]
    pub fn set_offset(&self, off: u32) {
        self.offset.store(off, Ordering::Relaxed);
    }

    /// After a write: the next one goes to the other half (a no-op for a
    /// doorbell-only register). Not a read-modify-write instruction: one
    /// thread writes a register view at a time.
    #[inline(always)]
    pub fn toggle(&self) {
        self.offset.store(self.next_offset() ^ self.size, Ordering::Relaxed);
    }
}

/// How doorbell and BlueFlame writes reach a register. Implementations do
/// barrier B before and barrier C after the store(s) when they are real
/// MMIO.
///
/// # Safety (of both methods)
/// `reg` is a live register of two halves of the register's size (at least
/// 8 bytes each), 64-byte aligned, written by one thread at a time; `offset`
/// is 0 or the half size; the data fits one half.
pub trait Mmio {
    /// One 8-byte store of `ctrl` (the first 8 bytes of the last WQE's ctrl
    /// segment, already in wire order) at `reg + offset`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn write_db(&self, reg: *mut u8, offset: u32, ctrl: [u8; 8]);
    /// The whole last WQE, `head` (up to the ring end) then `tail` (the
    /// wrapped rest), each a multiple of 64 bytes, in ascending 64-byte
    /// chunks at `reg + offset`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn write_bf(&self, reg: *mut u8, offset: u32, head: &[u8], tail: &[u8]);
}

/// Real MMIO: volatile stores between `mmio_wc_start` and
/// `mmio_flush_writes` (never `memcpy`, which may use string instructions
/// that do not keep order). The register must be mapped and writable for
/// `2 * max(size, 8)` bytes and 64-byte aligned.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostMmio;

impl Mmio for HostMmio {
    #[inline(always)]
    unsafe fn write_db(&self, reg: *mut u8, offset: u32, ctrl: [u8; 8]) {
        mmio_wc_start();
        // SAFETY: the register is mapped (caller contract) and 8-aligned; the
        // ctrl bytes are already in wire order and `from_ne_bytes` keeps
        // that order in the store.
        unsafe { ptr::write_volatile(reg.add(offset as usize) as *mut u64, u64::from_ne_bytes(ctrl)) };
        mmio_flush_writes();
    }

    #[inline(always)]
    unsafe fn write_bf(&self, reg: *mut u8, offset: u32, head: &[u8], tail: &[u8]) {
        mmio_wc_start();
        // SAFETY: offset + len <= 2 * size: inside the register (caller contract).
        unsafe { bf_copy(reg.add(offset as usize), head, tail) };
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
    use core::arch::x86_64::{__m128i, _mm_loadu_si128};
    let d = dst as *mut __m128i;
    let s = src as *const __m128i;
    // SAFETY: SSE2 is baseline on x86_64; loads are unaligned-safe; the
    // stores are 16-aligned and inside the 64 bytes (caller contract).
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

/// One 64-byte chunk with one NEON store of four 128-bit registers, as
/// rdma-core's `_mmio_memcpy_x64_64b` (`vst4q_u64(dest, vld4q_u64(src))`):
/// `ld4` de-interleaves, `st4` interleaves back, so the bytes land in order,
/// in one instruction. (rdma-core uses `st64b` instead when built for
/// FEAT_LS64; this build does not assume it.)
///
/// # Safety
/// `src` readable for 64 bytes; `dst` writable for 64 bytes.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn chunk_neon(dst: *mut u8, src: *const u8) {
    // SAFETY: NEON is baseline on aarch64; 64 bytes read from `src` and
    // written to `dst` (caller contract); v0..v3 are declared clobbered.
    unsafe {
        core::arch::asm!(
            "ld4 {{v0.2d, v1.2d, v2.2d, v3.2d}}, [{src}]",
            "st4 {{v0.2d, v1.2d, v2.2d, v3.2d}}, [{dst}]",
            src = in(reg) src,
            dst = in(reg) dst,
            out("v0") _,
            out("v1") _,
            out("v2") _,
            out("v3") _,
            options(nostack, preserves_flags),
        );
    }
}

/// Copy `head` then `tail` to `dst` in ascending 64-byte chunks, each one
/// NEON store (aarch64).
///
/// # Safety
/// `dst` writable for `head.len() + tail.len()` bytes; both lengths multiples
/// of 64.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub unsafe fn bf_copy_neon(dst: *mut u8, head: &[u8], tail: &[u8]) {
    let mut d = dst;
    for part in [head, tail] {
        for c in part.chunks_exact(BF_CHUNK) {
            // SAFETY: caller contract; d advances by exactly the bytes copied.
            unsafe {
                chunk_neon(d, c.as_ptr());
                d = d.add(BF_CHUNK);
            }
        }
    }
}

/// Copy `head` then `tail` to `dst` in ascending 64-byte chunks with the
/// portable 8-byte stores (no CPU feature needed).
///
/// # Safety
/// `dst` writable for `head.len() + tail.len()` bytes and 8-aligned; both
/// lengths multiples of 64.
#[inline(always)]
pub unsafe fn bf_copy_u64(dst: *mut u8, head: &[u8], tail: &[u8]) {
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
/// 16-byte SSE2 stores (x86_64 baseline: no run-time detection, no AVX).
///
/// # Safety
/// `dst` writable for `head.len() + tail.len()` bytes and 16-aligned; both
/// lengths multiples of 64.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn bf_copy_sse2(dst: *mut u8, head: &[u8], tail: &[u8]) {
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

/// The BlueFlame copy this build uses: SSE2 on x86_64, one NEON store per
/// 64 bytes on aarch64 (as rdma-core), 8-byte stores elsewhere.
///
/// # Safety
/// As [`bf_copy_u64`], and `dst` 16-aligned.
#[inline(always)]
pub unsafe fn bf_copy(dst: *mut u8, head: &[u8], tail: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded.
    unsafe {
        bf_copy_sse2(dst, head, tail)
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: forwarded.
    unsafe {
        bf_copy_neon(dst, head, tail)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: forwarded.
    unsafe {
        bf_copy_u64(dst, head, tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Reg([u8; 256]);

    /// The build's BlueFlame copy (SSE2 on x86_64, NEON `ld4`/`st4` on aarch64)
    /// and the portable one put every byte of head then tail in order, and
    /// nothing past them.
    #[test]
    fn blueflame_copies_land_every_byte_in_order() {
        let head: Vec<u8> = (0..128).map(|i| (i * 7 + 3) as u8).collect();
        let tail: Vec<u8> = (0..64).map(|i| (250 - i) as u8).collect();
        let want: Vec<u8> = head.iter().chain(&tail).copied().collect();
        for copy in [bf_copy as unsafe fn(*mut u8, &[u8], &[u8]), bf_copy_u64] {
            let mut r = Reg([0xee; 256]);
            // SAFETY: 256 writable, 64-aligned bytes; lengths are multiples of 64.
            unsafe { copy(r.0.as_mut_ptr(), &head, &tail) };
            assert_eq!(&r.0[..192], &want[..]);
            assert!(r.0[192..].iter().all(|&b| b == 0xee));
        }
    }
}
