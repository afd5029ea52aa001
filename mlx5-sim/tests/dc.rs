//! Dynamically connected transport: DCIs on one host address DCTs on another through the
//! address vector of every WQE (spec §3.6, §3.8, §7); DCTs receive from an SRQ.

mod common;

use common::*;
use mlx5_sim::wire::{cqe_opcode, syndrome};
use mlx5_sim::{access, Fabric, FabricConfig, HostConfig, Nic, QpModify, QpState, SimError};

const KEY: u64 = 0x1122_3344_5566_7788;

struct Dc {
    _f: Fabric,
    a: Nic,
    b: Nic,
    pda: u32,
    pdb: u32,
    scq_a: TestCq,
    rcq_b: TestCq,
    dci: TestQp,
    dct: u32,
    num: u32,
    srq: TestSrq,
    roce: bool,
}

fn hosts(roce: bool, lid_b: u16) -> (Fabric, Nic, Nic) {
    let f = Fabric::new(FabricConfig::default());
    let (a, b) = if roce {
        (
            f.add_host(HostConfig::roce("r0", [10, 0, 0, 1], [2, 0, 0, 0, 0, 1])),
            f.add_host(HostConfig::roce("r1", [10, 0, 0, 2], [2, 0, 0, 0, 0, 2])),
        )
    } else {
        (f.add_host(HostConfig::infiniband("a", 1)), f.add_host(HostConfig::infiniband("b", lid_b)))
    };
    (f, a, b)
}

fn dc(roce: bool, dct_access: u32, rnr_retry: u8) -> Dc {
    let (f, a, b) = hosts(roce, 2);
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let scq_a = TestCq::new(&a, 256, 64);
    let rcq_b = TestCq::new(&b, 256, 64);
    let srq = TestSrq::new(&b, pdb, 64, 64);
    let dci = dci_qp(&a, pda, scq_a.res.cqn, 16, 0x31);
    dci_up(&a, dci.qpn(), rnr_retry);
    let dct = dct_qp(&b, pdb, rcq_b.res.cqn, srq.res.srqn, KEY, 0x42);
    let num = dct_up(&b, dct, dct_access);
    Dc { _f: f, a, b, pda, pdb, scq_a, rcq_b, dci, dct, num, srq, roce }
}

impl Dc {
    fn av(&self) -> Av {
        self.av_key(KEY)
    }
    fn av_key(&self, key: u64) -> Av {
        let i = self.b.info();
        if self.roce {
            Av::dc_roce(key, self.num, i.gid, i.mac)
        } else {
            Av { stat_rate_sl: 3, ..Av::dc_ib(key, self.num, i.lid) }
        }
    }
}

