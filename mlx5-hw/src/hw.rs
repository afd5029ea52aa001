//! The `Backend` implementation over rdma-core: device list, context,
//! PD, MR, CQ, SRQ and QP objects (each owning its rdma-core object and
//! destroying it on drop), `mlx5dv_init_obj` for the ring memory the
//! front-end drives, and `ibv_modify_qp` with the masks of `masks.rs`.
//!
//! Every object holds an `Rc` to the context (and the context one to the
//! loaded libraries), so the context is closed, and the libraries unloaded,
//! after everything created from it. The front-end already drops QPs before
//! their CQs/SRQ and MRs/QPs before their PD.

use std::cell::Cell;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::rc::Rc;

use mlx5_api::backend::{
    Backend, CqCreate, CqResources, QpCreate, QpKind, QpResources, QpTransition, SrqCreate, SrqResources,
};
use mlx5_api::{AccessFlags, Device, DeviceCaps, Error, LinkLayer, PortInfo, Result};

use crate::decode::{c_string, mtu_to_bytes, LinkLayerRaw, PortState};
use crate::doorbell::HwUar;
use crate::error::{check, non_null, HwError};
use crate::ffi::*;
use crate::gid;
use crate::loader::Rdma;
use crate::masks::{self, LocalPath};

/// The hardware backend marker.
#[derive(Debug)]
pub struct Hw;

/// sysfs roots (`ibv_get_device_name` names the directory under the first).
/// The sysfs root, as libibverbs finds it (`ibv_get_sysfs_path`): the
/// `SYSFS_PATH` environment variable where set (ignored in a setuid or
/// otherwise secure-execution program, as `secure_getenv` ignores it), else
/// `/sys`. Under an emulated device (`mlx5_simrun`) it is the emulator's
/// tree, so the backend reads the same GID table and net devices as the
/// library it drives.
fn sysfs_root() -> std::path::PathBuf {
    // SAFETY: reads the auxiliary vector; no pointer involved.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    match std::env::var_os("SYSFS_PATH") {
        Some(p) if !secure && !p.is_empty() => std::path::PathBuf::from(p),
        _ => std::path::PathBuf::from("/sys"),
    }
}

fn sysfs_ib() -> std::path::PathBuf {
    sysfs_root().join("class/infiniband")
}

fn sysfs_net() -> std::path::PathBuf {
    sysfs_root().join("class/net")
}

/// What `ibv_get_device_list` returned, classified. `list_is_null` with
/// `errno`, or a count. `ENOSYS` (no uverbs in the kernel: what a machine
/// without RDMA hardware reports), `ENODEV` and `ENOENT` mean "no device";
/// other errnos are failures.
pub fn classify_device_list(list_is_null: bool, count: c_int, errno: i32) -> Result<usize, HwError> {
    if list_is_null {
        return match errno {
            libc::ENOSYS | libc::ENODEV | libc::ENOENT => Err(HwError::NoDevice { errno: Some(errno) }),
            e => Err(HwError::Verbs { op: "ibv_get_device_list", errno: e }),
        };
    }
    match usize::try_from(count) {
        Ok(0) | Err(_) => Err(HwError::NoDevice { errno: None }),
        Ok(n) => Ok(n),
    }
}

/// The array `ibv_get_device_list` returned, freed on drop (after every
/// [`HwDevice`] from it; opened contexts keep their own reference inside
/// rdma-core).
struct DeviceList {
    rdma: Rc<Rdma>,
    list: *mut *mut ibv_device,
}

impl std::fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceList").finish_non_exhaustive()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: returned by ibv_get_device_list of this library, freed once.
        unsafe { (self.rdma.free_device_list)(self.list) }
    }
}

/// A device of the list (`struct ibv_device *`), not opened yet.
#[derive(Debug)]
pub struct HwDevice {
    list: Rc<DeviceList>,
    dev: *mut ibv_device,
    name: String,
    mlx5: bool,
}

impl HwDevice {
    /// The kernel device name (`mlx5_0`).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Whether libmlx5 drives it (`mlx5dv_is_supported`).
    pub fn is_mlx5(&self) -> bool {
        self.mlx5
    }
}

/// Every RDMA device rdma-core lists (mlx5 or not).
pub fn all_devices(rdma: Rc<Rdma>) -> Result<Vec<HwDevice>, HwError> {
    let mut n: c_int = 0;
    // SAFETY: n is a valid out-pointer.
    let list = unsafe { (rdma.get_device_list)(&mut n) };
    let errno = if list.is_null() { crate::error::errno_after_null() } else { 0 };
    let count = match classify_device_list(list.is_null(), n, errno) {
        Ok(c) => c,
        Err(e) => {
            if !list.is_null() {
                // SAFETY: an empty list still has to be freed.
                unsafe { (rdma.free_device_list)(list) };
            }
            return Err(e);
        }
    };
    let owner = Rc::new(DeviceList { rdma: rdma.clone(), list });
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: the list has `count` entries followed by NULL.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: dev is a listed device; the name is a NUL-terminated
        // string inside it, copied at once.
        let name = unsafe {
            let p = (rdma.get_device_name)(dev);
            if p.is_null() {
                format!("device{i}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: dev is a listed device.
        let mlx5 = unsafe { (rdma.dv_is_supported)(dev) } != 0;
        out.push(HwDevice { list: owner.clone(), dev, name, mlx5 });
    }
    Ok(out)
}

/// Keep only mlx5 devices: an empty list is [`HwError::NoDevice`], a list
/// without mlx5 device is [`HwError::NotMlx5`] naming them.
pub fn only_mlx5(all: Vec<HwDevice>) -> Result<Vec<HwDevice>, HwError> {
    if all.is_empty() {
        return Err(HwError::NoDevice { errno: None });
    }
    let names: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
    let mlx5: Vec<HwDevice> = all.into_iter().filter(|d| d.mlx5).collect();
    if mlx5.is_empty() {
        return Err(HwError::NotMlx5 { name: names.join(", ") });
    }
    Ok(mlx5)
}

/// Every mlx5 device, ready to open with [`mlx5_api::Device::open`].
pub fn devices() -> Result<Vec<Device<Hw>>, HwError> {
    let rdma = Rc::new(Rdma::load()?);
    Ok(only_mlx5(all_devices(rdma)?)?.into_iter().map(Device::new).collect())
}

/// The mlx5 device called `name` (`mlx5_0`).
pub fn device(name: &str) -> Result<Device<Hw>, HwError> {
    let rdma = Rc::new(Rdma::load()?);
    let all = all_devices(rdma)?;
    let available: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
    match all.into_iter().find(|d| d.name == name) {
        Some(d) if d.mlx5 => Ok(Device::new(d)),
        Some(d) => Err(HwError::NotMlx5 { name: d.name }),
        None => Err(HwError::DeviceNotFound { name: name.to_string(), available }),
    }
}

/// mlx5dv capabilities (`mlx5dv_query_device`); each optional part is
/// `Some` only when the library reported it in `comp_mask`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mlx5Caps {
    /// `mlx5dv_context.version`.
    pub version: u8,
    /// `MLX5DV_CONTEXT_FLAGS_*`.
    pub flags: u64,
    /// CQE compression: (`max_num`, `supported_format` bits).
    pub cqe_comp: Option<(u32, u32)>,
    /// DC on-demand-paging capabilities (`ibv_odp_transport_cap_bits`).
    pub dc_odp_caps: Option<u32>,
    /// DCI streams: (`max_log_num_concurent`, `max_log_num_errored`).
    pub dci_streams: Option<(u8, u8)>,
    /// `max_dc_rd_atom`, `max_dc_init_rd_atom` (rdma-core newer than v44 only).
    pub max_dc_rd_atom: Option<(u64, u64)>,
    /// LAG ports (`num_lag_ports`), when the device reports them.
    pub num_lag_ports: Option<u8>,
}

impl Mlx5Caps {
    /// CQE version 1 (user index in every CQE).
    pub fn cqe_v1(&self) -> bool {
        self.flags & MLX5DV_CONTEXT_FLAGS_CQE_V1 != 0
    }
}

/// What `ibv_query_device` tells, in Rust types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`mlx5_0`).
    pub name: String,
    /// Firmware version.
    pub fw_ver: String,
    /// Big-endian as in `ibv_device_attr.node_guid`.
    pub node_guid_be: u64,
    /// IEEE vendor id (0x02c9: Mellanox).
    pub vendor_id: u32,
    /// Vendor part id (the ConnectX model).
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Most QPs.
    pub max_qp: i32,
    /// Most WQEs per queue.
    pub max_qp_wr: i32,
    /// Most SGEs per WQE.
    pub max_sge: i32,
    /// Most CQEs per CQ.
    pub max_cqe: i32,
    /// Most WQEs per SRQ.
    pub max_srq_wr: i32,
    /// Most outstanding READs / atomics per QP as responder.
    pub max_qp_rd_atom: i32,
    /// Most outstanding READs / atomics per QP as requester.
    pub max_qp_init_rd_atom: i32,
    /// What `mlx5dv_query_device` adds.
    pub mlx5: Mlx5Caps,
}

