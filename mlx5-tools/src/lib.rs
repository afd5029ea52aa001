//! perftest-compatible tools for the mlx5 library: `mlx5_{write,read,send,atomic}_{lat,bw}`
//! take perftest's options (`-a`, `-s`, `-n`, `-D`, `-q`, `-t`, `-I`,
//! `-c RC|UD|DC`, `--report_gbits`, `--out_json`, `--out_json_file`, `-d`,
//! `-i`, `-p`, a server host for the client) and print perftest's test block, connection
//! lines and result table, with its JSON keys. On the simulator (default)
//! both sides run in this process; `--backend hw` runs one side per
//! machine, perftest style (server without a host argument, client with).
//!
//! Timing uses the monotonic clock in nanoseconds (perftest reads the
//! cycle counter); latency tests report half the round trip for WRITE and
//! SEND and the whole round trip for READ and atomics, as perftest does.

#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
pub mod devinfo;
pub mod engine;
pub mod exchange;
pub mod opts;
mod perftest_peer;
pub mod perftest_xchg;
pub mod report;
pub mod stats;

use std::process::ExitCode;

use clap::Parser;
use mlx5_api::{Backend, Device, LinkLayer};

use engine::{End, Remote, RunResult};
use opts::{Config, Test, Verb};

/// Entry point of one program: parse, run, report. A bad argument or a
/// failed run is one line on stderr and exit status 1.
pub fn main(verb: Verb, test: Test) -> ExitCode {
    let prog = prog_name();
    let opts = match finish_parse(&prog, opts::parse_for(verb, test, &prog, std::env::args_os())) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if opts.duration.is_some() && opts.iters.is_some() {
        eprintln!("{prog}: -n is ignored with -D: the run lasts -D seconds (as in perftest)");
    }
    if !opts.out_json && std::env::args_os().any(|a| a.to_string_lossy().starts_with("--out_json_file")) {
        eprintln!("{prog}: --out_json_file writes nothing without --out_json (as in perftest)");
    }
    let r = Config::new(verb, test, opts).and_then(|c| match c.opts.backend {
        opts::Backend::Sim => run_sim(&c),
        opts::Backend::Hw => run_hw(&c),
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{prog}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The program's file name (for error lines).
pub(crate) fn prog_name() -> String {
    let prog = std::env::args().next().unwrap_or_default();
    std::path::Path::new(&prog).file_name().map_or("mlx5-tools".into(), |p| p.to_string_lossy().into_owned())
}

/// Parse the command line; `--help` / `--version` print and succeed, a bad
/// argument is one line on stderr and exit status 1.
pub(crate) fn parse<P: Parser>(prog: &str) -> Result<P, ExitCode> {
    let m = P::command().name(prog.to_string()).bin_name(prog.to_string()).try_get_matches();
    finish_parse(prog, m.and_then(|m| P::from_arg_matches(&m)))
}

/// What [`parse`] does with clap's answer.
pub(crate) fn finish_parse<P>(prog: &str, r: Result<P, clap::Error>) -> Result<P, ExitCode> {
    match r {
        Ok(o) => Ok(o),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{prog}: {}", opts::one_line(&e));
            Err(ExitCode::FAILURE)
        }
    }
}

fn link_name(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::InfiniBand => "IB",
        LinkLayer::Ethernet => "Ethernet",
    }
}

/// The test block, both connection lines and the table header.
/// perftest prints every QP's line, the local ones first
/// (`ctx_print_pingpong_data` in a loop over the QPs, then over the peer's).
fn print_header(
    c: &Config,
    device: &str,
    link: &str,
    mtu: u32,
    local: &[report::Dest],
    remote: &[report::Dest],
) {
    if let Some(w) = c.mtu_warning(mtu) {
        eprintln!("{w}");
    }
    if c.valid_mtu().is_some_and(|m| m > mtu) {
        println!("Requested mtu is higher than active mtu \nChanging to active mtu - {mtu}");
    }
    if c.post_list > 1 && c.opts.cq_mod.is_none() {
        println!("{}", report::RESULT_LINE);
        println!("Post List requested - CQ moderation will be the size of the post list");
    }
    if c.duration.is_some() && c.test == Test::Bw && !c.opts.no_peak {
        // perftest's force_dependecies says so before the test block.
        println!(" WARNING: BW peak won't be measured in this run.");
    }
    println!("{}", report::test_block(c, device, link, mtu));
    let outs = c.out_reads.unwrap_or(16);
    for d in local {
        println!("{}", report::dest_lines("local", d, c.verb, outs));
    }
    for d in remote {
        println!("{}", report::dest_lines("remote", d, c.verb, outs));
    }
    println!("{}", report::RESULT_LINE);
    if c.is_client() {
        println!("{}", report::table_header(c));
    }
}

/// Accumulates the table and the JSON of the last size (perftest rewrites
/// its JSON file per size: the last one stays).
struct Out {
    json: Option<String>,
}

impl Out {
    fn row(
        &mut self,
        c: &Config,
        size: u64,
        iters: u64,
        posted: &[u64],
        completed: Option<&[u64]>,
    ) -> RunResult<()> {
        let (line, json) = match (c.test, completed) {
            (Test::Lat, _) if c.duration.is_some() => {
                let total_us = (posted[posted.len() - 1] - posted[0]) as f64 / 1000.0;
                let factor = if matches!(c.verb, Verb::Read | Verb::Atomic) { 1.0 } else { 2.0 };
                let t_avg = total_us / iters.max(1) as f64 / factor;
                let tps = iters as f64 / (total_us / 1e6).max(1e-9);
                (report::lat_dur_row(size, iters, t_avg, tps), report::lat_dur_json(size, iters, t_avg, tps))
            }
            (Test::Lat, _) => {
                let factor = if matches!(c.verb, Verb::Read | Verb::Atomic) { 1 } else { 2 };
                let mut s = stats::latency(posted, factor).ok_or("too few iterations for statistics")?;
                // -C: cycles of the CPU clock perftest counts in (µs × MHz).
                let (scale, units) = if c.opts.report_cycles {
                    (
                        stats::cpu_mhz()
                            .ok_or("-C: the CPU's clock rate is unknown (no 'cpu MHz' in /proc/cpuinfo)")?,
                        "cycles",
                    )
                } else {
                    (1.0, "usec")
                };
                s = s.scaled(scale);
                if c.opts.report_unsorted || c.opts.report_histogram {
                    // perftest's -U (every sample, in order) and -H (sorted,
                    // the tail dropped), then the table's header again.
                    let mut d: Vec<f64> =
                        stats::samples(posted, factor).into_iter().map(|x| x * scale).collect();
                    if c.opts.report_unsorted {
                        print!("{}", report::histogram(&d, units));
                    }
                    d.sort_by(f64::total_cmp);
                    d.truncate(d.len().saturating_sub(stats::LAT_MEASURE_TAIL));
                    if c.opts.report_histogram {
                        print!("{}", report::histogram(&d, units));
                    }
                    println!("{}\n{}", report::RESULT_LINE, report::table_header(c));
                }
                (report::lat_row(size, iters, &s), report::lat_json(size, iters, &s))
            }
            (Test::Bw, Some(done)) => {
                let s = stats::bandwidth(size, posted, done, c.cq_mod as usize, !c.no_peak)
                    .ok_or("no completions")?;
                let g = c.opts.report_gbits;
                (report::bw_row(size, iters, &s, g), report::bw_json(size, iters, &s, g))
            }
            (Test::Bw, None) => return Err("bandwidth without completion stamps".into()),
        };
        println!("{line}");
        self.json = Some(json);
        Ok(())
    }

    /// `-b`: one row of both directions added up, as perftest adds the
    /// peer's report to its own.
    fn bw_sum(&mut self, c: &Config, size: u64, iters: u64, a: &stats::BwStats, b: &stats::BwStats) {
        let s = stats::BwStats {
            peak_bps: a.peak_bps + b.peak_bps,
            avg_bps: a.avg_bps + b.avg_bps,
            msg_rate: a.msg_rate + b.msg_rate,
        };
        self.bw_line(c, size, iters, &s);
    }

    /// A bandwidth row of figures measured elsewhere (the peer's report, or a
    /// receiver's).
    fn bw_line(&mut self, c: &Config, size: u64, iters: u64, s: &stats::BwStats) {
        let g = c.opts.report_gbits;
        println!("{}", report::bw_row(size, iters, s, g));
        self.json = Some(report::bw_json(size, iters, s, g));
    }

    fn finish(self, c: &Config, device: &str, link: &str, mtu: u32) -> RunResult<()> {
        println!("{}", report::RESULT_LINE);
        if let (true, Some(j)) = (c.opts.out_json, self.json) {
            let text = report::json(c, device, link, mtu, &j);
            std::fs::write(&c.opts.out_json_file, text)
                .map_err(|e| format!("{}: {e}", c.opts.out_json_file))?;
        }
        Ok(())
    }
}

/// The simulated devices of the tools: `sim0` (LID 1) and `sim1` (LID 2),
/// InfiniBand, in deterministic mode.
pub(crate) fn sim_fabric() -> mlx5_sim::Fabric {
    sim_fabric_in(mlx5_sim::ExecMode::Deterministic)
}

fn sim_fabric_in(mode: mlx5_sim::ExecMode) -> mlx5_sim::Fabric {
    use mlx5_sim::{Fabric, FabricConfig, HostConfig};
    let fabric = Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
    fabric.add_host(HostConfig::infiniband("sim0", 1));
    fabric.add_host(HostConfig::infiniband("sim1", 2));
    fabric
}

fn run_sim(c: &Config) -> RunResult<()> {
    use mlx5_sim::ExecMode;
    let mode = if c.opts.threaded { ExecMode::Threaded } else { ExecMode::Deterministic };
    let fabric = sim_fabric_in(mode);
    if let Some(p) = &c.opts.pcap {
        fabric.start_capture(p).map_err(|e| format!("--pcap {p}: {e}"))?;
    }
    let devs = mlx5_api::sim::devices(&fabric);
    let dev = c.opts.ib_dev.clone().unwrap_or_else(|| devs[0].name());
    let Some(d) = devs.iter().position(|x| x.name() == dev) else {
        return Err(format!("no simulated device {dev} (there are sim0 and sim1)"));
    };
    let (da, db) = (&devs[d], &devs[1 - d]);
    let mut a = End::new(da, c)?;
    let mut b = End::new(db, c)?;
    a.connect(c, &b.infos()?)?;
    b.connect(c, &a.infos()?)?;
    let c = &c.fit_message(a.max_message());
    let (ra, rb) = (a.remote(), b.remote());
    let (link, mtu) = (link_name(a.port.link_layer), c.path_mtu(a.port.active_mtu));
    print_header(c, &dev, link, mtu, &a.dests()?, &b.dests()?);
    let mut out = Out { json: None };
    for &size in &c.sizes {
        match c.test {
            Test::Lat => {
                let stamps = engine::lat_local(c, size, &mut a, &mut b, ra, rb)?;
                out.row(c, size, stamps.len() as u64 - 1, &stamps, None)?;
            }
            Test::Bw if c.opts.bidirectional => loop {
                if c.verb == Verb::Send {
                    a.top_up(c, c.rx_depth)?;
                    b.top_up(c, c.rx_depth)?;
                }
                let ((pa, da), (pb, db)) = engine::bw_both(c, size, &mut a, &mut b, (ra, rb))?;
                let stat = |p: &[u64], d: &[u64]| {
                    stats::bandwidth(size, p, d, c.cq_mod as usize, !c.no_peak).ok_or("no completions")
                };
                let (sa, sb) = (stat(&pa, &da)?, stat(&pb, &db)?);
                out.bw_sum(c, size, pa.len() as u64, &sa, &sb);
                while a.poll(|_, _| {})? > 0 || b.poll(|_, _| {})? > 0 {}
                if !c.opts.run_infinitely {
                    break;
                }
            },
            Test::Bw => loop {
                if c.verb == Verb::Send {
                    b.top_up(c, c.rx_depth)?;
                }
                let bref = &mut b;
                let verb = c.verb;
                let (p, d) = engine::bw_stream(c, size, &mut a, rb, || {
                    if verb != Verb::Send {
                        return Ok(());
                    }
                    for q in bref.take_receives()? {
                        bref.post_recv(c, q)?;
                    }
                    Ok(())
                })?;
                let iters = p.len() as u64;
                out.row(c, size, iters, &p, Some(&d))?;
                // Drain what the server still holds for the next size.
                while b.poll(|_, _| {})? > 0 {}
                // --run_infinitely: a row per -D window, until killed.
                if !c.opts.run_infinitely {
                    break;
                }
            },
        }
    }
    out.finish(c, &dev, link, mtu)?;
    if let Some(p) = &c.opts.pcap {
        let n = fabric.stop_capture().map_err(|e| format!("--pcap {p}: {e}"))?;
        eprintln!(" {n} packets captured to {p}");
    }
    Ok(())
}

fn run_hw(c: &Config) -> RunResult<()> {
    let devs = mlx5_hw::devices().map_err(|e| format!("hardware backend: {e}"))?;
    let dev = match &c.opts.ib_dev {
        Some(n) => devs.into_iter().find(|d| &d.name() == n).ok_or(format!("no device {n}"))?,
        None => devs.into_iter().next().ok_or("no mlx5 device")?,
    };
    if c.opts.perftest_exchange {
        return perftest_peer::run(c, &dev);
    }
    run_one_side(c, &dev)
}

/// One side per machine (hardware): exchange, connect, then the client
/// measures and the server answers.
fn run_one_side<B: Backend>(c: &Config, dev: &Device<B>) -> RunResult<()> {
    if c.duration.is_some()
        && (c.test == Test::Lat || c.verb == Verb::Send)
        && !matches!(c.verb, Verb::Read | Verb::Atomic)
    {
        return Err("-D across machines: WRITE/SEND latency and SEND bandwidth support -n only".into());
    }
    let mut me = End::new(dev, c)?;
    let mut ch = exchange::Channel::open(c.opts.server.as_deref(), c.opts.port)?;
    let infos = me.infos()?;
    for i in &infos {
        ch.send(&exchange::encode(i, me.remote()))?;
    }
    let mut peers = Vec::new();
    let mut peer_mem = Remote { addr: 0, rkey: 0 };
    for _ in 0..c.qps {
        let (p, m) = exchange::decode(&ch.recv()?)?;
        peers.push(p);
        peer_mem = m;
    }
    me.connect(c, &peers)?;
    let c = &c.fit_message(me.max_message());
    let name = dev.name();
    let (link, mtu) = (link_name(me.port.link_layer), c.path_mtu(me.port.active_mtu));
    let remote: Vec<report::Dest> = peers
        .iter()
        .map(|p| report::Dest {
            lid: p.lid,
            qpn: p.qpn,
            psn: p.psn,
            rkey: peer_mem.rkey,
            vaddr: peer_mem.addr,
            gid: p.gid.unwrap_or_default().0,
        })
        .collect();
    print_header(c, &name, link, mtu, &me.dests()?, &remote);
    let client = c.is_client();
    let mut out = Out { json: None };
    for &size in &c.sizes {
        if c.verb == Verb::Send {
            me.top_up(c, if c.test == Test::Lat { c.rx_depth.min(16) } else { c.rx_depth })?;
        }
        ch.send("ready\n")?;
        ch.recv()?;
        match (c.test, client) {
            (Test::Lat, true) => {
                let t0 = std::time::Instant::now();
                let mut stamps = Vec::with_capacity(c.iters as usize + 1);
                for i in 0..c.iters {
                    stamps.push(t0.elapsed().as_nanos() as u64);
                    engine::step(c, size, i, engine::Role::Client, &mut me, peer_mem)?;
                    if matches!(c.verb, Verb::Write | Verb::Send) {
                        engine::wait_arrival(c, size, i, &mut me)?;
                    }
                }
                stamps.push(t0.elapsed().as_nanos() as u64);
                me.settle()?;
                out.row(c, size, c.iters, &stamps, None)?;
            }
            (Test::Lat, false) => {
                if matches!(c.verb, Verb::Write | Verb::Send) {
                    for i in 0..c.iters {
                        engine::step(c, size, i, engine::Role::Server, &mut me, peer_mem)?;
                    }
                    me.settle()?;
                }
            }
            (Test::Bw, client) if c.opts.bidirectional => {
                // -b: both sides stream to each other and repost the
                // receives the other's SENDs take; the server sends its
                // figures, the client prints both added up.
                let (p, d) = engine::bw_stream_serving(c, size, &mut me, peer_mem)?;
                let mine =
                    stats::bandwidth(size, &p, &d, c.cq_mod as usize, !c.no_peak).ok_or("no completions")?;
                if client {
                    let line = ch.recv()?;
                    let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
                    let [peak_bps, avg_bps, msg_rate] = f[..] else {
                        return Err(format!("the server's figures: {line:?}"));
                    };
                    let theirs = stats::BwStats { peak_bps, avg_bps, msg_rate };
                    out.bw_sum(c, size, p.len() as u64, &mine, &theirs);
                } else {
                    ch.send(&format!("{} {} {}\n", mine.peak_bps, mine.avg_bps, mine.msg_rate))?;
                }
            }
            (Test::Bw, true) => loop {
                let (p, d) = engine::bw_stream(c, size, &mut me, peer_mem, || Ok(()))?;
                out.row(c, size, p.len() as u64, &p, Some(&d))?;
                // --run_infinitely: a row per -D window, until killed (the
                // server waits for a "done" that never comes).
                if !c.opts.run_infinitely {
                    break;
                }
            },
            (Test::Bw, false) => {
                if c.verb == Verb::Send {
                    engine::receive_sends(c, &mut me)?;
                }
            }
        }
        // Both sides finished this size.
        ch.send("done\n")?;
        ch.recv()?;
        while me.poll(|_, _| {})? > 0 {}
    }
    if client {
        out.finish(c, &name, link, mtu)?;
    } else {
        println!("{}", report::RESULT_LINE);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opts::Opts;

    /// The two-machine path (`--backend hw`: TCP exchange, one side per
    /// process) run on two simulated NICs in threads: server and client
    /// find each other, connect every transport and finish every test.
    #[test]
    fn server_and_client_over_tcp_on_every_transport() {
        let runs = [
            (Verb::Write, Test::Lat, "RC", false),
            (Verb::Send, Test::Bw, "RC", false),
            (Verb::Send, Test::Lat, "UD", false),
            (Verb::Send, Test::Bw, "UD", false),
            (Verb::Read, Test::Lat, "DC", false),
            (Verb::Atomic, Test::Bw, "DC", false),
            (Verb::Send, Test::Bw, "DC", false),
            (Verb::Write, Test::Lat, "DC", false),
            // -b: both sides stream, the server's figures go to the client.
            (Verb::Write, Test::Bw, "RC", true),
            (Verb::Send, Test::Bw, "RC", true),
            (Verb::Send, Test::Bw, "UD", true),
            (Verb::Read, Test::Bw, "DC", true),
        ];
        for (verb, test, conn, both) in runs {
            let fabric = sim_fabric_in(mlx5_sim::ExecMode::Threaded);
            // A free TCP port for this run's exchange.
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let cfg = |server: Option<&str>| {
                let mut args = vec!["t", "--backend", "hw", "-c", conn, "-n", "60", "-p"];
                if both {
                    args.insert(1, "-b");
                }
                let p = port.to_string();
                args.push(&p);
                args.extend(server);
                Config::new(verb, test, Opts::try_parse_from(args).unwrap()).unwrap()
            };
            let (cs, cc) = (cfg(None), cfg(Some("127.0.0.1")));
            let f2 = fabric.clone();
            let server = std::thread::spawn(move || {
                let devs = mlx5_api::sim::devices(&f2);
                run_one_side(&cs, &devs[1])
            });
            let devs = mlx5_api::sim::devices(&fabric);
            let client = run_one_side(&cc, &devs[0]);
            let server = server.join().unwrap();
            assert_eq!((client, server), (Ok(()), Ok(())), "{verb:?} {test:?} {conn} -b {both}");
        }
    }

    /// `settle` returns once this side's last WRITE has completed: the mark is in
    /// the peer's memory and the send queue is empty (a latency side that exits
    /// right after its last post loses that WRITE; perftest, as the peer, then
    /// waits for it forever).
    #[test]
    fn settle_waits_for_the_last_write() {
        let fabric = sim_fabric_in(mlx5_sim::ExecMode::Threaded);
        let devs = mlx5_api::sim::devices(&fabric);
        let c = Config::new(Verb::Write, Test::Lat, Opts::try_parse_from(["t"]).unwrap()).unwrap();
        let mut a = End::new(&devs[0], &c).unwrap();
        let mut b = End::new(&devs[1], &c).unwrap();
        a.connect(&c, &b.infos().unwrap()).unwrap();
        b.connect(&c, &a.infos().unwrap()).unwrap();
        let rb = b.remote();
        for i in 0..3 {
            engine::step(&c, 2, i, engine::Role::Client, &mut a, rb).unwrap();
        }
        a.settle().unwrap();
        let q = &a.qps[0];
        assert_eq!(q.sq_free(), q.sq_wqebbs(), "a WQE is still outstanding");
        assert_eq!(b.landed(&c, 2), engine::mark_of(2));
    }

    /// A server whose port goes down stops with that reason, not after the
    /// 20-second deadline.
    #[test]
    fn a_port_going_down_ends_the_wait_with_its_reason() {
        let fabric = sim_fabric_in(mlx5_sim::ExecMode::Deterministic);
        let devs = mlx5_api::sim::devices(&fabric);
        let c = Config::new(Verb::Send, Test::Lat, Opts::try_parse_from(["t"]).unwrap()).unwrap();
        let mut me = End::new(&devs[0], &c).unwrap();
        fabric.nics()[0].set_port_active(false);
        let t0 = std::time::Instant::now();
        let e = engine::wait_arrival(&c, 2, 0, &mut me).unwrap_err();
        assert!(e.contains("port 1 went down"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }
}
