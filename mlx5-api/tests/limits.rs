//! Runtime limits are typed errors, raised before the offending segment is
//! written; nothing is published to the device (producer counter, doorbell
//! record, doorbell) for a WQE that failed, and the next WQE reuses its slot.

use mlx5_api::ring_only::{RingOnly, RingOnlyDevice};
use mlx5_api::{
    CompletionQueue, ConnectParams, Context, Device, Error, QpConfig, QpState, RcQp, RemoteQpInfo, Sge,
    WqeFlags,
};

struct Fx {
    dev: RingOnlyDevice,
    _ctx: Context<RingOnly>,
    _cq: CompletionQueue<RingOnly, u32>,
    qp: RcQp<RingOnly, u32>,
}

fn fixture(cfg: QpConfig, connect: bool) -> Fx {
    let dev = RingOnlyDevice::new(0x10, 256);
    let ctx = Device::<RingOnly>::new(dev.clone()).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, |_, _: u32| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
    if connect {
        qp.activate(&ConnectParams::to(RemoteQpInfo::ib(1, 1))).unwrap();
    }
    Fx { dev, _ctx: ctx, _cq: cq, qp }
}

fn small() -> QpConfig {
    QpConfig {
        max_send_wr: 4,
        max_recv_wr: 2,
        max_send_sge: 4,
        max_recv_sge: 2,
        max_inline_data: 32,
        ..QpConfig::default()
    }
}

/// Nothing was published: counters, doorbell record and doorbell untouched.
fn assert_unpublished(f: &Fx, pi: u32, doorbells: u64) {
    assert_eq!(f.qp.sq_pi(), pi);
    assert_eq!(f.qp.sq_dbrec(), pi & 0xffff);
    assert_eq!(f.dev.log().doorbells.get(), doorbells);
}

#[test]
fn sq_full_is_reported_before_writing() {
    let f = fixture(small(), true);
    let n = f.qp.sq_wqebbs();
    for e in 0..n {
        f.qp.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish().unwrap();
    }
    let before = f.qp.sq_ring_bytes();
    let err = f.qp.wqe_builder(99).err().unwrap();
    assert_eq!(err, Error::SqFull { needed: 1, free: 0 });
    assert_eq!(f.qp.sq_ring_bytes(), before, "no byte written");
    assert_unpublished(&f, n, n as u64);
}

#[test]
fn sq_full_when_a_multi_wqebb_wqe_does_not_fit() {
    let f = fixture(small(), true);
    let n = f.qp.sq_wqebbs();
    for e in 0..n - 1 {
        f.qp.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish().unwrap();
    }
    // ctrl + 3 SGEs = 1 WQEBB fits; the 4th SGE needs a second WQEBB.
    let b = f.qp.wqe_builder(7).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    let b = b
        .sge(Sge::new(0x1000, 8, 1))
        .unwrap()
        .sge(Sge::new(0x2000, 8, 1))
        .unwrap()
        .sge(Sge::new(0x3000, 8, 1))
        .unwrap();
    let err = b.sge(Sge::new(0x4000, 8, 1)).err().unwrap();
    assert_eq!(err, Error::SqFull { needed: 2, free: 1 });
    assert_unpublished(&f, n - 1, (n - 1) as u64);
}

#[test]
fn too_many_sges() {
    let f = fixture(small(), true);
    let mut b = f.qp.wqe_builder(1).unwrap().ctrl_rdma_write(WqeFlags::SIGNALED).unwrap().rdma(0, 1).unwrap();
    for i in 0..4 {
        b = b.sge(Sge::new(0x1000 * i, 16, 1)).unwrap();
    }
    assert_eq!(b.sge(Sge::new(0x9000, 16, 1)).err().unwrap(), Error::TooManySge { count: 5, max: 4 });
    assert_unpublished(&f, 0, 0);
    // The slot is reused by the next WQE.
    f.qp.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    let ring = f.qp.sq_ring_bytes();
    assert_eq!(&ring[0..8], &[0, 0, 0, 0, 0, 0, 0x10, 1], "NOP at slot 0, ds 1");
}

#[test]
fn zero_length_sges_are_skipped() {
    let f = fixture(small(), true);
    let mut b = f.qp.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    for _ in 0..10 {
        b = b.sge(Sge::new(0x1000, 0, 1)).unwrap();
    }
    b.sge(Sge::new(0x2000, 4, 1)).unwrap().finish().unwrap();
    let ring = f.qp.sq_ring_bytes();
    assert_eq!(ring[7] & 0x3f, 2, "ctrl + one data segment");
}

#[test]
fn inline_too_large() {
    let f = fixture(small(), true);
    let b = f.qp.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    assert_eq!(b.inline(&[0u8; 33]).err().unwrap(), Error::InlineTooLarge { len: 33, max: 32 });
    assert_unpublished(&f, 0, 0);
}

