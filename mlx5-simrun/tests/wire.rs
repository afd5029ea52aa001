//! The UDP wire between processes (step 12, `docs/udp-wire.md`): two programs on the
//! unmodified libibverbs and libmlx5, each under its own `mlx5_simrun --shared`, share
//! a device and exchange RoCE v2 datagrams on the loopback. Ignored, with the reason,
//! without libibverbs-dev (which `.ci/run` installs).

mod common;

use common::{compile, simrun};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mlx5_sim::registry::{Kind, Registry};
use mlx5_sim::wire_noise::{Noise, KINDS};

/// A program of the pair: started, its first line (its QPN and memory) read.
struct Side {
    child: Child,
    line: String,
}

fn start(prog: &Path, registry: &Path, stats: &Path, args: &[&str]) -> Side {
    start_with(prog, registry, stats, args, &[])
}

/// [`start`] with more environment variables.
fn start_with(prog: &Path, registry: &Path, stats: &Path, args: &[&str], env: &[(&str, &str)]) -> Side {
    let mut child = simrun()
        .args(["--shared", "--"])
        .envs(env.iter().copied())
        .arg(prog)
        .args(args)
        .env("MLX5_SIM_REGISTRY_DIR", registry)
        .env("MLX5_SIMKERN_STATS", stats)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mlx5_simrun");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "{args:?} printed nothing");
    Side { child, line }
}

/// The QPN a side printed first.
fn qpn(s: &Side) -> u32 {
    s.line.split_whitespace().next().and_then(|q| q.parse().ok()).expect("a QPN")
}

/// Gives each side the other's line and reads the line each prints when its part is
/// done (the programs then stay until their stdin closes).
fn run(a: &mut Side, b: &mut Side) -> (String, String) {
    let (la, lb) = (a.line.clone(), b.line.clone());
    a.child.stdin.as_mut().unwrap().write_all(lb.as_bytes()).unwrap();
    b.child.stdin.as_mut().unwrap().write_all(la.as_bytes()).unwrap();
    let done = |s: &mut Side| {
        let mut l = String::new();
        BufReader::new(s.child.stdout.as_mut().unwrap()).read_line(&mut l).unwrap();
        l
    };
    // The client's first: a client that failed leaves the server waiting for ever.
    let lb = done(b);
    if !lb.starts_with("ok") {
        let _ = a.child.kill();
        let o = std::mem::replace(&mut b.child, std::process::Command::new("true").spawn().unwrap());
        let err =
            o.wait_with_output().map(|o| String::from_utf8_lossy(&o.stderr).into_owned()).unwrap_or_default();
        panic!("the client failed: {lb:?}\n{err}");
    }
    (done(a), lb)
}

/// Closes a side's stdin and waits for it to exit 0.
fn end(mut s: Side) {
    drop(s.child.stdin.take());
    let o = s.child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}: {}\n{}", s.line.trim(), o.status, String::from_utf8_lossy(&o.stderr));
}

/// The UDP socket bound to `at`, as /proc/net/udp shows it: the bytes queued for it to
/// read (`rx_queue`, hexadecimal) and the datagrams the kernel dropped for a full
/// receive buffer (`drops`, the last column).
fn socket_queue_and_drops(at: SocketAddrV4) -> (u64, u64) {
    let want = format!("{:08X}:{:04X}", u32::from_le_bytes(at.ip().octets()), at.port());
    let t = std::fs::read_to_string("/proc/net/udp").unwrap();
    let f: Vec<&str> = t
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&want.as_str()))
        .unwrap_or_else(|| panic!("no socket {want} in /proc/net/udp"));
    let rx = f[4].split(':').nth(1).and_then(|q| u64::from_str_radix(q, 16).ok()).unwrap();
    (rx, f.last().unwrap().parse().unwrap())
}

/// A counter from a `MLX5_SIMKERN_STATS` file's mlx5_0 line (`name: value`).
fn counter(stats: &str, name: &str) -> u64 {
    let line = stats.lines().find(|l| l.starts_with("mlx5_0 ")).expect("mlx5_0's line");
    let at = line.find(&format!(" {name}: ")).unwrap_or_else(|| panic!("no {name} in {line}"));
    line[at + name.len() + 3..].split([',', ' ', '}']).next().unwrap().parse().unwrap()
}

