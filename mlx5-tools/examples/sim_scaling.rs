//! How the simulator scales: 64-byte RDMA WRITEs with 64 in flight over 1 to
//! 4096 QPs and 2 to 16 hosts, in deterministic and threaded mode (msg/s and
//! ns per message; each QP's send queue takes 64 WRs, and 4 in the rows
//! marked so: with 1024 or more QPs, each holds at most one in flight), and
//! RDMA WRITE / READ bandwidth from 64 B to 4 MiB against a plain `memcpy` of
//! the same size between the same two buffers in the same run; pingpong
//! one-way latency in both modes; and, with `--busy N`, both modes again
//! while N busy processes share the cores (median and worst run of threaded
//! mode against the deterministic median). The `det+prefetch` rows repeat
//! the round robin with each post first asking for the next QP's lines
//! (`prefetch_post`).
//!
//! ```text
//! cargo run --release -p mlx5-tools --example sim_scaling [-- --messages 200000 --json]
//! cargo run --release -p mlx5-tools --example sim_scaling -- --busy 2 --busy-only
//! ```

use std::time::Instant;

use clap::Parser;

use mlx5_api::sim::{devices, FabricConfig, HostConfig, Sim};
use mlx5_api::{AccessFlags, CompletionQueue, ConnectParams, MemoryRegion, QpConfig, RcQp, Status, WqeFlags};
use mlx5_sim::{ExecMode, Fabric};

/// The simulator's scaling benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// Messages per message-rate run.
    #[arg(long, default_value_t = 200_000)]
    messages: u32,
    /// Runs per figure (the best is kept).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Only the message-rate table (no bandwidth).
    #[arg(long)]
    rate_only: bool,
    /// Only deterministic mode (e.g. under a profiler).
    #[arg(long)]
    deterministic_only: bool,
    /// Only threaded mode (e.g. under a profiler).
    #[arg(long, conflicts_with = "deterministic_only")]
    threaded_only: bool,
    /// Only this configuration, `HOSTS:QPS` or `HOSTS:QPS:SQ_DEPTH` (e.g.
    /// under a profiler; the send queue's depth is 64 unless given).
    #[arg(long)]
    only: Option<String>,
    /// Also measure with this many busy processes sharing the cores.
    #[arg(long, default_value_t = 0)]
    busy: u32,
    /// Runs of each mode under `--busy` (median and worst are reported).
    #[arg(long, default_value_t = 9)]
    busy_runs: u32,
    /// Only the pingpong and `--busy` measurements.
    #[arg(long)]
    busy_only: bool,
    /// With `--only`: each post first asks for the next QP's lines
    /// (`prefetch_post`), as the "det+prefetch" rows do.
    #[arg(long)]
    prefetch: bool,
    /// Only the bandwidth table (e.g. under a profiler).
    #[arg(long, conflicts_with_all = ["rate_only", "busy_only"])]
    bandwidth_only: bool,
    /// No pingpong pass (e.g. to count the instructions of the rate runs alone).
    #[arg(long)]
    no_pingpong: bool,
    /// Every message over the packet wire (the network model, with no fault), not the
    /// direct wire: to compare the two.
    #[arg(long)]
    packet_wire: bool,
    /// Only this message size (bytes) in the bandwidth table.
    #[arg(long, conflicts_with_all = ["rate_only", "busy_only"])]
    size: Option<usize>,
    /// (internal) Spin forever: one of the busy processes.
    #[arg(long, hide = true)]
    spin: bool,
}

/// Busy processes (this program with `--spin`), killed when dropped.
struct Busy(Vec<std::process::Child>);