/// What `ibv_query_port` / `ibv_query_gid` tell about a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortDetails {
    /// Port number (1-based).
    pub port_num: u8,
    /// Logical port state.
    pub state: PortState,
    /// Physical port state (`ibv_port_attr.phys_state`).
    pub phys_state: u8,
    /// Base LID (InfiniBand).
    pub lid: u16,
    /// The subnet manager's LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Link layer as the kernel reports it (`to_api()` for `mlx5_api::LinkLayer`).
    pub link_layer: LinkLayerRaw,
    /// Active MTU in bytes (`None`: a value the header does not know).
    pub active_mtu: Option<u32>,
    /// Largest MTU in bytes.
    pub max_mtu: Option<u32>,
    /// GID table entries.
    pub gid_tbl_len: i32,
    /// GID index 0.
    pub gid0: [u8; 16],
    /// The GID index this backend sends from (see `gid.rs`) and its GID.
    pub sgid_index: u8,
    /// The GID at `sgid_index`.
    pub sgid: [u8; 16],
    /// The port's MAC (RoCE; zero on InfiniBand or when unknown).
    pub mac: [u8; 6],
    /// Every address must carry a GRH (`IBV_QPF_GRH_REQUIRED`).
    pub grh_required: bool,
}

/// The opened device (`struct ibv_context *`), closed when the last object
/// created from it is gone.
pub(crate) struct CtxInner {
    rdma: Rc<Rdma>,
    ctx: *mut ibv_context,
    info: DeviceInfo,
    caps: DeviceCaps,
    /// Cached RoCE source GID index per port (revalidated on use).
    sgid_cache: std::cell::RefCell<Vec<Option<u8>>>,
    /// Async events read from the (non-blocking) async fd and not yet
    /// handed to the user, oldest first (bounded: see `drain_async`).
    async_pending: std::cell::RefCell<std::collections::VecDeque<mlx5_api::AsyncEvent>>,
    /// CQs the device reported in error (`IBV_EVENT_CQ_ERR`).
    cq_errors: std::cell::RefCell<Vec<u32>>,
    /// `IBV_EVENT_DEVICE_FATAL` was read.
    fatal: std::cell::Cell<bool>,
    /// Memory windows allocated here, by index (`rkey >> 8`: a bind changes
    /// the low byte), for `ibv_dealloc_mw`.
    mws: std::cell::RefCell<std::collections::HashMap<u32, *mut ibv_mw>>,
}

impl std::fmt::Debug for CtxInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtxInner").finish_non_exhaustive()
    }
}

/// Undelivered async events kept per context; beyond this the oldest are
/// dropped (CQ errors are also remembered in `cq_errors`).
const MAX_PENDING_ASYNC: usize = 4096;

impl CtxInner {
    /// `ibv_dealloc_mw(mw)`: an inline of verbs.h, through the context's ops
    /// table (layout-tested: `dealloc_mw` at `OPS_DEALLOC_MW`).
    ///
    /// # Safety
    /// `mw` is a live window of this context, not used afterwards.
    unsafe fn dealloc_mw(&self, mw: *mut ibv_mw) -> c_int {
        type DeallocMw = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
        // SAFETY: a live context; its `dealloc_mw` has that signature (verbs.h).
        unsafe {
            let f = (*self.ctx).ops[OPS_DEALLOC_MW];
            std::mem::transmute::<*mut c_void, DeallocMw>(f)(mw)
        }
    }
}

impl Drop for CtxInner {
    fn drop(&mut self) {
        // Windows are freed by their handles; any left (none, unless one
        // was leaked) go before the context.
        let left: Vec<_> = self.mws.borrow_mut().drain().map(|(_, mw)| mw).collect();
        for mw in left {
            // SAFETY: a window of this live context, freed once (drained).
            unsafe { self.dealloc_mw(mw) };
        }
        // SAFETY: opened by ibv_open_device, closed once, after every object
        // created from it (they all hold this Rc).
        unsafe { (self.rdma.close_device)(self.ctx) };
    }
}

/// An opened mlx5 device: `Backend::Context` of [`Hw`].
#[derive(Debug)]
pub struct HwContext {
    inner: Rc<CtxInner>,
}

/// A protection domain.
#[derive(Debug)]
pub struct HwPd {
    ctx: Rc<CtxInner>,
    pd: *mut ibv_pd,
}
/// A registered memory region.
#[derive(Debug)]
pub struct HwMr {
    ctx: Rc<CtxInner>,
    mr: *mut ibv_mr,
}
/// A completion queue (DV-owned after `mlx5dv_init_obj`: rdma-core no
/// longer touches its CQEs).
#[derive(Debug)]
pub struct HwCq {
    ctx: Rc<CtxInner>,
    cq: *mut ibv_cq,
    uar: HwUar,
    /// The CQN, pointed at by the CQ's `cq_context` (how a channel event
    /// names its CQ).
    _cqn: Box<u32>,
}

/// A completion channel (`ibv_comp_channel`), its descriptor non-blocking.
#[derive(Debug)]
pub struct HwChannel {
    ctx: Rc<CtxInner>,
    ch: *mut ibv_comp_channel,
}

impl Drop for HwChannel {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel of this context, destroyed once
        // (after its CQs: they hold the channel alive in the front-end).
        let _ = unsafe { (self.ctx.rdma.destroy_comp_channel)(self.ch) };
    }
}
/// A shared receive queue.
#[derive(Debug)]
pub struct HwSrq {
    ctx: Rc<CtxInner>,
    srq: *mut ibv_srq,
    /// The SRQN, pointed at by the SRQ's `srq_context` (how an async event
    /// names its SRQ).
    _srqn: Box<u32>,
}
/// A queue pair (RC, UD, DCI or DCT).
#[derive(Debug)]
pub struct HwQp {
    ctx: Rc<CtxInner>,
    qp: *mut ibv_qp,
    kind: QpKind,
    /// The port given at RESET→INIT (the AV of INIT→RTR needs it).
    port: Cell<u8>,
}

macro_rules! destroy_on_drop {
    ($t:ty, $field:ident, $f:ident) => {
        impl Drop for $t {
            fn drop(&mut self) {
                // SAFETY: created by the matching verb of this context's
                // library and destroyed once. An error (EBUSY when the
                // caller broke the drop order) cannot be reported from drop;
                // the object then leaks inside rdma-core.
                let _ = unsafe { (self.ctx.rdma.$f)(self.$field) };
            }
        }
    };
}
destroy_on_drop!(HwPd, pd, dealloc_pd);
destroy_on_drop!(HwMr, mr, dereg_mr);
destroy_on_drop!(HwCq, cq, destroy_cq);
destroy_on_drop!(HwSrq, srq, destroy_srq);
destroy_on_drop!(HwQp, qp, destroy_qp);

impl HwMr {
    /// `(lkey, rkey)`.
    pub fn keys(&self) -> (u32, u32) {
        // SAFETY: a live MR returned by ibv_reg_mr.
        unsafe { ((*self.mr).lkey, (*self.mr).rkey) }
    }
}

impl HwQp {
    /// The QP number as libibverbs has it now (a DCT's changes at RTR).
    pub fn qp_num(&self) -> u32 {
        // SAFETY: a live QP; qp_num is a plain field of the public prefix,
        // last written by libmlx5 during a previous (completed) call.
        unsafe { ptr::addr_of!((*self.qp).qp_num).read() }
    }
    /// The state libibverbs recorded at the last `ibv_modify_qp` (errors
    /// reported through CQEs do not change it).
    pub fn ibv_state(&self) -> crate::decode::QpStateRaw {
        // SAFETY: as in `qp_num`.
        crate::decode::QpStateRaw::from_raw(unsafe { ptr::addr_of!((*self.qp).state).read() })
    }
    /// The transport this QP was created for.
    pub fn kind(&self) -> QpKind {
        self.kind
    }
}

impl HwContext {
    /// `ibv_query_device` in Rust types, with the mlx5dv capabilities.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// Everything about `port` (1-based), for tools like `devinfo`.
    pub fn port_details(&self, port: u8) -> Result<PortDetails, HwError> {
        self.inner.port_details(port)
    }
}

