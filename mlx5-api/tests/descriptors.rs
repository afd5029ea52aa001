//! The ring core's descriptor constructors over the whole range of their
//! arguments (issue 39, item 1): every call returns a typed [`DescError`]
//! or a descriptor whose every safe method can be called with any argument
//! without a panic or a stray access; and a descriptor built over memory
//! of the size it describes survives its `unsafe` methods run to the
//! ring's end and around it.
//!
//! The expected verdicts come from the wire format (spec §1.2: a power-of-two
//! ring of WQEBBs; §1.3: the 16-bit `wqe_counter`; §2.1: the 6-bit `ds`;
//! §4: receive strides; §5.5: power-of-two CQs of 64- or 128-byte slots;
//! 24-bit queue numbers), written out here, not read from the constructors.

use mlx5_api::ring::mmio::BfReg;
use mlx5_api::ring::post::send_flags;
use mlx5_api::ring::seg::opcode;
use mlx5_api::ring::{
    send_wqe, CqDesc, DescArg, DescError, HostMmio, RqDesc, SendWr, Sge, SqDesc, SqKind, SrqDesc,
};
use proptest::prelude::*;

/// Memory aligned for any ring (64 bytes), zeroed.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

fn lines(bytes: usize) -> Vec<Line> {
    vec![Line([0; 64]); bytes.div_ceil(64).max(1)]
}

/// Which pointer a case passes.
#[derive(Clone, Copy, Debug)]
enum P {
    Null,
    Aligned,
    /// One byte past an aligned address.
    Odd,
}

fn ptr_kind() -> impl Strategy<Value = P> {
    prop_oneof![1 => Just(P::Null), 6 => Just(P::Aligned), 1 => Just(P::Odd)]
}

/// A u32 over its whole range, with the edges and the powers of two (and
/// their neighbours) that the checks are about drawn often.
fn any_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => any::<u32>(),
        3 => (0u32..32).prop_map(|k| 1u32 << k),
        2 => (0u32..32, -1i64..=1).prop_map(|(k, d)| ((1i64 << k) + d).clamp(0, u32::MAX as i64) as u32),
        1 => prop::sample::select(vec![0u32, 1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 0xff_ffff, 0x100_0000, u32::MAX]),
    ]
}

fn place<T>(p: P, base: *mut T) -> *mut T {
    match p {
        P::Null => std::ptr::null_mut(),
        P::Aligned => base,
        P::Odd => base.cast::<u8>().wrapping_add(1).cast(),
    }
}

/// The verdict the spec's limits give, checked in the constructor's order
/// of arguments: `Ok(())` or the argument refused.
fn expect(checks: &[(DescArg, bool)]) -> Result<(), DescArg> {
    checks.iter().find(|(_, ok)| !ok).map_or(Ok(()), |(a, _)| Err(*a))
}

fn arg_of(e: &DescError) -> DescArg {
    match *e {
        DescError::Null { arg } | DescError::Misaligned { arg, .. } => arg,
        DescError::NotPowerOfTwo { arg, .. } | DescError::OutOfRange { arg, .. } => arg,
        _ => unreachable!("a variant this test does not know: {e:?}"),
    }
}

