//! The spec's golden examples (spec §9), encoder side: W1–W7 built by the
//! WQE builder into a ring of 8 WQEBBs byte for byte, with the doorbell
//! record and doorbell value; and C1–C4 decoded by the front-end's CQE parser.

use mlx5_api::ring_only::{RingOnly, RingOnlyDevice};
use mlx5_api::{
    ConnectParams, Context, CqeFields, Device, MemoryRegion, QpConfig, RcQp, RemoteQpInfo, Sge, Syndrome,
    WqeFlags,
};

const LKEY: u32 = 0x1234;
const RKEY: u32 = 0x5678;
const LOCAL: u64 = 0x0000_7f12_3456_0000;
const REMOTE: u64 = 0x0000_5555_0000_1000;

/// Parse the spec's hex rows ("00 00 10 08  00 01 23 03 ...").
fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

struct Fixture {
    dev: RingOnlyDevice,
    _ctx: Context<RingOnly>,
    qp: RcQp<RingOnly, u64>,
    _keep: Vec<MemoryRegion<RingOnly>>,
    _cq: mlx5_api::CompletionQueue<RingOnly, u64>,
}

/// A connected RC QP 0x123 with an 8-WQEBB send ring whose next WQE is at `pi`.
fn qp_at(pi: u32) -> Fixture {
    let dev = RingOnlyDevice::new(0x123, 256);
    let ctx = Device::<RingOnly>::new(dev.clone()).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u64| {}).unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 32,
        ..QpConfig::default()
    };
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
    assert_eq!(qp.qpn(), 0x123);
    assert_eq!(qp.sq_wqebbs(), 8, "the goldens use a ring of 8 WQEBBs");
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(0x456, 2))).unwrap();
    // SAFETY: ring-only backend, empty send queue.
    unsafe { qp.skip_sq(pi).unwrap() };
    Fixture { dev, _ctx: ctx, qp, _keep: vec![], _cq: cq }
}

/// Assert the ring holds `rows` (ring offset, 16 bytes) and zeros elsewhere,
/// the SQ doorbell record is `dbrec`, and the doorbell carried the first 8
/// bytes of the WQE's ctrl segment.
fn check(f: &Fixture, rows: &[(usize, &str)], dbrec: u32) {
    let ring = f.qp.sq_ring_bytes();
    let mut expect = vec![0u8; ring.len()];
    for (off, row) in rows {
        expect[*off..*off + 16].copy_from_slice(&hex(row));
    }
    for (i, (got, want)) in ring.chunks(16).zip(expect.chunks(16)).enumerate() {
        assert_eq!(got, want, "ring+0x{:03x}", i * 16);
    }
    assert_eq!(f.qp.sq_dbrec(), dbrec, "SQ doorbell record");
    let (_, db) = f.dev.log().last_doorbell.get();
    assert_eq!(db.to_vec(), hex(rows[0].1)[..8].to_vec(), "8-byte doorbell = first 8 ctrl bytes");
}

#[test]
fn w1_rc_rdma_write_1_sge() {
    let f = qp_at(0x10);
    f.qp.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(REMOTE, RKEY)
        .unwrap()
        .sge(Sge::new(LOCAL, 0x1000, LKEY))
        .unwrap()
        .finish()
        .unwrap();
    check(
        &f,
        &[
            (0x000, "00 00 10 08  00 01 23 03  00 00 00 08  00 00 00 00"),
            (0x010, "00 00 55 55  00 00 10 00  00 00 56 78  00 00 00 00"),
            (0x020, "00 00 10 00  00 00 12 34  00 00 7f 12  34 56 00 00"),
        ],
        0x11,
    );
    assert_eq!(f.dev.log().last_doorbell.get().1, [0x00, 0x00, 0x10, 0x08, 0x00, 0x01, 0x23, 0x03]);
}

#[test]
fn w2_rc_rdma_write_imm_inline_20b() {
    let f = qp_at(0x11);
    f.qp.wqe_builder(2)
        .unwrap()
        .ctrl_rdma_write_imm(WqeFlags::SIGNALED | WqeFlags::SOLICITED, 0x1234_5678)
        .unwrap()
        .rdma(REMOTE + 0x100, RKEY)
        .unwrap()
        .inline(b"ABCDEFGHIJKLMNOPQRST")
        .unwrap()
        .finish()
        .unwrap();
    check(
        &f,
        &[
            (0x040, "00 00 11 09  00 01 23 04  00 00 00 0a  12 34 56 78"),
            (0x050, "00 00 55 55  00 00 11 00  00 00 56 78  00 00 00 00"),
            (0x060, "80 00 00 14  41 42 43 44  45 46 47 48  49 4a 4b 4c"),
            (0x070, "4d 4e 4f 50  51 52 53 54  00 00 00 00  00 00 00 00"),
        ],
        0x12,
    );
}

