//! The emulated uverbs kernel, preloaded by `mlx5_simrun` into an
//! unmodified verbs program: it owns `/dev/infiniband/uverbsN` and answers
//! the uverbs `write()` command ABI as mlx5_ib would (`kern.c`, `objects.c`
//! and `events.c`, against the
//! kernel headers), for the simulated devices `mlx5_simrun` describes in
//! sysfs.
//!
//! The hooks (rdma-core v44 `libibverbs`, read, and the probe in
//! `shared/design/emulated-kernel.md`, run):
//! - `socket(AF_NETLINK, _, NETLINK_RDMA)` fails with `EPROTONOSUPPORT`, so
//!   libibverbs enumerates from sysfs (`SYSFS_PATH`), never a real device;
//! - `open*`, `stat*` and `access` of `/dev/infiniband/uverbsN` go to `/dev/zero`,
//!   whose device number (1:5) the sysfs tree gives: the character-device
//!   check passes, and every core `ioctl` on it fails with `ENOTTY`, which
//!   makes libibverbs use the `write()` command ABI (driver-namespace methods,
//!   which have no `write()` form, answer `EOPNOTSUPP`: see `ioctl_errno`);
//! - `write` on such a descriptor is a command (`kern.c`), `close` ends its
//!   context;
//! - `open*`, `stat*` and `access` of `/sys/class/infiniband*` go to the
//!   launcher's sysfs tree (`SYSFS_PATH`): UCX reads `/sys` itself.
//!
//! Everything else passes through to the next definition (`dlsym(RTLD_NEXT)`).
//! The C entry points are variadic (`open`, `openat`): they are declared
//! here with their fixed arity, which the x86-64 and AArch64 Linux calling
//! conventions pass identically.

#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

mod device;
mod fds;

use fds::dev_of;

const NETLINK_RDMA: c_int = 20;
const UVERBS_PREFIX: &[u8] = b"/dev/infiniband/uverbs";

/// The device index of `/dev/infiniband/uverbsN`, if `path` is one.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn uverbs_index(path: *const c_char) -> Option<u8> {
    if path.is_null() {
        return None;
    }
    // SAFETY: caller contract.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    let n = p.strip_prefix(UVERBS_PREFIX)?;
    std::str::from_utf8(n).ok()?.parse::<u8>().ok().filter(|&i| i < 250)
}

/// `path` moved into the launcher's sysfs tree (`SYSFS_PATH`) when it names the simulated
/// devices' part of the real one (`/sys/class/infiniband*/...`, the RoCE ports' network
/// devices `/sys/class/net/mlx5sim*`): libibverbs reads sysfs through `SYSFS_PATH`, but
/// other programs (UCX) read `/sys` itself.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn sysfs_path(path: *const c_char) -> Option<std::ffi::CString> {
    if path.is_null() {
        return None;
    }
    // SAFETY: caller contract.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    let rest = p.strip_prefix(b"/sys")?;
    if !(rest.starts_with(b"/class/infiniband") || rest.starts_with(b"/class/net/mlx5sim")) {
        return None;
    }
    let root = std::env::var_os("SYSFS_PATH")?;
    let mut out = std::os::unix::ffi::OsStrExt::as_bytes(root.as_os_str()).to_vec();
    out.extend_from_slice(rest);
    std::ffi::CString::new(out).ok()
}

/// The address of the next definition of `name` (the C library's).
fn next_symbol(name: &CStr) -> usize {
    // SAFETY: a NUL-terminated name; RTLD_NEXT finds the definition after
    // this library's.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    assert!(p != 0, "no {name:?} to forward to");
    p
}

