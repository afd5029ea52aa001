//! One name for the simulator: `mlx5::sim` holds the `mlx5-sim` crate's
//! software NIC and the backend over it; `mlx5::model`, its old name, is a
//! deprecated alias for one release and names the same items.

#![allow(deprecated)]

#[test]
fn the_simulator_is_mlx5_sim_and_the_old_path_still_names_it() {
    let (fabric, a, _b) = mlx5::sim::two_hosts(mlx5::sim::ExecMode::Deterministic);
    let _: &mlx5::sim::Fabric = &fabric;
    // The old path names the very same types.
    let mode: mlx5::model::ExecMode = mlx5::sim::ExecMode::Watch;
    assert_eq!(mode, mlx5::model::ExecMode::Watch);
    let _: &mlx5::model::Fabric = &fabric;
    assert!(a.open().is_ok());
}
