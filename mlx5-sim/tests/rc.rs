//! End-to-end RC scenarios in deterministic mode: every opcode, wrap-around, inline,
//! multi-SGE, CQE fields and the owner bit across a CQ wrap (spec §1–§6).

mod common;

use common::*;
use mlx5_sim::wire::cqe_opcode;
use mlx5_sim::{AtomicEndianness, ExecMode, Fabric, FabricConfig, HostConfig, NicStats, RcPath};

#[test]
fn rdma_write_lands_and_req_cqe_has_every_field() {
    let mut p = Pair::new();
    let mut src = Buf::new(&p.a, p.pda, 4096, ALL_ACCESS);
    src.fill(|i| (i * 7) as u8);
    let dst = Buf::new(&p.b, p.pdb, 8192, ALL_ACCESS);
    let idx = p.qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[
            Seg::Raddr { raddr: dst.addr() + 100, rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr(), len: 4096, lkey: src.keys.lkey },
        ],
    );
    let got = dst.read();
    assert_eq!(&got[100..4196], &src.read()[..]);
    assert!(got[..100].iter().all(|&b| b == 0) && got[4196..].iter().all(|&b| b == 0));
    let c = p.scq_a.expect_one();
    let v = c.cqe();
    assert_eq!(c.opcode(), cqe_opcode::REQ);
    assert_eq!(c.owner(), 0);
    assert_eq!(v.srqn_uidx(), 0x11);
    assert_eq!(v.byte_cnt(), 4096);
    assert_eq!(v.sop_drop_qpn(), (0x08 << 24) | p.qa.qpn());
    assert_eq!(v.wqe_counter(), idx);
    assert_eq!(v.imm_inval_pkey(), [0; 4]);
    assert!(v.timestamp() > 0);
    assert!(p.rcq_b.poll().is_none(), "plain WRITE makes no responder CQE");
    let s = p.a.stats();
    assert_eq!(s.doorbells, 1);
    assert_eq!(s.wqes_executed, 1);
    assert_eq!(s.cqes_written, 1);
    assert_eq!(s.doorbell_mismatch + s.bf_offset_mismatch, 0);
}

#[test]
fn write_imm_consumes_a_receive_and_reports_imm_se_source() {
    let mut p = Pair::new();
    let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let rbuf = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let rc = p.qb.post_recv(&[(rbuf.addr(), 64, rbuf.keys.lkey)]);
    p.qa.post(
        op::RDMA_WRITE_IMM,
        SIGNALED | 0x02,
        [0x12, 0x34, 0x56, 0x78],
        &[
            Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr(), len: 48, lkey: src.keys.lkey },
        ],
    );
    let r = p.rcq_b.expect_one();
    let v = r.cqe();
    assert_eq!(r.opcode(), cqe_opcode::RESP_WR_IMM);
    assert!(v.se());
    assert_eq!(v.imm_inval_pkey(), [0x12, 0x34, 0x56, 0x78]);
    assert_eq!(v.byte_cnt(), 48);
    assert_eq!(v.flags_rqpn() & 0xff_ffff, p.qa.qpn());
    assert_eq!(v.slid(), 1);
    assert_eq!(v.srqn_uidx(), 0x22);
    assert_eq!(v.sop_drop_qpn(), p.qb.qpn());
    assert_eq!(v.wqe_counter(), rc);
    assert_eq!(p.scq_a.expect_one().cqe().byte_cnt(), 48);
}

