//! Property: random mixed traffic — RC WRITE/READ/SEND, UD SEND, DC
//! WRITE/READ/SEND_IMM/FETCH_ADD, and masked compare-and-swap and fetch-and-add
//! of 4 and 8 bytes on RC and DC (step 13) — among four simulated hosts, over
//! InfiniBand and over RoCE v2, leaves every host's memory equal to a plain
//! reference model, and every completion (signaled sends, every receive) is
//! accounted for exactly once, in per-queue order, with the expected opcode
//! and length.
//!
//! Each host's 1 MiB MR: [0, 256K) RDMA targets, [256K, 512K) receive
//! buffers, [512K, 768K) send sources (never written by the NIC), [768K, 1M)
//! READ sinks and atomic results. UD receive buffers start with the 40-byte
//! GRH slot, which the model does not predict (the IP header on RoCE) and so
//! masks.

mod common;
use std::collections::HashMap;

use common::*;
use mlx5::sim::ExecMode;
use mlx5::sim::Sim;
use mlx5::wqe::{MaskedCs, MaskedFa};
use mlx5::{ConnectParams, Dci, Dct, QpConfig, RcQp, Sge, Status, UdQp, WcOpcode, WqeFlags};
use proptest::prelude::*;

const HOSTS: usize = 4;
const RECV: usize = 256 << 10;
const SRC: usize = 512 << 10;
const SINK: usize = 768 << 10;
const MAX: usize = 8192;
const QKEY: u32 = 0x5151;

#[derive(Clone, Debug)]
enum Kind {
    RcWrite,
    RcRead,
    RcSend,
    UdSend,
    DcWrite,
    DcRead,
    DcSendImm(u32),
    DcFa(u64),
    /// A masked atomic from the RC QP (`false`) or the DCI (`true`).
    Masked(bool, Masked),
}

/// A masked atomic: compare-and-swap (`cs`) or fetch-and-add, on 8 bytes (`wide`)
/// or 4; `v`: swap/add, compare/boundary, swap mask, compare mask.
#[derive(Clone, Debug)]
struct Masked {
    cs: bool,
    wide: bool,
    v: [u64; 4],
}

#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    src: usize,
    dst: usize,
    len: usize,
    a: usize,
    b: usize,
    signaled: bool,
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        Just(Kind::RcWrite),
        Just(Kind::RcRead),
        Just(Kind::RcSend),
        Just(Kind::UdSend),
        Just(Kind::DcWrite),
        Just(Kind::DcRead),
        any::<u32>().prop_map(Kind::DcSendImm),
        any::<u64>().prop_map(Kind::DcFa),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<[u64; 4]>(), 0..3u8).prop_map(
            |(dc, cs, wide, mut v, masks)| {
                // Masks of all ones and of zeros as often as random ones.
                match masks {
                    0 => v[3] = 0,
                    1 => (v[2], v[3]) = (u64::MAX, u64::MAX),
                    _ => {}
                }
                Kind::Masked(dc, Masked { cs, wide, v })
            }
        ),
    ];
    (kind, 0..HOSTS, 1..HOSTS, 0..=MAX, 0..(256 << 10) - MAX, 0..(256 << 10) - MAX, any::<bool>()).prop_map(
        |(kind, src, d, len, a, b, signaled)| Op { kind, src, dst: (src + d) % HOSTS, len, a, b, signaled },
    )
}

/// Completions per (host, QPN): (entry, opcode, byte_len), in arrival order.
type Ledger = HashMap<(usize, u32), Vec<(u64, WcOpcode, u32)>>;

struct Host {
    rc: Vec<Option<RcQp<Sim, u64>>>,
    ud: UdQp<Sim, u64>,
    dci: Dci<Sim, u64>,
    dct: Dct<Sim, u64>,
}

