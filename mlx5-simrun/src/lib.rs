//! `mlx5_simrun`: the simulator as a device under the unmodified
//! libibverbs and libmlx5 (rdma-core). The launcher writes a sysfs tree
//! that describes simulated ConnectX devices (`mlx5_0`, `mlx5_1`, ...) into
//! a private directory, points `SYSFS_PATH` at it and preloads the emulated
//! uverbs kernel (`libmlx5_simkern.so`, the `mlx5-simkern` crate), which
//! owns `/dev/infiniband/uverbsN` and answers the uverbs `write()` command
//! ABI. See `shared/design/emulated-kernel.md` for why this works.
//!
//! What libibverbs reads (rdma-core v44, `libibverbs/sysfs.c`,
//! `ibdev_nl.c`'s sysfs fallback): `class/infiniband_verbs/abi_version`,
//! `class/infiniband_verbs/uverbsN/{ibdev,dev,abi_version}`, then per
//! device `class/infiniband/<ibdev>/{node_type,node_guid,...}` and the
//! provider match on `device/modalias` (libmlx5's PCI table). The `dev`
//! attribute is `/dev/zero`'s `1:5`: the preload library opens it for the
//! device node, so libibverbs' character-device check passes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The simulated devices' configuration, shared by the launcher (sysfs) and
/// the preload library (commands) through the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// Devices (`mlx5_0` ..).
    pub devices: u32,
    /// RoCE instead of InfiniBand.
    pub roce: bool,
    /// The devices' numbers come from registries shared with the other processes run
    /// with `--shared` (`mlx5_sim::registry`; step 12).
    pub shared: bool,
}

/// The environment variable that names the capture file (`--pcap`) for the
/// preload library.
pub const ENV_PCAP: &str = "MLX5_SIMRUN_PCAP";

/// The environment variable that carries [`Setup`] to the preload library.
pub const ENV_SETUP: &str = "MLX5_SIMRUN_SETUP";

impl Setup {
    /// `devices,ib` or `devices,roce`, and `,shared` after it when shared.
    pub fn to_env(self) -> String {
        let shared = if self.shared { ",shared" } else { "" };
        format!("{},{}{shared}", self.devices, if self.roce { "roce" } else { "ib" })
    }

    /// The inverse of [`Setup::to_env`].
    pub fn from_env(s: &str) -> Option<Setup> {
        let mut f = s.split(',');
        let devices = f.next()?.parse().ok()?;
        let roce = f.next()? == "roce";
        let shared = match f.next() {
            None => false,
            Some("shared") => true,
            Some(_) => return None,
        };
        Some(Setup { devices, roce, shared })
    }

    /// The simulator's hosts for this setup: host `i` is device `mlx5_i`,
    /// LID `i + 1` (InfiniBand) or 10.0.0.`i + 1` (RoCE).
    pub fn fabric(self) -> mlx5_sim::Fabric {
        let fabric = mlx5_sim::Fabric::new(mlx5_sim::FabricConfig {
            mode: mlx5_sim::ExecMode::Watch,
            ..mlx5_sim::FabricConfig::default()
        });
        for i in 0..self.devices {
            let name = format!("mlx5_{i}");
            fabric.add_host(if self.roce {
                mlx5_sim::HostConfig::roce(&name, [10, 0, 0, i as u8 + 1], [0x02, 0xc9, 0, 0, 0, i as u8 + 1])
            } else {
                mlx5_sim::HostConfig::infiniband(&name, i as u16 + 1)
            });
        }
        fabric
    }
}

/// GID table entries per port (QUERY_PORT's `gid_tbl_len`).
pub const GID_TABLE: u32 = 16;
/// P_Key table entries per port (QUERY_PORT's `pkey_tbl_len`).
pub const PKEY_TABLE: u32 = 16;

/// ConnectX-5's PCI device id (`MT27800`), which libmlx5's table claims.
pub const PART_ID: u32 = 0x1017;
/// The firmware version the devices report.
pub const FW_VER: &str = "16.35.1012";

/// A GUID as sysfs writes it: four groups of four hex digits.
fn guid(g: u64) -> String {
    format!("{:04x}:{:04x}:{:04x}:{:04x}", g >> 48, (g >> 32) & 0xffff, (g >> 16) & 0xffff, g & 0xffff)
}

