//! Completion-queue polling (spec §5, §6) on the ring core: the ownership
//! check and CQE reader of [`crate::ring::CqDesc`], then dispatch through an
//! O(1) QPN table to the view of the QP's work queues ([`WorkQueues`]),
//! which retires the WQE the CQE names (and the unsignaled WQEs before it)
//! and gives back the user's entry. `MonoCq` takes the callback as a type
//! parameter so the compiler inlines it; `CompletionQueue` stores a boxed
//! callback.

use std::cell::{Cell, UnsafeCell};
use std::rc::Rc;

use crate::backend::{Backend, CqResources, QpKind};
use crate::ctx::CtxInner;
use crate::qpn_table::QpnTable;
pub use crate::ring::cqe::cqe_opcode;
use crate::ring::cqe::CqeView;
use crate::ring::seg::opcode;
use crate::ring::CqDesc;
pub use crate::ring::{CqeError, Status, Syndrome};
use crate::types::LinkLayer;
use crate::wq::WorkQueues;

/// What completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    Send,
    SendImm,
    SendInv,
    RdmaWrite,
    RdmaWriteImm,
    RdmaRead,
    AtomicCs,
    AtomicFa,
    Nop,
    /// A send opcode this library does not name.
    OtherSend(u8),
    /// Receive of a SEND.
    Recv,
    /// Receive of a SEND with immediate.
    RecvImm,
    /// Receive of a SEND with invalidate.
    RecvInv,
    /// Receive consumed by an RDMA WRITE with immediate.
    RecvRdmaImm,
    /// A receive completed in error (flush included).
    RecvError,
}

impl WcOpcode {
    #[inline(always)]
    fn from_send(op: u8) -> Self {
        match op {
            opcode::SEND => Self::Send,
            opcode::SEND_IMM => Self::SendImm,
            opcode::SEND_INVAL => Self::SendInv,
            opcode::RDMA_WRITE => Self::RdmaWrite,
            opcode::RDMA_WRITE_IMM => Self::RdmaWriteImm,
            opcode::RDMA_READ => Self::RdmaRead,
            opcode::ATOMIC_CS => Self::AtomicCs,
            opcode::ATOMIC_FA => Self::AtomicFa,
            opcode::NOP => Self::Nop,
            other => Self::OtherSend(other),
        }
    }
    /// Whether this is a receive-side completion.
    pub fn is_recv(self) -> bool {
        matches!(self, Self::Recv | Self::RecvImm | Self::RecvInv | Self::RecvRdmaImm | Self::RecvError)
    }
}

/// A decoded completion, handed to the callback with the user's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub status: Status,
    pub opcode: WcOpcode,
    pub qpn: u32,
    /// `wqe_counter`: the send WQE's index, or the receive counter.
    pub wqe_counter: u16,
    /// `byte_cnt` (8 for atomics, as rdma-core reports).
    pub byte_len: u32,
    /// Immediate data (host value) for `RecvImm` / `RecvRdmaImm`.
    pub imm: Option<u32>,
    /// The rkey invalidated by a `RecvInv`.
    pub invalidated_rkey: Option<u32>,
    /// Source QPN (`flags_rqpn[23:0]`) of a receive.
    pub src_qpn: u32,
    pub slid: u16,
    /// Whether the sender asked for a solicited event.
    pub solicited: bool,
    /// Receives: a GRH (InfiniBand) or IP header (RoCE) is in the first 40
    /// bytes of the receive buffer (`flags_rqpn[29:28]`; UD, spec §6.6).
    pub grh: bool,
    /// Receives over InfiniBand: the sender's service level (`flags_rqpn[27:24]`).
    pub sl: u8,
    /// Receives over RoCE: which network header sits in the GRH slot.
    pub network: Option<RoceL3>,
    pub timestamp: u64,
    /// CQE version 1 user index (`srqn_uidx[23:0]`): the simulator reports
    /// the index the front-end chose; on hardware rdma-core assigns its own.
    /// Completions are attributed by QPN, never by this field.
    pub user_index: u32,
}

