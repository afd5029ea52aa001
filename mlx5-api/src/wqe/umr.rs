//! The UMR WQEs of an RC send queue (docs/mlx5-wire-format.md §3.7): memory
//! window bind, LOCAL_INV, and an indirect mkey's KLM list, written as
//! rdma-core's `set_bind_wr` and `mlx5_send_wr_mr_list` write them (what
//! each carries: [`crate::ring::umr`]).
//!
//! Each is ctrl (opcode 0x25, `imm` = the key modified), the 48-byte UMR ctrl
//! segment (DS 1 to 3, in the first WQEBB), the 64-byte mkey context (DS 4 to
//! 7, the second WQEBB) and, for a bind or a list, the KLM entries padded to
//! whole WQEBBs. libmlx5 gives the WQE after a UMR an initiator small fence
//! (FM = 1, `WqeFlags::SMALL_FENCE`); this builder leaves that to the caller,
//! who knows whether the next WQE uses the key.

use super::*;
use crate::error::{InvalidArgument, MkeyMisuse};
use crate::mkey::{misuse, IndirectMkey, MwBind};
use crate::ring::seg::{set_umr_control_seg, set_umr_klm_seg, set_umr_mkey_seg};
use crate::ring::umr::{self as layout, UmrLayout};
use crate::types::AccessFlags;
use crate::MkeyKind;

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Init> {
    /// A memory window bind (`IBV_WR_BIND_MW`; a type-1 window's
    /// `ibv_bind_mw`): the window of `b.rkey` covers `b.len` bytes of the
    /// region `b.mr_lkey` at `b.addr` with `b.access`, under the key
    /// `b.new_rkey`; a type-2 window is bound to this QP. Build `b` with
    /// [`MemoryWindow::bind`](crate::MemoryWindow::bind), which checks it.
    /// A type-1 bind of length 0 unbinds the window.
    pub fn bind_mw(self, flags: WqeFlags, b: &MwBind) -> Result<WqeBuilder<'q, B, T, Complete>> {
        let type2 = match b.kind {
            MkeyKind::Window1 => false,
            MkeyKind::Window2 => true,
            is @ MkeyKind::Indirect { .. } => {
                return Err(misuse(MkeyMisuse::WrongKind {
                    needs: "bind_mw needs a memory window",
                    key: b.rkey,
                    is,
                }));
            }
        };
        if b.len > 1 << 31 {
            return Err(Error::Unsupported(crate::error::Unsupported::WindowTooLong { len: b.len }));
        }
        if b.zero_based && !type2 {
            return Err(misuse(MkeyMisuse::ZeroBasedType1));
        }
        if type2 && b.len == 0 {
            return Err(misuse(MkeyMisuse::WrongKind {
                needs: "bind_mw of length 0 needs a type-1 window (a type-2 one is freed by local_inv)",
                key: b.rkey,
                is: b.kind,
            }));
        }
        let l = layout::bind_mw(
            type2,
            self.sq.desc.qpn,
            b.new_rkey,
            b.addr,
            b.len,
            b.access.bits(),
            b.zero_based,
        )
        .map_err(|e| Error::InvalidArgument(InvalidArgument::Wqe(e)))?;
        let mut w = self.ctrl(opcode::UMR, flags, b.rkey.to_be_bytes(), Complete)?;
        w.umr_segs(&l)?;
        if b.len > 0 {
            w.klm_list(&[Sge { addr: b.addr, len: b.len as u32, lkey: b.mr_lkey }]);
        }
        Ok(w)
    }

    /// LOCAL_INV of `rkey` (`IBV_WR_LOCAL_INV`): the type-2 window of that
    /// key, bound to this QP, is freed; its key grants nothing any more.
    pub fn local_inv(self, flags: WqeFlags, rkey: u32) -> Result<WqeBuilder<'q, B, T, Complete>> {
        let mut w = self.ctrl(opcode::UMR, flags, rkey.to_be_bytes(), Complete)?;
        w.umr_segs(&layout::local_inv())?;
        Ok(w)
    }

    /// Points indirect mkey `mkey` at `entries`, in order
    /// (`mlx5dv_wr_mr_list`): the key then addresses their bytes as one
    /// range from 0, with `access`, as an lkey and as an rkey, until its
    /// next `mr_list`. Entries of 0 bytes are written and take no room.
    pub fn mr_list(
        self,
        flags: WqeFlags,
        mkey: &IndirectMkey<B>,
        access: AccessFlags,
        entries: &[Sge],
    ) -> Result<WqeBuilder<'q, B, T, Complete>> {
        if entries.len() > mkey.max_entries() as usize {
            return Err(misuse(MkeyMisuse::TooManyEntries { count: entries.len(), max: mkey.max_entries() }));
        }
        let mut total = 0u64;
        for e in entries {
            if e.len > i32::MAX as u32 {
                return Err(misuse(MkeyMisuse::EntryTooLong { len: e.len }));
            }
            total += u64::from(e.len);
        }
        let key = mkey.key();
        let l = layout::mr_list(key, access.bits(), entries.len() as u32, total)
            .map_err(|e| Error::InvalidArgument(InvalidArgument::Wqe(e)))?;
        let mut w = self.ctrl(opcode::UMR, flags, key.to_be_bytes(), Complete)?;
        w.umr_segs(&l)?;
        w.klm_list(entries);
        Ok(w)
    }
}

