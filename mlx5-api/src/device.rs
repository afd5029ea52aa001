//! Devices, contexts, protection domains and memory regions: RAII owners of
//! backend objects, each keeping alive what it depends on; the `create_*`
//! calls that assemble QPs, CQs and SRQs from backend resources.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::Cell;
use std::rc::Rc;

use crate::backend::{Backend, QpCaps, QpCreate, QpKind, SrqCreate};
use crate::channel::CompChannel;
use crate::connect::QpConfig;
use crate::cq::{AsCq, Completion, CompletionQueue, CqShared, MonoCq};
use crate::cq_config::{CqConfig, CqeSize};
use crate::ctx::{CtxInner, PdInner};
use crate::error::{Arg, Error, InvalidArgument, Queue, Result, Unsupported};
use crate::qp::{Dci, Dct, QpParts, QpShared, RcQp, UdQp};
use crate::ring::{RqDesc, Sge, SqDesc, SqKind};
use crate::sizing::{qp_geometry, srq_geometry, QpGeometry};
use crate::srq::{SharedReceiveQueue, SrqShared};
use crate::types::{AccessFlags, DeviceCaps, PortInfo, QpState};
use crate::wq::{RecvQueue, SendQueue, WorkQueues};

/// A device that can be opened.
pub struct Device<B: Backend> {
    raw: B::Device,
}

impl<B: Backend> Device<B> {
    /// Wrap a backend's device (see `mlx5::sim::devices`, `mlx5::hw::device`).
    pub fn new(raw: B::Device) -> Self {
        Device { raw }
    }
    /// The device's name (`mlx5_0`, `sim0`).
    pub fn name(&self) -> String {
        B::device_name(&self.raw)
    }
    /// Open the device.
    pub fn open(&self) -> Result<Context<B>> {
        let raw = B::open(&self.raw)?;
        let caps = B::device_caps(&raw);
        Ok(Context { inner: Rc::new(CtxInner::new(raw, caps)) })
    }
}

impl<B: Backend> std::fmt::Debug for Device<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("name", &self.name()).finish()
    }
}

/// An opened device.
pub struct Context<B: Backend> {
    inner: Rc<CtxInner<B>>,
}

impl<B: Backend> std::fmt::Debug for Context<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("caps", &self.inner.caps).finish_non_exhaustive()
    }
}

impl<B: Backend> Clone for Context<B> {
    fn clone(&self) -> Self {
        Context { inner: self.inner.clone() }
    }
}

