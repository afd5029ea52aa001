//! The execution engine: doorbell handling, send-queue processing of RC WQEs (both sides,
//! holding both hosts, see [`crate::hosts`]), receive-queue consumption, RNR, error and flush semantics, and
//! CQE generation (spec §5–§8).

use crate::hosts::{FabricState, Found};
use crate::idmap::{DirectMap, IdMap, IdSet};

use crate::cq::Cq;
use crate::dma::{self, MrTable, Region, Sgl, Src, SrcList, MAX_SGL};
use crate::qp::{Qp, MAX_RQ_STRIDE};
use crate::srq::Srq;
use crate::wire::{
    cqe_opcode, opcode, syndrome, Cqe64, CqeRepr, CtrlSeg, DatagramSeg, ErrCqe, ErrCqeRepr, RecvDataSeg,
    DS_SIZE, MAX_WQE_DS, WQEBB_SIZE,
};
use crate::wqe::{self, Piece, SendWqe};
use crate::{
    access, AsyncEvent, AtomicEndianness, ExecMode, HostConfig, LinkLayer, NicStats, QpState, QpType, RcPath,
};

/// BlueFlame register half size (spec §1.6).
pub(crate) const BF_SIZE: u32 = 256;
/// Cap on queued async events per NIC.
const MAX_EVENTS: usize = 4096;

/// Vendor syndromes written with each syndrome (spec §5.4 and §11.7: firmware-specific;
/// 0xf9, 0x81 and 0x8a are observed values, the others are this model's choice).
pub(crate) fn vendor_syndrome(s: u8) -> u8 {
    match s {
        syndrome::LOCAL_LENGTH_ERR => 0x68,
        syndrome::LOCAL_QP_OP_ERR => 0x51,
        syndrome::LOCAL_PROT_ERR => 0x56,
        syndrome::WR_FLUSH_ERR => 0xf9,
        syndrome::REMOTE_INVAL_REQ_ERR => 0x8a,
        syndrome::REMOTE_ACCESS_ERR => 0x88,
        syndrome::REMOTE_OP_ERR => 0x89,
        syndrome::TRANSPORT_RETRY_EXC_ERR => 0x81,
        syndrome::RNR_RETRY_EXC_ERR => 0x82,
        _ => 0x00,
    }
}

/// Registers per UAR page, and where the first one starts (spec §1.6).
pub(crate) const REGS_PER_PAGE: u32 = 4;
const FIRST_REG: usize = 0x800;
/// Bytes of one register: two BlueFlame halves.
const REG_BYTES: usize = 2 * BF_SIZE as usize;
/// Registers of a device context that QPs get in turn before they share (rdma-core
/// gives each of the first 16 QPs of a context its own).
pub(crate) const CTX_REGS: usize = 16;

/// One UAR register: where it lives, which half the next write must use, how many QPs
/// use it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Uar {
    /// The half (0 or `BF_SIZE`) the next write should use.
    pub expected_offset: u32,
    /// Threaded mode: the NIC's count of coalesced doorbells when the last write
    /// to this register was queued (see [`doorbell`]).
    pub epoch: u64,
    /// Index into `Host::uar_pages`.
    pub page: usize,
    /// Byte offset of the register in its page.
    pub off: usize,
    pub users: u32,
}

/// A device context's registers.
#[derive(Debug, Default)]
pub(crate) struct UarCtx {
    /// Register indices, allocated on first use (at most `CTX_REGS`).
    pub regs: Vec<u32>,
    /// QPs created on the context so far (QP n uses register n % CTX_REGS).
    pub qps: u32,
    /// Registers on the program's own UAR pages ([`Host::attach_uar_page`]), and those
    /// pages (indices into `uar_pages`): dropped, never reused, when the context closes.
    pub borrowed_regs: Vec<u32>,
    pub borrowed_pages: Vec<usize>,
}

/// State of one simulated host / NIC.
#[derive(Debug)]
pub(crate) struct Host {
    pub cfg: HostConfig,
    pub pds: IdSet,
    pub mrs: MrTable,
    pub cqs: DirectMap<Cq>,
    pub qps: DirectMap<Qp>,
    pub srqs: IdMap<Srq>,
    /// DCT number → QP handle of the DCT (only DCTs in RTR or later have a number).
    pub dcts: IdMap<u32>,
    pub uars: IdMap<Uar>,
    /// UAR pages (4 KiB, ordinary memory), never freed before the host.
    pub uar_pages: Vec<crate::mem::DevMem>,
    /// Registers of freed pages' slots ready for reuse.
    pub free_regs: Vec<u32>,
    pub contexts: IdMap<UarCtx>,
    pub next_context: u32,
    pub stats: NicStats,
    pub events: Vec<AsyncEvent>,
    /// The port is down: this host sends and receives nothing.
    pub port_down: bool,
    /// The device failed (`IBV_EVENT_DEVICE_FATAL`).
    pub fatal: bool,
    pub next_pdn: u32,
    pub next_key: u32,
    pub next_cqn: u32,
    pub next_qpn: u32,
    pub next_uar: u32,
    pub next_srqn: u32,
    pub next_dct: u32,
    /// Completion channels (`ibv_comp_channel`).
    pub channels: IdMap<Channel>,
    pub next_channel: u32,
    /// The page CQ doorbells (arm requests) are stored into at offset 0x20 in watch mode.
    pub cq_page: crate::mem::DevMem,
    /// UAR pages of the program's ([`crate::Nic::attach_uar_page`]) whose CQ doorbell
    /// word (offset 0x20) is watched as well: indices into `uar_pages`.
    pub cq_db_pages: Vec<usize>,
    scratch: Vec<u32>,
    /// The NIC's clock, used as CQE timestamp: one tick per WQE executed or message
    /// received, per RNR-timer period. Advanced by [`Host::tick_clock`] only.
    pub clock: u64,
    /// Pages of the program's where the clock is published as mlx5's free-running
    /// internal timer (`internal_timer_h`, `_l`: big-endian, at offset 0), by context
    /// ([`Host::attach_clock_page`]).
    pub clock_pages: Vec<(u32, crate::mem::DevMem)>,
    /// CQs holding a pending compressed session, written when the host's lock is let go
    /// ([`flush_sessions`]).
    pub dirty: Vec<u32>,
    /// Scratch for the WQE being executed ([`process_sq`]).
    pub wqe_scratch: Option<Box<[u8; MAX_WQE_DS * DS_SIZE]>>,
}

/// A completion channel: CQ numbers of pending events, and a socket pair whose read end
/// is readable while any is pending (one byte per event), for poll(2)/epoll.
#[derive(Debug)]
pub(crate) struct Channel {
    pub rx: std::os::unix::net::UnixStream,
    tx: std::os::unix::net::UnixStream,
    pub queue: std::collections::VecDeque<u32>,
}

impl Channel {
    pub(crate) fn new() -> std::io::Result<Channel> {
        let (rx, tx) = std::os::unix::net::UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        Ok(Channel { rx, tx, queue: std::collections::VecDeque::new() })
    }

    fn signal(&mut self, cqn: u32) {
        use std::io::Write;
        self.queue.push_back(cqn);
        let _ = (&self.tx).write(&[1]);
    }

    /// The oldest pending event's CQ number.
    pub(crate) fn take(&mut self) -> Option<u32> {
        use std::io::Read;
        let cqn = self.queue.pop_front()?;
        let _ = (&self.rx).read(&mut [0u8; 1]);
        Some(cqn)
    }
}

impl Host {
    pub(crate) fn new(idx: usize, cfg: HostConfig) -> Host {
        // Distinct number ranges per host make cross-host mix-ups fail loudly.
        let base = (idx as u32 % 0xff) + 1;
        Host {
            cfg,
            pds: IdSet::default(),
            mrs: MrTable::default(),
            cqs: DirectMap::new(base << 8),
            qps: DirectMap::new(base << 12),
            srqs: IdMap::default(),
            dcts: IdMap::default(),
            uars: IdMap::default(),
            uar_pages: Vec::new(),
            free_regs: Vec::new(),
            contexts: IdMap::default(),
            next_context: 1,
            stats: NicStats::default(),
            events: Vec::new(),
            port_down: false,
            fatal: false,
            next_pdn: base << 8,
            next_key: base << 16,
            next_cqn: base << 8,
            next_qpn: base << 12,
            next_uar: 0,
            next_srqn: base << 8,
            // DCT numbers come from their own range (bit 23 set), so a driver that puts the
            // DCT's QP handle into an address vector reaches nothing.
            next_dct: 0x80_0000 | (base << 12),
            channels: IdMap::default(),
            next_channel: 1,
            cq_page: crate::mem::DevMem::new(4096, 4096).expect("a 4 KiB page"),
            cq_db_pages: Vec::new(),
            scratch: Vec::new(),
            clock: 0,
            clock_pages: Vec::new(),
            dirty: Vec::new(),
            wqe_scratch: None,
        }
    }

    /// A register no QP uses: a freed one, or one of a new page.
    pub(crate) fn alloc_reg(&mut self) -> Option<u32> {
        if let Some(r) = self.free_regs.pop() {
            return Some(r);
        }
        let page = self.uar_pages.len();
        self.uar_pages.push(crate::mem::DevMem::new(4096, 4096)?);
        let first = self.next_uar;
        self.next_uar += REGS_PER_PAGE;
        for k in (0..REGS_PER_PAGE).rev() {
            let off = FIRST_REG + k as usize * REG_BYTES;
            self.uars.insert(first + k, Uar { expected_offset: 0, epoch: 0, page, off, users: 0 });
            self.free_regs.push(first + k);
        }
        self.free_regs.pop()
    }

    /// The register a new QP of `context` uses: its own when `dedicated`, else the
    /// context's next one in turn (shared from the 17th QP on).
    pub(crate) fn assign_reg(&mut self, context: u32, dedicated: bool) -> Option<u32> {
        let r = if dedicated {
            self.alloc_reg()?
        } else {
            let (n, have) = {
                let c = self.contexts.entry(context).or_default();
                (c.qps as usize % CTX_REGS, c.regs.len())
            };
            if n >= have {
                let r = self.alloc_reg()?;
                self.contexts.get_mut(&context).expect("just made").regs.push(r);
            }
            let c = self.contexts.get_mut(&context).expect("just made");
            c.qps += 1;
            c.regs[n]
        };
        self.uars.get_mut(&r).expect("allocated").users += 1;
        Some(r)
    }

