//! CQEs that match no posted work request are consumed and reported, never
//! left in place (which would stall the CQ) and never dispatched with a
//! made-up entry: unknown opcodes, malformed formats, CQEs
//! of a QP the user dropped, and counters that name no outstanding WQE.

mod common;
use common::*;
use mlx5::ring_only::{RingOnly, RingOnlyDevice};
use mlx5::{ConnectParams, Device, QpConfig, RemoteQpInfo, UnknownReason, WqeFlags};

/// Play the device: write one CQE at slot `slot` of a fresh ring-only CQ
/// (first pass, owner 0), `op_own` last.
fn put(ring: (*mut u8, u32, u32), slot: u32, qpn: u32, wqe_counter: u16, op_own: u8) {
    let (buf, cnt, size) = ring;
    assert!(slot < cnt && size == 64);
    let mut cqe = [0u8; 64];
    cqe[0x38..0x3c].copy_from_slice(&qpn.to_be_bytes());
    cqe[0x3c..0x3e].copy_from_slice(&wqe_counter.to_be_bytes());
    // SAFETY: inside the ring; op_own written last.
    unsafe {
        std::ptr::copy_nonoverlapping(cqe.as_ptr(), buf.add(slot as usize * 64), 63);
        *buf.add(slot as usize * 64 + 63) = op_own;
    }
}

#[test]
fn unknown_opcode_format_and_counter_are_consumed_and_reported() {
    let ctx = Device::<RingOnly>::new(RingOnlyDevice::new(0x77, 0)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut seen = 0;
    let mut cq = ctx.create_mono_cq(16, |_, _: u32| seen += 1).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig::default()).unwrap();
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(1, 1))).unwrap();
    qp.wqe_builder(1).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    // SAFETY: the test plays the device of a ring-only CQ.
    let ring = unsafe { cq.raw_ring() };
    put(ring, 0, 0x77, 0, 0x70); // opcode 7: not a CQE opcode of spec §5.3
    put(ring, 1, 0x77, 0, 0x0c); // a compressed-session title announcing 0 completions
    put(ring, 2, 0x77, 5, 0x00); // REQ naming wqe_index 5: nothing posted there
    put(ring, 3, 0x99, 0, 0x00); // REQ for a QPN that is not on this CQ
    let out = cq.poll(16);
    assert_eq!((out.completions, out.unknown), (0, 4), "all four consumed, none dispatched");
    assert_eq!(cq.consumer_index(), 4);
    assert_eq!(cq.take_unknown().map(|u| u.reason), Some(UnknownReason::NoSuchQp));
    assert_eq!(cq.poll(16).consumed(), 0, "nothing left in place");
    // The NOP is still outstanding and completes normally afterwards.
    put(ring, 4, 0x77, 0, 0x00);
    assert_eq!(cq.poll(16).completions, 1);
    drop(cq);
    assert_eq!(seen, 1);
}

#[test]
fn budget_bounds_one_poll() {
    let p = pair();
    for e in 0..10 {
        p.a.qp.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    }
    let mut got = Vec::new();
    assert_eq!(p.a.cq.poll_with(3, |_, e| got.push(e)).completions, 3);
    assert_eq!(p.a.cq.poll_with(100, |_, e| got.push(e)).completions, 7);
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[test]
fn cqes_of_a_dropped_qp_are_reported_not_dispatched() {
    let p = pair();
    for e in 0..3 {
        p.a.qp.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    }
    let qpn = p.a.qp.qpn();
    // The CQ holds no strong reference: dropping the QP destroys it.
    let Pair { a, b: _b, fabric: _f } = p;
    let common::Side { qp, cq, mr: _mr, pd: _pd, ctx: _ctx } = a;
    drop(qp);
    let mut dispatched = 0;
    let out = cq.poll_with(16, |_, _| dispatched += 1);
    assert_eq!((out.completions, out.unknown, dispatched), (0, 3, 0));
    let u = cq.take_unknown().unwrap();
    assert_eq!((u.qpn, u.reason), (qpn, UnknownReason::NoSuchQp));
}
