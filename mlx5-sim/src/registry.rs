//! A device's registry shared by the processes that open it (step 12, `docs/udp-wire.md`):
//! number allocators for QPs, CQs, SRQs, PDs and memory keys, so that two processes
//! simulating the same device never hand out the same number, and the owner of each number
//! (its process and the UDP endpoint its packets go to), so that a packet for a QPN reaches
//! the process that owns it.
//!
//! It is one file (in `/dev/shm` unless `MLX5_SIM_REGISTRY_DIR` says otherwise) mapped
//! shared by every process, and every operation holds an exclusive `flock` on it: the
//! kernel lets the lock go when its holder dies, so a killed process never blocks the
//! others. A process is known by its pid and its start time (`/proc/PID/stat`, field 22),
//! so a pid the kernel reuses is a different owner: entries of owners that are gone are
//! reclaimed when their numbers are needed, and a later run never trips over them.
//!
//! Each kind of number has its own table of [`SLOTS`] slots; number `n` lives in slot
//! `n % SLOTS`, so a lookup is one index and one compare, and a number is handed out only
//! when its slot is free (or held by an owner that is gone).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Slots per kind of number.
pub const SLOTS: usize = 4096;

const MAGIC: u64 = u64::from_le_bytes(*b"MLX5SREG");
const VERSION: u32 = 1;

/// A kind of number the registry hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// QP numbers (24 bits).
    Qp = 0,
    /// CQ numbers (24 bits).
    Cq = 1,
    /// SRQ numbers (24 bits).
    Srq = 2,
    /// Protection domains (24 bits).
    Pd = 3,
    /// Memory keys (32 bits).
    MKey = 4,
}

const KINDS: usize = 5;

impl Kind {
    /// The numbers of this kind: from `first` up to and including `last`. Memory keys
    /// start above 0x100, which mlx5 reserves as the invalid lkey that ends a receive
    /// WQE's scatter list (spec §4.2; `MLX5_INVALID_LKEY`).
    fn range(self) -> (u32, u32) {
        match self {
            Kind::MKey => (0x1000, u32::MAX),
            _ => (0x100, 0xff_ffff),
        }
    }
}

/// Where the owner of a number receives its packets: an IPv4 address and a UDP port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Endpoint {
    /// IPv4 address (on the loopback: 127.0.0.0/8).
    pub addr: [u8; 4],
    /// UDP port.
    pub port: u16,
}

/// A process, as the registry knows it: pid and start time (clock ticks after boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// Start time, field 22 of `/proc/PID/stat`.
    pub start: u64,
}

impl Owner {
    /// The calling process.
    pub fn me() -> io::Result<Owner> {
        let pid = std::process::id();
        Ok(Owner { pid, start: start_time(pid)?.ok_or_else(|| io::Error::other("no /proc/self/stat"))? })
    }

    /// Whether this process is still running (the same pid with the same start time).
    pub fn alive(&self) -> bool {
        matches!(start_time(self.pid), Ok(Some(s)) if s == self.start)
    }
}

/// Field 22 of `/proc/PID/stat` (the process's start time); `None` when there is no such
/// process.
fn start_time(pid: u32) -> io::Result<Option<u64>> {
    let s = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    // The command name (field 2) is in parentheses and may hold spaces: count from
    // after its closing one. Field 3 is the first after it; field 22 the 20th.
    let after = s.rfind(')').map(|i| &s[i + 1..]).ok_or_else(|| io::Error::other("bad /proc stat"))?;
    let f = after.split_whitespace().nth(19).ok_or_else(|| io::Error::other("short /proc stat"))?;
    f.parse().map(Some).map_err(|_| io::Error::other("bad start time"))
}

/// What the registry holds for a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The number.
    pub number: u32,
    /// The process that holds it.
    pub owner: Owner,
    /// Where its packets go.
    pub endpoint: Endpoint,
}

