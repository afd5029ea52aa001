//! Run-time loading of rdma-core (`libibverbs.so.1`, `libmlx5.so.1`) with
//! libloading: every entry point is an exported symbol (checked with
//! `nm -D --defined-only` on v44), resolved once into a table of function
//! pointers that lives as long as the libraries stay loaded.

use libloading::Library;

use crate::error::HwError;
use crate::ffi::*;

/// The rdma-core user-space libraries the backend needs.
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// libmlx5 (Debian: package `ibverbs-providers`), which also exports mlx5dv.
pub const LIBMLX5: &str = "libmlx5.so.1";

/// Every symbol loaded from `libibverbs.so.1`, in load order.
pub const VERBS_SYMBOLS: &[&str] = &[
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_get_device_name",
    "ibv_open_device",
    "ibv_close_device",
    "ibv_query_device",
    "ibv_query_port",
    "ibv_query_gid",
    "ibv_alloc_pd",
    "ibv_dealloc_pd",
    "ibv_reg_mr",
    "ibv_dereg_mr",
    "ibv_destroy_cq",
    "ibv_create_srq",
    "ibv_destroy_srq",
    "ibv_modify_qp",
    "ibv_destroy_qp",
    "ibv_create_comp_channel",
    "ibv_destroy_comp_channel",
    "ibv_get_cq_event",
    "ibv_ack_cq_events",
    "ibv_get_async_event",
    "ibv_ack_async_event",
    "ibv_create_ah",
    "ibv_destroy_ah",
];

/// Symbols of `libibverbs.so.1` used when present (older rdma-core lacks them).
pub const OPTIONAL_VERBS_SYMBOLS: &[&str] = &["_ibv_query_gid_ex"];

/// Every symbol loaded from `libmlx5.so.1`, in load order.
pub const MLX5_SYMBOLS: &[&str] = &[
    "mlx5dv_is_supported",
    "mlx5dv_query_device",
    "mlx5dv_init_obj",
    "mlx5dv_create_qp",
    "mlx5dv_create_cq",
];

/// rdma-core, loaded: the function pointers and the libraries that keep
/// them valid (dropped last, after every object that calls through them).
pub struct Rdma {
    pub(crate) get_device_list: GetDeviceListFn,
    pub(crate) free_device_list: FreeDeviceListFn,
    pub(crate) get_device_name: GetDeviceNameFn,
    pub(crate) open_device: OpenDeviceFn,
    pub(crate) close_device: CloseDeviceFn,
    pub(crate) query_device: QueryDeviceFn,
    pub(crate) query_port: QueryPortFn,
    pub(crate) query_gid: QueryGidFn,
    pub(crate) alloc_pd: AllocPdFn,
    pub(crate) dealloc_pd: DeallocPdFn,
    pub(crate) reg_mr: RegMrFn,
    pub(crate) dereg_mr: DeregMrFn,
    pub(crate) destroy_cq: DestroyCqFn,
    pub(crate) create_srq: CreateSrqFn,
    pub(crate) destroy_srq: DestroySrqFn,
    pub(crate) modify_qp: ModifyQpFn,
    pub(crate) destroy_qp: DestroyQpFn,
    pub(crate) dv_is_supported: Mlx5dvIsSupportedFn,
    pub(crate) dv_query_device: Mlx5dvQueryDeviceFn,
    pub(crate) dv_init_obj: Mlx5dvInitObjFn,
    pub(crate) dv_create_qp: Mlx5dvCreateQpFn,
    pub(crate) dv_create_cq: Mlx5dvCreateCqFn,
    pub(crate) create_comp_channel: CreateCompChannelFn,
    pub(crate) destroy_comp_channel: DestroyCompChannelFn,
    pub(crate) get_cq_event: GetCqEventFn,
    pub(crate) ack_cq_events: AckCqEventsFn,
    pub(crate) get_async_event: GetAsyncEventFn,
    pub(crate) ack_async_event: AckAsyncEventFn,
    pub(crate) create_ah: CreateAhFn,
    pub(crate) destroy_ah: DestroyAhFn,
    /// `_ibv_query_gid_ex` (rdma-core v32+): reports the errno and the GID type,
    /// where `ibv_query_gid` returns -1 without setting errno.
    pub(crate) query_gid_ex: Option<QueryGidExFn>,
    verbs_file: String,
    mlx5_file: String,
    _verbs: Library,
    _mlx5: Library,
}

