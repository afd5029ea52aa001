//! `mlx5_devinfo`: `ibv_devinfo` for this library. Same options (`-d`,
//! `-i`, `-l`, `-v`) and the same layout (`hca_id:`, `transport:`, ...,
//! one block per port), for the ConnectX devices rdma-core finds *and* the
//! simulated devices the tools run on (`sim0`, `sim1`: `--backend sim`).
//! Without rdma-core or an mlx5 device the hardware part is one line
//! saying why, and the simulated devices are still listed.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use mlx5_api::{Backend, Context, Device, DeviceCaps, Gid, LinkLayer, PortInfo};
use mlx5_hw::decode::format_guid;
use mlx5_hw::{Hw, HwContext};

/// `ibv_devinfo`'s options.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Print the attributes of mlx5 devices, simulated ones included (ibv_devinfo's options)"
)]
pub struct DevinfoOpts {
    /// Use this device (default: all).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Show only this port of the device.
    #[arg(short = 'i', long = "ib-port")]
    pub ib_port: Option<u8>,
    /// Print only the device names.
    #[arg(short = 'l', long = "list")]
    pub list: bool,
    /// Print all the attributes (capabilities, GIDs).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Which devices: hardware and simulated (default), or one kind.
    #[arg(long, value_enum, default_value = "all")]
    pub backend: Which,
    /// Explain an error completion seen elsewhere: its syndrome and, after a colon,
    /// its vendor syndrome (hexadecimal with 0x, or decimal), e.g. 0x13:0x88
    #[arg(long, value_name = "SYNDROME[:VENDOR]")]
    pub explain: Option<String>,
}

/// `--explain SYNDROME[:VENDOR]`: the sentence `Completion::explain` gives for an
/// error CQE of that syndrome and vendor syndrome (hexadecimal with `0x`, or decimal).
pub fn explain_arg(arg: &str) -> Result<String, String> {
    let num = |s: &str| -> Result<u8, String> {
        let s = s.trim();
        let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(h) => u8::from_str_radix(h, 16),
            None => s.parse(),
        };
        r.map_err(|_| format!("--explain {arg}: {s:?} is not a byte (0x13, or 19)"))
    };
    let (synd, vendor) = match arg.split_once(':') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => (num(arg)?, 0),
    };
    let mut s = String::new();
    let f = mlx5_api::ring::explain::Failed::Unknown;
    let _ = mlx5_api::ring::explain::write_explanation(&mut s, f, mlx5_api::Syndrome::from_raw(synd), vendor);
    // The sentence starts mid-phrase without a work request: capitalise it.
    let mut c = s.chars();
    Ok(c.next().map_or(String::new(), |f| f.to_uppercase().collect::<String>() + c.as_str()))
}

/// `--backend` of `mlx5_devinfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// Hardware and simulated devices.
    All,
    /// Simulated devices only.
    Sim,
    /// Hardware devices only.
    Hw,
}

/// One port as `ibv_devinfo` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortView {
    /// Port number.
    pub port: u8,
    /// `PORT_ACTIVE (4)` and the like.
    pub state: String,
    /// Largest MTU in bytes.
    pub max_mtu: Option<u32>,
    /// Active MTU in bytes.
    pub active_mtu: Option<u32>,
    /// The subnet manager's LID.
    pub sm_lid: u16,
    /// Base LID.
    pub lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Link layer.
    pub link_layer: Option<LinkLayer>,
    /// GID table entries known (index, GID, what it is).
    pub gids: Vec<(u8, Gid, &'static str)>,
}

/// One device as `ibv_devinfo` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevView {
    /// `hca_id`.
    pub name: String,
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID, `ibv_devinfo` style (`0002:c903:0001:0203`).
    pub node_guid: String,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// Ports.
    pub ports: Vec<PortView>,
    /// Extra `-v` lines (`name`, value).
    pub verbose: Vec<(String, String)>,
}

/// `enum ibv_mtu` value of an MTU in bytes (`ibv_devinfo` prints both).
fn mtu_code(b: u32) -> u32 {
    match b {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        4096 => 5,
        _ => 0,
    }
}

fn caps_lines(c: &DeviceCaps) -> Vec<(String, String)> {
    vec![
        ("max_qp_wr".into(), c.max_qp_wr.to_string()),
        ("max_sge".into(), c.max_sge.to_string()),
        ("max_cqe".into(), c.max_cqe.to_string()),
        ("max_qp_rd_atom".into(), c.max_rd_atomic.to_string()),
        ("max_sq_desc_sz".into(), c.max_wqe_sz_sq.to_string()),
        ("DC (DCI/DCT)".into(), if c.dc { "supported" } else { "not supported" }.into()),
    ]
}