impl<B: Backend> Context<B> {
    /// The device's limits.
    pub fn caps(&self) -> &DeviceCaps {
        &self.inner.caps
    }
    /// A number unique among the contexts opened by this process: what
    /// [`Error::ForeignObject`] names.
    pub fn id(&self) -> u64 {
        self.inner.id
    }
    /// A port's addressing, link layer and MTU.
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        B::query_port(&self.inner.raw, port)
    }
    /// The backend's context (for backend-specific calls).
    pub fn raw(&self) -> &B::Context {
        &self.inner.raw
    }
    /// The oldest pending asynchronous event (CQ overrun, QP or SRQ error,
    /// port change, device fatal error), without blocking; `None` when none
    /// is pending. Each event is returned once.
    pub fn async_event(&self) -> Result<Option<crate::AsyncEvent>> {
        B::async_event(&self.inner.raw)
    }

    /// Allocate a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain<B>> {
        let raw = B::alloc_pd(&self.inner.raw)?;
        Ok(ProtectionDomain { inner: Rc::new(PdInner { raw, ctx: self.inner.clone() }) })
    }

    fn cq_shared<T>(&self, config: CqConfig<'_, B>) -> Result<Rc<CqShared<B, T>>> {
        let cqe = config.cqe;
        if cqe == 0 || cqe > self.inner.caps.max_cqe {
            return Err(Error::InvalidArgument(InvalidArgument::OutOfRange {
                arg: Arg::CqSize,
                value: cqe.into(),
                min: 1,
                max: self.inner.caps.max_cqe.into(),
            }));
        }
        if config.compression.is_some() && config.cqe_size == CqeSize::B128 {
            return Err(Error::Unsupported(Unsupported::CompressionWith128ByteCqes));
        }
        let channel = config.channel.map(|c| c.inner.clone());
        if let Some(ch) = &channel {
            if ch.ctx().id != self.inner.id {
                return Err(Error::ForeignObject {
                    what: "completion channel",
                    owner: ch.ctx().id,
                    used_with: self.inner.id,
                });
            }
        }
        let (raw, res) =
            B::create_cq(&self.inner.raw, &config.create_attr(), channel.as_ref().map(|c| &c.raw))?;
        let mini = config.compression.map_or(0, |f| f.raw());
        Ok(Rc::new(CqShared::new(raw, res, mini, channel, self.inner.clone())?))
    }

    /// A CQ dispatching through a boxed callback: `create_cq(256, cb)` for
    /// at least 256 entries, or a [`CqConfig`] (CQE size, compression,
    /// completion channel).
    pub fn create_cq<'c, T: 'static>(
        &self,
        config: impl Into<CqConfig<'c, B>>,
        callback: impl FnMut(Completion, T) + 'static,
    ) -> Result<CompletionQueue<B, T>> {
        Ok(CompletionQueue::new(self.cq_shared(config.into())?, Box::new(callback)))
    }

    /// A CQ whose callback is inlined into `poll`.
    pub fn create_mono_cq<'c, T, F: FnMut(Completion, T)>(
        &self,
        config: impl Into<CqConfig<'c, B>>,
        callback: F,
    ) -> Result<MonoCq<B, T, F>> {
        Ok(MonoCq::new(self.cq_shared(config.into())?, callback))
    }

    /// A completion channel for CQ events ([`CqConfig::channel`]).
    pub fn create_comp_channel(&self) -> Result<CompChannel<B>> {
        Ok(CompChannel::new(B::create_channel(&self.inner.raw)?, self.inner.clone()))
    }

    /// An RC QP in RESET, reporting sends to `send_cq` and receives to `recv_cq`.
    pub fn create_rc_qp<T>(
        &self,
        pd: &ProtectionDomain<B>,
        send_cq: &impl AsCq<B, T>,
        recv_cq: &impl AsCq<B, T>,
        config: &QpConfig,
    ) -> Result<RcQp<B, T>> {
        let shared =
            self.create_qp(QpKind::Rc, pd, Some(send_cq.shared()), recv_cq.shared(), None, config)?;
        Ok(RcQp::from_shared(shared))
    }

    /// An RC QP whose receives come from `srq` (its own receive queue is
    /// not created: `config.max_recv_wr` is ignored).
    pub fn create_rc_qp_with_srq<T>(
        &self,
        pd: &ProtectionDomain<B>,
        send_cq: &impl AsCq<B, T>,
        recv_cq: &impl AsCq<B, T>,
        srq: &SharedReceiveQueue<B, T>,
        config: &QpConfig,
    ) -> Result<RcQp<B, T>> {
        let shared = self.create_qp(
            QpKind::Rc,
            pd,
            Some(send_cq.shared()),
            recv_cq.shared(),
            Some(&srq.shared),
            config,
        )?;
        Ok(RcQp::from_shared(shared))
    }

    /// A UD QP in RESET. Messages are limited to the port's active MTU,
    /// checked when the WQE is built.
    pub fn create_ud_qp<T>(
        &self,
        pd: &ProtectionDomain<B>,
        send_cq: &impl AsCq<B, T>,
        recv_cq: &impl AsCq<B, T>,
        srq: Option<&SharedReceiveQueue<B, T>>,
        config: &QpConfig,
    ) -> Result<UdQp<B, T>> {
        let srq = srq.map(|s| &s.shared);
        let shared = self.create_qp(QpKind::Ud, pd, Some(send_cq.shared()), recv_cq.shared(), srq, config)?;
        Ok(UdQp::from_shared(shared))
    }

    /// A DC initiator in RESET (send queue only; completions to `send_cq`).
    pub fn create_dci<T>(
        &self,
        pd: &ProtectionDomain<B>,
        send_cq: &impl AsCq<B, T>,
        config: &QpConfig,
    ) -> Result<Dci<B, T>> {
        let config = QpConfig { max_recv_wr: 0, max_recv_sge: 0, ..config.clone() };
        let shared =
            self.create_qp(QpKind::Dci, pd, Some(send_cq.shared()), send_cq.shared(), None, &config)?;
        Ok(Dci::from_shared(shared))
    }

    /// A DC target in RESET receiving on `srq`, reporting to `recv_cq`;
    /// initiators must present `config.dc_key` (the queue sizes of
    /// `config` do not apply: a DCT has no queue of its own).
    pub fn create_dct<T>(
        &self,
        pd: &ProtectionDomain<B>,
        recv_cq: &impl AsCq<B, T>,
        srq: &SharedReceiveQueue<B, T>,
        config: &QpConfig,
    ) -> Result<Dct<B, T>> {
        let config = QpConfig {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
            dedicated_uar: false,
            ..config.clone()
        };
        let shared = self.create_qp(QpKind::Dct, pd, None, recv_cq.shared(), Some(&srq.shared), &config)?;
        Ok(Dct::from_shared(shared))
    }

    /// A shared receive queue of at least `max_wr` receives of up to
    /// `max_sge` SGEs each.
    pub fn create_srq<T>(
        &self,
        pd: &ProtectionDomain<B>,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SharedReceiveQueue<B, T>> {
        if pd.inner.ctx.id != self.inner.id {
            return Err(Error::ForeignObject {
                what: "PD",
                owner: pd.inner.ctx.id,
                used_with: self.inner.id,
            });
        }
        let (wqe_cnt, stride) = srq_geometry(max_wr, max_sge, &self.inner.caps)?;
        let attr = SrqCreate { wqe_cnt, stride, max_sge, user_index: self.inner.next_user_index() };
        let (raw, res) = B::create_srq(&self.inner.raw, &pd.inner.raw, &attr)?;
        let shared = Rc::new(SrqShared::new(raw, res, max_sge, pd.inner.clone())?);
        Ok(SharedReceiveQueue { shared })
    }

    #[allow(clippy::too_many_arguments)]
    fn create_qp<T>(
        &self,
        kind: QpKind,
        pd: &ProtectionDomain<B>,
        send_cq: Option<&Rc<CqShared<B, T>>>,
        recv_cq: &Rc<CqShared<B, T>>,
        srq: Option<&Rc<SrqShared<B, T>>>,
        config: &QpConfig,
    ) -> Result<Rc<QpShared<B, T>>> {
        let me = self.inner.id;
        let foreign = |what, owner| Error::ForeignObject { what, owner, used_with: me };
        if pd.inner.ctx.id != me {
            return Err(foreign("PD", pd.inner.ctx.id));
        }
        if let Some(c) = send_cq.filter(|c| c._ctx.id != me) {
            return Err(foreign("send CQ", c._ctx.id));
        }
        if recv_cq._ctx.id != me {
            return Err(foreign("receive CQ", recv_cq._ctx.id));
        }
        if let Some(s) = srq.filter(|s| s.ctx_id() != me) {
            return Err(foreign("SRQ", s.ctx_id()));
        }
        if matches!(kind, QpKind::Dci | QpKind::Dct) && !self.inner.caps.dc {
            return Err(Error::Unsupported(Unsupported::DcTransport));
        }
        if config.psn > 0xff_ffff {
            return Err(Error::InvalidArgument(InvalidArgument::OutOfRange {
                arg: Arg::Psn,
                value: config.psn.into(),
                min: 0,
                max: 0xff_ffff,
            }));
        }
        let caps = QpCaps {
            max_send_wr: config.max_send_wr,
            max_recv_wr: if srq.is_some() { 0 } else { config.max_recv_wr },
            max_send_sge: config.max_send_sge,
            max_recv_sge: if srq.is_some() { 0 } else { config.max_recv_sge },
            max_inline_data: config.max_inline_data,
        };
        let geo = if kind == QpKind::Dct {
            QpGeometry {
                sq_wqe_cnt: 0,
                max_wqe_ds: 0,
                rq_wqe_cnt: 0,
                rq_stride: 0,
                sq_wqe_size: 0,
                max_inline_data: 0,
            }
        } else {
            qp_geometry(kind, &caps, &self.inner.caps)?
        };
        let port = B::query_port(&self.inner.raw, config.port)?;
        let attr = QpCreate {
            kind,
            caps: caps.clone(),
            sq_wqe_cnt: geo.sq_wqe_cnt,
            rq_wqe_cnt: geo.rq_wqe_cnt,
            rq_stride: geo.rq_stride,
            user_index: self.inner.next_user_index(),
            dc_key: config.dc_key,
            dedicated_uar: config.dedicated_uar,
            scatter_to_cqe: config.scatter_to_cqe,
        };
        let (raw, res) = B::create_qp(
            &self.inner.raw,
            &pd.inner.raw,
            send_cq.map(|c| &c.raw),
            &recv_cq.raw,
            srq.map(|s| s.raw()),
            &attr,
        )?;
        // An own receive queue takes as many entries as its stride holds
        // (the kernel's `rq.max_gs`), at least 1 (the post relies on it),
        // and says so in the QP's capabilities.
        let mut caps = caps;
        let rq = match srq {
            None if res.rq_wqe_cnt > 0 => {
                let desc = RqDesc::new(res.rq_buf, res.rq_wqe_cnt, res.rq_stride, res.dbrec, u32::MAX)
                    .map_err(|source| Error::BadQueue { queue: Queue::Recv, source })?;
                caps.max_recv_sge = desc.max_sge;
                RecvQueue::new(desc)
            }
            _ => RecvQueue::empty(),
        };
        let max_msg = if kind == QpKind::Ud { port.active_mtu } else { 1 << 31 };
        let sq = match kind {
            QpKind::Dct => SendQueue::empty(),
            _ => {
                let sq_kind = match kind {
                    QpKind::Ud => SqKind::Ud,
                    QpKind::Dci => SqKind::Dci,
                    _ => SqKind::Rc,
                };
                let desc = SqDesc::new(
                    res.sq_buf,
                    res.sq_wqe_cnt,
                    // The SQ word of the QP's two doorbell record words (a
                    // null record stays unaligned and is refused).
                    res.dbrec.wrapping_add(1),
                    std::ptr::null_mut(),
                    res.qpn,
                    sq_kind,
                    caps.max_send_sge,
                    caps.max_inline_data,
                    geo.max_wqe_ds,
                    max_msg,
                )
                .map_err(|source| Error::BadQueue { queue: Queue::Send, source })?;
                let reg = self.inner.register(res.bf_reg, res.bf_size, res.uar);
                SendQueue::new(desc, reg)
            }
        };
        let wq = WorkQueues {
            // A DCT's number is assigned at RTR; the creation handle is the backend's.
            qpn: Cell::new(if kind == QpKind::Dct { 0 } else { res.qpn }),
            state: Cell::new(QpState::Reset),
            kind,
            link: port.link_layer,
            sq,
            rq,
            srq: srq.cloned(),
        };
        Ok(QpShared::new(QpParts {
            raw,
            wq,
            caps,
            port: config.port,
            psn: config.psn,
            send_cq: send_cq.cloned(),
            recv_cq: recv_cq.clone(),
            pd: pd.inner.clone(),
        }))
    }
}

