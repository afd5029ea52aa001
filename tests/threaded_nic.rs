//! The threaded simulator when its NIC thread gets no core (as when `cargo
//! test` or busy processes share the cores): the front-end's poll of an empty
//! CQ lets the NIC's queued doorbells be handled in the polling thread, so
//! progress does not wait for the scheduler.

mod common;
use common::*;
use mlx5::model::ExecMode;
use mlx5::{AccessFlags, ConnectParams, Status, WqeFlags};

#[test]
fn polling_an_empty_cq_handles_what_a_stopped_nic_thread_left_queued() {
    let p = pair_with(ExecMode::Threaded, &small_cfg(), AccessFlags::ALL, &ConnectParams::default());
    let nic = p.fabric.nics()[0].clone();
    nic.set_thread_paused(true);
    p.a.mr.write(0, &[5u8; 64]).unwrap();
    let (la, rb, rk) = (p.a.mr.addr(), p.b.mr.addr(), p.b.mr.rkey());
    for i in 0..4u64 {
        p.a.qp
            .wqe_builder(i)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(rb + 64 * i, rk)
            .unwrap()
            .sge(mlx5::Sge::new(la, 64, p.a.mr.lkey()))
            .unwrap()
            .finish()
            .unwrap();
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
