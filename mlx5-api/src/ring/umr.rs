//! What a UMR WQE carries (docs/mlx5-wire-format.md §3.7), decided once for
//! the builder ([`crate::wqe`]'s `bind_mw`, `local_inv`, `mr_list`) and the
//! flat post ([`umr_wqe`](crate::ring::post::umr_wqe)): the UMR ctrl flags
//! and mask and the mkey context's fields, as rdma-core's `set_bind_wr` and
//! `mlx5_send_wr_mr_list` choose them. `no_std`, no allocation.

use crate::ring::error::PostError;
use crate::ring::seg::umr;

/// The fields of a UMR WQE after its ctrl segment; the KLM entries follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmrLayout {
    /// UMR ctrl `flags` (`umr::FLAG_*`).
    pub flags: u8,
    /// UMR ctrl `klm_octowords`: DS of KLM entries after the mkey context.
    pub octowords: u16,
    /// UMR ctrl `mkey_mask` (`umr::MASK_*`).
    pub mask: u64,
    /// Mkey context `free`.
    pub free: bool,
    /// Mkey context `access_flags` (`umr::ACCESS_*`).
    pub access: u8,
    /// Mkey context `qpn_mkey`.
    pub qpn_mkey: u32,
    /// Mkey context start address.
    pub start: u64,
    /// Mkey context length.
    pub len: u64,
}

impl UmrLayout {
    /// DS of the whole WQE: ctrl, UMR ctrl (3), mkey context (4), entries.
    pub const fn ds(&self) -> u32 {
        8 + self.octowords as u32
    }
}

/// The mkey context's access byte for `ibv_access_flags` bits (local write,
/// remote write, remote read, remote atomic; others ignored).
pub const fn mkey_access(ibv_access: u32) -> u8 {
    let mut b = 0;
    if ibv_access & 1 != 0 {
        b |= umr::ACCESS_LOCAL_WRITE;
    }
    if ibv_access & 2 != 0 {
        b |= umr::ACCESS_REMOTE_WRITE;
    }
    if ibv_access & 4 != 0 {
        b |= umr::ACCESS_REMOTE_READ;
    }
    if ibv_access & 8 != 0 {
        b |= umr::ACCESS_ATOMIC;
    }
    b
}

/// A memory window bind on QP `qpn` (rdma-core's `set_bind_wr`): type 2
/// binds the window to the QP and must find it free; `len` 0 is a type-1
/// window's unbind. `start` is 0 for a zero-based window (type 2 only).
/// Refused: a window of more than 2 GiB, a zero-based type-1 window, a
/// type-2 bind of length 0 (LOCAL_INV frees a type-2 window), rights other
/// than local write and the remote ones.
pub fn bind_mw(
    type2: bool,
    qpn: u32,
    new_rkey: u32,
    addr: u64,
    len: u64,
    ibv_access: u32,
    zero_based: bool,
) -> Result<UmrLayout, PostError> {
    if len > 1 << 31 {
        return Err(PostError::BadUmr { why: "a memory window covers at most 2 GiB" });
    }
    if zero_based && !type2 {
        return Err(PostError::BadUmr { why: "a type-1 memory window cannot be zero-based" });
    }
    if type2 && len == 0 {
        return Err(PostError::BadUmr {
            why: "a type-2 window is freed by LOCAL_INV, not by a bind of length 0",
        });
    }
    if ibv_access & !0xf != 0 {
        return Err(PostError::BadUmr { why: "a window grants local write and remote rights only" });
    }
    let mut flags = umr::FLAG_INLINE | umr::FLAG_TRANSLATION_OFFSET;
    let mut mask = umr::MASK_FREE | umr::MASK_MKEY;
    if type2 {
        mask |= umr::MASK_QPN;
    }
    let qp_part = if !type2 || len == 0 { 0xffff_ff00 } else { qpn << 8 };
    let mut l = UmrLayout {
        flags,
        octowords: 0,
        mask,
        free: len == 0,
        access: 0,
        qpn_mkey: qp_part | (new_rkey & 0xff),
        start: 0,
        len: 0,
    };
    if len > 0 {
        if type2 {
            flags |= umr::FLAG_CHECK_FREE;
        }
        mask |= umr::MASK_LEN | umr::MASK_START_ADDR | umr::MASK_ACCESS;
        l = UmrLayout {
            flags,
            mask,
            octowords: umr::klm_octowords(1),
            access: mkey_access(ibv_access),
            start: if zero_based { 0 } else { addr },
            len,
            ..l
        };
    } else if type2 {
        l.flags |= umr::FLAG_CHECK_QPN;
    }
    Ok(l)
}

