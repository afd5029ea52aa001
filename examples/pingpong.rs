//! RC ping-pong in the spirit of perftest's `ib_send_lat`: each side keeps
//! receives posted; the client SENDs `size` bytes, the server answers with a
//! SEND of the same size as soon as its receive completes, and the client
//! times the round trip. The table reports half the round trip (one-way
//! latency), as perftest does. The same generic code runs on both backends.
//!
//! ```text
//! # two simulated hosts in one process (default)
//! cargo run --release --example pingpong [-- --iters N --size BYTES --threaded]
//! # ConnectX hardware: a server and a client, QP information exchanged over TCP
//! cargo run --release --example pingpong -- --backend hw --device mlx5_0 --server [--tcp-port 18515]
//! cargo run --release --example pingpong -- --backend hw --device mlx5_0 --client SERVER_HOST [--tcp-port 18515]
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use mlx5::model::ExecMode;
use mlx5::sim::two_hosts;
use mlx5::{
    AccessFlags, Backend, CompletionQueue, ConnectParams, Context, Device, MemoryRegion, QpConfig, RcQp,
    RemoteQpInfo, Sge, Status, WqeFlags,
};

const BUF: usize = 1 << 16;
const INLINE: u32 = 220;
const RECVS: u32 = 4;

struct Side<B: Backend> {
    qp: RcQp<B, u64>,
    cq: CompletionQueue<B, u64>,
    mr: MemoryRegion<B>,
    _ctx: Context<B>,
}

impl<B: Backend> Side<B> {
    fn new(dev: &Device<B>) -> Self {
        let ctx = dev.open().expect("open device");
        let pd = ctx.alloc_pd().expect("pd");
        let cq = ctx.create_cq(256, |_, _: u64| {}).expect("cq");
        let cfg = QpConfig {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: INLINE,
            ..QpConfig::default()
        };
        let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).expect("qp");
        let mr = pd.alloc_mr(2 * BUF, AccessFlags::ALL).expect("mr");
        for i in 0..BUF {
            mr.write(i, &[i as u8]).expect("fill");
        }
        Side { qp, cq, mr, _ctx: ctx }
    }

    fn post_recv(&self) {
        let sge = Sge { addr: self.mr.addr() + BUF as u64, len: BUF as u32, lkey: self.mr.lkey() };
        self.qp.post_recv(0, &[sge]).expect("post_recv");
    }

    fn send(&self, size: u32) {
        let b = self.qp.wqe_builder(1).expect("wqe").ctrl_send(WqeFlags::SIGNALED).expect("ctrl");
        if size <= INLINE {
            // Small messages go inline: the payload is copied into the WQE.
            let mut data = [0u8; INLINE as usize];
            self.mr.read(0, &mut data[..size as usize]).expect("read");
            b.inline(&data[..size as usize]).expect("inline").finish_with_blueflame().expect("post");
        } else {
            b.sge(Sge::new(self.mr.addr(), size, self.mr.lkey())).expect("sge").finish().expect("post");
        }
    }

    /// Poll until a receive completes; send completions are retired on the way.
    fn wait_recv(&mut self) {
        loop {
            let mut got = false;
            self.cq.poll_with(16, |c, _| {
                assert_eq!(c.status, Status::Success, "completion {c:?}");
                got |= c.opcode.is_recv();
            });
            if got {
                return;
            }
        }
    }

    /// Retire the last send completions so the next size starts clean.
    fn drain_sends(&mut self) {
        while self.qp.sq_free() < self.qp.sq_wqebbs() {
            self.cq.poll_with(16, |_, _| {});
        }
    }

    /// One request/response as the client; returns the one-way latency in µs.
    fn ping(&mut self, size: u32) -> f64 {
        let t0 = Instant::now();
        self.send(size);
        self.wait_recv();
        self.post_recv();
        t0.elapsed().as_secs_f64() * 1e6 / 2.0
    }

    /// One response as the server.
    fn pong(&mut self, size: u32) {
        self.wait_recv();
        self.post_recv();
        self.send(size);
    }
}

