//! Typed errors of the hardware backend, the errno conventions of the verbs
//! API, and the conversion to the front-end's [`mlx5_api::Error`].
//!
//! Two conventions (PITFALLS, "Control path"):
//! * verbs returning `int` (`ibv_modify_qp`, `ibv_query_port`,
//!   `mlx5dv_query_device`, `ibv_dealloc_pd`, ...) return the errno value
//!   **itself**; errno afterwards is unrelated ([`errno_from_ret`]);
//! * verbs returning a pointer return NULL and set errno, which must be read
//!   right away, before any other call ([`errno_after_null`]).

use std::fmt;

/// Why the hardware backend failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HwError {
    /// A shared library could not be loaded (rdma-core is not installed, or
    /// only part of it: `libmlx5.so.1` is in Debian's `ibverbs-providers`).
    #[error("{file} could not be loaded: {reason}")]
    LibraryNotFound {
        /// The file name handed to the dynamic loader.
        file: String,
        /// The loader's message (`dlerror`).
        reason: String,
    },
    /// A library loaded but lacks an entry point we need (rdma-core older
    /// than this backend supports, or a different library of that name).
    #[error("symbol {symbol} is missing from {file}")]
    SymbolMissing {
        /// The library file.
        file: String,
        /// The missing entry point.
        symbol: &'static str,
    },
    /// rdma-core works but there is no RDMA device. `errno` is set when
    /// `ibv_get_device_list` itself failed (`ENOSYS`: the kernel exposes no
    /// uverbs devices at all) rather than returning an empty list.
    #[error("no RDMA device{}", NoDeviceDetail(*errno))]
    NoDevice {
        /// The errno of a failed `ibv_get_device_list`, if it failed.
        errno: Option<i32>,
    },
    /// RDMA devices exist, but the one asked for (or every one) is not
    /// driven by mlx5 (`mlx5dv_is_supported` is false).
    #[error("device {name} is not an mlx5 (ConnectX) device")]
    NotMlx5 {
        /// The device's name.
        name: String,
    },
    /// No device of that name.
    #[error("no RDMA device named {name} (found: {})", available.join(", "))]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The devices there are.
        available: Vec<String>,
    },
    /// A verbs call failed with `errno`.
    #[error("{op} failed: errno {errno} ({})", strerror(*errno))]
    Verbs {
        /// The verbs call.
        op: &'static str,
        /// The errno it returned.
        errno: i32,
    },
    /// rdma-core handed back something the front-end cannot drive (for
    /// example 128-byte CQEs, or a ring that is not a power of two).
    #[error("{op}: {what}")]
    Unsupported {
        /// The call that produced it.
        op: &'static str,
        /// What cannot be driven.
        what: String,
    },
    /// A verbs call failed without saying why (`ibv_query_gid` returns -1
    /// and leaves errno alone).
    #[error("{op} failed: {reason}")]
    NoErrno {
        /// The verbs call.
        op: &'static str,
        /// What was asked.
        reason: String,
    },
}

struct NoDeviceDetail(Option<i32>);

impl fmt::Display for NoDeviceDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => Ok(()),
            Some(libc::ENOSYS) => write!(
                f,
                " (ibv_get_device_list: errno {} ({}): the kernel exposes no uverbs devices)",
                libc::ENOSYS,
                strerror(libc::ENOSYS)
            ),
            Some(e) => write!(f, " (ibv_get_device_list: errno {e} ({}))", strerror(e)),
        }
    }
}

/// The C library's text for `errno` (without Rust's "(os error N)" suffix).
pub fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.rfind(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The errno of a failed `int`-returning verb. These return the errno value
/// itself (positive); a few older paths return -1 and set errno, and some
/// return a negated errno. `ret` must be non-zero; errno is read only in the
/// -1 case, immediately.
pub fn errno_from_ret(ret: i32) -> i32 {
    match ret {
        r if r > 0 => r,
        -1 => match std::io::Error::last_os_error().raw_os_error() {
            Some(e) if e > 0 => e,
            _ => libc::EIO,
        },
        r if r < -1 => r.saturating_neg(),
        // 0 is success; a caller that asks anyway gets EIO rather than "success".
        _ => libc::EIO,
    }
}

/// The errno of a verb that returned NULL. Call it before anything else
/// that may touch errno. A NULL without errno (should not happen) is EIO.
pub fn errno_after_null() -> i32 {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(e) if e > 0 => e,
        _ => libc::EIO,
    }
}

/// `Ok(())` for 0, else [`HwError::Verbs`] with the errno of `ret`.
pub(crate) fn check(op: &'static str, ret: i32) -> Result<(), HwError> {
    if ret == 0 {
        Ok(())
    } else {
        Err(HwError::Verbs { op, errno: errno_from_ret(ret) })
    }
}

/// `Ok(ptr)` when non-NULL, else [`HwError::Verbs`] with errno read now.
pub(crate) fn non_null<T>(op: &'static str, ptr: *mut T) -> Result<*mut T, HwError> {
    if ptr.is_null() {
        Err(HwError::Verbs { op, errno: errno_after_null() })
    } else {
        Ok(ptr)
    }
}

