//! The fabric's state with one lock per host: hosts meet only where a message crosses
//! from one to another.
//!
//! An operation (a doorbell, a tick, a control-path call) starts on its home host and
//! holds that host's lock ([`Shared::host`]). When a WQE names another host, the engine
//! asks for it ([`FabricState::need`]): a host numbered above home is locked (waiting if
//! need be), one numbered below is tried; when it is busy, home is let go and both are
//! taken again in order, and the WQE is started afresh ([`Restart`]), none of it having
//! been done. So locks are only ever waited for in ascending host order and two NICs
//! never wait for each other. An operation holds at most two hosts: taking a new
//! remote host lets go of the previous one, whose part of the work is complete.
//!
//! That is for the modes with NIC threads. In [`ExecMode::Deterministic`] the work runs
//! in the callers' threads, one operation at a time: one lock over every host, taken
//! once per operation, as before the per-host locks (it costs a message no second lock).
//!
//! With the network model running (faults or a capture) the fabric is one simulation on
//! one simulated clock: an operation then holds every host, in order, and the network
//! ([`Shared::all`]).
//!
//! Letting a host go ends its burst: its compressed CQE sessions are written then.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::completer::flush_sessions;
use crate::host::Host;
use crate::net::Net;
use crate::slots::Slots;
use crate::{ExecMode, FabricConfig, LinkLayer};

/// Where packets find a host: from its configuration, which never changes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr {
    pub link_layer: LinkLayer,
    pub lid: u16,
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

/// One host and its lock.
pub(crate) struct HostCell {
    lock: Mutex<()>,
    host: UnsafeCell<Host>,
    pub addr: Addr,
    /// [`Host::reachable`], readable without the host's lock: stored by whoever changes
    /// it, under the lock ([`FabricState::set_reachable`]).
    up: AtomicBool,
}

// SAFETY: `host` is reached only through a `Held` that holds `lock`, or the fabric's one
// lock in deterministic mode (see `Held`); a host may move between threads (below).
unsafe impl Sync for HostCell {}

const _: () = {
    const fn send<T: Send>() {}
    send::<Host>()
};

impl HostCell {
    /// Whether the host sends and receives (a look without its lock).
    pub(crate) fn up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }
}

/// What every NIC thread and handle of a fabric shares.
pub(crate) struct Shared {
    pub cfg: FabricConfig,
    cells: Slots<HostCell>,
    net: Mutex<Net>,
    /// [`Net::active`], readable without the network's lock: changed only while every
    /// host is held, so an operation holding its home host reads a value that stays.
    lossy: AtomicBool,
    /// Deterministic mode: the one lock over every host.
    one: Option<Mutex<()>>,
    /// Counts changes of what [`FabricState::find_host`] sees: a host's reachability
    /// stored. From 1, so that 0 names no epoch. A host found in the current epoch is the
    /// one a new search would find (hosts added since come after it).
    addr_epoch: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("hosts", &self.cells.len()).finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// No host (an index no host has).
const NONE: usize = usize::MAX;

impl Shared {
    pub(crate) fn new(cfg: FabricConfig, net: Net) -> Shared {
        let one = (cfg.mode == ExecMode::Deterministic).then(|| Mutex::new(()));
        Shared {
            cfg,
            cells: Slots::new(),
            lossy: AtomicBool::new(net.active()),
            net: Mutex::new(net),
            one,
            addr_epoch: AtomicU64::new(1),
        }
    }

    /// Hosts added so far.
    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }

    /// Host `h`'s cell (`h` < [`Shared::len`]).
    #[inline(always)]
    pub(crate) fn cell(&self, h: usize) -> &HostCell {
        self.cells.get(h).unwrap_or_else(|| no_host(h))
    }

