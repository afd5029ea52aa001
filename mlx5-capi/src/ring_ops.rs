//! The ring-core operations as C functions: the four of RDMaxcel
//! (`send_wqe`, `recv_wqe`, `db_ring`, `cqe_poll`) done right, plus
//! retirement (a CQE's `wqe_counter` back to the caller's wr-id) and
//! address-vector encoders. Nothing here allocates, locks or calls a
//! backend: these run against any ring described by a descriptor.

#![allow(non_camel_case_types)]

use mlx5_api::ring::cqe::CqeFormat;
use mlx5_api::ring::{
    send_wqe, umr_wqe, AddressVector, CqDesc, Cqe, HostMmio, IbGrh, RoceAv, RqDesc, SendWr, Sge, SqDesc,
    SrqDesc, Syndrome, UmrWr,
};

use crate::codes::*;

/// `mlx5r_cqe_poll`: nothing yet.
pub const MLX5R_CQE_EMPTY: i32 = 0;
/// `mlx5r_cqe_poll`: a successful completion.
pub const MLX5R_CQE_OK: i32 = 1;
/// `mlx5r_cqe_poll`: an error completion (see `syndrome`); never "nothing yet".
pub const MLX5R_CQE_ERROR: i32 = 2;

/// `mlx5r_db_ring` flag: write the WQE through BlueFlame when that is legal
/// (one WQE since the last doorbell, fits the register's half).
pub const MLX5R_DB_BLUEFLAME: u32 = 1;

/// A decoded CQE (spec §5.1, §5.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct mlx5r_cqe {
    /// 0 success, 1 error.
    pub status: u8,
    /// CQE opcode (`op_own[7:4]`): 0 REQ, 1..4 RESP_*, 13 REQ_ERR, 14 RESP_ERR.
    pub opcode: u8,
    /// Requester: the mlx5 opcode of the completed send WQE.
    pub wqe_opcode: u8,
    /// Error CQEs: the syndrome (0x05 flush, 0x13 remote access, ...).
    pub syndrome: u8,
    /// Error CQEs: the vendor syndrome.
    pub vendor_err: u8,
    /// `op_own[3:2]` (0 for every CQE this library decodes).
    pub format: u8,
    /// The sender asked for a solicited event.
    pub solicited: u8,
    /// Reserved, 0.
    pub reserved: u8,
    /// Send WQE index, receive counter or SRQ WQE index.
    pub wqe_counter: u16,
    /// Receives: the source LID.
    pub slid: u16,
    /// The local QPN (DCT number for a DCT).
    pub qpn: u32,
    /// Bytes transferred (0 in error CQEs).
    pub byte_cnt: u32,
    /// Immediate (host value), or the invalidated rkey.
    pub imm: u32,
    /// Receives: source QPN (`flags_rqpn[23:0]`).
    pub src_qpn: u32,
    /// Receives: the whole `flags_rqpn` word.
    pub flags_rqpn: u32,
    /// `srqn_uidx[23:0]`.
    pub user_index: u32,
    /// Completion timestamp.
    pub timestamp: u64,
}

impl From<&Cqe> for mlx5r_cqe {
    fn from(c: &Cqe) -> Self {
        let (syndrome, vendor_err) = c.error.map_or((0, 0), |e| (e.syndrome.raw(), e.vendor_err));
        mlx5r_cqe {
            status: c.error.is_some() as u8,
            opcode: c.opcode,
            wqe_opcode: c.wqe_opcode,
            syndrome,
            vendor_err,
            format: (c.op_own >> 2) & 3,
            solicited: c.se as u8,
            reserved: 0,
            wqe_counter: c.wqe_counter,
            slid: c.slid,
            qpn: c.qpn,
            byte_cnt: c.byte_cnt,
            imm: c.imm_inval_pkey,
            src_qpn: c.flags_rqpn & 0xff_ffff,
            flags_rqpn: c.flags_rqpn,
            user_index: c.srqn_uidx & 0xff_ffff,
            timestamp: c.timestamp,
        }
    }
}