/// The network device of simulated RoCE device `i` (`mlx5sim<i>`).
pub fn netdev_name(i: u32) -> String {
    format!("mlx5sim{i}")
}

/// The interface index the emulated kernel gives [`netdev_name`]`(i)`: far
/// above the indices of the machine's own interfaces.
pub fn netdev_ifindex(i: u32) -> u32 {
    0x4d58_0000 + i
}

/// The node GUID of device `i`.
pub fn node_guid(i: u32) -> u64 {
    0x0002_c903_0000_0000 | u64::from(i + 1)
}

/// A GID as sysfs writes it: eight groups of four hex digits.
fn gid(g: &[u8; 16]) -> String {
    let mut s = String::new();
    for (k, pair) in g.chunks(2).enumerate() {
        if k > 0 {
            s.push(':');
        }
        let _ = write!(s, "{:02x}{:02x}", pair[0], pair[1]);
    }
    s
}

/// Write the sysfs tree of `setup` under `root` (which must exist).
pub fn write_sysfs(root: &Path, setup: Setup) -> std::io::Result<()> {
    let fabric = setup.fabric();
    let put = |rel: String, text: String| -> std::io::Result<()> {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("a file under the root"))?;
        std::fs::write(p, text + "\n")
    };
    put("class/infiniband_verbs/abi_version".into(), "6".into())?;
    for (i, nic) in fabric.nics().iter().enumerate() {
        let i = i as u32;
        let info = nic.info();
        // As the kernel lays it out: the device's directory under its PCI function's
        // (`devices/pci0000:00/0000:00:0N.0/infiniband/mlx5_i`, with `device` the way
        // back to the function), and `class/infiniband/mlx5_i` a link to it. UCX finds
        // the PCI function by resolving that link (its vendor and device ids decide
        // its mlx5 transports).
        let pci = format!("devices/pci0000:00/0000:00:{:02x}.0", i + 2);
        let real = format!("{pci}/infiniband/{}", info.name);
        std::fs::create_dir_all(root.join(&real))?;
        std::fs::create_dir_all(root.join("class/infiniband"))?;
        std::os::unix::fs::symlink(
            format!("../../{real}"),
            root.join(format!("class/infiniband/{}", info.name)),
        )?;
        std::os::unix::fs::symlink("../..", root.join(format!("{real}/device")))?;
        let dev = format!("class/infiniband/{}", info.name);
        let uv = format!("class/infiniband_verbs/uverbs{i}");
        put(format!("{uv}/ibdev"), info.name.clone())?;
        put(format!("{uv}/dev"), "1:5".into())?;
        put(format!("{uv}/abi_version"), "1".into())?;
        put(format!("{dev}/node_type"), "1: CA".into())?;
        put(format!("{dev}/node_guid"), guid(node_guid(i)))?;
        put(format!("{dev}/sys_image_guid"), guid(node_guid(i)))?;
        put(format!("{dev}/fw_ver"), FW_VER.into())?;
        put(format!("{dev}/hca_type"), "MT4119".into())?;
        put(format!("{dev}/hw_rev"), "0x0".into())?;
        put(format!("{dev}/board_id"), "MT_0000000010".into())?;
        put(format!("{dev}/node_desc"), format!("mlx5_simrun {}", info.name))?;
        put(
            format!("{dev}/device/modalias"),
            format!("pci:v000015B3d{PART_ID:08X}sv000015B3sd00000001bc02sc00i00"),
        )?;
        // The PCI function's ids, as sysfs gives them (UCX picks its mlx5
        // transports by them).
        put(format!("{dev}/device/vendor"), "0x15b3".into())?;
        put(format!("{dev}/device/device"), format!("0x{PART_ID:04x}"))?;
        put(format!("{dev}/device/numa_node"), "0".into())?;
        let port = format!("{dev}/ports/1");
        let roce = info.link_layer == mlx5_sim::LinkLayer::Ethernet;
        put(format!("{port}/state"), "4: ACTIVE".into())?;
        put(format!("{port}/phys_state"), "5: LinkUp".into())?;
        put(format!("{port}/link_layer"), if roce { "Ethernet" } else { "InfiniBand" }.into())?;
        put(format!("{port}/lid"), format!("0x{:x}", if roce { 0 } else { info.lid }))?;
        put(format!("{port}/sm_lid"), format!("0x{:x}", if roce { 0 } else { 1 }))?;
        put(format!("{port}/lid_mask_count"), "0".into())?;
        put(format!("{port}/sm_sl"), "0".into())?;
        put(format!("{port}/rate"), "100 Gb/sec (4X EDR)".into())?;
        put(format!("{port}/cap_mask"), "0x2651e848".into())?;
        // The tables as QUERY_PORT sizes them (GID_TABLE, PKEY_TABLE): entry
        // 0 the port's, the rest empty, as a real port lists them.
        for k in 0..PKEY_TABLE {
            put(format!("{port}/pkeys/{k}"), if k == 0 { "0xffff" } else { "0x0000" }.into())?;
        }
        for k in 0..GID_TABLE {
            put(format!("{port}/gids/{k}"), gid(&if k == 0 { info.gid } else { [0; 16] }))?;
        }
        // A type for every entry (libibverbs' fallback GID-table query reads
        // each; a real port's empty entries read as an error that it takes for
        // "IB/RoCE v1", which a file cannot say): entry 0's own, then v1.
        for k in 0..GID_TABLE {
            let t = if k == 0 && roce { "RoCE v2" } else { "IB/RoCE v1" };
            put(format!("{port}/gid_attrs/types/{k}"), t.into())?;
        }
        if roce {
            // The RoCE port's network device: its name here and its MAC
            // under class/net, which the emulated kernel answers for
            // (if_nametoindex: libibverbs resolves the GID's device).
            let ndev = netdev_name(i);
            put(format!("{port}/gid_attrs/ndevs/0"), ndev.clone())?;
            let mac = info.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
            put(format!("class/net/{ndev}/address"), mac)?;
            put(format!("class/net/{ndev}/ifindex"), netdev_ifindex(i).to_string())?;
        }
    }
    Ok(())
}

