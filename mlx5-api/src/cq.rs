//! Completion-queue polling (spec §5, §6) on the ring core: the ownership
//! check and CQE reader of [`crate::ring::CqDesc`], then dispatch through an
//! O(1) QPN table to the view of the QP's work queues ([`WorkQueues`]),
//! which retires the WQE the CQE names (and the unsignaled WQEs before it)
//! and gives back the user's entry. `MonoCq` takes the callback as a type
//! parameter so the compiler inlines it; `CompletionQueue` stores a boxed
//! callback.

use std::cell::{Cell, UnsafeCell};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::backend::{Backend, CqResources, QpKind};
use crate::channel::{wait_either, ChannelInner};
use crate::ctx::CtxInner;
use crate::error::{Error, Queue, Result};
use crate::pool::PoolRc;
use crate::qpn_table::QpnTable;
pub use crate::ring::cqe::cqe_opcode;
use crate::ring::cqe::CqeView;
use crate::ring::seg::opcode;
use crate::ring::{CqDesc, Peek};
pub use crate::ring::{CqeError, Status, Syndrome};
use crate::types::LinkLayer;
use crate::wq::WorkQueues;

/// What completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND (requester side).
    Send,
    /// A SEND with immediate (requester side).
    SendImm,
    /// A SEND with invalidate.
    SendInv,
    /// An RDMA WRITE.
    RdmaWrite,
    /// An RDMA WRITE with immediate (requester side).
    RdmaWriteImm,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic compare-and-swap.
    AtomicCs,
    /// An atomic fetch-and-add.
    AtomicFa,
    /// A masked compare-and-swap (4 or 8 bytes).
    MaskedAtomicCs,
    /// A masked fetch-and-add (4 or 8 bytes).
    MaskedAtomicFa,
    /// A UMR: a memory window bind, a LOCAL_INV or an indirect mkey's list
    /// (all three post opcode 0x25, and the CQE names only it: the wr-id
    /// tells them apart).
    Umr,
    /// A NOP.
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
            opcode::ATOMIC_MASKED_CS => Self::MaskedAtomicCs,
            opcode::ATOMIC_MASKED_FA => Self::MaskedAtomicFa,
            opcode::NOP => Self::Nop,
            opcode::UMR => Self::Umr,
            other => Self::OtherSend(other),
        }
    }
    /// The mlx5 opcode of a send-side completion (`None` for receives).
    pub fn send_opcode(self) -> Option<u8> {
        Some(match self {
            Self::Send => opcode::SEND,
            Self::SendImm => opcode::SEND_IMM,
            Self::SendInv => opcode::SEND_INVAL,
            Self::RdmaWrite => opcode::RDMA_WRITE,
            Self::RdmaWriteImm => opcode::RDMA_WRITE_IMM,
            Self::RdmaRead => opcode::RDMA_READ,
            Self::AtomicCs => opcode::ATOMIC_CS,
            Self::AtomicFa => opcode::ATOMIC_FA,
            Self::MaskedAtomicCs => opcode::ATOMIC_MASKED_CS,
            Self::MaskedAtomicFa => opcode::ATOMIC_MASKED_FA,
            Self::Nop => opcode::NOP,
            Self::Umr => opcode::UMR,
            Self::OtherSend(op) => op,
            Self::Recv | Self::RecvImm | Self::RecvInv | Self::RecvRdmaImm | Self::RecvError => return None,
        })
    }
    /// Whether this is a receive-side completion.
    pub fn is_recv(self) -> bool {
        matches!(self, Self::Recv | Self::RecvImm | Self::RecvInv | Self::RecvRdmaImm | Self::RecvError)
    }
}

/// An on-demand-paging page fault that aborted a receive
/// (`MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR` with vendor syndrome 0x93: rdma-core's
/// `is_odp_pfault_err`).
#[cold]
fn is_odp_abort(c: &Completion) -> bool {
    matches!(c.status, Status::Error(e) if e.syndrome == crate::ring::Syndrome::RemoteAborted && e.vendor_err == 0x93)
}