#[test]
fn send_multi_sge_both_sides_and_send_imm_and_send_inv() {
    let mut p = Pair::new();
    let mut src = Buf::new(&p.a, p.pda, 300, ALL_ACCESS);
    src.fill(|i| i as u8);
    let r1 = Buf::new(&p.b, p.pdb, 100, 1);
    let r2 = Buf::new(&p.b, p.pdb, 300, 1);
    // Receive with two SGEs; stride 64 holds 4 entries, so there is a terminator.
    let c0 = p.qb.post_recv(&[(r1.addr(), 100, r1.keys.lkey), (r2.addr(), 300, r2.keys.lkey)]);
    let idx = p.qa.post(
        op::SEND,
        SIGNALED,
        [0; 4],
        &[
            Seg::Data { addr: src.addr(), len: 50, lkey: src.keys.lkey },
            Seg::Data { addr: src.addr() + 50, len: 0, lkey: 0xdead }, // zero length: 0 bytes
            Seg::Data { addr: src.addr() + 100, len: 200, lkey: src.keys.lkey },
        ],
    );
    let mut expect = src.read()[..50].to_vec();
    expect.extend_from_slice(&src.read()[100..300]);
    let mut got = r1.read();
    got.extend_from_slice(&r2.read()[..150]);
    assert_eq!(got, expect);
    let r = p.rcq_b.expect_one();
    assert_eq!(r.opcode(), cqe_opcode::RESP_SEND);
    assert_eq!(r.cqe().byte_cnt(), 250);
    assert_eq!(r.cqe().wqe_counter(), c0);
    assert_eq!(r.cqe().imm_inval_pkey(), [0; 4]);
    assert!(!r.cqe().se());
    let s = p.scq_a.expect_one();
    assert_eq!(s.wqe_opcode(), op::SEND);
    assert_eq!(s.wqe_counter(), idx);

    let c1 = p.qb.post_recv(&[(r1.addr(), 100, r1.keys.lkey)]);
    p.qa.post(op::SEND_IMM, SIGNALED | 2, [0xde, 0xad, 0xbe, 0xef], &[Seg::Inline(b"hello")]);
    let r = p.rcq_b.expect_one();
    assert_eq!(r.opcode(), cqe_opcode::RESP_SEND_IMM);
    assert_eq!(r.cqe().imm_inval_pkey(), [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(r.cqe().wqe_counter(), c1);
    assert!(r.cqe().se());
    assert_eq!(&r1.read()[..5], b"hello");

    // SEND with invalidate: of a type-2 window B bound to its QP (a UMR, §3.7).
    let win = Buf::new(&p.b, p.pdb, 64, 1 | 0x10); // LOCAL_WRITE | MW_BIND
    let mw = p.b.alloc_mkey(p.pdb, mlx5_sim::MkeyKind::Mw2).unwrap();
    let rkey = mw + 1;
    let segs = umr_bind2(p.qb.qpn(), rkey, win.keys.lkey, win.addr(), 64, 0x20);
    p.qb.post(0x25, SIGNALED, mw.to_be_bytes(), &segs);
    assert_eq!(p.scq_b.expect_one().wqe_opcode(), 0x25);
    assert_eq!(p.b.mkey_state(mw), Some((rkey, true)));
    let c2 = p.qb.post_recv(&[(r1.addr(), 100, r1.keys.lkey)]);
    p.qa.post(op::SEND_INVAL, 0, rkey.to_be_bytes(), &[Seg::Inline(b"xy")]);
    let r = p.rcq_b.expect_one();
    assert_eq!(r.opcode(), cqe_opcode::RESP_SEND_INV);
    assert_eq!(r.cqe().imm_inval_pkey(), rkey.to_be_bytes());
    assert_eq!(r.cqe().wqe_counter(), c2);
    assert_eq!(p.scq_a.poll_all().len(), 1, "SEND_INV was unsignaled");
    assert_eq!(p.b.mkey_state(mw), Some((rkey, false)), "the window is free");
}

#[test]
fn rdma_read_scatters_into_two_sges() {
    let mut p = Pair::new();
    let mut remote = Buf::new(&p.b, p.pdb, 512, ALL_ACCESS);
    remote.fill(|i| (255 - i % 256) as u8);
    let l1 = Buf::new(&p.a, p.pda, 200, 1);
    let l2 = Buf::new(&p.a, p.pda, 312, 1);
    p.qa.post(
        op::RDMA_READ,
        SIGNALED,
        [0; 4],
        &[
            Seg::Raddr { raddr: remote.addr(), rkey: remote.keys.rkey },
            Seg::Data { addr: l1.addr(), len: 200, lkey: l1.keys.lkey },
            Seg::Data { addr: l2.addr(), len: 312, lkey: l2.keys.lkey },
        ],
    );
    let mut got = l1.read();
    got.extend(l2.read());
    assert_eq!(got, remote.read());
    let c = p.scq_a.expect_one();
    assert_eq!(c.cqe().byte_cnt(), 512);
    assert_eq!(c.wqe_opcode(), op::RDMA_READ);
}

fn atomics(endian: AtomicEndianness) {
    let mut p = Pair::with(PairOpts {
        cfg: FabricConfig { atomic_endianness: endian, ..Default::default() },
        ..Default::default()
    });
    let enc = |v: u64| match endian {
        AtomicEndianness::Host => v.to_ne_bytes(),
        AtomicEndianness::BigEndian => v.to_be_bytes(),
    };
    let mut remote = Buf::new(&p.b, p.pdb, 16, ALL_ACCESS);
    remote.mem[..8].copy_from_slice(&enc(41));
    let res = Buf::new(&p.a, p.pda, 16, 1);
    let fa = |p: &mut Pair, add: u64| {
        p.qa.post(
            op::ATOMIC_FA,
            SIGNALED | 0x80,
            [0; 4],
            &[
                Seg::Raddr { raddr: remote.addr(), rkey: remote.keys.rkey },
                Seg::Atomic { swap_add: add, compare: 0 },
                Seg::Data { addr: res.addr(), len: 8, lkey: res.keys.lkey },
            ],
        )
    };
    fa(&mut p, 1);
    assert_eq!(&remote.read()[..8], &enc(42));
    assert_eq!(&res.read()[..8], &enc(41));
    let c = p.scq_a.expect_one();
    assert_eq!(c.cqe().byte_cnt(), 8);
    assert_eq!(c.wqe_opcode(), op::ATOMIC_FA);
    let cs = |p: &mut Pair, swap: u64, cmp: u64| {
        p.qa.post(
            op::ATOMIC_CS,
            SIGNALED,
            [0; 4],
            &[
                Seg::Raddr { raddr: remote.addr(), rkey: remote.keys.rkey },
                Seg::Atomic { swap_add: swap, compare: cmp },
                Seg::Data { addr: res.addr() + 8, len: 8, lkey: res.keys.lkey },
            ],
        )
    };
    cs(&mut p, 0xcafef00d, 7); // compare fails: unchanged
    assert_eq!(&remote.read()[..8], &enc(42));
    assert_eq!(&res.read()[8..], &enc(42));
    cs(&mut p, 0xcafef00d, 42);
    assert_eq!(&remote.read()[..8], &enc(0xcafef00d));
    assert_eq!(&res.read()[8..], &enc(42));
    assert_eq!(p.scq_a.poll_all().len(), 2);
}

#[test]
fn atomics_host_endian() {
    atomics(AtomicEndianness::Host);
}

#[test]
fn atomics_big_endian() {
    atomics(AtomicEndianness::BigEndian);
}

#[test]
fn nop_signaled_and_unsignaled() {
    let mut p = Pair::new();
    p.qa.post(op::NOP, 0, [0; 4], &[]);
    assert!(p.scq_a.poll().is_none());
    let idx = p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    let c = p.scq_a.expect_one();
    assert_eq!(c.wqe_counter(), idx);
    assert_eq!(idx, 1);
    assert_eq!(c.wqe_opcode(), op::NOP);
    assert_eq!(c.cqe().byte_cnt(), 0);
}

#[test]
fn wqes_wrap_at_ring_end_with_sges_and_inline() {
    // 4-WQEBB ring; move pi to the last slot, then post a 5-DS SEND (wraps) and a
    // 2-WQEBB inline WRITE whose payload crosses the ring end at byte granularity.
    let mut p = Pair::with(PairOpts { sq: 4, ..Default::default() });
    for _ in 0..3 {
        p.qa.post(op::NOP, 0, [0; 4], &[]);
    }
    let mut src = Buf::new(&p.a, p.pda, 256, ALL_ACCESS);
    src.fill(|i| i as u8 ^ 0x5a);
    let rbuf = Buf::new(&p.b, p.pdb, 512, ALL_ACCESS);
    p.qb.post_recv(&[(rbuf.addr(), 512, rbuf.keys.lkey)]);
    let segs: Vec<Seg> =
        (0..4).map(|k| Seg::Data { addr: src.addr() + 64 * k, len: 64, lkey: src.keys.lkey }).collect();
    let idx = p.qa.post(op::SEND, SIGNALED, [0; 4], &segs);
    assert_eq!(idx, 3);
    assert_eq!(p.qa.pi, 5);
    assert_eq!(&rbuf.read()[..256], &src.read()[..]);
    assert_eq!(p.scq_a.expect_one().wqe_counter(), 3);
    // pi 5 → slot 1; pad to slot 3 so the inline WQE starts at the last slot.
    p.qa.post(op::NOP, 0, [0; 4], &[]);
    p.qa.post(op::NOP, 0, [0; 4], &[]);
    let payload: Vec<u8> = (0..70u8).collect();
    let dst = Buf::new(&p.b, p.pdb, 128, ALL_ACCESS);
    let idx = p.qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey }, Seg::Inline(&payload)],
    );
    assert_eq!(idx & 3, 3);
    assert_eq!(&dst.read()[..70], &payload[..]);
    assert_eq!(p.scq_a.expect_one().cqe().byte_cnt(), 70);
    assert_eq!(p.a.stats().doorbell_mismatch, 0);
}

