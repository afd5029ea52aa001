//! The simulated devices behind the emulated kernel: one watch-mode fabric
//! per process (mlx5_simrun's setup), host `i` being `mlx5_i`, and the calls
//! the C side (`kern.c`, `objects.c`) makes to create, change and destroy the objects its commands
//! name. Each call returns 0 or a negative errno, the one the kernel gives
//! for the same refusal (mlx5-api's `sim_errno` mapping, written again here:
//! this crate does not depend on the front-end).
//!
//! Rings and doorbell records are the program's own memory (the addresses
//! libmlx5 passes in its udata): the simulator executes them in place
//! (`mlx5_sim::UserRings`). MRs are ranges of the program's memory, as the
//! kernel pins them.

use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use mlx5_sim::{
    CqInitAttr, Fabric, MiniCqeFormat, Nic, QpInitAttr, QpModify, QpState, QpType, RcPath, SimError,
    SrqInitAttr, UserRings,
};

/// The process's simulated devices.
pub(crate) struct Devices {
    /// Kept alive for the process's lifetime (its engine thread serves the rings).
    fabric: Fabric,
    pub(crate) nics: Vec<Nic>,
}

/// The devices of mlx5_simrun's setup (one InfiniBand device without it).
static DEVS: OnceLock<Devices> = OnceLock::new();

pub(crate) fn devices() -> &'static Devices {
    DEVS.get_or_init(|| {
        let setup = std::env::var(mlx5_simrun::ENV_SETUP)
            .ok()
            .and_then(|s| mlx5_simrun::Setup::from_env(&s))
            .unwrap_or(mlx5_simrun::Setup { devices: 1, roce: false, shared: false });
        let fabric = setup.fabric();
        let nics = fabric.nics();
        if setup.shared {
            share_numbers(&nics);
        }
        // SAFETY: registering plain functions; they touch only DEVS and FORK.
        unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
        if std::env::var_os(STATS_ENV).is_some() {
            // SAFETY: registering a plain function to run at exit.
            unsafe { libc::atexit(write_stats) };
        }
        if let Some(path) = std::env::var_os(mlx5_simrun::ENV_PCAP) {
            match fabric.start_capture(&path) {
                // SAFETY: registering a plain function to run at exit.
                Ok(()) => unsafe {
                    libc::atexit(finish_capture);
                },
                Err(e) => {
                    eprintln!("mlx5_simkern: capture to {}: {e}", std::path::Path::new(&path).display())
                }
            }
        }
        if setup.shared {
            yield_to_the_nic();
        }
        Devices { fabric, nics }
    })
}

/// `MLX5_SIMKERN_NICE` (default 19): the niceness the program's thread takes once the
/// devices' threads run. A NIC is hardware of its own: it never waits for the program's
/// cores. The simulated one is threads (its engine, its UDP endpoints) that the
/// program's threads, spinning on their completion queues, would otherwise keep waiting
/// for a time slice: two pingpong processes on two cores then take milliseconds per
/// message instead of microseconds. The devices' threads were started before, so they
/// keep the priority they had; the program's later threads inherit its niceness. (A
/// process may always lower its own priority; 0 leaves it as it is.)
fn yield_to_the_nic() {
    let nice = std::env::var("MLX5_SIMKERN_NICE").ok().and_then(|v| v.parse::<i32>().ok()).unwrap_or(19);
    if nice > 0 {
        // SAFETY: plain syscalls on the calling thread.
        unsafe {
            let tid = libc::gettid();
            let now = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, (now + nice).min(19));
        }
    }
}

thread_local! {
    /// Every host held across a `fork` of the program ([`Fabric::hold_for_fork`]): the
    /// three handlers run in the thread that forks (and the child's one thread is it).
    static FORK: std::cell::RefCell<Option<mlx5_sim::ForkGuard<'static>>> = const { std::cell::RefCell::new(None) };
}

/// Before `fork`: hold every host, so that no NIC thread is in the middle of its work
/// in the copy the child gets.
extern "C" fn fork_prepare() {
    if let Some(d) = DEVS.get() {
        let g = d.fabric.hold_for_fork();
        FORK.with(|f| *f.borrow_mut() = Some(g));
    }
}

