//! Memory windows and indirect mkeys: keys without memory of their own, which
//! a UMR WQE binds to a range of a registered region (a window) or to a list
//! of ranges (an indirect mkey), and invalidates (docs/mlx5-wire-format.md
//! §3.7). The handles here own the key and check a bind's arguments; the WQEs
//! are written by [`WqeBuilder::bind_mw`](crate::WqeBuilder::bind_mw),
//! [`local_inv`](crate::WqeBuilder::local_inv) and
//! [`mr_list`](crate::WqeBuilder::mr_list).

use std::cell::Cell;
use std::rc::Rc;

use crate::backend::Backend;
use crate::ctx::PdInner;
use crate::device::MemoryRegion;
use crate::error::{Error, InvalidArgument, MkeyMisuse, Result, Unsupported};
use crate::types::{AccessFlags, MkeyKind};

/// What a window may grant: local write and the remote rights.
const WINDOW_RIGHTS: AccessFlags = AccessFlags::ALL;

/// The arguments of one memory window bind, checked
/// ([`MemoryWindow::bind`]): what [`WqeBuilder::bind_mw`](crate::WqeBuilder::bind_mw) writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MwBind {
    /// Type 1 (bound to no QP) or type 2 (bound to the posting QP).
    pub kind: MkeyKind,
    /// The window's key before the bind: the UMR names the window by it.
    pub rkey: u32,
    /// The key after the bind: the same index, the next variant
    /// (`ibv_inc_rkey`). Peers use this one.
    pub new_rkey: u32,
    /// The region's lkey.
    pub mr_lkey: u32,
    /// First byte covered.
    pub addr: u64,
    /// Bytes covered (0: a type-1 window's unbind).
    pub len: u64,
    /// What the window grants.
    pub access: AccessFlags,
    /// Peers address the window from 0, not from `addr` (type 2 only).
    pub zero_based: bool,
}

/// The key after `rkey` (rdma-core's `ibv_inc_rkey`): the same index, the
/// variant byte plus one.
pub const fn next_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// A memory window (`ibv_alloc_mw`), freed on drop.
pub struct MemoryWindow<B: Backend> {
    rkey: Cell<u32>,
    kind: MkeyKind,
    pd: Rc<PdInner<B>>,
}

impl<B: Backend> std::fmt::Debug for MemoryWindow<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("rkey", &format_args!("{:#x}", self.rkey.get()))
            .field("kind", &self.kind)
            .finish()
    }
}

impl<B: Backend> MemoryWindow<B> {
    pub(crate) fn alloc(pd: Rc<PdInner<B>>, kind: MkeyKind) -> Result<Self> {
        if matches!(kind, MkeyKind::Indirect { .. }) {
            return Err(misuse(MkeyMisuse::WrongKind {
                needs: "alloc_mw needs a window type",
                key: 0,
                is: kind,
            }));
        }
        let rkey = B::alloc_mkey(&pd.ctx.raw, &pd.raw, kind)?;
        Ok(MemoryWindow { rkey: Cell::new(rkey), kind, pd })
    }

