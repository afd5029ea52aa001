//! A fixed amount of post or poll work for instruction counting with
//! callgrind, and the same work done by the C baseline
//! (`benches/c/hot_path.c`: hand-written C with rdma-core's mlx5dv.h
//! helpers). Two harnesses count it, each only inside the `*_phase`
//! function that does the work (`--toggle-collect`), so set-up is left out:
//! `benches/instructions.rs` (gungraun: each operation beside its C
//! counterpart) and `benches/callgrind.sh` (N and 2N operations, the
//! difference over N: a table of instructions per operation).
//!
//! [`run`]`("post", n)`: n signaled 1-SGE RDMA_WRITEs into the ring-only
//! backend (`RingOnly<Unlogged>`: its register is ordinary memory written
//! as `HostMmio` writes a real one, nothing executed), one `finish()` each.
//! `run("poll", n)`: n signaled RDMA_WRITEs executed by the deterministic
//! simulator (posted as one batch), then n CQEs polled by a `MonoCq` whose
//! callback adds up the entries and counts errors, as the C loop does.
//!
//! Further post kinds (ring-only backend, counted in their own phase):
//! `post_vary` (the RDMA_WRITE with its addresses changing per WQE),
//! `post_inline` (a 32-byte inline SEND), `post_ud` (a UD SEND with its
//! address vector), `post_dc` (a DCI RDMA_WRITE with its AV), `post_bf` (the
//! RDMA_WRITE rung by BlueFlame), `recv` (a 1-SGE receive). Further polls:
//! `poll1` (the CQEs of `poll`, one `poll(1)` call each), `poll_zip` (compression on: sessions of up to 64 completions),
//! `poll_resp` (responder CQEs of n SENDs) and `poll_err` (n flush error
//! CQEs).
//!
//! The hardware backend: `hw_post` and `hw_poll` (the RDMA_WRITE and its
//! CQE through `mlx5::hw`, on the device `MLX5_TEST_DEVICE` names: a
//! ConnectX, or the simulator as a device under `mlx5_simrun`).

use std::hint::black_box;

use mlx5::ring_only::{RingOnly, RingOnlyDevice, Unlogged};
use mlx5::sim::two_hosts;
use mlx5::sim::ExecMode;
use mlx5::{AccessFlags, ConnectParams, Device, QpConfig, RemoteQpInfo, Sge, WqeFlags};

type Cfg = QpConfig;

fn cfg(n: u32) -> Cfg {
    QpConfig { max_send_wr: n.next_power_of_two().max(64), max_recv_wr: 16, ..QpConfig::default() }
}

/// The signaled 1-SGE RDMA_WRITE of `post` and `post_bf`, ready to finish.
#[inline(always)]
fn write_1sge(
    qp: &mlx5::RcQp<RingOnly<Unlogged>, u64>,
    i: u64,
) -> mlx5::WqeBuilder<'_, RingOnly<Unlogged>, u64, mlx5::wqe::state::Data> {
    qp.wqe_builder(i)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(0x5555_0000_1000, 0x5678)
        .unwrap()
        .sge(Sge::new(0x7f12_3456_0000, 64, 0x1234))
        .unwrap()
}

#[inline(never)]
fn post_phase(qp: &mlx5::RcQp<RingOnly<Unlogged>, u64>, n: u64) {
    for i in 0..n {
        write_1sge(qp, i).finish().unwrap();
    }
}

