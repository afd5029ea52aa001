//! Unreliable datagram (spec §3.6, §6.3, §6.6, §7): address resolution, the 40-byte GRH slot
//! and its header contents, CQE fields, silent drops, MTU errors and the SQE state.

mod common;

use common::*;
use mlx5_sim::wire::{cqe_opcode, syndrome};
use mlx5_sim::{Fabric, FabricConfig, HostConfig, LinkLayer, Nic, QpModify, QpState, SimError};

const QKEY: u32 = 0x1111_1111;

struct Ud {
    _f: Fabric,
    a: Nic,
    b: Nic,
    pda: u32,
    pdb: u32,
    scq_a: TestCq,
    rcq_a: TestCq,
    rcq_b: TestCq,
    ua: TestQp,
    ub: TestQp,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Net {
    Ib,
    RoceV4,
    RoceV6,
}

fn v6_host(name: &str, last: u8, mac_last: u8) -> HostConfig {
    let mut gid = [0u8; 16];
    gid[0] = 0xfd;
    gid[15] = last;
    HostConfig { gid, ..HostConfig::roce(name, [0; 4], [2, 0, 0, 0, 0, mac_last]) }
}

fn ud(net: Net) -> Ud {
    let f = Fabric::new(FabricConfig::default());
    let (a, b) = match net {
        Net::Ib => (f.add_host(HostConfig::infiniband("a", 1)), f.add_host(HostConfig::infiniband("b", 2))),
        Net::RoceV4 => (
            f.add_host(HostConfig::roce("r0", [192, 168, 1, 1], [2, 0, 0, 0, 0, 1])),
            f.add_host(HostConfig::roce("r1", [192, 168, 1, 2], [2, 0, 0, 0, 0, 2])),
        ),
        Net::RoceV6 => (f.add_host(v6_host("r0", 1, 1)), f.add_host(v6_host("r1", 2, 2))),
    };
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let scq_a = TestCq::new(&a, 64, 64);
    let rcq_a = TestCq::new(&a, 64, 64);
    let scq_b = TestCq::new(&b, 64, 64);
    let rcq_b = TestCq::new(&b, 64, 64);
    let ua = ud_qp(&a, pda, scq_a.res.cqn, rcq_a.res.cqn, 8, None, 0x0a);
    let ub = ud_qp(&b, pdb, scq_b.res.cqn, rcq_b.res.cqn, 8, None, 0x0b);
    ud_up(&a, ua.qpn(), QKEY);
    ud_up(&b, ub.qpn(), QKEY);
    Ud { _f: f, a, b, pda, pdb, scq_a, rcq_a, rcq_b, ua, ub }
}

impl Ud {
    fn av_to_b(&self) -> Av {
        let i = self.b.info();
        match i.link_layer {
            LinkLayer::InfiniBand => Av { stat_rate_sl: 0x75, ..Av::ud_ib(QKEY, self.ub.qpn(), i.lid) },
            LinkLayer::Ethernet => Av::ud_roce(QKEY, self.ub.qpn(), i.gid, i.mac),
        }
    }
}

fn poisoned(nic: &Nic, pd: u32, len: usize) -> Buf {
    let mut b = Buf::new(nic, pd, len, ALL_ACCESS);
    b.fill(|_| 0xaa);
    b
}

#[test]
fn ib_without_grh_leaves_the_slot_untouched() {
    let mut u = ud(Net::Ib);
    let mut src = Buf::new(&u.a, u.pda, 100, ALL_ACCESS);
    src.fill(|i| i as u8);
    let rb = poisoned(&u.b, u.pdb, 256);
    let w = u.ub.post_recv(&[(rb.addr(), 256, rb.keys.lkey)]);
    let i = u.ua.post(
        op::SEND_IMM,
        SIGNALED | 2,
        [0xca, 0xfe, 0, 1],
        &[Seg::Av(u.av_to_b()), Seg::Data { addr: src.addr(), len: 100, lkey: src.keys.lkey }],
    );
    let got = rb.read();
    assert!(got[..40].iter().all(|&b| b == 0xaa), "no GRH: slot untouched");
    assert_eq!(&got[40..140], &src.read()[..]);
    assert!(got[140..].iter().all(|&b| b == 0xaa));
    let c = u.rcq_b.expect_one();
    let v = c.cqe();
    assert_eq!(c.opcode(), cqe_opcode::RESP_SEND_IMM);
    assert!(v.se());
    assert_eq!(v.flags_rqpn(), 0x0500_0000 | u.ua.qpn(), "g 0, SL 5, source QPN");
    assert_eq!(v.slid(), 1);
    assert_eq!(v.byte_cnt(), 140, "payload + 40");
    assert_eq!(v.imm_inval_pkey(), [0xca, 0xfe, 0, 1]);
    assert_eq!((v.srqn_uidx(), v.sop_drop_qpn(), v.wqe_counter()), (0x0b, u.ub.qpn(), w));
    let s = u.scq_a.expect_one();
    assert_eq!(
        (s.opcode(), s.wqe_counter(), s.wqe_opcode(), s.cqe().byte_cnt()),
        (cqe_opcode::REQ, i, 0x0b, 100)
    );
    assert_eq!(u.a.stats().ud_dropped + u.b.stats().ud_dropped, 0);
}

#[test]
fn ib_with_grh_writes_a_full_grh() {
    let mut u = ud(Net::Ib);
    let rb = poisoned(&u.b, u.pdb, 128);
    u.ub.post_recv(&[(rb.addr(), 16, rb.keys.lkey), (rb.addr() + 16, 112, rb.keys.lkey)]);
    let av = Av {
        grh: true,
        tclass: 0x2c,
        flow_label: 0xabcde,
        hop_limit: 7,
        rgid: u.b.info().gid,
        sgid_index: 0,
        ..u.av_to_b()
    };
    u.ua.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(av), Seg::Inline(b"hello grh")]);
    let got = rb.read();
    let w0 = u32::from_be_bytes(got[0..4].try_into().unwrap());
    assert_eq!(w0, (6 << 28) | (0x2c << 20) | 0xabcde);
    // PayLen: BTH 12 + DETH 8 + 9 payload + 3 pad + ICRC 4.
    assert_eq!(u16::from_be_bytes([got[4], got[5]]), 36);
    assert_eq!((got[6], got[7]), (0x1b, 7), "next header IBA transport, hop limit");
    assert_eq!(&got[8..24], &u.a.info().gid, "sgid");
    assert_eq!(&got[24..40], &u.b.info().gid, "dgid");
    assert_eq!(&got[40..49], b"hello grh");
    let c = u.rcq_b.expect_one();
    assert_eq!(c.opcode(), cqe_opcode::RESP_SEND);
    assert_eq!(c.cqe().flags_rqpn(), 0x1500_0000 | u.ua.qpn(), "g 1, SL 5");
    assert_eq!(c.cqe().imm_inval_pkey(), [0; 4]);
    assert_eq!(c.cqe().byte_cnt(), 49);
    // A GRH naming another GID does not resolve: dropped.
    let av = Av { rgid: [0x11; 16], ..av };
    u.ub.post_recv(&[(rb.addr(), 128, rb.keys.lkey)]);
    u.ua.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(av), Seg::Inline(b"x")]);
    assert_eq!(u.scq_a.poll_all().len(), 2, "UD: the sender completes anyway");
    assert!(u.rcq_b.poll().is_none());
    assert_eq!(u.a.stats().ud_dropped, 1, "unresolvable: counted at the sender");
}