/// After `fork`, in the parent: let go.
extern "C" fn fork_parent() {
    FORK.with(|f| drop(f.borrow_mut().take()));
}

/// After `fork`, in the child: let go, start the NIC threads again (`fork` copies only
/// the calling thread), so that the child's doorbells are executed, and join the UDP
/// wire as a process of its own (`Nic::rejoin_wire_after_fork`).
extern "C" fn fork_child() {
    FORK.with(|f| drop(f.borrow_mut().take()));
    if let Some(d) = DEVS.get() {
        d.fabric.restart_after_fork();
        // Under --shared the child is a process of its own on the UDP wire.
        for n in &d.nics {
            if let Err(e) = n.rejoin_wire_after_fork() {
                eprintln!("mlx5_simkern: {}: the forked child is off the UDP wire: {e}", n.info().name);
            }
        }
    }
}

/// `--shared`: each device takes its numbers from the registry the processes simulating
/// it share (`/dev/shm`, `mlx5_sim::registry`) and joins the UDP wire between them
/// (`Nic::open_wire`: an endpoint at `127.k.0.N:4791` for device N - 1). A registry that
/// cannot be opened, or an endpoint that cannot be bound, leaves the device to this
/// process alone, with a warning.
fn share_numbers(nics: &[Nic]) {
    for nic in nics {
        let name = nic.info().name;
        let path = mlx5_sim::registry::Registry::path_of(&name);
        match mlx5_sim::registry::Registry::open(&path) {
            Ok(r) => {
                if let Err(e) = nic.open_wire(std::sync::Arc::new(r)) {
                    eprintln!("mlx5_simkern: {name}: no UDP wire: {e}");
                }
            }
            Err(e) => eprintln!("mlx5_simkern: {name}: numbers not shared: {e}"),
        }
    }
}

/// `MLX5_SIMKERN_STATS=FILE`: at exit, each device's counters go to FILE,
/// a line per device (`mlx5_0 NicStats { doorbells: .., bf_writes: .., .. }`, then
/// `WireDrops { .. }` for a device on the UDP wire), for tests
/// and for users who want to see what the program asked of the device.
pub const STATS_ENV: &str = "MLX5_SIMKERN_STATS";

extern "C" fn write_stats() {
    let Some(path) = std::env::var_os(STATS_ENV) else { return };
    let Some(d) = DEVS.get() else { return };
    let mut out = String::new();
    for (i, n) in d.nics.iter().enumerate() {
        out += &format!("mlx5_{i} {:?}", n.stats());
        if let Some(w) = n.wire_drops() {
            out += &format!(" {w:?}");
        }
        out += "\n";
    }
    let _ = std::fs::write(path, out);
}

/// `--pcap`: the capture is written out when the program exits.
extern "C" fn finish_capture() {
    if let Some(d) = DEVS.get() {
        if let Err(e) = d.fabric.stop_capture() {
            eprintln!("mlx5_simkern: capture: {e}");
        }
    }
}

fn nic(dev: c_int) -> Result<&'static Nic, c_int> {
    usize::try_from(dev).ok().and_then(|i| devices().nics.get(i)).ok_or(-libc::ENODEV)
}

/// The errno the kernel gives for what the simulator refused.
fn errno(e: &SimError) -> c_int {
    -match e {
        SimError::NoSuchPd(_)
        | SimError::NoSuchCq(_)
        | SimError::NoSuchQp(_)
        | SimError::NoSuchMr(_)
        | SimError::NoSuchSrq(_) => libc::EINVAL,
        SimError::InvalidArgument { .. } | SimError::InvalidTransition { .. } => libc::EINVAL,
        SimError::Busy { .. } => libc::EBUSY,
        SimError::Unsupported { .. } => libc::EOPNOTSUPP,
        SimError::OutOfMemory => libc::ENOMEM,
    }
}

/// `Ok(v)` written to `*out` and 0, or the error's errno.
///
/// # Safety
/// `out` is writable.
unsafe fn give<T>(r: Result<T, SimError>, out: *mut T) -> c_int {
    match r {
        // SAFETY: caller contract.
        Ok(v) => unsafe {
            out.write(v);
            0
        },
        Err(e) => errno(&e),
    }
}