/// Build the WQE `wr` describes at the producer counter of `sq` (every
/// transport and opcode of spec §3.8, several SGEs, inline, immediate,
/// flags, atomic operands, address vector) and record `wr->wr_id`. Not
/// rung: call `mlx5r_db_ring` once for a batch. Returns 0, or a negative
/// code with nothing written.
///
/// # Safety
/// `sq` describes live ring memory (from `mlx5r_qp_sq` or filled by the
/// caller from its own mlx5dv QP) and only this thread posts to it;
/// `wr->sg_list` has `wr->num_sge` entries whose bytes are readable when
/// the INLINE flag is set; `wr->av` is null or valid.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_send_wqe(sq: *const SqDesc, wr: *const SendWr) -> i32 {
    if sq.is_null() || wr.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    match unsafe { send_wqe(&*sq, &*wr) } {
        Ok(()) => MLX5R_OK,
        Err(e) => post_code(e),
    }
}

/// Build the UMR WQE `wr` describes (a memory window bind, LOCAL_INV or an
/// indirect mkey's list; docs/mlx5-wire-format.md §3.7) at the producer
/// counter of RC send queue `sq`, as libmlx5 writes it, and record
/// `wr->wr_id`. Not rung. Returns 0, or a negative code with nothing
/// written (`MLX5R_ERR_BAD_UMR` for a bind the NIC would refuse by its
/// arguments alone). libmlx5 gives the next WQE `MLX5R_SEND_SMALL_FENCE`.
///
/// # Safety
/// As for `mlx5r_send_wqe`; `wr->sg_list` has `wr->num_sge` entries.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_umr_wqe(sq: *const SqDesc, wr: *const UmrWr) -> i32 {
    if sq.is_null() || wr.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    match unsafe { umr_wqe(&*sq, &*wr) } {
        Ok(()) => MLX5R_OK,
        Err(e) => post_code(e),
    }
}

/// `mlx5r_umr_wr.op`: bind a type-1 window (no entry: unbind it).
pub const MLX5R_UMR_BIND_MW1: u32 = 1;
/// `mlx5r_umr_wr.op`: bind a type-2 window to this QP.
pub const MLX5R_UMR_BIND_MW2: u32 = 2;
/// `mlx5r_umr_wr.op`: invalidate the type-2 window of `key`.
pub const MLX5R_UMR_LOCAL_INV: u32 = 3;
/// `mlx5r_umr_wr.op`: point the indirect mkey `key` at the entries.
pub const MLX5R_UMR_MR_LIST: u32 = 4;
/// `mlx5r_umr_wr.op`: point the indirect mkey `key` at `repeat_count`
/// repetitions of the entries, each `skips[i]` bytes apart after its bytes.
pub const MLX5R_UMR_MR_INTERLEAVED: u32 = 5;
/// mlx5 send opcode of every UMR (`mlx5r_cqe.opcode` of its completion).
pub const MLX5R_OPCODE_UMR: u32 = 0x25;
/// `send_flags`: initiator small fence, wait for prior UMRs (FM = 1; what
/// libmlx5 gives the WQE after a UMR).
pub const MLX5R_SEND_SMALL_FENCE: u32 = 16;

/// Ask the cache for the lines the next `mlx5r_send_wqe` on `sq` writes:
/// the next WQE's first two WQEBBs, the doorbell record, and the wr-id
/// slot (when the descriptor has a wr-id table). A hint for posting round
/// robin over many QPs: call it for the QP posted to next, before posting
/// to the current one (with thousands taking turns, those lines are out
/// of cache). Changes nothing; a null `sq` is ignored.
///
/// # Safety
/// `sq` is null or as for `mlx5r_send_wqe` (read only: the producer
/// counter and the addresses).
#[no_mangle]
pub unsafe extern "C" fn mlx5r_sq_prefetch(sq: *const SqDesc) {
    if sq.is_null() {
        return;
    }
    // SAFETY: caller contract (a live descriptor).
    let sq = unsafe { &*sq };
    sq.prefetch_next();
    if !sq.wrid.is_null() {
        mlx5_api::ring::hint::prefetch_w(sq.wrid.wrapping_add(sq.slot(sq.producer()) as usize));
    }
}

