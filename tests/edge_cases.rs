//! Edge cases an adversary tries on the control path: sizes at and beyond the
//! device's limits, absurd capability requests over the whole `u32` / `usize`
//! range (a typed error, or an object whose promised capabilities work — never
//! a panic), and objects of one context used with another.

mod common;
use common::*;
use mlx5::sim::two_hosts;
use mlx5::sim::ExecMode;
use mlx5::sim::Sim;
use mlx5::{AccessFlags, ConnectParams, Error, QpConfig, QpState, RcQp, Sge, Status, WqeFlags};
use proptest::prelude::*;

/// The device's own `max_cqe` is a CQ size it accepts (it was refused: the
/// simulator reported 2^22 and rdma-core's `cqe + 1` rounding then exceeded it).
#[test]
fn a_cq_of_the_devices_max_cqe_is_created() {
    let (_f, a, _b) = two_hosts(ExecMode::Deterministic);
    let ctx = a.open().unwrap();
    let max = ctx.caps().max_cqe;
    assert_eq!(max, (1 << 22) - 1, "as ibv_query_device reports it on ConnectX");
    assert!(ctx.create_cq(max, |_, _: u64| {}).is_ok());
    assert!(matches!(ctx.create_cq(max + 1, |_, _: u64| {}), Err(Error::InvalidArgument(_))));
}

/// A QP of one context refuses the PD, CQs and SRQ of another context of the
/// same device, naming both contexts.
#[test]
fn objects_of_another_context_are_refused_naming_both() {
    let (_f, dev, _b) = two_hosts(ExecMode::Deterministic);
    let (c1, c2) = (dev.open().unwrap(), dev.open().unwrap());
    assert_ne!(c1.id(), c2.id());
    let pd1 = c1.alloc_pd().unwrap();
    let pd2 = c2.alloc_pd().unwrap();
    let cq1 = c1.create_cq(16, |_, _: u64| {}).unwrap();
    let cq2 = c2.create_cq(16, |_, _: u64| {}).unwrap();
    let srq2 = c2.create_srq::<u64>(&pd2, 16, 1).unwrap();
    let cfg = QpConfig::default();
    let foreign = |what| Error::ForeignObject { what, owner: c2.id(), used_with: c1.id() };
    assert_eq!(c1.create_rc_qp(&pd1, &cq2, &cq1, &cfg).err(), Some(foreign("send CQ")));
    assert_eq!(c1.create_rc_qp(&pd1, &cq1, &cq2, &cfg).err(), Some(foreign("receive CQ")));
    assert_eq!(c1.create_rc_qp(&pd2, &cq1, &cq1, &cfg).err(), Some(foreign("PD")));
    assert_eq!(c1.create_rc_qp_with_srq(&pd1, &cq1, &cq1, &srq2, &cfg).err(), Some(foreign("SRQ")));
    assert_eq!(c1.create_srq::<u64>(&pd2, 16, 1).err(), Some(foreign("PD")));
    let e = c1.create_rc_qp(&pd1, &cq2, &cq1, &cfg).unwrap_err().to_string();
    assert!(
        e.contains(&format!("context {}", c2.id())) && e.contains(&format!("context {}", c1.id())),
        "{e}"
    );
    assert!(c1.create_rc_qp(&pd1, &cq1, &cq1, &cfg).is_ok());
}

/// The first gather entry of a WQE at each limit (the post checks it with one
/// compare and leaves the errors to the general checks): a QP without a gather
/// list refuses it, 2^31 bytes are too long, 2^31 - 1 are not, an empty entry is
/// skipped, and a WRITE with the entry after its raddr segment arrives intact.
#[test]
fn the_first_gather_entry_at_each_limit() {
    let cfg = QpConfig { max_send_sge: 0, max_inline_data: 64, ..small_cfg() };
    let (p, q) = connected(&cfg).unwrap();
    let e = q.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().sge(Sge::new(
        p.a.mr.addr(),
        8,
        p.a.mr.lkey(),
    ));
    assert_eq!(e.err(), Some(Error::TooManySge { count: 1, max: 0 }));
    let (p, q) = connected(&small_cfg()).unwrap();
    let write = |len: u32| {
        q.wqe_builder(u64::from(len))
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(p.b.mr.addr(), p.b.mr.rkey())
            .unwrap()
            .sge(Sge::new(p.a.mr.addr(), len, p.a.mr.lkey()))
    };
    assert_eq!(write(1 << 31).err(), Some(Error::SgeTooLong { len: 1 << 31 }));
    assert_eq!(write(u32::MAX).err(), Some(Error::SgeTooLong { len: u64::from(u32::MAX) }));
    assert!(write((1 << 31) - 1).is_ok(), "the largest entry is accepted");
    // An empty entry is skipped: the WQE has no data segment (ds 2).
    let b = write(0).unwrap();
    let pi = q.sq_pi();
    b.finish().unwrap();
    // SAFETY: reading the WQE just posted, inside the live ring.
    let ds = unsafe {
        let d = q.sq_desc();
        *d.buf.add((pi & (d.wqe_cnt - 1)) as usize * 64 + 7) & 0x3f
    };
    assert_eq!(ds, 2, "ctrl and raddr segments only");
    let mut done = Vec::new();
    while done.is_empty() {
        p.a.cq.poll_with(4, |c, e| done.push((c.status, e)));
    }
    assert_eq!(done, vec![(Status::Success, 0)]);
    fill(&p.a.mr, 0, 40, 7);
    let want = bytes(&p.a.mr, 0, 40);
    write(40).unwrap().finish().unwrap();
    let mut done = Vec::new();
    while done.is_empty() {
        p.a.cq.poll_with(4, |c, e| done.push((c.status, e)));
    }
    assert_eq!(done, vec![(Status::Success, 40)]);
    assert_eq!(bytes(&p.b.mr, 0, 40), want);
}