fn unit(r: Result<(), SimError>) -> c_int {
    r.map_or_else(|e| errno(&e), |()| 0)
}

/// ALLOC_PD: the new PD's number in `*pdn`.
///
/// # Safety
/// `pdn` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_alloc_pd(dev: c_int, pdn: *mut u32) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unsafe { give(n.alloc_pd(), pdn) },
        Err(e) => e,
    }
}

/// DEALLOC_PD.
#[no_mangle]
pub extern "C" fn mlx5sk_dealloc_pd(dev: c_int, pdn: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.dealloc_pd(pdn)))
}

/// REG_MR of `[addr, addr + len)` in this process: the key in `*key`
/// (lkey == rkey).
///
/// # Safety
/// `key` is writable. The range is the program's: the simulator accesses
/// it when an operation names the key, as a NIC would (a range that is not
/// mapped then faults the program, as DMA to unpinned memory would not;
/// `objects.c` checks that the range is mapped when it is registered).
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_reg_mr(
    dev: c_int,
    pdn: u32,
    addr: u64,
    len: u64,
    access: u32,
    key: *mut u32,
) -> c_int {
    match nic(dev) {
        // SAFETY: the range stays the program's until DEREG_MR (objects.c
        // checked it is mapped); `key` per caller contract.
        Ok(n) => unsafe { give(n.reg_mr(pdn, addr, len, access).map(|k| k.lkey), key) },
        Err(e) => e,
    }
}

/// REREG_MR in place: `pdn`, `[addr, addr + len)` and `access` replace the
/// MR's where `what` has IB_MR_REREG_PD (2), _TRANS (1), _ACCESS (4).
///
/// # Safety
/// With _TRANS, the new range stays the program's until DEREG_MR or the
/// next REREG_MR (`objects.c` checked it is mapped).
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_rereg_mr(
    dev: c_int,
    key: u32,
    what: u32,
    pdn: u32,
    addr: u64,
    len: u64,
    access: u32,
) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unit(
            unsafe {
                n.rereg_mr(
                    key,
                    (what & 2 != 0).then_some(pdn),
                    (what & 1 != 0).then_some((addr, len)),
                    (what & 4 != 0).then_some(access),
                )
            }
            .map(|_| ()),
        ),
        Err(e) => e,
    }
}

/// DEREG_MR.
#[no_mangle]
pub extern "C" fn mlx5sk_dereg_mr(dev: c_int, key: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.dereg_mr(key)))
}

/// ALLOC_MW of `kind` 1 or 2 in PD `pdn`: the window's rkey in `*key`.
///
/// # Safety
/// `key` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_alloc_mw(dev: c_int, pdn: u32, kind: u32, key: *mut u32) -> c_int {
    let k = if kind == 1 { mlx5_sim::MkeyKind::Mw1 } else { mlx5_sim::MkeyKind::Mw2 };
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unsafe { give(n.alloc_mkey(pdn, k), key) },
        Err(e) => e,
    }
}

/// DEVX CREATE_MKEY of an indirect mkey of up to `max_entries` KLM entries in
/// PD `pdn` (`remote_invalidate`: its `en_rinval` bit): its key (variant 0) in
/// `*key`.
///
/// # Safety
/// `key` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_alloc_indirect_mkey(
    dev: c_int,
    pdn: u32,
    max_entries: u32,
    remote_invalidate: c_int,
    key: *mut u32,
) -> c_int {
    let kind = mlx5_sim::MkeyKind::Indirect { max_entries, remote_invalidate: remote_invalidate != 0 };
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unsafe { give(n.alloc_mkey(pdn, kind), key) },
        Err(e) => e,
    }
}

/// DEALLOC_MW, and the destruction of a DEVX indirect mkey.
#[no_mangle]
pub extern "C" fn mlx5sk_dealloc_mw(dev: c_int, key: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.dealloc_mkey(key)))
}

