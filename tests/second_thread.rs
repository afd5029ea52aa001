//! A second Rust thread posts through the ring core (`send_wqe`, `ring_db`
//! with real stores into the register) while the owner thread polls the CQ
//! through the ring core and retires wr-ids; the simulator's NICs run in
//! watch mode and notice the work from memory alone.

use mlx5::ring::post::send_flags;
use mlx5::ring::seg::opcode;
use mlx5::ring::{send_wqe, HostMmio, SendWr, Sge};
use mlx5::sim::{devices, Sim};
use mlx5::sim::{ExecMode, FabricConfig, HostConfig};
use mlx5::{AccessFlags, ConnectParams, Context, ProtectionDomain, QpConfig};

/// Two hosts whose NICs watch memory, a context and a PD on each.
fn watch_pair(
) -> (mlx5::sim::Fabric, Context<Sim>, Context<Sim>, ProtectionDomain<Sim>, ProtectionDomain<Sim>) {
    let fabric = mlx5::sim::Fabric::new(FabricConfig { mode: ExecMode::Watch, ..FabricConfig::default() });
    fabric.add_host(HostConfig::infiniband("a", 1));
    fabric.add_host(HostConfig::infiniband("b", 2));
    let d = devices(&fabric);
    let (a, b) = (d[0].open().unwrap(), d[1].open().unwrap());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    (fabric, a, b, pa, pb)
}

#[test]
fn another_thread_posts_while_the_owner_polls() {
    const N: u64 = 2000;
    let (_fabric, a, b, pa, pb) = watch_pair();
    let cqa = a.create_cq(256, |_, _: ()| {}).unwrap();
    let cqb = b.create_cq(256, |_, _: ()| {}).unwrap();
    let cfg = QpConfig { max_send_wr: 64, dedicated_uar: true, ..QpConfig::default() };
    let qa = a.create_rc_qp(&pa, &cqa, &cqa, &cfg).unwrap();
    let qb = b.create_rc_qp(&pb, &cqb, &cqb, &QpConfig::default()).unwrap();
    qa.activate(&ConnectParams::to(qb.local_info().unwrap())).unwrap();
    qb.activate(&ConnectParams::to(qa.local_info().unwrap())).unwrap();
    let la = pa.alloc_mr(8 * N as usize, AccessFlags::ALL).unwrap();
    let rb = pb.alloc_mr(8 * N as usize, AccessFlags::ALL).unwrap();
    for i in 0..N {
        la.write(8 * i as usize, &i.to_le_bytes()).unwrap();
    }
    // SAFETY: from here on the queue is used only through the descriptors
    // (one posting thread, one polling thread); the handles outlive the scope.
    let (sq, cq) = unsafe { (qa.sq_desc(), cqa.desc()) };
    let (laddr, lkey, raddr, rkey) = (la.addr(), la.lkey(), rb.addr(), rb.rkey());
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..N {
                let sge = [Sge { addr: laddr + 8 * i, len: 8, lkey }];
                let wr = SendWr {
                    wr_id: 1000 + i,
                    sg_list: sge.as_ptr(),
                    num_sge: 1,
                    opcode: opcode::RDMA_WRITE as u32,
                    send_flags: if i % 4 == 3 { send_flags::SIGNALED } else { 0 },
                    remote_addr: raddr + 8 * i,
                    rkey,
                    ..SendWr::default()
                };
                // SAFETY: this thread is the only poster; the QP outlives the scope.
                while let Err(e) = unsafe { send_wqe(sq, &wr) } {
                    assert!(matches!(e, mlx5::ring::PostError::SqFull { .. }), "{e}");
                    std::thread::yield_now();
                }
                if i % 4 == 3 {
                    // SAFETY: the QP's own (dedicated) register, written by this thread only.
                    unsafe { sq.ring_db(&HostMmio) };
                }
            }
        });
        let mut next = 1003;
        while next < 1000 + N {
            // SAFETY: this thread is the only poller and retirer.
            match unsafe { cq.poll() } {
                Some(c) => {
                    assert!(c.error.is_none(), "{c:?}");
                    let r = unsafe { sq.retire(c.wqe_counter) }.expect("the CQE names a posted WQE");
                    assert_eq!(r.wr_id, Some(next), "completions in order, with the poster's wr-ids");
                    next += 4;
                }
                None => std::thread::yield_now(),
            }
        }
    });
    for i in 0..N {
        let mut v = [0u8; 8];
        rb.read(8 * i as usize, &mut v).unwrap();
        assert_eq!(u64::from_le_bytes(v), i);
    }
    // Not `bf_offset_mismatch`: under load (as when the test suite runs in
    // parallel) the watching thread can miss a write to a register half that
    // was written again before it looked (see `ExecMode::Watch`); seen in 5 of
    // 40 runs with three busy processes on two cores.
    let s = a.raw().nic().stats();
    assert_eq!((s.malformed_wqes, s.doorbell_mismatch), (0, 0), "{s:?}");
}

