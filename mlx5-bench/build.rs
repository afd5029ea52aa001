//! Builds the C baseline, `benches/c/hot_path.c` (hand-written C with
//! rdma-core's mlx5dv.h helpers), into this crate when the header is
//! installed (Debian: libibverbs-dev) and the build is native x86-64; its
//! `main` becomes `hot_path_c_main`. Otherwise the C figures are left out
//! (`hot_path c ..` says so; the gungraun bench has no C half).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(c_baseline)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../benches/c/hot_path.c");
    println!("cargo:rerun-if-changed=/usr/include/infiniband/mlx5dv.h");
    // The baseline's barriers are x86's (as rdma-core's udma_barrier.h has
    // them there), and the header is the build machine's own.
    let x86_64 = std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "x86_64");
    let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    if !x86_64 || !native || !std::path::Path::new("/usr/include/infiniband/mlx5dv.h").exists() {
        return;
    }
    cc::Build::new()
        .file("../benches/c/hot_path.c")
        .define("main", "hot_path_c_main")
        .opt_level(2)
        .warnings(false)
        .compile("hot_path_c");
    println!("cargo:rustc-cfg=c_baseline");
}
