//! Wire capture: a run with every RC opcode (multi-packet SEND, WRITE and READ at a
//! 1024-byte path MTU, atomics) and UD SENDs, captured over RoCE v2 (IPv4 and IPv6) and
//! over InfiniBand,
//! then decoded by tshark: no malformed packet, and the opcodes, QPNs, PSNs and lengths
//! are what was posted.

mod common;
use common::*;
use mlx5::sim::Sim;
use mlx5::sim::{ExecMode, Fabric};
use mlx5::{ConnectParams, QpConfig, RcQp, Sge, Status, UdQp, WqeFlags};

/// What the run posted, for comparing with the capture.
struct Posted {
    rc_a: u32,
    rc_b: u32,
    ud_b: u32,
    psn_a: u32,
}

/// Runs the traffic on a fresh cluster with a capture into `path`.
fn run(addressing: Option<Addressing>, path: &std::path::Path) -> (Fabric, Posted, u64) {
    let (fabric, mut nodes) = match addressing {
        Some(a) => cluster(2, a, ExecMode::Deterministic),
        // RoCE v2 over IPv6: GIDs that are not IPv4-mapped.
        None => cluster_of(
            (1..=2u8)
                .map(|i| {
                    let mut gid = [0u8; 16];
                    gid[0] = 0xfd;
                    gid[15] = i;
                    mlx5::sim::HostConfig {
                        gid,
                        ..mlx5::sim::HostConfig::roce(&format!("v6-{i}"), [0; 4], [2, 0, 0, 0, 0, i])
                    }
                })
                .collect(),
            ExecMode::Deterministic,
        ),
    };
    let cfg = QpConfig {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_inline_data: 64,
        psn: 0x00ff_fffe,
        ..QpConfig::default()
    };
    let mk = |n: &Node| n.ctx.create_rc_qp(&n.pd, &n.cq, &n.cq, &cfg).unwrap();
    let (qa, qb): (RcQp<Sim, u64>, RcQp<Sim, u64>) = (mk(&nodes[0]), mk(&nodes[1]));
    let (ia, ib) = (qa.local_info().unwrap(), qb.local_info().unwrap());
    qa.activate(&ConnectParams::to(ib)).unwrap();
    qb.activate(&ConnectParams::to(ia)).unwrap();
    let ud = |n: &Node| -> UdQp<Sim, u64> {
        let q = n.ctx.create_ud_qp(&n.pd, &n.cq, &n.cq, None, &cfg).unwrap();
        q.activate(&ConnectParams::default()).unwrap();
        q
    };
    let (ua, ub) = (ud(&nodes[0]), ud(&nodes[1]));
    fabric.start_capture(path).unwrap();
    let (a, b) = (&nodes[0], &nodes[1]);
    fill(&a.mr, 0, 4096, 9);
    let (la, lk, rb, rk) = (a.mr.addr(), a.mr.lkey(), b.mr.addr(), b.mr.rkey());
    for i in 0..3 {
        qb.post_recv(i, &[Sge::new(b.mr.addr() + 0x10000, 4096, b.mr.lkey())]).unwrap();
    }
    let sig = WqeFlags::SIGNALED;
    // SEND of 3000 bytes: first / middle / last.
    qa.wqe_builder(1).unwrap().ctrl_send(sig).unwrap().sge(Sge::new(la, 3000, lk)).unwrap().finish().unwrap();
    // SEND with immediate, one packet.
    qa.wqe_builder(2)
        .unwrap()
        .ctrl_send_imm(sig, 0x1234_5678)
        .unwrap()
        .sge(Sge::new(la, 100, lk))
        .unwrap()
        .finish()
        .unwrap();
    // WRITE of 2048: first / last.
    qa.wqe_builder(3)
        .unwrap()
        .ctrl_rdma_write(sig)
        .unwrap()
        .rdma(rb, rk)
        .unwrap()
        .sge(Sge::new(la, 2048, lk))
        .unwrap()
        .finish()
        .unwrap();
    // WRITE with immediate, inline (only).
    qa.wqe_builder(4)
        .unwrap()
        .ctrl_rdma_write_imm(sig, 7)
        .unwrap()
        .rdma(rb + 4096, rk)
        .unwrap()
        .inline(&[5; 20])
        .unwrap()
        .finish()
        .unwrap();
    // READ of 2500: three response packets.
    qa.wqe_builder(5)
        .unwrap()
        .ctrl_rdma_read(sig)
        .unwrap()
        .rdma(rb, rk)
        .unwrap()
        .sge(Sge::new(la + 8192, 2500, lk))
        .unwrap()
        .finish()
        .unwrap();
    // Atomics.
    qa.wqe_builder(6)
        .unwrap()
        .ctrl_atomic_cs(sig, 0, 42)
        .unwrap()
        .rdma(rb + 0x20000, rk)
        .unwrap()
        .result(Sge::new(la + 0x30000, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
    qa.wqe_builder(7)
        .unwrap()
        .ctrl_atomic_fa(sig, 5)
        .unwrap()
        .rdma(rb + 0x20000, rk)
        .unwrap()
        .result(Sge::new(la + 0x30008, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
    // UD SEND and SEND with immediate.
    for i in 0..2 {
        ub.post_recv(10 + i, &[Sge::new(b.mr.addr() + 0x40000, 40 + 512, b.mr.lkey())]).unwrap();
    }
    let av = nodes[1].av(0);
    ua.wqe_builder(8)
        .unwrap()
        .ctrl_send(sig)
        .unwrap()
        .datagram(&av, ub.qpn(), mlx5::DEFAULT_QKEY)
        .unwrap()
        .sge(Sge::new(la, 512, lk))
        .unwrap()
        .finish()
        .unwrap();
    ua.wqe_builder(9)
        .unwrap()
        .ctrl_send_imm(sig, 0xabcd)
        .unwrap()
        .datagram(&av, ub.qpn(), mlx5::DEFAULT_QKEY)
        .unwrap()
        .sge(Sge::new(la, 33, lk))
        .unwrap()
        .finish()
        .unwrap();
    let done = nodes[0].drain();
    assert_eq!(done.len(), 9, "{done:?}");
    assert!(done.iter().all(|(c, _)| c.status == Status::Success), "{done:?}");
    assert_eq!(nodes[1].drain().len(), 5, "SEND, SEND_IMM, WRITE_IMM, two UD SENDs");
    let n = fabric.stop_capture().unwrap();
    let posted = Posted { rc_a: qa.qpn(), rc_b: qb.qpn(), ud_b: ub.qpn(), psn_a: 0x00ff_fffe };
    (fabric, posted, n)
}

/// The packets the run above puts on the wire, as (opcode, destination QPN, PSN,
/// payload length), in order: IBA's opcodes; PSNs from the start PSN 0xfffffe across
/// the 24-bit wrap; one ACK per message, READ responses, atomic ACKs.
fn expected(p: &Posted) -> Vec<(u8, u32, u32, usize)> {
    let psn = |i: u32| p.psn_a.wrapping_add(i) & 0xff_ffff;
    let (a, b) = (p.rc_a, p.rc_b);
    vec![
        (0x00, b, psn(0), 1024), // SEND FIRST
        (0x01, b, psn(1), 1024), // SEND MIDDLE
        (0x02, b, psn(2), 952),  // SEND LAST
        (0x11, a, psn(2), 0),    // ACK
        (0x05, b, psn(3), 100),  // SEND ONLY with immediate
        (0x11, a, psn(3), 0),
        (0x06, b, psn(4), 1024), // WRITE FIRST
        (0x08, b, psn(5), 1024), // WRITE LAST
        (0x11, a, psn(5), 0),
        (0x0b, b, psn(6), 20), // WRITE ONLY with immediate
        (0x11, a, psn(6), 0),
        (0x0c, b, psn(7), 0),    // READ REQUEST
        (0x0d, a, psn(7), 1024), // READ RESPONSE FIRST
        (0x0e, a, psn(8), 1024), // MIDDLE
        (0x0f, a, psn(9), 452),  // LAST
        (0x13, b, psn(10), 0),   // COMPARE SWAP
        (0x12, a, psn(10), 0),   // ATOMIC ACKNOWLEDGE
        (0x14, b, psn(11), 0),   // FETCH ADD
        (0x12, a, psn(11), 0),
        (0x64, p.ud_b, psn(0), 512), // UD SEND ONLY: the UD QP's own PSNs
        (0x65, p.ud_b, psn(1), 33),  // UD SEND ONLY with immediate
    ]
}

fn tshark(path: &std::path::Path, args: &[&str]) -> String {
    let o = std::process::Command::new("tshark").arg("-r").arg(path).args(args).output().expect("run tshark");
    assert!(o.status.success(), "tshark: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn check_with_tshark(addressing: Option<Addressing>) {
    let path = std::env::temp_dir().join(format!("mlx5-capture-{addressing:?}-{}.pcap", std::process::id()));
    let (_f, posted, n) = run(addressing, &path);
    let want = expected(&posted);
    assert_eq!(n as usize, want.len());
    let rows = tshark(
        &path,
        &[
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "data.len",
            "-e",
            "infiniband.bth.padcnt",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
        ],
    );
    let got: Vec<(u8, u32, u32, usize)> = rows
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert!(f.len() >= 5 && f[5..].iter().all(|x| x.is_empty()), "malformed or expert warning: {l}");
            let num = |s: &str| {
                if let Some(h) = s.strip_prefix("0x") {
                    u32::from_str_radix(h, 16).unwrap()
                } else {
                    s.parse().unwrap()
                }
            };
            // Wireshark 4.0 counts the pad bytes as data: take them off by the BTH's pad count.
            let data = if f[3].is_empty() { 0 } else { num(f[3]) as usize };
            (num(f[0]) as u8, num(f[1]), num(f[2]), data - num(f[4]) as usize)
        })
        .collect();
    assert_eq!(got, want);
    if std::env::var_os("MLX5_KEEP_CAPTURE").is_none() {
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
#[ignore = "needs tshark (Debian package tshark); .ci/run installs it and runs this test"]
fn roce_capture_decodes_in_tshark() {
    check_with_tshark(Some(Addressing::Roce));
}

#[test]
#[ignore = "needs tshark (Debian package tshark); .ci/run installs it and runs this test"]
fn roce_ipv6_capture_decodes_in_tshark() {
    check_with_tshark(None);
}

#[test]
#[ignore = "needs tshark (Debian package tshark); .ci/run installs it and runs this test"]
fn ib_capture_decodes_in_tshark() {
    check_with_tshark(Some(Addressing::Ib));
}