/// A simulated device, described through the front-end (`query_port`, caps).
pub fn sim_view<B: Backend>(name: &str, ctx: &Context<B>) -> Result<DevView, String> {
    let p: PortInfo = ctx.query_port(1).map_err(|e| format!("{name}: {e}"))?;
    let guid = u64::from_be_bytes(p.gid.0[8..16].try_into().unwrap_or([0; 8]));
    Ok(DevView {
        name: name.into(),
        fw_ver: "simulated".into(),
        node_guid: format_guid(guid.to_be()),
        vendor_id: 0x02c9,
        vendor_part_id: 0,
        hw_ver: 0,
        ports: vec![PortView {
            port: p.port_num,
            state: "PORT_ACTIVE (4)".into(),
            max_mtu: Some(4096),
            active_mtu: Some(p.active_mtu),
            sm_lid: if p.link_layer == LinkLayer::InfiniBand { 1 } else { 0 },
            lid: p.lid,
            lmc: 0,
            link_layer: Some(p.link_layer),
            gids: vec![(p.sgid_index, p.gid, "")],
        }],
        verbose: {
            let mut v = caps_lines(ctx.caps());
            v.push(("port 1 GRH required".into(), if p.grh_required { "yes" } else { "no" }.into()));
            v
        },
    })
}

/// A ConnectX, described through rdma-core (`ibv_query_device`,
/// `ibv_query_port`, `mlx5dv_query_device`).
pub fn hw_view(ctx: &Context<Hw>) -> DevView {
    let hw: &HwContext = ctx.raw();
    let i = hw.info();
    let mut ports = Vec::new();
    for port in 1..=i.phys_port_cnt {
        let Ok(p) = hw.port_details(port) else { continue };
        let mut gids = vec![(0, Gid(p.gid0), "")];
        if p.sgid_index != 0 {
            gids.push((p.sgid_index, Gid(p.sgid), ", RoCE v2 (used)"));
        }
        ports.push(PortView {
            port,
            state: format!("{} ({})", p.state.name(), p.state.raw()),
            max_mtu: p.max_mtu,
            active_mtu: p.active_mtu,
            sm_lid: p.sm_lid,
            lid: p.lid,
            lmc: p.lmc,
            link_layer: p.link_layer.to_api(),
            gids,
        });
    }
    let m = &i.mlx5;
    let mut verbose = caps_lines(ctx.caps());
    for port in 1..=i.phys_port_cnt {
        if let Ok(p) = hw.port_details(port) {
            let g = if p.grh_required { "yes" } else { "no" };
            verbose.push((format!("port {port} GRH required"), g.into()));
        }
    }
    verbose.push(("max_qp".into(), i.max_qp.to_string()));
    verbose.push(("max_srq_wr".into(), i.max_srq_wr.to_string()));
    verbose.push(("mlx5dv version".into(), format!("{} (flags 0x{:x})", m.version, m.flags)));
    verbose.push(("CQE version".into(), if m.cqe_v1() { "1" } else { "0" }.into()));
    let comp = match m.cqe_comp {
        Some((n, f)) if n > 0 => format!("up to {n} CQEs, formats 0x{f:x}"),
        Some(_) => "not supported".into(),
        None => "not reported".into(),
    };
    verbose.push(("CQE compression".into(), comp));
    DevView {
        name: i.name.clone(),
        fw_ver: i.fw_ver.clone(),
        node_guid: format_guid(i.node_guid_be),
        vendor_id: i.vendor_id,
        vendor_part_id: i.vendor_part_id,
        hw_ver: i.hw_ver,
        ports,
        verbose,
    }
}