fn run(addressing: Addressing, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (_f, mut n) = cluster(HOSTS, addressing, ExecMode::Deterministic);
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let p = ConnectParams::default();
    let mut hosts: Vec<Host> = n
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let ud = h.ctx.create_ud_qp(&h.pd, &h.cq, &h.cq, None, &cfg).unwrap();
            ud.activate(&ConnectParams { qkey: QKEY, ..ConnectParams::default() }).unwrap();
            let dci = h.ctx.create_dci(&h.pd, &h.cq, &cfg).unwrap();
            dci.activate(&p).unwrap();
            let dct = h
                .ctx
                .create_dct(
                    &h.pd,
                    &h.cq,
                    &h.srq,
                    &QpConfig { dc_key: 0xdc00 + i as u64, ..QpConfig::default() },
                )
                .unwrap();
            dct.activate(&p).unwrap();
            Host { rc: (0..HOSTS).map(|_| None).collect(), ud, dci, dct }
        })
        .collect();
    for i in 0..HOSTS {
        for j in i + 1..HOSTS {
            let a = n[i].ctx.create_rc_qp(&n[i].pd, &n[i].cq, &n[i].cq, &cfg).unwrap();
            let b = n[j].ctx.create_rc_qp(&n[j].pd, &n[j].cq, &n[j].cq, &cfg).unwrap();
            a.activate(&ConnectParams { remote: Some(b.local_info().unwrap()), ..p.clone() }).unwrap();
            b.activate(&ConnectParams { remote: Some(a.local_info().unwrap()), ..p.clone() }).unwrap();
            hosts[i].rc[j] = Some(a);
            hosts[j].rc[i] = Some(b);
        }
    }
    for h in &n {
        fill(&h.mr, 0, MR_LEN, h.port.lid as u8 ^ h.port.mac[5]);
    }
    let mut model: Vec<Vec<u8>> = n.iter().map(|h| h.mr.to_vec()).collect();
    let mut grh_slots: Vec<(usize, usize)> = Vec::new();
    // Expected completions per (host, queue): (entry, opcode, byte_len).
    let mut expected: Ledger = HashMap::new();
    let mut got: Ledger = HashMap::new();
    let mut unsignaled_run: HashMap<(usize, u32), u32> = HashMap::new();
    let mtu = n[0].port.active_mtu as usize;

    for (id, op) in ops.iter().enumerate() {
        let id = id as u64;
        let (s, d) = (op.src, op.dst);
        let len = if matches!(op.kind, Kind::UdSend) { op.len.min(mtu) } else { op.len };
        let payload = model[s][SRC + op.a..SRC + op.a + len].to_vec();
        let (la, lk) = (n[s].mr.addr(), n[s].mr.lkey());
        let (ra, rk) = (n[d].mr.addr(), n[d].mr.rkey());
        let dctn = hosts[d].dct.dct_number().unwrap();
        let dckey = 0xdc00 + d as u64;
        let av = n[d].av(0);
        let queue = match op.kind {
            Kind::RcWrite | Kind::RcRead | Kind::RcSend | Kind::Masked(false, _) => {
                hosts[s].rc[d].as_ref().unwrap().qpn()
            }
            Kind::UdSend => hosts[s].ud.qpn(),
            _ => hosts[s].dci.qpn(),
        };
        // Reads and atomics are always signaled; others follow the op, with
        // at most 3 unsignaled in a row per queue so the ring keeps draining.
        let run = unsignaled_run.entry((s, queue)).or_insert(0);
        let signaled = op.signaled
            || *run >= 3
            || matches!(op.kind, Kind::RcRead | Kind::DcRead | Kind::DcFa(_) | Kind::Masked(..));
        *run = if signaled { 0 } else { *run + 1 };
        let f = if signaled { WqeFlags::SIGNALED } else { WqeFlags::NONE };
        let (wc, blen) = match &op.kind {
            Kind::RcWrite | Kind::DcWrite => {
                let dst = op.b;
                model[d][dst..dst + len].copy_from_slice(&payload);
                if let Kind::RcWrite = op.kind {
                    let q = hosts[s].rc[d].as_ref().unwrap();
                    q.wqe_builder(id)
                        .unwrap()
                        .ctrl_rdma_write(f)
                        .unwrap()
                        .rdma(ra + dst as u64, rk)
                        .unwrap()
                        .sge(Sge::new(la + (SRC + op.a) as u64, len as u32, lk))
                        .unwrap()
                        .finish()
                        .unwrap();
                } else {
                    let q = &hosts[s].dci;
                    q.wqe_builder(id)
                        .unwrap()
                        .ctrl_rdma_write(f)
                        .unwrap()
                        .av(dckey, dctn, &av)
                        .unwrap()
                        .rdma(ra + dst as u64, rk)
                        .unwrap()
                        .sge(Sge::new(la + (SRC + op.a) as u64, len as u32, lk))
                        .unwrap()
                        .finish()
                        .unwrap();
                }
                (WcOpcode::RdmaWrite, len as u32)
            }
            Kind::RcRead | Kind::DcRead => {
                let (from, to) = (op.b, SINK + (op.a % ((256 << 10) - MAX)));
                let data = model[d][from..from + len].to_vec();
                model[s][to..to + len].copy_from_slice(&data);
                if let Kind::RcRead = op.kind {
                    let q = hosts[s].rc[d].as_ref().unwrap();
                    q.wqe_builder(id)
                        .unwrap()
                        .ctrl_rdma_read(f)
                        .unwrap()
                        .rdma(ra + from as u64, rk)
                        .unwrap()
                        .sge(Sge::new(la + to as u64, len as u32, lk))
                        .unwrap()
                        .finish()
                        .unwrap();
                } else {
                    let q = &hosts[s].dci;
                    q.wqe_builder(id)
                        .unwrap()
                        .ctrl_rdma_read(f)
                        .unwrap()
                        .av(dckey, dctn, &av)
                        .unwrap()
                        .rdma(ra + from as u64, rk)
                        .unwrap()
                        .sge(Sge::new(la + to as u64, len as u32, lk))
                        .unwrap()
                        .finish()
                        .unwrap();
                }
                (WcOpcode::RdmaRead, len as u32)
            }
            Kind::RcSend | Kind::UdSend | Kind::DcSendImm(_) => {
                let rbuf = RECV + op.b;
                let (rq_key, grh) = match op.kind {
                    Kind::RcSend => {
                        let rq = hosts[d].rc[s].as_ref().unwrap();
                        rq.post_recv(
                            id,
                            &[Sge { addr: ra + rbuf as u64, len: MAX as u32, lkey: n[d].mr.lkey() }],
                        )
                        .unwrap();
                        (rq.qpn(), 0)
                    }
                    Kind::UdSend => {
                        let rq = &hosts[d].ud;
                        rq.post_recv(
                            id,
                            &[Sge { addr: ra + rbuf as u64, len: MAX as u32, lkey: n[d].mr.lkey() }],
                        )
                        .unwrap();
                        grh_slots.push((d, rbuf));
                        (rq.qpn(), 40)
                    }
                    _ => {
                        n[d].srq
                            .post_recv(
                                id,
                                &[Sge { addr: ra + rbuf as u64, len: MAX as u32, lkey: n[d].mr.lkey() }],
                            )
                            .unwrap();
                        (dctn, 0)
                    }
                };
                model[d][rbuf + grh..rbuf + grh + len].copy_from_slice(&payload);
                let (rwc, imm) = match op.kind {
                    Kind::DcSendImm(imm) => (WcOpcode::RecvImm, Some(imm)),
                    _ => (WcOpcode::Recv, None),
                };
                expected.entry((d, rq_key)).or_default().push((id, rwc, (len + grh) as u32));
                let src = la + (SRC + op.a) as u64;
                match op.kind {
                    Kind::RcSend => {
                        let q = hosts[s].rc[d].as_ref().unwrap();
                        q.wqe_builder(id)
                            .unwrap()
                            .ctrl_send(f)
                            .unwrap()
                            .sge(Sge::new(src, len as u32, lk))
                            .unwrap()
                            .finish()
                            .unwrap();
                    }
                    Kind::UdSend => {
                        let q = &hosts[s].ud;
                        let dq = hosts[d].ud.qpn();
                        q.wqe_builder(id)
                            .unwrap()
                            .ctrl_send(f)
                            .unwrap()
                            .datagram(&av, dq, QKEY)
                            .unwrap()
                            .sge(Sge::new(src, len as u32, lk))
                            .unwrap()
                            .finish()
                            .unwrap();
                    }
                    _ => {
                        let q = &hosts[s].dci;
                        q.wqe_builder(id)
                            .unwrap()
                            .ctrl_send_imm(f, imm.unwrap())
                            .unwrap()
                            .av(dckey, dctn, &av)
                            .unwrap()
                            .sge(Sge::new(src, len as u32, lk))
                            .unwrap()
                            .finish()
                            .unwrap();
                    }
                }
                (if imm.is_some() { WcOpcode::SendImm } else { WcOpcode::Send }, len as u32)
            }
            Kind::DcFa(add) => {
                let (at, to) = (op.b & !7, SINK + (op.a & !7) % ((256 << 10) - MAX));
                let old = u64::from_ne_bytes(model[d][at..at + 8].try_into().unwrap());
                model[d][at..at + 8].copy_from_slice(&old.wrapping_add(*add).to_ne_bytes());
                model[s][to..to + 8].copy_from_slice(&old.to_ne_bytes());
                let q = &hosts[s].dci;
                q.wqe_builder(id)
                    .unwrap()
                    .ctrl_atomic_fa(f, *add)
                    .unwrap()
                    .av(dckey, dctn, &av)
                    .unwrap()
                    .rdma(ra + at as u64, rk)
                    .unwrap()
                    .result(Sge::new(la + to as u64, 8, lk))
                    .unwrap()
                    .finish()
                    .unwrap();
                (WcOpcode::AtomicFa, 8)
            }
            Kind::Masked(dc, m) => {
                // 4-byte values are big-endian in memory and in the result, 8-byte ones
                // in host order (the device's atomic mode): spec §3.5 as modelled.
                let w = if m.wide { 8 } else { 4 };
                let (at, to) = (op.b & !7, SINK + (op.a & !7) % ((256 << 10) - MAX));
                let (bits, lim) = if m.wide { (64, u64::MAX) } else { (32, u64::from(u32::MAX)) };
                let old = if m.wide {
                    u64::from_ne_bytes(model[d][at..at + 8].try_into().unwrap())
                } else {
                    u64::from(u32::from_be_bytes(model[d][at..at + 4].try_into().unwrap()))
                };
                let [a, b, c, e] = m.v.map(|x| x & lim);
                let new =
                    if m.cs { model_masked_cs(old, a, b, c, e) } else { model_masked_fa(old, a, b, bits) };
                let enc = |x: u64| {
                    if m.wide {
                        x.to_ne_bytes().to_vec()
                    } else {
                        (x as u32).to_be_bytes().to_vec()
                    }
                };
                model[d][at..at + w].copy_from_slice(&enc(new));
                model[s][to..to + w].copy_from_slice(&enc(old));
                let result = Sge::new(la + to as u64, w as u32, lk);
                macro_rules! post {
                    ($wb:expr) => {{
                        let wb = $wb;
                        let wb = match (m.cs, m.wide) {
                            (true, true) => wb.ctrl_masked_cs(
                                f,
                                MaskedCs { swap: a, compare: b, swap_mask: c, compare_mask: e },
                            ),
                            (true, false) => wb.ctrl_masked_cs(
                                f,
                                MaskedCs {
                                    swap: a as u32,
                                    compare: b as u32,
                                    swap_mask: c as u32,
                                    compare_mask: e as u32,
                                },
                            ),
                            (false, true) => wb.ctrl_masked_fa(f, MaskedFa { add: a, field_boundary: b }),
                            (false, false) => {
                                wb.ctrl_masked_fa(f, MaskedFa { add: a as u32, field_boundary: b as u32 })
                            }
                        };
                        wb.unwrap()
                    }};
                }
                if *dc {
                    post!(hosts[s].dci.wqe_builder(id).unwrap())
                        .av(dckey, dctn, &av)
                        .unwrap()
                        .rdma(ra + at as u64, rk)
                        .unwrap()
                        .result(result)
                        .unwrap()
                        .finish()
                        .unwrap();
                } else {
                    let q = hosts[s].rc[d].as_ref().unwrap();
                    post!(q.wqe_builder(id).unwrap())
                        .rdma(ra + at as u64, rk)
                        .unwrap()
                        .result(result)
                        .unwrap()
                        .finish()
                        .unwrap();
                }
                (if m.cs { WcOpcode::MaskedAtomicCs } else { WcOpcode::MaskedAtomicFa }, w as u32)
            }
        };
        if signaled {
            expected.entry((s, queue)).or_default().push((id, wc, blen));
        }
        for (h, node) in n.iter_mut().enumerate() {
            for (c, e) in node.drain() {
                prop_assert_eq!(c.status, Status::Success, "op {} completion {:?}", id, c);
                got.entry((h, c.qpn)).or_default().push((e, c.opcode, c.byte_len));
            }
        }
    }
    prop_assert_eq!(got, expected);
    for (d, off) in grh_slots {
        let actual = bytes(&n[d].mr, off, 40);
        model[d][off..off + 40].copy_from_slice(&actual);
    }
    for (h, node) in n.iter().enumerate() {
        let actual = node.mr.to_vec();
        prop_assert!(
            actual == model[h],
            "host {} differs at {:?}",
            h,
            actual.iter().zip(&model[h]).position(|(x, y)| x != y)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 300, ..ProptestConfig::default() })]
    #[test]
    fn mixed_rc_ud_dc_over_infiniband(ops in prop::collection::vec(op(), 1..60)) {
        run(Addressing::Ib, ops)?;
    }
    #[test]
    fn mixed_rc_ud_dc_over_roce_v2(ops in prop::collection::vec(op(), 1..60)) {
        run(Addressing::Roce, ops)?;
    }
}