/// Ring the doorbell for every WQE posted since the last call: barrier, the
/// doorbell record (16-bit producer), barrier, one 8-byte store of the last
/// WQE's ctrl bytes (or, with `MLX5R_DB_BLUEFLAME` when legal, the whole
/// WQE in 64-byte chunks) at the register's current half, barrier, and the
/// register's half toggled. Returns 1 when something was rung, 0 when
/// nothing was pending.
///
/// # Safety
/// As `mlx5r_send_wqe`; no other thread writes the same register meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_db_ring(sq: *const SqDesc, flags: u32) -> i32 {
    // SAFETY: not null, so a live descriptor (caller contract).
    if sq.is_null() || unsafe { (*sq).bf.is_null() } {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    let sq = unsafe { &*sq };
    if sq.unrung() == 0 {
        return 0;
    }
    // SAFETY: caller contract: live ring and register.
    unsafe {
        if flags & MLX5R_DB_BLUEFLAME != 0 {
            sq.ring_bf(&HostMmio);
        } else {
            sq.ring_db(&HostMmio);
        }
    }
    1
}

/// Post one receive WQE of `num_sge` entries at the producer slot of `rq`
/// (zero-length entries skipped, invalid-lkey terminator when shorter than
/// the stride), record `wr_id`, and publish it in the doorbell record.
///
/// # Safety
/// `rq` describes live memory; one thread posts; `sges` has `num_sge` entries.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_recv_wqe(
    rq: *const RqDesc,
    sges: *const Sge,
    num_sge: u32,
    wr_id: u64,
) -> i32 {
    // SAFETY: `sges` has `num_sge` entries (caller contract).
    let Some(sges) = (unsafe { sge_slice(sges, num_sge) }) else { return MLX5R_ERR_INVALID };
    if rq.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    match unsafe { (*rq).post(sges, wr_id) } {
        Ok(_) => MLX5R_OK,
        Err(e) => post_code(e),
    }
}

/// Post one receive WQE on a shared receive queue, at the head of its
/// linked list (the list itself is never rewritten), and publish the count.
///
/// # Safety
/// As `mlx5r_recv_wqe`; posting and freeing happen on one thread.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_srq_recv_wqe(
    srq: *const SrqDesc,
    sges: *const Sge,
    num_sge: u32,
    wr_id: u64,
) -> i32 {
    // SAFETY: `sges` has `num_sge` entries (caller contract).
    let Some(sges) = (unsafe { sge_slice(sges, num_sge) }) else { return MLX5R_ERR_INVALID };
    if srq.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    match unsafe { (*srq).post(sges, wr_id) } {
        Ok(_) => MLX5R_OK,
        Err(e) => post_code(e),
    }
}

/// # Safety
/// `sges` is null with `n == 0`, or points at `n` entries.
unsafe fn sge_slice<'a>(sges: *const Sge, n: u32) -> Option<&'a [Sge]> {
    match (sges.is_null(), n) {
        (_, 0) => Some(&[]),
        (true, _) => None,
        // SAFETY: caller contract.
        (false, n) => Some(unsafe { std::slice::from_raw_parts(sges, n as usize) }),
    }
}

/// Poll one CQE: `MLX5R_CQE_EMPTY` when there is nothing yet,
/// `MLX5R_CQE_OK` or `MLX5R_CQE_ERROR` with `*out` filled (an error CQE is a
/// result with its syndrome, vendor syndrome, counter and QPN, never
/// "nothing yet"), or `MLX5R_ERR_CQE_FORMAT` for a scatter-to-CQE entry
/// (consumed, `*out` filled; its data is lost: poll CQs of QPs created with
/// `scatter_to_cqe` with `mlx5r_cqe_poll_scatter`). Compressed sessions
/// are expanded: each mini-CQE comes back as a CQE of its own.
/// Ownership is checked, then the read barrier, then the fields (for
/// 128-byte CQEs the second half of the slot); the consumer index is
/// published after the read. It reads memory only: in the simulator's
/// deterministic mode nothing executes WQEs until `mlx5r_sim_progress`
/// runs the NICs; `mlx5r_cq_poll` (on the CQ object) does that itself.
///
/// # Safety
/// `cq` describes live memory; one thread polls it.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cqe_poll(cq: *const CqDesc, out: *mut mlx5r_cqe) -> i32 {
    if cq.is_null() || out.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    let Some(c) = (unsafe { (*cq).poll() }) else { return MLX5R_CQE_EMPTY };
    // SAFETY: `out` is writable (caller contract).
    unsafe { *out = mlx5r_cqe::from(&c) };
    match (c.format, c.error) {
        (CqeFormat::Normal, None) => MLX5R_CQE_OK,
        (CqeFormat::Normal, Some(_)) => MLX5R_CQE_ERROR,
        _ => MLX5R_ERR_CQE_FORMAT,
    }
}

