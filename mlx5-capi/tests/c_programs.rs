//! The C programs of `tests/c/`, compiled against the generated header
//! (`include/mlx5r.h`) with the `cc` crate's compiler and linked with this
//! crate's shared library, then run: `abi_ops.c` drives every operation
//! through the C ABI on the simulator; `completion.c` the completion side
//! (channels, arming, 128-byte CQEs with scatter, compression, overrun);
//! `foreign_writer.c` writes WQEs with
//! rdma-core's mlx5dv.h helpers and rings with plain stores (ignored, with
//! the reason, where `infiniband/mlx5dv.h` is not installed).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where cargo put this crate's shared library. `cargo test` builds every
/// crate type of the library next to the test executable
/// (`target/<profile>/deps/`) and does not copy them up to
/// `target/<profile>/`, which only `cargo build` fills; the copy beside the
/// test is also the one built from the same sources.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps").to_path_buf();
    if deps.join("libmlx5r.so").exists() {
        return deps;
    }
    deps.parent().map(Path::to_path_buf).unwrap_or(deps)
}

/// The soname the build gives the library (see build.rs): a program linked
/// with -lmlx5r needs it at run time. `install.sh` makes it a link to
/// the versioned file; here, next to the library the test built.
fn soname_link(lib: &Path) {
    let name = match (env!("CARGO_PKG_VERSION_MAJOR"), env!("CARGO_PKG_VERSION_MINOR")) {
        ("0", minor) => format!("libmlx5r.so.0.{minor}"),
        (major, _) => format!("libmlx5r.so.{major}"),
    };
    let link = lib.join(name);
    if !link.exists() {
        let _ = std::os::unix::fs::symlink("libmlx5r.so", &link);
    }
}

fn build_and_run(name: &str) {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    let stdout = build_and_run_file(name, &source);
    assert!(stdout.contains(": ok") || stdout.contains("ok\n"), "{name}: {stdout}");
}

/// Compile `source` with the test harness's flags (-Wall -Wextra -Werror),
/// link it with -lmlx5r, run it; its stdout.
fn build_and_run_file(name: &str, source: &Path) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    assert!(lib.join("libmlx5r.so").exists(), "libmlx5r.so not built in {}", lib.display());
    soname_link(&lib);
    let target = env!("MLX5R_TARGET");
    let compiler = cc::Build::new()
        .target(target)
        .host(target)
        .opt_level(1)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let status = compiler
        .to_command()
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"])
        .arg("-I")
        .arg(dir.join("include"))
        .arg("-I")
        .arg(dir.join("tests/c"))
        .arg(source)
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg("-lmlx5r")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {name}.c failed");
    // Cargo puts target/<profile> (where `cargo build` leaves a possibly
    // stale copy of the library) on LD_LIBRARY_PATH, which outranks the
    // rpath: run the program with the library it was linked against.
    let run = Command::new(&out).env_remove("LD_LIBRARY_PATH").output().expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{name} failed ({}):\n{stdout}{stderr}", run.status);
    stdout.into_owned()
}

/// The complete program of mlx5-capi/README.md, exactly as it is there
/// (CI also builds it with the README's own commands: .ci/run).
#[test]
fn readme_c_program() {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find("```c\n").expect("a C block in the README") + 5;
    let end = start + readme[start..].find("```").expect("the block's end");
    let source = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("readme_example.c");
    std::fs::write(&source, &readme[start..end]).unwrap();
    let stdout = build_and_run_file("readme_example", &source);
    assert_eq!(stdout, "wr_id 42 completed: \"hello, simulated ConnectX\"\n");
}

#[test]
fn abi_ops_c_program() {
    build_and_run("abi_ops");
}

/// Memory windows and an indirect mkey bound, used and invalidated through
/// `mlx5r_umr_wqe` (docs/mlx5-wire-format.md §3.7).
#[test]
fn memory_windows_c_program() {
    build_and_run("mw");
}

/// Watch mode executes a send queue whose doorbell record alone moved (no
/// register store): fails if the watcher's scan stops reading records.
#[test]
fn doorbell_record_c_program() {
    build_and_run("doorbell_record");
}

#[test]
fn completion_c_program() {
    build_and_run("completion");
}

#[test]
#[cfg_attr(no_mlx5dv_header, ignore = "infiniband/mlx5dv.h not installed (Debian: libibverbs-dev)")]
fn foreign_writer_c_program_with_mlx5dv_helpers() {
    build_and_run("foreign_writer");
}