impl Busy {
    fn start(n: u32) -> Busy {
        let exe = std::env::current_exe().expect("own path");
        Busy(
            (0..n)
                .map(|_| {
                    std::process::Command::new(&exe).arg("--spin").spawn().expect("spawning a busy process")
                })
                .collect(),
        )
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One-way latency in ns of an 8-byte RDMA WRITE pingpong (as `ib_write_lat`):
/// host 0 writes the round number into host 1's buffer, host 1 sees it and
/// writes it back; each side polls its send CQ while it waits (one thread
/// plays both sides).
fn pingpong(mode: ExecMode, rounds: u32) -> f64 {
    let (mut qs, mut r, hs, _f) = setup(2, 1, mode, 1 << 12, 64);
    let (a, b) = (&hs[0], &hs[1]);
    // The pair is connected both ways: host 0 writes with its QP, host 1 with the
    // responder's.
    let (qa, qb) = (qs.pop().expect("one QP").1, r.pop().expect("its responder"));
    let seen = |mr: &MemoryRegion<Sim>| {
        // SAFETY: the MR's first 8 bytes, written by the simulated NIC.
        unsafe { std::ptr::read_volatile(mr.addr() as *const u64) }
    };
    let write = |q: &RcQp<Sim, u64>, to: &MemoryRegion<Sim>, v: u64| {
        q.wqe_builder(v)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(to.addr(), to.rkey())
            .unwrap()
            .inline(&v.to_le_bytes())
            .unwrap()
            .finish()
            .unwrap();
    };
    let done = std::cell::Cell::new(0u64);
    let reap = |cq: &CompletionQueue<Sim, u64>| {
        cq.poll_with(16, |_, _| done.set(done.get() + 1));
    };
    let t0 = Instant::now();
    for i in 1..=u64::from(rounds) {
        write(&qa, &b.mr, i);
        while seen(&b.mr) != i {
            reap(&a.cq);
        }
        write(&qb, &a.mr, i);
        while seen(&a.mr) != i {
            reap(&b.cq);
        }
        // Both completions, before the next round reuses the queues.
        while done.get() < 2 * i {
            reap(&a.cq);
            reap(&b.cq);
        }
    }
    t0.elapsed().as_nanos() as f64 / f64::from(rounds) / 2.0
}

/// Both execution modes, deterministic first.
const BOTH: [(ExecMode, &str); 2] =
    [(ExecMode::Deterministic, "deterministic"), (ExecMode::Threaded, "threaded")];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Host {
    cq: CompletionQueue<Sim, u64>,
    mr: MemoryRegion<Sim>,
    pd: mlx5_api::ProtectionDomain<Sim>,
    ctx: mlx5_api::Context<Sim>,
}

/// The requester QPs with their host, the responder QPs, the hosts and their
/// fabric (in the order they are dropped).
type Bed = (Vec<(usize, RcQp<Sim, u64>)>, Vec<RcQp<Sim, u64>>, Vec<Host>, Fabric);

/// `hosts` hosts; `qps` RC QPs, QP i from host 2k to host 2k+1 of pair k = i mod hosts/2,
/// each with room for `depth` send WRs.
/// `--packet-wire`: set once in `main`, read by every set-up.
static PACKET_WIRE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn setup(hosts: usize, qps: usize, mode: ExecMode, mr_len: usize, depth: u32) -> Bed {
    let fabric = Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
    if PACKET_WIRE.load(std::sync::atomic::Ordering::Relaxed) {
        fabric.set_packet_wire(true);
    }
    for i in 0..hosts {
        fabric.add_host(HostConfig::infiniband(&format!("h{i}"), i as u16 + 1));
    }
    let hs: Vec<Host> = devices(&fabric)
        .iter()
        .map(|d| {
            let ctx = d.open().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(16384, |_, _: u64| {}).unwrap();
            let mr = pd.alloc_mr(mr_len, AccessFlags::ALL).unwrap();
            Host { cq, mr, pd, ctx }
        })
        .collect();
    let cfg = QpConfig { max_send_wr: depth, max_recv_wr: 1, max_inline_data: 64, ..QpConfig::default() };
    let (mut out, mut responders) = (Vec::new(), Vec::new());
    for i in 0..qps {
        let k = i % (hosts / 2);
        let (a, b) = (2 * k, 2 * k + 1);
        let qa = hs[a].ctx.create_rc_qp(&hs[a].pd, &hs[a].cq, &hs[a].cq, &cfg).unwrap();
        let qb = hs[b].ctx.create_rc_qp(&hs[b].pd, &hs[b].cq, &hs[b].cq, &cfg).unwrap();
        qa.activate(&ConnectParams::to(qb.local_info().unwrap())).unwrap();
        qb.activate(&ConnectParams::to(qa.local_info().unwrap())).unwrap();
        responders.push(qb);
        out.push((a, qa));
    }
    (out, responders, hs, fabric)
}

/// ns per 64-byte WRITE, 64 in flight in all, QPs of `depth` send WRs
/// served round robin; with `prefetch`, each post first asks for the next
/// QP's lines (`prefetch_post`).
fn rate(hosts: usize, qps: usize, depth: u32, mode: ExecMode, n: u32, prefetch: bool) -> f64 {
    // Two loops, not a branch in one, so that the hint's code does not shape
    // the plain loop's (a build's layout alone moves 4096 QPs by 10-15 ns).
    if prefetch {
        rate_loop::<true>(hosts, qps, depth, mode, n)
    } else {
        rate_loop::<false>(hosts, qps, depth, mode, n)
    }
}

fn rate_loop<const PREFETCH: bool>(hosts: usize, qps: usize, depth: u32, mode: ExecMode, n: u32) -> f64 {
    let (qs, _r, hs, _f) = setup(hosts, qps, mode, 1 << 16, depth);
    let data = [7u8; 64];
    let mut outstanding = 0u32;
    let mut done = 0u32;
    let next = |i: usize| if i + 1 == qs.len() { 0 } else { i + 1 };
    let mut i = 0;
    let t0 = Instant::now();
    let mut posted = 0u32;
    while done < n {
        while posted < n && outstanding < 64 {
            let (h, q) = &qs[i];
            i = next(i);
            if PREFETCH {
                qs[i].1.prefetch_post();
            }
            let dst = &hs[h + 1].mr;
            q.wqe_builder(u64::from(posted))
                .unwrap()
                .ctrl_rdma_write(WqeFlags::SIGNALED)
                .unwrap()
                .rdma(dst.addr(), dst.rkey())
                .unwrap()
                .inline(&data)
                .unwrap()
                .finish()
                .unwrap();
            posted += 1;
            outstanding += 1;
        }
        for k in 0..hosts / 2 {
            hs[2 * k].cq.poll_with(64, |c, _| {
                debug_assert_eq!(c.status, Status::Success);
                done += 1;
                outstanding -= 1;
            });
        }
    }
    t0.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Best ns per message of `runs` runs.
fn best(runs: u32, f: impl Fn() -> f64) -> f64 {
    (0..runs).map(|_| f()).fold(f64::MAX, f64::min)
}

/// Bytes per second of `size`-byte WRITEs (or READs), one QP, 16 in flight.
fn bandwidth(size: usize, read: bool, total: usize) -> f64 {
    let (qs, _r, hs, _f) = setup(2, 1, ExecMode::Deterministic, size.max(64), 64);
    let (h, q) = &qs[0];
    let (me, peer) = (&hs[*h], &hs[h + 1]);
    let n = (total / size).max(4) as u32;
    let (mut posted, mut done) = (0u32, 0u32);
    let t0 = Instant::now();
    while done < n {
        while posted < n && posted - done < 16 {
            let b = q.wqe_builder(u64::from(posted)).unwrap();
            let (raddr, rkey, sge) = (peer.mr.addr(), peer.mr.rkey(), me.mr.sge(0, size as u32).unwrap());
            if read {
                b.ctrl_rdma_read(WqeFlags::SIGNALED)
                    .unwrap()
                    .rdma(raddr, rkey)
                    .unwrap()
                    .sge(sge)
                    .unwrap()
                    .finish()
                    .unwrap();
            } else {
                b.ctrl_rdma_write(WqeFlags::SIGNALED)
                    .unwrap()
                    .rdma(raddr, rkey)
                    .unwrap()
                    .sge(sge)
                    .unwrap()
                    .finish()
                    .unwrap();
            }
            posted += 1;
        }
        me.cq.poll_with(64, |_, _| done += 1);
    }
    (n as usize * size) as f64 / t0.elapsed().as_secs_f64()
}

/// Bytes per second of a plain copy of `size` bytes, same total, between the
/// same two buffers as [`bandwidth`]'s: the first host's MR to the second's,
/// made the same way (page-aligned `alloc_mr`), so that where the buffers lie
/// is no difference between the two figures. (Vectors from the heap lie
/// wherever the heap's history puts them; their copy ran 1-3% slower here.)
/// The source goes through `black_box` at every copy: the compiler must not
/// know what it holds (a source it knew to be all ones once made the
/// baseline a `memset`, 49 GB/s).
fn memcpy_bw(size: usize, total: usize) -> f64 {
    let (_qs, _r, hs, _f) = setup(2, 1, ExecMode::Deterministic, size.max(64), 64);
    let (src, dst) = (hs[0].mr.addr() as *const u8, hs[1].mr.addr() as *mut u8);
    let n = (total / size).max(4);
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: two distinct live MRs of at least `size` bytes each, which
        // nothing else touches meanwhile (no WQE is posted).
        unsafe { std::ptr::copy_nonoverlapping(std::hint::black_box(src), dst, size) };
        std::hint::black_box(dst);
    }
    (n * size) as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let a = Args::parse();
    PACKET_WIRE.store(a.packet_wire, std::sync::atomic::Ordering::Relaxed);
    if a.spin {
        loop {
            std::hint::spin_loop();
        }
    }
    let mut rows = Vec::new();
    let one = |mode| best(a.runs, || rate(2, 1, 64, mode, a.messages, false));
    let modes: &[(ExecMode, &str)] = if a.deterministic_only {
        &[(ExecMode::Deterministic, "deterministic")]
    } else if a.threaded_only {
        &[(ExecMode::Threaded, "threaded")]
    } else {
        &BOTH
    };
    for &(mode, name) in modes.iter().filter(|_| !a.busy_only && !a.bandwidth_only) {
        // With --only, one configuration and no one-QP run to compare with
        // (that would add a measurement to a run made for profiling): no ratio.
        let base = if a.only.is_some() { f64::NAN } else { one(mode) };
        let configs: Vec<(usize, usize, u32)> = match &a.only {
            Some(o) => {
                let mut f = o.split(':');
                let mut next = |what| f.next().map(|v| v.parse().expect(what));
                let (h, q) =
                    (next("hosts").expect("--only HOSTS:QPS"), next("QPs").expect("--only HOSTS:QPS"));
                vec![(h, q, next("SQ depth").unwrap_or(64) as u32)]
            }
            None => vec![
                (2, 1, 64),
                (2, 64, 64),
                (2, 1024, 64),
                (2, 4096, 64),
                (2, 1024, 4),
                (2, 4096, 4),
                (4, 64, 64),
                (16, 64, 64),
            ],
        };
        for &(hosts, qps, depth) in &configs {
            let ns = if (hosts, qps, depth) == (2, 1, 64) && a.only.is_none() {
                base
            } else {
                best(a.runs, || rate(hosts, qps, depth, mode, a.messages, a.prefetch))
            };
            let name = match (a.prefetch, mode) {
                (false, _) => name,
                (true, ExecMode::Deterministic) => "det+prefetch",
                (true, _) => "thr+prefetch",
            };
            rows.push((name, hosts, qps, depth, ns, ns / base));
        }
        // The round robin again, each post first asking for the next QP's
        // lines (`prefetch_post`); against the plain loop's one QP.
        if mode == ExecMode::Deterministic && a.only.is_none() {
            for qps in [1, 1024, 4096] {
                let ns = best(a.runs, || rate(2, qps, 64, mode, a.messages, true));
                rows.push(("det+prefetch", 2, qps, 64, ns, ns / base));
            }
        }
    }
    // Pingpong one-way latency (idle cores), best of the runs.
    let rounds = (a.messages / 10).max(100);
    let lat: Vec<(&str, f64)> = modes
        .iter()
        .filter(|_| !a.bandwidth_only && !a.no_pingpong)
        .map(|&(m, name)| (name, best(a.runs, || pingpong(m, rounds))))
        .collect();
    // Under busy processes: every run kept, modes interleaved.
    let mut busy = Vec::new();
    if a.busy > 0 {
        let _b = Busy::start(a.busy);
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Both modes whatever the filters: the ratios are to deterministic mode.
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); 2 * BOTH.len()];
        for _ in 0..a.busy_runs {
            for (k, &(m, _)) in BOTH.iter().enumerate() {
                runs[2 * k].push(rate(2, 1, 64, m, a.messages / 2, false));
                runs[2 * k + 1].push(pingpong(m, rounds));
            }
        }
        let det_rate = median(&mut runs[0].clone());
        let det_lat = median(&mut runs[1].clone());
        for (k, &(_, name)) in BOTH.iter().enumerate() {
            for (j, what) in ["64 in flight, ns/msg", "pingpong one-way ns"].into_iter().enumerate() {
                let v = &mut runs[2 * k + j];
                let base = if j == 0 { det_rate } else { det_lat };
                let worst = v.iter().copied().fold(0.0, f64::max);
                busy.push((name, what, median(v), worst, median(v) / base, worst / base));
            }
        }
    }
    let mut bw = Vec::new();
    if !a.rate_only && !a.busy_only {
        let sizes = a.size.map_or_else(|| vec![64usize, 4096, 65536, 1 << 20, 4 << 20], |s| vec![s]);
        for size in sizes {
            let total = (256usize << 20).min(size * 200_000);
            // Interleaved, so that a machine that speeds up or slows down meanwhile
            // moves all three alike; the best run of each.
            let (mut m, mut w, mut r) = (0.0f64, 0.0f64, 0.0f64);
            for _ in 0..a.runs {
                m = m.max(memcpy_bw(size, total));
                w = w.max(bandwidth(size, false, total));
                r = r.max(bandwidth(size, true, total));
            }
            bw.push((size, w, r, m));
        }
    }
    if a.json {
        let r: Vec<String> = rows
            .iter()
            .map(|(m, h, q, d, ns, x)| {
                let x = if x.is_nan() { "null".to_string() } else { format!("{x:.2}") };
                format!("{{\"mode\": \"{m}\", \"hosts\": {h}, \"qps\": {q}, \"sq_depth\": {d}, \"ns_per_msg\": {ns:.1}, \"msg_per_s\": {:.0}, \"vs_1qp\": {x}}}", 1e9 / ns)
            })
            .collect();
        let b: Vec<String> = bw
            .iter()
            .map(|(s, w, r, m)| {
                format!(
                    "{{\"bytes\": {s}, \"write_Bps\": {w:.0}, \"read_Bps\": {r:.0}, \"memcpy_Bps\": {m:.0}}}"
                )
            })
            .collect();
        let l: Vec<String> =
            lat.iter().map(|(m, ns)| format!("{{\"mode\": \"{m}\", \"one_way_ns\": {ns:.1}}}")).collect();
        let y: Vec<String> = busy
            .iter()
            .map(|(m, w, med, worst, x, xw)| {
                format!("{{\"mode\": \"{m}\", \"what\": \"{w}\", \"median_ns\": {med:.1}, \"worst_ns\": {worst:.1}, \"median_vs_det\": {x:.2}, \"worst_vs_det\": {xw:.2}}}")
            })
            .collect();
        println!(
            "{{\"rate\": [{}], \"latency\": [{}], \"busy_processes\": {}, \"busy\": [{}], \"bandwidth\": [{}]}}",
            r.join(", "),
            l.join(", "),
            a.busy,
            y.join(", "),
            b.join(", ")
        );
        return;
    }
    if !rows.is_empty() {
        println!(
            "{:<14} {:>5} {:>5} {:>5} {:>10} {:>12} {:>8}",
            "mode", "hosts", "QPs", "SQ", "ns/msg", "msg/s", "vs 1 QP"
        );
        for (m, h, q, d, ns, x) in &rows {
            let x = if x.is_nan() { "-".to_string() } else { format!("{x:.2}") };
            println!("{m:<14} {h:>5} {q:>5} {d:>5} {ns:>10.1} {:>12.0} {x:>8}", 1e9 / ns);
        }
    }
    if !lat.is_empty() {
        println!("\n{:<14} {:>16}", "mode", "one-way ns");
        for (m, ns) in &lat {
            println!("{m:<14} {ns:>16.1}");
        }
    }
    if !busy.is_empty() {
        println!(
            "\nwith {} busy processes ({} runs each; x = against the deterministic median)",
            a.busy, a.busy_runs
        );
        println!(
            "{:<14} {:<22} {:>10} {:>10} {:>8} {:>8}",
            "mode", "what", "median", "worst", "x med", "x worst"
        );
        for (m, w, med, worst, x, xw) in &busy {
            println!("{m:<14} {w:<22} {med:>10.1} {worst:>10.1} {x:>8.2} {xw:>8.2}");
        }
    }
    if !bw.is_empty() {
        println!(
            "\n{:>8} {:>14} {:>14} {:>14} {:>7} {:>7}",
            "bytes", "WRITE MB/s", "READ MB/s", "memcpy MB/s", "W/cpy", "R/cpy"
        );
        for (s, w, r, m) in &bw {
            println!(
                "{s:>8} {:>14.0} {:>14.0} {:>14.0} {:>7.2} {:>7.2}",
                w / 1e6,
                r / 1e6,
                m / 1e6,
                w / m,
                r / m
            );
        }
    }
}