/// The network header of a RoCE receive (`flags_rqpn[25:24]`, spec §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoceL3 {
    /// RoCE v1 GRH.
    Grh,
    /// RoCE v2 over IPv6: a 40-byte IPv6 header.
    Ipv6,
    /// RoCE v2 over IPv4: the 20-byte IPv4 header is in bytes 20..40.
    Ipv4,
}

/// A CQE the poller consumed but could not attribute to a posted work
/// request: an unknown opcode, a compressed/scatter format it does not
/// decode, a QPN with no live QP, or a `wqe_counter` matching nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownCqe {
    pub op_own: u8,
    pub qpn: u32,
    pub wqe_counter: u16,
    pub reason: UnknownReason,
}

/// Why a CQE could not be attributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownReason {
    Opcode,
    Format,
    NoSuchQp,
    NoSuchWqe,
}

/// What one `poll` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollOutcome {
    /// Completions dispatched to the callback.
    pub completions: u32,
    /// CQEs consumed but not attributable (see [`UnknownCqe`]).
    pub unknown: u32,
}

impl PollOutcome {
    /// CQEs consumed in total.
    pub fn consumed(&self) -> u32 {
        self.completions + self.unknown
    }
}

/// The CQ state shared by the user's CQ handle and the QPs that use it.
#[doc(hidden)]
pub struct CqShared<B: Backend, T> {
    pub(crate) desc: CqDesc,
    /// QPN → work queues of the QPs reporting here. Entries are removed
    /// when a QP handle drops; no reference into the table is held while
    /// user code (the callback) runs, so a callback may drop a QP.
    table: UnsafeCell<QpnTable<Rc<WorkQueues<B, T>>>>,
    last_unknown: Cell<Option<UnknownCqe>>,
    pub(crate) raw: B::Cq,
    pub(crate) _ctx: Rc<CtxInner<B>>,
}

impl<B: Backend, T> CqShared<B, T> {
    pub(crate) fn new(raw: B::Cq, res: CqResources, ctx: Rc<CtxInner<B>>) -> Self {
        CqShared {
            desc: CqDesc::new(res.buf, res.cqe_cnt, res.cqe_size, res.dbrec, res.cqn),
            table: UnsafeCell::new(QpnTable::default()),
            last_unknown: Cell::new(None),
            raw,
            _ctx: ctx,
        }
    }

    pub(crate) fn register(&self, qpn: u32, wq: Rc<WorkQueues<B, T>>) {
        // SAFETY: single-threaded; no reference into the table is live
        // (lookups never outlive a dispatch, which runs no user code).
        unsafe { (*self.table.get()).insert(qpn, wq) };
    }

    pub(crate) fn unregister(&self, qpn: u32) {
        // SAFETY: as in `register`.
        drop(unsafe { (*self.table.get()).remove(qpn) });
    }

    /// Consumer index (free-running).
    pub(crate) fn ci(&self) -> u32 {
        self.desc.consumer()
    }

    /// Poll up to `budget` CQEs, dispatching each completion to `f`.
    #[inline(always)]
    pub(crate) fn poll_with<F: FnMut(Completion, T)>(&self, budget: u32, f: &mut F) -> PollOutcome {
        let mut out = PollOutcome::default();
        while out.consumed() < budget {
            // SAFETY: the backend's live CQ ring; handles are single-threaded.
            let Some(p) = (unsafe { self.desc.next() }) else { break };
            // SAFETY: `p` is an owned 64-byte CQE, read before it is handed back.
            let decoded = self.dispatch(unsafe { CqeView::new(p) });
            // Hand the slot back before running user code (which may post
            // WQEs whose CQEs land here): everything was read first.
            // SAFETY: as above; the CQE was read.
            unsafe { self.desc.advance() };
            match decoded {
                Ok((c, entry)) => {
                    out.completions += 1;
                    f(c, entry);
                }
                Err(u) => {
                    out.unknown += 1;
                    self.last_unknown.set(Some(u));
                }
            }
        }
        if out.consumed() == 0 {
            B::cq_idle(&self.raw);
        }
        out
    }