/// A ring-only context and PD (nothing executes; doorbells go to memory).
fn ring_only() -> (mlx5::Context<RingOnly<Unlogged>>, mlx5::ProtectionDomain<RingOnly<Unlogged>>) {
    let ctx = Device::<RingOnly<Unlogged>>::new(RingOnlyDevice::new(1, 256)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    (ctx, pd)
}

/// The other post kinds, each `n` times into `post_phase`-like loops.
fn post_kind(kind: &str, n: u32) {
    let (ctx, pd) = ring_only();
    let cq = ctx.create_mono_cq(64, |_, _: u64| {}).unwrap();
    let cfg = QpConfig { max_inline_data: 64, ..cfg(n) };
    let av = mlx5::AddressVector::ib(2, 0);
    match kind {
        "post_inline" => {
            let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
            qp.activate(&ConnectParams::to(RemoteQpInfo::ib(2, 2))).unwrap();
            post_inline_phase(&qp, black_box(n as u64));
        }
        "post_bf" => {
            let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
            qp.activate(&ConnectParams::to(RemoteQpInfo::ib(2, 2))).unwrap();
            post_bf_phase(&qp, black_box(n as u64));
        }
        "post_ud" => {
            let qp = ctx.create_ud_qp(&pd, &cq, &cq, None, &cfg).unwrap();
            qp.activate(&ConnectParams::default()).unwrap();
            post_ud_phase(&qp, &av, black_box(n as u64));
        }
        "post_dc" => {
            let qp = ctx.create_dci(&pd, &cq, &cfg).unwrap();
            qp.activate(&ConnectParams::default()).unwrap();
            post_dc_phase(&qp, &av, black_box(n as u64));
        }
        _ => {
            // One scatter entry per receive: a 16-byte stride, no
            // terminator, as in the C baseline.
            let rq = QpConfig { max_recv_wr: n.next_power_of_two(), max_recv_sge: 1, ..cfg };
            let qp = ctx.create_rc_qp(&pd, &cq, &cq, &rq).unwrap();
            assert_eq!(qp.caps().max_recv_sge, 1);
            qp.activate(&ConnectParams::to(RemoteQpInfo::ib(2, 2))).unwrap();
            recv_phase(&qp, black_box(n as u64));
        }
    }
}

#[inline(never)]
fn post_inline_phase(qp: &mlx5::RcQp<RingOnly<Unlogged>, u64>, n: u64) {
    let data = [0x5a; 32];
    for i in 0..n {
        qp.wqe_builder(i)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .inline(&data)
            .unwrap()
            .finish()
            .unwrap();
    }
}

#[inline(never)]
fn post_bf_phase(qp: &mlx5::RcQp<RingOnly<Unlogged>, u64>, n: u64) {
    for i in 0..n {
        write_1sge(qp, i).finish_with_blueflame().unwrap();
    }
}

#[inline(never)]
fn post_ud_phase(qp: &mlx5::UdQp<RingOnly<Unlogged>, u64>, av: &mlx5::AddressVector, n: u64) {
    for i in 0..n {
        qp.wqe_builder(i)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .datagram(av, 0x99, 0x1111_1111)
            .unwrap()
            .sge(Sge::new(0x7f12_3456_0000, 64, 0x1234))
            .unwrap()
            .finish()
            .unwrap();
    }
}

#[inline(never)]
fn post_dc_phase(qp: &mlx5::Dci<RingOnly<Unlogged>, u64>, av: &mlx5::AddressVector, n: u64) {
    for i in 0..n {
        qp.wqe_builder(i)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .av(0xdc, 0x80_0001, av)
            .unwrap()
            .rdma(0x5555_0000_1000, 0x5678)
            .unwrap()
            .sge(Sge::new(0x7f12_3456_0000, 64, 0x1234))
            .unwrap()
            .finish()
            .unwrap();
    }
}

#[inline(never)]
fn recv_phase(qp: &mlx5::RcQp<RingOnly<Unlogged>, u64>, n: u64) {
    for i in 0..n {
        qp.post_recv(i, &[Sge::new(0x7f12_3456_0000, 64, 0x1234)]).unwrap();
    }
}

/// `post_vary`: the RDMA_WRITE of `post`, its remote and local addresses
/// changing from one WQE to the next, as real traffic has them (nothing
/// constant for the compiler to fold into the loop).
#[inline(never)]
fn post_vary_phase(qp: &mlx5::RcQp<RingOnly<Unlogged>, u64>, n: u64) {
    for i in 0..n {
        let off = i << 6;
        qp.wqe_builder(i)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(0x5555_0000_1000 + off, 0x5678)
            .unwrap()
            .sge(Sge::new(0x7f12_3456_0000 + off, 64, 0x1234))
            .unwrap()
            .finish()
            .unwrap();
    }
}

fn post(n: u32, vary: bool) {
    let (ctx, pd) = ring_only();
    let cq = ctx.create_mono_cq(64, |_, _: u64| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg(n)).unwrap();
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(2, 2))).unwrap();
    if vary {
        post_vary_phase(&qp, black_box(n as u64));
    } else {
        post_phase(&qp, black_box(n as u64));
    }
    assert_eq!(qp.sq_pi(), n);
}

