//! Probes for rdma-core's tools (Debian: ibverbs-utils): the tests that run
//! `ibv_devinfo` under the launcher are reported ignored, with the reason,
//! where they are not installed (`.ci/run` installs them); likewise the
//! tests that compile C programs against libibverbs-dev.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_ibverbs_utils)");
    println!("cargo::rustc-check-cfg=cfg(no_libibverbs_dev)");
    println!("cargo::rustc-check-cfg=cfg(no_tshark)");
    println!("cargo::rustc-check-cfg=cfg(no_perftest)");
    println!("cargo:rerun-if-changed=/usr/bin/ib_write_lat");
    // perftest's programs (Debian: perftest; .ci/run installs it).
    if !std::path::Path::new("/usr/bin/ib_write_lat").exists() {
        println!("cargo:rustc-cfg=no_perftest");
    }
    println!("cargo:rerun-if-changed=/usr/bin/tshark");
    // The capture test decodes with tshark (.ci/run installs it).
    if !std::path::Path::new("/usr/bin/tshark").exists() {
        println!("cargo:rustc-cfg=no_tshark");
    }
    println!("cargo:rerun-if-changed=/usr/include/infiniband/verbs.h");
    // The C programs that drive the real libibverbs (tests/c) need its
    // headers and its link library (Debian: libibverbs-dev).
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        println!("cargo:rustc-cfg=no_libibverbs_dev");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=/usr/bin/ibv_devinfo");
    if !std::path::Path::new("/usr/bin/ibv_devinfo").exists()
        || !std::path::Path::new("/usr/bin/ibv_devices").exists()
    {
        println!("cargo:rustc-cfg=no_ibverbs_utils");
    }
}