    /// Attaches a UAR page of the program's to `context`: its registers (at the offsets
    /// of the model's own pages, which are mlx5's: 0x800 + k * 0x200) are appended to the
    /// context's, and its CQ doorbell word is watched. Returns the first register.
    ///
    /// # Safety
    /// As [`crate::mem::DevMem::borrowed`] for 4096 bytes at `page`, until the context
    /// closes.
    pub(crate) unsafe fn attach_uar_page(&mut self, context: u32, page: *mut u8) -> Option<u32> {
        // SAFETY: caller contract.
        let mem = unsafe { crate::mem::DevMem::borrowed(page, 4096, 4096) }?;
        if !self.contexts.contains_key(&context) {
            return None;
        }
        let idx = self.uar_pages.len();
        self.uar_pages.push(mem);
        let first = self.next_uar;
        self.next_uar += REGS_PER_PAGE;
        let c = self.contexts.get_mut(&context).expect("checked");
        c.borrowed_pages.push(idx);
        for k in 0..REGS_PER_PAGE {
            let off = FIRST_REG + k as usize * REG_BYTES;
            self.uars.insert(first + k, Uar { expected_offset: 0, epoch: 0, page: idx, off, users: 0 });
            c.borrowed_regs.push(first + k);
        }
        self.cq_db_pages.push(idx);
        Some(first)
    }

    /// Advances the clock by one tick and publishes it on the attached clock pages.
    #[inline]
    pub(crate) fn tick_clock(&mut self) -> u64 {
        self.clock += 1;
        if !self.clock_pages.is_empty() {
            self.publish_clock();
        }
        self.clock
    }

    #[cold]
    fn publish_clock(&self) {
        for (_, page) in &self.clock_pages {
            page.store_be64(0, self.clock);
        }
    }

    /// Attaches a page of the program's where the clock is published (as the internal
    /// timer that libmlx5 maps with `MLX5_IB_MMAP_CORE_CLOCK` and reads as two
    /// big-endian words) until `context` closes; it holds the clock at once.
    ///
    /// # Safety
    /// As [`crate::mem::DevMem::borrowed`] for 4096 bytes at `page`, until the context
    /// closes.
    pub(crate) unsafe fn attach_clock_page(&mut self, context: u32, page: *mut u8) -> Option<()> {
        if !self.contexts.contains_key(&context) {
            return None;
        }
        // SAFETY: caller contract.
        let mem = unsafe { crate::mem::DevMem::borrowed(page, 4096, 4096) }?;
        mem.store_be64(0, self.clock);
        self.clock_pages.push((context, mem));
        Some(())
    }

    /// Gives register `r` of `context`'s attached pages to a new QP.
    pub(crate) fn take_borrowed_reg(&mut self, context: u32, r: u32) -> Option<u32> {
        let c = self.contexts.get(&context)?;
        if !c.borrowed_regs.contains(&r) {
            return None;
        }
        self.uars.get_mut(&r)?.users += 1;
        Some(r)
    }

    /// A QP stopped using register `r`; a dedicated register with no user is freed.
    pub(crate) fn release_reg(&mut self, r: u32, dedicated: bool) {
        if let Some(u) = self.uars.get_mut(&r) {
            u.users = u.users.saturating_sub(1);
            if dedicated && u.users == 0 {
                u.expected_offset = 0;
                self.free_regs.push(r);
            }
        }
    }

    /// Address of register `r` in its page.
    pub(crate) fn reg_ptr(&self, r: u32) -> *mut u8 {
        match self.uars.get(&r) {
            Some(u) => self.uar_pages[u.page].ptr().wrapping_add(u.off),
            None => std::ptr::null_mut(),
        }
    }

    /// Whether packets can leave or reach this host (port up, device alive).
    pub(crate) fn reachable(&self) -> bool {
        !self.port_down && !self.fatal
    }

    pub(crate) fn push_event(&mut self, e: AsyncEvent) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(e);
        }
    }
}

// ---------------------------------------------------------------------------------------
// CQE construction and delivery

fn req_cqe(qp: &Qp, op: u8, counter: u16, byte_cnt: u32, ts: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    CqeRepr {
        opcode: cqe_opcode::REQ,
        srqn_uidx: qp.user_index,
        byte_cnt,
        timestamp: ts,
        sop_drop_qpn: (u32::from(op) << 24) | qp.qpn,
        wqe_counter: counter,
        ..Default::default()
    }
    .emit(&mut Cqe64::new_unchecked(&mut b[..]));
    b
}

fn err_cqe(op: u8, synd: u8, user_index: u32, wqe_op: u8, qpn: u32, counter: u16) -> [u8; 64] {
    let mut b = [0u8; 64];
    ErrCqeRepr {
        opcode: op,
        owner: 0,
        srqn: user_index,
        vendor_err_synd: vendor_syndrome(synd),
        syndrome: synd,
        s_wqe_opcode_qpn: (u32::from(wqe_op) << 24) | qpn,
        wqe_counter: counter,
    }
    .emit(&mut ErrCqe::new_unchecked(&mut b[..]));
    b
}

/// Delivers a CQE to CQ `cqn` of host `h`.
fn push_cqe(st: &mut FabricState, h: usize, cqn: u32, cqe: &[u8; 64], fatal_qpn: Option<u32>) {
    push_cqe_data(st, h, cqn, cqe, None, fatal_qpn);
}

/// Delivers a CQE, with `data` scattered into it (spec §5.7): a 64-byte CQE takes up to 32
/// bytes in its bytes 0..32 (format 1), a 128-byte CQE up to 64 in the first half of its
/// slot (format 2). A CQE that does not fit puts the CQ in error (overrun): an async event,
/// and every QP reporting to it moves to ERR (their flush CQEs are lost with it).
fn push_cqe_data(
    st: &mut FabricState,
    h: usize,
    cqn: u32,
    cqe: &[u8; 64],
    data: Option<&[u8]>,
    fatal_qpn: Option<u32>,
) {
    let host = &mut st.hosts[h];
    let Some(cq) = host.cqs.get_mut(&cqn) else {
        return;
    };
    let was_error = cq.error;
    let mut b = *cqe;
    let mut half: &[u8] = &[];
    if let Some(d) = data {
        if cq.cqe_size == 64 {
            b[..32].fill(0);
            b[..d.len()].copy_from_slice(d);
            b[OP_OWN] = (b[OP_OWN] & !0x0c) | 1 << 2;
        } else {
            half = d;
            b[OP_OWN] = (b[OP_OWN] & !0x0c) | 2 << 2;
        }
    }
    match cq.push_with(&b, half) {
        Ok(()) => {
            host.stats.cqes_written += 1;
            if cq.has_pending() && !host.dirty.contains(&cqn) {
                host.dirty.push(cqn);
            }
            // The event for an armed CQ, without looking the CQ up again.
            if let Some(ch) = cq.take_event().then_some(cq.channel).flatten() {
                if let Some(ch) = host.channels.get_mut(&ch) {
                    ch.signal(cqn);
                }
            }
        }
        Err(_) => {
            host.stats.cq_overruns += 1;
            if let Some(qpn) = fatal_qpn {
                host.push_event(AsyncEvent::QpFatal { qpn });
            }
            if !was_error {
                host.push_event(AsyncEvent::CqOverrun { cqn });
                let mut users: Vec<u32> = host
                    .qps
                    .values()
                    .filter(|q| q.state != QpState::Err && (q.send_cqn == cqn || q.recv_cqn == cqn))
                    .map(|q| q.qpn)
                    .collect();
                users.sort_unstable();
                for qpn in users {
                    enter_err(st, h, qpn);
                }
            }
        }
    }
}

const OP_OWN: usize = 63;

/// Signals the CQ's channel if the CQ has an event due.
fn deliver_event(host: &mut Host, cqn: u32) {
    let Some(cq) = host.cqs.get_mut(&cqn) else {
        return;
    };
    if !cq.take_event() {
        return;
    }
    if let Some(ch) = cq.channel.and_then(|c| host.channels.get_mut(&c)) {
        ch.signal(cqn);
    }
}

/// Writes every pending compressed session of `host` (the end of a burst: its lock is
/// being let go). Out of line: only compressing CQs have sessions.
#[cold]
#[inline(never)]
pub(crate) fn flush_sessions(host: &mut Host) {
    while let Some(cqn) = host.dirty.pop() {
        if let Some(cq) = host.cqs.get_mut(&cqn) {
            cq.flush();
            deliver_event(host, cqn);
        }
    }
}

/// The arm doorbell of a CQ (spec §5.6): `value` = BE32 arm word, BE32 CQN.
pub(crate) fn cq_doorbell(st: &mut FabricState, h: usize, value: [u8; 8]) {
    let word = u32::from_be_bytes([value[0], value[1], value[2], value[3]]);
    let cqn = u32::from_be_bytes([value[4], value[5], value[6], value[7]]) & 0xff_ffff;
    let host = &mut st.hosts[h];
    host.stats.doorbells += 1;
    if let Some(cq) = host.cqs.get_mut(&cqn) {
        cq.arm(word);
        deliver_event(host, cqn);
    }
}

// ---------------------------------------------------------------------------------------
// Error state and flushes

fn record_shadow(qp: &mut Qp, counter: u16, wqebbs: u16) {
    let mut ctrl8 = [0u8; 8];
    qp.read_sq(counter, 0, &mut ctrl8);
    qp.record_shadow(counter, ctrl8, wqebbs);
}

/// Completes every send WQE up to the producer with REQ_ERR WR_FLUSH_ERR.
fn flush_sq(st: &mut FabricState, h: usize, qpn: u32) {
    loop {
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return;
        };
        let p = qp.sq_producer();
        if qp.sq_ci == p {
            return;
        }
        let c = qp.sq_ci;
        let ctrl = qp.read_ctrl(c);
        let n = ctrl.wqebbs().min(p.wrapping_sub(c));
        record_shadow(qp, c, n);
        qp.sq_ci = c.wrapping_add(n);
        qp.rnr = None;
        let cqe = err_cqe(cqe_opcode::REQ_ERR, syndrome::WR_FLUSH_ERR, qp.user_index, ctrl.opcode, qpn, c);
        let cqn = qp.send_cqn;
        push_cqe(st, h, cqn, &cqe, None);
    }
}

/// Completes every posted receive WQE with RESP_ERR WR_FLUSH_ERR.
fn flush_rq(st: &mut FabricState, h: usize, qpn: u32) {
    loop {
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return;
        };
        let p = qp.rq_producer();
        if qp.rq_wqe_cnt == 0 || qp.rq_ci == p {
            return;
        }
        let c = qp.rq_ci;
        qp.rq_ci = c.wrapping_add(1);
        let cqe = err_cqe(cqe_opcode::RESP_ERR, syndrome::WR_FLUSH_ERR, qp.user_index, 0, qpn, c);
        let cqn = qp.recv_cqn;
        push_cqe(st, h, cqn, &cqe, None);
    }
}

/// Moves a QP to ERR and flushes both of its queues (its own RQ only: SRQ WQEs belong to
/// every QP sharing the SRQ and are never flushed, spec §6.1).
pub(crate) fn enter_err(st: &mut FabricState, h: usize, qpn: u32) {
    let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
        return;
    };
    qp.state = QpState::Err;
    qp.rnr = None;
    flush_sq(st, h, qpn);
    flush_rq(st, h, qpn);
}

/// UD send error (spec §7): the QP moves to SQE, its remaining send WQEs are flushed and its
/// receive side keeps working; SQE→RTS recovers.
pub(crate) fn enter_sqe(st: &mut FabricState, h: usize, qpn: u32) {
    let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
        return;
    };
    qp.state = QpState::Sqe;
    qp.rnr = None;
    flush_sq(st, h, qpn);
}

