//! The control path for C: simulated fabrics and hosts, or a ConnectX
//! through rdma-core, then PD, MR, CQ, QP (RC, UD, DCI, DCT) and SRQ
//! objects built with the front-end's RAII handles (so destruction order
//! is always right), their ring-core descriptors for the data path, and
//! the raw resources `mlx5dv_init_obj` gives (`mlx5r_qp_raw_get`,
//! `mlx5r_cq_raw_get`) for programs that write WQEs with their own code.
//!
//! Objects are opaque pointers created by `*_create` / `*_open` calls and
//! released by the matching `*_free` / `*_close`; an object must be freed
//! after the objects created from it (QPs before their CQs, SRQ and PD).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, CStr};
use std::ptr;

use mlx5_api::ring::{CqDesc, RqDesc, SqDesc, SrqDesc};
use mlx5_api::sim::{devices, Sim};
use mlx5_api::{
    AccessFlags, CompletionQueue, ConnectParams, Context, Dci, Dct, Error, Gid, MemoryRegion,
    ProtectionDomain, QpConfig, RcQp, RemoteQpInfo, SharedReceiveQueue, UdQp,
};
use mlx5_hw::Hw;
use mlx5_sim::{ExecMode, Fabric, FabricConfig, HostConfig};

use crate::codes::*;

/// One object of either backend.
#[derive(Debug)]
pub enum Back<S, H> {
    /// On the simulator.
    Sim(S),
    /// On ConnectX hardware.
    Hw(H),
}

/// A simulated fabric (`mlx5r_fabric`) and its devices.
#[derive(Debug)]
pub struct FabricObj {
    fabric: Fabric,
}

impl FabricObj {
    /// The model's NIC handles (statistics, for Rust-side tests).
    pub fn nics(&self) -> Vec<mlx5_sim::Nic> {
        self.fabric.nics()
    }
}
/// An opened device (`mlx5r_context`).
#[derive(Debug)]
pub struct CtxObj(pub(crate) Back<Context<Sim>, Context<Hw>>);
/// A protection domain (`mlx5r_pd`).
#[derive(Debug)]
pub struct PdObj(pub(crate) Back<ProtectionDomain<Sim>, ProtectionDomain<Hw>>);
/// A memory region (`mlx5r_mr`).
#[derive(Debug)]
pub struct MrObj(Back<MemoryRegion<Sim>, MemoryRegion<Hw>>);
/// A completion queue object (`mlx5r_cq_obj`); poll it through its descriptor.
#[derive(Debug)]
pub struct CqObj(pub(crate) Back<CompletionQueue<Sim, ()>, CompletionQueue<Hw, ()>>);
/// A shared receive queue object (`mlx5r_srq_obj`).
#[derive(Debug)]
pub struct SrqObj(Back<SharedReceiveQueue<Sim, ()>, SharedReceiveQueue<Hw, ()>>);
/// A queue pair of any transport (`mlx5r_qp`).
#[derive(Debug)]
pub struct QpObj(Back<AnyQp<Sim>, AnyQp<Hw>>);

/// The transports.
#[derive(Debug)]
pub enum AnyQp<B: mlx5_api::Backend> {
    /// Reliable connected.
    Rc(RcQp<B, ()>),
    /// Unreliable datagram.
    Ud(UdQp<B, ()>),
    /// DC initiator.
    Dci(Dci<B, ()>),
    /// DC target.
    Dct(Dct<B, ()>),
}

/// `mlx5r_qp_attr.qp_type`: reliable connected.
pub const MLX5R_QPT_RC: u32 = 0;
/// `mlx5r_qp_attr.qp_type`: unreliable datagram.
pub const MLX5R_QPT_UD: u32 = 1;
/// `mlx5r_qp_attr.qp_type`: DC initiator.
pub const MLX5R_QPT_DCI: u32 = 2;
/// `mlx5r_qp_attr.qp_type`: DC target (needs an SRQ).
pub const MLX5R_QPT_DCT: u32 = 3;

