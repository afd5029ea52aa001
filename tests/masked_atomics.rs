//! Masked atomics (step 13, spec §3.5): compare-and-swap and fetch-and-add on 4 and 8
//! bytes, built with `ctrl_masked_cs` / `ctrl_masked_fa` and carried out by the
//! simulator, which decodes the WQE with its own code. Every expected value below is
//! worked out from the operation's definition (UCX's use of it: AND, OR, SWAP, XOR),
//! never from the simulator's functions. Byte order (a model choice, spec §6.5): 8-byte
//! arguments follow the device's atomic endianness mode (host order here, as for
//! standard atomics); 4-byte ones are big-endian in memory and in the result.
mod common;
use common::*;
use mlx5::sim::{ExecMode, Sim};
use mlx5::wqe::{MaskedCs, MaskedFa, MaskedWord};
use mlx5::{Error, RcQp, Sge, Status, Syndrome, WcOpcode, WqeFlags};
use proptest::prelude::*;

/// Posts a masked compare-and-swap from `qp` at `raddr`, the old value to `result`.
fn cs<W: MaskedWord>(qp: &RcQp<Sim, u64>, e: u64, args: MaskedCs<W>, raddr: u64, rkey: u32, result: Sge) {
    qp.wqe_builder(e)
        .unwrap()
        .ctrl_masked_cs(WqeFlags::SIGNALED, args)
        .unwrap()
        .rdma(raddr, rkey)
        .unwrap()
        .result(result)
        .unwrap()
        .finish()
        .unwrap();
}

/// Posts a masked fetch-and-add.
fn fa<W: MaskedWord>(qp: &RcQp<Sim, u64>, e: u64, args: MaskedFa<W>, raddr: u64, rkey: u32, result: Sge) {
    qp.wqe_builder(e)
        .unwrap()
        .ctrl_masked_fa(WqeFlags::SIGNALED, args)
        .unwrap()
        .rdma(raddr, rkey)
        .unwrap()
        .result(result)
        .unwrap()
        .finish()
        .unwrap();
}

fn u64_at(mr: &mlx5::MemoryRegion<Sim>, off: usize) -> u64 {
    u64::from_ne_bytes(bytes(mr, off, 8).try_into().unwrap())
}
fn be32_at(mr: &mlx5::MemoryRegion<Sim>, off: usize) -> u32 {
    u32::from_be_bytes(bytes(mr, off, 4).try_into().unwrap())
}

#[test]
fn masked_compare_and_swap_and_fetch_and_add_on_8_bytes() {
    let mut p = pair();
    let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
    let r = |i: u64| Sge::new(la + 8 * i, 8, lk);
    p.b.mr.write(0x100, &0x1122_3344_5566_7788u64.to_ne_bytes()).unwrap();
    // 1. Swap the low 16 bits only (compare_mask 0: always).
    let m = MaskedCs { swap: 0xaaaa_bbbb_cccc_ddddu64, compare: 0, swap_mask: 0xffff, compare_mask: 0 };
    cs(&p.a.qp, 1, m, rb + 0x100, rk, r(1));
    // 2. Compare the top byte with 0x99 (it is 0x11): no swap.
    let m = MaskedCs {
        swap: u64::MAX,
        compare: 0x9900_0000_0000_0000,
        swap_mask: u64::MAX,
        compare_mask: 0xffu64 << 56,
    };
    cs(&p.a.qp, 2, m, rb + 0x100, rk, r(2));
    // 3. Compare the top byte with 0x11 (equal, other bits differ): swap the top byte.
    let m = MaskedCs {
        swap: 0xeeu64 << 56,
        compare: 0x11ff_ffff_ffff_ffff,
        swap_mask: 0xff << 56,
        compare_mask: 0xff << 56,
    };
    cs(&p.a.qp, 3, m, rb + 0x100, rk, r(3));
    // 4. XOR, as UCX builds it: fetch-and-add with every bit a field boundary.
    fa(
        &p.a.qp,
        4,
        MaskedFa { add: 0xff00_0000_0000_00ffu64, field_boundary: u64::MAX },
        rb + 0x100,
        rk,
        r(4),
    );
    // 5. A plain add (no boundary): the carry runs through all 64 bits.
    p.b.mr.write(0x108, &0x0000_0000_ffff_ffffu64.to_ne_bytes()).unwrap();
    fa(&p.a.qp, 5, MaskedFa { add: 1u64, field_boundary: 0 }, rb + 0x108, rk, r(5));
    let c = p.a.drain();
    assert_eq!(
        c.iter().map(|(c, e)| (*e, c.status, c.opcode, c.byte_len)).collect::<Vec<_>>(),
        [1, 2, 3]
            .map(|e| (e, Status::Success, WcOpcode::MaskedAtomicCs, 8))
            .into_iter()
            .chain([4, 5].map(|e| (e, Status::Success, WcOpcode::MaskedAtomicFa, 8)))
            .collect::<Vec<_>>()
    );
    // Each result is the value before the operation (host order: the device's mode).
    assert_eq!(u64_at(&p.a.mr, 8), 0x1122_3344_5566_7788);
    assert_eq!(u64_at(&p.a.mr, 16), 0x1122_3344_5566_dddd, "after 1");
    assert_eq!(u64_at(&p.a.mr, 24), 0x1122_3344_5566_dddd, "2 swapped nothing");
    assert_eq!(u64_at(&p.a.mr, 32), 0xee22_3344_5566_dddd, "after 3");
    assert_eq!(u64_at(&p.b.mr, 0x100), 0xee22_3344_5566_dddd ^ 0xff00_0000_0000_00ff, "after 4 (XOR)");
    assert_eq!(u64_at(&p.a.mr, 40), 0xffff_ffff);
    assert_eq!(u64_at(&p.b.mr, 0x108), 0x1_0000_0000, "after 5 (carry across 32 bits)");
}

