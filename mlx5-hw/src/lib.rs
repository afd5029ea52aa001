//! mlx5-hw: the ConnectX backend over rdma-core's `libibverbs` and
//! `libmlx5` (mlx5dv), loaded at run time so that everything builds and
//! tests without rdma-core installed.
//!
//! Status (step 1): only the run-time loading and its typed errors exist.
//! The `Backend` implementation (control path, `mlx5dv_init_obj`, UAR /
//! BlueFlame doorbells) is step 3.

use libloading::Library;

/// Why the hardware backend is unavailable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HwError {
    /// A shared library could not be loaded.
    #[error("{file} could not be loaded: {reason}")]
    LibraryNotFound { file: &'static str, reason: String },
    /// A library loaded but lacks a symbol we need.
    #[error("symbol {symbol} is missing from {file}")]
    SymbolMissing { file: &'static str, symbol: &'static str },
}

/// The rdma-core user-space libraries the backend needs.
pub const LIBIBVERBS: &str = "libibverbs.so.1";
pub const LIBMLX5: &str = "libmlx5.so.1";

/// rdma-core, loaded.
pub struct Libraries {
    verbs: Library,
    mlx5: Library,
}

fn open(file: &'static str) -> Result<Library, HwError> {
    // SAFETY: loading rdma-core runs its constructors, which only register
    // providers; no Rust invariants depend on them.
    unsafe { Library::new(file) }.map_err(|e| HwError::LibraryNotFound { file, reason: e.to_string() })
}

impl Libraries {
    /// Load `libibverbs.so.1` and `libmlx5.so.1` and check the entry points
    /// the backend uses exist.
    pub fn load() -> Result<Self, HwError> {
        let libs = Libraries { verbs: open(LIBIBVERBS)?, mlx5: open(LIBMLX5)? };
        for symbol in ["ibv_get_device_list", "ibv_free_device_list", "ibv_open_device"] {
            libs.check(&libs.verbs, LIBIBVERBS, symbol)?;
        }
        for symbol in ["mlx5dv_init_obj", "mlx5dv_query_device"] {
            libs.check(&libs.mlx5, LIBMLX5, symbol)?;
        }
        Ok(libs)
    }

    fn check(&self, lib: &Library, file: &'static str, symbol: &'static str) -> Result<(), HwError> {
        // SAFETY: the symbol is only looked up, never called.
        unsafe { lib.get::<*const ()>(symbol.as_bytes()) }
            .map(|_| ())
            .map_err(|_| HwError::SymbolMissing { file, symbol })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Either rdma-core is present and complete, or the error names the
    /// file that is missing; never a panic.
    #[test]
    fn load_reports_a_typed_error_or_succeeds() {
        match Libraries::load() {
            Ok(_) => {}
            Err(HwError::LibraryNotFound { file, reason }) => {
                assert!(file == LIBIBVERBS || file == LIBMLX5);
                assert!(!reason.is_empty());
            }
            Err(e @ HwError::SymbolMissing { .. }) => panic!("rdma-core present but incomplete: {e}"),
        }
    }
}
