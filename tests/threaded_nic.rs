//! The threaded simulator when its NIC thread gets no core (as when `cargo
//! test` or busy processes share the cores): the front-end's poll of an empty
//! CQ lets the NIC's queued doorbells be handled in the polling thread, so
//! progress does not wait for the scheduler.

mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::{AccessFlags, ConnectParams, Status, WqeFlags};

/// A signaled WRITE of `len` bytes from host a's MR at `from` to host b's at `to`,
/// with work request id `id`.
fn write(p: &Pair, id: u64, from: u64, to: u64, len: u32) {
    p.a.qp
        .wqe_builder(id)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(p.b.mr.addr() + to, p.b.mr.rkey())
        .unwrap()
        .sge(mlx5::Sge::new(p.a.mr.addr() + from, len, p.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
}

#[test]
fn polling_an_empty_cq_handles_what_a_stopped_nic_thread_left_queued() {
    let p = pair_with(ExecMode::Threaded, &small_cfg(), AccessFlags::ALL, &ConnectParams::default());
    let nic = p.fabric.nics()[0].clone();
    nic.set_thread_paused(true);
    p.a.mr.write(0, &[5u8; 64]).unwrap();
    for i in 0..4u64 {
        write(&p, i, 0, 64 * i, 64);
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let s = nic.stats();
    assert_eq!(s.doorbells - s.doorbells_coalesced, 0, "the stopped NIC thread handled nothing");
    // The first poll finds nothing and hands the queue to the NIC; the next
    // ones read what it wrote. A bounded number of polls: no scheduler involved.
    let mut got = Vec::new();
    for _ in 0..3 {
        p.a.cq.poll_with(16, |c, e| got.push((e, c.status)));
    }
    assert_eq!(got, (0..4).map(|i| (i, Status::Success)).collect::<Vec<_>>());
    assert_eq!(bytes(&p.b.mr, 0, 256), vec![5u8; 256]);
    nic.set_thread_paused(false);
    drop(p);
}

/// Threaded mode runs a doorbell in the posting thread when the application waits for
/// it: nothing queued, every CQE of the QP's send CQ taken. Through the front-end: a
/// burst leaves completions to take, so its doorbells after the first go to the NIC
/// thread; once a poll has found the CQ empty (the front-end then calls `Nic::help`),
/// each lone WRITE has landed and completed when its post returns (a pingpong's cost
/// is then no cache-line trip to the NIC thread's core and back).
#[test]
fn a_waiting_application_runs_its_doorbells_in_its_own_thread() {
    let p = pair_with(ExecMode::Threaded, &small_cfg(), AccessFlags::ALL, &ConnectParams::default());
    let nic = p.fabric.nics()[0].clone();
    let write = |i: u64| write(&p, i, 8 * i, 8 * i, 8);
    // Long enough for the idle NIC thread to park, so it holds nothing meanwhile.
    let park = || std::thread::sleep(std::time::Duration::from_millis(5));
    p.a.mr.write(0, &(0..128u8).collect::<Vec<_>>()).unwrap();
    park();
    for i in 0..4 {
        write(i);
    }
    assert_eq!(nic.stats().doorbells_in_poster, 1, "the burst's first only");
    let mut got = Vec::new();
    while got.len() < 4 {
        p.a.cq.poll_with(16, |c, e| got.push((e, c.status)));
    }
    assert_eq!(got, (0..4).map(|i| (i, Status::Success)).collect::<Vec<_>>());
    // This poll finds the CQ empty.
    assert_eq!(p.a.cq.poll_with(16, |_, _| {}).consumed(), 0);
    for i in 4..16 {
        park();
        write(i);
        let mut one = Vec::new();
        assert_eq!(
            p.a.cq.poll_with(16, |c, e| one.push((e, c.status))).completions,
            1,
            "completed when the post returned"
        );
        assert_eq!(one, [(i, Status::Success)]);
        assert_eq!(nic.stats().doorbells_in_poster, i - 2);
    }
    assert_eq!(bytes(&p.b.mr, 0, 128), (0..128u8).collect::<Vec<_>>());
    drop(p);
}

/// A stopped NIC thread's queue, handled by polls: doorbells of two QPs taking turns
/// (none covers another), more than one batch of them (the NIC takes up to 64 at a
/// time, each with the next one taken ahead of it). Every doorbell is handled once and
/// every WQE runs once. The first doorbell of a QP runs its send queue up to the
/// doorbell record, which by then covers all its WQEs: the CQEs on the shared CQ are
/// the first QP's in the order posted, then the second's.
#[test]
fn queued_doorbells_of_qps_taking_turns_are_each_handled_once() {
    let p = pair_with(ExecMode::Threaded, &small_cfg(), AccessFlags::ALL, &ConnectParams::default());
    let nic = p.fabric.nics()[0].clone();
    // A second connection from host a, on host a's CQ.
    let qa2 = p.a.ctx.create_rc_qp(&p.a.pd, &p.a.cq, &p.a.cq, &small_cfg()).unwrap();
    let qb2 = p.b.ctx.create_rc_qp(&p.b.pd, &p.b.cq, &p.b.cq, &small_cfg()).unwrap();
    qa2.activate(&ConnectParams::to(qb2.local_info().unwrap())).unwrap();
    qb2.activate(&ConnectParams::to(qa2.local_info().unwrap())).unwrap();
    nic.set_thread_paused(true);
    let n = 100u64;
    for i in 0..n {
        let q = if i % 2 == 0 { &p.a.qp } else { &qa2 };
        q.wqe_builder(i)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(p.b.mr.addr() + 8 * i, p.b.mr.rkey())
            .unwrap()
            .inline(&i.to_le_bytes())
            .unwrap()
            .finish()
            .unwrap();
    }
    let s = nic.stats();
    assert_eq!((s.doorbells, s.wqes_executed), (0, 0), "the stopped NIC thread handled nothing");
    let mut got = Vec::new();
    for _ in 0..8 {
        p.a.cq.poll_with(64, |c, e| got.push((e, c.status)));
    }
    let want: Vec<_> = (0..n).step_by(2).chain((1..n).step_by(2)).map(|i| (i, Status::Success)).collect();
    assert_eq!(got, want);
    let s = nic.stats();
    assert_eq!(
        (s.doorbells, s.doorbells_coalesced, s.wqes_executed),
        (n, 0, n),
        "each doorbell handled once, none coalesced, each WQE run once"
    );
    for i in 0..n {
        assert_eq!(bytes(&p.b.mr, 8 * i as usize, 8), i.to_le_bytes());
    }
    nic.set_thread_paused(false);
    drop((qa2, qb2));
    drop(p);
}
