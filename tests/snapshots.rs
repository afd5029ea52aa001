//! insta snapshots of the WQE bytes the builder writes, one 16-byte DS per
//! line with field names beside, for every RC opcode × {1 SGE, 3 SGEs,
//! inline, wrapping the ring end}. The field names come from the simulator's
//! dissector, a decoder written independently of the encoder, so a snapshot
//! shows both what was written and how a NIC model reads it.
//!
//! The wrap shapes start at the last WQEBB of an 8-WQEBB ring: 4 SGEs make
//! every data opcode longer than one WQEBB, and 40 inline bytes split at
//! the ring end at byte granularity for the opcodes with a raddr segment (a
//! SEND with 40 inline bytes is exactly one WQEBB: pinned as well, it shows
//! the no-wrap boundary). Shapes that do not exist are not snapshotted: RDMA
//! READ has no inline form (it scatters locally); atomics always carry one
//! 8-byte result SGE and are one WQEBB, so they never straddle the ring end;
//! a NOP is one DS.

use mlx5::ring_only::{RingOnly, RingOnlyDevice};
use mlx5::sim::{dissect::dissect_send_wqe, QpType};
use mlx5::{CompletionQueue, ConnectParams, Context, Device, QpConfig, RcQp, RemoteQpInfo, Sge, WqeFlags};

const LKEY: u32 = 0x1234;
const RKEY: u32 = 0x5678;
const LOCAL: u64 = 0x0000_7f12_3456_0000;
const REMOTE: u64 = 0x0000_5555_0000_1000;

#[derive(Clone, Copy, Debug)]
enum Shape {
    Sge1,
    Sge3,
    Inline,
    Wrap,
    InlineWrap,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Send,
    SendImm,
    SendInv,
    RdmaWrite,
    RdmaWriteImm,
    RdmaRead,
    AtomicCs,
    AtomicFa,
    MaskedCs32,
    MaskedCs64,
    MaskedFa32,
    MaskedFa64,
    Nop,
}

struct Fx {
    _ctx: Context<RingOnly>,
    _cq: CompletionQueue<RingOnly, u32>,
    qp: RcQp<RingOnly, u32>,
    dev: RingOnlyDevice,
}

fn fixture(pi: u32) -> Fx {
    let dev = RingOnlyDevice::new(0x123, 256);
    let ctx = Device::<RingOnly>::new(dev.clone()).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u32| {}).unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        max_recv_wr: 1,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(0x456, 2))).unwrap();
    // SAFETY: ring-only backend, empty queue.
    unsafe { qp.skip_sq(pi).unwrap() };
    Fx { _ctx: ctx, _cq: cq, qp, dev }
}

