//! Shared receive queues (spec §4.3) behind RC QPs: linked-list consumption order, the
//! posted-count bound, sharing, errors and the control path.

mod common;

use common::*;
use mlx5_sim::wire::{cqe_opcode, syndrome};
use mlx5_sim::{
    AsyncEvent, Fabric, FabricConfig, HostConfig, QpInitAttr, QpModify, QpState, QpType, RcPath, SimError,
    SrqInitAttr,
};

/// Host a with RC QPs `qa[i]`, host b with RC QPs `qb[i]` receiving from one SRQ.
struct SrqPair {
    _f: Fabric,
    a: mlx5_sim::Nic,
    b: mlx5_sim::Nic,
    pda: u32,
    pdb: u32,
    scq_a: TestCq,
    rcq_b: TestCq,
    qa: Vec<TestQp>,
    qb: Vec<TestQp>,
    srq: TestSrq,
}

fn srq_pair(n: usize, rnr_retry: u8) -> SrqPair {
    let f = Fabric::new(FabricConfig::default());
    let a = f.add_host(HostConfig::infiniband("a", 1));
    let b = f.add_host(HostConfig::infiniband("b", 2));
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let scq_a = TestCq::new(&a, 256, 64);
    let rcq_b = TestCq::new(&b, 256, 64);
    let srq = TestSrq::new(&b, pdb, 8, 64);
    let mut qa = Vec::new();
    let mut qb = Vec::new();
    for i in 0..n {
        let x = TestQp::new(&a, pda, scq_a.res.cqn, scq_a.res.cqn, 16, 0, 0x10 + i as u32);
        let y = TestQp::create(
            &b,
            &QpInitAttr {
                qp_type: QpType::Rc,
                pdn: pdb,
                send_cqn: rcq_b.res.cqn,
                recv_cqn: rcq_b.res.cqn,
                sq_wqe_cnt: 8,
                user_index: 0x20 + i as u32,
                srqn: Some(srq.res.srqn),
                ..Default::default()
            },
        );
        assert_eq!(y.res.rq_wqe_cnt, 0);
        init_rtr_rts(
            &a,
            x.qpn(),
            RcPath { dest_qpn: y.qpn(), dlid: 2, ..Default::default() },
            ALL_ACCESS,
            rnr_retry,
        );
        init_rtr_rts(
            &b,
            y.qpn(),
            RcPath { dest_qpn: x.qpn(), dlid: 1, ..Default::default() },
            ALL_ACCESS,
            rnr_retry,
        );
        qa.push(x);
        qb.push(y);
    }
    SrqPair { _f: f, a, b, pda, pdb, scq_a, rcq_b, qa, qb, srq }
}

#[test]
fn device_follows_next_wqe_index_including_relinked_wqes() {
    let mut p = srq_pair(1, 7);
    let rbuf = Buf::new(&p.b, p.pdb, 8 * 64, ALL_ACCESS);
    let slot = |i: u16| (rbuf.addr() + u64::from(i) * 64, 64u32, rbuf.keys.lkey);
    // Round 1: WQEs 0..6 in list order (7 stays the sentinel).
    let first: Vec<u16> = (0..7).map(|_| p.srq.post(&[slot(p.srq.head)])).collect();
    assert_eq!(first, [0, 1, 2, 3, 4, 5, 6]);
    for k in 0..7u8 {
        p.qa[0].post(op::SEND_IMM, 0, [0, 0, 0, k], &[Seg::Inline(&[k; 8])]);
    }
    let got: Vec<u16> = p.rcq_b.poll_all().iter().map(|c| c.wqe_counter()).collect();
    assert_eq!(got, first);
    // The driver frees them in completion order of its own choosing: re-linked at the tail.
    for i in [3, 0, 6, 1, 5, 2, 4] {
        p.srq.free(i);
    }
    // Round 2: the driver posts along its list: 7, 3, 0, 6, 1, 5, 2.
    let second: Vec<u16> = (0..7).map(|_| p.srq.post(&[slot(p.srq.head)])).collect();
    assert_eq!(second, [7, 3, 0, 6, 1, 5, 2]);
    for k in 0..7u8 {
        p.qa[0].post(op::SEND_IMM, 0, [0, 0, 1, k], &[Seg::Inline(&[0x80 | k; 8])]);
    }
    let cqes = p.rcq_b.poll_all();
    let got: Vec<u16> = cqes.iter().map(|c| c.wqe_counter()).collect();
    assert_eq!(got, second, "the device follows next_wqe_index, not slot order");
    let data = rbuf.read();
    for (k, c) in cqes.iter().enumerate() {
        assert_eq!(c.opcode(), cqe_opcode::RESP_SEND_IMM);
        assert_eq!(c.cqe().imm_inval_pkey(), [0, 0, 1, k as u8]);
        let i = usize::from(c.wqe_counter());
        assert_eq!(&data[i * 64..i * 64 + 8], &[0x80 | k as u8; 8], "message {k} in WQE {i}");
        assert_eq!(c.cqe().srqn_uidx(), 0x20);
        assert_eq!(c.qpn(), p.qb[0].qpn());
    }
    assert_eq!(p.scq_a.poll_all().len(), 0, "unsignaled sends");
}