/// Inline payloads around the end of the first WQEBB (the post writes them
/// there directly when the segment ends inside it, else ring-wrap aware): each
/// length from 0 to the QP's limit arrives intact as an RDMA WRITE, over many
/// laps of a small ring (so WQEs also start at the ring's last WQEBB), the pad
/// of the last DS is zero in the ring, and one byte more is a typed error.
#[test]
fn inline_payloads_at_and_across_the_first_wqebb() {
    let max = 60u32;
    let cfg = QpConfig { max_send_wr: 4, max_inline_data: max, ..small_cfg() };
    let (p, q) = connected(&cfg).unwrap();
    let mut round = 0u64;
    for _lap in 0..3 {
        for len in 0..=max as usize {
            round += 1;
            let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (round as u8) | 1).collect();
            let pi = q.sq_pi();
            q.wqe_builder(round)
                .unwrap()
                .ctrl_rdma_write(WqeFlags::SIGNALED)
                .unwrap()
                .rdma(p.b.mr.addr(), p.b.mr.rkey())
                .unwrap()
                .inline(&data)
                .unwrap()
                .finish()
                .unwrap();
            // SAFETY: reading the WQE just posted, inside the live ring.
            let (ds, pad) = unsafe {
                let d = q.sq_desc();
                let ring = d.wqe_cnt as usize * 64;
                let at = |i: usize| *d.buf.add(((pi & (d.wqe_cnt - 1)) as usize * 64 + i) % ring);
                let ds = usize::from(at(7) & 0x3f);
                let end = 32 + 4 + len;
                (ds, (end..ds * 16).map(at).collect::<Vec<u8>>())
            };
            let want_ds = if len == 0 { 2 } else { 2 + (4 + len).div_ceil(16) };
            assert_eq!(ds, want_ds, "len {len}");
            if len > 0 {
                assert!(pad.iter().all(|&b| b == 0), "len {len}: pad {pad:?}");
            }
            let mut done = Vec::new();
            while done.is_empty() {
                p.a.cq.poll_with(4, |c, e| done.push((c.status, e)));
            }
            assert_eq!(done, vec![(Status::Success, round)], "len {len}");
            assert_eq!(bytes(&p.b.mr, 0, len), data, "len {len}");
        }
    }
    let e = q
        .wqe_builder(0)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(p.b.mr.addr(), p.b.mr.rkey())
        .unwrap()
        .inline(&[1; 61]);
    assert_eq!(e.err(), Some(Error::InlineTooLarge { len: 61, max: 60 }));
}

/// Small values and values from the whole `u32` range, half and half.
fn size() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..70, 0u32..2000, any::<u32>()]
}

fn connected(cfg: &QpConfig) -> Result<(Pair, RcQp<Sim, u64>), Error> {
    let p = pair();
    let q = p.a.ctx.create_rc_qp(&p.a.pd, &p.a.cq, &p.a.cq, cfg)?;
    let peer = p.b.ctx.create_rc_qp(&p.b.pd, &p.b.cq, &p.b.cq, &small_cfg()).unwrap();
    q.activate(&ConnectParams::to(peer.local_info().unwrap()))?;
    peer.activate(&ConnectParams::to(q.local_info().unwrap())).unwrap();
    // The peer receives what the property sends.
    for i in 0..2 {
        peer.post_recv(i, &[Sge::new(p.b.mr.addr() + 0x8000 * i, 0x8000, p.b.mr.lkey())]).unwrap();
    }
    std::mem::forget(peer); // kept alive with the fabric for the test's duration
    Ok((p, q))
}