#[inline(never)]
fn poll_phase<F: FnMut(mlx5::Completion, u64)>(cq: &mut mlx5::MonoCq<mlx5::sim::Sim, u64, F>, n: u32) -> u32 {
    let mut got = 0;
    while got < n {
        got += cq.poll(n).completions;
    }
    got
}

/// `poll1`: the CQEs of `poll`, one `poll(1)` call each, as a ping-pong or
/// a latency loop polls.
#[inline(never)]
fn poll1_phase<F: FnMut(mlx5::Completion, u64)>(
    cq: &mut mlx5::MonoCq<mlx5::sim::Sim, u64, F>,
    n: u32,
) -> u32 {
    let mut got = 0;
    while got < n {
        got += cq.poll(1).completions;
    }
    got
}

fn poll(n: u32, compressed: bool, one: bool) {
    let (_fabric, da, db) = two_hosts(ExecMode::Deterministic);
    let (ca, cb) = (da.open().unwrap(), db.open().unwrap());
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut sum = 0u64;
    let mut errors = 0u32;
    let mut cfg_a = mlx5::CqConfig::new(n.next_power_of_two());
    if compressed {
        cfg_a = cfg_a.compressed(mlx5::MiniCqeFormat::Hash);
    }
    let mut cqa = ca
        .create_mono_cq(cfg_a, |c, e: u64| {
            sum = sum.wrapping_add(e);
            if !c.status.is_ok() {
                errors += 1;
            }
        })
        .unwrap();
    let cqb = cb.create_mono_cq(64, |_, _: u64| {}).unwrap();
    let qa = ca.create_rc_qp(&pa, &cqa, &cqa, &cfg(n)).unwrap();
    let qb = cb.create_rc_qp(&pb, &cqb, &cqb, &cfg(16)).unwrap();
    let p = ConnectParams::default();
    qa.activate(&ConnectParams { remote: Some(qb.local_info().unwrap()), ..p.clone() }).unwrap();
    qb.activate(&ConnectParams { remote: Some(qa.local_info().unwrap()), ..p.clone() }).unwrap();
    let la = pa.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let rb = pb.alloc_mr(4096, AccessFlags::ALL).unwrap();
    for i in 0..n as u64 {
        qa.wqe_builder(i)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(rb.addr(), rb.rkey())
            .unwrap()
            .sge(Sge::new(la.addr(), 64, la.lkey()))
            .unwrap()
            .finish_batch()
            .unwrap();
    }
    qa.ring_sq_doorbell();
    let t0 = std::time::Instant::now();
    let got = if one { poll1_phase(&mut cqa, black_box(n)) } else { poll_phase(&mut cqa, black_box(n)) };
    if std::env::var_os("HOT_PATH_TIME").is_some() {
        // (Timing on request only: callgrind counts instructions.)
        eprintln!("{:.2} ns per CQE", t0.elapsed().as_nanos() as f64 / f64::from(n));
    }
    drop(cqa);
    assert_eq!(got, n);
    assert_eq!(errors, 0);
    assert_eq!(sum, (n as u64) * (n as u64 - 1) / 2);
}

/// Responder CQEs (`poll_resp`: N SENDs received) or flush error CQEs
/// (`poll_err`: N receives flushed by moving the QP to ERR), polled as in `poll`.
fn poll_other(kind: &str, n: u32) {
    let (_fabric, da, db) = two_hosts(ExecMode::Deterministic);
    let (ca, cb) = (da.open().unwrap(), db.open().unwrap());
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut sum = 0u64;
    let mut cqb = cb.create_mono_cq(n.next_power_of_two(), |_, e: u64| sum = sum.wrapping_add(e)).unwrap();
    let cqa = ca.create_mono_cq(n.next_power_of_two(), |_, _: u64| {}).unwrap();
    let big = QpConfig { max_recv_wr: n.next_power_of_two(), ..cfg(n) };
    let qa = ca.create_rc_qp(&pa, &cqa, &cqa, &big).unwrap();
    let qb = cb.create_rc_qp(&pb, &cqb, &cqb, &big).unwrap();
    let p = ConnectParams::default();
    qa.activate(&ConnectParams { remote: Some(qb.local_info().unwrap()), ..p.clone() }).unwrap();
    qb.activate(&ConnectParams { remote: Some(qa.local_info().unwrap()), ..p.clone() }).unwrap();
    let rb = pb.alloc_mr(4096, AccessFlags::ALL).unwrap();
    for i in 0..n as u64 {
        qb.post_recv(i, &[Sge::new(rb.addr(), 64, rb.lkey())]).unwrap();
    }
    if kind == "poll_resp" {
        for i in 0..n as u64 {
            qa.wqe_builder(i)
                .unwrap()
                .ctrl_send(WqeFlags::NONE)
                .unwrap()
                .inline(&[1; 8])
                .unwrap()
                .finish_batch()
                .unwrap();
        }
        qa.ring_sq_doorbell();
    } else {
        qb.modify_to_error().unwrap();
    }
    let got = poll_phase(&mut cqb, black_box(n));
    drop(cqb);
    assert_eq!(got, n);
    assert_eq!(sum, (n as u64) * (n as u64 - 1) / 2);
}