    /// Retire the work request a CQE names and build its completion
    /// (fields the callback does not read are never loaded).
    #[inline(always)]
    fn dispatch(&self, v: CqeView) -> Result<(Completion, T), UnknownCqe> {
        let qpn = v.qpn();
        let unknown = |reason| UnknownCqe { op_own: v.op_own(), qpn, wqe_counter: v.wqe_counter(), reason };
        let op_own = v.op_own();
        if op_own & 0x0c != 0 {
            // Compressed sessions and scatter-to-CQE are never enabled by this library.
            return Err(unknown(UnknownReason::Format));
        }
        // SAFETY: single-threaded; the reference ends with this function,
        // which runs no user code.
        let Some(wq) = (unsafe { &*self.table.get() }).get(qpn) else {
            return Err(unknown(UnknownReason::NoSuchQp));
        };
        let status = v.status();
        let ok = status.is_ok();
        let mut c = Completion {
            status,
            opcode: WcOpcode::Nop,
            qpn,
            wqe_counter: v.wqe_counter(),
            byte_len: if ok { v.byte_cnt() } else { 0 },
            imm: None,
            invalidated_rkey: None,
            src_qpn: 0,
            slid: 0,
            solicited: op_own & 2 != 0,
            grh: false,
            sl: 0,
            network: None,
            timestamp: if ok { v.timestamp() } else { 0 },
            user_index: v.srqn_uidx() & 0xff_ffff,
        };
        match op_own >> 4 {
            cqe_opcode::REQ | cqe_opcode::REQ_ERR => {
                let Some((entry, op)) = wq.retire_send(c.wqe_counter) else {
                    return Err(unknown(UnknownReason::NoSuchWqe));
                };
                c.opcode = WcOpcode::from_send(op);
                if !ok {
                    wq.enter_error(true);
                } else if matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
                    c.byte_len = 8;
                }
                Ok((c, entry))
            }
            op @ (cqe_opcode::RESP_WR_IMM..=cqe_opcode::RESP_SEND_INV | cqe_opcode::RESP_ERR) => {
                let Some(entry) = wq.retire_recv(c.wqe_counter) else {
                    return Err(unknown(UnknownReason::NoSuchWqe));
                };
                c.opcode = match op {
                    cqe_opcode::RESP_WR_IMM => WcOpcode::RecvRdmaImm,
                    cqe_opcode::RESP_SEND => WcOpcode::Recv,
                    cqe_opcode::RESP_SEND_IMM => WcOpcode::RecvImm,
                    cqe_opcode::RESP_SEND_INV => WcOpcode::RecvInv,
                    _ => WcOpcode::RecvError,
                };
                match op {
                    cqe_opcode::RESP_WR_IMM | cqe_opcode::RESP_SEND_IMM => c.imm = Some(v.imm_inval_pkey()),
                    cqe_opcode::RESP_SEND_INV => c.invalidated_rkey = Some(v.imm_inval_pkey()),
                    _ => {}
                }
                if !ok {
                    // A receive error moves an RC QP to ERR; a UD QP or a
                    // DCT keeps receiving (see the simulator's README).
                    if wq.kind == QpKind::Rc {
                        wq.enter_error(false);
                    }
                } else {
                    let flags_rqpn = v.flags_rqpn();
                    c.src_qpn = flags_rqpn & 0xff_ffff;
                    c.slid = v.slid();
                    c.grh = (flags_rqpn >> 28) & 3 != 0;
                    match wq.link {
                        LinkLayer::InfiniBand => c.sl = ((flags_rqpn >> 24) & 0xf) as u8,
                        LinkLayer::Ethernet => {
                            c.network = Some(match (flags_rqpn >> 24) & 3 {
                                2 => RoceL3::Ipv4,
                                1 => RoceL3::Ipv6,
                                _ => RoceL3::Grh,
                            })
                        }
                    }
                }
                Ok((c, entry))
            }
            _ => Err(unknown(UnknownReason::Opcode)),
        }
    }

    pub(crate) fn take_unknown(&self) -> Option<UnknownCqe> {
        self.last_unknown.take()
    }
}

