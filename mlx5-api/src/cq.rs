//! Completion-queue polling (spec §5, §6): ownership check, CQE decoding into
//! a [`Completion`], retirement of the WQE it names (and of the unsignaled
//! WQEs before it), and dispatch of the user's entry. `MonoCq` takes the
//! callback as a type parameter so the compiler inlines it;
//! `CompletionQueue` stores a boxed callback.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::backend::{Backend, CqResources};
use crate::barrier::udma_from_device_barrier;
use crate::device::CtxInner;
use crate::qp::QpShared;
use crate::wqe::opcode;

/// CQE opcodes (spec §5.3).
pub mod cqe_opcode {
    pub const REQ: u8 = 0;
    pub const RESP_WR_IMM: u8 = 1;
    pub const RESP_SEND: u8 = 2;
    pub const RESP_SEND_IMM: u8 = 3;
    pub const RESP_SEND_INV: u8 = 4;
    pub const REQ_ERR: u8 = 13;
    pub const RESP_ERR: u8 = 14;
    pub const INVALID: u8 = 15;
}

/// Error syndromes of an error CQE (spec §5.4), by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    LocalLength,
    LocalQpOperation,
    LocalProtection,
    WrFlush,
    MwBind,
    BadResponse,
    LocalAccess,
    RemoteInvalidRequest,
    RemoteAccess,
    RemoteOperation,
    TransportRetryExceeded,
    RnrRetryExceeded,
    RemoteAborted,
    /// A syndrome this library does not name (reported as `IBV_WC_GENERAL_ERR`).
    Other(u8),
}

impl Syndrome {
    /// Decode the syndrome byte (offset 0x37).
    pub fn from_raw(v: u8) -> Self {
        match v {
            0x01 => Self::LocalLength,
            0x02 => Self::LocalQpOperation,
            0x04 => Self::LocalProtection,
            0x05 => Self::WrFlush,
            0x06 => Self::MwBind,
            0x10 => Self::BadResponse,
            0x11 => Self::LocalAccess,
            0x12 => Self::RemoteInvalidRequest,
            0x13 => Self::RemoteAccess,
            0x14 => Self::RemoteOperation,
            0x15 => Self::TransportRetryExceeded,
            0x16 => Self::RnrRetryExceeded,
            0x22 => Self::RemoteAborted,
            other => Self::Other(other),
        }
    }
    /// The raw syndrome byte.
    pub fn raw(self) -> u8 {
        match self {
            Self::LocalLength => 0x01,
            Self::LocalQpOperation => 0x02,
            Self::LocalProtection => 0x04,
            Self::WrFlush => 0x05,
            Self::MwBind => 0x06,
            Self::BadResponse => 0x10,
            Self::LocalAccess => 0x11,
            Self::RemoteInvalidRequest => 0x12,
            Self::RemoteAccess => 0x13,
            Self::RemoteOperation => 0x14,
            Self::TransportRetryExceeded => 0x15,
            Self::RnrRetryExceeded => 0x16,
            Self::RemoteAborted => 0x22,
            Self::Other(v) => v,
        }
    }
}

/// The error part of an error CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{syndrome:?} (syndrome 0x{:02x}, vendor 0x{vendor_err:02x})", syndrome.raw())]
pub struct CqeError {
    pub syndrome: Syndrome,
    /// `vendor_err_synd` (→ `ibv_wc.vendor_err`).
    pub vendor_err: u8,
    /// Bytes 0x34/0x35 (kernel names `hw_err_synd`, `hw_synd_type`).
    pub hw_err_synd: u8,
    pub hw_synd_type: u8,
}

/// Outcome of a completed work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    Error(CqeError),
}

impl Status {
    pub fn is_ok(&self) -> bool {
        matches!(self, Status::Success)
    }
    /// The syndrome, if this is an error.
    pub fn syndrome(&self) -> Option<Syndrome> {
        match self {
            Status::Success => None,
            Status::Error(e) => Some(e.syndrome),
        }
    }
}

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

/// The fields of a 64-byte CQE (spec §5.1) or error CQE (spec §5.4) that
/// the poller uses, decoded from big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeFields {
    pub op_own: u8,
    /// `op_own[7:4]`.
    pub opcode: u8,
    /// `op_own[3:2]`: 0 normal, 1/2 scatter-to-CQE, 3 compressed title.
    pub format: u8,
    /// `op_own[1]`: solicited event.
    pub se: bool,
    /// `op_own[0]`.
    pub owner: bool,
    /// `sop_drop_qpn[23:0]`.
    pub qpn: u32,
    /// `sop_drop_qpn[31:24]`: the send WQE's opcode (requester CQEs).
    pub wqe_opcode: u8,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    /// Immediate / invalidated rkey, as a host value of the big-endian field.
    pub imm_inval_pkey: u32,
    pub srqn_uidx: u32,
    pub flags_rqpn: u32,
    pub slid: u16,
    pub timestamp: u64,
    /// Present for REQ_ERR / RESP_ERR CQEs.
    pub error: Option<CqeError>,
}

