//! Builds the C baseline, `benches/c/hot_path.c` (hand-written C with
//! rdma-core's mlx5dv.h helpers), into this crate when the header is
//! installed (Debian: libibverbs-dev); its `main` becomes
//! `hot_path_c_main`. Without the header the C figures are left out, said so
//! where they would be printed.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(c_baseline)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../benches/c/hot_path.c");
    println!("cargo:rerun-if-changed=/usr/include/infiniband/mlx5dv.h");
    if !std::path::Path::new("/usr/include/infiniband/mlx5dv.h").exists() {
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