/// The body of `qp_caps_are_honoured_or_refused`, also run on the inputs that
/// once failed it.
fn check_qp_caps(
    send_wr: u32,
    recv_wr: u32,
    send_sge: u32,
    recv_sge: u32,
    inline: u32,
) -> Result<(), TestCaseError> {
    let cfg = QpConfig {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: inline,
        ..QpConfig::default()
    };
    let (mut p, q) = match connected(&cfg) {
        Ok(x) => x,
        Err(Error::CapsExceeded { .. } | Error::InvalidArgument(_)) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(format!("untyped refusal {e:?}"))),
    };
    fill(&p.a.mr, 0, 4096, 5);
    let (la, lk) = (p.a.mr.addr(), p.a.mr.lkey());
    let mut sent = Vec::new();
    // `max_send_wr` may be 1: each SEND completes before the next is posted.
    let mut done = Vec::new();
    if inline > 0 {
        let data = bytes(&p.a.mr, 0, inline.min(4096) as usize);
        prop_assert!(inline <= 4096);
        q.wqe_builder(1)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .inline(&data)
            .unwrap()
            .finish()
            .unwrap();
        sent.push(data);
        done.extend(p.a.drain());
    }
    if send_sge > 0 {
        let b = q.wqe_builder(2).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
        let mut b = b;
        for i in 0..send_sge as u64 {
            b = b.sge(Sge::new(la + i, 1, lk)).unwrap();
        }
        b.finish().unwrap();
        sent.push(bytes(&p.a.mr, 0, send_sge as usize));
        done.extend(p.a.drain());
    }
    prop_assert_eq!(done.len(), sent.len());
    prop_assert!(done.iter().all(|(c, _)| c.status == Status::Success), "{:?}", done);
    for (i, d) in sent.iter().enumerate() {
        prop_assert_eq!(&bytes(&p.b.mr, 0x8000 * i, d.len()), d, "message {} intact", i);
    }
    // The queues hold what they promised.
    for e in 0..send_wr as u64 {
        q.wqe_builder(100 + e).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
    }
    for e in 0..recv_wr as u64 {
        q.post_recv(e, &[Sge::new(la, 8, lk)]).unwrap();
    }
    Ok(())
}

/// A 1-entry send queue whose two SENDs (173 inline bytes, 16 SGEs) once were
/// posted back to back, more than the one WQE it promises.
#[test]
fn qp_caps_regression_one_send_wr() {
    check_qp_caps(1, 0, 16, 0, 173).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every QP capability over the whole `u32` range: creation is a typed error,
    /// or the QP does what it promised: a SEND with `max_inline_data` inline bytes
    /// and one with `max_send_sge` SGEs arrive intact, `max_send_wr` WQEs fit the
    /// send queue, `max_recv_wr` receives fit the receive queue.
    #[test]
    fn qp_caps_are_honoured_or_refused(
        send_wr in size(), recv_wr in size(), send_sge in size(), recv_sge in size(), inline in size(),
    ) {
        check_qp_caps(send_wr, recv_wr, send_sge, recv_sge, inline)?;
    }

    /// CQ, SRQ and MR sizes over the whole range: a typed error or a working object.
    #[test]
    fn cq_srq_and_mr_sizes_are_honoured_or_refused(
        cqe in prop_oneof![0u32..5000, any::<u32>()],
        srq_wr in size(), srq_sge in size(),
        mr_len in prop_oneof![0usize..100_000, any::<u32>().prop_map(|v| v as usize), any::<usize>()],
    ) {
        let (_f, dev, _b) = two_hosts(ExecMode::Deterministic);
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        // Large valid CQs cost 64 bytes per entry: sizes above 2^16 are only checked for refusal.
        if cqe <= 1 << 16 || cqe > ctx.caps().max_cqe {
            match ctx.create_cq(cqe, |_, _: u64| {}) {
                Ok(_) => prop_assert!(cqe >= 1 && cqe <= ctx.caps().max_cqe),
                Err(Error::InvalidArgument(_)) => prop_assert!(cqe == 0 || cqe > ctx.caps().max_cqe),
                Err(e) => return Err(TestCaseError::fail(format!("untyped CQ refusal {e:?}"))),
            }
        }
        match ctx.create_srq::<u64>(&pd, srq_wr, srq_sge) {
            Ok(srq) => {
                prop_assert!(srq.capacity() >= srq_wr);
                let mr = pd.alloc_mr(64, AccessFlags::ALL).unwrap();
                let sges: Vec<Sge> = (0..srq_sge).map(|_| Sge::new(mr.addr(), 1, mr.lkey())).collect();
                for e in 0..srq_wr as u64 {
                    srq.post_recv(e, &sges).unwrap();
                }
            }
            Err(Error::InvalidArgument(_) | Error::CapsExceeded { .. }) => {}
            Err(e) => return Err(TestCaseError::fail(format!("untyped SRQ refusal {e:?}"))),
        }
        // Only lengths a machine could back are tried for real.
        if mr_len <= 1 << 30 || mr_len > isize::MAX as usize {
            match pd.alloc_mr(mr_len, AccessFlags::ALL) {
                Ok(mr) => {
                    if mr_len > 0 {
                        mr.write(mr_len - 1, &[0xa5]).unwrap();
                        let mut b = [0u8];
                        mr.read(mr_len - 1, &mut b).unwrap();
                        prop_assert_eq!(b[0], 0xa5);
                        prop_assert!(mr.write(mr_len, &[1]).is_err(), "one past the end is refused");
                    }
                }
                Err(_) => prop_assert!(mr_len == 0 || mr_len > 1 << 30),
            }
        }
    }
}

