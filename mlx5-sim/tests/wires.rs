//! Property: the two wires give the same results. The same random RC, DC and UD traffic runs over
//! the direct wire (the responder handed each whole message) and over the packet wire
//! (the network model: packets with PSNs, ACKs and NAKs; active here with no fault
//! because a capture runs). Both runs must end with the same memory at both ends, every
//! CQE the same byte for byte (timestamps aside: the packet wire runs on simulated time),
//! the same counters and the same QP states and PSNs.
//!
//! The traffic: on an RC QP and on a DCI (to a DCT receiving from an SRQ), RDMA WRITE
//! (with and without immediate), SEND (with and without immediate), RDMA READ, both
//! atomics, inline and gathered, signaled or not, and now and then a WRITE with a bad
//! rkey (a remote access error: the QP to ERR, an RC responder too, and the flushes of
//! what follows) or, on RC, a SEND with no receive posted: with no RNR retries left, RNR
//! retry exceeded; with RNR waits, the send queue stops until a later receive and a tick
//! of the NIC's timer. On a UD QP, SENDs with and without immediate. A QP's doorbell is
//! rung for every 1 to 5 WQEs (on the packet wire, RC WQEs rung together go as a train).

mod common;

use common::*;
use mlx5_sim::{access, NicStats};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Op {
    Write {
        len: u32,
        inline: bool,
    },
    WriteImm {
        len: u32,
    },
    Send {
        len: u32,
        inline: bool,
    },
    SendImm {
        len: u32,
    },
    Read {
        len: u32,
    },
    FetchAdd {
        add: u64,
    },
    CompSwap {
        compare_hit: bool,
        swap: u64,
    },
    BadRkey,
    /// A SEND that finds no receive: RNR retries (none allowed) run out.
    SendNoRecv,
}

/// Which QP sends: the RC QP, the DCI, or the UD QP (SENDs only: any other op is a SEND).
#[derive(Debug, Clone, Copy)]
enum Via {
    Rc,
    Dc,
    Ud,
}

fn via() -> impl Strategy<Value = Via> {
    prop_oneof![3 => Just(Via::Rc), 2 => Just(Via::Dc), 1 => Just(Via::Ud)]
}

const QKEY: u32 = 0x1111_1111;
const DC_KEY: u64 = 0x1122_3344_5566_7788;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..3000, any::<bool>()).prop_map(|(len, inline)| Op::Write { len, inline: inline && len <= 200 }),
        2 => (0u32..2000).prop_map(|len| Op::WriteImm { len }),
        4 => (0u32..3000, any::<bool>()).prop_map(|(len, inline)| Op::Send { len, inline: inline && len <= 200 }),
        2 => (0u32..2000).prop_map(|len| Op::SendImm { len }),
        3 => (1u32..3000).prop_map(|len| Op::Read { len }),
        2 => any::<u64>().prop_map(|add| Op::FetchAdd { add }),
        2 => (any::<bool>(), any::<u64>()).prop_map(|(compare_hit, swap)| Op::CompSwap { compare_hit, swap }),
        1 => Just(Op::BadRkey),
        1 => Just(Op::SendNoRecv),
    ]
}

/// What a run leaves behind.
#[derive(Debug, PartialEq)]
struct Transcript {
    /// CQEs of A's send and receive CQs and B's, in order, timestamps zeroed.
    cqes: [Vec<[u8; 64]>; 4],
    /// States of the DCI, the DCT and the UD QPs; the DCI's and the sending UD QP's PSNs.
    others: String,
    /// FNV-1a of each end's buffers (a mismatch prints two numbers, not 20 KiB).
    a_mem: u64,
    b_mem: u64,
    stats: (NicStats, NicStats),
    states: String,
    psns: ((u32, u32), (u32, u32)),
}

