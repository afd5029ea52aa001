//! Pure segment writers, named after rdma-core's helpers (spec §2–§4). Each
//! fills one segment given as a fixed-size byte array, big-endian as the
//! spec's tables say, and knows nothing about rings, counters or QPs.
//! Callers that write into ring memory pass a pointer to a free slot; the
//! unit tests below pass plain arrays and compare with the spec's goldens.
//!
//! [`set_data_ptr_seg`] is the one data-segment encoder: the send gather
//! list, RDMA READ / atomic scatter entries, receive WQEs and SRQ WQEs all
//! go through it.

/// mlx5 send opcodes (spec §2.3).
pub mod opcode {
    /// NOP: ctrl segment only.
    pub const NOP: u8 = 0x00;
    /// SEND with invalidate.
    pub const SEND_INVAL: u8 = 0x01;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND.
    pub const SEND: u8 = 0x0a;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x10;
    /// Atomic compare-and-swap (8 bytes).
    pub const ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch-and-add (8 bytes).
    pub const ATOMIC_FA: u8 = 0x12;
    /// Masked (extended) compare-and-swap (spec §3.5; `opmod` gives the size).
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    /// Masked (extended) fetch-and-add (spec §3.5; `opmod` gives the size).
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    /// User-mode memory registration (docs/mlx5-wire-format.md §3.7): memory
    /// window bind (`IBV_WR_BIND_MW`), `IBV_WR_LOCAL_INV`, and an indirect
    /// mkey's KLM list (`mlx5dv_wr_mr_list`) all post this opcode.
    pub const UMR: u8 = 0x25;
}

/// The UMR segments' flag and mask bits (`mlx5dv.h`:
/// `MLX5_WQE_UMR_CTRL_FLAG_*`, `MLX5_WQE_UMR_CTRL_MKEY_MASK_*`,
/// `MLX5_WQE_MKEY_CONTEXT_*`).
pub mod umr {
    /// UMR ctrl `flags`: the KLM list is inline in the WQE.
    pub const FLAG_INLINE: u8 = 1 << 7;
    /// UMR ctrl `flags`: the mkey must be free (a type-2 window's bind).
    pub const FLAG_CHECK_FREE: u8 = 1 << 5;
    /// UMR ctrl `flags`: `translation_offset` is valid.
    pub const FLAG_TRANSLATION_OFFSET: u8 = 1 << 4;
    /// UMR ctrl `flags`: the mkey must be bound to this QP (LOCAL_INV).
    pub const FLAG_CHECK_QPN: u8 = 1 << 3;

    /// `mkey_mask`: set the length.
    pub const MASK_LEN: u64 = 1 << 0;
    /// `mkey_mask`: set the start address.
    pub const MASK_START_ADDR: u64 = 1 << 6;
    /// `mkey_mask`: set the key's variant byte.
    pub const MASK_MKEY: u64 = 1 << 13;
    /// `mkey_mask`: set the QPN (a type-2 window's QP).
    pub const MASK_QPN: u64 = 1 << 14;
    /// `mkey_mask`: set the local-write right.
    pub const MASK_ACCESS_LOCAL_WRITE: u64 = 1 << 18;
    /// `mkey_mask`: set the remote-read right.
    pub const MASK_ACCESS_REMOTE_READ: u64 = 1 << 19;
    /// `mkey_mask`: set the remote-write right.
    pub const MASK_ACCESS_REMOTE_WRITE: u64 = 1 << 20;
    /// `mkey_mask`: set the atomic right.
    pub const MASK_ACCESS_ATOMIC: u64 = 1 << 21;
    /// `mkey_mask`: set the free bit.
    pub const MASK_FREE: u64 = 1 << 29;
    /// Every access right of the mask.
    pub const MASK_ACCESS: u64 =
        MASK_ACCESS_LOCAL_WRITE | MASK_ACCESS_REMOTE_READ | MASK_ACCESS_REMOTE_WRITE | MASK_ACCESS_ATOMIC;

