//! N DC initiators spread over several simulated hosts send RDMA WRITE with
//! immediate to one DCT, which receives the notifications on its SRQ and
//! keeps it replenished. Prints a per-client table (messages, bytes, msg/s)
//! and checks that every message arrived once, in per-client order.
//!
//! ```text
//! cargo run --release -p mlx5-tools --example dc_many_to_one [-- --clients 16 --hosts 8 --messages 20000 --size 64 --roce --threaded --pcap dc.pcap]
//! ```

use std::time::Instant;

use clap::Parser;

use mlx5_api::sim::{devices, FabricConfig, HostConfig};
use mlx5_api::{AccessFlags, ConnectParams, QpConfig, Sge, Status, WqeFlags};
use mlx5_sim::{ExecMode, Fabric};

/// N DC initiators on several simulated hosts writing to one DC target.
#[derive(Debug, Parser)]
struct Args {
    /// DC initiators (DCIs).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    clients: u16,
    /// Hosts the DCIs are spread over (the target is one more).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..=250))]
    hosts: u8,
    /// WRITEs per client (the immediate carries a 16-bit sequence number).
    #[arg(long, default_value_t = 20_000)]
    messages: u16,
    /// Bytes per WRITE, inline.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(0..=256))]
    size: u16,
    /// RoCE v2 instead of InfiniBand.
    #[arg(long)]
    roce: bool,
    /// One thread per simulated NIC.
    #[arg(long)]
    threaded: bool,
    /// Write every packet to this pcap file (Wireshark reads it).
    #[arg(long)]
    pcap: Option<String>,
}

const KEY: u64 = 0x00dc_00dc_00dc_00dc;
const SLOT: usize = 256;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse(); // a bad argument: clap's one-line error, exit status 2
    let (clients_n, hosts_n, size) = (usize::from(a.clients), usize::from(a.hosts), usize::from(a.size));
    let mode = if a.threaded { ExecMode::Threaded } else { ExecMode::Deterministic };
    let fabric = Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
    let capture = a.pcap.clone();
    for i in 0..=hosts_n {
        let name = format!("host{i}");
        fabric.add_host(if a.roce {
            HostConfig::roce(&name, [10, 0, 0, i as u8 + 1], [2, 0, 0, 0, 0, i as u8 + 1])
        } else {
            HostConfig::infiniband(&name, i as u16 + 1)
        });
    }
    if let Some(p) = &capture {
        fabric.start_capture(p)?;
    }
    let devs = devices(&fabric);
    let ctxs = devs.iter().map(|d| d.open()).collect::<Result<Vec<_>, _>>()?;
    let pds = ctxs.iter().map(|c| c.alloc_pd()).collect::<Result<Vec<_>, _>>()?;

    // The target: one DCT on an SRQ, and a landing zone of one slot per client.
    let target = &ctxs[0];
    let tcq = target.create_cq(4096, |_, _: u64| {})?;
    let srq = target.create_srq::<u64>(&pds[0], 1023, 1)?;
    let zone = pds[0].alloc_mr(clients_n * SLOT, AccessFlags::ALL)?;
    let dct = target.create_dct(&pds[0], &tcq, &srq, &QpConfig { dc_key: KEY, ..QpConfig::default() })?;
    dct.activate(&ConnectParams::default())?;
    let dctn = dct.dct_number()?;
    // What a client needs to address the target (DCT number and port address):
    // each client host builds its AV from it, as the device resolves it.
    let target_info = dct.local_info()?;
    for e in 0..srq.capacity() {
        srq.post_recv(e as u64, &[Sge { addr: zone.addr(), len: 0, lkey: zone.lkey() }])?;
    }

    // The clients: DCIs round-robin over hosts 1..=hosts, each with a CQ.
    let cfg = QpConfig {
        max_send_wr: 256,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: SLOT as u32,
        ..QpConfig::default()
    };
    let mut clients = (0..clients_n)
        .map(|c| {
            let host = 1 + c % hosts_n;
            let cq = ctxs[host].create_cq(512, |_, _: u64| {})?;
            let dci = ctxs[host].create_dci(&pds[host], &cq, &cfg)?;
            dci.activate(&ConnectParams::default())?;
            let av = pds[host].create_av(1, &target_info)?;
            Ok((av, cq, dci))
        })
        .collect::<Result<Vec<_>, mlx5_api::Error>>()?;

    let mut received = vec![0u32; clients_n];
    let mut done_at = vec![0f64; clients_n];
    let mut posted = vec![0u32; clients_n];
    let mut completed = vec![0u32; clients_n];
    let payload = vec![0x5a; size];
    let total = clients_n as u64 * u64::from(a.messages);
    let mut got = 0u64;
    let t0 = Instant::now();
    while got < total {
        for (c, (av, cq, dci)) in clients.iter_mut().enumerate() {
            // Keep up to 64 WRITEs in flight per client.
            while posted[c] < u32::from(a.messages) && posted[c] - completed[c] < 64 {
                let seq = posted[c];
                dci.wqe_builder(seq as u64)?
                    .ctrl_rdma_write_imm(WqeFlags::SIGNALED, (c as u32) << 16 | seq)?
                    .av(KEY, dctn, av)?
                    .rdma(zone.addr() + (c * SLOT) as u64, zone.rkey())?
                    .inline(&payload)?
                    .finish()?;
                posted[c] += 1;
            }
            cq.poll_with(64, |wc, _| {
                assert_eq!(wc.status, Status::Success, "client {c}: {wc:?}");
                completed[c] += 1;
            });
            // The target consumes and replenishes its SRQ between clients.
            tcq.poll_with(256, |wc, e| {
                assert_eq!(wc.status, Status::Success, "target: {wc:?}");
                let imm = wc.imm.expect("immediate");
                let (c, seq) = ((imm >> 16) as usize, imm & 0xffff);
                assert_eq!(seq, received[c], "client {c}: in order, exactly once");
                received[c] += 1;
                got += 1;
                if received[c] == u32::from(a.messages) {
                    done_at[c] = t0.elapsed().as_secs_f64();
                }
                srq.post_recv(e, &[Sge { addr: zone.addr(), len: 0, lkey: zone.lkey() }]).expect("repost");
            });
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();

    println!(
        "DC many-to-one on the mlx5 simulator: {} DCIs on {} hosts -> 1 DCT (0x{dctn:06x}) over {}, {:?} mode",
        a.clients,
        a.hosts,
        if a.roce { "RoCE v2" } else { "InfiniBand" },
        mode
    );
    println!("RDMA WRITE with immediate, {} bytes inline, notifications on one SRQ", size);
    println!("{:-<72}", "");
    println!(
        " {:>6} {:>6} {:>10} {:>10} {:>12} {:>14}",
        "client", "host", "DCI QPN", "messages", "bytes", "msg/s"
    );
    for (c, (_, _, dci)) in clients.iter().enumerate() {
        let host = 1 + c % hosts_n;
        println!(
            " {:>6} {:>6} {:>10} {:>10} {:>12} {:>14.0}",
            c,
            host,
            format!("0x{:06x}", dci.qpn()),
            received[c],
            received[c] as u64 * size as u64,
            received[c] as f64 / done_at[c]
        );
    }
    println!("{:-<72}", "");
    println!(
        " {:>6} {:>6} {:>10} {:>10} {:>12} {:>14.0}",
        "total",
        "",
        "",
        got,
        got * size as u64,
        got as f64 / elapsed
    );
    if let Some(p) = capture {
        println!(" {} packets captured to {p}", fabric.stop_capture()?);
    }
    Ok(())
}