/// A send WQE of QP `qpn` failed: UD QPs go to SQE, all others to ERR.
fn fail_qp(st: &mut FabricState, h: usize, qpn: u32) {
    match st.hosts[h].qps.get(&qpn).map(|q| q.qp_type) {
        Some(QpType::Ud) => enter_sqe(st, h, qpn),
        _ => enter_err(st, h, qpn),
    }
}

// ---------------------------------------------------------------------------------------
// Execution of one send WQE

#[derive(Debug)]
pub(crate) enum Outcome {
    Done {
        byte_cnt: u32,
    },
    /// Done, and the data the requester reads (READ response, atomic result) goes into its
    /// CQE instead of its memory (requester scatter-to-CQE, spec §5.7).
    DoneInline {
        byte_cnt: u32,
        data: [u8; 64],
    },
    Rnr,
    Fail {
        synd: u8,
        /// Responder QP to move to ERR once the requester's error CQE is written.
        responder: Option<(usize, u32)>,
    },
    /// Nothing was done: the hosts were taken again in order ([`FabricState::need`]);
    /// execute the WQE afresh.
    Restart,
}

pub(crate) fn fail(synd: u8) -> Outcome {
    Outcome::Fail { synd, responder: None }
}

/// Finds the host an RC path leads to: DLID on IB; DGID on RoCE, and the host's MAC must
/// equal `dmac` when one is given.
fn resolve<'a>(
    st: &FabricState<'a>,
    h: usize,
    dlid: u16,
    dgid: Option<[u8; 16]>,
    dmac: Option<[u8; 6]>,
) -> Option<Found<'a>> {
    let ll = st.hosts[h].cfg.link_layer;
    if !st.hosts[h].reachable() {
        return None;
    }
    st.find_host(|o| {
        o.link_layer == ll
            && match ll {
                LinkLayer::InfiniBand => o.lid == dlid && dlid != 0,
                LinkLayer::Ethernet => Some(o.gid) == dgid && dmac.is_none_or(|m| m == o.mac),
            }
    })
}

/// [`resolve`] for RC QP `qpn`'s path `p`, through the QP's cache of the host it found
/// last (`peer`, as read from `Qp::peer` with the path): kept while nothing [`FabricState::find_host`] sees has changed since
/// (the fabric's address epoch) and the path is the same (a new path forgets it).
#[inline]
fn resolve_peer<'a>(
    st: &mut FabricState<'a>,
    h: usize,
    qpn: u32,
    p: &RcPath,
    peer: u32,
) -> Option<Found<'a>> {
    let epoch = st.addr_epoch();
    if u64::from(peer >> 16) == epoch && st.hosts[h].reachable() {
        return Some(st.found((peer & 0xffff) as usize));
    }
    let found = resolve(st, h, p.dlid, p.dgid, p.dmac)?;
    if found.h < 1 << 16 && epoch < 1 << 16 {
        if let Some(me) = st.hosts[h].qps.get_mut(&qpn) {
            me.peer = (epoch as u32) << 16 | found.h as u32;
        }
    }
    Some(found)
}

/// Finds the host an address vector leads to (spec §3.6): IB by `rlid`, and when the GRH
/// bit is set also by `rgid`; RoCE by `rgid`, and `rmac` must be the host's MAC.
fn resolve_av<'a>(st: &FabricState<'a>, h: usize, av: &DatagramSeg<&[u8]>) -> Option<Found<'a>> {
    let ll = st.hosts[h].cfg.link_layer;
    let (rlid, rgid, rmac, grh) = (av.rlid(), av.rgid(), av.rmac(), av.grh());
    if !st.hosts[h].reachable() {
        return None;
    }
    st.find_host(|o| {
        o.link_layer == ll
            && match ll {
                LinkLayer::InfiniBand => rlid != 0 && o.lid == rlid && (!grh || o.gid == rgid),
                LinkLayer::Ethernet => o.gid == rgid && o.mac == rmac,
            }
    })
}

/// Copies the address vector at DS 1 of `wqe` into a 48-byte buffer; a legacy 16-byte AV
/// (ext bit clear, spec §3.6) leaves bytes 16..47 zero (no GRH, no MAC, no GID).
fn read_av(wqe: &[u8]) -> [u8; 48] {
    let mut av = [0u8; 48];
    let Some(first) = wqe.get(DS_SIZE..2 * DS_SIZE) else {
        return av;
    };
    av[..DS_SIZE].copy_from_slice(first);
    if DatagramSeg::new_unchecked(&av[..]).ext() {
        if let Some(rest) = wqe.get(2 * DS_SIZE..4 * DS_SIZE) {
            av[DS_SIZE..].copy_from_slice(rest);
        }
    }
    av
}

pub(crate) fn load_u64(b: [u8; 8], e: AtomicEndianness) -> u64 {
    match e {
        AtomicEndianness::Host => u64::from_ne_bytes(b),
        AtomicEndianness::BigEndian => u64::from_be_bytes(b),
    }
}

fn store_u64(v: u64, e: AtomicEndianness) -> [u8; 8] {
    match e {
        AtomicEndianness::Host => v.to_ne_bytes(),
        AtomicEndianness::BigEndian => v.to_be_bytes(),
    }
}

/// Where a responder's receive WQEs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecvQ {
    /// The QP's own RQ.
    Rq(u32),
    /// An SRQ of the responder's host.
    Srq(u32),
}

fn recv_q(qp: &Qp) -> RecvQ {
    match qp.srqn {
        Some(s) => RecvQ::Srq(s),
        None => RecvQ::Rq(qp.qpn),
    }
}

/// Copies the receive WQE that `q` would hand out next into `out`; returns its CQE
/// `wqe_counter` (RQ counter or SRQ index) and the byte range of its scatter entries.
fn peek_recv(host: &Host, q: RecvQ, out: &mut [u8; MAX_RQ_STRIDE as usize]) -> Option<(u16, usize, usize)> {
    match q {
        RecvQ::Rq(qpn) => {
            let qp = host.qps.get(&qpn)?;
            if qp.rq_wqe_cnt == 0 || qp.rq_ci == qp.rq_producer() {
                return None;
            }
            let n = qp.read_rq(qp.rq_ci, out);
            Some((qp.rq_ci, 0, n))
        }
        RecvQ::Srq(srqn) => {
            let (idx, n) = host.srqs.get(&srqn)?.peek(&mut out[..])?;
            // Scatter entries follow the 16-byte next segment (spec §4.3).
            Some((idx, DS_SIZE, n))
        }
    }
}

/// Consumes the receive WQE `peek_recv` returned.
fn consume_recv(host: &mut Host, q: RecvQ) {
    match q {
        RecvQ::Rq(qpn) => {
            if let Some(qp) = host.qps.get_mut(&qpn) {
                qp.rq_ci = qp.rq_ci.wrapping_add(1);
            }
        }
        RecvQ::Srq(srqn) => {
            if let Some(srq) = host.srqs.get_mut(&srqn) {
                srq.consume();
                if srq.limit_crossed() {
                    host.push_event(AsyncEvent::SrqLimitReached { srqn });
                }
            }
        }
    }
}

/// Checks the scatter entries of a receive WQE (until `lkey == 0x100` or the end): every
/// non-empty entry needs LOCAL_WRITE in PD `pdn` and must lie inside its MR. Zero-length
/// entries are 0 bytes and not checked.
fn recv_sgl(mrs: &MrTable, entries: &[u8], pdn: u32) -> Option<Sgl> {
    let mut sgl = Sgl::new();
    for e in entries.chunks_exact(DS_SIZE) {
        let seg = RecvDataSeg::new_unchecked(e);
        if seg.is_terminator() {
            break;
        }
        let l = u64::from(seg.byte_count() & 0x7fff_ffff);
        if l == 0 {
            continue;
        }
        match mrs.check(seg.lkey(), seg.addr(), l, access::LOCAL_WRITE, pdn) {
            Ok(reg) if sgl.push(reg) => {}
            _ => return None,
        }
    }
    Some(sgl)
}

/// The responder of an RC or DC operation: an RC QP or a DCT.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub h: usize,
    /// QP handle (for state changes).
    pub qpn: u32,
    /// What CQEs carry in `sop_drop_qpn` / `s_wqe_opcode_qpn`: the QPN, or the DCT number.
    pub report_qpn: u32,
    pdn: u32,
    access: u32,
    cqn: u32,
    uidx: u32,
    recv: RecvQ,
    /// RC: every NAK this responder causes moves it to ERR. DCT: never (one initiator must
    /// not be able to kill a target shared by many).
    err_on_nak: bool,
    /// Responder scatter-to-CQE enabled on the QP.
    scatter: bool,
}

impl Target {
    fn of(h: usize, q: &Qp, report_qpn: u32) -> Target {
        Target {
            h,
            qpn: q.qpn,
            report_qpn,
            pdn: q.pdn,
            access: q.attrs.access_flags,
            cqn: q.recv_cqn,
            uidx: q.user_index,
            recv: recv_q(q),
            err_on_nak: q.qp_type != QpType::Dct,
            scatter: q.scatter_to_cqe,
        }
    }
}

