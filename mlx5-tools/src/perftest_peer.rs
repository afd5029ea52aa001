//! `--perftest_exchange`: a test whose other end is perftest itself (step 12). The two
//! meet over perftest's out-of-band exchange ([`crate::perftest_xchg`]) in the order
//! perftest's programs follow, and run perftest's data path, so that e.g.
//! `mlx5_write_bw --backend hw` and `ib_write_bw` measure each other on any ConnectX.
//!
//! Write and SEND, latency and bandwidth, on RC (perftest v4.5-0.17's `write_lat.c`,
//! `write_bw.c`, `send_lat.c`, `send_bw.c`):
//! - versions, system data, MTU;
//! - key handshakes around connecting the QPs ([`Program::handshakes`]);
//! - write latency (every size of `-a` back to back): perftest's server posts first and
//!   its client waits first. Each post writes the message into the peer's advertised
//!   buffer with its last byte the count as a C `char`; each side waits for that byte in
//!   its own buffer. No closing exchange (`ib_write_lat` does not call
//!   `ctx_close_connection`);
//! - SEND latency: per size the receives, a handshake, then the client sends first;
//!   `ctx_close_connection` at the end;
//! - write bandwidth: the client streams every size back to back while the server waits
//!   in the next handshake; then `xchg_bw_reports` (the last size's figures; our server
//!   prints the client's) and `ctx_close_connection`;
//! - SEND bandwidth: per size the server's receives and a handshake (with `-a` one more
//!   after the size), the client streams and the server counts arrivals and reports their
//!   rate (no peak, as perftest's SEND server); `ctx_close_connection` at the end.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use mlx5_api::{Backend, Device, Gid, LinkLayer, RemoteQpInfo};

use crate::engine::{self, half, End, Remote, Role, PERFTEST_CYCLE_BUFFER};
use crate::opts::{Config, Connection, Test, Verb};
use crate::perftest_xchg::{BwReport, Dest, Xchg, VERSION};
use crate::{print_header, report, stats, Out, RunResult};

/// The cache line size our side reports in the system data.
const CACHE_LINE: i32 = 64;

/// How long the client retries a server that is not listening yet.
const CONNECT_FOR: Duration = Duration::from_secs(20);

/// How long one exchange may wait for the peer outside a test's run.
const XCHG_WAIT: Duration = Duration::from_secs(60);

fn io<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("perftest exchange, {what}: {e}")
}

/// The `ibv_mtu` value (1 = 256 ... 5 = 4096) of an MTU in bytes.
fn ibv_mtu(bytes: u32) -> u8 {
    match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// The perftest program at the other end, by our tool's verb and test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    WriteLat,
    WriteBw,
    SendLat,
    SendBw,
}

impl Program {
    /// The program this run meets, or why it cannot meet perftest.
    fn of(c: &Config) -> RunResult<Program> {
        let p = match (c.verb, c.test) {
            (Verb::Write, Test::Lat) => Program::WriteLat,
            (Verb::Write, Test::Bw) => Program::WriteBw,
            (Verb::Send, Test::Lat) => Program::SendLat,
            (Verb::Send, Test::Bw) => Program::SendBw,
            _ => {
                return Err("--perftest_exchange: write and SEND, latency and bandwidth (ib_write_lat, \
                            ib_write_bw, ib_send_lat, ib_send_bw)"
                    .into())
            }
        };
        let name = p.name();
        let not = |what: &str| Err(format!("--perftest_exchange: {what} is not offered against {name} yet"));
        if c.connection != Connection::Rc {
            return not(&format!("-c {}", format!("{:?}", c.connection).to_uppercase()));
        }
        if c.opts.bidirectional {
            return not("-b");
        }
        if c.duration.is_some() || c.opts.run_infinitely {
            return not("-D / --run_infinitely");
        }
        if c.opts.use_srq {
            return not("--use-srq");
        }
        Ok(p)
    }

