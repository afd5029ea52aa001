//! Masked atomics between two processes on the UDP wire (step 13 on step 12's wire):
//! this test program runs two copies of itself (`MLX5_WIRE_MASKED` says which side a
//! copy plays), each simulating device `mlx5_0` with its numbers from one registry and
//! its own endpoint on the loopback. The client's masked fetch-and-adds (8 and 4 bytes,
//! with field boundaries) and compare-and-swap cross the wire as the model's
//! MaskedAtomicETH packets; every result, and the server's memory read back with a
//! READ, is what the operations' definitions give. A main of its own: the sides are
//! processes.

mod wire_common;
use wire_common::{join_wire, next};

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mlx5::sim::Sim;
use mlx5::wqe::{MaskedCs, MaskedFa, MaskedWord};
use mlx5::{AccessFlags, CompletionQueue, ConnectParams, RcQp, RemoteQpInfo, Sge, Status, WqeFlags};

/// Waits for one completion (10 s at most) and checks it succeeded.
fn one(cq: &CompletionQueue<Sim, u64>, what: &str) {
    let (c, e) = next(cq);
    assert_eq!(c.status, Status::Success, "{what} (entry {e}): {}", cq.explain(&c));
}

fn fa<W: MaskedWord>(qp: &RcQp<Sim, u64>, e: u64, a: MaskedFa<W>, raddr: u64, rkey: u32, res: Sge) {
    let b = qp.wqe_builder(e).unwrap().ctrl_masked_fa(WqeFlags::SIGNALED, a).unwrap();
    b.rdma(raddr, rkey).unwrap().result(res).unwrap().finish().unwrap();
}

/// One side: device `mlx5_0` on the wire, an RC QP and a 4 KiB MR; prints `qpn psn addr
/// rkey`, reads the peer's, connects. The server then waits for its stdin to close; the
/// client runs the operations and prints "ok".
fn side(role: &str, dir: &Path) {
    let (_fabric, ctx) = join_wire(dir);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, |_, _: u64| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &mlx5::QpConfig::default()).unwrap();
    let mr = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let me = qp.local_info().unwrap();
    println!("{} {} {} {}", me.qpn, me.psn, mr.addr(), mr.rkey());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let stdin = std::io::stdin();
    stdin.lock().read_line(&mut line).unwrap();
    let f: Vec<u64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let (rqpn, rpsn, raddr, rkey) = (f[0] as u32, f[1] as u32, f[2], f[3] as u32);
    // The same device in both processes: the peer is at our own LID.
    let peer = RemoteQpInfo { qpn: rqpn, psn: rpsn, ..me.clone() };
    qp.activate(&ConnectParams { remote: Some(peer), access: AccessFlags::ALL, ..ConnectParams::default() })
        .unwrap();
    if role == "server" {
        // Serve until the test closes our stdin.
        let mut rest = String::new();
        let _ = stdin.lock().read_line(&mut rest);
        std::process::exit(0);
    }
    let (la, lk) = (mr.addr(), mr.lkey());
    // Ten 8-byte adds of 1, then ten 4-byte adds by 8-bit fields of 0x01ff0180.
    for i in 0..10u64 {
        fa(&qp, i, MaskedFa { add: 1u64, field_boundary: 0 }, raddr, rkey, Sge::new(la + 8 * i, 8, lk));
        one(&cq, "8-byte masked fetch-and-add");
    }
    for i in 0..10u64 {
        let m = MaskedFa { add: 0x01ff_0180u32, field_boundary: 0x8080_8080 };
        fa(&qp, 10 + i, m, raddr + 8, rkey, Sge::new(la + 0x100 + 4 * i, 4, lk));
        one(&cq, "4-byte masked fetch-and-add");
    }
    // Swap the low byte of the 8-byte counter where its value is 10.
    let m = MaskedCs { swap: 0xabu64, compare: 10, swap_mask: 0xff, compare_mask: u64::MAX };
    let b = qp.wqe_builder(20).unwrap().ctrl_masked_cs(WqeFlags::SIGNALED, m).unwrap();
    b.rdma(raddr, rkey).unwrap().result(Sge::new(la + 0x200, 8, lk)).unwrap().finish().unwrap();
    one(&cq, "8-byte masked compare-and-swap");
    // The server's 12 bytes, read back.
    let b = qp.wqe_builder(21).unwrap().ctrl_rdma_read(WqeFlags::SIGNALED).unwrap();
    b.rdma(raddr, rkey).unwrap().sge(Sge::new(la + 0x300, 12, lk)).unwrap().finish().unwrap();
    one(&cq, "READ");
    let mut got = [0u8; 0x310];
    mr.read(0, &mut got).unwrap();
    let u64_at = |o: usize| u64::from_ne_bytes(got[o..o + 8].try_into().unwrap());
    let be32_at = |o: usize| u32::from_be_bytes(got[o..o + 4].try_into().unwrap());
    for i in 0..10 {
        assert_eq!(u64_at(8 * i), i as u64, "8-byte add {i}");
    }
    // Each byte field on its own, its carry dropped: 0x00, +0x01, +0xff (= -1), +0x01,
    // +0x80 modulo 256 per field.
    let mut want = 0u32;
    for i in 0..10 {
        assert_eq!(be32_at(0x100 + 4 * i), want, "4-byte add {i}");
        let b = want.to_be_bytes();
        want = u32::from_be_bytes([
            b[0].wrapping_add(0x01),
            b[1].wrapping_add(0xff),
            b[2].wrapping_add(0x01),
            b[3].wrapping_add(0x80),
        ]);
    }
    assert_eq!(u64_at(0x200), 10, "the compare-and-swap's old value");
    assert_eq!(u64_at(0x300), 0xab, "the counter after the swap");
    assert_eq!(u32::from_be_bytes(got[0x308..0x30c].try_into().unwrap()), want, "the fields after 10 adds");
    println!("ok");
    std::process::exit(0);
}

fn spawn(role: &str, dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .env("MLX5_WIRE_MASKED", role)
        .env("MLX5_WIRE_MASKED_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run a side")
}

fn first_line(c: &mut std::process::Child) -> String {
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "a side printed nothing");
    line
}

fn masked_atomics_cross_the_udp_wire() {
    let dir: PathBuf = std::env::temp_dir().join(format!("mlx5-wire-masked-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = spawn("server", &dir);
    let mut client = spawn("client", &dir);
    let (ls, lc) = (first_line(&mut server), first_line(&mut client));
    server.stdin.as_mut().unwrap().write_all(lc.as_bytes()).unwrap();
    client.stdin.as_mut().unwrap().write_all(ls.as_bytes()).unwrap();
    let out = client.wait_with_output().unwrap();
    drop(server.stdin.take());
    let served = server.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "the client failed: {:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    assert!(served.success(), "the server failed: {served:?}");
}

fn main() {
    if let Ok(role) = std::env::var("MLX5_WIRE_MASKED") {
        let dir = PathBuf::from(std::env::var_os("MLX5_WIRE_MASKED_DIR").unwrap());
        side(&role, &dir);
        return;
    }
    masked_atomics_cross_the_udp_wire();
    println!("test masked_atomics_cross_the_udp_wire ... ok");
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}
