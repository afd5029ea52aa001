//! The public device model: a [`Fabric`] of hosts, each with one NIC handle ([`Nic`])
//! offering the control path (PD, MR, CQ, QP, modify) and the MMIO doorbell path
//! (spec §1.5–§1.8, §7). In threaded mode each NIC has its own thread.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::completer;
use crate::cq::Cq;
use crate::dma::{self, Mr};
use crate::engine;
use crate::host::{self, Host, BF_SIZE};
use crate::hosts::{FabricState, Shared};
use crate::mkey::MkeyKind;
use crate::qp::Qp;
use crate::requester;
use crate::srq::Srq;
use crate::{
    AsyncEvent, CqInitAttr, CqResources, ExecMode, FabricConfig, HostConfig, MrKeys, NicCaps, NicInfo,
    NicStats, QpInitAttr, QpResources, QpState, QpType, SimError, SrqInitAttr, SrqResources, UserRings,
};

/// Depth of each NIC's doorbell channel in threaded mode.
const CHANNEL_DEPTH: usize = 1024;

type State = Arc<Shared>;

/// A UAR write as queued for a NIC thread: 32 bytes, no heap allocation. A BlueFlame
/// write's payload waits in one of the link's [`BfSlot`]s, so that every message (the
/// plain doorbells above all) moves one small channel slot between the cores, not a
/// 256-byte payload with each.
enum Msg {
    Db {
        uar: u32,
        offset: u32,
        value: [u8; 8],
        epoch: u64,
    },
    Bf {
        uar: u32,
        offset: u32,
        len: u16,
        valid_len: bool,
        slot: u16,
        epoch: u64,
    },
    CqDb {
        value: [u8; 8],
    },
    Tick,
    /// Run a send queue up to its doorbell record: a doorbell handled in the poster's
    /// thread left a WQE undone because a host it needed was busy ([`Link::run_here`]).
    Run {
        qpn: u32,
    },
}

// Small enough that a channel slot (this and crossbeam's 8-byte stamp) is well
// inside one cache line.
const _: () = assert!(std::mem::size_of::<Msg>() <= 32);

/// BlueFlame payloads a link holds at once; a poster that finds the next slot still
/// taken helps the NIC or yields, as for a full channel.
const BF_SLOTS: usize = 64;

/// The payload of one queued BlueFlame write. Taken by a poster (`busy` false → true),
/// written, then named by its message; freed by whoever handles the message, after the
/// copy. The channel orders the poster's writes before the handler's reads.
struct BfSlot {
    busy: AtomicBool,
    data: std::cell::UnsafeCell<[u8; BF_SIZE as usize]>,
}

// SAFETY: the data is written only by the poster that took the slot (its `busy`
// flag) and read only by the handler of the message naming it, after the channel
// ordered the two; the handler frees the slot after its last read.
unsafe impl Sync for BfSlot {}

impl Default for BfSlot {
    fn default() -> Self {
        BfSlot { busy: AtomicBool::new(false), data: std::cell::UnsafeCell::new([0; BF_SIZE as usize]) }
    }
}

/// How `quiesce` waits for a NIC thread. Aligned to its own cache lines: the NIC side
/// writes it per batch, and posters must not share a line with it.
#[derive(Default)]
#[repr(align(128))]
struct Progress {
    /// What `quiesce` waits on (with `cv`).
    lock: Mutex<()>,
    cv: Condvar,
    /// Threads blocked in `quiesce` (whoever handles a batch wakes the condvar only then).
    waiters: std::sync::atomic::AtomicUsize,
}

/// A NIC of [`ExecMode::Threaded`]: its doorbell queue, its thread, and how far it got.
///
/// Doorbells are queued by the poster and taken off the queue only while holding the
/// link's `drain` lock, by the NIC thread or by a helper ([`Nic::help`]), so they are
/// handled in the order they were queued whoever handles them. (Not the host's lock:
/// an operation may let its home host go for a moment, see [`crate::hosts`].) The NIC thread spins briefly when it
/// runs out of work, then yields, then parks; a poster unparks it only when it is
/// parked (no wake-up per doorbell).
struct Link {
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    state: State,
    host: usize,
    /// Held by whoever takes messages off the queue, for as long as it handles them.
    /// On lines of its own: taking it writes its line, and every poster reads the
    /// fields above (the queue's ends) at every doorbell. Beside them it cost a
    /// threaded pingpong 282 -> 256 ns one way.
    drain: Padded<Mutex<()>>,
    /// QPN of the last doorbell queued, until the NIC takes a doorbell of that
    /// QP ([`NO_QP`] then): a poster that rings the same QP again meanwhile
    /// queues nothing (see [`Link::doorbell`]).
    pending: AtomicU32,
    /// QPN of the last plain doorbell rung (posters only, on their own cache
    /// lines): a QP is marked only when rung twice in a row, so QPs taking turns
    /// (where nothing coalesces) cost the NIC no handshake.
    last_rung: Padded<AtomicU32>,
    /// Whether [`Link::run_here`] looks (at the queue's ends, then under the locks at
    /// the send CQ): false once a look did not run the write, true again once a poller
    /// finds its CQ empty with nothing queued ([`Link::help`]). Application threads
    /// only, on lines of their own: a NIC busy with a backlog costs a poster no look at
    /// the NIC thread's lines.
    here: Padded<AtomicBool>,
    /// Doorbells not queued because one of the same QP was waiting. Every
    /// register write carries its value when queued (its epoch, see
    /// [`engine::doorbell`]).
    coalesced: AtomicU64,
    progress: Progress,
    /// The NIC thread is parked or about to park: a poster must unpark it.
    sleeping: AtomicBool,
    stop: AtomicBool,
    /// A write handled in a poster's thread ([`Link::run_here`]) left its QP waiting
    /// for the NIC's timer: the NIC thread looks at its QPs again.
    timer: AtomicBool,
    /// [`Nic::set_thread_paused`]: read by the NIC thread holding its queue.
    paused: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
    /// BlueFlame payloads of queued messages ([`Msg::Bf`]).
    bf: Box<[BfSlot]>,
    /// The next slot a BlueFlame poster tries (a ticket, modulo [`BF_SLOTS`]).
    bf_next: AtomicU32,
}

/// `Link::pending` when no doorbell waits to be coalesced with.
const NO_QP: u32 = u32::MAX;

/// A value on cache lines of its own.
#[derive(Default)]
#[repr(align(128))]
struct Padded<T>(T);