/// Executes the validated WQE `w` (bytes in `wqe`) of QP `qpn` on host `h`, including the
/// responder side (the model's simplification: the requester's NIC runs both ends, holding
/// the requester's and the responder's hosts, see [`crate::hosts`]). Nothing is written to
/// memory unless every check passed.
///
/// Choices where the spec is silent (see README.md): zero-length SGEs are 0 bytes and not
/// checked [unverified, §11.4]; a zero-length RDMA WRITE/READ does not check the rkey; an
/// unreachable or unconnected destination fails at once with TRANSPORT_RETRY_EXC_ERR
/// (retries assumed exhausted instantly); every NAK the responder causes moves an RC
/// responder QP to ERR [IB semantics, unverified on mlx5, §6.2], never a DCT.
fn execute(st: &mut FabricState, h: usize, qpn: u32, wqe: &[u8], w: &SendWqe) -> Outcome {
    let op = w.ctrl.opcode;
    if op == opcode::NOP {
        return Outcome::Done { byte_cnt: 0 };
    }
    let Some(me) = st.hosts[h].qps.get(&qpn) else {
        return fail(syndrome::LOCAL_QP_OP_ERR);
    };
    let (pdn, path, peer, qtype, mtu, sq_psn) =
        (me.pdn, me.attrs.path, me.peer, me.qp_type, me.attrs.path_mtu.max(256), me.attrs.sq_psn);
    // Requester scatter-to-CQE: RC only, and only for a signaled WQE (an unsignaled one
    // has no CQE to carry the data, so it goes to memory) [model choice, spec §5.7].
    let req_scatter = if qtype == QpType::Rc && me.scatter_to_cqe && w.ctrl.fm_ce_se & 0x08 != 0 {
        scatter_limit(st, h, me.send_cqn)
    } else {
        0
    };

    // 1. Local side: gather sources (SEND/WRITE) or scatter sinks (READ/atomic).
    let gather = matches!(
        op,
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL | opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM
    );
    let mut srcs = SrcList::new();
    let mut sink = Sgl::new();
    let mut local_err = false;
    {
        let mrs = &st.hosts[h].mrs;
        wqe::data_pieces(w, wqe, |p| {
            if local_err {
                return;
            }
            match p {
                Piece::Inline { off, len } => {
                    // At most MAX_SGL pieces fit a WQE: never full here.
                    let _ = srcs.push(Src::Bytes(&wqe[off..off + len]));
                }
                Piece::Sge { len: 0, .. } => {} // zero-length SGE: 0 bytes, not checked
                Piece::Sge { len, lkey, addr } => {
                    let need = if gather { 0 } else { access::LOCAL_WRITE };
                    match mrs.check(lkey, addr, u64::from(len), need, pdn) {
                        Ok(r) if gather && srcs.push(Src::Mem(r)) => {}
                        Ok(r) if !gather && sink.push(r) => {}
                        _ => local_err = true,
                    }
                }
            }
        });
    }
    if local_err {
        return fail(syndrome::LOCAL_PROT_ERR);
    }
    let srcs = srcs.as_slice();
    let src_lid = st.hosts[h].cfg.lid;

    // 2. Destination.
    let tgt = match qtype {
        QpType::Ud => {
            let av = read_av(wqe);
            return execute_ud(st, h, qpn, w, srcs, &DatagramSeg::new_unchecked(&av[..]));
        }
        // RC: host by path, QP by dest_qpn; it must be a connected RC QP in RTR/RTS
        // pointing back at us, else packets are lost and retries run out.
        QpType::Rc => {
            let Some(p) = path else {
                return unanswered(st, h, qpn);
            };
            let Some(found) = resolve_peer(st, h, qpn, &p, peer) else {
                return unanswered(st, h, qpn);
            };
            if st.need(found).is_err() {
                return Outcome::Restart;
            }
            let rh = found.h;
            let Some(r) = st.hosts[rh].qps.get(&p.dest_qpn) else {
                return unanswered(st, h, qpn);
            };
            if !matches!(r.state, QpState::Rtr | QpState::Rts)
                || r.qp_type != QpType::Rc
                || r.attrs.path.map(|rp| rp.dest_qpn) != Some(qpn)
            {
                return unanswered(st, h, qpn);
            }
            // PSNs (IB spec 9.7): the responder executes only the PSN it expects. Ahead of
            // it, it answers a PSN sequence error NAK naming a PSN the requester never
            // sent; behind it, the request is a duplicate it does not execute again.
            // Either way nothing the requester can retransmit fixes it: its retries run
            // out [model: at once, as for an unreachable peer; step 7 models the retries
            // on a clock].
            if r.attrs.rq_psn != sq_psn {
                st.hosts[rh].stats.psn_errors += 1;
                return unanswered(st, h, qpn);
            }
            Target::of(rh, r, r.qpn)
        }
        // DCI: host by the AV, DCT by its number; a wrong DC key is dropped by the DCT
        // (counted there) and looks like silence to the DCI: retries exhausted at once
        // [unverified].
        QpType::Dci => {
            let avb = read_av(wqe);
            let av = DatagramSeg::new_unchecked(&avb[..]);
            let me = &st.hosts[h].cfg;
            if me.grh_required && me.link_layer == LinkLayer::InfiniBand && !av.grh() {
                return unanswered(st, h, qpn);
            }
            let Some(found) = resolve_av(st, h, &av) else {
                return unanswered(st, h, qpn);
            };
            if st.need(found).is_err() {
                return Outcome::Restart;
            }
            let rh = found.h;
            let num = av.dqpn();
            let Some(r) = st.hosts[rh].dcts.get(&num).and_then(|d| st.hosts[rh].qps.get(d)) else {
                return unanswered(st, h, qpn);
            };
            if r.state != QpState::Rtr || r.qp_type != QpType::Dct {
                return unanswered(st, h, qpn);
            }
            if r.dc_key != av.dc_key() {
                st.hosts[rh].stats.dc_key_violations += 1;
                return unanswered(st, h, qpn);
            }
            Target::of(rh, r, num)
        }
        QpType::Dct => return fail(syndrome::LOCAL_QP_OP_ERR),
    };
    if st.lossy() {
        return crate::lossy::execute(st, h, qpn, tgt, w, srcs, &sink, src_lid, req_scatter);
    }
    let (rh, rqpn) = (tgt.h, tgt.qpn);
    let out = respond(st, tgt, w, srcs, &sink, qpn, src_lid, req_scatter);
    if qtype == QpType::Rc {
        if let Outcome::Done { byte_cnt } | Outcome::DoneInline { byte_cnt, .. } = out {
            advance_psns(st, (h, qpn), (rh, rqpn), packets(op, byte_cnt, mtu));
        }
    }
    out
}

/// A request nobody answers (no such peer, not connected, wrong PSN or DC key): the
/// requester's retries run out (on the simulated clock when the network model runs).
fn unanswered(st: &mut FabricState, h: usize, qpn: u32) -> Outcome {
    if st.lossy() {
        crate::lossy::silent_peer(st, h, qpn);
    }
    fail(syndrome::TRANSPORT_RETRY_EXC_ERR)
}

pub(crate) fn path_mtu_of(st: &FabricState, h: usize, qpn: u32) -> u32 {
    st.hosts[h].qps.get(&qpn).map_or(4096, |q| q.attrs.path_mtu.max(256))
}

/// PSNs an RC message takes (IB spec 9.7.1): one per packet of the request (SEND,
/// WRITE: `ceil(len / MTU)`, at least one), or of the response (READ: the same for the
/// bytes read; atomic: one).
pub(crate) fn packets(op: u8, byte_cnt: u32, mtu: u32) -> u32 {
    match op {
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => 1,
        _ => byte_cnt.div_ceil(mtu).max(1),
    }
}

/// Moves the requester's next send PSN and the responder's expected PSN on by `n`
/// (24-bit arithmetic).
pub(crate) fn advance_psns(st: &mut FabricState, req: (usize, u32), resp: (usize, u32), n: u32) {
    if let Some(q) = st.hosts[req.0].qps.get_mut(&req.1) {
        q.attrs.sq_psn = q.attrs.sq_psn.wrapping_add(n) & 0xff_ffff;
    }
    if let Some(q) = st.hosts[resp.0].qps.get_mut(&resp.1) {
        q.attrs.rq_psn = q.attrs.rq_psn.wrapping_add(n) & 0xff_ffff;
    }
}

/// Most bytes scatter-to-CQE puts into a CQE of CQ `cqn`: 32 with 64-byte CQEs, 64 with
/// 128-byte CQEs (spec §5.7).
fn scatter_limit(st: &FabricState, h: usize, cqn: u32) -> u64 {
    st.hosts[h].cqs.get(&cqn).map_or(0, |c| u64::from(c.cqe_size / 2))
}

