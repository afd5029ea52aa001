//! What the launcher's tests share.

use std::path::Path;
use std::process::Command;

/// The launcher, with the preload library built beside it.
pub fn simrun() -> Command {
    let exe = env!("CARGO_BIN_EXE_mlx5_simrun");
    let dir = Path::new(exe).parent().unwrap();
    if !dir.join("libmlx5_simkern.so").exists() && !dir.join("deps/libmlx5_simkern.so").exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo).args(["build", "-q", "-p", "mlx5-simkern"]).status().unwrap().success();
        assert!(ok, "building the preload library");
    }
    Command::new(exe)
}
