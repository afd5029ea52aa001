//! SRQ end to end: the next-WQE-index list stays intact through many laps
//! (each receive lands in the buffer of the entry that comes back with it),
//! one SRQ shared by two RC QPs, an RC QP's error does not flush SRQ WQEs,
//! an exhausted SRQ means RNR on RC, and the typed limits.

mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::sim::Sim;
use mlx5::{ConnectParams, Error, QpConfig, QpState, RcQp, Sge, Status, Syndrome, WcOpcode, WqeFlags};

/// `n` RC QPs from node 0 to node 1, node 1's side receiving on its SRQ.
fn rc_pairs(h: &[Node], n: usize, params: &ConnectParams) -> Vec<(RcQp<Sim, u64>, RcQp<Sim, u64>)> {
    let cfg = QpConfig {
        max_send_wr: 64,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    (0..n)
        .map(|_| {
            let a = h[0].ctx.create_rc_qp(&h[0].pd, &h[0].cq, &h[0].cq, &cfg).unwrap();
            let b = h[1].ctx.create_rc_qp_with_srq(&h[1].pd, &h[1].cq, &h[1].cq, &h[1].srq, &cfg).unwrap();
            a.activate(&ConnectParams { remote: Some(b.local_info().unwrap()), ..(*params).clone() })
                .unwrap();
            b.activate(&ConnectParams { remote: Some(a.local_info().unwrap()), ..(*params).clone() })
                .unwrap();
            (a, b)
        })
        .collect()
}

fn send(qp: &RcQp<Sim, u64>, entry: u64, payload: &[u8]) {
    qp.wqe_builder(entry)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .inline(payload)
        .unwrap()
        .finish()
        .unwrap();
}

#[test]
fn list_survives_many_laps_and_two_qps_share_it() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let pairs = rc_pairs(&h, 2, &ConnectParams::default());
    let cap = h[1].srq.capacity() as u64;
    assert_eq!(cap, 255);
    // Receive entry e owns buffer slot e % 64 of node 1's MR.
    let post = |h: &Node, e: u64| {
        let sge = Sge { addr: h.mr.addr() + 64 * (e % 64), len: 64, lkey: h.mr.lkey() };
        h.srq.post_recv(e, &[sge]).unwrap();
    };
    for e in 0..8 {
        post(&h[1], e);
    }
    for m in 0..(3 * cap as u32) {
        let payload = m.to_be_bytes().repeat(4);
        send(&pairs[m as usize % 2].0, m as u64, &payload);
        let r = h[1].drain();
        assert_eq!(r.len(), 1);
        let (c, e) = r[0];
        assert_eq!((c.opcode, c.byte_len, c.status), (WcOpcode::Recv, 16, Status::Success));
        assert_eq!(c.qpn, pairs[m as usize % 2].1.qpn(), "reported on the QP that consumed it");
        assert_eq!(
            bytes(&h[1].mr, 64 * (e as usize % 64), 16),
            payload,
            "message {m} is in entry {e}'s buffer"
        );
        post(&h[1], m as u64 + 8);
        assert_eq!(h[0].drain()[0].1, m as u64);
    }
    assert_eq!(h[1].srq.outstanding(), 8);
}

#[test]
fn rc_qp_error_does_not_flush_srq_wqes() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let pairs = rc_pairs(&h, 2, &ConnectParams::default());
    for e in 0..3 {
        h[1].srq
            .post_recv(e, &[Sge { addr: h[1].mr.addr() + 0x100 * e, len: 64, lkey: h[1].mr.lkey() }])
            .unwrap();
    }
    // Break the responder of pair 0 with a bad rkey: it goes to ERR.
    let (a0, b0) = &pairs[0];
    a0.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(h[1].mr.addr(), 0xbad)
        .unwrap()
        .inline(b"x")
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(h[0].drain()[0].0.status.syndrome(), Some(Syndrome::RemoteAccess));
    b0.modify_to_error().unwrap();
    assert!(h[1].poll_ticks(1, 5).is_empty(), "no SRQ WQE is flushed");
    assert_eq!(h[1].srq.outstanding(), 3);
    // The other QP still receives all three.
    for m in 0..3 {
        send(&pairs[1].0, m, b"still here");
    }
    let r = h[1].drain();
    assert_eq!(r.iter().map(|(_, e)| *e).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(b0.state(), QpState::Err);
}

#[test]
fn exhausted_srq_means_rnr_on_rc() {
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let pairs = rc_pairs(&h, 1, &ConnectParams { rnr_retry: 1, ..ConnectParams::default() });
    send(&pairs[0].0, 1, b"nobody listens");
    let c = h[0].poll_ticks(1, 50);
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::RnrRetryExceeded));
    assert!(h[1].drain().is_empty());
}

#[test]
fn srq_limits_are_typed_errors() {
    let (_f, h) = cluster(1, Addressing::Ib, ExecMode::Deterministic);
    let srq = h[0].ctx.create_srq::<u64>(&h[0].pd, 3, 2).unwrap();
    assert_eq!(srq.capacity(), 3);
    let sge = Sge { addr: h[0].mr.addr(), len: 8, lkey: h[0].mr.lkey() };
    assert_eq!(srq.post_recv(0, &[sge; 3]).err().unwrap(), Error::TooManySge { count: 3, max: 2 });
    for e in 0..3 {
        srq.post_recv(e, &[sge]).unwrap();
    }
    assert_eq!(srq.post_recv(9, &[sge]).err().unwrap(), Error::SrqFull { capacity: 3 });
    let qp_on_srq =
        h[0].ctx.create_rc_qp_with_srq(&h[0].pd, &h[0].cq, &h[0].cq, &srq, &QpConfig::default()).unwrap();
    qp_on_srq
        .modify_to_init(&ConnectParams { access: mlx5::AccessFlags::ALL, ..ConnectParams::default() })
        .unwrap();
    assert!(
        matches!(qp_on_srq.post_recv(1, &[sge]), Err(Error::InvalidArgument(_))),
        "post on the SRQ instead"
    );
}