fn mlx5dv_obj_empty() -> mlx5dv_obj {
    fn pair<I, O>() -> mlx5dv_obj_pair<I, O> {
        mlx5dv_obj_pair { r#in: ptr::null_mut(), out: ptr::null_mut() }
    }
    mlx5dv_obj { qp: pair(), cq: pair(), srq: pair(), rwq: pair(), dm: pair(), ah: pair(), pd: pair() }
}

fn unsupported(op: &'static str, what: String) -> HwError {
    HwError::Unsupported { op, what }
}

impl CtxInner {
    fn open(dev: &HwDevice) -> Result<Rc<CtxInner>, HwError> {
        let rdma = dev.list.rdma.clone();
        if !dev.mlx5 {
            return Err(HwError::NotMlx5 { name: dev.name.clone() });
        }
        // SAFETY: dev is a device of a live list.
        let ctx = non_null("ibv_open_device", unsafe { (rdma.open_device)(dev.dev) })?;
        let mut inner = CtxInner {
            rdma,
            ctx,
            info: DeviceInfo {
                name: dev.name.clone(),
                fw_ver: String::new(),
                node_guid_be: 0,
                vendor_id: 0,
                vendor_part_id: 0,
                hw_ver: 0,
                phys_port_cnt: 0,
                max_qp: 0,
                max_qp_wr: 0,
                max_sge: 0,
                max_cqe: 0,
                max_srq_wr: 0,
                max_qp_rd_atom: 0,
                max_qp_init_rd_atom: 0,
                mlx5: Mlx5Caps {
                    version: 0,
                    flags: 0,
                    cqe_comp: None,
                    dc_odp_caps: None,
                    dci_streams: None,
                    max_dc_rd_atom: None,
                    num_lag_ports: None,
                },
            },
            caps: DeviceCaps {
                max_qp_wr: 0,
                max_sge: 0,
                max_cqe: 0,
                max_wqe_sz_sq: 0,
                bf_size: 0,
                max_rd_atomic: 0,
                dc: false,
            },
            sgid_cache: Default::default(),
            async_pending: Default::default(),
            cq_errors: Default::default(),
            fatal: Default::default(),
            mws: Default::default(),
        };
        // From here on, an error closes the context (CtxInner's drop).
        // SAFETY: all-integer C struct: zero is a valid value.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a properly sized out-struct.
        check("ibv_query_device", unsafe { (inner.rdma.query_device)(ctx, &mut attr) })?;
        // SAFETY: integers and one pointer: zero is valid.
        let mut dv: mlx5dv_context_ext = unsafe { std::mem::zeroed() };
        dv.base.comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION
            | MLX5DV_CONTEXT_MASK_DC_ODP_CAPS
            | MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS
            | MLX5DV_CONTEXT_MASK_DCI_STREAMS
            | MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM;
        // SAFETY: a live context; the struct is the v44 one plus the tail
        // newer releases fill for MAX_DC_RD_ATOM (see `mlx5dv_context_ext`).
        check("mlx5dv_query_device", unsafe {
            (inner.rdma.dv_query_device)(ctx, &mut dv as *mut mlx5dv_context_ext as *mut mlx5dv_context)
        })?;
        inner.info = device_info(&dev.name, &attr, &dv);
        inner.caps = device_caps(&attr);
        inner.sgid_cache = std::cell::RefCell::new(vec![None; attr.phys_port_cnt as usize + 1]);
        // SAFETY: a live context (the prefix up to async_fd is layout-tested).
        set_nonblocking(unsafe { (*ctx).async_fd }).map_err(|_| HwError::Verbs {
            op: "fcntl(async_fd, O_NONBLOCK)",
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        })?;
        Ok(Rc::new(inner))
    }

    /// Reads every pending async event (the fd is non-blocking), acknowledges
    /// it at once (so destroying its object never waits) and queues it.
    fn drain_async(&self) -> Result<()> {
        use crate::async_events::{element, to_event, Element};
        loop {
            // SAFETY: pointers and integers: zero is valid.
            let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
            // SAFETY: a live context with a non-blocking async fd.
            if unsafe { (self.rdma.get_async_event)(self.ctx, &mut ev) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    return Ok(());
                }
                return Err(Error::Verbs {
                    op: "ibv_get_async_event",
                    errno: e.raw_os_error().unwrap_or(0),
                    msg: e.to_string(),
                });
            }
            // SAFETY: the union member the event type names; the objects are
            // live until acknowledged (rdma-core's destroy waits for the ack).
            let num = unsafe {
                match element(ev.event_type) {
                    Element::Cq => object_number((*ev.element.cq).cq_context),
                    Element::Qp => (*ev.element.qp).qp_num,
                    Element::Srq => object_number((*ev.element.srq).srq_context),
                    Element::Port => ev.element.port_num as u32,
                    Element::None => 0,
                }
            };
            // SAFETY: an event returned by ibv_get_async_event, acked once.
            unsafe { (self.rdma.ack_async_event)(&mut ev) };
            let event = to_event(ev.event_type, num);
            if event == mlx5_api::AsyncEvent::DeviceFatal {
                self.fatal.set(true);
            }
            if let mlx5_api::AsyncEvent::CqError { cqn } = event {
                let mut errs = self.cq_errors.borrow_mut();
                if !errs.contains(&cqn) {
                    errs.push(cqn);
                }
            }
            let mut q = self.async_pending.borrow_mut();
            if q.len() == MAX_PENDING_ASYNC {
                q.pop_front();
            }
            q.push_back(event);
        }
    }

    fn port_dir(&self, port: u8) -> std::path::PathBuf {
        gid::port_dir(&sysfs_ib(), &self.info.name, port)
    }

    /// GID `index` of `port`. Through `_ibv_query_gid_ex` when rdma-core has
    /// it: its failure carries the errno (`ENODATA` for an empty entry reads
    /// as the zero GID, as `ibv_query_gid` does). `ibv_query_gid` itself
    /// returns -1 without setting errno: that failure is reported as such,
    /// not as a stale or invented errno.
    fn query_gid(&self, port: u8, index: u8) -> Result<[u8; 16], HwError> {
        if let Some(ex) = self.rdma.query_gid_ex {
            let mut e = ibv_gid_entry::default();
            // SAFETY: a live context and an out-struct of the size passed.
            let r = unsafe {
                ex(self.ctx, u32::from(port), u32::from(index), &mut e, 0, size_of::<ibv_gid_entry>())
            };
            return match r {
                0 => Ok(e.gid.raw),
                libc::ENODATA => Ok([0; 16]),
                r => Err(HwError::Verbs { op: "ibv_query_gid_ex", errno: crate::error::errno_from_ret(r) }),
            };
        }
        let mut g = ibv_gid::default();
        // SAFETY: a live context and a 16-byte out-union.
        match unsafe { (self.rdma.query_gid)(self.ctx, port, index as c_int, &mut g) } {
            0 => Ok(g.raw),
            _ => Err(HwError::NoErrno {
                op: "ibv_query_gid",
                reason: format!("port {port} GID index {index} could not be read (rdma-core gives no errno)"),
            }),
        }
    }

    /// The RoCE v2 GID index of `port` (cached, revalidated), or 0.
    fn roce_sgid_index(&self, port: u8, tbl_len: i32) -> u8 {
        let dir = self.port_dir(port);
        let cached = self.sgid_cache.borrow().get(port as usize).copied().flatten();
        if let Some(i) = cached {
            if gid::still_roce_v2(&dir, i as u32) {
                return i;
            }
        }
        let tbl = gid::read_gid_table(&dir, tbl_len.clamp(0, 256) as u32);
        let chosen = gid::select_roce_v2(&tbl).and_then(|i| u8::try_from(i).ok());
        if let Some(slot) = self.sgid_cache.borrow_mut().get_mut(port as usize) {
            *slot = chosen;
        }
        chosen.unwrap_or(0)
    }

    fn port_details(&self, port: u8) -> Result<PortDetails, HwError> {
        if port == 0 || port > self.info.phys_port_cnt {
            return Err(HwError::Verbs { op: "ibv_query_port", errno: libc::EINVAL });
        }
        // SAFETY: integers only.
        let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context; the exported symbol fills the compat
        // prefix of the zeroed full struct.
        check("ibv_query_port", unsafe { (self.rdma.query_port)(self.ctx, port, &mut pa) })?;
        let link_layer = LinkLayerRaw::from_raw(pa.link_layer);
        let gid0 = self.query_gid(port, 0)?;
        let (sgid_index, mac) = match link_layer {
            LinkLayerRaw::Ethernet => {
                let i = self.roce_sgid_index(port, pa.gid_tbl_len);
                let mac = gid::roce_mac(&self.port_dir(port), &sysfs_net(), i as u32);
                (i, mac.unwrap_or([0; 6]))
            }
            _ => (0, [0; 6]),
        };
        let sgid = if sgid_index == 0 { gid0 } else { self.query_gid(port, sgid_index)? };
        Ok(PortDetails {
            grh_required: pa.flags & IBV_QPF_GRH_REQUIRED != 0,
            port_num: port,
            state: PortState::from_raw(pa.state),
            phys_state: pa.phys_state,
            lid: pa.lid,
            sm_lid: pa.sm_lid,
            lmc: pa.lmc,
            link_layer,
            active_mtu: mtu_to_bytes(pa.active_mtu),
            max_mtu: mtu_to_bytes(pa.max_mtu),
            gid_tbl_len: pa.gid_tbl_len,
            gid0,
            sgid_index,
            sgid,
            mac,
        })
    }

    fn local_path(&self, port: u8) -> Result<LocalPath> {
        let d = self.port_details(port)?;
        let link = d.link_layer.to_api().ok_or(Error::Backend {
            op: "ibv_query_port",
            reason: Box::new(mlx5_api::BackendError::UnknownPortAttr { port, what: "link layer" }),
        })?;
        Ok(LocalPath {
            port,
            link,
            lid: d.lid,
            sgid_index: d.sgid_index,
            sgid: d.sgid,
            grh_required: d.grh_required,
        })
    }
}

