//! RC queue pair: the state machine of spec §7 on the front-end side, the
//! entry point of the WQE builder, and receive posting.

use std::cell::Cell;
use std::rc::Rc;

use crate::backend::{Backend, QpCaps, QpTransition};
use crate::cq::CqShared;
use crate::device::PdInner;
use crate::error::{Error, Result};
use crate::rq::{RecvQueue, Sge};
use crate::sq::SendQueue;
use crate::types::{AccessFlags, ConnectParams, QpState, RemoteQpInfo};
use crate::wqe::{state::Init, WqeBuilder};

/// QP state shared by the user's handle and the CQs it reports to.
#[doc(hidden)]
pub struct QpShared<B: Backend, T> {
    /// Destroyed first: the backend QP goes before the CQs and the PD below.
    raw: B::Qp,
    pub(crate) sq: SendQueue<B, T>,
    pub(crate) rq: RecvQueue<T>,
    state: Cell<QpState>,
    qpn: u32,
    caps: QpCaps,
    send_cq: Rc<CqShared<B, T>>,
    recv_cq: Rc<CqShared<B, T>>,
    pd: Rc<PdInner<B>>,
}

impl<B: Backend, T> QpShared<B, T> {
    /// An error CQE moved the QP to ERR (spec §6.1).
    pub(crate) fn enter_error(&self) {
        self.state.set(QpState::Err);
    }
}

/// A reliable-connected queue pair. `T` is the entry type returned with
/// each completion.
pub struct RcQp<B: Backend, T> {
    shared: Rc<QpShared<B, T>>,
}