impl Link {
    /// Queues a plain doorbell, or none when a doorbell of the same QP is still
    /// queued: the NIC runs a send queue up to its doorbell record, which the
    /// poster stored before ringing, so that doorbell covers this WQE too.
    /// Its value is then not checked (threaded mode already cannot check a
    /// doorbell whose WQE slot was reused before it was handled).
    ///
    /// Ordering: the front-end stored the doorbell record before this call.
    /// The SeqCst fence here pairs with the one `handle` runs after removing
    /// the QP's mark and before the NIC reads the record: either we still see
    /// the mark and the NIC then sees our record, or we see it removed and
    /// queue our own.
    fn doorbell(&self, uar: u32, offset: u32, value: [u8; 8]) {
        if self.run_here(&value, |st, epoch| {
            engine::doorbell(st, self.host, uar, offset, value, None, Some(epoch))
        }) {
            return;
        }
        let qpn = engine::doorbell_qpn(&value);
        // Queuing is always safe; only skipping needs the fence (a stale look
        // that finds another value just queues).
        if self.pending.load(Ordering::Relaxed) == qpn {
            fence(Ordering::SeqCst);
            if self.pending.load(Ordering::Relaxed) == qpn {
                self.coalesced.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        // Only a QP rung twice in a row, and only behind a backlog, is likely to
        // be rung again while this doorbell waits: QPs taking turns and an empty
        // queue (pingpong) spare the NIC the handshake. Set only
        // over NO_QP (posters on other threads may be relying on another QP's
        // pending doorbell: only the NIC, fenced, takes a QP's mark away), and
        // before the message is queued: the NIC that takes it sees the mark.
        let repeat = self.last_rung.0.load(Ordering::Relaxed) == qpn;
        if !repeat {
            self.last_rung.0.store(qpn, Ordering::Relaxed);
        } else if self.pending.load(Ordering::Relaxed) == NO_QP && !self.rx.is_empty() {
            let _ = self.pending.compare_exchange(NO_QP, qpn, Ordering::Release, Ordering::Relaxed);
        }
        // After any coalescing this thread did (program order): a register's
        // writes come from one thread (its context's), so the first write queued
        // after a coalesced one carries a new epoch.
        let epoch = self.coalesced.load(Ordering::Relaxed);
        self.post(Msg::Db { uar, offset, value, epoch });
    }

    /// Queues a BlueFlame write of `data` (at most [`BF_SIZE`] bytes): its payload into a
    /// free slot, then the message naming it.
    fn bf(&self, uar: u32, offset: u32, data: &[u8], valid_len: bool) {
        if self.run_here(&bf_value(data), |st, epoch| {
            bf_write(st, self.host, uar, offset, data, valid_len, Some(epoch))
        }) {
            return;
        }
        let slot = loop {
            let i = self.bf_next.fetch_add(1, Ordering::Relaxed) as usize % BF_SLOTS;
            if self.bf[i].busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                break i;
            }
            // Every slot may be waiting in the queue: make room as for a full channel.
            if !self.help() {
                std::thread::yield_now();
            }
        };
        // SAFETY: the slot is ours (taken above) until the handler of our message frees it.
        let buf = unsafe { &mut *self.bf[slot].data.get() };
        buf[..data.len()].copy_from_slice(data);
        let epoch = self.coalesced.load(Ordering::Relaxed);
        self.post(Msg::Bf { uar, offset, len: data.len() as u16, valid_len, slot: slot as u16, epoch });
    }

    /// Runs `f` on the payload of a queued [`Msg::Bf`] (the first `len` bytes of
    /// `slot`), in place; the slot is then free for the next poster.
    fn take_bf<R>(&self, slot: u16, len: u16, f: impl FnOnce(&[u8]) -> R) -> R {
        let s = &self.bf[usize::from(slot)];
        // SAFETY: the poster wrote the slot before queuing the message naming it (the
        // channel orders the two) and nobody writes it until it is freed below, after
        // the last use of this reference.
        let r = f(&unsafe { &*s.data.get() }[..usize::from(len)]);
        s.busy.store(false, Ordering::Release);
        r
    }

    /// Queues a message without heap allocation (crossbeam's blocking `send` lazily
    /// allocates a per-thread context when the channel is full): when full, drain it
    /// here if the NIC thread is not at it, else yield and try again.
    fn post(&self, mut msg: Msg) {
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) => {
                    msg = m;
                    if !self.help() {
                        std::thread::yield_now();
                    }
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
        self.wake();
    }

    /// Unparks the NIC thread if it is parked, after the caller stored what it will
    /// see (a queued message, `timer`). The SeqCst fence pairs with the one in
    /// `nic_wait`: either the NIC thread sees the store before it parks, or we see it
    /// parked and unpark it.
    fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// Handles a register write (`f`, given the epoch it would be queued with) in the
    /// poster's thread, at once, when the application waits for its work and the NIC
    /// has nothing else to do: nothing is queued, nobody handles the queue, the NIC
    /// thread is not paused, and the driver has taken every CQE of the send CQ of the
    /// QP that `value` names (as in a pingpong, where the poster polls for this WQE's
    /// completion next). Returns false, doing nothing, otherwise: the write is then
    /// queued and the NIC thread runs beside an application that has completions
    /// still to take, and the poster does not look again before a poller finds its
    /// CQ empty with nothing queued (`here`). Under the queue's lock, as
    /// [`Link::help`], so writes are still handled in the order they were rung.
    ///
    /// A NIC thread that would handle a lone doorbell costs a pingpong two cache-line
    /// trips between the cores (the doorbell there, the data back); see the README's
    /// performance section.
    #[inline]
    fn run_here(&self, value: &[u8; 8], f: impl FnOnce(&mut FabricState, u64)) -> bool {
        if !self.here.0.load(Ordering::Relaxed) {
            return false;
        }
        let ran = self.run_here_now(value, f);
        if !ran {
            // The NIC has work queued or in hand, or completions wait to be taken:
            // the application is not waiting for an idle NIC. Do not look again
            // (the queue's ends are the NIC thread's lines, the locks too) before a
            // poller finds its CQ empty.
            self.here.0.store(false, Ordering::Relaxed);
        }
        ran
    }

    fn run_here_now(&self, value: &[u8; 8], f: impl FnOnce(&mut FabricState, u64)) -> bool {
        if !self.rx.is_empty() {
            return false;
        }
        // Poisoned: leave it to the NIC thread, which takes the lock as it is.
        let Ok(d) = self.drain.0.try_lock() else { return false };
        if !self.rx.is_empty() || self.paused.load(Ordering::Acquire) {
            return false;
        }
        // The poster's thread never waits for a host: it may hold one itself.
        let Some(mut st) = self.state.try_host(self.host) else { return false };
        if !engine::send_cq_taken(&st, self.host, value) {
            return false;
        }
        st.hosts[self.host].stats.doorbells_in_poster += 1;
        f(&mut st, self.coalesced.load(Ordering::Relaxed));
        let deferred = st.deferred();
        // The NIC thread runs the RNR and error timers, and looks at its QPs for them
        // only after handling something: tell it.
        let timer = !deferred && engine::needs_timer(&st, self.host, value);
        drop(st);
        drop(d);
        self.finished(1);
        if deferred {
            // Checked and counted as a doorbell already; the NIC thread goes on from
            // the WQE that was left undone.
            self.post(Msg::Run { qpn: engine::doorbell_qpn(value) });
        } else if timer {
            self.timer.store(true, Ordering::Relaxed);
            self.wake();
        }
        true
    }

    /// Handles what is queued if nobody else is at it; whether anything was handled.
    fn help(&self) -> bool {
        if self.rx.is_empty() {
            // A poller found its CQ empty and nothing is queued: the application
            // may be waiting for the next doorbell's work.
            if !self.here.0.load(Ordering::Relaxed) {
                self.here.0.store(true, Ordering::Relaxed);
            }
            return false;
        }
        let d = match self.drain.0.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        let mut st = self.state.host(self.host);
        let n = drain(&mut st, self);
        drop(st);
        drop(d);
        self.finished(n);
        n > 0
    }

    /// Holds the queue for handling it (see `drain`).
    fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.drain.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After `n` messages were handled (and the queue let go): wakes `quiesce`.
    fn finished(&self, n: u64) {
        if n > 0 {
            // SeqCst against `quiesce`, which registers before it looks at the queue
            // holding it: either it finds the queue as we left it or we see
            // it waiting. Notified under the lock, so it cannot be between its check
            // and its wait.
            fence(Ordering::SeqCst);
            if self.progress.waiters.load(Ordering::SeqCst) > 0 {
                let _g = self.progress.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.progress.cv.notify_all();
            }
        }
    }
}

/// A NIC thread of [`ExecMode::Watch`]: how to wake it and how far it got.
struct Watcher {
    /// Its thread (replaced by [`Fabric::restart_after_fork`] in a forked child).
    thread: Mutex<std::thread::Thread>,
    stop: std::sync::atomic::AtomicBool,
    /// Completed scans (for `quiesce`).
    scans: Mutex<u64>,
    cv: Condvar,
}

/// Backoff of an idle watching NIC: spin this many empty scans, then yield this many,
/// then sleep from `WATCH_SLEEP_MIN` doubling up to `WATCH_SLEEP_MAX`.
const WATCH_SPIN: u32 = 64;
const WATCH_YIELD: u32 = 256;
const WATCH_SLEEP_MIN: Duration = Duration::from_micros(10);
const WATCH_SLEEP_MAX: Duration = Duration::from_millis(1);
/// The RNR timer period of a watching NIC (as in threaded mode).
const RNR_PERIOD: Duration = Duration::from_micros(20);

impl Watcher {
    fn unpark(&self) {
        self.thread.lock().unwrap_or_else(|e| e.into_inner()).unpark();
    }
}

fn watch_thread(state: State, h: usize, w: Arc<Watcher>) {
    let mut idle = 0u32;
    let mut sleep = WATCH_SLEEP_MIN;
    let mut last_tick = Instant::now();
    while !w.stop.load(Ordering::Acquire) {
        let busy = {
            let mut st = state.host(h);
            let mut busy = engine::scan(&mut st, h);
            if engine::tick_interval(&st, h).is_some_and(|d| last_tick.elapsed() >= d.min(RNR_PERIOD * 50)) {
                engine::tick(&mut st, h);
                last_tick = Instant::now();
                busy = true;
            }
            busy
        };
        *w.scans.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        w.cv.notify_all();
        if busy {
            idle = 0;
            sleep = WATCH_SLEEP_MIN;
        } else if idle < WATCH_SPIN {
            idle += 1;
            std::hint::spin_loop();
        } else if idle < WATCH_SPIN + WATCH_YIELD {
            idle += 1;
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(sleep);
            sleep = (sleep * 2).min(WATCH_SLEEP_MAX);
        }
    }
}

pub(crate) struct Front {
    pub(crate) state: State,
    links: Mutex<Vec<Option<Arc<Link>>>>,
    watchers: Mutex<Vec<Option<Arc<Watcher>>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The hosts' ends of the UDP wire ([`Nic::open_wire`]), stopped with the fabric.
    wire_ends: crate::udp_wire::Ends,
}

impl Drop for Front {
    fn drop(&mut self) {
        for e in self.wire_ends.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            e.stop();
        }
        for w in self.watchers.lock().unwrap_or_else(|e| e.into_inner()).iter().flatten() {
            w.stop.store(true, Ordering::Release);
            w.unpark();
        }
        // Every Nic handle is gone (they hold the Front): a NIC thread handles what is
        // still queued, sees the stop request and returns.
        for l in self.links.lock().unwrap_or_else(|e| e.into_inner()).drain(..).flatten() {
            l.stop.store(true, Ordering::Release);
            if let Some(t) = l.thread.get() {
                t.unpark();
            }
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Every host of a fabric held across `fork` ([`Fabric::hold_for_fork`]).
pub struct ForkGuard<'a>(#[allow(dead_code)] FabricState<'a>);

impl std::fmt::Debug for ForkGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkGuard").finish_non_exhaustive()
    }
}

/// A host held by [`Nic::hold`].
#[doc(hidden)]
pub struct HostHold<'a>(#[allow(dead_code)] FabricState<'a>);

impl std::fmt::Debug for HostHold<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostHold").finish_non_exhaustive()
    }
}

/// A set of simulated hosts connected by an ideal network.
#[derive(Clone)]
pub struct Fabric {
    pub(crate) front: Arc<Front>,
}

/// Handle to one simulated NIC (cheap to clone; `Send + Sync`).
#[derive(Clone)]
pub struct Nic {
    link: Option<Arc<Link>>,
    watch: Option<Arc<Watcher>>,
    front: Arc<Front>,
    host: usize,
}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic").field("host", &self.host).finish()
    }
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").finish_non_exhaustive()
    }
}

/// Most doorbells a NIC thread handles under one hold of its host.
const BATCH: u32 = 64;