fn device_info(name: &str, a: &ibv_device_attr, dv: &mlx5dv_context_ext) -> DeviceInfo {
    let m = dv.base.comp_mask;
    let has = |bit: u64| m & bit != 0;
    DeviceInfo {
        name: name.to_string(),
        fw_ver: c_string(&a.fw_ver),
        node_guid_be: a.node_guid,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        phys_port_cnt: a.phys_port_cnt,
        max_qp: a.max_qp,
        max_qp_wr: a.max_qp_wr,
        max_sge: a.max_sge,
        max_cqe: a.max_cqe,
        max_srq_wr: a.max_srq_wr,
        max_qp_rd_atom: a.max_qp_rd_atom,
        max_qp_init_rd_atom: a.max_qp_init_rd_atom,
        mlx5: Mlx5Caps {
            version: dv.base.version,
            flags: dv.base.flags,
            cqe_comp: has(MLX5DV_CONTEXT_MASK_CQE_COMPRESION)
                .then_some((dv.base.cqe_comp_caps.max_num, dv.base.cqe_comp_caps.supported_format)),
            dc_odp_caps: has(MLX5DV_CONTEXT_MASK_DC_ODP_CAPS).then_some(dv.base.dc_odp_caps),
            dci_streams: has(MLX5DV_CONTEXT_MASK_DCI_STREAMS).then_some((
                dv.base.dci_streams_caps.max_log_num_concurent,
                dv.base.dci_streams_caps.max_log_num_errored,
            )),
            max_dc_rd_atom: has(MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM)
                .then_some((dv.max_dc_rd_atom, dv.max_dc_init_rd_atom)),
            num_lag_ports: has(MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS).then_some(dv.base.num_lag_ports),
        },
    }
}

/// The front-end's limits from `ibv_device_attr`.
///
/// * `max_wqe_sz_sq`: rdma-core does not export the device's
///   `max_sq_desc_sz`; the kernel derives `max_sge` from
///   `min(max_wqe_sz_sq, 512)` as `(desc - ctrl - raddr) / 16`, so
///   `32 + 16 * max_sge` (512 on every ConnectX) is a size the device is
///   known to accept. Capped at 1008 (63 DS).
/// * `bf_size`: 0 here — BlueFlame is per QP (`bf.size` from
///   `mlx5dv_init_obj`, in [`QpResources::bf_size`], which the send queue
///   uses); v44 has no device-level flag for it.
/// * `max_rd_atomic`: the smaller of responder and initiator depths.
/// * `dc`: false on the parts of [`crate::dc_parts::NO_DC_PARTS`] (ConnectX-4 Lx).
fn device_caps(a: &ibv_device_attr) -> DeviceCaps {
    let nonneg = |v: c_int| u32::try_from(v).unwrap_or(0);
    DeviceCaps {
        max_qp_wr: nonneg(a.max_qp_wr),
        max_sge: nonneg(a.max_sge),
        max_cqe: nonneg(a.max_cqe),
        max_wqe_sz_sq: (32 + 16 * nonneg(a.max_sge)).min(1008),
        bf_size: 0,
        max_rd_atomic: nonneg(a.max_qp_rd_atom.min(a.max_qp_init_rd_atom)).min(255) as u8,
        dc: !crate::dc_parts::NO_DC_PARTS.contains(&a.vendor_part_id),
    }
}

/// Check what `mlx5dv_init_obj` gave for a CQ against what the front-end
/// can drive.
pub fn check_cq(dv: &mlx5dv_cq, cqe_size: u32) -> Result<CqResources, HwError> {
    const OP: &str = "mlx5dv_init_obj(CQ)";
    if dv.cqe_size != cqe_size {
        return Err(unsupported(
            OP,
            format!("the CQ has {}-byte CQEs, {cqe_size}-byte ones were asked for", dv.cqe_size),
        ));
    }
    if dv.cq_uar.is_null() {
        return Err(unsupported(OP, "NULL CQ UAR page".into()));
    }
    if !dv.cqe_cnt.is_power_of_two() {
        return Err(unsupported(OP, format!("cqe_cnt {} is not a power of two", dv.cqe_cnt)));
    }
    if dv.buf.is_null() || dv.dbrec.is_null() {
        return Err(unsupported(OP, "NULL CQ buffer or doorbell record".into()));
    }
    Ok(CqResources {
        buf: dv.buf as *mut u8,
        cqe_cnt: dv.cqe_cnt,
        cqe_size: dv.cqe_size,
        dbrec: dv.dbrec,
        cq_uar: dv.cq_uar as *mut u8,
        cqn: dv.cqn,
    })
}

/// Check what `mlx5dv_init_obj` gave for an SRQ. rdma-core initialises the
/// next-WQE list with head 0 and tail `wqe_cnt - 1`; `mlx5dv_srq` has no
/// count, so it is `tail + 1`.
pub fn check_srq(dv: &mlx5dv_srq) -> Result<SrqResources, HwError> {
    const OP: &str = "mlx5dv_init_obj(SRQ)";
    if dv.comp_mask & MLX5DV_SRQ_MASK_SRQN == 0 {
        return Err(unsupported(OP, "the library did not report the SRQ number".into()));
    }
    let wqe_cnt = dv.tail.wrapping_add(1);
    if dv.head != 0 || !wqe_cnt.is_power_of_two() {
        return Err(unsupported(OP, format!("unexpected free list head {} tail {}", dv.head, dv.tail)));
    }
    if !dv.stride.is_power_of_two() || dv.stride < 32 {
        return Err(unsupported(OP, format!("WQE stride {} is not a power of two >= 32", dv.stride)));
    }
    if dv.buf.is_null() || dv.dbrec.is_null() {
        return Err(unsupported(OP, "NULL SRQ buffer or doorbell record".into()));
    }
    Ok(SrqResources { srqn: dv.srqn, buf: dv.buf as *mut u8, wqe_cnt, stride: dv.stride, dbrec: dv.dbrec })
}

/// The ring geometry of a QP from `mlx5dv_init_obj`, checked. The front-end
/// uses these values, not the ones it asked for: rdma-core sizes the rings.
pub fn check_qp(dv: &mlx5dv_qp) -> Result<(), HwError> {
    const OP: &str = "mlx5dv_init_obj(QP)";
    if dv.sq.wqe_cnt != 0 && (dv.sq.stride != 64 || !dv.sq.wqe_cnt.is_power_of_two()) {
        return Err(unsupported(
            OP,
            format!("SQ of {} WQEBBs of stride {} (need a power of two, 64)", dv.sq.wqe_cnt, dv.sq.stride),
        ));
    }
    if dv.rq.wqe_cnt != 0 && (!dv.rq.wqe_cnt.is_power_of_two() || !dv.rq.stride.is_power_of_two()) {
        return Err(unsupported(OP, format!("RQ of {} WQEs of stride {}", dv.rq.wqe_cnt, dv.rq.stride)));
    }
    if dv.dbrec.is_null() || dv.bf.reg.is_null() {
        return Err(unsupported(OP, "NULL doorbell record or doorbell register".into()));
    }
    if dv.bf.size != 0 && !dv.bf.size.is_power_of_two() {
        return Err(unsupported(OP, format!("bf.size {} is not a power of two", dv.bf.size)));
    }
    Ok(())
}

/// The `ibv_cq_init_attr_ex` and `mlx5dv_cq_init_attr` of a CQ to create
/// (pure: context pointer and channel are filled in by the caller): the
/// CQE size always explicit (`MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`, so the
/// `MLX5_CQE_SIZE` environment variable cannot change it under us), CQE
/// compression with its mini-CQE format when asked and the device's
/// `cqe_comp_caps` allow it (64-byte CQEs only).
pub fn cq_init_attrs(
    attr: &CqCreate,
    caps: &Mlx5Caps,
) -> Result<(ibv_cq_init_attr_ex, mlx5dv_cq_init_attr), HwError> {
    const OP: &str = "mlx5dv_create_cq";
    if attr.cqe_size != 64 && attr.cqe_size != 128 {
        return Err(unsupported(OP, format!("CQE size {}", attr.cqe_size)));
    }
    let mut dv = mlx5dv_cq_init_attr {
        comp_mask: MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
        cqe_size: attr.cqe_size as u16,
        ..Default::default()
    };
    if let Some(f) = attr.compression {
        let bit = match f {
            mlx5_api::ring::mini_format::CSUM => MLX5DV_CQE_RES_FORMAT_CSUM,
            _ => MLX5DV_CQE_RES_FORMAT_HASH,
        };
        match caps.cqe_comp {
            Some((max, formats)) if max > 0 && formats & bit != 0 => {}
            Some((max, formats)) => {
                return Err(unsupported(
                    OP,
                    format!("CQE compression format {bit:#x} not in the device's caps (max_num {max}, formats {formats:#x})"),
                ))
            }
            None => return Err(unsupported(OP, "the device reports no CQE compression".into())),
        }
        if attr.cqe_size != 64 {
            return Err(unsupported(OP, "CQE compression with 128-byte CQEs".into()));
        }
        dv.comp_mask |= MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE;
        dv.cqe_comp_res_format = bit as u8;
    }
    let ex = ibv_cq_init_attr_ex {
        cqe: attr.cqe,
        cq_context: ptr::null_mut(),
        channel: ptr::null_mut(),
        comp_vector: 0,
        wc_flags: 0,
        comp_mask: 0,
        flags: 0,
        parent_domain: ptr::null_mut(),
    };
    Ok((ex, dv))
}

