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
//! With the network model running (faults or a capture) the fabric is one simulation on
//! one simulated clock: an operation then holds every host, in order, and the network
//! ([`Shared::all`]).
//!
//! Releasing a host ends its burst: its compressed CQE sessions are written then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::engine::Host;
use crate::net::Net;
use crate::slots::Slots;
use crate::{FabricConfig, LinkLayer};

/// Where packets find a host: from its configuration, which never changes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr {
    pub link_layer: LinkLayer,
    pub lid: u16,
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

/// One host behind its lock.
pub(crate) struct HostCell {
    host: Mutex<Host>,
    pub addr: Addr,
    /// [`Host::reachable`], readable without the host's lock: stored by whoever changes
    /// it, under the lock ([`FabricState::set_reachable`]).
    up: AtomicBool,
}

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
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("hosts", &self.cells.len()).finish_non_exhaustive()
    }
}

fn lock_host(c: &HostCell) -> HostGuard<'_> {
    HostGuard(c.host.lock().unwrap_or_else(|e| e.into_inner()))
}

impl Shared {
    pub(crate) fn new(cfg: FabricConfig, net: Net) -> Shared {
        Shared { cfg, cells: Slots::new(), lossy: AtomicBool::new(net.active()), net: Mutex::new(net) }
    }

    /// Hosts added so far.
    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }

    /// Host `h`'s cell (`h` < [`Shared::len`]).
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
        self.cells.push(HostCell { host: Mutex::new(host), addr, up })
    }

    /// An operation on host `h`: `h` held (every host and the network, when the network
    /// model runs).
    pub(crate) fn host(&self, h: usize) -> FabricState<'_> {
        let g = lock_host(self.cell(h));
        let mut st = FabricState {
            cfg: &self.cfg,
            hosts: Held { shared: self, home: h, home_g: Some(g), other: None, all: Vec::new() },
            net: NetRef(None),
        };
        if self.lossy.load(Ordering::Acquire) {
            st.hold_all();
        }
        st
    }

    /// Every host and the network held: the network controls, lossy operations.
    pub(crate) fn all(&self) -> FabricState<'_> {
        let mut st = FabricState {
            cfg: &self.cfg,
            hosts: Held { shared: self, home: usize::MAX, home_g: None, other: None, all: Vec::new() },
            net: NetRef(None),
        };
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

/// A held host. Letting it go ends its burst: compressed sessions gathered while it was
/// held are written then.
pub(crate) struct HostGuard<'a>(MutexGuard<'a, Host>);

impl Drop for HostGuard<'_> {
    fn drop(&mut self) {
        crate::engine::flush_sessions(&mut self.0);
    }
}

/// The hosts an operation holds; indexed by host number like the `Vec` it replaces.
/// Indexing a host it does not hold is an engine bug and panics.
pub(crate) struct Held<'a> {
    shared: &'a Shared,
    home: usize,
    home_g: Option<HostGuard<'a>>,
    other: Option<(usize, HostGuard<'a>)>,
    /// Every host, by number (network model running, or a fabric-wide control).
    all: Vec<HostGuard<'a>>,
}

impl Held<'_> {
    /// Every host, when all are held (else empty).
    pub(crate) fn all(&self) -> impl Iterator<Item = &Host> + '_ {
        self.all.iter().map(|g| &*g.0)
    }

    fn holds(&self, h: usize) -> bool {
        (h == self.home && self.home_g.is_some())
            || self.other.as_ref().is_some_and(|(o, _)| *o == h)
            || h < self.all.len()
    }
}

impl std::ops::Index<usize> for Held<'_> {
    type Output = Host;
    #[inline]
    fn index(&self, h: usize) -> &Host {
        if h == self.home {
            if let Some(g) = &self.home_g {
                return &g.0;
            }
        }
        if let Some((o, g)) = &self.other {
            if *o == h {
                return &g.0;
            }
        }
        match self.all.get(h) {
            Some(g) => &g.0,
            None => not_held(h),
        }
    }
}