/// The next definition of `name` (the C library's), resolved once, as a
/// function of type `$ty`. To be used in an `unsafe` block whose SAFETY
/// comment says the symbol has that C signature.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static F: OnceLock<usize> = OnceLock::new();
        let p = *F
            .get_or_init(|| next_symbol(CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()).unwrap()));
        std::mem::transmute::<usize, $ty>(p)
    }};
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Open `/dev/zero` for device `i` and remember the descriptor.
fn open_device(i: u8, flags: c_int) -> c_int {
    type Open = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
    // SAFETY: the C library's open has this signature; a NUL-terminated
    // path; the flags of the caller's open (no O_CREAT).
    let fd = unsafe { real!("open", Open)(c"/dev/zero".as_ptr(), flags & !libc::O_CREAT, 0) };
    if fd >= 0 && !fds::opened(fd, i) {
        type Close = unsafe extern "C" fn(c_int) -> c_int;
        // SAFETY: the descriptor just opened.
        unsafe { real!("close", Close)(fd) };
        set_errno(libc::EMFILE);
        return -1;
    }
    fd
}

/// `open(2)`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: caller contract (a C string).
    if let Some(i) = unsafe { uverbs_index(path) } {
        return open_device(i, flags);
    }
    // SAFETY: caller contract (a C string).
    let moved = unsafe { sysfs_path(path) };
    let path = moved.as_ref().map_or(path, |c| c.as_ptr());
    type Open = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("open", Open)(path, flags, mode) }
}

/// `open64(2)`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: caller contract (a C string).
    if let Some(i) = unsafe { uverbs_index(path) } {
        return open_device(i, flags);
    }
    // SAFETY: caller contract (a C string).
    let moved = unsafe { sysfs_path(path) };
    let path = moved.as_ref().map_or(path, |c| c.as_ptr());
    type Open = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("open64", Open)(path, flags, mode) }
}

/// `openat(2)`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: caller contract (a C string).
    if let Some(i) = unsafe { uverbs_index(path) } {
        return open_device(i, flags);
    }
    // SAFETY: caller contract (a C string).
    let moved = unsafe { sysfs_path(path) };
    let path = moved.as_ref().map_or(path, |c| c.as_ptr());
    type OpenAt = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("openat", OpenAt)(dirfd, path, flags, mode) }
}

/// `openat64(2)`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: caller contract (a C string).
    if let Some(i) = unsafe { uverbs_index(path) } {
        return open_device(i, flags);
    }
    // SAFETY: caller contract (a C string).
    let moved = unsafe { sysfs_path(path) };
    let path = moved.as_ref().map_or(path, |c| c.as_ptr());
    type OpenAt = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("openat64", OpenAt)(dirfd, path, flags, mode) }
}

/// The fortified `open` (`_FORTIFY_SOURCE`).
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { open(path, flags, 0) }
}

/// The fortified `open64`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { open64(path, flags, 0) }
}

/// `stat(2)`: the device node is `/dev/zero`'s.
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: caller contract (a C string).
    let path = if unsafe { uverbs_index(path) }.is_some() { c"/dev/zero".as_ptr() } else { path };
    // SAFETY: caller contract (a C string).
    let moved = unsafe { sysfs_path(path) };
    let path = moved.as_ref().map_or(path, |c| c.as_ptr());
    type Stat = unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("stat", Stat)(path, buf) }
}

/// `stat64(2)`.
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: caller contract (a C string).
    let path = if unsafe { uverbs_index(path) }.is_some() { c"/dev/zero".as_ptr() } else { path };
    // SAFETY: caller contract (a C string).
    let moved = unsafe { sysfs_path(path) };
    let path = moved.as_ref().map_or(path, |c| c.as_ptr());
    type Stat = unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("stat64", Stat)(path, buf) }
}

/// `access(2)`: a device file is there, readable and writable, as `stat` says (UCX
/// checks it before it opens a device).
///
/// # Safety
/// As `access(2)`.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: caller contract (a C string).
    let path = if unsafe { uverbs_index(path) }.is_some() { c"/dev/zero".as_ptr() } else { path };
    // SAFETY: caller contract (a C string).
    let moved = unsafe { sysfs_path(path) };
    let path = moved.as_ref().map_or(path, |c| c.as_ptr());
    type Access = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("access", Access)(path, mode) }
}

/// `socket(2)`: no NETLINK_RDMA, so that only the simulated devices show.
///
/// # Safety
/// As `socket(2)`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if domain == libc::AF_NETLINK && protocol == NETLINK_RDMA {
        set_errno(libc::EPROTONOSUPPORT);
        return -1;
    }
    type Socket = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("socket", Socket)(domain, ty, protocol) }
}

