#![cfg(feature = "hw")]
//! The build script's copy of the parts without DC is the hardware backend's
//! list (the build script cannot depend on the crate it builds for).

#[test]
fn build_script_knows_the_same_parts_without_dc() {
    let src = include_str!("../src/build.rs");
    let parts: Vec<String> = mlx5::hw::dc_parts::NO_DC_PARTS.iter().map(u32::to_string).collect();
    let line = format!("const NO_DC_PARTS: &[u32] = &[{}];", parts.join(", "));
    assert!(src.contains(&line), "src/build.rs must declare {line}");
}