impl CqeFields {
    /// Decode a CQE held in a byte array.
    pub fn parse(cqe: &[u8; 64]) -> Self {
        // SAFETY: 64 readable bytes.
        unsafe { Self::read(cqe.as_ptr()) }
    }

    /// Decode the CQE at `p`, reading only the fields used.
    ///
    /// # Safety
    /// `p` must point at 64 readable bytes.
    #[inline(always)]
    pub unsafe fn read(p: *const u8) -> Self {
        // SAFETY (all reads): offsets inside the 64 bytes the caller vouches for.
        let op_own = unsafe { *p.add(0x3f) };
        let opcode = op_own >> 4;
        let sop_drop_qpn = be32(unsafe { p.add(0x38) });
        let error = if matches!(opcode, cqe_opcode::REQ_ERR | cqe_opcode::RESP_ERR) {
            let b = unsafe { (p.add(0x34) as *const [u8; 4]).read() };
            Some(CqeError {
                syndrome: Syndrome::from_raw(b[3]),
                vendor_err: b[2],
                hw_err_synd: b[0],
                hw_synd_type: b[1],
            })
        } else {
            None
        };
        let ok = error.is_none();
        CqeFields {
            op_own,
            opcode,
            format: (op_own >> 2) & 3,
            se: op_own & 2 != 0,
            owner: op_own & 1 != 0,
            qpn: sop_drop_qpn & 0xff_ffff,
            wqe_opcode: (sop_drop_qpn >> 24) as u8,
            wqe_counter: be16(unsafe { p.add(0x3c) }),
            byte_cnt: if ok { be32(unsafe { p.add(0x2c) }) } else { 0 },
            imm_inval_pkey: if ok { be32(unsafe { p.add(0x24) }) } else { 0 },
            srqn_uidx: be32(unsafe { p.add(0x20) }),
            flags_rqpn: if ok { be32(unsafe { p.add(0x18) }) } else { 0 },
            slid: if ok { be16(unsafe { p.add(0x16) }) } else { 0 },
            timestamp: if ok {
                u64::from_be(unsafe { (p.add(0x30) as *const u64).read_unaligned() })
            } else {
                0
            },
            error,
        }
    }
}

/// QPN → QP of the QPs reporting to a CQ (weak: a dropped QP is not kept alive).
type QpTable<B, T> = Vec<(u32, Weak<QpShared<B, T>>)>;

/// The CQ state shared by the user's CQ handle and the QPs that use it.
#[doc(hidden)]
pub struct CqShared<B: Backend, T> {
    buf: *mut u8,
    mask: u32,
    log_cnt: u32,
    cqe_size: u32,
    dbrec: *const AtomicU32,
    pub(crate) cqn: u32,
    ci: Cell<u32>,
    /// QPs that report to this CQ; weak so a dropped QP is not kept alive.
    qps: RefCell<QpTable<B, T>>,
    last_unknown: Cell<Option<UnknownCqe>>,
    pub(crate) raw: B::Cq,
    pub(crate) _ctx: Rc<CtxInner<B>>,
}

#[inline(always)]
fn be32(p: *const u8) -> u32 {
    // SAFETY: callers pass a pointer inside a valid CQE.
    u32::from_be(unsafe { (p as *const u32).read_unaligned() })
}
#[inline(always)]
fn be16(p: *const u8) -> u16 {
    // SAFETY: callers pass a pointer inside a valid CQE.
    u16::from_be(unsafe { (p as *const u16).read_unaligned() })
}

impl<B: Backend, T> CqShared<B, T> {
    pub(crate) fn new(raw: B::Cq, res: CqResources, ctx: Rc<CtxInner<B>>) -> Self {
        CqShared {
            buf: res.buf,
            mask: res.cqe_cnt - 1,
            log_cnt: res.cqe_cnt.trailing_zeros(),
            cqe_size: res.cqe_size,
            dbrec: res.dbrec as *const AtomicU32,
            cqn: res.cqn,
            ci: Cell::new(0),
            qps: RefCell::new(Vec::new()),
            last_unknown: Cell::new(None),
            raw,
            _ctx: ctx,
        }
    }

    pub(crate) fn register(&self, qpn: u32, qp: Weak<QpShared<B, T>>) {
        let mut qps = self.qps.borrow_mut();
        qps.retain(|(n, w)| *n != qpn && w.strong_count() > 0);
        qps.push((qpn, qp));
    }

    pub(crate) fn unregister(&self, qpn: u32) {
        if let Ok(mut qps) = self.qps.try_borrow_mut() {
            qps.retain(|(n, _)| *n != qpn);
        }
    }

    #[inline(always)]
    fn lookup(&self, qpn: u32) -> Option<Rc<QpShared<B, T>>> {
        let qps = self.qps.borrow();
        qps.iter().find(|(n, _)| *n == qpn).and_then(|(_, w)| w.upgrade())
    }

    /// Consumer index (free-running).
    pub(crate) fn ci(&self) -> u32 {
        self.ci.get()
    }