    /// Mkey context `free`: the mkey is free (invalid).
    pub const MKEY_FREE: u8 = 1 << 6;
    /// Mkey context `access_flags`: atomic.
    pub const ACCESS_ATOMIC: u8 = 1 << 6;
    /// Mkey context `access_flags`: remote write.
    pub const ACCESS_REMOTE_WRITE: u8 = 1 << 5;
    /// Mkey context `access_flags`: remote read.
    pub const ACCESS_REMOTE_READ: u8 = 1 << 4;
    /// Mkey context `access_flags`: local write.
    pub const ACCESS_LOCAL_WRITE: u8 = 1 << 3;

    /// The `op` of a repeated block (`mlx5_wqe_umr_repeat_block_seg`).
    pub const REPEAT_BLOCK_OP: u32 = 0x400;

    /// `klm_octowords` for `n` KLM entries: the list padded to 4 entries
    /// (64 bytes), in 16-byte units (rdma-core's `get_klm_octo`).
    pub const fn klm_octowords(n: u32) -> u16 {
        (n.div_ceil(4) * 4) as u16
    }
}

/// `opmod` of a masked atomic on `bytes`-byte arguments (spec §3.5; UCX's
/// `UCT_IB_MLX5_OPMOD_EXT_ATOMIC(log2(bytes))`): `0x08 | (log2(bytes) - 2)`,
/// 0x08 for 4 bytes, 0x09 for 8.
pub const fn masked_atomic_opmod(bytes: u32) -> u8 {
    0x08 | (bytes.trailing_zeros() as u8).wrapping_sub(2)
}

/// `fm_ce_se` bits of the ctrl segment (spec §2.2).
pub mod fm_ce_se {
    /// CE = 2: always generate a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub const CQ_UPDATE: u8 = 0x08;
    /// SE: solicited event at the responder.
    pub const SOLICITED: u8 = 0x02;
    /// FM = 4, small-and-fence (`MLX5_WQE_CTRL_FENCE`, rdma-core's `IBV_SEND_FENCE`).
    pub const FENCE: u8 = 0x80;
    /// FM = 1, initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`):
    /// wait for prior UMRs; libmlx5 gives it to the WQE after a UMR.
    pub const SMALL_FENCE: u8 = 0x20;
}

/// Bytes of a DS unit (one 16-byte "octoword").
pub const DS_BYTES: u32 = 16;
/// Bytes of a WQEBB (send ring slot).
pub const WQEBB_BYTES: u32 = 64;
/// `ds` is 6 bits: at most 63 DS per WQE (spec §1.4).
pub const MAX_DS: u32 = 63;
/// `MLX5_INLINE_SEG`: bit 31 of an inline segment's byte count (spec §3.3).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_INVALID_LKEY`: terminates a short receive scatter list (spec §4.1).
pub const INVALID_LKEY: u32 = 0x100;
/// `MLX5_EXTENDED_UD_AV`: bit 31 of `dqp_dct` (48-byte address vector).
pub const EXTENDED_AV: u32 = 0x8000_0000;

/// One scatter/gather entry (`struct ibv_sge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

impl Sge {
    /// An entry of `len` bytes at `addr` in the memory region of `lkey`
    /// (prefer `MemoryRegion::sge`, which checks the bounds).
    #[inline(always)]
    pub const fn new(addr: u64, len: u32, lkey: u32) -> Sge {
        Sge { addr, len, lkey }
    }
}

/// Control segment (spec §2.1, `mlx5dv_set_ctrl_seg`): `pi` is masked to the
/// 16-bit `wqe_index`, `qpn` to 24 bits, `ds` to 6 bits; `imm` is stored
/// verbatim (wire byte order); signature and DCI stream id are 0.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn set_ctrl_seg(
    seg: &mut [u8; 16],
    pi: u32,
    opcode: u8,
    opmod: u8,
    qpn: u32,
    fm_ce_se: u8,
    ds: u32,
    imm: [u8; 4],
) {
    set_ctrl_seg_qpn_word(seg, pi, opcode, opmod, ctrl_qpn_word(qpn), fm_ce_se, ds, imm);
}

/// [`set_ctrl_seg`] with the QPN's part of the first 8 bytes encoded once
/// per QP ([`ctrl_qpn_word`]): the post path of a QP whose number does
/// not change.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn set_ctrl_seg_qpn_word(
    seg: &mut [u8; 16],
    pi: u32,
    opcode: u8,
    opmod: u8,
    qpn_word: u64,
    fm_ce_se: u8,
    ds: u32,
    imm: [u8; 4],
) {
    seg[0..8].copy_from_slice(&ctrl_head(qpn_word, pi, opcode, opmod, ds).to_ne_bytes());
    seg[8..12].copy_from_slice(&(fm_ce_se as u32).to_be_bytes());
    seg[12..16].copy_from_slice(&imm);
}