/// `mlx5r_cqe_poll` for CQs whose QPs scatter to the CQE: a CQE that
/// carries data (`out->format` 1: in the 64-byte CQE, 2: in the first half
/// of a 128-byte slot) has its `out->byte_cnt` bytes (at most 64) copied to
/// `data` and returns `MLX5R_CQE_OK`; the receive buffer was not written,
/// the receive WQE is retired as usual. `data` holds `cap` bytes; a CQE
/// whose data does not fit is left in the CQ and `MLX5R_ERR_INVALID`
/// returned (64 always fits).
///
/// # Safety
/// `cq` describes live memory; one thread polls it; `data` has `cap`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cqe_poll_scatter(
    cq: *const CqDesc,
    out: *mut mlx5r_cqe,
    data: *mut u8,
    cap: u32,
) -> i32 {
    if cq.is_null() || out.is_null() || data.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract; the CQE is read before it is handed back.
    unsafe {
        let cq = &*cq;
        let Some(p) = cq.next() else { return MLX5R_CQE_EMPTY };
        let c = Cqe::read(p);
        if let Some(d) = cq.scattered(p) {
            if d.len() > cap as usize {
                return MLX5R_ERR_INVALID;
            }
            core::ptr::copy_nonoverlapping(d.as_ptr(), data, d.len());
        }
        cq.advance();
        *out = mlx5r_cqe::from(&c);
        match (c.format, c.error) {
            (CqeFormat::Normal | CqeFormat::Scatter32 | CqeFormat::Scatter64, None) => MLX5R_CQE_OK,
            (CqeFormat::Normal, Some(_)) => MLX5R_CQE_ERROR,
            _ => MLX5R_ERR_CQE_FORMAT,
        }
    }
}

/// Retire the send WQE a requester CQE names (and the unsignaled ones
/// before it): `*wr_id` gets the wr-id `mlx5r_send_wqe` recorded. Returns
/// `MLX5R_ERR_NOT_FOUND` (nothing changed) when no outstanding WQE starts
/// at `wqe_counter`.
///
/// # Safety
/// `sq` describes live memory; one thread retires.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_sq_retire(sq: *const SqDesc, wqe_counter: u16, wr_id: *mut u64) -> i32 {
    if sq.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    unsafe { report_retired((*sq).retire(wqe_counter), wr_id) }
}

/// The wr-id of a retired work request into `*wr_id` (when not null), or
/// `MLX5R_ERR_NOT_FOUND`.
///
/// # Safety
/// `wr_id` is null or writable.
unsafe fn report_retired(r: Option<mlx5_api::ring::sq::Retired>, wr_id: *mut u64) -> i32 {
    let Some(r) = r else { return MLX5R_ERR_NOT_FOUND };
    if !wr_id.is_null() {
        // SAFETY: caller contract.
        unsafe { *wr_id = r.wr_id.unwrap_or(0) };
    }
    MLX5R_OK
}

/// Retire the receive a responder CQE names on a QP's receive queue.
///
/// # Safety
/// As `mlx5r_sq_retire`.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_rq_retire(rq: *const RqDesc, wqe_counter: u16, wr_id: *mut u64) -> i32 {
    if rq.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    unsafe { report_retired((*rq).retire(wqe_counter), wr_id) }
}

/// Free the SRQ WQE a responder CQE names (its `wqe_counter` is the WQE
/// index) and link it behind the tail.
///
/// # Safety
/// As `mlx5r_sq_retire`; the index names an outstanding WQE.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_srq_free(srq: *const SrqDesc, index: u16, wr_id: *mut u64) -> i32 {
    // SAFETY: not null, so a live descriptor (caller contract).
    if srq.is_null() || index as u32 >= unsafe { (*srq).wqe_cnt } {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    let w = unsafe { (*srq).free_wqe(index as u32) };
    if !wr_id.is_null() {
        // SAFETY: writable (caller contract).
        unsafe { *wr_id = w.unwrap_or(0) };
    }
    MLX5R_OK
}

