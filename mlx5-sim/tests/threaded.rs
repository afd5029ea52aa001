//! Threaded mode: each NIC runs on its own thread; the test polls `op_own` concurrently from
//! other threads while the "driver" thread posts WRITEs and SENDs.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use mlx5_sim::wire::cqe_opcode;
use mlx5_sim::{ExecMode, Fabric, FabricConfig, HostConfig, Nic, RcPath};

fn threaded() -> Pair {
    threaded_with(64, 16)
}

/// A threaded pair whose QPs have `sq` send WQEBBs and whose CQs have `cq` entries.
fn threaded_with(sq: u32, cq: u32) -> Pair {
    Pair::with(PairOpts {
        cfg: FabricConfig { mode: ExecMode::Threaded, ..Default::default() },
        sq,
        cq,
        ..Default::default()
    })
}

/// Spawns a poller that spins on op_own and forwards every CQE.
fn poller(mut cq: TestCq, n: usize) -> (mpsc::Receiver<Polled>, std::thread::JoinHandle<TestCq>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = 0;
        while seen < n {
            assert!(Instant::now() < deadline, "poller timed out after {seen} CQEs");
            match cq.poll() {
                Some(c) => {
                    seen += 1;
                    let _ = tx.send(c);
                }
                None => std::hint::spin_loop(),
            }
        }
        cq
    });
    (rx, h)
}

#[test]
fn threaded_writes_and_sends_with_concurrent_polling() {
    let p = threaded();
    let Pair { a, b, pda, pdb, scq_a, rcq_b, mut qa, mut qb, fabric, .. } = p;
    const N: usize = 600;
    const MSG: usize = 64;
    let mut src = Buf::new(&a, pda, N * MSG, ALL_ACCESS);
    src.fill(|i| (i % 251) as u8);
    let dst = Buf::new(&b, pdb, N * MSG, ALL_ACCESS);
    let rbuf = Buf::new(&b, pdb, 16 * MSG, ALL_ACCESS);

    let (req_rx, req_h) = poller(scq_a, 2 * N);
    let (resp_rx, resp_h) = poller(rcq_b, N);

    // Phase 1: N signaled WRITEs, at most 8 outstanding (CQ of 16, SQ of 64).
    let mut outstanding = 0;
    for i in 0..N {
        while outstanding >= 8 {
            let c = req_rx.recv_timeout(Duration::from_secs(30)).expect("REQ CQE");
            assert_eq!(c.opcode(), cqe_opcode::REQ, "{c:?}");
            outstanding -= 1;
        }
        qa.post(
            op::RDMA_WRITE,
            SIGNALED,
            [0; 4],
            &[
                Seg::Raddr { raddr: dst.addr() + (i * MSG) as u64, rkey: dst.keys.rkey },
                Seg::Data { addr: src.addr() + (i * MSG) as u64, len: MSG as u32, lkey: src.keys.lkey },
            ],
        );
        outstanding += 1;
    }
    while outstanding > 0 {
        req_rx.recv_timeout(Duration::from_secs(30)).expect("REQ CQE");
        outstanding -= 1;
    }
    assert_eq!(dst.read(), src.read());

    // Phase 2: N SENDs; receives are replenished as responder CQEs arrive.
    for _ in 0..16 {
        let k = usize::from(qb.rq_head) % 16;
        qb.post_recv(&[(rbuf.addr() + (k * MSG) as u64, MSG as u32, rbuf.keys.lkey)]);
    }
    let mut received = 0;
    let mut sent = 0;
    let mut req_done = 0;
    while received < N {
        if sent < N && sent - req_done < 8 {
            let tag = (sent as u32).to_be_bytes();
            qa.post(op::SEND_IMM, SIGNALED, tag, &[Seg::Inline(&tag)]);
            sent += 1;
        }
        while let Ok(c) = req_rx.try_recv() {
            assert_eq!(c.opcode(), cqe_opcode::REQ);
            req_done += 1;
        }
        if let Ok(r) = resp_rx.recv_timeout(Duration::from_millis(1)) {
            assert_eq!(r.opcode(), cqe_opcode::RESP_SEND_IMM, "{r:?}");
            assert_eq!(r.cqe().imm_inval_pkey(), (received as u32).to_be_bytes(), "in order");
            assert_eq!(r.cqe().wqe_counter(), received as u16);
            let slot = usize::from(r.cqe().wqe_counter()) % 16;
            assert_eq!(&rbuf.read()[slot * MSG..slot * MSG + 4], &(received as u32).to_be_bytes());
            received += 1;
            let k = usize::from(qb.rq_head) % 16;
            qb.post_recv(&[(rbuf.addr() + (k * MSG) as u64, MSG as u32, rbuf.keys.lkey)]);
        }
    }
    req_h.join().unwrap();
    resp_h.join().unwrap();
    a.quiesce();
    let s = a.stats();
    // Each WQE once, plus one more execution per RNR NAK: under load the
    // responder's receives can be replenished later than SENDs arrive (the
    // NIC retries them, which is what RNR is for).
    assert_eq!(s.wqes_executed, 2 * N as u64 + s.rnr_naks, "{s:?}");
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch + s.malformed_wqes, 0, "{s:?}");
    // Dropping every handle stops and joins the NIC threads.
    drop((a, b, qa, qb, fabric));
}

