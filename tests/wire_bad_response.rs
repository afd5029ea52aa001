//! A responder that answers wrongly, on the UDP wire (step 13: BAD_RESP_ERR provoked and
//! explained). This test program's main process is the requester: device `mlx5_0` on the
//! wire, an RC QP connected to a QPN that a child copy of this program registered for
//! its own socket. The child plays the faulty responder: it answers the RDMA READ of 64
//! bytes with a READ RESPONSE ONLY of 7 bytes, and an RDMA WRITE (on a second QP) with
//! a READ RESPONSE (well-formed, ICRC sealed). The requester must complete each with
//! BAD_RESP_ERR, write nothing, and say why. A main of its
//! own: the two sides are processes (the registry sends a QPN's packets to the process
//! that owns it).

mod wire_common;
use wire_common::{join_wire, next};

use std::io::{BufRead, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mlx5::sim::registry::{Endpoint, Kind, Registry};
use mlx5::sim::wire_noise;
use mlx5::{AccessFlags, ConnectParams, RemoteQpInfo, Sge, Syndrome, WqeFlags};

const READ_REQUEST: u8 = 0x0c;
const WRITE_ONLY: u8 = 0x0a;
const ROCE_PORT: u16 = 4791;

/// The faulty responder: a socket on the device's loopback address `127.k.0.1`, two QPNs
/// registered for it; reads `read_qpn write_qpn gid_hex` (the requester's QPs) from
/// stdin, answers the first READ request with 7 bytes and the first WRITE with a READ
/// RESPONSE, then waits for stdin to close.
fn responder(dir: &Path) {
    let reg = Registry::open(&Registry::path_in(dir, "mlx5_0")).expect("open the registry");
    let (sock, at) = (1..=255u8)
        .find_map(|k| {
            let at = SocketAddrV4::new(Ipv4Addr::new(127, k, 0, 1), ROCE_PORT);
            UdpSocket::bind(at).ok().map(|s| (s, at))
        })
        .expect("a loopback address of device 1");
    let ep = Endpoint { addr: at.ip().octets(), port: ROCE_PORT };
    let qpns = [reg.alloc(Kind::Qp, ep).expect("a QPN"), reg.alloc(Kind::Qp, ep).expect("a QPN")];
    println!("{} {}", qpns[0], qpns[1]);
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let stdin = std::io::stdin();
    stdin.lock().read_line(&mut line).unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    let (read_qpn, write_qpn): (u32, u32) = (f[0].parse().unwrap(), f[1].parse().unwrap());
    let gid: [u8; 16] = std::array::from_fn(|i| u8::from_str_radix(&f[2][2 * i..2 * i + 2], 16).unwrap());
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 2048];
    let (mut read_done, mut write_done) = (false, false);
    while !(read_done && write_done) {
        let (n, from) = sock.recv_from(&mut buf).expect("the requests within 10 s");
        let answer = match wire_noise::bth(&buf[..n]) {
            Some((READ_REQUEST, _, psn)) if !read_done => {
                read_done = true;
                wire_noise::read_response_only(gid, gid, ROCE_PORT, read_qpn, psn, &[0xab; 7])
            }
            Some((WRITE_ONLY, _, psn)) if !write_done => {
                write_done = true;
                wire_noise::read_response_only(gid, gid, ROCE_PORT, write_qpn, psn, &[0xcd; 8])
            }
            _ => continue,
        };
        sock.send_to(&answer, from).unwrap();
    }
    let mut rest = String::new();
    let _ = stdin.lock().read_line(&mut rest);
    for q in qpns {
        let _ = reg.free(Kind::Qp, q);
    }
    std::process::exit(0);
}

fn bad_responses_end_their_requests() {
    let dir: PathBuf = std::env::temp_dir().join(format!("mlx5-wire-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_fabric, ctx) = join_wire(&dir);
    let port = ctx.query_port(1).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (cq1, cq2) = (ctx.create_cq(64, |_, _: u64| {}).unwrap(), ctx.create_cq(64, |_, _: u64| {}).unwrap());
    let qp1 = ctx.create_rc_qp(&pd, &cq1, &cq1, &mlx5::QpConfig::default()).unwrap();
    let qp2 = ctx.create_rc_qp(&pd, &cq2, &cq2, &mlx5::QpConfig::default()).unwrap();
    let mr = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("MLX5_WIRE_BAD_RESPONDER", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the responder");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let fake: Vec<u32> = line.split_whitespace().map(|x| x.parse().expect("the responder's QPNs")).collect();
    let (me1, me2) = (qp1.local_info().unwrap(), qp2.local_info().unwrap());
    let gid: String = port.gid.0.iter().map(|b| format!("{b:02x}")).collect();
    writeln!(child.stdin.as_mut().unwrap(), "{} {} {gid}", me1.qpn, me2.qpn).unwrap();
    // The same device in both processes: the responder is at our own LID.
    for (qp, me, q) in [(&qp1, &me1, fake[0]), (&qp2, &me2, fake[1])] {
        let peer = RemoteQpInfo { qpn: q, psn: 0, ..me.clone() };
        qp.activate(&ConnectParams {
            remote: Some(peer),
            access: AccessFlags::ALL,
            ..ConnectParams::default()
        })
        .unwrap();
    }
    mr.write(0, &[0x5a; 64]).unwrap();
    let b = qp1.wqe_builder(7).unwrap().ctrl_rdma_read(WqeFlags::SIGNALED).unwrap();
    b.rdma(0x1000, 0x1234).unwrap().sge(Sge::new(mr.addr(), 64, mr.lkey())).unwrap().finish().unwrap();
    let read = next(&cq1).0;
    let b = qp2.wqe_builder(8).unwrap().ctrl_rdma_write(WqeFlags::SIGNALED).unwrap();
    b.rdma(0x1000, 0x1234)
        .unwrap()
        .sge(Sge::new(mr.addr() + 0x100, 16, mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    let write = next(&cq2).0;
    drop(child.stdin.take());
    let done = child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(read.status.syndrome(), Some(Syndrome::BadResponse), "{}", cq1.explain(&read));
    let why = cq1.explain(&read);
    assert!(why.contains("syndrome 0x10 BAD_RESP_ERR"), "{why}");
    assert!(why.contains("answered an RDMA READ of 64 bytes with 7 bytes"), "{why}");
    let mut back = [0u8; 64];
    mr.read(0, &mut back).unwrap();
    assert_eq!(back, [0x5a; 64], "the bad response wrote nothing");
    assert_eq!(write.status.syndrome(), Some(Syndrome::BadResponse), "{}", cq2.explain(&write));
    let why = cq2.explain(&write);
    assert!(why.contains("answered a SEND or RDMA WRITE with a READ RESPONSE"), "{why}");
    assert!(done.success(), "the responder failed: {done:?}");
}

fn main() {
    if let Some(dir) = std::env::var_os("MLX5_WIRE_BAD_RESPONDER") {
        responder(Path::new(&dir));
        return;
    }
    bad_responses_end_their_requests();
    println!("test bad_responses_end_their_requests ... ok");
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}