impl<B: Backend, T, S> WqeBuilder<'_, B, T, S> {
    /// The UMR ctrl and mkey context segments (DS 1 to 7) of `l`, after
    /// checking that the whole WQE fits.
    fn umr_segs(&mut self, l: &UmrLayout) -> Result<()> {
        debug_assert_eq!(self.ds, 1);
        self.reserve(l.ds())?;
        let ctrl = self.ds_at(1) as *mut [u8; 48];
        let mkey = self.ds_at(4) as *mut [u8; 64];
        // SAFETY: DS 1 to 3 (the rest of the first WQEBB) and DS 4 to 7 (the
        // whole second WQEBB, which never wraps) of the WQE, in free slots
        // (`reserve`).
        unsafe {
            set_umr_control_seg(&mut *ctrl, l.flags, l.octowords, l.mask);
            set_umr_mkey_seg(&mut *mkey, l.free, l.access, l.qpn_mkey, l.start, l.len);
        }
        self.ds = 8;
        Ok(())
    }

    /// The KLM entries from DS 8 on, zero entries after them to a multiple
    /// of four (room checked by `umr_segs`).
    fn klm_list(&mut self, entries: &[Sge]) {
        for e in entries {
            set_umr_klm_seg(self.next_ds(), e.len, e.lkey, e.addr);
        }
        for _ in entries.len()..entries.len().div_ceil(4) * 4 {
            self.next_ds().fill(0);
        }
    }
}

/// One entry of an interleaved (repeated) layout
/// ([`WqeBuilder::mr_interleaved`]; `struct mlx5dv_mr_interleaved`): each
/// repetition takes `bytes_count` bytes at `addr`, then the next repetition
/// starts `bytes_count + bytes_skip` bytes further.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interleaved {
    /// The first repetition's address.
    pub addr: u64,
    /// Bytes per repetition.
    pub bytes_count: u32,
    /// Bytes skipped after each repetition.
    pub bytes_skip: u32,
    /// The region's lkey.
    pub lkey: u32,
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Init> {
    /// Points indirect mkey `mkey` at `repeat_count` repetitions of
    /// `entries` (`mlx5dv_wr_mr_interleaved`): byte `i` of the key is in
    /// repetition `i / block` (block: the entries' `bytes_count` together),
    /// entry by entry, each repetition `bytes_count + bytes_skip` further
    /// than the one before. Zero-based, `access`, as an lkey and an rkey. An
    /// entry's `bytes_count` and stride are 16-bit fields: larger ones are
    /// refused (`EntryTooLong`).
    pub fn mr_interleaved(
        self,
        flags: WqeFlags,
        mkey: &IndirectMkey<B>,
        access: AccessFlags,
        repeat_count: u32,
        entries: &[Interleaved],
    ) -> Result<WqeBuilder<'q, B, T, Complete>> {
        if entries.len() > mkey.max_entries() as usize || entries.is_empty() {
            return Err(misuse(MkeyMisuse::TooManyEntries { count: entries.len(), max: mkey.max_entries() }));
        }
        let mut block = 0u64;
        for e in entries {
            if e.bytes_count.saturating_add(e.bytes_skip) > u32::from(u16::MAX) {
                return Err(misuse(MkeyMisuse::EntryTooLong {
                    len: e.bytes_count.saturating_add(e.bytes_skip),
                }));
            }
            block += u64::from(e.bytes_count);
        }
        let key = mkey.key();
        let l = layout::mr_interleaved(key, access.bits(), entries.len() as u32, block, repeat_count)
            .map_err(|e| Error::InvalidArgument(InvalidArgument::Wqe(e)))?;
        let mut w = self.ctrl(opcode::UMR, flags, key.to_be_bytes(), Complete)?;
        w.umr_segs(&l)?;
        crate::ring::seg::set_umr_repeat_block_seg(
            w.next_ds(),
            block as u32,
            repeat_count,
            entries.len() as u16,
        );
        for e in entries {
            let stride = (e.bytes_count + e.bytes_skip) as u16;
            crate::ring::seg::set_umr_repeat_ent_seg(
                w.next_ds(),
                stride,
                e.bytes_count as u16,
                e.lkey,
                e.addr,
            );
        }
        for _ in entries.len() + 1..(entries.len() + 1).div_ceil(4) * 4 {
            w.next_ds().fill(0);
        }
        Ok(w)
    }
}
