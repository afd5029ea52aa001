//! Property: random streams of RC WQEs (every opcode, 0 B..64 KiB, 1–3
//! SGEs or inline, signaled mix, batched doorbells, ring wrap) between two
//! simulated hosts leave both hosts' memory equal to a plain reference
//! model, return every signaled WQE's entry exactly once and in order, and
//! report the expected CQE fields; receives complete in order with their
//! lengths and immediates.

mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::{AccessFlags, ConnectParams, QpConfig, Sge, Status, WcOpcode, WqeFlags};
use proptest::prelude::*;

const HALF: usize = MR_LEN / 2; // A: sources below, READ/atomic sinks above. B: targets below, receives above.
const MAX_LEN: usize = 64 * 1024;
const INLINE: u32 = 256;

#[derive(Clone, Debug)]
enum Kind {
    Write,
    WriteImm(u32),
    Send,
    SendImm(u32),
    Read,
    Fa(u64),
    Cs { cmp_hit: bool, swap: u64 },
    Nop,
}

#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    len: usize,
    src: usize,
    dst: usize,
    sges: usize,
    inline: bool,
    signaled: bool,
    batch: bool,
    /// Post through the BlueFlame register (when not batched).
    blueflame: bool,
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        3 => Just(Kind::Write),
        1 => any::<u32>().prop_map(Kind::WriteImm),
        2 => Just(Kind::Send),
        1 => any::<u32>().prop_map(Kind::SendImm),
        2 => Just(Kind::Read),
        1 => any::<u64>().prop_map(Kind::Fa),
        1 => (any::<bool>(), any::<u64>()).prop_map(|(cmp_hit, swap)| Kind::Cs { cmp_hit, swap }),
        1 => Just(Kind::Nop),
    ];
    let len = prop_oneof![3 => 0usize..=300, 1 => 0usize..=MAX_LEN];
    let flags = (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>());
    (kind, len, 0usize..HALF - MAX_LEN, 0usize..HALF - MAX_LEN, 1usize..=3, flags).prop_map(
        |(kind, len, src, dst, sges, (inline, signaled, batch, blueflame))| Op {
            inline: inline && len <= INLINE as usize && !matches!(kind, Kind::Read),
            kind,
            len,
            src,
            dst: dst & !7,
            sges,
            signaled,
            batch,
            blueflame,
        },
    )
}

/// Post through the path the op asks for: batched, BlueFlame, or doorbell.
fn finish<S: mlx5::wqe::Finishable>(b: mlx5::WqeBuilder<'_, mlx5::sim::Sim, u64, S>, op: &Op) {
    if op.batch {
        b.finish_batch()
    } else if op.blueflame {
        b.finish_with_blueflame()
    } else {
        b.finish()
    }
    .unwrap();
}

