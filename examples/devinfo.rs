//! `ibv_devinfo` for mlx5 devices, through the hardware backend (`mlx5::hw`):
//! device attributes, each port's state, LID, MTU, link layer and GIDs, the
//! mlx5dv capabilities (CQE compression, DC, CQE version) and the
//! BlueFlame size a fresh QP gets. Without hardware it prints one line
//! saying why there is nothing to show (rdma-core missing, no RDMA device,
//! no mlx5 device) and exits with status 0.
//!
//! ```sh
//! cargo run --example devinfo
//! ```

use mlx5::backend::{Backend, QpCaps, QpCreate, QpKind};
use mlx5::hw::decode::{format_gid, format_guid};
use mlx5::hw::ffi::{
    MLX5DV_CQE_RES_FORMAT_CSUM, MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX, MLX5DV_CQE_RES_FORMAT_HASH,
};
use mlx5::hw::{self, Hw, HwContext, HwError};
use mlx5::Device;

fn main() {
    let devices = match hw::devices() {
        Ok(d) => d,
        Err(e) => {
            println!("{}", explain(&e));
            return;
        }
    };
    for (i, dev) in devices.iter().enumerate() {
        if i > 0 {
            println!();
        }
        show(dev);
    }
}

/// One line saying why there is no device to show.
fn explain(e: &HwError) -> String {
    match e {
        HwError::LibraryNotFound { file, reason } => {
            let what = if file.contains("mlx5") { "libmlx5" } else { "libibverbs" };
            format!("{what} not found: {reason} (install rdma-core: ibverbs-providers / rdma-core package)")
        }
        other => other.to_string(),
    }
}

fn show(dev: &Device<Hw>) {
    let name = dev.name();
    let ctx = match dev.open() {
        Ok(c) => c,
        Err(e) => {
            println!("hca_id:\t{name}\n\tcannot open: {e}");
            return;
        }
    };
    let hw = ctx.raw();
    let i = hw.info();
    println!("hca_id:\t{}", i.name);
    println!("\tfw_ver:\t\t\t\t{}", i.fw_ver);
    println!("\tnode_guid:\t\t\t{}", format_guid(i.node_guid_be));
    println!("\tvendor_id:\t\t\t0x{:04x}", i.vendor_id);
    println!("\tvendor_part_id:\t\t\t{}", i.vendor_part_id);
    println!("\thw_ver:\t\t\t\t0x{:x}", i.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", i.phys_port_cnt);
    println!(
        "\tmax_qp / max_qp_wr / max_sge:\t{} / {} / {}   max_cqe: {}   max_srq_wr: {}",
        i.max_qp, i.max_qp_wr, i.max_sge, i.max_cqe, i.max_srq_wr
    );
    println!("\tmax_qp_rd_atom / init_rd_atom:\t{} / {}", i.max_qp_rd_atom, i.max_qp_init_rd_atom);
    mlx5_caps(hw);
    for port in 1..=i.phys_port_cnt {
        match hw.port_details(port) {
            Ok(p) => {
                println!("\t\tport:\t{port}");
                println!("\t\t\tstate:\t\t\t{} (phys {})", p.state.name(), p.phys_state);
                println!("\t\t\tmax_mtu:\t\t{}", mtu(p.max_mtu));
                println!("\t\t\tactive_mtu:\t\t{}", mtu(p.active_mtu));
                println!("\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
                println!("\t\t\tport_lid:\t\t{}", p.lid);
                println!("\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
                println!("\t\t\tlink_layer:\t\t{:?}", p.link_layer);
                println!("\t\t\tGID[  0]:\t\t{}", format_gid(&p.gid0));
                if p.sgid_index != 0 {
                    println!("\t\t\tGID[{:3}]:\t\t{} (RoCE v2, used)", p.sgid_index, format_gid(&p.sgid));
                }
                if p.mac != [0; 6] {
                    let m = p.mac;
                    println!(
                        "\t\t\tmac:\t\t\t{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                        m[0], m[1], m[2], m[3], m[4], m[5]
                    );
                }
            }
            Err(e) => println!("\t\tport:\t{port}\n\t\t\t{e}"),
        }
    }
}

fn mtu(m: Option<u32>) -> String {
    m.map_or_else(|| "unknown".into(), |b| b.to_string())
}

fn mlx5_caps(hw: &HwContext) {
    let m = &hw.info().mlx5;
    println!("\tmlx5dv version:\t\t\t{}   flags: 0x{:x}", m.version, m.flags);
    println!("\tCQE version:\t\t\t{}", if m.cqe_v1() { 1 } else { 0 });
    match m.cqe_comp {
        Some((max_num, fmt)) if max_num > 0 => {
            let mut f = Vec::new();
            for (bit, name) in [
                (MLX5DV_CQE_RES_FORMAT_HASH, "hash"),
                (MLX5DV_CQE_RES_FORMAT_CSUM, "csum"),
                (MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX, "csum+stride index"),
            ] {
                if fmt & bit != 0 {
                    f.push(name);
                }
            }
            println!("\tCQE compression:\t\tup to {max_num} CQEs, formats: {}", f.join(", "));
        }
        Some(_) => println!("\tCQE compression:\t\tnot supported"),
        None => println!("\tCQE compression:\t\tnot reported"),
    }
    let dc = match (m.max_dc_rd_atom, m.dc_odp_caps) {
        (Some((rd, init)), _) => format!("max_dc_rd_atom {rd}, max_dc_init_rd_atom {init}"),
        (None, Some(odp)) => format!(
            "DC ODP caps 0x{odp:x}; max_dc_rd_atom not reported by this rdma-core (v44 has no DC cap)"
        ),
        (None, None) => "not reported".into(),
    };
    println!("\tDC:\t\t\t\t{dc}");
    if let Some((conc, err)) = m.dci_streams {
        println!("\tDCI streams:\t\t\tlog max concurrent {conc}, log max errored {err}");
    }
    println!("\tBlueFlame (RC QP bf.size):\t{}", blueflame(hw));
}

/// The BlueFlame half size a fresh RC QP gets (`mlx5dv_qp.bf.size`; 0:
/// doorbell-only register). v44 has no device-level flag for it.
fn blueflame(hw: &HwContext) -> String {
    let probe = || -> mlx5::Result<u32> {
        let pd = Hw::alloc_pd(hw)?;
        let (cq, _) = Hw::create_cq(hw, &mlx5::CqCreate { cqe: 16, cqe_size: 64, compression: None }, None)?;
        let caps =
            QpCaps { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let attr = QpCreate {
            kind: QpKind::Rc,
            caps,
            sq_wqe_cnt: 16,
            rq_wqe_cnt: 16,
            rq_stride: 16,
            user_index: 0,
            dc_key: 0,
            dedicated_uar: false,
            scatter_to_cqe: false,
        };
        let (qp, res) = Hw::create_qp(hw, &pd, Some(&cq), &cq, None, &attr)?;
        drop(qp);
        drop(cq);
        drop(pd);
        Ok(res.bf_size)
    };
    match probe() {
        Ok(0) => "0 (doorbell only)".into(),
        Ok(n) => format!("{n} bytes"),
        Err(e) => format!("unknown ({e})"),
    }
}