struct Args {
    iters: u32,
    sizes: Vec<u32>,
    mode: ExecMode,
    hw: bool,
    device: Option<String>,
    server: bool,
    client: Option<String>,
    tcp_port: u16,
}

fn args() -> Args {
    let mut a = Args {
        iters: 1000,
        sizes: (1..=16).map(|i| 1u32 << i).collect(),
        mode: ExecMode::Deterministic,
        hw: false,
        device: None,
        server: false,
        client: None,
        tcp_port: 18515,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match x.as_str() {
            "--iters" | "-n" => a.iters = val("--iters").parse().expect("--iters N"),
            "--size" | "-s" => a.sizes = vec![val("--size").parse().expect("--size BYTES")],
            "--threaded" => a.mode = ExecMode::Threaded,
            "--backend" => {
                a.hw = match val("--backend").as_str() {
                    "sim" => false,
                    "hw" => true,
                    other => panic!("--backend sim|hw, not {other}"),
                }
            }
            "--device" | "-d" => a.device = Some(val("--device")),
            "--server" => a.server = true,
            "--client" => a.client = Some(val("--client")),
            "--tcp-port" | "-p" => a.tcp_port = val("--tcp-port").parse().expect("--tcp-port PORT"),
            "--help" | "-h" => {
                println!("usage: pingpong [--iters N] [--size BYTES] [--threaded]");
                println!("       pingpong --backend hw --device mlx5_0 (--server | --client HOST) [--tcp-port PORT]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(a.sizes.iter().all(|&s| s as usize <= BUF), "sizes up to {BUF}");
    a
}

fn header(what: &str) {
    println!("{what}, one-way latency = RTT/2, msg/s counts both directions");
    println!("{:-<97}", "");
    println!(
        " {:>8} {:>12} {:>12} {:>15} {:>12} {:>12} {:>14}",
        "#bytes", "#iterations", "t_min[usec]", "t_typical[usec]", "t_max[usec]", "t_avg[usec]", "msg/s"
    );
}

fn row(size: u32, mut samples: Vec<f64>) {
    let avg = samples.iter().sum::<f64>() / samples.len() as f64;
    samples.sort_by(f64::total_cmp);
    println!(
        " {:>8} {:>12} {:>12.2} {:>15.2} {:>12.2} {:>12.2} {:>14.0}",
        size,
        samples.len(),
        samples[0],
        samples[samples.len() / 2],
        samples[samples.len() - 1],
        avg,
        1e6 / avg
    );
}

fn warmup(iters: u32) -> u32 {
    iters / 10 + 1
}

/// Both sides in this process (the simulator).
fn run_local<B: Backend>(mut a: Side<B>, mut b: Side<B>, args: &Args, what: &str) {
    let p = ConnectParams::default();
    a.qp.activate(&ConnectParams { remote: Some(b.qp.local_info().expect("info")), ..p.clone() })
        .expect("connect a");
    b.qp.activate(&ConnectParams { remote: Some(a.qp.local_info().expect("info")), ..p.clone() })
        .expect("connect b");
    for _ in 0..RECVS {
        a.post_recv();
        b.post_recv();
    }
    header(what);
    for &size in &args.sizes {
        let mut samples = Vec::with_capacity(args.iters as usize);
        for it in 0..warmup(args.iters) + args.iters {
            let t0 = Instant::now();
            a.send(size);
            b.pong(size);
            a.wait_recv();
            a.post_recv();
            if it >= warmup(args.iters) {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        a.drain_sends();
        b.drain_sends();
        let mut got = vec![0u8; size as usize];
        b.mr.read(BUF, &mut got).expect("read");
        let mut want = vec![0u8; size as usize];
        a.mr.read(0, &mut want).expect("read");
        assert_eq!(got, want, "payload of {size} bytes");
        row(size, samples);
    }
    println!("{:-<97}", "");
}

/// Wire format of the out-of-band exchange: one text line per side.
fn encode(info: &RemoteQpInfo, iters: u32, sizes: &[u32]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let sizes: Vec<String> = sizes.iter().map(u32::to_string).collect();
    format!(
        "{} {} {} {} {} {} {}\n",
        info.qpn,
        info.lid,
        info.gid.map_or("-".into(), |g| hex(&g.0)),
        info.mac.map_or("-".into(), |m| hex(&m)),
        info.psn,
        iters,
        sizes.join(",")
    )
}

fn decode(line: &str) -> (RemoteQpInfo, u32, Vec<u32>) {
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 7, "malformed peer line {line:?}");
    let bytes = |s: &str| -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    };
    let info = RemoteQpInfo {
        qpn: f[0].parse().unwrap(),
        lid: f[1].parse().unwrap(),
        gid: (f[2] != "-").then(|| mlx5::Gid(bytes(f[2]).try_into().unwrap())),
        mac: (f[3] != "-").then(|| bytes(f[3]).try_into().unwrap()),
        psn: f[4].parse().unwrap(),
    };
    (info, f[5].parse().unwrap(), f[6].split(',').map(|s| s.parse().unwrap()).collect())
}

/// One side per process (hardware), perftest style.
fn run_remote<B: Backend>(mut me: Side<B>, args: &Args) {
    let stream = if args.server {
        let l = TcpListener::bind(("0.0.0.0", args.tcp_port)).expect("listen");
        eprintln!("waiting for a client on TCP port {}", args.tcp_port);
        l.accept().expect("accept").0
    } else {
        let host = args.client.as_deref().expect("--server or --client HOST");
        TcpStream::connect((host, args.tcp_port)).expect("connect to the server")
    };
    let mut w = stream.try_clone().expect("tcp");
    let mut r = BufReader::new(stream);
    let local = me.qp.local_info().expect("local info");
    w.write_all(encode(&local, args.iters, &args.sizes).as_bytes()).expect("send QP info");
    let mut line = String::new();
    r.read_line(&mut line).expect("receive QP info");
    let (peer, peer_iters, peer_sizes) = decode(&line);
    // The client's iterations and sizes rule.
    let (iters, sizes) =
        if args.server { (peer_iters, peer_sizes) } else { (args.iters, args.sizes.clone()) };
    me.qp.activate(&ConnectParams::to(peer.clone())).expect("connect");
    for _ in 0..RECVS {
        me.post_recv();
    }
    // Both sides are in RTS with receives posted before the first SEND.
    w.write_all(b"ready\n").expect("sync");
    line.clear();
    r.read_line(&mut line).expect("sync");
    if args.server {
        for &size in &sizes {
            for _ in 0..warmup(iters) + iters {
                me.pong(size);
            }
            me.drain_sends();
        }
        return;
    }
    header(&format!(
        "RC SEND ping-pong on {} (local QP 0x{:06x}, remote QP 0x{:06x})",
        args.device.as_deref().unwrap_or("?"),
        local.qpn,
        peer.qpn
    ));
    for &size in &sizes {
        let mut samples = Vec::with_capacity(iters as usize);
        for it in 0..warmup(iters) + iters {
            let t = me.ping(size);
            if it >= warmup(iters) {
                samples.push(t);
            }
        }
        me.drain_sends();
        row(size, samples);
    }
    println!("{:-<97}", "");
}

fn main() {
    let args = args();
    if args.hw {
        let name = args.device.clone().unwrap_or_else(|| "mlx5_0".into());
        let dev = match mlx5::hw::device(&name) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("pingpong: hardware backend unavailable: {e}");
                std::process::exit(2);
            }
        };
        return run_remote(Side::new(&dev), &args);
    }
    let (_fabric, da, db) = two_hosts(args.mode);
    let what = format!("RC SEND ping-pong on the mlx5 simulator ({:?} mode)", args.mode);
    run_local(Side::new(&da), Side::new(&db), &args, &what);
}