/// Split `len` bytes at `base` into `n` consecutive SGEs.
fn split(base: u64, len: usize, n: usize, lkey: u32) -> Vec<Sge> {
    let n = n.min(len.max(1));
    let mut v = Vec::new();
    let mut off = 0;
    for i in 0..n {
        let l = if i + 1 == n { len - off } else { len / n };
        v.push(Sge { addr: base + off as u64, len: l as u32, lkey });
        off += l;
    }
    v
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let cfg = QpConfig {
        max_send_wr: 8,
        max_recv_wr: 64,
        max_send_sge: 3,
        max_recv_sge: 3,
        max_inline_data: INLINE,
        ..QpConfig::default()
    };
    let mut p = pair_with(ExecMode::Deterministic, &cfg, AccessFlags::ALL, &ConnectParams::default());
    fill(&p.a.mr, 0, HALF, 7);
    fill(&p.b.mr, 0, HALF, 99);
    let mut ma = p.a.mr.to_vec();
    let mut mb = p.b.mr.to_vec();
    let (la, lka, rb, rkb) = (p.a.mr.addr(), p.a.mr.lkey(), p.b.mr.addr(), p.b.mr.rkey());

    let mut expected = Vec::new(); // (entry, opcode, byte_len)
    let mut expected_recv = Vec::new(); // (entry, opcode, byte_len, imm)
    let mut got = Vec::new();
    let mut got_recv = Vec::new();
    let mut since_signaled = 0;
    for (i, op) in ops.iter().enumerate() {
        let entry = i as u64;
        if p.a.qp.sq_free() < 20 {
            p.a.qp.ring_sq_doorbell();
            got.extend(p.a.drain());
        }
        let signaled = op.signaled || since_signaled >= 3;
        since_signaled = if signaled { 0 } else { since_signaled + 1 };
        let flags = if signaled { WqeFlags::SIGNALED } else { WqeFlags::NONE };
        let src = la + op.src as u64;
        let len = op.len;
        let payload = ma[op.src..op.src + len].to_vec();
        let qp = &p.a.qp;
        let b = qp.wqe_builder(entry).unwrap();
        let (wc, byte_len) = match op.kind {
            Kind::Write | Kind::WriteImm(_) => {
                let b = match op.kind {
                    Kind::WriteImm(imm) => {
                        let rsge = Sge { addr: rb + HALF as u64, len: 0, lkey: p.b.mr.lkey() };
                        p.b.qp.post_recv(entry, &[rsge]).unwrap();
                        expected_recv.push((entry, WcOpcode::RecvRdmaImm, len as u32, Some(imm)));
                        b.ctrl_rdma_write_imm(flags, imm).unwrap()
                    }
                    _ => b.ctrl_rdma_write(flags).unwrap(),
                };
                let mut b = b.rdma(rb + op.dst as u64, rkb).unwrap();
                mb[op.dst..op.dst + len].copy_from_slice(&payload);
                if op.inline {
                    let b = b.inline(&payload).unwrap();
                    finish(b, op);
                } else {
                    for s in split(src, len, op.sges, lka) {
                        b = b.sge(Sge::new(s.addr, s.len, s.lkey)).unwrap();
                    }
                    finish(b, op);
                }
                (
                    if matches!(op.kind, Kind::Write) { WcOpcode::RdmaWrite } else { WcOpcode::RdmaWriteImm },
                    len as u32,
                )
            }
            Kind::Send | Kind::SendImm(_) => {
                // The receive: up to 3 SGEs covering 64 KiB in B's upper half.
                let rsges = split(rb + HALF as u64, MAX_LEN, op.sges, p.b.mr.lkey());
                p.b.qp.post_recv(entry, &rsges).unwrap();
                mb[HALF..HALF + len].copy_from_slice(&payload);
                let (b, imm) = match op.kind {
                    Kind::SendImm(imm) => (b.ctrl_send_imm(flags, imm).unwrap(), Some(imm)),
                    _ => (b.ctrl_send(flags).unwrap(), None),
                };
                expected_recv.push((
                    entry,
                    if imm.is_some() { WcOpcode::RecvImm } else { WcOpcode::Recv },
                    len as u32,
                    imm,
                ));
                if op.inline {
                    let b = b.inline(&payload).unwrap();
                    finish(b, op);
                } else {
                    let mut b = b;
                    for s in split(src, len, op.sges, lka) {
                        b = b.sge(Sge::new(s.addr, s.len, s.lkey)).unwrap();
                    }
                    finish(b, op);
                }
                (if imm.is_some() { WcOpcode::SendImm } else { WcOpcode::Send }, len as u32)
            }
            Kind::Read => {
                let mut b = b.ctrl_rdma_read(flags).unwrap().rdma(rb + op.dst as u64, rkb).unwrap();
                let sink = HALF + op.src;
                for s in split(la + sink as u64, len, op.sges, lka) {
                    b = b.sge(Sge::new(s.addr, s.len, s.lkey)).unwrap();
                }
                finish(b, op);
                let data = mb[op.dst..op.dst + len].to_vec();
                ma[sink..sink + len].copy_from_slice(&data);
                (WcOpcode::RdmaRead, len as u32)
            }
            Kind::Fa(_) | Kind::Cs { .. } => {
                let old = u64::from_ne_bytes(mb[op.dst..op.dst + 8].try_into().unwrap());
                let sink = HALF + (op.src & !7);
                let (b, new) = match op.kind {
                    Kind::Fa(add) => (b.ctrl_atomic_fa(flags, add).unwrap(), old.wrapping_add(add)),
                    Kind::Cs { cmp_hit, swap } => {
                        let cmp = if cmp_hit { old } else { old ^ 1 };
                        (b.ctrl_atomic_cs(flags, swap, cmp).unwrap(), if cmp_hit { swap } else { old })
                    }
                    _ => unreachable!(),
                };
                let b = b
                    .rdma(rb + op.dst as u64, rkb)
                    .unwrap()
                    .result(Sge::new(la + sink as u64, 8, lka))
                    .unwrap();
                finish(b, op);
                mb[op.dst..op.dst + 8].copy_from_slice(&new.to_ne_bytes());
                ma[sink..sink + 8].copy_from_slice(&old.to_ne_bytes());
                (if matches!(op.kind, Kind::Fa(_)) { WcOpcode::AtomicFa } else { WcOpcode::AtomicCs }, 8)
            }
            Kind::Nop => {
                let b = b.ctrl_nop(flags).unwrap();
                finish(b, op);
                (WcOpcode::Nop, 0)
            }
        };
        if signaled {
            expected.push((entry, wc, byte_len));
        }
        got_recv.extend(p.b.drain());
    }
    p.a.qp.ring_sq_doorbell();
    got.extend(p.a.drain());
    got_recv.extend(p.b.drain());

    for (c, _) in got.iter().chain(got_recv.iter()) {
        prop_assert_eq!(c.status, Status::Success);
    }
    let got_send: Vec<_> = got
        .iter()
        .map(|(c, e)| (*e, c.opcode, if c.opcode == WcOpcode::Nop { 0 } else { c.byte_len }))
        .collect();
    prop_assert_eq!(got_send, expected);
    let got_recv: Vec<_> = got_recv.iter().map(|(c, e)| (*e, c.opcode, c.byte_len, c.imm)).collect();
    prop_assert_eq!(got_recv, expected_recv);
    for (c, _) in &got {
        prop_assert_eq!(c.qpn, p.a.qp.qpn());
    }
    // The model saw every doorbell and BlueFlame write agree with the ring.
    let st = p.fabric.nics()[0].stats();
    prop_assert_eq!((st.doorbell_mismatch, st.bf_offset_mismatch, st.bf_content_mismatch), (0, 0, 0));
    prop_assert_eq!(st.malformed_wqes, 0);
    let (ra, rb_) = (p.a.mr.to_vec(), p.b.mr.to_vec());
    prop_assert!(
        ra == ma,
        "host A memory differs from the model at {:?}",
        ra.iter().zip(&ma).position(|(x, y)| x != y)
    );
    prop_assert!(
        rb_ == mb,
        "host B memory differs from the model at {:?}",
        rb_.iter().zip(&mb).position(|(x, y)| x != y)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_shrink_iters: 500, ..ProptestConfig::default() })]
    #[test]
    fn random_rc_streams_match_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}
