//! insta snapshots of every UD and DC WQE shape, and of SRQ receive WQEs,
//! annotated by the simulator's independent decoder (see snapshots.rs).
//!
//! UD: SEND and SEND_IMM with an InfiniBand AV, an InfiniBand AV with GRH
//! and a RoCE v2 AV (1 SGE), and with the IB AV: 3 SGEs, inline, and a WQE
//! at the last ring slot that wraps. DC: every DCI opcode with an IB AV and
//! a RoCE AV (1 SGE), and with the IB AV: 3 SGEs, inline (not READ or
//! atomics), and wrapping the ring end; masked atomics (8-byte compare-and-swap,
//! 4-byte fetch-and-add) among them. SRQ: receive WQEs with 1 and 2 SGEs
//! (terminated by an invalid-lkey entry) and with every SGE the stride holds
//! (no terminator), with the next-WQE-index list intact (re-linking after
//! completions is exercised on the simulator in tests/srq.rs).

use mlx5::ring_only::{RingOnly, RingOnlyDevice};
use mlx5::sim::{
    dissect::dissect_send_wqe,
    wire::{RecvDataSeg, SrqNextSeg},
    QpType,
};
use mlx5::{
    AddressVector, CompletionQueue, ConnectParams, Context, Device, IbGrh, QpConfig, RoceAv, Sge, WqeFlags,
};

const LKEY: u32 = 0x1234;
const RKEY: u32 = 0x5678;
const LOCAL: u64 = 0x0000_7f12_3456_0000;
const REMOTE: u64 = 0x0000_5555_0000_1000;
const DC_KEY: u64 = 0x1122_3344_5566_7788;

fn ctx(first_qpn: u32) -> (Context<RingOnly>, CompletionQueue<RingOnly, u32>) {
    let ctx = Device::<RingOnly>::new(RingOnlyDevice::new(first_qpn, 256)).open().unwrap();
    let cq = ctx.create_cq(16, |_, _: u32| {}).unwrap();
    (ctx, cq)
}

#[derive(Clone, Copy, Debug)]
enum Av {
    Ib,
    IbGrh,
    Roce,
}

fn av(kind: Av) -> AddressVector {
    let gid = mlx5::Gid::from_ipv4([192, 168, 1, 2]);
    match kind {
        Av::Ib => AddressVector::ib(0x0011, 1),
        Av::IbGrh => AddressVector::ib_grh(
            0x0011,
            1,
            &IbGrh {
                dgid: mlx5::Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11]),
                sgid_index: 0,
                traffic_class: 0x20,
                hop_limit: 2,
                flow_label: 0x12345,
            },
        ),
        Av::Roce => AddressVector::roce_v2(&RoceAv {
            dgid: gid,
            dmac: [2, 0, 0, 0, 0, 2],
            sgid_index: 3,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            priority: 3,
            udp_sport: 0xd001,
        }),
    }
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    Sge1,
    Sge3,
    Inline,
    Wrap,
}

fn render(ring: &[u8], pi: u32, qp_type: QpType, dbrec: u32) -> String {
    let d = dissect_send_wqe(ring, pi as u16, qp_type).expect("dissects");
    format!("SQ DBR = 0x{dbrec:08x}\n{d}")
}