fn post(qp: &RcQp<RingOnly, u32>, op: Op, shape: Shape) {
    let f = WqeFlags::SIGNALED;
    let b = qp.wqe_builder(1).unwrap();
    let nsge = match shape {
        Shape::Sge1 => 1,
        Shape::Sge3 => 3,
        Shape::Wrap => 4,
        Shape::Inline | Shape::InlineWrap => 0,
    };
    let data = match op {
        Op::Send => Some(b.ctrl_send(f).unwrap()),
        Op::SendImm => Some(b.ctrl_send_imm(f, 0x1234_5678).unwrap()),
        Op::SendInv => Some(b.ctrl_send_inv(f, 0x0bad_cafe).unwrap()),
        Op::RdmaWrite => Some(b.ctrl_rdma_write(f).unwrap().rdma(REMOTE, RKEY).unwrap()),
        Op::RdmaWriteImm => Some(b.ctrl_rdma_write_imm(f, 0x1234_5678).unwrap().rdma(REMOTE, RKEY).unwrap()),
        Op::RdmaRead => {
            let mut s = b.ctrl_rdma_read(f).unwrap().rdma(REMOTE, RKEY).unwrap();
            for i in 0..nsge {
                s = s.sge(Sge::new(LOCAL + 0x1000 * i, 0x200, LKEY)).unwrap();
            }
            return s.finish().unwrap();
        }
        Op::AtomicCs => {
            let b = b.ctrl_atomic_cs(f, 0xcafe_f00d, 0x1).unwrap().rdma(REMOTE, RKEY).unwrap();
            return b.result(Sge::new(LOCAL, 8, LKEY)).unwrap().finish().unwrap();
        }
        Op::AtomicFa => {
            let b = b.ctrl_atomic_fa(f, 0x10).unwrap().rdma(REMOTE, RKEY).unwrap();
            return b.result(Sge::new(LOCAL, 8, LKEY)).unwrap().finish().unwrap();
        }
        Op::MaskedCs32 | Op::MaskedCs64 | Op::MaskedFa32 | Op::MaskedFa64 => {
            use mlx5::wqe::{MaskedCs, MaskedFa};
            let b = match op {
                Op::MaskedCs32 => b.ctrl_masked_cs(
                    f,
                    MaskedCs {
                        swap: 0x1111_2222u32,
                        compare: 0x3333_4444,
                        swap_mask: 0xffff_0000,
                        compare_mask: 0xff,
                    },
                ),
                Op::MaskedCs64 => b.ctrl_masked_cs(
                    f,
                    MaskedCs {
                        swap: 0xcafe_f00du64,
                        compare: 0x1,
                        swap_mask: u64::MAX,
                        compare_mask: 0xffff,
                    },
                ),
                Op::MaskedFa32 => {
                    b.ctrl_masked_fa(f, MaskedFa { add: 0x0101_0101u32, field_boundary: 0x8080_8080 })
                }
                _ => b.ctrl_masked_fa(f, MaskedFa { add: 0x10u64, field_boundary: 0x8000_0000 }),
            };
            let b = b.unwrap().rdma(REMOTE, RKEY).unwrap();
            let width = if matches!(op, Op::MaskedCs32 | Op::MaskedFa32) { 4 } else { 8 };
            return b.result(Sge::new(LOCAL, width, LKEY)).unwrap().finish().unwrap();
        }
        Op::Nop => return b.ctrl_nop(f).unwrap().finish().unwrap(),
    };
    let mut d = data.unwrap();
    match shape {
        Shape::Inline => return d.inline(b"ABCDEFGHIJKLMNOPQRST").unwrap().finish().unwrap(),
        Shape::InlineWrap => {
            return d.inline(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn").unwrap().finish().unwrap()
        }
        _ => {}
    }
    for i in 0..nsge {
        d = d.sge(Sge::new(LOCAL + 0x1000 * i, 0x40 * (i as u32 + 1), LKEY)).unwrap();
    }
    d.finish().unwrap();
}

fn snapshot(op: Op, shape: Shape) -> String {
    // The wrap shape starts at the last WQEBB of the 8-WQEBB ring.
    let pi = if let Shape::Wrap | Shape::InlineWrap = shape { 0x17 } else { 0x10 };
    let fx = fixture(pi);
    post(&fx.qp, op, shape);
    let ring = fx.qp.sq_ring_bytes();
    let d = dissect_send_wqe(&ring, pi as u16, QpType::Rc).expect("dissects");
    let (_, db) = fx.dev.log().last_doorbell.get();
    let db: Vec<String> = db.iter().map(|b| format!("{b:02x}")).collect();
    format!("SQ DBR = 0x{:08x}; 8-byte doorbell = {}\n{d}", fx.qp.sq_dbrec(), db.join(" "))
}

fn name(op: Op, shape: Shape) -> String {
    let op = match op {
        Op::Send => "send",
        Op::SendImm => "send_imm",
        Op::SendInv => "send_inv",
        Op::RdmaWrite => "rdma_write",
        Op::RdmaWriteImm => "rdma_write_imm",
        Op::RdmaRead => "rdma_read",
        Op::AtomicCs => "atomic_cs",
        Op::AtomicFa => "atomic_fa",
        Op::MaskedCs32 => "masked_cs_4b",
        Op::MaskedCs64 => "masked_cs_8b",
        Op::MaskedFa32 => "masked_fa_4b",
        Op::MaskedFa64 => "masked_fa_8b",
        Op::Nop => "nop",
    };
    let shape = match shape {
        Shape::Sge1 => "1_sge",
        Shape::Sge3 => "3_sges",
        Shape::Inline => "inline_20b",
        Shape::Wrap => "4_sges_wraps_ring_end",
        Shape::InlineWrap => "inline_40b_at_last_slot",
    };
    format!("rc_{op}_{shape}")
}

#[test]
fn wqe_layouts() {
    use Op::*;
    use Shape::*;
    let all = [Sge1, Sge3, Inline, Wrap, InlineWrap];
    let cases: Vec<(Op, Vec<Shape>)> = vec![
        (Send, all.to_vec()),
        (SendImm, all.to_vec()),
        (SendInv, all.to_vec()),
        (RdmaWrite, all.to_vec()),
        (RdmaWriteImm, all.to_vec()),
        (RdmaRead, vec![Sge1, Sge3, Wrap]),
        (AtomicCs, vec![Sge1]),
        (AtomicFa, vec![Sge1]),
        // Masked atomics (spec §3.5): the 8-byte compare-and-swap's two operand DS,
        // and, from the ring's last WQEBB, its result segment at the ring's start.
        (MaskedCs32, vec![Sge1]),
        (MaskedCs64, vec![Sge1, Wrap]),
        (MaskedFa32, vec![Sge1]),
        (MaskedFa64, vec![Sge1]),
        (Nop, vec![Sge1]),
    ];
    for (op, shapes) in cases {
        for shape in shapes {
            let n = if matches!(op, Nop) { "rc_nop".to_string() } else { name(op, shape) };
            insta::with_settings!({ prepend_module_to_snapshot => false }, {
                insta::assert_snapshot!(n, snapshot(op, shape));
            });
        }
    }
}
