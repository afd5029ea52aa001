//! Property: random RC, DC and UD traffic between two hosts over links with random
//! faults (loss, corruption, duplication, reordering, jitter, a link-down window) and a
//! random seed, against a reference model of exactly-once execution:
//! - every signaled WQE completes exactly once: success, or (RC, DC) retries exceeded
//!   followed by flushes of everything after it on that QP, which is then in ERR;
//! - remote memory is what exactly-once execution of the successful operations gives
//!   (the one that ended in retries exceeded may or may not have executed, as on a real
//!   NIC whose ACKs were lost): each WRITE's slot holds its data or, if flushed, zeros;
//!   each counter is the sum of its successful fetch-and-adds (plus, possibly, the
//!   failed one's);
//! - WQEs rung with one doorbell (`batch`, 1 to 4 RC WQEs) travel as one train: a WQE of
//!   the train after the one that ended in retries exceeded is flushed, and may still have
//!   executed (its acknowledgement lost with the others);
//! - UD datagrams arrive at most once;
//! - the run ends in bounded simulated time.
//!
//! `PROPTEST_CASES` sets the number of scenarios (default 128).

mod common;
use common::*;
use mlx5::sim::Sim;
use mlx5::sim::{ExecMode, LinkFaults};
use mlx5::{ConnectParams, Dci, QpConfig, QpState, RcQp, Sge, Status, Syndrome, UdQp, WqeFlags};
use proptest::prelude::*;

const TIMEOUT: u8 = 3;
const RETRIES: u8 = 3;
/// Where WRITE slots start (64 bytes each), at the responder.
const SLOTS: usize = 0x10000;
/// Counters at the responder: RC at 0, DC at 8.
const RC_CTR: usize = 0;
const DC_CTR: usize = 8;

#[derive(Clone, Copy, Debug)]
enum Via {
    Rc,
    Dc,
    Ud,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// 64 bytes of pattern into the op's own slot.
    Write,
    FetchAdd(u64),
    /// 3000 bytes: three packets at the 1024-byte path MTU.
    Send,
}

fn faults() -> impl Strategy<Value = LinkFaults> {
    (0.0..0.35f64, 0.0..0.1f64, 0.0..0.3f64, 0.0..0.3f64, 0u64..5000, proptest::option::of(0u64..2_000_000))
        .prop_map(|(drop, corrupt, duplicate, reorder, jitter_ns, down)| LinkFaults {
            drop,
            corrupt,
            duplicate,
            reorder,
            reorder_ns: 4000,
            jitter_ns,
            down: down.map(|at| (at, at + 1_500_000)),
            ..LinkFaults::none()
        })
}

fn ops() -> impl Strategy<Value = Vec<(Via, Op)>> {
    let via = prop_oneof![Just(Via::Rc), Just(Via::Dc), Just(Via::Ud)];
    let op = prop_oneof![Just(Op::Write), (1u64..100).prop_map(Op::FetchAdd), Just(Op::Send)];
    proptest::collection::vec((via, op), 1..40)
}

