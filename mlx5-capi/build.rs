//! Passes the target triple to the C-program tests (they compile C with the
//! `cc` crate at test time) and probes for rdma-core's `mlx5dv.h`: the
//! foreign-writer program uses its helpers, and is reported ignored, with
//! the reason, where the header is not installed.

fn main() {
    // The shared library's soname names its ABI: `libmlx5r.so.MAJOR`,
    // or `.so.0.MINOR` before 1.0 (a 0.x minor version may break it).
    // Programs linked with -lmlx5r then need that name at run time,
    // which `install.sh` provides as a link to the versioned file.
    if std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{}", soname());
    }
    println!("cargo::rustc-check-cfg=cfg(no_mlx5dv_header)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=/usr/include/infiniband/mlx5dv.h");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=MLX5R_TARGET={target}");
    if !std::path::Path::new("/usr/include/infiniband/mlx5dv.h").exists() {
        println!("cargo:rustc-cfg=no_mlx5dv_header");
    }
}

/// `libmlx5r.so.MAJOR` (`.so.0.MINOR` before 1.0).
fn soname() -> String {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    if major == "0" {
        format!("libmlx5r.so.0.{minor}")
    } else {
        format!("libmlx5r.so.{major}")
    }
}