fn handle(st: &mut FabricState, link: &Link, msg: &Msg) {
    let h = link.host;
    match msg {
        Msg::Db { uar, offset, value, epoch } => {
            let qpn = engine::doorbell_qpn(value);
            // Remove the QP's mark: later doorbells of the QP are queued again. The
            // fence pairs with the one in `Link::doorbell`: it orders the removal
            // before the send queue's doorbell record is read. Only while the mark
            // is this QP's can a poster be relying on this doorbell: posters set a
            // mark only over NO_QP and only the NIC removes one, here, fenced. If
            // the mark is not this QP's, whoever relied on this doorbell did so
            // before such a removal, whose record read (and so every later one)
            // saw their record.
            if link.pending.load(Ordering::Acquire) == qpn {
                let _ = link.pending.compare_exchange(qpn, NO_QP, Ordering::SeqCst, Ordering::Relaxed);
                fence(Ordering::SeqCst);
            }
            engine::doorbell(st, h, *uar, *offset, *value, None, Some(*epoch))
        }
        Msg::Bf { uar, offset, len, valid_len, slot, epoch } => {
            link.take_bf(*slot, *len, |data| bf_write(st, h, *uar, *offset, data, *valid_len, Some(*epoch)))
        }
        Msg::CqDb { value } => completer::cq_doorbell(&mut st.hosts[h], *value),
        Msg::Tick => engine::tick(st, h),
        Msg::Run { qpn } => requester::process_sq(st, h, *qpn, false),
    }
}

/// Handles up to [`BATCH`] queued messages under the caller's hold of the queue and host.
fn drain(st: &mut FabricState, link: &Link) -> u64 {
    let Ok(mut m) = link.rx.try_recv() else { return 0 };
    let mut n = 1;
    loop {
        // The next message is taken before this one is handled, and the lines its
        // doorbell will read are asked for: the handling of this one hides their trip
        // from the poster's core. Nothing else sees the difference: the caller holds
        // the queue, so nobody else handles or looks into it until both are handled.
        let next = if n < u64::from(BATCH) { link.rx.try_recv().ok() } else { None };
        if let Some(Msg::Db { value, .. }) = &next {
            engine::prefetch_doorbell(st, link.host, value);
        }
        handle(st, link, &m);
        match next {
            Some(x) => {
                m = x;
                n += 1;
            }
            None => return n,
        }
    }
}

/// Backoff of an idle NIC thread: this many empty checks of its queue with a spin
/// hint between them, then this many yields, then it parks until a poster unparks it
/// or its next tick is due.
const NIC_SPIN: u32 = 2000;
const NIC_YIELD: u32 = 16;

/// Waits for a message, a stop request, or `deadline` (the next tick).
fn nic_wait(link: &Link, deadline: Option<Instant>) {
    let ready = || {
        (!link.rx.is_empty() && !link.paused.load(Ordering::Acquire))
            || link.stop.load(Ordering::Acquire)
            || link.timer.load(Ordering::Relaxed)
    };
    for _ in 0..NIC_SPIN {
        if ready() {
            return;
        }
        std::hint::spin_loop();
    }
    for _ in 0..NIC_YIELD {
        if ready() || deadline.is_some_and(|d| Instant::now() >= d) {
            return;
        }
        std::thread::yield_now();
    }
    link.sleeping.store(true, Ordering::Relaxed);
    // Pairs with the fence in `Link::wake` (see there).
    fence(Ordering::SeqCst);
    if !ready() {
        match deadline {
            Some(d) => std::thread::park_timeout(d.saturating_duration_since(Instant::now())),
            None => std::thread::park(),
        }
    }
    link.sleeping.store(false, Ordering::Relaxed);
}

fn nic_thread(link: Arc<Link>) {
    let h = link.host;
    // Since when the NIC has been idle (no batch, no tick): it ticks itself once it has
    // been idle for its tick interval while it has RNR-blocked or errored QPs. Read
    // from the clock only when idle, and the interval (a walk over the host's QPs) only
    // when a look into the queue found nothing.
    let mut idle_since: Option<Instant> = None;
    loop {
        let stop = link.stop.load(Ordering::Acquire);
        let (n, interval) = {
            let _d = link.hold();
            let mut st = link.state.host(h);
            // Under the queue's lock: a write run in a poster's thread after this
            // (whose QP then waits for the timer) sets it again.
            if link.timer.load(Ordering::Relaxed) {
                link.timer.store(false, Ordering::Relaxed);
            }
            if link.paused.load(Ordering::Acquire) && !stop {
                // Stopped by `Nic::set_thread_paused`: no doorbell, no tick.
                (0, None)
            } else {
                let n = drain(&mut st, &link);
                if n > 0 {
                    (n, None)
                } else {
                    let mut interval = engine::tick_interval(&st, h);
                    if let Some(d) = interval {
                        let since = *idle_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= d {
                            engine::tick(&mut st, h);
                            idle_since = Some(Instant::now());
                            interval = engine::tick_interval(&st, h);
                        }
                    }
                    (0, interval)
                }
            }
        };
        if n > 0 {
            link.finished(n);
            idle_since = None;
            continue;
        }
        if stop {
            return;
        }
        nic_wait(&link, interval.map(|d| idle_since.unwrap_or_else(Instant::now) + d));
    }
}

fn bf_value(data: &[u8]) -> [u8; 8] {
    let mut v = [0u8; 8];
    let n = data.len().min(8);
    v[..n].copy_from_slice(&data[..n]);
    v
}

fn bf_write(
    st: &mut FabricState,
    h: usize,
    uar: u32,
    offset: u32,
    data: &[u8],
    valid_len: bool,
    epoch: Option<u64>,
) {
    let value = bf_value(data);
    if !valid_len {
        st.hosts[h].stats.bf_content_mismatch += 1;
        // Still a doorbell: its first 8 bytes are checked and the ring is executed.
        engine::doorbell(st, h, uar, offset, value, None, epoch);
        st.hosts[h].stats.bf_writes += 1;
        return;
    }
    engine::doorbell(st, h, uar, offset, value, Some(data), epoch);
}