#[test]
fn w3_rc_rdma_read_512b() {
    let f = qp_at(0x12);
    f.qp.wqe_builder(3)
        .unwrap()
        .ctrl_rdma_read(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(0x0000_5555_0000_3000, RKEY)
        .unwrap()
        .sge(Sge::new(LOCAL + 0x1000, 0x200, LKEY))
        .unwrap()
        .finish()
        .unwrap();
    check(
        &f,
        &[
            (0x080, "00 00 12 10  00 01 23 03  00 00 00 08  00 00 00 00"),
            (0x090, "00 00 55 55  00 00 30 00  00 00 56 78  00 00 00 00"),
            (0x0a0, "00 00 02 00  00 00 12 34  00 00 7f 12  34 56 10 00"),
        ],
        0x13,
    );
}

#[test]
fn w4_rc_atomic_fetch_add_fenced() {
    let f = qp_at(0x13);
    f.qp.wqe_builder(4)
        .unwrap()
        .ctrl_atomic_fa(WqeFlags::SIGNALED | WqeFlags::FENCE, 1)
        .unwrap()
        .rdma(0x0000_5555_0000_4000, RKEY)
        .unwrap()
        .result(Sge::new(LOCAL + 0x2000, 8, LKEY))
        .unwrap()
        .finish()
        .unwrap();
    check(
        &f,
        &[
            (0x0c0, "00 00 13 12  00 01 23 04  00 00 00 88  00 00 00 00"),
            (0x0d0, "00 00 55 55  00 00 40 00  00 00 56 78  00 00 00 00"),
            (0x0e0, "00 00 00 00  00 00 00 01  00 00 00 00  00 00 00 00"),
            (0x0f0, "00 00 00 08  00 00 12 34  00 00 7f 12  34 56 20 00"),
        ],
        0x14,
    );
}

#[test]
fn w5_rc_atomic_cmp_swap() {
    let f = qp_at(0x14);
    f.qp.wqe_builder(5)
        .unwrap()
        .ctrl_atomic_cs(WqeFlags::SIGNALED, 0xcafe_f00d, 0)
        .unwrap()
        .rdma(0x0000_5555_0000_4008, RKEY)
        .unwrap()
        .result(Sge::new(LOCAL + 0x2008, 8, LKEY))
        .unwrap()
        .finish()
        .unwrap();
    check(
        &f,
        &[
            (0x100, "00 00 14 11  00 01 23 04  00 00 00 08  00 00 00 00"),
            (0x110, "00 00 55 55  00 00 40 08  00 00 56 78  00 00 00 00"),
            (0x120, "00 00 00 00  ca fe f0 0d  00 00 00 00  00 00 00 00"),
            (0x130, "00 00 00 08  00 00 12 34  00 00 7f 12  34 56 20 08"),
        ],
        0x15,
    );
}

#[test]
fn w6_rc_send_3_sges_unsignaled() {
    let f = qp_at(0x16);
    f.qp.wqe_builder(6)
        .unwrap()
        .ctrl_send(WqeFlags::NONE)
        .unwrap()
        .sge(Sge::new(LOCAL + 0x3000, 0x40, LKEY))
        .unwrap()
        .sge(Sge::new(LOCAL + 0x4000, 0x80, LKEY))
        .unwrap()
        .sge(Sge::new(LOCAL + 0x5000, 0x100, 0x1235))
        .unwrap()
        .finish()
        .unwrap();
    check(
        &f,
        &[
            (0x180, "00 00 16 0a  00 01 23 04  00 00 00 00  00 00 00 00"),
            (0x190, "00 00 00 40  00 00 12 34  00 00 7f 12  34 56 30 00"),
            (0x1a0, "00 00 00 80  00 00 12 34  00 00 7f 12  34 56 40 00"),
            (0x1b0, "00 00 01 00  00 00 12 35  00 00 7f 12  34 56 50 00"),
        ],
        0x17,
    );
}

#[test]
fn w7_rc_send_4_sges_wraps_ring_end() {
    let f = qp_at(0x17);
    let mut b = f.qp.wqe_builder(7).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    for (i, len) in [0x40u32, 0x80, 0xc0, 0x100].into_iter().enumerate() {
        b = b.sge(Sge::new(0x0000_7f12_3457_0000 + 0x1000 * i as u64, len, LKEY)).unwrap();
    }
    b.finish().unwrap();
    check(
        &f,
        &[
            (0x1c0, "00 00 17 0a  00 01 23 05  00 00 00 08  00 00 00 00"),
            (0x1d0, "00 00 00 40  00 00 12 34  00 00 7f 12  34 57 00 00"),
            (0x1e0, "00 00 00 80  00 00 12 34  00 00 7f 12  34 57 10 00"),
            (0x1f0, "00 00 00 c0  00 00 12 34  00 00 7f 12  34 57 20 00"),
            (0x000, "00 00 01 00  00 00 12 34  00 00 7f 12  34 57 30 00"),
        ],
        0x19,
    );
    assert_eq!(f.qp.sq_pi(), 0x19, "pi advanced by 2 WQEBBs");
}

/// The BlueFlame path writes the whole WQE (W2: 4 DS → one 64-byte chunk)
/// and toggles the BlueFlame offset after every doorbell.
#[test]
fn blueflame_copies_wqe_and_alternates_offset() {
    let f = qp_at(0x11);
    let post = |e| {
        f.qp.wqe_builder(e)
            .unwrap()
            .ctrl_rdma_write_imm(WqeFlags::SIGNALED | WqeFlags::SOLICITED, 0x1234_5678)
            .unwrap()
            .rdma(REMOTE + 0x100, RKEY)
            .unwrap()
            .inline(b"ABCDEFGHIJKLMNOPQRST")
            .unwrap()
            .finish_with_blueflame()
            .unwrap()
    };
    post(1);
    let (off, len, first) = f.dev.log().last_blueflame.get();
    assert_eq!((off, len), (0, 64));
    let ring = f.qp.sq_ring_bytes();
    assert_eq!(first.to_vec(), ring[0x40..0x80].to_vec());
    post(2);
    assert_eq!(f.dev.log().last_blueflame.get().0, 256, "second write uses the other half");
    f.qp.wqe_builder(3).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    assert_eq!(f.dev.log().last_doorbell.get().0, 0, "plain doorbell toggles too");
    assert_eq!(f.dev.log().blueflames.get(), 2);
    assert_eq!(f.dev.log().doorbells.get(), 1);
}

/// Batching: several WQEs, one doorbell carrying the last WQE's ctrl.
#[test]
fn batch_rings_once_with_last_ctrl() {
    let f = qp_at(0);
    for e in 0..3 {
        f.qp.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
    }
    assert_eq!(f.dev.log().doorbells.get(), 0);
    assert_eq!(f.qp.sq_dbrec(), 0, "nothing published before the doorbell");
    f.qp.ring_sq_doorbell();
    assert_eq!(f.dev.log().doorbells.get(), 1);
    assert_eq!(f.qp.sq_dbrec(), 3);
    assert_eq!(f.dev.log().last_doorbell.get().1, [0, 0, 2, 0, 0, 1, 0x23, 1]);
}

/// PITFALLS: the 16-bit wqe_index must be masked, or the opmod byte is
/// corrupted after 65,536 WQEs.
#[test]
fn wqe_index_is_masked_to_16_bits() {
    let f = qp_at(0x1_fffe);
    f.qp.wqe_builder(1).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    let ring = f.qp.sq_ring_bytes();
    let slot = (0x1_fffe % 8) * 64;
    assert_eq!(ring[slot..slot + 4], [0x00, 0xff, 0xfe, 0x00], "opmod 0, idx 0xfffe, NOP");
    assert_eq!(f.qp.sq_dbrec(), 0xffff);
}

fn cqe(rows: [&str; 4]) -> [u8; 64] {
    let v: Vec<u8> = rows.iter().flat_map(|r| hex(r)).collect();
    v.try_into().unwrap()
}

#[test]
fn c1_req_success_for_read() {
    let z = "00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00";
    let f = CqeFields::parse(&cqe([
        z,
        z,
        "00 00 00 01  00 00 00 00  00 00 00 00  00 00 02 00",
        "00 00 00 01  02 03 04 05  10 00 01 23  00 12 00 01",
    ]));
    assert_eq!((f.opcode, f.format, f.owner, f.se), (0, mlx5_api::ring::CqeFormat::Normal, true, false));
    assert_eq!((f.qpn, f.wqe_opcode, f.wqe_counter), (0x123, 0x10, 0x12));
    assert_eq!((f.byte_cnt, f.srqn_uidx, f.timestamp), (0x200, 1, 0x0000_0001_0203_0405));
    assert!(f.error.is_none());
}

#[test]
fn c2_resp_send_imm_ud() {
    let z = "00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00";
    let f = CqeFields::parse(&cqe([
        z,
        "00 00 00 00  00 00 00 11  05 00 07 77  00 00 00 00",
        "00 00 00 02  12 34 56 78  00 00 00 00  00 00 00 68",
        "00 00 00 00  00 00 00 00  00 00 04 56  00 03 00 30",
    ]));
    assert_eq!((f.opcode, f.owner), (3, false));
    assert_eq!((f.slid, f.flags_rqpn & 0xff_ffff, (f.flags_rqpn >> 24) & 0xf), (0x11, 0x777, 5));
    assert_eq!((f.imm_inval_pkey, f.byte_cnt, f.srqn_uidx), (0x1234_5678, 0x68, 2));
    assert_eq!((f.qpn, f.wqe_counter), (0x456, 3));
}

#[test]
fn c3_req_err_remote_access() {
    let z = "00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00";
    let f = CqeFields::parse(&cqe([
        z,
        z,
        "00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00",
        "00 00 00 00  00 00 88 13  08 00 01 23  00 10 00 d0",
    ]));
    assert_eq!((f.opcode, f.owner), (13, false));
    let e = f.error.expect("error CQE");
    assert_eq!((e.syndrome, e.vendor_err), (Syndrome::RemoteAccess, 0x88));
    assert_eq!((f.wqe_opcode, f.qpn, f.wqe_counter), (0x08, 0x123, 0x10));
}

#[test]
fn c4_flush_after_error() {
    let z = "00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00";
    let f = CqeFields::parse(&cqe([
        z,
        z,
        "00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00",
        "00 00 00 00  00 00 f9 05  09 00 01 23  00 11 00 d0",
    ]));
    let e = f.error.expect("error CQE");
    assert_eq!((e.syndrome, e.vendor_err), (Syndrome::WrFlush, 0xf9));
    assert_eq!((f.wqe_opcode, f.wqe_counter), (0x09, 0x11));
}

/// Assert a ring of `rows` (offset, bytes) with zeros elsewhere.
fn check_ring(ring: &[u8], rows: &[(usize, &str)]) {
    let mut expect = vec![0u8; ring.len()];
    for (off, row) in rows {
        expect[*off..*off + 16].copy_from_slice(&hex(row));
    }
    for (i, (got, want)) in ring.chunks(16).zip(expect.chunks(16)).enumerate() {
        assert_eq!(got, want, "ring+0x{:03x}", i * 16);
    }
}

#[test]
fn w8_ud_send_roce_v2() {
    use mlx5_api::{AddressVector, RoceAv};
    let dev = RingOnlyDevice::new(0x456, 256);
    let ctx = Device::<RingOnly>::new(dev.clone()).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u64| {}).unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
        ..QpConfig::default()
    };
    let ud = ctx.create_ud_qp(&pd, &cq, &cq, None, &cfg).unwrap();
    assert_eq!((ud.qpn(), ud.sq_wqebbs()), (0x456, 8));
    ud.activate(&ConnectParams { qkey: 0x1111_1111, ..ConnectParams::default() }).unwrap();
    // SAFETY: ring-only backend, empty send queue.
    unsafe { ud.skip_sq(0x42).unwrap() };
    let mut dgid = mlx5_api::Gid::ZERO;
    dgid.0[10..].copy_from_slice(&[0xff, 0xff, 192, 168, 1, 2]);
    let av = AddressVector::roce_v2(&RoceAv {
        dgid,
        dmac: [2, 0, 0, 0, 0, 2],
        sgid_index: 3,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        priority: 3,
        udp_sport: 0xd001,
    });
    ud.wqe_builder(8)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .datagram(&av, 0xabc, 0x1111_1111)
        .unwrap()
        .sge(Sge::new(LOCAL + 0x8000, 0x100, LKEY))
        .unwrap()
        .finish()
        .unwrap();
    check_ring(
        &ud.sq_ring_bytes(),
        &[
            (0x080, "00 00 42 0a  00 04 56 05  00 00 00 08  00 00 00 00"),
            (0x090, "11 11 11 11  00 00 00 00  80 00 0a bc  06 00 d0 01"),
            (0x0a0, "00 00 00 00  02 00 00 00  00 02 00 40  00 30 00 00"),
            (0x0b0, "00 00 00 00  00 00 00 00  00 00 ff ff  c0 a8 01 02"),
            (0x0c0, "00 00 01 00  00 00 12 34  00 00 7f 12  34 56 80 00"),
        ],
    );
    assert_eq!(ud.sq_dbrec(), 0x44);
    assert_eq!(dev.log().last_doorbell.get().1, [0x00, 0x00, 0x42, 0x0a, 0x00, 0x04, 0x56, 0x05]);
}

