//! Many-to-one over DC: 16 DCIs on 8 hosts send RDMA WRITE with immediate to
//! one DCT whose SRQ the target keeps replenished. Every message arrives
//! exactly once, in per-DCI order, and its payload is where it was written.

mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::{ConnectParams, QpConfig, Sge, Status, WcOpcode, WqeFlags};

const KEY: u64 = 0xdc;
const DCIS_PER_HOST: usize = 2;
const SENDERS: usize = 8;
const MESSAGES: u32 = 100;
const SIZE: usize = 64;

fn run(addressing: Addressing, mode: ExecMode) {
    let (_f, h) = cluster(SENDERS + 1, addressing, mode);
    let dct = h[0]
        .ctx
        .create_dct(&h[0].pd, &h[0].cq, &h[0].srq, &QpConfig { dc_key: KEY, ..QpConfig::default() })
        .unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    let dctn = dct.dct_number().unwrap();
    let av = h[0].av(0);
    let cfg = QpConfig {
        max_send_wr: 128,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: SIZE as u32,
        ..QpConfig::default()
    };
    let dcis: Vec<(usize, mlx5::Dci<_, u64>)> = (1..=SENDERS)
        .flat_map(|host| (0..DCIS_PER_HOST).map(move |_| host))
        .map(|host| {
            let d = h[host].ctx.create_dci(&h[host].pd, &h[host].cq, &cfg).unwrap();
            d.activate(&ConnectParams::default()).unwrap();
            (host, d)
        })
        .collect();
    assert_eq!(dcis.len(), 16);
    let post_recv = |h: &Node, e: u64| {
        h.srq.post_recv(e, &[Sge { addr: h.mr.addr(), len: 0, lkey: h.mr.lkey() }]).unwrap()
    };
    for e in 0..200 {
        post_recv(&h[0], e);
    }
    let (rb, rk) = (h[0].mr.addr(), h[0].mr.rkey());
    let mut seen: Vec<Vec<u32>> = vec![Vec::new(); dcis.len()];
    let mut next_recv = 200;
    let mut sent_ok = 0;
    let t0 = std::time::Instant::now();
    for seq in 0..MESSAGES {
        for (d, (_, dci)) in dcis.iter().enumerate() {
            let off = (d * MESSAGES as usize + seq as usize) * SIZE;
            let payload = [(d as u8) ^ (seq as u8); SIZE];
            dci.wqe_builder(seq as u64)
                .unwrap()
                .ctrl_rdma_write_imm(WqeFlags::SIGNALED, (d as u32) << 16 | seq)
                .unwrap()
                .av(KEY, dctn, &av)
                .unwrap()
                .rdma(rb + off as u64, rk)
                .unwrap()
                .inline(&payload)
                .unwrap()
                .finish()
                .unwrap();
        }
        // The target consumes and replenishes; the senders retire their WQEs.
        let want = (seq as usize + 1) * dcis.len();
        while seen.iter().map(Vec::len).sum::<usize>() < want {
            let mut got = Vec::new();
            h[0].cq.poll_with(64, |c, e| got.push((c, e)));
            for (c, _) in got {
                assert_eq!((c.status, c.opcode, c.qpn), (Status::Success, WcOpcode::RecvRdmaImm, dctn));
                let imm = c.imm.unwrap();
                seen[(imm >> 16) as usize].push(imm & 0xffff);
                post_recv(&h[0], next_recv);
                next_recv += 1;
            }
            assert!(
                t0.elapsed().as_secs() < 60,
                "stalled at {} of {want}",
                seen.iter().map(Vec::len).sum::<usize>()
            );
        }
        for node in &h[1..] {
            node.cq.poll_with(64, |c, _| {
                assert_eq!(c.status, Status::Success);
                sent_ok += 1;
            });
        }
    }
    for (d, s) in seen.iter().enumerate() {
        assert_eq!(*s, (0..MESSAGES).collect::<Vec<_>>(), "DCI {d}: every message once, in order");
        for seq in 0..MESSAGES as usize {
            let off = (d * MESSAGES as usize + seq) * SIZE;
            assert_eq!(bytes(&h[0].mr, off, SIZE), vec![(d as u8) ^ (seq as u8); SIZE]);
        }
    }
    // Sender completions may still be in flight in threaded mode.
    while sent_ok < dcis.len() * MESSAGES as usize {
        for node in &h[1..] {
            node.cq.poll_with(64, |_, _| sent_ok += 1);
        }
        assert!(t0.elapsed().as_secs() < 60);
    }
}

#[test]
fn sixteen_dcis_on_eight_hosts_to_one_dct_ib() {
    run(Addressing::Ib, ExecMode::Deterministic);
}

#[test]
fn sixteen_dcis_on_eight_hosts_to_one_dct_roce() {
    run(Addressing::Roce, ExecMode::Deterministic);
}

#[test]
fn sixteen_dcis_on_eight_hosts_to_one_dct_threaded() {
    run(Addressing::Ib, ExecMode::Threaded);
}
