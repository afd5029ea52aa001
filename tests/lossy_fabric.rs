//! The lossy fabric: RC, DC and UD traffic over links that lose, corrupt, duplicate,
//! delay and reorder packets, or go down. RC and DC retransmit after the local ACK
//! timeout on the simulated clock, execute every operation exactly once, and end with
//! retries exceeded when the link stays silent; UD simply loses datagrams.

mod common;
use common::*;
use mlx5::sim::Sim;
use mlx5::sim::{ExecMode, Fabric, LinkFaults, NicStats};
use mlx5::{ConnectParams, QpConfig, QpState, RcQp, Sge, Status, Syndrome, WcOpcode, WqeFlags};

fn stats(f: &Fabric, host: usize) -> NicStats {
    f.nics()[host].stats()
}

/// Two connected RC QPs on a cluster of two (InfiniBand), with the given timeout and
/// retry count.
fn rc_pair(timeout: u8, retry_cnt: u8) -> (Fabric, Vec<Node>, RcQp<Sim, u64>, RcQp<Sim, u64>) {
    rc_pair_in(ExecMode::Deterministic, timeout, retry_cnt)
}

fn rc_pair_in(
    mode: ExecMode,
    timeout: u8,
    retry_cnt: u8,
) -> (Fabric, Vec<Node>, RcQp<Sim, u64>, RcQp<Sim, u64>) {
    let (fabric, nodes) = cluster(2, Addressing::Ib, mode);
    let cfg = QpConfig { max_send_wr: 256, max_recv_wr: 256, ..QpConfig::default() };
    let a = nodes[0].ctx.create_rc_qp(&nodes[0].pd, &nodes[0].cq, &nodes[0].cq, &cfg).unwrap();
    let b = nodes[1].ctx.create_rc_qp(&nodes[1].pd, &nodes[1].cq, &nodes[1].cq, &cfg).unwrap();
    let p = |peer: &RcQp<Sim, u64>| ConnectParams {
        timeout,
        retry_cnt,
        ..ConnectParams::to(peer.local_info().unwrap())
    };
    a.activate(&p(&b)).unwrap();
    b.activate(&p(&a)).unwrap();
    (fabric, nodes, a, b)
}

