//! Error paths (spec §5.4, §6.1, §6.2): syndromes, vendor syndromes, QP → ERR, flush CQEs
//! for the rest of the SQ and the RQ, RNR retries, CQ overrun, control-path errors.

mod common;

use common::*;
use mlx5_sim::wire::{cqe_opcode, syndrome};
use mlx5_sim::{access, AsyncEvent, QpModify, QpState, SimError};

/// After posting a failing WQE: two more WQEs and a receive on A; checks the error CQE, the
/// ERR state and every flush CQE that follows.
fn expect_failure(p: &mut Pair, failing_idx: u16, failing_op: u8, synd: u8, vendor: u8) {
    let e = p.scq_a.poll().expect("error CQE");
    assert_eq!(e.opcode(), cqe_opcode::REQ_ERR, "{e:?}");
    assert_eq!(e.syndrome(), synd, "syndrome");
    assert_eq!(e.vendor(), vendor, "vendor syndrome");
    assert_eq!(e.err().s_wqe_opcode_qpn(), (u32::from(failing_op) << 24) | p.qa.qpn());
    assert_eq!(e.err().wqe_counter(), failing_idx);
    assert_eq!(e.err().srqn(), 0x11);
    assert_eq!(p.qa.state(), QpState::Err);
    // Unsignaled WQEs rung later still get one flush CQE each.
    let i1 = p.qa.post(op::RDMA_WRITE, 0, [0; 4], &[Seg::Raddr { raddr: 0, rkey: 0 }]);
    let i2 = p.qa.post(op::NOP, 0, [0; 4], &[]);
    for (i, o) in [(i1, op::RDMA_WRITE), (i2, op::NOP)] {
        let f = p.scq_a.poll().expect("flush CQE");
        assert_eq!(f.opcode(), cqe_opcode::REQ_ERR);
        assert_eq!((f.syndrome(), f.vendor()), (syndrome::WR_FLUSH_ERR, 0xf9));
        assert_eq!(f.err().wqe_counter(), i);
        assert_eq!(f.err().s_wqe_opcode_qpn() >> 24, u32::from(o));
    }
    assert!(p.scq_a.poll().is_none());
    // A receive posted to a QP in ERR is flushed at the next tick.
    let rb = Buf::new(&p.a, p.pda, 16, 1);
    let rc = p.qa.post_recv(&[(rb.addr(), 16, rb.keys.lkey)]);
    assert!(p.rcq_a.poll().is_none());
    p.a.tick();
    let f = p.rcq_a.expect_one();
    assert_eq!(f.opcode(), cqe_opcode::RESP_ERR);
    assert_eq!(f.syndrome(), syndrome::WR_FLUSH_ERR);
    assert_eq!(f.err().wqe_counter(), rc);
}

fn write_segs(raddr: u64, rkey: u32, addr: u64, len: u32, lkey: u32) -> [Seg<'static>; 2] {
    [Seg::Raddr { raddr, rkey }, Seg::Data { addr, len, lkey }]
}

#[test]
fn bad_lkey_is_local_prot_err_and_flushes_sq_and_rq() {
    let mut p = Pair::new();
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let rb = Buf::new(&p.a, p.pda, 16, 1);
    // A receive already posted on A is flushed when A enters ERR.
    let rc = p.qa.post_recv(&[(rb.addr(), 16, rb.keys.lkey)]);
    let idx = p.qa.post(op::RDMA_WRITE, 0, [0; 4], &write_segs(dst.addr(), dst.keys.rkey, 0x1000, 8, 0x4242));
    let f = p.rcq_a.expect_one();
    assert_eq!((f.opcode(), f.syndrome(), f.err().wqe_counter()), (cqe_opcode::RESP_ERR, 5, rc));
    expect_failure(&mut p, idx, op::RDMA_WRITE, syndrome::LOCAL_PROT_ERR, 0x56);
    assert_eq!(p.qb.state(), QpState::Rts, "local errors leave the responder alone");
}

