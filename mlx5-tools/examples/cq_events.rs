//! Event-driven completions: a CQ on a completion channel, armed, and a
//! thread that sleeps in poll(2) on the channel's file descriptor (what an
//! epoll loop or an async reactor registers) until the simulated NIC
//! thread completes a SEND. `cargo run -p mlx5-tools --example cq_events`
use std::os::fd::AsRawFd;

use mlx5_api::sim::two_hosts;
use mlx5_api::{AccessFlags, ConnectParams, CqConfig, QpConfig, Sge, WqeFlags};
use mlx5_sim::ExecMode;

fn main() {
    let (_fabric, da, db) = two_hosts(ExecMode::Threaded);
    let (ca, cb) = (da.open().unwrap(), db.open().unwrap());
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let channel = cb.create_comp_channel().unwrap();
    let cqa = ca.create_cq(64, |_, _: u64| {}).unwrap();
    let mut cqb = cb
        .create_cq(CqConfig::new(64).channel(&channel), |c, e: u64| println!("completion {e}: {c:?}"))
        .unwrap();
    let cfg = QpConfig::default();
    let qa = ca.create_rc_qp(&pa, &cqa, &cqa, &cfg).unwrap();
    let qb = cb.create_rc_qp(&pb, &cqb, &cqb, &cfg).unwrap();
    qa.activate(&ConnectParams::to(qb.local_info().unwrap())).unwrap();
    qb.activate(&ConnectParams::to(qa.local_info().unwrap())).unwrap();
    let (ma, mb) =
        (pa.alloc_mr(4096, AccessFlags::ALL).unwrap(), pb.alloc_mr(4096, AccessFlags::ALL).unwrap());
    for round in 0..3u64 {
        qb.post_recv(round, &[Sge { addr: mb.addr(), len: 64, lkey: mb.lkey() }]).unwrap();
        cqb.arm(false);
        qa.wqe_builder(round)
            .unwrap()
            .ctrl_send(WqeFlags::default())
            .unwrap()
            .sge(Sge::new(ma.addr(), 16, ma.lkey()))
            .unwrap()
            .finish()
            .unwrap();
        // Sleep in poll(2) until the channel has an event.
        let mut p = libc::pollfd { fd: channel.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut p, 1, 5000) };
        assert_eq!(ready, 1, "an event within 5 s");
        let ev = channel.get_event().unwrap().expect("an event");
        println!("round {round}: event for CQ {:#x}", ev.cqn);
        cqb.poll(16);
    }
}