/// An InfiniBand address vector without GRH (destination LID, SL).
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_av_ib(dlid: u16, sl: u8, out: *mut AddressVector) -> i32 {
    if out.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    unsafe { *out = AddressVector::ib(dlid, sl) };
    MLX5R_OK
}

/// An InfiniBand address vector with a GRH.
///
/// # Safety
/// `dgid` has 16 bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_av_ib_grh(
    dlid: u16,
    sl: u8,
    dgid: *const u8,
    sgid_index: u8,
    out: *mut AddressVector,
) -> i32 {
    if out.is_null() || dgid.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    let dgid = unsafe { *(dgid as *const [u8; 16]) };
    let grh = IbGrh { dgid: mlx5_api::Gid(dgid), sgid_index, traffic_class: 0, hop_limit: 64, flow_label: 0 };
    // SAFETY: caller contract.
    unsafe { *out = AddressVector::ib_grh(dlid, sl, &grh) };
    MLX5R_OK
}

/// A RoCE v2 address vector (destination GID and MAC, source GID index,
/// priority, UDP source port; hop limit 64).
///
/// # Safety
/// `dgid` has 16 bytes, `dmac` 6; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_av_roce_v2(
    dgid: *const u8,
    dmac: *const u8,
    sgid_index: u8,
    priority: u8,
    udp_sport: u16,
    out: *mut AddressVector,
) -> i32 {
    if out.is_null() || dgid.is_null() || dmac.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    let (dgid, dmac) = unsafe { (*(dgid as *const [u8; 16]), *(dmac as *const [u8; 6])) };
    let r = RoceAv { sgid_index, priority, udp_sport, ..RoceAv::new(mlx5_api::Gid(dgid), dmac) };
    // SAFETY: caller contract.
    unsafe { *out = AddressVector::roce_v2(&r) };
    MLX5R_OK
}

/// mlx5 send opcodes for `mlx5r_send_wr.opcode` (spec §2.3).
pub const MLX5R_OPCODE_NOP: u32 = 0x00;
/// SEND with invalidate (`imm` = the rkey to invalidate).
pub const MLX5R_OPCODE_SEND_INVAL: u32 = 0x01;
/// RDMA WRITE.
pub const MLX5R_OPCODE_RDMA_WRITE: u32 = 0x08;
/// RDMA WRITE with immediate.
pub const MLX5R_OPCODE_RDMA_WRITE_IMM: u32 = 0x09;
/// SEND.
pub const MLX5R_OPCODE_SEND: u32 = 0x0a;
/// SEND with immediate.
pub const MLX5R_OPCODE_SEND_IMM: u32 = 0x0b;
/// RDMA READ.
pub const MLX5R_OPCODE_RDMA_READ: u32 = 0x10;
/// Atomic compare-and-swap.
pub const MLX5R_OPCODE_ATOMIC_CS: u32 = 0x11;
/// Atomic fetch-and-add.
pub const MLX5R_OPCODE_ATOMIC_FA: u32 = 0x12;
/// Masked compare-and-swap on `atomic_bytes` (4 or 8): `swap`, `compare_add`
/// (the compare value), `swap_mask`, `compare_mask`.
pub const MLX5R_OPCODE_ATOMIC_MASKED_CS: u32 = 0x14;
/// Masked fetch-and-add on `atomic_bytes` (4 or 8): `compare_add` (the
/// addend), `field_boundary`.
pub const MLX5R_OPCODE_ATOMIC_MASKED_FA: u32 = 0x15;

/// `mlx5r_send_wr.send_flags`: fence (ibverbs' `IBV_SEND_FENCE`).
pub const MLX5R_SEND_FENCE: u32 = 1;
/// Generate a CQE on success (`IBV_SEND_SIGNALED`).
pub const MLX5R_SEND_SIGNALED: u32 = 2;
/// Solicited event (`IBV_SEND_SOLICITED`).
pub const MLX5R_SEND_SOLICITED: u32 = 4;
/// Copy the gather list into the WQE (`IBV_SEND_INLINE`).
pub const MLX5R_SEND_INLINE: u32 = 8;