#[test]
fn w9_dci_rdma_write_ib() {
    use mlx5_api::AddressVector;
    let dev = RingOnlyDevice::new(0x789, 256);
    let ctx = Device::<RingOnly>::new(dev.clone()).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u64| {}).unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: 0,
        ..QpConfig::default()
    };
    let dci = ctx.create_dci(&pd, &cq, &cfg).unwrap();
    assert_eq!((dci.qpn(), dci.sq_wqebbs()), (0x789, 8));
    dci.activate(&ConnectParams::default()).unwrap();
    // SAFETY: ring-only backend, empty send queue.
    unsafe { dci.skip_sq(0x100).unwrap() };
    dci.wqe_builder(9)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .av(0x1122_3344_5566_7788, 0xabcd, &AddressVector::ib(0x0011, 1))
        .unwrap()
        .rdma(0x0000_5555_0000_a000, RKEY)
        .unwrap()
        .sge(Sge::new(LOCAL + 0x9000, 0x40, LKEY))
        .unwrap()
        .finish()
        .unwrap();
    check_ring(
        &dci.sq_ring_bytes(),
        &[
            (0x000, "00 01 00 08  00 07 89 06  00 00 00 08  00 00 00 00"),
            (0x010, "11 22 33 44  55 66 77 88  80 00 ab cd  01 00 00 11"),
            (0x020, "00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00"),
            (0x030, "00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00"),
            (0x040, "00 00 55 55  00 00 a0 00  00 00 56 78  00 00 00 00"),
            (0x050, "00 00 00 40  00 00 12 34  00 00 7f 12  34 56 90 00"),
        ],
    );
    assert_eq!(dci.sq_dbrec(), 0x102);
}