/// A WQE's segments after the ctrl segment: the address vector first, if any.
fn with_av<'a>(av: Option<Seg<'a>>, rest: &[Seg<'a>]) -> Vec<Seg<'a>> {
    av.into_iter().chain(rest.iter().copied()).collect()
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

fn masked(p: Polled) -> [u8; 64] {
    let mut r = p.raw;
    r[0x30..0x38].fill(0); // timestamp
    r
}

/// Runs `ops` on the direct wire or the packet wire; a QP's doorbell is rung once for
/// every `batch` WQEs posted to it (so that on the packet wire its RC WQEs go as trains).
/// `rnr_waits`: RC RNR retries unlimited, and the NIC's timer ticks after every WQE (a
/// SEND with no receive waits until a later receive and a tick); else none allowed.
fn run(ops: &[(Via, Op, bool)], packet_wire: bool, batch: usize, rnr_waits: bool) -> Transcript {
    let rnr_retry = if rnr_waits { 7 } else { 0 };
    let mut p = Pair::with(PairOpts { rnr_retry, sq: 64, ..PairOpts::default() });
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let capture = std::env::temp_dir().join(format!("mlx5-sim-wires-{}-{n}.pcap", std::process::id()));
    if packet_wire {
        p.fabric.start_capture(&capture).expect("capture file");
    }
    // A DCI on A to a DCT on B (receiving from an SRQ), and a UD QP on each, on the
    // pair's CQs.
    let mut dci = dci_qp(&p.a, p.pda, p.scq_a.res.cqn, 64, 0x31);
    dci_up(&p.a, dci.qpn(), 0);
    let mut srq = TestSrq::new(&p.b, p.pdb, 64, 64);
    let dct = dct_qp(&p.b, p.pdb, p.rcq_b.res.cqn, srq.res.srqn, DC_KEY, 0x42);
    let num = dct_up(&p.b, dct, ALL_ACCESS & !access::LOCAL_WRITE);
    let mut ua = ud_qp(&p.a, p.pda, p.scq_a.res.cqn, p.rcq_a.res.cqn, 64, None, 0x0a);
    let mut ub = ud_qp(&p.b, p.pdb, p.scq_b.res.cqn, p.rcq_b.res.cqn, 8, None, 0x0b);
    ud_up(&p.a, ua.qpn(), QKEY);
    ud_up(&p.b, ub.qpn(), QKEY);
    let lid_b = p.b.info().lid;
    let mut src = Buf::new(&p.a, p.pda, 8192, ALL_ACCESS);
    src.fill(|i| (i * 7 + 3) as u8);
    let mut dst = Buf::new(&p.b, p.pdb, 8192, ALL_ACCESS);
    dst.fill(|i| (i * 13 + 1) as u8);
    let rbuf = Buf::new(&p.b, p.pdb, 4096, ALL_ACCESS);
    let srq_buf = Buf::new(&p.b, p.pdb, 64 * 4096, ALL_ACCESS);
    for k in 0..48u64 {
        srq.post(&[(srq_buf.addr() + k * 4096, 4096, srq_buf.keys.lkey)]);
    }
    let mut cqes: [Vec<[u8; 64]>; 4] = Default::default();
    let data = |addr: u64, len: u32, lkey: u32| Seg::Data { addr, len, lkey };
    // Per QP (RC, DC, UD): WQEs posted since its last doorbell, and the doorbell value.
    let mut unrung: [(usize, [u8; 8]); 3] = [(0, [0; 8]); 3];
    for (i, &(via, op, signaled)) in ops.iter().enumerate() {
        let ce = if signaled { SIGNALED } else { 0 };
        let remote = Seg::Raddr { raddr: dst.addr() + (i as u64 * 64) % 4096, rkey: dst.keys.rkey };
        let local = data(src.addr() + (i as u64 * 8) % 1024, 0, src.keys.lkey);
        let with_len = |len: u32| match local {
            Seg::Data { addr, lkey, .. } => data(addr, len, lkey),
            s => s,
        };
        let inline_bytes: Vec<u8> = (0..256).map(|k| (k as u8).wrapping_mul(i as u8 | 1)).collect();
        // The QP, what its WQEs start with (a DCI's and a UD QP's address vector), and
        // the receive a message to it consumes (RC: B's RQ; DC: the SRQ, posted ahead;
        // UD: B's UD RQ).
        let av = match via {
            Via::Rc => None,
            Via::Dc => Some(Seg::Av(Av::dc_ib(DC_KEY, num, lid_b))),
            Via::Ud => Some(Seg::Av(Av::ud_ib(QKEY, ub.qpn(), lid_b))),
        };
        let op = match (via, op) {
            (Via::Ud, Op::SendImm { len }) => Op::SendImm { len },
            (Via::Ud, Op::Send { len, inline }) => Op::Send { len, inline },
            (Via::Ud, _) => Op::Send { len: (i as u32 * 97) % 2000, inline: false },
            (Via::Dc, Op::SendNoRecv) => Op::Send { len: 16, inline: false },
            (_, o) => o,
        };
        let k = via as usize;
        let qp: &mut TestQp = match via {
            Via::Rc => &mut p.qa,
            Via::Dc => &mut dci,
            Via::Ud => &mut ua,
        };
        let recv = |via: Via, qb: &mut TestQp, ub: &mut TestQp| match via {
            Via::Rc => {
                qb.post_recv(&[(rbuf.addr(), 4096, rbuf.keys.lkey)]);
            }
            Via::Ud => {
                ub.post_recv(&[(rbuf.addr(), 4096, rbuf.keys.lkey)]);
            }
            Via::Dc => {}
        };
        let db = match op {
            Op::Write { len, inline: true } => qp.post_unrung(
                op::RDMA_WRITE,
                ce,
                [0; 4],
                &with_av(av, &[remote, Seg::Inline(&inline_bytes[..len as usize])]),
            ),
            Op::Write { len, .. } => {
                qp.post_unrung(op::RDMA_WRITE, ce, [0; 4], &with_av(av, &[remote, with_len(len)]))
            }
            Op::WriteImm { len } => {
                recv(via, &mut p.qb, &mut ub);
                qp.post_unrung(
                    op::RDMA_WRITE_IMM,
                    ce,
                    [1, 2, 3, i as u8],
                    &with_av(av, &[remote, with_len(len)]),
                )
            }
            Op::Send { len, inline: true } => {
                recv(via, &mut p.qb, &mut ub);
                qp.post_unrung(
                    op::SEND,
                    ce,
                    [0; 4],
                    &with_av(av, &[Seg::Inline(&inline_bytes[..len as usize])]),
                )
            }
            Op::Send { len, .. } => {
                recv(via, &mut p.qb, &mut ub);
                qp.post_unrung(op::SEND, ce, [0; 4], &with_av(av, &[with_len(len)]))
            }
            Op::SendImm { len } => {
                recv(via, &mut p.qb, &mut ub);
                qp.post_unrung(op::SEND_IMM, ce | 2, [9, 8, 7, i as u8], &with_av(av, &[with_len(len)]))
            }
            Op::Read { len } => {
                let sink = data(src.addr() + 4096, len, src.keys.lkey);
                qp.post_unrung(op::RDMA_READ, ce, [0; 4], &with_av(av, &[remote, sink]))
            }
            Op::FetchAdd { add } => {
                let r = Seg::Raddr { raddr: dst.addr() + 4096 + (i as u64 % 8) * 8, rkey: dst.keys.rkey };
                let sink = data(src.addr() + 6000 + (i as u64 % 8) * 8, 8, src.keys.lkey);
                qp.post_unrung(
                    op::ATOMIC_FA,
                    ce,
                    [0; 4],
                    &with_av(av, &[r, Seg::Atomic { swap_add: add, compare: 0 }, sink]),
                )
            }
            Op::CompSwap { compare_hit, swap } => {
                let at = 4096 + (i % 8) * 8;
                let mut cur = [0u8; 8];
                cur.copy_from_slice(&dst.read()[at..at + 8]);
                let compare = if compare_hit { u64::from_ne_bytes(cur) } else { !u64::from_ne_bytes(cur) };
                let r = Seg::Raddr { raddr: dst.addr() + at as u64, rkey: dst.keys.rkey };
                let sink = data(src.addr() + 6000 + (i as u64 % 8) * 8, 8, src.keys.lkey);
                qp.post_unrung(
                    op::ATOMIC_CS,
                    ce,
                    [0; 4],
                    &with_av(av, &[r, Seg::Atomic { swap_add: swap, compare }, sink]),
                )
            }
            Op::BadRkey => {
                let bad = Seg::Raddr { raddr: dst.addr(), rkey: 0x777 };
                qp.post_unrung(op::RDMA_WRITE, ce, [0; 4], &with_av(av, &[bad, with_len(8)]))
            }
            Op::SendNoRecv => qp.post_unrung(op::SEND, ce, [0; 4], &with_av(av, &[with_len(16)])),
        };
        unrung[k] = (unrung[k].0 + 1, db);
        if unrung[k].0 >= batch || i + 1 == ops.len() {
            qp.ring(db);
            unrung[k].0 = 0;
        }
        if rnr_waits {
            p.a.tick();
        }
        // Every CQE taken at once: the CQs never fill.
        for (k, cq) in [&mut p.scq_a, &mut p.rcq_a, &mut p.scq_b, &mut p.rcq_b].into_iter().enumerate() {
            cqes[k].extend(cq.poll_all().into_iter().map(masked));
        }
    }
    for (k, qp) in [&mut p.qa, &mut dci, &mut ua].into_iter().enumerate() {
        if unrung[k].0 > 0 {
            qp.ring(unrung[k].1);
        }
    }
    for (k, cq) in [&mut p.scq_a, &mut p.rcq_a, &mut p.scq_b, &mut p.rcq_b].into_iter().enumerate() {
        cqes[k].extend(cq.poll_all().into_iter().map(masked));
    }
    if packet_wire {
        let packets = p.fabric.stop_capture().expect("capture");
        let _ = std::fs::remove_file(&capture);
        // The packet wire ran: every message is at least one packet.
        assert!(packets >= p.a.stats().wqes_executed.min(1), "{packets} packets captured");
    }
    Transcript {
        cqes,
        a_mem: fnv(&src.read()),
        b_mem: fnv(&[dst.read(), rbuf.read()].concat()),
        // The lean path runs on the direct wire only: its count aside.
        stats: (NicStats { lean_wqes: 0, ..p.a.stats() }, p.b.stats()),
        states: format!("{:?} {:?}", p.qa.state(), p.qb.state()),
        others: format!(
            "{:?} {:?} {:?} {:?} PSNs {:?} {:?}",
            dci.state(),
            p.b.qp_state(dct),
            ua.state(),
            ub.state(),
            p.a.qp_psns(dci.qpn()),
            p.a.qp_psns(ua.qpn()),
        ),
        psns: (p.a.qp_psns(p.qa.qpn()).unwrap(), p.b.qp_psns(p.qb.qpn()).unwrap()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn both_wires_give_the_same_results(
        ops in proptest::collection::vec((via(), op(), any::<bool>()), 1..40),
        batch in 1usize..=5,
        rnr_waits in any::<bool>(),
    ) {
        let direct = run(&ops, false, batch, rnr_waits);
        let packets = run(&ops, true, batch, rnr_waits);
        prop_assert_eq!(direct, packets);
    }
}

/// The property can fail: the runs differ where the traffic differs (a guard against a
/// comparison that sees nothing).
#[test]
fn different_traffic_gives_different_transcripts() {
    let a = run(&[(Via::Rc, Op::Write { len: 64, inline: false }, true)], false, 1, false);
    let b = run(&[(Via::Rc, Op::Write { len: 65, inline: false }, true)], true, 1, false);
    assert_ne!(a, b);
    assert_eq!(a.cqes[0].len(), 1, "one requester CQE");
    // DC and UD traffic does complete on the packet wire: a DC WRITE, a UD SEND and a DC
    // SEND, each a success CQE at A (opcode 0, REQ), and two receives at B (RESP_SEND).
    let t = run(
        &[
            (Via::Dc, Op::Write { len: 64, inline: false }, true),
            (Via::Ud, Op::Send { len: 100, inline: false }, true),
            (Via::Dc, Op::Send { len: 10, inline: true }, true),
        ],
        true,
        1,
        false,
    );
    assert_eq!(t.cqes[0].iter().map(|c| c[63] >> 4).collect::<Vec<_>>(), [0, 0, 0], "{:?}", t.others);
    assert_eq!(t.cqes[3].iter().map(|c| c[63] >> 4).collect::<Vec<_>>(), [2, 2]);
}

/// `Fabric::set_packet_wire` puts messages on the packet wire with no fault and no
/// capture: the simulated clock moves, as it does only there, and stops again when the
/// direct wire is back.
#[test]
fn the_packet_wire_can_be_asked_for_without_faults_or_capture() {
    let mut p = Pair::new();
    p.fabric.set_packet_wire(true);
    let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    assert_eq!(p.fabric.now_ns(), 0);
    p.qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[
            Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr(), len: 8, lkey: src.keys.lkey },
        ],
    );
    assert_eq!(p.scq_a.expect_one().opcode(), 0);
    assert!(p.fabric.now_ns() > 0, "the packet wire runs on simulated time");
    p.fabric.set_packet_wire(false);
    let t = p.fabric.now_ns();
    p.qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[
            Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr(), len: 8, lkey: src.keys.lkey },
        ],
    );
    assert_eq!(p.scq_a.expect_one().opcode(), 0);
    assert_eq!(p.fabric.now_ns(), t, "back on the direct wire: no simulated time");
}

