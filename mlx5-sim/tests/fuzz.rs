//! Property tests: decoders and the execution engine never panic on arbitrary bytes.

mod common;

use common::*;
use mlx5_sim::dissect::{dissect_cqe, dissect_send_wqe};
use mlx5_sim::wire::{Cqe64, CtrlSeg, DataSeg, DatagramSeg, ErrCqe, InlineSeg};
use mlx5_sim::QpType;
use proptest::prelude::*;

proptest! {
    #[test]
    fn dissectors_never_panic(ring in proptest::collection::vec(any::<u8>(), 0..1200), pi in any::<u16>(), t in 0..3u8) {
        let t = [QpType::Rc, QpType::Ud, QpType::Dci][t as usize];
        if let Ok(d) = dissect_send_wqe(&ring, pi, t) {
            let _ = d.to_string();
            prop_assert!(!d.lines.is_empty());
        }
        let _ = dissect_cqe(&ring);
    }

    #[test]
    fn views_refuse_short_buffers(b in proptest::collection::vec(any::<u8>(), 0..80)) {
        prop_assert_eq!(CtrlSeg::new_checked(&b[..]).is_ok(), b.len() >= 16);
        prop_assert_eq!(DataSeg::new_checked(&b[..]).is_ok(), b.len() >= 16);
        prop_assert_eq!(InlineSeg::new_checked(&b[..]).is_ok(), b.len() >= 4);
        prop_assert_eq!(DatagramSeg::new_checked(&b[..]).is_ok(), b.len() >= 48);
        prop_assert_eq!(Cqe64::new_checked(&b[..]).is_ok(), b.len() >= 64);
        prop_assert_eq!(ErrCqe::new_checked(&b[..]).is_ok(), b.len() >= 64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random ring bytes, producer and doorbell: the model never panics, never writes outside
    /// registered memory (a guard buffer next to the MR stays untouched) and always leaves
    /// the QP in RTS or ERR.
    #[test]
    fn engine_survives_garbage_wqes(
        ring in proptest::collection::vec(any::<u8>(), 512),
        producer in 0u16..12,
        db in any::<[u8; 8]>(),
        patch_qpn in any::<bool>(),
    ) {
        let mut p = Pair::new();
        let guard = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
        let _mr = Buf::new(&p.b, p.pdb, 64, ALL_ACCESS);
        let mut ring = ring;
        if patch_qpn {
            // Make the first WQE plausible: right index and QPN.
            ring[0..3].copy_from_slice(&[0, 0, 0]);
            ring[4..7].copy_from_slice(&(p.qa.qpn() << 8).to_be_bytes()[..3]);
        }
        // SAFETY: 512 bytes = the whole 8-WQEBB send ring.
        unsafe { std::ptr::copy_nonoverlapping(ring.as_ptr(), p.qa.res.sq_buf, 512) };
        p.qa.pi = producer;
        p.qa.update_sq_dbr();
        let mut db = db;
        db[4..7].copy_from_slice(&(p.qa.qpn() << 8).to_be_bytes()[..3]);
        p.qa.ring(db);
        p.a.tick();
        let _ = p.scq_a.poll_all();
        let st = p.qa.state();
        prop_assert!(matches!(st, mlx5_sim::QpState::Rts | mlx5_sim::QpState::Err));
        prop_assert!(guard.read().iter().all(|&b| b == 0));
    }
}
