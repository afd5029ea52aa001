//! Every RC opcode end to end through the front-end and the simulator:
//! memory effects and every completion field the front-end reports.

mod common;
use common::*;
use mlx5::{Sge, Status, WcOpcode, WqeFlags};

#[test]
fn rdma_write_lands_and_completes() {
    let mut p = pair();
    fill(&p.a.mr, 0, 4096, 1);
    let (la, rb, rk) = (p.a.mr.addr(), p.b.mr.addr(), p.b.mr.rkey());
    p.a.qp
        .wqe_builder(11)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(rb + 100, rk)
        .unwrap()
        .sge(Sge::new(la, 4096, p.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    let c = p.a.drain();
    assert_eq!(c.len(), 1);
    let (c, e) = c[0];
    assert_eq!((e, c.status, c.opcode), (11, Status::Success, WcOpcode::RdmaWrite));
    assert_eq!((c.qpn, c.wqe_counter, c.byte_len), (p.a.qp.qpn(), 0, 4096));
    assert_eq!(bytes(&p.b.mr, 100, 4096), bytes(&p.a.mr, 0, 4096));
    assert_eq!(bytes(&p.b.mr, 0, 100), vec![0; 100], "nothing before raddr");
    assert!(p.b.drain().is_empty(), "plain WRITE consumes no receive");
}

#[test]
fn rdma_write_imm_consumes_a_receive() {
    let mut p = pair();
    fill(&p.a.mr, 0, 64, 2);
    p.b.qp.post_recv(77, &[Sge { addr: p.b.mr.addr() + 8192, len: 64, lkey: p.b.mr.lkey() }]).unwrap();
    p.a.qp
        .wqe_builder(12)
        .unwrap()
        .ctrl_rdma_write_imm(WqeFlags::SIGNALED, 0xdead_beef)
        .unwrap()
        .rdma(p.b.mr.addr(), p.b.mr.rkey())
        .unwrap()
        .sge(Sge::new(p.a.mr.addr(), 64, p.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(p.a.drain()[0].0.opcode, WcOpcode::RdmaWriteImm);
    let r = p.b.drain();
    assert_eq!(r.len(), 1);
    let (c, e) = r[0];
    assert_eq!((e, c.opcode, c.imm, c.byte_len), (77, WcOpcode::RecvRdmaImm, Some(0xdead_beef), 64));
    assert_eq!((c.src_qpn, c.slid, c.qpn), (p.a.qp.qpn(), 1, p.b.qp.qpn()));
    assert_eq!(bytes(&p.b.mr, 0, 64), bytes(&p.a.mr, 0, 64));
    assert_eq!(bytes(&p.b.mr, 8192, 64), vec![0; 64], "data goes to raddr, not the receive buffer");
}

#[test]
fn send_variants_scatter_into_receive_sges() {
    let mut p = pair();
    fill(&p.a.mr, 0, 300, 3);
    let lk = p.b.mr.lkey();
    let base = p.b.mr.addr();
    for (i, e) in [1u64, 2, 3].into_iter().enumerate() {
        let off = 0x10000 * (i as u64 + 1);
        // Three receive SGEs of 100 bytes each.
        let sges = [0, 1, 2].map(|k| Sge { addr: base + off + 0x1000 * k, len: 100, lkey: lk });
        p.b.qp.post_recv(e, &sges).unwrap();
    }
    let (la, lk_a) = (p.a.mr.addr(), p.a.mr.lkey());
    let qp = &p.a.qp;
    qp.wqe_builder(21)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .sge(Sge::new(la, 300, lk_a))
        .unwrap()
        .finish()
        .unwrap();
    qp.wqe_builder(22)
        .unwrap()
        .ctrl_send_imm(WqeFlags::SIGNALED | WqeFlags::SOLICITED, 0x0102_0304)
        .unwrap()
        .sge(Sge::new(la, 100, lk_a))
        .unwrap()
        .sge(Sge::new(la + 100, 150, lk_a))
        .unwrap()
        .finish()
        .unwrap();
    // A SEND with invalidate frees a type-2 window bound to the responder's QP.
    let bindable = p.b.pd.alloc_mr(64, mlx5::AccessFlags::ALL | mlx5::AccessFlags::MW_BIND).unwrap();
    let victim = p.b.pd.alloc_mw(mlx5::MkeyKind::Window2).unwrap();
    let bind = victim.bind(&bindable, 0, 64, mlx5::AccessFlags::REMOTE_WRITE).unwrap();
    p.b.qp.wqe_builder(99).unwrap().bind_mw(WqeFlags::SIGNALED, &bind).unwrap().finish().unwrap();
    qp.wqe_builder(23)
        .unwrap()
        .ctrl_send_inv(WqeFlags::SIGNALED, victim.rkey())
        .unwrap()
        .inline(b"invalidate!")
        .unwrap()
        .finish()
        .unwrap();
    let s: Vec<_> = p.a.drain().into_iter().map(|(c, e)| (e, c.opcode, c.status)).collect();
    assert_eq!(
        s,
        vec![
            (21, WcOpcode::Send, Status::Success),
            (22, WcOpcode::SendImm, Status::Success),
            (23, WcOpcode::SendInv, Status::Success)
        ]
    );
    let r: Vec<_> = p.b.drain().into_iter().filter(|(c, _)| c.opcode != WcOpcode::Umr).collect();
    assert_eq!(r.len(), 3);
    assert_eq!((r[0].1, r[0].0.opcode, r[0].0.byte_len, r[0].0.wqe_counter), (1, WcOpcode::Recv, 300, 0));
    assert_eq!(
        (r[1].1, r[1].0.opcode, r[1].0.imm, r[1].0.solicited),
        (2, WcOpcode::RecvImm, Some(0x0102_0304), true)
    );
    assert_eq!((r[2].1, r[2].0.opcode, r[2].0.invalidated_rkey), (3, WcOpcode::RecvInv, Some(victim.rkey())));
    // 300 bytes spread over the three 100-byte SGEs of receive 1.
    let src = bytes(&p.a.mr, 0, 300);
    for k in 0..3 {
        assert_eq!(bytes(&p.b.mr, 0x10000 + 0x1000 * k, 100), src[k * 100..k * 100 + 100]);
    }
    assert_eq!(bytes(&p.b.mr, 0x30000, 11), b"invalidate!");
}

#[test]
fn rdma_read_fetches_remote_memory() {
    let mut p = pair();
    fill(&p.b.mr, 0x2000, 512, 9);
    p.a.qp
        .wqe_builder(31)
        .unwrap()
        .ctrl_rdma_read(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(p.b.mr.addr() + 0x2000, p.b.mr.rkey())
        .unwrap()
        .sge(Sge::new(p.a.mr.addr() + 0x100, 200, p.a.mr.lkey()))
        .unwrap()
        .sge(Sge::new(p.a.mr.addr() + 0x1000, 312, p.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    let c = p.a.drain();
    assert_eq!((c[0].1, c[0].0.opcode, c[0].0.byte_len), (31, WcOpcode::RdmaRead, 512));
    let src = bytes(&p.b.mr, 0x2000, 512);
    assert_eq!(bytes(&p.a.mr, 0x100, 200), src[..200]);
    assert_eq!(bytes(&p.a.mr, 0x1000, 312), src[200..]);
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let mut p = pair();
    p.b.mr.write(0x40, &100u64.to_ne_bytes()).unwrap();
    let (ra, rk) = (p.b.mr.addr() + 0x40, p.b.mr.rkey());
    let (la, lk) = (p.a.mr.addr(), p.a.mr.lkey());
    let qp = &p.a.qp;
    qp.wqe_builder(41)
        .unwrap()
        .ctrl_atomic_fa(WqeFlags::SIGNALED, 5)
        .unwrap()
        .rdma(ra, rk)
        .unwrap()
        .result(Sge::new(la, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
    // Fails to swap (105 != 7), then swaps (105 == 105).
    for (e, cmp) in [(42, 7u64), (43, 105)] {
        qp.wqe_builder(e)
            .unwrap()
            .ctrl_atomic_cs(WqeFlags::SIGNALED | WqeFlags::FENCE, 0xcafe_f00d, cmp)
            .unwrap()
            .rdma(ra, rk)
            .unwrap()
            .result(Sge::new(la + 8 * (e - 41), 8, lk))
            .unwrap()
            .finish()
            .unwrap();
    }
    let c = p.a.drain();
    assert_eq!(
        c.iter().map(|(c, e)| (*e, c.opcode, c.byte_len)).collect::<Vec<_>>(),
        vec![(41, WcOpcode::AtomicFa, 8), (42, WcOpcode::AtomicCs, 8), (43, WcOpcode::AtomicCs, 8)]
    );
    let word = |mr: &mlx5::MemoryRegion<_>, off| u64::from_ne_bytes(bytes(mr, off, 8).try_into().unwrap());
    assert_eq!(word(&p.a.mr, 0), 100, "FA returns the old value (host order)");
    assert_eq!(word(&p.a.mr, 8), 105, "failed CS returns the current value");
    assert_eq!(word(&p.a.mr, 16), 105);
    assert_eq!(word(&p.b.mr, 0x40), 0xcafe_f00d);
}

#[test]
fn nop_completes_and_unsignaled_wqes_are_covered() {
    let mut p = pair();
    let qp = &p.a.qp;
    for e in 0..5 {
        qp.wqe_builder(e)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::NONE)
            .unwrap()
            .rdma(p.b.mr.addr(), p.b.mr.rkey())
            .unwrap()
            .inline(&[e as u8; 8])
            .unwrap()
            .finish()
            .unwrap();
    }
    qp.wqe_builder(99).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    let c = p.a.drain();
    assert_eq!(c.len(), 1, "one CQE for the signaled NOP covers the five unsignaled WRITEs");
    assert_eq!((c[0].1, c[0].0.opcode, c[0].0.wqe_counter), (99, WcOpcode::Nop, 5));
    assert_eq!(p.a.qp.sq_free(), p.a.qp.sq_wqebbs(), "all six WQEs retired");
    assert_eq!(bytes(&p.b.mr, 0, 8), vec![4; 8]);
}

#[test]
fn multi_wqebb_wqes_wrap_the_ring_many_times() {
    let mut p = pair();
    let n = p.a.qp.sq_wqebbs() as u64 * 3;
    let (la, lk, rb, rk) = (p.a.mr.addr(), p.a.mr.lkey(), p.b.mr.addr(), p.b.mr.rkey());
    fill(&p.a.mr, 0, 4096, 5);
    for e in 0..n {
        // ctrl + raddr + 4 SGEs = 6 DS = 2 WQEBBs, or inline of 100 bytes = 9 DS = 3 WQEBBs.
        let b =
            p.a.qp
                .wqe_builder(e)
                .unwrap()
                .ctrl_rdma_write(WqeFlags::SIGNALED)
                .unwrap()
                .rdma(rb + e * 16, rk)
                .unwrap();
        if e % 2 == 0 {
            b.sge(Sge::new(la, 4, lk))
                .unwrap()
                .sge(Sge::new(la + 4, 4, lk))
                .unwrap()
                .sge(Sge::new(la + 8, 4, lk))
                .unwrap()
                .sge(Sge::new(la + 12, 4, lk))
                .unwrap()
                .finish()
                .unwrap();
        } else {
            let mut d = [0u8; 100];
            p.a.mr.read(0, &mut d).unwrap();
            b.inline(&d[..16]).unwrap().finish().unwrap();
        }
        let c = p.a.drain();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].1, e);
    }
    for e in 0..n as usize {
        assert_eq!(bytes(&p.b.mr, e * 16, 16), bytes(&p.a.mr, 0, 16));
    }
}

/// `prefetch_post` is a hint: around it the queue's counters, the ring's bytes, the
/// QP's state and every completion are what they are without it. Before `activate`
/// (RESET), on an empty queue, on a full one and at every slot of the ring.
#[test]
fn prefetch_post_changes_nothing_in_any_state() {
    let (_fabric, da, _db) = mlx5::sim::two_hosts(mlx5::sim::ExecMode::Deterministic);
    let idle = Side::new(&da, &small_cfg(), mlx5::AccessFlags::ALL);
    idle.qp.prefetch_post();
    assert_eq!((idle.qp.state(), idle.qp.sq_pi()), (mlx5::QpState::Reset, 0));

    let p = pair();
    let q = &p.a.qp;
    let ring_len = q.sq_wqebbs() as usize * 64;
    // SAFETY: read only, `ring_len` bytes of the send ring.
    let ring = || unsafe { std::slice::from_raw_parts(q.sq_buf(), ring_len).to_vec() };
    let view = |q: &mlx5::RcQp<mlx5::sim::Sim, u64>| (q.sq_pi(), q.sq_free(), q.state());
    let mut want = 0u64;
    for round in 0..3 {
        // One slot at a time round the ring (NOPs take one WQEBB each)...
        for _ in 0..q.sq_wqebbs() {
            let (before, bytes) = (view(q), ring());
            q.prefetch_post();
            assert_eq!((view(q), ring()), (before, bytes), "round {round}");
            q.wqe_builder(want).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
            let c = drain(&p.a.cq);
            assert_eq!(
                c.iter().map(|&(c, e)| (c.status, e)).collect::<Vec<_>>(),
                vec![(Status::Success, want)]
            );
            want += 1;
        }
        // ...then a full queue, drained in order.
        for _ in 0..q.sq_wqebbs() {
            q.wqe_builder(want).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
            want += 1;
        }
        assert_eq!(q.sq_free(), 0);
        let (before, bytes) = (view(q), ring());
        q.prefetch_post();
        assert_eq!((view(q), ring()), (before, bytes), "full, round {round}");
        let first = want - u64::from(q.sq_wqebbs());
        let got: Vec<u64> = drain(&p.a.cq)
            .into_iter()
            .map(|(c, e)| {
                assert_eq!(c.status, Status::Success);
                e
            })
            .collect();
        assert_eq!(got, (first..want).collect::<Vec<_>>());
    }
}