#[test]
fn dct_number_is_assigned_at_rtr_and_differs_from_the_handle() {
    let (_f, a, b) = hosts(false, 2);
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let cq = TestCq::new(&b, 16, 64);
    let mut scq = TestCq::new(&a, 16, 64);
    let srq = TestSrq::new(&b, pdb, 8, 64);
    let dct = dct_qp(&b, pdb, cq.res.cqn, srq.res.srqn, KEY, 1);
    assert!(matches!(b.dct_number(dct), Err(SimError::InvalidArgument { .. })), "RESET");
    b.modify_qp(
        dct,
        &QpModify { state: Some(QpState::Init), port: Some(1), access_flags: Some(0), ..Default::default() },
    )
    .unwrap();
    assert!(matches!(b.dct_number(dct), Err(SimError::InvalidArgument { .. })), "INIT");
    // A DCI aimed at the handle (the classic driver bug) or at a DCT before RTR reaches nothing.
    let mut dci = dci_qp(&a, pda, scq.res.cqn, 8, 1);
    dci_up(&a, dci.qpn(), 7);
    let i = dci.post(op::SEND, 0, [0; 4], &[Seg::Av(Av::dc_ib(KEY, dct, 2)), Seg::Inline(b"x")]);
    let e = scq.expect_one();
    assert_eq!((e.syndrome(), e.vendor(), e.wqe_counter()), (syndrome::TRANSPORT_RETRY_EXC_ERR, 0x81, i));
    assert_eq!(dci.state(), QpState::Err);
    // RTR needs path_mtu and min_rnr_timer.
    let rtr = |m: QpModify| b.modify_qp(dct, &QpModify { state: Some(QpState::Rtr), ..m });
    assert!(matches!(
        rtr(QpModify { path_mtu: Some(1024), ..Default::default() }),
        Err(SimError::InvalidArgument { .. })
    ));
    rtr(QpModify { path_mtu: Some(1024), min_rnr_timer: Some(1), ..Default::default() }).unwrap();
    let num = b.dct_number(dct).unwrap();
    assert_ne!(num, dct);
    assert_eq!(num & !0xff_ffff, 0, "24 bits");
    assert_eq!(b.qp_state(dct).unwrap(), QpState::Rtr);
    // A DCT has no RTS.
    assert_eq!(
        b.modify_qp(dct, &QpModify { state: Some(QpState::Rts), sq_psn: Some(0), ..Default::default() }),
        Err(SimError::InvalidTransition { from: QpState::Rtr, to: QpState::Rts })
    );
    // A DCT has no doorbell: writes naming it are mismatches and run nothing.
    let db = [0, 0, 0, 0x0a, (dct >> 16) as u8, (dct >> 8) as u8, dct as u8, 1];
    b.uar_write64(u32::MAX, 0, db);
    assert_eq!(b.stats().doorbell_mismatch, 1);
    assert!(matches!(a.dct_number(dci.qpn()), Err(SimError::InvalidArgument { .. })), "not a DCT");
    // RESET releases the number; the next RTR assigns a new one.
    b.modify_qp(dct, &QpModify { state: Some(QpState::Reset), ..Default::default() }).unwrap();
    assert!(b.dct_number(dct).is_err());
    let num2 = dct_up(&b, dct, 0);
    assert_ne!(num2, num);
    // DCT creation rules.
    let bad = b.create_qp(&mlx5_sim::QpInitAttr {
        qp_type: mlx5_sim::QpType::Dct,
        pdn: pdb,
        recv_cqn: cq.res.cqn,
        ..Default::default()
    });
    assert!(matches!(bad, Err(SimError::InvalidArgument { .. })), "a DCT needs an SRQ");
    let bad = b.create_qp(&mlx5_sim::QpInitAttr {
        qp_type: mlx5_sim::QpType::Dci,
        pdn: pdb,
        send_cqn: cq.res.cqn,
        sq_wqe_cnt: 8,
        rq_wqe_cnt: 8,
        rq_stride: 64,
        ..Default::default()
    });
    assert!(matches!(bad, Err(SimError::InvalidArgument { .. })), "a DCI has no RQ");
    assert!(matches!(b.destroy_srq(srq.res.srqn), Err(SimError::Busy { .. })), "the DCT uses it");
    b.destroy_qp(dct).unwrap();
    b.destroy_srq(srq.res.srqn).unwrap();
}

