//! Memory windows and indirect mkeys for C (docs/mlx5-wire-format.md §3.7):
//! allocated here, bound, invalidated and filled by UMR WQEs that
//! `mlx5r_umr_wqe` writes.

use mlx5_api::sim::Sim;
use mlx5_api::{IndirectMkey, MemoryWindow, MkeyKind};
use mlx5_hw::Hw;

use crate::codes::*;
use crate::objects::{check_null, err, free, put, Back, PdObj};

/// A memory window (`mlx5r_mw`).
#[derive(Debug)]
pub struct MwObj(Back<MemoryWindow<Sim>, MemoryWindow<Hw>>);
/// An indirect mkey (`mlx5r_mkey`).
#[derive(Debug)]
pub struct MkeyObj(Back<IndirectMkey<Sim>, IndirectMkey<Hw>>);

/// `mlx5r_mw_alloc` type: bound to no QP (`IBV_MW_TYPE_1`).
pub const MLX5R_MW_TYPE_1: u32 = 1;
/// `mlx5r_mw_alloc` type: bound to the QP that binds it (`IBV_MW_TYPE_2`).
pub const MLX5R_MW_TYPE_2: u32 = 2;

/// `mlx5r_mr_reg` access: windows may be bound to the region
/// (`IBV_ACCESS_MW_BIND`).
pub const MLX5R_ACCESS_MW_BIND: u32 = 0x10;

/// Allocate a memory window of `mw_type` (`MLX5R_MW_TYPE_1` or `_2`), not
/// bound.
///
/// # Safety
/// `pd` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mw_alloc(pd: *mut PdObj, mw_type: u32, out: *mut *mut MwObj) -> i32 {
    check_null!(pd, out);
    let kind = match mw_type {
        MLX5R_MW_TYPE_1 => MkeyKind::Window1,
        MLX5R_MW_TYPE_2 => MkeyKind::Window2,
        _ => return MLX5R_ERR_INVALID,
    };
    // SAFETY: caller contract.
    let r = match unsafe { &(*pd).0 } {
        Back::Sim(p) => p.alloc_mw(kind).map(Back::Sim),
        Back::Hw(p) => p.alloc_mw(kind).map(Back::Hw),
    };
    match r {
        // SAFETY: caller contract.
        Ok(m) => unsafe { put(out, MwObj(m)) },
        Err(e) => err(&e),
    }
}

/// The window's rkey now, and (into `next`, unless null) the key a bind
/// gives it next: `mlx5r_umr_wr.key` and `.new_key` of that bind. With a
/// non-null `next` the window takes that key now (post the bind before
/// peers use it), as `ibv_bind_mw` moves `mw->rkey`.
///
/// # Safety
/// `mw` is live; `next` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mw_rkey(mw: *mut MwObj, next: *mut u32) -> u32 {
    if mw.is_null() {
        return 0;
    }
    // SAFETY: caller contract.
    let m = unsafe { &(*mw).0 };
    if next.is_null() {
        return match m {
            Back::Sim(w) => w.rkey(),
            Back::Hw(w) => w.rkey(),
        };
    }
    let (now, n) = match m {
        Back::Sim(w) => w.next_rkey(),
        Back::Hw(w) => w.next_rkey(),
    };
    // SAFETY: caller contract.
    unsafe { *next = n };
    now
}

/// Free a memory window.
///
/// # Safety
/// `mw` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mw_free(mw: *mut MwObj) {
    // SAFETY: caller contract.
    unsafe { free(mw) }
}

/// Create an indirect mkey for up to `max_entries` KLM entries (rounded up
/// to a multiple of 4), free until an `MLX5R_UMR_MR_LIST`.
///
/// # Safety
/// `pd` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mkey_create(pd: *mut PdObj, max_entries: u32, out: *mut *mut MkeyObj) -> i32 {
    check_null!(pd, out);
    // SAFETY: caller contract.
    let r = match unsafe { &(*pd).0 } {
        Back::Sim(p) => p.create_indirect_mkey(max_entries).map(Back::Sim),
        Back::Hw(p) => p.create_indirect_mkey(max_entries).map(Back::Hw),
    };
    match r {
        // SAFETY: caller contract.
        Ok(m) => unsafe { put(out, MkeyObj(m)) },
        Err(e) => err(&e),
    }
}

/// The indirect mkey's key (its lkey and rkey), 0 for a null `mkey`.
///
/// # Safety
/// `mkey` is null or live.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mkey_key(mkey: *const MkeyObj) -> u32 {
    if mkey.is_null() {
        return 0;
    }
    // SAFETY: caller contract.
    match unsafe { &(*mkey).0 } {
        Back::Sim(m) => m.key(),
        Back::Hw(m) => m.key(),
    }
}

/// Free an indirect mkey.
///
/// # Safety
/// `mkey` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mkey_free(mkey: *mut MkeyObj) {
    // SAFETY: caller contract.
    unsafe { free(mkey) }
}