#[cfg(not(no_kernel_headers))]
extern "C" {
    fn mlx5sk_write(fd: c_int, dev: c_int, buf: *const c_void, len: usize) -> c_int;
    fn mlx5sk_ioctl(fd: c_int, dev: c_int, arg: *mut c_void) -> c_int;
    fn mlx5sk_close(fd: c_int);
    fn mlx5sk_rekey(fd: c_int, to: c_int);
}

/// Built without the kernel headers (or cross-compiled): no command is
/// known, as on a kernel without uverbs.
#[cfg(no_kernel_headers)]
unsafe fn mlx5sk_write(_fd: c_int, _dev: c_int, _buf: *const c_void, _len: usize) -> c_int {
    -libc::ENOSYS
}

/// See the other `mlx5sk_write`.
#[cfg(no_kernel_headers)]
unsafe fn mlx5sk_close(_fd: c_int) {}

/// See the other `mlx5sk_write`.
#[cfg(no_kernel_headers)]
unsafe fn mlx5sk_rekey(_fd: c_int, _to: c_int) {}

/// See the other `mlx5sk_write`.
#[cfg(no_kernel_headers)]
unsafe fn mlx5sk_ioctl(_fd: c_int, _dev: c_int, _arg: *mut c_void) -> c_int {
    -libc::EOPNOTSUPP
}

/// `write(2)`: a command on a command fd.
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: usize) -> isize {
    if let Some(dev) = dev_of(fd) {
        // SAFETY: `buf` holds `len` bytes (caller contract).
        let r = unsafe { mlx5sk_write(fds::primary(fd), dev as c_int, buf, len) };
        if r < 0 {
            set_errno(-r);
            return -1;
        }
        return r as isize;
    }
    type Write = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;
    // SAFETY: forwarded.
    unsafe { real!("write", Write)(fd, buf, len) }
}

/// `close(2)`: a command fd's context ends with it.
///
/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    forget(fd);
    type Close = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("close", Close)(fd) }
}

/// Command fd `fd` is closed (by `close`, or by `dup2` over it): its
/// context ends with the file's last descriptor.
fn forget(fd: c_int) {
    if dev_of(fd).is_none() {
        return;
    }
    match fds::closing(fd) {
        // SAFETY: the descriptor is the context's primary, being closed.
        fds::Closed::Last => unsafe { mlx5sk_close(fd) },
        // SAFETY: as above; `to` is a duplicate that stays open.
        fds::Closed::Stays(Some(to)) => unsafe { mlx5sk_rekey(fd, to) },
        fds::Closed::Stays(None) => {}
    }
}

/// `newfd` (or -1) is a duplicate of `old`: a command fd's duplicate names
/// the same context. Returns what the call returns.
fn dup_result(old: c_int, newfd: c_int) -> c_int {
    if newfd >= 0 && dev_of(old).is_some() && !fds::duplicated(old, newfd) {
        type Close = unsafe extern "C" fn(c_int) -> c_int;
        // SAFETY: the descriptor just made.
        unsafe { real!("close", Close)(newfd) };
        set_errno(libc::EMFILE);
        return -1;
    }
    newfd
}

/// `dup(2)`.
///
/// # Safety
/// As `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    type Dup = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: forwarded.
    dup_result(old, unsafe { real!("dup", Dup)(old) })
}

/// `dup2(2)`: a command fd at `new` is closed first, as the call does.
///
/// # Safety
/// As `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    type Dup2 = unsafe extern "C" fn(c_int, c_int) -> c_int;
    // SAFETY: forwarded.
    let r = unsafe { real!("dup2", Dup2)(old, new) };
    if r < 0 || old == new {
        return r;
    }
    forget(new);
    dup_result(old, r)
}

/// `dup3(2)`: as `dup2`.
///
/// # Safety
/// As `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    type Dup3 = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    // SAFETY: forwarded.
    let r = unsafe { real!("dup3", Dup3)(old, new, flags) };
    if r < 0 {
        return r;
    }
    forget(new);
    dup_result(old, r)
}