/// `mlx5r_sim_fabric_new` mode: NICs run in the caller's thread when it
/// calls `mlx5r_sim_progress`.
pub const MLX5R_SIM_DETERMINISTIC: u32 = 0;
/// `mlx5r_sim_fabric_new` mode: one thread per NIC that watches doorbell
/// records and UAR pages (a foreign executor just stores to them).
pub const MLX5R_SIM_WATCH: u32 = 2;

/// QP creation attributes.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5r_qp_attr {
    /// `MLX5R_QPT_*`.
    pub qp_type: u32,
    /// Send work requests.
    pub max_send_wr: u32,
    /// Receive work requests (ignored with an SRQ, DCI and DCT).
    pub max_recv_wr: u32,
    /// Gather entries per send WQE.
    pub max_send_sge: u32,
    /// Scatter entries per receive WQE.
    pub max_recv_sge: u32,
    /// Inline bytes per send WQE.
    pub max_inline_data: u32,
    /// Non-zero: a doorbell register of its own (for a send queue driven
    /// from another thread).
    pub dedicated_uar: u32,
    /// Non-zero: received data of up to 32 bytes (64 with 128-byte CQEs)
    /// lands in the CQE (RC responder, and requester READ / atomic results
    /// where legal); poll such CQs with `mlx5r_cqe_poll_scatter`.
    pub scatter_to_cqe: u32,
    /// DCT: the DC access key initiators must present.
    pub dc_key: u64,
    /// The port (1-based); 0 means port 1.
    pub port: u32,
    /// The QP's start PSN (24 bits): its send PSN, reported to the peer by
    /// `mlx5r_qp_local` in `mlx5r_remote.psn`.
    pub psn: u32,
}

/// What a peer needs to reach a QP (exchanged out of band).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5r_remote {
    /// QP number (DCT: its DCT number).
    pub qpn: u32,
    /// InfiniBand LID.
    pub lid: u16,
    /// Non-zero: `gid` and `mac` are set (RoCE).
    pub has_gid: u8,
    /// Reserved, 0.
    pub reserved: u8,
    /// Port GID.
    pub gid: [u8; 16],
    /// Port MAC (RoCE).
    pub mac: [u8; 6],
    /// Reserved, 0.
    pub reserved2: [u8; 2],
    /// The QP's start PSN: what the connecting side's receive queue expects.
    pub psn: u32,
}

/// A QP's raw resources, as `struct mlx5dv_qp` gives them.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5r_qp_raw {
    /// QP number.
    pub qpn: u32,
    /// SQ WQEBBs (0 for a DCT).
    pub sq_wqe_cnt: u32,
    /// SQ ring.
    pub sq_buf: *mut u8,
    /// SQ stride (always 64).
    pub sq_stride: u32,
    /// RQ WQEs (0 without own RQ).
    pub rq_wqe_cnt: u32,
    /// RQ ring.
    pub rq_buf: *mut u8,
    /// RQ stride.
    pub rq_stride: u32,
    /// BlueFlame half size (0: doorbell only).
    pub bf_size: u32,
    /// Doorbell record: word 0 RQ counter, word 1 SQ counter (big-endian).
    pub dbrec: *mut u32,
    /// The doorbell / BlueFlame register (`bf.reg`).
    pub bf_reg: *mut u8,
}

/// A CQ's raw resources, as `struct mlx5dv_cq` gives them.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5r_cq_raw {
    /// CQE ring.
    pub buf: *mut u8,
    /// Doorbell record: word 0 set_ci, word 1 arm.
    pub dbrec: *mut u32,
    /// Number of CQEs (a power of two).
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// CQ number.
    pub cqn: u32,
}

pub(crate) fn err(e: &Error) -> i32 {
    error_code(e)
}

/// # Safety
/// `out` is writable.
pub(crate) unsafe fn put<T>(out: *mut *mut T, v: T) -> i32 {
    // SAFETY: caller contract.
    unsafe { *out = Box::into_raw(Box::new(v)) };
    MLX5R_OK
}

/// # Safety
/// `p` is null or was created by `put`, not freed yet.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: caller contract.
        drop(unsafe { Box::from_raw(p) });
    }
}

macro_rules! check_null {
    ($($p:expr),*) => { $(if $p.is_null() { return MLX5R_ERR_INVALID; })* };
}
pub(crate) use check_null;