/// CREATE_CQ over the program's ring: `cqe_cnt` entries of `cqe_size`
/// bytes at `buf`, doorbell record at `db`; `comp` 0 (no compression), 1
/// (hash mini-CQEs) or 2 (checksum); `channel` the simulator's completion
/// channel (`mlx5sk_create_channel`) or `u32::MAX`. The CQN in `*cqn`.
///
/// # Safety
/// `[buf, buf + cqe_cnt * cqe_size)` and `[db, db + 8)` stay the program's
/// memory until DESTROY_CQ (`objects.c` checked they are mapped); `cqn` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_create_cq(
    dev: c_int,
    cqe_cnt: u32,
    cqe_size: u32,
    buf: u64,
    db: u64,
    comp: u32,
    channel: u32,
    cqn: *mut u32,
) -> c_int {
    let n = match nic(dev) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let compression = match comp {
        0 => None,
        1 => Some(MiniCqeFormat::Hash),
        2 => Some(MiniCqeFormat::Csum),
        _ => return -libc::EINVAL,
    };
    let attr =
        CqInitAttr { cqe_cnt, cqe_size, compression, channel: (channel != u32::MAX).then_some(channel) };
    let user = UserRings { buf: buf as *mut u8, dbrec: db as *mut u8 };
    // SAFETY: caller contract.
    unsafe { give(n.create_cq_in(&attr, user).map(|r| r.cqn), cqn) }
}

/// RESIZE_CQ onto the program's new ring of `cqe_cnt` entries at `buf`.
///
/// # Safety
/// `[buf, buf + cqe_cnt * cqe_size)` stays the program's memory until the
/// CQ is destroyed or resized again (`objects.c` checked it is mapped).
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_resize_cq(dev: c_int, cqn: u32, buf: u64, cqe_cnt: u32) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unit(unsafe { n.resize_cq_in(cqn, buf as *mut u8, cqe_cnt) }),
        Err(e) => e,
    }
}

/// DESTROY_CQ.
#[no_mangle]
pub extern "C" fn mlx5sk_destroy_cq(dev: c_int, cqn: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.destroy_cq(cqn)))
}

/// What `objects.c` asks for a new QP (`struct mlx5sk_qp_init`).
#[repr(C)]
pub struct QpInit {
    /// `IB_QPT_*`: 2 RC, 4 UD; and 0x100 DCI, 0x101 DCT (`IB_QPT_DRIVER`
    /// with mlx5_ib's type flag).
    qp_type: u32,
    pdn: u32,
    send_cqn: u32,
    recv_cqn: u32,
    /// SRQ number, or `u32::MAX` for an own RQ.
    srqn: u32,
    sq_wqe_cnt: u32,
    rq_wqe_cnt: u32,
    rq_stride: u32,
    user_index: u32,
    scatter_to_cqe: u32,
    /// DCT: the access key DCIs present.
    dc_key: u64,
    /// The simulator's device context.
    context: u32,
    /// The register the driver rings (an attached UAR page's), or
    /// `u32::MAX` for one of the simulator's own.
    reg: u32,
    buf: u64,
    db: u64,
}

/// CREATE_QP over the program's rings: the QPN in `*qpn`.
///
/// # Safety
/// `q` is readable; its `buf` (RQ then SQ bytes) and `db` (8 bytes) stay
/// the program's memory until DESTROY_QP (`objects.c` checked they are
/// mapped); `qpn` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_create_qp(dev: c_int, q: *const QpInit, qpn: *mut u32) -> c_int {
    let n = match nic(dev) {
        Ok(n) => n,
        Err(e) => return e,
    };
    // SAFETY: caller contract.
    let q = unsafe { &*q };
    let qp_type = match q.qp_type {
        2 => QpType::Rc,
        4 => QpType::Ud,
        0x100 => QpType::Dci,
        0x101 => QpType::Dct,
        _ => return -libc::EOPNOTSUPP,
    };
    let attr = QpInitAttr {
        qp_type,
        pdn: q.pdn,
        send_cqn: q.send_cqn,
        recv_cqn: q.recv_cqn,
        sq_wqe_cnt: q.sq_wqe_cnt,
        rq_wqe_cnt: q.rq_wqe_cnt,
        rq_stride: q.rq_stride,
        user_index: q.user_index,
        srqn: (q.srqn != u32::MAX).then_some(q.srqn),
        scatter_to_cqe: q.scatter_to_cqe != 0,
        context: q.context,
        dc_key: q.dc_key,
        ..QpInitAttr::default()
    };
    if qp_type == QpType::Dct {
        // No rings and no register: the DCT only receives, into its SRQ.
        // SAFETY: caller contract.
        return unsafe { give(n.create_qp(&attr).map(|r| r.qpn), qpn) };
    }
    let user = UserRings { buf: q.buf as *mut u8, dbrec: q.db as *mut u8 };
    // SAFETY: caller contract.
    let r = unsafe {
        match q.reg {
            u32::MAX => n.create_qp_in(&attr, user),
            reg => n.create_qp_in_reg(&attr, user, reg),
        }
    };
    // SAFETY: caller contract.
    unsafe { give(r.map(|r| r.qpn), qpn) }
}

