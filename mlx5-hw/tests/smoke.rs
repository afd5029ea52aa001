//! Hardware smoke test: one RC loopback RDMA WRITE (with BlueFlame) on the
//! device named by `MLX5_TEST_DEVICE`, through the generic front-end.
//! Ignored by default (there is no RDMA device in CI); run it on a machine
//! with an mlx5 NIC:
//!
//! ```sh
//! MLX5_TEST_DEVICE=mlx5_0 cargo test -p mlx5-hw --test smoke -- --ignored
//! ```
//!
//! The conformance suite of the workspace runs the full scenarios on both
//! backends; this only proves the control path and the doorbell end to end.
//!
//! Without a NIC, `the_smoke_test_runs_on_the_emulated_device` runs it on
//! the simulator under the unmodified libibverbs and libmlx5
//! (`mlx5_simrun`, the emulated uverbs kernel).

use std::time::{Duration, Instant};

use mlx5_api::{AccessFlags, ConnectParams, QpConfig, Sge, Status, WqeFlags};

#[test]
#[ignore = "needs an mlx5 device: set MLX5_TEST_DEVICE=mlx5_0"]
fn rc_loopback_rdma_write_on_hardware() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::var(mlx5_hw::TEST_DEVICE_ENV)
        .map_err(|_| "set MLX5_TEST_DEVICE=mlx5_0 (the device to test) to run this test")?;
    let dev = mlx5_hw::device(&name)?;
    let ctx = dev.open()?;
    let port = ctx.query_port(1)?;
    eprintln!("{name}: {:?}, active MTU {}, LID {}", port.link_layer, port.active_mtu, port.lid);

    let pd = ctx.alloc_pd()?;
    let mut done = Vec::new();
    let mut cq = ctx.create_mono_cq(64, |c, entry: u64| done.push((entry, c.status)))?;
    let config = QpConfig { max_send_wr: 16, max_recv_wr: 16, ..QpConfig::default() };
    let a = ctx.create_rc_qp(&pd, &cq, &cq, &config)?;
    let b = ctx.create_rc_qp(&pd, &cq, &cq, &config)?;
    let rd = ctx.caps().max_rd_atomic.max(1);
    let params = ConnectParams {
        path_mtu: port.active_mtu.min(4096),
        max_rd_atomic: rd,
        max_dest_rd_atomic: rd,
        ..ConnectParams::default()
    };
    a.activate(&ConnectParams { remote: Some(b.local_info()?), ..params.clone() })?;
    b.activate(&ConnectParams { remote: Some(a.local_info()?), ..params.clone() })?;

    let src = pd.alloc_mr(4096, AccessFlags::ALL)?;
    let dst = pd.alloc_mr(4096, AccessFlags::ALL)?;
    let pattern: Vec<u8> = (0..64u8).collect();
    src.write(0, &pattern)?;
    a.wqe_builder(7)?
        .ctrl_rdma_write(WqeFlags::SIGNALED)?
        .rdma(dst.addr(), dst.rkey())?
        .sge(Sge::new(src.addr(), 64, src.lkey()))?
        .finish_with_blueflame()?;

    let deadline = Instant::now() + Duration::from_secs(2);
    while cq.poll(16).completions == 0 {
        assert!(Instant::now() < deadline, "no completion within 2 s");
    }
    drop(cq);
    assert_eq!(done, vec![(7, Status::Success)]);
    let mut got = vec![0u8; 64];
    dst.read(0, &mut got)?;
    assert_eq!(got, pattern);
    Ok(())
}

/// The test above, inside `mlx5_simrun`: the same code, the real
/// libibverbs and libmlx5, the simulator as the device. Ignored, with the
/// reason, where they are not installed.
#[test]
#[cfg_attr(
    emu_skip_no_library,
    ignore = "libibverbs.so.1 / libmlx5.so.1 not installed (Debian: ibverbs-providers; .ci/run installs them), or cross-compiled"
)]
fn the_smoke_test_runs_on_the_emulated_device() {
    use std::process::Command;
    let me = std::env::current_exe().unwrap();
    let bin = me.parent().unwrap().parent().unwrap();
    let simrun = bin.join("mlx5_simrun");
    {
        // Built now even when present (a no-op when fresh): a stale preload
        // library would test old code.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-q", "-p", "mlx5-simrun", "-p", "mlx5-simkern"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "building mlx5_simrun and the preload library");
    }
    for link in ["ib", "roce"] {
        let o = Command::new(&simrun)
            .args(["--link", link, "--"])
            .arg(&me)
            .args(["--ignored", "--exact", "rc_loopback_rdma_write_on_hardware"])
            .env(mlx5_hw::TEST_DEVICE_ENV, "mlx5_0")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{link}: {}\n{out}\n{err}", o.status);
        assert!(out.contains("test result: ok. 1 passed; 0 failed"), "{link}:\n{out}\n{err}");
    }
}