/// A simulated fabric with no host yet. `mode`: `MLX5R_SIM_DETERMINISTIC`
/// or `MLX5R_SIM_WATCH`.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_sim_fabric_new(mode: u32, out: *mut *mut FabricObj) -> i32 {
    check_null!(out);
    let mode = match mode {
        MLX5R_SIM_DETERMINISTIC => ExecMode::Deterministic,
        MLX5R_SIM_WATCH => ExecMode::Watch,
        _ => return MLX5R_ERR_INVALID,
    };
    let fabric = Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
    // SAFETY: caller contract.
    unsafe { put(out, FabricObj { fabric }) }
}

/// Add an InfiniBand host of LID `lid`; returns its index (from 0).
///
/// # Safety
/// `fabric` is live.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_sim_add_host(fabric: *mut FabricObj, lid: u16) -> i32 {
    check_null!(fabric);
    // SAFETY: caller contract.
    let f = unsafe { &*fabric };
    let n = f.fabric.nics().len();
    f.fabric.add_host(HostConfig::infiniband(&format!("sim{n}"), lid));
    n as i32
}

/// Deterministic mode: one pass of every NIC in the caller's thread
/// (doorbells stored into UAR pages, doorbell records that moved, RNR
/// retries, flushes). Watch mode: waits until every NIC's thread made a
/// full pass. Returns 0.
///
/// # Safety
/// `fabric` is live.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_sim_progress(fabric: *mut FabricObj) -> i32 {
    check_null!(fabric);
    // SAFETY: caller contract.
    let f = unsafe { &*fabric };
    for nic in f.fabric.nics() {
        match f.fabric.mode() {
            ExecMode::Deterministic => nic.tick(),
            _ => nic.quiesce(),
        }
    }
    MLX5R_OK
}

/// Free a fabric (after every context opened on it).
///
/// # Safety
/// `fabric` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_sim_fabric_free(fabric: *mut FabricObj) {
    // SAFETY: caller contract.
    unsafe { free(fabric) }
}

/// Open host `host` of a simulated fabric.
///
/// # Safety
/// `fabric` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_sim_open(fabric: *mut FabricObj, host: u32, out: *mut *mut CtxObj) -> i32 {
    check_null!(fabric, out);
    // SAFETY: caller contract.
    let f = unsafe { &*fabric };
    let Some(dev) = devices(&f.fabric).into_iter().nth(host as usize) else { return MLX5R_ERR_INVALID };
    match dev.open() {
        // SAFETY: caller contract.
        Ok(c) => unsafe { put(out, CtxObj(Back::Sim(c))) },
        Err(e) => err(&e),
    }
}

/// Open the mlx5 device `name` (e.g. "mlx5_0") through rdma-core, loaded
/// at run time. `MLX5R_ERR_NO_DEVICE` when rdma-core or the device is missing.
///
/// # Safety
/// `name` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_hw_open(name: *const c_char, out: *mut *mut CtxObj) -> i32 {
    check_null!(name, out);
    // SAFETY: caller contract.
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else { return MLX5R_ERR_INVALID };
    let dev = match mlx5_hw::device(name) {
        Ok(d) => d,
        Err(_) => return MLX5R_ERR_NO_DEVICE,
    };
    match dev.open() {
        // SAFETY: caller contract.
        Ok(c) => unsafe { put(out, CtxObj(Back::Hw(c))) },
        Err(e) => err(&e),
    }
}

/// Close a context (after every object created from it).
///
/// # Safety
/// `ctx` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_context_close(ctx: *mut CtxObj) {
    // SAFETY: caller contract.
    unsafe { free(ctx) }
}

/// Allocate a protection domain.
///
/// # Safety
/// `ctx` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_pd_alloc(ctx: *mut CtxObj, out: *mut *mut PdObj) -> i32 {
    check_null!(ctx, out);
    // SAFETY: caller contract.
    let r = match unsafe { &(*ctx).0 } {
        Back::Sim(c) => c.alloc_pd().map(Back::Sim),
        Back::Hw(c) => c.alloc_pd().map(Back::Hw),
    };
    match r {
        // SAFETY: caller contract.
        Ok(p) => unsafe { put(out, PdObj(p)) },
        Err(e) => err(&e),
    }
}