impl From<HwError> for mlx5_api::Error {
    /// Verbs failures keep their errno ([`mlx5_api::Error::Verbs`]);
    /// everything else (loading, no device, unsupported resources) becomes
    /// [`mlx5_api::Error::Backend`].
    fn from(e: HwError) -> Self {
        use mlx5_api::BackendError as B;
        match e {
            HwError::Verbs { op, errno } => mlx5_api::Error::Verbs { op, errno, msg: strerror(errno) },
            HwError::Unsupported { op, what } => {
                mlx5_api::Error::Backend { op, reason: Box::new(B::Other { detail: what }) }
            }
            HwError::NoErrno { op, reason } => {
                mlx5_api::Error::Backend { op, reason: Box::new(B::Other { detail: reason }) }
            }
            HwError::LibraryNotFound { file, reason } => mlx5_api::Error::Backend {
                op: "load rdma-core",
                reason: Box::new(B::LibraryNotFound { file, reason }),
            },
            HwError::SymbolMissing { file, symbol } => mlx5_api::Error::Backend {
                op: "load rdma-core",
                reason: Box::new(B::SymbolMissing { file, symbol }),
            },
            HwError::NoDevice { errno } => {
                mlx5_api::Error::Backend { op: "open device", reason: Box::new(B::NoDevice { errno }) }
            }
            HwError::NotMlx5 { name } => {
                mlx5_api::Error::Backend { op: "open device", reason: Box::new(B::NotMlx5 { name }) }
            }
            HwError::DeviceNotFound { name, available } => mlx5_api::Error::Backend {
                op: "open device",
                reason: Box::new(B::DeviceNotFound { name, available }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_errno(v: i32) {
        // SAFETY: the thread's own errno slot.
        unsafe { *libc::__errno_location() = v };
    }

    #[test]
    fn int_verbs_return_the_errno_itself() {
        // A stale errno must not leak into the result.
        set_errno(libc::ENOENT);
        assert_eq!(errno_from_ret(libc::EINVAL), libc::EINVAL);
        assert_eq!(errno_from_ret(-libc::EBUSY), libc::EBUSY);
        set_errno(libc::EPERM);
        assert_eq!(errno_from_ret(-1), libc::EPERM);
        set_errno(0);
        assert_eq!(errno_from_ret(-1), libc::EIO);
        assert_eq!(check("ibv_modify_qp", 0), Ok(()));
        assert_eq!(
            check("ibv_modify_qp", libc::EINVAL),
            Err(HwError::Verbs { op: "ibv_modify_qp", errno: libc::EINVAL })
        );
    }

    #[test]
    fn null_returning_verbs_read_errno() {
        set_errno(libc::ENOMEM);
        let r = non_null("ibv_alloc_pd", std::ptr::null_mut::<u8>());
        assert_eq!(r, Err(HwError::Verbs { op: "ibv_alloc_pd", errno: libc::ENOMEM }));
        set_errno(0);
        assert_eq!(errno_after_null(), libc::EIO);
        let mut x = 0u8;
        assert!(non_null("ibv_alloc_pd", &mut x as *mut u8).is_ok());
    }

    #[test]
    fn conversion_to_front_end_errors() {
        let e: mlx5_api::Error = HwError::Verbs { op: "ibv_modify_qp", errno: libc::EINVAL }.into();
        assert_eq!(
            e,
            mlx5_api::Error::Verbs { op: "ibv_modify_qp", errno: libc::EINVAL, msg: strerror(libc::EINVAL) }
        );
        assert_eq!(strerror(libc::EINVAL), "Invalid argument");
        use mlx5_api::BackendError as B;
        let e: mlx5_api::Error = HwError::NoDevice { errno: Some(libc::ENOSYS) }.into();
        assert_eq!(
            e,
            mlx5_api::Error::Backend {
                op: "open device",
                reason: Box::new(B::NoDevice { errno: Some(libc::ENOSYS) })
            }
        );
        let e: mlx5_api::Error =
            HwError::LibraryNotFound { file: "libibverbs.so.1".into(), reason: "nope".into() }.into();
        assert_eq!(
            e,
            mlx5_api::Error::Backend {
                op: "load rdma-core",
                reason: Box::new(B::LibraryNotFound {
                    file: "libibverbs.so.1".into(),
                    reason: "nope".into()
                })
            }
        );
        assert!(e.to_string().contains("libibverbs.so.1") && e.to_string().contains("nope"), "{e}");
        let e: mlx5_api::Error =
            HwError::DeviceNotFound { name: "mlx5_9".into(), available: vec!["mlx5_0".into()] }.into();
        assert!(
            matches!(&e, mlx5_api::Error::Backend { reason, .. } if matches!(&**reason, B::DeviceNotFound { name, .. } if name == "mlx5_9")),
            "{e:?}"
        );
        let e: mlx5_api::Error =
            HwError::Unsupported { op: "create_cq", what: "128-byte CQEs".into() }.into();
        assert!(matches!(e, mlx5_api::Error::Backend { op: "create_cq", .. }));
    }

    #[test]
    fn messages_say_what_and_why() {
        let s = HwError::NoDevice { errno: Some(libc::ENOSYS) }.to_string();
        assert!(s.starts_with("no RDMA device (ibv_get_device_list: errno 38"), "{s}");
        assert!(s.contains("no uverbs"), "{s}");
        assert_eq!(HwError::NoDevice { errno: None }.to_string(), "no RDMA device");
        assert_eq!(
            HwError::NotMlx5 { name: "rxe0".into() }.to_string(),
            "device rxe0 is not an mlx5 (ConnectX) device"
        );
        assert_eq!(
            HwError::Verbs { op: "ibv_modify_qp", errno: libc::EINVAL }.to_string(),
            "ibv_modify_qp failed: errno 22 (Invalid argument)"
        );
        let s =
            HwError::DeviceNotFound { name: "mlx5_9".into(), available: vec!["mlx5_0".into()] }.to_string();
        assert_eq!(s, "no RDMA device named mlx5_9 (found: mlx5_0)");
    }
}
