//! Which descriptors are command fds: those the program opened as
//! `/dev/infiniband/uverbsN` (a `/dev/zero` descriptor each), and their
//! duplicates (`dup`, `dup2`, `dup3`, `fcntl(F_DUPFD)`), which name the same
//! file and so the same context, as in the kernel. The emulated kernel
//! knows a context by its first descriptor, the primary; a duplicate
//! answers for it, and outlives it (the context moves to a duplicate when
//! the primary closes first).

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::Mutex;

/// Descriptors below this are tracked (a larger one is refused at open).
pub(crate) const MAX_FD: usize = 4096;

/// Per descriptor: 0, or the device index + 1 of a command fd.
static DEV: [AtomicU8; MAX_FD] = [const { AtomicU8::new(0) }; MAX_FD];
/// Per descriptor: the primary descriptor + 1 of a duplicate, else 0.
static PRIMARY: [AtomicI32; MAX_FD] = [const { AtomicI32::new(0) }; MAX_FD];
/// Serialises duplication and closing (the lookups stay lock-free).
static LOCK: Mutex<()> = Mutex::new(());

fn slot(fd: c_int) -> Option<usize> {
    usize::try_from(fd).ok().filter(|&i| i < MAX_FD)
}

/// The device a command fd (or a duplicate of one) belongs to.
pub(crate) fn dev_of(fd: c_int) -> Option<usize> {
    match DEV[slot(fd)?].load(Ordering::Acquire) {
        0 => None,
        d => Some(usize::from(d) - 1),
    }
}

/// The descriptor the emulated kernel knows `fd`'s context by.
pub(crate) fn primary(fd: c_int) -> c_int {
    match slot(fd).map(|i| PRIMARY[i].load(Ordering::Acquire)) {
        Some(p) if p > 0 => p - 1,
        _ => fd,
    }
}

/// `fd` was opened as device `dev`'s command fd; false when it is too
/// large to track.
pub(crate) fn opened(fd: c_int, dev: u8) -> bool {
    let Some(i) = slot(fd) else { return false };
    PRIMARY[i].store(0, Ordering::Release);
    DEV[i].store(dev + 1, Ordering::Release);
    true
}

/// `new` is a duplicate of `old` (which the caller checked is a command
/// fd); false when `new` is too large to track.
pub(crate) fn duplicated(old: c_int, new: c_int) -> bool {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (Some(dev), Some(i)) = (dev_of(old), slot(new)) else { return false };
    PRIMARY[i].store(primary(old) + 1, Ordering::Release);
    DEV[i].store(dev as u8 + 1, Ordering::Release);
    true
}

/// What closing command fd `fd` does to its context.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// A duplicate, or a primary with duplicates: the context stays; with
    /// `Some(to)`, it is known by `to` from now on.
    Stays(Option<c_int>),
    /// The last descriptor of the file: the context goes.
    Last,
}

/// `fd` (a command fd) is being closed: forget it.
pub(crate) fn closing(fd: c_int) -> Closed {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(i) = slot(fd) else { return Closed::Last };
    DEV[i].store(0, Ordering::Release);
    if PRIMARY[i].swap(0, Ordering::AcqRel) > 0 {
        return Closed::Stays(None);
    }
    // A primary: its first duplicate, if any, becomes the primary.
    let Some(to) = (0..MAX_FD).find(|&j| PRIMARY[j].load(Ordering::Acquire) == fd + 1) else {
        return Closed::Last;
    };
    PRIMARY[to].store(0, Ordering::Release);
    for p in &PRIMARY {
        if p.load(Ordering::Acquire) == fd + 1 {
            p.store(to as c_int + 1, Ordering::Release);
        }
    }
    Closed::Stays(Some(to as c_int))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors far from any the test process opens.
    #[test]
    fn duplicates_share_the_context_and_outlive_the_primary() {
        let (a, b, c) = (4000, 4001, 4002);
        assert!(opened(a, 3));
        assert!(duplicated(a, b));
        assert!(duplicated(b, c), "a duplicate of a duplicate names the primary");
        assert_eq!((dev_of(b), primary(b), primary(c)), (Some(3), a, a));
        assert_eq!(closing(a), Closed::Stays(Some(b)), "the context moves to a duplicate");
        assert_eq!((dev_of(a), primary(b), primary(c)), (None, b, b));
        assert_eq!(closing(c), Closed::Stays(None));
        assert_eq!(closing(b), Closed::Last);
        assert_eq!(dev_of(b), None);
        assert!(!opened(MAX_FD as c_int, 0) && !duplicated(a, 4003), "untracked");
    }
}