    /// Poll up to `budget` CQEs, dispatching each completion to `f`.
    #[inline(always)]
    pub(crate) fn poll_with<F: FnMut(Completion, T)>(&self, budget: u32, f: &mut F) -> PollOutcome {
        let mut out = PollOutcome::default();
        while out.consumed() < budget {
            let ci = self.ci.get();
            // SAFETY: slot < cqe_cnt; for 128-B CQEs the CQE proper is the second half.
            let cqe =
                unsafe { self.buf.add(((ci & self.mask) * self.cqe_size + (self.cqe_size - 64)) as usize) };
            // SAFETY: op_own is byte 63 of the CQE; the device stores it last with Release.
            let op_own = unsafe { &*(cqe.add(63) as *const AtomicU8) }.load(Ordering::Acquire);
            if op_own >> 4 == cqe_opcode::INVALID || (op_own & 1) as u32 != (ci >> self.log_cnt) & 1 {
                break;
            }
            udma_from_device_barrier();
            let decoded = self.decode(cqe);
            // Hand the slot back before running user code (which may post
            // WQEs whose CQEs land here): read everything first, then publish.
            self.ci.set(ci.wrapping_add(1));
            // SAFETY: the CQ doorbell record lives as long as the CQ.
            unsafe { &*self.dbrec }.store((ci.wrapping_add(1) & 0xff_ffff).to_be(), Ordering::Release);
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

    /// Decode one owned CQE and retire the work request it names.
    #[inline(always)]
    fn decode(&self, cqe: *const u8) -> Result<(Completion, T), UnknownCqe> {
        // SAFETY: `cqe` points at an owned 64-byte CQE.
        let f = unsafe { CqeFields::read(cqe) };
        let unknown =
            |reason| UnknownCqe { op_own: f.op_own, qpn: f.qpn, wqe_counter: f.wqe_counter, reason };
        if f.format != 0 {
            // Compressed sessions and scatter-to-CQE are never enabled by this library.
            return Err(unknown(UnknownReason::Format));
        }
        let mut c = Completion {
            status: f.error.map_or(Status::Success, Status::Error),
            opcode: WcOpcode::Nop,
            qpn: f.qpn,
            wqe_counter: f.wqe_counter,
            byte_len: f.byte_cnt,
            imm: None,
            invalidated_rkey: None,
            src_qpn: 0,
            slid: 0,
            solicited: f.se,
            grh: false,
            sl: 0,
            network: None,
            timestamp: f.timestamp,
            user_index: f.srqn_uidx & 0xff_ffff,
        };
        let Some(qp) = self.lookup(f.qpn) else {
            return Err(unknown(UnknownReason::NoSuchQp));
        };
        match f.opcode {
            cqe_opcode::REQ | cqe_opcode::REQ_ERR => {
                let Some(r) = qp.sq.as_ref().and_then(|sq| sq.retire(f.wqe_counter)) else {
                    return Err(unknown(UnknownReason::NoSuchWqe));
                };
                c.opcode = WcOpcode::from_send(r.opcode);
                if matches!(r.opcode, opcode::ATOMIC_CS | opcode::ATOMIC_FA) && f.error.is_none() {
                    c.byte_len = 8;
                }
                if f.error.is_some() {
                    qp.enter_error(true);
                }
                Ok((c, r.entry))
            }
            cqe_opcode::RESP_WR_IMM..=cqe_opcode::RESP_SEND_INV | cqe_opcode::RESP_ERR => {
                let Some(entry) = qp.retire_recv(f.wqe_counter) else {
                    return Err(unknown(UnknownReason::NoSuchWqe));
                };
                c.opcode = match f.opcode {
                    cqe_opcode::RESP_WR_IMM => WcOpcode::RecvRdmaImm,
                    cqe_opcode::RESP_SEND => WcOpcode::Recv,
                    cqe_opcode::RESP_SEND_IMM => WcOpcode::RecvImm,
                    cqe_opcode::RESP_SEND_INV => WcOpcode::RecvInv,
                    _ => WcOpcode::RecvError,
                };
                match f.opcode {
                    cqe_opcode::RESP_WR_IMM | cqe_opcode::RESP_SEND_IMM => c.imm = Some(f.imm_inval_pkey),
                    cqe_opcode::RESP_SEND_INV => c.invalidated_rkey = Some(f.imm_inval_pkey),
                    _ => {}
                }
                if f.error.is_some() {
                    // A receive error moves an RC QP to ERR; a UD QP or a
                    // DCT keeps receiving (see the simulator's README).
                    if qp.kind() == crate::backend::QpKind::Rc {
                        qp.enter_error(false);
                    }
                } else {
                    c.src_qpn = f.flags_rqpn & 0xff_ffff;
                    c.slid = f.slid;
                    c.grh = (f.flags_rqpn >> 28) & 3 != 0;
                    match qp.link {
                        crate::types::LinkLayer::InfiniBand => c.sl = ((f.flags_rqpn >> 24) & 0xf) as u8,
                        crate::types::LinkLayer::Ethernet => {
                            c.network = Some(match (f.flags_rqpn >> 24) & 3 {
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
            self.shared.cqn
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
            (self.shared.buf, self.shared.mask + 1, self.shared.cqe_size)
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