#[test]
fn w9_dci_rdma_write_golden_end_to_end() {
    // W9: IB, no GRH, DC key 0x1122334455667788, SL 1, DLID 0x0011, pi 0x0100 (slot 0),
    // 0x40 bytes. QPN, DCT number, addresses and keys are the ones the model assigned.
    let (_f, a, b) = hosts(false, 0x11);
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let mut scq = TestCq::new(&a, 16, 64);
    let rcq = TestCq::new(&b, 16, 64);
    let srq = TestSrq::new(&b, pdb, 8, 64);
    let mut dci = dci_qp(&a, pda, scq.res.cqn, 8, 1);
    dci_up(&a, dci.qpn(), 7);
    let dct = dct_qp(&b, pdb, rcq.res.cqn, srq.res.srqn, KEY, 2);
    let num = dct_up(&b, dct, ALL_ACCESS);
    dci.advance_with_nops(0x100);
    assert_eq!(dci.pi, 0x100);
    let mut src = Buf::new(&a, pda, 0x40, ALL_ACCESS);
    src.fill(|i| 0xc0 ^ i as u8);
    let dst = Buf::new(&b, pdb, 0x100, ALL_ACCESS);
    let av = Av { stat_rate_sl: 0x01, ..Av::dc_ib(KEY, num, 0x11) };
    let idx = dci.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[
            Seg::Av(av),
            Seg::Raddr { raddr: dst.addr() + 0x20, rkey: dst.keys.rkey },
            Seg::Data { addr: src.addr(), len: 0x40, lkey: src.keys.lkey },
        ],
    );
    assert_eq!(idx, 0x100);
    // The ring bytes are W9 with our numbers patched in.
    let q = dci.qpn();
    let row =
        |w: &mut Vec<u8>, s: &str| w.extend(s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()));
    let mut want = Vec::new();
    row(&mut want, "00 01 00 08");
    want.extend_from_slice(&((q << 8) | 6).to_be_bytes());
    row(&mut want, "00 00 00 08  00 00 00 00  11 22 33 44  55 66 77 88");
    want.extend_from_slice(&(0x8000_0000 | num).to_be_bytes());
    row(&mut want, "01 00 00 11");
    want.extend_from_slice(&[0; 32]);
    want.extend_from_slice(&(dst.addr() + 0x20).to_be_bytes());
    want.extend_from_slice(&dst.keys.rkey.to_be_bytes());
    want.extend_from_slice(&[0; 4]);
    want.extend_from_slice(&[0, 0, 0, 0x40]);
    want.extend_from_slice(&src.keys.lkey.to_be_bytes());
    want.extend_from_slice(&src.addr().to_be_bytes());
    // SAFETY: the first 96 bytes of the 512-byte send ring (slot 0).
    let ring = unsafe { std::slice::from_raw_parts(dci.res.sq_buf, 96) };
    assert_eq!(ring, &want[..]);
    // SAFETY: word 1 of the doorbell record.
    assert_eq!(unsafe { *dci.res.dbrec.add(1) }.to_ne_bytes(), [0, 0, 1, 2], "SQ DBR = 0x102");
    assert_eq!(&dst.read()[0x20..0x60], &src.read()[..]);
    let c = scq.expect_one();
    assert_eq!((c.opcode(), c.wqe_counter(), c.wqe_opcode(), c.qpn()), (cqe_opcode::REQ, 0x100, 0x08, q));
    assert_eq!(c.cqe().byte_cnt(), 0x40);
    assert_eq!(a.stats().doorbell_mismatch, 0);
}