/// `av_ib` is the SL-0 shorthand of `av(.., &AddressVector::ib(dlid, 0))`.
#[test]
fn av_ib_shorthand_matches_the_general_form() {
    use mlx5_api::AddressVector;
    let ring = |short: bool| {
        let dev = RingOnlyDevice::new(0x789, 0);
        let ctx = Device::<RingOnly>::new(dev).open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16, |_, _: u64| {}).unwrap();
        let dci = ctx.create_dci(&pd, &cq, &QpConfig::default()).unwrap();
        dci.activate(&ConnectParams::default()).unwrap();
        let b = dci.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
        let b = if short { b.av_ib(7, 0x42, 0x11) } else { b.av(7, 0x42, &AddressVector::ib(0x11, 0)) };
        b.unwrap().inline(b"x").unwrap().finish().unwrap();
        dci.sq_ring_bytes()
    };
    assert_eq!(ring(true), ring(false));
}

/// UD messages above the path MTU are a typed error at build time.
#[test]
fn ud_message_above_mtu_is_refused() {
    use mlx5_api::{AddressVector, Error};
    let ctx = Device::<RingOnly>::new(RingOnlyDevice::new(0x10, 0)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u64| {}).unwrap();
    let ud = ctx.create_ud_qp(&pd, &cq, &cq, None, &QpConfig::default()).unwrap();
    ud.activate(&ConnectParams { qkey: 7, ..ConnectParams::default() }).unwrap();
    assert_eq!(ud.max_message(), 4096);
    let av = AddressVector::ib(2, 0);
    let b = ud.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().datagram(&av, 5, 7).unwrap();
    let b = b.sge(Sge::new(0x1000, 4000, 1)).unwrap();
    assert_eq!(b.sge(Sge::new(0x2000, 97, 1)).err().unwrap(), Error::MessageTooLong { len: 4097, max: 4096 });
    assert_eq!(ud.sq_dbrec(), 0, "nothing published");
}