/// Every kind [`run`] knows, and the function whose instructions are counted.
pub const KINDS: [(&str, &str); 12] = [
    ("post", "post_phase"),
    ("post_vary", "post_vary_phase"),
    ("post_inline", "post_inline_phase"),
    ("post_ud", "post_ud_phase"),
    ("post_dc", "post_dc_phase"),
    ("post_bf", "post_bf_phase"),
    ("recv", "recv_phase"),
    ("poll", "poll_phase"),
    ("poll1", "poll1_phase"),
    ("poll_zip", "poll_phase"),
    ("poll_resp", "poll_phase"),
    ("poll_err", "poll_phase"),
];

/// Set up, do `n` operations of `what` (one of [`KINDS`]) in its phase
/// function, check the result. Panics on an unknown kind.
pub fn run(what: &str, n: u32) {
    match what {
        "post" => post(n, false),
        "post_vary" => post(n, true),
        "poll" => poll(n, false, false),
        "poll1" => poll(n, false, true),
        // The same, with CQE compression on: the simulator writes the burst
        // as sessions of up to 64 completions.
        "poll_zip" => poll(n, true, false),
        "poll_resp" | "poll_err" => poll_other(what, n),
        "post_inline" | "post_ud" | "post_dc" | "post_bf" | "recv" => post_kind(what, n),
        "hw_post" | "hw_poll" => hw(what, n),
        _ => panic!("unknown kind {what}"),
    }
}

#[cfg(c_baseline)]
extern "C" {
    /// `main` of benches/c/hot_path.c, renamed by the build script.
    fn hot_path_c_main(argc: i32, argv: *const *const std::ffi::c_char) -> i32;
}

/// Whether the C baseline was built (rdma-core's mlx5dv.h was installed).
pub const HAVE_C: bool = cfg!(c_baseline);

/// The C baseline's `what` for `n` operations (`poll_zip` has none: hand-written
/// C has no compressed sessions to compare with). `false` when it was not built
/// or has no such kind; panics if its own check fails.
pub fn run_c(what: &str, n: u32) -> bool {
    #[cfg(c_baseline)]
    {
        if what == "poll_zip" || !KINDS.iter().any(|(k, _)| *k == what) {
            return false;
        }
        let args = [
            std::ffi::CString::new("hot_path_c").unwrap(),
            std::ffi::CString::new(what).unwrap(),
            std::ffi::CString::new(n.to_string()).unwrap(),
        ];
        let argv: Vec<*const std::ffi::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        // SAFETY: argv holds argc valid C strings that outlive the call.
        let rc = unsafe { hot_path_c_main(argv.len() as i32, argv.as_ptr()) };
        assert_eq!(rc, 0, "the C baseline's own check failed for {what}");
        true
    }
    #[cfg(not(c_baseline))]
    {
        let _ = (what, n);
        false
    }
}

