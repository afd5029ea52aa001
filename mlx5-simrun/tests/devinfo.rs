//! The unmodified rdma-core tools see the simulated devices: `ibv_devices`
//! and `ibv_devinfo -v` (Debian: ibverbs-utils, which `.ci/run` installs)
//! run under `mlx5_simrun`, through the real libibverbs and libmlx5, and
//! what they print is the simulator's configuration. Ignored, with the
//! reason, where the tools are not installed (build.rs probes for them).

mod common;

use common::simrun;
use std::path::Path;

fn run(args: &[&str]) -> String {
    let o = simrun().args(args).output().expect("run mlx5_simrun");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?}: {}\n{out}{err}", o.status);
    assert!(!err.contains("Failed"), "{args:?}: {err}");
    out
}

/// `field:<tabs>value` of `ibv_devinfo`'s output, the `n`-th occurrence.
fn field<'a>(out: &'a str, name: &str, n: usize) -> &'a str {
    out.lines()
        .filter_map(|l| l.trim_start().strip_prefix(&format!("{name}:")))
        .nth(n)
        .unwrap_or_else(|| panic!("no {name} #{n} in\n{out}"))
        .trim()
}

#[test]
#[cfg_attr(
    no_ibverbs_utils,
    ignore = "ibv_devinfo / ibv_devices not installed (Debian: ibverbs-utils; .ci/run installs it)"
)]
fn ibv_devices_and_ibv_devinfo_show_the_simulators_devices() {
    let out = run(&["--devices", "2", "--", "ibv_devices"]);
    assert!(out.contains("mlx5_0") && out.contains("0002c90300000001"), "{out}");
    assert!(out.contains("mlx5_1") && out.contains("0002c90300000002"), "{out}");

    let setup = mlx5_simrun::Setup { devices: 2, roce: false, shared: false };
    let nics: Vec<_> = setup.fabric().nics().iter().map(|n| n.info()).collect();
    let out = run(&["--devices", "2", "--", "ibv_devinfo", "-v"]);
    for (i, nic) in nics.iter().enumerate() {
        assert_eq!(field(&out, "hca_id", i), nic.name);
        assert_eq!(field(&out, "vendor_id", i), "0x02c9");
        assert_eq!(field(&out, "vendor_part_id", i), mlx5_simrun::PART_ID.to_string());
        assert_eq!(field(&out, "fw_ver", i), mlx5_simrun::FW_VER);
        assert_eq!(field(&out, "max_qp_wr", i), nic.caps.max_qp_wr.to_string());
        assert_eq!(field(&out, "max_sge", i), nic.caps.max_sge.to_string());
        assert_eq!(field(&out, "max_cqe", i), nic.caps.max_cqe.to_string());
        assert_eq!(field(&out, "max_qp_rd_atom", i), nic.caps.max_rd_atomic.to_string());
        assert_eq!(field(&out, "port_lid", i), nic.lid.to_string());
        assert_eq!(field(&out, "link_layer", i), "InfiniBand");
        assert!(field(&out, "active_mtu", i).starts_with(&nic.active_mtu.to_string()));
    }
    assert_eq!(field(&out, "node_guid", 1), "0002:c903:0000:0002");

    let out = run(&["--link", "roce", "--", "ibv_devinfo", "-v"]);
    assert_eq!(field(&out, "link_layer", 0), "Ethernet");
    assert!(field(&out, "GID[  0]", 0).contains("10.0.0.1, RoCE v2"), "{out}");
}

/// The launcher passes the program's exit status through and refuses bad
/// arguments; the temporary sysfs tree is gone afterwards.
#[test]
fn the_launcher_passes_the_status_through() {
    let st = simrun()
        .args(["--", "sh", "-c", "test -f \"$SYSFS_PATH/class/infiniband_verbs/abi_version\"; exit 7"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
    let o = simrun().args(["--", "sh", "-c", "echo $SYSFS_PATH"]).output().unwrap();
    let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(!dir.is_empty() && !Path::new(&dir).exists(), "{dir} left behind");
    let o = simrun().args(["--devices", "0", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--devices 0"));
}