/// `fcntl(2)` (declared with the one argument every command takes, an
/// integer or a pointer, in the same register): `F_DUPFD` and
/// `F_DUPFD_CLOEXEC` (Python's `os.dup`) of a command fd make a duplicate.
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: std::ffi::c_ulong) -> c_int {
    type Fcntl = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    // SAFETY: forwarded with its argument.
    let r = unsafe { real!("fcntl", Fcntl)(fd, cmd, arg) };
    if matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) {
        return dup_result(fd, r);
    }
    r
}

/// `fcntl64`: as `fcntl` (the name glibc's headers may call it by).
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: std::ffi::c_ulong) -> c_int {
    type Fcntl = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    // SAFETY: forwarded with its argument.
    let r = unsafe { real!("fcntl64", Fcntl)(fd, cmd, arg) };
    if matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) {
        return dup_result(fd, r);
    }
    r
}

/// `RDMA_VERBS_IOCTL` (`rdma/rdma_user_ioctl_cmds.h`): the ioctl framework's
/// one request.
const RDMA_VERBS_IOCTL: std::ffi::c_ulong = 0xc018_1b01;

/// The errno of an ioctl on a command fd. The emulated kernel has no ioctl
/// framework, so libibverbs falls back to the `write()` ABI on the first
/// ENOTTY (every core object and method that has a `write()` form). A
/// method with no `write()` form answers as a kernel with the framework
/// answers for a method it lacks, so that a program (pyverbs' tests) sees
/// "not supported" rather than "no such ioctl": in the driver's namespace
/// (object or method id with `UVERBS_ID_NS_MASK` bits: DEVX, mkeys, DV
/// port queries, dynamic UARs and VARs, ...) EOPNOTSUPP, as for mlx5_ib's
/// disabled DEVX objects; a core method that only the ioctl ABI has
/// ([`ioctl_only`]: importing a context or MR, device memory, counters,
/// ...) EPROTONOSUPPORT, `uapi_get_method`'s answer for one it lacks.
fn ioctl_errno(req: std::ffi::c_ulong, arg: *mut c_void) -> c_int {
    if req != RDMA_VERBS_IOCTL {
        return libc::ENOTTY;
    }
    // struct ib_uverbs_ioctl_hdr: length, object_id, method_id, num_attrs.
    let mut hdr = [0u8; 8];
    let local = libc::iovec { iov_base: hdr.as_mut_ptr().cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: arg, iov_len: 8 };
    // SAFETY: reads 8 bytes of this process at `arg` into `hdr`; a pointer
    // that is no memory fails the call (EFAULT), never this process.
    let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if r != 8 {
        let e = std::io::Error::last_os_error().raw_os_error();
        if r >= 0 || !matches!(e, Some(libc::ENOSYS) | Some(libc::EPERM)) || !readable(arg, 8) {
            return libc::EFAULT;
        }
        // A system that refuses process_vm_readv (a container's seccomp
        // profile): the pages are mapped, a plain copy.
        // SAFETY: `arg` starts 8 mapped bytes (checked just above).
        unsafe { std::ptr::copy_nonoverlapping(arg.cast::<u8>(), hdr.as_mut_ptr(), 8) };
    }
    let object = u16::from_ne_bytes([hdr[2], hdr[3]]);
    let method = u16::from_ne_bytes([hdr[4], hdr[5]]);
    if (object | method) & 0xf000 != 0 {
        libc::EOPNOTSUPP
    } else if ioctl_only(object, method) {
        libc::EPROTONOSUPPORT
    } else {
        libc::ENOTTY
    }
}

/// Core methods (`rdma/ib_user_ioctl_cmds.h`) that have no `write()`
/// command, so no fallback: libibverbs calls them through the ioctl alone.
fn ioctl_only(object: u16, method: u16) -> bool {
    const DEVICE: u16 = 0;
    const QP: u16 = 4;
    const MR: u16 = 7;
    match object {
        // INFO_HANDLES, QUERY_CONTEXT (ibv_import_device), QUERY_PORT_SPEED,
        // QUERY_COMP_CNTR_CAPS; not QUERY_GID_TABLE / _ENTRY (sysfs is their
        // fallback) nor the methods with write() forms.
        DEVICE => matches!(method, 1 | 4 | 7 | 8),
        // QP_ATTACH_COMP_CNTR.
        QP => method == 2,
        // DM_MR_REG, ADVISE_MR, QUERY_MR (ibv_import_mr), REG_DMABUF_MR.
        MR => matches!(method, 0 | 2 | 3 | 4),
        // FLOW_ACTION, DM, COUNTERS, ASYNC_EVENT, DMAH, DMABUF, COMP_CNTR.
        13..=19 => true,
        _ => false,
    }
}

