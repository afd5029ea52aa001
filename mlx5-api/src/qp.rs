//! Queue pairs: the state machine of spec §7 on the front-end side, the
//! entry points of the WQE builder, and receive posting. One shared core
//! serves every transport; the handle types (`RcQp`, `UdQp`, `Dci`, `Dct`)
//! expose what each transport allows. The work queues live in a
//! [`WorkQueues`] view that the QP's CQs dispatch to.

use std::rc::Rc;

use crate::backend::{Backend, QpCaps, QpKind, QpTransition};
use crate::connect::{ConnectParams, RemoteQpInfo};
use crate::cq::CqShared;
use crate::ctx::PdInner;
use crate::error::{Error, Result};
use crate::pool::PoolRc;
use crate::ring::{RqDesc, Sge, SqDesc};
use crate::types::{AccessFlags, LinkLayer, QpState};
use crate::wq::WorkQueues;
use crate::wqe::state::{DcInit, Init, UdInit};
use crate::wqe::WqeBuilder;

/// QP state shared by the user's handle.
#[doc(hidden)]
pub struct QpShared<B: Backend, T> {
    /// Destroyed first: the backend QP goes before the CQs, SRQ and PD below.
    raw: B::Qp,
    pub(crate) wq: PoolRc<WorkQueues<B, T>>,
    caps: QpCaps,
    /// The port from `QpConfig::port`.
    port: u8,
    /// The start PSN from `QpConfig::psn`.
    psn: u32,
    send_cq: Option<Rc<CqShared<B, T>>>,
    recv_cq: Rc<CqShared<B, T>>,
    pd: Rc<PdInner<B>>,
}

impl<B: Backend, T> std::fmt::Debug for QpShared<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpShared").finish_non_exhaustive()
    }
}

/// Everything `QpShared::new` needs.
pub(crate) struct QpParts<B: Backend, T> {
    pub raw: B::Qp,
    pub wq: WorkQueues<B, T>,
    pub caps: QpCaps,
    pub port: u8,
    pub psn: u32,
    pub send_cq: Option<Rc<CqShared<B, T>>>,
    pub recv_cq: Rc<CqShared<B, T>>,
    pub pd: Rc<PdInner<B>>,
}

impl<B: Backend, T> QpShared<B, T> {
    pub(crate) fn new(p: QpParts<B, T>) -> Rc<Self> {
        let shared = Rc::new(QpShared {
            raw: p.raw,
            wq: PoolRc::new(p.wq),
            caps: p.caps,
            port: p.port,
            psn: p.psn,
            send_cq: p.send_cq,
            recv_cq: p.recv_cq,
            pd: p.pd,
        });
        // A DCT is known to its CQ by its DCT number, which exists from RTR on.
        if shared.wq.kind != QpKind::Dct {
            shared.register(shared.wq.qpn.get());
        }
        shared
    }

    fn cqs(&self) -> impl Iterator<Item = &Rc<CqShared<B, T>>> {
        let recv = Some(&self.recv_cq).filter(|r| self.send_cq.as_ref().is_none_or(|s| !Rc::ptr_eq(s, r)));
        self.send_cq.iter().chain(recv)
    }

    fn register(&self, qpn: u32) {
        for cq in self.cqs() {
            cq.register(qpn, self.wq.clone());
        }
    }

    fn unregister(&self) {
        let qpn = self.wq.qpn.get();
        for cq in self.cqs() {
            cq.unregister(qpn);
        }
    }

    fn transition(&self, to: QpState, t: &QpTransition) -> Result<()> {
        let from = self.wq.state.get();
        if !from.can_transition_to(to) {
            return Err(Error::InvalidTransition { from, to });
        }
        B::modify_qp(&self.pd.ctx.raw, &self.raw, t)?;
        if to == QpState::Reset {
            self.wq.sq.reset();
            self.wq.rq.reset();
        }
        self.wq.set_state(to);
        if self.wq.kind == QpKind::Dct && to == QpState::Rtr {
            let n = B::dct_number(&self.pd.ctx.raw, &self.raw)?;
            self.wq.qpn.set(n);
            self.register(n);
        }
        Ok(())
    }

