//! The simulator as a [`Backend`]: an adapter from the front-end's requests
//! to the `mlx5-sim` device model. The model sees only ring memory, doorbell
//! records and UAR writes, exactly as a NIC does; this file is the "driver
//! glue" (the part the kernel and rdma-core's provider play on hardware).

use mlx5_sim::{self as model, ExecMode, Fabric, Nic};

use crate::backend::{
    Backend, CqCreate, CqResources, QpCreate, QpKind, QpResources, QpTransition, SrqCreate, SrqResources,
};
use crate::device::Device;
use crate::error::{BackendError, Error, Result};
use crate::ring::Gid;
use crate::ring::{HostMmio, Mmio};
use crate::types::{AccessFlags, DeviceCaps, LinkLayer, PortInfo, QpState};

pub use mlx5_sim::{AtomicEndianness, FabricConfig, HostConfig};

/// The simulator backend marker.
#[derive(Debug)]
pub struct Sim;

/// A simulated device: one NIC of a [`Fabric`].
#[derive(Debug, Clone)]
pub struct SimDevice {
    nic: Nic,
    mode: ExecMode,
}

/// An opened simulated device: a device context of the model (its own 16
/// doorbell registers), closed on drop.
#[derive(Debug)]
pub struct SimContext {
    dev: SimDevice,
    id: u32,
}

impl Drop for SimContext {
    fn drop(&mut self) {
        let _ = self.dev.nic.close_context(self.id);
    }
}

impl std::ops::Deref for SimContext {
    type Target = SimDevice;
    fn deref(&self) -> &SimDevice {
        &self.dev
    }
}

impl SimDevice {
    /// The device model behind this device (stats, virtual time).
    pub fn nic(&self) -> &Nic {
        &self.nic
    }
}

/// The devices of a fabric, in the order their hosts were added.
pub fn devices(fabric: &Fabric) -> Vec<Device<Sim>> {
    let mode = fabric.mode();
    fabric.nics().into_iter().map(|nic| Device::new(SimDevice { nic, mode })).collect()
}

/// A deterministic fabric with two InfiniBand hosts (LIDs 1 and 2), the
/// usual test set-up.
pub fn two_hosts(mode: ExecMode) -> (Fabric, Device<Sim>, Device<Sim>) {
    let fabric = Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
    fabric.add_host(HostConfig::infiniband("sim0", 1));
    fabric.add_host(HostConfig::infiniband("sim1", 2));
    let mut d = devices(&fabric);
    let b = d.pop().expect("two hosts");
    let a = d.pop().expect("two hosts");
    (fabric, a, b)
}

fn sim_err(op: &'static str) -> impl FnOnce(model::SimError) -> Error {
    move |e| Error::Backend {
        op,
        reason: Box::new(BackendError::Refused { errno: sim_errno(&e), detail: e.to_string() }),
    }
}

/// The errno the kernel would give for what the simulator refused.
fn sim_errno(e: &model::SimError) -> i32 {
    use model::SimError as S;
    match e {
        S::NoSuchPd(_) | S::NoSuchCq(_) | S::NoSuchQp(_) | S::NoSuchMr(_) | S::NoSuchSrq(_) => libc::ENOENT,
        S::InvalidArgument { .. } | S::InvalidTransition { .. } => libc::EINVAL,
        S::Busy { .. } => libc::EBUSY,
        S::Unsupported { .. } => libc::EOPNOTSUPP,
        S::OutOfMemory => libc::ENOMEM,
    }
}

#[derive(Debug)]
/// A simulated protection domain.
pub struct SimPd {
    nic: Nic,
    pdn: u32,
}
impl Drop for SimPd {
    fn drop(&mut self) {
        let _ = self.nic.dealloc_pd(self.pdn);
    }
}
#[derive(Debug)]
/// A simulated memory registration.
pub struct SimMr {
    nic: Nic,
    lkey: u32,
}
impl Drop for SimMr {
    fn drop(&mut self) {
        let _ = self.nic.dereg_mr(self.lkey);
    }
}
#[derive(Debug)]
/// A simulated CQ.
pub struct SimCq {
    nic: Nic,
    cqn: u32,
    mode: ExecMode,
    uar: SimUar,
}