#[test]
fn zero_length_entries_are_skipped_and_stride_end_terminates() {
    let mut p = srq_pair(1, 7);
    let rbuf = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    // Stride 64 = next segment + 3 entries, all used (no terminator): 0-length, 4, 4.
    let i = p.srq.post(&[
        (rbuf.addr(), 0, 0xdead),
        (rbuf.addr() + 10, 4, rbuf.keys.lkey),
        (rbuf.addr() + 20, 4, rbuf.keys.lkey),
    ]);
    p.qa[0].post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"abcdefgh")]);
    let c = p.rcq_b.expect_one();
    assert_eq!((c.opcode(), c.wqe_counter(), c.cqe().byte_cnt()), (cqe_opcode::RESP_SEND, i, 8));
    let d = rbuf.read();
    assert_eq!((&d[10..14], &d[20..24]), (&b"abcd"[..], &b"efgh"[..]));
}

#[test]
fn exhausted_srq_is_rnr_until_a_wqe_is_posted() {
    let mut p = srq_pair(1, 7);
    let rbuf = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    p.srq.post(&[(rbuf.addr(), 64, rbuf.keys.lkey)]);
    p.qa[0].post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"one")]);
    p.qa[0].post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"two")]);
    assert_eq!(p.scq_a.poll_all().len(), 1, "the second SEND is RNR-blocked");
    assert_eq!(p.a.stats().rnr_naks, 1);
    p.a.tick();
    assert_eq!(p.a.stats().rnr_naks, 2);
    let rb2 = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let i = p.srq.post(&[(rb2.addr(), 64, rb2.keys.lkey)]);
    p.a.tick();
    assert_eq!(p.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    let v = p.rcq_b.poll_all();
    assert_eq!(v.iter().map(|c| c.wqe_counter()).collect::<Vec<_>>(), [0, i]);
    assert_eq!(&rb2.read()[..3], b"two");
}

#[test]
fn rnr_retry_exceeded_on_empty_srq() {
    let mut p = srq_pair(1, 2);
    let i = p.qa[0].post(op::SEND, 0, [0; 4], &[Seg::Inline(b"x")]);
    p.a.tick();
    assert!(p.scq_a.poll().is_none());
    p.a.tick();
    let e = p.scq_a.expect_one();
    assert_eq!(
        (e.opcode(), e.syndrome(), e.wqe_counter()),
        (cqe_opcode::REQ_ERR, syndrome::RNR_RETRY_EXC_ERR, i)
    );
}

