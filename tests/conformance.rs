//! The conformance suite: the same scenarios on every backend.
//!
//! - `sim_ib`, `sim_roce`, `sim_threaded`: always run, on the simulator.
//! - `hw`: ConnectX hardware, loopback between QPs of one port of the device
//!   named by `MLX5_TEST_DEVICE`. Without it they are reported ignored with
//!   the reason, never passed.

#[macro_use]
mod scenarios;
use mlx5::model::ExecMode;
use mlx5::sim::{devices, FabricConfig, HostConfig, Sim};

fn sim_bed(roce: bool, mode: ExecMode) -> scenarios::Bed<Sim> {
    let fabric = mlx5::model::Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
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
