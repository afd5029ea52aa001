//! [`send_wqe`]: one flat call that builds any send WQE of spec §3.8 into
//! a [`SqDesc`], the operation RDMaxcel calls `send_wqe`, done right: the
//! DS count is the real one, several SGEs and inline data, the immediate,
//! fence / signaled / solicited as asked (solicited only when asked), the
//! atomic operands, an address vector for UD and DCI, the user's wr-id,
//! the 16-bit masked WQE index, the ring's wrap. Every check runs before
//! the first byte is written; the doorbell is separate
//! ([`SqDesc::ring_db`] / [`SqDesc::ring_bf`]) so that one doorbell covers
//! a batch.

use crate::ring::av::AddressVector;
use crate::ring::error::PostError;
use crate::ring::seg::{
    self, fm_ce_se, opcode, set_atomic_seg, set_ctrl_seg, set_data_ptr_seg, set_datagram_seg, set_raddr_seg,
    Sge,
};
use crate::ring::sq::{over_budget, SqDesc, SqKind};

/// `ibv_send_flags` values, as `SendWr::send_flags` takes them.
pub mod send_flags {
    /// Fence: wait for prior READ/atomic WQEs (FM = 4).
    pub const FENCE: u32 = 1 << 0;
    /// Generate a CQE on success.
    pub const SIGNALED: u32 = 1 << 1;
    /// Solicited event at the responder.
    pub const SOLICITED: u32 = 1 << 2;
    /// Copy the gather list's bytes into the WQE (one inline segment).
    pub const INLINE: u32 = 1 << 3;
    /// Initiator small fence: wait for prior UMRs (FM = 1).
    pub const SMALL_FENCE: u32 = 1 << 4;
}

/// One send work request (the fields of `struct ibv_send_wr` the mlx5
/// encoders use, flattened).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct SendWr {
    /// Returned with the completion (stored when the queue tracks wr-ids).
    pub wr_id: u64,
    /// Gather list (or, with `INLINE`, the bytes to copy); may be null
    /// when `num_sge` is 0. For atomics: the one result buffer (8 bytes, or
    /// a masked atomic's `atomic_bytes`).
    pub sg_list: *const Sge,
    /// Entries in `sg_list`.
    pub num_sge: u32,
    /// mlx5 opcode ([`seg::opcode`]).
    pub opcode: u32,
    /// [`send_flags`] bits.
    pub send_flags: u32,
    /// Immediate data (host value) for `*_IMM`, the rkey to invalidate for
    /// SEND_INVAL.
    pub imm: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// UD: the destination QPN; DCI: the DCT number.
    pub remote_qpn: u32,
    /// Fetch-and-add (masked too): the addend; compare-and-swap (masked
    /// too): the compare value.
    pub compare_add: u64,
    /// Compare-and-swap (masked too): the new value.
    pub swap: u64,
    /// UD and DCI: the address vector (null otherwise).
    pub av: *const AddressVector,
    /// UD: the Q_Key; DCI: ignored.
    pub remote_qkey: u32,
    /// Masked atomics: the argument width, 4 or 8 bytes; 0 for every other
    /// opcode.
    pub atomic_bytes: u32,
    /// DCI: the DC access key of the target DCT.
    pub dc_key: u64,
    /// Masked compare-and-swap: the bits the swap writes.
    pub swap_mask: u64,
    /// Masked compare-and-swap: the bits the comparison reads (0: always swap).
    pub compare_mask: u64,
    /// Masked fetch-and-add: a set bit ends a field there (its carry is
    /// dropped).
    pub field_boundary: u64,
}

impl Default for SendWr {
    fn default() -> Self {
        SendWr {
            wr_id: 0,
            sg_list: core::ptr::null(),
            num_sge: 0,
            opcode: opcode::NOP as u32,
            send_flags: 0,
            imm: 0,
            remote_addr: 0,
            rkey: 0,
            remote_qpn: 0,
            compare_add: 0,
            swap: 0,
            av: core::ptr::null(),
            remote_qkey: 0,
            atomic_bytes: 0,
            dc_key: 0,
            swap_mask: 0,
            compare_mask: 0,
            field_boundary: 0,
        }
    }
}