/// Free a protection domain.
///
/// # Safety
/// `pd` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_pd_free(pd: *mut PdObj) {
    // SAFETY: caller contract.
    unsafe { free(pd) }
}

/// `mlx5r_mr_reg` access: the local side may write (receives, READ
/// results; `IBV_ACCESS_LOCAL_WRITE`).
pub const MLX5R_ACCESS_LOCAL_WRITE: u32 = 1;
/// `mlx5r_mr_reg` access: peers may RDMA WRITE into it.
pub const MLX5R_ACCESS_REMOTE_WRITE: u32 = 2;
/// `mlx5r_mr_reg` access: peers may RDMA READ from it.
pub const MLX5R_ACCESS_REMOTE_READ: u32 = 4;
/// `mlx5r_mr_reg` access: peers may run atomics on it.
pub const MLX5R_ACCESS_REMOTE_ATOMIC: u32 = 8;

/// Register `[addr, addr + len)` with `access`, an or of the
/// `MLX5R_ACCESS_*` bits (`ibv_access_flags`' values).
///
/// # Safety
/// `pd` is live; the memory stays valid until `mlx5r_mr_free`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mr_reg(
    pd: *mut PdObj,
    addr: *mut u8,
    len: usize,
    access: u32,
    out: *mut *mut MrObj,
) -> i32 {
    check_null!(pd, addr, out);
    let access = AccessFlags::from_bits_retain(access);
    // SAFETY: caller contract (the memory outlives the MR).
    let r = unsafe {
        match &(*pd).0 {
            Back::Sim(p) => p.register_raw(addr, len, access).map(Back::Sim),
            Back::Hw(p) => p.register_raw(addr, len, access).map(Back::Hw),
        }
    };
    match r {
        // SAFETY: caller contract.
        Ok(m) => unsafe { put(out, MrObj(m)) },
        Err(e) => err(&e),
    }
}

/// The keys of a memory region.
///
/// # Safety
/// `mr` is live; `lkey` and `rkey` are writable or null.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mr_keys(mr: *const MrObj, lkey: *mut u32, rkey: *mut u32) -> i32 {
    check_null!(mr);
    // SAFETY: caller contract.
    let (l, r) = match unsafe { &(*mr).0 } {
        Back::Sim(m) => (m.lkey(), m.rkey()),
        Back::Hw(m) => (m.lkey(), m.rkey()),
    };
    // SAFETY: caller contract.
    unsafe {
        if !lkey.is_null() {
            *lkey = l;
        }
        if !rkey.is_null() {
            *rkey = r;
        }
    }
    MLX5R_OK
}

/// Deregister a memory region.
///
/// # Safety
/// `mr` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_mr_free(mr: *mut MrObj) {
    // SAFETY: caller contract.
    unsafe { free(mr) }
}

/// A completion queue of at least `cqe` entries (64-byte CQEs).
///
/// # Safety
/// `ctx` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_create(ctx: *mut CtxObj, cqe: u32, out: *mut *mut CqObj) -> i32 {
    check_null!(ctx, out);
    // SAFETY: caller contract.
    let r = match unsafe { &(*ctx).0 } {
        Back::Sim(c) => c.create_cq(cqe, |_, ()| {}).map(Back::Sim),
        Back::Hw(c) => c.create_cq(cqe, |_, ()| {}).map(Back::Hw),
    };
    match r {
        // SAFETY: caller contract.
        Ok(q) => unsafe { put(out, CqObj(q)) },
        Err(e) => err(&e),
    }
}