/// Watch mode notices a send queue whose doorbell record alone moved: WQEs
/// posted through the ring core and published with `SqDesc::publish` (the
/// record, spec §1.5), never rung at the register, still execute. Every
/// other watch-mode test also stores to the register, so a watcher that
/// stopped reading doorbell records would pass them all; this one fails
/// (no CQE arrives). The C twin is `mlx5-capi/tests/c/doorbell_record.c`.
#[test]
fn watch_mode_executes_from_the_doorbell_record_alone() {
    let (_fabric, a, b, pa, pb) = watch_pair();
    let cqa = a.create_cq(64, |_, _: ()| {}).unwrap();
    let cqb = b.create_cq(64, |_, _: ()| {}).unwrap();
    let qa = a.create_rc_qp(&pa, &cqa, &cqa, &QpConfig::default()).unwrap();
    let qb = b.create_rc_qp(&pb, &cqb, &cqb, &QpConfig::default()).unwrap();
    qa.activate(&ConnectParams::to(qb.local_info().unwrap())).unwrap();
    qb.activate(&ConnectParams::to(qa.local_info().unwrap())).unwrap();
    let la = pa.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let rb = pb.alloc_mr(4096, AccessFlags::ALL).unwrap();
    // SAFETY: the queue is used only through the descriptors from here on,
    // by this thread; the handles outlive them.
    let (sq, cq) = unsafe { (qa.sq_desc(), cqa.desc()) };
    let before = a.raw().nic().stats().doorbells;
    for r in 0..8u64 {
        la.write(64 * r as usize, &[r as u8 + 1; 64]).unwrap();
        let sge = [Sge { addr: la.addr() + 64 * r, len: 64, lkey: la.lkey() }];
        let wr = SendWr {
            wr_id: 500 + r,
            sg_list: sge.as_ptr(),
            num_sge: 1,
            opcode: opcode::RDMA_WRITE as u32,
            send_flags: send_flags::SIGNALED,
            remote_addr: rb.addr() + 64 * r,
            rkey: rb.rkey(),
            ..SendWr::default()
        };
        // SAFETY: this thread is the only poster; the QP is live.
        unsafe {
            send_wqe(sq, &wr).unwrap();
            sq.publish();
        }
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let c = loop {
            // SAFETY: this thread is the only poller.
            if let Some(c) = unsafe { cq.poll() } {
                break c;
            }
            assert!(std::time::Instant::now() < end, "round {r}: no CQE within 10 s from the record alone");
            std::thread::yield_now();
        };
        assert!(c.error.is_none(), "{c:?}");
        // SAFETY: as above.
        let got = unsafe { sq.retire(c.wqe_counter) }.expect("the CQE names a posted WQE");
        assert_eq!(got.wr_id, Some(500 + r));
        let mut v = [0u8; 64];
        rb.read(64 * r as usize, &mut v).unwrap();
        assert_eq!(v, [r as u8 + 1; 64]);
    }
    assert_eq!(a.raw().nic().stats().doorbells, before, "no register store was made");
}