/// What the opcode needs after the ctrl (and address vector).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Nop,
    Send,
    Write,
    Read,
    Atomic,
    Masked,
}

fn shape(op: u8, kind: SqKind) -> Result<Shape, PostError> {
    let s = match op {
        opcode::NOP => Shape::Nop,
        opcode::SEND | opcode::SEND_IMM => Shape::Send,
        opcode::SEND_INVAL if kind == SqKind::Rc => Shape::Send,
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM if kind != SqKind::Ud => Shape::Write,
        opcode::RDMA_READ if kind != SqKind::Ud => Shape::Read,
        opcode::ATOMIC_CS | opcode::ATOMIC_FA if kind != SqKind::Ud => Shape::Atomic,
        opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA if kind != SqKind::Ud => Shape::Masked,
        _ => return Err(PostError::BadOpcode { opcode: op }),
    };
    Ok(s)
}

/// Build the WQE `wr` describes at the producer counter of `sq` and commit
/// it (not rung). Errors leave the ring and the counters untouched.
///
/// # Safety
/// `sq` describes live memory; one thread posts at a time; `wr.sg_list`
/// points at `wr.num_sge` readable entries whose addresses are readable
/// for their lengths when `INLINE` is set; `wr.av` is null or readable.
pub unsafe fn send_wqe(sq: &SqDesc, wr: &SendWr) -> Result<(), PostError> {
    let kind = sq.kind();
    let op = u8::try_from(wr.opcode).map_err(|_| PostError::BadOpcode { opcode: 0xff })?;
    let shape = shape(op, kind)?;
    let sges: &[Sge] = if wr.num_sge == 0 || wr.sg_list.is_null() {
        &[]
    } else {
        // SAFETY: caller contract.
        unsafe { core::slice::from_raw_parts(wr.sg_list, wr.num_sge as usize) }
    };
    let inline = wr.send_flags & send_flags::INLINE != 0;
    let needs_av = kind != SqKind::Rc && shape != Shape::Nop;
    if needs_av && wr.av.is_null() {
        return Err(PostError::MissingAv);
    }
    // Gather list: lengths, count (zero-length entries are skipped, as
    // rdma-core does), message size.
    let mut len = 0u64;
    let mut nsge = 0u32;
    for s in sges {
        if s.len > i32::MAX as u32 {
            return Err(PostError::SgeTooLong { len: s.len as u64 });
        }
        len += s.len as u64;
        nsge += (s.len != 0) as u32;
    }
    let mut ds = 1 + if needs_av { 3 } else { 0 };
    match shape {
        Shape::Nop if nsge != 0 => return Err(PostError::TooManySge { count: nsge, max: 0 }),
        Shape::Nop => {}
        Shape::Atomic => {
            if inline {
                return Err(PostError::InlineNotAllowed);
            }
            if nsge != 1 || len != 8 || !wr.remote_addr.is_multiple_of(8) {
                return Err(PostError::BadAtomic);
            }
            ds += 3;
        }
        Shape::Masked => {
            let w = wr.atomic_bytes;
            if inline {
                return Err(PostError::InlineNotAllowed);
            }
            if !matches!(w, 4 | 8) || nsge != 1 || len != w as u64 || !wr.remote_addr.is_multiple_of(w as u64)
            {
                return Err(PostError::BadAtomic);
            }
            // raddr, the operands (two DS for an 8-byte compare-and-swap), the result.
            ds += if op == opcode::ATOMIC_MASKED_CS && w == 8 { 4 } else { 3 };
        }
        Shape::Read if inline => return Err(PostError::InlineNotAllowed),
        Shape::Send | Shape::Write | Shape::Read => {
            ds += (shape != Shape::Send) as u32;
            if len > sq.max_msg as u64 {
                return Err(PostError::MessageTooLong { len, max: sq.max_msg });
            }
            if inline {
                if len > sq.max_inline as u64 {
                    return Err(PostError::InlineTooLarge { len: len as usize, max: sq.max_inline as usize });
                }
                ds += if len == 0 { 0 } else { (4 + len as u32).div_ceil(16) };
            } else {
                if nsge > sq.max_sge {
                    return Err(PostError::TooManySge { count: nsge, max: sq.max_sge });
                }
                ds += nsge;
            }
        }
    }
    let free = sq.free();
    if ds > sq.max_ds.min(free * 4) {
        return Err(over_budget(ds, sq.max_ds, free));
    }

    // Everything checked: write the segments after the ctrl, then the ctrl.
    let start = sq.producer();
    let mut i = 1;
    // SAFETY (every ring write below): the DS lie in free slots of the
    // live ring (checked against `free`); a DS never straddles the ring end.
    if needs_av {
        // SAFETY: the AV is readable (caller contract); DS 1..4 never wrap
        // (the ctrl opens a WQEBB).
        unsafe {
            let key = if kind == SqKind::Ud { (wr.remote_qkey as u64) << 32 } else { wr.dc_key };
            set_datagram_seg(&mut *(sq.ds_ptr(start, 1) as *mut [u8; 48]), key, wr.remote_qpn, &*wr.av);
        }
        i += 3;
    }
    if matches!(shape, Shape::Write | Shape::Read | Shape::Atomic | Shape::Masked) {
        // SAFETY: DS `i` lies inside the checked DS budget of a free slot;
        // a 16-byte segment never straddles the ring end (spec §1.3).
        set_raddr_seg(unsafe { &mut *sq.ds_ptr(start, i) }, wr.remote_addr, wr.rkey);
        i += 1;
    }
    if shape == Shape::Atomic {
        // SAFETY: as for the remote address segment.
        set_atomic_seg(unsafe { &mut *sq.ds_ptr(start, i) }, op, wr.swap, wr.compare_add);
        i += 1;
    }
    let mut opmod = 0;
    if shape == Shape::Masked {
        let w = wr.atomic_bytes;
        opmod = seg::masked_atomic_opmod(w);
        // SAFETY: as for the remote address segment (each DS of the checked
        // budget on its own: the second of an 8-byte compare-and-swap may
        // lie at the ring's start).
        let d = |k: u32| unsafe { &mut *sq.ds_ptr(start, k) };
        let (c, s) = (wr.compare_add, wr.swap);
        match (op, w) {
            (opcode::ATOMIC_MASKED_CS, 4) => seg::set_masked_cs32_seg(
                d(i),
                s as u32,
                c as u32,
                wr.swap_mask as u32,
                wr.compare_mask as u32,
            ),
            (opcode::ATOMIC_MASKED_CS, _) => {
                let first = d(i);
                seg::set_masked_cs64_segs(first, d(i + 1), s, c, wr.swap_mask, wr.compare_mask);
                i += 1;
            }
            (_, 4) => seg::set_masked_fa32_seg(d(i), c as u32, wr.field_boundary as u32),
            _ => seg::set_masked_fa64_seg(d(i), c, wr.field_boundary),
        }
        i += 1;
    }
    if inline && len > 0 {
        let mut hdr = [0u8; 4];
        seg::set_inline_hdr(&mut hdr, len as u32);
        let mut off = i * 16;
        // SAFETY: inside the checked DS budget; the source bytes are
        // readable (caller contract).
        unsafe {
            sq.copy_in(start, off, &hdr);
            off += 4;
            for s in sges {
                sq.copy_in(start, off, core::slice::from_raw_parts(s.addr as *const u8, s.len as usize));
                off += s.len;
            }
            let pad = (ds * 16 - off) as usize;
            sq.copy_in(start, off, &[0u8; 16][..pad]);
        }
    } else {
        for s in sges.iter().filter(|s| s.len != 0) {
            // SAFETY: as for the remote address segment: one DS per non-empty
            // entry, all counted in the checked budget.
            set_data_ptr_seg(unsafe { &mut *sq.ds_ptr(start, i) }, s.len, s.lkey, s.addr);
            i += 1;
        }
    }
    let mut flags = 0u8;
    if wr.send_flags & send_flags::SIGNALED != 0 {
        flags |= fm_ce_se::CQ_UPDATE;
    }
    if wr.send_flags & send_flags::SOLICITED != 0 {
        flags |= fm_ce_se::SOLICITED;
    }
    if wr.send_flags & send_flags::FENCE != 0 {
        flags |= fm_ce_se::FENCE;
    }
    if wr.send_flags & send_flags::SMALL_FENCE != 0 {
        flags |= fm_ce_se::SMALL_FENCE;
    }
    let imm = match op {
        opcode::SEND_IMM | opcode::RDMA_WRITE_IMM | opcode::SEND_INVAL => wr.imm.to_be_bytes(),
        _ => [0; 4],
    };
    // SAFETY: DS 0 of the free slot at the producer counter, which opens a
    // WQEBB and so never straddles the ring end.
    set_ctrl_seg(unsafe { &mut *sq.ds_ptr(start, 0) }, start, op, opmod, sq.qpn, flags, ds, imm);
    if !sq.wrid.is_null() {
        // SAFETY: `wrid` has wqe_cnt entries (field contract).
        unsafe { *sq.wrid.add(sq.slot(start) as usize) = wr.wr_id };
    }
    sq.commit(start, ds);
    Ok(())
}