#[test]
fn owner_bit_flips_across_cq_wrap() {
    let mut p = Pair::with(PairOpts { cq: 4, ..Default::default() });
    let mut owners = Vec::new();
    for _ in 0..10 {
        p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
        owners.push(p.scq_a.expect_one().owner());
    }
    assert_eq!(owners, [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]);
}

#[test]
fn cqe_128_bytes_puts_the_cqe_in_the_second_half() {
    let mut p = Pair::with(PairOpts { cqe_size: 128, ..Default::default() });
    let idx = p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    let c = p.scq_a.expect_one();
    assert_eq!(c.wqe_counter(), idx);
    assert_eq!(c.qpn(), p.qa.qpn());
}

#[test]
fn blueflame_and_doorbell_checks() {
    let mut p = Pair::new();
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    p.qa.post_bf(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey }, Seg::Inline(b"blueflame!")],
    );
    assert_eq!(&dst.read()[..10], b"blueflame!");
    let s = p.a.stats();
    assert_eq!((s.doorbells, s.bf_writes, s.bf_content_mismatch, s.bf_offset_mismatch), (1, 1, 0, 0));
    assert_eq!(s.doorbell_mismatch, 0);
    p.scq_a.expect_one();

    // Wrong BF offset (not toggled).
    p.qa.bf_offset ^= 256;
    p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    assert_eq!(p.a.stats().bf_offset_mismatch, 1);
    // BF content differing from the ring.
    let w = p.qa.build(op::NOP, SIGNALED, [0; 4], &[]);
    let (_, db) = p.qa.write_wqe(&w);
    p.qa.update_sq_dbr();
    let mut data = [0u8; 64];
    data[..16].copy_from_slice(&w);
    data[20] = 0xff;
    p.a.uar_write_bf(p.qa.res.uar_index, p.qa.bf_offset, &data);
    p.qa.bf_offset ^= 256;
    assert_eq!(p.a.stats().bf_content_mismatch, 1);
    // Doorbell naming the first of two WQEs instead of the last.
    let w1 = p.qa.build(op::NOP, SIGNALED, [0; 4], &[]);
    let (_, db1) = p.qa.write_wqe(&w1);
    let w2 = p.qa.build(op::NOP, SIGNALED, [0; 4], &[]);
    p.qa.write_wqe(&w2);
    p.qa.update_sq_dbr();
    p.qa.ring(db1);
    let s = p.a.stats();
    assert_eq!(s.doorbell_mismatch, 1);
    let _ = db;
    // Everything still executed from the ring.
    assert_eq!(p.scq_a.poll_all().len(), 4);
    assert_eq!(p.a.stats().bf_offset_mismatch, 1, "offset resynchronised");
}

