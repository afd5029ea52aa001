//! The simulator's public MMIO entry points under arbitrary offsets, register
//! indices, values and lengths (issue 39, item 1): a store at an offset that is
//! neither half of a register is a program's bug the device survives, as a NIC
//! does: counted (`doorbell_bad_offset`) and ignored. No write reaches memory
//! outside the register (host A's rings stay byte for byte as they were),
//! nothing panics, and the QP still works afterwards.
//!
//! Before the fix, `uar_write64(qp.uar_index, 0x4000_0000, ..)` stored that
//! offset as the register's expected half, and the next `tick()` swapped a
//! word to zero at `page + 0x4000_0000` (SIGSEGV) or, with `0x1000`, zeroed
//! 256 bytes of another allocation.

mod common;

use common::*;
use mlx5_sim::{ExecMode, FabricConfig, QpState};
use proptest::prelude::*;

const BF_SIZE: u32 = 256;

/// The spec's halves (§1.6): 0 and the BlueFlame size.
fn good(offset: u32) -> bool {
    offset == 0 || offset == BF_SIZE
}

/// One MMIO call a buggy program could make.
#[derive(Clone, Debug)]
enum Op {
    Db { own_reg: bool, reg: u32, offset: u32, value: [u8; 8] },
    Bf { own_reg: bool, reg: u32, offset: u32, data: Vec<u8> },
    CqDb { value: [u8; 8] },
    Tick,
}

fn offset() -> impl Strategy<Value = u32> {
    prop_oneof![
        2 => any::<u32>(),
        1 => prop::sample::select(vec![0u32, 8, 64, 255, 256, 257, 512, 0x1000, 0x4000_0000, u32::MAX]),
        1 => Just(0u32),
        1 => Just(BF_SIZE),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), any::<u32>(), offset(), any::<[u8; 8]>())
            .prop_map(|(own_reg, reg, offset, value)| Op::Db { own_reg, reg, offset, value }),
        2 => (any::<bool>(), any::<u32>(), offset(), prop::collection::vec(any::<u8>(), 0..600))
            .prop_map(|(own_reg, reg, offset, data)| Op::Bf { own_reg, reg, offset, data }),
        1 => any::<[u8; 8]>().prop_map(|value| Op::CqDb { value }),
        2 => Just(Op::Tick),
    ]
}

/// The bytes of host A's device memory this test can see (its QP's send
/// ring and the two CQ rings): nothing in them may change under MMIO that
/// names no QP (a stray store of the old bug would land in such blocks,
/// which lie beside the UAR pages in the device's arena).
fn device_bytes(p: &Pair) -> Vec<u8> {
    let mut v = Vec::new();
    // SAFETY: reads inside the model-owned rings, which live as long as `p`.
    unsafe {
        v.extend_from_slice(std::slice::from_raw_parts(p.qa.res.sq_buf, p.qa.res.sq_wqe_cnt as usize * 64));
        for cq in [&p.scq_a, &p.rcq_a] {
            v.extend_from_slice(std::slice::from_raw_parts(
                cq.res.buf,
                (cq.res.cqe_cnt * cq.res.cqe_size) as usize,
            ));
        }
    }
    v
}

/// Runs `ops` against host A of a connected pair; returns the pair, whether
/// host A's visible device memory stayed as it was, and the number of
/// stores at a bad offset.
fn drive(mode: ExecMode, ops: &[Op]) -> (Pair, bool, u64) {
    let p =
        Pair::with(PairOpts { cfg: FabricConfig { mode, ..FabricConfig::default() }, ..PairOpts::default() });
    let before = device_bytes(&p);
    let reg = p.qa.res.uar_index;
    let mut bad = 0;
    for op in ops {
        match op {
            Op::Db { own_reg, reg: r, offset, value } => {
                let r = if *own_reg { reg } else { *r };
                bad += u64::from(!good(*offset));
                p.a.uar_write64(r, *offset, *value);
            }
            Op::Bf { own_reg, reg: r, offset, data } => {
                let r = if *own_reg { reg } else { *r };
                bad += u64::from(!good(*offset));
                p.a.uar_write_bf(r, *offset, data);
            }
            Op::CqDb { value } => p.a.cq_uar_write64(*value),
            Op::Tick => p.a.tick(),
        }
    }
    p.a.tick();
    p.b.tick();
    p.a.quiesce();
    let intact = device_bytes(&p) == before;
    (p, intact, bad)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Deterministic mode: every bad-offset store is counted, none panics or
    /// strays, and a valid WQE posted after them completes.
    #[test]
    fn bad_mmio_is_counted_and_ignored(ops in prop::collection::vec(op(), 1..40)) {
        let (mut p, intact, bad) = drive(ExecMode::Deterministic, &ops);
        prop_assert!(intact, "host A's rings changed");
        prop_assert_eq!(p.a.stats().doorbell_bad_offset, bad);
        // The device still works: host A's QP (which no random value names:
        // the chance that one carries its 24-bit QPN is nil, and then it
        // would be in ERR) completes a NOP.
        let _ = p.scq_a.poll_all();
        if p.qa.state() == QpState::Rts {
            p.qa.post(op::NOP, SIGNALED, [0; 4], &[]);
            prop_assert_eq!(p.scq_a.expect_one().opcode(), 0, "a requester CQE (spec §5.2)");
        }
    }

    /// Threaded and watch modes: the same calls, through the NIC thread's
    /// queue or the register's memory, never panic or stray.
    #[test]
    fn bad_mmio_is_survived_in_every_mode(
        threaded in any::<bool>(), ops in prop::collection::vec(op(), 1..20),
    ) {
        let mode = if threaded { ExecMode::Threaded } else { ExecMode::Watch };
        let (_p, intact, _) = drive(mode, &ops);
        prop_assert!(intact, "host A's rings changed");
    }
}

/// The reproduction, in every mode: no crash, the store counted.
#[test]
fn a_doorbell_far_outside_the_register_is_counted_not_followed() {
    for mode in [ExecMode::Deterministic, ExecMode::Threaded, ExecMode::Watch] {
        let p = Pair::with(PairOpts {
            cfg: FabricConfig { mode, ..FabricConfig::default() },
            ..PairOpts::default()
        });
        for off in [0x4000_0000, 0x1000, 8, 257] {
            p.a.uar_write64(p.qa.res.uar_index, off, [0; 8]);
            p.a.tick();
        }
        p.a.quiesce();
        if mode == ExecMode::Deterministic {
            assert_eq!(p.a.stats().doorbell_bad_offset, 4, "{mode:?}");
        }
    }
}