#[test]
fn quiesce_waits_for_the_nic_thread() {
    let mut p = threaded();
    for _ in 0..10 {
        p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    }
    p.a.quiesce();
    assert_eq!(p.scq_a.poll_all().len(), 10);
    assert_eq!(p.a.stats().doorbells, 10);
}

#[test]
fn threaded_rnr_retries_on_its_own_timer() {
    let mut p = threaded();
    // Rung with the send CQ empty and the NIC thread parked: the first try runs in the
    // poster's thread, which tells the NIC thread that its QP now waits for the timer.
    let_the_nic_thread_park();
    p.qa.post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"wait")]);
    assert_eq!(p.a.stats().doorbells_in_poster, 1);
    // Wait (bounded) for the NIC thread's own timer to retry at least twice;
    // no assumption about how long that takes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.a.stats().rnr_naks < 2 {
        assert!(Instant::now() < deadline, "the NIC thread never retried");
        std::thread::yield_now();
    }
    assert!(p.scq_a.poll().is_none(), "still blocked: no receive posted");
    let rb = Buf::new(&p.b, p.pdb, 16, 1);
    p.qb.post_recv(&[(rb.addr(), 16, rb.keys.lkey)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let c = loop {
        if let Some(c) = p.scq_a.poll() {
            break c;
        }
        assert!(Instant::now() < deadline, "no completion after the receive was posted");
        std::thread::yield_now();
    };
    assert_eq!(c.opcode(), cqe_opcode::REQ);
    assert_eq!(&rb.read()[..4], b"wait");
}

fn wait_for(cq: &mut TestCq, n: usize) -> Vec<Polled> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut v = Vec::new();
    while v.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} CQEs", v.len());
        match cq.poll() {
            Some(c) => v.push(c),
            None => std::thread::yield_now(),
        }
    }
    v
}

