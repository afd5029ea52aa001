//! Threaded mode: each NIC runs on its own thread; the test polls `op_own` concurrently from
//! other threads while the "driver" thread posts WRITEs and SENDs.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use mlx5_sim::wire::cqe_opcode;
use mlx5_sim::{ExecMode, FabricConfig};

fn threaded() -> Pair {
    Pair::with(PairOpts {
        cfg: FabricConfig { mode: ExecMode::Threaded, ..Default::default() },
        sq: 64,
        cq: 16,
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
    assert_eq!(s.wqes_executed, 2 * N as u64);
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
    p.qa.post(op::SEND, SIGNALED, [0; 4], &[Seg::Inline(b"wait")]);
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
