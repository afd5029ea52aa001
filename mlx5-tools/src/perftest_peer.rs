//! `--perftest_exchange`: a test whose other end is perftest itself (step 12). The two
//! meet over perftest's out-of-band exchange ([`crate::perftest_xchg`]) in the order
//! perftest's programs follow, and run perftest's data path, so that e.g.
//! `mlx5_write_lat --backend hw` and `ib_write_lat` measure each other on any ConnectX.
//!
//! For now write latency on RC (`ib_write_lat`, perftest v4.5-0.17):
//! - versions, system data, MTU;
//! - a key handshake, one per QP, the QPs connected, one per QP again, and a last one
//!   (perftest's barrier after RTR);
//! - every size (`-a`: 2 to 8 MiB, no barrier between sizes): perftest's server posts
//!   first and its client waits first. Each post writes the message into the peer's
//!   advertised buffer with its last byte the count as a C `char`; each side waits for
//!   that byte in its own buffer;
//! - no closing exchange (`ib_write_lat` does not call `ctx_close_connection`).

use std::net::TcpListener;
use std::time::Duration;

use mlx5_api::{Backend, Device, Gid, LinkLayer, RemoteQpInfo};

use crate::engine::{self, half, End, Remote, Role};
use crate::opts::{Config, Connection, Test, Verb};
use crate::perftest_xchg::{Dest, Xchg, VERSION};
use crate::{print_header, report, Out, RunResult};

/// perftest's `cycle_buffer` default (the page size) and the cache line it reports.
const CYCLE_BUFFER: i32 = 4096;
const CACHE_LINE: i32 = 64;

/// How long the client retries a server that is not listening yet.
const CONNECT_FOR: Duration = Duration::from_secs(20);

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

/// Opens the exchange: the client connects to `-p` of the server (retrying while it
/// starts), the server takes one client.
fn open(c: &Config) -> RunResult<Xchg> {
    let x = match &c.opts.server {
        Some(host) => {
            let t0 = std::time::Instant::now();
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
    x.set_timeout(Duration::from_secs(60)).map_err(io("timeout"))?;
    Ok(x)
}

/// Write latency against perftest's `ib_write_lat` (either side).
pub(crate) fn write_lat<B: Backend>(c: &Config, dev: &Device<B>) -> RunResult<()> {
    if c.verb != Verb::Write || c.test != Test::Lat || c.connection != Connection::Rc {
        return Err("--perftest_exchange: write latency on RC (ib_write_lat) for now".into());
    }
    let mut me = End::new(dev, c)?;
    let mut x = open(c)?;
    let theirs = x.versions(VERSION).map_err(io("versions"))?;
    x.sys_data(CYCLE_BUFFER, CACHE_LINE).map_err(io("system data"))?;
    let mtu = c.path_mtu(me.port.active_mtu);
    let peer_mtu = x.mtu(ibv_mtu(mtu)).map_err(io("MTU"))?;
    if peer_mtu != ibv_mtu(mtu) {
        return Err(format!("perftest {theirs} runs MTU {peer_mtu} (ibv_mtu), this side {}", ibv_mtu(mtu)));
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
    let hs = |x: &mut Xchg, d: &Dest| x.keys(d).map_err(io("key handshake"));
    hs(&mut x, &mine[0])?;
    let mut theirs_d = Vec::new();
    for d in &mine {
        theirs_d.push(hs(&mut x, d)?);
    }
    let peers: Vec<RemoteQpInfo> = theirs_d
        .iter()
        .map(|d| RemoteQpInfo { qpn: d.qpn, lid: d.lid, gid: d.gid.map(Gid), mac: None, psn: d.psn })
        .collect();
    me.connect(c, &peers)?;
    for d in &mine {
        hs(&mut x, d)?;
    }
    hs(&mut x, &mine[0])?;
    // Our post adds our own landing offset to the peer's address: take it off, so that
    // the WRITE lands at exactly the address perftest gave.
    let peer = Remote { addr: theirs_d[0].vaddr.wrapping_sub(half(c)), rkey: theirs_d[0].rkey };

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
    print_header(c, &name, link, mtu, &dests(&mine), &dests(&theirs_d));
    let client = c.opts.server.is_some();
    let mut out = Out { json: None };
    for &size in &c.sizes {
        // perftest's server posts first, its client waits first: our roles swapped.
        let mut stamps = Vec::with_capacity(c.iters as usize + 1);
        let t0 = std::time::Instant::now();
        for i in 0..c.iters {
            stamps.push(t0.elapsed().as_nanos() as u64);
            if client {
                engine::step(c, size, i, Role::Server, &mut me, peer)?;
            } else {
                engine::step(c, size, i, Role::Client, &mut me, peer)?;
                engine::wait_arrival(c, size, i, &mut me)?;
            }
        }
        stamps.push(t0.elapsed().as_nanos() as u64);
        if client {
            out.row(c, size, c.iters, &stamps, None)?;
        }
        // perftest's loop ends when its own last WRITE has completed too
        // (`ccnt < iters`): so does this one, or the last WRITE may never leave.
        me.settle()?;
    }
    // (ib_write_lat ends without ctx_close_connection: the socket just closes.)
    drop(x);
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

    /// The arrival mark is perftest's `(char)++scnt` (run_iter_lat_write): 1 first, and
    /// after 255 comes 0, not 1.
    #[test]
    fn the_arrival_mark_counts_as_perftests_char() {
        assert_eq!(engine::mark_of(0), 1);
        assert_eq!(engine::mark_of(254), 255);
        assert_eq!(engine::mark_of(255), 0);
        assert_eq!(engine::mark_of(256), 1);
    }

    /// `ibv_mtu` values as perftest's MTU exchange carries them.
    #[test]
    fn mtus_as_ibv_mtu() {
        assert_eq!([256, 512, 1024, 2048, 4096].map(ibv_mtu), [1, 2, 3, 4, 5]);
    }
}