impl std::fmt::Debug for Rdma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rdma").field("verbs", &self.verbs_file).field("mlx5", &self.mlx5_file).finish()
    }
}

/// Keeps `libibverbs.so.1` and `libmlx5.so.1` loaded for the rest of the
/// process, once one load succeeded: an extra reference that is never
/// dropped. rdma-core is not built to be unloaded and loaded again: its
/// providers register themselves with libibverbs from ELF constructors,
/// which do not run again for a provider still mapped, and contexts of one
/// load would meet the function tables of another (`mlx5dv_create_cq`
/// refusing a context whose device ops are the old library's: EOPNOTSUPP).
/// Without the pin, the last handle of one thread to go unloads both while
/// another thread loads them again; threads opening and closing devices
/// concurrently hit that (found on the emulated device, `mlx5_simrun`).
fn pin_loaded() {
    static PINNED: std::sync::Once = std::sync::Once::new();
    PINNED.call_once(|| {
        for file in [LIBIBVERBS, LIBMLX5] {
            if let Ok(lib) = open(file) {
                std::mem::forget(lib);
            }
        }
    });
}

fn open(file: &str) -> Result<Library, HwError> {
    // SAFETY: loading rdma-core runs its ELF constructors, which only set
    // up provider registration; no Rust invariant depends on them.
    unsafe { Library::new(file) }
        .map_err(|e| HwError::LibraryNotFound { file: file.to_string(), reason: e.to_string() })
}