/// What `objects.c` asks of MODIFY_QP (`struct mlx5sk_qp_mod`), from
/// `ib_uverbs_modify_qp`: `mask` is the verbs `attr_mask`.
#[repr(C)]
pub struct QpMod {
    mask: u32,
    state: u32,
    port: u32,
    access: u32,
    dest_qpn: u32,
    dlid: u32,
    is_global: u32,
    sl: u32,
    dgid: [u8; 16],
    path_mtu: u32,
    min_rnr_timer: u32,
    rnr_retry: u32,
    retry_cnt: u32,
    timeout: u32,
    sq_psn: u32,
    rq_psn: u32,
    max_rd_atomic: u32,
    max_dest_rd_atomic: u32,
    qkey: u32,
}

// ibv_qp_attr_mask bits (rdma-core verbs.h; the kernel's IB_QP_*).
const STATE: u32 = 1 << 0;
const ACCESS_FLAGS: u32 = 1 << 3;
const PORT: u32 = 1 << 5;
const QKEY: u32 = 1 << 6;
const AV: u32 = 1 << 7;
const PATH_MTU: u32 = 1 << 8;
const TIMEOUT: u32 = 1 << 9;
const RETRY_CNT: u32 = 1 << 10;
const RNR_RETRY: u32 = 1 << 11;
const RQ_PSN: u32 = 1 << 12;
const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
const MIN_RNR_TIMER: u32 = 1 << 15;
const SQ_PSN: u32 = 1 << 16;
const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
const DEST_QPN: u32 = 1 << 20;

/// The simulator's state of an `IB_QPS_*` value.
fn qp_state(v: u32) -> Option<QpState> {
    Some(match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

/// `IB_QPS_*` of a state.
fn state_value(s: QpState) -> u32 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        _ => 6,
    }
}

/// The simulator's change of a MODIFY_QP.
fn qp_modify(m: &QpMod) -> Result<QpModify, c_int> {
    let has = |bit: u32| m.mask & bit != 0;
    let small = |v: u32| u8::try_from(v).map_err(|_| -libc::EINVAL);
    let opt8 = |bit: u32, v: u32| if has(bit) { small(v).map(Some) } else { Ok(None) };
    let opt32 = |bit: u32, v: u32| has(bit).then_some(v);
    let state = if has(STATE) { Some(qp_state(m.state).ok_or(-libc::EINVAL)?) } else { None };
    let path_mtu = if has(PATH_MTU) {
        // IB_MTU_256 (1) .. IB_MTU_4096 (5).
        Some(match m.path_mtu {
            1..=5 => 128 << m.path_mtu,
            _ => return Err(-libc::EINVAL),
        })
    } else {
        None
    };
    let path = (has(AV) || has(DEST_QPN)).then(|| RcPath {
        dest_qpn: m.dest_qpn,
        dlid: m.dlid as u16,
        dgid: (m.is_global != 0).then_some(m.dgid),
        dmac: None,
        sl: m.sl as u8,
    });
    Ok(QpModify {
        state,
        port: opt8(PORT, m.port)?,
        access_flags: opt32(ACCESS_FLAGS, m.access),
        path,
        path_mtu,
        min_rnr_timer: opt8(MIN_RNR_TIMER, m.min_rnr_timer)?,
        rnr_retry: opt8(RNR_RETRY, m.rnr_retry)?,
        retry_cnt: opt8(RETRY_CNT, m.retry_cnt)?,
        timeout: opt8(TIMEOUT, m.timeout)?,
        sq_psn: opt32(SQ_PSN, m.sq_psn),
        rq_psn: opt32(RQ_PSN, m.rq_psn),
        max_rd_atomic: opt8(MAX_QP_RD_ATOMIC, m.max_rd_atomic)?,
        max_dest_rd_atomic: opt8(MAX_DEST_RD_ATOMIC, m.max_dest_rd_atomic)?,
        qkey: opt32(QKEY, m.qkey),
    })
}