#[test]
fn threaded_ud_and_dc_with_srq_rnr() {
    use mlx5_sim::{Fabric, HostConfig};
    let f = Fabric::new(FabricConfig { mode: ExecMode::Threaded, ..Default::default() });
    let a = f.add_host(HostConfig::infiniband("a", 1));
    let b = f.add_host(HostConfig::infiniband("b", 2));
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let mut scq = TestCq::new(&a, 256, 64);
    let mut rcq = TestCq::new(&b, 256, 64);
    // UD: 50 datagrams into an RQ of 16 that is replenished as CQEs arrive.
    let mut ua = ud_qp(&a, pda, scq.res.cqn, scq.res.cqn, 64, None, 1);
    let mut ub = ud_qp(&b, pdb, rcq.res.cqn, rcq.res.cqn, 8, None, 2);
    ud_up(&a, ua.qpn(), 7);
    ud_up(&b, ub.qpn(), 7);
    let rb = Buf::new(&b, pdb, 16 * 64, ALL_ACCESS);
    for k in 0..16u64 {
        ub.post_recv(&[(rb.addr() + k * 64, 64, rb.keys.lkey)]);
    }
    let av = Av::ud_ib(7, ub.qpn(), 2);
    for k in 0..16u32 {
        ua.post(op::SEND_IMM, SIGNALED, k.to_be_bytes(), &[Seg::Av(av), Seg::Inline(&k.to_be_bytes())]);
    }
    let r = wait_for(&mut rcq, 16);
    for (k, c) in r.iter().enumerate() {
        assert_eq!(c.opcode(), cqe_opcode::RESP_SEND_IMM, "{c:?}");
        assert_eq!(c.cqe().imm_inval_pkey(), (k as u32).to_be_bytes());
        assert_eq!(c.cqe().byte_cnt(), 44);
    }
    assert_eq!(wait_for(&mut scq, 16).len(), 16);

    // DC: the SRQ starts empty; the DCI is RNR-blocked on the NIC thread's own timer until a
    // WQE is posted.
    let mut srq = TestSrq::new(&b, pdb, 8, 64);
    let mut dci = dci_qp(&a, pda, scq.res.cqn, 16, 3);
    dci_up(&a, dci.qpn(), 7);
    let dct = dct_qp(&b, pdb, rcq.res.cqn, srq.res.srqn, 0x99, 4);
    let num = dct_up(&b, dct, ALL_ACCESS);
    dci.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(Av::dc_ib(0x99, num, 2)), Seg::Inline(b"dc!")]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.stats().rnr_naks < 2 {
        assert!(Instant::now() < deadline, "no RNR retries");
        std::thread::yield_now();
    }
    let i = srq.post(&[(rb.addr(), 64, rb.keys.lkey)]);
    let c = wait_for(&mut rcq, 1)[0];
    assert_eq!((c.opcode(), c.wqe_counter(), c.qpn()), (cqe_opcode::RESP_SEND, i, num));
    assert_eq!(wait_for(&mut scq, 1)[0].opcode(), cqe_opcode::REQ);
    assert_eq!(&rb.read()[..3], b"dc!");
    a.quiesce();
    let s = a.stats();
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch + s.malformed_wqes, 0, "{s:?}");
}

/// A NIC thread that gets no core (paused) leaves doorbells queued; a poller's
/// `help` handles them in the order they were rung, and `quiesce` counts them.
#[test]
fn help_handles_queued_doorbells_in_order_while_the_nic_thread_is_stopped() {
    let p = threaded();
    let mut src = Buf::new(&p.a, p.pda, 3 * 8, ALL_ACCESS);
    src.fill(|i| (i / 8 + 1) as u8);
    let dst = Buf::new(&p.b, p.pdb, 8, ALL_ACCESS);
    // Declared after the buffers, so dropped (NIC threads joined) before them even
    // when an assertion fails with doorbells still queued.
    let mut p = p;
    p.a.set_thread_paused(true);
    assert!(!p.a.help(), "nothing queued");
    // Three WRITEs of 8 bytes to the same place: 1s, then 2s, then 3s.
    for k in 0..3u64 {
        p.qa.post(
            op::RDMA_WRITE,
            SIGNALED,
            [0; 4],
            &[
                Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey },
                Seg::Data { addr: src.addr() + 8 * k, len: 8, lkey: src.keys.lkey },
            ],
        );
    }
    std::thread::sleep(Duration::from_millis(20));
    let s = p.a.stats();
    assert_eq!(s.doorbells - s.doorbells_coalesced, 0, "the stopped NIC thread handled a doorbell");
    assert!(p.scq_a.poll().is_none());
    assert!(p.a.help(), "doorbells were queued");
    assert_eq!(p.a.stats().doorbells, 3);
    let c = p.scq_a.poll_all();
    assert_eq!(c.iter().map(|c| c.wqe_counter()).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(dst.read(), [3u8; 8], "the last WRITE rung is the last executed");
    // Everything sent was handled: quiesce returns with the thread still stopped.
    p.a.quiesce();
    assert!(!p.a.help());
    // Let run again, the thread handles new doorbells itself.
    p.a.set_thread_paused(false);
    p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    p.a.quiesce();
    assert_eq!(p.scq_a.expect_one().wqe_counter(), 3);
}

/// Doorbells rung after the NIC thread has parked wake it (no lost wake-up): a
/// WQE at a time, each after a pause long enough for the thread to park, waited
/// for with `quiesce` alone (which never handles work itself).
#[test]
fn a_parked_nic_thread_wakes_for_every_doorbell() {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut p = threaded();
        for i in 0..200u16 {
            if i % 8 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
            p.a.quiesce();
            assert_eq!(p.scq_a.expect_one().wqe_counter(), i);
        }
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("a doorbell was never handled (lost wake-up)");
    t.join().unwrap();
}