/// A completion channel of the model; destroyed on drop.
#[derive(Debug)]
pub struct SimChannel {
    nic: Nic,
    id: u32,
    fd: std::os::fd::RawFd,
    mode: ExecMode,
}
impl Drop for SimChannel {
    fn drop(&mut self) {
        let _ = self.nic.destroy_comp_channel(self.id);
    }
}
impl Drop for SimCq {
    fn drop(&mut self) {
        let _ = self.nic.destroy_cq(self.cqn);
    }
}
#[derive(Debug)]
/// A simulated QP (or DCT).
pub struct SimQp {
    nic: Nic,
    qpn: u32,
}
impl SimQp {
    /// The QP number the model assigned.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
}
impl Drop for SimQp {
    fn drop(&mut self) {
        let _ = self.nic.destroy_qp(self.qpn);
    }
}
#[derive(Debug)]
/// A simulated SRQ.
pub struct SimSrq {
    nic: Nic,
    srqn: u32,
}
impl Drop for SimSrq {
    fn drop(&mut self) {
        let _ = self.nic.destroy_srq(self.srqn);
    }
}
/// The QP's UAR register in the model. Deterministic and threaded modes
/// deliver each write as a bus write (`uar_write64` / `uar_write_bf`);
/// watch mode stores into the register's memory, as a foreign executor
/// would, and wakes the NIC's thread.
#[derive(Debug)]
pub struct SimUar {
    nic: Nic,
    index: u32,
    mode: ExecMode,
}

/// `SimUar::index` of a CQ's doorbell page (arm requests).
const CQ_PAGE: u32 = u32::MAX;

impl Mmio for SimUar {
    #[inline(always)]
    unsafe fn write_db(&self, reg: *mut u8, offset: u32, ctrl: [u8; 8]) {
        match self.mode {
            ExecMode::Watch => {
                // SAFETY: forwarded (the register is a live UAR page of the model).
                unsafe { HostMmio.write_db(reg, offset, ctrl) };
                self.nic.kick();
            }
            _ if self.index == CQ_PAGE => self.nic.cq_uar_write64(ctrl),
            _ => self.nic.uar_write64(self.index, offset, ctrl),
        }
    }
    #[inline(always)]
    unsafe fn write_bf(&self, reg: *mut u8, offset: u32, head: &[u8], tail: &[u8]) {
        if self.mode == ExecMode::Watch {
            // SAFETY: forwarded.
            unsafe { HostMmio.write_bf(reg, offset, head, tail) };
            self.nic.kick();
            return;
        }
        // The model takes the register write as one burst; assemble it on the stack.
        let mut burst = [0u8; 1024];
        let n = head.len() + tail.len();
        burst[..head.len()].copy_from_slice(head);
        burst[head.len()..n].copy_from_slice(tail);
        self.nic.uar_write_bf(self.index, offset, &burst[..n]);
    }
}

fn to_model_state(s: QpState) -> model::QpState {
    match s {
        QpState::Reset => model::QpState::Reset,
        QpState::Init => model::QpState::Init,
        QpState::Rtr => model::QpState::Rtr,
        QpState::Rts => model::QpState::Rts,
        QpState::Sqd => model::QpState::Sqd,
        QpState::Sqe => model::QpState::Sqe,
        QpState::Err => model::QpState::Err,
    }
}

impl Backend for Sim {
    type Device = SimDevice;
    type Context = SimContext;
    type Pd = SimPd;
    type Mr = SimMr;
    type Cq = SimCq;
    type Qp = SimQp;
    type Srq = SimSrq;
    type Uar = SimUar;
    type Channel = SimChannel;

