//! Passes the target triple to the C-program tests (they compile C with the
//! `cc` crate at test time) and probes for rdma-core's `mlx5dv.h`: the
//! foreign-writer program uses its helpers, and is reported ignored, with
//! the reason, where the header is not installed.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_mlx5dv_header)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=/usr/include/infiniband/mlx5dv.h");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=MLX5R_TARGET={target}");
    if !std::path::Path::new("/usr/include/infiniband/mlx5dv.h").exists() {
        println!("cargo:rustc-cfg=no_mlx5dv_header");
    }
}