fn u64_at(n: &Node, off: usize) -> u64 {
    let mut b = [0u8; 8];
    n.mr.read(off, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

struct Setup {
    rc: RcQp<Sim, u64>,
    rc_b: RcQp<Sim, u64>,
    dci: Dci<Sim, u64>,
    dct_num: u32,
    ud: UdQp<Sim, u64>,
    ud_b: UdQp<Sim, u64>,
    _dct: mlx5::Dct<Sim, u64>,
}

fn setup(n: &[Node]) -> Setup {
    let cfg = QpConfig { max_send_wr: 128, max_recv_wr: 128, ..QpConfig::default() };
    let params =
        ConnectParams { timeout: TIMEOUT, retry_cnt: RETRIES, rnr_retry: 7, ..ConnectParams::default() };
    let rc = n[0].ctx.create_rc_qp(&n[0].pd, &n[0].cq, &n[0].cq, &cfg).unwrap();
    let rc_b = n[1].ctx.create_rc_qp(&n[1].pd, &n[1].cq, &n[1].cq, &cfg).unwrap();
    rc.activate(&ConnectParams { remote: Some(rc_b.local_info().unwrap()), ..params.clone() }).unwrap();
    rc_b.activate(&ConnectParams { remote: Some(rc.local_info().unwrap()), ..params.clone() }).unwrap();
    let dci = n[0].ctx.create_dci(&n[0].pd, &n[0].cq, &cfg).unwrap();
    dci.activate(&params).unwrap();
    let dct = n[1]
        .ctx
        .create_dct(&n[1].pd, &n[1].cq, &n[1].srq, &QpConfig { dc_key: 7, ..QpConfig::default() })
        .unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    let ud = n[0].ctx.create_ud_qp(&n[0].pd, &n[0].cq, &n[0].cq, None, &cfg).unwrap();
    let ud_b = n[1].ctx.create_ud_qp(&n[1].pd, &n[1].cq, &n[1].cq, None, &cfg).unwrap();
    ud.activate(&ConnectParams::default()).unwrap();
    ud_b.activate(&ConnectParams::default()).unwrap();
    let dct_num = dct.dct_number().unwrap();
    Setup { rc, rc_b, dci, dct_num, ud, ud_b, _dct: dct }
}

/// Posts op `i`; an RC WQE is written without a doorbell when `unrung` (the caller rings).
fn post(s: &Setup, n: &[Node], i: usize, via: Via, op: Op, unrung: bool) {
    macro_rules! finish {
        ($b:expr) => {
            if unrung {
                $b.finish_batch()
            } else {
                $b.finish()
            }
        };
    }
    let (la, lk, rb, rk) = (n[0].mr.addr(), n[0].mr.lkey(), n[1].mr.addr(), n[1].mr.rkey());
    let e = i as u64;
    let f = WqeFlags::SIGNALED;
    let av = n[1].av(0);
    let slot = rb + (SLOTS + 64 * i) as u64;
    let src = Sge::new(la + 64 * i as u64, 64, lk);
    let big = Sge::new(la + 0x40000, 3000, lk);
    let result = Sge::new(la + 0x20000 + 8 * e, 8, lk);
    let ctr = |v: Via| rb + if matches!(v, Via::Dc) { DC_CTR } else { RC_CTR } as u64;
    match (via, op) {
        (Via::Rc, Op::Write) => {
            finish!(s
                .rc
                .wqe_builder(e)
                .unwrap()
                .ctrl_rdma_write(f)
                .unwrap()
                .rdma(slot, rk)
                .unwrap()
                .sge(src)
                .unwrap())
        }
        (Via::Rc, Op::FetchAdd(x)) => finish!(s
            .rc
            .wqe_builder(e)
            .unwrap()
            .ctrl_atomic_fa(f, x)
            .unwrap()
            .rdma(ctr(via), rk)
            .unwrap()
            .result(result)
            .unwrap()),
        (Via::Rc, Op::Send) => finish!(s.rc.wqe_builder(e).unwrap().ctrl_send(f).unwrap().sge(big).unwrap()),
        (Via::Dc, Op::Write) => s
            .dci
            .wqe_builder(e)
            .unwrap()
            .ctrl_rdma_write(f)
            .unwrap()
            .av(7, s.dct_num, &av)
            .unwrap()
            .rdma(slot, rk)
            .unwrap()
            .sge(src)
            .unwrap()
            .finish(),
        (Via::Dc, Op::FetchAdd(x)) => s
            .dci
            .wqe_builder(e)
            .unwrap()
            .ctrl_atomic_fa(f, x)
            .unwrap()
            .av(7, s.dct_num, &av)
            .unwrap()
            .rdma(ctr(via), rk)
            .unwrap()
            .result(result)
            .unwrap()
            .finish(),
        (Via::Dc, Op::Send) => s
            .dci
            .wqe_builder(e)
            .unwrap()
            .ctrl_send(f)
            .unwrap()
            .av(7, s.dct_num, &av)
            .unwrap()
            .sge(big)
            .unwrap()
            .finish(),
        // UD: every op is a SEND of 64 bytes.
        (Via::Ud, _) => {
            s.ud.wqe_builder(e)
                .unwrap()
                .ctrl_send(f)
                .unwrap()
                .datagram(&av, s.ud_b.qpn(), mlx5::DEFAULT_QKEY)
                .unwrap()
                .sge(src)
                .unwrap()
                .finish()
        }
    }
    .unwrap();
}

fn scenario(seed: u64, faults: LinkFaults, ops: &[(Via, Op)], batch: usize) -> Result<(), TestCaseError> {
    let (fabric, mut n) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let s = setup(&n);
    for i in 0..ops.len() {
        let pattern: Vec<u8> = (0..64).map(|k| (i * 64 + k) as u8 | 1).collect();
        n[0].mr.write(64 * i, &pattern).unwrap();
    }
    // Receives for every SEND (RC on its RQ, DC on the SRQ, UD with the GRH slot).
    for i in 0..ops.len() as u64 {
        s.rc_b.post_recv(i, &[Sge::new(n[1].mr.addr() + 0x80000, 4096, n[1].mr.lkey())]).unwrap();
        s.ud_b.post_recv(i, &[Sge::new(n[1].mr.addr() + 0x90000, 40 + 64, n[1].mr.lkey())]).unwrap();
    }
    for i in 0..ops.len() as u64 {
        n[1].srq.post_recv(i, &[Sge::new(n[1].mr.addr() + 0xa0000, 4096, n[1].mr.lkey())]).unwrap();
    }
    fabric.set_faults(seed, faults);
    // RC WQEs rung `batch` at a time: the doorbell (batch) each went with.
    let mut rc_batch = vec![usize::MAX; ops.len()];
    let mut rc_posted = 0;
    for (i, &(via, op)) in ops.iter().enumerate() {
        let rc = matches!(via, Via::Rc);
        post(&s, &n, i, via, op, rc);
        if rc {
            rc_batch[i] = rc_posted / batch;
            rc_posted += 1;
            if rc_posted % batch == 0 {
                s.rc.ring_sq_doorbell();
            }
        }
    }
    s.rc.ring_sq_doorbell();
    let mut done = n[0].drain();
    // Bounded simulated time: at most (retries + 1) timeouts per WQE, plus wire time.
    let per_try = (4096u64 << TIMEOUT) + 20_000;
    prop_assert!(fabric.now_ns() <= ops.len() as u64 * (u64::from(RETRIES) + 2) * per_try + 2_000_000);
    // Every signaled WQE completed exactly once.
    done.sort_by_key(|(_, e)| *e);
    prop_assert_eq!(
        done.iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        (0..ops.len() as u64).collect::<Vec<_>>()
    );
    // Per connected transport: successes, then at most one retries exceeded, then flushes.
    for (k, via) in [Via::Rc, Via::Dc].into_iter().enumerate() {
        let mut failed = false;
        // The doorbell batch of the RC WQE that ended in retries exceeded.
        let mut failed_batch = None;
        // The sum of the successful fetch-and-adds, and the WQEs that may have executed
        // (the failed one, and those of its train after it) in order: of these, a prefix
        // executed (the responder takes a train in order).
        let mut ctr = 0u64;
        let mut maybe_ops = Vec::new();
        for (i, &(v, op)) in ops.iter().enumerate() {
            if std::mem::discriminant(&v) != std::mem::discriminant(&via) {
                continue;
            }
            let st = done[i].0.status;
            let slot = bytes(&n[1].mr, SLOTS + 64 * i, 64);
            let (ok, maybe) = match st {
                Status::Success => {
                    prop_assert!(!failed, "success after the QP failed");
                    (true, false)
                }
                Status::Error(e) if e.syndrome == Syndrome::TransportRetryExceeded => {
                    prop_assert!(!failed, "two retries exceeded on one QP");
                    failed = true;
                    failed_batch = (rc_batch[i] != usize::MAX).then_some(rc_batch[i]);
                    (false, true)
                }
                Status::Error(e) if e.syndrome == Syndrome::WrFlush => {
                    prop_assert!(failed, "flush without a failed WQE before it");
                    // In the failed WQE's train: may have executed.
                    (false, failed_batch.is_some() && failed_batch == Some(rc_batch[i]))
                }
                other => return Err(TestCaseError::fail(format!("unexpected status {other:?} for op {i}"))),
            };
            match op {
                _ if maybe => maybe_ops.push((i, op)),
                Op::Write if ok => prop_assert_eq!(slot, bytes(&n[0].mr, 64 * i, 64)),
                Op::Write => prop_assert_eq!(slot, vec![0u8; 64], "a flushed WRITE wrote"),
                Op::FetchAdd(x) if ok => ctr += x,
                _ => {}
            }
        }
        let qp_state = if matches!(via, Via::Rc) { s.rc.state() } else { s.dci.state() };
        prop_assert_eq!(failed, qp_state == QpState::Err);
        let c = u64_at(&n[1], if k == 0 { RC_CTR } else { DC_CTR });
        let prefix_fits = |p: usize| {
            let mut want = ctr;
            for (j, &(i, op)) in maybe_ops.iter().enumerate() {
                let ran = j < p;
                match op {
                    Op::Write => {
                        let slot = bytes(&n[1].mr, SLOTS + 64 * i, 64);
                        let expect = if ran { bytes(&n[0].mr, 64 * i, 64) } else { vec![0u8; 64] };
                        if slot != expect {
                            return false;
                        }
                    }
                    Op::FetchAdd(x) if ran => want += x,
                    _ => {}
                }
            }
            c == want
        };
        prop_assert!(
            (0..=maybe_ops.len()).any(prefix_fits),
            "transport {k}: counter {c}, successes {ctr}: no prefix of {maybe_ops:?} executed explains memory"
        );
    }
    // UD: the sender always succeeds; each datagram arrives at most once.
    let ud_sent = ops.iter().filter(|(v, _)| matches!(v, Via::Ud)).count();
    for (i, (v, _)) in ops.iter().enumerate() {
        if matches!(v, Via::Ud) {
            prop_assert_eq!(done[i].0.status, Status::Success);
        }
    }
    let ud_got = n[1].drain().iter().filter(|(c, _)| c.qpn == s.ud_b.qpn()).count();
    prop_assert!(ud_got <= ud_sent);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_traffic_over_random_faults_executes_exactly_once(
        seed in any::<u64>(),
        f in faults(),
        ops in ops(),
        batch in 1usize..=4,
    ) {
        scenario(seed, f, &ops, batch)?;
    }
}
