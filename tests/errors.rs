//! Error paths end to end (spec §5.4, §6): each asserts the syndrome by
//! name, the QP state, and the flush CQEs that follow — signaled or not.

mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::{AccessFlags, ConnectParams, Error, QpState, Sge, Status, Syndrome, WcOpcode, WqeFlags};

fn syn(s: Status) -> Option<Syndrome> {
    s.syndrome()
}

/// Post `bad` then two more WQEs (one unsignaled) in one batch, ring once.
fn batch_after(p: &Pair, bad: impl FnOnce(&Pair)) {
    bad(p);
    let qp = &p.a.qp;
    qp.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
    qp.wqe_builder(3).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish_batch().unwrap();
    qp.ring_sq_doorbell();
}

fn assert_error_then_flushes(p: &mut Pair, want: Syndrome) {
    let c = p.a.drain();
    let got: Vec<_> = c.iter().map(|(c, e)| (*e, syn(c.status))).collect();
    assert_eq!(got, vec![(1, Some(want)), (2, Some(Syndrome::WrFlush)), (3, Some(Syndrome::WrFlush))]);
    match c[1].0.status {
        Status::Error(e) => assert_eq!(e.vendor_err, 0xf9, "flush vendor syndrome"),
        _ => unreachable!(),
    }
    assert_eq!(c[0].0.wqe_counter, 0);
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert!(matches!(p.a.qp.wqe_builder(9), Err(Error::QpState { state: QpState::Err, .. })));
    assert_eq!(p.a.qp.sq_free(), p.a.qp.sq_wqebbs(), "every WQE retired");
}

fn write_wqe(p: &Pair, lkey: u32, raddr: u64, rkey: u32, flags: WqeFlags) {
    p.a.qp
        .wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(flags)
        .unwrap()
        .rdma(raddr, rkey)
        .unwrap()
        .sge(Sge::new(p.a.mr.addr(), 64, lkey))
        .unwrap()
        .finish_batch()
        .unwrap();
}

#[test]
fn bad_lkey_is_local_protection_error() {
    let mut p = pair();
    batch_after(&p, |p| write_wqe(p, 0xbad, p.b.mr.addr(), p.b.mr.rkey(), WqeFlags::SIGNALED));
    assert_error_then_flushes(&mut p, Syndrome::LocalProtection);
}

#[test]
fn error_of_an_unsignaled_wqe_reaches_the_user() {
    let mut p = pair();
    batch_after(&p, |p| write_wqe(p, 0xbad, p.b.mr.addr(), p.b.mr.rkey(), WqeFlags::NONE));
    assert_error_then_flushes(&mut p, Syndrome::LocalProtection);
}

#[test]
fn bad_rkey_is_remote_access_error() {
    let mut p = pair();
    batch_after(&p, |p| write_wqe(p, p.a.mr.lkey(), p.b.mr.addr(), 0xbad, WqeFlags::SIGNALED));
    assert_error_then_flushes(&mut p, Syndrome::RemoteAccess);
    assert_eq!(bytes(&p.b.mr, 0, 64), vec![0; 64], "nothing written");
}

#[test]
fn remote_out_of_bounds_is_remote_access_error() {
    let mut p = pair();
    let end = p.b.mr.addr() + MR_LEN as u64 - 32;
    batch_after(&p, |p| write_wqe(p, p.a.mr.lkey(), end, p.b.mr.rkey(), WqeFlags::SIGNALED));
    assert_error_then_flushes(&mut p, Syndrome::RemoteAccess);
    assert_eq!(bytes(&p.b.mr, MR_LEN - 32, 32), vec![0; 32], "no partial write");
}

#[test]
fn missing_remote_permission_is_remote_access_error() {
    let mut p = pair();
    let ro = p.b.pd.alloc_mr(4096, AccessFlags::REMOTE_READ).unwrap();
    batch_after(&p, |p| write_wqe(p, p.a.mr.lkey(), ro.addr(), ro.rkey(), WqeFlags::SIGNALED));
    assert_error_then_flushes(&mut p, Syndrome::RemoteAccess);
    assert_eq!(ro.to_vec(), vec![0; 4096]);
}