#[test]
fn w8_ud_send_roce_v2_golden_end_to_end() {
    // W8: Q_Key 0x11111111, prio 3, UDP sport 0xd001, dmac 02:00:00:00:00:02, hop limit 64,
    // sgid index 3, dgid ::ffff:192.168.1.2, pi 0x0042 (slot 2), 0x100 bytes.
    let mut u = ud(Net::RoceV4);
    u.ua.advance_with_nops(0x42);
    let mut src = Buf::new(&u.a, u.pda, 0x100, ALL_ACCESS);
    src.fill(|i| (i * 3) as u8);
    let rb = poisoned(&u.b, u.pdb, 0x200);
    let w = u.ub.post_recv(&[(rb.addr(), 0x200, rb.keys.lkey)]);
    let mut dgid = [0u8; 16];
    dgid[10..].copy_from_slice(&[0xff, 0xff, 192, 168, 1, 2]);
    let av = Av {
        key: u64::from(QKEY) << 32,
        dqpn: u.ub.qpn(),
        ext: true,
        stat_rate_sl: 0x06,
        rlid: 0xd001,
        rmac: [2, 0, 0, 0, 0, 2],
        hop_limit: 0x40,
        sgid_index: 3,
        rgid: dgid,
        ..Default::default()
    };
    let i = u.ua.post(
        op::SEND,
        SIGNALED,
        [0; 4],
        &[Seg::Av(av), Seg::Data { addr: src.addr(), len: 0x100, lkey: src.keys.lkey }],
    );
    assert_eq!(i, 0x42);
    let hex = |s: &str| s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect::<Vec<u8>>();
    let mut want = hex("00 00 42 0a");
    want.extend_from_slice(&((u.ua.qpn() << 8) | 5).to_be_bytes());
    want.extend(hex("00 00 00 08  00 00 00 00  11 11 11 11  00 00 00 00"));
    want.extend_from_slice(&(0x8000_0000 | u.ub.qpn()).to_be_bytes());
    want.extend(hex("06 00 d0 01  00 00 00 00  02 00 00 00  00 02 00 40  00 30 00 00"));
    want.extend(hex("00 00 00 00  00 00 00 00  00 00 ff ff  c0 a8 01 02  00 00 01 00"));
    want.extend_from_slice(&src.keys.lkey.to_be_bytes());
    want.extend_from_slice(&src.addr().to_be_bytes());
    // SAFETY: slots 2..3 of the 8-slot send ring.
    let ring = unsafe { std::slice::from_raw_parts(u.ua.res.sq_buf.add(0x80), 80) };
    assert_eq!(ring, &want[..]);
    // SAFETY: word 1 of the doorbell record.
    assert_eq!(unsafe { *u.ua.res.dbrec.add(1) }.to_ne_bytes(), [0, 0, 0, 0x44]);

    let got = rb.read();
    assert!(got[..20].iter().all(|&b| b == 0xaa), "bytes 0..19 untouched on RoCE v2 IPv4");
    // IPv4: total length 20 + UDP 8 + BTH 12 + DETH 8 + 256 + ICRC 4 = 308.
    let ip = &got[20..40];
    assert_eq!(&ip[..10], &hex("45 00 01 34  00 00 40 00  40 11")[..]);
    assert_eq!(&ip[12..], &hex("c0 a8 01 01  c0 a8 01 02")[..]);
    let sum: u32 = ip.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff, "header checksum");
    assert_eq!(&got[40..0x128], &src.read()[..]);
    assert!(got[0x128..].iter().all(|&b| b == 0xaa));
    let c = u.rcq_b.expect_one();
    let v = c.cqe();
    assert_eq!(c.opcode(), cqe_opcode::RESP_SEND);
    assert_eq!(v.flags_rqpn(), 0x1200_0000 | u.ua.qpn(), "g 1, L3 IPv4, no SL bits");
    assert_eq!((v.slid(), v.byte_cnt(), v.wqe_counter(), v.sop_drop_qpn()), (0, 0x128, w, u.ub.qpn()));
    assert_eq!(u.scq_a.expect_one().wqe_counter(), 0x42);
}