const _: () = {
    use mlx5_api::ring::post::send_flags as f;
    use mlx5_api::ring::seg::opcode as o;
    assert!(MLX5R_SEND_FENCE == f::FENCE && MLX5R_SEND_SIGNALED == f::SIGNALED);
    assert!(MLX5R_SEND_SOLICITED == f::SOLICITED && MLX5R_SEND_INLINE == f::INLINE);
    assert!(MLX5R_OPCODE_RDMA_WRITE == o::RDMA_WRITE as u32 && MLX5R_OPCODE_ATOMIC_FA == o::ATOMIC_FA as u32);
    assert!(MLX5R_OPCODE_SEND_INVAL == o::SEND_INVAL as u32 && MLX5R_OPCODE_RDMA_READ == o::RDMA_READ as u32);
    assert!(MLX5R_OPCODE_ATOMIC_MASKED_CS == o::ATOMIC_MASKED_CS as u32);
    assert!(MLX5R_OPCODE_ATOMIC_MASKED_FA == o::ATOMIC_MASKED_FA as u32);
    assert!(MLX5R_OPCODE_UMR == o::UMR as u32 && MLX5R_SEND_SMALL_FENCE == f::SMALL_FENCE);
    use mlx5_api::ring::post::umr_op as u;
    assert!(MLX5R_UMR_BIND_MW1 == u::BIND_MW1 && MLX5R_UMR_BIND_MW2 == u::BIND_MW2);
    assert!(MLX5R_UMR_LOCAL_INV == u::LOCAL_INV && MLX5R_UMR_MR_LIST == u::MR_LIST);
    assert!(MLX5R_UMR_MR_INTERLEAVED == u::MR_INTERLEAVED);
};

/// Writes `c` explained in one sentence into `buf` (`len` bytes), NUL-terminated and
/// cut to fit as `snprintf` does: for an error, what failed (the opcode, QP and WQE
/// index), what the syndrome means with its mlx5 and `ibv_wc_status` names and the
/// vendor syndrome, and the usual causes (what the CQE alone says, as on hardware; see
/// `mlx5r_cq_explain` for the device's own words); for a success, what completed.
/// Returns the sentence's whole length (a larger buffer takes it all), or
/// `MLX5R_ERR_INVALID` for a null `c` (or a null `buf` with a nonzero `len`).
///
/// # Safety
/// `c` is readable; `buf` is writable for `len` bytes (or null when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cqe_explain(
    c: *const mlx5r_cqe,
    buf: *mut core::ffi::c_char,
    len: usize,
) -> i32 {
    // SAFETY: caller contract.
    unsafe { explain_into(c, None, buf, len) }
}

/// Writes the sentence of `mlx5r_cqe_explain` for `c` with what the device knows of
/// the failed check (`detail`) inserted ("What failed: rkey 0x... does not allow RDMA
/// WRITE (its MR was registered without REMOTE_WRITE)").
///
/// # Safety
/// As for `mlx5r_cqe_explain`.
pub(crate) unsafe fn explain_into(
    c: *const mlx5r_cqe,
    detail: Option<&str>,
    buf: *mut core::ffi::c_char,
    len: usize,
) -> i32 {
    use core::fmt::Write;
    use mlx5_api::ring::explain::{send_opcode_name, write_explanation_with, Failed, Truncating};
    if c.is_null() || (buf.is_null() && len != 0) {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: caller contract.
    let c = unsafe { &*c };
    let out: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: caller contract (writable for `len` bytes).
        unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
    };
    let mut w = Truncating::new(out);
    // Requester CQEs: REQ (0) and REQ_ERR (13).
    let send = matches!(c.opcode, 0 | 13);
    let _ = if c.status != 0 {
        let failed = if send {
            Failed::Send { opcode: c.wqe_opcode, qpn: c.qpn, wqe_counter: c.wqe_counter }
        } else {
            Failed::Recv { qpn: c.qpn, wqe_counter: c.wqe_counter }
        };
        write_explanation_with(&mut w, failed, Syndrome::from_raw(c.syndrome), c.vendor_err, detail)
    } else if send {
        write!(
            w,
            "{} on QP 0x{:x} (WQE {}) completed: {} bytes.",
            send_opcode_name(c.wqe_opcode),
            c.qpn,
            c.wqe_counter,
            c.byte_cnt
        )
    } else {
        write!(w, "A receive on QP 0x{:x} (WQE {}) completed: {} bytes.", c.qpn, c.wqe_counter, c.byte_cnt)
    };
    i32::try_from(w.finish()).unwrap_or(i32::MAX)
}