fn pow2_in(v: u32, lo: u32, hi: u32) -> bool {
    v.is_power_of_two() && (lo..=hi).contains(&v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// `SqDesc::new`: typed refusal, or a descriptor whose safe methods are
    /// total.
    #[test]
    fn sq_constructor_refuses_or_builds_a_safe_descriptor(
        pb in ptr_kind(), pd in ptr_kind(), wqe_cnt in any_u32(), qpn in any_u32(),
        max_sge in any_u32(), max_inline in any_u32(), max_ds in any_u32(), max_msg in any_u32(),
        args in prop::array::uniform4(any::<u32>()),
    ) {
        let mut ring = lines(64);
        let mut dbrec = [0u32; 2];
        let r = SqDesc::new(
            place(pb, ring.as_mut_ptr().cast()), wqe_cnt, place(pd, &mut dbrec[1]),
            std::ptr::null_mut(), qpn, SqKind::Rc, max_sge, max_inline, max_ds, max_msg,
        );
        let want = expect(&[
            (DescArg::Buf, !matches!(pb, P::Null)),
            (DescArg::Dbrec, matches!(pd, P::Aligned)),
            (DescArg::Count, pow2_in(wqe_cnt, 1, 1 << 15)),
            (DescArg::Number, qpn < 1 << 24),
            (DescArg::MaxDs, max_ds <= 63),
        ]);
        match (r, want) {
            (Err(e), Err(a)) => prop_assert_eq!(arg_of(&e), a, "{}", e),
            (Ok(d), Ok(())) => {
                // Every safe method, any argument: no panic, no access.
                d.pi.store(args[0], std::sync::atomic::Ordering::Relaxed);
                d.ci.store(args[1], std::sync::atomic::Ordering::Relaxed);
                let _ = (d.kind(), d.consumer(), d.producer(), d.last(), d.unrung());
                prop_assert!(d.free() <= d.wqe_cnt);
                prop_assert!(d.slot(args[2]) < d.wqe_cnt);
                let _ = (d.byte_mask(), d.ds_ptr(args[2], args[3]));
                d.prefetch_next();
                d.commit(args[2], args[3]);
                d.reset();
            }
            (r, w) => prop_assert!(false, "constructor gave {:?}, the spec's limits {:?}", r.map(|_| ()), w),
        }
    }

    /// `RqDesc::new`, as above.
    #[test]
    fn rq_constructor_refuses_or_builds_a_safe_descriptor(
        pb in ptr_kind(), pd in ptr_kind(), wqe_cnt in any_u32(), stride in any_u32(), max_sge in any_u32(),
        args in prop::array::uniform2(any::<u32>()),
    ) {
        let mut ring = lines(64);
        let mut dbrec = [0u32; 2];
        let r = RqDesc::new(place(pb, ring.as_mut_ptr().cast()), wqe_cnt, stride, place(pd, &mut dbrec[0]), max_sge);
        let want = expect(&[
            (DescArg::Buf, !matches!(pb, P::Null)),
            (DescArg::Dbrec, matches!(pd, P::Aligned)),
            (DescArg::Count, pow2_in(wqe_cnt, 1, 1 << 15)),
            (DescArg::Stride, pow2_in(stride, 16, 1024)),
        ]);
        match (r, want) {
            (Err(e), Err(a)) => prop_assert_eq!(arg_of(&e), a, "{}", e),
            (Ok(d), Ok(())) => {
                prop_assert!(d.max_sge <= stride / 16 && d.max_sge <= max_sge);
                d.pi.store(args[0], std::sync::atomic::Ordering::Relaxed);
                d.ci.store(args[1], std::sync::atomic::Ordering::Relaxed);
                let _ = d.outstanding();
                d.reset();
            }
            (r, w) => prop_assert!(false, "constructor gave {:?}, the spec's limits {:?}", r.map(|_| ()), w),
        }
    }

    /// `SrqDesc::new`, as above (the old constructor panicked in debug
    /// builds for a stride under 16 and for a count of 0).
    #[test]
    fn srq_constructor_refuses_or_builds_a_safe_descriptor(
        pb in ptr_kind(), pd in ptr_kind(), wqe_cnt in any_u32(), stride in any_u32(), max_sge in any_u32(),
    ) {
        let mut ring = lines(64);
        let mut dbrec = [0u32; 2];
        let r = SrqDesc::new(place(pb, ring.as_mut_ptr().cast()), wqe_cnt, stride, place(pd, &mut dbrec[0]), max_sge);
        let want = expect(&[
            (DescArg::Buf, !matches!(pb, P::Null)),
            (DescArg::Dbrec, matches!(pd, P::Aligned)),
            (DescArg::Count, pow2_in(wqe_cnt, 2, 1 << 15)),
            (DescArg::Stride, pow2_in(stride, 32, 1024)),
        ]);
        match (r, want) {
            (Err(e), Err(a)) => prop_assert_eq!(arg_of(&e), a, "{}", e),
            (Ok(d), Ok(())) => {
                prop_assert!(d.max_sge < stride / 16 && d.max_sge <= max_sge);
                prop_assert_eq!(d.capacity(), wqe_cnt - 1);
            }
            (r, w) => prop_assert!(false, "constructor gave {:?}, the spec's limits {:?}", r.map(|_| ()), w),
        }
    }

    /// `CqDesc::new`, as above.
    #[test]
    fn cq_constructor_refuses_or_builds_a_safe_descriptor(
        pb in ptr_kind(), pd in ptr_kind(), cqe_cnt in any_u32(), cqe_size in any_u32(), cqn in any_u32(),
    ) {
        let mut ring = lines(64);
        let mut dbrec = [0u32; 2];
        let r = CqDesc::new(place(pb, ring.as_mut_ptr().cast()), cqe_cnt, cqe_size, place(pd, &mut dbrec[0]), cqn);
        let want = expect(&[
            (DescArg::Buf, matches!(pb, P::Aligned)),
            (DescArg::Dbrec, matches!(pd, P::Aligned)),
            (DescArg::Count, pow2_in(cqe_cnt, 1, 1 << 22)),
            (DescArg::CqeSize, cqe_size == 64 || cqe_size == 128),
            (DescArg::Number, cqn < 1 << 24),
        ]);
        match (r, want) {
            (Err(e), Err(a)) => prop_assert_eq!(arg_of(&e), a, "{}", e),
            (Ok(d), Ok(())) => prop_assert!(!d.in_session() && d.consumer() == 0),
            (r, w) => prop_assert!(false, "constructor gave {:?}, the spec's limits {:?}", r.map(|_| ()), w),
        }
    }

    /// A send queue built over memory of the size it describes: its
    /// `unsafe` methods, driven for three laps of the ring with WQEs of
    /// every size up to the limit (and masked atomics among them), stay inside that memory (a guard line
    /// after the ring is never written) and keep `free` consistent.
    #[test]
    fn a_valid_send_queue_stays_inside_its_ring(
        log_cnt in 0u32..=6, max_ds in 1u32..=63, sizes in prop::collection::vec(0u32..=8, 1..64),
    ) {
        let wqe_cnt = 1u32 << log_cnt;
        let mut ring = lines(wqe_cnt as usize * 64 + 64);
        ring.last_mut().unwrap().0 = [0xa5; 64];
        let mut dbrec = [0u32; 2];
        let mut reg = lines(512);
        let bf = BfReg::new(reg.as_mut_ptr().cast(), 256);
        let mut d = SqDesc::new(
            ring.as_mut_ptr().cast(), wqe_cnt, &mut dbrec[1], std::ptr::null_mut(), 1, SqKind::Rc, 8, 128, max_ds, 1 << 31,
        ).unwrap();
        d.bf = &bf as *const BfReg as *mut BfReg;
        let data = [0x11u8; 128];
        for (i, n) in sizes.iter().cycle().take(3 * sizes.len().max(wqe_cnt as usize)).enumerate() {
            let sge = Sge::new(data.as_ptr() as u64, *n * 16, 0);
            let result = Sge::new(data.as_ptr() as u64, 8, 0);
            let wr = if i % 3 == 2 {
                // A masked 8-byte compare-and-swap: five DS, its masks in a DS of their own.
                SendWr {
                    wr_id: i as u64,
                    sg_list: &result,
                    num_sge: 1,
                    opcode: opcode::ATOMIC_MASKED_CS as u32,
                    send_flags: send_flags::SIGNALED,
                    atomic_bytes: 8,
                    remote_addr: 0x1000,
                    ..SendWr::default()
                }
            } else {
                SendWr {
                    wr_id: i as u64,
                    sg_list: &sge,
                    num_sge: 1,
                    opcode: opcode::SEND as u32,
                    send_flags: send_flags::INLINE | send_flags::SIGNALED,
                    ..SendWr::default()
                }
            };
            // SAFETY: the descriptor describes `ring`, `dbrec` and `reg`.
            match unsafe { send_wqe(&d, &wr) } {
                Ok(()) => {
                    // SAFETY: as above.
                    unsafe { d.ring_bf(&HostMmio) };
                    // SAFETY: as above; the WQE just posted is outstanding.
                    let r = unsafe { d.retire(d.last() as u16) };
                    prop_assert!(r.is_some());
                }
                Err(e) => prop_assert!(
                    matches!(e, mlx5_api::ring::PostError::WqeTooLarge { .. } | mlx5_api::ring::PostError::SqFull { .. }),
                    "{e}"
                ),
            }
            prop_assert!(d.free() <= wqe_cnt);
        }
        prop_assert!(ring.last().unwrap().0 == [0xa5; 64], "a byte after the ring was written");
    }
}

/// The safe-code crash of the old API: a null register reached through
/// `blueflame_legal`. A null ring is now refused by the constructor, and
/// `blueflame_legal` is `unsafe` (tests/ui/blueflame_legal_is_unsafe.rs
/// shows the call no longer compiles outside `unsafe`).
#[test]
fn the_old_null_descriptor_is_refused() {
    let null = std::ptr::null_mut();
    let e = SqDesc::new(null, 0, null.cast(), null.cast(), 0, SqKind::Rc, 0, 0, 0, 0).unwrap_err();
    assert_eq!(e, DescError::Null { arg: DescArg::Buf });
    // SrqDesc::new(null, 0, 8, null, 1) panicked with an overflow in debug.
    assert_eq!(SrqDesc::new(null, 0, 8, null.cast(), 1).unwrap_err(), DescError::Null { arg: DescArg::Buf });
    let mut ring = lines(2);
    let mut dbrec = 0u32;
    assert_eq!(
        SrqDesc::new(ring.as_mut_ptr().cast(), 2, 8, &mut dbrec, 1).unwrap_err(),
        DescError::OutOfRange { arg: DescArg::Stride, value: 8, min: 32, max: 1024 }
    );
    assert_eq!(
        SrqDesc::new(ring.as_mut_ptr().cast(), 0, 32, &mut dbrec, 1).unwrap_err(),
        DescError::NotPowerOfTwo { arg: DescArg::Count, value: 0 }
    );
    // An empty queue (a DCT's) is a constructor of its own: nothing to post.
    let empty = SqDesc::empty();
    assert_eq!((empty.free(), empty.wqe_cnt), (0, 0));
}

/// `SqDesc::free` with counters a foreign writer left inconsistent (more
/// outstanding than the ring holds) says 0 instead of overflowing.
#[test]
fn free_with_inconsistent_counters_is_zero() {
    let mut ring = lines(4 * 64);
    let mut dbrec = [0u32; 2];
    let d = SqDesc::new(
        ring.as_mut_ptr().cast(),
        4,
        &mut dbrec[1],
        std::ptr::null_mut(),
        1,
        SqKind::Rc,
        1,
        0,
        4,
        0,
    )
    .unwrap();
    d.pi.store(9, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(d.free(), 0);
}