/// LOCAL_INV (rdma-core's `set_bind_wr` with an empty bind): the window
/// bound to this QP becomes free.
pub const fn local_inv() -> UmrLayout {
    UmrLayout {
        flags: umr::FLAG_INLINE | umr::FLAG_TRANSLATION_OFFSET | umr::FLAG_CHECK_QPN,
        octowords: 0,
        mask: umr::MASK_FREE | umr::MASK_MKEY | umr::MASK_QPN,
        free: true,
        access: 0,
        qpn_mkey: 0xffff_ff00,
        start: 0,
        len: 0,
    }
}

/// An indirect mkey's list of `entries` ranges of `total` bytes
/// (`mlx5dv_wr_mr_list`): zero-based, `ibv_access` rights, the key's
/// variant kept.
pub fn mr_list(key: u32, ibv_access: u32, entries: u32, total: u64) -> Result<UmrLayout, PostError> {
    if ibv_access & !0xf != 0 {
        return Err(PostError::BadUmr { why: "an mkey list grants local write and remote rights only" });
    }
    Ok(UmrLayout {
        flags: umr::FLAG_INLINE,
        octowords: umr::klm_octowords(entries),
        mask: umr::MASK_FREE | umr::MASK_MKEY | umr::MASK_ACCESS | umr::MASK_LEN,
        free: false,
        access: mkey_access(ibv_access),
        qpn_mkey: 0xffff_ff00 | (key & 0xff),
        start: 0,
        len: total,
    })
}

/// An indirect mkey's repeated block of `entries` entries, `block` bytes
/// each repetition, `repeat_count` times (`mlx5dv_wr_mr_interleaved`): as
/// [`mr_list`], the block's DS (one) before the entries.
pub fn mr_interleaved(
    key: u32,
    ibv_access: u32,
    entries: u32,
    block: u64,
    repeat_count: u32,
) -> Result<UmrLayout, PostError> {
    let mut l = mr_list(key, ibv_access, entries + 1, block * u64::from(repeat_count))?;
    l.len = block * u64::from(repeat_count);
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The masks libmlx5 wrote (docs/mlx5-wire-format.md W10, W11, W13).
    #[test]
    fn layouts_carry_libmlx5s_flags_and_masks() {
        let b2 = bind_mw(true, 0x1001, 0x8000_0001, 0x1000, 0x200, 2 | 4, false).unwrap();
        assert_eq!(
            (b2.flags, b2.mask, b2.qpn_mkey, b2.access, b2.ds()),
            (0xb0, 0x203c_6041, 0x0010_0101, 0x30, 12)
        );
        let b1 = bind_mw(false, 0x1001, 0x8000_0101, 0x1000, 0x100, 4, false).unwrap();
        assert_eq!((b1.flags, b1.mask, b1.qpn_mkey, b1.access), (0x90, 0x203c_2041, 0xffff_ff01, 0x10));
        let li = local_inv();
        assert_eq!(
            (li.flags, li.mask, li.qpn_mkey, li.free, li.ds()),
            (0x98, 0x2000_6000, 0xffff_ff00, true, 8)
        );
        let unbind = bind_mw(false, 7, 0x8000_0102, 0, 0, 0, false).unwrap();
        assert_eq!((unbind.free, unbind.octowords, unbind.flags), (true, 0, 0x90));
        let ml = mr_list(0x8000_0203, 0xf, 5, 999).unwrap();
        assert_eq!((ml.flags, ml.octowords, ml.qpn_mkey, ml.len, ml.ds()), (0x80, 8, 0xffff_ff03, 999, 16));
        assert!(bind_mw(true, 1, 1, 0, 0, 0, false).is_err());
        assert!(bind_mw(false, 1, 1, 0, 64, 0, true).is_err());
        assert!(bind_mw(true, 1, 1, 0, (1 << 31) + 1, 0, false).is_err());
        assert!(bind_mw(true, 1, 1, 0, 64, 0x10, false).is_err());
    }
}