/// A decoded completion, handed to the callback with the user's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Success, or the error with its syndrome.
    pub status: Status,
    /// What completed.
    pub opcode: WcOpcode,
    /// The QP number.
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
    /// Source LID of a received message (InfiniBand).
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
    /// The CQE timestamp (device clock ticks).
    pub timestamp: u64,
    /// CQE version 1 user index (`srqn_uidx[23:0]`): the simulator reports
    /// the index the front-end chose; on hardware rdma-core assigns its own.
    /// Completions are attributed by QPN, never by this field.
    pub user_index: u32,
    /// Scatter-to-CQE: the data arrived in the CQE (spec §5.7). It was also
    /// copied into the posted buffers, as rdma-core does.
    pub scattered: Option<Scattered>,
}

impl Completion {
    /// This completion in one sentence (step 13): for an error, what failed (the
    /// opcode, QP and WQE index), what the syndrome means with its mlx5 and
    /// `ibv_wc_status` names and the vendor syndrome, and the usual causes. From the
    /// CQE alone, as on hardware; [`CompletionQueue::explain`] adds what the
    /// simulator knows of the failed check. A success says what completed.
    pub fn explain(&self) -> String {
        self.explain_with(None)
    }

    /// [`Completion::explain`] with the device's own words for the failed check.
    pub(crate) fn explain_with(&self, detail: Option<&str>) -> String {
        use crate::ring::explain::{write_explanation_with, Failed};
        use std::fmt::Write;
        let mut s = String::new();
        match self.status {
            Status::Success => {
                let _ = write!(
                    s,
                    "{:?} on QP 0x{:x} (WQE {}) completed: {} bytes.",
                    self.opcode, self.qpn, self.wqe_counter, self.byte_len
                );
            }
            Status::Error(e) => {
                let failed = match self.opcode.send_opcode() {
                    Some(op) => Failed::Send { opcode: op, qpn: self.qpn, wqe_counter: self.wqe_counter },
                    None => Failed::Recv { qpn: self.qpn, wqe_counter: self.wqe_counter },
                };
                let _ = write_explanation_with(&mut s, failed, e.syndrome, e.vendor_err, detail);
            }
        }
        s
    }
}

impl Default for Completion {
    /// An empty slot for [`CompletionQueue::poll_into`] (a successful NOP).
    fn default() -> Self {
        Completion {
            status: Status::Success,
            opcode: WcOpcode::Nop,
            qpn: 0,
            wqe_counter: 0,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            src_qpn: 0,
            slid: 0,
            solicited: false,
            grh: false,
            sl: 0,
            network: None,
            timestamp: 0,
            user_index: 0,
            scattered: None,
        }
    }
}

/// Data that arrived in a CQE (scatter-to-CQE), up to 64 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scattered {
    len: u8,
    bytes: [u8; 64],
}

impl Scattered {
    fn new(d: &[u8]) -> Self {
        let mut bytes = [0u8; 64];
        let n = d.len().min(64);
        bytes[..n].copy_from_slice(&d[..n]);
        Scattered { len: n as u8, bytes }
    }
    /// The bytes.
    pub fn data(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
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
    /// The CQE's `op_own` byte (opcode, format, owner).
    pub op_own: u8,
    /// The QP number.
    pub qpn: u32,
    /// The CQE's `wqe_counter`.
    pub wqe_counter: u16,
    /// Why it failed.
    pub reason: UnknownReason,
}

/// Why a CQE could not be attributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownReason {
    /// An opcode that is not a completion opcode.
    Opcode,
    /// A CQE format this poller does not read (e.g. scatter-to-CQE on a CQ without it).
    Format,
    /// It names a QP that does not report to this CQ.
    NoSuchQp,
    /// It names a WQE counter with nothing outstanding there.
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
    table: UnsafeCell<QpnTable<PoolRc<WorkQueues<B, T>>>>,
    last_unknown: Cell<Option<UnknownCqe>>,
    /// Plain CQEs that named nothing outstanding, ever (wrapping): the
    /// exclusive poll loop counts its unknown ones by the difference.
    unknowns: Cell<u32>,
    cq_uar: *mut u8,
    pub(crate) raw: B::Cq,
    channel: Option<Rc<ChannelInner<B>>>,
    pub(crate) _ctx: Rc<CtxInner<B>>,
}

impl<B: Backend, T> CqShared<B, T> {
    /// [`Completion::explain`] with the device's words for a failed check
    /// ([`Backend::failure_reason`]).
    fn explain(&self, c: &Completion) -> String {
        let detail = match c.status {
            Status::Error(_) => B::failure_reason(&self.raw, c.qpn, c.wqe_counter),
            Status::Success => None,
        };
        c.explain_with(detail.as_deref())
    }
}