/// Poll one CQE of `cq` as `mlx5r_cqe_poll` does, and when there is none,
/// give the backend a pass and look once more: in the simulator's
/// deterministic mode the NICs run in the caller's thread, and this call is
/// what runs them (`mlx5r_cqe_poll` on the bare descriptor cannot reach
/// them: poll with this call, or call `mlx5r_sim_progress`). Watch mode and
/// hardware need no pass; the call costs them one more look.
///
/// # Safety
/// `cq` is live; one thread polls it; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_poll(cq: *mut CqObj, out: *mut crate::ring_ops::mlx5r_cqe) -> i32 {
    check_null!(cq, out);
    // SAFETY: caller contract.
    let desc = unsafe { mlx5r_cq_desc(cq) };
    // SAFETY: the live CQ's descriptor; one thread polls; `out` writable.
    let r = unsafe { crate::ring_ops::mlx5r_cqe_poll(desc, out) };
    if r != crate::ring_ops::MLX5R_CQE_EMPTY {
        return r;
    }
    // SAFETY: caller contract (live).
    match unsafe { &(*cq).0 } {
        Back::Sim(q) => q.progress(),
        Back::Hw(q) => q.progress(),
    }
    // SAFETY: as above.
    unsafe { crate::ring_ops::mlx5r_cqe_poll(desc, out) }
}

/// `mlx5r_cqe_explain` for a CQE `cq` gave, with what the device knows of the failed
/// check: on the simulator the sentence names the key, the MR and its range, the
/// address or the QP and the right or limit that was missing; on hardware it is
/// `mlx5r_cqe_explain`'s. Returns the sentence's whole length, or a negative code.
///
/// # Safety
/// `cq` is live; `c` is readable; `buf` is writable for `len` bytes (or null when
/// `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_explain(
    cq: *mut CqObj,
    c: *const crate::ring_ops::mlx5r_cqe,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    check_null!(cq, c);
    // SAFETY: caller contract (both readable).
    let (q, e) = unsafe { (&(*cq).0, &*c) };
    let detail = if e.status != 0 {
        match q {
            Back::Sim(q) => q.failure_reason(e.qpn, e.wqe_counter),
            Back::Hw(q) => q.failure_reason(e.qpn, e.wqe_counter),
        }
    } else {
        None
    };
    // SAFETY: caller contract.
    unsafe { crate::ring_ops::explain_into(c, detail.as_deref(), buf, len) }
}

/// The CQ's ring-core descriptor (for `mlx5r_cqe_poll`), valid until the
/// CQ is freed.
///
/// # Safety
/// `cq` is live; poll it from one thread.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_desc(cq: *mut CqObj) -> *const CqDesc {
    if cq.is_null() {
        return ptr::null();
    }
    // SAFETY: caller contract; the C side polls through the descriptor only.
    unsafe {
        match &(*cq).0 {
            Back::Sim(q) => q.desc(),
            Back::Hw(q) => q.desc(),
        }
    }
}

/// The CQ's raw resources (`mlx5dv_cq`).
///
/// # Safety
/// `cq` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_raw_get(cq: *mut CqObj, out: *mut mlx5r_cq_raw) -> i32 {
    check_null!(cq, out);
    // SAFETY: caller contract.
    let d = unsafe { &*mlx5r_cq_desc(cq) };
    // SAFETY: caller contract.
    unsafe {
        *out =
            mlx5r_cq_raw { buf: d.buf, dbrec: d.dbrec, cqe_cnt: d.cqe_cnt, cqe_size: d.cqe_size, cqn: d.cqn }
    };
    MLX5R_OK
}

/// Destroy a CQ (after its QPs).
///
/// # Safety
/// `cq` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_free(cq: *mut CqObj) {
    // SAFETY: caller contract.
    unsafe { free(cq) }
}

/// A shared receive queue of at least `max_wr` receives of `max_sge` entries.
///
/// # Safety
/// `ctx` and `pd` are live and of one context; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_srq_create(
    ctx: *mut CtxObj,
    pd: *mut PdObj,
    max_wr: u32,
    max_sge: u32,
    out: *mut *mut SrqObj,
) -> i32 {
    check_null!(ctx, pd, out);
    // SAFETY: caller contract.
    let r = match unsafe { (&(*ctx).0, &(*pd).0) } {
        (Back::Sim(c), Back::Sim(p)) => c.create_srq(p, max_wr, max_sge).map(Back::Sim),
        (Back::Hw(c), Back::Hw(p)) => c.create_srq(p, max_wr, max_sge).map(Back::Hw),
        _ => return MLX5R_ERR_MISMATCH,
    };
    match r {
        // SAFETY: caller contract.
        Ok(s) => unsafe { put(out, SrqObj(s)) },
        Err(e) => err(&e),
    }
}