#[test]
fn operation_not_enabled_on_the_responder_qp_is_invalid_request() {
    let mut p =
        pair_with(ExecMode::Deterministic, &small_cfg(), AccessFlags::REMOTE_READ, &ConnectParams::default());
    batch_after(&p, |p| write_wqe(p, p.a.mr.lkey(), p.b.mr.addr(), p.b.mr.rkey(), WqeFlags::SIGNALED));
    assert_error_then_flushes(&mut p, Syndrome::RemoteInvalidRequest);
}

#[test]
fn local_scatter_without_local_write_is_local_protection_error() {
    let mut p = pair();
    let ro = p.a.pd.alloc_mr(4096, AccessFlags::NONE).unwrap();
    batch_after(&p, |p| {
        p.a.qp
            .wqe_builder(1)
            .unwrap()
            .ctrl_rdma_read(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(p.b.mr.addr(), p.b.mr.rkey())
            .unwrap()
            .sge(Sge::new(ro.addr(), 64, ro.lkey()))
            .unwrap()
            .finish_batch()
            .unwrap()
    });
    assert_error_then_flushes(&mut p, Syndrome::LocalProtection);
}

#[test]
fn misaligned_atomic_is_invalid_request() {
    let mut p = pair();
    batch_after(&p, |p| {
        p.a.qp
            .wqe_builder(1)
            .unwrap()
            .ctrl_atomic_fa(WqeFlags::SIGNALED, 1)
            .unwrap()
            .rdma(p.b.mr.addr() + 4, p.b.mr.rkey())
            .unwrap()
            .result(Sge::new(p.a.mr.addr(), 8, p.a.mr.lkey()))
            .unwrap()
            .finish_batch()
            .unwrap()
    });
    assert_error_then_flushes(&mut p, Syndrome::RemoteInvalidRequest);
}

#[test]
fn send_longer_than_receive_buffer() {
    let mut p = pair();
    let sge = |off| Sge { addr: p.b.mr.addr() + off, len: 16, lkey: p.b.mr.lkey() };
    p.b.qp.post_recv(100, &[sge(0)]).unwrap();
    p.b.qp.post_recv(101, &[sge(0x100)]).unwrap();
    batch_after(&p, |p| {
        p.a.qp
            .wqe_builder(1)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .sge(Sge::new(p.a.mr.addr(), 17, p.a.mr.lkey()))
            .unwrap()
            .finish_batch()
            .unwrap()
    });
    assert_error_then_flushes(&mut p, Syndrome::RemoteInvalidRequest);
    let r = p.b.drain();
    let got: Vec<_> = r.iter().map(|(c, e)| (*e, c.opcode, syn(c.status))).collect();
    assert_eq!(
        got,
        vec![
            (100, WcOpcode::RecvError, Some(Syndrome::LocalLength)),
            (101, WcOpcode::RecvError, Some(Syndrome::WrFlush))
        ]
    );
    assert_eq!(p.b.qp.state(), QpState::Err);
    assert_eq!(bytes(&p.b.mr, 0, 16), vec![0; 16], "nothing of the failed SEND landed");
}

#[test]
fn bad_lkey_in_receive_wqe() {
    let mut p = pair();
    p.b.qp.post_recv(100, &[Sge { addr: p.b.mr.addr(), len: 64, lkey: 0xbad }]).unwrap();
    batch_after(&p, |p| {
        p.a.qp
            .wqe_builder(1)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .inline(b"x")
            .unwrap()
            .finish_batch()
            .unwrap()
    });
    assert_error_then_flushes(&mut p, Syndrome::RemoteOperation);
    let r = p.b.drain();
    assert_eq!((r[0].1, syn(r[0].0.status)), (100, Some(Syndrome::LocalProtection)));
}

#[test]
fn malformed_wqe_is_local_qp_operation_error() {
    for (what, byte, value) in [("unknown opcode", 3usize, 0x3fu8), ("wrong QPN", 6, 0x7f), ("DS 0", 7, 0)] {
        let mut p = pair();
        write_wqe(&p, p.a.mr.lkey(), p.b.mr.addr(), p.b.mr.rkey(), WqeFlags::SIGNALED);
        // SAFETY: the first WQE's ctrl segment (ring bytes 0..16) is not yet published.
        unsafe { *p.a.qp.sq_buf().add(byte) = value };
        p.a.qp.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
        p.a.qp.wqe_builder(3).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish_batch().unwrap();
        p.a.qp.ring_sq_doorbell();
        let c = p.a.drain();
        let got: Vec<_> = c.iter().map(|(c, e)| (*e, syn(c.status))).collect();
        let want = vec![
            (1, Some(Syndrome::LocalQpOperation)),
            (2, Some(Syndrome::WrFlush)),
            (3, Some(Syndrome::WrFlush)),
        ];
        if what == "wrong QPN" {
            // The CQE names the QP whose SQ the WQE was in, whatever its ctrl says.
            assert_eq!(c[0].0.qpn, p.a.qp.qpn());
        }
        assert_eq!(got, want, "{what}");
        assert_eq!(bytes(&p.b.mr, 0, 64), vec![0; 64], "{what}: nothing executed");
    }
}

#[test]
fn rnr_retry_exceeded() {
    let params = ConnectParams { rnr_retry: 3, ..ConnectParams::default() };
    let mut p = pair_with(ExecMode::Deterministic, &small_cfg(), AccessFlags::ALL, &params);
    p.a.qp
        .wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .inline(b"hello")
        .unwrap()
        .finish()
        .unwrap();
    p.a.qp.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    // Each empty poll advances virtual time by one RNR period: after the
    // first attempt and 3 retries the SEND fails.
    let c = p.a.poll_ticks(2, 100);
    let got: Vec<_> = c.iter().map(|(c, e)| (*e, syn(c.status))).collect();
    assert_eq!(got, vec![(1, Some(Syndrome::RnrRetryExceeded)), (2, Some(Syndrome::WrFlush))]);
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert!(p.b.drain().is_empty(), "the responder saw nothing");
}

#[test]
fn rnr_retry_7_retries_until_a_receive_is_posted() {
    let mut p = pair(); // rnr_retry 7 by default
    p.a.qp
        .wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .inline(b"late")
        .unwrap()
        .finish()
        .unwrap();
    assert!(p.a.poll_ticks(1, 1000).is_empty(), "still retrying after 1000 RNR periods");
    p.b.qp.post_recv(5, &[Sge { addr: p.b.mr.addr(), len: 64, lkey: p.b.mr.lkey() }]).unwrap();
    let c = p.a.poll_ticks(1, 10);
    assert_eq!((c[0].1, c[0].0.status), (1, Status::Success));
    let r = p.b.drain();
    assert_eq!((r[0].1, r[0].0.byte_len), (5, 4));
    assert_eq!(bytes(&p.b.mr, 0, 4), b"late");
}

#[test]
fn modify_to_error_flushes_posted_receives() {
    let mut p = pair();
    for e in 0..3 {
        p.b.qp.post_recv(e, &[Sge { addr: p.b.mr.addr(), len: 64, lkey: p.b.mr.lkey() }]).unwrap();
    }
    p.b.qp.modify_to_error().unwrap();
    let r = p.b.poll_ticks(3, 10);
    let got: Vec<_> = r.iter().map(|(c, e)| (*e, syn(c.status))).collect();
    assert_eq!(got, (0..3).map(|e| (e, Some(Syndrome::WrFlush))).collect::<Vec<_>>());
}