#[test]
fn every_operation_over_ib_and_roce() {
    for roce in [false, true] {
        let mut d = dc(roce, ALL_ACCESS & !access::LOCAL_WRITE, 7);
        let mut src = Buf::new(&d.a, d.pda, 256, ALL_ACCESS);
        src.fill(|i| i as u8);
        let local = Buf::new(&d.a, d.pda, 64, ALL_ACCESS);
        let mut remote = Buf::new(&d.b, d.pdb, 256, ALL_ACCESS);
        remote.fill(|i| !(i as u8));
        let rbuf = Buf::new(&d.b, d.pdb, 64 * 16, ALL_ACCESS);
        for k in 0..8u64 {
            d.srq.post(&[(rbuf.addr() + k * 64, 64, rbuf.keys.lkey)]);
        }
        let av = Seg::Av(d.av());
        let raddr = |off: u64| Seg::Raddr { raddr: remote.addr() + off, rkey: remote.keys.rkey };
        let sge = |off: u64, len: u32| Seg::Data { addr: src.addr() + off, len, lkey: src.keys.lkey };
        let (lid_a, dci_qpn) = (d.a.info().lid, d.dci.qpn());
        let check_resp = |c: &Polled, cop: u8, wqe: u16, bytes: u32| {
            assert_eq!(c.opcode(), cop, "roce={roce}");
            let v = c.cqe();
            assert_eq!(v.sop_drop_qpn(), d.num, "DCT number, not the handle");
            assert_eq!(v.srqn_uidx(), 0x42);
            assert_eq!(v.wqe_counter(), wqe, "SRQ index");
            assert_eq!(v.flags_rqpn(), dci_qpn, "source = the DCI");
            assert_eq!(v.slid(), lid_a);
            assert_eq!(v.byte_cnt(), bytes);
        };

        // WRITE
        d.dci.post(op::RDMA_WRITE, SIGNALED, [0; 4], &[av, raddr(0), sge(0, 32)]);
        assert_eq!(&remote.read()[..32], &src.read()[..32]);
        assert!(d.rcq_b.poll().is_none());
        // WRITE_IMM: data to raddr, one SRQ WQE consumed.
        d.dci.post(op::RDMA_WRITE_IMM, SIGNALED, [1, 2, 3, 4], &[av, raddr(32), sge(32, 16)]);
        let c = d.rcq_b.expect_one();
        check_resp(&c, cqe_opcode::RESP_WR_IMM, 0, 16);
        assert_eq!(c.cqe().imm_inval_pkey(), [1, 2, 3, 4]);
        assert_eq!(&remote.read()[32..48], &src.read()[32..48]);
        // READ
        d.dci.post(
            op::RDMA_READ,
            SIGNALED,
            [0; 4],
            &[av, raddr(64), Seg::Data { addr: local.addr(), len: 64, lkey: local.keys.lkey }],
        );
        assert_eq!(&local.read()[..], &remote.read()[64..128]);
        // SEND, SEND_IMM (inline)
        d.dci.post(op::SEND, SIGNALED, [0; 4], &[av, sge(100, 50)]);
        check_resp(&d.rcq_b.expect_one(), cqe_opcode::RESP_SEND, 1, 50);
        assert_eq!(&rbuf.read()[64..114], &src.read()[100..150]);
        d.dci.post(op::SEND_IMM, SIGNALED | 2, [9, 9, 9, 9], &[av, Seg::Inline(b"dc-inline")]);
        let c = d.rcq_b.expect_one();
        check_resp(&c, cqe_opcode::RESP_SEND_IMM, 2, 9);
        assert!(c.cqe().se());
        assert_eq!(&rbuf.read()[128..137], b"dc-inline");
        // Atomics (host byte order).
        let word = |b: &Buf, off: usize| u64::from_ne_bytes(b.read()[off..off + 8].try_into().unwrap());
        let old = word(&remote, 200);
        let res = Seg::Data { addr: local.addr(), len: 8, lkey: local.keys.lkey };
        d.dci.post(
            op::ATOMIC_FA,
            SIGNALED,
            [0; 4],
            &[av, raddr(200), Seg::Atomic { swap_add: 5, compare: 0 }, res],
        );
        assert_eq!((word(&local, 0), word(&remote, 200)), (old, old.wrapping_add(5)));
        d.dci.post(
            op::ATOMIC_CS,
            SIGNALED,
            [0; 4],
            &[av, raddr(200), Seg::Atomic { swap_add: 0xabc, compare: old.wrapping_add(5) }, res],
        );
        assert_eq!((word(&local, 0), word(&remote, 200)), (old.wrapping_add(5), 0xabc));
        let reqs = d.scq_a.poll_all();
        let ops: Vec<u8> = reqs.iter().map(|c| c.wqe_opcode()).collect();
        assert_eq!(ops, [0x08, 0x09, 0x10, 0x0a, 0x0b, 0x12, 0x11], "roce={roce}");
        assert!(reqs.iter().all(|c| c.opcode() == cqe_opcode::REQ && c.qpn() == dci_qpn));
        assert_eq!(reqs[2].cqe().byte_cnt(), 64);
    }
}