impl<B: Backend, T> RcQp<B, T> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        raw: B::Qp,
        sq: SendQueue<B, T>,
        rq: RecvQueue<T>,
        qpn: u32,
        caps: QpCaps,
        send_cq: Rc<CqShared<B, T>>,
        recv_cq: Rc<CqShared<B, T>>,
        pd: Rc<PdInner<B>>,
    ) -> Self {
        let shared = Rc::new(QpShared {
            raw,
            sq,
            rq,
            state: Cell::new(QpState::Reset),
            qpn,
            caps,
            send_cq,
            recv_cq,
            pd,
        });
        shared.send_cq.register(qpn, Rc::downgrade(&shared));
        if !Rc::ptr_eq(&shared.send_cq, &shared.recv_cq) {
            shared.recv_cq.register(qpn, Rc::downgrade(&shared));
        }
        RcQp { shared }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.shared.qpn
    }
    /// State as last set by a transition or observed through an error CQE.
    pub fn state(&self) -> QpState {
        self.shared.state.get()
    }
    /// The capabilities the QP was created with.
    pub fn caps(&self) -> &QpCaps {
        &self.shared.caps
    }
    /// Free WQEBBs in the send queue.
    pub fn sq_free(&self) -> u32 {
        self.shared.sq.free()
    }
    /// Size of the send queue in WQEBBs.
    pub fn sq_wqebbs(&self) -> u32 {
        self.shared.sq.wqe_cnt()
    }
    /// Producer counter of the next WQE (its `wqe_index` is this & 0xffff).
    pub fn sq_pi(&self) -> u32 {
        self.shared.sq.pi()
    }
    /// Receive WQEs posted and not yet completed.
    pub fn rq_outstanding(&self) -> u32 {
        self.shared.rq.outstanding()
    }

    /// A copy of the send ring's bytes (for dissection and snapshots).
    pub fn sq_ring_bytes(&self) -> Vec<u8> {
        self.shared.sq.ring_bytes()
    }
    /// The SQ doorbell record word as the device reads it (host value).
    pub fn sq_dbrec(&self) -> u32 {
        self.shared.sq.dbrec()
    }

    /// The send ring's memory, for fault-injection tests that must put bytes
    /// no builder would write (malformed WQEs) in front of the device.
    ///
    /// # Safety
    /// Writes through the pointer must stay inside the ring
    /// (`sq_wqebbs() * 64` bytes) and only touch unpublished WQEs.
    pub unsafe fn sq_buf(&self) -> *mut u8 {
        self.shared.sq.buf()
    }

    /// Advance the SQ counters by `wqebbs` as if that many NOPs had been
    /// posted and completed. For encoder tests that must place a WQE at a
    /// given `wqe_index` (the spec's golden examples).
    ///
    /// # Safety
    /// No device may be executing this QP: use it with the ring-only backend
    /// only, on an empty send queue (otherwise it returns an error).
    pub unsafe fn skip_sq(&self, wqebbs: u32) -> Result<()> {
        self.shared.sq.skip(wqebbs)
    }

    /// What a peer needs to connect to this QP on `port`.
    pub fn local_info(&self, port: u8, psn: u32) -> Result<RemoteQpInfo> {
        let p = B::query_port(&self.shared.pd.ctx.raw, port)?;
        let gid = match p.link_layer {
            crate::types::LinkLayer::Ethernet => Some(p.gid),
            crate::types::LinkLayer::InfiniBand => None,
        };
        Ok(RemoteQpInfo { qpn: self.qpn(), lid: p.lid, gid, psn })
    }

    fn transition(&self, to: QpState, t: &QpTransition) -> Result<()> {
        let from = self.state();
        if !from.can_transition_to(to) {
            return Err(Error::InvalidTransition { from, to });
        }
        B::modify_qp(&self.shared.pd.ctx.raw, &self.shared.raw, t)?;
        if to == QpState::Reset {
            self.shared.sq.reset();
            self.shared.rq.reset();
        }
        self.shared.state.set(to);
        Ok(())
    }

    /// RESET→INIT with the responder access rights of this QP.
    pub fn modify_to_init(&self, port: u8, access: AccessFlags) -> Result<()> {
        self.transition(QpState::Init, &QpTransition::Init { port, access })
    }
    /// INIT→RTR towards `remote`.
    pub fn modify_to_rtr(&self, remote: &RemoteQpInfo, p: &ConnectParams) -> Result<()> {
        self.transition(
            QpState::Rtr,
            &QpTransition::Rtr {
                remote: remote.clone(),
                path_mtu: p.path_mtu,
                min_rnr_timer: p.min_rnr_timer,
                max_dest_rd_atomic: p.max_dest_rd_atomic,
            },
        )
    }
    /// RTR→RTS.
    pub fn modify_to_rts(&self, p: &ConnectParams) -> Result<()> {
        self.transition(
            QpState::Rts,
            &QpTransition::Rts {
                timeout: p.timeout,
                retry_cnt: p.retry_cnt,
                rnr_retry: p.rnr_retry,
                sq_psn: p.sq_psn,
                max_rd_atomic: p.max_rd_atomic,
            },
        )
    }
    /// RESET→INIT→RTR→RTS in one call.
    pub fn connect(&self, remote: &RemoteQpInfo, p: &ConnectParams) -> Result<()> {
        self.modify_to_init(p.port, p.access)?;
        self.modify_to_rtr(remote, p)?;
        self.modify_to_rts(p)
    }
    /// Move to ERR: outstanding work completes with flush errors.
    pub fn modify_to_error(&self) -> Result<()> {
        self.transition(QpState::Err, &QpTransition::To(QpState::Err))
    }
    /// Move to RESET: every outstanding WQE and its entry is discarded.
    pub fn reset(&self) -> Result<()> {
        self.transition(QpState::Reset, &QpTransition::To(QpState::Reset))
    }

    /// Start a send WQE carrying `entry`, returned with its completion.
    /// Fails if the QP is not in RTS or the send queue is full.
    #[inline(always)]
    pub fn wqe_builder(&self, entry: T) -> Result<WqeBuilder<'_, B, T, Init>> {
        let state = self.shared.state.get();
        if state != QpState::Rts {
            return Err(Error::QpState { qpn: self.shared.qpn, state, needed: QpState::Rts });
        }
        if self.shared.sq.free() == 0 {
            return Err(Error::SqFull { needed: 1, free: 0 });
        }
        Ok(WqeBuilder::new(&self.shared.sq, entry))
    }

    /// Ring the doorbell for WQEs written with `finish_batch()`.
    #[inline(always)]
    pub fn ring_sq_doorbell(&self) {
        self.shared.sq.ring_doorbell();
    }

    /// Post one receive WQE (allowed from INIT on).
    #[inline(always)]
    pub fn post_recv(&self, entry: T, sges: &[Sge]) -> Result<()> {
        let state = self.shared.state.get();
        if state == QpState::Reset {
            return Err(Error::QpState { qpn: self.shared.qpn, state, needed: QpState::Init });
        }
        self.shared.rq.post(entry, sges)
    }
}

impl<B: Backend, T> Drop for RcQp<B, T> {
    fn drop(&mut self) {
        self.shared.send_cq.unregister(self.shared.qpn);
        self.shared.recv_cq.unregister(self.shared.qpn);
    }
}