/// Threaded mode queues no doorbell for a QP that already has one waiting
/// (the NIC runs the send queue to its doorbell record): with the NIC thread
/// stopped, the first doorbell is queued (the queue was empty), the second
/// too (marking the QP), the next seven are coalesced (an odd number: their
/// flips of the register's half do not cancel out). Everything executes
/// in order once the queue is handled, a BlueFlame write and later plain
/// doorbells of the same register are not taken for offset mismatches (the
/// coalesced writes flipped the register's half), and later doorbells are
/// queued again once the NIC took the marked one.
#[test]
fn doorbells_behind_a_queued_one_of_the_same_qp_are_coalesced() {
    let p = threaded();
    let mut src = Buf::new(&p.a, p.pda, 16 * 8, ALL_ACCESS);
    src.fill(|i| (i / 8 + 1) as u8);
    let dst = Buf::new(&p.b, p.pdb, 16 * 8, ALL_ACCESS);
    let mut p = p;
    let write = |p: &mut Pair, k: u64, bf: bool| {
        let segs = [
            Seg::Raddr { raddr: dst.addr() + 8 * k, rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr() + 8 * k, len: 8, lkey: src.keys.lkey },
        ];
        if bf {
            p.qa.post_bf(op::RDMA_WRITE, SIGNALED, [0; 4], &segs)
        } else {
            p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &segs)
        }
    };
    p.a.set_thread_paused(true);
    for k in 0..9 {
        write(&mut p, k, false);
    }
    // Counted: the seven coalesced ones; the two queued ones once handled.
    let s = p.a.stats();
    assert_eq!((s.doorbells, s.doorbells_coalesced), (7, 7), "{s:?}");
    write(&mut p, 9, true);
    while p.a.help() {}
    let c = wait_for(&mut p.scq_a, 10);
    assert_eq!(c.iter().map(|c| c.wqe_counter()).collect::<Vec<_>>(), (0..10).collect::<Vec<u16>>());
    // The NIC took the marked doorbell: the next ones are queued again.
    p.a.set_thread_paused(false);
    for k in 10..14 {
        write(&mut p, k, false);
        p.a.quiesce();
        assert_eq!(wait_for(&mut p.scq_a, 1)[0].wqe_counter(), k as u16);
    }
    write(&mut p, 14, true);
    write(&mut p, 15, false);
    p.a.quiesce();
    assert_eq!(wait_for(&mut p.scq_a, 2).iter().map(|c| c.wqe_counter()).collect::<Vec<_>>(), [14, 15]);
    assert_eq!(dst.read(), src.read());
    let s = p.a.stats();
    assert_eq!(s.doorbells, 16, "{s:?}");
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch + s.bf_content_mismatch, 0, "{s:?}");
}