/// The SRQ's ring-core descriptor (for `mlx5r_srq_recv_wqe`, `mlx5r_srq_free`).
///
/// # Safety
/// `srq` is live; post to it from one thread.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_srq_desc(srq: *mut SrqObj) -> *const SrqDesc {
    if srq.is_null() {
        return ptr::null();
    }
    // SAFETY: caller contract.
    unsafe {
        match &(*srq).0 {
            Back::Sim(s) => s.desc(),
            Back::Hw(s) => s.desc(),
        }
    }
}

/// Destroy an SRQ (after its QPs).
///
/// # Safety
/// `srq` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_srq_destroy(srq: *mut SrqObj) {
    // SAFETY: caller contract.
    unsafe { free(srq) }
}

fn config(a: &mlx5r_qp_attr) -> QpConfig {
    QpConfig {
        port: if a.port == 0 { 1 } else { u8::try_from(a.port).unwrap_or(u8::MAX) },
        psn: a.psn,
        dc_key: a.dc_key,
        max_send_wr: a.max_send_wr,
        max_recv_wr: a.max_recv_wr,
        max_send_sge: a.max_send_sge,
        max_recv_sge: a.max_recv_sge,
        max_inline_data: a.max_inline_data,
        dedicated_uar: a.dedicated_uar != 0,
        scatter_to_cqe: a.scatter_to_cqe != 0,
    }
}

fn create_qp<B: mlx5_api::Backend>(
    ctx: &Context<B>,
    pd: &ProtectionDomain<B>,
    scq: &CompletionQueue<B, ()>,
    rcq: &CompletionQueue<B, ()>,
    srq: Option<&SharedReceiveQueue<B, ()>>,
    a: &mlx5r_qp_attr,
) -> Result<AnyQp<B>, i32> {
    let cfg = config(a);
    let r = match (a.qp_type, srq) {
        (MLX5R_QPT_RC, None) => ctx.create_rc_qp(pd, scq, rcq, &cfg).map(AnyQp::Rc),
        (MLX5R_QPT_RC, Some(s)) => ctx.create_rc_qp_with_srq(pd, scq, rcq, s, &cfg).map(AnyQp::Rc),
        (MLX5R_QPT_UD, s) => ctx.create_ud_qp(pd, scq, rcq, s, &cfg).map(AnyQp::Ud),
        (MLX5R_QPT_DCI, _) => ctx.create_dci(pd, scq, &cfg).map(AnyQp::Dci),
        (MLX5R_QPT_DCT, Some(s)) => ctx.create_dct(pd, rcq, s, &cfg).map(AnyQp::Dct),
        _ => return Err(MLX5R_ERR_INVALID),
    };
    r.map_err(|e| err(&e))
}

/// A QP in RESET. `srq` may be null (required for a DCT); DCI and DCT use
/// only one CQ (`send_cq` for a DCI, `recv_cq` for a DCT; pass it twice).
///
/// # Safety
/// Every non-null object is live and of one context; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_create(
    ctx: *mut CtxObj,
    pd: *mut PdObj,
    send_cq: *mut CqObj,
    recv_cq: *mut CqObj,
    srq: *mut SrqObj,
    attr: *const mlx5r_qp_attr,
    out: *mut *mut QpObj,
) -> i32 {
    check_null!(ctx, pd, send_cq, recv_cq, attr, out);
    // SAFETY: caller contract (null SRQ allowed).
    let (c, p, s, r, q, a) =
        unsafe { (&(*ctx).0, &(*pd).0, &(*send_cq).0, &(*recv_cq).0, srq.as_ref().map(|q| &q.0), &*attr) };
    let qp = match (c, p, s, r) {
        (Back::Sim(c), Back::Sim(p), Back::Sim(s), Back::Sim(r)) => {
            let q = match q {
                None => None,
                Some(Back::Sim(q)) => Some(q),
                Some(_) => return MLX5R_ERR_MISMATCH,
            };
            create_qp(c, p, s, r, q, a).map(Back::Sim)
        }
        (Back::Hw(c), Back::Hw(p), Back::Hw(s), Back::Hw(r)) => {
            let q = match q {
                None => None,
                Some(Back::Hw(q)) => Some(q),
                Some(_) => return MLX5R_ERR_MISMATCH,
            };
            create_qp(c, p, s, r, q, a).map(Back::Hw)
        }
        _ => return MLX5R_ERR_MISMATCH,
    };
    match qp {
        // SAFETY: caller contract.
        Ok(q) => unsafe { put(out, QpObj(q)) },
        Err(code) => code,
    }
}