#[test]
fn the_largest_inline_capacity_fills_the_descriptor() {
    // The device's 1008-byte descriptors less rdma-core's RC overhead (48: ctrl,
    // raddr, atomic) leave 960 bytes: a 4-byte inline header and 956 bytes.
    let cfg = QpConfig {
        max_send_wr: 2,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 956,
        ..QpConfig::default()
    };
    let f = fixture(cfg, true);
    let data = vec![0xabu8; 957];
    // A WRITE with all 956 bytes inline: ctrl, raddr, 960 bytes of inline = 62 DS.
    f.qp.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(0, 1)
        .unwrap()
        .inline(&data[..956])
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(f.qp.sq_ring_bytes()[7] & 0x3f, 62);
    let pi = f.qp.sq_pi();
    let b = f.qp.wqe_builder(2).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    assert_eq!(b.inline(&data).err().unwrap(), Error::InlineTooLarge { len: 957, max: 956 });
    assert_unpublished(&f, pi, 1);
}

#[test]
fn oversized_inline_capacity_is_refused_at_creation() {
    let dev = RingOnlyDevice::new(1, 0);
    let ctx = Device::<RingOnly>::new(dev).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4, |_, _: u32| {}).unwrap();
    // What rdma-core would refuse with EINVAL is refused first, with the limit.
    let cfg = QpConfig { max_inline_data: 957, ..small() };
    assert_eq!(
        ctx.create_rc_qp(&pd, &cq, &cq, &cfg).err(),
        Some(Error::CapsExceeded { what: "max_inline_data", asked: 957, max: 956 })
    );
    let cfg = QpConfig { max_send_sge: 31, ..small() };
    assert_eq!(
        ctx.create_rc_qp(&pd, &cq, &cq, &cfg).err(),
        Some(Error::CapsExceeded { what: "max_send_sge", asked: 31, max: 30 })
    );
}

#[test]
fn sge_longer_than_31_bits() {
    let f = fixture(small(), true);
    let b = f.qp.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    assert_eq!(b.sge(Sge::new(0, 0x8000_0000, 1)).err().unwrap(), Error::SgeTooLong { len: 0x8000_0000 });
}

#[test]
fn posting_needs_rts() {
    let f = fixture(small(), false);
    let e = f.qp.wqe_builder(1).err().unwrap();
    assert_eq!(e, Error::QpState { qpn: f.qp.qpn(), state: QpState::Reset, needed: QpState::Rts });
    assert!(matches!(f.qp.post_recv(1, &[]), Err(Error::QpState { state: QpState::Reset, .. })));
    f.qp.modify_to_init(&ConnectParams { access: mlx5_api::AccessFlags::ALL, ..ConnectParams::default() })
        .unwrap();
    assert!(matches!(f.qp.wqe_builder(1).err().unwrap(), Error::QpState { state: QpState::Init, .. }));
    f.qp.post_recv(1, &[Sge { addr: 0x1000, len: 8, lkey: 1 }]).unwrap();
    f.qp.modify_to_error().unwrap();
    assert!(matches!(f.qp.wqe_builder(1).err().unwrap(), Error::QpState { state: QpState::Err, .. }));
    assert_unpublished(&f, 0, 0);
}

#[test]
fn invalid_transitions_are_refused() {
    let f = fixture(small(), false);
    let p = ConnectParams::default();
    let e = f.qp.modify_to_rts(&p).err().unwrap();
    assert_eq!(e, Error::InvalidTransition { from: QpState::Reset, to: QpState::Rts });
    f.qp.modify_to_init(&ConnectParams { access: p.access, ..ConnectParams::default() }).unwrap();
    assert!(f.qp.modify_to_rts(&p).is_err());
}

#[test]
fn receive_queue_limits() {
    let f = fixture(small(), true);
    let sge = Sge { addr: 0x1000, len: 64, lkey: 7 };
    assert_eq!(f.qp.post_recv(1, &[sge; 3]).err().unwrap(), Error::TooManySge { count: 3, max: 2 });
    f.qp.post_recv(1, &[sge]).unwrap();
    f.qp.post_recv(2, &[sge, sge]).unwrap();
    assert_eq!(f.qp.post_recv(3, &[sge]).err().unwrap(), Error::RqFull { capacity: 2 });
    assert_eq!(f.qp.rq_outstanding(), 2);
}

/// A single receive entry (the direct path) is checked as a list is: too
/// long is `SgeTooLong` with nothing published; zero-length is skipped,
/// so the WQE is the terminator alone (spec §4.1).
#[test]
fn single_receive_entry_is_checked_like_a_list() {
    let f = fixture(small(), true);
    // SAFETY: reading the handle's own descriptor and ring.
    let d = unsafe { f.qp.rq_desc() }.unwrap();
    let dbrec = || u32::from_be(unsafe { *d.dbrec });
    let long = Sge { addr: 0x1000, len: 1 << 31, lkey: 1 };
    assert_eq!(f.qp.post_recv(1, &[long]).err().unwrap(), Error::SgeTooLong { len: 1 << 31 });
    assert_eq!((f.qp.rq_outstanding(), dbrec()), (0, 0), "nothing published");
    f.qp.post_recv(2, &[Sge { addr: 0x1000, len: 0, lkey: 1 }]).unwrap();
    assert_eq!(dbrec(), 1);
    // SAFETY: WQE 0 of the live ring (stride 32: two data segments).
    let wqe = unsafe { std::slice::from_raw_parts(d.buf, 16) };
    assert_eq!(wqe[..8], [0, 0, 0, 0, 0, 0, 1, 0], "byte_count 0, MLX5_INVALID_LKEY: the terminator first");
}