/// The responder side of an RC or DC operation. `req_scatter`: how many bytes of a READ
/// response or atomic result may go into the requester's CQE (0: none).
#[allow(clippy::too_many_arguments)]
pub(crate) fn respond(
    st: &mut FabricState,
    tgt: Target,
    w: &SendWqe,
    srcs: &[Src<'_>],
    sink: &Sgl,
    src_qpn: u32,
    src_lid: u16,
    req_scatter: u64,
) -> Outcome {
    let op = w.ctrl.opcode;
    let endian = st.cfg.atomic_endianness;
    let rh = tgt.h;
    let ts = st.hosts[rh].tick_clock();
    let nak = |synd| Outcome::Fail { synd, responder: tgt.err_on_nak.then_some((rh, tgt.qpn)) };
    let len = w.len;
    let consumes =
        matches!(op, opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL | opcode::RDMA_WRITE_IMM);
    // The receive WQE's copy, zeroed only when a receive is consumed (not per WRITE).
    let mut rbuf_store: Option<[u8; MAX_RQ_STRIDE as usize]> = None;
    let recv = if consumes {
        let b = rbuf_store.insert([0u8; MAX_RQ_STRIDE as usize]);
        peek_recv(&st.hosts[rh], tgt.recv, b)
    } else {
        None
    };
    let rbuf: &[u8] = rbuf_store.as_ref().map_or(&[], |b| &b[..]);
    let rmrs = &st.hosts[rh].mrs;
    // The CQE for a consumed receive WQE: source QPN only in flags_rqpn (g/SL/L3 bits 0
    // for RC and DC [unverified, spec §11.2]).
    let resp = |cop: u8, counter: u16| RecvCqe {
        cop,
        se: w.ctrl.fm_ce_se & 2 != 0,
        imm: w.ctrl.imm,
        counter,
        slid: src_lid,
        flags_rqpn: src_qpn & 0xff_ffff,
        byte_cnt: len as u32,
        ts,
    };

    match op {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if tgt.access & access::REMOTE_WRITE == 0 {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let dst = if len == 0 {
                Region::EMPTY
            } else {
                match rmrs.check(w.rkey, w.raddr, len, access::REMOTE_WRITE, tgt.pdn) {
                    Ok(d) => d,
                    Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
                }
            };
            if op == opcode::RDMA_WRITE_IMM && recv.is_none() {
                return Outcome::Rnr;
            }
            dma::stream(srcs, &[dst]);
            if let (opcode::RDMA_WRITE_IMM, Some((counter, _, _))) = (op, recv) {
                complete_recv(st, &tgt, resp(cqe_opcode::RESP_WR_IMM, counter));
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {
            let Some((counter, from, to)) = recv else {
                return Outcome::Rnr;
            };
            let sgl = recv_sgl(rmrs, &rbuf[from..to], tgt.pdn);
            let resp_err = match &sgl {
                None => Some((syndrome::LOCAL_PROT_ERR, syndrome::REMOTE_OP_ERR)),
                Some(s) if len > s.total() => {
                    Some((syndrome::LOCAL_LENGTH_ERR, syndrome::REMOTE_INVAL_REQ_ERR))
                }
                Some(_) => None,
            };
            if let Some((resp_synd, req_synd)) = resp_err {
                let cqe = err_cqe(cqe_opcode::RESP_ERR, resp_synd, tgt.uidx, 0, tgt.report_qpn, counter);
                consume_recv(&mut st.hosts[rh], tgt.recv);
                let fatal = tgt.err_on_nak.then_some(tgt.qpn);
                push_cqe(st, rh, tgt.cqn, &cqe, fatal);
                return nak(req_synd);
            }
            let cop = match op {
                opcode::SEND => cqe_opcode::RESP_SEND,
                opcode::SEND_IMM => cqe_opcode::RESP_SEND_IMM,
                _ => cqe_opcode::RESP_SEND_INV,
            };
            // Responder scatter-to-CQE (spec §5.7): RC with either CQE size, a DCT only
            // with 128-byte CQEs; non-empty messages only [model choice]. The receive WQE
            // is still checked (lkey, length) and consumed; its memory is not written.
            let mut limit = if tgt.scatter { scatter_limit(st, rh, tgt.cqn) } else { 0 };
            if !tgt.err_on_nak && limit != 64 {
                limit = 0;
            }
            if len > 0 && len <= limit {
                let mut d = [0u8; 64];
                dma::gather(srcs, &mut d[..len as usize]);
                complete_recv_data(st, &tgt, resp(cop, counter), &d[..len as usize]);
            } else {
                if let Some(s) = &sgl {
                    dma::stream(srcs, s.regions());
                }
                complete_recv(st, &tgt, resp(cop, counter));
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::RDMA_READ => {
            if tgt.access & access::REMOTE_READ == 0 {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            if len > 0 {
                match rmrs.check(w.rkey, w.raddr, len, access::REMOTE_READ, tgt.pdn) {
                    Ok(s) if len <= req_scatter => {
                        let mut data = [0u8; 64];
                        dma::read(&s, 0, &mut data[..len as usize]);
                        return Outcome::DoneInline { byte_cnt: len as u32, data };
                    }
                    Ok(s) => {
                        dma::stream(&[Src::Mem(s)], sink.regions());
                    }
                    Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
                }
            }
            Outcome::Done { byte_cnt: len as u32 }
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            if tgt.access & access::REMOTE_ATOMIC == 0 || !w.raddr.is_multiple_of(8) {
                return nak(syndrome::REMOTE_INVAL_REQ_ERR);
            }
            let target = match rmrs.check(w.rkey, w.raddr, 8, access::REMOTE_ATOMIC, tgt.pdn) {
                Ok(t) => t,
                Err(_) => return nak(syndrome::REMOTE_ACCESS_ERR),
            };
            let Some(result) = sink.regions().first().copied() else {
                return fail(syndrome::LOCAL_QP_OP_ERR);
            };
            let mut cur = [0u8; 8];
            dma::read(&target, 0, &mut cur);
            let old = load_u64(cur, endian);
            let new = if op == opcode::ATOMIC_CS {
                if old == w.compare {
                    w.swap_add
                } else {
                    old
                }
            } else {
                old.wrapping_add(w.swap_add)
            };
            dma::write(&target, 0, &store_u64(new, endian));
            if req_scatter >= 8 {
                // The result in the CQE, in the byte order it would have had in memory
                // [model choice, spec §6.5 open question].
                let mut data = [0u8; 64];
                data[..8].copy_from_slice(&store_u64(old, endian));
                return Outcome::DoneInline { byte_cnt: 8, data };
            }
            dma::write(&result, 0, &store_u64(old, endian));
            Outcome::Done { byte_cnt: 8 }
        }
        _ => fail(syndrome::LOCAL_QP_OP_ERR),
    }
}

/// A responder success CQE to write for a consumed receive WQE.
#[derive(Debug, Clone, Copy)]
struct RecvCqe {
    cop: u8,
    /// The sender's SE bit.
    se: bool,
    /// The sender's ctrl `imm` bytes (reported unless the opcode is RESP_SEND).
    imm: [u8; 4],
    counter: u16,
    slid: u16,
    flags_rqpn: u32,
    byte_cnt: u32,
    ts: u64,
}

/// The responder CQE bytes: `sop_drop_qpn` = QPN or DCT number, `srqn_uidx` = user index,
/// `wqe_counter` = RQ counter or SRQ index.
fn recv_cqe(tgt: &Target, c: &RecvCqe) -> [u8; 64] {
    let imm = if c.cop == cqe_opcode::RESP_SEND { [0; 4] } else { c.imm };
    let mut b = [0u8; 64];
    CqeRepr {
        opcode: c.cop,
        se: c.se,
        owner: 0,
        slid: c.slid,
        flags_rqpn: c.flags_rqpn,
        srqn_uidx: tgt.uidx,
        imm_inval_pkey: imm,
        byte_cnt: c.byte_cnt,
        timestamp: c.ts,
        sop_drop_qpn: tgt.report_qpn,
        wqe_counter: c.counter,
    }
    .emit(&mut Cqe64::new_unchecked(&mut b[..]));
    b
}

/// Consumes the responder's next receive WQE and writes its success CQE.
fn complete_recv(st: &mut FabricState, tgt: &Target, c: RecvCqe) {
    consume_recv(&mut st.hosts[tgt.h], tgt.recv);
    let b = recv_cqe(tgt, &c);
    push_cqe(st, tgt.h, tgt.cqn, &b, None);
}

/// [`complete_recv`] with the message in the CQE (scatter-to-CQE).
fn complete_recv_data(st: &mut FabricState, tgt: &Target, c: RecvCqe, data: &[u8]) {
    consume_recv(&mut st.hosts[tgt.h], tgt.recv);
    let b = recv_cqe(tgt, &c);
    push_cqe_data(st, tgt.h, tgt.cqn, &b, Some(data), None);
}

// ---------------------------------------------------------------------------------------
// UD

/// Size of the GRH slot at the start of every UD receive buffer (spec §6.6).
const GRH_SLOT: u64 = 40;

/// The network header a UD receive finds in its GRH slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UdL3 {
    /// IB without GRH: the slot is left untouched.
    None,
    /// IB GRH (40 bytes).
    IbGrh,
    /// RoCE v2 over IPv6 (40-byte IPv6 header).
    Ipv6,
    /// RoCE v2 over IPv4 (20-byte IPv4 header in slot bytes 20..39).
    Ipv4,
}

/// Bytes after the network header as on the wire: UD transport headers (BTH 12, DETH 8,
/// ImmDt 4), payload, pad to 4 bytes, ICRC 4 [unverified: the model reports wire lengths].
fn ud_transport_len(len: u64, imm: bool) -> u64 {
    12 + 8 + if imm { 4 } else { 0 } + len + (4 - len % 4) % 4 + 4
}

fn ipv4_checksum(h: &[u8; 20]) -> u16 {
    let mut sum: u32 = 0;
    for c in h.chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Builds the GRH / IPv6 (40 bytes) or IPv4 (20 bytes) header of a UD datagram.
fn ud_header(kind: UdL3, av: &DatagramSeg<&[u8]>, sgid: [u8; 16], len: u64, imm: bool) -> ([u8; 40], usize) {
    let mut hdr = [0u8; 40];
    let t = ud_transport_len(len, imm);
    match kind {
        UdL3::None => (hdr, 0),
        UdL3::IbGrh | UdL3::Ipv6 => {
            let (paylen, next) = if kind == UdL3::IbGrh { (t, 0x1b) } else { (8 + t, 17) };
            let w0 = (6u32 << 28) | (u32::from(av.tclass()) << 20) | av.flow_label();
            hdr[0..4].copy_from_slice(&w0.to_be_bytes());
            hdr[4..6].copy_from_slice(&(paylen as u16).to_be_bytes());
            hdr[6] = next;
            hdr[7] = av.hop_limit();
            hdr[8..24].copy_from_slice(&sgid);
            hdr[24..40].copy_from_slice(&av.rgid());
            (hdr, 40)
        }
        UdL3::Ipv4 => {
            let mut v4 = [0u8; 20];
            v4[0] = 0x45;
            v4[1] = av.tclass();
            v4[2..4].copy_from_slice(&((20 + 8 + t) as u16).to_be_bytes());
            v4[6] = 0x40; // DF
            v4[8] = av.hop_limit();
            v4[9] = 17; // UDP
            v4[12..16].copy_from_slice(&sgid[12..16]);
            v4[16..20].copy_from_slice(&av.rgid()[12..16]);
            let csum = ipv4_checksum(&v4);
            v4[10..12].copy_from_slice(&csum.to_be_bytes());
            hdr[..20].copy_from_slice(&v4);
            (hdr, 20)
        }
    }
}

fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// Executes a UD SEND / SEND_IMM: unreliable, so every delivery problem is a silent drop
/// (counted in `ud_dropped`) and the sender completes successfully. A message longer than the
/// port's active MTU fails with LOCAL_LENGTH_ERR (the caller moves the QP to SQE).
fn execute_ud(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    w: &SendWqe,
    srcs: &[Src<'_>],
    av: &DatagramSeg<&[u8]>,
) -> Outcome {
    let op = w.ctrl.opcode;
    if !matches!(op, opcode::SEND | opcode::SEND_IMM) {
        return fail(syndrome::LOCAL_QP_OP_ERR);
    }
    let len = w.len;
    let done = Outcome::Done { byte_cnt: len as u32 };
    let me = &st.hosts[h];
    let (ll, src_lid, sgid) = (me.cfg.link_layer, me.cfg.lid, me.cfg.gid);
    if len > u64::from(active_mtu(ll)) {
        return fail(syndrome::LOCAL_LENGTH_ERR);
    }
    let own_qkey = me.qps.get(&qpn).map_or(0, |q| q.attrs.qkey);
    // A port that requires a GRH puts no packet without one on the wire
    // [unverified: dropped, as the switch or PF does for a VF].
    if me.cfg.grh_required && ll == LinkLayer::InfiniBand && !av.grh() {
        st.hosts[h].stats.ud_dropped += 1;
        return done;
    }
    let Some(found) = resolve_av(st, h, av) else {
        st.hosts[h].stats.ud_dropped += 1;
        return done;
    };
    if st.need(found).is_err() {
        return Outcome::Restart;
    }
    let rh = found.h;
    // IB rule: a Q_Key with the high-order bit set means "use the sender QP's own Q_Key".
    let qkey = if av.qkey() & 0x8000_0000 != 0 { own_qkey } else { av.qkey() };
    let rqpn = av.dqpn();
    if st.lossy() && !crate::lossy::datagram(st, h, rh, qpn, rqpn, qkey, w, srcs) {
        return done; // lost on the link: nothing else changes
    }
    let tgt = match st.hosts[rh].qps.get(&rqpn) {
        // An SQE QP still receives (spec §7: the RQ keeps working).
        Some(r)
            if r.qp_type == QpType::Ud
                && matches!(r.state, QpState::Rtr | QpState::Rts | QpState::Sqe)
                && r.attrs.qkey == qkey =>
        {
            Target::of(rh, r, rqpn)
        }
        _ => {
            st.hosts[rh].stats.ud_dropped += 1;
            return done;
        }
    };
    let mut rbuf = [0u8; MAX_RQ_STRIDE as usize];
    let Some((counter, from, to)) = peek_recv(&st.hosts[rh], tgt.recv, &mut rbuf) else {
        st.hosts[rh].stats.ud_dropped += 1; // no RNR for UD
        return done;
    };
    let imm = op == opcode::SEND_IMM;
    let sgl = recv_sgl(&st.hosts[rh].mrs, &rbuf[from..to], tgt.pdn);
    let resp_err = match &sgl {
        None => Some(syndrome::LOCAL_PROT_ERR),
        Some(s) if len + GRH_SLOT > s.total() => Some(syndrome::LOCAL_LENGTH_ERR),
        Some(_) => None,
    };
    let (Some(sgl), None) = (sgl, resp_err) else {
        // The receive WQE completes in error; the UD QP stays operational [unverified,
        // spec §11.9]; the sender still succeeds.
        let synd = resp_err.unwrap_or(syndrome::LOCAL_PROT_ERR);
        let cqe = err_cqe(cqe_opcode::RESP_ERR, synd, tgt.uidx, 0, rqpn, counter);
        consume_recv(&mut st.hosts[rh], tgt.recv);
        push_cqe(st, rh, tgt.cqn, &cqe, None);
        return done;
    };
    let roce = ll == LinkLayer::Ethernet;
    let kind = match (roce, av.grh()) {
        (false, false) => UdL3::None,
        (false, true) => UdL3::IbGrh,
        (true, _) if is_ipv4_mapped(&av.rgid()) => UdL3::Ipv4,
        (true, _) => UdL3::Ipv6,
    };
    let (hdr, hlen) = ud_header(kind, av, sgid, len, imm);
    // Skip the untouched part of the slot: all 40 bytes without a GRH, 20 before IPv4.
    let skip = GRH_SLOT - hlen as u64;
    let dst = sgl.skip(skip);
    let mut all = [Src::Bytes(&[]); MAX_SGL + 1];
    all[0] = Src::Bytes(&hdr[..hlen]);
    all[1..=srcs.len()].copy_from_slice(srcs);
    dma::stream(&all[..=srcs.len()], dst.regions());
    let c = RecvCqe {
        cop: if imm { cqe_opcode::RESP_SEND_IMM } else { cqe_opcode::RESP_SEND },
        se: w.ctrl.fm_ce_se & 2 != 0,
        imm: w.ctrl.imm,
        counter,
        slid: if roce { 0 } else { src_lid },
        flags_rqpn: ud_flags_rqpn(kind, av, qpn),
        byte_cnt: (len + GRH_SLOT) as u32,
        ts: st.hosts[rh].tick_clock(),
    };
    complete_recv(st, &tgt, c);
    done
}

/// UD responder `flags_rqpn` (spec §5.1, §6.6): `g` (bits 29..28) = 1 when a GRH / IP
/// header is present; IB: SL (bits 27..24) from the AV's `stat_rate_sl`; RoCE: L3 type
/// (bits 25..24: 1 IPv6, 2 IPv4); bits 23..0 the source QPN.
fn ud_flags_rqpn(kind: UdL3, av: &DatagramSeg<&[u8]>, src_qpn: u32) -> u32 {
    let g = if kind == UdL3::None { 0 } else { 1u32 << 28 };
    let low = match kind {
        UdL3::None | UdL3::IbGrh => u32::from(av.stat_rate_sl() & 0xf) << 24,
        UdL3::Ipv6 => 1 << 24,
        UdL3::Ipv4 => 2 << 24,
    };
    g | low | (src_qpn & 0xff_ffff)
}

/// Active MTU of a port (what `NicInfo::active_mtu` reports).
pub(crate) fn active_mtu(ll: LinkLayer) -> u32 {
    match ll {
        LinkLayer::InfiniBand => 4096,
        LinkLayer::Ethernet => 1024,
    }
}

// ---------------------------------------------------------------------------------------
// Send queue processing

/// Executes WQEs of QP `qpn` from its hardware counter up to the producer in dbrec word 1.
/// `retry`: retry the WQE the SQ is RNR-blocked at (one tick elapsed).
pub(crate) fn process_sq(st: &mut FabricState, h: usize, qpn: u32, retry: bool) {
    // A WQE's copy: a buffer kept in the fabric state, not a fresh zeroed array per
    // call (a nested call, if one ever happens, gets a new one).
    let mut buf = st.hosts[h].wqe_scratch.take().unwrap_or_else(|| Box::new([0u8; MAX_WQE_DS * DS_SIZE]));
    process_sq_in(st, h, qpn, retry, &mut buf);
    st.hosts[h].wqe_scratch = Some(buf);
}

fn process_sq_in(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    mut retry: bool,
    buf: &mut [u8; MAX_WQE_DS * DS_SIZE],
) {
    // Whether this runs in the driver's thread (deterministic mode, or threaded mode's
    // `try_host` run), not a NIC thread: see the prefetch below.
    let posters = st.cfg.mode == ExecMode::Deterministic || st.nowait();
    // The producer last read, while WQEs it covers wait: the doorbell record is read
    // once per run of WQEs, not once per WQE (in threaded mode the driver's core
    // writes it with every post, so that each read is a trip between cores).
    let mut known: Option<u16> = None;
    loop {
        let Some(qp) = st.hosts[h].qps.get(&qpn) else {
            return;
        };
        match qp.state {
            QpState::Err | QpState::Sqe => return flush_sq(st, h, qpn),
            QpState::Rts if qp.sq_wqe_cnt != 0 => {}
            _ => return,
        }
        let qtype = qp.qp_type;
        let producer = match known.take() {
            Some(p) => p,
            None => qp.sq_producer(),
        };
        let counter = qp.sq_ci;
        if counter == producer || (qp.rnr.is_some() && !retry) {
            return;
        }
        let avail = producer.wrapping_sub(counter);
        let (ctrl, len) = qp.fetch_wqe(counter, buf);
        let parsed = match len {
            None => Err("WQE larger than the ring"),
            Some(_) if ctrl.qpn != qpn => Err("QPN in ctrl is not this QP"),
            Some(_) if ctrl.wqe_index != counter => Err("wqe_index is not the hardware counter"),
            Some(_) if ctrl.wqebbs() > avail => Err("WQE extends past the producer"),
            Some(l) => wqe::parse_with_ctrl(qtype, ctrl, &buf[..l]),
        };
        let nbb = ctrl.wqebbs().min(avail);
        let outcome = match &parsed {
            Err(_) => {
                st.hosts[h].stats.malformed_wqes += 1;
                fail(syndrome::LOCAL_QP_OP_ERR)
            }
            Ok(w) => {
                let l = usize::from(w.ctrl.ds) * DS_SIZE;
                match execute(st, h, qpn, &buf[..l], w) {
                    // A host it needs was busy, and this operation does not wait
                    // (`Shared::try_host`): the WQE is left as it was, for the NIC.
                    Outcome::Restart if st.deferred() => return,
                    // Home was let go for a moment: look at the QP afresh.
                    Outcome::Restart => continue,
                    o => o,
                }
            }
        };
        let me = &mut st.hosts[h];
        me.stats.wqes_executed += 1;
        let ts = me.tick_clock();
        let outcome = match outcome {
            Outcome::Rnr => {
                st.hosts[h].stats.rnr_naks += 1;
                let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
                    return;
                };
                let limit = qp.attrs.rnr_retry;
                let tries = match qp.rnr {
                    Some(n) => n.saturating_add(1),
                    None => 0,
                };
                if limit == 0 || (limit != 7 && tries >= limit) {
                    fail(syndrome::RNR_RETRY_EXC_ERR)
                } else {
                    qp.rnr = Some(tries);
                    return;
                }
            }
            o => o,
        };
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return;
        };
        record_shadow(qp, counter, nbb);
        qp.sq_ci = counter.wrapping_add(nbb);
        qp.rnr = None;
        // Whether WQEs wait behind this one: up to the producer read before, or else
        // read again while the QP is at hand. One posted after this read comes with a
        // doorbell (or a doorbell-record move a watching NIC sees) of its own.
        let more = if producer != qp.sq_ci {
            known = Some(producer);
            true
        } else {
            qp.sq_producer() != qp.sq_ci
        };
        if !more && posters {
            // The driver writes this QP's next WQEs there (see `prefetch_next`): into
            // this thread's caches when it is the driver's, never a NIC thread's,
            // where it would only move the lines away from the driver's core.
            qp.prefetch_next(nbb);
        }
        match outcome {
            Outcome::Done { byte_cnt } => {
                // CE = 2 or 3 asks for a CQE; CE = 1 ("only on first error") is treated like
                // CE = 0 on success [unverified, spec §2.2]. byte_cnt: message length for
                // SEND/WRITE [unverified, §6.3], bytes read for READ, 8 for atomics.
                if ctrl.fm_ce_se & 0x08 != 0 {
                    let cqe = req_cqe(qp, ctrl.opcode, counter, byte_cnt, ts);
                    let cqn = qp.send_cqn;
                    push_cqe(st, h, cqn, &cqe, None);
                }
            }
            Outcome::DoneInline { byte_cnt, data } => {
                let cqe = req_cqe(qp, ctrl.opcode, counter, byte_cnt, ts);
                let cqn = qp.send_cqn;
                push_cqe_data(st, h, cqn, &cqe, Some(&data[..byte_cnt as usize]), None);
            }
            Outcome::Fail { synd, responder } => {
                let cqe = err_cqe(cqe_opcode::REQ_ERR, synd, qp.user_index, ctrl.opcode, qpn, counter);
                let cqn = qp.send_cqn;
                push_cqe(st, h, cqn, &cqe, Some(qpn));
                if let Some((rh, rqpn)) = responder {
                    enter_err(st, rh, rqpn);
                }
                return fail_qp(st, h, qpn);
            }
            Outcome::Rnr | Outcome::Restart => return,
        }
        if !more {
            return;
        }
        retry = false;
    }
}

// ---------------------------------------------------------------------------------------
// Doorbells and ticks

/// Checks an 8-byte doorbell against the WQE it names (spec §1.6, §8 step 1).
fn doorbell_matches(qp: &Qp, value: &[u8; 8], strict: bool) -> bool {
    let idx = u16::from_be_bytes([value[1], value[2]]);
    let p = qp.sq_producer();
    let ci = qp.sq_ci;
    let (ctrl8, nbb) = if idx.wrapping_sub(ci) < p.wrapping_sub(ci) {
        let mut c8 = [0u8; 8];
        qp.read_sq(idx, 0, &mut c8);
        // ds is the low 6 bits of byte 7 (qpn_ds).
        (c8, crate::wire::wqebbs_of(CtrlSeg::new_unchecked(&c8[..]).ds()))
    } else {
        // Strict (a doorbell handled when rung): only a WQE that ends at the producer
        // matches, and an executed one that does is the last executed (see `Qp::last`).
        let s = qp.shadow_of(idx, !strict);
        if !strict && s.valid && s.counter.wrapping_sub(idx).wrapping_sub(1) < 0x7fff {
            // Threaded mode: the slot was reused by a newer WQE before this (queued)
            // doorbell was handled; it can no longer be verified.
            return true;
        }
        if !s.valid || s.counter != idx {
            return false;
        }
        (s.ctrl8, s.wqebbs)
    };
    let end = idx.wrapping_add(nbb);
    let end_ok = if strict { end == p } else { p.wrapping_sub(end) < 0x8000 };
    ctrl8 == *value && end_ok
}

/// Checks BlueFlame data against the ring copy of the WQE it carries.
fn bf_matches(qp: &Qp, data: &[u8]) -> bool {
    if data.is_empty() || !data.len().is_multiple_of(WQEBB_SIZE) || data.len() > BF_SIZE as usize {
        return false;
    }
    let ctrl = match CtrlSeg::new_checked(data) {
        Ok(c) => crate::wire::CtrlRepr::parse(&c),
        Err(_) => return false,
    };
    if ctrl.ds == 0 || usize::from(ctrl.wqebbs()) * WQEBB_SIZE != data.len() {
        return false;
    }
    let idx = ctrl.wqe_index;
    let p = qp.sq_producer();
    if idx.wrapping_sub(qp.sq_ci) >= p.wrapping_sub(qp.sq_ci) {
        // Already executed (threaded race): only the ctrl bytes remain to compare, and
        // doorbell_matches does that.
        return true;
    }
    let mut ring = [0u8; BF_SIZE as usize];
    qp.read_sq(idx, 0, &mut ring[..data.len()]);
    ring[..data.len()] == *data
}

/// Handles one UAR write (plain doorbell when `bf` is `None`) delivered as a bus write.
/// `epoch`: threaded mode's count of doorbells coalesced on this NIC when the write
/// was queued. A coalesced doorbell flipped its register's half without reaching the
/// NIC, so a write queued after a coalescing (a new epoch for its register) starts the
/// register's alternation afresh instead of being checked against it.
pub(crate) fn doorbell(
    st: &mut FabricState,
    h: usize,
    uar_index: u32,
    offset: u32,
    value: [u8; 8],
    bf: Option<&[u8]>,
    epoch: Option<u64>,
) {
    let via = match (st.cfg.mode, epoch) {
        (ExecMode::Deterministic, _) => Via::Bus,
        (_, Some(e)) => Via::Queue(e),
        (_, None) => Via::Memory,
    };
    doorbell_checked(st, h, uar_index, offset, value, bf, via)
}

/// Asks for the lines a doorbell will need (see [`Qp::prefetch_doorbell`]) before it is
/// handled: for the next message of a NIC thread's queue.
pub(crate) fn prefetch_doorbell(st: &FabricState, h: usize, value: &[u8; 8]) {
    if let Some(qp) = st.hosts[h].qps.get(&doorbell_qpn(value)) {
        qp.prefetch_doorbell(u16::from_be_bytes([value[1], value[2]]));
    }
}

/// Whether the driver has taken every CQE of the send CQ of the QP that a doorbell value
/// names (false for an unknown QP): threaded mode's cue that the application waits for
/// the doorbell's work (see `Link::run_here`).
pub(crate) fn send_cq_taken(st: &FabricState, h: usize, value: &[u8; 8]) -> bool {
    let host = &st.hosts[h];
    host.qps
        .get(&doorbell_qpn(value))
        .and_then(|q| host.cqs.get(&q.send_cqn))
        .is_some_and(|cq| cq.all_taken())
}

/// The QPN a doorbell value names: ctrl bytes 4..7 are `qpn << 8 | ds` (spec §2.1).
pub(crate) fn doorbell_qpn(value: &[u8; 8]) -> u32 {
    u32::from_be_bytes([value[4], value[5], value[6], value[7]]) >> 8
}

/// How a UAR write reached the NIC.
#[derive(Clone, Copy)]
enum Via {
    /// A synchronous bus write (deterministic mode): the named WQE must end
    /// exactly at the producer.
    Bus,
    /// Threaded mode's queue, with the NIC's count of coalesced doorbells when
    /// it was queued (see [`doorbell`]); the named WQE may be older.
    Queue(u64),
    /// Read from the register's memory (watch mode); the WQE may be older.
    Memory,
}

/// Handles one UAR write that arrived `via` the bus, the queue or memory.
fn doorbell_checked(
    st: &mut FabricState,
    h: usize,
    uar_index: u32,
    offset: u32,
    value: [u8; 8],
    bf: Option<&[u8]>,
    via: Via,
) {
    let strict = matches!(via, Via::Bus);
    let host = &mut st.hosts[h];
    host.stats.doorbells += 1;
    if bf.is_some() {
        host.stats.bf_writes += 1;
    }
    // A register has two halves, at 0 and BF_SIZE (spec §1.6): a store
    // anywhere else is a program's bug the device survives. Counted and
    // ignored before anything (the half alternation included) takes it in.
    if offset & !BF_SIZE != 0 {
        host.stats.doorbell_bad_offset += 1;
        return;
    }
    let Some(uar) = host.uars.get_mut(&uar_index) else {
        host.stats.doorbell_mismatch += 1;
        return;
    };
    let resync = match via {
        Via::Queue(e) => std::mem::replace(&mut uar.epoch, e) != e,
        _ => false,
    };
    if resync {
        uar.expected_offset = offset ^ BF_SIZE;
    } else if offset != uar.expected_offset {
        host.stats.bf_offset_mismatch += 1;
        uar.expected_offset = offset ^ BF_SIZE;
    } else {
        uar.expected_offset ^= BF_SIZE;
    }
    let qpn = doorbell_qpn(&value);
    let Some(qp) = host.qps.get(&qpn).filter(|q| q.sq_wqe_cnt != 0) else {
        host.stats.doorbell_mismatch += 1;
        return;
    };
    // Threaded and watch modes: the store `process_sq` makes there, asked for now.
    qp.prefetch_shadow(qp.sq_ci);
    let db_ok = qp.uar_index == uar_index && doorbell_matches(qp, &value, strict);
    let bf_ok = bf.is_none_or(|d| bf_matches(qp, d));
    if !db_ok {
        host.stats.doorbell_mismatch += 1;
    }
    if !bf_ok {
        host.stats.bf_content_mismatch += 1;
    }
    process_sq(st, h, qpn, false);
}

/// Doorbells stored into the UAR pages of host `h` since the last scan (spec §1.6): for
/// each register in use, each half whose first 8 bytes are not zero holds a doorbell (a
/// ctrl segment's first 8 bytes are never all zero: `ds` >= 1). The 8 bytes are taken
/// with an atomic swap to zero. A BlueFlame write leaves the rest of the WQE behind them;
/// memory does not show store sizes, so a write whose bytes 8.. are still zero counts as a
/// plain doorbell, and one whose bytes differ from the ring is re-read for a while (the
/// writer may be between its 64-byte chunks) before it counts as a content mismatch. The
/// half is then cleared. When both halves were written since the last scan, the one the
/// alternation expects is taken first. Returns the doorbells seen.
pub(crate) fn scan_uars(st: &mut FabricState, h: usize) -> u64 {
    let mut regs = std::mem::take(&mut st.hosts[h].scratch);
    regs.clear();
    regs.extend(st.hosts[h].uars.iter().filter(|(_, u)| u.users > 0).map(|(r, _)| *r));
    regs.sort_unstable();
    let mut seen = 0;
    // The CQ doorbell (arm request) word of the host's CQ page.
    let cq_db = st.hosts[h].cq_page.ptr().wrapping_add(0x20);
    // SAFETY: 8-aligned inside the host's live CQ page.
    let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(cq_db.cast::<u64>()) }
        .swap(0, std::sync::atomic::Ordering::AcqRel);
    if v != 0 {
        seen += 1;
        cq_doorbell(st, h, v.to_ne_bytes());
    }
    for i in 0..st.hosts[h].cq_db_pages.len() {
        let page = st.hosts[h].cq_db_pages[i];
        let cq_db = st.hosts[h].uar_pages[page].ptr().wrapping_add(0x20);
        // SAFETY: 8-aligned inside a live UAR page of the program's, attached until its
        // context closes (which removes it from `cq_db_pages` first).
        let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(cq_db.cast::<u64>()) }
            .swap(0, std::sync::atomic::Ordering::AcqRel);
        if v != 0 {
            seen += 1;
            cq_doorbell(st, h, v.to_ne_bytes());
        }
    }
    for &r in &regs {
        let Some(u) = st.hosts[h].uars.get(&r).copied() else { continue };
        let base = st.hosts[h].reg_ptr(r);
        // Only 0 or BF_SIZE ever reaches `expected_offset` (doorbell_checked refuses
        // other offsets); masked again so that no value of it addresses outside the page.
        let first = u.expected_offset & BF_SIZE;
        for half in [first, first ^ BF_SIZE] {
            let p = base.wrapping_add(half as usize);
            // SAFETY: `p` is 8-aligned inside a live UAR page owned by this host; writers
            // store to it with plain 8-byte (or wider) stores.
            let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(p.cast::<u64>()) }
                .swap(0, std::sync::atomic::Ordering::AcqRel);
            if v == 0 {
                continue;
            }
            seen += 1;
            let value = v.to_ne_bytes();
            let mut data = [0u8; BF_SIZE as usize];
            data[..8].copy_from_slice(&value);
            let len = bf_len(&value);
            let bf = read_bf_half(st, h, p, &value, &mut data[..len]);
            // SAFETY: bytes 8..BF_SIZE of the half, inside the live page (a writer may be
            // storing to them: the shared-memory zeroing).
            unsafe { crate::shared::zero(p.add(8), BF_SIZE as usize - 8) };
            doorbell_checked(st, h, r, half, value, bf.then_some(&data[..len]), Via::Memory);
        }
    }
    st.hosts[h].scratch = regs;
    seen
}

/// Bytes a BlueFlame write of the WQE whose ctrl starts with `value` covers.
fn bf_len(value: &[u8; 8]) -> usize {
    let ds = usize::from(value[7] & 0x3f).max(1);
    (ds.div_ceil(4) * WQEBB_SIZE).min(BF_SIZE as usize)
}

/// Reads bytes 8.. of a register half into `data` (which holds the doorbell's first 8
/// bytes) and says whether they are a BlueFlame copy: all zero → plain doorbell; equal to
/// the ring → BlueFlame; otherwise re-read (bounded) while the writer may still be copying,
/// and report BlueFlame with what is there (the content check then counts the mismatch).
fn read_bf_half(st: &FabricState, h: usize, p: *mut u8, value: &[u8; 8], data: &mut [u8]) -> bool {
    let len = data.len();
    let qpn = doorbell_qpn(value);
    let idx = u16::from_be_bytes([value[1], value[2]]);
    let mut ring = [0u8; BF_SIZE as usize];
    let have_ring = match st.hosts[h].qps.get(&qpn).filter(|q| q.sq_wqe_cnt != 0) {
        Some(q) => {
            q.read_sq(idx, 0, &mut ring[..len]);
            true
        }
        None => false,
    };
    for round in 0..4096 {
        // SAFETY: bytes 8..len of the half, inside the live page; the writer may be storing
        // to them concurrently: the shared-memory copy (atomic loads).
        unsafe { crate::shared::load(p.add(8), &mut data[8..]) };
        if data[8..].iter().all(|&b| b == 0) {
            return false;
        }
        if !have_ring || data[8..] == ring[8..len] || round == 4095 {
            return true;
        }
        std::hint::spin_loop();
    }
    true
}

/// One pass of a NIC that watches memory: doorbells stored into its UAR pages, send
/// queues whose doorbell record moved (executed), receive WQEs posted to QPs in ERR
/// (flushed). Returns whether it found anything to do.
pub(crate) fn scan(st: &mut FabricState, h: usize) -> bool {
    let before = (st.hosts[h].stats.wqes_executed, st.hosts[h].stats.cqes_written);
    let seen = scan_uars(st, h);
    run_qps(st, h, true, false);
    seen > 0 || before != (st.hosts[h].stats.wqes_executed, st.hosts[h].stats.cqes_written)
}

/// One RNR-timer period: retry RNR-blocked SQs, run SQs whose producer moved without a
/// doorbell, flush WQEs posted to QPs in ERR.
pub(crate) fn tick(st: &mut FabricState, h: usize) {
    scan_uars(st, h);
    st.hosts[h].tick_clock();
    run_qps(st, h, false, true);
}

/// Flushes the QPs of host `h` in ERR / SQE and runs those in RTS (`retry`: retry an
/// RNR-blocked WQE), in QPN order so deterministic runs repeat; `only_with_work`: skip
/// QPs with nothing posted.
fn run_qps(st: &mut FabricState, h: usize, only_with_work: bool, retry: bool) {
    let mut qpns = std::mem::take(&mut st.hosts[h].scratch);
    qpns.clear();
    qpns.extend(st.hosts[h].qps.iter().filter(|(_, q)| !only_with_work || q.has_work()).map(|(n, _)| *n));
    qpns.sort_unstable();
    for &qpn in &qpns {
        match st.hosts[h].qps.get(&qpn).map(|q| q.state) {
            Some(QpState::Err) => {
                flush_sq(st, h, qpn);
                flush_rq(st, h, qpn);
            }
            Some(QpState::Sqe) => flush_sq(st, h, qpn),
            Some(QpState::Rts) => process_sq(st, h, qpn, retry),
            _ => {}
        }
    }
    st.hosts[h].scratch = qpns;
}

/// The tick period of an RNR-blocked send queue.
const RNR_TICK: std::time::Duration = std::time::Duration::from_micros(20);
/// The tick period of a QP in ERR (SQE), polled slowly for receive (send) WQEs posted
/// later.
const ERR_TICK: std::time::Duration = std::time::Duration::from_millis(1);

/// How soon QP `q` wants a tick without doorbells.
fn tick_wanted(q: &Qp) -> Option<std::time::Duration> {
    if q.rnr.is_some() {
        Some(RNR_TICK)
    } else {
        matches!(q.state, QpState::Err | QpState::Sqe).then_some(ERR_TICK)
    }
}

/// Whether the QP that a doorbell value names waits for the NIC's timer
/// ([`tick_wanted`]).
pub(crate) fn needs_timer(st: &FabricState, h: usize, value: &[u8; 8]) -> bool {
    st.hosts[h].qps.get(&doorbell_qpn(value)).and_then(tick_wanted).is_some()
}

/// How soon host `h` wants a tick without doorbells: the soonest any of its QPs wants.
pub(crate) fn tick_interval(st: &FabricState, h: usize) -> Option<std::time::Duration> {
    let mut soonest = None;
    for d in st.hosts[h].qps.values().filter_map(tick_wanted) {
        if d == RNR_TICK {
            return Some(d); // none wants one sooner
        }
        soonest = Some(d); // ERR_TICK, the only other period
    }
    soonest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
    }

    /// Pushes `cqe` through a real CQ at producer index `pi` and returns the slot bytes.
    fn through_cq(cqe: &[u8; 64], cnt: u32, pi: u32) -> [u8; 64] {
        let mut cq = Cq::new(cnt, 64, None, None).unwrap();
        let filler = [0u8; 64];
        for i in 0..pi {
            cq.dbrec.store_be32(0, i); // the consumer keeps up
            cq.push(&filler).unwrap();
        }
        cq.push(cqe).unwrap();
        let mut out = [0u8; 64];
        cq.mem.read((pi & (cnt - 1)) as usize * 64, &mut out);
        out
    }

    fn test_qp(qpn: u32, uidx: u32) -> Qp {
        let attr = crate::QpInitAttr {
            qp_type: QpType::Rc,
            pdn: 1,
            send_cqn: 1,
            recv_cqn: 1,
            sq_wqe_cnt: 8,
            rq_wqe_cnt: 0,
            rq_stride: 16,
            user_index: uidx,
            srqn: None,
            dc_key: 0,
            ..Default::default()
        };
        Qp::new(qpn, 0, &attr).unwrap()
    }

    /// The doorbell value of a WQE: its ctrl segment's first 8 bytes (spec §2.1).
    fn ctrl8(idx: u16, qpn: u32, ds: u8) -> [u8; 8] {
        let [_, q2, q1, q0] = qpn.to_be_bytes();
        let [i1, i0] = idx.to_be_bytes();
        [0, i1, i0, opcode::RDMA_WRITE, q2, q1, q0, ds]
    }

    /// Three WQEs (2, 1 and 2 WQEBBs) written, rung and executed on QP 0x42.
    fn ran_three(per_slot: bool) -> (Qp, [[u8; 8]; 3]) {
        let mut qp = test_qp(0x42, 0);
        if per_slot {
            qp.keep_shadow_per_slot();
        }
        let v = [ctrl8(0, 0x42, 5), ctrl8(2, 0x42, 3), ctrl8(3, 0x42, 6)];
        for (c, start) in v.iter().zip([0u16, 2, 3]) {
            assert!(qp.buf.write(qp.sq_off + usize::from(start) * 64, c));
        }
        qp.dbrec.store_be32(4, 5);
        for (start, nbb) in [(0u16, 2u16), (2, 1), (3, 2)] {
            record_shadow(&mut qp, start, nbb);
            qp.sq_ci = start + nbb;
        }
        (qp, v)
    }

    #[test]
    fn a_doorbell_handled_when_rung_matches_only_the_last_executed_wqe() {
        // Deterministic mode keeps no shadow per slot, only the last WQE's.
        let (qp, v) = ran_three(false);
        assert!(qp.shadow.is_empty());
        // Rung again for the last WQE (it ends at the producer): a match.
        assert!(doorbell_matches(&qp, &v[2], true));
        // For an earlier one, even with the right bytes: it does not end at the
        // producer, so it is a mismatch, as it is with a shadow per slot.
        let (per_slot, _) = ran_three(true);
        for q in [&qp, &per_slot] {
            assert!(!doorbell_matches(q, &v[0], true));
            assert!(!doorbell_matches(q, &v[1], true));
            // Bytes that are not the last WQE's: a mismatch.
            assert!(!doorbell_matches(q, &ctrl8(3, 0x42, 5), true));
        }
        assert!(doorbell_matches(&per_slot, &v[2], true));
        // Threaded and watch modes keep one per slot: a late doorbell for an
        // earlier WQE is checked against its own bytes.
        assert!(doorbell_matches(&per_slot, &v[1], false));
        assert!(!doorbell_matches(&per_slot, &ctrl8(2, 0x42, 4), false));
        // Back to RESET, nothing executed is remembered.
        let (mut qp, v) = ran_three(false);
        qp.reset();
        qp.dbrec.store_be32(4, 5);
        qp.sq_ci = 5;
        assert!(!doorbell_matches(&qp, &v[2], true));
    }

    #[test]
    fn golden_c1_from_the_engine_writer() {
        let qp = test_qp(0x123, 1);
        let cqe = req_cqe(&qp, opcode::RDMA_READ, 0x12, 0x200, 0x0000_0001_0203_0405);
        let got = through_cq(&cqe, 256, 0x105);
        let want = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 02 00
             00 00 00 01  02 03 04 05  10 00 01 23  00 12 00 01");
        assert_eq!(got[..], want[..]);
    }

    #[test]
    fn golden_c3_c4_from_the_engine_writer() {
        let c3 =
            err_cqe(cqe_opcode::REQ_ERR, syndrome::REMOTE_ACCESS_ERR, 1, opcode::RDMA_WRITE, 0x123, 0x10);
        let want3 = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 88 13  08 00 01 23  00 10 00 d0");
        assert_eq!(through_cq(&c3, 256, 8)[..], want3[..]);
        let c4 = err_cqe(cqe_opcode::REQ_ERR, syndrome::WR_FLUSH_ERR, 1, opcode::RDMA_WRITE_IMM, 0x123, 0x11);
        let want4 = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 f9 05  09 00 01 23  00 11 00 d0");
        assert_eq!(through_cq(&c4, 256, 9)[..], want4[..]);
    }

    #[test]
    fn golden_c2_from_the_engine_writer() {
        // UD RESP_SEND_IMM, IB without GRH: SL 5 from the AV, source QPN 0x777, LID 0x11,
        // 64 payload bytes + the 40-byte GRH slot, RQ counter 3, CQ index 7.
        let mut avb = [0u8; 48];
        avb[12] = 0x05; // stat_rate_sl: SL 5
        let av = DatagramSeg::new_unchecked(&avb[..]);
        let tgt = Target {
            h: 0,
            qpn: 0x456,
            report_qpn: 0x456,
            pdn: 1,
            access: 0,
            cqn: 1,
            uidx: 2,
            recv: RecvQ::Rq(0x456),
            err_on_nak: true,
            scatter: false,
        };
        let c = RecvCqe {
            cop: cqe_opcode::RESP_SEND_IMM,
            se: false,
            imm: [0x12, 0x34, 0x56, 0x78],
            counter: 3,
            slid: 0x11,
            flags_rqpn: ud_flags_rqpn(UdL3::None, &av, 0x777),
            byte_cnt: (64 + GRH_SLOT) as u32,
            ts: 0,
        };
        let got = through_cq(&recv_cqe(&tgt, &c), 256, 7);
        let want = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 11  05 00 07 77  00 00 00 00
             00 00 00 02  12 34 56 78  00 00 00 00  00 00 00 68
             00 00 00 00  00 00 00 00  00 00 04 56  00 03 00 30");
        assert_eq!(got[..], want[..]);
    }

    #[test]
    fn ipv4_header_checksum_verifies() {
        let mut avb = [0u8; 48];
        avb[26] = 0xb8; // tclass
        avb[27] = 64;
        avb[42..44].copy_from_slice(&[0xff, 0xff]);
        avb[44..48].copy_from_slice(&[10, 0, 0, 2]);
        let av = DatagramSeg::new_unchecked(&avb[..]);
        let mut sgid = [0u8; 16];
        sgid[10..12].copy_from_slice(&[0xff, 0xff]);
        sgid[12..16].copy_from_slice(&[10, 0, 0, 1]);
        let (h, n) = ud_header(UdL3::Ipv4, &av, sgid, 100, false);
        assert_eq!(n, 20);
        let mut v4 = [0u8; 20];
        v4.copy_from_slice(&h[..20]);
        // A header including its checksum sums to 0xffff (checksum of it is 0).
        assert_eq!(ipv4_checksum(&v4), 0);
        // Total length: IPv4 20 + UDP 8 + BTH 12 + DETH 8 + 100 + ICRC 4.
        assert_eq!(u16::from_be_bytes([v4[2], v4[3]]), 152);
    }

    #[test]
    fn vendor_table_is_total() {
        for s in 0..=255u8 {
            let _ = vendor_syndrome(s);
        }
        assert_eq!(vendor_syndrome(syndrome::WR_FLUSH_ERR), 0xf9);
        assert_eq!(vendor_syndrome(syndrome::TRANSPORT_RETRY_EXC_ERR), 0x81);
    }
}