    fn name(self) -> &'static str {
        match self {
            Program::WriteLat => "ib_write_lat",
            Program::WriteBw => "ib_write_bw",
            Program::SendLat => "ib_send_lat",
            Program::SendBw => "ib_send_bw",
        }
    }

    /// The key handshakes around connecting the QPs, in the program's order:
    /// - `ib_write_lat`: one, one per QP, connect, one per QP, one more;
    /// - `ib_write_bw`: one per QP, connect, one per QP, one more;
    /// - `ib_send_lat`, `ib_send_bw`: one per QP, connect, one, one per QP.
    ///
    /// Returns the peer's first answer per QP.
    fn handshakes<B: Backend>(
        self,
        c: &Config,
        x: &mut Xchg,
        me: &mut End<B>,
        mine: &[Dest],
    ) -> RunResult<Vec<Dest>> {
        let hs = |x: &mut Xchg, d: &Dest| x.keys(d).map_err(io("key handshake"));
        if self == Program::WriteLat {
            hs(x, &mine[0])?;
        }
        let theirs = mine.iter().map(|d| hs(x, d)).collect::<RunResult<Vec<Dest>>>()?;
        let peers: Vec<RemoteQpInfo> = theirs
            .iter()
            .map(|d| RemoteQpInfo { qpn: d.qpn, lid: d.lid, gid: d.gid.map(Gid), mac: None, psn: d.psn })
            .collect();
        me.connect(c, &peers)?;
        match self {
            Program::WriteLat | Program::WriteBw => {
                for d in mine {
                    hs(x, d)?;
                }
                hs(x, &mine[0])?;
            }
            Program::SendLat | Program::SendBw => {
                hs(x, &mine[0])?;
                for d in mine {
                    hs(x, d)?;
                }
            }
        }
        Ok(theirs)
    }
}

/// Opens the exchange: the client connects to `-p` of the server (retrying while it
/// starts), the server takes one client.
fn open(c: &Config) -> RunResult<Xchg> {
    let x = match &c.opts.server {
        Some(host) => {
            let t0 = Instant::now();
            loop {
                match Xchg::connect(&format!("{host}:{}", c.opts.port)) {
                    Ok(x) => break x,
                    Err(_) if t0.elapsed() < CONNECT_FOR => std::thread::sleep(Duration::from_millis(100)),
                    Err(e) => return Err(io("connect")(e)),
                }
            }
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", c.opts.port)).map_err(io("listen"))?;
            Xchg::accept(&l).map_err(io("accept"))?
        }
    };
    x.set_timeout(Some(XCHG_WAIT)).map_err(io("timeout"))?;
    Ok(x)
}

/// One side of a test against perftest's program of the same verb and test.
pub(crate) fn run<B: Backend>(c: &Config, dev: &Device<B>) -> RunResult<()> {
    let prog = Program::of(c)?;
    let mut me = End::new(dev, c)?;
    let mut x = open(c)?;
    let their_version = x.versions(VERSION).map_err(io("versions"))?;
    x.sys_data(PERFTEST_CYCLE_BUFFER as i32, CACHE_LINE).map_err(io("system data"))?;
    let mtu = c.path_mtu(me.port.active_mtu);
    let peer_mtu = x.mtu(ibv_mtu(mtu)).map_err(io("MTU"))?;
    if peer_mtu != ibv_mtu(mtu) {
        return Err(format!(
            "perftest {their_version} runs MTU {peer_mtu} (ibv_mtu), this side {}",
            ibv_mtu(mtu)
        ));
    }
    // Our key messages: where the peer writes is our landing area (we poll its bytes).
    let roce = me.port.link_layer == LinkLayer::Ethernet;
    let mine: Vec<Dest> = me
        .infos()?
        .iter()
        .map(|i| Dest {
            lid: i.lid,
            out_reads: 1,
            qpn: i.qpn,
            psn: i.psn,
            rkey: me.remote().rkey,
            vaddr: me.remote().addr + half(c),
            gid: if roce { i.gid.map(|g| g.0) } else { None },
            srqn: 0,
        })
        .collect();
    let theirs = prog.handshakes(c, &mut x, &mut me, &mine)?;
    // Our post adds our own landing offset to the peer's address: take it off, so that
    // a WRITE lands at exactly the address perftest gave.
    let peer = Remote { addr: theirs[0].vaddr.wrapping_sub(half(c)), rkey: theirs[0].rkey };

    let name = dev.name();
    let link = if roce { "Ethernet" } else { "IB" };
    let dests = |ds: &[Dest]| -> Vec<report::Dest> {
        ds.iter()
            .map(|d| report::Dest {
                lid: d.lid,
                qpn: d.qpn,
                psn: d.psn,
                rkey: d.rkey,
                vaddr: d.vaddr,
                gid: d.gid.unwrap_or_default(),
            })
            .collect()
    };
    print_header(c, &name, link, mtu, &dests(&mine), &dests(&theirs));
    let mut side =
        Side { c, me, x, mine: mine[0], peer, client: c.opts.server.is_some(), out: Out { json: None } };
    let rows = match prog {
        Program::WriteLat => side.write_lat()?,
        Program::SendLat => side.send_lat()?,
        Program::WriteBw => side.write_bw(&their_version)?,
        Program::SendBw => side.send_bw()?,
    };
    if rows {
        side.out.finish(c, &name, link, mtu)?;
    } else {
        println!("{}", report::RESULT_LINE);
    }
    Ok(())
}

