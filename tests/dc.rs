//! DC end to end: DCIs address a DCT per WQE (DC key, DCT number, path);
//! the DCT receives on its SRQ. Every opcode over InfiniBand and RoCE, the
//! DCT number's lifecycle, wrong DC key, RNR on an empty SRQ, and a receive
//! too small, each with the completions that follow.

mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::sim::Sim;
use mlx5::{
    AccessFlags, ConnectParams, Dci, Dct, Error, QpConfig, QpState, Sge, Status, Syndrome, WcOpcode, WqeFlags,
};

const KEY: u64 = 0x1122_3344_5566_7788;

fn dci(n: &Node, params: &ConnectParams) -> Dci<Sim, u64> {
    let cfg = QpConfig {
        max_send_wr: 64,
        max_recv_wr: 0,
        max_send_sge: 2,
        max_recv_sge: 0,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let d = n.ctx.create_dci(&n.pd, &n.cq, &cfg).unwrap();
    d.activate(params).unwrap();
    d
}

fn dct(n: &Node, key: u64) -> Dct<Sim, u64> {
    let t = n.ctx.create_dct(&n.pd, &n.cq, &n.srq, &QpConfig { dc_key: key, ..QpConfig::default() }).unwrap();
    assert!(matches!(t.dct_number(), Err(Error::DctNotReady { state: QpState::Reset })));
    t.activate(&ConnectParams::default()).unwrap();
    t
}

fn srq_recv(n: &Node, entry: u64, off: u64, len: u32) {
    n.srq.post_recv(entry, &[Sge { addr: n.mr.addr() + off, len, lkey: n.mr.lkey() }]).unwrap();
}

fn every_opcode(addressing: Addressing) {
    let (_f, mut h) = cluster(2, addressing, ExecMode::Deterministic);
    let i = dci(&h[0], &ConnectParams::default());
    let t = dct(&h[1], KEY);
    let n = t.dct_number().unwrap();
    assert_ne!(n, 0);
    let av = h[1].av(0);
    let (la, lk, rb, rk) = (h[0].mr.addr(), h[0].mr.lkey(), h[1].mr.addr(), h[1].mr.rkey());
    fill(&h[0].mr, 0, 4096, 3);
    fill(&h[1].mr, 0x8000, 512, 8);
    h[1].mr.write(0x9000, &40u64.to_ne_bytes()).unwrap();
    srq_recv(&h[1], 100, 0x10000, 4096);
    srq_recv(&h[1], 101, 0x20000, 4096);
    srq_recv(&h[1], 102, 0x30000, 4096);
    let f = WqeFlags::SIGNALED;
    i.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(f)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .rdma(rb, rk)
        .unwrap()
        .sge(Sge::new(la, 256, lk))
        .unwrap()
        .finish()
        .unwrap();
    i.wqe_builder(2)
        .unwrap()
        .ctrl_rdma_write_imm(f, 0xaa)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .rdma(rb + 0x1000, rk)
        .unwrap()
        .sge(Sge::new(la, 64, lk))
        .unwrap()
        .finish()
        .unwrap();
    i.wqe_builder(3)
        .unwrap()
        .ctrl_rdma_read(f)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .rdma(rb + 0x8000, rk)
        .unwrap()
        .sge(Sge::new(la + 0x4000, 512, lk))
        .unwrap()
        .finish()
        .unwrap();
    i.wqe_builder(4)
        .unwrap()
        .ctrl_send(f)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .sge(Sge::new(la, 1000, lk))
        .unwrap()
        .finish()
        .unwrap();
    i.wqe_builder(5)
        .unwrap()
        .ctrl_send_imm(f, 0xbb)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .inline(b"inline!")
        .unwrap()
        .finish()
        .unwrap();
    i.wqe_builder(6)
        .unwrap()
        .ctrl_atomic_fa(f, 2)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .rdma(rb + 0x9000, rk)
        .unwrap()
        .result(Sge::new(la + 0x5000, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
    i.wqe_builder(7)
        .unwrap()
        .ctrl_atomic_cs(f, 7, 42)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .rdma(rb + 0x9000, rk)
        .unwrap()
        .result(Sge::new(la + 0x5008, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
    let all = h[0].drain();
    let s: Vec<_> = all.iter().map(|(c, e)| (*e, c.opcode, c.status)).collect();
    use WcOpcode::*;
    assert_eq!(
        s,
        [
            (1, RdmaWrite),
            (2, RdmaWriteImm),
            (3, RdmaRead),
            (4, Send),
            (5, SendImm),
            (6, AtomicFa),
            (7, AtomicCs)
        ]
        .map(|(e, o)| (e, o, Status::Success))
        .to_vec()
    );
    let r = h[1].drain();
    let got: Vec<_> = r.iter().map(|(c, e)| (*e, c.opcode, c.byte_len, c.imm, c.qpn, c.src_qpn)).collect();
    assert_eq!(
        got,
        vec![
            (100, RecvRdmaImm, 64, Some(0xaa), n, i.qpn()),
            (101, Recv, 1000, None, n, i.qpn()),
            (102, RecvImm, 7, Some(0xbb), n, i.qpn())
        ]
    );
    assert_eq!(bytes(&h[1].mr, 0, 256), bytes(&h[0].mr, 0, 256));
    assert_eq!(bytes(&h[0].mr, 0x4000, 512), bytes(&h[1].mr, 0x8000, 512));
    assert_eq!(bytes(&h[1].mr, 0x20000, 1000), bytes(&h[0].mr, 0, 1000));
    assert_eq!(bytes(&h[1].mr, 0x30000, 7), b"inline!");
    let word = |off| u64::from_ne_bytes(bytes(&h[0].mr, off, 8).try_into().unwrap());
    assert_eq!((word(0x5000), word(0x5008)), (40, 42));
    assert_eq!(u64::from_ne_bytes(bytes(&h[1].mr, 0x9000, 8).try_into().unwrap()), 7);
}

#[test]
fn every_dc_opcode_over_infiniband() {
    every_opcode(Addressing::Ib);
}

#[test]
fn every_dc_opcode_over_roce_v2() {
    every_opcode(Addressing::Roce);
}

#[test]
fn one_dci_reaches_several_dcts() {
    let (_f, mut h) = cluster(3, Addressing::Ib, ExecMode::Deterministic);
    let i = dci(&h[0], &ConnectParams::default());
    let (t1, t2) = (dct(&h[1], KEY), dct(&h[2], KEY + 1));
    for (k, (t, key, node)) in [(&t1, KEY, 1usize), (&t2, KEY + 1, 2)].into_iter().enumerate() {
        i.wqe_builder(k as u64)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .av(key, t.dct_number().unwrap(), &h[node].av(0))
            .unwrap()
            .rdma(h[node].mr.addr(), h[node].mr.rkey())
            .unwrap()
            .inline(&[node as u8; 16])
            .unwrap()
            .finish()
            .unwrap();
    }
    assert_eq!(h[0].drain().len(), 2);
    assert_eq!(bytes(&h[1].mr, 0, 16), vec![1; 16]);
    assert_eq!(bytes(&h[2].mr, 0, 16), vec![2; 16]);
}

#[test]
fn wrong_dc_key_fails_at_the_initiator() {
    let (f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let i = dci(&h[0], &ConnectParams::default());
    let t = dct(&h[1], KEY);
    let n = t.dct_number().unwrap();
    let av = h[1].av(0);
    i.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .av(KEY ^ 1, n, &av)
        .unwrap()
        .rdma(h[1].mr.addr(), h[1].mr.rkey())
        .unwrap()
        .inline(&[9; 8])
        .unwrap()
        .finish_batch()
        .unwrap();
    i.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
    i.ring_sq_doorbell();
    let c = h[0].drain();
    let got: Vec<_> = c.iter().map(|(c, e)| (*e, c.status.syndrome())).collect();
    assert_eq!(got, vec![(1, Some(Syndrome::TransportRetryExceeded)), (2, Some(Syndrome::WrFlush))]);
    assert_eq!(i.state(), QpState::Err);
    assert_eq!(bytes(&h[1].mr, 0, 8), vec![0; 8], "nothing landed");
    assert_eq!(f.nics()[1].stats().dc_key_violations, 1, "counted at the target");
    assert_eq!(t.state(), QpState::Rtr, "the DCT is unaffected");
    // A fresh DCI with the right key still gets through.
    let j = dci(&h[0], &ConnectParams::default());
    j.wqe_builder(3)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .av(KEY, n, &av)
        .unwrap()
        .rdma(h[1].mr.addr(), h[1].mr.rkey())
        .unwrap()
        .inline(&[9; 8])
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(h[0].drain()[0].0.status, Status::Success);
}

#[test]
fn dct_number_exists_only_from_rtr() {
    let (_f, h) = cluster(1, Addressing::Ib, ExecMode::Deterministic);
    let t = h[0]
        .ctx
        .create_dct(&h[0].pd, &h[0].cq, &h[0].srq, &QpConfig { dc_key: KEY, ..QpConfig::default() })
        .unwrap();
    assert!(matches!(t.dct_number(), Err(Error::DctNotReady { .. })));
    assert_eq!(t.qpn(), 0, "no number before RTR");
    t.activate(&ConnectParams::default()).unwrap();
    let n = t.dct_number().unwrap();
    assert_eq!((t.qpn(), t.state()), (n, QpState::Rtr));
}

#[test]
fn empty_srq_means_rnr_then_success_once_a_receive_is_posted() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let i = dci(&h[0], &ConnectParams::default()); // rnr_retry 7: forever
    let t = dct(&h[1], KEY);
    i.wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .av(KEY, t.dct_number().unwrap(), &h[1].av(0))
        .unwrap()
        .inline(b"late")
        .unwrap()
        .finish()
        .unwrap();
    assert!(h[0].poll_ticks(1, 500).is_empty(), "blocked on RNR");
    srq_recv(&h[1], 60, 0, 64);
    assert_eq!(h[0].poll_ticks(1, 10)[0].0.status, Status::Success);
    assert_eq!(h[1].drain()[0].1, 60);
}

#[test]
fn empty_srq_rnr_retry_exceeded() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let i = dci(&h[0], &ConnectParams { rnr_retry: 2, ..ConnectParams::default() });
    let t = dct(&h[1], KEY);
    i.wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .av(KEY, t.dct_number().unwrap(), &h[1].av(0))
        .unwrap()
        .inline(b"x")
        .unwrap()
        .finish()
        .unwrap();
    let c = h[0].poll_ticks(1, 100);
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::RnrRetryExceeded));
    assert_eq!(i.state(), QpState::Err);
}

#[test]
fn receive_too_small_on_the_dct() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let i = dci(&h[0], &ConnectParams::default());
    let t = dct(&h[1], KEY);
    srq_recv(&h[1], 70, 0, 4);
    i.wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .av(KEY, t.dct_number().unwrap(), &h[1].av(0))
        .unwrap()
        .inline(b"too long")
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(h[0].drain()[0].0.status.syndrome(), Some(Syndrome::RemoteInvalidRequest));
    let r = h[1].drain();
    assert_eq!((r[0].1, r[0].0.status.syndrome()), (70, Some(Syndrome::LocalLength)));
    assert_eq!(t.state(), QpState::Rtr, "one initiator cannot kill a shared target");
    assert_eq!(bytes(&h[1].mr, 0, 8), vec![0; 8]);
}

#[test]
fn dct_access_rights_are_enforced() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let i = dci(&h[0], &ConnectParams::default());
    let t = h[1]
        .ctx
        .create_dct(&h[1].pd, &h[1].cq, &h[1].srq, &QpConfig { dc_key: KEY, ..QpConfig::default() })
        .unwrap();
    t.activate(&ConnectParams { access: AccessFlags::REMOTE_READ, ..ConnectParams::default() }).unwrap();
    i.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .av(KEY, t.dct_number().unwrap(), &h[1].av(0))
        .unwrap()
        .rdma(h[1].mr.addr(), h[1].mr.rkey())
        .unwrap()
        .inline(&[1; 8])
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(h[0].drain()[0].0.status.syndrome(), Some(Syndrome::RemoteInvalidRequest));
}
