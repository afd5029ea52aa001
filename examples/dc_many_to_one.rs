//! N DC initiators spread over several simulated hosts send RDMA WRITE with
//! immediate to one DCT, which receives the notifications on its SRQ and
//! keeps it replenished. Prints a per-client table (messages, bytes, msg/s)
//! and checks that every message arrived once, in per-client order.
//!
//! ```text
//! cargo run --release --example dc_many_to_one [-- --clients 16 --hosts 8 --messages 20000 --size 64 --roce --threaded]
//! ```

use std::time::Instant;

use mlx5::model::{ExecMode, Fabric};
use mlx5::sim::{devices, FabricConfig, HostConfig};
use mlx5::{AccessFlags, AddressVector, ConnectParams, LinkLayer, QpConfig, RoceAv, Sge, Status, WqeFlags};

struct Args {
    clients: usize,
    hosts: usize,
    messages: u32,
    size: usize,
    roce: bool,
    mode: ExecMode,
}

fn args() -> Args {
    let mut a = Args {
        clients: 16,
        hosts: 8,
        messages: 20_000,
        size: 64,
        roce: false,
        mode: ExecMode::Deterministic,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut num = |name: &str| {
            it.next().and_then(|v| v.parse::<usize>().ok()).unwrap_or_else(|| panic!("{name} N"))
        };
        match x.as_str() {
            "--clients" => a.clients = num("--clients"),
            "--hosts" => a.hosts = num("--hosts"),
            "--messages" => a.messages = num("--messages") as u32,
            "--size" => a.size = num("--size"),
            "--roce" => a.roce = true,
            "--threaded" => a.mode = ExecMode::Threaded,
            "--help" | "-h" => {
                println!("usage: dc_many_to_one [--clients N] [--hosts N] [--messages N] [--size BYTES] [--roce] [--threaded]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(
        a.clients >= 1 && a.hosts >= 1 && a.size <= 256 && a.messages <= 0xffff,
        "limits: size <= 256, messages <= 65535"
    );
    a
}

const KEY: u64 = 0x00dc_00dc_00dc_00dc;
const SLOT: usize = 256;

fn main() {
    let a = args();
    let fabric = Fabric::new(FabricConfig { mode: a.mode, ..FabricConfig::default() });
    for i in 0..=a.hosts {
        let name = format!("host{i}");
        fabric.add_host(if a.roce {
            HostConfig::roce(&name, [10, 0, 0, i as u8 + 1], [2, 0, 0, 0, 0, i as u8 + 1])
        } else {
            HostConfig::infiniband(&name, i as u16 + 1)
        });
    }
    let devs = devices(&fabric);
    let ctxs: Vec<_> = devs.iter().map(|d| d.open().expect("open")).collect();
    let pds: Vec<_> = ctxs.iter().map(|c| c.alloc_pd().expect("pd")).collect();

    // The target: one DCT on an SRQ, and a landing zone of one slot per client.
    let target = &ctxs[0];
    let tcq = target.create_cq(4096, |_, _: u64| {}).expect("cq");
    let srq = target.create_srq::<u64>(&pds[0], 1023, 1).expect("srq");
    let zone = pds[0].alloc_mr(a.clients * SLOT, AccessFlags::ALL).expect("mr");
    let dct = target
        .create_dct(&pds[0], &tcq, &srq, &QpConfig { dc_key: KEY, ..QpConfig::default() })
        .expect("dct");
    dct.activate(&ConnectParams::default()).expect("dct rtr");
    let dctn = dct.dct_number().expect("dct number");
    let port = target.query_port(1).expect("port");
    let av = match port.link_layer {
        LinkLayer::InfiniBand => AddressVector::ib(port.lid, 0),
        LinkLayer::Ethernet => AddressVector::roce_v2(&RoceAv::new(port.gid, port.mac)),
    };
    for e in 0..srq.capacity() {
        srq.post_recv(e as u64, &[Sge { addr: zone.addr(), len: 0, lkey: zone.lkey() }]).expect("post srq");
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
    let mut clients: Vec<_> = (0..a.clients)
        .map(|c| {
            let host = 1 + c % a.hosts;
            let cq = ctxs[host].create_cq(512, |_, _: u64| {}).expect("cq");
            let dci = ctxs[host].create_dci(&pds[host], &cq, &cfg).expect("dci");
            dci.activate(&ConnectParams::default()).expect("dci rts");
            (host, cq, dci)
        })
        .collect();

    let mut received = vec![0u32; a.clients];
    let mut done_at = vec![0f64; a.clients];
    let mut posted = vec![0u32; a.clients];
    let mut completed = vec![0u32; a.clients];
    let payload = vec![0x5a; a.size];
    let total = a.clients as u64 * a.messages as u64;
    let mut got = 0u64;
    let t0 = Instant::now();
    while got < total {
        for (c, (_, cq, dci)) in clients.iter_mut().enumerate() {
            // Keep up to 64 WRITEs in flight per client.
            while posted[c] < a.messages && posted[c] - completed[c] < 64 {
                let seq = posted[c];
                dci.wqe_builder(seq as u64)
                    .expect("wqe")
                    .ctrl_rdma_write_imm(WqeFlags::SIGNALED, (c as u32) << 16 | seq)
                    .expect("ctrl")
                    .av(KEY, dctn, &av)
                    .expect("av")
                    .rdma(zone.addr() + (c * SLOT) as u64, zone.rkey())
                    .expect("raddr")
                    .inline(&payload)
                    .expect("inline")
                    .finish()
                    .expect("post");
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
                if received[c] == a.messages {
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
        a.mode
    );
    println!("RDMA WRITE with immediate, {} bytes inline, notifications on one SRQ", a.size);
    println!("{:-<72}", "");
    println!(
        " {:>6} {:>6} {:>10} {:>10} {:>12} {:>14}",
        "client", "host", "DCI QPN", "messages", "bytes", "msg/s"
    );
    for (c, (host, _, dci)) in clients.iter().enumerate() {
        println!(
            " {:>6} {:>6} {:>10} {:>10} {:>12} {:>14.0}",
            c,
            host,
            format!("0x{:06x}", dci.qpn()),
            received[c],
            received[c] as u64 * a.size as u64,
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
        got * a.size as u64,
        got as f64 / elapsed
    );
}