#[test]
fn roce_v2_ipv6_writes_an_ipv6_header() {
    let mut u = ud(Net::RoceV6);
    let rb = poisoned(&u.b, u.pdb, 128);
    u.ub.post_recv(&[(rb.addr(), 128, rb.keys.lkey)]);
    let av = Av { tclass: 0x60, flow_label: 0x12345, ..u.av_to_b() };
    u.ua.post(op::SEND_IMM, SIGNALED, [1, 1, 1, 1], &[Seg::Av(av), Seg::Inline(b"v6!")]);
    let got = rb.read();
    assert_eq!(u32::from_be_bytes(got[0..4].try_into().unwrap()), (6 << 28) | (0x60 << 20) | 0x12345);
    // Payload length: UDP 8 + BTH 12 + DETH 8 + ImmDt 4 + 3 + pad 1 + ICRC 4.
    assert_eq!(u16::from_be_bytes([got[4], got[5]]), 40);
    assert_eq!((got[6], got[7]), (17, 64), "UDP, hop limit");
    assert_eq!(&got[8..24], &u.a.info().gid);
    assert_eq!(&got[24..40], &u.b.info().gid);
    assert_eq!(&got[40..43], b"v6!");
    let c = u.rcq_b.expect_one();
    assert_eq!(c.cqe().flags_rqpn(), 0x1100_0000 | u.ua.qpn(), "g 1, L3 IPv6");
    assert_eq!((c.cqe().slid(), c.cqe().byte_cnt()), (0, 43));
}