/// BlueFlame only for a WQE that is alone since the last doorbell (spec
/// §1.6): after a batch, one plain doorbell covers the batch and the WQE.
#[test]
fn blueflame_after_a_batch_is_one_plain_doorbell_for_all() {
    let f = qp_at(0);
    for e in 0..2 {
        f.qp.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
    }
    f.qp.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish_with_blueflame().unwrap();
    assert_eq!((f.dev.log().blueflames.get(), f.dev.log().doorbells.get()), (0, 1));
    assert_eq!(f.qp.sq_dbrec(), 3);
    assert_eq!(f.dev.log().last_doorbell.get().1, [0, 0, 2, 0, 0, 1, 0x23, 1], "the last WQE's ctrl");
    // Nothing is left pending: the next WQE goes by BlueFlame again.
    f.qp.wqe_builder(3).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish_with_blueflame().unwrap();
    assert_eq!(f.dev.log().blueflames.get(), 1);
}

/// A two-WQEBB WQE that starts in the ring's last slot reaches the
/// register whole: the last slot, then slot 0 (spec §1.3, §1.6).
#[test]
fn blueflame_follows_the_ring_wrap() {
    let f = qp_at(7);
    f.qp.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(REMOTE, RKEY)
        .unwrap()
        .inline(&[0x5a; 32])
        .unwrap()
        .finish_with_blueflame()
        .unwrap();
    let (off, len, first) = f.dev.log().last_blueflame.get();
    let ring = f.qp.sq_ring_bytes();
    assert_eq!((off, len), (0, 128), "5 DS: two WQEBBs");
    assert_eq!(first.to_vec(), ring[7 * 64..8 * 64].to_vec());
    // Header and 28 data bytes fill DS 2-3; the last 4 open slot 0, then pad.
    assert_eq!(ring[0..16], [0x5a, 0x5a, 0x5a, 0x5a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(f.qp.sq_dbrec(), 9);
}

/// The unlogged ring-only register is memory written as hardware's is: the
/// doorbell's 8 bytes, then the BlueFlame copy, each at the half the toggle
/// names.
#[test]
fn unlogged_register_memory_gets_doorbell_and_blueflame() {
    use mlx5_api::ring_only::Unlogged;
    let ctx = Device::<RingOnly<Unlogged>>::new(RingOnlyDevice::new(0x123, 256)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u64| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig::default()).unwrap();
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(0x456, 2))).unwrap();
    // SAFETY: reading the register view of a live QP.
    let reg = unsafe { (*qp.sq_desc().bf).reg };
    qp.wqe_builder(1).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    // SAFETY: the register memory is 512 bytes, alive with the QP.
    let half0 = unsafe { std::slice::from_raw_parts(reg, 8) }.to_vec();
    assert_eq!(half0, [0, 0, 0, 0, 0, 1, 0x23, 1], "NOP at index 0, QPN 0x123, 1 DS");
    qp.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish_with_blueflame().unwrap();
    // SAFETY: as above.
    let half1 = unsafe { std::slice::from_raw_parts(reg.add(256), 64) }.to_vec();
    assert_eq!(half1, qp.sq_ring_bytes()[64..128].to_vec(), "the whole WQE in the second half");
}

