//! The conformance suite: the same scenarios on every backend.
//!
//! - `sim_ib`, `sim_roce`, `sim_threaded`: always run, on the simulator.
//! - `hw`: ConnectX hardware, loopback between QPs of one port of the device
//!   named by `MLX5_TEST_DEVICE`. Without it they are reported ignored with
//!   the reason, never passed.

#[macro_use]
mod scenarios;
use mlx5::sim::ExecMode;
use mlx5::sim::{devices, FabricConfig, HostConfig, Sim};

fn sim_bed(roce: bool, mode: ExecMode) -> scenarios::Bed<Sim> {
    let fabric = mlx5::sim::Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
    for i in 0..2u8 {
        let name = format!("sim{i}");
        fabric.add_host(if roce {
            HostConfig::roce(&name, [192, 168, 0, i + 1], [2, 0, 0, 0, 0, i + 1])
        } else {
            HostConfig::infiniband(&name, i as u16 + 1)
        });
    }
    let d = devices(&fabric);
    // The devices keep the fabric alive (each NIC handle holds it).
    scenarios::Bed::new(d[0].open().unwrap(), d[1].open().unwrap())
}

conformance_suite!(sim_ib, sim_bed(false, ExecMode::Deterministic));
conformance_suite!(sim_roce, sim_bed(true, ExecMode::Deterministic));
conformance_suite!(sim_threaded, sim_bed(false, ExecMode::Threaded));

/// Loopback on one port of the device named by `MLX5_TEST_DEVICE`: both
/// ends are QPs of the same device (one context each).
fn hw_bed() -> scenarios::Bed<mlx5::hw::Hw> {
    let name = std::env::var("MLX5_TEST_DEVICE").expect("MLX5_TEST_DEVICE names the device");
    let dev = mlx5::hw::device(&name).unwrap_or_else(|e| panic!("{name}: {e}"));
    scenarios::Bed::new(dev.open().unwrap(), dev.open().unwrap())
}

conformance_suite!(
    hw,
    hw_bed(),
    #[cfg_attr(hw_skip_no_library, ignore = "libibverbs.so.1 not found: install rdma-core (ibverbs-providers)")],
    #[cfg_attr(hw_skip_not_selected, ignore = "no mlx5 device selected: set MLX5_TEST_DEVICE=mlx5_0 to run on hardware")],
    #[cfg_attr(hw_skip_no_device, ignore = "MLX5_TEST_DEVICE names no device in /sys/class/infiniband")];
    dc: #[cfg_attr(hw_skip_no_dc, ignore = "the device has no DC (ConnectX-4 Lx): create_dci is Error::Unsupported")]
);