impl<B: Backend, T> std::fmt::Debug for CqShared<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqShared").finish_non_exhaustive()
    }
}

/// Responder opcodes as a bit set: one bit test.
const RESP_OPS: u16 = 1 << cqe_opcode::RESP_WR_IMM
    | 1 << cqe_opcode::RESP_SEND
    | 1 << cqe_opcode::RESP_SEND_IMM
    | 1 << cqe_opcode::RESP_SEND_INV
    | 1 << cqe_opcode::RESP_ERR;

/// Whether CQE opcode `op` completes a send WQE (REQ, REQ_ERR).
#[inline(always)]
fn is_requester(op: u8) -> bool {
    matches!(op, cqe_opcode::REQ | cqe_opcode::REQ_ERR)
}

/// Whether CQE opcode `op` completes a receive (the RESP opcodes).
#[inline(always)]
fn is_responder(op: u8) -> bool {
    RESP_OPS >> op & 1 != 0
}

/// The completion of CQE `v` before its work request is known: the fields
/// every opcode has (an error CQE carries its syndrome instead of a byte
/// count and a timestamp). Inlined: fields the callback does not read are
/// never loaded.
#[inline(always)]
fn completion(v: CqeView, op_own: u8, ok: bool) -> Completion {
    Completion {
        status: if ok { Status::Success } else { Status::Error(v.error_fields()) },
        opcode: WcOpcode::Nop,
        qpn: v.qpn(),
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
        scattered: None,
    }
}

impl<B: Backend, T> CqShared<B, T> {
    pub(crate) fn new(
        raw: B::Cq,
        res: CqResources,
        mini_format: u32,
        channel: Option<Rc<ChannelInner<B>>>,
        ctx: Rc<CtxInner<B>>,
    ) -> Result<Self> {
        let mut desc = CqDesc::new(res.buf, res.cqe_cnt, res.cqe_size, res.dbrec, res.cqn)
            .map_err(|source| Error::BadQueue { queue: Queue::Cq, source })?;
        desc.mini_format = mini_format;
        Ok(CqShared {
            desc,
            table: UnsafeCell::new(QpnTable::default()),
            last_unknown: Cell::new(None),
            unknowns: Cell::new(0),
            cq_uar: res.cq_uar,
            raw,
            channel,
            _ctx: ctx,
        })
    }

    /// Request an event on the next (solicited) completion.
    pub(crate) fn arm(&self, solicited_only: bool) {
        // SAFETY: the backend's live CQ and its UAR page; one thread polls.
        unsafe { self.desc.arm(B::cq_uar(&self.raw), self.cq_uar, solicited_only) };
    }

    pub(crate) fn check(&self) -> Result<()> {
        if B::cq_in_error(&self.raw) {
            return Err(Error::CqOverrun { cqn: self.desc.cqn });
        }
        if B::device_fatal(&self.raw) {
            return Err(Error::DeviceFatal);
        }
        Ok(())
    }

    fn channel_fd(&self) -> Option<RawFd> {
        self.channel.as_ref().map(|c| B::channel_fd(&c.raw))
    }