/// This side of a connected test.
struct Side<'a, B: Backend> {
    c: &'a Config,
    me: End<B>,
    x: Xchg,
    /// Our QP 0's key message.
    mine: Dest,
    /// Where our WRITEs go, less our landing offset ([`End::post`] adds it).
    peer: Remote,
    client: bool,
    out: Out,
}

impl<B: Backend> Side<'_, B> {
    /// A handshake as a barrier. It carries QP 0's keys, as perftest's: perftest stores
    /// what it gets as the peer's QP 0 and builds later WQEs from it.
    fn handshake(&mut self) -> RunResult<()> {
        self.x.keys(&self.mine).map(|_| ()).map_err(io("handshake"))
    }

    /// `ctx_close_connection`.
    fn close(&mut self) -> RunResult<()> {
        self.x.close(&self.mine).map_err(io("closing"))
    }

    /// The iterations of one latency size; `first`: this side posts first (then waits
    /// for the answer), else it answers what arrives. The post time stamps (ns), and
    /// every WQE of this side completed at the end: perftest's loop ends when its own
    /// last message has completed too (`ccnt < iters`), or that message may never leave.
    fn lat_size(&mut self, size: u64, first: bool) -> RunResult<Vec<u64>> {
        let c = self.c;
        let mut stamps = Vec::with_capacity(c.iters as usize + 1);
        let t0 = Instant::now();
        for i in 0..c.iters {
            stamps.push(t0.elapsed().as_nanos() as u64);
            if first {
                engine::step(c, size, i, Role::Client, &mut self.me, self.peer)?;
                engine::wait_arrival(c, size, i, &mut self.me)?;
            } else {
                engine::step(c, size, i, Role::Server, &mut self.me, self.peer)?;
            }
        }
        stamps.push(t0.elapsed().as_nanos() as u64);
        self.me.settle()?;
        Ok(stamps)
    }

    /// Write latency against `ib_write_lat`: perftest's server posts first, its client
    /// waits first, so the roles of [`engine::step`] are swapped. Returns whether this
    /// side printed rows (the client).
    fn write_lat(&mut self) -> RunResult<bool> {
        let c = self.c;
        for &size in &c.sizes {
            // ib_write_lat's server posts first.
            let stamps = self.lat_size(size, !self.client)?;
            if self.client {
                self.out.row(c, size, c.iters, &stamps, None)?;
            }
        }
        // (ib_write_lat ends without ctx_close_connection: the socket just closes.)
        Ok(self.client)
    }

    /// SEND latency against `ib_send_lat`: per size the receives, a handshake, then
    /// the client sends first and each side answers what arrives. Both sides print
    /// rows.
    fn send_lat(&mut self) -> RunResult<bool> {
        let c = self.c;
        for &size in &c.sizes {
            self.me.top_up(c, c.rx_depth.min(16))?;
            self.handshake()?;
            // ib_send_lat's client sends first.
            let stamps = self.lat_size(size, self.client)?;
            // Both sides report, as both of ib_send_lat's do.
            self.out.row(c, size, c.iters, &stamps, None)?;
        }
        self.close()?;
        Ok(true)
    }

    /// Write bandwidth against `ib_write_bw`: the client streams every size back to
    /// back; the server waits in the next handshake. Then the reports: our client sends
    /// its last size's, our server prints the client's.
    fn write_bw(&mut self, their_version: &str) -> RunResult<bool> {
        let c = self.c;
        let gbits = c.opts.report_gbits;
        let mut last = BwReport::default();
        if self.client {
            for &size in &c.sizes {
                let (p, d) = engine::bw_stream(c, size, &mut self.me, self.peer, || Ok(()))?;
                let iters = p.len() as u64;
                self.out.row(c, size, iters, &p, Some(&d))?;
                let s =
                    stats::bandwidth(size, &p, &d, c.cq_mod as usize, !c.no_peak).ok_or("no completions")?;
                last = report_of(size, iters, &s, gbits);
            }
        } else {
            // However long the client's run: its handshake or its close ends the wait.
            self.x.set_timeout(None).map_err(io("timeout"))?;
        }
        self.handshake()?;
        self.x.set_timeout(Some(XCHG_WAIT)).map_err(io("timeout"))?;
        let theirs = self.x.bw_report(&last, their_version).map_err(io("bandwidth reports"))?;
        if !self.client {
            // perftest's server prints nothing here; ours shows what the client measured.
            println!(" (the client's report)");
            self.out.bw_line(c, theirs.size, theirs.iters, &stats_of(&theirs, gbits));
        }
        self.close()?;
        Ok(true)
    }

    /// SEND bandwidth against `ib_send_bw`: per size the server posts its receives and
    /// both shake hands; the client streams, the server counts arrivals and reports
    /// their rate (no peak: perftest's SEND server measures none). With `-a` a
    /// handshake ends each size.
    fn send_bw(&mut self) -> RunResult<bool> {
        let c = self.c;
        for &size in &c.sizes {
            if self.client {
                self.handshake()?;
                let (p, d) = engine::bw_stream(c, size, &mut self.me, self.peer, || Ok(()))?;
                self.out.row(c, size, p.len() as u64, &p, Some(&d))?;
            } else {
                self.me.top_up(c, c.rx_depth)?;
                self.handshake()?;
                let s = self.receive_stream(size)?;
                self.out.bw_line(c, size, c.iters * u64::from(c.qps), &s);
            }
            if c.opts.all {
                self.handshake()?;
            }
        }
        self.close()?;
        Ok(true)
    }

    /// The server's side of a SEND stream: `iters` SENDs per QP, receives reposted
    /// while more are due; the rate from the handshake to the last arrival.
    fn receive_stream(&mut self, size: u64) -> RunResult<stats::BwStats> {
        let start = Instant::now();
        let seen = engine::receive_sends(self.c, &mut self.me)?;
        let got = self.c.iters * u64::from(self.c.qps);
        let secs = seen.duration_since(start).as_secs_f64().max(1e-9);
        Ok(stats::BwStats { peak_bps: 0.0, avg_bps: (size * got) as f64 / secs, msg_rate: got as f64 / secs })
    }
}