#[test]
fn legacy_16_byte_av_on_infiniband() {
    let mut d = dc(false, ALL_ACCESS, 7);
    let dst = Buf::new(&d.b, d.pdb, 16, ALL_ACCESS);
    let av = Av { ext: false, ..d.av() };
    d.dci.post(
        op::RDMA_WRITE,
        SIGNALED,
        [0; 4],
        &[Seg::Av(av), Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey }, Seg::Inline(b"legacy")],
    );
    assert_eq!(d.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    assert_eq!(&dst.read()[..6], b"legacy");
}

#[test]
fn wrong_dc_key_is_dropped_by_the_dct_and_exhausts_the_dci() {
    for roce in [false, true] {
        let mut d = dc(roce, ALL_ACCESS, 7);
        let dst = Buf::new(&d.b, d.pdb, 16, ALL_ACCESS);
        let w = |av| [Seg::Av(av), Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey }, Seg::Inline(b"no")];
        let i = d.dci.post(op::RDMA_WRITE, 0, [0; 4], &w(d.av_key(KEY ^ 1)));
        let j = d.dci.post(op::RDMA_WRITE, SIGNALED, [0; 4], &w(d.av()));
        let v = d.scq_a.poll_all();
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].syndrome(), v[0].wqe_counter()), (syndrome::TRANSPORT_RETRY_EXC_ERR, i));
        assert_eq!((v[1].syndrome(), v[1].wqe_counter()), (syndrome::WR_FLUSH_ERR, j));
        assert_eq!(d.dci.state(), QpState::Err);
        assert_eq!(d.b.stats().dc_key_violations, 1, "counted at the DCT's NIC");
        assert_eq!(d.a.stats().dc_key_violations, 0);
        assert_eq!(&dst.read()[..2], &[0, 0]);
        assert_eq!(d.b.qp_state(d.dct).unwrap(), QpState::Rtr, "the DCT is unaffected");
        // Another DCI with the right key gets through.
        let mut dci2 = dci_qp(&d.a, d.pda, d.scq_a.res.cqn, 8, 7);
        dci_up(&d.a, dci2.qpn(), 7);
        dci2.post(op::RDMA_WRITE, SIGNALED, [0; 4], &w(d.av()));
        assert_eq!(d.scq_a.expect_one().opcode(), cqe_opcode::REQ);
        assert_eq!(&dst.read()[..2], b"no");
    }
}

#[test]
fn unreachable_dct_is_transport_retry_exceeded() {
    // 0: unknown LID / GID; 1: wrong MAC (RoCE) or GRH with a wrong GID (IB);
    // 2: unknown DCT number; 3: DCT in ERR; 4: DCT in RESET.
    for roce in [false, true] {
        for case in 0..5 {
            let mut d = dc(roce, ALL_ACCESS, 7);
            let mut av = d.av();
            match case {
                0 if roce => av.rgid[15] ^= 0x55,
                0 => av.rlid = 99,
                1 if roce => av.rmac[5] ^= 1,
                1 => {
                    av.grh = true;
                    av.rgid = [0xfe; 16];
                }
                2 => av.dqpn ^= 0x3,
                3 => {
                    d.b.modify_qp(d.dct, &QpModify { state: Some(QpState::Err), ..Default::default() })
                        .unwrap()
                }
                _ => {
                    d.b.modify_qp(d.dct, &QpModify { state: Some(QpState::Reset), ..Default::default() })
                        .unwrap()
                }
            }
            let i = d.dci.post(op::SEND, 0, [0; 4], &[Seg::Av(av), Seg::Inline(b"?")]);
            let e = d.scq_a.expect_one();
            assert_eq!(
                (e.syndrome(), e.wqe_counter()),
                (syndrome::TRANSPORT_RETRY_EXC_ERR, i),
                "{roce} {case}"
            );
            assert_eq!(d.dci.state(), QpState::Err);
        }
    }
    // IB with a GRH and the right GID resolves.
    let mut d = dc(false, ALL_ACCESS, 7);
    let rb = Buf::new(&d.b, d.pdb, 16, ALL_ACCESS);
    d.srq.post(&[(rb.addr(), 16, rb.keys.lkey)]);
    let av = Av { grh: true, rgid: d.b.info().gid, hop_limit: 1, ..d.av() };
    d.dci.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(av), Seg::Inline(b"grh")]);
    assert_eq!(d.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    assert_eq!(&rb.read()[..3], b"grh");
}