    fn port_info(&self) -> Result<crate::types::PortInfo> {
        B::query_port(&self.pd.ctx.raw, self.port)
    }

    /// RESET→INIT on the configured port.
    fn to_init(&self, access: AccessFlags, qkey: Option<u32>) -> Result<()> {
        self.transition(QpState::Init, &QpTransition::Init { port: self.port, access, qkey })
    }

    /// INIT→RTR with `p`'s receive parameters (and peer, RC). The READ /
    /// atomic depth is clamped to the device's `max_qp_rd_atom`.
    fn to_rtr(&self, p: &ConnectParams, remote: Option<RemoteQpInfo>) -> Result<()> {
        if let Some(r) = &remote {
            if r.gid.is_none() && r.mac.is_none() {
                let port = self.port_info()?;
                if port.grh_required && port.link_layer == LinkLayer::InfiniBand {
                    return Err(Error::InvalidArgument(crate::error::InvalidArgument::GrhRequired {
                        port: self.port,
                        peer_qpn: r.qpn,
                    }));
                }
            }
        }
        let t = QpTransition::Rtr {
            remote,
            path_mtu: p.path_mtu,
            min_rnr_timer: p.min_rnr_timer,
            max_dest_rd_atomic: p.max_dest_rd_atomic.min(self.pd.ctx.caps.max_rd_atomic),
            sl: p.sl,
        };
        self.transition(QpState::Rtr, &t)
    }

    /// RTR→RTS (or SQE→RTS) with `p`'s send parameters and the configured PSN.
    fn to_rts(&self, p: &ConnectParams) -> Result<()> {
        let t = QpTransition::Rts {
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            sq_psn: self.psn,
            max_rd_atomic: p.max_rd_atomic.min(self.pd.ctx.caps.max_rd_atomic),
        };
        self.transition(QpState::Rts, &t)
    }

    /// The peer of an RC QP (required), or none for the other transports
    /// (refused if given).
    fn peer(&self, p: &ConnectParams) -> Result<Option<RemoteQpInfo>> {
        match (self.wq.kind, &p.remote) {
            (QpKind::Rc, None) => Err(Error::InvalidArgument(crate::error::InvalidArgument::RcNeedsPeer)),
            (QpKind::Rc, Some(r)) => Ok(Some(r.clone())),
            (_, None) => Ok(None),
            (kind, Some(_)) => {
                Err(Error::InvalidArgument(crate::error::InvalidArgument::RemoteNotForThisKind { kind }))
            }
        }
    }
}

/// Methods every handle has.
macro_rules! common {
    () => {
        /// QP number (for a DCT: the DCT number, 0 before RTR).
        pub fn qpn(&self) -> u32 {
            self.wq.qpn.get()
        }
        /// State as last set by a transition or observed through an error CQE.
        pub fn state(&self) -> QpState {
            self.wq.state.get()
        }
        /// The capabilities the QP was created with.
        pub fn caps(&self) -> &QpCaps {
            &self.shared.caps
        }
        /// The port this QP was created on ([`QpConfig::port`](crate::QpConfig::port)).
        pub fn port(&self) -> u8 {
            self.shared.port
        }
        /// What a peer needs to reach this QP, to send out of band: the QP
        /// number, the address of its port (LID on InfiniBand, with the GID
        /// when the port requires a GRH; GID and MAC on RoCE) and its start
        /// PSN ([`QpConfig::psn`](crate::QpConfig::psn)).
        pub fn local_info(&self) -> Result<RemoteQpInfo> {
            let p = self.shared.port_info()?;
            let psn = self.shared.psn;
            Ok(match p.link_layer {
                LinkLayer::Ethernet => RemoteQpInfo { psn, ..RemoteQpInfo::roce(self.qpn(), p.gid, p.mac) },
                // A port that requires a GRH is addressed with it: the GID goes along.
                LinkLayer::InfiniBand => RemoteQpInfo {
                    psn,
                    gid: p.grh_required.then_some(p.gid),
                    ..RemoteQpInfo::ib(self.qpn(), p.lid)
                },
            })
        }
        /// Move to ERR: outstanding work completes with flush errors.
        pub fn modify_to_error(&self) -> Result<()> {
            self.shared.transition(QpState::Err, &QpTransition::To(QpState::Err))
        }
        /// Move to RESET: every outstanding WQE and its entry is discarded.
        pub fn reset(&self) -> Result<()> {
            self.shared.transition(QpState::Reset, &QpTransition::To(QpState::Reset))
        }
    };
}