/// Whether `[p, p + len)` lies in mapped pages (`mincore` fails with
/// ENOMEM on a page that is not).
fn readable(p: *mut c_void, len: usize) -> bool {
    let page = 4096usize;
    let start = (p as usize) & !(page - 1);
    let Some(end) = (p as usize).checked_add(len) else { return false };
    let pages = (end - start).div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` holds one byte per page of the range; mincore reads no
    // memory of the range itself.
    unsafe { libc::mincore(start as *mut c_void, pages * page, vec.as_mut_ptr()) == 0 }
}

/// `ioctl(2)` (declared with the one argument every request here takes):
/// on a command fd, see `ioctl_errno`.
///
/// # Safety
/// As `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: std::ffi::c_ulong, arg: *mut c_void) -> c_int {
    if let Some(dev) = dev_of(fd) {
        if req == RDMA_VERBS_IOCTL && devx_obj(arg) {
            // SAFETY: a DEVX object method's header and attributes, readable
            // and writable (checked by `devx_obj`).
            let r = unsafe { mlx5sk_ioctl(fds::primary(fd), dev as c_int, arg) };
            if r == 0 {
                return 0;
            }
            set_errno(-r);
            return -1;
        }
        set_errno(ioctl_errno(req, arg));
        return -1;
    }
    type Ioctl = unsafe extern "C" fn(c_int, std::ffi::c_ulong, *mut c_void) -> c_int;
    // SAFETY: forwarded.
    unsafe { real!("ioctl", Ioctl)(fd, req, arg) }
}

/// Whether `arg` is an ioctl header of a DEVX object method
/// (`MLX5_IB_OBJECT_DEVX_OBJ`, 0x1001) whose header and attributes are
/// mapped: the emulated kernel's `sk_devx_obj` answers those (an indirect
/// mkey, when the context was opened with DEVX).
fn devx_obj(arg: *mut c_void) -> bool {
    if arg.is_null() || !readable(arg, 24) {
        return false;
    }
    // SAFETY: 24 mapped bytes (checked above).
    let hdr = unsafe { std::slice::from_raw_parts(arg.cast::<u8>(), 24) };
    let object = u16::from_ne_bytes([hdr[2], hdr[3]]);
    let num_attrs = usize::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
    object == 0x1001 && readable(arg, 24 + 16 * num_attrs)
}

/// The simulated RoCE device `mlx5sim<N>` that `name` names, if any.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
unsafe fn sim_netdev(name: *const c_char) -> Option<u32> {
    if name.is_null() {
        return None;
    }
    // SAFETY: caller contract.
    let n = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    let i: u32 = n.strip_prefix("mlx5sim")?.parse().ok()?;
    (mlx5_simrun::netdev_name(i) == n && (i as usize) < device::devices().nics.len()).then_some(i)
}

/// `if_nametoindex(3)`: the simulated RoCE ports' network devices
/// (`mlx5sim<N>`, named in sysfs `gid_attrs/ndevs`) exist for the program,
/// as the kernel's netdev of a RoCE port does; libibverbs resolves a GID's
/// device through it.
///
/// # Safety
/// As `if_nametoindex(3)`.
#[no_mangle]
pub unsafe extern "C" fn if_nametoindex(name: *const c_char) -> c_uint {
    // SAFETY: caller contract.
    if let Some(i) = unsafe { sim_netdev(name) } {
        return mlx5_simrun::netdev_ifindex(i);
    }
    type F = unsafe extern "C" fn(*const c_char) -> c_uint;
    // SAFETY: forwarded.
    unsafe { real!("if_nametoindex", F)(name) }
}