/// A receive is refused with its reason (the post checks the QP's state, its
/// own queue and the room in one compare and sorts out a refusal afterwards):
/// An own receive queue takes as many scatter entries as its stride holds,
/// at least one, and the QP's capabilities say so: the kernel's `rq.max_gs`,
/// `stride / 16`, where the stride is `16 × max(max_recv_sge, 1)` rounded up
/// to a power of two (spec §4.1). A receive of that many entries scatters a
/// SEND in order; one more entry is refused.
#[test]
fn a_receive_queue_takes_what_its_stride_holds() {
    for (asked, held) in [(0u32, 1u32), (1, 1), (3, 4), (5, 8)] {
        let p = pair();
        let cfg = QpConfig { max_recv_wr: 4, max_recv_sge: asked, ..small_cfg() };
        let q = p.a.ctx.create_rc_qp(&p.a.pd, &p.a.cq, &p.a.cq, &cfg).unwrap();
        assert_eq!(q.caps().max_recv_sge, held, "asked {asked}");
        let peer = p.b.ctx.create_rc_qp(&p.b.pd, &p.b.cq, &p.b.cq, &small_cfg()).unwrap();
        q.activate(&ConnectParams::to(peer.local_info().unwrap())).unwrap();
        peer.activate(&ConnectParams::to(q.local_info().unwrap())).unwrap();
        let (la, lk) = (p.a.mr.addr(), p.a.mr.lkey());
        let sges: Vec<Sge> = (0..=held as u64).map(|i| Sge::new(la + 0x100 * i, 8, lk)).collect();
        assert_eq!(
            q.post_recv(1, &sges).unwrap_err(),
            Error::TooManySge { count: held + 1, max: held },
            "asked {asked}"
        );
        q.post_recv(2, &sges[..held as usize]).unwrap();
        fill(&p.b.mr, 0, 8 * held as usize, 7);
        let sent = bytes(&p.b.mr, 0, 8 * held as usize);
        peer.wqe_builder(3)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .sge(Sge::new(p.b.mr.addr(), 8 * held, p.b.mr.lkey()))
            .unwrap()
            .finish()
            .unwrap();
        let got = drain(&p.a.cq);
        assert_eq!(got.len(), 1, "asked {asked}: {got:?}");
        assert_eq!((got[0].0.status, got[0].0.byte_len, got[0].1), (Status::Success, 8 * held, 2));
        for i in 0..held as usize {
            assert_eq!(bytes(&p.a.mr, 0x100 * i, 8), sent[8 * i..8 * i + 8], "entry {i} of {held}");
        }
    }
}

