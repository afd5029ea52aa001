//! Property: the lean path gives the same results as the general path. The same random RC
//! traffic runs on two fabrics, one built with the lean path (the default) and one with
//! `FabricConfig::general_path_only`, both on the direct wire or both on the packet wire.
//! Both runs must end with the same memory at both ends, every CQE the same byte for byte
//! (timestamps included),
//! the same counters (the lean path's own count aside), and the same QP states and PSNs.
//!
//! The traffic mixes the lean shapes (RDMA WRITE, RDMA READ and SEND with one data
//! segment or inline data, zero-length ones included) with WQEs that take the general
//! path (two data segments, immediates, atomics), so that PSNs and ring positions carry
//! from one path to the other; and the errors each check of the lean path answers: a bad
//! lkey, a READ into memory without local write, a bad rkey, a remote address past its MR,
//! a responder without remote write or read access, a SEND longer than its receive, a SEND
//! with no receive (RNR retries exhausted, or an RNR wait a later receive ends), a
//! responder moved to ERR (no answer: retries exhausted), and a WQE of a lean opcode whose
//! inline data runs past its `ds` (malformed).

mod common;

use common::*;
use mlx5_sim::{access, FabricConfig, NicStats};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Op {
    Write {
        len: u32,
        inline: bool,
    },
    Read {
        len: u32,
    },
    Send {
        len: u32,
        inline: bool,
    },
    /// General path: a WRITE of two data segments.
    Write2 {
        len: u32,
    },
    /// General path: a SEND with immediate.
    SendImm {
        len: u32,
    },
    /// General path: fetch-and-add.
    FetchAdd {
        add: u64,
    },
    BadLkey,
    /// A READ into memory registered without local write.
    ReadIntoReadOnly,
    BadRkey,
    /// A WRITE whose last byte is past the remote MR.
    PastMr,
    /// A SEND 100 bytes longer than the receive posted for it.
    SendTooLong,
    /// A SEND with no receive posted: RNR retries run out (none allowed), or (seven
    /// allowed) the send waits, a receive is posted and the NIC's timer ticks.
    SendNoRecv,
    /// The responder QP moves to ERR; the next request gets no answer.
    ResponderErr,
    /// A WRITE whose inline segment claims 64 bytes in a WQE of 3 DS.
    Malformed,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u32..3000, any::<bool>()).prop_map(|(len, inline)| Op::Write { len, inline: inline && len <= 200 }),
        5 => (0u32..3000).prop_map(|len| Op::Read { len }),
        6 => (0u32..3000, any::<bool>()).prop_map(|(len, inline)| Op::Send { len, inline: inline && len <= 200 }),
        2 => (0u32..2000).prop_map(|len| Op::Write2 { len }),
        2 => (0u32..2000).prop_map(|len| Op::SendImm { len }),
        1 => any::<u64>().prop_map(|add| Op::FetchAdd { add }),
        1 => Just(Op::BadLkey),
        1 => Just(Op::ReadIntoReadOnly),
        1 => Just(Op::BadRkey),
        1 => Just(Op::PastMr),
        1 => Just(Op::SendTooLong),
        1 => Just(Op::SendNoRecv),
        1 => Just(Op::ResponderErr),
        1 => Just(Op::Malformed),
    ]
}

/// The responder's access flags: all, or all but remote write, or all but remote read.
fn responder_access() -> impl Strategy<Value = u32> {
    let all = ALL_ACCESS & !access::LOCAL_WRITE;
    prop_oneof![6 => Just(all), 1 => Just(all & !access::REMOTE_WRITE), 1 => Just(all & !access::REMOTE_READ)]
}

/// What a run leaves behind.
#[derive(Debug, PartialEq)]
struct Transcript {
    /// CQEs of A's send and receive CQs and B's, in order, timestamps and all.
    cqes: [Vec<[u8; 64]>; 4],
    a_mem: Vec<u8>,
    b_mem: Vec<u8>,
    stats: (NicStats, NicStats),
    states: String,
    psns: ((u32, u32), (u32, u32)),
}

struct Setup {
    acc_b: u32,
    rnr_retry: u8,
    /// Every message on the packet wire (`Fabric::set_packet_wire`).
    packet_wire: bool,
}