/// Methods of handles with a send queue.
macro_rules! send_queue {
    () => {
        /// Ask the cache for the lines the next post on this queue touches:
        /// the queue's state, the next WQE's ring lines, its entry's slot
        /// and the doorbell record. A hint: it changes nothing and cannot
        /// fail, in any state.
        ///
        /// For posting round robin over many QPs. With thousands taking
        /// turns, those lines were last touched a whole round ago and are
        /// out of cache; the post then waits for them, and its doorbell for
        /// the WQE's stores to reach memory. Call this for the QP you will
        /// post to next, before posting to the current one, and the lines
        /// arrive meanwhile:
        ///
        /// ```text
        /// for (i, qp) in qps.iter().enumerate() {
        ///     qps[(i + 1) % qps.len()].prefetch_post();
        ///     qp.wqe_builder(i as u64)?.ctrl_rdma_write(WqeFlags::SIGNALED)? /* ... */;
        /// }
        /// ```
        ///
        /// On the deterministic simulator with 4096 RC QPs taking turns this
        /// takes a 64-byte WRITE from about 206 to 188 ns (medians of
        /// interleaved rounds); with one QP the lines are in cache already
        /// and it costs about 2 ns (README, Performance, "Then the next QP's
        /// lines" and "The driver's per-QP state in huge pages"). A handful
        /// of instructions, none of them in `post`; the hardware backend
        /// takes the same hint (the lines are the driver's own memory and
        /// the device's ring). Not with the threaded simulator and
        /// thousands of QPs: its NIC thread, on another core, reads the
        /// same lines, and the hint made 4096 QPs slower there (about 360
        /// -> 400 ns; 64 QPs: 295 -> 272).
        #[inline(always)]
        pub fn prefetch_post(&self) {
            // Reading the producer and the ring's address brings the queue's
            // lines (the post's two, `wq::tests::what_a_post_reads_lies_on_the_first_two_lines`).
            self.wq.sq.prefetch_next();
        }
        /// Free WQEBBs in the send queue.
        pub fn sq_free(&self) -> u32 {
            self.wq.sq.desc.free()
        }
        /// Size of the send queue in WQEBBs.
        pub fn sq_wqebbs(&self) -> u32 {
            self.wq.sq.desc.wqe_cnt
        }
        /// Producer counter of the next WQE (its `wqe_index` is this & 0xffff).
        pub fn sq_pi(&self) -> u32 {
            self.wq.sq.desc.producer()
        }
        /// Ring the doorbell for WQEs written with `finish_batch()`.
        #[inline(always)]
        pub fn ring_sq_doorbell(&self) {
            self.wq.sq.ring_doorbell();
        }
        /// A copy of the send ring's bytes (for dissection and snapshots).
        pub fn sq_ring_bytes(&self) -> Vec<u8> {
            let d = &self.wq.sq.desc;
            let mut v = vec![0u8; d.byte_mask() + 1];
            // SAFETY: the ring is byte_mask + 1 bytes of live memory.
            unsafe { std::ptr::copy(d.buf, v.as_mut_ptr(), v.len()) };
            v
        }
        /// The SQ doorbell record word as the device reads it (host value).
        pub fn sq_dbrec(&self) -> u32 {
            u32::from_be(
                // SAFETY: the doorbell record lives as long as the QP.
                unsafe { std::sync::atomic::AtomicU32::from_ptr(self.wq.sq.desc.dbrec) }
                    .load(std::sync::atomic::Ordering::Acquire),
            )
        }
        /// The send queue's ring-core descriptor, for executors that post
        /// with their own code (the C ABI, another thread).
        ///
        /// # Safety
        /// WQEs posted through it are not known to this handle's entries:
        /// their completions must not be polled through this QP's CQ
        /// handles (they would retire entries the handle never stored).
        /// Use the descriptor with the ring core's CQ reader, and the
        /// builder not at the same time: no other thread may post through
        /// it while this QP's CQ handles retire its WQEs (they read the
        /// producer counter plainly).
        pub unsafe fn sq_desc(&self) -> &SqDesc {
            &self.wq.sq.desc
        }
        /// The send ring's memory, for fault-injection tests that must put
        /// bytes no builder would write (malformed WQEs) in front of the device.
        ///
        /// # Safety
        /// Writes through the pointer must stay inside the ring
        /// (`sq_wqebbs() * 64` bytes) and only touch unpublished WQEs.
        pub unsafe fn sq_buf(&self) -> *mut u8 {
            self.wq.sq.desc.buf
        }
        /// Advance the SQ counters by `wqebbs` as if that many NOPs had been
        /// posted and completed. For encoder tests that must place a WQE at a
        /// given `wqe_index` (the spec's golden examples).
        ///
        /// # Safety
        /// No device may be executing this QP: use it with the ring-only
        /// backend only, on an empty send queue (otherwise it returns an error).
        pub unsafe fn skip_sq(&self, wqebbs: u32) -> Result<()> {
            let d = &self.wq.sq.desc;
            if d.producer() != d.consumer() {
                return Err(Error::InvalidArgument(crate::error::InvalidArgument::SendQueueNotEmpty {
                    outstanding: d.producer().wrapping_sub(d.consumer()),
                }));
            }
            let pi = d.producer().wrapping_add(wqebbs);
            for c in [&d.pi, &d.ci, &d.last] {
                c.store(pi, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        }
        /// Largest message one WQE may carry (UD: the path MTU).
        pub fn max_message(&self) -> u32 {
            self.wq.sq.desc.max_msg
        }
    };
}

/// Methods of handles with their own receive queue (or an SRQ).
macro_rules! recv_queue {
    () => {
        /// Post one receive WQE on the QP's own receive queue (allowed from
        /// INIT on). A QP created on an SRQ receives from the SRQ instead.
        #[inline(always)]
        pub fn post_recv(&self, entry: T, sges: &[Sge]) -> Result<()> {
            self.wq.post_recv(entry, sges)
        }
        /// Receive WQEs posted on the own receive queue and not yet completed.
        pub fn rq_outstanding(&self) -> u32 {
            self.wq.rq.desc.outstanding()
        }
        /// The receive queue's ring-core descriptor (`None` on an SRQ).
        ///
        /// # Safety
        /// As for `sq_desc`: receives posted through it are not known to
        /// this handle, and their completions must not be polled through
        /// this QP's CQ handles (the own queue keeps its entries by slot,
        /// live from posting to completion).
        pub unsafe fn rq_desc(&self) -> Option<&RqDesc> {
            let rq = &self.wq.rq;
            rq.exists().then_some(&rq.desc)
        }
    };
}

/// The post paths, on the work queues the handle reaches in one step (a
/// handle keeps them beside its `QpShared`: with thousands of QPs taking
/// turns, each further pointer on the way is a cache miss per post).
impl<B: Backend, T> WorkQueues<B, T> {
    /// Start a WQE. The QP's state and the queue's room are one compare
    /// (`SendQueue::open`, 0 outside RTS); a refusal is sorted out in
    /// `send_refused`.
    #[inline(always)]
    pub(crate) fn builder<S>(&self, entry: T, init: S) -> Result<WqeBuilder<'_, B, T, S>> {
        match WqeBuilder::new(&self.sq, entry, init) {
            Ok(b) => Ok(b),
            Err(_) => Err(self.send_refused()),
        }
    }

    /// The error for a refused WQE: the state outside RTS, else a full ring.
    #[cold]
    fn send_refused(&self) -> Error {
        let state = self.state.get();
        if state != QpState::Rts {
            return Error::QpState { qpn: self.qpn.get(), state, needed: QpState::Rts };
        }
        Error::SqFull { needed: 1, free: 0 }
    }

    /// Post a receive. The QP's state, whether it has its own receive queue
    /// and the queue's room are one compare (`RecvQueue::open`); a refusal
    /// is sorted out in `recv_refused`.
    #[inline(always)]
    pub(crate) fn post_recv(&self, entry: T, sges: &[Sge]) -> Result<()> {
        match self.rq.post(entry, sges) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.recv_refused(e)),
        }
    }

    /// The error for a refused receive: the state, the SRQ or the missing
    /// queue when the queue is closed, else the ring core's own.
    #[cold]
    fn recv_refused(&self, e: crate::ring::PostError) -> Error {
        let state = self.state.get();
        if state == QpState::Reset {
            return Error::QpState { qpn: self.qpn.get(), state, needed: QpState::Init };
        }
        if self.srq.is_some() {
            return Error::InvalidArgument(crate::error::InvalidArgument::ReceivesFromSrq);
        }
        if !self.rq.exists() {
            return Error::InvalidArgument(crate::error::InvalidArgument::NoReceiveQueue);
        }
        debug_assert!(!self.rq.is_closed());
        e.into()
    }
}