    /// The cells of every host added so far, in order.
    pub(crate) fn cells(&self) -> impl Iterator<Item = &HostCell> + '_ {
        self.cells.iter()
    }

    /// Adds `host` (its index must be [`Shared::len`]). Calls must not race each other.
    pub(crate) fn push(&self, host: Host) -> usize {
        let c = &host.cfg;
        let addr = Addr { link_layer: c.link_layer, lid: c.lid, gid: c.gid, mac: c.mac };
        let up = AtomicBool::new(host.reachable());
        // No new epoch: a host added later never comes before one found already.
        self.cells.push(HostCell { lock: Mutex::new(()), host: UnsafeCell::new(host), addr, up })
    }

    #[inline(always)]
    fn state(&self) -> FabricState<'_> {
        FabricState {
            cfg: &self.cfg,
            hosts: Held {
                shared: self,
                home: NONE,
                home_p: std::ptr::null_mut(),
                other: NONE,
                other_p: std::ptr::null_mut(),
                any: false,
                wide: Cell::new(false),
                home_g: None,
                other_g: None,
                all: None,
                nowait: false,
                deferred: false,
            },
            net: NetRef(None),
        }
    }

    /// An operation on host `h`: `h` held (every host and the network, when the network
    /// model runs).
    #[inline(always)]
    pub(crate) fn host(&self, h: usize) -> FabricState<'_> {
        let cell = self.cell(h);
        let mut st = self.state();
        let held = &mut st.hosts;
        match &self.one {
            Some(one) => {
                held.home_g = Some(lock(one));
                held.any = true;
            }
            None => held.home_g = Some(lock(&cell.lock)),
        }
        held.home = h;
        held.home_p = cell.host.get();
        if self.lossy.load(Ordering::Acquire) {
            st.hold_all();
        }
        st
    }

    /// An operation on host `h` that never waits for a lock: `None` when `h` is busy,
    /// or when this fabric has one lock or the network model runs (not for those). A
    /// WQE that needs another host while it is busy is then left undone
    /// ([`FabricState::deferred`]) instead of waited for. For work done in an
    /// application's thread, which may itself hold a host ([`crate::Nic::hold`]).
    pub(crate) fn try_host(&self, h: usize) -> Option<FabricState<'_>> {
        if self.one.is_some() || self.lossy.load(Ordering::Acquire) {
            return None;
        }
        let cell = self.cell(h);
        let g = match cell.lock.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let mut st = self.state();
        let held = &mut st.hosts;
        held.home_g = Some(g);
        held.home = h;
        held.home_p = cell.host.get();
        held.nowait = true;
        // Set under home's lock: if the network model started meanwhile, every
        // operation now holds every host.
        if self.lossy.load(Ordering::Acquire) {
            return None;
        }
        Some(st)
    }

    /// Every host and the network held: the network controls, lossy operations.
    pub(crate) fn all(&self) -> FabricState<'_> {
        let mut st = self.state();
        st.hold_all();
        st
    }

    /// The network alone (its clock), no host.
    pub(crate) fn net(&self) -> MutexGuard<'_, Net> {
        self.net.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cold]
#[inline(never)]
fn no_host(h: usize) -> ! {
    panic!("mlx5-sim: host {h} does not exist (engine bug)")
}

#[cold]
#[inline(never)]
fn not_held(h: usize) -> ! {
    panic!("mlx5-sim: host {h} used without its lock (engine bug)")
}

/// The hosts an operation holds; indexed by host number like the `Vec` it replaces.
/// Indexing a host it does not hold is an engine bug and panics.
///
/// `home_p` / `other_p` point at the hosts `home` / `other` (or are unused when those
/// are [`NONE`]); they stay valid while the guard of their lock (or `one_g`, or `all`)
/// is kept, and no other thread reaches those hosts meanwhile.
pub(crate) struct Held<'a> {
    shared: &'a Shared,
    home: usize,
    home_p: *mut Host,
    other: usize,
    other_p: *mut Host,
    /// Every host may be reached (the one lock, or every host's lock, is held).
    any: bool,
    /// A host other than home and other was reached (`any`): its sessions are written
    /// when the operation ends.
    wide: Cell<bool>,
    /// Home's lock, or (deterministic mode) the one lock.
    home_g: Option<MutexGuard<'a, ()>>,
    other_g: Option<MutexGuard<'a, ()>>,
    /// Every host's lock, in order (the network model running, with a lock per host).
    #[allow(clippy::box_collection)] // one pointer to test and drop on the common path
    all: Option<Box<Vec<MutexGuard<'a, ()>>>>,
    /// [`Shared::try_host`]: another host is only ever tried.
    nowait: bool,
    /// A host was busy under `nowait`: the WQE that needed it was left undone.
    deferred: bool,
}