/// [`UmrWr::op`] values.
pub mod umr_op {
    /// Bind a type-1 memory window (`ibv_bind_mw`); no entry unbinds it.
    pub const BIND_MW1: u32 = 1;
    /// Bind a type-2 memory window to this QP (`ibv_wr_bind_mw`).
    pub const BIND_MW2: u32 = 2;
    /// Invalidate a type-2 window bound to this QP (`ibv_wr_local_inv`).
    pub const LOCAL_INV: u32 = 3;
    /// Point an indirect mkey at a list of ranges (`mlx5dv_wr_mr_list`).
    pub const MR_LIST: u32 = 4;
    /// Point an indirect mkey at `repeat_count` repetitions of its entries,
    /// each entry `skips[i]` bytes apart after its bytes
    /// (`mlx5dv_wr_mr_interleaved`).
    pub const MR_INTERLEAVED: u32 = 5;
}

/// One UMR work request (docs/mlx5-wire-format.md §3.7): a memory window
/// bind, a LOCAL_INV or an indirect mkey's list, for [`umr_wqe`].
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct UmrWr {
    /// Returned with the completion.
    pub wr_id: u64,
    /// [`umr_op`].
    pub op: u32,
    /// [`send_flags`] bits (not INLINE: the list is always inline).
    pub send_flags: u32,
    /// The key modified: the window's current rkey (a bind), the rkey
    /// invalidated (LOCAL_INV), the indirect mkey (a list).
    pub key: u32,
    /// A bind: the window's key after it (same index, next variant).
    pub new_key: u32,
    /// A bind or a list: `ibv_access_flags` rights (local write, remote
    /// write, read, atomic).
    pub access: u32,
    /// A type-2 bind: peers address the window from 0.
    pub zero_based: u32,
    /// A bind: one entry, the region's lkey, address and length (none: a
    /// type-1 unbind); a list: its entries.
    pub sg_list: *const Sge,
    /// Entries in `sg_list`.
    pub num_sge: u32,
    /// An interleaved layout: its repetitions.
    pub repeat_count: u32,
    /// An interleaved layout: the bytes each entry skips after its bytes
    /// (`num_sge` of them); null otherwise.
    pub skips: *const u32,
}