/// Run `$body` with `$q` bound to the QP of either backend.
macro_rules! with_qp {
    ($qp:expr, $q:ident => $body:expr) => {
        match $qp {
            Back::Sim($q) => $body,
            Back::Hw($q) => $body,
        }
    };
}

fn sq_of<B: mlx5_api::Backend>(q: &AnyQp<B>) -> *const SqDesc {
    // SAFETY: (each arm) the C side posts through the descriptor only.
    unsafe {
        match q {
            AnyQp::Rc(q) => q.sq_desc(),
            AnyQp::Ud(q) => q.sq_desc(),
            AnyQp::Dci(q) => q.sq_desc(),
            AnyQp::Dct(_) => ptr::null(),
        }
    }
}

fn rq_of<B: mlx5_api::Backend>(q: &AnyQp<B>) -> *const RqDesc {
    // SAFETY: (each arm) as in `sq_of`.
    let r = unsafe {
        match q {
            AnyQp::Rc(q) => q.rq_desc(),
            AnyQp::Ud(q) => q.rq_desc(),
            _ => None,
        }
    };
    r.map_or(ptr::null(), |r| r as *const _)
}

/// The QP's send queue descriptor (for `mlx5r_send_wqe`, `mlx5r_db_ring`,
/// `mlx5r_sq_retire`); null for a DCT.
///
/// # Safety
/// `qp` is live; post from one thread.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_sq(qp: *mut QpObj) -> *const SqDesc {
    if qp.is_null() {
        return ptr::null();
    }
    // SAFETY: caller contract.
    with_qp!(unsafe { &(*qp).0 }, q => sq_of(q))
}

/// The QP's receive queue descriptor; null on an SRQ, DCI or DCT.
///
/// # Safety
/// `qp` is live; post from one thread.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_rq(qp: *mut QpObj) -> *const RqDesc {
    if qp.is_null() {
        return ptr::null();
    }
    // SAFETY: caller contract.
    with_qp!(unsafe { &(*qp).0 }, q => rq_of(q))
}

/// The QP's raw resources, as `mlx5dv_init_obj(MLX5DV_OBJ_QP)` gives them.
///
/// # Safety
/// `qp` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_raw_get(qp: *mut QpObj, out: *mut mlx5r_qp_raw) -> i32 {
    check_null!(qp, out);
    // SAFETY: caller contract.
    let (sq, rq) = unsafe { (mlx5r_qp_sq(qp), mlx5r_qp_rq(qp)) };
    if sq.is_null() {
        return MLX5R_ERR_INVALID;
    }
    // SAFETY: live descriptors of a live QP; `bf` is its register view.
    let (sq, rq) = unsafe { (&*sq, rq.as_ref()) };
    // SAFETY: as above.
    let bf = unsafe { &*sq.bf };
    let raw = mlx5r_qp_raw {
        qpn: sq.qpn,
        sq_wqe_cnt: sq.wqe_cnt,
        sq_buf: sq.buf,
        sq_stride: 64,
        rq_wqe_cnt: rq.map_or(0, |r| r.wqe_cnt),
        rq_buf: rq.map_or(ptr::null_mut(), |r| r.buf),
        rq_stride: rq.map_or(0, |r| r.stride),
        bf_size: bf.size,
        // The SQ word is dbrec[1].
        dbrec: sq.dbrec.wrapping_sub(1),
        bf_reg: bf.reg,
    };
    // SAFETY: caller contract.
    unsafe { *out = raw };
    MLX5R_OK
}