/// Two threads post to one NIC, each its own QP, a doorbell per WQE with up to
/// 12 outstanding (the first pair's CQ holds 16), so doorbells pile up and
/// coalesce while the threads' marks
/// race: every WQE executes (a doorbell relied on but not covered would leave
/// WQEs unexecuted until the 60 s deadline).
#[test]
fn two_posting_threads_coalescing_lose_no_wqe() {
    use mlx5_sim::{QpState, RcPath};
    let p = threaded();
    const N: usize = 3000;
    let dst = Buf::new(&p.b, p.pdb, 2 * 8, ALL_ACCESS);
    let mut src = Buf::new(&p.a, p.pda, 2 * 8, ALL_ACCESS);
    src.fill(|i| i as u8);
    // A second pair of QPs, on CQs of their own.
    let scq2 = TestCq::new(&p.a, 64, 64);
    let (rcq2, scq2b, rcq2b) =
        (TestCq::new(&p.a, 64, 64), TestCq::new(&p.b, 64, 64), TestCq::new(&p.b, 64, 64));
    let qa2 = TestQp::new(&p.a, p.pda, scq2.res.cqn, rcq2.res.cqn, 64, 16, 0x33);
    let qb2 = TestQp::new(&p.b, p.pdb, scq2b.res.cqn, rcq2b.res.cqn, 64, 16, 0x44);
    init_rtr_rts(
        &p.a,
        qa2.qpn(),
        RcPath { dest_qpn: qb2.qpn(), dlid: 2, ..Default::default() },
        ALL_ACCESS,
        7,
    );
    init_rtr_rts(
        &p.b,
        qb2.qpn(),
        RcPath { dest_qpn: qa2.qpn(), dlid: 1, ..Default::default() },
        ALL_ACCESS,
        7,
    );
    let Pair { a, qa, scq_a, .. } = p;
    let (laddr, lkey, raddr, rkey) = (src.addr(), src.keys.lkey, dst.addr(), dst.keys.rkey);
    let run = move |mut q: TestQp, mut cq: TestCq, k: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut posted, mut done) = (0usize, 0usize);
        while done < N {
            while posted < N && posted - done < 12 {
                q.post(
                    op::RDMA_WRITE,
                    SIGNALED,
                    [0; 4],
                    &[
                        Seg::Raddr { raddr: raddr + 8 * k, rkey },
                        Seg::Data { addr: laddr + 8 * k, len: 8, lkey },
                    ],
                );
                posted += 1;
            }
            match cq.poll() {
                Some(c) => {
                    assert_eq!(c.opcode(), cqe_opcode::REQ, "{c:?}");
                    assert_eq!(c.wqe_counter(), done as u16);
                    done += 1;
                }
                None => {
                    assert!(Instant::now() < deadline, "{done} of {N} WQEs completed: a doorbell was lost");
                    std::thread::yield_now();
                }
            }
        }
        assert_eq!(q.state(), QpState::Rts);
        (q, cq)
    };
    let t1 = std::thread::spawn(move || run(qa, scq_a, 0));
    let t2 = std::thread::spawn(move || run(qa2, scq2, 1));
    let (r1, r2) = (t1.join(), t2.join());
    let _keep = (r1.unwrap(), r2.unwrap(), rcq2, qb2, scq2b, rcq2b);
    a.quiesce();
    assert_eq!(dst.read(), src.read());
    let s = a.stats();
    assert_eq!(s.doorbells, 2 * N as u64, "{s:?}");
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch + s.malformed_wqes, 0, "{s:?}");
}

/// BlueFlame payloads wait in a fixed set of slots beside the doorbell queue:
/// more BlueFlame writes queued than there are slots (the NIC thread paused)
/// make the poster hand the queue to `help` before it reuses a slot, and every
/// write executes, in order, with no mismatch counted. (A payload taken from
/// another write's slot cannot be told from its own here: the first doorbell
/// handled runs the whole ring, so later payloads are no longer compared. The
/// unit test `fabric::tests::each_blueflame_message_finds_its_own_payload`
/// checks that.)
#[test]
fn more_blueflame_writes_than_payload_slots_all_execute() {
    const N: u64 = 150;
    let p = threaded_with(256, 16);
    let mut src = Buf::new(&p.a, p.pda, N as usize * 8, ALL_ACCESS);
    src.fill(|i| (i / 8 + 1) as u8);
    let dst = Buf::new(&p.b, p.pdb, N as usize * 8, ALL_ACCESS);
    let mut p = p;
    p.a.set_thread_paused(true);
    for k in 0..N {
        let segs = [
            Seg::Raddr { raddr: dst.addr() + 8 * k, rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr() + 8 * k, len: 8, lkey: src.keys.lkey },
        ];
        p.qa.post_bf(op::RDMA_WRITE, if k == N - 1 { SIGNALED } else { 0 }, [0; 4], &segs);
    }
    // More writes than slots: the poster made room by handling queued ones.
    assert!(p.a.stats().bf_writes > 0, "the poster helped the paused NIC");
    p.a.set_thread_paused(false);
    p.a.quiesce();
    assert_eq!(wait_for(&mut p.scq_a, 1)[0].wqe_counter(), (N - 1) as u16);
    assert_eq!(dst.read(), src.read());
    let s = p.a.stats();
    assert_eq!((s.doorbells, s.bf_writes), (N, N), "{s:?}");
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch + s.bf_content_mismatch, 0, "{s:?}");
}