    pub(crate) fn register(&self, qpn: u32, wq: PoolRc<WorkQueues<B, T>>) {
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
    ///
    /// The loop here reads plain CQEs (format 0) outside compressed
    /// sessions: one ownership check, the dispatch, the index handed back.
    /// A session being expanded (the fast path finds nothing while one is
    /// open: [`CqDesc::fast`]), a title or a scatter-to-CQE format sends
    /// the rest of the call to [`CqShared::poll_general`]. `f` may poll
    /// this CQ again (a handle polled through `&self`), and open a session
    /// there: the consumer index and where the fast path looks are read
    /// again for every CQE.
    #[inline(always)]
    pub(crate) fn poll_with<F: FnMut(Completion, T)>(&self, budget: u32, f: &mut F) -> PollOutcome {
        // CQEs still to consume (budget less completions and unknown): one
        // counter for the loop, counted down.
        let (mut left, mut unknown) = (budget, 0);
        while left != 0 {
            let ci = self.desc.consumer();
            // SAFETY: the backend's live CQ ring; handles are single-threaded;
            // `fast` and `ci` are current (read after the callback ran).
            let (p, op_own, req) = match unsafe { self.desc.peek_plain_at(self.desc.fast(), ci) } {
                Peek::Req(p, op_own) => (p, op_own, true),
                Peek::Plain(p, op_own) => (p, op_own, false),
                Peek::Empty => break,
                Peek::Other => {
                    let out = PollOutcome { completions: budget - left - unknown, unknown };
                    return self.poll_general(budget, f, out);
                }
            };
            left -= 1;
            // SAFETY: as above; `p` is the owned CQE at `ci`.
            if !unsafe { self.consume_plain(p, op_own, req, ci.wrapping_add(1), f) } {
                unknown += 1;
            }
        }
        if left == budget {
            B::cq_idle(&self.raw);
        }
        PollOutcome { completions: budget - left - unknown, unknown }
    }

    /// [`CqShared::poll_with`] for a caller that holds its handle
    /// exclusively (`&mut self`): `f`, owned by or borrowed from that
    /// handle, cannot poll this CQ again, so the consumer index stays in a
    /// register, and the owner bit is worked out once per lap of the ring
    /// (the loop runs to the lap's end, then starts the next).
    #[inline(always)]
    pub(crate) fn poll_exclusive<F: FnMut(Completion, T)>(&self, budget: u32, f: &mut F) -> PollOutcome {
        if budget == 1 {
            return self.poll_one(f);
        }
        // (Unknown CQEs are counted by the cold path that meets them.)
        let (mut left, unknowns) = (budget, self.unknowns.get());
        let unknown = || self.unknowns.get().wrapping_sub(unknowns);
        // Only the general path opens a session, and the loop leaves for it.
        // SAFETY: handles are single-threaded: this is the polling thread.
        let fast = unsafe { self.desc.fast() };
        let mut ci = self.desc.consumer();
        'laps: while left != 0 {
            // CQEs up to the end of this lap (at least one).
            let (own, room) = self.desc.lap(ci);
            let mut k = left.min(room);
            left -= k;
            while k != 0 {
                // SAFETY: as in `poll_with`; `own` is `ci`'s lap's; `fast`
                // is current (`f` cannot reach this CQ).
                let (p, op_own, req) = match unsafe { self.desc.peek_plain_own(fast, ci, own) } {
                    Peek::Req(p, op_own) => (p, op_own, true),
                    Peek::Plain(p, op_own) => (p, op_own, false),
                    Peek::Empty => {
                        left += k;
                        break 'laps;
                    }
                    Peek::Other => {
                        left += k;
                        let unknown = unknown();
                        let out = PollOutcome { completions: budget - left - unknown, unknown };
                        return self.poll_general(budget, f, out);
                    }
                };
                k -= 1;
                ci = ci.wrapping_add(1);
                // SAFETY: as above.
                unsafe { self.consume_plain(p, op_own, req, ci, f) };
            }
        }
        debug_assert_eq!(ci, self.desc.consumer());
        if left == budget {
            B::cq_idle(&self.raw);
        }
        let unknown = unknown();
        PollOutcome { completions: budget - left - unknown, unknown }
    }

    /// [`CqShared::poll_exclusive`] with a budget of one CQE, as a
    /// latency loop polls: no lap bookkeeping, no counting. Inline: a
    /// plain CQE that completes a work request; out of line, the rest.
    #[inline(always)]
    fn poll_one<F: FnMut(Completion, T)>(&self, f: &mut F) -> PollOutcome {
        let ci = self.desc.consumer();
        // SAFETY: as in `poll_with`.
        let (p, op_own, req) = match unsafe { self.desc.peek_plain_at(self.desc.fast(), ci) } {
            Peek::Req(p, op_own) => (p, op_own, true),
            Peek::Plain(p, op_own) => (p, op_own, false),
            _ => return self.poll_one_cold(f),
        };
        // SAFETY: as in `poll_with`.
        if unsafe { self.consume_plain(p, op_own, req, ci.wrapping_add(1), f) } {
            return PollOutcome { completions: 1, unknown: 0 };
        }
        PollOutcome { completions: 0, unknown: 1 }
    }

    /// [`CqShared::poll_one`] with nothing owned, a session or another format.
    #[cold]
    #[inline(never)]
    fn poll_one_cold<F: FnMut(Completion, T)>(&self, f: &mut F) -> PollOutcome {
        self.poll_with(1, f)
    }

