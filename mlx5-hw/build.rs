//! Detect rdma-core's development headers for the FFI layout test: if the
//! system C compiler (`$CC`, else `cc`) can preprocess
//! `#include <infiniband/verbs.h>` and `<infiniband/mlx5dv.h>`, emit
//! `cfg(has_rdma_headers)`, and watch the header files it resolved.
//! Nothing here is needed to build the crate itself: rdma-core is loaded at
//! run time.

use std::io::Write;
use std::process::{Command, Stdio};

/// Whether the dynamic loader can find `name` in the usual directories:
/// the smoke test runs on the emulated device (`mlx5_simrun`) only where
/// libibverbs and libmlx5 are installed (`cfg(emu_skip_no_library)`).
fn has_library(name: &str) -> bool {
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64", "/lib"]
        .iter()
        .any(|d| std::path::Path::new(d).join(name).exists())
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_rdma_headers)");
    println!("cargo::rustc-check-cfg=cfg(emu_skip_no_library)");
    let cross = std::env::var("TARGET").ok() != std::env::var("HOST").ok();
    if cross || !has_library("libibverbs.so.1") || !has_library("libmlx5.so.1") {
        println!("cargo::rustc-cfg=emu_skip_no_library");
    }
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CC");
    println!("cargo::rerun-if-env-changed=CPATH");
    println!("cargo::rerun-if-env-changed=C_INCLUDE_PATH");
    // Installing or removing libibverbs-dev changes the package database:
    // probe again then.
    if std::path::Path::new("/var/lib/dpkg/status").exists() {
        println!("cargo::rerun-if-changed=/var/lib/dpkg/status");
    }

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let child = Command::new(&cc)
        .args(["-E", "-x", "c", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        println!("cargo::warning=no C compiler ({cc}): the FFI layout test will be ignored");
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"#include <infiniband/verbs.h>\n#include <infiniband/mlx5dv.h>\n");
    }
    let Ok(out) = child.wait_with_output() else { return };
    if !out.status.success() {
        // The headers appear when libibverbs-dev is installed in the usual
        // place; watch it so that installing them triggers a rerun.
        for dir in ["/usr/include/infiniband", "/usr/local/include/infiniband"] {
            if std::path::Path::new(dir).exists() {
                println!("cargo::rerun-if-changed={dir}");
            }
        }
        return;
    }
    println!("cargo::rustc-cfg=has_rdma_headers");
    // Line markers (`# 1 "/usr/include/infiniband/verbs.h"`) name the
    // header files the compiler actually used.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("# ")) {
        if let Some(path) = line.split('"').nth(1) {
            if path.contains("/infiniband/") && seen.insert(path.to_string()) {
                println!("cargo::rerun-if-changed={path}");
            }
        }
    }
}