/// A protection domain.
pub struct ProtectionDomain<B: Backend> {
    inner: Rc<PdInner<B>>,
}

impl<B: Backend> std::fmt::Debug for ProtectionDomain<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain").finish_non_exhaustive()
    }
}

impl<B: Backend> Clone for ProtectionDomain<B> {
    fn clone(&self) -> Self {
        ProtectionDomain { inner: self.inner.clone() }
    }
}

impl<B: Backend> ProtectionDomain<B> {
    /// The address vector (for UD and DC WQEs) that reaches `remote` from
    /// `port`, as the device and kernel resolve it: `ibv_create_ah` on
    /// hardware, so that RoCE traffic across a router goes to the router's
    /// MAC and leaves from the port's RoCE v2 GID, and a port that requires
    /// a GRH gets one. Build it once per peer; each WQE copies its 48 bytes.
    pub fn create_av(&self, port: u8, remote: &crate::RemoteQpInfo) -> Result<crate::AddressVector> {
        B::create_av(&self.inner.ctx.raw, &self.inner.raw, port, remote)
    }

    /// Allocate a memory window (`ibv_alloc_mw`): [`MkeyKind::Window1`](crate::MkeyKind::Window1) or
    /// [`MkeyKind::Window2`](crate::MkeyKind::Window2).
    pub fn alloc_mw(&self, kind: crate::MkeyKind) -> Result<crate::mkey::MemoryWindow<B>> {
        crate::mkey::MemoryWindow::alloc(self.inner.clone(), kind)
    }