#[test]
fn empty_srq_is_rnr_and_retries_until_posted() {
    let mut d = dc(false, ALL_ACCESS, 7);
    let i = d.dci.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(d.av()), Seg::Inline(b"later")]);
    for _ in 0..10 {
        d.a.tick();
    }
    assert!(d.scq_a.poll().is_none(), "rnr_retry 7 retries forever");
    assert_eq!(d.a.stats().rnr_naks, 11);
    let rb = Buf::new(&d.b, d.pdb, 16, ALL_ACCESS);
    let w = d.srq.post(&[(rb.addr(), 16, rb.keys.lkey)]);
    d.a.tick();
    let c = d.scq_a.expect_one();
    assert_eq!((c.opcode(), c.wqe_counter()), (cqe_opcode::REQ, i));
    assert_eq!(d.rcq_b.expect_one().wqe_counter(), w);
    assert_eq!(&rb.read()[..5], b"later");
}

#[test]
fn rnr_retry_exceeded_on_empty_srq() {
    let mut d = dc(true, ALL_ACCESS, 2);
    let i = d.dci.post(op::SEND_IMM, 0, [0; 4], &[Seg::Av(d.av()), Seg::Inline(b"x")]);
    d.a.tick();
    assert!(d.scq_a.poll().is_none());
    d.a.tick();
    let e = d.scq_a.expect_one();
    assert_eq!((e.syndrome(), e.vendor(), e.wqe_counter()), (syndrome::RNR_RETRY_EXC_ERR, 0x82, i));
    assert_eq!(d.dci.state(), QpState::Err);
    assert_eq!(d.b.qp_state(d.dct).unwrap(), QpState::Rtr);
}