/// A private directory removed when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory under the system's temporary directory.
    pub fn new(tag: &str) -> std::io::Result<TempDir> {
        let base = std::env::temp_dir();
        for k in 0..1000u32 {
            let p = base.join(format!("{tag}-{}-{k}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no free temporary directory name"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree has what libibverbs' sysfs scan reads, with the values
    /// the simulator's NICs have.
    #[test]
    fn the_tree_describes_the_simulators_nics() {
        let dir = TempDir::new("simrun-test").unwrap();
        write_sysfs(&dir.0, Setup { devices: 2, roce: false, shared: false }).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.0.join(p)).unwrap();
        assert_eq!(read("class/infiniband_verbs/abi_version"), "6\n");
        assert_eq!(read("class/infiniband_verbs/uverbs1/ibdev"), "mlx5_1\n");
        assert_eq!(read("class/infiniband_verbs/uverbs0/dev"), "1:5\n");
        assert_eq!(read("class/infiniband/mlx5_0/node_guid"), "0002:c903:0000:0001\n");
        assert_eq!(read("class/infiniband/mlx5_1/ports/1/lid"), "0x2\n");
        assert!(read("class/infiniband/mlx5_0/device/modalias").starts_with("pci:v000015B3d00001017"));
        assert!(read("class/infiniband/mlx5_0/ports/1/gids/0").starts_with("fe80:0000:0000:0000:"));
        // As UCX finds a device's PCI function: the class entry resolved, two levels up,
        // holds the function's vendor and device ids (Mellanox, ConnectX-5).
        let real = std::fs::canonicalize(dir.0.join("class/infiniband/mlx5_1")).unwrap();
        assert!(real.ends_with("devices/pci0000:00/0000:00:03.0/infiniband/mlx5_1"), "{real:?}");
        let pci = real.parent().unwrap().parent().unwrap();
        assert_eq!(std::fs::read_to_string(pci.join("vendor")).unwrap(), "0x15b3\n");
        assert_eq!(std::fs::read_to_string(pci.join("device")).unwrap(), "0x1017\n");
        let dir = TempDir::new("simrun-test").unwrap();
        write_sysfs(&dir.0, Setup { devices: 1, roce: true, shared: false }).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.0.join(p)).unwrap();
        assert_eq!(read("class/infiniband/mlx5_0/ports/1/link_layer"), "Ethernet\n");
        assert_eq!(read("class/infiniband/mlx5_0/ports/1/gid_attrs/types/0"), "RoCE v2\n");
        assert_eq!(
            Setup::from_env(&Setup { devices: 3, roce: true, shared: false }.to_env()),
            Some(Setup { devices: 3, roce: true, shared: false })
        );
    }
}