/// Runs `ops` on a fresh pair, lean path on or off; returns the transcript and how many
/// WQEs took the lean path.
fn run(ops: &[(Op, bool)], s: &Setup, lean: bool) -> (Transcript, u64) {
    let cfg = FabricConfig { general_path_only: !lean, ..FabricConfig::default() };
    let mut p =
        Pair::with(PairOpts { cfg, sq: 64, acc_b: s.acc_b, rnr_retry: s.rnr_retry, ..PairOpts::default() });
    p.fabric.set_packet_wire(s.packet_wire);
    let mut src = Buf::new(&p.a, p.pda, 8192, ALL_ACCESS);
    src.fill(|i| (i * 7 + 3) as u8);
    let ro = Buf::new(&p.a, p.pda, 4096, access::REMOTE_READ);
    let mut dst = Buf::new(&p.b, p.pdb, 8192, ALL_ACCESS);
    dst.fill(|i| (i * 13 + 1) as u8);
    let rbuf = Buf::new(&p.b, p.pdb, 4096, ALL_ACCESS);
    let mut cqes: [Vec<[u8; 64]>; 4] = Default::default();
    for (i, &(op, signaled)) in ops.iter().enumerate() {
        let ce = if signaled { SIGNALED } else { 0 };
        let at = (i as u64 * 64) % 4096;
        let remote = Seg::Raddr { raddr: dst.addr() + at, rkey: dst.keys.rkey };
        let local =
            |len: u32| Seg::Data { addr: src.addr() + (i as u64 * 8) % 1024, len, lkey: src.keys.lkey };
        let inline: Vec<u8> = (0..256).map(|k| (k as u8).wrapping_mul(i as u8 | 1)).collect();
        let qa = &mut p.qa;
        match op {
            Op::Write { len, inline: true } => {
                qa.post(op::RDMA_WRITE, ce, [0; 4], &[remote, Seg::Inline(&inline[..len as usize])]);
            }
            Op::Write { len, .. } => {
                qa.post(op::RDMA_WRITE, ce, [0; 4], &[remote, local(len)]);
            }
            Op::Read { len } => {
                let sink = Seg::Data { addr: src.addr() + 4096, len, lkey: src.keys.lkey };
                qa.post(op::RDMA_READ, ce, [0; 4], &[remote, sink]);
            }
            Op::Send { len, inline: in_wqe } => {
                p.qb.post_recv(&[(rbuf.addr(), 4096, rbuf.keys.lkey)]);
                let data = if in_wqe { Seg::Inline(&inline[..len as usize]) } else { local(len) };
                qa.post(op::SEND, ce, [0; 4], &[data]);
            }
            Op::Write2 { len } => {
                let second = Seg::Data { addr: src.addr() + 2048, len: 16, lkey: src.keys.lkey };
                qa.post(op::RDMA_WRITE, ce, [0; 4], &[remote, local(len), second]);
            }
            Op::SendImm { len } => {
                p.qb.post_recv(&[(rbuf.addr(), 4096, rbuf.keys.lkey)]);
                qa.post(op::SEND_IMM, ce | 2, [9, 8, 7, i as u8], &[local(len)]);
            }
            Op::FetchAdd { add } => {
                let r = Seg::Raddr { raddr: dst.addr() + 4096 + (i as u64 % 8) * 8, rkey: dst.keys.rkey };
                let sink = Seg::Data { addr: src.addr() + 6000, len: 8, lkey: src.keys.lkey };
                qa.post(op::ATOMIC_FA, ce, [0; 4], &[r, Seg::Atomic { swap_add: add, compare: 0 }, sink]);
            }
            Op::BadLkey => {
                let bad = Seg::Data { addr: src.addr(), len: 8, lkey: 0x999 };
                qa.post(op::RDMA_WRITE, ce, [0; 4], &[remote, bad]);
            }
            Op::ReadIntoReadOnly => {
                let sink = Seg::Data { addr: ro.addr(), len: 32, lkey: ro.keys.lkey };
                qa.post(op::RDMA_READ, ce, [0; 4], &[remote, sink]);
            }
            Op::BadRkey => {
                qa.post(
                    op::RDMA_WRITE,
                    ce,
                    [0; 4],
                    &[Seg::Raddr { raddr: dst.addr(), rkey: 0x777 }, local(8)],
                );
            }
            Op::PastMr => {
                let r = Seg::Raddr { raddr: dst.addr() + 8192 - 4, rkey: dst.keys.rkey };
                qa.post(op::RDMA_WRITE, ce, [0; 4], &[r, local(8)]);
            }
            Op::SendTooLong => {
                p.qb.post_recv(&[(rbuf.addr(), 100, rbuf.keys.lkey)]);
                qa.post(op::SEND, ce, [0; 4], &[local(200)]);
            }
            Op::SendNoRecv => {
                qa.post(op::SEND, ce, [0; 4], &[local(16)]);
                if s.rnr_retry != 0 {
                    p.qb.post_recv(&[(rbuf.addr(), 4096, rbuf.keys.lkey)]);
                    p.a.tick();
                }
            }
            Op::ResponderErr => {
                let m = mlx5_sim::QpModify { state: Some(mlx5_sim::QpState::Err), ..Default::default() };
                p.b.modify_qp(p.qb.qpn(), &m).unwrap();
            }
            Op::Malformed => {
                let mut raw = [0u8; 16];
                raw[..4].copy_from_slice(&0x8000_0040u32.to_be_bytes());
                qa.post(op::RDMA_WRITE, ce, [0; 4], &[remote, Seg::Raw(raw)]);
            }
        }
        for (k, cq) in [&mut p.scq_a, &mut p.rcq_a, &mut p.scq_b, &mut p.rcq_b].into_iter().enumerate() {
            cqes[k].extend(cq.poll_all().into_iter().map(|c| c.raw));
        }
    }
    let (sa, sb) = (p.a.stats(), p.b.stats());
    let t = Transcript {
        cqes,
        a_mem: src.read(),
        b_mem: [dst.read(), rbuf.read()].concat(),
        stats: (NicStats { lean_wqes: 0, ..sa }, sb),
        states: format!("{:?} {:?}", p.qa.state(), p.qb.state()),
        psns: (p.a.qp_psns(p.qa.qpn()).unwrap(), p.b.qp_psns(p.qb.qpn()).unwrap()),
    };
    (t, sa.lean_wqes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_lean_path_gives_what_the_general_path_gives(
        ops in proptest::collection::vec((op(), any::<bool>()), 1..48),
        acc_b in responder_access(),
        rnr_retry in prop_oneof![Just(0u8), Just(7u8)],
        packet_wire in any::<bool>(),
    ) {
        let s = Setup { acc_b, rnr_retry, packet_wire };
        let (general, none) = run(&ops, &s, false);
        let (lean, _) = run(&ops, &s, true);
        prop_assert_eq!(none, 0, "general_path_only: no WQE takes the lean path");
        prop_assert_eq!(general, lean);
    }
}

/// The comparison sees what it claims to: the lean path does run (and only for its
/// shapes), its errors are the spec's, and different traffic gives different transcripts.
#[test]
fn the_lean_path_runs_and_answers_errors_as_the_spec_says() {
    let s = Setup { acc_b: ALL_ACCESS & !access::LOCAL_WRITE, rnr_retry: 0, packet_wire: false };
    let ops = [
        (Op::Write { len: 64, inline: true }, true),
        (Op::Write { len: 100, inline: false }, true),
        (Op::Read { len: 50 }, true),
        (Op::Send { len: 10, inline: false }, true),
        (Op::Write2 { len: 8 }, true),
        (Op::FetchAdd { add: 1 }, true),
    ];
    let (t, lean) = run(&ops, &s, true);
    assert_eq!(lean, 4, "the four WQEs of lean shapes");
    let on_packets = Setup { packet_wire: true, ..s };
    let (tp, lean_p) = run(&ops, &on_packets, true);
    assert_eq!(lean_p, 4, "on the packet wire as well");
    assert_eq!((tp.psns, tp.cqes[0].len()), (t.psns, 6));
    let s = Setup { packet_wire: false, ..on_packets };
    assert_eq!(t.cqes[0].iter().map(|c| c[63] >> 4).collect::<Vec<_>>(), [0; 6], "six successes");
    // 64, 100 and 50 bytes, one packet each at MTU 4096; then the SEND, the two-SGE
    // WRITE and the atomic: six PSNs at each end.
    assert_eq!((t.psns.0 .0, t.psns.1 .1), (6, 6), "{:?}", t.psns);
    let (u, _) = run(&[(Op::Write { len: 65, inline: true }, true)], &s, true);
    assert_ne!(u, run(&[(Op::Write { len: 64, inline: true }, true)], &s, true).0);

    // Errors on the lean path (requester CQE opcode 13, syndromes of spec §5.4).
    let first_error = |op: Op, s: &Setup| {
        let (t, lean) = run(&[(op, true)], s, true);
        let c = t.cqes[0][0];
        (c[63] >> 4, c[0x37], lean)
    };
    assert_eq!(first_error(Op::BadLkey, &s), (13, 0x04, 1), "local protection error");
    assert_eq!(first_error(Op::ReadIntoReadOnly, &s), (13, 0x04, 1), "local protection error");
    assert_eq!(first_error(Op::BadRkey, &s), (13, 0x13, 1), "remote access error");
    assert_eq!(first_error(Op::PastMr, &s), (13, 0x13, 1), "remote access error");
    assert_eq!(first_error(Op::SendTooLong, &s), (13, 0x12, 1), "remote invalid request");
    assert_eq!(first_error(Op::SendNoRecv, &s), (13, 0x16, 1), "RNR retries exceeded");
    assert_eq!(first_error(Op::Malformed, &s), (13, 0x02, 0), "malformed: the general path");
    let no_write = Setup {
        acc_b: ALL_ACCESS & !access::LOCAL_WRITE & !access::REMOTE_WRITE,
        rnr_retry: 0,
        packet_wire: false,
    };
    assert_eq!(
        first_error(Op::Write { len: 8, inline: false }, &no_write),
        (13, 0x12, 1),
        "remote invalid request"
    );
}