/// MODIFY_QP.
///
/// # Safety
/// `m` is readable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_modify_qp(dev: c_int, qpn: u32, m: *const QpMod) -> c_int {
    let n = match nic(dev) {
        Ok(n) => n,
        Err(e) => return e,
    };
    // SAFETY: caller contract.
    let m = match qp_modify(unsafe { &*m }) {
        Ok(m) => m,
        Err(e) => return e,
    };
    unit(n.modify_qp(qpn, &m))
}

/// QUERY_QP's live part: the state (`IB_QPS_*`) and the PSNs.
///
/// # Safety
/// `state`, `sq_psn` and `rq_psn` are writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_query_qp(
    dev: c_int,
    qpn: u32,
    state: *mut u32,
    sq_psn: *mut u32,
    rq_psn: *mut u32,
) -> c_int {
    let n = match nic(dev) {
        Ok(n) => n,
        Err(e) => return e,
    };
    match n.qp_state(qpn).and_then(|s| n.qp_psns(qpn).map(|p| (s, p))) {
        // SAFETY: caller contract.
        Ok((s, (sq, rq))) => unsafe {
            state.write(state_value(s));
            sq_psn.write(sq);
            rq_psn.write(rq);
            0
        },
        Err(e) => errno(&e),
    }
}

/// DESTROY_QP.
#[no_mangle]
pub extern "C" fn mlx5sk_destroy_qp(dev: c_int, qpn: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.destroy_qp(qpn)))
}

/// CREATE_SRQ over the program's ring: `wqe_cnt` WQEs of `stride` bytes at
/// `buf`, doorbell record at `db`. The SRQN in `*srqn`.
///
/// # Safety
/// `[buf, buf + wqe_cnt * stride)` and `[db, db + 4)` stay the program's
/// memory until DESTROY_SRQ (`objects.c` checked they are mapped); `srqn` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_create_srq(
    dev: c_int,
    pdn: u32,
    wqe_cnt: u32,
    stride: u32,
    user_index: u32,
    buf: u64,
    db: u64,
    srqn: *mut u32,
) -> c_int {
    let n = match nic(dev) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let attr = SrqInitAttr { pdn, wqe_cnt, stride, user_index };
    let user = UserRings { buf: buf as *mut u8, dbrec: db as *mut u8 };
    // SAFETY: caller contract.
    unsafe { give(n.create_srq_in(&attr, user).map(|r| r.srqn), srqn) }
}

/// DESTROY_SRQ.
#[no_mangle]
pub extern "C" fn mlx5sk_destroy_srq(dev: c_int, srqn: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.destroy_srq(srqn)))
}

/// A device context of the simulator for a command fd (GET_CONTEXT): its
/// number in `*id`.
///
/// # Safety
/// `id` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_open_context(dev: c_int, id: *mut u32) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unsafe { give(Ok(n.open_context()), id) },
        Err(e) => e,
    }
}

/// The context closes (its command fd did; every QP is gone).
#[no_mangle]
pub extern "C" fn mlx5sk_close_context(dev: c_int, id: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.close_context(id)))
}

/// A UAR page of the context's (the emulated kernel's own mapping of the
/// page the program maps through the command fd): its first register in
/// `*reg`.
///
/// # Safety
/// `page` is 4096 bytes, 4096-aligned, mapped until the context closes;
/// `reg` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_attach_uar(dev: c_int, ctx: u32, page: *mut u8, reg: *mut u32) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unsafe { give(n.attach_uar_page(ctx, page), reg) },
        Err(e) => e,
    }
}