#[test]
fn roce_paths_resolve_by_gid() {
    let f = Fabric::new(FabricConfig::default());
    let a = f.add_host(HostConfig::roce("r0", [192, 168, 1, 1], [2, 0, 0, 0, 0, 1]));
    let b = f.add_host(HostConfig::roce("r1", [192, 168, 1, 2], [2, 0, 0, 0, 0, 2]));
    assert_eq!(a.info().active_mtu, 1024);
    assert_eq!(b.info().gid[10..], [0xff, 0xff, 192, 168, 1, 2]);
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let mut cqa = TestCq::new(&a, 16, 64);
    let cqb = TestCq::new(&b, 16, 64);
    let mut qa = TestQp::new(&a, pda, cqa.res.cqn, cqa.res.cqn, 8, 0, 1);
    let qb = TestQp::new(&b, pdb, cqb.res.cqn, cqb.res.cqn, 8, 0, 2);
    let pa = RcPath { dest_qpn: qb.qpn(), dlid: 0, dgid: Some(b.info().gid), ..Default::default() };
    let pb = RcPath { dest_qpn: qa.qpn(), dlid: 0, dgid: Some(a.info().gid), ..Default::default() };
    init_rtr_rts(&a, qa.qpn(), pa, ALL_ACCESS, 7);
    init_rtr_rts(&b, qb.qpn(), pb, ALL_ACCESS, 7);
    let dst = Buf::new(&b, pdb, 8, ALL_ACCESS);
    qa.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey }, Seg::Inline(b"roce")],
    );
    assert_eq!(cqa.expect_one().opcode(), cqe_opcode::REQ);
    assert_eq!(&dst.read()[..4], b"roce");
}