/// Our figures as perftest's report carries them: bandwidth in the table's unit,
/// message rate in millions per second.
fn report_of(size: u64, iters: u64, s: &stats::BwStats, gbits: bool) -> BwReport {
    BwReport {
        size,
        iters,
        bw_peak: report::bw_unit(s.peak_bps, gbits),
        bw_avg: report::bw_unit(s.avg_bps, gbits),
        msg_rate: s.msg_rate / 1e6,
    }
}

/// A peer's report as our figures (the inverse of [`report_of`]).
fn stats_of(r: &BwReport, gbits: bool) -> stats::BwStats {
    let unit = report::bw_unit(1.0, gbits);
    stats::BwStats { peak_bps: r.bw_peak / unit, avg_bps: r.bw_avg / unit, msg_rate: r.msg_rate * 1e6 }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The arrival mark is perftest's `(char)++scnt` (run_iter_lat_write): 1 first, and
    /// after 255 comes 0, not 1.
    #[test]
    fn the_arrival_mark_counts_as_perftests_char() {
        assert_eq!(engine::mark_of(0), 1);
        assert_eq!(engine::mark_of(254), 255);
        assert_eq!(engine::mark_of(255), 0);
        assert_eq!(engine::mark_of(256), 1);
    }

    fn config(verb: Verb, test: Test, args: &[&str]) -> Config {
        use clap::Parser;
        let mut a = vec!["t", "--backend", "hw", "--perftest_exchange"];
        a.extend_from_slice(args);
        Config::new(verb, test, crate::opts::Opts::try_parse_from(a).unwrap()).unwrap()
    }

    /// Write and SEND, latency and bandwidth, on RC; the rest is refused with its reason.
    #[test]
    fn the_programs_met_and_what_is_refused() {
        let of = |verb, test, args: &[&str]| Program::of(&config(verb, test, args));
        assert_eq!(of(Verb::Write, Test::Lat, &[]), Ok(Program::WriteLat));
        assert_eq!(of(Verb::Write, Test::Bw, &[]), Ok(Program::WriteBw));
        assert_eq!(of(Verb::Send, Test::Lat, &[]), Ok(Program::SendLat));
        assert_eq!(of(Verb::Send, Test::Bw, &["-q", "4"]), Ok(Program::SendBw));
        assert!(of(Verb::Read, Test::Bw, &[]).unwrap_err().contains("ib_send_bw"));
        assert!(of(Verb::Send, Test::Bw, &["-c", "UD"]).unwrap_err().contains("-c UD is not offered"));
        assert!(of(Verb::Write, Test::Bw, &["-b"])
            .unwrap_err()
            .contains("-b is not offered against ib_write_bw"));
        assert!(of(Verb::Send, Test::Lat, &["-D", "2"]).is_err());
    }

    /// A perftest bandwidth client writes messages of up to half its cycle buffer at
    /// successive cache lines of the address we gave, wrapping after 4096 bytes
    /// (`increase_rem_addr`); larger ones at that address. All of it lies in our
    /// landing area, which is the MR's second half.
    #[test]
    fn the_landing_area_holds_perftests_cycle_buffer() {
        for size in ["2", "64", "2048", "2049", "4096", "65536", "8388608"] {
            let c = config(Verb::Write, Test::Bw, &["-s", size]);
            let s: u64 = size.parse().unwrap();
            let reach = if s <= PERFTEST_CYCLE_BUFFER / 2 {
                PERFTEST_CYCLE_BUFFER + s.next_multiple_of(64)
            } else {
                s
            };
            assert!(half(&c) >= reach, "-s {size}: landing area {} < {reach}", half(&c));
        }
    }

    /// Our figures in perftest's report: MB/s of 2^20 bytes (Gb/s of 10^9 bits with
    /// `--report_gbits`, perftest's format factors) and Mpps; a peer's report back.
    #[test]
    fn reports_carry_perftests_units() {
        let s = stats::BwStats { peak_bps: 2.0 * 1_048_576.0, avg_bps: 1_048_576.0, msg_rate: 3e6 };
        let r = report_of(4096, 100, &s, false);
        assert_eq!((r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate), (4096, 100, 2.0, 1.0, 3.0));
        assert_eq!(stats_of(&r, false), s);
        let g = report_of(4096, 100, &stats::BwStats { peak_bps: 0.0, avg_bps: 125e6, msg_rate: 1e6 }, true);
        assert_eq!((g.bw_peak, g.bw_avg, g.msg_rate), (0.0, 1.0, 1.0));
    }

    /// `ibv_mtu` values as perftest's MTU exchange carries them.
    #[test]
    fn mtus_as_ibv_mtu() {
        assert_eq!([256, 512, 1024, 2048, 4096].map(ibv_mtu), [1, 2, 3, 4, 5]);
    }
}