/// RESET needs INIT, a full queue gives its capacity, a QP on an SRQ and a QP
/// without receives say so; entries of receives dropped by RESET are dropped.
#[test]
fn receive_posts_are_refused_with_their_reason() {
    use std::rc::Rc;
    let (_f, a, _b) = two_hosts(ExecMode::Deterministic);
    let ctx = a.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, |_, _: Rc<()>| {}).unwrap();
    let mr = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let sge = [Sge::new(mr.addr(), 64, mr.lkey())];
    let cfg = QpConfig { max_recv_wr: 8, max_recv_sge: 1, ..QpConfig::default() };
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
    let live = Rc::new(());
    let reset = |e: Error| matches!(e, Error::QpState { state: QpState::Reset, needed: QpState::Init, .. });
    assert!(reset(qp.post_recv(live.clone(), &sge).unwrap_err()));
    assert_eq!(Rc::strong_count(&live), 1, "the refused entry is dropped");
    qp.modify_to_init(&ConnectParams::default()).unwrap();
    let cap = qp.caps().max_recv_wr;
    assert!(cap >= 8);
    for _ in 0..cap {
        qp.post_recv(live.clone(), &sge).unwrap();
    }
    assert_eq!(qp.post_recv(live.clone(), &sge).unwrap_err(), Error::RqFull { capacity: cap });
    assert_eq!((qp.rq_outstanding(), Rc::strong_count(&live)), (cap, 1 + cap as usize));
    qp.reset().unwrap();
    assert_eq!((qp.rq_outstanding(), Rc::strong_count(&live)), (0, 1), "RESET dropped every entry");
    assert!(reset(qp.post_recv(live.clone(), &sge).unwrap_err()));
    qp.modify_to_init(&ConnectParams::default()).unwrap();
    qp.post_recv(live.clone(), &sge).unwrap();
    assert_eq!(qp.rq_outstanding(), 1, "open again after RESET");
    drop(qp);
    assert_eq!(Rc::strong_count(&live), 1, "destroying the QP dropped its entry");

    let srq = ctx.create_srq::<Rc<()>>(&pd, 16, 1).unwrap();
    let on_srq = ctx.create_rc_qp_with_srq(&pd, &cq, &cq, &srq, &cfg).unwrap();
    assert!(reset(on_srq.post_recv(live.clone(), &sge).unwrap_err()));
    on_srq.modify_to_init(&ConnectParams::default()).unwrap();
    let e = on_srq.post_recv(live.clone(), &sge).unwrap_err();
    assert_eq!(e, Error::InvalidArgument(mlx5::InvalidArgument::ReceivesFromSrq));
    assert!(unsafe { on_srq.rq_desc() }.is_none());

    let none = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig { max_recv_wr: 0, ..cfg }).unwrap();
    none.modify_to_init(&ConnectParams::default()).unwrap();
    let e = none.post_recv(live.clone(), &sge).unwrap_err();
    assert_eq!(e, Error::InvalidArgument(mlx5::InvalidArgument::NoReceiveQueue));
    assert_eq!(none.rq_outstanding(), 0);
    assert_eq!(Rc::strong_count(&live), 1);
}

/// A WQE is refused outside RTS (the post checks the state and the room in
/// one compare and sorts out a refusal afterwards) and on a full ring, each
/// with its reason, and the refused entry is dropped; back in RTS after RESET
/// the ring takes WQEs again.
#[test]
fn wqes_are_refused_outside_rts_and_on_a_full_ring() {
    use std::rc::Rc;
    let (_f, a, _b) = two_hosts(ExecMode::Deterministic);
    let ctx = a.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, |_, _: Rc<()>| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig { max_send_wr: 8, ..QpConfig::default() }).unwrap();
    let live = Rc::new(());
    let refused = |state: QpState| {
        let before = Rc::strong_count(&live);
        let e = qp.wqe_builder(live.clone()).err();
        assert!(
            matches!(e, Some(Error::QpState { state: s, needed: QpState::Rts, .. }) if s == state),
            "{e:?}"
        );
        assert_eq!(Rc::strong_count(&live), before, "the refused entry is dropped");
    };
    let peer = mlx5::RemoteQpInfo::ib(2, 2);
    let p = ConnectParams::to(peer);
    refused(QpState::Reset);
    qp.modify_to_init(&p).unwrap();
    refused(QpState::Init);
    qp.modify_to_rtr(&p).unwrap();
    refused(QpState::Rtr);
    qp.modify_to_rts(&p).unwrap();
    let n = qp.sq_wqebbs();
    for _ in 0..n {
        qp.wqe_builder(live.clone()).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().finish_batch().unwrap();
    }
    assert_eq!(qp.wqe_builder(live.clone()).err(), Some(Error::SqFull { needed: 1, free: 0 }));
    assert_eq!(Rc::strong_count(&live), 1 + n as usize);
    qp.reset().unwrap();
    assert_eq!(Rc::strong_count(&live), 1, "RESET dropped the posted entries");
    refused(QpState::Reset);
    qp.modify_to_init(&p).unwrap();
    qp.modify_to_rtr(&p).unwrap();
    qp.modify_to_rts(&p).unwrap();
    qp.wqe_builder(live.clone()).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().finish_batch().unwrap();
    assert_eq!(qp.sq_free(), n - 1, "open again in RTS");
    qp.modify_to_error().unwrap();
    refused(QpState::Err);
    drop(qp);
    assert_eq!(Rc::strong_count(&live), 1);
}
