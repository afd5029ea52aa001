//! `include/mlx5r.h` is what cbindgen generates from this crate and the
//! ring core: regenerate it and compare. `MLX5R_BLESS=1` rewrites it.

use std::path::PathBuf;

#[test]
fn header_matches_cbindgen() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    let generated = String::from_utf8(out).expect("UTF-8");
    let path = dir.join("include/mlx5r.h");
    if std::env::var_os("MLX5R_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/mlx5r.h is stale: run `MLX5R_BLESS=1 cargo test -p mlx5-capi --test header`"
    );
}