/// Build the UMR WQE `wr` describes at the producer counter of RC send
/// queue `sq` and commit it (not rung): ctrl (opcode 0x25), UMR ctrl, mkey
/// context and the KLM entries, as [`crate::ring::umr`] lays them out.
/// Errors leave the ring and the counters untouched.
///
/// # Safety
/// `sq` describes live memory; one thread posts at a time; `wr.sg_list`
/// points at `wr.num_sge` readable entries.
pub unsafe fn umr_wqe(sq: &SqDesc, wr: &UmrWr) -> Result<(), PostError> {
    if sq.kind() != SqKind::Rc {
        return Err(PostError::BadOpcode { opcode: opcode::UMR });
    }
    let sges: &[Sge] = if wr.num_sge == 0 || wr.sg_list.is_null() {
        &[]
    } else {
        // SAFETY: caller contract.
        unsafe { core::slice::from_raw_parts(wr.sg_list, wr.num_sge as usize) }
    };
    let mut total = 0u64;
    for s in sges {
        if s.len > i32::MAX as u32 {
            return Err(PostError::SgeTooLong { len: s.len as u64 });
        }
        total += s.len as u64;
    }
    let l = match wr.op {
        umr_op::BIND_MW1 | umr_op::BIND_MW2 => {
            if sges.len() > 1 || (wr.op == umr_op::BIND_MW2 && sges.is_empty()) {
                return Err(PostError::BadUmr {
                    why: "a window bind takes one entry (none: a type-1 unbind)",
                });
            }
            let (addr, len) = sges.first().map_or((0, 0), |s| (s.addr, s.len as u64));
            crate::ring::umr::bind_mw(
                wr.op == umr_op::BIND_MW2,
                sq.qpn,
                wr.new_key,
                addr,
                len,
                wr.access,
                wr.zero_based != 0,
            )?
        }
        umr_op::LOCAL_INV if sges.is_empty() => crate::ring::umr::local_inv(),
        umr_op::LOCAL_INV => return Err(PostError::BadUmr { why: "LOCAL_INV takes no entry" }),
        umr_op::MR_LIST => crate::ring::umr::mr_list(wr.key, wr.access, sges.len() as u32, total)?,
        umr_op::MR_INTERLEAVED => {
            if sges.is_empty() || wr.skips.is_null() {
                return Err(PostError::BadUmr { why: "an interleaved layout takes entries and their skips" });
            }
            // SAFETY: caller contract: `num_sge` skips.
            let skips = unsafe { core::slice::from_raw_parts(wr.skips, sges.len()) };
            if sges.iter().zip(skips).any(|(s, k)| s.len.saturating_add(*k) > u16::MAX as u32) {
                return Err(PostError::BadUmr {
                    why: "an interleaved entry's bytes and skip exceed 16 bits",
                });
            }
            crate::ring::umr::mr_interleaved(wr.key, wr.access, sges.len() as u32, total, wr.repeat_count)?
        }
        _ => return Err(PostError::BadUmr { why: "unknown UMR operation" }),
    };
    let ds = l.ds();
    let free = sq.free();
    if ds > sq.max_ds.min(free * 4) {
        return Err(over_budget(ds, sq.max_ds, free));
    }
    let start = sq.producer();
    // SAFETY: the DS lie in free slots of the live ring (checked against
    // `free`); the UMR ctrl (DS 1-3) and the mkey context (DS 4-7) each
    // fill the rest of a WQEBB, which never straddles the ring end; each
    // KLM entry is one DS.
    unsafe {
        seg::set_umr_control_seg(&mut *(sq.ds_ptr(start, 1) as *mut [u8; 48]), l.flags, l.octowords, l.mask);
        let m = &mut *(sq.ds_ptr(start, 4) as *mut [u8; 64]);
        seg::set_umr_mkey_seg(m, l.free, l.access, l.qpn_mkey, l.start, l.len);
        let mut i = 8;
        if wr.op == umr_op::MR_INTERLEAVED {
            let skips = core::slice::from_raw_parts(wr.skips, sges.len());
            let block = &mut *sq.ds_ptr(start, i);
            seg::set_umr_repeat_block_seg(block, total as u32, wr.repeat_count, sges.len() as u16);
            i += 1;
            for (s, k) in sges.iter().zip(skips) {
                let stride = (s.len + k) as u16;
                seg::set_umr_repeat_ent_seg(&mut *sq.ds_ptr(start, i), stride, s.len as u16, s.lkey, s.addr);
                i += 1;
            }
        } else {
            for s in sges {
                seg::set_umr_klm_seg(&mut *sq.ds_ptr(start, i), s.len, s.lkey, s.addr);
                i += 1;
            }
        }
        while i < ds {
            (*sq.ds_ptr(start, i)).fill(0);
            i += 1;
        }
    }
    let mut flags = 0u8;
    if wr.send_flags & send_flags::SIGNALED != 0 {
        flags |= fm_ce_se::CQ_UPDATE;
    }
    if wr.send_flags & send_flags::FENCE != 0 {
        flags |= fm_ce_se::FENCE;
    }
    if wr.send_flags & send_flags::SMALL_FENCE != 0 {
        flags |= fm_ce_se::SMALL_FENCE;
    }
    // SAFETY: DS 0 of the free slot at the producer counter.
    set_ctrl_seg(
        unsafe { &mut *sq.ds_ptr(start, 0) },
        start,
        opcode::UMR,
        0,
        sq.qpn,
        flags,
        ds,
        wr.key.to_be_bytes(),
    );
    if !sq.wrid.is_null() {
        // SAFETY: `wrid` has wqe_cnt entries (field contract).
        unsafe { *sq.wrid.add(sq.slot(start) as usize) = wr.wr_id };
    }
    sq.commit(start, ds);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flat post writes W10 (docs/mlx5-wire-format.md §9) byte for byte:
    /// the type-2 bind libmlx5's `ibv_wr_bind_mw` wrote on QP 0x1001, here at
    /// the ring's last slot so that its WQEBBs wrap; a bind the NIC would
    /// refuse by its arguments writes nothing.
    #[test]
    fn umr_wqe_writes_what_libmlx5_wrote() {
        let mut ring = [0x5au8; 8 * 64];
        let mut dbrec = [0u32; 2];
        let d = SqDesc::new(
            ring.as_mut_ptr(),
            8,
            &mut dbrec[1],
            core::ptr::null_mut(),
            0x1001,
            SqKind::Rc,
            1,
            0,
            16,
            1 << 31,
        )
        .unwrap();
        let range = Sge { addr: 0x5623_8eb4_a100, len: 0x200, lkey: 0x10001 };
        let bad = UmrWr { op: umr_op::BIND_MW2, key: 0x8000_0000, new_key: 0x8000_0001, ..wr(&range) };
        let none = UmrWr { num_sge: 0, ..bad };
        // SAFETY: the descriptor covers `ring` and `dbrec`; one entry.
        assert!(matches!(unsafe { umr_wqe(&d, &none) }, Err(PostError::BadUmr { .. })));
        assert!(ring.iter().all(|&b| b == 0x5a) && d.producer() == 0);
        d.pi.store(7, core::sync::atomic::Ordering::Relaxed);
        d.ci.store(7, core::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { umr_wqe(&d, &bad) }.unwrap();
        let at = |bb: usize| &ring[(bb % 8) * 64..(bb % 8) * 64 + 64];
        let wqe: Vec<u8> = (7..10).flat_map(|bb| at(bb).to_vec()).collect();
        let hex: String = wqe.iter().map(|b| format!("{b:02x}")).collect();
        let w10 = String::from("000007250010010c0000000880000000")
            + "b00000000004000000000000203c6041"
            + &"00".repeat(32)
            + "00003000001001010000000000000000"
            + "000056238eb4a1000000000000000200"
            + &"00".repeat(32)
            + "0000020000010001000056238eb4a100"
            + &"00".repeat(48);
        // The WQE index is 7 here (0 in W10): the ctrl's bytes 1-2.
        assert_eq!(hex, w10);
        assert_eq!(d.producer(), 10);
    }

    fn wr(s: &Sge) -> UmrWr {
        UmrWr {
            wr_id: 9,
            op: 0,
            send_flags: send_flags::SIGNALED,
            key: 0,
            new_key: 0,
            access: 2 | 4,
            zero_based: 0,
            sg_list: s,
            num_sge: 1,
            repeat_count: 0,
            skips: core::ptr::null(),
        }
    }
}