#[test]
fn local_pd_mismatch_and_bounds_are_local_prot_err() {
    for case in 0..3 {
        let mut p = Pair::new();
        let other_pd = p.a.alloc_pd().unwrap();
        let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
        let foreign = Buf::new(&p.a, other_pd, 64, ALL_ACCESS);
        let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
        let before = dst.read();
        let (opc, idx) = match case {
            0 => (
                op::RDMA_WRITE,
                p.qa.post(
                    op::RDMA_WRITE,
                    0,
                    [0; 4],
                    &write_segs(dst.addr(), dst.keys.rkey, foreign.addr(), 8, foreign.keys.lkey),
                ),
            ),
            1 => (
                op::RDMA_WRITE,
                p.qa.post(
                    op::RDMA_WRITE,
                    0,
                    [0; 4],
                    &write_segs(dst.addr(), dst.keys.rkey, src.addr() + 60, 8, src.keys.lkey),
                ),
            ),
            _ => {
                // READ sink without LOCAL_WRITE.
                let ro = Buf::new(&p.a, p.pda, 64, access::REMOTE_READ);
                (
                    op::RDMA_READ,
                    p.qa.post(
                        op::RDMA_READ,
                        0,
                        [0; 4],
                        &write_segs(dst.addr(), dst.keys.rkey, ro.addr(), 8, ro.keys.lkey),
                    ),
                )
            }
        };
        assert_eq!(dst.read(), before);
        expect_failure(&mut p, idx, opc, syndrome::LOCAL_PROT_ERR, 0x56);
    }
}

#[test]
fn bad_rkey_is_remote_access_err_and_responder_enters_err() {
    for case in 0..3 {
        let mut p = Pair::new();
        let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
        let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
        let ro = Buf::new(&p.b, p.pdb, 64, access::REMOTE_READ);
        let rb = Buf::new(&p.b, p.pdb, 64, 1);
        let rc = p.qb.post_recv(&[(rb.addr(), 64, rb.keys.lkey)]);
        let segs = match case {
            0 => write_segs(dst.addr(), 0x777, src.addr(), 8, src.keys.lkey),
            1 => write_segs(dst.addr() + 60, dst.keys.rkey, src.addr(), 8, src.keys.lkey),
            _ => write_segs(ro.addr(), ro.keys.rkey, src.addr(), 8, src.keys.lkey),
        };
        let idx = p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &segs);
        assert!(dst.read().iter().chain(ro.read().iter()).all(|&b| b == 0));
        expect_failure(&mut p, idx, op::RDMA_WRITE, syndrome::REMOTE_ACCESS_ERR, 0x88);
        assert_eq!(p.qb.state(), QpState::Err);
        let f = p.rcq_b.expect_one();
        assert_eq!((f.opcode(), f.syndrome(), f.err().wqe_counter()), (cqe_opcode::RESP_ERR, 5, rc));
    }
}

#[test]
fn op_not_enabled_on_responder_qp_is_remote_inval_req() {
    let mut p = Pair::with(PairOpts { acc_b: access::REMOTE_READ, ..Default::default() });
    let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let idx = p.qa.post(
        op::RDMA_WRITE,
        0,
        [0; 4],
        &write_segs(dst.addr(), dst.keys.rkey, src.addr(), 8, src.keys.lkey),
    );
    expect_failure(&mut p, idx, op::RDMA_WRITE, syndrome::REMOTE_INVAL_REQ_ERR, 0x8a);
    assert_eq!(p.qb.state(), QpState::Err);
}

#[test]
fn send_longer_than_receive_is_local_length_err_at_responder() {
    let mut p = Pair::new();
    let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let small = Buf::new(&p.b, p.pdb, 16, 1);
    let rc0 = p.qb.post_recv(&[(small.addr(), 16, small.keys.lkey)]);
    let rc1 = p.qb.post_recv(&[(small.addr(), 16, small.keys.lkey)]);
    let idx = p.qa.post(
        op::SEND,
        SIGNALED,
        [0; 4],
        &[Seg::Data { addr: src.addr(), len: 17, lkey: src.keys.lkey }],
    );
    assert_eq!(small.read(), vec![0; 16], "nothing lands");
    let r = p.rcq_b.poll().unwrap();
    assert_eq!(
        (r.opcode(), r.syndrome(), r.vendor()),
        (cqe_opcode::RESP_ERR, syndrome::LOCAL_LENGTH_ERR, 0x68)
    );
    assert_eq!(r.err().wqe_counter(), rc0);
    assert_eq!(r.err().s_wqe_opcode_qpn() & 0xff_ffff, p.qb.qpn());
    assert_eq!(r.err().srqn(), 0x22);
    let f = p.rcq_b.expect_one();
    assert_eq!((f.syndrome(), f.err().wqe_counter()), (syndrome::WR_FLUSH_ERR, rc1));
    assert_eq!(p.qb.state(), QpState::Err);
    expect_failure(&mut p, idx, op::SEND, syndrome::REMOTE_INVAL_REQ_ERR, 0x8a);
}