/// The QPN's part of a ctrl segment's first 8 bytes (`qpn_ds` with DS 0,
/// spec §2.1) as a word in memory order, for [`set_ctrl_seg_qpn_word`].
pub const fn ctrl_qpn_word(qpn: u32) -> u64 {
    let q = ((qpn & 0xff_ffff) << 8).to_be_bytes();
    u64::from_ne_bytes([0, 0, 0, 0, q[0], q[1], q[2], q[3]])
}

/// A ctrl segment's first 8 bytes (`opmod_idx_opcode`, `qpn_ds`: the
/// doorbell value) as a word in memory order: the QPN's part or-ed with the
/// rest, so that the post computes no QPN field.
#[inline(always)]
fn ctrl_head(qpn_word: u64, pi: u32, opcode: u8, opmod: u8, ds: u32) -> u64 {
    // The WQE index alone is swapped; opmod, opcode and DS go in as bytes,
    // so that a post with constant ones or-s in one constant.
    let w = ((pi & 0xffff) << 8).to_be_bytes();
    let index = u64::from_ne_bytes([w[0], w[1], w[2], w[3], 0, 0, 0, 0]);
    index | u64::from_ne_bytes([opmod, 0, 0, opcode, 0, 0, 0, (ds & 0x3f) as u8]) | qpn_word
}

/// Remote address segment (spec §3.1).
#[inline(always)]
pub fn set_raddr_seg(seg: &mut [u8; 16], raddr: u64, rkey: u32) {
    seg[0..8].copy_from_slice(&raddr.to_be_bytes());
    seg[8..12].copy_from_slice(&rkey.to_be_bytes());
    seg[12..16].copy_from_slice(&[0; 4]);
}

/// Data pointer segment (spec §3.2, `mlx5dv_set_data_seg`): gather and
/// scatter entries of every queue. `len` must be below 2^31 (bit 31 would
/// mark an inline segment); callers check it.
#[inline(always)]
pub fn set_data_ptr_seg(seg: &mut [u8; 16], len: u32, lkey: u32, addr: u64) {
    seg[0..4].copy_from_slice(&len.to_be_bytes());
    seg[4..8].copy_from_slice(&lkey.to_be_bytes());
    seg[8..16].copy_from_slice(&addr.to_be_bytes());
}

/// Atomic segment (spec §3.4, rdma-core `set_atomic_seg`): compare-and-swap
/// puts `swap` at +0 and `compare_add` (the compare value) at +8;
/// fetch-and-add puts `compare_add` (the addend) at +0 and 0 at +8.
#[inline(always)]
pub fn set_atomic_seg(seg: &mut [u8; 16], opcode: u8, swap: u64, compare_add: u64) {
    let (a, b) = if opcode == opcode::ATOMIC_CS { (swap, compare_add) } else { (compare_add, 0) };
    seg[0..8].copy_from_slice(&a.to_be_bytes());
    seg[8..16].copy_from_slice(&b.to_be_bytes());
}

/// Masked compare-and-swap on 4-byte arguments (spec §3.5; UCX's
/// `uct_ib_mlx5_atomic_masked_cswap32_seg`): one DS of swap, compare,
/// swap mask and compare mask, each big-endian.
#[inline(always)]
pub fn set_masked_cs32_seg(seg: &mut [u8; 16], swap: u32, compare: u32, swap_mask: u32, compare_mask: u32) {
    seg[0..4].copy_from_slice(&swap.to_be_bytes());
    seg[4..8].copy_from_slice(&compare.to_be_bytes());
    seg[8..12].copy_from_slice(&swap_mask.to_be_bytes());
    seg[12..16].copy_from_slice(&compare_mask.to_be_bytes());
}

