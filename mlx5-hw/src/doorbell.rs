//! The doorbell / BlueFlame register of a QP (spec §1.6–1.7): the only MMIO
//! this backend does, through the ring core's [`HostMmio`]. The front-end
//! has already written the WQE, issued barrier A and stored the doorbell
//! record; then come
//!
//! ```text
//!   barrier B  mmio_wc_start      x86: sfence; arm64: dsb st
//!   the UAR write                 one 8-byte store, or the WQE in 64-byte chunks
//!   barrier C  mmio_flush_writes  x86: sfence; arm64: dsb st
//! ```
//!
//! The BlueFlame copy never uses `memcpy`: every store is volatile, in
//! ascending order (SSE2 16-byte stores on x86_64, 8-byte stores
//! elsewhere; no AVX, no `target-cpu=native`). The BlueFlame toggle is kept
//! per register by the front-end (`mlx5_api::ring::BfReg`).

use std::rc::Rc;

pub use mlx5_api::ring::barrier::{mmio_flush_writes, mmio_wc_start};
pub use mlx5_api::ring::mmio::{bf_copy, bf_copy_u64, BF_CHUNK};
use mlx5_api::ring::{HostMmio, Mmio};

/// The doorbell / BlueFlame register of a QP (`mlx5dv_qp.bf.reg`), kept
/// mapped by the device context it was mapped by.
pub struct HwUar {
    reg: *mut u8,
    /// `bf.size` (0: doorbell only).
    size: u32,
    /// A CQ's UAR page: the arm doorbell at offset 0x20.
    cq: bool,
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
        HwUar { reg, size, cq: false, _owner: owner }
    }

    /// The UAR page of a CQ (`mlx5dv_cq.cq_uar`), for the arm doorbell.
    pub(crate) unsafe fn cq_page(reg: *mut u8) -> Self {
        HwUar { reg, size: 0, cq: true, _owner: None }
    }

    /// The register's address (`bf.reg`).
    pub fn reg(&self) -> *mut u8 {
        self.reg
    }

    /// `bf.size`: the BlueFlame half size, 0 for a doorbell-only register.
    pub fn bf_size(&self) -> u32 {
        self.size
    }
}

impl Mmio for HwUar {
    #[inline(always)]
    unsafe fn write_db(&self, reg: *mut u8, offset: u32, ctrl: [u8; 8]) {
        debug_assert!(
            offset == 0 || offset == self.size || (self.cq && offset == 0x20),
            "bf offset {offset} with bf.size {}",
            self.size
        );
        // SAFETY: forwarded.
        unsafe { HostMmio.write_db(reg, offset, ctrl) }
    }

    #[inline(always)]
    unsafe fn write_bf(&self, reg: *mut u8, offset: u32, head: &[u8], tail: &[u8]) {
        debug_assert!(head.len() + tail.len() <= self.size as usize, "BlueFlame WQE larger than bf.size");
        // SAFETY: forwarded.
        unsafe { HostMmio.write_bf(reg, offset, head, tail) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct FakeReg([u8; 1024]);

    #[test]
    fn uar_doorbell_and_blueflame_on_ordinary_memory() {
        let mut reg = FakeReg([0; 1024]);
        let p = reg.0.as_mut_ptr();
        // SAFETY: the fake register outlives the HwUar; 512 bytes = 2 halves of 256.
        let uar = unsafe { HwUar::new(p, 256, None) };
        let ctrl = [0x00, 0x00, 0x11, 0x08, 0x00, 0x01, 0x23, 0x03];
        // SAFETY: the fake register is 1024 bytes, 64-aligned.
        unsafe {
            uar.write_db(p, 0, ctrl);
            uar.write_db(p, 256, [9; 8]);
        }
        let head: Vec<u8> = (0..128).map(|i| i as u8).collect();
        let tail: Vec<u8> = (0..64).map(|i| 200 - i as u8).collect();
        // SAFETY: as above.
        unsafe { uar.write_bf(p, 256, &head, &tail) };
        drop(uar);
        assert_eq!(&reg.0[..8], &ctrl, "the ctrl bytes land in memory order");
        assert!(reg.0[8..256].iter().all(|&b| b == 0));
        assert_eq!(&reg.0[256..384], &head[..]);
        assert_eq!(&reg.0[384..448], &tail[..]);
        assert!(reg.0[448..].iter().all(|&b| b == 0));
    }
}