#[test]
fn bad_lkey_in_receive_wqe_is_remote_op_err() {
    let mut p = Pair::new();
    let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let no_lw = Buf::new(&p.b, p.pdb, 64, access::REMOTE_READ);
    let rc = p.qb.post_recv(&[(no_lw.addr(), 64, no_lw.keys.lkey)]);
    let idx = p.qa.post(op::SEND, 0, [0; 4], &[Seg::Inline(b"abc")]);
    let r = p.rcq_b.expect_one();
    assert_eq!(
        (r.opcode(), r.syndrome(), r.err().wqe_counter()),
        (cqe_opcode::RESP_ERR, syndrome::LOCAL_PROT_ERR, rc)
    );
    assert_eq!(p.qb.state(), QpState::Err);
    let _ = src;
    expect_failure(&mut p, idx, op::SEND, syndrome::REMOTE_OP_ERR, 0x89);
}

#[test]
fn misaligned_atomic_is_remote_inval_req() {
    let mut p = Pair::new();
    let remote = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let res = Buf::new(&p.a, p.pda, 8, 1);
    let idx = p.qa.post(
        op::ATOMIC_FA,
        SIGNALED,
        [0; 4],
        &[
            Seg::Raddr { raddr: remote.addr() + 4, rkey: remote.keys.rkey },
            Seg::Atomic { swap_add: 1, compare: 0 },
            Seg::Data { addr: res.addr(), len: 8, lkey: res.keys.lkey },
        ],
    );
    assert!(remote.read().iter().all(|&b| b == 0));
    expect_failure(&mut p, idx, op::ATOMIC_FA, syndrome::REMOTE_INVAL_REQ_ERR, 0x8a);
}

#[test]
fn malformed_wqes_are_local_qp_op_err() {
    type MakeWqe = Box<dyn Fn(&mut TestQp) -> Vec<u8>>;
    let cases: Vec<(&str, MakeWqe)> = vec![
        (
            "ds 0",
            Box::new(|q: &mut TestQp| {
                let mut w = q.build(op::NOP, 0, [0; 4], &[]);
                w[7] &= 0xc0;
                w
            }),
        ),
        ("unknown opcode", Box::new(|q: &mut TestQp| q.build(0x33, 0, [0; 4], &[]))),
        (
            "wrong qpn",
            Box::new(|q: &mut TestQp| {
                let mut w = q.build(op::NOP, 0, [0; 4], &[]);
                w[6] ^= 1;
                w
            }),
        ),
        (
            "wrong wqe_index",
            Box::new(|q: &mut TestQp| {
                let mut w = q.build(op::NOP, 0, [0; 4], &[]);
                w[2] ^= 1;
                w
            }),
        ),
        ("write without raddr", Box::new(|q: &mut TestQp| q.build(op::RDMA_WRITE, 0, [0; 4], &[]))),
        (
            "atomic byte_count 16",
            Box::new(|q: &mut TestQp| {
                q.build(
                    op::ATOMIC_FA,
                    0,
                    [0; 4],
                    &[
                        Seg::Raddr { raddr: 0, rkey: 0 },
                        Seg::Atomic { swap_add: 1, compare: 0 },
                        Seg::Data { addr: 0, len: 16, lkey: 0 },
                    ],
                )
            }),
        ),
        (
            "two inline segments",
            Box::new(|q: &mut TestQp| q.build(op::SEND, 0, [0; 4], &[Seg::Inline(b"a"), Seg::Inline(b"b")])),
        ),
        (
            "inline in READ",
            Box::new(|q: &mut TestQp| {
                q.build(op::RDMA_READ, 0, [0; 4], &[Seg::Raddr { raddr: 0, rkey: 0 }, Seg::Inline(b"a")])
            }),
        ),
    ];
    for (name, make) in cases {
        let mut p = Pair::new();
        let w = make(&mut p.qa);
        let opc = w[3];
        let (idx, mut db) = p.qa.write_wqe(&w);
        p.qa.update_sq_dbr();
        // The doorbell names the QP (else the model cannot find it and ignores it).
        db[4..7].copy_from_slice(&(p.qa.qpn() << 8).to_be_bytes()[..3]);
        p.qa.ring(db);
        assert_eq!(p.a.stats().malformed_wqes, 1, "{name}");
        let e = p.scq_a.poll().unwrap_or_else(|| panic!("{name}: no CQE"));
        assert_eq!(e.syndrome(), syndrome::LOCAL_QP_OP_ERR, "{name}");
        assert_eq!(e.vendor(), 0x51, "{name}");
        assert_eq!(e.err().wqe_counter(), idx, "{name}");
        assert_eq!(e.err().s_wqe_opcode_qpn() >> 24, u32::from(opc), "{name}");
        assert_eq!(p.qa.state(), QpState::Err, "{name}");
    }
}