fn snap(name: String, text: String) {
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn ud_wqe_layouts() {
    let cases: Vec<(Av, Shape)> = vec![
        (Av::Ib, Shape::Sge1),
        (Av::IbGrh, Shape::Sge1),
        (Av::Roce, Shape::Sge1),
        (Av::Ib, Shape::Sge3),
        (Av::Ib, Shape::Inline),
        (Av::Ib, Shape::Wrap),
    ];
    for imm in [false, true] {
        for &(a, shape) in &cases {
            let (ctx, cq) = ctx(0x456);
            let pd = ctx.alloc_pd().unwrap();
            let cfg = QpConfig {
                max_send_wr: 4,
                max_recv_wr: 1,
                max_send_sge: 3,
                max_recv_sge: 1,
                max_inline_data: 32,
                ..QpConfig::default()
            };
            let ud = ctx.create_ud_qp(&pd, &cq, &cq, None, &cfg).unwrap();
            assert_eq!(ud.sq_wqebbs(), 8);
            ud.activate(&ConnectParams { qkey: 0x1111_1111, ..ConnectParams::default() }).unwrap();
            let pi = if let Shape::Wrap = shape { 0x17 } else { 0x10 };
            // SAFETY: ring-only backend, empty queue.
            unsafe { ud.skip_sq(pi).unwrap() };
            let b = ud.wqe_builder(1).unwrap();
            let b = if imm {
                b.ctrl_send_imm(WqeFlags::SIGNALED, 0x1234_5678)
            } else {
                b.ctrl_send(WqeFlags::SIGNALED)
            };
            let mut b = b.unwrap().datagram(&av(a), 0xabc, 0x1111_1111).unwrap();
            let n = match shape {
                Shape::Sge1 => 1,
                Shape::Sge3 => 3,
                Shape::Wrap => 2,
                Shape::Inline => 0,
            };
            if let Shape::Inline = shape {
                b.inline(b"ABCDEFGHIJKLMNOPQRST").unwrap().finish().unwrap();
            } else {
                for i in 0..n {
                    b = b.sge(Sge::new(LOCAL + 0x1000 * i, 0x40 * (i as u32 + 1), LKEY)).unwrap();
                }
                b.finish().unwrap();
            }
            let op = if imm { "send_imm" } else { "send" };
            let av_name = match a {
                Av::Ib => "ib",
                Av::IbGrh => "ib_grh",
                Av::Roce => "roce_v2",
            };
            let shape_name = match shape {
                Shape::Sge1 => "1_sge",
                Shape::Sge3 => "3_sges",
                Shape::Inline => "inline_20b",
                Shape::Wrap => "2_sges_wraps_ring_end",
            };
            snap(
                format!("ud_{op}_{av_name}_{shape_name}"),
                render(&ud.sq_ring_bytes(), pi, QpType::Ud, ud.sq_dbrec()),
            );
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum DcOp {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Cs,
    Fa,
    /// Masked compare-and-swap on 8 bytes: from the ring's last WQEBB its masks DS lies
    /// at the ring's start (ctrl, AV, raddr, values in the last WQEBB).
    MaskedCs64,
    MaskedFa32,
}

#[test]
fn dc_wqe_layouts() {
    use DcOp::*;
    for op in [Send, SendImm, Write, WriteImm, Read, Cs, Fa, MaskedCs64, MaskedFa32] {
        let atomic = matches!(op, Cs | Fa | MaskedCs64 | MaskedFa32);
        let mut cases = vec![(Av::Ib, Shape::Sge1), (Av::Roce, Shape::Sge1), (Av::Ib, Shape::Wrap)];
        if !atomic {
            cases.push((Av::Ib, Shape::Sge3));
        }
        if !atomic && !matches!(op, Read) {
            cases.push((Av::Ib, Shape::Inline));
        }
        for (a, shape) in cases {
            let (ctx, cq) = ctx(0x789);
            let pd = ctx.alloc_pd().unwrap();
            let cfg = QpConfig {
                max_send_wr: 2,
                max_recv_wr: 0,
                max_send_sge: 4,
                max_recv_sge: 0,
                max_inline_data: 32,
                ..QpConfig::default()
            };
            let dci = ctx.create_dci(&pd, &cq, &cfg).unwrap();
            assert_eq!(dci.sq_wqebbs(), 8);
            dci.activate(&ConnectParams::default()).unwrap();
            let pi = if let Shape::Wrap = shape { 0x17 } else { 0x10 };
            // SAFETY: ring-only backend, empty queue.
            unsafe { dci.skip_sq(pi).unwrap() };
            let f = WqeFlags::SIGNALED;
            let av = av(a);
            let n = match shape {
                Shape::Sge1 => 1,
                Shape::Sge3 => 3,
                Shape::Wrap => 2,
                Shape::Inline => 0,
            };
            let b = dci.wqe_builder(1).unwrap();
            match op {
                Send | SendImm | Write | WriteImm => {
                    let mut d = match op {
                        Send => b.ctrl_send(f).unwrap().av(DC_KEY, 0xabcd, &av).unwrap(),
                        SendImm => b.ctrl_send_imm(f, 0x1234_5678).unwrap().av(DC_KEY, 0xabcd, &av).unwrap(),
                        Write => b
                            .ctrl_rdma_write(f)
                            .unwrap()
                            .av(DC_KEY, 0xabcd, &av)
                            .unwrap()
                            .rdma(REMOTE, RKEY)
                            .unwrap(),
                        _ => b
                            .ctrl_rdma_write_imm(f, 0x1234_5678)
                            .unwrap()
                            .av(DC_KEY, 0xabcd, &av)
                            .unwrap()
                            .rdma(REMOTE, RKEY)
                            .unwrap(),
                    };
                    if let Shape::Inline = shape {
                        d.inline(b"ABCDEFGHIJKLMNOPQRST").unwrap().finish().unwrap();
                    } else {
                        for i in 0..n {
                            d = d.sge(Sge::new(LOCAL + 0x1000 * i, 0x40 * (i as u32 + 1), LKEY)).unwrap();
                        }
                        d.finish().unwrap();
                    }
                }
                Read => {
                    let mut s = b
                        .ctrl_rdma_read(f)
                        .unwrap()
                        .av(DC_KEY, 0xabcd, &av)
                        .unwrap()
                        .rdma(REMOTE, RKEY)
                        .unwrap();
                    for i in 0..n {
                        s = s.sge(Sge::new(LOCAL + 0x1000 * i, 0x200, LKEY)).unwrap();
                    }
                    s.finish().unwrap();
                }
                Cs | Fa => {
                    let b = if let Cs = op {
                        b.ctrl_atomic_cs(f, 0xcafe_f00d, 1)
                    } else {
                        b.ctrl_atomic_fa(f, 0x10)
                    };
                    let b = b.unwrap().av(DC_KEY, 0xabcd, &av).unwrap().rdma(REMOTE, RKEY).unwrap();
                    b.result(Sge::new(LOCAL, 8, LKEY)).unwrap().finish().unwrap();
                }
                MaskedCs64 => {
                    let m = mlx5::wqe::MaskedCs {
                        swap: 0xcafe_f00du64,
                        compare: 1,
                        swap_mask: u64::MAX,
                        compare_mask: 0xffff,
                    };
                    let b = b.ctrl_masked_cs(f, m).unwrap().av(DC_KEY, 0xabcd, &av).unwrap();
                    let b = b.rdma(REMOTE, RKEY).unwrap();
                    b.result(Sge::new(LOCAL, 8, LKEY)).unwrap().finish().unwrap();
                }
                MaskedFa32 => {
                    let m = mlx5::wqe::MaskedFa { add: 0x0101_0101u32, field_boundary: 0x8080_8080 };
                    let b = b.ctrl_masked_fa(f, m).unwrap().av(DC_KEY, 0xabcd, &av).unwrap();
                    let b = b.rdma(REMOTE, RKEY).unwrap();
                    b.result(Sge::new(LOCAL, 4, LKEY)).unwrap().finish().unwrap();
                }
            }
            let op_name = match op {
                Send => "send",
                SendImm => "send_imm",
                Write => "rdma_write",
                WriteImm => "rdma_write_imm",
                Read => "rdma_read",
                Cs => "atomic_cs",
                Fa => "atomic_fa",
                MaskedCs64 => "masked_cs_8b",
                MaskedFa32 => "masked_fa_4b",
            };
            let av_name = if let Av::Roce = a { "roce_v2" } else { "ib" };
            let shape_name = match shape {
                Shape::Sge1 => "1_sge",
                Shape::Sge3 => "3_sges",
                Shape::Inline => "inline_20b",
                Shape::Wrap if atomic => "wraps_ring_end",
                Shape::Wrap => "2_sges_wraps_ring_end",
            };
            snap(
                format!("dci_{op_name}_{av_name}_{shape_name}"),
                render(&dci.sq_ring_bytes(), pi, QpType::Dci, dci.sq_dbrec()),
            );
        }
    }
}

/// One SRQ WQE as annotated hex, decoded with the simulator's typed views.
fn srq_wqe(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut ended = false;
    for (i, ds) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = ds
            .chunks(4)
            .map(|w| w.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "))
            .collect();
        let text = if i == 0 {
            let n = SrqNextSeg::new_checked(ds).unwrap();
            format!("next: next_wqe_index {}, signature 0x{:02x}", n.next_wqe_index(), n.signature())
        } else {
            let d = RecvDataSeg::new_checked(ds).unwrap();
            if ended {
                "(after the terminator: not read)".to_string()
            } else if d.is_terminator() {
                ended = true;
                "data: terminator (lkey 0x100)".to_string()
            } else {
                format!(
                    "data: byte_count 0x{:x}, lkey 0x{:x}, addr 0x{:016x}",
                    d.byte_count(),
                    d.lkey(),
                    d.addr()
                )
            }
        };
        out.push_str(&format!("DS{i}: {}  {text}\n", hex.join("  ")));
    }
    out
}

#[test]
fn srq_receive_wqe_layouts() {
    let (ctx, _cq) = ctx(0x40);
    let pd = ctx.alloc_pd().unwrap();
    // 3 SGEs per WQE: stride 16 + 3*16 = 64 bytes, exactly 3 data segments.
    let srq = ctx.create_srq::<u32>(&pd, 7, 3).unwrap();
    let sge = |i: u64, len| Sge { addr: LOCAL + 0x1000 * i, len, lkey: LKEY };
    srq.post_recv(1, &[sge(0, 0x100)]).unwrap();
    srq.post_recv(2, &[sge(1, 0x40), sge(2, 0x80)]).unwrap();
    srq.post_recv(3, &[sge(4, 0x10), sge(5, 0x20), sge(6, 0x30)]).unwrap();
    let mut text = String::new();
    for i in 0..3 {
        text.push_str(&format!("WQE {i}\n{}", srq_wqe(&srq.wqe_bytes(i))));
    }
    snap("srq_recv_1_2_3_sges".into(), text);
    // The list is intact: WQE i points to i + 1, the last back to 0.
    for i in 0..8u16 {
        let b = srq.wqe_bytes(i);
        assert_eq!(SrqNextSeg::new_checked(&b[..16]).unwrap().next_wqe_index(), (i + 1) % 8);
    }
}
