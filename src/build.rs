//! Build-time probe for the hardware variants of the conformance suite.
//! Whether a test runs is decided at build time (libtest has no run-time
//! "skip"), so the probe sets one cfg per reason, and each hardware test is
//! `ignore`d with that reason, never passed:
//!
//! - `hw_skip_not_selected`: `MLX5_TEST_DEVICE` is not set (hardware tests
//!   never pick a NIC on their own). Then no device is probed, so a
//!   downstream build of this crate never looks at sysfs;
//! - `hw_skip_no_library`: libibverbs.so.1 is not installed;
//! - `hw_skip_no_device`: `MLX5_TEST_DEVICE` names no device in
//!   /sys/class/infiniband;
//! - `hw_skip_no_dc`: the device has no dynamically connected transport (its
//!   `hca_type` is a ConnectX-4 Lx part): the DC scenario is ignored;
//! - `emu_skip_no_library`: libibverbs.so.1 or libmlx5.so.1 is not installed,
//!   so the hardware suite cannot run on the emulated device (`mlx5_simrun`).
//!   This one is always probed: two file checks, read only by this crate's
//!   own tests.

use std::path::Path;

fn has_libibverbs() -> bool {
    has_library("libibverbs.so.1")
}

fn has_library(name: &str) -> bool {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib64",
        "/lib",
    ];
    let extra = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    dirs.iter().copied().chain(extra.split(':')).any(|d| !d.is_empty() && Path::new(d).join(name).exists())
}

/// `mlx5_hw::dc_parts::NO_DC_PARTS` (the same list; `tests/build_probe.rs`
/// checks that they agree): PCI device IDs of mlx5 parts without DC.
const NO_DC_PARTS: &[u32] = &[4117, 4118];

/// The PCI device ID in sysfs `hca_type` ("MT4117").
fn hca_part(dev: &str) -> Option<u32> {
    let t = std::fs::read_to_string(Path::new("/sys/class/infiniband").join(dev).join("hca_type")).ok()?;
    t.trim().strip_prefix("MT")?.parse().ok()
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(hw_skip_no_dc)");
    println!("cargo::rustc-check-cfg=cfg(hw_skip_no_library)");
    println!("cargo::rustc-check-cfg=cfg(hw_skip_not_selected)");
    println!("cargo::rustc-check-cfg=cfg(hw_skip_no_device)");
    println!("cargo:rerun-if-env-changed=MLX5_TEST_DEVICE");
    println!("cargo::rustc-check-cfg=cfg(emu_skip_no_library)");
    println!("cargo:rerun-if-changed=src/build.rs");
    // The emulated device runs the host's rdma-core under the host's
    // launcher: not for a cross-compiled test binary (qemu).
    let cross = std::env::var("TARGET").ok() != std::env::var("HOST").ok();
    if cross || !has_library("libibverbs.so.1") || !has_library("libmlx5.so.1") {
        println!("cargo:rustc-cfg=emu_skip_no_library");
    }
    // Installing or removing rdma-core changes these: probe again then.
    for p in ["/etc/ld.so.cache", "/var/lib/dpkg/status"] {
        if Path::new(p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    // Only a build that asked for hardware tests looks for a device: a
    // downstream build of this crate (no MLX5_TEST_DEVICE) reads no sysfs.
    let Ok(dev) = std::env::var("MLX5_TEST_DEVICE") else {
        println!("cargo:rustc-cfg=hw_skip_not_selected");
        return;
    };
    println!("cargo:rerun-if-env-changed=LD_LIBRARY_PATH");
    if !has_libibverbs() {
        println!("cargo:rustc-cfg=hw_skip_no_library");
    } else if !Path::new("/sys/class/infiniband").join(&dev).exists() {
        println!("cargo:rustc-cfg=hw_skip_no_device");
    } else if hca_part(&dev).is_some_and(|p| NO_DC_PARTS.contains(&p)) {
        println!("cargo:rustc-cfg=hw_skip_no_dc");
    }
}