impl Held<'_> {
    /// Every host, when all are held (the network controls).
    pub(crate) fn all(&self) -> impl Iterator<Item = &Host> + '_ {
        debug_assert!(self.any);
        (0..self.shared.len()).map(|h| &self[h])
    }

    #[cold]
    fn far(&self, h: usize) -> *mut Host {
        if !self.any {
            not_held(h);
        }
        self.wide.set(true);
        self.shared.cell(h).host.get()
    }

    /// Writes the sessions of host `p` (held).
    #[inline(always)]
    fn flush(p: *mut Host) {
        // SAFETY: the caller holds the host (see `Held`).
        let h = unsafe { &mut *p };
        if !h.dirty.is_empty() {
            flush_sessions(h);
        }
    }

    /// Lets the remote host go (its sessions written first).
    #[inline]
    fn drop_other(&mut self) {
        if self.other != NONE {
            Self::flush(self.other_p);
            self.other = NONE;
            self.other_g = None;
        }
    }

    /// Lets home go (its sessions written first).
    #[inline]
    fn drop_home(&mut self) {
        if self.home != NONE {
            Self::flush(self.home_p);
            self.home_g = None;
        }
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        // Every session written while everything is still held.
        if self.wide.get() {
            let n = match &self.all {
                Some(all) => all.len(),
                None => self.shared.len(),
            };
            for h in 0..n {
                Self::flush(self.shared.cell(h).host.get());
            }
        }
        self.drop_other();
        self.drop_home();
    }
}

impl Held<'_> {
    /// Host `h`, which this operation holds (else an engine bug: panics).
    #[inline(always)]
    fn ptr(&self, h: usize) -> *mut Host {
        if h == self.home {
            self.home_p
        } else if h == self.other {
            self.other_p
        } else {
            self.far(h)
        }
    }
}

impl std::ops::Index<usize> for Held<'_> {
    type Output = Host;
    #[inline]
    fn index(&self, h: usize) -> &Host {
        let p = self.ptr(h);
        // SAFETY: a host this operation holds (see `Held`).
        unsafe { &*p }
    }
}

impl std::ops::IndexMut<usize> for Held<'_> {
    #[inline]
    fn index_mut(&mut self, h: usize) -> &mut Host {
        let p = self.ptr(h);
        // SAFETY: a host this operation holds, borrowed through `&mut self` (see `Held`).
        unsafe { &mut *p }
    }
}

/// The network, held while the network model runs.
pub(crate) struct NetRef<'a>(Option<MutexGuard<'a, Net>>);

impl std::ops::Deref for NetRef<'_> {
    type Target = Net;
    fn deref(&self) -> &Net {
        self.0.as_deref().unwrap_or_else(|| net_not_held())
    }
}

impl std::ops::DerefMut for NetRef<'_> {
    fn deref_mut(&mut self) -> &mut Net {
        self.0.as_deref_mut().unwrap_or_else(|| net_not_held())
    }
}

#[cold]
#[inline(never)]
fn net_not_held() -> ! {
    panic!("mlx5-sim: the network model used without its lock (engine bug)")
}

/// The hosts a WQE needed were taken again in order: start the WQE afresh.
#[derive(Debug)]
pub(crate) struct Restart;

/// What an operation holds: the fabric's configuration, its hosts, the network.
pub(crate) struct FabricState<'a> {
    pub cfg: &'a FabricConfig,
    pub hosts: Held<'a>,
    pub net: NetRef<'a>,
}

impl std::fmt::Debug for FabricState<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricState").field("home", &self.hosts.home).finish_non_exhaustive()
    }
}

/// A host found by its address: its number and cell.
#[derive(Clone, Copy)]
pub(crate) struct Found<'a> {
    pub h: usize,
    cell: &'a HostCell,
}

impl<'a> FabricState<'a> {
    /// Whether an RC WQE of a lean shape may take the lean path ([`crate::lean`]): unless
    /// the fabric was built without it.
    #[inline]
    pub(crate) fn lean_path(&self) -> bool {
        !self.cfg.general_path_only
    }

    /// Whether the network model runs (faults or a capture): packets, simulated time.
    #[inline]
    pub(crate) fn lossy(&self) -> bool {
        self.net.0.as_ref().is_some_and(|n| n.active())
    }