    fn device_name(dev: &SimDevice) -> String {
        dev.nic.info().name
    }
    fn open(dev: &SimDevice) -> Result<SimContext> {
        Ok(SimContext { dev: dev.clone(), id: dev.nic.open_context() })
    }
    fn query_port(ctx: &SimContext, port: u8) -> Result<PortInfo> {
        let i = ctx.nic.info();
        if port != i.port_num {
            return Err(Error::InvalidArgument(crate::error::InvalidArgument::OutOfRange {
                arg: crate::error::Arg::Port,
                value: port.into(),
                min: i.port_num.into(),
                max: i.port_num.into(),
            }));
        }
        Ok(PortInfo {
            port_num: i.port_num,
            lid: i.lid,
            gid: Gid(i.gid),
            sgid_index: 0,
            mac: i.mac,
            link_layer: i.link_layer.into(),
            active_mtu: i.active_mtu,
            grh_required: i.grh_required,
        })
    }
    fn device_caps(ctx: &SimContext) -> DeviceCaps {
        let c = ctx.nic.info().caps;
        DeviceCaps {
            max_qp_wr: c.max_qp_wr,
            max_sge: c.max_sge,
            max_cqe: c.max_cqe,
            max_wqe_sz_sq: c.max_wqe_sz_sq,
            bf_size: c.bf_size,
            max_rd_atomic: c.max_rd_atomic,
            dc: c.dc,
        }
    }
    fn alloc_pd(ctx: &SimContext) -> Result<SimPd> {
        let pdn = ctx.nic.alloc_pd().map_err(sim_err("alloc_pd"))?;
        Ok(SimPd { nic: ctx.nic.clone(), pdn })
    }
    unsafe fn reg_mr(
        ctx: &SimContext,
        pd: &SimPd,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<(SimMr, u32, u32)> {
        // SAFETY: forwarded contract: the memory outlives the MR.
        let k = unsafe { ctx.nic.reg_mr(pd.pdn, addr as u64, len as u64, access.bits()) }
            .map_err(sim_err("reg_mr"))?;
        Ok((SimMr { nic: ctx.nic.clone(), lkey: k.lkey }, k.lkey, k.rkey))
    }
    fn alloc_mkey(ctx: &SimContext, pd: &SimPd, kind: crate::MkeyKind) -> Result<u32> {
        let k = match kind {
            crate::MkeyKind::Window1 => model::MkeyKind::Mw1,
            crate::MkeyKind::Window2 => model::MkeyKind::Mw2,
            crate::MkeyKind::Indirect { max_entries, remote_invalidate } => {
                model::MkeyKind::Indirect { max_entries, remote_invalidate }
            }
        };
        ctx.nic.alloc_mkey(pd.pdn, k).map_err(sim_err("alloc_mkey"))
    }
    fn dealloc_mkey(ctx: &SimContext, key: u32) -> Result<()> {
        ctx.nic.dealloc_mkey(key).map_err(sim_err("dealloc_mkey"))
    }
    fn create_cq(
        ctx: &SimContext,
        attr: &CqCreate,
        channel: Option<&SimChannel>,
    ) -> Result<(SimCq, CqResources)> {
        // rdma-core: cqe + 1 entries rounded up to a power of two.
        let cnt = (attr.cqe + 1).next_power_of_two();
        let compression = attr.compression.map(|f| match f {
            crate::ring::mini_format::CSUM => model::MiniCqeFormat::Csum,
            _ => model::MiniCqeFormat::Hash,
        });
        let r = ctx
            .nic
            .create_cq_ex(&model::CqInitAttr {
                cqe_cnt: cnt,
                cqe_size: attr.cqe_size,
                compression,
                channel: channel.map(|c| c.id),
            })
            .map_err(sim_err("create_cq"))?;
        let res = CqResources {
            buf: r.buf,
            cqe_cnt: r.cqe_cnt,
            cqe_size: r.cqe_size,
            dbrec: r.dbrec,
            cqn: r.cqn,
            cq_uar: r.cq_uar,
        };
        let uar = SimUar { nic: ctx.nic.clone(), index: CQ_PAGE, mode: ctx.mode };
        Ok((SimCq { nic: ctx.nic.clone(), cqn: r.cqn, mode: ctx.mode, uar }, res))
    }
    fn cq_uar(cq: &SimCq) -> &SimUar {
        &cq.uar
    }
    fn cq_in_error(cq: &SimCq) -> bool {
        cq.nic.cq_error(cq.cqn).unwrap_or(false)
    }
    fn device_fatal(cq: &SimCq) -> bool {
        cq.nic.is_fatal()
    }
    fn failure_reason(cq: &SimCq, qpn: u32, wqe_counter: u16) -> Option<String> {
        cq.nic.failure_reason(qpn, wqe_counter)
    }
    fn cq_needs_progress(cq: &SimCq) -> bool {
        cq.mode == ExecMode::Deterministic
    }
    fn create_channel(ctx: &SimContext) -> Result<SimChannel> {
        let (id, fd) = ctx.nic.create_comp_channel().map_err(sim_err("create_comp_channel"))?;
        Ok(SimChannel { nic: ctx.nic.clone(), id, fd, mode: ctx.mode })
    }
    fn channel_fd(ch: &SimChannel) -> std::os::fd::RawFd {
        ch.fd
    }
    fn get_cq_event(ch: &SimChannel) -> Result<Option<u32>> {
        ch.nic.get_cq_event(ch.id).map_err(sim_err("get_cq_event"))
    }
    fn async_event(ctx: &SimContext) -> Result<Option<crate::AsyncEvent>> {
        Ok(ctx.nic.take_async_event().map(|e| match e {
            model::AsyncEvent::CqOverrun { cqn } => crate::AsyncEvent::CqError { cqn },
            model::AsyncEvent::QpFatal { qpn } => crate::AsyncEvent::QpFatal { qpn },
            model::AsyncEvent::PortError => crate::AsyncEvent::PortError { port: 1 },
            model::AsyncEvent::PortActive => crate::AsyncEvent::PortActive { port: 1 },
            model::AsyncEvent::DeviceFatal => crate::AsyncEvent::DeviceFatal,
            model::AsyncEvent::SrqLimitReached { srqn } => crate::AsyncEvent::SrqLimitReached { srqn },
        }))
    }
    fn channel_progress(ch: &SimChannel) -> bool {
        if ch.mode == ExecMode::Deterministic {
            ch.nic.tick();
            true
        } else {
            false
        }
    }
    fn create_srq(ctx: &SimContext, pd: &SimPd, attr: &SrqCreate) -> Result<(SimSrq, SrqResources)> {
        let r = ctx
            .nic
            .create_srq(&model::SrqInitAttr {
                pdn: pd.pdn,
                wqe_cnt: attr.wqe_cnt,
                stride: attr.stride,
                user_index: attr.user_index,
            })
            .map_err(sim_err("create_srq"))?;
        let res =
            SrqResources { srqn: r.srqn, buf: r.buf, wqe_cnt: r.wqe_cnt, stride: r.stride, dbrec: r.dbrec };
        Ok((SimSrq { nic: ctx.nic.clone(), srqn: r.srqn }, res))
    }
    fn create_qp(
        ctx: &SimContext,
        pd: &SimPd,
        send_cq: Option<&SimCq>,
        recv_cq: &SimCq,
        srq: Option<&SimSrq>,
        attr: &QpCreate,
    ) -> Result<(SimQp, QpResources<SimUar>)> {
        let qp_type = match attr.kind {
            QpKind::Rc => model::QpType::Rc,
            QpKind::Ud => model::QpType::Ud,
            QpKind::Dci => model::QpType::Dci,
            QpKind::Dct => model::QpType::Dct,
        };
        let r = ctx
            .nic
            .create_qp(&model::QpInitAttr {
                qp_type,
                pdn: pd.pdn,
                send_cqn: send_cq.unwrap_or(recv_cq).cqn,
                recv_cqn: recv_cq.cqn,
                sq_wqe_cnt: attr.sq_wqe_cnt,
                rq_wqe_cnt: attr.rq_wqe_cnt,
                rq_stride: attr.rq_stride,
                user_index: attr.user_index,
                srqn: srq.map(|s| s.srqn),
                dc_key: attr.dc_key,
                context: ctx.id,
                dedicated_uar: attr.dedicated_uar,
                scatter_to_cqe: attr.scatter_to_cqe,
            })
            .map_err(sim_err("create_qp"))?;
        let res = QpResources {
            qpn: r.qpn,
            sq_buf: r.sq_buf,
            sq_wqe_cnt: r.sq_wqe_cnt,
            rq_buf: r.rq_buf,
            rq_wqe_cnt: r.rq_wqe_cnt,
            rq_stride: r.rq_stride,
            dbrec: r.dbrec,
            uar: SimUar { nic: ctx.nic.clone(), index: r.uar_index, mode: ctx.mode },
            bf_reg: r.bf_reg,
            bf_size: r.bf_size,
        };
        Ok((SimQp { nic: ctx.nic.clone(), qpn: r.qpn }, res))
    }
    fn modify_qp(ctx: &SimContext, qp: &SimQp, t: &QpTransition) -> Result<()> {
        let m = match t {
            QpTransition::Init { port, access, qkey } => model::QpModify {
                state: Some(model::QpState::Init),
                port: Some(*port),
                access_flags: Some(access.bits()),
                qkey: *qkey,
                ..Default::default()
            },
            QpTransition::Rtr { remote, path_mtu, min_rnr_timer, max_dest_rd_atomic, sl } => {
                model::QpModify {
                    state: Some(model::QpState::Rtr),
                    path: remote.as_ref().map(|r| model::RcPath {
                        dest_qpn: r.qpn,
                        dlid: r.lid,
                        dgid: r.gid.map(|g| g.0),
                        dmac: r.mac,
                        sl: *sl,
                    }),
                    path_mtu: (*path_mtu != 0).then_some(*path_mtu),
                    min_rnr_timer: Some(*min_rnr_timer),
                    rq_psn: remote.as_ref().map(|r| r.psn),
                    max_dest_rd_atomic: Some(*max_dest_rd_atomic),
                    ..Default::default()
                }
            }
            QpTransition::Rts { timeout, retry_cnt, rnr_retry, sq_psn, max_rd_atomic } => model::QpModify {
                state: Some(model::QpState::Rts),
                timeout: Some(*timeout),
                retry_cnt: Some(*retry_cnt),
                rnr_retry: Some(*rnr_retry),
                sq_psn: Some(*sq_psn),
                max_rd_atomic: Some(*max_rd_atomic),
                ..Default::default()
            },
            QpTransition::Recover => {
                model::QpModify { state: Some(model::QpState::Rts), ..Default::default() }
            }
            QpTransition::To(s) => model::QpModify { state: Some(to_model_state(*s)), ..Default::default() },
        };
        ctx.nic.modify_qp(qp.qpn, &m).map_err(sim_err("modify_qp"))
    }

    fn dct_number(ctx: &SimContext, qp: &SimQp) -> Result<u32> {
        ctx.nic.dct_number(qp.qpn).map_err(sim_err("dct_number"))
    }

    #[inline(always)]
    fn cq_idle(cq: &SimCq) {
        match cq.mode {
            ExecMode::Deterministic => cq.nic.tick(),
            // The NIC thread may be waiting for a core: do its queued work here.
            ExecMode::Threaded => {
                cq.nic.help();
            }
            ExecMode::Watch => {}
        }
    }
}

/// The device model's link layer as the front-end's one type.
impl From<model::LinkLayer> for LinkLayer {
    fn from(l: model::LinkLayer) -> LinkLayer {
        match l {
            model::LinkLayer::InfiniBand => LinkLayer::InfiniBand,
            model::LinkLayer::Ethernet => LinkLayer::Ethernet,
        }
    }
}

/// The front-end's link layer as the device model's (for `HostConfig`).
impl From<LinkLayer> for model::LinkLayer {
    fn from(l: LinkLayer) -> model::LinkLayer {
        match l {
            LinkLayer::InfiniBand => model::LinkLayer::InfiniBand,
            LinkLayer::Ethernet => model::LinkLayer::Ethernet,
        }
    }
}