#[test]
fn unreachable_destination_is_transport_retry_exceeded() {
    for case in 0..3 {
        let mut p = Pair::new();
        match case {
            0 => p.b.destroy_qp(p.qb.qpn()).unwrap(),
            1 => {
                p.b.modify_qp(p.qb.qpn(), &QpModify { state: Some(QpState::Reset), ..Default::default() })
                    .unwrap()
            }
            _ => {
                // Path to a LID nobody has.
                p.a.modify_qp(p.qa.qpn(), &QpModify { state: Some(QpState::Reset), ..Default::default() })
                    .unwrap();
                p.qa.pi = 0;
                let path = mlx5_sim::RcPath { dest_qpn: p.qb.qpn(), dlid: 99, ..Default::default() };
                init_rtr_rts(&p.a, p.qa.qpn(), path, ALL_ACCESS, 7);
            }
        }
        let idx = p.qa.post(op::SEND, 0, [0; 4], &[Seg::Inline(b"x")]);
        expect_failure(&mut p, idx, op::SEND, syndrome::TRANSPORT_RETRY_EXC_ERR, 0x81);
    }
}

#[test]
fn rnr_retry_3_fails_after_three_ticks() {
    let mut p = Pair::with(PairOpts { rnr_retry: 3, ..Default::default() });
    let idx = p.qa.post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"late")]);
    let after = p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    assert_eq!(p.a.stats().rnr_naks, 1);
    for t in 0..2 {
        p.a.tick();
        assert!(p.scq_a.poll().is_none(), "tick {t}");
    }
    p.a.tick();
    assert_eq!(p.a.stats().rnr_naks, 4);
    let e = p.scq_a.poll().unwrap();
    assert_eq!((e.syndrome(), e.vendor(), e.err().wqe_counter()), (syndrome::RNR_RETRY_EXC_ERR, 0x82, idx));
    let f = p.scq_a.poll().unwrap();
    assert_eq!((f.syndrome(), f.err().wqe_counter()), (syndrome::WR_FLUSH_ERR, after));
    assert_eq!(p.qa.state(), QpState::Err);
    assert_eq!(p.qb.state(), QpState::Rts, "RNR does not break the responder");
}

#[test]
fn rnr_retry_0_fails_at_first_rnr() {
    let mut p = Pair::with(PairOpts { rnr_retry: 0, ..Default::default() });
    let idx = p.qa.post(op::RDMA_WRITE_IMM, 0, [1, 2, 3, 4], &[Seg::Raddr { raddr: 0, rkey: 0 }]);
    expect_failure(&mut p, idx, op::RDMA_WRITE_IMM, syndrome::RNR_RETRY_EXC_ERR, 0x82);
}

#[test]
fn rnr_retry_7_retries_until_a_receive_is_posted() {
    let mut p = Pair::with(PairOpts { rnr_retry: 7, ..Default::default() });
    p.qa.post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"patience")]);
    p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    for _ in 0..20 {
        p.a.tick();
    }
    assert!(p.scq_a.poll().is_none());
    assert_eq!(p.a.stats().rnr_naks, 21);
    let rb = Buf::new(&p.b, p.pdb, 16, 1);
    p.qb.post_recv(&[(rb.addr(), 16, rb.keys.lkey)]);
    p.a.tick();
    assert_eq!(&rb.read()[..8], b"patience");
    let v = p.scq_a.poll_all();
    assert_eq!(v.iter().map(|c| (c.opcode(), c.wqe_counter())).collect::<Vec<_>>(), [(0, 0), (0, 1)]);
    assert_eq!(p.rcq_b.expect_one().cqe().byte_cnt(), 8);
}