impl Fabric {
    /// Creates an empty fabric.
    pub fn new(cfg: FabricConfig) -> Fabric {
        Fabric {
            front: Arc::new(Front {
                state: Arc::new(Shared::new(cfg, crate::net::Net::default())),
                links: Mutex::new(Vec::new()),
                watchers: Mutex::new(Vec::new()),
                threads: Mutex::new(Vec::new()),
                wire_ends: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Holds every host (and the network) until the guard drops: taken before `fork`
    /// (`pthread_atfork`'s prepare handler) so that the child gets no lock a vanished
    /// thread held in the middle of its work, and dropped after it in both processes.
    pub fn hold_for_fork(&self) -> ForkGuard<'_> {
        ForkGuard(self.front.state.all())
    }

    /// In a child of `fork` (after the [`Fabric::hold_for_fork`] guard is dropped):
    /// starts the NIC threads of [`ExecMode::Watch`] again, which `fork` does not copy,
    /// so that the child's own doorbells are executed. The parent's threads' handles are
    /// forgotten, not joined (they name threads of the parent). Other modes: deterministic
    /// needs no thread; threaded mode's queues are not restarted (a forked child of a
    /// threaded fabric must not use it).
    pub fn restart_after_fork(&self) {
        if self.front.state.cfg.mode != ExecMode::Watch {
            return;
        }
        for t in std::mem::take(&mut *self.front.threads.lock().unwrap_or_else(|e| e.into_inner())) {
            std::mem::forget(t);
        }
        let watchers = self.front.watchers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (h, w) in watchers.into_iter().enumerate() {
            let Some(w) = w else { continue };
            let state = Arc::clone(&self.front.state);
            let w2 = Arc::clone(&w);
            let t = std::thread::Builder::new()
                .name(format!("mlx5-sim-watch{h}"))
                .spawn(move || watch_thread(state, h, w2))
                .expect("spawning a NIC thread");
            *w.thread.lock().unwrap_or_else(|e| e.into_inner()) = t.thread().clone();
            self.front.threads.lock().unwrap_or_else(|e| e.into_inner()).push(t);
        }
    }

    /// Adds a host with one single-port NIC and returns its handle.
    pub fn add_host(&self, cfg: HostConfig) -> Nic {
        let mut links = self.front.links.lock().unwrap_or_else(|e| e.into_inner());
        // Hosts are added one at a time (under `links`).
        let shared = &self.front.state;
        let h = shared.push(Host::new(shared.len(), cfg));
        let mode = shared.cfg.mode;
        let mut watch = None;
        let link = match mode {
            ExecMode::Deterministic => None,
            ExecMode::Watch => {
                let state = Arc::clone(&self.front.state);
                let (tx, rx) = std::sync::mpsc::channel::<Arc<Watcher>>();
                let t = std::thread::Builder::new()
                    .name(format!("mlx5-sim-watch{h}"))
                    .spawn(move || {
                        if let Ok(w) = rx.recv() {
                            watch_thread(state, h, w)
                        }
                    })
                    .expect("spawning a NIC thread");
                let w = Arc::new(Watcher {
                    thread: Mutex::new(t.thread().clone()),
                    stop: std::sync::atomic::AtomicBool::new(false),
                    scans: Mutex::new(0),
                    cv: Condvar::new(),
                });
                let _ = tx.send(Arc::clone(&w));
                self.front.threads.lock().unwrap_or_else(|e| e.into_inner()).push(t);
                watch = Some(w);
                None
            }
            ExecMode::Threaded => {
                let (tx, rx) = bounded(CHANNEL_DEPTH);
                let link = Arc::new(Link {
                    tx,
                    rx,
                    state: Arc::clone(&self.front.state),
                    host: h,
                    drain: Padded(Mutex::new(())),
                    pending: AtomicU32::new(NO_QP),
                    last_rung: Padded(AtomicU32::new(NO_QP)),
                    coalesced: AtomicU64::new(0),
                    progress: Progress::default(),
                    sleeping: AtomicBool::new(false),
                    stop: AtomicBool::new(false),
                    timer: AtomicBool::new(false),
                    here: Padded(AtomicBool::new(true)),
                    paused: AtomicBool::new(false),
                    thread: OnceLock::new(),
                    bf: (0..BF_SLOTS).map(|_| BfSlot::default()).collect(),
                    bf_next: AtomicU32::new(0),
                });
                let l2 = Arc::clone(&link);
                let t = std::thread::Builder::new()
                    .name(format!("mlx5-sim-nic{h}"))
                    .spawn(move || nic_thread(l2))
                    .expect("spawning a NIC thread");
                let _ = link.thread.set(t.thread().clone());
                self.front.threads.lock().unwrap_or_else(|e| e.into_inner()).push(t);
                Some(link)
            }
        };
        links.push(link.clone());
        self.front.watchers.lock().unwrap_or_else(|e| e.into_inner()).push(watch.clone());
        Nic { front: Arc::clone(&self.front), host: h, link, watch }
    }

    /// Deterministic progress: one pass of every NIC as its watching thread would make
    /// (doorbells stored into UAR pages, doorbell records that moved, flushes), in the
    /// caller's thread. What a program that rings with plain stores calls instead of
    /// waiting for [`ExecMode::Watch`] threads. Returns whether any NIC found work.
    pub fn progress(&self) -> bool {
        let shared = &self.front.state;
        let mut any = false;
        for h in 0..shared.len() {
            any |= engine::scan(&mut shared.host(h), h);
        }
        any
    }

    /// The configuration the fabric was created with.
    pub fn config(&self) -> FabricConfig {
        self.front.state.cfg
    }

    /// The execution mode.
    pub fn mode(&self) -> ExecMode {
        self.config().mode
    }

    /// Handles to every NIC, in the order they were added.
    pub fn nics(&self) -> Vec<Nic> {
        let links = self.front.links.lock().unwrap_or_else(|e| e.into_inner());
        let watchers = self.front.watchers.lock().unwrap_or_else(|e| e.into_inner());
        links
            .iter()
            .zip(watchers.iter())
            .enumerate()
            .map(|(h, (l, w))| Nic {
                front: Arc::clone(&self.front),
                host: h,
                link: l.clone(),
                watch: w.clone(),
            })
            .collect()
    }
}

fn bad<T>(what: &'static str) -> Result<T, SimError> {
    Err(SimError::InvalidArgument { what })
}

impl Nic {
    #[inline(always)]
    fn state(&self) -> FabricState<'_> {
        self.front.state.host(self.host)
    }

    /// Port and device attributes.
    pub fn info(&self) -> NicInfo {
        let st = self.state();
        let c = &st.hosts[self.host].cfg;
        NicInfo {
            name: c.name.clone(),
            port_num: 1,
            lid: c.lid,
            gid: c.gid,
            mac: c.mac,
            link_layer: c.link_layer,
            active_mtu: requester::active_mtu(c.link_layer),
            grh_required: c.grh_required,
            caps: NicCaps { bf_size: BF_SIZE, ..c.caps },
        }
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<u32, SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let pdn = host.number(crate::registry::Kind::Pd, host.next_pdn).ok_or(SimError::OutOfMemory)?;
        host.next_pdn = pdn + 1;
        host.pds.insert(pdn);
        Ok(pdn)
    }

    /// Frees a protection domain; `Busy` while MRs or QPs use it.
    pub fn dealloc_pd(&self, pdn: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if !host.pds.contains(&pdn) {
            return Err(SimError::NoSuchPd(pdn));
        }
        if host.mrs.uses_pd(pdn) {
            return Err(SimError::Busy { what: "PD has memory regions" });
        }
        if host.qps.values().any(|q| q.pdn == pdn) {
            return Err(SimError::Busy { what: "PD has QPs" });
        }
        if host.srqs.values().any(|s| s.pdn == pdn) {
            return Err(SimError::Busy { what: "PD has SRQs" });
        }
        host.pds.remove(&pdn);
        host.give_back(crate::registry::Kind::Pd, pdn);
        Ok(())
    }

    /// Registers `[addr, addr+len)` with `access` (`access::*` bits). lkey == rkey.
    /// `REMOTE_WRITE` or `REMOTE_ATOMIC` without `LOCAL_WRITE` is refused (IB rule).
    ///
    /// # Safety
    /// `[addr, addr+len)` must stay valid host memory until `dereg_mr` (the model reads and
    /// writes it, through raw pointers, whenever an operation names this MR).
    pub unsafe fn reg_mr(&self, pdn: u32, addr: u64, len: u64, access: u32) -> Result<MrKeys, SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if !host.pds.contains(&pdn) {
            return Err(SimError::NoSuchPd(pdn));
        }
        if len == 0 || addr.checked_add(len).is_none() || addr == 0 {
            return bad("MR range must be non-empty, non-null and not wrap");
        }
        if access & !0x5f != 0 || !dma::valid_mr_access(access) {
            return bad("MR access: unknown bits, or remote write/atomic without local write");
        }
        let local = host.mrs.next_key(host.next_key);
        let key = host.number(crate::registry::Kind::MKey, local).ok_or(SimError::OutOfMemory)?;
        host.next_key = key.wrapping_add(1);
        host.mrs.insert(key, Mr { pdn, addr, len, access });
        Ok(MrKeys { lkey: key, rkey: key })
    }

    /// Re-registers the MR of `lkey` in place (REREG_MR): `pdn` moves it to another PD,
    /// `range` to other memory, `access` changes its rights; what is `None` stays. Its
    /// keys stay (mlx5_ib may keep the mkey, and does when it can). Checked as
    /// [`Nic::reg_mr`]; on an error the MR is as it was.
    ///
    /// # Safety
    /// With `range`, `[addr, addr+len)` must stay valid host memory until `dereg_mr` or
    /// the next re-registration, as for [`Nic::reg_mr`].
    pub unsafe fn rereg_mr(
        &self,
        lkey: u32,
        pdn: Option<u32>,
        range: Option<(u64, u64)>,
        access: Option<u32>,
    ) -> Result<MrKeys, SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let old = host.mrs.remove(lkey).ok_or(SimError::NoSuchMr(lkey))?;
        let mut mr = old;
        if let Some(p) = pdn {
            mr.pdn = p;
        }
        if let Some((addr, len)) = range {
            (mr.addr, mr.len) = (addr, len);
        }
        if let Some(a) = access {
            mr.access = a;
        }
        let refused = if !host.pds.contains(&mr.pdn) {
            Some(SimError::NoSuchPd(mr.pdn))
        } else if mr.len == 0 || mr.addr.checked_add(mr.len).is_none() || mr.addr == 0 {
            Some(SimError::InvalidArgument { what: "MR range must be non-empty, non-null and not wrap" })
        } else if mr.access & !0x5f != 0 || !dma::valid_mr_access(mr.access) {
            Some(SimError::InvalidArgument {
                what: "MR access: unknown bits, or remote write/atomic without local write",
            })
        } else {
            None
        };
        host.mrs.insert(lkey, if refused.is_some() { old } else { mr });
        match refused {
            Some(e) => Err(e),
            None => Ok(MrKeys { lkey, rkey: lkey }),
        }
    }