/// Ends the test process if the test is not over in `secs` (a lock-order bug would
/// hang it rather than fail it): dropped at the end of the test.
fn watchdog(secs: u64) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
            eprintln!("test still running after {secs} s: deadlocked");
            std::process::exit(101);
        }
    });
    tx
}

/// The segments of an RDMA WRITE of `len` bytes from `src` + `soff` to `dst` + `doff`.
fn write_segs(src: &Buf, soff: u64, dst: &Buf, doff: u64, len: u32) -> [Seg<'static>; 2] {
    [
        Seg::Raddr { raddr: dst.addr() + doff, rkey: dst.keys.rkey },
        Seg::Data { addr: src.addr() + soff, len, lkey: src.keys.lkey },
    ]
}

/// Each host has a lock of its own. A WRITE from host 1 to host 0 while host 0 is
/// held: host 1's NIC lets its own host go (lower-numbered hosts are only ever waited
/// for that way), waits for host 0, takes both in order and executes the WQE afresh,
/// exactly once. Host 1 stays free meanwhile (its counters can be read).
#[test]
fn a_write_to_a_busy_lower_host_restarts_once_and_runs_once() {
    let _watchdog = watchdog(120);
    let mut p = threaded();
    let mut src = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    src.fill(|i| i as u8 + 1);
    let dst = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let hold = p.a.hold();
    let_the_nic_thread_park();
    // Rung with host 1's send CQ empty, so first handled in the poster's thread, which
    // waits for no host: the WRITE, needing busy host 0, is left to host 1's NIC thread.
    p.qb.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 0, &dst, 0, 64));
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.b.stats().lock_restarts == 0 {
        assert!(Instant::now() < deadline, "host 1's NIC never let its host go");
        std::thread::yield_now();
    }
    assert_eq!(dst.read(), vec![0; 64], "nothing done before host 0 was free");
    assert_eq!(p.b.stats().wqes_executed, 0);
    drop(hold);
    let c = wait_for(&mut p.scq_b, 1);
    assert_eq!(c[0].opcode(), cqe_opcode::REQ, "{c:?}");
    assert_eq!(dst.read(), src.read());
    let s = p.b.stats();
    assert_eq!((s.wqes_executed, s.lock_restarts, s.cqes_written), (1, 1, 1), "{s:?}");
    assert_eq!((s.doorbells, s.doorbells_in_poster), (1, 1), "{s:?}");
}

/// Hosts that exchange nothing do not wait for each other: with hosts 0 and 1 held
/// (as by NICs busy with each other), a WRITE from host 2 to host 3 completes.
#[test]
fn hosts_that_share_nothing_run_while_others_are_held() {
    let _watchdog = watchdog(120);
    let fabric = Fabric::new(FabricConfig { mode: ExecMode::Threaded, ..Default::default() });
    let nics: Vec<Nic> =
        (0..4u16).map(|i| fabric.add_host(HostConfig::infiniband(&format!("mlx5_{i}"), i + 1))).collect();
    let (c, d) = (&nics[2], &nics[3]);
    let (pdc, pdd) = (c.alloc_pd().unwrap(), d.alloc_pd().unwrap());
    let mut scq = TestCq::new(c, 16, 64);
    let rcq_c = TestCq::new(c, 16, 64);
    let cq_d = TestCq::new(d, 16, 64);
    let mut qc = TestQp::new(c, pdc, scq.res.cqn, rcq_c.res.cqn, 16, 16, 1);
    let qd = TestQp::new(d, pdd, cq_d.res.cqn, cq_d.res.cqn, 16, 16, 2);
    init_rtr_rts(c, qc.qpn(), RcPath { dest_qpn: qd.qpn(), dlid: 4, ..Default::default() }, ALL_ACCESS, 7);
    init_rtr_rts(d, qd.qpn(), RcPath { dest_qpn: qc.qpn(), dlid: 3, ..Default::default() }, ALL_ACCESS, 7);
    let mut src = Buf::new(c, pdc, 256, ALL_ACCESS);
    src.fill(|i| (i * 7) as u8);
    let dst = Buf::new(d, pdd, 256, ALL_ACCESS);
    let holds = (nics[0].hold(), nics[1].hold());
    qc.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 0, &dst, 0, 256));
    let cqe = wait_for(&mut scq, 1);
    assert_eq!(cqe[0].opcode(), cqe_opcode::REQ, "{cqe:?}");
    assert_eq!(dst.read(), src.read());
    drop(holds);
}