#[test]
fn cq_overrun_puts_the_cq_and_its_qps_in_error() {
    let mut p = Pair::with(PairOpts { cq: 2, ..Default::default() });
    for _ in 0..3 {
        p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    }
    let cqn = p.scq_a.res.cqn;
    assert_eq!(p.a.stats().cq_overruns, 1);
    assert_eq!(p.a.take_async_events(), [AsyncEvent::CqOverrun { cqn }], "one event per CQ error");
    assert_eq!(p.a.cq_error(cqn), Ok(true));
    assert_eq!(p.a.qp_state(p.qa.qpn()), Ok(QpState::Err), "a QP reporting to the CQ moves to ERR");
    assert_eq!(p.scq_a.poll_all().len(), 2, "what fitted stays readable");
    p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    assert_eq!(p.scq_a.poll_all().len(), 0, "a CQ in error takes nothing more, even with room");
}

#[test]
fn modify_qp_validates_transitions_and_attributes() {
    let p = Pair::new();
    let q = p.qa.qpn();
    let m = |s| QpModify { state: Some(s), ..Default::default() };
    assert_eq!(
        p.a.modify_qp(q, &m(QpState::Init)),
        Err(SimError::InvalidTransition { from: QpState::Rts, to: QpState::Init })
    );
    assert!(matches!(p.a.modify_qp(q, &QpModify::default()), Err(SimError::InvalidArgument { .. })));
    p.a.modify_qp(q, &m(QpState::Reset)).unwrap();
    assert!(
        matches!(p.a.modify_qp(q, &m(QpState::Init)), Err(SimError::InvalidArgument { .. })),
        "port/access required"
    );
    assert!(matches!(p.a.modify_qp(q, &m(QpState::Rtr)), Err(SimError::InvalidTransition { .. })));
    p.a.modify_qp(
        q,
        &QpModify { state: Some(QpState::Init), port: Some(1), access_flags: Some(0), ..Default::default() },
    )
    .unwrap();
    assert!(
        matches!(p.a.modify_qp(q, &m(QpState::Rtr)), Err(SimError::InvalidArgument { .. })),
        "path required"
    );
    p.a.modify_qp(q, &m(QpState::Err)).unwrap();
    assert!(matches!(p.a.modify_qp(q, &m(QpState::Rts)), Err(SimError::InvalidTransition { .. })));
    assert_eq!(p.a.modify_qp(0xdead, &m(QpState::Err)), Err(SimError::NoSuchQp(0xdead)));
}

#[test]
fn reset_zeroes_dbrec_and_counters() {
    let mut p = Pair::new();
    p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    p.a.modify_qp(p.qa.qpn(), &QpModify { state: Some(QpState::Reset), ..Default::default() }).unwrap();
    // SAFETY: reading the model-owned doorbell record words.
    let words = unsafe { [*p.qa.res.dbrec, *p.qa.res.dbrec.add(1)] };
    assert_eq!(words, [0, 0]);
    p.qa.pi = 0;
    let path = mlx5_sim::RcPath { dest_qpn: p.qb.qpn(), dlid: 2, ..Default::default() };
    init_rtr_rts(&p.a, p.qa.qpn(), path, ALL_ACCESS, 7);
    let idx = p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    assert_eq!(idx, 0);
    let v = p.scq_a.poll_all();
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].wqe_counter(), 0);
    assert_eq!(p.a.stats().malformed_wqes, 0);
}

#[test]
fn modify_to_err_flushes_posted_work() {
    let mut p = Pair::new();
    let rb = Buf::new(&p.a, p.pda, 16, 1);
    p.qa.post_recv(&[(rb.addr(), 16, rb.keys.lkey)]);
    p.qa.post_recv(&[(rb.addr(), 16, rb.keys.lkey)]);
    p.a.modify_qp(p.qa.qpn(), &QpModify { state: Some(QpState::Err), ..Default::default() }).unwrap();
    let v = p.rcq_a.poll_all();
    assert_eq!(v.iter().map(|c| (c.syndrome(), c.err().wqe_counter())).collect::<Vec<_>>(), [(5, 0), (5, 1)]);
}