/// The hardware backend (`mlx5::hw`) on the device `MLX5_TEST_DEVICE` names
/// (`mlx5_0` without it): a ConnectX, or the simulator as a device under
/// `mlx5_simrun`. `hw_post`: n signaled 1-SGE RDMA_WRITEs rung by doorbell
/// (counted in `hw_post_phase`: the WQE, the doorbell record, the register
/// store); `hw_poll`: their n CQEs, once all have arrived (`hw_poll_phase`).
/// Loopback between two QPs of one port.
fn hw(what: &str, n: u32) {
    use mlx5::hw::Hw;
    let name = std::env::var("MLX5_TEST_DEVICE").unwrap_or_else(|_| "mlx5_0".into());
    let dev = mlx5::hw::device(&name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let slots = n.next_power_of_two().max(64);
    let mut sum = 0u64;
    let mut cq = ctx.create_mono_cq(slots, |c: mlx5::Completion, e: u64| {
        assert_eq!(c.status, mlx5::Status::Success);
        sum = sum.wrapping_add(e);
    });
    let cq = cq.as_mut().unwrap();
    let cfg = QpConfig { max_send_wr: slots, max_recv_wr: 16, ..QpConfig::default() };
    let a = ctx.create_rc_qp(&pd, &*cq, &*cq, &cfg).unwrap();
    let b = ctx.create_rc_qp(&pd, &*cq, &*cq, &cfg).unwrap();
    let p = ConnectParams::default();
    a.activate(&ConnectParams { remote: Some(b.local_info().unwrap()), ..p.clone() }).unwrap();
    b.activate(&ConnectParams { remote: Some(a.local_info().unwrap()), ..p }).unwrap();
    let mr = pd.alloc_mr(1 << 16, AccessFlags::ALL).unwrap();
    let (addr, lkey, rkey) = (mr.addr(), mr.lkey(), mr.rkey());
    let post = |qp: &mlx5::RcQp<Hw, u64>, i: u64| hw_write(qp, i, addr, lkey, rkey).finish().unwrap();
    if what == "hw_post" {
        hw_post_phase(&a, n as u64, addr, lkey, rkey);
        let mut got = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while got < n && std::time::Instant::now() < deadline {
            got += cq.poll(64).completions;
        }
        assert_eq!(got, n, "every CQE arrived");
    } else {
        // The last WRITE puts a marker: once it is there, the device has
        // executed every WQE (in order); a moment more for the last CQE, so
        // that the counted phase polls CQEs, not an empty queue.
        mr.write(0x4000, &[0u8; 8]).unwrap();
        mr.write(0x4008, &u64::MAX.to_ne_bytes()).unwrap();
        for i in 0..u64::from(n) - 1 {
            post(&a, i);
        }
        let b = a.wqe_builder(u64::from(n) - 1).unwrap().ctrl_rdma_write(WqeFlags::SIGNALED).unwrap();
        b.rdma(addr + 0x4000, rkey).unwrap().sge(Sge::new(addr + 0x4008, 8, lkey)).unwrap().finish().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let mut m = [0u8; 8];
        while m != u64::MAX.to_ne_bytes() && std::time::Instant::now() < deadline {
            mr.read(0x4000, &mut m).unwrap();
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(hw_poll_phase(cq, n), n, "every CQE arrived and was polled");
    }
    black_box(sum);
}

/// The signaled 1-SGE RDMA_WRITE of `hw_post` and `hw_poll`, ready to finish.
#[inline(always)]
fn hw_write(
    qp: &mlx5::RcQp<mlx5::hw::Hw, u64>,
    i: u64,
    addr: u64,
    lkey: u32,
    rkey: u32,
) -> mlx5::WqeBuilder<'_, mlx5::hw::Hw, u64, mlx5::wqe::state::Data> {
    qp.wqe_builder(i)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(addr + 0x8000, rkey)
        .unwrap()
        .sge(Sge::new(addr, 64, lkey))
        .unwrap()
}

#[inline(never)]
fn hw_post_phase(qp: &mlx5::RcQp<mlx5::hw::Hw, u64>, n: u64, addr: u64, lkey: u32, rkey: u32) {
    for i in 0..n {
        hw_write(qp, i, addr, lkey, rkey).finish().unwrap();
    }
}

#[inline(never)]
fn hw_poll_phase<F: FnMut(mlx5::Completion, u64)>(
    cq: &mut mlx5::MonoCq<mlx5::hw::Hw, u64, F>,
    n: u32,
) -> u32 {
    let mut got = 0;
    while got < n {
        got += cq.poll(16).completions;
    }
    got
}

#[cfg(test)]
mod tests {
    /// Every kind runs and passes its own checks (a small round), in Rust and in C.
    #[test]
    fn every_kind_runs() {
        for (k, _) in super::KINDS {
            super::run(k, 64);
            assert_eq!(super::run_c(k, 64), super::HAVE_C && k != "poll_zip", "{k}");
        }
    }
}