/// `if_indextoname(3)`: the inverse for the simulated devices.
///
/// # Safety
/// As `if_indextoname(3)` (`buf` holds `IF_NAMESIZE` bytes).
#[no_mangle]
pub unsafe extern "C" fn if_indextoname(index: c_uint, buf: *mut c_char) -> *mut c_char {
    let base = mlx5_simrun::netdev_ifindex(0);
    if let Some(i) = index.checked_sub(base).filter(|&i| (i as usize) < device::devices().nics.len()) {
        let name = mlx5_simrun::netdev_name(i);
        let bytes = name.as_bytes();
        if bytes.len() < libc::IF_NAMESIZE {
            // SAFETY: `buf` holds IF_NAMESIZE bytes (caller contract); the
            // name and its NUL fit.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
                *buf.add(bytes.len()) = 0;
            }
            return buf;
        }
    }
    type F = unsafe extern "C" fn(c_uint, *mut c_char) -> *mut c_char;
    // SAFETY: forwarded.
    unsafe { real!("if_indextoname", F)(index, buf) }
}

#[cfg(not(no_kernel_headers))]
extern "C" {
    fn mlx5sk_mmap_target(
        fd: c_int,
        off: u64,
        len: usize,
        prot: c_int,
        flags: c_int,
        moff: *mut u64,
    ) -> c_int;
}

/// See the other `mlx5sk_mmap_target`.
#[cfg(no_kernel_headers)]
unsafe fn mlx5sk_mmap_target(
    _fd: c_int,
    _off: u64,
    _len: usize,
    _prot: c_int,
    _flags: c_int,
    _moff: *mut u64,
) -> c_int {
    -libc::EINVAL
}

/// `mmap` of a command fd: a UAR page, the core clock page or the clock
/// info page is a page of the context's memfd, which the simulator watches
/// or writes through its own mapping (`kern.c`).
///
/// # Safety
/// As `mmap(2)`.
unsafe fn map_uar(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    let mut moff = 0u64;
    // SAFETY: `moff` is writable.
    let memfd = unsafe { mlx5sk_mmap_target(fds::primary(fd), off as u64, len, prot, flags, &mut moff) };
    if memfd < 0 {
        set_errno(-memfd);
        return libc::MAP_FAILED;
    }
    type Mmap = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, i64) -> *mut c_void;
    // SAFETY: the C library's mmap; the memfd is the context's, open while it lives
    // (the mapping outlives a later close of it, as any mapping does).
    unsafe { real!("mmap", Mmap)(addr, len, prot, flags | libc::MAP_SHARED, memfd, moff as i64) }
}

/// `mmap(2)`: a command fd's UAR pages (see `map_uar`).
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    if dev_of(fd).is_some() {
        // SAFETY: forwarded contract.
        return unsafe { map_uar(addr, len, prot, flags, fd, off) };
    }
    type Mmap = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, i64) -> *mut c_void;
    // SAFETY: forwarded.
    unsafe { real!("mmap", Mmap)(addr, len, prot, flags, fd, off) }
}

/// `mmap64(2)` (the same call where `off_t` is 64 bits).
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: i64,
) -> *mut c_void {
    if dev_of(fd).is_some() {
        // SAFETY: forwarded contract.
        return unsafe { map_uar(addr, len, prot, flags, fd, off) };
    }
    type Mmap = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, i64) -> *mut c_void;
    // SAFETY: forwarded.
    unsafe { real!("mmap64", Mmap)(addr, len, prot, flags, fd, off) }
}

/// What `kern.c` needs of a device (`struct mlx5sk_dev`).
#[repr(C)]
pub struct DevInfo {
    node_guid: u64,
    gid: [u8; 16],
    lid: u32,
    roce: u32,
    active_mtu: u32,
    max_qp_wr: u32,
    max_sge: u32,
    max_cqe: u32,
    max_wqe_sz_sq: u32,
    bf_size: u32,
    max_rd_atomic: u32,
    dc: u32,
    part_id: u32,
    fw_ver: u64,
}

