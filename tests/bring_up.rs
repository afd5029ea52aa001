//! One bring-up shape for every transport (`QpConfig` at creation,
//! `activate(&ConnectParams)` after), the PSN given once, and the
//! simulator's PSN check: a requester whose PSN differs from what the
//! responder expects never gets its work executed and ends with
//! TRANSPORT_RETRY_EXC_ERR (as ConnectX users see with mismatched PSNs).

mod common;

use common::*;
use mlx5::sim::two_hosts;
use mlx5::sim::ExecMode;
use mlx5::{
    AccessFlags, Arg, ConnectParams, Error, Gid, InvalidArgument, LinkLayer, QpConfig, QpKind, QpState,
    RemoteQpInfo, Sge, Status, Syndrome, WcOpcode, WqeFlags,
};

fn write(side: &Side, peer: &Side, entry: u64, len: u32) {
    side.qp
        .wqe_builder(entry)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(peer.mr.addr(), peer.mr.rkey())
        .unwrap()
        .sge(side.mr.sge(0, len).unwrap())
        .unwrap()
        .finish()
        .unwrap();
}

/// Two RC QPs with the given start PSNs, connected to each other with
/// `b` told that `a` starts at `a_told` (the out-of-band message may lie).
fn pair_psns(a_psn: u32, b_psn: u32, a_told: u32) -> (Side, Side, mlx5::sim::Fabric) {
    let (fabric, da, db) = two_hosts(ExecMode::Deterministic);
    let a = Side::new(&da, &QpConfig { psn: a_psn, ..small_cfg() }, AccessFlags::ALL);
    let b = Side::new(&db, &QpConfig { psn: b_psn, ..small_cfg() }, AccessFlags::ALL);
    let ia = a.qp.local_info().unwrap();
    let ib = b.qp.local_info().unwrap();
    assert_eq!((ia.psn, ib.psn), (a_psn, b_psn), "local_info reports QpConfig::psn");
    a.qp.activate(&ConnectParams::to(ib)).unwrap();
    b.qp.activate(&ConnectParams::to(RemoteQpInfo { psn: a_told, ..ia })).unwrap();
    (a, b, fabric)
}

#[test]
fn matching_psns_work_across_the_24_bit_wrap() {
    // From 0xfffffe, three one-packet WRITEs and a 4097-byte one (five
    // packets at the default path MTU of 1024) cross 2^24.
    let (mut a, b, _f) = pair_psns(0xff_fffe, 0x12_3456, 0xff_fffe);
    fill(&a.mr, 0, 8192, 3);
    for i in 0..3 {
        write(&a, &b, i, 64);
    }
    write(&a, &b, 3, 4097);
    write(&a, &b, 4, 8);
    let got = a.drain();
    assert_eq!(got.len(), 5);
    assert!(got.iter().all(|(c, _)| c.status == Status::Success), "{got:?}");
    assert_eq!(bytes(&b.mr, 0, 4097), bytes(&a.mr, 0, 4097));
}

#[test]
fn a_psn_the_responder_does_not_expect_fails_with_retry_exceeded() {
    // a starts at 5, b is told 9 (ahead of what a sends), and vice versa.
    for (a_psn, told_b) in [(5u32, 9u32), (9, 5)] {
        let (mut a, b, fabric) = pair_psns(a_psn, 0, told_b);
        fill(&a.mr, 0, 64, 9);
        write(&a, &b, 1, 64);
        write(&a, &b, 2, 64);
        let got = a.drain();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].1, 1);
        assert!(
            matches!(got[0].0.status, Status::Error(e) if e.syndrome == Syndrome::TransportRetryExceeded),
            "{:?}",
            got[0].0.status
        );
        assert!(matches!(got[1].0.status, Status::Error(e) if e.syndrome == Syndrome::WrFlush), "{got:?}");
        assert_eq!(a.qp.state(), QpState::Err);
        assert_eq!(bytes(&b.mr, 0, 64), vec![0; 64], "nothing executed at the responder");
        assert_eq!(fabric.nics()[1].stats().psn_errors, 1);
    }
}

#[test]
fn every_transport_has_the_same_bring_up() {
    let (_f, da, _db) = two_hosts(ExecMode::Deterministic);
    let ctx = da.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, |_, _: u64| {}).unwrap();
    let srq = ctx.create_srq::<u64>(&pd, 16, 1).unwrap();
    let cfg = QpConfig { dc_key: 0xdc, ..small_cfg() };
    let rc = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
    let ud = ctx.create_ud_qp(&pd, &cq, &cq, None, &cfg).unwrap();
    let dci = ctx.create_dci(&pd, &cq, &cfg).unwrap();
    let dct = ctx.create_dct(&pd, &cq, &srq, &cfg).unwrap();
    let peer = ConnectParams::to(RemoteQpInfo::ib(0x99, 2));
    // RC needs its peer; the others refuse one.
    assert_eq!(
        rc.activate(&ConnectParams::default()),
        Err(Error::InvalidArgument(InvalidArgument::RcNeedsPeer))
    );
    for (e, kind) in [
        (ud.activate(&peer), QpKind::Ud),
        (dci.activate(&peer), QpKind::Dci),
        (dct.activate(&peer), QpKind::Dct),
    ] {
        assert_eq!(e, Err(Error::InvalidArgument(InvalidArgument::RemoteNotForThisKind { kind })));
    }
    assert_eq!(rc.state(), QpState::Reset, "a refused activate changes nothing");
    rc.activate(&peer).unwrap();
    ud.activate(&ConnectParams::default()).unwrap();
    dci.activate(&ConnectParams::default()).unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    assert_eq!(
        [rc.state(), ud.state(), dci.state(), dct.state()],
        [QpState::Rts, QpState::Rts, QpState::Rts, QpState::Rtr]
    );
    assert!(dct.dct_number().unwrap() != 0);
    assert_eq!(rc.port(), 1);
}