    /// Dispatch the owned plain CQE `p` (its `op_own`; `req`: a requester
    /// CQE) and hand its slot back, the consumer index becoming `next`:
    /// `true` with the completion given to `f`, `false` for a CQE that
    /// names nothing outstanding (see [`CqShared::consume_unknown`]).
    ///
    /// # Safety
    /// `p` is an owned 64-byte CQE of format 0 at the consumer index,
    /// `next - 1`, outside a session, read before it is handed back; with
    /// `req` its opcode is REQ, without it not.
    #[inline(always)]
    unsafe fn consume_plain<F: FnMut(Completion, T)>(
        &self,
        p: *const u8,
        op_own: u8,
        req: bool,
        next: u32,
        f: &mut F,
    ) -> bool {
        // Requester, other successful and error CQEs each call the
        // callback from their own site, where the opcode's class and the
        // status are constants (error CQEs have opcodes REQ_ERR and
        // RESP_ERR, above every other but INVALID's).
        if req {
            // SAFETY: caller contract: a requester CQE (opcode 0), said to
            // the compiler, so that `dispatch` keeps the requester branch
            // only.
            unsafe { core::hint::assert_unchecked(op_own >> 4 == cqe_opcode::REQ) };
            // SAFETY: an owned 64-byte CQE of format 0, read before it is
            // handed back; a requester CQE, not an error's.
            if let Some((c, entry)) = unsafe { self.dispatch(p, op_own, None, true) } {
                // Hand the slot back before running user code (which may
                // post WQEs whose CQEs land here): all was read.
                // SAFETY: caller contract; the CQE was read.
                unsafe { self.desc.advance_plain_to(next) };
                f(c, entry);
                return true;
            }
        } else if op_own < cqe_opcode::REQ_ERR << 4 {
            // SAFETY: not a requester CQE (caller contract, said to the
            // compiler as above).
            unsafe { core::hint::assert_unchecked(op_own >> 4 != cqe_opcode::REQ) };
            // SAFETY: as above; not an error CQE.
            if let Some((c, entry)) = unsafe { self.dispatch(p, op_own, None, true) } {
                // SAFETY: as above.
                unsafe { self.desc.advance_plain_to(next) };
                f(c, entry);
                return true;
            }
        // SAFETY: as above; an error CQE.
        } else if let Some((c, entry)) = unsafe { self.dispatch(p, op_own, None, false) } {
            // SAFETY: as above.
            unsafe { self.desc.advance_plain_to(next) };
            f(c, entry);
            return true;
        }
        // SAFETY: as above.
        unsafe { self.consume_unknown(p, next) };
        false
    }

    /// A plain CQE that names nothing outstanding: kept as the last
    /// unknown one, counted in `unknowns`, its slot handed back.
    ///
    /// # Safety
    /// As [`CqShared::consume_plain`].
    #[cold]
    #[inline(never)]
    unsafe fn consume_unknown(&self, p: *const u8, next: u32) {
        // SAFETY: caller contract.
        let u = unsafe { self.unknown_cqe(p) };
        // SAFETY: as above; the CQE was read.
        unsafe { self.desc.advance_plain_to(next) };
        self.last_unknown.set(Some(u));
        self.unknowns.set(self.unknowns.get().wrapping_add(1));
    }

