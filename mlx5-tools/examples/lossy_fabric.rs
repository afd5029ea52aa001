//! RC over a lossy simulated fabric: fetch-and-adds and WRITEs over links that lose,
//! duplicate and reorder packets are retransmitted after the local ACK timeout and
//! executed exactly once; a link that stays down ends in retries exceeded and flushes;
//! and the simulator's message rate with faults off and on. `--pcap FILE` writes every
//! packet for Wireshark.
//!
//! ```text
//! cargo run --release -p mlx5-tools --example lossy_fabric [-- --drop 0.05 --messages 20000 --roce --pcap lossy.pcap]
//! ```

use std::time::Instant;

use clap::Parser;

use mlx5_api::sim::{devices, FabricConfig, Sim};
use mlx5_api::{
    AccessFlags, CompletionQueue, ConnectParams, MemoryRegion, QpConfig, QpState, RcQp, Status, WqeFlags,
};
use mlx5_sim::{ExecMode, Fabric, HostConfig, LinkFaults};

/// RC over a lossy simulated fabric.
#[derive(Debug, Parser)]
struct Args {
    /// Probability that a packet is lost.
    #[arg(long, default_value_t = 0.05)]
    drop: f64,
    /// Probability that a packet arrives twice.
    #[arg(long, default_value_t = 0.05)]
    duplicate: f64,
    /// Probability that a packet is held back and overtaken.
    #[arg(long, default_value_t = 0.05)]
    reorder: f64,
    /// Operations per part.
    #[arg(long, default_value_t = 20_000)]
    messages: u32,
    /// Seed of the fault generator (same seed, same run).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// RoCE v2 instead of InfiniBand.
    #[arg(long)]
    roce: bool,
    /// Write the packets of the first part to this pcap file.
    #[arg(long)]
    pcap: Option<String>,
}

struct End {
    qp: RcQp<Sim, u64>,
    cq: CompletionQueue<Sim, u64>,
    mr: MemoryRegion<Sim>,
}

/// Two hosts and one connected RC pair (timeout 4.096 µs × 2^8, 7 retries).
fn pair(roce: bool, timeout: u8) -> Result<(Fabric, End, End), mlx5_api::Error> {
    let fabric = Fabric::new(FabricConfig { mode: ExecMode::Deterministic, ..FabricConfig::default() });
    for i in 0..2u8 {
        let name = format!("host{i}");
        fabric.add_host(if roce {
            HostConfig::roce(&name, [10, 0, 0, i + 1], [2, 0, 0, 0, 0, i + 1])
        } else {
            HostConfig::infiniband(&name, u16::from(i) + 1)
        });
    }
    let mut ends = Vec::new();
    for d in devices(&fabric) {
        let ctx = d.open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(4096, |_, _: u64| {})?;
        let cfg = QpConfig { max_send_wr: 1024, max_recv_wr: 16, max_inline_data: 64, ..QpConfig::default() };
        let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg)?;
        let mr = pd.alloc_mr(1 << 20, AccessFlags::ALL)?;
        ends.push(End { qp, cq, mr });
    }
    let b = ends.pop().expect("two hosts");
    let a = ends.pop().expect("two hosts");
    let p = |peer: &End| -> Result<ConnectParams, mlx5_api::Error> {
        Ok(ConnectParams { timeout, ..ConnectParams::to(peer.qp.local_info()?) })
    };
    a.qp.activate(&p(&b)?)?;
    b.qp.activate(&p(&a)?)?;
    Ok((fabric, a, b))
}

/// Post `n` signaled fetch-and-add(1)s in batches of 512 and collect the statuses.
fn fetch_adds(a: &End, b: &End, n: u32) -> Result<Vec<Status>, mlx5_api::Error> {
    let mut out = Vec::new();
    let mut posted = 0;
    while posted < n {
        let batch = (n - posted).min(512);
        for i in 0..batch {
            a.qp.wqe_builder(u64::from(posted + i))?
                .ctrl_atomic_fa(WqeFlags::SIGNALED, 1)?
                .rdma(b.mr.addr(), b.mr.rkey())?
                .result(a.mr.sge(64, 8)?)?
                .finish()?;
        }
        posted += batch;
        while out.len() < posted as usize {
            a.cq.poll_with(64, |c, _| out.push(c.status));
        }
    }
    Ok(out)
}