#[test]
fn roce_needs_the_right_mac() {
    let mut u = ud(Net::RoceV4);
    let rb = Buf::new(&u.b, u.pdb, 128, ALL_ACCESS);
    u.ub.post_recv(&[(rb.addr(), 128, rb.keys.lkey)]);
    let av = Av { rmac: [2, 0, 0, 0, 0, 9], ..u.av_to_b() };
    u.ua.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(av), Seg::Inline(b"x")]);
    assert_eq!(u.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    assert!(u.rcq_b.poll().is_none());
    assert_eq!(u.a.stats().ud_dropped, 1);
}

#[test]
fn silent_drops_wrong_qkey_unknown_qpn_no_receive() {
    let mut u = ud(Net::Ib);
    let rb = Buf::new(&u.b, u.pdb, 128, ALL_ACCESS);
    let good = u.av_to_b();
    // No receive posted yet.
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(good), Seg::Inline(b"1")]);
    let w = u.ub.post_recv(&[(rb.addr(), 128, rb.keys.lkey)]);
    // Wrong Q_Key, unknown QPN, a QP that is not UD (the RC-less host has none: use the DCI-free
    // QPN space), a UD QP not yet in RTR.
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(Av { key: 0x2222_2222 << 32, ..good }), Seg::Inline(b"2")]);
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(Av { dqpn: good.dqpn + 100, ..good }), Seg::Inline(b"3")]);
    let cold = ud_qp(&u.b, u.pdb, u.rcq_b.res.cqn, u.rcq_b.res.cqn, 8, None, 1);
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(Av { dqpn: cold.qpn(), ..good }), Seg::Inline(b"4")]);
    assert_eq!(u.b.stats().ud_dropped, 4);
    assert!(u.rcq_b.poll().is_none());
    assert!(u.scq_a.poll().is_none(), "unsignaled and successful: no CQEs");
    assert_eq!(u.ua.state(), QpState::Rts);
    // Q_Key with the high bit set: the sender QP's own Q_Key is used (IB rule).
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(Av { key: 0x8000_0000 << 32, ..good }), Seg::Inline(b"5")]);
    let c = u.rcq_b.expect_one();
    assert_eq!((c.opcode(), c.wqe_counter()), (cqe_opcode::RESP_SEND, w));
    assert_eq!(rb.read()[40], b'5');
}

