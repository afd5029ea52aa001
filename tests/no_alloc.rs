//! No heap allocation on post or poll, proven with a counting global
//! allocator. Counting is per thread: on the threaded simulator the device
//! model runs on its own threads, so what is counted here is exactly the
//! front-end's post path (WQE writes, doorbell record, doorbell/BlueFlame
//! write into the model's channel), receive posting and CQ polling.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

mod common;
use common::*;
use mlx5::ring_only::{RingOnly, RingOnlyDevice};
use mlx5::sim::ExecMode;
use mlx5::{AccessFlags, ConnectParams, Device, QpConfig, RemoteQpInfo, Sge, WqeFlags};

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ON.with(|o| o.get()) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if ON.with(|o| o.get()) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn counted(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ON.with(|o| o.set(true));
    f();
    ON.with(|o| o.set(false));
    COUNT.with(|c| c.get())
}

#[test]
fn post_and_poll_do_not_allocate() {
    let mut p = pair_with(ExecMode::Threaded, &small_cfg(), AccessFlags::ALL, &ConnectParams::default());
    let (la, lka, rb, rkb) = (p.a.mr.addr(), p.a.mr.lkey(), p.b.mr.addr(), p.b.mr.rkey());
    let rsge = [Sge { addr: rb, len: 4096, lkey: p.b.mr.lkey() }];
    let round = |p: &mut Pair, i: u64| {
        let qp = &p.a.qp;
        qp.wqe_builder(i)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(rb, rkb)
            .unwrap()
            .sge(Sge::new(la, 64, lka))
            .unwrap()
            .finish()
            .unwrap();
        qp.wqe_builder(i)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(rb, rkb)
            .unwrap()
            .inline(&[1; 32])
            .unwrap()
            .finish_with_blueflame()
            .unwrap();
        qp.wqe_builder(i).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
        p.b.qp.post_recv(i, &rsge).unwrap();
        qp.wqe_builder(i)
            .unwrap()
            .ctrl_send_imm(WqeFlags::SIGNALED, 7)
            .unwrap()
            .sge(Sge::new(la, 128, lka))
            .unwrap()
            .finish_batch()
            .unwrap();
        qp.ring_sq_doorbell();
        let (mut sends, mut recvs) = (0, 0);
        while sends < 3 || recvs < 1 {
            sends += p.a.cq.poll(16).completions;
            recvs += p.b.cq.poll(16).completions;
        }
    };
    for i in 0..100 {
        round(&mut p, i); // warm-up: lazily initialised state in std and the channels
    }
    let n = counted(|| {
        for i in 0..1000 {
            round(&mut p, i);
        }
    });
    assert_eq!(n, 0, "allocations on the post/poll path");
}

#[test]
fn post_into_ring_only_does_not_allocate() {
    let ctx = Device::<RingOnly>::new(RingOnlyDevice::new(1, 256)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_mono_cq(64, |_, _: u64| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig::default()).unwrap();
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(2, 2))).unwrap();
    let n = counted(|| {
        for i in 0..100 {
            qp.wqe_builder(i)
                .unwrap()
                .ctrl_rdma_write(WqeFlags::NONE)
                .unwrap()
                .rdma(0x1000, 1)
                .unwrap()
                .sge(Sge::new(0x2000, 8, 2))
                .unwrap()
                .finish()
                .unwrap();
            qp.post_recv(i, &[Sge { addr: 0x3000, len: 8, lkey: 2 }]).ok();
        }
    });
    assert_eq!(n, 0);
}

/// UD sends, DCI sends to a DCT, and SRQ receives: no allocation either.
#[test]
fn ud_dc_and_srq_paths_do_not_allocate() {
    let (_f, h) = cluster(2, Addressing::Roce, ExecMode::Threaded);
    let cfg = QpConfig {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let (a, b) = (&h[0], &h[1]);
    let ua = a.ctx.create_ud_qp(&a.pd, &a.cq, &a.cq, None, &cfg).unwrap();
    let ub = b.ctx.create_ud_qp(&b.pd, &b.cq, &b.cq, Some(&b.srq), &cfg).unwrap();
    ua.activate(&ConnectParams { qkey: 7, ..ConnectParams::default() }).unwrap();
    ub.activate(&ConnectParams { qkey: 7, ..ConnectParams::default() }).unwrap();
    let dci = a.ctx.create_dci(&a.pd, &a.cq, &cfg).unwrap();
    dci.activate(&ConnectParams::default()).unwrap();
    let dct = b.ctx.create_dct(&b.pd, &b.cq, &b.srq, &QpConfig { dc_key: 9, ..QpConfig::default() }).unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    let dctn = dct.dct_number().unwrap();
    let av = mlx5::AddressVector::between(&a.port, &b.port, 0);
    let rsge = [Sge { addr: b.mr.addr(), len: 4096, lkey: b.mr.lkey() }];
    let round = |i: u64| {
        b.srq.post_recv(i, &rsge).unwrap();
        b.srq.post_recv(i, &rsge).unwrap();
        ua.wqe_builder(i)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .datagram(&av, ub.qpn(), 7)
            .unwrap()
            .inline(&[1; 32])
            .unwrap()
            .finish()
            .unwrap();
        dci.wqe_builder(i)
            .unwrap()
            .ctrl_send_imm(WqeFlags::SIGNALED, 3)
            .unwrap()
            .av(9, dctn, &av)
            .unwrap()
            .sge(Sge::new(a.mr.addr(), 64, a.mr.lkey()))
            .unwrap()
            .finish()
            .unwrap();
        let (mut sends, mut recvs) = (0, 0);
        while sends < 2 || recvs < 2 {
            sends += a.cq.poll_with(16, |_, _| {}).completions;
            recvs += b.cq.poll_with(16, |_, _| {}).completions;
        }
    };
    for i in 0..100 {
        round(i);
    }
    assert_eq!(counted(|| (0..1000).for_each(round)), 0, "allocations on the UD/DC/SRQ post and poll paths");
}