    /// Deregisters an MR by lkey.
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        host.mrs.remove(lkey).ok_or(SimError::NoSuchMr(lkey))?;
        host.give_back(crate::registry::Kind::MKey, lkey);
        Ok(())
    }

    /// Allocates a memory window (`kind`: [`MkeyKind::Mw1`] or [`MkeyKind::Mw2`]) or an
    /// indirect mkey ([`MkeyKind::Indirect`], 1 to 65536 entries) in PD `pdn`, free (not
    /// bound): its key, variant 0. A UMR WQE binds it (docs/mlx5-wire-format.md §3.7).
    pub fn alloc_mkey(&self, pdn: u32, kind: MkeyKind) -> Result<u32, SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if !host.pds.contains(&pdn) {
            return Err(SimError::NoSuchPd(pdn));
        }
        if let MkeyKind::Indirect { max_entries, .. } = kind {
            if !(1..=65536).contains(&max_entries) {
                return bad("an indirect mkey holds 1 to 65536 KLM entries");
            }
        }
        host.mrs.mkeys.alloc(kind, pdn).ok_or(SimError::OutOfMemory)
    }

    /// Frees the memory window or indirect mkey of `key` (any variant), bound or not:
    /// its keys grant nothing from now on.
    pub fn dealloc_mkey(&self, key: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        host.mrs.mkeys.remove(key).map(|_| ()).ok_or(SimError::NoSuchMr(key))
    }

    /// The current key of the window or indirect mkey of `key` (its variant as the last
    /// UMR set it) and whether it is bound; `None` if there is none.
    pub fn mkey_state(&self, key: u32) -> Option<(u32, bool)> {
        let st = self.state();
        st.hosts[self.host].mrs.mkeys.by_index(key).map(|k| (k.key(key), k.bound.is_some()))
    }

    /// Creates a CQ of `cqe_cnt` (power of two, 2..=4194304) entries of `cqe_size` (64 or
    /// 128) bytes. Every slot's `op_own` is 0xF0; the memory lives until `destroy_cq`.
    pub fn create_cq(&self, cqe_cnt: u32, cqe_size: u32) -> Result<CqResources, SimError> {
        self.create_cq_ex(&CqInitAttr { cqe_cnt, cqe_size, ..CqInitAttr::default() })
    }

    /// Creates a CQ with the attributes of `mlx5dv_create_cq`: entry count and size, CQE
    /// compression with its responder mini-CQE format (64-byte CQEs only), completion
    /// channel.
    pub fn create_cq_ex(&self, attr: &CqInitAttr) -> Result<CqResources, SimError> {
        // SAFETY: no user memory.
        unsafe { self.create_cq_at(attr, None) }
    }

    /// [`Nic::create_cq_ex`] over a CQ buffer and doorbell record in the program's own
    /// memory (`user`), as the kernel creates a CQ over the rings libmlx5 allocated: the
    /// model writes CQEs there and never initialises or frees it (the driver has set
    /// every entry's ownership to invalid).
    ///
    /// # Safety
    /// `user.buf` (`cqe_cnt * cqe_size` bytes, 64-byte aligned) and `user.dbrec` (8
    /// bytes) stay mapped and writable until `destroy_cq`.
    pub unsafe fn create_cq_in(&self, attr: &CqInitAttr, user: UserRings) -> Result<CqResources, SimError> {
        // SAFETY: caller contract.
        unsafe { self.create_cq_at(attr, Some(user)) }
    }

    /// # Safety
    /// As [`Nic::create_cq_in`] where `user` is given.
    unsafe fn create_cq_at(
        &self,
        attr: &CqInitAttr,
        user: Option<UserRings>,
    ) -> Result<CqResources, SimError> {
        let (cqe_cnt, cqe_size) = (attr.cqe_cnt, attr.cqe_size);
        if !cqe_cnt.is_power_of_two() || !(2..=4_194_304).contains(&cqe_cnt) {
            return bad("cqe_cnt must be a power of two in 2..=4194304");
        }
        if cqe_size != 64 && cqe_size != 128 {
            return bad("cqe_size must be 64 or 128");
        }
        if attr.compression.is_some() && cqe_size != 64 {
            return Err(SimError::Unsupported { what: "CQE compression with 128-byte CQEs" });
        }
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if let Some(ch) = attr.channel {
            if !host.channels.contains_key(&ch) {
                return bad("no such completion channel");
            }
        }
        let local = host.cqs.next_free(host.next_cqn);
        let made = match user {
            None => Cq::new(cqe_cnt, cqe_size, attr.compression, attr.channel).ok_or(SimError::OutOfMemory),
            // SAFETY: caller contract.
            Some(u) => unsafe { Cq::new_in(cqe_cnt, cqe_size, attr.compression, attr.channel, u) }.ok_or(
                SimError::InvalidArgument { what: "CQ buffer or doorbell record: null or misaligned" },
            ),
        };
        // (The number after the CQ: nothing to give back to a shared registry on a refusal.)
        let cq = made?;
        let cqn = host.number(crate::registry::Kind::Cq, local).ok_or(SimError::OutOfMemory)?;
        host.next_cqn = cqn.wrapping_add(1);
        let res = CqResources {
            cqn,
            buf: cq.mem.ptr(),
            cqe_cnt,
            cqe_size,
            dbrec: cq.dbrec.ptr().cast::<u32>(),
            cq_uar: host.cq_page.ptr(),
        };
        host.cqs.insert(cqn, cq);
        Ok(res)
    }

    /// Whether CQ `cqn` is in error (it overran; [`AsyncEvent::CqOverrun`]).
    pub fn cq_error(&self, cqn: u32) -> Result<bool, SimError> {
        let st = self.state();
        st.hosts[self.host].cqs.get(&cqn).map(|c| c.error).ok_or(SimError::NoSuchCq(cqn))
    }

    /// MMIO: the 8-byte CQ doorbell (arm request) at `cq_uar + 0x20` (spec §5.6): BE32 arm
    /// word (`sn << 28 | cmd << 24 | ci`), BE32 CQN.
    pub fn cq_uar_write64(&self, value: [u8; 8]) {
        match &self.link {
            None => completer::cq_doorbell(&mut self.state().hosts[self.host], value),
            Some(l) => l.post(Msg::CqDb { value }),
        }
    }

    /// A completion channel (`ibv_create_comp_channel`): returns its number and a file
    /// descriptor that is readable while events are pending (owned by the model until
    /// `destroy_comp_channel`).
    pub fn create_comp_channel(&self) -> Result<(u32, std::os::fd::RawFd), SimError> {
        use std::os::fd::AsRawFd;
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let ch = host::Channel::new().map_err(|_| SimError::OutOfMemory)?;
        let id = host.next_channel;
        host.next_channel += 1;
        let fd = ch.rx.as_raw_fd();
        host.channels.insert(id, ch);
        Ok((id, fd))
    }

    /// Destroys a completion channel; `Busy` while a CQ uses it.
    pub fn destroy_comp_channel(&self, id: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if host.cqs.values().any(|c| c.channel == Some(id)) {
            return Err(SimError::Busy { what: "channel has CQs" });
        }
        host.channels.remove(&id).map(|_| ()).ok_or(SimError::InvalidArgument { what: "no such channel" })
    }

    /// The oldest pending completion event of channel `id` (`ibv_get_cq_event`, without
    /// blocking): the CQ number, or `None`.
    pub fn get_cq_event(&self, id: u32) -> Result<Option<u32>, SimError> {
        let mut st = self.state();
        let ch = st.hosts[self.host]
            .channels
            .get_mut(&id)
            .ok_or(SimError::InvalidArgument { what: "no such channel" })?;
        Ok(ch.take())
    }

    /// Resizes CQ `cqn` onto a ring of `cqe_cnt` entries in the program's memory at
    /// `buf` (RESIZE_CQ as mlx5_ib performs it over the ring libmlx5 allocated; entries of
    /// the CQ's size): a RESIZE CQE (opcode 5) ends the old ring at the producer's slot,
    /// and CQEs go on in the new ring from the slot after it, where the driver moves the
    /// unpolled ones. Doorbells rung before the call are executed first ([`Nic::quiesce`]).
    /// Refused when the CQ is in error, the new ring cannot hold the unpolled CQEs, or
    /// the old ring has no slot left for the RESIZE CQE.
    ///
    /// # Safety
    /// `buf` is 64-aligned, `cqe_cnt * cqe_size` bytes, mapped and writable until the CQ
    /// is destroyed or resized again.
    pub unsafe fn resize_cq_in(&self, cqn: u32, buf: *mut u8, cqe_cnt: u32) -> Result<(), SimError> {
        if !cqe_cnt.is_power_of_two() || !(2..=4_194_304).contains(&cqe_cnt) {
            return bad("cqe_cnt must be a power of two in 2..=4194304");
        }
        // Doorbells rung before the command are executed first, so that what is
        // unpolled is what the program has caused.
        self.quiesce();
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let cq = host.cqs.get_mut(&cqn).ok_or(SimError::NoSuchCq(cqn))?;
        let len = cqe_cnt as usize * cq.cqe_size as usize;
        // SAFETY: caller contract.
        let mem = unsafe { crate::mem::DevMem::borrowed(buf, len, 64) }
            .ok_or(SimError::InvalidArgument { what: "CQ buffer: null or misaligned" })?;
        cq.resize(mem, cqe_cnt).map_err(|_| SimError::InvalidArgument {
            what: "CQ in error, or its unpolled CQEs do not fit the new ring",
        })
    }

    /// Destroys a CQ; `Busy` while a QP uses it. Its memory is freed.
    pub fn destroy_cq(&self, cqn: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if !host.cqs.contains_key(&cqn) {
            return Err(SimError::NoSuchCq(cqn));
        }
        if host.qps.values().any(|q| q.send_cqn == cqn || q.recv_cqn == cqn) {
            return Err(SimError::Busy { what: "CQ has QPs" });
        }
        host.cqs.remove(&cqn);
        host.give_back(crate::registry::Kind::Cq, cqn);
        Ok(())
    }

    /// Creates a QP in RESET: one zeroed 4096-aligned buffer with the RQ at offset 0 and the
    /// SQ after it (RQ part rounded up to 64 bytes), a zeroed doorbell record, its own UAR.
    /// A DCT gets neither buffer, doorbell record nor UAR: its `sq_buf`, `rq_buf` and
    /// `dbrec` are null and its `uar_index` is `u32::MAX`.
    pub fn create_qp(&self, attr: &QpInitAttr) -> Result<QpResources, SimError> {
        // SAFETY: no user memory.
        unsafe { self.create_qp_at(attr, None, None) }
    }

    /// [`Nic::create_qp`] over a QP buffer and doorbell record in the program's own memory
    /// (`user`), as the kernel creates a QP over the rings libmlx5 allocated (RQ at
    /// offset 0, the SQ after it, as [`QpResources`] describes). Not for a DCT, which has
    /// no rings.
    ///
    /// # Safety
    /// `user.buf` (the RQ and SQ bytes, 64-byte aligned) and `user.dbrec` (8 bytes) stay
    /// mapped and writable until `destroy_qp`.
    pub unsafe fn create_qp_in(&self, attr: &QpInitAttr, user: UserRings) -> Result<QpResources, SimError> {
        if attr.qp_type == QpType::Dct {
            return bad("a DCT has no rings of its own");
        }
        // SAFETY: caller contract.
        unsafe { self.create_qp_at(attr, Some(user), None) }
    }

    /// [`Nic::create_qp_in`], the QP ringing register `reg` of its context's attached
    /// pages ([`Nic::attach_uar_page`]), as the kernel's response names the bfreg the
    /// driver will ring.
    ///
    /// # Safety
    /// As [`Nic::create_qp_in`].
    pub unsafe fn create_qp_in_reg(
        &self,
        attr: &QpInitAttr,
        user: UserRings,
        reg: u32,
    ) -> Result<QpResources, SimError> {
        if attr.qp_type == QpType::Dct {
            return bad("a DCT has no rings of its own");
        }
        // SAFETY: caller contract.
        unsafe { self.create_qp_at(attr, Some(user), Some(reg)) }
    }

    /// # Safety
    /// As [`Nic::create_qp_in`] where `user` is given.
    unsafe fn create_qp_at(
        &self,
        attr: &QpInitAttr,
        user: Option<UserRings>,
        reg: Option<u32>,
    ) -> Result<QpResources, SimError> {
        let mut st = self.state();
        // Threaded and watch modes may handle a doorbell after its WQE ran.
        let late_doorbells = st.cfg.mode != ExecMode::Deterministic;
        let host = &mut st.hosts[self.host];
        if !host.pds.contains(&attr.pdn) {
            return Err(SimError::NoSuchPd(attr.pdn));
        }
        if matches!(attr.qp_type, QpType::Dci | QpType::Dct) && !host.cfg.caps.dc {
            // mlx5dv_create_qp on a device without DC fails with EOPNOTSUPP.
            return Err(SimError::Unsupported {
                what: "DC: this device has no dynamically connected transport",
            });
        }
        let cqs: &[u32] = match attr.qp_type {
            QpType::Dci => &[attr.send_cqn],
            QpType::Dct => &[attr.recv_cqn],
            _ => &[attr.send_cqn, attr.recv_cqn],
        };
        for &cqn in cqs {
            if !host.cqs.contains_key(&cqn) {
                return Err(SimError::NoSuchCq(cqn));
            }
        }
        if let Some(s) = attr.srqn {
            if !host.srqs.contains_key(&s) {
                return Err(SimError::NoSuchSrq(s));
            }
        }
        if attr.context != 0 && !host.contexts.contains_key(&attr.context) {
            return bad("no such device context");
        }
        let local = host.qps.next_free(host.next_qpn);
        let qpn = host.number(crate::registry::Kind::Qp, local).ok_or(SimError::OutOfMemory)?;
        let dct = attr.qp_type == QpType::Dct;
        let made = (|| {
            // SAFETY: caller contract where `user` is given.
            let mut qp = unsafe { Qp::new_in(qpn, u32::MAX, attr, user) }?;
            if late_doorbells {
                qp.keep_shadow_per_slot();
            }
            if let Some(r) = reg {
                qp.uar_index = host.take_borrowed_reg(attr.context, r).ok_or(SimError::InvalidArgument {
                    what: "no such register on the context's attached pages",
                })?;
            } else if !dct {
                qp.uar_index =
                    host.assign_reg(attr.context, attr.dedicated_uar).ok_or(SimError::OutOfMemory)?;
            }
            Ok(qp)
        })();
        let qp = match made {
            Ok(qp) => qp,
            Err(e) => {
                // A number from the shared registry goes back with the refusal.
                host.give_back(crate::registry::Kind::Qp, qpn);
                return Err(e);
            }
        };
        let uar_index = qp.uar_index;
        host.next_qpn = qpn.wrapping_add(1);
        let base = qp.buf.ptr();
        let res = if dct {
            QpResources {
                qpn,
                sq_buf: std::ptr::null_mut(),
                sq_wqe_cnt: 0,
                rq_buf: std::ptr::null_mut(),
                rq_wqe_cnt: 0,
                rq_stride: 0,
                dbrec: std::ptr::null_mut(),
                uar_index,
                bf_reg: std::ptr::null_mut(),
                bf_size: BF_SIZE,
            }
        } else {
            QpResources {
                qpn,
                // SAFETY (pointer arithmetic only): sq_off <= buffer length.
                sq_buf: base.wrapping_add(qp.sq_off),
                sq_wqe_cnt: qp.sq_wqe_cnt,
                rq_buf: base,
                rq_wqe_cnt: qp.rq_wqe_cnt,
                rq_stride: qp.rq_stride,
                dbrec: qp.dbrec.ptr().cast::<u32>(),
                uar_index,
                bf_reg: host.reg_ptr(uar_index),
                bf_size: BF_SIZE,
            }
        };
        host.qps.insert(qpn, qp);
        Ok(res)
    }

    /// Changes QP state per spec §7 (transition table and required attributes per QP type).
    /// To ERR flushes both queues (the own RQ only, never SRQ WQEs); to RESET discards WQEs
    /// and zeroes the doorbell record and hardware counters; to RTS runs WQEs already posted
    /// (also SQE→RTS, the UD recovery). A DCT gets its number at INIT→RTR and loses it on
    /// RESET.
    pub fn modify_qp(&self, qpn: u32, m: &crate::QpModify) -> Result<(), SimError> {
        let mut st = self.state();
        let h = self.host;
        let roce = st.hosts[h].cfg.link_layer == crate::LinkLayer::Ethernet;
        let host = &mut st.hosts[h];
        let (max_rd, grh_required) = (host.cfg.caps.max_rd_atomic, host.cfg.grh_required && !roce);
        let qp = host.qps.get_mut(&qpn).ok_or(SimError::NoSuchQp(qpn))?;
        // What the kernel refuses (EINVAL) before the QP changes.
        if m.max_rd_atomic.is_some_and(|v| v > max_rd) || m.max_dest_rd_atomic.is_some_and(|v| v > max_rd) {
            return Err(SimError::InvalidArgument {
                what: "max_rd_atomic / max_dest_rd_atomic above the device's max_qp_rd_atom",
            });
        }
        if grh_required && m.path.is_some_and(|p| p.dgid.is_none()) {
            return Err(SimError::InvalidArgument {
                what: "the port requires a GRH: the path needs a destination GID",
            });
        }
        let from = qp.state;
        let to = qp.apply_modify(m, roce)?;
        match to {
            QpState::Reset => {
                if let Some(n) = qp.dct_num {
                    host.dcts.remove(&n);
                    if let Some((r, _)) = &host.numbers {
                        let _ = r.free(crate::registry::Kind::Qp, n);
                    }
                }
                qp.reset();
            }
            QpState::Err => completer::enter_err(&mut st.hosts[h], qpn),
            QpState::Rts => {
                qp.state = to;
                requester::process_sq(&mut st, h, qpn, false);
            }
            QpState::Rtr if qp.qp_type == QpType::Dct && from == QpState::Init => {
                // A device processes share takes DCT numbers from its registry, as QPNs
                // (on mlx5 a DCT number is a QPN), so that a DCI in another process finds
                // the DCT's process.
                let n = match &host.numbers {
                    Some((r, ep)) => {
                        r.alloc(crate::registry::Kind::Qp, *ep).map_err(|_| SimError::OutOfMemory)?
                    }
                    None => {
                        let n = host.next_dct;
                        host.next_dct = (n + 1) & 0xff_ffff | 0x80_0000;
                        n
                    }
                };
                qp.dct_num = Some(n);
                qp.state = to;
                host.dcts.insert(n, qpn);
            }
            _ => qp.state = to,
        }
        Ok(())
    }

    /// The DCT number of DCT `qpn` (what DCIs put in the address vector's `dqp_dct` and what
    /// DCT CQEs carry in `sop_drop_qpn`). It is assigned at INIT→RTR, from a number range
    /// separate from QP handles; before that (and for other QP types) this is an error.
    pub fn dct_number(&self, qpn: u32) -> Result<u32, SimError> {
        let st = self.state();
        let qp = st.hosts[self.host].qps.get(&qpn).ok_or(SimError::NoSuchQp(qpn))?;
        if qp.qp_type != QpType::Dct {
            return Err(SimError::InvalidArgument { what: "not a DCT" });
        }
        qp.dct_num.ok_or(SimError::InvalidArgument { what: "the DCT number is assigned at INIT->RTR" })
    }

    /// Creates an SRQ: `wqe_cnt * stride` zeroed bytes and a zeroed doorbell record. The
    /// device consumes WQEs in linked-list order starting at index 0 (spec §4.3); the driver
    /// initialises every WQE's `next_wqe_index` before posting.
    pub fn create_srq(&self, attr: &SrqInitAttr) -> Result<SrqResources, SimError> {
        // SAFETY: no user memory.
        unsafe { self.create_srq_at(attr, None) }
    }

    /// [`Nic::create_srq`] over a ring and doorbell record in the program's own memory
    /// (`user`), as the kernel creates an SRQ over what libmlx5 allocated; the driver
    /// keeps its free list there as on a NIC.
    ///
    /// # Safety
    /// `user.buf` (`wqe_cnt * stride` bytes, 64-byte aligned) and `user.dbrec` (4 bytes)
    /// stay mapped and writable until `destroy_srq`.
    pub unsafe fn create_srq_in(
        &self,
        attr: &SrqInitAttr,
        user: UserRings,
    ) -> Result<SrqResources, SimError> {
        // SAFETY: caller contract.
        unsafe { self.create_srq_at(attr, Some(user)) }
    }

    /// # Safety
    /// As [`Nic::create_srq_in`] where `user` is given.
    unsafe fn create_srq_at(
        &self,
        attr: &SrqInitAttr,
        user: Option<UserRings>,
    ) -> Result<SrqResources, SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if !host.pds.contains(&attr.pdn) {
            return Err(SimError::NoSuchPd(attr.pdn));
        }
        // SAFETY: caller contract where `user` is given.
        let srq = unsafe { Srq::new_in(attr, user) }?;
        let srqn = host.number(crate::registry::Kind::Srq, host.next_srqn).ok_or(SimError::OutOfMemory)?;
        host.next_srqn = srqn + 1;
        let res = SrqResources {
            srqn,
            buf: srq.buf.ptr(),
            wqe_cnt: srq.wqe_cnt,
            stride: srq.stride,
            dbrec: srq.dbrec.ptr().cast::<u32>(),
        };
        host.srqs.insert(srqn, srq);
        Ok(res)
    }

    /// Arms SRQ `srqn`'s limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): once a receive
    /// leaves fewer than `limit` WQEs posted, [`AsyncEvent::SrqLimitReached`] is raised
    /// and the limit disarms. 0 disarms it. A limit of the SRQ's size or more is refused
    /// (mlx5_ib: EINVAL).
    pub fn arm_srq_limit(&self, srqn: u32, limit: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let srq = host.srqs.get_mut(&srqn).ok_or(SimError::NoSuchSrq(srqn))?;
        if limit >= srq.wqe_cnt {
            return bad("SRQ limit must be below the SRQ's size");
        }
        srq.limit = (limit > 0).then_some(limit as u16);
        Ok(())
    }

    /// The SRQ's armed limit (0: none), as `ibv_query_srq` reports it.
    pub fn srq_limit(&self, srqn: u32) -> Result<u32, SimError> {
        let st = self.state();
        let srq = st.hosts[self.host].srqs.get(&srqn).ok_or(SimError::NoSuchSrq(srqn))?;
        Ok(srq.limit.map_or(0, u32::from))
    }

    /// Destroys an SRQ; `Busy` while a QP or DCT uses it. Its memory is freed.
    pub fn destroy_srq(&self, srqn: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if !host.srqs.contains_key(&srqn) {
            return Err(SimError::NoSuchSrq(srqn));
        }
        if host.qps.values().any(|q| q.srqn == Some(srqn)) {
            return Err(SimError::Busy { what: "SRQ has QPs" });
        }
        host.srqs.remove(&srqn);
        host.give_back(crate::registry::Kind::Srq, srqn);
        Ok(())
    }

    /// Current QP state.
    pub fn qp_state(&self, qpn: u32) -> Result<QpState, SimError> {
        let st = self.state();
        st.hosts[self.host].qps.get(&qpn).map(|q| q.state).ok_or(SimError::NoSuchQp(qpn))
    }

    /// A QP's current `(sq_psn, rq_psn)`: the PSN its next request will
    /// carry and the PSN its responder expects next (what `ibv_query_qp`
    /// reports as `sq_psn` / `rq_psn`).
    pub fn qp_psns(&self, qpn: u32) -> Result<(u32, u32), SimError> {
        let st = self.state();
        st.hosts[self.host]
            .qps
            .get(&qpn)
            .map(|q| (q.attrs.sq_psn, q.attrs.rq_psn))
            .ok_or(SimError::NoSuchQp(qpn))
    }

    /// Destroys a QP (any state) and frees its memory.
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let qp = host.qps.remove(&qpn).ok_or(SimError::NoSuchQp(qpn))?;
        if qp.qp_type != QpType::Dct {
            host.release_reg(qp.uar_index, qp.dedicated_uar);
        }
        if let Some(n) = qp.dct_num {
            host.dcts.remove(&n);
            host.give_back(crate::registry::Kind::Qp, n);
        }
        host.give_back(crate::registry::Kind::Qp, qpn);
        Ok(())
    }

    /// Takes this device's numbers (QPs, CQs, SRQs, PDs, memory keys) from `registry`,
    /// which other processes simulating the same device share, recording `endpoint` as
    /// where the packets of this host's QPs go (step 12, `docs/udp-wire.md`). Numbers
    /// handed out before keep their values. DCT numbers come from it too, as QPNs.
    pub fn share_numbers(
        &self,
        registry: std::sync::Arc<crate::registry::Registry>,
        endpoint: crate::registry::Endpoint,
    ) {
        let mut st = self.state();
        st.hosts[self.host].numbers = Some((registry, endpoint));
    }

    /// Joins this device to the UDP wire between processes (step 12,
    /// `docs/udp-wire.md`): its numbers come from `registry`, shared with the other
    /// processes simulating the same device ([`Nic::share_numbers`]), and an endpoint on
    /// a loopback address of its own (`127.k.0.n:4791`, device `n - 1`, the first `k` no
    /// other process holds) sends and receives RoCE v2 datagrams: RC and UD traffic to a
    /// QP another process owns goes there, with RC's PSNs, acknowledgements and
    /// retransmission. Returns the endpoint, as recorded in the registry.
    pub fn open_wire(
        &self,
        registry: std::sync::Arc<crate::registry::Registry>,
    ) -> std::io::Result<crate::registry::Endpoint> {
        let n = u8::try_from(self.host + 1)
            .ok()
            .filter(|&n| n < 255)
            .ok_or_else(|| std::io::Error::other("only hosts 0 to 253 can join the UDP wire"))?;
        let gid = self.state().hosts[self.host].cfg.gid;
        let end = Arc::new(crate::udp_wire::WireEnd::bind(n, gid)?);
        let ep = crate::registry::Endpoint { addr: end.at.ip().octets(), port: end.at.port() };
        {
            let mut st = self.state();
            st.hosts[self.host].numbers = Some((registry, ep));
            st.hosts[self.host].wire = Some(end.clone());
        }
        let (shared, h, e) = (self.front.state.clone(), self.host, end.clone());
        let t = std::thread::Builder::new()
            .name(format!("mlx5-sim-wire{h}"))
            .spawn(move || crate::udp_wire::run(shared, h, e))?;
        self.front.threads.lock().unwrap_or_else(|e| e.into_inner()).push(t);
        self.front.wire_ends.lock().unwrap_or_else(|e| e.into_inner()).push(end);
        Ok(ep)
    }

    /// Why the error CQE of WQE `wqe_counter` of QP `qpn` (a send WQE, or a receive
    /// for a responder's error CQE) was written, in the words of the check that failed:
    /// it names the key, MR, range, address or QP and the right or limit that was
    /// missing (step 13). `None` for a CQE the model has no more to say about than its
    /// syndrome (a flush), or one of the latest 256 no longer.
    pub fn failure_reason(&self, qpn: u32, wqe_counter: u16) -> Option<String> {
        self.state().hosts[self.host].why.of(qpn, wqe_counter).map(str::to_owned)
    }

    /// After `fork`, in the child: join the UDP wire as a process of its own. The child
    /// inherited its parent's endpoint (the same socket: what arrives there is the
    /// parent's to read) and its parent's registry handle (the same owner, and the same
    /// open file, whose lock the two would share). It opens the registry again, so that
    /// what it creates is numbered as its own and freed when it ends, and binds an
    /// endpoint of its own ([`Nic::open_wire`]). Objects inherited from the parent stay
    /// the parent's. Nothing to do for a device off the wire.
    pub fn rejoin_wire_after_fork(&self) -> std::io::Result<()> {
        let (numbers, end) = {
            let mut st = self.state();
            let h = &mut st.hosts[self.host];
            (h.numbers.take(), h.wire.take())
        };
        let Some((registry, _)) = numbers else { return Ok(()) };
        if let Some(end) = end {
            // The child's copy of the parent's socket closes with the last reference here;
            // the parent's stays open.
            self.front.wire_ends.lock().unwrap_or_else(|e| e.into_inner()).retain(|e| !Arc::ptr_eq(e, &end));
        }
        let fresh = crate::registry::Registry::open(registry.path()).map_err(std::io::Error::other)?;
        self.open_wire(Arc::new(fresh)).map(|_| ())
    }

    /// Datagrams this device's end of the UDP wire dropped before they reached a QP, by
    /// reason (foreign sender, runt, ICRC, transport version, P_Key, opcode, length);
    /// `None` when it has none ([`Nic::open_wire`]).
    pub fn wire_drops(&self) -> Option<crate::WireDrops> {
        Some(self.state().hosts[self.host].wire.as_ref()?.drops())
    }

    /// MMIO: 8-byte doorbell store at `offset` (0 or bf_size, alternating) of UAR register
    /// `uar_index`. `value` = first 8 bytes of the ctrl segment of the last posted WQE.
    pub fn uar_write64(&self, uar_index: u32, offset: u32, value: [u8; 8]) {
        match &self.link {
            None => {
                let mut st = self.state();
                engine::doorbell(&mut st, self.host, uar_index, offset, value, None, None);
            }
            Some(l) => l.doorbell(uar_index, offset, value),
        }
    }

    /// MMIO: BlueFlame copy of the whole last WQE (length a multiple of 64, at most
    /// bf_size) at `offset`. The model executes from the ring and compares.
    pub fn uar_write_bf(&self, uar_index: u32, offset: u32, data: &[u8]) {
        let valid_len = !data.is_empty() && data.len().is_multiple_of(64) && data.len() <= BF_SIZE as usize;
        let n = data.len().min(BF_SIZE as usize);
        match &self.link {
            None => {
                let mut st = self.state();
                bf_write(&mut st, self.host, uar_index, offset, &data[..n], valid_len, None);
            }
            Some(l) => l.bf(uar_index, offset, &data[..n], valid_len),
        }
    }

    /// One RNR-timer period: retry RNR-blocked sends, run send queues whose producer moved,
    /// flush receive WQEs posted to QPs in ERR. Threaded: queued to the NIC thread (which
    /// also ticks itself while it has RNR-blocked or errored QPs).
    pub fn tick(&self) {
        match &self.link {
            None => engine::tick(&mut self.state(), self.host),
            Some(l) => l.post(Msg::Tick),
        }
    }

    /// Threaded mode: when doorbells wait in this NIC's queue and the NIC thread is not at
    /// work (nobody holds the queue), handles them in the caller's thread, as the NIC
    /// thread would (under the same lock, in queue order). A poller that found nothing
    /// calls it, so the simulated NIC keeps pace with the application when its thread is
    /// waiting for a core (cores shared with busy processes). Returns whether it handled
    /// anything. Other modes: no-op, `false`.
    #[inline]
    pub fn help(&self) -> bool {
        match &self.link {
            Some(l) => l.help(),
            None => false,
        }
    }

    /// Threaded mode: stops this NIC's thread (`true`) as if the OS gave it no core, or
    /// lets it run again (`false`). While it is stopped, doorbells stay queued until a
    /// poller handles them ([`Nic::help`]) or the thread runs again: for tests of what an
    /// application sees when its NIC lags. When this returns `true`'s way, the thread is
    /// not handling anything and will not until it is let run again. Other modes: no-op.
    pub fn set_thread_paused(&self, paused: bool) {
        if let Some(l) = &self.link {
            l.paused.store(paused, Ordering::Release);
            // The NIC thread reads the flag holding its queue: once we have held the
            // queue, a batch it started before the flag was set is over.
            drop(l.hold());
            if let Some(t) = l.thread.get() {
                t.unpark();
            }
        }
    }

    /// Watch mode: wake the NIC's thread now instead of at the end of its backoff (a
    /// hint; the NIC notices stores to its memory without it). Otherwise a no-op.
    #[inline]
    pub fn kick(&self) {
        if let Some(w) = &self.watch {
            w.unpark();
        }
    }

    /// A device context of its own (`ibv_open_device`): 16 doorbell registers that its
    /// first 16 QPs get one each and later QPs share (`QpInitAttr::context`).
    pub fn open_context(&self) -> u32 {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let id = host.next_context;
        host.next_context += 1;
        host.contexts.insert(id, Default::default());
        id
    }

    /// Attaches a UAR page of the program's own to device context `context` (an emulated
    /// kernel hands the driver such a page for its `mmap` of the command fd, as mlx5_ib
    /// maps a UAR): the page's four registers, at the offsets of an mlx5 UAR page
    /// (0x800 + k * 0x200, two BlueFlame halves each), become the context's, for
    /// [`Nic::create_qp_in_reg`] to name; the CQ doorbell at offset 0x20 is watched.
    /// Doorbells and BlueFlame writes there are seen and counted as on the model's own
    /// pages (watch and threaded modes scan them). Returns the first register's index
    /// (the other three follow it).
    ///
    /// # Safety
    /// `page` is 4096-aligned and its 4096 bytes stay mapped and writable until
    /// `close_context(context)` returns.
    pub unsafe fn attach_uar_page(&self, context: u32, page: *mut u8) -> Result<u32, SimError> {
        let mut st = self.state();
        // SAFETY: caller contract.
        unsafe { st.hosts[self.host].attach_uar_page(context, page) }.ok_or(SimError::InvalidArgument {
            what: "UAR page: no such context, or not a 4096-aligned page",
        })
    }

    /// Publishes this NIC's clock (the CQE timestamps' counter) in `page`, as the
    /// free-running internal timer that libmlx5 maps and reads for
    /// `ibv_query_rt_values_ex`: big-endian at offset 0, updated on every tick, until
    /// `context` closes.
    ///
    /// # Safety
    /// `page` is 4096 bytes, 4096-aligned and stays mapped and writable until the
    /// context closes.
    pub unsafe fn attach_clock_page(&self, context: u32, page: *mut u8) -> Result<(), SimError> {
        let mut st = self.state();
        // SAFETY: caller contract.
        unsafe { st.hosts[self.host].attach_clock_page(context, page) }.ok_or(SimError::InvalidArgument {
            what: "clock page: no such context, or not a 4096-aligned page",
        })
    }

    /// This NIC's clock: the counter its CQE timestamps are read from.
    pub fn clock(&self) -> u64 {
        self.state().hosts[self.host].clock
    }

    /// The objects this NIC holds now.
    pub fn objects(&self) -> crate::ObjectCounts {
        let st = self.state();
        let h = &st.hosts[self.host];
        crate::ObjectCounts {
            pds: h.pds.len(),
            mrs: h.mrs.count(),
            cqs: h.cqs.values().count(),
            qps: h.qps.iter().count(),
            srqs: h.srqs.len(),
            channels: h.channels.len(),
            contexts: h.contexts.len(),
        }
    }

    /// Closes a device context; `Busy` while QPs use its registers.
    pub fn close_context(&self, id: u32) -> Result<(), SimError> {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        let Some(c) = host.contexts.get(&id) else {
            return bad("no such device context");
        };
        if c.regs.iter().chain(&c.borrowed_regs).any(|r| host.uars.get(r).is_some_and(|u| u.users > 0)) {
            return Err(SimError::Busy { what: "context has QPs" });
        }
        let c = host.contexts.remove(&id).expect("checked");
        for r in &c.borrowed_regs {
            host.uars.remove(r);
        }
        host.cq_db_pages.retain(|p| !c.borrowed_pages.contains(p));
        host.clock_pages.retain(|(ctx, _)| *ctx != id);
        for &p in &c.borrowed_pages {
            // The program's page is no longer read: a model-owned page takes its slot.
            host.uar_pages[p] = crate::mem::DevMem::new(4096, 4096).ok_or(SimError::OutOfMemory)?;
        }
        for r in c.regs {
            if let Some(u) = host.uars.get_mut(&r) {
                u.expected_offset = 0;
            }
            host.free_regs.push(r);
        }
        Ok(())
    }

    /// Threaded: blocks until this NIC's thread has processed every UAR write and tick sent
    /// so far. Watch: blocks until the NIC's thread has made two full passes (so one
    /// started after this call). Deterministic: no-op.
    pub fn quiesce(&self) {
        if let Some(w) = &self.watch {
            let mut scans = w.scans.lock().unwrap_or_else(|e| e.into_inner());
            let target = *scans + 2;
            w.unpark();
            while *scans < target {
                let (g, _) =
                    w.cv.wait_timeout(scans, Duration::from_millis(1)).unwrap_or_else(|e| e.into_inner());
                scans = g;
                w.unpark();
            }
        }
        if let Some(l) = &self.link {
            // Messages leave the queue only while it is held and are handled in the
            // same hold: an empty queue seen while holding it means everything queued
            // before this call has been handled.
            let handled = || {
                let g = l.hold();
                let empty = l.rx.is_empty();
                drop(g);
                empty
            };
            if !handled() {
                // Registered before the queue is looked at again (SeqCst both sides):
                // whoever handles the last batch lets the queue go, then looks
                // at `waiters`; it either left the queue empty for our next look or
                // finds us registered and notifies under `p.lock`, which we hold
                // from the look to the wait.
                let p = &l.progress;
                let mut g = p.lock.lock().unwrap_or_else(|e| e.into_inner());
                p.waiters.fetch_add(1, Ordering::SeqCst);
                while !handled() {
                    g = p.cv.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                p.waiters.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Holds this NIC's host as an operation on it does, until the value is dropped:
    /// doorbells, ticks and control calls on this host wait, and so do other hosts' WQEs
    /// that need it. For tests of the per-host locks; not part of the stable API.
    #[doc(hidden)]
    pub fn hold(&self) -> HostHold<'_> {
        HostHold(self.state())
    }

    /// Counters.
    pub fn stats(&self) -> NicStats {
        let st = self.state();
        let mut s = st.hosts[self.host].stats;
        if let Some(w) = &st.hosts[self.host].wire {
            s.datagrams_dropped += w.drops().total();
        }
        drop(st);
        // Threaded: doorbells covered by one already queued were still written.
        if let Some(l) = &self.link {
            s.doorbells_coalesced = l.coalesced.load(Ordering::Relaxed);
            s.doorbells += s.doorbells_coalesced;
        }
        s
    }

    /// Take the port down (`false`) or bring it back (`true`), raising
    /// `PortError` / `PortActive`. While it is down this host sends and receives
    /// nothing: RC and DC requests to or from it go unanswered (retries exceeded),
    /// UD datagrams are dropped.
    pub fn set_port_active(&self, active: bool) {
        let mut st = self.state();
        let host = &mut st.hosts[self.host];
        if host.port_down != active {
            return;
        }
        host.port_down = !active;
        host.push_event(if active { AsyncEvent::PortActive } else { AsyncEvent::PortError });
        st.set_reachable(self.host);
    }

    /// The device fails (`IBV_EVENT_DEVICE_FATAL`): every QP moves to ERR and its
    /// outstanding work completes with flush errors (as rdma-core's mlx5 provider
    /// reports in fatal state), and the host is unreachable from now on.
    pub fn inject_fatal(&self) {
        let mut st = self.state();
        let h = self.host;
        if st.hosts[h].fatal {
            return;
        }
        st.hosts[h].fatal = true;
        st.hosts[h].push_event(AsyncEvent::DeviceFatal);
        st.set_reachable(h);
        let mut qpns: Vec<u32> = st.hosts[h].qps.keys().copied().collect();
        qpns.sort_unstable();
        for qpn in qpns {
            completer::enter_err(&mut st.hosts[h], qpn);
        }
    }

    /// Whether the device failed ([`Nic::inject_fatal`]).
    pub fn is_fatal(&self) -> bool {
        self.state().hosts[self.host].fatal
    }

    /// Drains the async event queue.
    pub fn take_async_events(&self) -> Vec<AsyncEvent> {
        std::mem::take(&mut self.state().hosts[self.host].events)
    }

    /// Takes the oldest pending async event (`ibv_get_async_event` on a
    /// non-blocking descriptor).
    pub fn take_async_event(&self) -> Option<AsyncEvent> {
        let mut st = self.state();
        let ev = &mut st.hosts[self.host].events;
        if ev.is_empty() {
            None
        } else {
            Some(ev.remove(0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync::<Nic>();
        assert_send_sync::<Fabric>();
    }

    /// A QP keeps a shadow per send slot only where a doorbell can reach the model
    /// after its WQE ran (threaded and watch modes); in deterministic mode the last
    /// executed WQE is all a doorbell can still match.
    #[test]
    fn only_modes_with_late_doorbells_keep_a_shadow_per_slot() {
        for (mode, per_slot) in
            [(ExecMode::Deterministic, false), (ExecMode::Threaded, true), (ExecMode::Watch, true)]
        {
            let f = Fabric::new(FabricConfig { mode, ..Default::default() });
            let nic = f.add_host(HostConfig::infiniband("h0", 1));
            let pdn = nic.alloc_pd().unwrap();
            let cq = nic.create_cq(8, 64).unwrap();
            let attr = QpInitAttr {
                qp_type: QpType::Rc,
                pdn,
                send_cqn: cq.cqn,
                recv_cqn: cq.cqn,
                sq_wqe_cnt: 16,
                ..Default::default()
            };
            let qpn = nic.create_qp(&attr).unwrap().qpn;
            let st = nic.state();
            let qp = st.hosts[nic.host].qps.get(&qpn).unwrap();
            assert_eq!(qp.shadow.len(), if per_slot { 16 } else { 0 }, "{mode:?}");
        }
    }

    /// Every queued BlueFlame message finds the payload its poster wrote, across
    /// three rounds that fill every slot (so each slot is reused), with the NIC
    /// thread paused and the messages taken off the queue here.
    #[test]
    fn each_blueflame_message_finds_its_own_payload() {
        let f = Fabric::new(FabricConfig { mode: ExecMode::Threaded, ..Default::default() });
        let nic = f.add_host(HostConfig::infiniband("h0", 1));
        nic.set_thread_paused(true);
        let link = nic.link.clone().expect("a threaded NIC has a link");
        let payload = |k: usize| -> Vec<u8> { (0..64 * (1 + k % 4)).map(|i| (k * 7 + i) as u8).collect() };
        for round in 0..3 {
            for k in 0..BF_SLOTS {
                let p = payload(round * BF_SLOTS + k);
                link.bf(1, (k as u32 % 2) * BF_SIZE, &p, true);
            }
            assert!(link.bf.iter().all(|s| s.busy.load(Ordering::Relaxed)), "every slot holds a payload");
            for k in 0..BF_SLOTS {
                let Ok(Msg::Bf { offset, len, slot, .. }) = link.rx.try_recv() else {
                    panic!("round {round}: message {k} is not the BlueFlame write queued")
                };
                let want = payload(round * BF_SLOTS + k);
                assert_eq!(offset, (k as u32 % 2) * BF_SIZE);
                assert_eq!(usize::from(len), want.len());
                link.take_bf(slot, len, |got| assert_eq!(got, &want[..], "round {round}, message {k}"));
            }
            assert!(link.bf.iter().all(|s| !s.busy.load(Ordering::Relaxed)), "every slot freed");
        }
    }
}