#[test]
fn message_longer_than_mtu_moves_the_qp_to_sqe_and_rts_recovers() {
    let mut u = ud(Net::RoceV4);
    assert_eq!(u.a.info().active_mtu, 1024);
    let src = Buf::new(&u.a, u.pda, 2048, ALL_ACCESS);
    let av = u.av_to_b();
    let big = [Seg::Av(av), Seg::Data { addr: src.addr(), len: 1025, lkey: src.keys.lkey }];
    let i = u.ua.post(op::SEND, 0, [0; 4], &big);
    let e = u.scq_a.expect_one();
    assert_eq!(
        (e.opcode(), e.syndrome(), e.vendor(), e.wqe_counter()),
        (cqe_opcode::REQ_ERR, syndrome::LOCAL_LENGTH_ERR, 0x68, i)
    );
    assert_eq!(u.ua.state(), QpState::Sqe);
    // Send WQEs posted in SQE are flushed, one CQE each.
    let j = u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(av), Seg::Inline(b"flushed")]);
    let f = u.scq_a.expect_one();
    assert_eq!(
        (f.syndrome(), f.vendor(), f.wqe_counter(), f.wqe_opcode()),
        (syndrome::WR_FLUSH_ERR, 0xf9, j, op::SEND)
    );
    // The receive side keeps working in SQE.
    let rb = Buf::new(&u.a, u.pda, 128, ALL_ACCESS);
    u.ua.post_recv(&[(rb.addr(), 128, rb.keys.lkey)]);
    let ia = u.a.info();
    u.ub.post(
        op::SEND,
        0,
        [0; 4],
        &[Seg::Av(Av::ud_roce(QKEY, u.ua.qpn(), ia.gid, ia.mac)), Seg::Inline(b"to sqe")],
    );
    assert_eq!(u.rcq_a.expect_one().opcode(), cqe_opcode::RESP_SEND);
    assert_eq!(&rb.read()[40..46], b"to sqe");
    // SQE -> RTS recovers; exactly MTU bytes are fine.
    u.a.modify_qp(u.ua.qpn(), &QpModify { state: Some(QpState::Rts), ..Default::default() }).unwrap();
    let rbb = Buf::new(&u.b, u.pdb, 2048, ALL_ACCESS);
    u.ub.post_recv(&[(rbb.addr(), 2048, rbb.keys.lkey)]);
    u.ua.post(
        op::SEND,
        SIGNALED,
        [0; 4],
        &[Seg::Av(av), Seg::Data { addr: src.addr(), len: 1024, lkey: src.keys.lkey }],
    );
    assert_eq!(u.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    assert_eq!(u.rcq_b.expect_one().cqe().byte_cnt(), 1064);
}

#[test]
fn unsupported_opcode_on_ud_is_local_qp_op_err_and_sqe() {
    let mut u = ud(Net::Ib);
    let m = Buf::new(&u.b, u.pdb, 16, ALL_ACCESS);
    let i = u.ua.post(
        op::RDMA_WRITE,
        0,
        [0; 4],
        &[Seg::Av(u.av_to_b()), Seg::Raddr { raddr: m.addr(), rkey: m.keys.rkey }, Seg::Inline(b"no")],
    );
    let e = u.scq_a.expect_one();
    assert_eq!((e.syndrome(), e.wqe_counter()), (syndrome::LOCAL_QP_OP_ERR, i));
    assert_eq!(u.ua.state(), QpState::Sqe);
    assert_eq!(u.a.stats().malformed_wqes, 1);
}

#[test]
fn receive_too_small_or_bad_lkey_fails_that_receive_only() {
    let mut u = ud(Net::Ib);
    let rb = Buf::new(&u.b, u.pdb, 256, ALL_ACCESS);
    let w0 = u.ub.post_recv(&[(rb.addr(), 40 + 9, rb.keys.lkey)]); // one byte short
    let w1 = u.ub.post_recv(&[(rb.addr(), 64, 0x4242)]);
    let w2 = u.ub.post_recv(&[(rb.addr(), 50, rb.keys.lkey)]);
    for _ in 0..3 {
        u.ua.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(u.av_to_b()), Seg::Inline(b"ten bytes!")]);
    }
    let s = u.scq_a.poll_all();
    assert!(s.iter().all(|c| c.opcode() == cqe_opcode::REQ), "the sender always succeeds: {s:?}");
    let r = u.rcq_b.poll_all();
    assert_eq!(r.len(), 3);
    assert_eq!(
        (r[0].opcode(), r[0].syndrome(), r[0].err().wqe_counter()),
        (cqe_opcode::RESP_ERR, syndrome::LOCAL_LENGTH_ERR, w0)
    );
    assert_eq!(r[0].err().s_wqe_opcode_qpn(), u.ub.qpn());
    assert_eq!((r[1].syndrome(), r[1].err().wqe_counter()), (syndrome::LOCAL_PROT_ERR, w1));
    assert_eq!((r[2].opcode(), r[2].wqe_counter(), r[2].cqe().byte_cnt()), (cqe_opcode::RESP_SEND, w2, 50));
    assert_eq!(u.ub.state(), QpState::Rts, "the UD QP stays operational");
    assert_eq!(&rb.read()[40..50], b"ten bytes!");
}