/// Two NICs writing to each other at once, from two threads: each needs the other's
/// host, so one of them (the higher-numbered) restarts whenever it finds the other
/// busy. Every WRITE runs exactly once and lands, in both directions.
#[test]
fn writes_crossing_both_ways_at_once_each_run_once() {
    let _watchdog = watchdog(120);
    const N: usize = 3000;
    let p = threaded_with(64, 64);
    let Pair { a, b, pda, pdb, scq_a, scq_b, qa, qb, fabric, .. } = p;
    let side = |me: Nic, pd_me: u32, peer: Nic, pd_peer: u32, mut q: TestQp, mut cq: TestCq, seed: u8| {
        let mut src = Buf::new(&me, pd_me, N * 8, ALL_ACCESS);
        src.fill(|i| (i as u8).wrapping_mul(31).wrapping_add(seed));
        let dst = Buf::new(&peer, pd_peer, N * 8, ALL_ACCESS);
        std::thread::spawn(move || {
            let mut outstanding = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            for i in 0..N {
                while outstanding >= 16 {
                    assert!(Instant::now() < deadline, "stalled at {i}");
                    for c in cq.poll_all() {
                        assert_eq!(c.opcode(), cqe_opcode::REQ, "{c:?}");
                        outstanding -= 1;
                    }
                    me.help();
                }
                let off = (i * 8) as u64;
                q.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, off, &dst, off, 8));
                outstanding += 1;
            }
            for c in wait_for(&mut cq, outstanding) {
                assert_eq!(c.opcode(), cqe_opcode::REQ, "{c:?}");
            }
            assert_eq!(dst.read(), src.read());
            me.stats()
        })
    };
    let ta = side(a.clone(), pda, b.clone(), pdb, qa, scq_a, 1);
    let tb = side(b.clone(), pdb, a.clone(), pda, qb, scq_b, 2);
    let (sa, sb) = (ta.join().unwrap(), tb.join().unwrap());
    for s in [sa, sb] {
        assert_eq!(s.wqes_executed, N as u64, "{s:?}");
        assert_eq!(s.doorbell_mismatch + s.malformed_wqes, 0, "{s:?}");
    }
    // Host 0's NIC never restarts: every host it needs is numbered above it.
    assert_eq!(sa.lock_restarts, 0, "{sa:?}");
    drop(fabric);
}

/// Long enough for an idle NIC thread to park (2000 spins, 16 yields): it then holds
/// nothing until a queued doorbell wakes it, so what follows does not race it.
fn let_the_nic_thread_park() {
    std::thread::sleep(Duration::from_millis(5));
}

/// A doorbell rung while nothing is queued and the driver has taken every CQE of the
/// QP's send CQ (the application waits for this work, as in a pingpong) is handled in
/// the poster's thread: the WRITE has landed and its CQE is written when the post
/// returns, with no wait. One rung while a CQE is still to be taken goes to the NIC
/// thread, and the poster stops looking (it takes the NIC's locks to look) until a
/// poller finds its CQ empty (`Nic::help`, which the front-end's poll calls).
#[test]
fn a_doorbell_the_application_waits_for_runs_in_the_posters_thread() {
    let _watchdog = watchdog(120);
    let p = threaded();
    let mut src = Buf::new(&p.a, p.pda, 4 * 8, ALL_ACCESS);
    src.fill(|i| (i / 8 + 1) as u8);
    let dst = Buf::new(&p.b, p.pdb, 4 * 8, ALL_ACCESS);
    let mut p = p;
    let in_poster = |p: &Pair| p.a.stats().doorbells_in_poster;

    let_the_nic_thread_park();
    p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 0, &dst, 0, 8));
    assert_eq!(dst.read()[..8], [1u8; 8], "landed when the post returned");
    let c = p.scq_a.poll().expect("the CQE is written when the post returns");
    assert_eq!((c.opcode(), c.wqe_counter()), (cqe_opcode::REQ, 0));
    assert_eq!(in_poster(&p), 1);

    // Its CQE not taken: the next one is the NIC thread's.
    let_the_nic_thread_park();
    p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 8, &dst, 8, 8));
    p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 16, &dst, 16, 8));
    assert_eq!(in_poster(&p), 2, "the first of the two ran in the poster's thread");
    let c = wait_for(&mut p.scq_a, 2);
    assert_eq!(c.iter().map(|c| c.wqe_counter()).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(in_poster(&p), 2, "the second, behind an untaken CQE, went to the NIC thread");

    // Every CQE taken, but no poller has found the CQ empty since: still the NIC's.
    let_the_nic_thread_park();
    p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    assert_eq!(wait_for(&mut p.scq_a, 1)[0].wqe_counter(), 3);
    assert_eq!(in_poster(&p), 2);
    // A poller that finds the CQ empty: the poster looks again.
    assert!(p.scq_a.poll().is_none());
    assert!(!p.a.help(), "nothing queued");
    let_the_nic_thread_park();
    p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 24, &dst, 24, 8));
    assert_eq!(p.scq_a.poll().map(|c| c.wqe_counter()), Some(4), "written when the post returned");
    assert_eq!(in_poster(&p), 3);
    assert_eq!(dst.read(), src.read());
    let s = p.a.stats();
    assert_eq!((s.doorbells, s.wqes_executed, s.cqes_written), (5, 5, 5), "{s:?}");
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch + s.bf_content_mismatch, 0, "{s:?}");
}