/// Time `n` 64-byte inline WRITEs (one signaled every 64) on a fresh pair.
fn write_rate(roce: bool, faults: LinkFaults, seed: u64, n: u32) -> Result<(f64, u64), mlx5_api::Error> {
    let (fabric, a, b) = pair(roce, 8)?;
    fabric.set_faults(seed, faults);
    let data = [7u8; 64];
    let t0 = Instant::now();
    let mut done = 0u32;
    for i in 0..n {
        let flags = if i % 64 == 63 || i + 1 == n { WqeFlags::SIGNALED } else { WqeFlags::NONE };
        a.qp.wqe_builder(u64::from(i))?
            .ctrl_rdma_write(flags)?
            .rdma(b.mr.addr(), b.mr.rkey())?
            .inline(&data)?
            .finish()?;
        a.cq.poll_with(64, |c, _| {
            assert_eq!(c.status, Status::Success);
            done += 1;
        });
    }
    while done < n.div_ceil(64) {
        a.cq.poll_with(64, |_, _| done += 1);
    }
    Ok((f64::from(n) / t0.elapsed().as_secs_f64(), fabric.nics()[0].stats().retransmits))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let faults = LinkFaults {
        drop: args.drop,
        duplicate: args.duplicate,
        reorder: args.reorder,
        reorder_ns: 5_000,
        jitter_ns: 1_000,
        ..LinkFaults::none()
    };
    let link = if args.roce { "RoCE v2" } else { "InfiniBand" };

    // 1. Exactly once under loss, duplication and reordering.
    let (fabric, a, b) = pair(args.roce, 8)?;
    if let Some(p) = &args.pcap {
        fabric.start_capture(p)?;
    }
    fabric.set_faults(args.seed, faults);
    let st = fetch_adds(&a, &b, args.messages)?;
    let mut counter = [0u8; 8];
    b.mr.read(0, &mut counter)?;
    let counter = u64::from_ne_bytes(counter);
    let ok = st.iter().filter(|s| **s == Status::Success).count();
    let (sa, sb) = (fabric.nics()[0].stats(), fabric.nics()[1].stats());
    println!(
        "== {} fetch-and-add(1) over {link}, drop {} duplicate {} reorder {}",
        args.messages, args.drop, args.duplicate, args.reorder
    );
    println!("   completed: {ok} successful of {}", st.len());
    println!("   remote counter: {counter} (exactly once: {})", counter == ok as u64);
    println!(
        "   lost {} packets, {} ICRC drops; {} retransmissions after {} ACK timeouts and {} sequence NAKs",
        sa.link_drops + sb.link_drops,
        sa.icrc_errors + sb.icrc_errors,
        sa.retransmits,
        sa.ack_timeouts,
        sa.seq_naks
    );
    println!("   duplicates answered without executing again: {}", sb.duplicates);
    println!("   simulated time: {:.3} ms", fabric.now_ns() as f64 / 1e6);
    if args.pcap.is_some() {
        println!("   captured {} packets to {}", fabric.stop_capture()?, args.pcap.as_deref().unwrap_or(""));
    }
    if counter != ok as u64 {
        return Err("an operation executed twice or not at all".into());
    }

    // 2. A link that stays down: retries exceeded, then flushes.
    let (fabric, a, b) = pair(args.roce, 10)?;
    fabric.set_faults(args.seed, LinkFaults { down: Some((0, u64::MAX)), ..LinkFaults::none() });
    let st = fetch_adds(&a, &b, 3)?;
    println!("== the link goes down for good (timeout 4.096 us x 2^10, 7 retries)");
    for (i, s) in st.iter().enumerate() {
        println!("   WQE {i}: {s:?}");
    }
    println!(
        "   QP state {:?} after {:.3} ms of simulated time ({} ACK timeouts)",
        a.qp.state(),
        fabric.now_ns() as f64 / 1e6,
        fabric.nics()[0].stats().ack_timeouts
    );
    if a.qp.state() != QpState::Err {
        return Err("the QP should be in ERR".into());
    }

    // 3. The simulator's message rate with faults off and on (best of 3).
    let n = args.messages.max(1000);
    let best = |f: LinkFaults| -> Result<(f64, u64), mlx5_api::Error> {
        let mut b = (0.0, 0);
        for _ in 0..3 {
            let r = write_rate(args.roce, f, args.seed, n)?;
            if r.0 > b.0 {
                b = r;
            }
        }
        Ok(b)
    };
    let (off, _) = best(LinkFaults::none())?;
    let (on, retx) = best(faults)?;
    println!("== {n} 64-byte WRITEs, message rate (wall clock, best of 3)");
    println!("   faults off: {:.2} M msg/s", off / 1e6);
    println!("   faults on:  {:.2} M msg/s ({retx} retransmissions)", on / 1e6);
    Ok(())
}