/// A registry operation that could not be done.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry file could not be created, opened, mapped or locked.
    #[error("registry file: {0}")]
    Io(#[from] io::Error),
    /// The file is not a registry of this version.
    #[error("{} is not a version {VERSION} registry", .0.display())]
    Foreign(PathBuf),
    /// Every slot of this kind is held by a running process.
    #[error("no free {0:?} number: {SLOTS} are held by running processes")]
    Full(Kind),
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Slot {
    /// The number held, 0 when the slot is free.
    number: u32,
    pid: u32,
    start: u64,
    addr: [u8; 4],
    port: u16,
    _pad: [u8; 10],
}

#[repr(C)]
struct Table {
    magic: u64,
    version: u32,
    slots_per_kind: u32,
    /// Per kind, the number to try first.
    next: [u32; KINDS],
    _pad: u32,
    slots: [[Slot; SLOTS]; KINDS],
}

/// A device's registry, mapped.
#[derive(Debug)]
pub struct Registry {
    file: File,
    path: PathBuf,
    table: *mut Table,
    me: Owner,
}

// SAFETY: the mapping is only touched under the file's exclusive lock (`locked`), which
// serialises every thread of every process.
unsafe impl Send for Registry {}
// SAFETY: as for Send.
unsafe impl Sync for Registry {}

impl Drop for Registry {
    fn drop(&mut self) {
        // SAFETY: `table` is the mapping `open` made, of this size; nothing refers to it.
        unsafe { libc::munmap(self.table.cast(), std::mem::size_of::<Table>()) };
    }
}

/// Holds the registry's lock; let go on drop.
struct Locked<'a> {
    r: &'a Registry,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: an fd we own.
        unsafe { libc::flock(self.r.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Locked<'_> {
    fn table(&mut self) -> &mut Table {
        // SAFETY: the mapping is valid for the registry's life, and the exclusive lock
        // makes this the only access to it in any process until the guard drops.
        unsafe { &mut *self.r.table }
    }
}

impl Registry {
    /// The registry file of device `name` for this user: in `MLX5_SIM_REGISTRY_DIR`, or
    /// else `/dev/shm`.
    pub fn path_of(name: &str) -> PathBuf {
        let dir = std::env::var_os("MLX5_SIM_REGISTRY_DIR")
            .map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from);
        Self::path_in(&dir, name)
    }

    /// The registry file of device `name` in directory `dir` (the user's own).
    pub fn path_in(dir: &Path, name: &str) -> PathBuf {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        dir.join(format!("mlx5-sim-{uid}-{name}"))
    }

    /// Opens the registry at `path`, creating it (empty) if there is none.
    pub fn open(path: &Path) -> Result<Registry, RegistryError> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let size = std::mem::size_of::<Table>();
        // SAFETY: an fd we own; the lock is let go below or by `Locked`.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        let fresh = file.metadata()?.len() == 0;
        let r = (|| {
            if fresh {
                file.set_len(size as u64)?;
            } else if file.metadata()?.len() != size as u64 {
                return Err(RegistryError::Foreign(path.to_path_buf()));
            }
            // SAFETY: mapping `size` bytes of a file that has them, shared.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error().into());
            }
            let table = p.cast::<Table>();
            // SAFETY: the mapping just made; we hold the lock. A new file is zeros.
            let t = unsafe { &mut *table };
            if fresh {
                t.magic = MAGIC;
                t.version = VERSION;
                t.slots_per_kind = SLOTS as u32;
                for k in [Kind::Qp, Kind::Cq, Kind::Srq, Kind::Pd, Kind::MKey] {
                    t.next[k as usize] = k.range().0;
                }
            } else if t.magic != MAGIC || t.version != VERSION || t.slots_per_kind != SLOTS as u32 {
                // SAFETY: the mapping just made.
                unsafe { libc::munmap(p, size) };
                return Err(RegistryError::Foreign(path.to_path_buf()));
            }
            Ok(table)
        })();
        // SAFETY: an fd we own.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
        let table = r?;
        Ok(Registry { file, path: path.to_path_buf(), table, me: Owner::me()? })
    }

    fn locked(&self) -> Result<Locked<'_>, RegistryError> {
        // SAFETY: an fd we own.
        if unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(Locked { r: self })
    }

    /// The process this registry's numbers are taken for (the calling one).
    pub fn me(&self) -> Owner {
        self.me
    }

    /// The registry file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new number of `kind` for this process, whose packets go to `endpoint`: the first
    /// at or after the kind's counter whose slot is free or held by a process that is gone
    /// (its entry is then reclaimed).
    pub fn alloc(&self, kind: Kind, endpoint: Endpoint) -> Result<u32, RegistryError> {
        let mut g = self.locked()?;
        let me = self.me;
        let t = g.table();
        let (first, last) = kind.range();
        let mut n = t.next[kind as usize].clamp(first, last);
        let mut alive = std::collections::HashMap::new();
        for _ in 0..SLOTS {
            let slot = &mut t.slots[kind as usize][n as usize % SLOTS];
            let free = slot.number == 0 || {
                let o = Owner { pid: slot.pid, start: slot.start };
                !*alive.entry(o).or_insert_with(|| o.alive())
            };
            if free {
                *slot = Slot {
                    number: n,
                    pid: me.pid,
                    start: me.start,
                    addr: endpoint.addr,
                    port: endpoint.port,
                    _pad: [0; 10],
                };
                t.next[kind as usize] = if n == last { first } else { n + 1 };
                return Ok(n);
            }
            n = if n == last { first } else { n + 1 };
        }
        Err(RegistryError::Full(kind))
    }

    /// Gives back number `number` of `kind`, if this process holds it. False otherwise.
    pub fn free(&self, kind: Kind, number: u32) -> Result<bool, RegistryError> {
        let mut g = self.locked()?;
        let me = self.me;
        let slot = &mut g.table().slots[kind as usize][number as usize % SLOTS];
        if slot.number != number || slot.pid != me.pid || slot.start != me.start {
            return Ok(false);
        }
        slot.number = 0;
        Ok(true)
    }

    /// Who holds number `number` of `kind`, if a running process does (an entry of an
    /// owner that is gone is reclaimed here).
    pub fn owner(&self, kind: Kind, number: u32) -> Result<Option<Entry>, RegistryError> {
        let mut g = self.locked()?;
        let slot = &mut g.table().slots[kind as usize][number as usize % SLOTS];
        if slot.number != number || number == 0 {
            return Ok(None);
        }
        let owner = Owner { pid: slot.pid, start: slot.start };
        if !owner.alive() {
            slot.number = 0;
            return Ok(None);
        }
        Ok(Some(Entry { number, owner, endpoint: Endpoint { addr: slot.addr, port: slot.port } }))
    }

    /// Gives back every number this process holds (a clean exit; a process that dies
    /// without it is reclaimed as its numbers are needed).
    pub fn free_all(&self) -> Result<usize, RegistryError> {
        let mut g = self.locked()?;
        let me = self.me;
        let mut n = 0;
        for kind in g.table().slots.iter_mut() {
            for s in kind.iter_mut() {
                if s.number != 0 && s.pid == me.pid && s.start == me.start {
                    s.number = 0;
                    n += 1;
                }
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("mlx5-sim-reg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// A fresh registry's memory keys are never 0x100, the lkey that ends a receive
    /// scatter list (spec §4.2): a key of 0x100 made an MR's receives and atomic results
    /// vanish (found by the UDP wire's stream test).
    #[test]
    fn memory_keys_are_never_the_invalid_lkey() {
        let p = scratch("mkeys");
        let r = Registry::open(&p).unwrap();
        let ep = Endpoint::default();
        let keys: Vec<u32> = (0..300).map(|_| r.alloc(Kind::MKey, ep).unwrap()).collect();
        assert!(keys.iter().all(|&k| k != 0x100 && k != 0), "{keys:x?}");
        assert!(keys.iter().all(|&k| k >= 0x1000));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn my_start_time_is_my_own_and_a_missing_pid_is_gone() {
        let me = Owner::me().unwrap();
        assert!(me.alive());
        assert!(!Owner { start: me.start + 1, ..me }.alive(), "same pid, other start: another process");
        assert!(!Owner { pid: u32::MAX - 1, start: 1 }.alive());
    }

    #[test]
    fn numbers_are_unique_owned_and_given_back() {
        let path = scratch("unique");
        let r = Registry::open(&path).unwrap();
        let ep = Endpoint { addr: [127, 0, 0, 1], port: 4791 };
        let qpns: Vec<u32> = (0..10).map(|_| r.alloc(Kind::Qp, ep).unwrap()).collect();
        assert_eq!(qpns, (0x100..0x10a).collect::<Vec<_>>());
        // Another kind counts on its own.
        assert_eq!(r.alloc(Kind::Cq, ep).unwrap(), 0x100);
        let e = r.owner(Kind::Qp, 0x105).unwrap().unwrap();
        assert_eq!((e.owner, e.endpoint), (Owner::me().unwrap(), ep));
        assert!(r.owner(Kind::Qp, 0x10a).unwrap().is_none());
        assert!(r.free(Kind::Qp, 0x105).unwrap());
        assert!(!r.free(Kind::Qp, 0x105).unwrap(), "freed once");
        assert!(r.owner(Kind::Qp, 0x105).unwrap().is_none());
        // A second opening of the same file shares the numbers.
        let r2 = Registry::open(&path).unwrap();
        assert_eq!(r2.alloc(Kind::Qp, ep).unwrap(), 0x10a);
        assert_eq!(r.free_all().unwrap(), 11, "ten QPNs less one, one CQN, and r2's");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_slot_held_is_skipped_and_the_counter_wraps() {
        let path = scratch("wrap");
        let r = Registry::open(&path).unwrap();
        let ep = Endpoint::default();
        let a = r.alloc(Kind::Srq, ep).unwrap();
        // Move the counter to the number one lap of the table later: same slot, held.
        {
            let mut g = r.locked().unwrap();
            g.table().next[Kind::Srq as usize] = a + SLOTS as u32;
        }
        assert_eq!(r.alloc(Kind::Srq, ep).unwrap(), a + SLOTS as u32 + 1);
        // At the end of the range the counter wraps to the first number.
        {
            let mut g = r.locked().unwrap();
            g.table().next[Kind::Srq as usize] = 0xff_ffff;
        }
        assert_eq!(r.alloc(Kind::Srq, ep).unwrap(), 0xff_ffff);
        // 0x100 and 0x101 find their slots held (by 0x100 and 0x1101).
        assert_eq!(r.alloc(Kind::Srq, ep).unwrap(), 0x102);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_file_that_is_not_a_registry_is_refused() {
        let path = scratch("foreign");
        std::fs::write(&path, b"not a registry").unwrap();
        assert!(matches!(Registry::open(&path), Err(RegistryError::Foreign(_))));
        let _ = std::fs::remove_file(&path);
    }
}