#[test]
fn ud_receives_from_an_srq() {
    let mut u = ud(Net::Ib);
    let mut srq = TestSrq::new(&u.b, u.pdb, 8, 64);
    let rcq = TestCq::new(&u.b, 16, 64);
    let mut rcq = rcq;
    let us = ud_qp(&u.b, u.pdb, rcq.res.cqn, rcq.res.cqn, 8, Some(srq.res.srqn), 0x77);
    assert_eq!(us.res.rq_wqe_cnt, 0);
    ud_up(&u.b, us.qpn(), QKEY);
    let av = Av { dqpn: us.qpn(), ..u.av_to_b() };
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(av), Seg::Inline(b"dropped")]);
    assert_eq!(u.b.stats().ud_dropped, 1, "SRQ empty: dropped, no RNR");
    let rb = Buf::new(&u.b, u.pdb, 128, ALL_ACCESS);
    srq.post(&[(rb.addr(), 64, rb.keys.lkey)]);
    let i1 = srq.post(&[(rb.addr() + 64, 64, rb.keys.lkey)]);
    srq.free(0);
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(av), Seg::Inline(b"first")]);
    u.ua.post(op::SEND, 0, [0; 4], &[Seg::Av(av), Seg::Inline(b"second")]);
    let v = rcq.poll_all();
    assert_eq!(v.iter().map(|c| c.wqe_counter()).collect::<Vec<_>>(), [0, i1]);
    assert!(v.iter().all(|c| c.cqe().srqn_uidx() == 0x77 && c.qpn() == us.qpn()));
    assert_eq!(&rb.read()[40..45], b"first");
    assert_eq!(&rb.read()[104..110], b"second");
}

#[test]
fn ud_state_machine_requirements() {
    let u = ud(Net::Ib);
    let q = ud_qp(&u.a, u.pda, u.scq_a.res.cqn, u.rcq_a.res.cqn, 8, None, 1).qpn();
    let m = |s| QpModify { state: Some(s), ..Default::default() };
    assert!(
        matches!(
            u.a.modify_qp(q, &QpModify { port: Some(1), ..m(QpState::Init) }),
            Err(SimError::InvalidArgument { .. })
        ),
        "qkey"
    );
    assert!(
        matches!(
            u.a.modify_qp(q, &QpModify { qkey: Some(1), ..m(QpState::Init) }),
            Err(SimError::InvalidArgument { .. })
        ),
        "port"
    );
    u.a.modify_qp(q, &QpModify { port: Some(1), qkey: Some(1), ..m(QpState::Init) }).unwrap();
    u.a.modify_qp(q, &m(QpState::Rtr)).unwrap();
    assert!(matches!(u.a.modify_qp(q, &m(QpState::Rts)), Err(SimError::InvalidArgument { .. })), "sq_psn");
    u.a.modify_qp(q, &QpModify { sq_psn: Some(5), ..m(QpState::Rts) }).unwrap();
    assert_eq!(u.a.qp_state(q).unwrap(), QpState::Rts);
    assert!(matches!(u.a.modify_qp(q, &m(QpState::Sqe)), Err(SimError::InvalidTransition { .. })));
    // RTS->RTS may not set what RTR->RTS set (the kernel refuses those mask bits).
    assert!(matches!(
        u.a.modify_qp(q, &QpModify { sq_psn: Some(6), ..m(QpState::Rts) }),
        Err(SimError::InvalidArgument { .. })
    ));
    u.a.modify_qp(q, &m(QpState::Rts)).unwrap();
}

#[test]
fn legacy_av_and_grh_less_roce_av_cannot_resolve_on_roce() {
    let mut u = ud(Net::RoceV4);
    let av = Av { ext: false, ..u.av_to_b() };
    u.ua.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(av), Seg::Inline(b"x")]);
    let c = u.scq_a.expect_one();
    assert_eq!(c.opcode(), cqe_opcode::REQ, "{:x}", c.syndrome());
    assert_eq!(u.a.stats().ud_dropped, 1, "a 16-byte AV has no GID/MAC");
    let _ = &u.rcq_a;
}
