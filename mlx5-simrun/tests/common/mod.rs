//! What the launcher's tests share.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

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

/// Compiles `tests/c/<name>.c` against libibverbs into the test's target
/// directory; the executable's path.
#[allow(dead_code)] // (not every test file compiles C programs)
pub fn compile(name: &str) -> PathBuf {
    compile_with(name, &[])
}

/// As [`compile`], linked with `libs` as well (`-lmlx5`). Each program is
/// compiled once per test run: tests that share one (they run in parallel
/// threads) must not execute it while another rewrites it.
#[allow(dead_code)]
pub fn compile_with(name: &str, libs: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(cc)
        .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .args(libs)
        .arg("-libverbs")
        .output()
        .expect("run the C compiler");
    assert!(o.status.success(), "compiling {name}.c:\n{}", String::from_utf8_lossy(&o.stderr));
    built.push((name.to_string(), out.clone()));
    out
}
