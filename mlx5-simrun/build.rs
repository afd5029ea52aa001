//! Probes for rdma-core's tools (Debian: ibverbs-utils): the tests that run
//! `ibv_devinfo` under the launcher are reported ignored, with the reason,
//! where they are not installed (`.ci/run` installs them).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_ibverbs_utils)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=/usr/bin/ibv_devinfo");
    if !std::path::Path::new("/usr/bin/ibv_devinfo").exists()
        || !std::path::Path::new("/usr/bin/ibv_devices").exists()
    {
        println!("cargo:rustc-cfg=no_ibverbs_utils");
    }
}