/// `ibv_devinfo`'s text for one device (all ports, or `port`).
pub fn render(d: &DevView, port: Option<u8>, verbose: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "hca_id:\t{}", d.name);
    let _ = writeln!(s, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(s, "\tfw_ver:\t\t\t\t{}", d.fw_ver);
    let _ = writeln!(s, "\tnode_guid:\t\t\t{}", d.node_guid);
    let _ = writeln!(s, "\tvendor_id:\t\t\t0x{:04x}", d.vendor_id);
    let _ = writeln!(s, "\tvendor_part_id:\t\t\t{}", d.vendor_part_id);
    let _ = writeln!(s, "\thw_ver:\t\t\t\t0x{:X}", d.hw_ver);
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t{}", d.ports.len());
    if verbose {
        for (k, v) in &d.verbose {
            let tabs = "\t".repeat(4usize.saturating_sub((k.len() + 2) / 8).max(1));
            let _ = writeln!(s, "\t{k}:{tabs}{v}");
        }
    }
    for p in d.ports.iter().filter(|p| port.is_none_or(|n| n == p.port)) {
        let mtu = |m: Option<u32>| m.map_or("unknown".into(), |b| format!("{b} ({})", mtu_code(b)));
        let _ = writeln!(s, "\t\tport:\t{}", p.port);
        let _ = writeln!(s, "\t\t\tstate:\t\t\t{}", p.state);
        let _ = writeln!(s, "\t\t\tmax_mtu:\t\t{}", mtu(p.max_mtu));
        let _ = writeln!(s, "\t\t\tactive_mtu:\t\t{}", mtu(p.active_mtu));
        let _ = writeln!(s, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
        let _ = writeln!(s, "\t\t\tport_lid:\t\t{}", p.lid);
        let _ = writeln!(s, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
        let ll = p.link_layer.map_or("Unknown".into(), |l| l.to_string());
        let _ = writeln!(s, "\t\t\tlink_layer:\t\t{ll}");
        if verbose {
            for (i, g, what) in &p.gids {
                let _ = writeln!(s, "\t\t\tGID[{i:3}]:\t\t{g}{what}");
            }
        }
        let _ = writeln!(s);
    }
    s
}

/// The simulated devices the tools use (`--backend sim`): `sim0` and `sim1`.
pub fn sim_views() -> Vec<DevView> {
    let fabric = crate::sim_fabric();
    mlx5_api::sim::devices(&fabric)
        .iter()
        .filter_map(|d: &Device<mlx5_api::sim::Sim>| d.open().ok().and_then(|c| sim_view(&d.name(), &c).ok()))
        .collect()
}

/// The ConnectX devices rdma-core finds, or why there are none.
pub fn hw_views() -> Result<Vec<DevView>, String> {
    let devs = mlx5_hw::devices().map_err(|e| e.to_string())?;
    devs.iter().map(|d| d.open().map(|c| hw_view(&c)).map_err(|e| format!("{}: {e}", d.name()))).collect()
}

/// Entry point of `mlx5_devinfo`.
pub fn main() -> ExitCode {
    let prog = crate::prog_name();
    let o = match crate::parse::<DevinfoOpts>(&prog) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if let Some(arg) = &o.explain {
        return match explain_arg(arg) {
            Ok(s) => {
                println!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{prog}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut devs = Vec::new();
    if o.backend != Which::Sim {
        match hw_views() {
            Ok(v) => devs.extend(v),
            // Like ibv_devinfo's "No IB devices found", but saying why; the
            // simulated devices still follow.
            Err(e) if o.backend == Which::All => eprintln!("{prog}: no hardware device: {e}"),
            Err(e) => {
                eprintln!("{prog}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if o.backend != Which::Hw {
        devs.extend(sim_views());
    }
    if let Some(name) = &o.ib_dev {
        devs.retain(|d| &d.name == name);
        if devs.is_empty() {
            eprintln!("{prog}: IB device '{name}' wasn't found");
            return ExitCode::FAILURE;
        }
    }
    if o.list {
        println!("{} HCA{} found:", devs.len(), if devs.len() == 1 { "" } else { "s" });
        for d in &devs {
            println!("\t{}", d.name);
        }
        return ExitCode::SUCCESS;
    }
    if let Some(p) = o.ib_port {
        if let Some(d) = devs.iter().find(|d| !d.ports.iter().any(|q| q.port == p)) {
            eprintln!("{prog}: invalid port {p} requested for device {}", d.name);
            return ExitCode::FAILURE;
        }
    }
    for d in &devs {
        print!("{}", render(d, o.ib_port, o.verbose));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_devices_print_like_ibv_devinfo() {
        let v = sim_views();
        assert_eq!(v.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["sim0", "sim1"]);
        let text = render(&v[1], None, true);
        // ibv_devinfo's layout: tabs, MTU as "bytes (enum ibv_mtu)".
        assert!(text.starts_with("hca_id:\tsim1\n\ttransport:\t\t\tInfiniBand (0)\n"), "{text}");
        assert!(text.contains("\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"), "{text}");
        assert!(text.contains("\t\t\tactive_mtu:\t\t4096 (5)\n"), "{text}");
        assert!(text.contains("\t\t\tport_lid:\t\t2\n"), "{text}");
        assert!(text.contains("\t\t\tlink_layer:\t\tInfiniBand\n"), "{text}");
        assert!(text.contains("\t\t\tGID[  0]:\t\tfe80::2\n"), "GIDs print as IPv6: {text}");
        assert!(!render(&v[1], None, false).contains("GID["), "GIDs only with -v");
        assert!(!render(&v[1], Some(2), false).contains("\tport:\t"), "only the port asked for");
    }
}