#[test]
fn wqes_posted_before_rts_run_on_transition_and_ticks() {
    let f = Fabric::new(FabricConfig { mode: ExecMode::Deterministic, ..Default::default() });
    let a = f.add_host(HostConfig::infiniband("a", 1));
    let pd = a.alloc_pd().unwrap();
    let mut cq = TestCq::new(&a, 16, 64);
    let mut q = TestQp::new(&a, pd, cq.res.cqn, cq.res.cqn, 8, 0, 3);
    // Doorbell in RESET: pending, nothing executed.
    q.post(op::NOP, SIGNALED, [0; 4], &[]);
    assert!(cq.poll().is_none());
    // Loopback to itself.
    init_rtr_rts(&a, q.qpn(), RcPath { dest_qpn: q.qpn(), dlid: 1, ..Default::default() }, 0, 7);
    assert_eq!(cq.expect_one().wqe_counter(), 0);
    // Producer moved without a doorbell: the next tick runs it.
    let w = q.build(op::NOP, SIGNALED, [0; 4], &[]);
    q.write_wqe(&w);
    q.update_sq_dbr();
    assert!(cq.poll().is_none());
    a.tick();
    assert_eq!(cq.expect_one().wqe_counter(), 1);
    assert_eq!(
        a.stats(),
        NicStats { doorbells: 1, wqes_executed: 2, cqes_written: 2, doorbell_mismatch: 0, ..a.stats() }
    );
}

#[test]
fn wqe_index_wraps_past_65535() {
    let mut p = Pair::with(PairOpts { cq: 8, ..Default::default() });
    for i in 0..65540u32 {
        p.qa.post(op::NOP, if i % 4096 == 0 || i >= 65534 { SIGNALED } else { 0 }, [0; 4], &[]);
        if i % 4096 == 0 && i < 65534 {
            p.scq_a.expect_one();
        }
    }
    let v = p.scq_a.poll_all();
    let counters: Vec<u16> = v.iter().map(|c| c.wqe_counter()).collect();
    assert_eq!(counters, [65534, 65535, 0, 1, 2, 3]);
    assert_eq!(p.a.stats().malformed_wqes + p.a.stats().doorbell_mismatch, 0);
}

#[test]
fn doorbell_for_unknown_qp_or_uar_is_counted_and_ignored() {
    let mut p = Pair::new();
    let w = p.qa.build(op::NOP, SIGNALED, [0; 4], &[]);
    let (_, mut db) = p.qa.write_wqe(&w);
    p.qa.update_sq_dbr();
    db[4] ^= 0x40; // another QPN
    p.qa.ring(db);
    p.a.uar_write64(0xffff, 0, db);
    assert_eq!(p.a.stats().doorbell_mismatch, 2);
    assert!(p.scq_a.poll().is_none(), "nothing executed");
    // The next correct doorbell executes everything up to the producer.
    p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
    assert_eq!(p.scq_a.poll_all().len(), 2);
}