    /// [`CqShared::poll_with`] for every format and inside compressed
    /// sessions, continuing from `out`.
    #[inline(never)]
    #[cold]
    fn poll_general<F: FnMut(Completion, T)>(
        &self,
        budget: u32,
        f: &mut F,
        mut out: PollOutcome,
    ) -> PollOutcome {
        while out.consumed() < budget {
            // SAFETY: the backend's live CQ ring; handles are single-threaded.
            let Some(p) = (unsafe { self.desc.next() }) else { break };
            // SAFETY: `p` is an owned 64-byte CQE (in the ring, or a
            // session's completion expanded by the descriptor).
            let op_own = unsafe { *p.add(63) };
            let ok = op_own < cqe_opcode::REQ_ERR << 4;
            if op_own & 0x0c == 0 {
                // As in `poll_with`: a requester completion (the common
                // compressed session) and the other plain ones each call
                // the callback from their own site.
                if op_own >> 4 == cqe_opcode::REQ {
                    // SAFETY: as above; read before it is handed back.
                    if let Some((c, entry)) = unsafe { self.dispatch(p, op_own, None, true) } {
                        // SAFETY: as above; the CQE was read.
                        unsafe { self.desc.advance() };
                        out.completions += 1;
                        f(c, entry);
                        continue;
                    }
                // SAFETY: as above.
                } else if let Some((c, entry)) = unsafe { self.dispatch(p, op_own, None, ok) } {
                    // SAFETY: as above; the CQE was read.
                    unsafe { self.desc.advance() };
                    out.completions += 1;
                    f(c, entry);
                    continue;
                }
            }
            // SAFETY: `p` is an owned 64-byte CQE, read before it is handed back.
            let decoded = unsafe {
                if op_own & 0x0c != 0 {
                    match self.desc.scattered(p) {
                        Some(d) => self.dispatch(p, op_own, Some(d), ok).ok_or_else(|| self.unknown_cqe(p)),
                        // A title never gets here (the descriptor expands sessions).
                        None => Err(self.unknown(CqeView::new(p), UnknownReason::Format)),
                    }
                } else {
                    Err(self.unknown_cqe(p))
                }
            };
            // SAFETY: as above; the CQE was read.
            unsafe { self.desc.advance() };
            self.deliver(decoded, &mut out, f);
        }
        if out.consumed() == 0 {
            B::cq_idle(&self.raw);
        }
        out
    }

    /// Counts a dispatched CQE and runs the callback, or records it as unknown.
    #[inline(always)]
    fn deliver<F: FnMut(Completion, T)>(
        &self,
        decoded: Result<(Completion, T), UnknownCqe>,
        out: &mut PollOutcome,
        f: &mut F,
    ) {
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

    #[cold]
    fn unknown(&self, v: CqeView, reason: UnknownReason) -> UnknownCqe {
        UnknownCqe { op_own: v.op_own(), qpn: v.qpn(), wqe_counter: v.wqe_counter(), reason }
    }

    /// Why [`CqShared::dispatch`] found nothing for the CQE at `p`: no QP
    /// of this CQ has its QPN; else its opcode is not a completion's; else
    /// nothing is outstanding at its WQE counter.
    ///
    /// # Safety
    /// As [`CqShared::dispatch`].
    #[cold]
    #[inline(never)]
    unsafe fn unknown_cqe(&self, p: *const u8) -> UnknownCqe {
        // SAFETY: caller contract.
        let v = unsafe { CqeView::new(p) };
        // SAFETY: as in `dispatch`.
        let reason = if (unsafe { &*self.table.get() }).get_raw(v.sop_drop_qpn_raw()).is_none() {
            UnknownReason::NoSuchQp
        } else if is_requester(v.op_own() >> 4) || is_responder(v.op_own() >> 4) {
            UnknownReason::NoSuchWqe
        } else {
            UnknownReason::Opcode
        };
        self.unknown(v, reason)
    }

    /// Retire the work request a CQE names and build its completion
    /// (fields the callback does not read are never loaded).
    ///
    /// # Safety
    /// `p` is an owned CQE `desc` handed out, not yet handed back;
    /// `op_own` is its byte 63 and `scattered` the data `desc.scattered`
    /// found in it (`None` for format 0); `ok` says whether its opcode is
    /// not an error's (`op_own < 0xd0`).
    #[inline(always)]
    unsafe fn dispatch(
        &self,
        p: *const u8,
        op_own: u8,
        scattered: Option<&[u8]>,
        ok: bool,
    ) -> Option<(Completion, T)> {
        debug_assert_eq!(ok, op_own < cqe_opcode::REQ_ERR << 4);
        // SAFETY: caller contract.
        let v = unsafe { CqeView::new(p) };
        // SAFETY: single-threaded; the reference ends with this function,
        // which runs no user code.
        let wq = (unsafe { &*self.table.get() }).get_raw(v.sop_drop_qpn_raw())?;
        let mut c = completion(v, op_own, ok);
        let op = op_own >> 4;
        if is_requester(op) {
            if let Some(d) = scattered {
                c.scattered = Some(Scattered::new(d));
                if wq.copy_scattered_send(c.wqe_counter, (v.sop_drop_qpn() >> 24) as u8, d).is_err() {
                    c.status = local_length_error();
                }
            }
            let entry = wq.retire_send(c.wqe_counter)?;
            // The send WQE's opcode, as the CQE reports it (spec §5.1; as
            // rdma-core's `mlx5_parse_cqe` reads it too).
            let op = (v.sop_drop_qpn() >> 24) as u8;
            c.opcode = WcOpcode::from_send(op);
            if !ok {
                wq.enter_error(true);
            } else if matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
                c.byte_len = 8;
            }
            Some((c, entry))
        } else if is_responder(op) {
            if let Some(d) = scattered {
                c.scattered = Some(Scattered::new(d));
                if wq.copy_scattered_recv(c.wqe_counter, d).is_err() {
                    c.status = local_length_error();
                }
            }
            let ok = c.status.is_ok();
            let entry = wq.retire_recv(c.wqe_counter)?;
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
                // DCT keeps receiving (see the simulator's README). An
                // on-demand-paging abort of an SRQ receive does not: the
                // NIC only hands the WQE back.
                if wq.kind == QpKind::Rc && !is_odp_abort(&c) {
                    wq.enter_error(false);
                }
            } else if scattered.is_none() || op_own & 0x0c == 0x08 {
                // (Format 1 data overlays bytes 0..32: no source QPN/LID there.)
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
            Some((c, entry))
        } else {
            None
        }
    }