/// The register receives both parts of a wrapped WQE, in order: the ring's
/// last slot, then slot 0 (checked in register memory, past the 64 bytes
/// the log keeps).
#[test]
fn unlogged_blueflame_of_a_wrapped_wqe_lands_whole() {
    use mlx5_api::ring_only::Unlogged;
    let ctx = Device::<RingOnly<Unlogged>>::new(RingOnlyDevice::new(0x123, 256)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u64| {}).unwrap();
    let cfg = QpConfig { max_send_wr: 4, max_inline_data: 32, ..QpConfig::default() };
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(0x456, 2))).unwrap();
    let last = qp.sq_wqebbs() - 1;
    // SAFETY: ring-only backend, empty send queue.
    unsafe { qp.skip_sq(last).unwrap() };
    let post = qp.wqe_builder(1).unwrap().ctrl_rdma_write(WqeFlags::SIGNALED).unwrap();
    post.rdma(REMOTE, RKEY).unwrap().inline(&[0x5a; 32]).unwrap().finish_with_blueflame().unwrap();
    // SAFETY: reading the register view and its 512 bytes of a live QP.
    let reg = unsafe { std::slice::from_raw_parts((*qp.sq_desc().bf).reg, 128) }.to_vec();
    let ring = qp.sq_ring_bytes();
    let n = last as usize * 64;
    assert_eq!(reg[..64], ring[n..n + 64], "the ring's last slot first");
    assert_eq!(reg[64..128], ring[..64], "then slot 0");
}