/// Masked compare-and-swap on 8-byte arguments (spec §3.5): two DS, each a
/// UCX `uct_ib_mlx5_atomic_masked_cswap64_seg`, swap and compare in the
/// first, their masks in the second (which may lie past the ring's end),
/// big-endian. Together they are rdma-core's `mlx5_wqe_masked_atomic_seg`.
#[inline(always)]
pub fn set_masked_cs64_segs(
    first: &mut [u8; 16],
    second: &mut [u8; 16],
    swap: u64,
    compare: u64,
    swap_mask: u64,
    compare_mask: u64,
) {
    first[0..8].copy_from_slice(&swap.to_be_bytes());
    first[8..16].copy_from_slice(&compare.to_be_bytes());
    second[0..8].copy_from_slice(&swap_mask.to_be_bytes());
    second[8..16].copy_from_slice(&compare_mask.to_be_bytes());
}

/// Masked fetch-and-add on 4-byte arguments (spec §3.5; UCX's
/// `uct_ib_mlx5_atomic_masked_fadd32_seg`): one DS of the addend and the
/// field boundary, big-endian, and 8 reserved (zero) bytes.
#[inline(always)]
pub fn set_masked_fa32_seg(seg: &mut [u8; 16], add: u32, field_boundary: u32) {
    seg[0..4].copy_from_slice(&add.to_be_bytes());
    seg[4..8].copy_from_slice(&field_boundary.to_be_bytes());
    seg[8..16].fill(0);
}

/// Masked fetch-and-add on 8-byte arguments (spec §3.5; UCX's
/// `uct_ib_mlx5_atomic_masked_fadd64_seg`): one DS of the addend and the
/// field boundary, big-endian.
#[inline(always)]
pub fn set_masked_fa64_seg(seg: &mut [u8; 16], add: u64, field_boundary: u64) {
    seg[0..8].copy_from_slice(&add.to_be_bytes());
    seg[8..16].copy_from_slice(&field_boundary.to_be_bytes());
}

/// UMR control segment, 48 bytes (docs/mlx5-wire-format.md §3.7,
/// `mlx5_wqe_umr_ctrl_seg`; rdma-core's `set_umr_control_seg`): `flags` at
/// +0, `klm_octowords` at +4, translation offset 0 at +6, `mkey_mask` at +8,
/// the rest reserved (zero). Big-endian fields.
#[inline(always)]
pub fn set_umr_control_seg(seg: &mut [u8; 48], flags: u8, klm_octowords: u16, mkey_mask: u64) {
    seg.fill(0);
    seg[0] = flags;
    seg[4..6].copy_from_slice(&klm_octowords.to_be_bytes());
    seg[8..16].copy_from_slice(&mkey_mask.to_be_bytes());
}

/// Mkey context segment, 64 bytes (§3.7, `mlx5_wqe_mkey_context_seg`;
/// rdma-core's `set_umr_mkey_seg`): `free` at +0, `access_flags` at +2,
/// `qpn_mkey` (the QPN << 8, or 0xffffff00 for none, with the key's new
/// variant byte) at +4, start address at +16, length at +24, the rest zero.
#[inline(always)]
pub fn set_umr_mkey_seg(
    seg: &mut [u8; 64],
    free: bool,
    access_flags: u8,
    qpn_mkey: u32,
    start: u64,
    len: u64,
) {
    seg.fill(0);
    seg[0] = if free { umr::MKEY_FREE } else { 0 };
    seg[2] = access_flags;
    seg[4..8].copy_from_slice(&qpn_mkey.to_be_bytes());
    seg[16..24].copy_from_slice(&start.to_be_bytes());
    seg[24..32].copy_from_slice(&len.to_be_bytes());
}

/// One KLM entry, 16 bytes (§3.7, `mlx5_wqe_umr_klm_seg`; rdma-core's
/// `set_umr_data_seg`): `byte_count`, `mkey`, `address`, big-endian. The
/// list is padded with zeroed entries to a multiple of four.
#[inline(always)]
pub fn set_umr_klm_seg(seg: &mut [u8; 16], byte_count: u32, mkey: u32, address: u64) {
    seg[0..4].copy_from_slice(&byte_count.to_be_bytes());
    seg[4..8].copy_from_slice(&mkey.to_be_bytes());
    seg[8..16].copy_from_slice(&address.to_be_bytes());
}

