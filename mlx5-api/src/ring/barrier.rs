//! Memory barriers of the post/poll paths (spec §1.7), in rdma-core's names.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
use core::sync::atomic::fence;
use core::sync::atomic::{compiler_fence, Ordering};

/// `udma_to_device_barrier`: order WQE stores before the doorbell record
/// store, as seen by a DMA reader. x86: compiler barrier (stores are not
/// reordered with stores); arm64: `dmb oshst`.
#[inline(always)]
pub fn udma_to_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::Release);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// `udma_from_device_barrier`: order the CQE `op_own` load before loads of
/// the rest of the CQE, as seen against the device's DMA writes. x86: loads
/// are not reordered with loads, a compiler barrier is enough; arm64: `dmb
/// oshld`, as rdma-core (`util/udma_barrier.h`): an acquire load (`ldar`)
/// orders against other CPUs' stores, the outer-shareable barrier also
/// against the device's.
#[inline(always)]
pub fn udma_from_device_barrier() {
    compiler_fence(Ordering::Acquire);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
}

/// `mmio_flush_writes`: drain write-combining buffers (barrier C, spec
/// §1.7). x86_64: `sfence`; arm64: `dsb st`. The compiler fences keep the
/// compiler from moving memory accesses across it.
#[inline(always)]
pub fn mmio_flush_writes() {
    compiler_fence(Ordering::SeqCst);
    #[cfg(target_arch = "x86_64")]
    #[allow(unused_unsafe)]
    // SAFETY: SSE is part of the x86_64 baseline; sfence accesses no memory.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it accesses no memory.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
    compiler_fence(Ordering::SeqCst);
}

/// `mmio_wc_start` (barrier B): order the doorbell record and WQE stores
/// before the write-combining register stores. The same instruction as
/// [`mmio_flush_writes`] on both architectures (rdma-core `util/udma_barrier.h`).
#[inline(always)]
pub fn mmio_wc_start() {
    mmio_flush_writes();
}