#[test]
fn two_rc_qps_share_one_srq() {
    let mut p = srq_pair(2, 7);
    let rbuf = Buf::new(&p.b, p.pdb, 8 * 16, ALL_ACCESS);
    for k in 0..6u64 {
        p.srq.post(&[(rbuf.addr() + k * 16, 16, rbuf.keys.lkey)]);
    }
    for k in 0..6u8 {
        p.qa[usize::from(k % 2)].post(op::SEND_IMM, 0, [0, 0, 0, k], &[Seg::Inline(&[k; 4])]);
    }
    let v = p.rcq_b.poll_all();
    assert_eq!(v.len(), 6);
    for (k, c) in v.iter().enumerate() {
        assert_eq!(c.wqe_counter(), k as u16, "one list, consumed in order by both QPs");
        assert_eq!(c.qpn(), p.qb[k % 2].qpn());
        assert_eq!(c.cqe().srqn_uidx(), 0x20 + (k % 2) as u32);
        assert_eq!(c.cqe().flags_rqpn() & 0xff_ffff, p.qa[k % 2].qpn());
        assert_eq!(&rbuf.read()[k * 16..k * 16 + 4], &[k as u8; 4]);
    }
}

#[test]
fn rc_qp_error_does_not_flush_srq_wqes() {
    let mut p = srq_pair(2, 7);
    let rbuf = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let i0 = p.srq.post(&[(rbuf.addr(), 16, rbuf.keys.lkey)]);
    let i1 = p.srq.post(&[(rbuf.addr() + 16, 16, rbuf.keys.lkey)]);
    // QP 0 of b dies: by modify, and its peer's next SEND fails.
    p.b.modify_qp(p.qb[0].qpn(), &QpModify { state: Some(QpState::Err), ..Default::default() }).unwrap();
    p.b.tick();
    assert!(p.rcq_b.poll().is_none(), "SRQ WQEs are not flushed (spec §6.1)");
    // A too-long SEND kills nothing but the receiving QP: length error on WQE i0.
    p.qa[1].post(op::SEND, 0, [0; 4], &[Seg::Inline(&[7; 20])]);
    let e = p.rcq_b.expect_one();
    assert_eq!(
        (e.opcode(), e.syndrome(), e.wqe_counter()),
        (cqe_opcode::RESP_ERR, syndrome::LOCAL_LENGTH_ERR, i0)
    );
    assert_eq!(e.err().s_wqe_opcode_qpn() & 0xff_ffff, p.qb[1].qpn());
    assert_eq!(p.scq_a.expect_one().syndrome(), syndrome::REMOTE_INVAL_REQ_ERR);
    assert_eq!(p.b.qp_state(p.qb[1].qpn()).unwrap(), QpState::Err);
    p.b.tick();
    assert!(p.rcq_b.poll().is_none(), "still no flush of i1");
    // WQE i1 is still there for a fresh QP on the same SRQ.
    p.b.modify_qp(p.qb[1].qpn(), &QpModify { state: Some(QpState::Reset), ..Default::default() }).unwrap();
    p.a.modify_qp(p.qa[1].qpn(), &QpModify { state: Some(QpState::Reset), ..Default::default() }).unwrap();
    p.qa[1].pi = 0;
    p.qb[1].pi = 0;
    init_rtr_rts(
        &p.a,
        p.qa[1].qpn(),
        RcPath { dest_qpn: p.qb[1].qpn(), dlid: 2, ..Default::default() },
        0,
        7,
    );
    init_rtr_rts(
        &p.b,
        p.qb[1].qpn(),
        RcPath { dest_qpn: p.qa[1].qpn(), dlid: 1, ..Default::default() },
        0,
        7,
    );
    p.qa[1].post(op::SEND, 0, [0; 4], &[Seg::Inline(b"alive")]);
    let c = p.rcq_b.expect_one();
    assert_eq!((c.opcode(), c.wqe_counter()), (cqe_opcode::RESP_SEND, i1));
    assert_eq!(&rbuf.read()[16..21], b"alive");
}

#[test]
fn bad_lkey_in_srq_wqe_is_local_prot_err() {
    let mut p = srq_pair(1, 7);
    let i = p.srq.post(&[(0x1000, 16, 0x4242)]);
    p.qa[0].post(op::SEND, 0, [0; 4], &[Seg::Inline(b"x")]);
    let e = p.rcq_b.expect_one();
    assert_eq!((e.syndrome(), e.wqe_counter()), (syndrome::LOCAL_PROT_ERR, i));
    assert_eq!(p.scq_a.expect_one().syndrome(), syndrome::REMOTE_OP_ERR);
}