fn scratch(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Where the process owning `qpn` receives, from the registry.
fn endpoint(registry: &Path, qpn: u32) -> SocketAddrV4 {
    let r = Registry::open(&Registry::path_in(registry, "mlx5_0")).unwrap();
    let e = r.owner(Kind::Qp, qpn).unwrap().expect("the QPN's owner").endpoint;
    SocketAddrV4::new(e.addr.into(), e.port)
}

/// An RC stream between two processes runs exactly once while a million datagrams of
/// noise arrive at both processes' endpoints: random bytes, resized, mutated and
/// corrupted packets, packets for QPNs nobody has and of a foreign partition. The
/// stream (`tests/c/stream.c`: WRITE, FETCH_AND_ADD, READ and SEND with immediate per
/// round, multi-packet at MTU 1024) checks every byte and that each fetch-and-add ran
/// once; each endpoint counts the noise it dropped, by reason.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn an_rc_stream_runs_exactly_once_under_a_million_datagrams_of_noise() {
    const ROUNDS: &str = "400";
    const NOISE: u64 = 1_000_000;
    let prog = compile("stream");
    let dir = scratch("wire-noise");
    let (ss, cs) = (dir.join("server.stats"), dir.join("client.stats"));
    let server = start(&prog, &dir, &ss, &["server", ROUNDS]);
    let client = start(&prog, &dir, &cs, &["client", ROUNDS]);
    let ends = [endpoint(&dir, qpn(&server)), endpoint(&dir, qpn(&client))];
    assert_ne!(ends[0], ends[1], "two processes, two endpoints");

    // The noise comes from a loopback address of host 0 (the device's), so that the
    // endpoints take it for the device's and check its ICRC with the device's GID.
    let gid = mlx5_simrun::Setup { devices: 1, roce: false, shared: false }.fabric().nics()[0].info().gid;
    let sock = UdpSocket::bind("127.2.0.1:0").unwrap();
    let sport = sock.local_addr().unwrap().port();
    let sent = Arc::new(AtomicU64::new(0));
    let noise = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            let mut n = Noise::new(0x5eed, gid, gid, sport);
            let mut by_kind = std::collections::HashMap::new();
            let mut to = [0u64; 2];
            for i in 0..NOISE {
                let (kind, dg) = n.datagram();
                *by_kind.entry(kind).or_insert(0u64) += 1;
                // Every kind to both endpoints (the kinds take turns).
                let e = ((i / KINDS.len() as u64) % 2) as usize;
                to[e] += 1;
                sock.send_to(&dg, ends[e]).expect("send noise");
                sent.store(i + 1, Ordering::Relaxed);
                // In bursts the endpoints' buffers hold.
                if i % 64 == 63 {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
            (by_kind, to)
        })
    };
    // The stream starts once the noise is under way.
    while sent.load(Ordering::Relaxed) < 20_000 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let before = sent.load(Ordering::Relaxed);
    let (mut server, mut client) = (server, client);
    let (a, b) = run(&mut server, &mut client);
    let during = sent.load(Ordering::Relaxed) - before;
    let want = format!("ok {ROUNDS}\n");
    assert_eq!((a.as_str(), b.as_str()), (want.as_str(), want.as_str()));
    let (by_kind, to) = noise.join().unwrap();
    assert_eq!(by_kind.values().sum::<u64>(), NOISE);
    assert!(KINDS.iter().all(|k| by_kind[k] > 100_000), "{by_kind:?}");
    assert!(during > 10_000, "only {during} datagrams of noise while the stream ran");
    // The endpoints take in what is still queued, then the kernel's drop counts.
    let t0 = std::time::Instant::now();
    while ends.iter().any(|&e| socket_queue_and_drops(e).0 > 0) {
        assert!(t0.elapsed().as_secs() < 60, "the endpoints stopped reading");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let kdrops = ends.map(|e| socket_queue_and_drops(e).1);
    end(server);
    end(client);

    // Every datagram of noise that reached an endpoint (what the kernel did not drop
    // for a full buffer) was dropped and counted there: as a foreign partition, a bad
    // ICRC, a runt, a bad length or opcode, or (a stray, or for UD a receive-side drop)
    // a packet for a QPN nobody has. (Strays may include a few of the stream's own late
    // duplicates.)
    for (((stats, k), sent), name) in [&ss, &cs].into_iter().zip(kdrops).zip(to).zip(["server", "client"]) {
        let s = std::fs::read_to_string(stats).unwrap();
        let dropped = counter(&s, "datagrams_dropped");
        let (pkey, icrc, short) = (counter(&s, "pkey"), counter(&s, "icrc"), counter(&s, "short"));
        let wire: u64 = ["foreign", "short", "icrc", "version", "pkey", "opcode", "length"]
            .iter()
            .map(|k| counter(&s, k))
            .sum();
        let stray = dropped - wire;
        // UD datagrams for a QPN nobody has are the UD receive side's drops.
        let ud = counter(&s, "ud_dropped");
        let arrived = sent - k;
        eprintln!(
            "{name}: noise during the stream {during}; arrived {arrived} (kernel dropped {k}); counted {}: \
             P_Key {pkey}, ICRC {icrc}, short {short}, stray {stray}, UD {ud}",
            dropped + ud
        );
        assert!(pkey > 0 && icrc > 0 && short > 0 && stray > 0, "{s}");
        assert!(ud > 0, "{s}");
        let counted = dropped + ud;
        assert!(counted >= arrived && counted <= arrived + 100, "{arrived} arrived, {counted} counted: {s}");
        assert_eq!(counter(&s, "foreign"), 0, "{s}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A peer that is killed mid-stream leaves its requester with what a NIC whose peer died
/// gives: the next message is retransmitted until its retries are spent and completes
/// with TRANSPORT_RETRY_EXC_ERR (status 12); and the dead process's registry entries
/// break no later run: a new pair on the same registry runs.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn a_killed_peer_gives_retry_exceeded_and_no_stale_entry() {
    let prog = compile("stream");
    let dir = scratch("wire-kill");
    let (ss, cs) = (dir.join("server.stats"), dir.join("client.stats"));
    let mut server = start(&prog, &dir, &ss, &["server", "1000000"]);
    let mut client = start(&prog, &dir, &cs, &["client", "1000000"]);
    let (ls, lc) = (server.line.clone(), client.line.clone());
    server.child.stdin.as_mut().unwrap().write_all(lc.as_bytes()).unwrap();
    client.child.stdin.as_mut().unwrap().write_all(ls.as_bytes()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let t0 = std::time::Instant::now();
    while client.child.try_wait().unwrap().is_none() {
        if t0.elapsed().as_secs() >= 30 {
            client.child.kill().unwrap();
            panic!("the client still waits 30 s after its peer was killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = client.child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the client went on without its peer");
    assert!(err.contains("transport retry counter exceeded"), "{err}");
    let s = std::fs::read_to_string(&cs).unwrap();
    assert!(counter(&s, "ack_timeouts") >= 7, "{s}");

    let server = start(&prog, &dir, &ss, &["server", "20"]);
    let client = start(&prog, &dir, &cs, &["client", "20"]);
    let (mut server, mut client) = (server, client);
    let (a, b) = run(&mut server, &mut client);
    assert_eq!((a.as_str(), b.as_str()), ("ok 20\n", "ok 20\n"));
    end(server);
    end(client);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fork` on the wire: the child of a parent that already used the device is a process
/// of its own on the wire (`tests/c/fork_wire.c`): after the fork each creates an RC
/// QP, and the child's WRITE and READ cross the wire to the parent's endpoint, their
/// answers back to the child's. Then no entry of either is left holding a number.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn a_forked_child_is_a_process_of_its_own_on_the_wire() {
    let prog = compile("fork_wire");
    let dir = scratch("wire-fork");
    let o = simrun()
        .args(["--shared", "--"])
        .arg(&prog)
        .env("MLX5_SIM_REGISTRY_DIR", &dir)
        .output()
        .expect("run mlx5_simrun");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && out.contains("all right"), "{}\n{out}{err}", o.status);
    assert!(!err.contains("off the UDP wire"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same stream when each endpoint loses 2% of what it sends: lost requests come
/// back through sequence NAKs and timeouts, lost answers through duplicates the
/// responder answers without executing again. The stream still checks every byte and
/// that each fetch-and-add ran once (a duplicate executed again would add twice).
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn an_rc_stream_runs_exactly_once_when_the_wire_loses_datagrams() {
    let prog = compile("stream");
    let dir = scratch("wire-loss");
    let (ss, cs) = (dir.join("server.stats"), dir.join("client.stats"));
    let loss = [(mlx5_sim::WIRE_LOSS_ENV, "0.02")];
    let mut server = start_with(&prog, &dir, &ss, &["server", "150"], &loss);
    let mut client = start_with(&prog, &dir, &cs, &["client", "150"], &loss);
    let (a, b) = run(&mut server, &mut client);
    assert_eq!((a.as_str(), b.as_str()), ("ok 150\n", "ok 150\n"));
    end(server);
    end(client);
    let (s, c) = (std::fs::read_to_string(&ss).unwrap(), std::fs::read_to_string(&cs).unwrap());
    let both = |k: &str| counter(&s, k) + counter(&c, k);
    eprintln!(
        "lost {}, retransmitted {}, duplicates {}, sequence NAKs {}, ACK timeouts {}",
        both("link_drops"),
        both("retransmits"),
        both("duplicates"),
        both("seq_naks"),
        both("ack_timeouts")
    );
    assert!(both("link_drops") > 0 && both("retransmits") > 0, "{s}\n{c}");
    assert!(both("duplicates") > 0, "no answer was lost: {s}\n{c}");
    let _ = std::fs::remove_dir_all(&dir);
}
