//! One simulated NIC's state: its objects (PDs, MRs, CQs, QPs, SRQs, DCT numbers), UAR
//! pages and registers, device contexts, completion channels, counters, asynchronous
//! events and clock. Bookkeeping only: the roles (requester, responder, completer) act on
//! it, each on its own host's.

use crate::idmap::{DirectMap, IdMap, IdSet};

use crate::cq::Cq;
use crate::dma::MrTable;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::wire::{DS_SIZE, MAX_WQE_DS};
use crate::{AsyncEvent, HostConfig, NicStats};

/// BlueFlame register half size (spec §1.6).
pub(crate) const BF_SIZE: u32 = 256;
/// Cap on queued async events per NIC.
const MAX_EVENTS: usize = 4096;

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
    /// to this register was queued (see [`crate::engine::doorbell`]).
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
    /// Why its latest error CQEs were written ([`crate::why`]).
    pub why: crate::why::Reasons,
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
    pub scratch: Vec<u32>,
    /// The NIC's clock, used as CQE timestamp: one tick per WQE executed or message
    /// received, per RNR-timer period. Advanced by [`Host::tick_clock`] only.
    pub clock: u64,
    /// Pages of the program's where the clock is published as mlx5's free-running
    /// internal timer (`internal_timer_h`, `_l`: big-endian, at offset 0), by context
    /// ([`Host::attach_clock_page`]).
    pub clock_pages: Vec<(u32, crate::mem::DevMem)>,
    /// CQs holding a pending compressed session, written when the host's lock is let go
    /// ([`crate::completer::flush_sessions`]).
    pub dirty: Vec<u32>,
    /// Scratch for the WQE being executed ([`crate::requester::process_sq`]).
    pub wqe_scratch: Option<Box<[u8; MAX_WQE_DS * DS_SIZE]>>,
    /// The device's registry when processes share its numbers ([`crate::Nic::share_numbers`]),
    /// and where this host's packets go.
    pub numbers: Option<(std::sync::Arc<crate::registry::Registry>, crate::registry::Endpoint)>,
    /// The host's end of the UDP wire to other processes ([`crate::Nic::open_wire`]).
    pub wire: Option<std::sync::Arc<crate::udp_wire::WireEnd>>,
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

    pub(crate) fn signal(&mut self, cqn: u32) {
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
            mrs: MrTable::new(base << 16),
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
            numbers: None,
            why: crate::why::Reasons::default(),
            wire: None,
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

    /// The number a new object of `kind` gets: from the registry the device shares with
    /// other processes, or else `local` (the host's own choice). A registry that can give
    /// none is an allocation failure, as a kernel out of numbers answers ENOMEM.
    pub(crate) fn number(&self, kind: crate::registry::Kind, local: u32) -> Option<u32> {
        match &self.numbers {
            None => Some(local),
            Some((r, ep)) => r.alloc(kind, *ep).ok(),
        }
    }

    /// Gives number `n` of `kind` back to the shared registry, if there is one.
    pub(crate) fn give_back(&self, kind: crate::registry::Kind, n: u32) {
        if let Some((r, _)) = &self.numbers {
            let _ = r.free(kind, n);
        }
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