/// Something QPs can be attached to: a CQ handle of either kind.
pub trait AsCq<B: Backend, T> {
    #[doc(hidden)]
    fn shared(&self) -> &Rc<CqShared<B, T>>;
}

/// A CQ that dispatches through a boxed callback.
pub struct CompletionQueue<B: Backend, T> {
    shared: Rc<CqShared<B, T>>,
    callback: Box<dyn FnMut(Completion, T)>,
}

/// A CQ whose callback type is a type parameter, so it is inlined into `poll`.
pub struct MonoCq<B: Backend, T, F: FnMut(Completion, T)> {
    shared: Rc<CqShared<B, T>>,
    callback: F,
}

macro_rules! cq_common {
    () => {
        /// CQ number.
        pub fn cqn(&self) -> u32 {
            self.shared.desc.cqn
        }
        /// Free-running consumer index.
        pub fn consumer_index(&self) -> u32 {
            self.shared.ci()
        }
        /// The last CQE that was consumed but could not be attributed.
        pub fn take_unknown(&self) -> Option<UnknownCqe> {
            self.shared.take_unknown()
        }
        /// The CQE ring: (buffer, entry count, entry size). For tests that
        /// play the device and put CQEs no device of ours writes (unknown
        /// opcodes, compressed sessions) in front of the poller.
        ///
        /// # Safety
        /// Writes must stay inside the ring and follow the ownership
        /// protocol (spec §5.5): all bytes first, `op_own` last.
        pub unsafe fn raw_ring(&self) -> (*mut u8, u32, u32) {
            let d = &self.shared.desc;
            (d.buf, d.cqe_cnt, d.cqe_size)
        }
        /// The ring-core descriptor, for executors that poll with their own
        /// code (the C ABI, another thread).
        ///
        /// # Safety
        /// Polling through it bypasses this handle's dispatch: use one or
        /// the other, from one thread at a time.
        pub unsafe fn desc(&self) -> &CqDesc {
            &self.shared.desc
        }
        /// Poll with a one-off closure instead of the stored callback.
        #[inline(always)]
        pub fn poll_with<G: FnMut(Completion, T)>(&self, budget: u32, mut g: G) -> PollOutcome {
            self.shared.poll_with(budget, &mut g)
        }
    };
}

impl<B: Backend, T> CompletionQueue<B, T> {
    pub(crate) fn new(shared: Rc<CqShared<B, T>>, callback: Box<dyn FnMut(Completion, T)>) -> Self {
        CompletionQueue { shared, callback }
    }
    /// Poll up to `budget` CQEs and dispatch each completion to the callback.
    #[inline]
    pub fn poll(&mut self, budget: u32) -> PollOutcome {
        self.shared.poll_with(budget, &mut self.callback)
    }
    cq_common!();
}

impl<B: Backend, T, F: FnMut(Completion, T)> MonoCq<B, T, F> {
    pub(crate) fn new(shared: Rc<CqShared<B, T>>, callback: F) -> Self {
        MonoCq { shared, callback }
    }
    /// Poll up to `budget` CQEs; the callback is inlined.
    #[inline(always)]
    pub fn poll(&mut self, budget: u32) -> PollOutcome {
        self.shared.poll_with(budget, &mut self.callback)
    }
    /// Access the callback (e.g. to read state it accumulated).
    pub fn callback_mut(&mut self) -> &mut F {
        &mut self.callback
    }
    cq_common!();
}

impl<B: Backend, T> AsCq<B, T> for CompletionQueue<B, T> {
    fn shared(&self) -> &Rc<CqShared<B, T>> {
        &self.shared
    }
}
impl<B: Backend, T, F: FnMut(Completion, T)> AsCq<B, T> for MonoCq<B, T, F> {
    fn shared(&self) -> &Rc<CqShared<B, T>> {
        &self.shared
    }
}
