//! post_poll: the cost of posting one 1-SGE RDMA WRITE and polling its
//! completion on the simulator, and of the post alone into a ring whose
//! doorbell is a no-op (the ring-only backend).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use mlx5::ring_only::{RingOnly, RingOnlyDevice};
use mlx5::sim::two_hosts;
use mlx5::sim::ExecMode;
use mlx5::{AccessFlags, ConnectParams, Device, QpConfig, RemoteQpInfo, Sge, WqeFlags};

fn post_and_poll_on_sim(c: &mut Criterion) {
    let (_fabric, da, db) = two_hosts(ExecMode::Deterministic);
    let (ca, cb) = (da.open().unwrap(), db.open().unwrap());
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_mono_cq(256, |_, _: u64| {}).unwrap();
    let cqb = cb.create_mono_cq(256, |_, _: u64| {}).unwrap();
    let cfg = QpConfig::default();
    let qa = ca.create_rc_qp(&pa, &cqa, &cqa, &cfg).unwrap();
    let qb = cb.create_rc_qp(&pb, &cqb, &cqb, &cfg).unwrap();
    let p = ConnectParams::default();
    qa.activate(&ConnectParams { remote: Some(qb.local_info().unwrap()), ..p.clone() }).unwrap();
    qb.activate(&ConnectParams { remote: Some(qa.local_info().unwrap()), ..p.clone() }).unwrap();
    let la = pa.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let rb = pb.alloc_mr(4096, AccessFlags::ALL).unwrap();
    c.bench_function("post_poll/rdma_write_1sge_64B/sim", |b| {
        b.iter(|| {
            qa.wqe_builder(1)
                .unwrap()
                .ctrl_rdma_write(WqeFlags::SIGNALED)
                .unwrap()
                .rdma(rb.addr(), rb.rkey())
                .unwrap()
                .sge(Sge::new(la.addr(), 64, la.lkey()))
                .unwrap()
                .finish()
                .unwrap();
            while cqa.poll(4).completions == 0 {}
        })
    });
}

fn post_only_noop_doorbell(c: &mut Criterion) {
    let ctx = Device::<RingOnly>::new(RingOnlyDevice::new(1, 256)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_mono_cq(64, |_, _: u64| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &QpConfig::default()).unwrap();
    let remote = RemoteQpInfo::ib(2, 2);
    let p = ConnectParams::default();
    let cap = qp.sq_wqebbs() as u64;
    c.bench_function("post_only/rdma_write_1sge/noop_doorbell", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                // Untimed: recycle the ring (nothing completes on a ring-only backend).
                qp.reset().unwrap();
                qp.activate(&ConnectParams { remote: Some(remote.clone()), ..p.clone() }).unwrap();
                let n = left.min(cap);
                let t = Instant::now();
                for i in 0..n {
                    qp.wqe_builder(i)
                        .unwrap()
                        .ctrl_rdma_write(WqeFlags::SIGNALED)
                        .unwrap()
                        .rdma(0x5555_0000_1000, 0x5678)
                        .unwrap()
                        .sge(Sge::new(0x7f12_3456_0000, 64, 0x1234))
                        .unwrap()
                        .finish()
                        .unwrap();
                }
                total += t.elapsed();
                left -= n;
            }
            total
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = post_and_poll_on_sim, post_only_noop_doorbell
}
criterion_main!(benches);