/// The first DS of a repeated block (§3.7, `mlx5_wqe_umr_repeat_block_seg`;
/// rdma-core's `umr_strided_seg_create`): the block's bytes (its entries'
/// together), `op` 0x400, the repetitions, the entry count; big-endian.
#[inline(always)]
pub fn set_umr_repeat_block_seg(seg: &mut [u8; 16], byte_count: u32, repeat_count: u32, num_ent: u16) {
    seg[0..4].copy_from_slice(&byte_count.to_be_bytes());
    seg[4..8].copy_from_slice(&umr::REPEAT_BLOCK_OP.to_be_bytes());
    seg[8..12].copy_from_slice(&repeat_count.to_be_bytes());
    seg[12..14].fill(0);
    seg[14..16].copy_from_slice(&num_ent.to_be_bytes());
}

/// One entry of a repeated block, 16 bytes (`mlx5_wqe_umr_repeat_ent_seg`):
/// the stride (its bytes and the bytes skipped after them), its bytes, the
/// memory key and the address of its first repetition; big-endian.
#[inline(always)]
pub fn set_umr_repeat_ent_seg(seg: &mut [u8; 16], stride: u16, byte_count: u16, memkey: u32, va: u64) {
    seg[0..2].copy_from_slice(&stride.to_be_bytes());
    seg[2..4].copy_from_slice(&byte_count.to_be_bytes());
    seg[4..8].copy_from_slice(&memkey.to_be_bytes());
    seg[8..16].copy_from_slice(&va.to_be_bytes());
}

/// Inline segment header (spec §3.3): the byte count with bit 31 set. The
/// data follows it, split at the ring end byte by byte (`SqDesc::copy_in`).
#[inline(always)]
pub fn set_inline_hdr(hdr: &mut [u8; 4], len: u32) {
    *hdr = (len | INLINE_SEG).to_be_bytes();
}

/// Datagram segment / 48-byte address vector (spec §3.6,
/// `mlx5dv_set_dgram_seg`): `key` is the Q_Key in the high 32 bits for UD
/// or the DC access key for DCI; `dqp_dct` the destination QPN or DCT
/// number (the extended-AV bit is set); the path comes pre-encoded.
#[inline(always)]
pub fn set_datagram_seg(seg: &mut [u8; 48], key: u64, dqp_dct: u32, av: &crate::ring::av::AddressVector) {
    seg.copy_from_slice(av.as_bytes());
    seg[0..8].copy_from_slice(&key.to_be_bytes());
    seg[8..12].copy_from_slice(&(EXTENDED_AV | (dqp_dct & 0xff_ffff)).to_be_bytes());
}

/// SRQ next segment (spec §4.3): `next_wqe_index` at +2, the rest 0.
#[inline(always)]
pub fn set_srq_next_seg(seg: &mut [u8; 16], next_wqe_index: u16) {
    *seg = [0; 16];
    seg[2..4].copy_from_slice(&next_wqe_index.to_be_bytes());
}