/// Look up `symbol` and return it as the function-pointer type `F`.
///
/// # Safety
/// `F` must be the exact C signature of `symbol`.
unsafe fn sym<F: Copy>(lib: &Library, file: &str, symbol: &'static str) -> Result<F, HwError> {
    // SAFETY: forwarded: `F` is the symbol's type (caller contract).
    unsafe { lib.get::<F>(symbol.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| HwError::SymbolMissing { file: file.to_string(), symbol })
}

impl Rdma {
    /// Load `libibverbs.so.1` and `libmlx5.so.1`.
    pub fn load() -> Result<Self, HwError> {
        let r = Self::load_from(LIBIBVERBS, LIBMLX5)?;
        pin_loaded();
        Ok(r)
    }

    /// Load from the given file names (a path, or a name the dynamic loader
    /// searches). Used by tests to provoke each failure deterministically.
    pub fn load_from(verbs_file: &str, mlx5_file: &str) -> Result<Self, HwError> {
        let verbs = open(verbs_file)?;
        let v = verbs_file;
        // SAFETY: (every `sym` below) each type alias in `ffi` is the v44
        // prototype of the symbol of that name.
        unsafe {
            let get_device_list = sym(&verbs, v, "ibv_get_device_list")?;
            let free_device_list = sym(&verbs, v, "ibv_free_device_list")?;
            let get_device_name = sym(&verbs, v, "ibv_get_device_name")?;
            let open_device = sym(&verbs, v, "ibv_open_device")?;
            let close_device = sym(&verbs, v, "ibv_close_device")?;
            let query_device = sym(&verbs, v, "ibv_query_device")?;
            let query_port = sym(&verbs, v, "ibv_query_port")?;
            let query_gid = sym(&verbs, v, "ibv_query_gid")?;
            let alloc_pd = sym(&verbs, v, "ibv_alloc_pd")?;
            let dealloc_pd = sym(&verbs, v, "ibv_dealloc_pd")?;
            let reg_mr = sym(&verbs, v, "ibv_reg_mr")?;
            let dereg_mr = sym(&verbs, v, "ibv_dereg_mr")?;
            let destroy_cq = sym(&verbs, v, "ibv_destroy_cq")?;
            let create_srq = sym(&verbs, v, "ibv_create_srq")?;
            let destroy_srq = sym(&verbs, v, "ibv_destroy_srq")?;
            let modify_qp = sym(&verbs, v, "ibv_modify_qp")?;
            let destroy_qp = sym(&verbs, v, "ibv_destroy_qp")?;
            let create_comp_channel = sym(&verbs, v, "ibv_create_comp_channel")?;
            let destroy_comp_channel = sym(&verbs, v, "ibv_destroy_comp_channel")?;
            let get_cq_event = sym(&verbs, v, "ibv_get_cq_event")?;
            let ack_cq_events = sym(&verbs, v, "ibv_ack_cq_events")?;
            let get_async_event = sym(&verbs, v, "ibv_get_async_event")?;
            let ack_async_event = sym(&verbs, v, "ibv_ack_async_event")?;
            let create_ah = sym(&verbs, v, "ibv_create_ah")?;
            let destroy_ah = sym(&verbs, v, "ibv_destroy_ah")?;
            let query_gid_ex = sym(&verbs, v, "_ibv_query_gid_ex").ok();
            let mlx5 = open(mlx5_file)?;
            let m = mlx5_file;
            Ok(Rdma {
                get_device_list,
                free_device_list,
                get_device_name,
                open_device,
                close_device,
                query_device,
                query_port,
                query_gid,
                alloc_pd,
                dealloc_pd,
                reg_mr,
                dereg_mr,
                destroy_cq,
                create_srq,
                destroy_srq,
                modify_qp,
                destroy_qp,
                dv_is_supported: sym(&mlx5, m, "mlx5dv_is_supported")?,
                dv_query_device: sym(&mlx5, m, "mlx5dv_query_device")?,
                dv_init_obj: sym(&mlx5, m, "mlx5dv_init_obj")?,
                dv_create_qp: sym(&mlx5, m, "mlx5dv_create_qp")?,
                dv_create_cq: sym(&mlx5, m, "mlx5dv_create_cq")?,
                create_comp_channel,
                destroy_comp_channel,
                get_cq_event,
                ack_cq_events,
                get_async_event,
                ack_async_event,
                create_ah,
                destroy_ah,
                query_gid_ex,
                verbs_file: verbs_file.to_string(),
                mlx5_file: mlx5_file.to_string(),
                _verbs: verbs,
                _mlx5: mlx5,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_names_the_file_and_the_loader_message() {
        let bogus = "libibverbs-mlx5-hw-test-does-not-exist.so.1";
        match Rdma::load_from(bogus, LIBMLX5) {
            Err(HwError::LibraryNotFound { file, reason }) => {
                assert_eq!(file, bogus);
                assert!(reason.contains(bogus), "the loader's message names the file: {reason}");
            }
            other => panic!("expected LibraryNotFound, got {other:?}"),
        }
    }

    #[test]
    fn a_library_without_the_symbols_is_reported_by_symbol() {
        // glibc loads everywhere this crate runs and exports no verbs.
        match Rdma::load_from("libc.so.6", LIBMLX5) {
            Err(HwError::SymbolMissing { file, symbol }) => {
                assert_eq!(file, "libc.so.6");
                assert_eq!(symbol, VERBS_SYMBOLS[0]);
            }
            other => panic!("expected SymbolMissing, got {other:?}"),
        }
    }

    /// With rdma-core installed, libibverbs loads and the missing mlx5
    /// library is the one named.
    #[test]
    fn missing_mlx5_library_is_named_when_verbs_loads() {
        if Rdma::load().is_err() {
            // Without rdma-core the previous tests cover the failure path;
            // this one needs libibverbs itself.
            match Rdma::load() {
                Err(HwError::LibraryNotFound { .. }) => return,
                other => panic!("rdma-core present but incomplete: {other:?}"),
            }
        }
        let bogus = "libmlx5-mlx5-hw-test-does-not-exist.so.1";
        match Rdma::load_from(LIBIBVERBS, bogus) {
            Err(HwError::LibraryNotFound { file, .. }) => assert_eq!(file, bogus),
            other => panic!("expected LibraryNotFound for libmlx5, got {other:?}"),
        }
    }

    /// Debian's rdma-core (v44) exports `_ibv_query_gid_ex` (v32+): it is used.
    #[test]
    fn optional_query_gid_ex_is_found_on_current_rdma_core() {
        if let Ok(r) = Rdma::load() {
            assert!(r.query_gid_ex.is_some(), "rdma-core v32+ exports {}", OPTIONAL_VERBS_SYMBOLS[0]);
        }
    }

    /// Either rdma-core is present and complete, or the error names the
    /// file that is missing; never a panic, never a missing symbol.
    #[test]
    fn load_reports_a_typed_error_or_succeeds() {
        match Rdma::load() {
            Ok(_) => {}
            Err(HwError::LibraryNotFound { file, reason }) => {
                assert!(file == LIBIBVERBS || file == LIBMLX5);
                assert!(!reason.is_empty());
            }
            Err(e) => panic!("rdma-core present but incomplete: {e}"),
        }
    }
}