/// A BlueFlame write the application waits for runs in the poster's thread too, and
/// the register's halves keep alternating across writes handled there and queued ones
/// (taking turns here).
#[test]
fn blueflame_writes_in_the_posters_thread_and_queued_alternate_halves() {
    let _watchdog = watchdog(120);
    let p = threaded();
    let mut src = Buf::new(&p.a, p.pda, 6 * 8, ALL_ACCESS);
    src.fill(|i| (i / 8 + 1) as u8);
    let dst = Buf::new(&p.b, p.pdb, 6 * 8, ALL_ACCESS);
    let mut p = p;
    for k in 0..6u64 {
        let_the_nic_thread_park();
        p.qa.post_bf(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 8 * k, &dst, 8 * k, 8));
        let at = 8 * k as usize..8 * k as usize + 8;
        if k % 2 == 0 {
            // Every CQE taken: run in the poster's thread. Its CQE is left untaken.
            assert_eq!(dst.read()[at], [k as u8 + 1; 8], "landed when the post returned");
        } else {
            // Behind the untaken CQE: queued.
            let c = wait_for(&mut p.scq_a, 2);
            assert_eq!(c.iter().map(|c| c.wqe_counter()).collect::<Vec<_>>(), [k as u16 - 1, k as u16]);
            // A poller finds the CQ empty: the next write runs in the poster's thread.
            assert!(p.scq_a.poll().is_none());
            p.a.help();
        }
    }
    assert_eq!(dst.read(), src.read());
    let s = p.a.stats();
    assert_eq!((s.doorbells, s.bf_writes, s.doorbells_in_poster), (6, 6, 3), "{s:?}");
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch + s.bf_content_mismatch, 0, "{s:?}");
}

/// A thread that holds its own host (`Nic::hold`) and rings a doorbell does not wait
/// for itself: the poster's thread never waits for a host, so the doorbell is queued
/// and the NIC thread runs it once the host is let go.
#[test]
fn a_poster_holding_its_own_host_leaves_the_doorbell_to_the_nic_thread() {
    let _watchdog = watchdog(120);
    let p = threaded();
    let mut src = Buf::new(&p.a, p.pda, 8, ALL_ACCESS);
    src.fill(|i| i as u8 + 1);
    let dst = Buf::new(&p.b, p.pdb, 8, ALL_ACCESS);
    let mut p = p;
    let hold = p.a.hold();
    p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &write_segs(&src, 0, &dst, 0, 8));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(dst.read(), vec![0; 8], "nothing done while the host is held");
    drop(hold);
    assert_eq!(wait_for(&mut p.scq_a, 1)[0].opcode(), cqe_opcode::REQ);
    assert_eq!(dst.read(), src.read());
    let s = p.a.stats();
    assert_eq!((s.doorbells, s.doorbells_in_poster, s.wqes_executed), (1, 0, 1), "{s:?}");
}