    /// Create an indirect mkey for up to `max_entries` KLM entries (rounded
    /// up to a multiple of 4, as rdma-core does), free until an `mr_list`.
    pub fn create_indirect_mkey(&self, max_entries: u32) -> Result<crate::mkey::IndirectMkey<B>> {
        crate::mkey::IndirectMkey::create(self.inner.clone(), max_entries, false)
    }

    /// [`ProtectionDomain::create_indirect_mkey`] that a peer's SEND with
    /// invalidate may free (`MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE`).
    pub fn create_indirect_mkey_remote_invalidate(
        &self,
        max_entries: u32,
    ) -> Result<crate::mkey::IndirectMkey<B>> {
        crate::mkey::IndirectMkey::create(self.inner.clone(), max_entries, true)
    }

    /// Allocate `len` zeroed, page-aligned bytes and register them.
    pub fn alloc_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion<B>> {
        let buf = PageBuf::new(len)?;
        // SAFETY: the MR owns `buf`, which outlives the registration (field order).
        let (raw, lkey, rkey) =
            unsafe { B::reg_mr(&self.inner.ctx.raw, &self.inner.raw, buf.ptr, len, access)? };
        Ok(MemoryRegion {
            raw,
            lkey,
            rkey,
            addr: buf.ptr,
            len,
            access,
            _buf: Some(buf),
            _pd: self.inner.clone(),
        })
    }

