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

/// The hardware backend on the emulated device (`mlx5_simrun`, step 10):
/// the real libibverbs and libmlx5 under it, the simulator executing what
/// they write. Run by `the_hardware_suite_runs_on_the_emulated_device`
/// inside the launcher; ignored when run directly.
fn emu_bed() -> scenarios::Bed<mlx5::hw::Hw> {
    let dev = mlx5::hw::device("mlx5_0").unwrap_or_else(|e| panic!("mlx5_0: {e}"));
    scenarios::Bed::new(dev.open().unwrap(), dev.open().unwrap())
}

conformance_suite!(
    emu,
    emu_bed(),
    #[ignore = "runs inside mlx5_simrun: the_hardware_suite_runs_on_the_emulated_device starts it"]
);

/// Port and device events on the hardware backend over the emulated device:
/// the test takes the simulated port down and up, then fails the device,
/// through the preload library's test hooks (found with `dlsym`), and reads
/// what libibverbs delivers (`ibv_get_async_event`).
#[test]
#[ignore = "runs inside mlx5_simrun: port_and_device_events_reach_the_hardware_backend starts it"]
fn emu_port_and_device_events() {
    type Hook = unsafe extern "C" fn(i32, i32) -> i32;
    type Fatal = unsafe extern "C" fn(i32) -> i32;
    // SAFETY: symbol lookups by NUL-terminated name in the process.
    let (port, fatal) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"mlx5sk_set_port_active".as_ptr()),
            libc::dlsym(libc::RTLD_DEFAULT, c"mlx5sk_inject_fatal".as_ptr()),
        )
    };
    assert!(!port.is_null() && !fatal.is_null(), "not under mlx5_simrun");
    // SAFETY: the preload library's functions of these signatures.
    let (port, fatal) = unsafe {
        (
            std::mem::transmute::<*mut libc::c_void, Hook>(port),
            std::mem::transmute::<*mut libc::c_void, Fatal>(fatal),
        )
    };
    let dev = mlx5::hw::device("mlx5_0").unwrap();
    let ctx = dev.open().unwrap();
    let next = || {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(e) = ctx.async_event().unwrap() {
                return e;
            }
            assert!(t0.elapsed() < std::time::Duration::from_secs(10), "no async event");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    // SAFETY: device 0 exists under the launcher.
    assert_eq!(unsafe { port(0, 0) }, 0);
    assert_eq!(next(), mlx5::AsyncEvent::PortError { port: 1 });
    // SAFETY: as above.
    assert_eq!(unsafe { port(0, 1) }, 0);
    assert_eq!(next(), mlx5::AsyncEvent::PortActive { port: 1 });
    // SAFETY: as above.
    assert_eq!(unsafe { fatal(0) }, 0);
    assert_eq!(next(), mlx5::AsyncEvent::DeviceFatal);
    println!("=== events all right");
}

/// `emu_port_and_device_events`, inside `mlx5_simrun`.
#[test]
#[cfg_attr(
    emu_skip_no_library,
    ignore = "libibverbs.so.1 / libmlx5.so.1 not installed (Debian: ibverbs-providers; .ci/run installs them), or cross-compiled"
)]
fn port_and_device_events_reach_the_hardware_backend() {
    let o =
        emu_run(&["--devices", "1"], &["--ignored", "--exact", "emu_port_and_device_events", "--nocapture"]);
    assert!(o.contains("=== events all right"), "{o}");
}

/// This test binary inside `mlx5_simrun` (launcher options `simrun`) with
/// `args`: its standard output; panics unless it succeeded.
fn emu_run(simrun: &[&str], args: &[&str]) -> String {
    use std::process::Command;
    let me = std::env::current_exe().unwrap();
    let launcher = me.parent().unwrap().parent().unwrap().join("mlx5_simrun");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Built now even when present (a no-op when fresh): a stale preload
    // library would test old code.
    let ok = Command::new(cargo)
        .args(["build", "-q", "-p", "mlx5-simrun", "-p", "mlx5-simkern"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "building mlx5_simrun and the preload library");
    let o = Command::new(&launcher).args(simrun).arg("--").arg(&me).args(args).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}\n{out}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    out
}

/// The differential scenario's transcript on the hardware backend over the
/// emulated device, printed between markers for
/// `the_hardware_backend_matches_the_simulator_backend`.
#[test]
#[ignore = "runs inside mlx5_simrun: the_hardware_backend_matches_the_simulator_backend starts it"]
fn emu_differential_transcript() {
    let t = scenarios::differential_transcript(emu_bed());
    println!("=== transcript\n{t}=== end");
}

/// The `emu` suite above, inside `mlx5_simrun`: the hardware backend's
/// control path (libibverbs, mlx5dv_create_cq/qp, mlx5dv_init_obj) and its
/// data path (WQEs, doorbell records, BlueFlame stores, CQE polling) through
/// the unmodified libibverbs and libmlx5 on the emulated device.
#[test]
#[cfg_attr(
    emu_skip_no_library,
    ignore = "libibverbs.so.1 / libmlx5.so.1 not installed (Debian: ibverbs-providers; .ci/run installs them), or cross-compiled"
)]
fn the_hardware_suite_runs_on_the_emulated_device() {
    // Every scenario, on an InfiniBand port and on a RoCE one (GIDs, AVs
    // with MACs), the tests in parallel threads as cargo runs them.
    for link in ["ib", "roce"] {
        let out = emu_run(&["--devices", "1", "--link", link], &["--ignored", "emu::"]);
        // Every scenario of the suite (13 when this was written) ran and passed.
        let passed: usize = out
            .lines()
            .find_map(|l| l.strip_prefix("test result: ok. ")?.split(' ').next()?.parse().ok())
            .unwrap_or(0);
        assert!(
            passed >= 13 && out.contains("passed; 0 failed; 0 ignored"),
            "{link}: {passed} passed\n{out}"
        );
    }
}

/// The differential scenario (`scenarios::differential_transcript`): the
/// simulator backend in this process and the hardware backend over the
/// emulated device (the real libibverbs and libmlx5 writing the WQEs) give
/// the same completions, in the same order, and the same memory.
#[test]
#[cfg_attr(
    emu_skip_no_library,
    ignore = "libibverbs.so.1 / libmlx5.so.1 not installed (Debian: ibverbs-providers; .ci/run installs them), or cross-compiled"
)]
fn the_hardware_backend_matches_the_simulator_backend() {
    let sim = scenarios::differential_transcript(sim_bed(false, ExecMode::Deterministic));
    assert!(sim.lines().count() > 40, "{sim}");
    let out =
        emu_run(&["--devices", "1"], &["--ignored", "--exact", "emu_differential_transcript", "--nocapture"]);
    let hw = out
        .split("=== transcript\n")
        .nth(1)
        .and_then(|s| s.split("=== end").next())
        .unwrap_or_else(|| panic!("no transcript in\n{out}"));
    for (i, (s, h)) in sim.lines().zip(hw.lines()).enumerate() {
        assert_eq!(s, h, "line {i} differs: simulator backend vs hardware backend on the emulated device");
    }
    assert_eq!(sim.lines().count(), hw.lines().count(), "sim:\n{sim}\nhw:\n{hw}");
}
