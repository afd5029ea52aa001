//! Adversarial input: decoders never panic on arbitrary bytes; random UD/DCI rings never
//! write outside registered memory. The mutation fuzzer (valid WQEs
//! with one field broken, against MRs fenced by canary bytes) is `mutation_fuzz.rs`.

mod common;

use common::*;
use mlx5_sim::dissect::{dissect_cqe, dissect_send_wqe};
use mlx5_sim::wire::{Cqe64, CtrlSeg, DataSeg, DatagramSeg, ErrCqe, InlineSeg};
use mlx5_sim::QpType;
use proptest::prelude::*;

proptest! {
    #[test]
    fn dissectors_never_panic(ring in proptest::collection::vec(any::<u8>(), 0..1200), pi in any::<u16>(), t in 0..4u8) {
        let t = [QpType::Rc, QpType::Ud, QpType::Dci, QpType::Dct][t as usize];
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

/// Memory of 192 bytes of which only the middle 64 are registered: the outer parts must
/// never change.
struct Fenced {
    mem: Box<[u8]>,
    keys: mlx5_sim::MrKeys,
}

impl Fenced {
    fn new(nic: &mlx5_sim::Nic, pd: u32) -> Fenced {
        let mut mem = vec![0xeeu8; 192].into_boxed_slice();
        let addr = mem.as_mut_ptr() as u64 + 64;
        // SAFETY: the box outlives the fabric work of the test.
        let keys = unsafe { nic.reg_mr(pd, addr, 64, ALL_ACCESS) }.unwrap();
        Fenced { mem, keys }
    }
    fn mr(&self) -> u64 {
        self.mem.as_ptr() as u64 + 64
    }
    fn fences_intact(&self) -> bool {
        let mut v = vec![0u8; 192];
        // SAFETY: in-bounds copy of our own allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.mem.as_ptr(), v.as_mut_ptr(), 192) };
        v[..64].iter().chain(&v[128..]).all(|&b| b == 0xee)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// UD and DCI send rings full of random bytes (optionally with a plausible ctrl segment
    /// and a valid address vector), aimed at a UD QP and a DCT that share an SRQ whose
    /// memory is random too (optionally with scatter entries near the MR): no panic, no
    /// write outside the MR, the sender ends in RTS/SQE/ERR, the targets stay operational.
    #[test]
    fn engine_survives_garbage_ud_dci_and_srq(
        ring in proptest::collection::vec(any::<u8>(), 512),
        srq_mem in proptest::collection::vec(any::<u8>(), 512),
        posted in 0u16..24,
        producer in 0u16..12,
        dci in any::<bool>(),
        patch in any::<bool>(),
        opc in proptest::sample::select(vec![0x00u8, 0x01, 0x08, 0x09, 0x0a, 0x0b, 0x10, 0x11, 0x12, 0x25]),
        ds in 1u8..16,
        entry_off in proptest::collection::vec(0u64..128, 8),
    ) {
        let f = mlx5_sim::Fabric::new(mlx5_sim::FabricConfig::default());
        let a = f.add_host(mlx5_sim::HostConfig::infiniband("a", 1));
        let b = f.add_host(mlx5_sim::HostConfig::infiniband("b", 2));
        let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let mut scq = TestCq::new(&a, 64, 64);
        let mut rcq = TestCq::new(&b, 64, 64);
        let local = Fenced::new(&a, pda);
        let remote = Fenced::new(&b, pdb);
        let srq = TestSrq::new(&b, pdb, 8, 64);
        // SAFETY: the whole 512-byte SRQ buffer.
        unsafe { std::ptr::copy_nonoverlapping(srq_mem.as_ptr(), srq.res.buf, 512) };
        if patch {
            for w in 0..8usize {
                for e in 0..3usize {
                    let o = w * 64 + 16 + e * 16;
                    // SAFETY: inside the SRQ buffer.
                    unsafe {
                        let p = srq.res.buf.add(o);
                        std::ptr::copy_nonoverlapping(remote.keys.lkey.to_be_bytes().as_ptr(), p.add(4), 4);
                        let addr = remote.mr() - 64 + entry_off[(w + e) % 8] ;
                        std::ptr::copy_nonoverlapping(addr.to_be_bytes().as_ptr(), p.add(8), 8);
                        *p = 0;
                        *p.add(1) = 0;
                    }
                }
            }
        }
        // SAFETY: word 0 of the SRQ doorbell record.
        unsafe { *srq.res.dbrec = u32::from(posted).to_be() };
        let ub = ud_qp(&b, pdb, rcq.res.cqn, rcq.res.cqn, 8, Some(srq.res.srqn), 2);
        ud_up(&b, ub.qpn(), 5);
        let dct = dct_qp(&b, pdb, rcq.res.cqn, srq.res.srqn, 9, 3);
        let num = dct_up(&b, dct, ALL_ACCESS);
        let mut q = if dci {
            let q = dci_qp(&a, pda, scq.res.cqn, 8, 1);
            dci_up(&a, q.qpn(), 1);
            q
        } else {
            let q = ud_qp(&a, pda, scq.res.cqn, scq.res.cqn, 8, None, 1);
            ud_up(&a, q.qpn(), 5);
            q
        };
        let mut ring = ring;
        if patch {
            ring[0] = 0;
            ring[1..3].copy_from_slice(&[0, 0]);
            ring[3] = opc;
            ring[4..7].copy_from_slice(&(q.qpn() << 8).to_be_bytes()[..3]);
            ring[7] = ds;
            let av = if dci { Av::dc_ib(9, num, 2) } else { Av::ud_ib(5, ub.qpn(), 2) };
            ring[16..64].copy_from_slice(&av.bytes());
            // A data segment after the AV pointing near the local MR.
            let (len, off) = (u32::from(ring[68] & 0x7f), u64::from(ring[80] & 63));
            ring[64..68].copy_from_slice(&len.to_be_bytes());
            ring[68..72].copy_from_slice(&local.keys.lkey.to_be_bytes());
            ring[72..80].copy_from_slice(&(local.mr() - 32 + off).to_be_bytes());
        }
        // SAFETY: 512 bytes = the whole 8-WQEBB send ring.
        unsafe { std::ptr::copy_nonoverlapping(ring.as_ptr(), q.res.sq_buf, 512) };
        q.pi = producer;
        q.update_sq_dbr();
        let mut db = [0u8; 8];
        db[..8].copy_from_slice(&ring[..8]);
        db[4..7].copy_from_slice(&(q.qpn() << 8).to_be_bytes()[..3]);
        q.ring(db);
        for _ in 0..3 {
            a.tick();
        }
        let _ = scq.poll_all();
        let _ = rcq.poll_all();
        prop_assert!(matches!(q.state(), mlx5_sim::QpState::Rts | mlx5_sim::QpState::Sqe | mlx5_sim::QpState::Err));
        prop_assert_eq!(b.qp_state(dct).unwrap(), mlx5_sim::QpState::Rtr);
        prop_assert_eq!(ub.state(), mlx5_sim::QpState::Rts);
        prop_assert!(local.fences_intact());
        prop_assert!(remote.fences_intact());
    }
}