/// The context's core clock page (the emulated kernel's own mapping of the
/// page the program maps with `MLX5_IB_MMAP_CORE_CLOCK`): the simulator
/// publishes its clock there.
///
/// # Safety
/// `page` is 4096 bytes, 4096-aligned, mapped until the context closes.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_attach_clock(dev: c_int, ctx: u32, page: *mut u8) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unit(unsafe { n.attach_clock_page(ctx, page) }),
        Err(e) => e,
    }
}

/// Completion channels of the simulator that the forwarder watches:
/// (device, channel, the descriptor readable while it has events).
static CHANNELS: Mutex<Vec<(c_int, u32, c_int)>> = Mutex::new(Vec::new());

/// A completion channel of the simulator's (CREATE_COMP_CHANNEL): its
/// number in `*id`. Its events reach the program through the forwarder.
///
/// # Safety
/// `id` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_create_channel(dev: c_int, id: *mut u32) -> c_int {
    let n = match nic(dev) {
        Ok(n) => n,
        Err(e) => return e,
    };
    match n.create_comp_channel() {
        Ok((ch, fd)) => {
            CHANNELS.lock().unwrap_or_else(|e| e.into_inner()).push((dev, ch, fd));
            start_forwarder();
            // SAFETY: caller contract.
            unsafe { id.write(ch) };
            0
        }
        Err(e) => errno(&e),
    }
}

/// The channel goes (its context closes; no CQ uses it any more).
#[no_mangle]
pub extern "C" fn mlx5sk_destroy_channel(dev: c_int, id: u32) -> c_int {
    CHANNELS.lock().unwrap_or_else(|e| e.into_inner()).retain(|&(d, c, _)| (d, c) != (dev, id));
    nic(dev).map_or_else(|e| e, |n| unit(n.destroy_comp_channel(id)))
}

extern "C" {
    /// `events.c`: the event of CQ `cqn` on channel `channel` goes to the
    /// program's end of that channel.
    fn mlx5sk_comp_event(dev: c_int, channel: u32, cqn: u32);
    /// `events.c`: an asynchronous event (`IBV_EVENT_*`) of the object whose
    /// number is `num` (a CQN or QPN; for port and device events, none)
    /// goes to the async fd of the context that owns it (of every context
    /// of the device, for port and device events).
    fn mlx5sk_async_event(dev: c_int, event_type: u32, num: u32);
    /// `events.c`: completion channels the program closed, and no CQ uses,
    /// go.
    fn mlx5sk_reap_channels();
}

/// `IBV_EVENT_*` of a simulator event, and the object it names.
fn async_event(e: mlx5_sim::AsyncEvent) -> (u32, u32) {
    use mlx5_sim::AsyncEvent as E;
    match e {
        E::CqOverrun { cqn } => (0, cqn),          // IBV_EVENT_CQ_ERR
        E::QpFatal { qpn } => (1, qpn),            // IBV_EVENT_QP_FATAL
        E::DeviceFatal => (8, u32::MAX),           // IBV_EVENT_DEVICE_FATAL
        E::PortActive => (9, 1),                   // IBV_EVENT_PORT_ACTIVE, port 1
        E::PortError => (10, 1),                   // IBV_EVENT_PORT_ERR, port 1
        E::SrqLimitReached { srqn } => (15, srqn), // IBV_EVENT_SRQ_LIMIT_REACHED
    }
}