/// QP number (a DCT: its DCT number, 0 before activation).
///
/// # Safety
/// `qp` is live.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_qpn(qp: *mut QpObj) -> u32 {
    if qp.is_null() {
        return 0;
    }
    // SAFETY: caller contract.
    with_qp!(unsafe { &(*qp).0 }, q => match q {
        AnyQp::Rc(q) => q.qpn(),
        AnyQp::Ud(q) => q.qpn(),
        AnyQp::Dci(q) => q.qpn(),
        AnyQp::Dct(q) => q.qpn(),
    })
}

fn remote_of(i: &RemoteQpInfo) -> mlx5r_remote {
    mlx5r_remote {
        qpn: i.qpn,
        lid: i.lid,
        has_gid: i.gid.is_some() as u8,
        gid: i.gid.unwrap_or_default().0,
        mac: i.mac.unwrap_or_default(),
        psn: i.psn,
        ..Default::default()
    }
}

/// What a peer needs to reach this QP on its port (QPN, LID; GID and MAC
/// on RoCE; its start PSN).
///
/// # Safety
/// `qp` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_local(qp: *mut QpObj, out: *mut mlx5r_remote) -> i32 {
    check_null!(qp, out);
    // SAFETY: caller contract.
    let r = with_qp!(unsafe { &(*qp).0 }, q => match q {
        AnyQp::Rc(q) => q.local_info(),
        AnyQp::Ud(q) => q.local_info(),
        AnyQp::Dci(q) => q.local_info(),
        AnyQp::Dct(q) => q.local_info(),
    });
    match r {
        Ok(i) => {
            // SAFETY: caller contract.
            unsafe { *out = remote_of(&i) };
            MLX5R_OK
        }
        Err(e) => err(&e),
    }
}

/// RC: RESET→INIT→RTR→RTS towards `remote` (all remote access rights,
/// path MTU 1024, retry 7, RNR retry 7; the receive side expects
/// `remote->psn`). UD: RESET→RTS with Q_Key `qkey` (`remote` ignored).
/// DCI: RESET→RTS. DCT: RESET→RTR (its number is assigned now).
///
/// # Safety
/// `qp` is live; `remote` is readable for RC.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_connect(qp: *mut QpObj, remote: *const mlx5r_remote, qkey: u32) -> i32 {
    check_null!(qp);
    let p = ConnectParams::default();
    // SAFETY: caller contract.
    let r = with_qp!(unsafe { &(*qp).0 }, q => match q {
        AnyQp::Rc(q) => {
            if remote.is_null() {
                return MLX5R_ERR_INVALID;
            }
            // SAFETY: caller contract.
            let r = unsafe { &*remote };
            let info = if r.has_gid != 0 {
                RemoteQpInfo { psn: r.psn, ..RemoteQpInfo::roce(r.qpn, Gid(r.gid), r.mac) }
            } else {
                RemoteQpInfo { psn: r.psn, ..RemoteQpInfo::ib(r.qpn, r.lid) }
            };
            q.activate(&ConnectParams::to(info))
        }
        AnyQp::Ud(q) => q.activate(&ConnectParams { qkey, ..p }),
        AnyQp::Dci(q) => q.activate(&p),
        AnyQp::Dct(q) => q.activate(&p),
    });
    match r {
        Ok(()) => MLX5R_OK,
        Err(e) => err(&e),
    }
}

/// The LID of the port QPs of `ctx` use (port 1).
///
/// # Safety
/// `ctx` is live; `lid` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_port_lid(ctx: *mut CtxObj, lid: *mut u16) -> i32 {
    check_null!(ctx, lid);
    // SAFETY: caller contract.
    let r = match unsafe { &(*ctx).0 } {
        Back::Sim(c) => c.query_port(1),
        Back::Hw(c) => c.query_port(1),
    };
    match r {
        Ok(p) => {
            // SAFETY: caller contract.
            unsafe { *lid = p.lid };
            MLX5R_OK
        }
        Err(e) => err(&e),
    }
}

/// Destroy a QP (before its CQs, SRQ and PD).
///
/// # Safety
/// `qp` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_qp_free(qp: *mut QpObj) {
    // SAFETY: caller contract.
    unsafe { free(qp) }
}