#[test]
fn roce_path_with_dmac_must_name_the_destination_mac() {
    for (dmac, ok) in [(Some([2, 0, 0, 0, 0, 2]), true), (Some([2, 0, 0, 0, 0, 7]), false), (None, true)] {
        let f = Fabric::new(FabricConfig::default());
        let a = f.add_host(HostConfig::roce("r0", [10, 1, 1, 1], [2, 0, 0, 0, 0, 1]));
        let b = f.add_host(HostConfig::roce("r1", [10, 1, 1, 2], [2, 0, 0, 0, 0, 2]));
        let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let mut cqa = TestCq::new(&a, 16, 64);
        let cqb = TestCq::new(&b, 16, 64);
        let mut qa = TestQp::new(&a, pda, cqa.res.cqn, cqa.res.cqn, 8, 0, 1);
        let qb = TestQp::new(&b, pdb, cqb.res.cqn, cqb.res.cqn, 8, 0, 2);
        let pa = RcPath { dest_qpn: qb.qpn(), dgid: Some(b.info().gid), dmac, sl: 3, ..Default::default() };
        let pb = RcPath {
            dest_qpn: qa.qpn(),
            dgid: Some(a.info().gid),
            dmac: Some(a.info().mac),
            ..Default::default()
        };
        init_rtr_rts(&a, qa.qpn(), pa, ALL_ACCESS, 7);
        init_rtr_rts(&b, qb.qpn(), pb, ALL_ACCESS, 7);
        let dst = Buf::new(&b, pdb, 8, ALL_ACCESS);
        let i = qa.post(
            op::RDMA_WRITE,
            SIGNALED,
            [0; 4],
            &[Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey }, Seg::Inline(b"mac")],
        );
        let c = cqa.expect_one();
        if ok {
            assert_eq!(c.opcode(), cqe_opcode::REQ, "{dmac:?}");
            assert_eq!(&dst.read()[..3], b"mac");
        } else {
            assert_eq!((c.opcode(), c.syndrome(), c.wqe_counter()), (cqe_opcode::REQ_ERR, 0x15, i));
            assert_eq!(dst.read(), [0; 8]);
            assert_eq!(qa.state(), mlx5_sim::QpState::Err);
        }
    }
}

/// PSN accounting (IB spec 9.7.1): a request takes one PSN per packet at the path MTU
/// (4096 here), at least one; a READ takes one per response packet; an atomic one. The
/// requester's `sq_psn` and the responder's `rq_psn` move together.
#[test]
fn psns_advance_by_packets_per_message() {
    let mut p = Pair::new();
    let src = Buf::new(&p.a, p.pda, 3 * 4096, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 3 * 4096, ALL_ACCESS);
    let write = |p: &mut Pair, len: u32| {
        p.qa.post(
            op::RDMA_WRITE,
            SIGNALED,
            [0; 4],
            &[
                Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey },
                Seg::Data { addr: src.addr(), len, lkey: src.keys.lkey },
            ],
        );
        assert_eq!(p.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    };
    let psns = |p: &Pair| (p.a.qp_psns(p.qa.qpn()).unwrap().0, p.b.qp_psns(p.qb.qpn()).unwrap().1);
    assert_eq!(psns(&p), (0, 0));
    write(&mut p, 4096); // one full packet
    assert_eq!(psns(&p), (1, 1));
    write(&mut p, 4097); // first + last
    assert_eq!(psns(&p), (3, 3));
    write(&mut p, 0); // a zero-length WRITE is one packet
    assert_eq!(psns(&p), (4, 4));
    p.qa.post(
        op::RDMA_READ,
        SIGNALED,
        [0; 4],
        &[
            Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr(), len: 2 * 4096 + 1, lkey: src.keys.lkey },
        ],
    );
    p.scq_a.expect_one();
    assert_eq!(psns(&p), (7, 7), "three READ response packets");
    let mut atom = Buf::new(&p.b, p.pdb, 8, ALL_ACCESS);
    atom.fill(|_| 0);
    p.qa.post(
        op::ATOMIC_FA,
        SIGNALED,
        [0; 4],
        &[
            Seg::Raddr { raddr: atom.addr(), rkey: atom.keys.rkey },
            Seg::Atomic { swap_add: 1, compare: 0 },
            Seg::Data { addr: src.addr(), len: 8, lkey: src.keys.lkey },
        ],
    );
    p.scq_a.expect_one();
    assert_eq!(psns(&p), (8, 8));
    assert_eq!(p.b.stats().psn_errors, 0);
}

