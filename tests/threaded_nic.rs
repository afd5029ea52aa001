//! The threaded simulator when its NIC thread gets no core (as when `cargo
//! test` or busy processes share the cores): the front-end's poll of an empty
//! CQ lets the NIC's queued doorbells be handled in the polling thread, so
//! progress does not wait for the scheduler.

mod common;
use common::*;
use mlx5::model::ExecMode;
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
