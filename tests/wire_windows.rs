//! Memory windows between two processes on the UDP wire (step 13 on step 12's wire):
//! this test program runs two copies of itself (`MLX5_WIRE_WINDOWS` says which side a
//! copy plays), each simulating device `mlx5_0` with its numbers from one registry. The
//! server binds a type-2 window over part of its memory to its QP and posts a receive;
//! the client WRITEs through the window, READs it back, frees it with a SEND with
//! invalidate (its rkey in the IETH on the wire), and its next WRITE through it is
//! refused: REMOTE_ACCESS_ERR, the server's memory unchanged. A main of its own: the
//! sides are processes.

mod wire_common;
use wire_common::{join_wire, next};

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mlx5::{AccessFlags, ConnectParams, MkeyKind, RemoteQpInfo, Sge, Status, Syndrome, WcOpcode, WqeFlags};

const S: WqeFlags = WqeFlags::SIGNALED;

fn side(role: &str, dir: &Path) {
    let (_fabric, ctx) = join_wire(dir);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, |_, _: u64| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &mlx5::QpConfig::default()).unwrap();
    let mr = pd.alloc_mr(4096, AccessFlags::ALL | AccessFlags::MW_BIND).unwrap();
    let me = qp.local_info().unwrap();
    println!("{} {}", me.qpn, me.psn);
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let stdin = std::io::stdin();
    stdin.lock().read_line(&mut line).unwrap();
    let f: Vec<u32> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let peer = RemoteQpInfo { qpn: f[0], psn: f[1], ..me.clone() };
    qp.activate(&ConnectParams { remote: Some(peer), access: AccessFlags::ALL, ..ConnectParams::default() })
        .unwrap();
    if role == "server" {
        // A type-2 window over [0x800, 0x900) of the MR, WRITE and READ, bound to our QP.
        let mw = pd.alloc_mw(MkeyKind::Window2).unwrap();
        let b = mw.bind(&mr, 0x800, 0x100, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ).unwrap();
        qp.wqe_builder(1).unwrap().bind_mw(S, &b).unwrap().finish().unwrap();
        assert_eq!(next(&cq).0.status, Status::Success, "the bind");
        qp.post_recv(2, &[mr.sge(0, 64).unwrap()]).unwrap();
        println!("{} {}", mr.addr() + 0x800, mw.rkey());
        std::io::stdout().flush().unwrap();
        // Until the client is done: then the receive of its SEND with invalidate.
        let mut rest = String::new();
        let _ = stdin.lock().read_line(&mut rest);
        let (c, e) = next(&cq);
        assert_eq!((e, c.opcode, c.invalidated_rkey), (2, WcOpcode::RecvInv, Some(mw.rkey())), "{c:?}");
        let mut got = [0u8; 16];
        mr.read(0x800, &mut got).unwrap();
        assert_eq!(got, [0x42; 16], "the WRITE through the window, and not the refused one");
        println!("ok");
        std::process::exit(0);
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line).unwrap();
    let f: Vec<u64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let (raddr, rkey) = (f[0], f[1] as u32);
    let (la, lk) = (mr.addr(), mr.lkey());
    mr.write(0, &[0x42; 16]).unwrap();
    let b = qp.wqe_builder(10).unwrap().ctrl_rdma_write(S).unwrap();
    b.rdma(raddr, rkey).unwrap().sge(Sge::new(la, 16, lk)).unwrap().finish().unwrap();
    assert_eq!(next(&cq).0.status, Status::Success, "the WRITE through the window");
    let b = qp.wqe_builder(11).unwrap().ctrl_rdma_read(S).unwrap();
    b.rdma(raddr, rkey).unwrap().sge(Sge::new(la + 0x100, 16, lk)).unwrap().finish().unwrap();
    let (c, _) = next(&cq);
    assert_eq!(c.status, Status::Success, "the READ through the window: {}", cq.explain(&c));
    let mut back = [0u8; 16];
    mr.read(0x100, &mut back).unwrap();
    assert_eq!(back, [0x42; 16]);
    let b = qp.wqe_builder(12).unwrap().ctrl_send_inv(S, rkey).unwrap();
    b.sge(Sge::new(la, 8, lk)).unwrap().finish().unwrap();
    assert_eq!(next(&cq).0.status, Status::Success, "the SEND with invalidate");
    mr.write(0, &[0x99; 16]).unwrap();
    let b = qp.wqe_builder(13).unwrap().ctrl_rdma_write(S).unwrap();
    b.rdma(raddr, rkey).unwrap().sge(Sge::new(la, 16, lk)).unwrap().finish().unwrap();
    let (c, _) = next(&cq);
    assert_eq!(c.status.syndrome(), Some(Syndrome::RemoteAccess), "{}", cq.explain(&c));
    // The responder's reason stays in its process: the CQE's words only.
    assert!(cq.explain(&c).contains("remote access error"), "{}", cq.explain(&c));
    println!("ok");
    std::process::exit(0);
}

fn spawn(role: &str, dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .env("MLX5_WIRE_WINDOWS", role)
        .env("MLX5_WIRE_WINDOWS_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run a side")
}

fn windows_cross_the_udp_wire() {
    let dir: PathBuf = std::env::temp_dir().join(format!("mlx5-wire-windows-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = spawn("server", &dir);
    let mut client = spawn("client", &dir);
    let mut so = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut co = std::io::BufReader::new(client.stdout.take().unwrap());
    let line = |r: &mut std::io::BufReader<std::process::ChildStdout>| {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert!(!l.is_empty(), "a side printed nothing");
        l
    };
    let (ls, lc) = (line(&mut so), line(&mut co));
    server.stdin.as_mut().unwrap().write_all(lc.as_bytes()).unwrap();
    client.stdin.as_mut().unwrap().write_all(ls.as_bytes()).unwrap();
    // The server's window, to the client.
    let window = line(&mut so);
    client.stdin.as_mut().unwrap().write_all(window.as_bytes()).unwrap();
    assert_eq!(line(&mut co), "ok\n", "the client");
    let client_done = client.wait().unwrap();
    drop(server.stdin.take());
    assert_eq!(line(&mut so), "ok\n", "the server");
    let served = server.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(client_done.success(), "the client failed: {client_done:?}");
    assert!(served.success(), "the server failed: {served:?}");
}

fn main() {
    if let Ok(role) = std::env::var("MLX5_WIRE_WINDOWS") {
        let dir = PathBuf::from(std::env::var_os("MLX5_WIRE_WINDOWS_DIR").unwrap());
        side(&role, &dir);
        return;
    }
    windows_cross_the_udp_wire();
    println!("test windows_cross_the_udp_wire ... ok");
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}