    /// Wait for completions: poll; when there is nothing, arm and sleep on
    /// the CQ's channel (or, without one, spin, yield, then sleep briefly),
    /// until something completes, the CQ is in error or `timeout` passes.
    fn wait_with(
        &self,
        budget: u32,
        timeout: Option<Duration>,
        poll: &mut dyn FnMut(u32) -> PollOutcome,
    ) -> Result<PollOutcome> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut idle = 0u32;
        loop {
            let out = poll(budget);
            if out.consumed() > 0 {
                return Ok(out);
            }
            // Cheap on the simulator; a non-blocking read of the async fd on
            // hardware, so spinning waiters look only every 64th round.
            if idle.is_multiple_of(64) {
                self.check()?;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return Err(Error::Timeout),
                },
                None => None,
            };
            let progress = B::cq_needs_progress(&self.raw);
            match self.channel_fd() {
                Some(fd) if !progress => {
                    self.arm(false);
                    let out = poll(budget);
                    if out.consumed() > 0 {
                        return Ok(out);
                    }
                    // Also woken by the device's async events (a CQ error
                    // sends no completion event); `check` above reads them.
                    if wait_either(fd, B::cq_async_fd(&self.raw), left)? & 1 != 0 {
                        if let Some(ch) = &self.channel {
                            B::get_cq_event(&ch.raw)?;
                        }
                    }
                }
                _ => {
                    idle += 1;
                    if progress || idle < 64 {
                        std::hint::spin_loop();
                    } else if idle < 320 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(50).min(left.unwrap_or(Duration::MAX)));
                    }
                }
            }
        }
    }

    pub(crate) fn take_unknown(&self) -> Option<UnknownCqe> {
        self.last_unknown.take()
    }
}

#[cold]
fn local_length_error() -> Status {
    Status::Error(CqeError {
        syndrome: Syndrome::LocalLength,
        vendor_err: 0,
        hw_err_synd: 0,
        hw_synd_type: 0,
    })
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

impl<B: Backend, T> std::fmt::Debug for CompletionQueue<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.debug("CompletionQueue", f)
    }
}

impl<B: Backend, T, F: FnMut(Completion, T)> std::fmt::Debug for MonoCq<B, T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.debug("MonoCq", f)
    }
}

impl<B: Backend, T> CqShared<B, T> {
    fn debug(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("cqn", &format_args!("{:#x}", self.desc.cqn))
            .field("capacity", &self.desc.cqe_cnt)
            .field("cqe_size", &self.desc.cqe_size)
            .field("channel", &self.channel.is_some())
            .finish_non_exhaustive()
    }
}