/// The `ibv_qp_init_attr_ex` and `mlx5dv_qp_init_attr` of a QP to create
/// (pure: CQ/SRQ/PD pointers are filled in by the caller).
///
/// * RC and UD: `IBV_QPT_RC` / `IBV_QPT_UD` with
///   `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE` (the front-end never
///   decodes data placed in a CQE);
/// * DCI / DCT: `IBV_QPT_DRIVER` with `MLX5DV_QP_INIT_ATTR_MASK_DC`; a DCI
///   has no receive queue, a DCT no queues at all (it receives on the SRQ
///   and carries the DC access key). Scatter-to-CQE never applies to them
///   with 64-byte CQEs and `sq_sig_all = 0` (spec §5.7).
/// * `sq_sig_all = 0`: the front-end signals per WQE.
pub fn qp_init_attrs(attr: &QpCreate) -> Result<(ibv_qp_init_attr_ex, mlx5dv_qp_init_attr), HwError> {
    let c = &attr.caps;
    let mut cap = ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    };
    let mut dv = mlx5dv_qp_init_attr::default();
    let qp_type = match attr.kind {
        QpKind::Rc | QpKind::Ud => {
            dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
            // Scatter-to-CQE on request only; ALLOW extends it to the
            // requester although the front-end signals per WQE (spec §5.7).
            dv.create_flags = if attr.scatter_to_cqe {
                MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE
            } else {
                MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE
            };
            if attr.kind == QpKind::Rc {
                IBV_QPT_RC
            } else {
                IBV_QPT_UD
            }
        }
        QpKind::Dci => {
            dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
            dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
            cap.max_recv_wr = 0;
            cap.max_recv_sge = 0;
            IBV_QPT_DRIVER
        }
        QpKind::Dct => {
            dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
            dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
            dv.dc_init_attr.dct_access_key = attr.dc_key;
            cap = ibv_qp_cap::default();
            IBV_QPT_DRIVER
        }
        k => return Err(unsupported("create_qp", format!("QP kind {k:?}"))),
    };
    let ex = ibv_qp_init_attr_ex {
        qp_context: ptr::null_mut(),
        send_cq: ptr::null_mut(),
        recv_cq: ptr::null_mut(),
        srq: ptr::null_mut(),
        cap,
        qp_type,
        sq_sig_all: 0,
        comp_mask: IBV_QP_INIT_ATTR_PD,
        pd: ptr::null_mut(),
        xrcd: ptr::null_mut(),
        create_flags: 0,
        max_tso_header: 0,
        rwq_ind_tbl: ptr::null_mut(),
        rx_hash_conf: ibv_rx_hash_conf {
            rx_hash_function: 0,
            rx_hash_key_len: 0,
            rx_hash_key: ptr::null_mut(),
            rx_hash_fields_mask: 0,
        },
        source_qpn: 0,
        send_ops_flags: 0,
    };
    let mut ex = ex;
    // Name the operations the front-end posts, so that rdma-core's send-WQE
    // overhead (`_sq_overhead`) leaves out the memory-window / UMR room it
    // reserves otherwise: the front-end's `sizing` computes the same sizes.
    // A DCT has no send queue (perftest clears the flag there too).
    if let Some(ops) = send_ops(attr.kind) {
        ex.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        ex.send_ops_flags = ops;
    }
    Ok((ex, dv))
}

/// A DCI / DCT the device refuses with `EOPNOTSUPP` has no DC (a part not
/// yet in [`crate::dc_parts::NO_DC_PARTS`]): the same typed error as there.
fn dc_unsupported(kind: QpKind, e: HwError) -> Error {
    match (kind, &e) {
        (QpKind::Dci | QpKind::Dct, HwError::Verbs { errno, .. }) if *errno == libc::EOPNOTSUPP => {
            Error::Unsupported(mlx5_api::Unsupported::DcTransport)
        }
        _ => e.into(),
    }
}

/// The `send_ops_flags` of a QP kind: what the WQE builder can post on it.
pub fn send_ops(kind: QpKind) -> Option<u64> {
    const RDMA_AND_ATOMICS: u64 = IBV_QP_EX_WITH_SEND
        | IBV_QP_EX_WITH_SEND_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | IBV_QP_EX_WITH_RDMA_READ
        | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
        | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    match kind {
        QpKind::Rc => Some(RDMA_AND_ATOMICS | IBV_QP_EX_WITH_SEND_WITH_INV),
        QpKind::Dci => Some(RDMA_AND_ATOMICS),
        QpKind::Ud => Some(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM),
        _ => None,
    }
}

/// The CQN / SRQN a CQ's or SRQ's user context points at (this backend
/// sets it at creation); 0 for an object made elsewhere (null context).
///
/// # Safety
/// `ctx` is null or points at a live `u32`.
unsafe fn object_number(ctx: *mut c_void) -> u32 {
    let p = ctx as *const u32;
    if p.is_null() {
        0
    } else {
        // SAFETY: not null, so a live `u32` (caller contract).
        unsafe { *p }
    }
}

/// Makes a descriptor rdma-core owns non-blocking (its documented way to
/// poll a channel or the async fd).
fn set_nonblocking(fd: c_int) -> Result<()> {
    // SAFETY: fcntl on an open descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::Verbs {
            op: "fcntl(O_NONBLOCK)",
            errno: e.raw_os_error().unwrap_or(0),
            msg: e.to_string(),
        });
    }
    Ok(())
}

impl Backend for Hw {
    type Device = HwDevice;
    type Context = HwContext;
    type Pd = HwPd;
    type Mr = HwMr;
    type Cq = HwCq;
    type Qp = HwQp;
    type Srq = HwSrq;
    type Uar = HwUar;
    type Channel = HwChannel;

    fn device_name(dev: &HwDevice) -> String {
        dev.name.clone()
    }

    fn open(dev: &HwDevice) -> Result<HwContext> {
        Ok(HwContext { inner: CtxInner::open(dev)? })
    }

    fn query_port(ctx: &HwContext, port: u8) -> Result<PortInfo> {
        let d = ctx.inner.port_details(port)?;
        let link_layer = d.link_layer.to_api().ok_or(Error::Backend {
            op: "ibv_query_port",
            reason: Box::new(mlx5_api::BackendError::UnknownPortAttr { port, what: "link layer" }),
        })?;
        let active_mtu = d.active_mtu.ok_or(Error::Backend {
            op: "ibv_query_port",
            reason: Box::new(mlx5_api::BackendError::UnknownPortAttr { port, what: "active MTU" }),
        })?;
        Ok(PortInfo {
            port_num: port,
            lid: d.lid,
            gid: mlx5_api::Gid(d.sgid),
            sgid_index: d.sgid_index,
            mac: d.mac,
            link_layer,
            active_mtu,
            grh_required: d.grh_required,
        })
    }

    fn device_caps(ctx: &HwContext) -> DeviceCaps {
        ctx.inner.caps.clone()
    }

