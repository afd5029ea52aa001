//! RC ping-pong between two simulated hosts, in the spirit of perftest's
//! `ib_send_lat`: each side keeps receives posted; host A SENDs `size`
//! bytes, host B answers with a SEND of the same size as soon as its receive
//! completes, and A times the round trip. The table reports half the round
//! trip (one-way latency), as perftest does.
//!
//! ```text
//! cargo run --release --example pingpong [-- --iters N --size BYTES --threaded]
//! ```

use std::time::Instant;

use mlx5::model::ExecMode;
use mlx5::sim::{two_hosts, Sim};
use mlx5::{
    AccessFlags, CompletionQueue, ConnectParams, Context, MemoryRegion, RcQp, RcQpConfig, Sge, Status,
    WqeFlags,
};

struct Side {
    _ctx: Context<Sim>,
    cq: CompletionQueue<Sim, u64>,
    qp: RcQp<Sim, u64>,
    mr: MemoryRegion<Sim>,
}

const BUF: usize = 1 << 16;
const INLINE: u32 = 220;

fn side(dev: &mlx5::Device<Sim>) -> Side {
    let ctx = dev.open().expect("open");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(256, |_, _: u64| {}).expect("cq");
    let cfg = RcQpConfig {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    };
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).expect("qp");
    let mr = pd.alloc_mr(2 * BUF, AccessFlags::ALL).expect("mr");
    Side { _ctx: ctx, cq, qp, mr }
}

fn post_recv(s: &Side) {
    let sge = Sge { addr: s.mr.addr() + BUF as u64, len: BUF as u32, lkey: s.mr.lkey() };
    s.qp.post_recv(0, &[sge]).expect("post_recv");
}

fn send(s: &Side, size: u32) {
    let b = s.qp.wqe_builder(1).expect("wqe").ctrl_send(WqeFlags::SIGNALED).expect("ctrl");
    if size <= INLINE {
        // Small messages go inline: the payload is copied into the WQE.
        let mut data = [0u8; INLINE as usize];
        s.mr.read(0, &mut data[..size as usize]).expect("read");
        b.inline(&data[..size as usize]).expect("inline").finish_with_blueflame().expect("post");
    } else {
        b.sge(s.mr.addr(), size, s.mr.lkey()).expect("sge").finish().expect("post");
    }
}

/// Poll until a receive completes; send completions are retired on the way.
fn wait_recv(s: &mut Side) {
    loop {
        let mut got = false;
        s.cq.poll_with(16, |c, _| {
            assert_eq!(c.status, Status::Success, "completion {c:?}");
            got |= c.opcode.is_recv();
        });
        if got {
            return;
        }
    }
}

fn main() {
    let mut iters = 1000u32;
    let mut sizes: Vec<u32> = (1..=16).map(|i| 1u32 << i).collect();
    let mut mode = ExecMode::Deterministic;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" | "-n" => iters = args.next().and_then(|v| v.parse().ok()).expect("--iters N"),
            "--size" | "-s" => sizes = vec![args.next().and_then(|v| v.parse().ok()).expect("--size BYTES")],
            "--threaded" => mode = ExecMode::Threaded,
            "--help" | "-h" => {
                println!("usage: pingpong [--iters N] [--size BYTES] [--threaded]");
                return;
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let (_fabric, da, db) = two_hosts(mode);
    let (mut a, mut b) = (side(&da), side(&db));
    let p = ConnectParams::default();
    let ia = a.qp.local_info(1, 0).expect("info");
    let ib = b.qp.local_info(1, 0).expect("info");
    a.qp.connect(&ib, &p).expect("connect a");
    b.qp.connect(&ia, &p).expect("connect b");
    for i in 0..BUF {
        a.mr.write(i, &[i as u8]).expect("fill");
    }

    for _ in 0..4 {
        post_recv(&a);
        post_recv(&b);
    }
    println!("RC SEND ping-pong on the mlx5 simulator ({mode:?} mode), one-way latency = RTT/2, msg/s counts both directions");
    println!("{:-<96}", "");
    println!(
        " {:>8} {:>12} {:>12} {:>15} {:>12} {:>12} {:>14}",
        "#bytes", "#iterations", "t_min[usec]", "t_typical[usec]", "t_max[usec]", "t_avg[usec]", "msg/s"
    );
    for &size in &sizes {
        assert!(size as usize <= BUF, "size at most {BUF}");
        let warmup = iters / 10 + 1;
        let mut samples = Vec::with_capacity(iters as usize);
        for it in 0..warmup + iters {
            let t0 = Instant::now();
            send(&a, size);
            wait_recv(&mut b);
            post_recv(&b);
            send(&b, size);
            wait_recv(&mut a);
            post_recv(&a);
            if it >= warmup {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        // Drain the last send completions so the next size starts clean.
        while a.qp.sq_free() < a.qp.sq_wqebbs() || b.qp.sq_free() < b.qp.sq_wqebbs() {
            a.cq.poll_with(16, |_, _| {});
            b.cq.poll_with(16, |_, _| {});
        }
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let avg = samples.iter().sum::<f64>() / samples.len() as f64;
        println!(
            " {:>8} {:>12} {:>12.2} {:>15.2} {:>12.2} {:>12.2} {:>14.0}",
            size,
            iters,
            sorted[0],
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1],
            avg,
            1e6 / avg
        );
        // Received data matches what was sent.
        let mut got = vec![0u8; size as usize];
        b.mr.read(BUF, &mut got).expect("read");
        let mut want = vec![0u8; size as usize];
        a.mr.read(0, &mut want).expect("read");
        assert_eq!(got, want, "payload of {size} bytes");
    }
    println!("{:-<96}", "");
}
