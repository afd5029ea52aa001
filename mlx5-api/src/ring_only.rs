//! A backend with rings and no device: queue memory and doorbell records are
//! plain memory, and the doorbell only records what was written. Nothing ever
//! executes a WQE or writes a CQE here, so it is for encoder tests (golden
//! bytes, snapshots) and for measuring the post path alone; use the
//! simulator for anything that needs completions.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::Cell;
use std::marker::PhantomData;
use std::rc::Rc;

use crate::backend::{
    Backend, CqCreate, CqResources, QpCreate, QpKind, QpResources, QpTransition, SrqCreate, SrqResources,
};
use crate::error::{Error, Result};
use crate::ring::{HostMmio, Mmio};
use crate::types::{AccessFlags, DeviceCaps, LinkLayer, PortInfo};

/// The ring-only backend marker. `M` says what its doorbell register does:
/// [`Logged`] (the default) records every doorbell and BlueFlame write in
/// the device's [`DoorbellLog`]; [`Unlogged`] writes each QP's register
/// memory as [`HostMmio`] writes a real register (same stores, same
/// barriers) and records nothing: the post path as it costs on hardware,
/// for measuring it.
#[derive(Debug)]
pub struct RingOnly<M: RoMode = Logged>(PhantomData<M>);

/// What a ring-only register does with a write (see [`RingOnly`]).
pub trait RoMode: std::fmt::Debug + 'static {
    /// Whether writes are recorded in the [`DoorbellLog`].
    const LOGGED: bool;
}
/// Doorbells are recorded in the device's [`DoorbellLog`].
#[derive(Debug)]
pub struct Logged;
impl RoMode for Logged {
    const LOGGED: bool = true;
}
/// Doorbells are written to register memory, as on hardware; nothing is recorded.
#[derive(Debug)]
pub struct Unlogged;
impl RoMode for Unlogged {
    const LOGGED: bool = false;
}

/// What the doorbell register saw.
#[derive(Debug)]
pub struct DoorbellLog {
    /// Doorbells rung (8-byte writes to the register).
    pub doorbells: Cell<u64>,
    /// BlueFlame writes (whole WQEs copied to the register).
    pub blueflames: Cell<u64>,
    /// Offset and value of the last 8-byte doorbell.
    pub last_doorbell: Cell<(u32, [u8; 8])>,
    /// Offset and length of the last BlueFlame write, and its first 64 bytes.
    pub last_blueflame: Cell<(u32, usize, [u8; 64])>,
}

impl Default for DoorbellLog {
    fn default() -> Self {
        DoorbellLog {
            doorbells: Cell::new(0),
            blueflames: Cell::new(0),
            last_doorbell: Cell::new((0, [0; 8])),
            last_blueflame: Cell::new((0, 0, [0; 64])),
        }
    }
}

/// Device and context of the ring-only backend.
#[derive(Debug, Clone)]
pub struct RingOnlyDevice {
    next_qpn: Rc<Cell<u32>>,
    next_key: Rc<Cell<u32>>,
    bf_size: u32,
    log: Rc<DoorbellLog>,
}

impl RingOnlyDevice {
    /// QPNs are handed out from `first_qpn` on; `bf_size` 0 means no BlueFlame.
    pub fn new(first_qpn: u32, bf_size: u32) -> Self {
        RingOnlyDevice {
            next_qpn: Rc::new(Cell::new(first_qpn)),
            next_key: Rc::new(Cell::new(0x1000)),
            bf_size,
            log: Rc::default(),
        }
    }
    /// The doorbell log shared by every QP of this device.
    pub fn log(&self) -> &DoorbellLog {
        &self.log
    }
}

/// Zeroed, 4096-aligned memory owned by a ring-only object.
#[derive(Debug)]
pub struct Region {
    ptr: *mut u8,
    layout: Layout,
}
impl Region {
    fn new(len: usize) -> Result<Self> {
        let alloc = || Error::InvalidArgument(crate::error::InvalidArgument::Alloc { bytes: len });
        let layout = Layout::from_size_align(len.max(64), 4096).map_err(|_| alloc())?;
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(alloc());
        }
        Ok(Region { ptr, layout })
    }
}
impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// A ring-only CQ: its buffer is initialised like rdma-core's and never written.
#[derive(Debug)]
pub struct RoCq<M: RoMode> {
    _buf: Region,
    _dbrec: Region,
    _uar_page: Region,
    uar: RoUar<M>,
}
/// A ring-only QP: RQ, SQ, doorbell record and register memory.
#[derive(Debug)]
pub struct RoQp {
    _buf: Region,
    _dbrec: Region,
    _reg: Region,
    dct: bool,
    qpn: u32,
}
/// A ring-only SRQ: its WQE buffer and doorbell record.
#[derive(Debug)]
pub struct RoSrq {
    _buf: Region,
    _dbrec: Region,
}
/// The doorbell register: records into the device's log, or (unlogged)
/// writes the register memory as hardware's is written.
#[derive(Debug)]
pub struct RoUar<M: RoMode> {
    log: Rc<DoorbellLog>,
    _mode: PhantomData<M>,
}