    /// The first host whose address passes `f` and that is up (a look without its lock).
    #[inline]
    pub(crate) fn find_host(&self, mut f: impl FnMut(&Addr) -> bool) -> Option<Found<'a>> {
        let shared: &'a Shared = self.hosts.shared;
        shared.cells.find(|c| f(&c.addr) && c.up()).map(|(h, cell)| Found { h, cell })
    }

    /// Whether a WQE was left undone because a host it needed was busy (operations of
    /// [`Shared::try_host`] only).
    #[inline]
    pub(crate) fn deferred(&self) -> bool {
        self.hosts.deferred
    }

    /// Whether this operation runs in the thread that rang the doorbell
    /// ([`Shared::try_host`]; deterministic mode's run in the poster's thread holds the
    /// one lock instead and answers false).
    #[inline]
    pub(crate) fn nowait(&self) -> bool {
        self.hosts.nowait
    }

    /// The current epoch of what [`FabricState::find_host`] sees: a host it found in an
    /// epoch that is still current is the one it would find again.
    #[inline]
    pub(crate) fn addr_epoch(&self) -> u64 {
        self.hosts.shared.addr_epoch.load(Ordering::Acquire)
    }

    /// Host `h` as [`FabricState::find_host`] found it before (`h` < the host count).
    #[inline]
    pub(crate) fn found(&self, h: usize) -> Found<'a> {
        let shared: &'a Shared = self.hosts.shared;
        Found { h, cell: shared.cell(h) }
    }

    /// Holds host `t` (found by [`FabricState::find_host`]) too. `Err(Restart)`: `t` was
    /// busy and numbered below home, so both were let go and taken again in order; what
    /// the caller read from home may have changed, and nothing of the WQE may have been
    /// done yet. Under [`Shared::try_host`]: `t` was busy, home is still held, and the
    /// caller must leave the WQE undone ([`FabricState::deferred`]).
    #[inline]
    pub(crate) fn need(&mut self, t: Found<'a>) -> Result<(), Restart> {
        let held = &mut self.hosts;
        if t.h == held.home || t.h == held.other {
            return Ok(());
        }
        if held.any && held.other == NONE {
            // Every host is held already (deterministic mode's one lock).
            held.other = t.h;
            held.other_p = t.cell.host.get();
            return Ok(());
        }
        self.need_new(t.h, t.cell)
    }

    fn need_new(&mut self, t: usize, cell: &'a HostCell) -> Result<(), Restart> {
        let held = &mut self.hosts;
        // The previous remote host's part of the work is complete.
        held.drop_other();
        let shared = held.shared;
        if held.any {
            // Every host is held already.
            held.other = t;
            held.other_p = cell.host.get();
            return Ok(());
        }
        let g = if held.nowait {
            match cell.lock.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    held.deferred = true;
                    return Err(Restart);
                }
            }
        } else if t > held.home {
            lock(&cell.lock)
        } else {
            match cell.lock.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    // SAFETY: home is held.
                    unsafe { (*held.home_p).stats.lock_restarts += 1 };
                    held.drop_home();
                    let g = lock(&cell.lock);
                    held.other_g = Some(g);
                    held.other = t;
                    held.other_p = cell.host.get();
                    held.home_g = Some(lock(&shared.cell(held.home).lock));
                    if shared.lossy.load(Ordering::Acquire) {
                        self.hold_all();
                    }
                    return Err(Restart);
                }
            }
        };
        held.other_g = Some(g);
        held.other = t;
        held.other_p = cell.host.get();
        Ok(())
    }

    /// Holds every host (in order, letting go of what is held first, unless the one lock
    /// covers them) and the network.
    fn hold_all(&mut self) {
        let held = &mut self.hosts;
        match &held.shared.one {
            Some(one) => {
                if held.home_g.is_none() {
                    held.home_g = Some(lock(one));
                }
            }
            None => {
                held.drop_other();
                held.drop_home();
                held.home = NONE;
                held.all = Some(Box::new(held.shared.cells().map(|c| lock(&c.lock)).collect()));
            }
        }
        held.any = true;
        self.net = NetRef(Some(held.shared.net()));
    }

    /// After a change of the network's faults or capture (every host held): whether
    /// operations from now on run the network model.
    pub(crate) fn net_changed(&mut self) {
        let active = self.net.active();
        self.hosts.shared.lossy.store(active, Ordering::Release);
    }

    /// After host `h`'s port or device state changed (it is held): publishes whether it
    /// is reachable to those who look without its lock.
    pub(crate) fn set_reachable(&mut self, h: usize) {
        let up = self.hosts[h].reachable();
        self.hosts.shared.cell(h).up.store(up, Ordering::Release);
        self.hosts.shared.addr_epoch.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostConfig;
    use std::sync::Arc;

    fn at(s: &Shared, h: usize) -> Found<'_> {
        Found { h, cell: s.cell(h) }
    }

    /// A fabric of `n` hosts with a lock each (the modes with NIC threads; none is
    /// started here).
    fn fabric(n: usize) -> Arc<Shared> {
        let cfg = FabricConfig { mode: ExecMode::Threaded, ..Default::default() };
        let s = Arc::new(Shared::new(cfg, Net::default()));
        for i in 0..n {
            s.push(Host::new(i, HostConfig::infiniband(&format!("h{i}"), i as u16 + 1)));
        }
        s
    }

    #[test]
    fn an_operation_holds_home_and_the_hosts_it_needs() {
        let s = fabric(3);
        let mut st = s.host(1);
        st.hosts[1].clock = 5;
        assert!(st.need(at(&s, 2)).is_ok());
        st.hosts[2].clock = 6;
        // Host 0 is free: taken without letting home go; host 2 is let go for it.
        assert!(st.need(at(&s, 0)).is_ok());
        assert_eq!(st.hosts[1].clock, 5);
        assert!(s.cell(2).lock.try_lock().is_ok());
        assert!(s.cell(0).lock.try_lock().is_err());
        drop(st);
        assert!(s.cells().all(|c| c.lock.try_lock().is_ok()));
    }

    #[test]
    fn a_busy_lower_host_is_taken_after_home_is_let_go() {
        let s = fabric(2);
        let (tx, rx) = std::sync::mpsc::channel();
        let (tx1, rx1) = std::sync::mpsc::channel();
        std::thread::scope(|sc| {
            let s = &s;
            let holder = sc.spawn(move || {
                let mut st = s.host(0);
                tx.send(()).unwrap();
                rx1.recv().unwrap();
                // The other operation (at home on 1) lets 1 go while it waits for 0.
                let start = std::time::Instant::now();
                while s.cell(1).lock.try_lock().is_err() {
                    assert!(start.elapsed().as_secs() < 30, "home was never let go");
                    std::thread::yield_now();
                }
                st.hosts[0].clock = 7;
            });
            rx.recv().unwrap();
            let mut st = s.host(1);
            st.hosts[1].clock = 3;
            tx1.send(()).unwrap();
            assert!(st.need(at(s, 0)).is_err(), "host 0 was busy: a restart");
            // Both held now, in order; what the holder wrote is there.
            assert_eq!((st.hosts[0].clock, st.hosts[1].clock, st.hosts[1].stats.lock_restarts), (7, 3, 1));
            assert!(st.need(at(s, 0)).is_ok());
            drop(st);
            holder.join().unwrap();
        });
    }

    #[test]
    #[should_panic(expected = "without its lock")]
    fn a_host_not_held_is_refused() {
        let s = fabric(2);
        let st = s.host(1);
        let _ = st.hosts[0].clock;
    }

    #[test]
    fn a_busy_lower_host_restarts_in_order_and_never_deadlocks() {
        // Two threads, each at home on one host and needing the other, many times: with
        // the order rule both finish, and a restart always comes back holding both.
        let s = fabric(2);
        // A lock-order bug would hang the test rather than fail it.
        let (done, watch) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                watch.recv_timeout(std::time::Duration::from_secs(120))
            {
                eprintln!("deadlocked");
                std::process::exit(101);
            }
        });
        let restarts = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads: Vec<_> = (0..2)
            .map(|home| {
                let (s, restarts) = (Arc::clone(&s), Arc::clone(&restarts));
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut st = s.host(home);
                        let other = 1 - home;
                        if st.need(at(&s, other)).is_err() {
                            restarts.fetch_add(1, Ordering::Relaxed);
                            assert!(st.need(at(&s, other)).is_ok());
                        }
                        st.hosts[home].clock += 1;
                        st.hosts[other].clock += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let st = s.all();
        assert_eq!(st.hosts[0].clock + st.hosts[1].clock, 80_000);
        drop(done);
    }
}