macro_rules! handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        pub struct $name<B: Backend, T> {
            pub(crate) shared: Rc<QpShared<B, T>>,
            /// `shared.wq`, one pointer nearer for the post paths.
            wq: PoolRc<WorkQueues<B, T>>,
        }
        impl<B: Backend, T> $name<B, T> {
            pub(crate) fn from_shared(shared: Rc<QpShared<B, T>>) -> Self {
                $name { wq: shared.wq.clone(), shared }
            }
        }
        impl<B: Backend, T> std::fmt::Debug for $name<B, T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let s = &self.shared;
                f.debug_struct(stringify!($name))
                    .field("qpn", &format_args!("{:#x}", s.wq.qpn.get()))
                    .field("state", &s.wq.state.get())
                    .field("port", &s.port)
                    .field("psn", &format_args!("{:#x}", s.psn))
                    .field("caps", &s.caps)
                    .finish()
            }
        }
        impl<B: Backend, T> Drop for $name<B, T> {
            fn drop(&mut self) {
                self.shared.unregister();
            }
        }
    };
}

handle!(
    /// A reliable-connected queue pair. `T` is the entry type returned with
    /// each completion.
    RcQp
);
handle!(
    /// An unreliable-datagram queue pair.
    UdQp
);
handle!(
    /// A DC initiator: sends to any DCT, addressed per WQE.
    Dci
);
handle!(
    /// A DC target: receives from any DCI through its SRQ; its number exists
    /// from RTR on.
    Dct
);