    /// The key peers use now: the one of the last [`MemoryWindow::bind`].
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }

    /// For a bind built without [`MemoryWindow::bind`] (the ring core's
    /// flat [`umr_wqe`](crate::ring::umr_wqe), the C ABI): the key now and
    /// the next one, which the window takes now, as `bind` does.
    pub fn next_rkey(&self) -> (u32, u32) {
        let now = self.rkey.get();
        self.rkey.set(next_rkey(now));
        (now, next_rkey(now))
    }

    /// Type 1 or type 2.
    pub fn kind(&self) -> MkeyKind {
        self.kind
    }

    /// The bind of `len` bytes at `offset` in `mr` granting `access`,
    /// checked as the NIC would check it (the region allows `MW_BIND`, is in
    /// the window's PD and holds the range; a window grants local write and
    /// remote rights only, remote write or atomic only over a region with
    /// local write; at most 2 GiB). The window's key becomes the bind's
    /// `new_rkey` now: post the WQE built from it
    /// ([`WqeBuilder::bind_mw`](crate::WqeBuilder::bind_mw)) before peers use it.
    pub fn bind(
        &self,
        mr: &MemoryRegion<B>,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> Result<MwBind> {
        self.bind_as(mr, offset, len, access, false)
    }

    /// [`MemoryWindow::bind`] with peers addressing the window from 0
    /// (`IBV_ACCESS_ZERO_BASED`; type 2 only).
    pub fn bind_zero_based(
        &self,
        mr: &MemoryRegion<B>,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> Result<MwBind> {
        if self.kind == MkeyKind::Window1 {
            return Err(misuse(MkeyMisuse::ZeroBasedType1));
        }
        self.bind_as(mr, offset, len, access, true)
    }

    fn bind_as(
        &self,
        mr: &MemoryRegion<B>,
        offset: usize,
        len: usize,
        access: AccessFlags,
        zero_based: bool,
    ) -> Result<MwBind> {
        let lkey = mr.lkey();
        if !Rc::ptr_eq(mr.pd_inner(), &self.pd) {
            return Err(misuse(MkeyMisuse::DifferentPd { lkey }));
        }
        if !mr.access().contains(AccessFlags::MW_BIND) {
            return Err(misuse(MkeyMisuse::MrWithoutMwBind { lkey }));
        }
        let needs_lw = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        if !WINDOW_RIGHTS.contains(access)
            || (access.intersects(needs_lw) && !mr.access().contains(AccessFlags::LOCAL_WRITE))
        {
            return Err(misuse(MkeyMisuse::Access { asked: access, lkey, mr: mr.access() }));
        }
        if len as u64 > 1 << 31 {
            return Err(Error::Unsupported(Unsupported::WindowTooLong { len: len as u64 }));
        }
        if offset.checked_add(len).is_none_or(|end| end > mr.len()) {
            return Err(Error::InvalidArgument(InvalidArgument::OutsideMr { offset, len, mr_len: mr.len() }));
        }
        let rkey = self.rkey.get();
        let new_rkey = next_rkey(rkey);
        self.rkey.set(new_rkey);
        Ok(MwBind {
            kind: self.kind,
            rkey,
            new_rkey,
            mr_lkey: lkey,
            addr: mr.addr() + offset as u64,
            len: len as u64,
            access,
            zero_based,
        })
    }
}

impl<B: Backend> Drop for MemoryWindow<B> {
    fn drop(&mut self) {
        let _ = B::dealloc_mkey(&self.pd.ctx.raw, self.rkey.get());
    }
}

/// An indirect mkey (`mlx5dv_create_mkey`, KLM access mode), freed on drop:
/// [`WqeBuilder::mr_list`](crate::WqeBuilder::mr_list) points it at a list of
/// ranges, which peers (its rkey) and local SGEs (its lkey) then address
/// from 0 as one.
pub struct IndirectMkey<B: Backend> {
    key: u32,
    max_entries: u32,
    pd: Rc<PdInner<B>>,
}

impl<B: Backend> std::fmt::Debug for IndirectMkey<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndirectMkey")
            .field("key", &format_args!("{:#x}", self.key))
            .field("max_entries", &self.max_entries)
            .finish()
    }
}

impl<B: Backend> IndirectMkey<B> {
    pub(crate) fn create(pd: Rc<PdInner<B>>, max_entries: u32, remote_invalidate: bool) -> Result<Self> {
        // rdma-core rounds the list up to four entries (`num_desc`).
        let max_entries = max_entries.max(1).div_ceil(4) * 4;
        let key = B::alloc_mkey(&pd.ctx.raw, &pd.raw, MkeyKind::Indirect { max_entries, remote_invalidate })?;
        Ok(IndirectMkey { key, max_entries, pd })
    }

    /// Its key: the lkey of local SGEs and the rkey of peers (the same).
    pub fn key(&self) -> u32 {
        self.key
    }

    /// Most entries one `mr_list` may give it.
    pub fn max_entries(&self) -> u32 {
        self.max_entries
    }
}

impl<B: Backend> Drop for IndirectMkey<B> {
    fn drop(&mut self) {
        let _ = B::dealloc_mkey(&self.pd.ctx.raw, self.key);
    }
}

pub(crate) fn misuse(m: MkeyMisuse) -> Error {
    Error::InvalidArgument(InvalidArgument::Mkey(m))
}