impl<M: RoMode> RoUar<M> {
    fn of(dev: &RingOnlyDevice) -> Self {
        RoUar { log: dev.log.clone(), _mode: PhantomData }
    }
}

impl<M: RoMode> Backend for RingOnly<M> {
    type Device = RingOnlyDevice;
    type Context = RingOnlyDevice;
    type Pd = ();
    type Mr = ();
    type Cq = RoCq<M>;
    type Qp = RoQp;
    type Srq = RoSrq;
    type Uar = RoUar<M>;
    /// No events: a ring-only device never completes anything.
    type Channel = ();

    fn device_name(_: &RingOnlyDevice) -> String {
        "ring-only".into()
    }
    fn open(dev: &RingOnlyDevice) -> Result<RingOnlyDevice> {
        Ok(dev.clone())
    }
    fn query_port(_: &RingOnlyDevice, port: u8) -> Result<PortInfo> {
        Ok(PortInfo {
            port_num: port,
            lid: 1,
            gid: crate::ring::Gid::ZERO,
            sgid_index: 0,
            mac: [0; 6],
            link_layer: LinkLayer::InfiniBand,
            active_mtu: 4096,
            grh_required: false,
        })
    }
    fn device_caps(dev: &RingOnlyDevice) -> DeviceCaps {
        DeviceCaps {
            max_qp_wr: 32768,
            max_sge: 30,
            max_cqe: 1 << 22,
            max_wqe_sz_sq: 1008,
            bf_size: dev.bf_size,
            max_rd_atomic: 16,
            dc: true,
        }
    }
    fn alloc_pd(_: &RingOnlyDevice) -> Result<()> {
        Ok(())
    }
    unsafe fn reg_mr(
        dev: &RingOnlyDevice,
        _: &(),
        _: *mut u8,
        _: usize,
        _: AccessFlags,
    ) -> Result<((), u32, u32)> {
        let k = dev.next_key.get();
        dev.next_key.set(k + 1);
        Ok(((), k, k))
    }
    /// Keys for windows and indirect mkeys, as for MRs: the UMR WQEs that
    /// bind them are written, never executed.
    fn alloc_mkey(dev: &RingOnlyDevice, _: &(), _: crate::MkeyKind) -> Result<u32> {
        let k = dev.next_key.get();
        dev.next_key.set(k + 1);
        Ok(k << 8)
    }
    fn dealloc_mkey(_: &RingOnlyDevice, _: u32) -> Result<()> {
        Ok(())
    }
    fn create_cq(dev: &RingOnlyDevice, attr: &CqCreate, _: Option<&()>) -> Result<(RoCq<M>, CqResources)> {
        let cnt = (attr.cqe + 1).next_power_of_two();
        let size = attr.cqe_size as usize;
        let buf = Region::new(cnt as usize * size)?;
        for i in 0..cnt as usize {
            // SAFETY: inside the buffer: op_own of CQE i = INVALID, owner 0.
            unsafe { *buf.ptr.add(i * size + size - 1) = 0xf0 };
        }
        let dbrec = Region::new(64)?;
        // The arm doorbell goes to offset 0x20 of this page when unlogged.
        let uar_page = Region::new(4096)?;
        let res = CqResources {
            buf: buf.ptr,
            cqe_cnt: cnt,
            cqe_size: attr.cqe_size,
            dbrec: dbrec.ptr as *mut u32,
            cqn: 1,
            cq_uar: uar_page.ptr,
        };
        Ok((RoCq { _buf: buf, _dbrec: dbrec, _uar_page: uar_page, uar: RoUar::of(dev) }, res))
    }
    fn cq_uar(cq: &RoCq<M>) -> &RoUar<M> {
        &cq.uar
    }
    fn create_channel(_: &RingOnlyDevice) -> Result<()> {
        Err(Error::Unsupported(crate::error::Unsupported::CompletionChannels))
    }
    fn channel_fd(_: &()) -> std::os::fd::RawFd {
        -1
    }
    fn get_cq_event(_: &()) -> Result<Option<u32>> {
        Ok(None)
    }
    fn async_event(_: &RingOnlyDevice) -> Result<Option<crate::AsyncEvent>> {
        Ok(None)
    }
    fn create_srq(dev: &RingOnlyDevice, _: &(), attr: &SrqCreate) -> Result<(RoSrq, SrqResources)> {
        let buf = Region::new((attr.wqe_cnt * attr.stride) as usize)?;
        let dbrec = Region::new(64)?;
        let srqn = dev.next_qpn.get();
        dev.next_qpn.set(srqn + 1);
        let res = SrqResources {
            srqn,
            buf: buf.ptr,
            wqe_cnt: attr.wqe_cnt,
            stride: attr.stride,
            dbrec: dbrec.ptr as *mut u32,
        };
        Ok((RoSrq { _buf: buf, _dbrec: dbrec }, res))
    }
    fn create_qp(
        dev: &RingOnlyDevice,
        _: &(),
        _: Option<&RoCq<M>>,
        _: &RoCq<M>,
        _: Option<&RoSrq>,
        attr: &QpCreate,
    ) -> Result<(RoQp, QpResources<RoUar<M>>)> {
        let rq_bytes = (attr.rq_wqe_cnt * attr.rq_stride) as usize;
        let rq_bytes = rq_bytes.next_multiple_of(4096);
        let buf = Region::new(rq_bytes + attr.sq_wqe_cnt as usize * 64)?;
        let dbrec = Region::new(64)?;
        // Its own register (two BlueFlame halves): the toggle is per register.
        let reg = Region::new((2 * dev.bf_size as usize).max(512))?;
        let qpn = dev.next_qpn.get();
        dev.next_qpn.set(qpn + 1);
        let res = QpResources {
            qpn,
            // SAFETY: the SQ follows the RQ inside `buf` (spec §1.8).
            sq_buf: unsafe { buf.ptr.add(rq_bytes) },
            sq_wqe_cnt: attr.sq_wqe_cnt,
            rq_buf: buf.ptr,
            rq_wqe_cnt: attr.rq_wqe_cnt,
            rq_stride: attr.rq_stride,
            dbrec: dbrec.ptr as *mut u32,
            uar: RoUar::of(dev),
            bf_reg: reg.ptr,
            bf_size: dev.bf_size,
        };
        Ok((RoQp { _buf: buf, _dbrec: dbrec, _reg: reg, dct: attr.kind == QpKind::Dct, qpn }, res))
    }
    fn modify_qp(_: &RingOnlyDevice, _: &RoQp, _: &QpTransition) -> Result<()> {
        Ok(())
    }
    /// A ring-only DCT's number is its QPN with bit 23 set.
    fn dct_number(_: &RingOnlyDevice, qp: &RoQp) -> Result<u32> {
        if !qp.dct {
            return Err(Error::InvalidArgument(crate::error::InvalidArgument::NotADct));
        }
        Ok(qp.qpn | 0x80_0000)
    }
}