#[test]
fn masked_atomics_on_4_bytes_are_big_endian_and_add_by_field() {
    let mut p = pair();
    let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
    let r = |i: u64| Sge::new(la + 4 * i, 4, lk);
    // Four 8-bit fields (each byte's top bit a boundary): 01+01, ff+01 (its carry
    // dropped), 7f+01, 80+80 (carry dropped) = 02 00 80 00.
    p.b.mr.write(0x200, &0x01ff_7f80u32.to_be_bytes()).unwrap();
    fa(&p.a.qp, 1, MaskedFa { add: 0x0101_0180u32, field_boundary: 0x8080_8080 }, rb + 0x200, rk, r(1));
    // UCX's 32-bit AND (swap = value, swap_mask = !value, no compare), OR, SWAP.
    p.b.mr.write(0x204, &0xf0f0_f0f0u32.to_be_bytes()).unwrap();
    let v = 0xff00_ff00u32;
    cs(&p.a.qp, 2, MaskedCs { swap: v, compare: 0, swap_mask: !v, compare_mask: 0 }, rb + 0x204, rk, r(2));
    let v = 0x0000_000fu32;
    cs(&p.a.qp, 3, MaskedCs { swap: v, compare: 0, swap_mask: v, compare_mask: 0 }, rb + 0x204, rk, r(3));
    cs(
        &p.a.qp,
        4,
        MaskedCs { swap: 0x1234_5678u32, compare: 0, swap_mask: u32::MAX, compare_mask: 0 },
        rb + 0x204,
        rk,
        r(4),
    );
    // A 32-bit compare-and-swap as UCX builds it (compare_mask all ones): fails, then swaps.
    for (e, cmp) in [(5, 0u32), (6, 0x1234_5678)] {
        cs(
            &p.a.qp,
            e,
            MaskedCs { swap: 0xcafe_f00du32, compare: cmp, swap_mask: u32::MAX, compare_mask: u32::MAX },
            rb + 0x204,
            rk,
            r(e),
        );
    }
    let c = p.a.drain();
    assert!(c.iter().all(|(c, _)| c.status == Status::Success && c.byte_len == 4), "{c:?}");
    assert_eq!(be32_at(&p.b.mr, 0x200), 0x0200_8000, "field-wise add");
    assert_eq!(be32_at(&p.a.mr, 4), 0x01ff_7f80, "the old value, big-endian");
    assert_eq!(be32_at(&p.a.mr, 8), 0xf0f0_f0f0);
    assert_eq!(be32_at(&p.a.mr, 12), 0xf000_f000, "after AND");
    assert_eq!(be32_at(&p.a.mr, 16), 0xf000_f00f, "after OR");
    assert_eq!(be32_at(&p.a.mr, 20), 0x1234_5678, "after SWAP");
    assert_eq!(be32_at(&p.a.mr, 24), 0x1234_5678, "a failed compare returns the current value");
    assert_eq!(be32_at(&p.b.mr, 0x204), 0xcafe_f00d);
    assert_eq!(bytes(&p.b.mr, 0x208, 4), [0; 4], "4 bytes written, not 8");
}