/// A receive scatter list (spec §4.1, §4.3): one data segment per entry
/// of `sges` into the `max_gs` 16-byte slots at `dst`, and an invalid-lkey
/// terminator after the last one when a slot is left. `skip_empty` drops
/// zero-length entries (rdma-core's QP RQ path; its SRQ path keeps them).
/// Returns the number of entries written (without the terminator).
///
/// # Safety
/// `dst` must be writable for `max_gs * 16` bytes, 16-aligned, and the
/// caller must have checked that at most `max_gs` entries will be written.
#[inline(always)]
pub unsafe fn set_scatter_list(dst: *mut u8, max_gs: u32, sges: &[Sge], skip_empty: bool) -> u32 {
    let mut i = 0u32;
    for s in sges {
        if skip_empty && s.len == 0 {
            continue;
        }
        // SAFETY: i < max_gs (caller contract): inside the WQE.
        set_data_ptr_seg(unsafe { &mut *(dst.add(i as usize * 16) as *mut [u8; 16]) }, s.len, s.lkey, s.addr);
        i += 1;
    }
    if i < max_gs {
        // SAFETY: as above.
        set_data_ptr_seg(unsafe { &mut *(dst.add(i as usize * 16) as *mut [u8; 16]) }, 0, INVALID_LKEY, 0);
    }
    i
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ring::av::{AddressVector, RoceAv};

    /// Parse one golden row ("00 00 10 08  00 01 23 03 ...") of spec §9.
    pub(crate) fn ds(hex: &str) -> [u8; 16] {
        let v: Vec<u8> = hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        v.try_into().unwrap()
    }

    const LKEY: u32 = 0x1234;
    const RKEY: u32 = 0x5678;

    #[test]
    fn w1_ctrl_raddr_data() {
        let mut s = [0u8; 16];
        set_ctrl_seg(&mut s, 0x10, opcode::RDMA_WRITE, 0, 0x123, fm_ce_se::CQ_UPDATE, 3, [0; 4]);
        assert_eq!(s, ds("00 00 10 08  00 01 23 03  00 00 00 08  00 00 00 00"));
        set_raddr_seg(&mut s, 0x0000_5555_0000_1000, RKEY);
        assert_eq!(s, ds("00 00 55 55  00 00 10 00  00 00 56 78  00 00 00 00"));
        set_data_ptr_seg(&mut s, 0x1000, LKEY, 0x0000_7f12_3456_0000);
        assert_eq!(s, ds("00 00 10 00  00 00 12 34  00 00 7f 12  34 56 00 00"));
    }

    #[test]
    fn w2_ctrl_with_imm_and_inline_header() {
        let mut s = [0u8; 16];
        let f = fm_ce_se::CQ_UPDATE | fm_ce_se::SOLICITED;
        set_ctrl_seg(&mut s, 0x11, opcode::RDMA_WRITE_IMM, 0, 0x123, f, 4, 0x1234_5678u32.to_be_bytes());
        assert_eq!(s, ds("00 00 11 09  00 01 23 04  00 00 00 0a  12 34 56 78"));
        let mut h = [0u8; 4];
        set_inline_hdr(&mut h, 20);
        assert_eq!(h, [0x80, 0x00, 0x00, 0x14]);
    }

    #[test]
    fn w3_read_ctrl_and_scatter() {
        let mut s = [0u8; 16];
        set_ctrl_seg(&mut s, 0x12, opcode::RDMA_READ, 0, 0x123, 0x08, 3, [0; 4]);
        assert_eq!(s, ds("00 00 12 10  00 01 23 03  00 00 00 08  00 00 00 00"));
        set_data_ptr_seg(&mut s, 0x200, LKEY, 0x0000_7f12_3456_1000);
        assert_eq!(s, ds("00 00 02 00  00 00 12 34  00 00 7f 12  34 56 10 00"));
    }

    /// Masked atomics (spec §3.5), field for field as UCX's `rc_mlx5.inl` fills
    /// `uct_ib_mlx5_atomic_masked_{cswap,fadd}{32,64}_seg` (values big-endian, as
    /// UCX's `UCT_RC_MLX5_TO_BE` makes them), with the ctrl segment's opmod of
    /// `UCT_IB_MLX5_OPMOD_EXT_ATOMIC`.
    #[test]
    fn masked_atomic_segments_are_ucxs() {
        assert_eq!((masked_atomic_opmod(4), masked_atomic_opmod(8)), (0x08, 0x09));
        let mut c = [0u8; 16];
        set_ctrl_seg(&mut c, 0x13, opcode::ATOMIC_MASKED_CS, masked_atomic_opmod(8), 0x123, 0, 5, [0; 4]);
        assert_eq!(c, ds("09 00 13 14  00 01 23 05  00 00 00 00  00 00 00 00"), "opmod in the top byte");
        let mut s = [0xffu8; 16];
        set_masked_cs32_seg(&mut s, 0x1122_3344, 0x5566_7788, 0x99aa_bbcc, 0xddee_ff00);
        assert_eq!(s, ds("11 22 33 44  55 66 77 88  99 aa bb cc  dd ee ff 00"), "swap, compare, masks");
        let (mut a, mut b) = ([0xffu8; 16], [0xffu8; 16]);
        set_masked_cs64_segs(&mut a, &mut b, 1, 2, 0x0300_0000_0000_0004, 5);
        assert_eq!(a, ds("00 00 00 00  00 00 00 01  00 00 00 00  00 00 00 02"), "swap, compare");
        assert_eq!(b, ds("03 00 00 00  00 00 00 04  00 00 00 00  00 00 00 05"), "swap_mask, compare_mask");
        set_masked_fa32_seg(&mut s, 0x0102_0304, 0x8000_8000);
        assert_eq!(s, ds("01 02 03 04  80 00 80 00  00 00 00 00  00 00 00 00"), "add, boundary, reserved 0");
        set_masked_fa64_seg(&mut s, 7, 0x8000_0000_8000_0000);
        assert_eq!(s, ds("00 00 00 00  00 00 00 07  80 00 00 00  80 00 00 00"), "add, boundary");
    }

    #[test]
    fn w4_w5_atomic_segments() {
        let mut s = [0u8; 16];
        set_ctrl_seg(
            &mut s,
            0x13,
            opcode::ATOMIC_FA,
            0,
            0x123,
            fm_ce_se::FENCE | fm_ce_se::CQ_UPDATE,
            4,
            [0; 4],
        );
        assert_eq!(s, ds("00 00 13 12  00 01 23 04  00 00 00 88  00 00 00 00"));
        set_atomic_seg(&mut s, opcode::ATOMIC_FA, 0xdead, 1);
        assert_eq!(
            s,
            ds("00 00 00 00  00 00 00 01  00 00 00 00  00 00 00 00"),
            "FA: add at +0, swap ignored"
        );
        set_atomic_seg(&mut s, opcode::ATOMIC_CS, 0xcafe_f00d, 0);
        assert_eq!(
            s,
            ds("00 00 00 00  ca fe f0 0d  00 00 00 00  00 00 00 00"),
            "CS: swap at +0, compare at +8"
        );
    }

    #[test]
    fn w6_w7_ctrl_index_is_the_counter() {
        let mut s = [0u8; 16];
        set_ctrl_seg(&mut s, 0x16, opcode::SEND, 0, 0x123, 0, 4, [0; 4]);
        assert_eq!(s, ds("00 00 16 0a  00 01 23 04  00 00 00 00  00 00 00 00"));
        set_ctrl_seg(&mut s, 0x17, opcode::SEND, 0, 0x123, 0x08, 5, [0; 4]);
        assert_eq!(s, ds("00 00 17 0a  00 01 23 05  00 00 00 08  00 00 00 00"));
        // PITFALLS: the counter is masked to 16 bits before the shift, so
        // opmod stays intact after 65,536 WQEs.
        set_ctrl_seg(&mut s, 0x1_0017, opcode::SEND, 0, 0x123, 0x08, 5, [0; 4]);
        assert_eq!(s[..4], [0x00, 0x00, 0x17, 0x0a]);
    }

    #[test]
    fn w8_ud_datagram_roce_v2() {
        let mut dgid = [0u8; 16];
        dgid[10..16].copy_from_slice(&[0xff, 0xff, 192, 168, 1, 2]);
        let av = AddressVector::roce_v2(&RoceAv {
            sgid_index: 3,
            priority: 3,
            udp_sport: 0xd001,
            ..RoceAv::new(super::super::Gid(dgid), [2, 0, 0, 0, 0, 2])
        });
        let mut s = [0u8; 48];
        set_datagram_seg(&mut s, 0x1111_1111u64 << 32, 0xabc, &av);
        assert_eq!(s[0..16], ds("11 11 11 11  00 00 00 00  80 00 0a bc  06 00 d0 01"));
        assert_eq!(s[16..32], ds("00 00 00 00  02 00 00 00  00 02 00 40  00 30 00 00"));
        assert_eq!(s[32..48], ds("00 00 00 00  00 00 00 00  00 00 ff ff  c0 a8 01 02"));
    }

    #[test]
    fn w9_dci_datagram_ib() {
        let mut s = [0u8; 48];
        set_datagram_seg(&mut s, 0x1122_3344_5566_7788, 0xabcd, &AddressVector::ib(0x11, 1));
        assert_eq!(s[0..16], ds("11 22 33 44  55 66 77 88  80 00 ab cd  01 00 00 11"));
        assert_eq!(s[16..48], [0u8; 32]);
        let mut c = [0u8; 16];
        set_ctrl_seg(&mut c, 0x100, opcode::RDMA_WRITE, 0, 0x789, 0x08, 6, [0; 4]);
        assert_eq!(c, ds("00 01 00 08  00 07 89 06  00 00 00 08  00 00 00 00"));
    }

    #[test]
    fn receive_lists_share_the_data_segment_encoder() {
        let mut wqe = [0xeeu8; 64];
        let sges = [Sge { addr: 0x1000, len: 64, lkey: 7 }, Sge { addr: 0x2000, len: 0, lkey: 8 }];
        // SAFETY: 64 bytes = 4 slots.
        let n = unsafe { set_scatter_list(wqe.as_mut_ptr(), 4, &sges, true) };
        assert_eq!(n, 1, "the empty entry is skipped on a QP RQ");
        assert_eq!(wqe[0..16], ds("00 00 00 40  00 00 00 07  00 00 00 00  00 00 10 00"));
        assert_eq!(wqe[16..32], ds("00 00 00 00  00 00 01 00  00 00 00 00  00 00 00 00"), "terminator");
        assert!(wqe[32..].iter().all(|&b| b == 0xee), "nothing after the terminator");
        // SAFETY: two slots, both used: no terminator.
        let n = unsafe { set_scatter_list(wqe.as_mut_ptr(), 2, &sges, false) };
        assert_eq!(n, 2, "the SRQ path keeps empty entries");
        assert_eq!(wqe[16..32], ds("00 00 00 00  00 00 00 08  00 00 00 00  00 00 20 00"));
        let mut next = [0xffu8; 16];
        set_srq_next_seg(&mut next, 5);
        assert_eq!(next, ds("00 00 00 05  00 00 00 00  00 00 00 00  00 00 00 00"));
    }

    /// The UMR segments of W10 and W11 (docs/mlx5-wire-format.md §9): bytes
    /// libmlx5 wrote into the ring for `ibv_wr_bind_mw` (type 2, QP 0x1001,
    /// REMOTE_WRITE | REMOTE_READ, 512 bytes at 0x56238eb4a100 of lkey
    /// 0x10001, new rkey 0x80000001) and `ibv_wr_local_inv`.
    #[test]
    fn umr_segments_match_what_libmlx5_wrote() {
        let mut c = [0xffu8; 48];
        let mask = umr::MASK_FREE
            | umr::MASK_MKEY
            | umr::MASK_QPN
            | umr::MASK_LEN
            | umr::MASK_START_ADDR
            | umr::MASK_ACCESS;
        let flags = umr::FLAG_INLINE | umr::FLAG_TRANSLATION_OFFSET | umr::FLAG_CHECK_FREE;
        set_umr_control_seg(&mut c, flags, umr::klm_octowords(1), mask);
        assert_eq!(c[..16], ds("b0 00 00 00  00 04 00 00  00 00 00 00  20 3c 60 41"));
        assert!(c[16..].iter().all(|&b| b == 0));
        let mut m = [0xffu8; 64];
        let access = umr::ACCESS_REMOTE_WRITE | umr::ACCESS_REMOTE_READ;
        set_umr_mkey_seg(&mut m, false, access, 0x1001 << 8 | 0x01, 0x5623_8eb4_a100, 0x200);
        assert_eq!(m[..16], ds("00 00 30 00  00 10 01 01  00 00 00 00  00 00 00 00"));
        assert_eq!(m[16..32], ds("00 00 56 23  8e b4 a1 00  00 00 00 00  00 00 02 00"));
        assert!(m[32..].iter().all(|&b| b == 0));
        let mut k = [0u8; 16];
        set_umr_klm_seg(&mut k, 0x200, 0x10001, 0x5623_8eb4_a100);
        assert_eq!(k, ds("00 00 02 00  00 01 00 01  00 00 56 23  8e b4 a1 00"));
        // LOCAL_INV: CHECK_QPN, mask FREE | MKEY | QPN, a free context for any QP.
        let flags = umr::FLAG_INLINE | umr::FLAG_TRANSLATION_OFFSET | umr::FLAG_CHECK_QPN;
        set_umr_control_seg(&mut c, flags, 0, umr::MASK_FREE | umr::MASK_MKEY | umr::MASK_QPN);
        assert_eq!(c[..16], ds("98 00 00 00  00 00 00 00  00 00 00 00  20 00 60 00"));
        set_umr_mkey_seg(&mut m, true, 0, 0xffff_ff00, 0, 0);
        assert_eq!(m[..16], ds("40 00 00 00  ff ff ff 00  00 00 00 00  00 00 00 00"));
        assert_eq!((umr::klm_octowords(0), umr::klm_octowords(4), umr::klm_octowords(5)), (0, 4, 8));
    }
}
