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
    let cases = [
        (0x77, 0, 0x70, UnknownReason::Opcode), // opcode 7: not a CQE opcode of spec §5.3
        (0x77, 0, 0xc0, UnknownReason::Opcode), // opcode 12 (signature error): not dispatched either
        (0x77, 0, 0x0c, UnknownReason::Format), // a compressed-session title announcing 0 completions
        (0x77, 5, 0x00, UnknownReason::NoSuchWqe), // REQ naming wqe_index 5: nothing posted there
        (0x77, 5, 0xd0, UnknownReason::NoSuchWqe), // REQ_ERR naming it: the error path says the same
        (0x77, 0, 0x20, UnknownReason::NoSuchWqe), // RESP_SEND: no receive posted
        (0x99, 0, 0x00, UnknownReason::NoSuchQp), // REQ for a QPN that is not on this CQ
        (0x99, 0, 0x20, UnknownReason::NoSuchQp), // RESP_SEND for it
    ];
    for (slot, &(qpn, ctr, op_own, reason)) in cases.iter().enumerate() {
        put(ring, slot as u32, qpn, ctr, op_own);
        let out = cq.poll(16);
        assert_eq!((out.completions, out.unknown), (0, 1), "op_own {op_own:#x}: consumed, not dispatched");
        assert_eq!(cq.take_unknown().map(|u| (u.qpn, u.wqe_counter, u.reason)), Some((qpn, ctr, reason)));
    }
    assert_eq!(cq.consumer_index(), cases.len() as u32);
    assert_eq!(cq.poll(16).consumed(), 0, "nothing left in place");
    // The NOP is still outstanding and completes normally afterwards.
    put(ring, cases.len() as u32, 0x77, 0, 0x00);
    assert_eq!(cq.poll(16).completions, 1);
    drop(cq);
    assert_eq!(seen, 1);
}

/// A DCT has no send queue: a requester CQE naming it (which no device
/// writes) finds nothing outstanding and is reported, on the plain path
/// and on the error path.
#[test]
fn a_requester_cqe_naming_a_dct_is_reported() {
    let ctx = Device::<RingOnly>::new(RingOnlyDevice::new(0x77, 0)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_mono_cq(16, |_, _: u32| panic!("nothing to dispatch")).unwrap();
    let srq = ctx.create_srq::<u32>(&pd, 16, 1).unwrap();
    let dct = ctx.create_dct(&pd, &cq, &srq, &QpConfig::default()).unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    let dctn = dct.dct_number().unwrap();
    // SAFETY: the test plays the device of a ring-only CQ.
    let ring = unsafe { cq.raw_ring() };
    for (slot, op_own) in [0x00u8, 0xd0].into_iter().enumerate() {
        put(ring, slot as u32, dctn, 0, op_own);
        assert_eq!(cq.poll(16).unknown, 1);
        assert_eq!(cq.take_unknown().map(|u| (u.qpn, u.reason)), Some((dctn, UnknownReason::NoSuchWqe)));
    }
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