    fn create_av(
        ctx: &HwContext,
        pd: &HwPd,
        port: u8,
        remote: &mlx5_api::RemoteQpInfo,
    ) -> Result<mlx5_api::AddressVector> {
        let c = &ctx.inner;
        let mut attr = masks::ah_attr(&c.local_path(port)?, remote)?;
        // SAFETY: a live PD and an attribute struct that outlives the call.
        let ah = non_null("ibv_create_ah", unsafe { (c.rdma.create_ah)(pd.pd, &mut attr) })?;
        let mut out = mlx5dv_ah { av: ptr::null_mut(), comp_mask: 0 };
        // SAFETY: integers and null pointers only.
        let mut obj: mlx5dv_obj = unsafe { std::mem::zeroed() };
        obj.ah = mlx5dv_obj_pair { r#in: ah, out: &mut out };
        // SAFETY: a live AH and an out-struct that outlives the call.
        let r = check("mlx5dv_init_obj(AH)", unsafe { (c.rdma.dv_init_obj)(&mut obj, MLX5DV_OBJ_AH) });
        let av = r.and_then(|()| {
            if out.av.is_null() {
                return Err(HwError::Unsupported {
                    op: "mlx5dv_init_obj(AH)",
                    what: "no address vector".into(),
                });
            }
            let mut bytes = [0u8; 48];
            // SAFETY: `av` points at the AH's 48-byte `struct mlx5_wqe_av`, live until
            // the AH is destroyed below.
            unsafe { ptr::copy_nonoverlapping(out.av, bytes.as_mut_ptr(), 48) };
            Ok(mlx5_api::AddressVector::from_bytes(bytes))
        });
        // The AV is copied into each WQE: the AH itself is not needed afterwards.
        // SAFETY: the AH created above, destroyed once.
        let d = check("ibv_destroy_ah", unsafe { (c.rdma.destroy_ah)(ah) });
        let av = av?;
        d?;
        Ok(av)
    }

    fn alloc_pd(ctx: &HwContext) -> Result<HwPd> {
        let c = &ctx.inner;
        // SAFETY: a live context.
        let pd = non_null("ibv_alloc_pd", unsafe { (c.rdma.alloc_pd)(c.ctx) })?;
        Ok(HwPd { ctx: c.clone(), pd })
    }

    unsafe fn reg_mr(
        ctx: &HwContext,
        pd: &HwPd,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<(HwMr, u32, u32)> {
        let c = &ctx.inner;
        let flags = (access.bits() & 0x5f) as c_int; // with MW_BIND and ON_DEMAND
                                                     // SAFETY: a live PD; the memory outlives the MR (caller contract).
        let mr = non_null("ibv_reg_mr", unsafe { (c.rdma.reg_mr)(pd.pd, addr as *mut c_void, len, flags) })?;
        let mr = HwMr { ctx: c.clone(), mr };
        let (lkey, rkey) = mr.keys();
        Ok((mr, lkey, rkey))
    }

    /// Memory windows through libmlx5 (`ibv_alloc_mw`, the context's ops
    /// table: verbs.h inlines it); indirect mkeys need a DEVX context
    /// (`mlx5dv_create_mkey`), which this backend does not open:
    /// `Unsupported`.
    fn alloc_mkey(ctx: &HwContext, pd: &HwPd, kind: mlx5_api::MkeyKind) -> Result<u32> {
        let ty = match kind {
            mlx5_api::MkeyKind::Window1 => 1,
            mlx5_api::MkeyKind::Window2 => 2,
            mlx5_api::MkeyKind::Indirect { .. } => {
                return Err(Error::Unsupported(mlx5_api::Unsupported::Mkeys));
            }
        };
        let c = &ctx.inner;
        // SAFETY: a live context; `ops` is libibverbs' `struct ibv_context_ops`
        // (layout-tested: `alloc_mw` at OPS_ALLOC_MW).
        let f = unsafe { (*c.ctx).ops[OPS_ALLOC_MW] };
        if f.is_null() {
            return Err(Error::Unsupported(mlx5_api::Unsupported::Mkeys));
        }
        type AllocMw = unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw;
        // SAFETY: the provider's `alloc_mw`, of that signature (verbs.h).
        let alloc: AllocMw = unsafe { std::mem::transmute::<*mut c_void, AllocMw>(f) };
        // SAFETY: a live PD.
        let mw = non_null("ibv_alloc_mw", unsafe { alloc(pd.pd, ty) })?;
        // SAFETY: the window libmlx5 just returned.
        let rkey = unsafe { (*mw).rkey };
        c.mws.borrow_mut().insert(rkey >> 8, mw);
        Ok(rkey)
    }

    fn dealloc_mkey(ctx: &HwContext, key: u32) -> Result<()> {
        let c = &ctx.inner;
        let Some(mw) = c.mws.borrow_mut().remove(&(key >> 8)) else {
            return Err(Error::Unsupported(mlx5_api::Unsupported::Mkeys));
        };
        // SAFETY: a window of this context, freed once (removed above).
        Ok(check("ibv_dealloc_mw", unsafe { c.dealloc_mw(mw) })?)
    }

    fn create_cq(
        ctx: &HwContext,
        attr: &CqCreate,
        channel: Option<&HwChannel>,
    ) -> Result<(HwCq, CqResources)> {
        let c = &ctx.inner;
        let mut cqn = Box::new(0u32);
        let (mut ex, mut dv) = cq_init_attrs(attr, &c.info.mlx5)?;
        ex.cq_context = (&mut *cqn as *mut u32).cast();
        ex.channel = channel.map_or(ptr::null_mut(), |ch| ch.ch);
        // SAFETY: a live context; attribute structs that outlive the call.
        let raw = unsafe { (c.rdma.dv_create_cq)(c.ctx, &mut ex, &mut dv) };
        let raw = non_null("mlx5dv_create_cq", raw)?;
        let mut out: mlx5dv_cq = mlx5dv_cq {
            buf: ptr::null_mut(),
            dbrec: ptr::null_mut(),
            cqe_cnt: 0,
            cqe_size: 0,
            cq_uar: ptr::null_mut(),
            cqn: 0,
            comp_mask: 0,
        };
        let mut obj = mlx5dv_obj_empty();
        obj.cq = mlx5dv_obj_pair { r#in: raw, out: &mut out };
        // SAFETY: a live CQ and an out-struct that outlives the call.
        let init = check("mlx5dv_init_obj(CQ)", unsafe { (c.rdma.dv_init_obj)(&mut obj, MLX5DV_OBJ_CQ) });
        // SAFETY: the page mlx5dv_init_obj reported (checked below before use).
        let uar = unsafe { HwUar::cq_page(out.cq_uar as *mut u8) };
        let mut cq = HwCq { ctx: c.clone(), cq: raw, uar, _cqn: cqn };
        init?;
        let res = check_cq(&out, attr.cqe_size)?;
        *cq._cqn = res.cqn;
        Ok((cq, res))
    }
    fn cq_uar(cq: &HwCq) -> &HwUar {
        &cq.uar
    }
    fn cq_in_error(cq: &HwCq) -> bool {
        // An error reading the async fd is reported by `async_event`; here
        // the CQ is only in error when the device said so.
        let _ = cq.ctx.drain_async();
        cq.ctx.cq_errors.borrow().contains(&*cq._cqn)
    }
    fn device_fatal(cq: &HwCq) -> bool {
        let _ = cq.ctx.drain_async();
        cq.ctx.fatal.get()
    }
    fn cq_async_fd(cq: &HwCq) -> Option<std::os::fd::RawFd> {
        // SAFETY: a live context (prefix layout-tested).
        Some(unsafe { (*cq.ctx.ctx).async_fd })
    }
    fn async_event(ctx: &HwContext) -> Result<Option<mlx5_api::AsyncEvent>> {
        ctx.inner.drain_async()?;
        Ok(ctx.inner.async_pending.borrow_mut().pop_front())
    }
    fn create_channel(ctx: &HwContext) -> Result<HwChannel> {
        let c = &ctx.inner;
        // SAFETY: a live context.
        let ch = non_null("ibv_create_comp_channel", unsafe { (c.rdma.create_comp_channel)(c.ctx) })?;
        let ch = HwChannel { ctx: c.clone(), ch };
        // SAFETY: a live channel; its fd is ours to make non-blocking (rdma-core's
        // documented way to poll a channel).
        set_nonblocking(unsafe { (*ch.ch).fd })?;
        Ok(ch)
    }
    fn channel_fd(ch: &HwChannel) -> std::os::fd::RawFd {
        // SAFETY: a live channel.
        unsafe { (*ch.ch).fd }
    }
    fn get_cq_event(ch: &HwChannel) -> Result<Option<u32>> {
        let mut cq: *mut ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: a live, non-blocking channel; out-pointers valid for the call.
        let r = unsafe { (ch.ctx.rdma.get_cq_event)(ch.ch, &mut cq, &mut cq_ctx) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error::Verbs {
                op: "ibv_get_cq_event",
                errno: e.raw_os_error().unwrap_or(0),
                msg: e.to_string(),
            });
        }
        // SAFETY: the event names a live CQ of ours (its context points at its CQN);
        // acknowledged at once so destroying the CQ never waits for it.
        unsafe {
            (ch.ctx.rdma.ack_cq_events)(cq, 1);
            Ok(Some(*(cq_ctx as *const u32)))
        }
    }

    fn create_srq(ctx: &HwContext, pd: &HwPd, attr: &SrqCreate) -> Result<(HwSrq, SrqResources)> {
        let c = &ctx.inner;
        let mut srqn = Box::new(0u32);
        let mut init = ibv_srq_init_attr {
            srq_context: (&mut *srqn as *mut u32).cast(),
            attr: ibv_srq_attr {
                max_wr: attr.wqe_cnt.saturating_sub(1),
                max_sge: attr.max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and an init struct that outlives the call.
        let raw = unsafe { (c.rdma.create_srq)(pd.pd, &mut init) };
        let mut srq = HwSrq { ctx: c.clone(), srq: non_null("ibv_create_srq", raw)?, _srqn: srqn };
        let mut out = mlx5dv_srq {
            buf: ptr::null_mut(),
            dbrec: ptr::null_mut(),
            stride: 0,
            head: 0,
            tail: 0,
            comp_mask: MLX5DV_SRQ_MASK_SRQN,
            srqn: 0,
        };
        let mut obj = mlx5dv_obj_empty();
        obj.srq = mlx5dv_obj_pair { r#in: srq.srq, out: &mut out };
        // SAFETY: a live SRQ and an out-struct that outlives the call.
        check("mlx5dv_init_obj(SRQ)", unsafe { (c.rdma.dv_init_obj)(&mut obj, MLX5DV_OBJ_SRQ) })?;
        let res = check_srq(&out)?;
        *srq._srqn = res.srqn;
        Ok((srq, res))
    }

    fn create_qp(
        ctx: &HwContext,
        pd: &HwPd,
        send_cq: Option<&HwCq>,
        recv_cq: &HwCq,
        srq: Option<&HwSrq>,
        attr: &QpCreate,
    ) -> Result<(HwQp, QpResources<HwUar>)> {
        let c = &ctx.inner;
        if attr.kind == QpKind::Dct && srq.is_none() {
            return Err(Error::InvalidArgument(mlx5_api::InvalidArgument::DctNeedsSrq));
        }
        if attr.dedicated_uar {
            // rdma-core gives a QP its own register through a thread domain
            // (ibv_alloc_td + a parent domain), which this backend does not
            // create yet: refuse rather than hand out a shared register.
            return Err(Error::Unsupported(mlx5_api::Unsupported::DedicatedUar));
        }
        let (mut ex, mut dv) = qp_init_attrs(attr)?;
        // A DCT has no send queue: its "send CQ" is its receive CQ (the
        // kernel wants one; nothing is ever reported there).
        ex.send_cq = send_cq.unwrap_or(recv_cq).cq;
        ex.recv_cq = recv_cq.cq;
        ex.srq = srq.map_or(ptr::null_mut(), |s| s.srq);
        ex.pd = pd.pd;
        // SAFETY: live context, PD, CQs and SRQ; both attribute structs
        // outlive the call.
        let raw = unsafe { (c.rdma.dv_create_qp)(c.ctx, &mut ex, &mut dv) };
        let qp = HwQp {
            ctx: c.clone(),
            qp: non_null("mlx5dv_create_qp", raw).map_err(|e| dc_unsupported(attr.kind, e))?,
            kind: attr.kind,
            port: Cell::new(0),
        };
        let qpn = qp.qp_num();
        let owner: Rc<dyn std::any::Any> = c.clone();
        if attr.kind == QpKind::Dct {
            // libmlx5 has no rings or doorbell register for a DCT (and
            // mlx5dv_init_obj would dereference its missing bfreg): there is
            // nothing for the front-end to drive.
            // SAFETY: a NULL register is never written (no send queue).
            let uar = unsafe { HwUar::new(ptr::null_mut(), 0, Some(owner)) };
            let res = QpResources {
                qpn,
                sq_buf: ptr::null_mut(),
                sq_wqe_cnt: 0,
                rq_buf: ptr::null_mut(),
                rq_wqe_cnt: 0,
                rq_stride: 0,
                dbrec: ptr::null_mut(),
                uar,
                bf_reg: ptr::null_mut(),
                bf_size: 0,
            };
            return Ok((qp, res));
        }
        let mut out = mlx5dv_qp {
            dbrec: ptr::null_mut(),
            sq: mlx5dv_qp_wq { buf: ptr::null_mut(), wqe_cnt: 0, stride: 0 },
            rq: mlx5dv_qp_wq { buf: ptr::null_mut(), wqe_cnt: 0, stride: 0 },
            bf: mlx5dv_qp_bf { reg: ptr::null_mut(), size: 0 },
            comp_mask: 0,
            uar_mmap_offset: 0,
            tirn: 0,
            tisn: 0,
            rqn: 0,
            sqn: 0,
            tir_icm_addr: 0,
        };
        let mut obj = mlx5dv_obj_empty();
        obj.qp = mlx5dv_obj_pair { r#in: qp.qp, out: &mut out };
        // SAFETY: a live QP and an out-struct that outlives the call.
        check("mlx5dv_init_obj(QP)", unsafe { (c.rdma.dv_init_obj)(&mut obj, MLX5DV_OBJ_QP) })?;
        check_qp(&out)?;
        // SAFETY: bf.reg is the QP's UAR register, mapped while the context
        // (kept alive by `owner`) is open, 2 * bf.size bytes (at least 8).
        let uar = unsafe { HwUar::new(out.bf.reg as *mut u8, out.bf.size, Some(owner)) };
        let res = QpResources {
            qpn,
            sq_buf: out.sq.buf as *mut u8,
            sq_wqe_cnt: out.sq.wqe_cnt,
            rq_buf: out.rq.buf as *mut u8,
            rq_wqe_cnt: out.rq.wqe_cnt,
            rq_stride: if out.rq.wqe_cnt == 0 { 16 } else { out.rq.stride },
            dbrec: out.dbrec,
            uar,
            bf_reg: out.bf.reg as *mut u8,
            bf_size: out.bf.size,
        };
        Ok((qp, res))
    }

    fn modify_qp(ctx: &HwContext, qp: &HwQp, t: &QpTransition) -> Result<()> {
        let c = &ctx.inner;
        // SAFETY: a live QP (plain field of the public prefix).
        let from = unsafe { ptr::addr_of!((*qp.qp).state).read() };
        let path = match t {
            QpTransition::Rtr { .. } if qp.kind != QpKind::Ud => c.local_path(qp.port.get())?,
            _ => LocalPath {
                port: qp.port.get(),
                link: LinkLayer::InfiniBand,
                lid: 0,
                sgid_index: 0,
                sgid: [0; 16],
                grh_required: false,
            },
        };
        let (mut a, mask) = masks::modify_attr(qp.kind, from, t, &path)?;
        // SAFETY: a live QP and an attribute struct that outlives the call.
        check("ibv_modify_qp", unsafe { (c.rdma.modify_qp)(qp.qp, &mut a, mask) })?;
        if let QpTransition::Init { port, .. } = t {
            qp.port.set(*port);
        }
        Ok(())
    }

    fn dct_number(_ctx: &HwContext, qp: &HwQp) -> Result<u32> {
        // libmlx5 writes the DCT number into ibv_qp.qp_num when INIT→RTR
        // creates the hardware DCT: read it live.
        match qp.qp_num() {
            0 => Err(Error::Backend {
                op: "dct_number",
                reason: Box::new(mlx5_api::BackendError::NoDctNumber),
            }),
            n => Ok(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_api::backend::QpCaps;

    #[test]
    fn device_list_classification() {
        // What this machine (no uverbs) returns: NULL and ENOSYS.
        assert_eq!(
            classify_device_list(true, 0, libc::ENOSYS),
            Err(HwError::NoDevice { errno: Some(libc::ENOSYS) })
        );
        // uverbs present, no device: an empty list.
        assert_eq!(classify_device_list(false, 0, 0), Err(HwError::NoDevice { errno: None }));
        assert_eq!(classify_device_list(false, -1, 0), Err(HwError::NoDevice { errno: None }));
        assert_eq!(classify_device_list(false, 2, 0), Ok(2));
        assert_eq!(
            classify_device_list(true, 0, libc::ENOMEM),
            Err(HwError::Verbs { op: "ibv_get_device_list", errno: libc::ENOMEM })
        );
    }

    /// The real library on this machine: no RDMA device is a typed error.
    /// Where rdma-core is missing the load error is typed instead; on a
    /// machine with devices the list must be well formed.
    #[test]
    fn real_device_list_without_hardware_is_no_device() {
        let has_sysfs_devices =
            std::fs::read_dir(sysfs_ib()).map(|mut d| d.next().is_some()).unwrap_or(false);
        match devices() {
            Err(HwError::NoDevice { .. }) => assert!(!has_sysfs_devices, "devices in sysfs but none listed"),
            Err(HwError::LibraryNotFound { .. }) => {}
            Err(HwError::NotMlx5 { name }) => assert!(has_sysfs_devices && !name.is_empty()),
            Ok(list) => {
                assert!(has_sysfs_devices);
                assert!(list.iter().all(|d| !d.name().is_empty()));
            }
            Err(e) => panic!("unexpected {e}"),
        }
        if !has_sysfs_devices {
            match device("mlx5_0") {
                Err(HwError::NoDevice { .. } | HwError::LibraryNotFound { .. }) => {}
                other => panic!("expected no device, got {:?}", other.err()),
            }
        }
    }

    #[test]
    fn caps_from_device_attr() {
        // SAFETY: integers only.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        a.max_qp_wr = 32768;
        a.max_sge = 30;
        a.max_cqe = (1 << 22) - 1;
        a.max_qp_rd_atom = 16;
        a.max_qp_init_rd_atom = 16;
        let c = device_caps(&a);
        assert_eq!(
            c,
            DeviceCaps {
                max_qp_wr: 32768,
                max_sge: 30,
                max_cqe: (1 << 22) - 1,
                max_wqe_sz_sq: 512,
                bf_size: 0,
                max_rd_atomic: 16,
                dc: true,
            }
        );
        a.max_sge = 100;
        a.max_qp_wr = -1;
        let c = device_caps(&a);
        assert_eq!((c.max_wqe_sz_sq, c.max_qp_wr), (1008, 0));
        // ConnectX-4 Lx (PCI 0x1015 = 4117) and its VF have no DC; ConnectX-5 (4119) has.
        for (part, dc) in [(4117, false), (4118, false), (4119, true), (4123, true)] {
            a.vendor_part_id = part;
            assert_eq!(device_caps(&a).dc, dc, "{part}");
        }
    }

    fn qp_create(kind: QpKind) -> QpCreate {
        QpCreate {
            kind,
            caps: QpCaps {
                max_send_wr: 64,
                max_recv_wr: 32,
                max_send_sge: 2,
                max_recv_sge: 3,
                max_inline_data: 128,
            },
            sq_wqe_cnt: 128,
            rq_wqe_cnt: 32,
            rq_stride: 64,
            user_index: 5,
            dc_key: 0xdc_dc,
            dedicated_uar: false,
            scatter_to_cqe: false,
        }
    }

    #[test]
    fn scatter_to_cqe_is_asked_for_or_disabled() {
        let mut a = qp_create(QpKind::Rc);
        let (_, dv) = qp_init_attrs(&a).unwrap();
        assert_eq!(dv.create_flags, MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE);
        a.scatter_to_cqe = true;
        let (_, dv) = qp_init_attrs(&a).unwrap();
        assert_eq!(dv.create_flags, MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE);
    }

    #[test]
    fn qp_creation_attributes() {
        let (ex, dv) = qp_init_attrs(&qp_create(QpKind::Rc)).unwrap();
        assert_eq!(ex.qp_type, IBV_QPT_RC);
        assert_eq!(ex.sq_sig_all, 0);
        assert_eq!(ex.comp_mask, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
        assert_eq!(ex.send_ops_flags, 0x27f, "SEND(+IMM, +INV), WRITE(+IMM), READ, CS, FA; no MW/LOCAL_INV");
        assert_eq!(
            ex.cap,
            ibv_qp_cap {
                max_send_wr: 64,
                max_recv_wr: 32,
                max_send_sge: 2,
                max_recv_sge: 3,
                max_inline_data: 128
            }
        );
        assert_eq!(dv.comp_mask, MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
        assert_eq!(dv.create_flags, MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE);

        let (ex, dv) = qp_init_attrs(&qp_create(QpKind::Ud)).unwrap();
        assert_eq!(ex.qp_type, IBV_QPT_UD);
        assert_eq!(ex.send_ops_flags, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
        assert_eq!(dv.create_flags, MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE);

        let (ex, dv) = qp_init_attrs(&qp_create(QpKind::Dci)).unwrap();
        assert_eq!(ex.qp_type, IBV_QPT_DRIVER);
        assert_eq!((ex.cap.max_recv_wr, ex.cap.max_recv_sge), (0, 0), "a DCI sends only");
        assert_eq!(ex.cap.max_send_wr, 64);
        assert_eq!(dv.comp_mask, MLX5DV_QP_INIT_ATTR_MASK_DC);
        assert_eq!(dv.dc_init_attr.dc_type, MLX5DV_DCTYPE_DCI);
        assert_eq!(dv.create_flags, 0);
        assert_eq!(
            ex.send_ops_flags, 0x7f,
            "as RC, without SEND_WITH_INV (MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI)"
        );

        let (ex, dv) = qp_init_attrs(&qp_create(QpKind::Dct)).unwrap();
        assert_eq!(ex.qp_type, IBV_QPT_DRIVER);
        assert_eq!(ex.cap, ibv_qp_cap::default());
        assert_eq!(ex.comp_mask, IBV_QP_INIT_ATTR_PD, "create_dct accepts only the PD bit");
        assert_eq!(dv.comp_mask, MLX5DV_QP_INIT_ATTR_MASK_DC);
        assert_eq!((dv.dc_init_attr.dc_type, dv.dc_init_attr.dct_access_key), (MLX5DV_DCTYPE_DCT, 0xdc_dc));
    }

    /// rdma-core's `_sq_overhead` (providers/mlx5/verbs.c) for `ops`, as C computes
    /// it: ctrl 16, raddr 16, atomic 16, UMR ctrl 48, mkey context 64, KLM room 64,
    /// datagram 48.
    fn rdma_core_sq_overhead(kind: QpKind, ops: u64) -> u32 {
        let mut size = 16;
        if ops & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ)
            != 0
        {
            size = size.max(16 + 16);
        }
        if ops & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) != 0 {
            size = size.max(16 + 16 + 16);
        }
        if ops & (1 << 8 | 1 << 7) != 0 {
            size = size.max(16 + 48 + 64 + 64); // BIND_MW / LOCAL_INV
        }
        match kind {
            QpKind::Ud | QpKind::Dci => size + 48,
            _ => size,
        }
    }

    /// The front-end sizes send WQEs with rdma-core's overhead for exactly the
    /// operations this backend names in `send_ops_flags`; without the flag,
    /// rdma-core's default ops (with BIND_MW / LOCAL_INV) would cost 192 bytes.
    #[test]
    fn front_end_overhead_is_rdma_cores_for_our_send_ops() {
        for kind in [QpKind::Rc, QpKind::Ud, QpKind::Dci] {
            let ops = send_ops(kind).unwrap();
            assert_eq!(mlx5_api::sizing::sq_overhead(kind), rdma_core_sq_overhead(kind, ops), "{kind:?}");
        }
        assert_eq!(rdma_core_sq_overhead(QpKind::Rc, 0x3ff), 192, "the default RC ops reserve UMR room");
    }

    fn caps(cqe_comp: Option<(u32, u32)>) -> Mlx5Caps {
        Mlx5Caps {
            version: 1,
            flags: MLX5DV_CONTEXT_FLAGS_CQE_V1,
            cqe_comp,
            dc_odp_caps: None,
            dci_streams: None,
            max_dc_rd_atom: None,
            num_lag_ports: None,
        }
    }

    #[test]
    fn cq_creation_attributes_follow_the_config_and_the_caps() {
        let plain = CqCreate { cqe: 255, cqe_size: 64, compression: None };
        let (ex, dv) = cq_init_attrs(&plain, &caps(None)).unwrap();
        assert_eq!((ex.cqe, ex.comp_mask, ex.wc_flags), (255, 0, 0));
        assert_eq!(
            (dv.comp_mask, dv.cqe_size),
            (MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE, 64),
            "size always explicit"
        );
        let big = CqCreate { cqe_size: 128, ..plain.clone() };
        assert_eq!(cq_init_attrs(&big, &caps(None)).unwrap().1.cqe_size, 128);
        let hash = CqCreate { compression: Some(mlx5_api::ring::mini_format::HASH), ..plain.clone() };
        let csum = CqCreate { compression: Some(mlx5_api::ring::mini_format::CSUM), ..plain.clone() };
        let both = caps(Some((64, MLX5DV_CQE_RES_FORMAT_HASH | MLX5DV_CQE_RES_FORMAT_CSUM)));
        let (_, dv) = cq_init_attrs(&hash, &both).unwrap();
        assert_eq!(
            (dv.comp_mask, dv.cqe_comp_res_format),
            (MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE | MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE, 1)
        );
        assert_eq!(cq_init_attrs(&csum, &both).unwrap().1.cqe_comp_res_format, 2);
        let e = cq_init_attrs(&csum, &caps(Some((64, MLX5DV_CQE_RES_FORMAT_HASH)))).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("not in the device's caps"), "{e}");
        assert!(cq_init_attrs(&hash, &caps(None)).is_err(), "no compression caps reported");
        assert!(cq_init_attrs(&hash, &caps(Some((0, 1)))).is_err(), "max_num 0");
        let hash128 = CqCreate { cqe_size: 128, ..hash.clone() };
        assert!(cq_init_attrs(&hash128, &both).is_err());
    }

    #[test]
    fn init_obj_results_are_checked() {
        let mut ring = [0u8; 64];
        let mut db = [0u32; 2];
        let cq = mlx5dv_cq {
            buf: ring.as_mut_ptr() as *mut c_void,
            dbrec: db.as_mut_ptr(),
            cqe_cnt: 256,
            cqe_size: 64,
            cq_uar: db.as_mut_ptr() as *mut c_void,
            cqn: 0x42,
            comp_mask: 0,
        };
        let r = check_cq(&cq, 64).unwrap();
        assert_eq!((r.cqe_cnt, r.cqe_size, r.cqn), (256, 64, 0x42));
        let e = check_cq(&mlx5dv_cq { cqe_size: 128, ..cq }, 64).unwrap_err();
        assert!(e.to_string().contains("128-byte CQEs"), "{e}");
        assert_eq!(check_cq(&mlx5dv_cq { cqe_size: 128, ..cq }, 128).unwrap().cqe_size, 128);
        assert!(check_cq(&mlx5dv_cq { cqe_cnt: 100, ..cq }, 64).is_err());
        assert!(check_cq(&mlx5dv_cq { dbrec: ptr::null_mut(), ..cq }, 64).is_err());
        assert!(check_cq(&mlx5dv_cq { cq_uar: ptr::null_mut(), ..cq }, 64).is_err());

        let srq = mlx5dv_srq {
            buf: ring.as_mut_ptr() as *mut c_void,
            dbrec: db.as_mut_ptr(),
            stride: 64,
            head: 0,
            tail: 127,
            comp_mask: MLX5DV_SRQ_MASK_SRQN,
            srqn: 7,
        };
        let r = check_srq(&srq).unwrap();
        assert_eq!((r.wqe_cnt, r.stride, r.srqn), (128, 64, 7));
        assert!(check_srq(&mlx5dv_srq { comp_mask: 0, ..srq }).is_err());
        assert!(check_srq(&mlx5dv_srq { tail: 100, ..srq }).is_err());
        assert!(check_srq(&mlx5dv_srq { stride: 16, ..srq }).is_err());

        let qp = mlx5dv_qp {
            dbrec: db.as_mut_ptr(),
            sq: mlx5dv_qp_wq { buf: ring.as_mut_ptr() as *mut c_void, wqe_cnt: 256, stride: 64 },
            rq: mlx5dv_qp_wq { buf: ring.as_mut_ptr() as *mut c_void, wqe_cnt: 32, stride: 64 },
            bf: mlx5dv_qp_bf { reg: ring.as_mut_ptr() as *mut c_void, size: 256 },
            comp_mask: 0,
            uar_mmap_offset: 0,
            tirn: 0,
            tisn: 0,
            rqn: 0,
            sqn: 0,
            tir_icm_addr: 0,
        };
        assert!(check_qp(&qp).is_ok());
        let mut bad = qp;
        bad.sq.stride = 128;
        assert!(check_qp(&bad).is_err());
        let mut bad = qp;
        bad.rq.wqe_cnt = 24;
        assert!(check_qp(&bad).is_err());
        let mut bad = qp;
        bad.bf.reg = ptr::null_mut();
        assert!(check_qp(&bad).is_err());
        let mut no_bf = qp;
        no_bf.bf.size = 0;
        assert!(check_qp(&no_bf).is_ok(), "a doorbell-only register is fine");
    }
}