/// The 8-byte compare-and-swap is two operand DS; starting at the ring's last WQEBB,
/// the WQE's data segment lies at the ring's start (and on a DCI, with its AV, the
/// masks too). Both decode as written.
#[test]
fn a_masked_wqe_that_wraps_the_ring_runs() {
    let mut p = pair();
    let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
    let slots = p.a.qp.sq_wqebbs();
    p.b.mr.write(0x300, &7u64.to_ne_bytes()).unwrap();
    for lap in 0..3u64 {
        // NOPs up to the last WQEBB, then the two-WQEBB masked WQE across the end.
        while !(p.a.qp.sq_pi() + 1).is_multiple_of(slots) {
            p.a.qp.wqe_builder(0).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
            p.a.drain();
        }
        let old = 7 + lap;
        let m = MaskedCs { swap: old + 1, compare: old, swap_mask: u64::MAX, compare_mask: u64::MAX };
        cs(&p.a.qp, 100 + lap, m, rb + 0x300, rk, Sge::new(la + 0x300, 8, lk));
        let c = p.a.drain();
        assert_eq!(c.last().map(|(c, e)| (*e, c.status)), Some((100 + lap, Status::Success)), "{c:?}");
        assert_eq!(u64_at(&p.a.mr, 0x300), old);
    }
    assert_eq!(u64_at(&p.b.mr, 0x300), 10);
}

#[test]
fn a_result_buffer_of_another_width_is_refused_before_anything_is_posted() {
    let p = pair();
    let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
    let pi = p.a.qp.sq_pi();
    let e =
        p.a.qp
            .wqe_builder(1)
            .unwrap()
            .ctrl_masked_fa(WqeFlags::SIGNALED, MaskedFa { add: 1u32, field_boundary: 0 })
            .unwrap()
            .rdma(rb, rk)
            .unwrap()
            .result(Sge::new(la, 8, lk))
            .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("atomic result length"), "{e}");
    assert_eq!(p.a.qp.sq_pi(), pi, "nothing posted");
}

/// A 4-byte operation at an address that is not 4-byte aligned, and one on memory whose
/// QP does not allow remote atomics: the responder refuses (REMOTE_INVAL_REQ) and
/// writes nothing.
#[test]
fn misaligned_or_unpermitted_masked_atomics_fail_and_write_nothing() {
    let mut p = pair();
    let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
    p.b.mr.write(0x400, &[0x55; 8]).unwrap();
    fa(&p.a.qp, 1, MaskedFa { add: 1u32, field_boundary: 0 }, rb + 0x402, rk, Sge::new(la, 4, lk));
    let c = p.a.drain();
    assert!(
        matches!(c[0].0.status, Status::Error(e) if e.syndrome == Syndrome::RemoteInvalidRequest),
        "{c:?}"
    );
    assert_eq!(bytes(&p.b.mr, 0x400, 8), [0x55; 8]);

    let mut p = pair_with(
        ExecMode::Deterministic,
        &small_cfg(),
        mlx5::AccessFlags::LOCAL_WRITE | mlx5::AccessFlags::REMOTE_WRITE,
        &mlx5::ConnectParams::default(),
    );
    let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
    p.b.mr.write(0x400, &[0x55; 8]).unwrap();
    let m = MaskedCs { swap: 0u64, compare: 0, swap_mask: u64::MAX, compare_mask: 0 };
    cs(&p.a.qp, 2, m, rb + 0x400, rk, Sge::new(la, 8, lk));
    let c = p.a.drain();
    assert!(
        matches!(c[0].0.status, Status::Error(e) if e.syndrome == Syndrome::RemoteInvalidRequest),
        "{c:?}"
    );
    assert_eq!(bytes(&p.b.mr, 0x400, 8), [0x55; 8]);
}

/// On a wire that loses, duplicates and delays packets, masked fetch-and-adds (4 and 8
/// bytes) and a masked compare-and-swap run exactly once each: retransmitted until
/// acknowledged, and a duplicate answered from the saved result, never executed again.
#[test]
fn masked_atomics_run_exactly_once_on_a_lossy_wire() {
    let p = pair();
    p.fabric
        .set_faults(7, mlx5::sim::LinkFaults { drop: 0.2, duplicate: 0.2, ..mlx5::sim::LinkFaults::none() });
    let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
    p.b.mr.write(0x700, &[0; 16]).unwrap();
    const N: u64 = 40;
    for i in 0..N {
        let wide = i % 2 == 0;
        let (at, res) =
            if wide { (0x700, Sge::new(la + 16 * i, 8, lk)) } else { (0x708, Sge::new(la + 16 * i, 4, lk)) };
        if wide {
            fa(&p.a.qp, i, MaskedFa { add: 1u64, field_boundary: 0 }, rb + at, rk, res);
        } else {
            fa(&p.a.qp, i, MaskedFa { add: 1u32, field_boundary: 0 }, rb + at, rk, res);
        }
        let c = poll_ticks(&p.a.cq, 1, 100_000);
        assert_eq!(c.len(), 1, "op {i}: no completion");
        assert_eq!(c[0].0.status, Status::Success, "op {i}: {:?}", c[0]);
    }
    // The results count up: each add ran once, in order.
    for i in 0..N {
        let got = if i % 2 == 0 {
            u64_at(&p.a.mr, 16 * i as usize)
        } else {
            u64::from(be32_at(&p.a.mr, 16 * i as usize))
        };
        assert_eq!(got, i / 2, "result of op {i}");
    }
    assert_eq!((u64_at(&p.b.mr, 0x700), be32_at(&p.b.mr, 0x708)), (N / 2, (N / 2) as u32));
    let s = p.fabric.nics()[0].stats();
    assert!(s.retransmits > 0 && s.duplicates + p.fabric.nics()[1].stats().duplicates > 0, "{s:?}");
    // A compare-and-swap on the same wire.
    let m = MaskedCs { swap: 0xffu64, compare: N / 2, swap_mask: 0xff, compare_mask: u64::MAX };
    cs(&p.a.qp, 99, m, rb + 0x700, rk, Sge::new(la + 0x800, 8, lk));
    let c = poll_ticks(&p.a.cq, 1, 100_000);
    assert_eq!(c[0].0.status, Status::Success);
    assert_eq!((u64_at(&p.a.mr, 0x800), u64_at(&p.b.mr, 0x700)), (N / 2, 0xff));
}