/// A QP remembers the host its path led to; taken back to RESET and connected to a QP on
/// a third host, its WRITEs land there, not on the host it reached before.
#[test]
fn a_new_path_to_another_host_is_followed() {
    let mut p = Pair::new();
    let c = p.fabric.add_host(HostConfig::infiniband("mlx5_2", 3));
    let pdc = c.alloc_pd().unwrap();
    let (scq_c, rcq_c) = (TestCq::new(&c, 64, 64), TestCq::new(&c, 64, 64));
    let qc = TestQp::new(&c, pdc, scq_c.res.cqn, rcq_c.res.cqn, 8, 16, 0x33);
    init_rtr_rts(&c, qc.qpn(), RcPath { dest_qpn: p.qa.qpn(), dlid: 1, ..Default::default() }, ALL_ACCESS, 7);
    let dst_b = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let dst_c = Buf::new(&c, pdc, 64, ALL_ACCESS);
    let to_b = Seg::Raddr { raddr: dst_b.addr(), rkey: dst_b.keys.rkey };
    p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &[to_b, Seg::Inline(b"to b")]);
    assert_eq!(p.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    assert_eq!(&dst_b.read()[..4], b"to b");
    p.a.modify_qp(
        p.qa.qpn(),
        &mlx5_sim::QpModify { state: Some(mlx5_sim::QpState::Reset), ..Default::default() },
    )
    .unwrap();
    p.qa.pi = 0;
    init_rtr_rts(
        &p.a,
        p.qa.qpn(),
        RcPath { dest_qpn: qc.qpn(), dlid: 3, ..Default::default() },
        ALL_ACCESS,
        7,
    );
    let to_c = Seg::Raddr { raddr: dst_c.addr(), rkey: dst_c.keys.rkey };
    let i = p.qa.post(op::RDMA_WRITE, SIGNALED, [0; 4], &[to_c, Seg::Inline(b"to c")]);
    let done = p.scq_a.expect_one();
    assert_eq!((done.opcode(), done.wqe_counter()), (cqe_opcode::REQ, i));
    assert_eq!(&dst_c.read()[..4], b"to c");
    assert_eq!(&dst_b.read()[..5], b"to b\0", "B saw one WRITE only");
}

/// A 4096-aligned page of the "program's" memory, as an mmap of the command fd gives.
#[repr(C, align(4096))]
struct Page([u8; 4096]);

fn clock_word(p: &Page) -> u64 {
    // SAFETY: the page is 8-aligned; the NIC stores the word atomically.
    let a = unsafe { std::sync::atomic::AtomicU64::from_ptr(p.0.as_ptr() as *mut u64) };
    u64::from_be(a.load(std::sync::atomic::Ordering::Acquire))
}

/// The clock page holds the NIC's clock as mlx5's internal timer (big-endian at offset
/// 0, hence `internal_timer_h` then `_l`) from the moment it is attached, follows every
/// tick (a CQE's timestamp is never ahead of it), and is left alone once its context
/// closes.
#[test]
fn the_clock_page_follows_the_cqe_timestamps_until_its_context_closes() {
    let mut p = Pair::new();
    let src = Buf::new(&p.a, p.pda, 64, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
    let write = |p: &mut Pair| {
        p.qa.post(
            op::RDMA_WRITE,
            SIGNALED,
            [0; 4],
            &[
                Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey },
                Seg::Data { addr: src.addr(), len: 64, lkey: src.keys.lkey },
            ],
        );
        p.scq_a.expect_one().cqe().timestamp()
    };
    let ts0 = write(&mut p);
    let mut page = Box::new(Page([0xa5; 4096]));
    let ctx = p.a.open_context();
    // SAFETY: the page outlives the context (closed below, before the page is dropped).
    unsafe { p.a.attach_clock_page(ctx, page.0.as_mut_ptr()) }.unwrap();
    assert_eq!(clock_word(&page), p.a.clock(), "published when attached");
    assert!(p.a.clock() >= ts0);
    assert_eq!(page.0[8..], [0xa5; 4088][..], "only the timer's 8 bytes are written");
    for _ in 0..3 {
        let ts = write(&mut p);
        let now = clock_word(&page);
        assert_eq!(now, p.a.clock());
        assert!(ts <= now && ts > ts0, "timestamp {ts} within the published clock {now}");
    }
    // The high word is the first four bytes (internal_timer_h), as libmlx5 reads it.
    assert_eq!(u32::from_be_bytes(page.0[4..8].try_into().unwrap()) as u64, p.a.clock() & 0xffff_ffff);
    p.a.close_context(ctx).unwrap();
    let frozen = clock_word(&page);
    write(&mut p);
    assert!(p.a.clock() > frozen);
    assert_eq!(clock_word(&page), frozen, "a closed context's page is no longer written");
    // An unknown context or a misaligned page is refused.
    let mut other = Box::new(Page([0; 4096]));
    // SAFETY: refused without being attached.
    assert!(unsafe { p.a.attach_clock_page(ctx, other.0.as_mut_ptr()) }.is_err());
    let c2 = p.a.open_context();
    // SAFETY: as above.
    assert!(unsafe { p.a.attach_clock_page(c2, other.0.as_mut_ptr().add(8)) }.is_err());
}