#[test]
fn control_path_errors() {
    let p = Pair::new();
    assert!(matches!(p.a.dealloc_pd(p.pda), Err(SimError::Busy { .. })));
    assert!(matches!(p.a.destroy_cq(p.scq_a.res.cqn), Err(SimError::Busy { .. })));
    assert_eq!(p.a.dealloc_pd(0x1234), Err(SimError::NoSuchPd(0x1234)));
    assert_eq!(p.a.dereg_mr(0x99), Err(SimError::NoSuchMr(0x99)));
    assert!(p.a.create_cq(3, 64).is_err());
    assert!(p.a.create_cq(4, 32).is_err());
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the registration attempt (refused anyway).
    let r = unsafe { p.a.reg_mr(p.pda, buf.as_mut_ptr() as u64, 8, access::REMOTE_WRITE) };
    assert!(matches!(r, Err(SimError::InvalidArgument { .. })), "remote write needs local write");
    p.a.destroy_qp(p.qa.qpn()).unwrap();
    p.a.destroy_cq(p.scq_a.res.cqn).unwrap();
    assert_eq!(p.a.destroy_cq(p.scq_a.res.cqn), Err(SimError::NoSuchCq(p.scq_a.res.cqn)));
}

/// A QP remembers the host its path led to; a port going down afterwards must still make
/// the peer unreachable (the remembered host is found again once reachability changed).
#[test]
fn a_peer_reached_before_its_port_went_down_is_unreachable_after() {
    let mut p = Pair::new();
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let raddr = Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey };
    let i = p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &[raddr, Seg::Inline(b"first")]);
    let c = p.scq_a.expect_one();
    assert_eq!((c.opcode(), c.wqe_counter()), (cqe_opcode::REQ, i));
    assert_eq!(&dst.read()[..6], b"first\0");
    p.b.set_port_active(false);
    let raddr = Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey };
    let idx = p.qa.post(op::RDMA_WRITE, 0, [0; 4], &[raddr, Seg::Inline(b"second")]);
    expect_failure(&mut p, idx, op::RDMA_WRITE, syndrome::TRANSPORT_RETRY_EXC_ERR, 0x81);
    assert_eq!(&dst.read()[..7], b"first\0\0", "nothing lands on a host whose port is down");
}

/// REREG_MR in place: a new range takes the rkey with it (a WRITE lands there, and one to
/// the old range is a remote access error), new rights are enforced at once, and a
/// refused re-registration (an unknown PD, remote write without local write) leaves the
/// MR as it was; an unknown key is `NoSuchMr`.
#[test]
fn a_reregistered_mr_moves_its_key_and_rights() {
    // A new range: the WRITE lands in the new memory.
    let mut p = Pair::new();
    let mut src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let mut moved = vec![0u8; 64].into_boxed_slice();
    let key = dst.keys.rkey;
    // SAFETY: `moved` lives until the end of the test, after the pair.
    let k = unsafe { p.b.rereg_mr(key, None, Some((moved.as_mut_ptr() as u64, 64)), None) }.unwrap();
    assert_eq!((k.lkey, k.rkey), (key, key), "the keys stay");
    src.fill(|_| 7);
    p.qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &write_segs(moved.as_ptr() as u64, key, src.addr(), 8, src.keys.lkey),
    );
    assert_eq!(p.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    assert_eq!(&moved[..8], &[7u8; 8]);
    // The old range is no longer the key's.
    let idx = p.qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &write_segs(dst.addr(), key, src.addr(), 8, src.keys.lkey),
    );
    expect_failure(&mut p, idx, op::RDMA_WRITE, syndrome::REMOTE_ACCESS_ERR, 0x88);
    assert!(dst.read().iter().all(|&b| b == 0));

    // New rights: without REMOTE_WRITE the next WRITE is refused.
    let mut p = Pair::new();
    let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let key = dst.keys.rkey;
    // SAFETY: no new range.
    unsafe { p.b.rereg_mr(key, None, None, Some(access::LOCAL_WRITE | access::REMOTE_READ)) }.unwrap();
    // Refused changes leave it as it was: an unknown PD, remote write without local write.
    // SAFETY: as above.
    assert_eq!(unsafe { p.b.rereg_mr(key, Some(0x999), None, None) }, Err(SimError::NoSuchPd(0x999)));
    // SAFETY: as above.
    assert!(unsafe { p.b.rereg_mr(key, None, None, Some(access::REMOTE_WRITE)) }.is_err());
    // SAFETY: as above.
    assert_eq!(unsafe { p.b.rereg_mr(0x4242, None, None, None) }, Err(SimError::NoSuchMr(0x4242)));
    let idx = p.qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &write_segs(dst.addr(), key, src.addr(), 8, src.keys.lkey),
    );
    expect_failure(&mut p, idx, op::RDMA_WRITE, syndrome::REMOTE_ACCESS_ERR, 0x88);
    assert!(dst.read().iter().all(|&b| b == 0));
}