/// One masked operation of a random sequence.
#[derive(Debug, Clone)]
enum Op {
    Cs { swap: u64, compare: u64, swap_mask: u64, compare_mask: u64 },
    Fa { add: u64, boundary: u64 },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), any::<u64>(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()])
            .prop_map(|(swap, compare, swap_mask, compare_mask)| Op::Cs {
                swap,
                compare,
                swap_mask,
                compare_mask
            }),
        (any::<u64>(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()])
            .prop_map(|(add, boundary)| Op::Fa { add, boundary }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Random sequences of masked operations on one 4-byte and one 8-byte word: every
    /// result and the final words as the reference computes them.
    #[test]
    fn masked_atomics_match_the_reference(ops in prop::collection::vec((op_strategy(), any::<bool>()), 1..24), start in any::<u64>()) {
        let mut p = pair();
        let (rb, rk, la, lk) = (p.b.mr.addr(), p.b.mr.rkey(), p.a.mr.addr(), p.a.mr.lkey());
        p.b.mr.write(0x600, &(start as u32).to_be_bytes()).unwrap();
        p.b.mr.write(0x608, &start.to_ne_bytes()).unwrap();
        let (mut w4, mut w8) = (u64::from(start as u32), start);
        let mut want = Vec::new();
        for (i, (op, narrow)) in ops.iter().enumerate() {
            let e = i as u64;
            let m32 = |x: u64| x as u32;
            let (cur, bits) = if *narrow { (&mut w4, 32) } else { (&mut w8, 64) };
            let lim = |x: u64| if bits == 32 { x & 0xffff_ffff } else { x };
            want.push(*cur);
            let res = Sge::new(la + 8 * e, if *narrow { 4 } else { 8 }, lk);
            match *op {
                Op::Cs { swap, compare, swap_mask, compare_mask } => {
                    *cur = model_masked_cs(*cur, lim(swap), lim(compare), lim(swap_mask), lim(compare_mask));
                    if *narrow {
                        let m = MaskedCs { swap: m32(swap), compare: m32(compare), swap_mask: m32(swap_mask), compare_mask: m32(compare_mask) };
                        cs(&p.a.qp, e, m, rb + 0x600, rk, res);
                    } else {
                        cs(&p.a.qp, e, MaskedCs { swap, compare, swap_mask, compare_mask }, rb + 0x608, rk, res);
                    }
                }
                Op::Fa { add, boundary } => {
                    *cur = model_masked_fa(*cur, lim(add), lim(boundary), bits);
                    if *narrow {
                        fa(&p.a.qp, e, MaskedFa { add: m32(add), field_boundary: m32(boundary) }, rb + 0x600, rk, res);
                    } else {
                        fa(&p.a.qp, e, MaskedFa { add, field_boundary: boundary }, rb + 0x608, rk, res);
                    }
                }
            }
            let c = p.a.drain();
            prop_assert_eq!(c.len(), 1);
            prop_assert_eq!(c[0].0.status, Status::Success);
        }
        for (i, (_, narrow)) in ops.iter().enumerate() {
            let got = if *narrow { u64::from(be32_at(&p.a.mr, 8 * i)) } else { u64_at(&p.a.mr, 8 * i) };
            prop_assert_eq!(got, want[i], "result of op {}", i);
        }
        prop_assert_eq!(u64::from(be32_at(&p.b.mr, 0x600)), w4);
        prop_assert_eq!(u64_at(&p.b.mr, 0x608), w8);
    }
}
