//! UD end to end: delivery by QPN and Q_Key over InfiniBand (with and
//! without GRH) and RoCE v2, the 40-byte GRH slot at the head of every
//! receive buffer, the receive CQE's source fields, and the datagram
//! failure modes (wrong Q_Key, no receive: dropped; buffer too small).

mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::sim::Sim;
use mlx5::{
    AddressVector, ConnectParams, IbGrh, QpConfig, QpState, RoceL3, Sge, Status, Syndrome, UdQp, WcOpcode,
    WqeFlags,
};

const QKEY: u32 = 0x1111_1111;

fn ud(n: &Node, srq: bool) -> UdQp<Sim, u64> {
    let cfg = QpConfig {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let q = n.ctx.create_ud_qp(&n.pd, &n.cq, &n.cq, srq.then_some(&n.srq), &cfg).unwrap();
    q.activate(&ConnectParams { qkey: QKEY, ..ConnectParams::default() }).unwrap();
    q
}

fn recv(n: &Node, q: &UdQp<Sim, u64>, entry: u64, off: u64, len: u32) {
    q.post_recv(entry, &[Sge { addr: n.mr.addr() + off, len, lkey: n.mr.lkey() }]).unwrap();
}

fn send(n: &Node, q: &UdQp<Sim, u64>, av: &AddressVector, dqpn: u32, qkey: u32, len: u32) {
    q.wqe_builder(1)
        .unwrap()
        .ctrl_send_imm(WqeFlags::SIGNALED, 0xfeed)
        .unwrap()
        .datagram(av, dqpn, qkey)
        .unwrap()
        .sge(Sge::new(n.mr.addr(), len, n.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
}

#[test]
fn ud_over_infiniband_without_grh() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let (qa, qb) = (ud(&h[0], false), ud(&h[1], false));
    fill(&h[0].mr, 0, 1000, 4);
    h[1].mr.write(0x1000, &[0xee; 40]).unwrap();
    recv(&h[1], &qb, 7, 0x1000, 4096);
    send(&h[0], &qa, &AddressVector::ib(h[1].port.lid, 5), qb.qpn(), QKEY, 1000);
    let s = h[0].drain();
    assert_eq!((s[0].1, s[0].0.status, s[0].0.opcode), (1, Status::Success, WcOpcode::SendImm));
    let r = h[1].drain();
    assert_eq!(r.len(), 1);
    let (c, e) = r[0];
    assert_eq!((e, c.opcode, c.byte_len, c.imm), (7, WcOpcode::RecvImm, 1040, Some(0xfeed)));
    assert_eq!((c.src_qpn, c.slid, c.sl, c.grh, c.network), (qa.qpn(), h[0].port.lid, 5, false, None));
    assert_eq!(bytes(&h[1].mr, 0x1000, 40), vec![0xee; 40], "no GRH: the slot is left alone");
    assert_eq!(bytes(&h[1].mr, 0x1000 + 40, 1000), bytes(&h[0].mr, 0, 1000));
}

#[test]
fn ud_over_infiniband_with_grh() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let (qa, qb) = (ud(&h[0], false), ud(&h[1], false));
    fill(&h[0].mr, 0, 64, 1);
    recv(&h[1], &qb, 7, 0, 4096);
    let grh =
        IbGrh { dgid: h[1].port.gid, sgid_index: 0, traffic_class: 0x20, hop_limit: 3, flow_label: 0x1234 };
    send(&h[0], &qa, &AddressVector::ib_grh(h[1].port.lid, 2, &grh), qb.qpn(), QKEY, 64);
    let r = h[1].drain();
    let c = r[0].0;
    assert_eq!((c.grh, c.sl, c.byte_len), (true, 2, 104));
    let g = bytes(&h[1].mr, 0, 40);
    assert_eq!(g[0] >> 4, 6, "IPv6-shaped GRH");
    assert_eq!(&g[8..24], &h[0].port.gid.0, "source GID");
    assert_eq!(&g[24..40], &h[1].port.gid.0, "destination GID");
    assert_eq!(bytes(&h[1].mr, 40, 64), bytes(&h[0].mr, 0, 64));
}

#[test]
fn ud_over_roce_v2_ipv4() {
    let (_f, mut h) = cluster(2, Addressing::Roce, ExecMode::Deterministic);
    let (qa, qb) = (ud(&h[0], false), ud(&h[1], false));
    fill(&h[0].mr, 0, 300, 2);
    recv(&h[1], &qb, 9, 0, 1024);
    send(&h[0], &qa, &h[1].av(3), qb.qpn(), QKEY, 300);
    let r = h[1].drain();
    let c = r[0].0;
    assert_eq!((c.byte_len, c.grh, c.network, c.src_qpn), (340, true, Some(RoceL3::Ipv4), qa.qpn()));
    let ip = bytes(&h[1].mr, 20, 20);
    assert_eq!(ip[0], 0x45, "IPv4, IHL 5");
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(&ip[12..16], &[10, 0, 0, 1], "source address");
    assert_eq!(&ip[16..20], &[10, 0, 0, 2], "destination address");
    assert_eq!(bytes(&h[1].mr, 40, 300), bytes(&h[0].mr, 0, 300));
}

#[test]
fn ud_message_above_roce_mtu_is_refused_at_build_time() {
    let (_f, h) = cluster(2, Addressing::Roce, ExecMode::Deterministic);
    let qa = ud(&h[0], false);
    assert_eq!(qa.max_message(), h[0].port.active_mtu);
    let b = qa
        .wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .datagram(&h[1].av(0), 5, QKEY)
        .unwrap();
    let e = b.sge(Sge::new(h[0].mr.addr(), h[0].port.active_mtu + 1, h[0].mr.lkey())).err().unwrap();
    assert!(matches!(e, mlx5::Error::MessageTooLong { .. }), "{e:?}");
}

#[test]
fn wrong_qkey_is_dropped_silently() {
    let (f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let (qa, qb) = (ud(&h[0], false), ud(&h[1], false));
    recv(&h[1], &qb, 7, 0, 4096);
    send(&h[0], &qa, &h[1].av(0), qb.qpn(), 0xbad, 16);
    assert_eq!(h[0].drain()[0].0.status, Status::Success, "UD is unreliable: the sender completes");
    assert!(h[1].drain().is_empty());
    assert_eq!(qb.rq_outstanding(), 1, "the receive is still posted");
    assert_eq!(f.nics()[1].stats().ud_dropped, 1);
    // The right key gets through to the same receive.
    send(&h[0], &qa, &h[1].av(0), qb.qpn(), QKEY, 16);
    assert_eq!(h[1].drain()[0].1, 7);
}

#[test]
fn no_receive_posted_is_dropped_silently() {
    let (f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let (qa, qb) = (ud(&h[0], false), ud(&h[1], false));
    send(&h[0], &qa, &h[1].av(0), qb.qpn(), QKEY, 16);
    assert_eq!(h[0].drain()[0].0.status, Status::Success);
    assert!(h[1].drain().is_empty());
    assert_eq!(f.nics()[1].stats().ud_dropped, 1);
}

#[test]
fn ud_on_an_exhausted_srq_is_dropped() {
    let (f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let (qa, qb) = (ud(&h[0], false), ud(&h[1], true));
    let sge = [Sge { addr: h[1].mr.addr(), len: 4096, lkey: h[1].mr.lkey() }];
    h[1].srq.post_recv(50, &sge).unwrap();
    send(&h[0], &qa, &h[1].av(0), qb.qpn(), QKEY, 16);
    send(&h[0], &qa, &h[1].av(0), qb.qpn(), QKEY, 16);
    let r = h[1].drain();
    assert_eq!(r.iter().map(|(c, e)| (*e, c.status)).collect::<Vec<_>>(), vec![(50, Status::Success)]);
    assert_eq!(f.nics()[1].stats().ud_dropped, 1, "the second datagram found the SRQ empty");
}

#[test]
fn receive_buffer_too_small_for_grh_slot_plus_payload() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let (qa, qb) = (ud(&h[0], false), ud(&h[1], false));
    recv(&h[1], &qb, 7, 0, 40 + 15);
    recv(&h[1], &qb, 8, 0x1000, 40 + 16);
    send(&h[0], &qa, &h[1].av(0), qb.qpn(), QKEY, 16);
    send(&h[0], &qa, &h[1].av(0), qb.qpn(), QKEY, 16);
    assert!(h[0].drain().iter().all(|(c, _)| c.status == Status::Success), "the senders never know");
    let r = h[1].drain();
    let got: Vec<_> = r.iter().map(|(c, e)| (*e, c.status.syndrome())).collect();
    assert_eq!(got, vec![(7, Some(Syndrome::LocalLength)), (8, None)], "the UD QP keeps receiving");
    assert_eq!(qb.state(), mlx5::QpState::Rts);
}

#[test]
fn many_senders_one_ud_receiver_in_threaded_mode() {
    let (_f, h) = cluster(4, Addressing::Roce, ExecMode::Threaded);
    let qps: Vec<_> = h.iter().map(|n| ud(n, false)).collect();
    for i in 0..60 {
        recv(&h[0], &qps[0], i, 0x1000 * i, 4096);
    }
    for k in 0..20 {
        for s in 1..4 {
            qps[s]
                .wqe_builder(k)
                .unwrap()
                .ctrl_send_imm(WqeFlags::SIGNALED, (s as u32) << 16 | k as u32)
                .unwrap()
                .datagram(&h[0].av(0), qps[0].qpn(), QKEY)
                .unwrap()
                .inline(&[s as u8; 8])
                .unwrap()
                .finish()
                .unwrap();
        }
    }
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < 60 {
        h[0].cq.poll_with(64, |c, _| got.push(c));
        assert!(t0.elapsed().as_secs() < 20, "only {} datagrams arrived", got.len());
    }
    for s in 1..4u32 {
        let seq: Vec<u32> =
            got.iter().filter_map(|c| c.imm).filter(|i| i >> 16 == s).map(|i| i & 0xffff).collect();
        assert_eq!(seq, (0..20).collect::<Vec<_>>(), "sender {s}: every datagram once, in order");
    }
}

/// `recover()` only acts in SQE: in RTS it changes nothing (an SQE→RTS there is
/// illegal), in ERR it is refused; after a send error it resumes sending.
#[test]
fn recover_acts_only_in_sqe() {
    let (_f, mut n) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let cfg = QpConfig { max_send_wr: 8, max_recv_wr: 8, ..QpConfig::default() };
    let q = n[0].ctx.create_ud_qp(&n[0].pd, &n[0].cq, &n[0].cq, None, &cfg).unwrap();
    q.activate(&ConnectParams::default()).unwrap();
    q.recover().unwrap();
    assert_eq!(q.state(), QpState::Rts, "nothing to recover in RTS");
    // A send error (bad lkey) moves a UD QP to SQE.
    let av = n[1].av(0);
    q.wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .datagram(&av, 0x99, mlx5::DEFAULT_QKEY)
        .unwrap()
        .sge(Sge::new(n[0].mr.addr(), 8, n[0].mr.lkey() ^ 0x55))
        .unwrap()
        .finish()
        .unwrap();
    assert!(matches!(n[0].drain()[0].0.status, Status::Error(_)));
    assert_eq!(q.state(), QpState::Sqe);
    q.recover().unwrap();
    assert_eq!(q.state(), QpState::Rts);
    q.wqe_builder(2)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .datagram(&av, 0x99, mlx5::DEFAULT_QKEY)
        .unwrap()
        .sge(Sge::new(n[0].mr.addr(), 8, n[0].mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(n[0].drain()[0].0.status, Status::Success);
    q.modify_to_error().unwrap();
    assert!(matches!(
        q.recover(),
        Err(mlx5::Error::InvalidTransition { from: QpState::Err, to: QpState::Rts })
    ));
}