#[test]
fn srq_control_path() {
    let p = srq_pair(1, 7);
    let b = &p.b;
    let srqn = p.srq.res.srqn;
    assert!(matches!(b.destroy_srq(srqn), Err(SimError::Busy { .. })));
    assert!(matches!(b.dealloc_pd(p.pdb), Err(SimError::Busy { .. })));
    assert_eq!(b.destroy_srq(0x999), Err(SimError::NoSuchSrq(0x999)));
    for (cnt, stride) in [(3, 64), (8, 16), (8, 48), (0, 64), (65536, 64), (8, 2048)] {
        let r = b.create_srq(&SrqInitAttr { pdn: p.pdb, wqe_cnt: cnt, stride, user_index: 0 });
        assert!(matches!(r, Err(SimError::InvalidArgument { .. })), "{cnt} x {stride}");
    }
    assert_eq!(
        b.create_srq(&SrqInitAttr { pdn: 0x77, wqe_cnt: 8, stride: 64, user_index: 0 }).unwrap_err(),
        SimError::NoSuchPd(0x77)
    );
    let cq = p.rcq_b.res.cqn;
    let base = QpInitAttr {
        qp_type: QpType::Rc,
        pdn: p.pdb,
        send_cqn: cq,
        recv_cqn: cq,
        sq_wqe_cnt: 8,
        rq_wqe_cnt: 0,
        rq_stride: 64,
        ..Default::default()
    };
    let e = b.create_qp(&QpInitAttr { srqn: Some(srqn), rq_wqe_cnt: 8, ..base }).unwrap_err();
    assert!(matches!(e, SimError::InvalidArgument { .. }), "SRQ and own RQ");
    assert_eq!(
        b.create_qp(&QpInitAttr { srqn: Some(0x999), ..base }).unwrap_err(),
        SimError::NoSuchSrq(0x999)
    );
    b.destroy_qp(p.qb[0].qpn()).unwrap();
    b.destroy_srq(srqn).unwrap();
    assert_eq!(b.destroy_srq(srqn), Err(SimError::NoSuchSrq(srqn)));
    let _ = (&p.a, p.pda);
}

/// The SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): once a receive
/// leaves fewer WQEs posted than the limit, `SrqLimitReached` fires once and
/// the limit disarms (IB spec 11.5.2.4); a limit of the SRQ's size or more is
/// refused; 0 disarms.
#[test]
fn srq_limit_fires_once_below_the_limit() {
    let mut p = srq_pair(1, 7);
    let srqn = p.srq.res.srqn;
    let rbuf = Buf::new(&p.b, p.pdb, 8 * 64, ALL_ACCESS);
    assert!(matches!(p.b.arm_srq_limit(srqn, 8), Err(SimError::InvalidArgument { .. })));
    assert_eq!(p.b.arm_srq_limit(0x999, 1), Err(SimError::NoSuchSrq(0x999)));
    for _ in 0..4 {
        p.srq.post(&[(rbuf.addr() + u64::from(p.srq.head) * 64, 64, rbuf.keys.lkey)]);
    }
    p.b.arm_srq_limit(srqn, 3).unwrap();
    assert_eq!(p.b.srq_limit(srqn), Ok(3));
    p.qa[0].post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"one")]);
    assert_eq!(p.b.take_async_events(), vec![], "3 left: not below the limit");
    p.qa[0].post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"two")]);
    assert_eq!(p.b.take_async_events(), vec![AsyncEvent::SrqLimitReached { srqn }], "2 left");
    assert_eq!(p.b.srq_limit(srqn), Ok(0), "disarmed");
    p.qa[0].post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"three")]);
    assert_eq!(p.b.take_async_events(), vec![], "once");
    p.b.arm_srq_limit(srqn, 2).unwrap();
    p.b.arm_srq_limit(srqn, 0).unwrap();
    p.qa[0].post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"four")]);
    assert_eq!(p.b.take_async_events(), vec![], "0 disarms");
    assert_eq!(p.rcq_b.poll_all().len(), 4);
}