impl std::ops::IndexMut<usize> for Held<'_> {
    #[inline]
    fn index_mut(&mut self, h: usize) -> &mut Host {
        if h == self.home {
            if let Some(g) = &mut self.home_g {
                return &mut g.0;
            }
        }
        if let Some((o, g)) = &mut self.other {
            if *o == h {
                return &mut g.0;
            }
        }
        match self.all.get_mut(h) {
            Some(g) => &mut g.0,
            None => not_held(h),
        }
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

impl FabricState<'_> {
    /// Whether the network model runs (faults or a capture): packets, simulated time.
    #[inline]
    pub(crate) fn lossy(&self) -> bool {
        self.net.0.as_ref().is_some_and(|n| n.active())
    }

    /// The host cells, for finding a host by its address without its lock.
    pub(crate) fn cells(&self) -> impl Iterator<Item = &HostCell> + '_ {
        self.hosts.shared.cells()
    }

    /// Holds host `t` too. `Err(Restart)`: `t` was busy and numbered below home, so both
    /// were let go and taken again in order; what the caller read from home may have
    /// changed, and nothing of the WQE may have been done yet.
    pub(crate) fn need(&mut self, t: usize) -> Result<(), Restart> {
        let held = &mut self.hosts;
        if held.holds(t) {
            return Ok(());
        }
        let shared = held.shared;
        if !held.all.is_empty() {
            // Hosts added since all were taken: numbered above every one held.
            while held.all.len() <= t {
                let g = lock_host(shared.cell(held.all.len()));
                held.all.push(g);
            }
            return Ok(());
        }
        // The previous remote host's part of the work is complete.
        held.other = None;
        let cell = shared.cell(t);
        if t > held.home {
            held.other = Some((t, lock_host(cell)));
            return Ok(());
        }
        match cell.host.try_lock() {
            Ok(g) => {
                held.other = Some((t, HostGuard(g)));
                Ok(())
            }
            Err(TryLockError::Poisoned(e)) => {
                held.other = Some((t, HostGuard(e.into_inner())));
                Ok(())
            }
            Err(TryLockError::WouldBlock) => {
                if let Some(g) = &mut held.home_g {
                    g.0.stats.lock_restarts += 1;
                }
                held.home_g = None;
                let g = lock_host(cell);
                held.other = Some((t, g));
                held.home_g = Some(lock_host(shared.cell(held.home)));
                if shared.lossy.load(Ordering::Acquire) {
                    self.hold_all();
                }
                Err(Restart)
            }
        }
    }

    /// Lets go of what is held, then takes every host in order and the network.
    fn hold_all(&mut self) {
        let held = &mut self.hosts;
        held.other = None;
        held.home_g = None;
        held.all.clear();
        for c in held.shared.cells() {
            held.all.push(lock_host(c));
        }
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostConfig;
    use std::sync::Arc;

    fn fabric(n: usize) -> Arc<Shared> {
        let s = Arc::new(Shared::new(FabricConfig::default(), Net::default()));
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
        assert!(st.need(2).is_ok());
        st.hosts[2].clock = 6;
        // Host 0 is free: taken without letting home go; host 2 is let go for it.
        assert!(st.need(0).is_ok());
        assert_eq!(st.hosts[1].clock, 5);
        assert!(s.cell(2).host.try_lock().is_ok());
        assert!(s.cell(0).host.try_lock().is_err());
        drop(st);
        assert!(s.cells().all(|c| c.host.try_lock().is_ok()));
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
                while s.cell(1).host.try_lock().is_err() {
                    assert!(start.elapsed().as_secs() < 30, "home was never let go");
                    std::thread::yield_now();
                }
                st.hosts[0].clock = 7;
            });
            rx.recv().unwrap();
            let mut st = s.host(1);
            st.hosts[1].clock = 3;
            tx1.send(()).unwrap();
            assert!(st.need(0).is_err(), "host 0 was busy: a restart");
            // Both held now, in order; what the holder wrote is there.
            assert_eq!((st.hosts[0].clock, st.hosts[1].clock, st.hosts[1].stats.lock_restarts), (7, 3, 1));
            assert!(st.need(0).is_ok());
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
        let restarts = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads: Vec<_> = (0..2)
            .map(|home| {
                let (s, restarts) = (Arc::clone(&s), Arc::clone(&restarts));
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut st = s.host(home);
                        let other = 1 - home;
                        if st.need(other).is_err() {
                            restarts.fetch_add(1, Ordering::Relaxed);
                            assert!(st.need(other).is_ok());
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
    }
}