/// Starts, once per process, the thread that carries the simulator's
/// events to the program: completion events to the channels' descriptors
/// (as the kernel's `ib_uverbs_comp_handler` queues them), asynchronous
/// events to the async fds. It sleeps in `poll(2)` on the channels, and
/// every 5 ms looks for asynchronous events and for channels the program
/// closed.
fn start_forwarder() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let _ = std::thread::Builder::new().name("mlx5_simkern-events".into()).spawn(|| loop {
            let chans: Vec<(c_int, u32, c_int)> = CHANNELS.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let mut fds: Vec<libc::pollfd> = chans
                .iter()
                .map(|&(_, _, fd)| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
                .collect();
            // SAFETY: `fds` holds `fds.len()` entries.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 5) };
            for (&(dev, ch, _), p) in chans.iter().zip(&fds) {
                if p.revents == 0 {
                    continue;
                }
                let Ok(n) = nic(dev) else { continue };
                while let Ok(Some(cqn)) = n.get_cq_event(ch) {
                    // SAFETY: plain values.
                    unsafe { mlx5sk_comp_event(dev, ch, cqn) };
                }
            }
            // SAFETY: no arguments; kern.c takes its lock.
            unsafe { mlx5sk_reap_channels() };
            for (dev, n) in devices().nics.iter().enumerate() {
                while let Some(e) = n.take_async_event() {
                    let (ty, num) = async_event(e);
                    if ty != u32::MAX {
                        // SAFETY: plain values.
                        unsafe { mlx5sk_async_event(dev as c_int, ty, num) };
                    }
                }
            }
        });
    });
}

/// Asynchronous events are carried once a context exists.
#[no_mangle]
pub extern "C" fn mlx5sk_start_events() {
    start_forwarder();
}

/// A DCT's number (what DCIs address; mlx5_ib reports it in MODIFY_QP's
/// response at INIT to RTR), in `*dctn`.
///
/// # Safety
/// `dctn` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_dct_number(dev: c_int, qpn: u32, dctn: *mut u32) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unsafe { give(n.dct_number(qpn), dctn) },
        Err(e) => e,
    }
}

/// The MAC of the simulated port whose GID is `gid` (CREATE_AH on RoCE:
/// the kernel resolves the destination MAC and returns it in mlx5_ib's
/// response), in `mac`; `-EHOSTUNREACH` when no device has that address.
///
/// # Safety
/// `gid` is readable (16 bytes) and `mac` writable (6 bytes).
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_resolve_mac(gid: *const u8, mac: *mut u8) -> c_int {
    // SAFETY: caller contract.
    let gid: [u8; 16] = unsafe { std::ptr::read_unaligned(gid.cast()) };
    match devices().nics.iter().map(|n| n.info()).find(|i| i.gid == gid) {
        Some(i) => {
            // SAFETY: caller contract.
            unsafe { std::ptr::copy_nonoverlapping(i.mac.as_ptr(), mac, 6) };
            0
        }
        None => -libc::EHOSTUNREACH,
    }
}

/// MODIFY_SRQ's limit (IB_SRQ_LIMIT): armed in the simulator, 0 disarms.
#[no_mangle]
pub extern "C" fn mlx5sk_arm_srq_limit(dev: c_int, srqn: u32, limit: u32) -> c_int {
    nic(dev).map_or_else(|e| e, |n| unit(n.arm_srq_limit(srqn, limit)))
}

/// QUERY_SRQ's limit: the one armed now, 0 once it fired.
///
/// # Safety
/// `limit` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_srq_limit(dev: c_int, srqn: u32, limit: *mut u32) -> c_int {
    match nic(dev) {
        // SAFETY: caller contract.
        Ok(n) => unsafe { give(n.srq_limit(srqn), limit) },
        Err(e) => e,
    }
}

/// A test's hand on the device, as a kernel's debug knob would be: port 1
/// of device `dev` goes down (`active` 0) or comes back up, with the
/// asynchronous events a NIC raises. Not part of any kernel ABI: a program
/// under `mlx5_simrun` finds it with `dlsym(RTLD_DEFAULT, ...)`.
#[no_mangle]
pub extern "C" fn mlx5sk_set_port_active(dev: c_int, active: c_int) -> c_int {
    nic(dev).map_or_else(
        |e| e,
        |n| {
            n.set_port_active(active != 0);
            0
        },
    )
}

/// A test's hand on the device: it fails (`IBV_EVENT_DEVICE_FATAL`).
#[no_mangle]
pub extern "C" fn mlx5sk_inject_fatal(dev: c_int) -> c_int {
    nic(dev).map_or_else(
        |e| e,
        |n| {
            n.inject_fatal();
            0
        },
    )
}