/// `kern.c`'s view of device `dev`; non-zero when there is none.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5sk_dev_info(dev: c_int, out: *mut DevInfo) -> c_int {
    let Some(d) = usize::try_from(dev).ok().and_then(|i| device::devices().nics.get(i)) else { return 1 };
    let d = d.info();
    let (major, minor, sub) = (16u64, 35u64, 1012u64);
    let info = DevInfo {
        node_guid: mlx5_simrun::node_guid(dev as u32),
        gid: d.gid,
        lid: u32::from(d.lid),
        roce: u32::from(d.link_layer == mlx5_sim::LinkLayer::Ethernet),
        active_mtu: d.active_mtu,
        max_qp_wr: d.caps.max_qp_wr,
        max_sge: d.caps.max_sge,
        max_cqe: d.caps.max_cqe,
        max_wqe_sz_sq: d.caps.max_wqe_sz_sq,
        bf_size: d.caps.bf_size,
        max_rd_atomic: u32::from(d.caps.max_rd_atomic),
        dc: u32::from(d.caps.dc),
        part_id: mlx5_simrun::PART_ID,
        // mlx5_ib's fw_ver: major << 32 | minor << 16 | subminor.
        fw_ver: major << 32 | minor << 16 | sub,
    };
    // SAFETY: caller contract.
    unsafe { out.write(info) };
    0
}

#[cfg(all(test, not(no_kernel_headers)))]
mod fuzz;

#[cfg(test)]
mod ioctl_tests {
    use super::*;

    /// Core methods get ENOTTY (libibverbs then uses `write()`), the
    /// driver's namespace EOPNOTSUPP (what a kernel without the method
    /// answers), any other request ENOTTY, a header that is no memory EFAULT.
    #[test]
    fn ioctls_answer_enotty_or_as_a_kernel_lacking_the_method() {
        // ib_uverbs_ioctl_hdr: length, object_id, method_id, num_attrs, ...
        let hdr = |object: u16, method: u16| {
            let mut h = [0u8; 24];
            h[2..4].copy_from_slice(&object.to_ne_bytes());
            h[4..6].copy_from_slice(&method.to_ne_bytes());
            h
        };
        let mut core = hdr(3, 1); // UVERBS_OBJECT_CQ, DESTROY
        let mut devx = hdr(0x1000, 0x1000); // MLX5_IB_OBJECT_DEVX, DEVX_OTHER
        let mut dv_port = hdr(0, 0x1000); // UVERBS_OBJECT_DEVICE, MLX5_IB_METHOD_QUERY_PORT
        assert_eq!(ioctl_errno(RDMA_VERBS_IOCTL, core.as_mut_ptr().cast()), libc::ENOTTY);
        assert_eq!(ioctl_errno(RDMA_VERBS_IOCTL, devx.as_mut_ptr().cast()), libc::EOPNOTSUPP);
        assert_eq!(ioctl_errno(RDMA_VERBS_IOCTL, dv_port.as_mut_ptr().cast()), libc::EOPNOTSUPP);
        assert_eq!(ioctl_errno(0x5421, core.as_mut_ptr().cast()), libc::ENOTTY);
        // Methods without a write() form: absent, as uapi_get_method says.
        for (object, method, errno) in [
            (0, 3, libc::ENOTTY),           // GET_CONTEXT: write() has it
            (0, 6, libc::ENOTTY),           // QUERY_GID_ENTRY: sysfs is its fallback
            (7, 5, libc::ENOTTY),           // REG_MR: write() has it
            (0, 4, libc::EPROTONOSUPPORT),  // QUERY_CONTEXT (ibv_import_device)
            (7, 3, libc::EPROTONOSUPPORT),  // QUERY_MR (ibv_import_mr)
            (14, 0, libc::EPROTONOSUPPORT), // DM_ALLOC
        ] {
            let mut h = hdr(object, method);
            assert_eq!(ioctl_errno(RDMA_VERBS_IOCTL, h.as_mut_ptr().cast()), errno, "{object}/{method}");
        }
        assert_eq!(ioctl_errno(RDMA_VERBS_IOCTL, 0x10 as *mut c_void), libc::EFAULT);
    }
}