#[test]
fn bad_port_and_psn_are_typed_errors_at_creation() {
    let (_f, da, _db) = two_hosts(ExecMode::Deterministic);
    let ctx = da.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, |_, _: u64| {}).unwrap();
    let e = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig { port: 2, ..small_cfg() }).err();
    assert_eq!(
        e,
        Some(Error::InvalidArgument(InvalidArgument::OutOfRange {
            arg: Arg::Port,
            value: 2,
            min: 1,
            max: 1
        }))
    );
    let e = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig { psn: 1 << 24, ..small_cfg() }).err();
    assert_eq!(
        e,
        Some(Error::InvalidArgument(InvalidArgument::OutOfRange {
            arg: Arg::Psn,
            value: 1 << 24,
            min: 0,
            max: 0xff_ffff
        }))
    );
}

#[test]
fn sges_come_from_the_region_and_stay_inside_it() {
    let mut p = pair();
    fill(&p.a.mr, 0, 256, 5);
    let sge = p.a.mr.sge(128, 64).unwrap();
    assert_eq!(sge, Sge::new(p.a.mr.addr() + 128, 64, p.a.mr.lkey()));
    assert_eq!(
        p.a.mr.sge(MR_LEN - 8, 9),
        Err(Error::InvalidArgument(InvalidArgument::OutsideMr {
            offset: MR_LEN - 8,
            len: 9,
            mr_len: MR_LEN
        }))
    );
    assert!(p.a.mr.sge(usize::MAX, 1).is_err(), "offset overflow is an error, not a wrap");
    // The same Sge posts a receive and a send.
    p.b.qp.post_recv(7, &[p.b.mr.sge(0, 64).unwrap()]).unwrap();
    p.a.qp.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().sge(sge).unwrap().finish().unwrap();
    let r = p.b.drain();
    assert_eq!((r[0].1, r[0].0.opcode, r[0].0.byte_len), (7, WcOpcode::Recv, 64));
    assert_eq!(bytes(&p.b.mr, 0, 64), bytes(&p.a.mr, 128, 64));
    assert_eq!(p.a.drain()[0].0.status, Status::Success);
    // An atomic result is 8 bytes.
    let e = p.a.qp.wqe_builder(2).unwrap().ctrl_atomic_fa(WqeFlags::SIGNALED, 1).unwrap();
    let e = e.rdma(p.b.mr.addr(), p.b.mr.rkey()).unwrap().result(p.a.mr.sge(0, 16).unwrap());
    assert!(
        matches!(
            e,
            Err(Error::InvalidArgument(InvalidArgument::OutOfRange {
                arg: Arg::AtomicResultLen,
                value: 16,
                ..
            }))
        ),
        "{e:?}"
    );
}

#[test]
fn handles_flags_and_gids_print_readably() {
    let p = pair();
    let qp = format!("{:?}", p.a.qp);
    assert!(qp.starts_with("RcQp { qpn: 0x") && qp.contains("state: Rts") && qp.contains("port: 1"), "{qp}");
    let mr = format!("{:?}", p.a.mr);
    assert!(
        mr.contains("access: AccessFlags(LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC)"),
        "{mr}"
    );
    assert!(format!("{:?}", p.a.cq).starts_with("CompletionQueue { cqn: 0x"));
    assert!(format!("{:?}", p.a.ctx).starts_with("Context { caps: DeviceCaps {"));
    assert_eq!(format!("{:?}", WqeFlags::SIGNALED | WqeFlags::SOLICITED), "WqeFlags(SIGNALED | SOLICITED)");
    // An InfiniBand port's GID is printed as IPv6 (the simulator's fe80::<lid>).
    let port = p.a.ctx.query_port(1).unwrap();
    assert_eq!(port.link_layer, LinkLayer::InfiniBand);
    assert_eq!(port.link_layer.to_string(), "InfiniBand");
    assert_eq!(port.gid.to_string(), "fe80::1");
    assert_eq!(port.gid, "fe80::1".parse::<Gid>().unwrap());
    let b = p.a.qp.wqe_builder(1).unwrap().ctrl_rdma_write(WqeFlags::NONE).unwrap();
    let s = format!("{b:?}");
    assert!(s.contains("state: \"NeedsRaddr<Data>\""), "{s}");
}
