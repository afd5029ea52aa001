//! What the UDP-wire test programs share (each a main of its own: their sides are
//! processes): joining the wire as device `mlx5_0` with the numbers of one registry,
//! and waiting for a completion.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5::sim::registry::Registry;
use mlx5::sim::{ExecMode, Fabric, FabricConfig, HostConfig, Sim};
use mlx5::{Completion, CompletionQueue, Context};

/// Device `mlx5_0` (threaded NIC) on the UDP wire, its numbers from the registry in
/// `dir`, opened; the fabric keeps it alive.
pub fn join_wire(dir: &Path) -> (Fabric, Context<Sim>) {
    let fabric = Fabric::new(FabricConfig { mode: ExecMode::Threaded, ..FabricConfig::default() });
    let nic = fabric.add_host(HostConfig::infiniband("mlx5_0", 1));
    let registry = Registry::open(&Registry::path_in(dir, "mlx5_0")).expect("open the registry");
    nic.open_wire(Arc::new(registry)).expect("join the UDP wire");
    let ctx = mlx5::sim::devices(&fabric).remove(0).open().unwrap();
    (fabric, ctx)
}

/// The next completion of `cq` and its entry (10 s at most).
pub fn next(cq: &CompletionQueue<Sim, u64>) -> (Completion, u64) {
    let t0 = Instant::now();
    loop {
        let mut got = None;
        cq.poll_with(1, |c, e| got = Some((c, e)));
        if let Some(g) = got {
            return g;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no completion in 10 s");
        std::thread::sleep(Duration::from_micros(50));
    }
}