impl<B: Backend, T> RcQp<B, T> {
    common!();
    send_queue!();
    recv_queue!();

    /// RESET→INIT→RTR→RTS towards `p.remote` (required): the bring-up
    /// every QP type shares. Our `sq_psn` is [`QpConfig::psn`](crate::QpConfig::psn),
    /// our expected receive PSN the peer's `psn`.
    ///
    /// PSNs must agree: if the peer expects another PSN than ours, our
    /// requests are never executed; the peer answers a PSN sequence error
    /// (ahead) or treats them as duplicates (behind), our retries run out,
    /// and the WQE completes with [`Syndrome::TransportRetryExceeded`](crate::Syndrome)
    /// (`IBV_WC_RETRY_EXC_ERR`), the QP moves to ERR and later WQEs flush.
    /// The simulator checks this the same way.
    pub fn activate(&self, p: &ConnectParams) -> Result<()> {
        let remote = self.shared.peer(p)?;
        self.shared.to_init(p.access, None)?;
        self.shared.to_rtr(p, remote)?;
        self.shared.to_rts(p)
    }
    /// RESET→INIT alone (the first step of [`RcQp::activate`]), for code
    /// that posts receives before the peer is known.
    pub fn modify_to_init(&self, p: &ConnectParams) -> Result<()> {
        self.shared.to_init(p.access, None)
    }
    /// INIT→RTR towards `p.remote` (the second step of [`RcQp::activate`]).
    pub fn modify_to_rtr(&self, p: &ConnectParams) -> Result<()> {
        let remote = self.shared.peer(p)?;
        self.shared.to_rtr(p, remote)
    }
    /// RTR→RTS (the last step of [`RcQp::activate`]).
    pub fn modify_to_rts(&self, p: &ConnectParams) -> Result<()> {
        self.shared.to_rts(p)
    }