    /// Register memory the caller owns.
    ///
    /// # Safety
    /// `[addr, addr+len)` must stay valid, and not be freed, until the
    /// returned region is dropped; the NIC may read and write it meanwhile.
    pub unsafe fn register_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion<B>> {
        // SAFETY: the caller keeps the range valid until the region is
        // dropped (this function's contract is `reg_mr`'s).
        let (raw, lkey, rkey) =
            unsafe { B::reg_mr(&self.inner.ctx.raw, &self.inner.raw, addr, len, access) }?;
        Ok(MemoryRegion { raw, lkey, rkey, addr, len, access, _buf: None, _pd: self.inner.clone() })
    }
}

/// Page-aligned zeroed heap memory.
struct PageBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl PageBuf {
    fn new(len: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| Error::InvalidArgument(InvalidArgument::Alloc { bytes: len }))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::InvalidArgument(InvalidArgument::Alloc { bytes: len }));
        }
        Ok(PageBuf { ptr, layout })
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// A registered memory region. The NIC may access it at any time, so its
/// contents are read and written by copy (`read`, `write`), never through
/// long-lived references.
pub struct MemoryRegion<B: Backend> {
    /// Deregistered first, before the memory below is freed.
    raw: B::Mr,
    lkey: u32,
    rkey: u32,
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
    _buf: Option<PageBuf>,
    _pd: Rc<PdInner<B>>,
}

impl<B: Backend> std::fmt::Debug for MemoryRegion<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

impl<B: Backend> MemoryRegion<B> {
    /// The local key SGEs carry.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The remote key peers use in RDMA and atomic WQEs.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Start address (what goes into SGEs and remote addresses).
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }
    /// The first byte (for copies the caller makes; the NIC writes here too).
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the region has no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The access rights the region was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    fn check(&self, offset: usize, n: usize) -> Result<()> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(Error::InvalidArgument(InvalidArgument::OutsideMr {
                offset,
                len: n,
                mr_len: self.len,
            }));
        }
        Ok(())
    }

    /// The scatter/gather entry for `len` bytes at `offset` in this region,
    /// for send WQEs ([`WqeBuilder::sge`](crate::WqeBuilder)) and receives
    /// alike; a range outside the region is an error, not a WQE the NIC
    /// would refuse.
    ///
    /// ```
    /// # use mlx5_api::{ring_only::{RingOnly, RingOnlyDevice}, AccessFlags, Device};
    /// # let ctx = Device::<RingOnly>::new(RingOnlyDevice::new(1, 64)).open()?;
    /// # let pd = ctx.alloc_pd()?;
    /// let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE)?;
    /// let sge = mr.sge(64, 128)?;
    /// assert_eq!((sge.addr, sge.len, sge.lkey), (mr.addr() + 64, 128, mr.lkey()));
    /// assert!(mr.sge(4000, 128).is_err());
    /// # Ok::<(), mlx5_api::Error>(())
    /// ```
    pub fn sge(&self, offset: usize, len: u32) -> Result<Sge> {
        self.check(offset, len as usize)?;
        Ok(Sge { addr: self.addr() + offset as u64, len, lkey: self.lkey() })
    }

    /// Copy `dst.len()` bytes out of the region at `offset`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        // SAFETY: in bounds of registered, live memory.
        unsafe { std::ptr::copy(self.addr.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copy `src` into the region at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        // SAFETY: in bounds of registered, live memory.
        unsafe { std::ptr::copy(src.as_ptr(), self.addr.add(offset), src.len()) };
        Ok(())
    }

    /// The whole region as a vector (a snapshot copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v).expect("whole region is in bounds");
        v
    }

    /// Its protection domain (a window binds only within one).
    pub(crate) fn pd_inner(&self) -> &Rc<PdInner<B>> {
        &self._pd
    }

    /// The backend's MR object.
    pub fn raw(&self) -> &B::Mr {
        &self.raw
    }
}
