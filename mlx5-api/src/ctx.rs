//! The objects every handle stands on: an opened device ([`CtxInner`]),
//! its doorbell registers ([`UarReg`], one BlueFlame toggle per register,
//! shared by the QPs on it) and protection domains ([`PdInner`]). No handle
//! type is imported here, so every other module may import this one.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::backend::Backend;
use crate::ring::BfReg;
use crate::types::DeviceCaps;

/// An opened device, shared by everything created from it.
#[doc(hidden)]
pub struct CtxInner<B: Backend> {
    pub(crate) raw: B::Context,
    /// A number unique among the contexts of this process (errors name it).
    pub(crate) id: u64,
    pub(crate) caps: DeviceCaps,
    next_uidx: Cell<u32>,
    /// The registers QPs of this context use, by address.
    regs: RefCell<Vec<Rc<UarReg<B>>>>,
}

impl<B: Backend> std::fmt::Debug for CtxInner<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtxInner").finish_non_exhaustive()
    }
}

impl<B: Backend> CtxInner<B> {
    pub(crate) fn new(raw: B::Context, caps: DeviceCaps) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        CtxInner { raw, id, caps, next_uidx: Cell::new(1), regs: RefCell::new(Vec::new()) }
    }

    /// The next CQE-version-1 user index (24 bits).
    pub(crate) fn next_user_index(&self) -> u32 {
        let uidx = self.next_uidx.get();
        self.next_uidx.set((uidx + 1) & 0xff_ffff);
        uidx
    }

    /// The view of register `reg`: the existing one when another QP uses it
    /// (the toggle is the register's), else a new one around `mmio`.
    pub(crate) fn register(&self, reg: *mut u8, size: u32, mmio: B::Uar) -> Rc<UarReg<B>> {
        let mut regs = self.regs.borrow_mut();
        regs.retain(|r| Rc::strong_count(r) > 1);
        if let Some(r) = regs.iter().find(|r| r.bf.reg == reg) {
            return r.clone();
        }
        let r = Rc::new(UarReg { bf: BfReg::new(reg, size), mmio });
        regs.push(r.clone());
        r
    }
}

/// One doorbell / BlueFlame register: the ring core's view (address, half
/// size, the half the next write goes to) and how writes reach it.
#[doc(hidden)]
pub struct UarReg<B: Backend> {
    pub(crate) bf: BfReg,
    pub(crate) mmio: B::Uar,
}

impl<B: Backend> std::fmt::Debug for UarReg<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UarReg").finish_non_exhaustive()
    }
}

impl<B: Backend> UarReg<B> {
    /// The register view (for the ring core's `SqDesc::bf`).
    pub fn bf(&self) -> &BfReg {
        &self.bf
    }
}

/// A protection domain, shared by its MRs, QPs and SRQs.
#[doc(hidden)]
pub struct PdInner<B: Backend> {
    pub(crate) raw: B::Pd,
    pub(crate) ctx: Rc<CtxInner<B>>,
}

impl<B: Backend> std::fmt::Debug for PdInner<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PdInner").finish_non_exhaustive()
    }
}
