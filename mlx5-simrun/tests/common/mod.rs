//! What the launcher's tests share.

use std::process::Command;

/// The launcher, with the preload library built beside it.
pub fn simrun() -> Command {
    let exe = env!("CARGO_BIN_EXE_mlx5_simrun");
    {
        // Built now even when present (a no-op when fresh): a stale preload
        // library would test old code.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo).args(["build", "-q", "-p", "mlx5-simkern"]).status().unwrap().success();
        assert!(ok, "building the preload library");
    }
    Command::new(exe)
}
