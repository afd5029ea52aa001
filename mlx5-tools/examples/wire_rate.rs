//! How many RoCE v2 datagrams one endpoint of the UDP wire (step 12) takes in per second
//! of its thread's CPU time: every datagram received, its ICRC and headers checked, and
//! handed to the device under its lock (here as packets for a QPN nobody has, the
//! shortest way through; a real message adds its execution).
//!
//! ```sh
//! cargo run --release -p mlx5-tools --example wire_rate -- [DATAGRAMS] [PAYLOAD_BYTES]
//! ```
//!
//! A sender thread sends the datagrams as fast as the socket takes them; what the
//! kernel drops for a full receive buffer is not counted as taken in.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use mlx5_sim::wire_noise::{Noise, NoiseKind};

/// CPU seconds (user + system) of this process's thread named `name`.
fn thread_cpu(name: &str) -> Option<f64> {
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
            // utime and stime are fields 14 and 15 (the 12th and 13th after the name).
            let ticks: f64 = f[11].parse::<f64>().ok()? + f[12].parse::<f64>().ok()?;
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
            return Some(ticks / hz);
        }
    }
    None
}

/// Datagrams the device took in: all are for a QPN nobody has, so each is dropped there
/// (a UD one by the UD receive side).
fn taken(nic: &mlx5_sim::Nic) -> u64 {
    let s = nic.stats();
    s.datagrams_dropped + s.ud_dropped
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("wire-rate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fabric = mlx5_sim::Fabric::new(mlx5_sim::FabricConfig {
        mode: mlx5_sim::ExecMode::Watch,
        ..mlx5_sim::FabricConfig::default()
    });
    let nic = fabric.add_host(mlx5_sim::HostConfig::infiniband("mlx5_0", 1));
    let reg = mlx5_sim::registry::Registry::open(&dir.join("registry")).unwrap();
    let ep = nic.open_wire(std::sync::Arc::new(reg)).expect("an endpoint");
    let to = std::net::SocketAddrV4::new(ep.addr.into(), ep.port);
    let gid = nic.info().gid;

    // The datagrams first (a well-formed packet for a QPN nobody has), then the clock.
    let sock = UdpSocket::bind("127.4.0.1:0").unwrap();
    let sport = sock.local_addr().unwrap().port();
    let mut noise = Noise::new(0xfeed, gid, gid, sport);
    let mut dgs = Vec::new();
    while (dgs.len() as u64) < n.min(200_000) {
        if let (NoiseKind::UnknownQpn, dg) = noise.datagram() {
            dgs.push(dg);
        }
    }
    let cpu0 = thread_cpu("mlx5-sim-wire0").unwrap_or(0.0);
    let t0 = Instant::now();
    for i in 0..n {
        let _ = sock.send_to(&dgs[(i % dgs.len() as u64) as usize], to);
    }
    // What is still queued is taken in: wait until the counter stops moving.
    let mut last = u64::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let s = taken(&nic);
        if s == last {
            break;
        }
        last = s;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = thread_cpu("mlx5-sim-wire0").unwrap_or(f64::NAN) - cpu0;
    let taken = taken(&nic);
    println!(
        "{n} datagrams sent, {taken} taken in ({:.1}%): {:.0} per second of the endpoint thread's CPU \
         ({cpu:.2} s), {:.0} per second of wall time",
        100.0 * taken as f64 / n as f64,
        taken as f64 / cpu,
        taken as f64 / wall
    );
    let _ = std::fs::remove_dir_all(&dir);
}