macro_rules! cq_common {
    () => {
        /// CQ number.
        pub fn cqn(&self) -> u32 {
            self.shared.desc.cqn
        }
        /// Entries the CQ holds (the count asked for, rounded up as the
        /// device does): more unpolled completions than this overrun it.
        pub fn capacity(&self) -> u32 {
            self.shared.desc.cqe_cnt
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
        /// Poll up to `out.len()` CQEs into `out` (completion and the user's
        /// entry), without the callback: `out[..outcome.completions]` holds
        /// what was found, oldest first.
        #[inline]
        pub fn poll_into(&self, out: &mut [(Completion, T)]) -> PollOutcome {
            let mut i = 0;
            self.shared.poll_with(out.len() as u32, &mut |c, e| {
                out[i] = (c, e);
                i += 1;
            })
        }
        /// Request a completion event on the CQ's channel for the next
        /// completion, or with `solicited_only` the next solicited or error
        /// one (spec §5.6). One event per arm; arm again after each.
        pub fn arm(&self, solicited_only: bool) {
            self.shared.arm(solicited_only)
        }
        /// `Err(Error::CqOverrun)` once the device put the CQ in error.
        pub fn check(&self) -> Result<()> {
            self.shared.check()
        }
        /// Give the backend the pass a poll that finds nothing gives it,
        /// without consuming a CQE: the simulator's deterministic mode runs
        /// its NICs once (threaded mode helps a NIC thread that waits for a
        /// core); on hardware and in watch mode, nothing. For executors that
        /// poll through [`Self::desc`] (the C ABI's `mlx5r_cq_poll`).
        pub fn progress(&self) {
            B::cq_idle(&self.shared.raw);
        }
    };
}

impl<B: Backend, T> CompletionQueue<B, T> {
    /// [`Completion::explain`] for a completion this CQ gave, with what the device
    /// knows of the failed check: on the simulator the sentence names the key, MR and
    /// range, address or QP and the right or limit that was missing; on hardware it is
    /// what the CQE says.
    pub fn explain(&self, c: &Completion) -> String {
        self.shared.explain(c)
    }

    /// What the device knows of why the error completion of WQE `wqe_counter` of QP
    /// `qpn` on this CQ was written (the simulator's failed check); `None` on hardware.
    pub fn failure_reason(&self, qpn: u32, wqe_counter: u16) -> Option<String> {
        B::failure_reason(&self.shared.raw, qpn, wqe_counter)
    }

    pub(crate) fn new(shared: Rc<CqShared<B, T>>, callback: Box<dyn FnMut(Completion, T)>) -> Self {
        CompletionQueue { shared, callback }
    }
    /// Poll up to `budget` CQEs and dispatch each completion to the callback.
    #[inline]
    pub fn poll(&mut self, budget: u32) -> PollOutcome {
        // (`&mut self`: the callback cannot reach this handle.)
        self.shared.poll_exclusive(budget, &mut self.callback)
    }
    /// Poll until at least one CQE was consumed (dispatched to the
    /// callback), blocking on the CQ's completion channel when it has one;
    /// `Err(Error::Timeout)` after `timeout`, `Err(Error::CqOverrun)` when
    /// the CQ is in error. A channel shared by several CQs is better waited
    /// on with [`crate::CompChannel::wait`]: this call takes its events.
    pub fn wait(&mut self, budget: u32, timeout: Option<Duration>) -> Result<PollOutcome> {
        let (shared, cb) = (&self.shared, &mut self.callback);
        shared.wait_with(budget, timeout, &mut |b| shared.poll_exclusive(b, cb))
    }
    cq_common!();
}

impl<B: Backend, T, F: FnMut(Completion, T)> MonoCq<B, T, F> {
    /// [`CompletionQueue::explain`] for this CQ.
    pub fn explain(&self, c: &Completion) -> String {
        self.shared.explain(c)
    }

    pub(crate) fn new(shared: Rc<CqShared<B, T>>, callback: F) -> Self {
        MonoCq { shared, callback }
    }
    /// Poll up to `budget` CQEs; the callback is inlined.
    #[inline(always)]
    pub fn poll(&mut self, budget: u32) -> PollOutcome {
        // (`&mut self`: the callback cannot reach this handle.)
        self.shared.poll_exclusive(budget, &mut self.callback)
    }
    /// As [`CompletionQueue::wait`].
    pub fn wait(&mut self, budget: u32, timeout: Option<Duration>) -> Result<PollOutcome> {
        let (shared, cb) = (&self.shared, &mut self.callback);
        shared.wait_with(budget, timeout, &mut |b| shared.poll_exclusive(b, cb))
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