    /// Start a send WQE carrying `entry`, returned with its completion.
    /// Fails if the QP is not in RTS or the send queue is full.
    #[inline(always)]
    pub fn wqe_builder(&self, entry: T) -> Result<WqeBuilder<'_, B, T, Init>> {
        self.wq.builder(entry, Init)
    }
}

impl<B: Backend, T> UdQp<B, T> {
    common!();
    send_queue!();
    recv_queue!();

    /// RESET→INIT→RTR→RTS with `p.qkey`, the Q_Key incoming datagrams
    /// must carry (`p.remote` must be `None`: each WQE names its destination).
    pub fn activate(&self, p: &ConnectParams) -> Result<()> {
        self.shared.peer(p)?;
        self.shared.to_init(AccessFlags::NONE, Some(p.qkey))?;
        self.shared.to_rtr(
            &ConnectParams { path_mtu: 0, min_rnr_timer: 0, max_dest_rd_atomic: 0, ..p.clone() },
            None,
        )?;
        self.shared.to_rts(p)
    }

    /// SQE→RTS after a send error (the receive side kept working). In RTS
    /// there is nothing to recover: `Ok` and no modify (an SQE→RTS on a QP
    /// in RTS is refused by the kernel). In ERR (or before RTS) it is
    /// [`Error::InvalidTransition`]: `reset()` and `activate()` instead.
    pub fn recover(&self) -> Result<()> {
        match self.state() {
            QpState::Rts => Ok(()),
            QpState::Sqe => self.shared.transition(QpState::Rts, &QpTransition::Recover),
            from => Err(Error::InvalidTransition { from, to: QpState::Rts }),
        }
    }

    /// Start a UD SEND carrying `entry`: ctrl, then the datagram segment.
    #[inline(always)]
    pub fn wqe_builder(&self, entry: T) -> Result<WqeBuilder<'_, B, T, UdInit>> {
        self.wq.builder(entry, UdInit)
    }
}

impl<B: Backend, T> Dci<B, T> {
    common!();
    send_queue!();

    /// RESET→INIT→RTR→RTS (spec §7: INIT needs the port, RTR the path MTU,
    /// RTS the retry parameters). The destination comes with every WQE
    /// (`p.remote` must be `None`).
    pub fn activate(&self, p: &ConnectParams) -> Result<()> {
        self.shared.peer(p)?;
        self.shared.to_init(AccessFlags::NONE, None)?;
        self.shared.to_rtr(&ConnectParams { max_dest_rd_atomic: 0, ..p.clone() }, None)?;
        self.shared.to_rts(p)
    }

    /// Start a WQE to some DCT: ctrl, then the address vector.
    #[inline(always)]
    pub fn wqe_builder(&self, entry: T) -> Result<WqeBuilder<'_, B, T, DcInit>> {
        self.wq.builder(entry, DcInit)
    }
}

impl<B: Backend, T> Dct<B, T> {
    common!();

    /// RESET→INIT→RTR (a DCT's final state): the DCT number is assigned
    /// here and the DCT starts receiving on its SRQ, accepting `p.access`
    /// from initiators that present [`QpConfig::dc_key`](crate::QpConfig::dc_key)
    /// (`p.remote` must be `None`).
    pub fn activate(&self, p: &ConnectParams) -> Result<()> {
        self.shared.peer(p)?;
        self.shared.to_init(p.access, None)?;
        self.shared.to_rtr(p, None)
    }

    /// The DCT number initiators address (read live: it exists from RTR on).
    pub fn dct_number(&self) -> Result<u32> {
        match self.state() {
            QpState::Rtr => Ok(self.wq.qpn.get()),
            state => Err(Error::DctNotReady { state }),
        }
    }
}