/// On the packet wire, WQEs one doorbell covers go as one train: their request packets
/// back to back, one ACK for all (asked for on the last), so the simulated time is
/// shorter than one message and its ACK after another, and fewer packets travel.
#[test]
fn a_doorbell_for_several_wqes_sends_them_as_one_train() {
    let run = |one_doorbell: bool| {
        let mut p = Pair::with(PairOpts { sq: 64, ..PairOpts::default() });
        let capture =
            std::env::temp_dir().join(format!("mlx5-sim-train-{}-{one_doorbell}.pcap", std::process::id()));
        p.fabric.start_capture(&capture).expect("capture file");
        let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
        let dst = Buf::new(&p.b, p.pdb, 3 * 64, ALL_ACCESS);
        let mut db = [0u8; 8];
        for k in 0..3u64 {
            let segs = [
                Seg::Raddr { raddr: dst.addr() + 64 * k, rkey: dst.keys.rkey },
                Seg::Data { addr: src.addr(), len: 64, lkey: src.keys.lkey },
            ];
            db = p.qa.post_unrung(op::RDMA_WRITE, SIGNALED, [0; 4], &segs);
            if !one_doorbell {
                p.qa.ring(db);
            }
        }
        if one_doorbell {
            p.qa.ring(db);
        }
        let cqes = p.scq_a.poll_all();
        assert_eq!(
            cqes.iter().map(|c| (c.opcode(), c.wqe_counter())).collect::<Vec<_>>(),
            [(0, 0), (0, 1), (0, 2)]
        );
        let packets = p.fabric.stop_capture().expect("capture");
        let _ = std::fs::remove_file(&capture);
        (p.fabric.now_ns(), packets, p.b.qp_psns(p.qb.qpn()).unwrap().1)
    };
    let (train_ns, train_packets, train_psn) = run(true);
    let (one_by_one_ns, one_by_one_packets, psn) = run(false);
    assert_eq!((train_packets, one_by_one_packets), (4, 6), "three requests and one ACK, or three ACKs");
    assert!(2 * train_ns < one_by_one_ns, "{train_ns} ns as a train, {one_by_one_ns} ns one by one");
    assert_eq!((train_psn, psn), (3, 3));
}