#[test]
fn receive_too_small_fails_the_dci_but_not_the_dct() {
    let mut d = dc(false, ALL_ACCESS, 7);
    let rb = Buf::new(&d.b, d.pdb, 64, ALL_ACCESS);
    let w0 = d.srq.post(&[(rb.addr(), 4, rb.keys.lkey)]);
    let w1 = d.srq.post(&[(rb.addr() + 16, 16, rb.keys.lkey)]);
    let i = d.dci.post(op::SEND, 0, [0; 4], &[Seg::Av(d.av()), Seg::Inline(b"too long")]);
    let e = d.scq_a.expect_one();
    assert_eq!((e.syndrome(), e.vendor(), e.wqe_counter()), (syndrome::REMOTE_INVAL_REQ_ERR, 0x8a, i));
    assert_eq!(d.dci.state(), QpState::Err);
    let r = d.rcq_b.expect_one();
    assert_eq!(
        (r.opcode(), r.syndrome(), r.err().wqe_counter()),
        (cqe_opcode::RESP_ERR, syndrome::LOCAL_LENGTH_ERR, w0)
    );
    assert_eq!(r.err().s_wqe_opcode_qpn() & 0xff_ffff, d.num);
    assert_eq!(r.err().srqn(), 0x42);
    assert_eq!(d.b.qp_state(d.dct).unwrap(), QpState::Rtr, "a DCT never enters ERR from remote traffic");
    let mut dci2 = dci_qp(&d.a, d.pda, d.scq_a.res.cqn, 8, 7);
    dci_up(&d.a, dci2.qpn(), 7);
    dci2.post(op::SEND, SIGNALED, [0; 4], &[Seg::Av(d.av()), Seg::Inline(b"fits")]);
    assert_eq!(d.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    let c = d.rcq_b.expect_one();
    assert_eq!((c.opcode(), c.wqe_counter(), c.cqe().flags_rqpn()), (cqe_opcode::RESP_SEND, w1, dci2.qpn()));
}

#[test]
fn remote_access_errors_leave_the_dct_alone() {
    // DCT without remote write: REMOTE_INVAL_REQ; bad rkey on READ: REMOTE_ACCESS.
    let mut d = dc(false, access::REMOTE_READ, 7);
    let m = Buf::new(&d.b, d.pdb, 64, ALL_ACCESS);
    let other_pd = d.b.alloc_pd().unwrap();
    let foreign = Buf::new(&d.b, other_pd, 64, ALL_ACCESS);
    let sink = Buf::new(&d.a, d.pda, 64, ALL_ACCESS);
    let sink_seg = Seg::Data { addr: sink.addr(), len: 8, lkey: sink.keys.lkey };
    let cases: [(u8, Seg, u8); 4] = [
        (op::RDMA_WRITE, Seg::Raddr { raddr: m.addr(), rkey: m.keys.rkey }, syndrome::REMOTE_INVAL_REQ_ERR),
        (op::RDMA_READ, Seg::Raddr { raddr: m.addr(), rkey: 0x4242 }, syndrome::REMOTE_ACCESS_ERR),
        (
            op::RDMA_READ,
            Seg::Raddr { raddr: foreign.addr(), rkey: foreign.keys.rkey },
            syndrome::REMOTE_ACCESS_ERR,
        ),
        (op::ATOMIC_FA, Seg::Raddr { raddr: m.addr(), rkey: m.keys.rkey }, syndrome::REMOTE_INVAL_REQ_ERR),
    ];
    for (k, (opc, ra, synd)) in cases.into_iter().enumerate() {
        let mut dci = dci_qp(&d.a, d.pda, d.scq_a.res.cqn, 8, 7);
        dci_up(&d.a, dci.qpn(), 7);
        let segs: Vec<Seg> = match opc {
            op::ATOMIC_FA => vec![Seg::Av(d.av()), ra, Seg::Atomic { swap_add: 1, compare: 0 }, sink_seg],
            _ => vec![Seg::Av(d.av()), ra, sink_seg],
        };
        let i = dci.post(opc, 0, [0; 4], &segs);
        let e = d.scq_a.expect_one();
        assert_eq!((e.syndrome(), e.wqe_counter()), (synd, i), "case {k}");
        assert_eq!(dci.state(), QpState::Err);
        assert_eq!(d.b.qp_state(d.dct).unwrap(), QpState::Rtr);
    }
    // The DCT still serves READs.
    d.dci.post(
        op::RDMA_READ,
        SIGNALED,
        [0; 4],
        &[Seg::Av(d.av()), Seg::Raddr { raddr: m.addr(), rkey: m.keys.rkey }, sink_seg],
    );
    assert_eq!(d.scq_a.expect_one().opcode(), cqe_opcode::REQ);
    assert!(d.rcq_b.poll().is_none());
}

#[test]
fn many_dcis_to_one_dct_every_message_once_in_per_dci_order() {
    let mut d = dc(false, ALL_ACCESS, 7);
    const N: usize = 4;
    const M: u16 = 25;
    let mut dcis: Vec<TestQp> = (0..N)
        .map(|i| {
            let q = dci_qp(&d.a, d.pda, d.scq_a.res.cqn, 64, 0x50 + i as u32);
            dci_up(&d.a, q.qpn(), 7);
            q
        })
        .collect();
    let rb = Buf::new(&d.b, d.pdb, 64 * 16, ALL_ACCESS);
    let mut posted = std::collections::HashMap::new();
    let post_one = |srq: &mut TestSrq, posted: &mut std::collections::HashMap<u16, ()>| {
        let idx = srq.head;
        let i = srq.post(&[(rb.addr() + u64::from(idx) * 16, 16, rb.keys.lkey)]);
        posted.insert(i, ());
    };
    for _ in 0..20 {
        post_one(&mut d.srq, &mut posted);
    }
    let mut next = [0u16; N];
    let mut seen = vec![Vec::new(); N];
    let av = d.av();
    let mut round = 0;
    // Interleave the DCIs in a varying order; replenish the SRQ as CQEs arrive.
    while seen.iter().map(Vec::len).sum::<usize>() < N * usize::from(M) {
        for k in 0..N {
            let i = (k * 3 + round) % N;
            if next[i] < M {
                let tag = ((i as u32) << 16 | u32::from(next[i])).to_be_bytes();
                dcis[i].post(op::SEND_IMM, 0, tag, &[Seg::Av(av), Seg::Inline(&tag)]);
                next[i] += 1;
            }
        }
        round += 1;
        for c in d.rcq_b.poll_all() {
            assert_eq!(c.opcode(), cqe_opcode::RESP_SEND_IMM, "{c:?}");
            let imm = u32::from_be_bytes(c.cqe().imm_inval_pkey());
            let (i, seq) = ((imm >> 16) as usize, imm as u16);
            assert_eq!(c.cqe().flags_rqpn(), dcis[i].qpn());
            let w = usize::from(c.wqe_counter());
            assert_eq!(&rb.read()[w * 16..w * 16 + 4], &imm.to_be_bytes());
            assert!(posted.remove(&c.wqe_counter()).is_some(), "each SRQ WQE used once");
            seen[i].push(seq);
            d.srq.free(c.wqe_counter());
            post_one(&mut d.srq, &mut posted);
        }
        for _ in 0..2 {
            d.a.tick();
        }
        assert!(round < 1000, "no progress");
    }
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(*s, (0..M).collect::<Vec<_>>(), "DCI {i}: every message once, in order");
    }
    assert!(d.scq_a.poll_all().iter().all(|c| c.opcode() == cqe_opcode::REQ));
    assert!(dcis.iter().all(|q| q.state() == QpState::Rts));
}

