//! Our end of perftest's out-of-band exchange (`mlx5_tools::perftest_xchg`) against the
//! real `ib_write_lat` (Debian's perftest), run on the simulator under the launcher: as
//! its client, and as its server. Each side learns the other's key message (LID, QPN,
//! PSN, rkey, address) in perftest's own format. The RDMA part that follows needs the
//! two processes joined by the UDP wire (step 12, in progress): the exchange is checked,
//! then the perftest process is stopped.

mod common;

use common::simrun;
use mlx5_tools::perftest_xchg::{Dest, Xchg, VERSION};
use std::net::TcpListener;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on the loopback.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `ib_write_lat ARGS` on the simulator's mlx5_0, in the background.
fn ib_write_lat(args: &[&str]) -> Child {
    simrun()
        .args(["--", "ib_write_lat", "-d", "mlx5_0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run ib_write_lat under mlx5_simrun")
}

fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// What our end sends: a QP on the simulator's first host (LID 1).
fn ours() -> Dest {
    Dest {
        lid: 1,
        out_reads: 1,
        qpn: 0x123,
        psn: 0x456,
        rkey: 0x789,
        vaddr: 0x7f00_0000_1000,
        gid: None,
        srqn: 0,
    }
}

/// perftest's side of the exchange, as `ib_write_lat` runs it up to its first key
/// message: versions, system data, MTU, keys.
fn exchange(x: &mut Xchg) -> (String, u8, Dest) {
    let v = x.versions(VERSION).expect("versions");
    x.sys_data(4096, 64).expect("system data");
    let mtu = x.mtu(5).expect("MTU");
    let d = x.keys(&ours()).expect("keys");
    (v, mtu, d)
}

#[test]
#[cfg_attr(no_perftest, ignore = "perftest not installed (Debian: perftest; .ci/run installs it)")]
fn our_client_and_ib_write_lat_as_server_exchange_keys() {
    let port = free_port();
    let server = ib_write_lat(&["-p", &port.to_string()]);
    let t0 = Instant::now();
    let mut x = loop {
        match Xchg::connect(&format!("127.0.0.1:{port}")) {
            Ok(x) => break x,
            Err(_) if t0.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("ib_write_lat never listened: {e}"),
        }
    };
    x.set_timeout(Some(Duration::from_secs(20))).unwrap();
    let (v, mtu, d) = exchange(&mut x);
    stop(server);
    assert_eq!(v, VERSION, "perftest's version");
    assert_eq!(mtu, 5, "4096-byte MTU on the simulator's InfiniBand port");
    assert_eq!((d.lid, d.gid), (1, None), "mlx5_0's LID, no GID on InfiniBand: {d:?}");
    assert!(d.qpn != 0 && d.rkey != 0 && d.vaddr != 0, "{d:?}");
}

#[test]
#[cfg_attr(no_perftest, ignore = "perftest not installed (Debian: perftest; .ci/run installs it)")]
fn ib_write_lat_as_client_and_our_server_exchange_keys() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let client = ib_write_lat(&["-p", &port.to_string(), "127.0.0.1"]);
    // Wait at most 20 s for it to connect.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(Xchg::accept(&l)));
    let mut x = rx.recv_timeout(Duration::from_secs(20)).expect("ib_write_lat never connected").unwrap();
    x.set_timeout(Some(Duration::from_secs(20))).unwrap();
    let (v, mtu, d) = exchange(&mut x);
    stop(client);
    assert_eq!((v.as_str(), mtu), (VERSION, 5));
    assert_eq!(d.lid, 1, "{d:?}");
    assert!(d.qpn != 0 && d.rkey != 0 && d.vaddr != 0, "{d:?}");
}