impl<M: RoMode> Mmio for RoUar<M> {
    #[inline(always)]
    unsafe fn write_db(&self, reg: *mut u8, offset: u32, ctrl: [u8; 8]) {
        if !M::LOGGED {
            // SAFETY: forwarded: a QP's register memory (two halves of
            // `bf_size`) or a CQ's UAR page.
            return unsafe { HostMmio.write_db(reg, offset, ctrl) };
        }
        self.log.doorbells.set(self.log.doorbells.get() + 1);
        self.log.last_doorbell.set((offset, ctrl));
    }
    #[inline(always)]
    unsafe fn write_bf(&self, reg: *mut u8, offset: u32, head: &[u8], tail: &[u8]) {
        if M::LOGGED {
            log_bf(&self.log, offset, head, tail)
        } else {
            // SAFETY: as in `write_db`.
            unsafe { HostMmio.write_bf(reg, offset, head, tail) }
        }
    }
}

/// Record a BlueFlame write: its offset, length and first 64 bytes.
#[inline(never)]
fn log_bf(log: &DoorbellLog, offset: u32, head: &[u8], tail: &[u8]) {
    {
        let mut first = [0u8; 64];
        let h = head.len().min(64);
        first[..h].copy_from_slice(&head[..h]);
        if h < 64 {
            first[h..].copy_from_slice(&tail[..64 - h]);
        }
        log.blueflames.set(log.blueflames.get() + 1);
        log.last_blueflame.set((offset, head.len() + tail.len(), first));
    }
}
