//! Compiles the command side of the emulated kernel (`src/kern.c`) against
//! the installed kernel headers (`rdma/ib_user_verbs.h`, `rdma/mlx5-abi.h`,
//! Debian: libibverbs-dev), so every layout is the kernel's own.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/kern.c");
    cc::Build::new()
        .file("src/kern.c")
        .opt_level(2)
        .flag("-fPIC")
        .warnings(true)
        .extra_warnings(true)
        .compile("mlx5sk_kern");
}