#[test]
fn dci_and_dct_state_machines() {
    let (_f, a, b) = hosts(false, 2);
    let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let cq = TestCq::new(&a, 16, 64);
    let dci = dci_qp(&a, pda, cq.res.cqn, 8, 1);
    let q = dci.qpn();
    let m = |s| QpModify { state: Some(s), ..Default::default() };
    assert!(matches!(a.modify_qp(q, &m(QpState::Init)), Err(SimError::InvalidArgument { .. })), "port");
    a.modify_qp(q, &QpModify { port: Some(1), ..m(QpState::Init) }).unwrap();
    assert!(matches!(a.modify_qp(q, &m(QpState::Rtr)), Err(SimError::InvalidArgument { .. })), "path_mtu");
    a.modify_qp(q, &QpModify { path_mtu: Some(2048), ..m(QpState::Rtr) }).unwrap();
    assert!(matches!(
        a.modify_qp(q, &QpModify { sq_psn: Some(0), ..m(QpState::Rts) }),
        Err(SimError::InvalidArgument { .. })
    ));
    dci_up_rts(&a, q);
    assert_eq!(a.qp_state(q).unwrap(), QpState::Rts);
    let cqb = TestCq::new(&b, 16, 64);
    let srq = TestSrq::new(&b, pdb, 8, 64);
    let dct = dct_qp(&b, pdb, cqb.res.cqn, srq.res.srqn, 0, 1);
    assert!(
        matches!(
            b.modify_qp(dct, &QpModify { port: Some(1), ..m(QpState::Init) }),
            Err(SimError::InvalidArgument { .. })
        ),
        "access_flags"
    );
}

fn dci_up_rts(a: &Nic, q: u32) {
    a.modify_qp(
        q,
        &QpModify {
            state: Some(QpState::Rts),
            timeout: Some(1),
            retry_cnt: Some(1),
            rnr_retry: Some(1),
            sq_psn: Some(0),
            max_rd_atomic: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
}