fn fetch_add(qp: &RcQp<Sim, u64>, n: &[Node], entry: u64, add: u64) {
    let (la, lk, rb, rk) = (n[0].mr.addr(), n[0].mr.lkey(), n[1].mr.addr(), n[1].mr.rkey());
    qp.wqe_builder(entry)
        .unwrap()
        .ctrl_atomic_fa(WqeFlags::SIGNALED, add)
        .unwrap()
        .rdma(rb, rk)
        .unwrap()
        .result(Sge::new(la + 0x1000 + 8 * entry, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
}

fn counter(n: &Node, off: usize) -> u64 {
    let mut b = [0u8; 8];
    n.mr.read(off, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

/// Loss, duplication and reordering on every link: every fetch-and-add and SEND
/// completes once and executes once (the counter and the receive count say so), and
/// the requester did retransmit.
#[test]
fn retransmission_gives_exactly_once_under_loss_duplication_and_reordering() {
    let (fabric, mut n, a, b) = rc_pair(8, 7);
    fabric.set_faults(
        42,
        LinkFaults {
            drop: 0.1,
            duplicate: 0.2,
            reorder: 0.2,
            reorder_ns: 3_000,
            jitter_ns: 500,
            ..LinkFaults::none()
        },
    );
    for i in 0..100u64 {
        fetch_add(&a, &n, i, 1);
    }
    let (la, lk) = (n[0].mr.addr(), n[0].mr.lkey());
    for i in 0..50u64 {
        b.post_recv(i, &[Sge::new(n[1].mr.addr() + 0x8000, 4096, n[1].mr.lkey())]).unwrap();
        // 3000 bytes: three packets at the default 1024-byte path MTU.
        a.wqe_builder(1000 + i)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .sge(Sge::new(la, 3000, lk))
            .unwrap()
            .finish()
            .unwrap();
    }
    let done = n[0].drain();
    assert_eq!(done.len(), 150);
    assert!(done.iter().all(|(c, _)| c.status == Status::Success), "{done:?}");
    assert_eq!(counter(&n[1], 0), 100, "each fetch-and-add executed exactly once");
    // The results are the counter's values before each add: 0..100, each once.
    let mut olds: Vec<u64> = (0..100).map(|i| counter(&n[0], 0x1000 + 8 * i)).collect();
    olds.sort_unstable();
    assert_eq!(olds, (0..100).collect::<Vec<_>>());
    let recvs = n[1].drain();
    assert_eq!(recvs.len(), 50, "each SEND consumed exactly one receive");
    assert!(recvs.iter().all(|(c, _)| c.status == Status::Success && c.byte_len == 3000));
    let (sa, sb) = (stats(&fabric, 0), stats(&fabric, 1));
    assert!(sa.retransmits > 0 && sa.ack_timeouts > 0 && sa.link_drops > 0, "{sa:?}");
    assert!(sb.duplicates > 0, "duplicates arrived and were answered, not executed: {sb:?}");
    assert!(fabric.now_ns() > 0);
}

/// A link that goes down for longer than all the retries: the WQE ends with
/// retries exceeded after (retry_cnt + 1) timeouts of simulated time, the QP is in
/// error and what follows is flushed; nothing was executed.
#[test]
fn a_link_down_for_good_ends_in_retry_exceeded_and_flush() {
    let (fabric, mut n, a, _b) = rc_pair(10, 3);
    fabric
        .set_link_faults("node0", "node1", LinkFaults { down: Some((0, u64::MAX)), ..LinkFaults::none() })
        .unwrap();
    fetch_add(&a, &n, 0, 5);
    fetch_add(&a, &n, 1, 5);
    let done = n[0].drain();
    assert_eq!(done.len(), 2);
    assert!(
        matches!(done[0].0.status, Status::Error(e) if e.syndrome == Syndrome::TransportRetryExceeded),
        "{done:?}"
    );
    assert!(matches!(done[1].0.status, Status::Error(e) if e.syndrome == Syndrome::WrFlush), "{done:?}");
    assert_eq!(a.state(), QpState::Err);
    assert_eq!(counter(&n[1], 0), 0);
    // Four transmissions, each followed by a timeout of 4.096 µs × 2^10.
    assert_eq!(fabric.now_ns(), 4 * (4096 << 10));
    assert_eq!(stats(&fabric, 0).ack_timeouts, 4);
}

/// A link down for less than the retries take: the WQE succeeds late, once.
#[test]
fn a_link_that_comes_back_within_the_retries_recovers() {
    let (fabric, mut n, a, _b) = rc_pair(10, 7);
    // Down for the first 3 timeouts' worth of time.
    fabric.set_faults(1, LinkFaults { down: Some((0, 3 * (4096 << 10))), ..LinkFaults::none() });
    fetch_add(&a, &n, 0, 5);
    let done = n[0].drain();
    assert_eq!(done[0].0.status, Status::Success);
    assert_eq!(counter(&n[1], 0), 5);
    assert!(stats(&fabric, 0).retransmits >= 3);
}

/// Corrupted packets fail the receiver's ICRC check and are dropped like lost ones.
#[test]
fn corruption_is_an_icrc_drop_and_retransmitted() {
    let (fabric, mut n, a, _b) = rc_pair(6, 7);
    fabric.set_faults(9, LinkFaults { corrupt: 0.2, ..LinkFaults::none() });
    for i in 0..50 {
        fetch_add(&a, &n, i, 2);
    }
    assert!(n[0].drain().iter().all(|(c, _)| c.status == Status::Success));
    assert_eq!(counter(&n[1], 0), 100);
    let icrc = stats(&fabric, 0).icrc_errors + stats(&fabric, 1).icrc_errors;
    assert!(icrc > 0);
}

/// The same seed gives the same run: completions, counters and simulated time.
#[test]
fn the_same_seed_repeats_the_run() {
    let once = |seed| {
        let (fabric, mut n, a, _b) = rc_pair(6, 7);
        fabric.set_faults(
            seed,
            LinkFaults { drop: 0.2, duplicate: 0.1, jitter_ns: 2000, ..LinkFaults::none() },
        );
        for i in 0..60 {
            fetch_add(&a, &n, i, 1);
        }
        let order: Vec<u64> = n[0].drain().iter().map(|(_, e)| *e).collect();
        let s = stats(&fabric, 0);
        (order, fabric.now_ns(), s.retransmits, s.link_drops)
    };
    assert_eq!(once(5), once(5));
    assert_ne!(once(5).1, once(6).1, "another seed, another run");
}

/// UD: a lost datagram is simply lost; the sender completes successfully either way.
#[test]
fn ud_datagrams_are_lost_silently() {
    let (fabric, mut n) = cluster(2, Addressing::Roce, ExecMode::Deterministic);
    let cfg = QpConfig { max_send_wr: 256, max_recv_wr: 256, ..QpConfig::default() };
    let ud = |x: &Node| {
        let q = x.ctx.create_ud_qp(&x.pd, &x.cq, &x.cq, None, &cfg).unwrap();
        q.activate(&ConnectParams::default()).unwrap();
        q
    };
    let (ua, ub) = (ud(&n[0]), ud(&n[1]));
    for i in 0..200 {
        ub.post_recv(i, &[Sge::new(n[1].mr.addr(), 40 + 64, n[1].mr.lkey())]).unwrap();
    }
    fabric.set_faults(3, LinkFaults { drop: 0.3, ..LinkFaults::none() });
    let av = n[1].av(0);
    for i in 0..200 {
        ua.wqe_builder(i)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .datagram(&av, ub.qpn(), mlx5::DEFAULT_QKEY)
            .unwrap()
            .sge(Sge::new(n[0].mr.addr(), 64, n[0].mr.lkey()))
            .unwrap()
            .finish()
            .unwrap();
    }
    let sent = n[0].drain();
    assert_eq!(sent.len(), 200);
    assert!(sent.iter().all(|(c, _)| c.status == Status::Success && c.opcode == WcOpcode::Send));
    let got = n[1].drain().len() as u64;
    let lost = stats(&fabric, 0).link_drops;
    assert_eq!(got + lost, 200, "each datagram arrived or was lost, none twice");
    assert!((30..100).contains(&lost), "about 30 % lost: {lost}");
    assert_eq!(stats(&fabric, 0).retransmits, 0, "UD never retransmits");
}

/// RNR on the network model: the requester waits the responder's `min_rnr_timer`
/// (IBA table 45: code 12 = 0.64 ms) of simulated time before it tries again.
#[test]
fn rnr_nak_waits_the_responders_timer_on_the_clock() {
    let (fabric, mut n, a, b) = rc_pair(14, 7);
    // A perfect but slow link: the network model runs.
    fabric.set_faults(0, LinkFaults { delay_ns: 1_000, ..LinkFaults::none() });
    let (la, lk) = (n[0].mr.addr(), n[0].mr.lkey());
    a.wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .sge(Sge::new(la, 64, lk))
        .unwrap()
        .finish()
        .unwrap();
    assert!(n[0].drain().is_empty(), "no receive yet: RNR");
    let t = fabric.now_ns();
    assert!(t >= 640_000, "one RNR timer of 0.64 ms passed: {t}");
    b.post_recv(9, &[Sge::new(n[1].mr.addr(), 64, n[1].mr.lkey())]).unwrap();
    let done = n[0].poll_ticks(1, 100);
    assert_eq!(done[0].0.status, Status::Success);
    assert!(stats(&fabric, 0).rnr_naks >= 1);
}

/// The NIC threads of threaded mode run the same transport: exactly once there too.
#[test]
fn threaded_nics_retransmit_too() {
    let (fabric, n, a, _b) = rc_pair_in(ExecMode::Threaded, 6, 7);
    fabric.set_faults(11, LinkFaults { drop: 0.15, duplicate: 0.1, ..LinkFaults::none() });
    for i in 0..200 {
        fetch_add(&a, &n, i, 3);
    }
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < 200 {
        n[0].cq.poll_with(64, |c, e| got.push((c, e)));
        assert!(t0.elapsed().as_secs() < 20, "timed out with {} completions", got.len());
    }
    assert!(got.iter().all(|(c, _)| c.status == Status::Success));
    assert_eq!(counter(&n[1], 0), 600);
    assert!(stats(&fabric, 0).retransmits > 0);
}
