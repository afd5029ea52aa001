//! The completion side end to end on the simulator (step 5): CQE
//! compression (sessions the simulator writes from real traffic, expanded by
//! the poller), scatter-to-CQE with 64- and 128-byte CQEs (receiver and RC
//! requester), completion channels and arming, overrun as a typed error,
//! `poll_into` and `wait`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use mlx5::sim::ExecMode;
use mlx5::sim::{two_hosts, Sim};
use mlx5::{
    AccessFlags, CompletionQueue, ConnectParams, Context, CqConfig, CqeSize, Error, MemoryRegion,
    MiniCqeFormat, PollOutcome, ProtectionDomain, QpConfig, RcQp, Sge, Status, WcOpcode, WqeFlags,
};
use proptest::prelude::*;

/// What a CQ's own callback was given (its `poll`, not `poll_with`).
type Given = Rc<RefCell<Vec<(mlx5::Completion, u64)>>>;

struct Side {
    qp: RcQp<Sim, u64>,
    scq: CompletionQueue<Sim, u64>,
    rcq: CompletionQueue<Sim, u64>,
    /// What `scq`'s and `rcq`'s callbacks were given.
    given: (Given, Given),
    mr: MemoryRegion<Sim>,
    _pd: ProtectionDomain<Sim>,
    _ctx: Context<Sim>,
}

fn cfg(scatter: bool) -> QpConfig {
    QpConfig { max_send_wr: 128, max_recv_wr: 128, scatter_to_cqe: scatter, ..QpConfig::default() }
}

/// Connect two RC QPs to each other (port 1, default parameters).
fn connect(a: &RcQp<Sim, u64>, b: &RcQp<Sim, u64>) {
    a.activate(&ConnectParams::to(b.local_info().unwrap())).unwrap();
    b.activate(&ConnectParams::to(a.local_info().unwrap())).unwrap();
}

/// Two connected RC QPs; each side's send and receive CQs made by `cq`.
fn pair_with(
    mode: ExecMode,
    cq: impl Fn() -> CqConfig<'static, Sim>,
    scatter: bool,
) -> (mlx5::sim::Fabric, Side, Side) {
    let (fabric, da, db) = two_hosts(mode);
    let mk = |d: &mlx5::Device<Sim>| {
        let ctx = d.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let given: (Given, Given) = Default::default();
        let (gs, gr) = (given.0.clone(), given.1.clone());
        let scq = ctx.create_cq(cq(), move |c, e: u64| gs.borrow_mut().push((c, e))).unwrap();
        let rcq = ctx.create_cq(cq(), move |c, e: u64| gr.borrow_mut().push((c, e))).unwrap();
        let qp = ctx.create_rc_qp(&pd, &scq, &rcq, &cfg(scatter)).unwrap();
        let mr = pd.alloc_mr(1 << 16, AccessFlags::ALL).unwrap();
        Side { qp, scq, rcq, given, mr, _pd: pd, _ctx: ctx }
    };
    let (a, b) = (mk(&da), mk(&db));
    connect(&a.qp, &b.qp);
    (fabric, a, b)
}

fn drain(cq: &CompletionQueue<Sim, u64>) -> Vec<(mlx5::Completion, u64)> {
    let mut v = Vec::new();
    for _ in 0..64 {
        cq.poll_with(256, |c, e| v.push((c, e)));
    }
    v
}

/// How `run_lapping` polls: through `poll_with` (a shared handle, the loop
/// that reads every index again), or the exclusive `poll` with this
/// budget (1: the one-CQE path of a latency loop).
#[derive(Clone, Copy, Debug)]
enum Poller {
    With,
    Exclusive(u32),
}

/// Everything `cq` holds, polled as `poller` says (its own callback
/// records into `given`).
fn drain_by(
    cq: &mut CompletionQueue<Sim, u64>,
    given: &Given,
    poller: Poller,
) -> Vec<(mlx5::Completion, u64)> {
    match poller {
        Poller::With => drain(cq),
        Poller::Exclusive(budget) => {
            let mut idle = 0;
            while idle < 64 {
                if cq.poll(budget).consumed() == 0 {
                    idle += 1;
                }
            }
            given.take()
        }
    }
}

fn send(s: &Side, entry: u64, off: u64, len: u32, flags: WqeFlags) {
    s.qp.wqe_builder(entry)
        .unwrap()
        .ctrl_send(flags)
        .unwrap()
        .sge(Sge::new(s.mr.addr() + off, len, s.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
}

/// A signaled SEND of `len` bytes from the start of the MR, committed without
/// a doorbell (`ring_sq_doorbell` rings the burst).
fn send_batched(s: &Side, entry: u64, len: u32) {
    s.qp.wqe_builder(entry)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .sge(Sge::new(s.mr.addr(), len, s.mr.lkey()))
        .unwrap()
        .finish_batch()
        .unwrap();
}

fn recv(s: &Side, entry: u64, off: u64, len: u32) {
    s.qp.post_recv(entry, &[Sge { addr: s.mr.addr() + off, len, lkey: s.mr.lkey() }]).unwrap();
}

/// op_own of every slot of a CQ ring (the device's view, before polling).
fn ring_op_owns(cq: &CompletionQueue<Sim, u64>, n: u32) -> Vec<u8> {
    // SAFETY: reads only, inside the ring.
    let (buf, _cnt, size) = unsafe { cq.raw_ring() };
    (0..n).map(|i| unsafe { *buf.add((i * size + size - 1) as usize) }).collect()
}

#[test]
fn compressed_sessions_expand_to_every_completion_in_order() {
    let (_f, a, b) =
        pair_with(ExecMode::Deterministic, || CqConfig::new(256).compressed(MiniCqeFormat::Hash), false);
    for i in 0..20u64 {
        recv(&b, 100 + i, 4096 + i * 256, 256);
    }
    // One doorbell for 20 signaled SENDs: the simulator's burst.
    for i in 0..20u64 {
        send_batched(&a, i, 10 + i as u32);
    }
    a.qp.ring_sq_doorbell();
    let r = ring_op_owns(&b.rcq, 2);
    assert_eq!(r[0] & 0x0c, 0x0c, "slot 0 holds a session title (format 3): {:#x}", r[0]);
    assert_eq!(r[0] >> 4, 2, "RESP_SEND title");
    let s = ring_op_owns(&a.scq, 1);
    assert_eq!((s[0] >> 4, s[0] & 0x0c), (0, 0x0c), "requester CQEs are compressed too");
    let rv = drain(&b.rcq);
    let sv = drain(&a.scq);
    assert_eq!(rv.iter().map(|x| x.1).collect::<Vec<_>>(), (100..120).collect::<Vec<_>>());
    assert_eq!(rv.iter().map(|x| x.0.byte_len).collect::<Vec<_>>(), (10..30).collect::<Vec<_>>());
    assert!(rv
        .iter()
        .all(|(c, _)| c.opcode == WcOpcode::Recv && c.status == Status::Success && c.src_qpn == a.qp.qpn()));
    assert_eq!(sv.iter().map(|x| x.1).collect::<Vec<_>>(), (0..20).collect::<Vec<_>>());
    assert!(sv.iter().all(|(c, _)| c.opcode == WcOpcode::Send));
    // Slots given back: the next pass works (more traffic than the ring holds).
    for round in 0..90u64 {
        // Bursts of a size that does not divide the ring: sessions land
        // on slots whose holes hold older passes' bytes.
        for i in 0..13u64 {
            recv(&b, i, 4096 + i * 256, 256);
            send_batched(&a, round * 100 + i, 8);
        }
        a.qp.ring_sq_doorbell();
        assert_eq!(drain(&b.rcq).len(), 13);
        assert_eq!(drain(&a.scq).len(), 13);
    }
    b.rcq.check().unwrap();
}

/// A session polled one completion per call stays open between the calls:
/// each call goes on expanding it (not reading the array slots behind the
/// title as CQEs), and the slots are given back once it is consumed.
#[test]
fn a_session_polled_one_at_a_time_stays_open_between_polls() {
    let (_f, a, b) =
        pair_with(ExecMode::Deterministic, || CqConfig::new(64).compressed(MiniCqeFormat::Hash), false);
    for round in 0..6u64 {
        for i in 0..12u64 {
            recv(&b, 100 + i, 4096 + i * 256, 256);
            send_batched(&a, round * 100 + i, 20 + i as u32);
        }
        a.qp.ring_sq_doorbell();
        if round == 0 {
            let s = ring_op_owns(&a.scq, 1);
            assert_eq!(s[0] & 0x0c, 0x0c, "a requester session title: {:#x}", s[0]);
        }
        let mut sv = Vec::new();
        let mut rv = Vec::new();
        for _ in 0..12 {
            assert_eq!(a.scq.poll_with(1, |c, e| sv.push((c, e))).completions, 1);
            assert_eq!(b.rcq.poll_with(1, |c, e| rv.push((c, e))).completions, 1);
        }
        assert_eq!(a.scq.poll_with(8, |_, _| {}).consumed(), 0, "nothing behind the session");
        assert_eq!(
            sv.iter().map(|x| x.1).collect::<Vec<_>>(),
            (0..12).map(|i| round * 100 + i).collect::<Vec<_>>()
        );
        assert!(sv.iter().all(|(c, _)| c.status == Status::Success && c.opcode == WcOpcode::Send));
        assert_eq!(rv.iter().map(|x| x.1).collect::<Vec<_>>(), (100..112).collect::<Vec<_>>());
        assert_eq!(rv.iter().map(|x| x.0.byte_len).collect::<Vec<_>>(), (20..32).collect::<Vec<_>>());
    }
    assert!(a.scq.take_unknown().is_none() && b.rcq.take_unknown().is_none());
}

#[derive(Clone, Debug)]
enum Op {
    Send {
        len: u32,
        signaled: bool,
    },
    SendImm {
        len: u32,
        imm: u32,
    },
    WriteImm {
        len: u32,
    },
    Read {
        len: u32,
    },
    /// Ring now: what was posted so far forms a burst.
    Ring,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u32..200, any::<bool>()).prop_map(|(len, signaled)| Op::Send { len, signaled }),
        (0u32..64, any::<u32>()).prop_map(|(len, imm)| Op::SendImm { len, imm }),
        (1u32..100).prop_map(|len| Op::WriteImm { len }),
        (1u32..300).prop_map(|len| Op::Read { len }),
        Just(Op::Ring),
    ]
}

type Seen = Vec<(u64, Status, WcOpcode, u32, Option<u32>)>;

/// Posts `o` (not `Op::Ring`) as entry `e`, committed without a doorbell;
/// RDMA ops target `remote` (address, rkey).
fn post_op(a: &Side, o: &Op, e: u64, (rb, rk): (u64, u32)) {
    let w = a.qp.wqe_builder(e).unwrap();
    let wqe = match *o {
        Op::Ring => unreachable!("a doorbell, not a WQE"),
        Op::Send { len, signaled } => {
            let f = if signaled { WqeFlags::SIGNALED } else { WqeFlags::default() };
            w.ctrl_send(f).unwrap().sge(Sge::new(a.mr.addr(), len, a.mr.lkey())).unwrap().finish_batch()
        }
        Op::SendImm { len, imm } => w
            .ctrl_send_imm(WqeFlags::SIGNALED, imm)
            .unwrap()
            .sge(Sge::new(a.mr.addr(), len, a.mr.lkey()))
            .unwrap()
            .finish_batch(),
        Op::WriteImm { len } => w
            .ctrl_rdma_write_imm(WqeFlags::SIGNALED, 7)
            .unwrap()
            .rdma(rb, rk)
            .unwrap()
            .sge(Sge::new(a.mr.addr(), len, a.mr.lkey()))
            .unwrap()
            .finish_batch(),
        Op::Read { len } => w
            .ctrl_rdma_read(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(rb, rk)
            .unwrap()
            .sge(Sge::new(a.mr.addr() + 4096, len, a.mr.lkey()))
            .unwrap()
            .finish_batch(),
    };
    wqe.unwrap();
}

/// Run `ops` on a fresh pair and return (receiver, sender) completions.
fn run(ops: &[Op], compression: Option<MiniCqeFormat>) -> (Seen, Seen) {
    let (_f, a, b) = pair_with(
        ExecMode::Deterministic,
        move || match compression {
            Some(f) => CqConfig::new(512).compressed(f),
            None => CqConfig::new(512),
        },
        false,
    );
    for i in 0..100u64 {
        recv(&b, 1000 + i, 8192 + i * 256, 256);
    }
    let (rb, rk) = (b.mr.addr(), b.mr.rkey());
    for (i, o) in ops.iter().enumerate() {
        let e = i as u64;
        if let Op::Ring = o {
            a.qp.ring_sq_doorbell();
            continue;
        }
        post_op(&a, o, e, (rb, rk));
    }
    a.qp.ring_sq_doorbell();
    let key = |v: Vec<(mlx5::Completion, u64)>| {
        v.into_iter().map(|(c, e)| (e, c.status, c.opcode, c.byte_len, c.imm)).collect()
    };
    (key(drain(&b.rcq)), key(drain(&a.scq)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Compression changes the bytes in the CQ, never the completions.
    #[test]
    fn compression_on_gives_the_same_completions_as_off(ops in proptest::collection::vec(op(), 1..90)) {
        let off = run(&ops, None);
        prop_assert_eq!(&run(&ops, Some(MiniCqeFormat::Hash)), &off);
        prop_assert_eq!(&run(&ops, Some(MiniCqeFormat::Csum)), &off);
    }
}

#[test]
fn scatter_to_cqe_64_byte_cqes_receiver_and_requester() {
    let (_f, a, b) = pair_with(ExecMode::Deterministic, || CqConfig::new(64), true);
    let msg: Vec<u8> = (0..20u8).map(|i| i * 7 + 1).collect();
    a.mr.write(0, &msg).unwrap();
    recv(&b, 5, 1024, 64);
    send(&a, 1, 0, 20, WqeFlags::SIGNALED);
    assert_eq!(ring_op_owns(&b.rcq, 1)[0] & 0x0c, 0x04, "format 1: data in the CQE");
    let mut buf = [0u8; 20];
    b.mr.read(1024, &mut buf).unwrap();
    assert_eq!(buf, [0; 20], "the device did not write the receive buffer");
    let r = drain(&b.rcq);
    assert_eq!(r.len(), 1);
    let (c, e) = r[0];
    assert_eq!((e, c.byte_len, c.status), (5, 20, Status::Success));
    assert_eq!(c.scattered.expect("data in the CQE").data(), &msg[..]);
    b.mr.read(1024, &mut buf).unwrap();
    assert_eq!(&buf[..], &msg[..], "the poller copied it into the posted buffer");
    // 33 bytes do not fit a 64-byte CQE: ordinary placement.
    recv(&b, 6, 2048, 64);
    send(&a, 2, 0, 33, WqeFlags::SIGNALED);
    let r = drain(&b.rcq);
    assert!(r[0].0.scattered.is_none());
    assert_eq!(r[0].0.byte_len, 33);
    // Requester: a 16-byte READ lands in the send CQE, then in the local buffer.
    b.mr.write(512, &[0xab; 16]).unwrap();
    a.qp.wqe_builder(3)
        .unwrap()
        .ctrl_rdma_read(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(b.mr.addr() + 512, b.mr.rkey())
        .unwrap()
        .sge(Sge::new(a.mr.addr() + 4096, 16, a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    let s = drain(&a.scq);
    let (c, e) = *s.last().unwrap();
    assert_eq!((e, c.opcode, c.byte_len), (3, WcOpcode::RdmaRead, 16));
    assert_eq!(c.scattered.expect("READ data in the CQE").data(), &[0xab; 16]);
    let mut got = [0u8; 16];
    a.mr.read(4096, &mut got).unwrap();
    assert_eq!(got, [0xab; 16]);
}

#[test]
fn scatter_to_cqe_128_byte_cqes_use_the_first_half_of_the_slot() {
    let (_f, a, b) = pair_with(ExecMode::Deterministic, || CqConfig::new(64).cqe_size(CqeSize::B128), true);
    let msg: Vec<u8> = (0..60u8).collect();
    a.mr.write(0, &msg).unwrap();
    recv(&b, 9, 1024, 64);
    send(&a, 1, 0, 60, WqeFlags::SIGNALED);
    let (buf, _, size) = unsafe { b.rcq.raw_ring() };
    assert_eq!(size, 128);
    // SAFETY: the first slot of the ring, read only.
    let slot = unsafe { std::slice::from_raw_parts(buf, 128) };
    assert_eq!(slot[127] & 0x0c, 0x08, "format 2");
    assert_eq!(&slot[..60], &msg[..], "data in the first 64 bytes, before the CQE proper");
    let r = drain(&b.rcq);
    assert_eq!((r[0].1, r[0].0.byte_len), (9, 60));
    assert_eq!(r[0].0.scattered.unwrap().data(), &msg[..]);
    let s = drain(&a.scq);
    assert_eq!((s[0].1, s[0].0.opcode), (1, WcOpcode::Send), "plain completions with 128-byte CQEs");
}

#[test]
fn armed_cq_signals_its_channel_once_and_honours_solicited_only() {
    let (_f, da, db) = two_hosts(ExecMode::Deterministic);
    let ctx_a = da.open().unwrap();
    let ctx_b = db.open().unwrap();
    let ch = ctx_b.create_comp_channel().unwrap();
    let (pa, pb) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let cqa = ctx_a.create_cq(64, |_, _: u64| {}).unwrap();
    let cqb = ctx_b.create_cq(CqConfig::new(64).channel(&ch), |_, _: u64| {}).unwrap();
    let qa = ctx_a.create_rc_qp(&pa, &cqa, &cqa, &cfg(false)).unwrap();
    let qb = ctx_b.create_rc_qp(&pb, &cqb, &cqb, &cfg(false)).unwrap();
    connect(&qa, &qb);
    let ma = pa.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let mb = pb.alloc_mr(4096, AccessFlags::ALL).unwrap();
    for i in 0..8 {
        qb.post_recv(i, &[Sge { addr: mb.addr(), len: 64, lkey: mb.lkey() }]).unwrap();
    }
    let post = |flags| {
        qa.wqe_builder(0)
            .unwrap()
            .ctrl_send(flags)
            .unwrap()
            .sge(Sge::new(ma.addr(), 8, ma.lkey()))
            .unwrap()
            .finish()
            .unwrap()
    };
    post(WqeFlags::default());
    assert_eq!(ch.get_event().unwrap(), None, "not armed: no event");
    assert_eq!(drain(&cqb).len(), 1);
    cqb.arm(false);
    assert_eq!(ch.get_event().unwrap(), None);
    post(WqeFlags::default());
    assert_eq!(ch.wait(Some(Duration::from_secs(1))).unwrap().map(|e| e.cqn), Some(cqb.cqn()));
    post(WqeFlags::default());
    assert_eq!(ch.get_event().unwrap(), None, "one event per arm");
    assert_eq!(drain(&cqb).len(), 2);
    cqb.arm(true);
    post(WqeFlags::default());
    assert_eq!(ch.get_event().unwrap(), None, "solicited-only ignores an unsolicited SEND");
    post(WqeFlags::SOLICITED);
    let mut p = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&ch), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 1, "the channel's fd is readable");
    assert_eq!(ch.get_event().unwrap().map(|e| e.cqn), Some(cqb.cqn()));
    let r = drain(&cqb);
    assert_eq!(r.len(), 2);
    assert!(r[1].0.solicited);
    // Arming while a completion already waits fires at once.
    post(WqeFlags::default());
    cqb.arm(false);
    assert!(ch.get_event().unwrap().is_some());
    drop(cqb);
    drop(ch);
}

#[test]
fn wait_blocks_on_the_channel_in_threaded_mode() {
    let (_fabric, da, db) = two_hosts(ExecMode::Threaded);
    let ctx_a = da.open().unwrap();
    let ctx_b = db.open().unwrap();
    let ch = ctx_b.create_comp_channel().unwrap();
    let (pa, pb) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let cqa = ctx_a.create_cq(64, |_, _: u64| {}).unwrap();
    let mut got = Vec::new();
    let mut cqb =
        ctx_b.create_mono_cq(CqConfig::new(64).channel(&ch), |c, e: u64| got.push((c.byte_len, e))).unwrap();
    let qa = ctx_a.create_rc_qp(&pa, &cqa, &cqa, &cfg(false)).unwrap();
    let qb = ctx_b.create_rc_qp(&pb, &cqb, &cqb, &cfg(false)).unwrap();
    connect(&qa, &qb);
    let ma = pa.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let mb = pb.alloc_mr(4096, AccessFlags::ALL).unwrap();
    assert!(matches!(cqb.wait(16, Some(Duration::from_millis(20))), Err(Error::Timeout)));
    qb.post_recv(42, &[Sge { addr: mb.addr(), len: 64, lkey: mb.lkey() }]).unwrap();
    qa.wqe_builder(0)
        .unwrap()
        .ctrl_send(WqeFlags::default())
        .unwrap()
        .sge(Sge::new(ma.addr(), 24, ma.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    let out: PollOutcome = cqb.wait(16, Some(Duration::from_secs(10))).unwrap();
    assert_eq!(out.completions, 1);
    drop(qb);
    drop(qa);
    drop(cqb);
    assert_eq!(got, vec![(24, 42)]);
}

#[test]
fn overrun_is_a_typed_error_and_the_qp_stops() {
    let (_f, da, db) = two_hosts(ExecMode::Deterministic);
    let ctx = da.open().unwrap();
    let ctx_b = db.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let pb = ctx_b.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(3, |_, _: u64| {}).unwrap(); // 4 entries
    let cqb = ctx_b.create_cq(64, |_, _: u64| {}).unwrap();
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg(false)).unwrap();
    let qb = ctx_b.create_rc_qp(&pb, &cqb, &cqb, &cfg(false)).unwrap();
    connect(&qp, &qb);
    for e in 0..6 {
        qp.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    }
    assert!(matches!(cq.check(), Err(Error::CqOverrun { cqn }) if cqn == cq.cqn()));
    let mut seen = Vec::new();
    cq.poll_with(16, |_, e| seen.push(e));
    assert_eq!(seen, vec![0, 1, 2, 3], "what fitted is still delivered");
    assert!(matches!(cq.wait(16, Some(Duration::from_millis(10))), Err(Error::CqOverrun { .. })));
    qp.wqe_builder(9).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    assert_eq!(cq.poll(16).consumed(), 0, "nothing more arrives");
}

#[test]
fn poll_into_fills_a_slice_without_a_callback() {
    let (_f, a, b) = pair_with(ExecMode::Deterministic, || CqConfig::new(64), false);
    for i in 0..5 {
        recv(&b, 10 + i, 0, 64);
        send(&a, i, 0, 4, WqeFlags::SIGNALED);
    }
    let mut out = [(mlx5::Completion::default(), 0u64); 3];
    let o = b.rcq.poll_into(&mut out);
    assert_eq!(o.completions, 3);
    assert_eq!(out.map(|x| x.1), [10, 11, 12]);
    let o = b.rcq.poll_into(&mut out);
    assert_eq!((o.completions, out[0].1, out[1].1), (2, 13, 14));
    assert_eq!(a.scq.poll_into(&mut out).completions, 3);
}

#[test]
fn plain_cqes_of_128_bytes_are_read_from_every_slot_across_laps() {
    // Each CQE proper is the second half of its 128-byte slot (spec §5.1):
    // the poller's stride is the slot, not the 64-byte CQE. Slot 0 alone
    // cannot tell; several laps of a small ring do.
    let (_f, a, b) = pair_with(ExecMode::Deterministic, || CqConfig::new(4).cqe_size(CqeSize::B128), false);
    // SAFETY: only the geometry is read.
    let (_, cnt, size) = unsafe { a.scq.raw_ring() };
    assert_eq!(size, 128);
    let (mut sent, mut got_s, mut got_r) = (0u64, Vec::new(), Vec::new());
    while sent < 3 * u64::from(cnt) {
        for _ in 0..3 {
            recv(&b, 100 + sent, 0, 64);
            send(&a, sent, 0, 8, WqeFlags::SIGNALED);
            sent += 1;
        }
        got_s.extend(drain(&a.scq).into_iter().map(|(c, e)| (e, c.opcode, c.status)));
        got_r.extend(drain(&b.rcq).into_iter().map(|(c, e)| (e, c.opcode, c.byte_len)));
    }
    let want_s: Vec<_> = (0..sent).map(|e| (e, WcOpcode::Send, Status::Success)).collect();
    let want_r: Vec<_> = (0..sent).map(|e| (100 + e, WcOpcode::Recv, 8)).collect();
    assert_eq!(got_s, want_s);
    assert_eq!(got_r, want_r);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `poll(&mut self)` (the loop that keeps the consumer index and the
    /// lap's owner bit in registers, spec §5.5) takes exactly what is ready,
    /// up to its budget, in order, wherever the budget and the CQEs fall
    /// against the ring's end; it never reads a slot of the last lap again.
    #[test]
    fn exclusive_poll_takes_exactly_the_ready_cqes_across_laps(
        bursts in prop::collection::vec((1u32..=4, prop::collection::vec(1u32..=6, 8)), 1..24),
        big in any::<bool>(),
    ) {
        let (_f, da, db) = two_hosts(ExecMode::Deterministic);
        let (ctx, ctx_b) = (da.open().unwrap(), db.open().unwrap());
        let (pd, pb) = (ctx.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let s = seen.clone();
        let size = if big { CqeSize::B128 } else { CqeSize::B64 };
        let mut cq = ctx
            .create_mono_cq(CqConfig::new(4).cqe_size(size), move |c, e: u64| s.borrow_mut().push((e, c.status)))
            .unwrap();
        let cqb = ctx_b.create_cq(64, |_, _: u64| {}).unwrap();
        let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg(false)).unwrap();
        let qb = ctx_b.create_rc_qp(&pb, &cqb, &cqb, &cfg(false)).unwrap();
        connect(&qp, &qb);
        let mut posted = 0u64;
        for (n, budgets) in bursts {
            // Deterministic mode runs a NOP as it is posted: n CQEs are
            // ready (4 at most: the CQ's size).
            for _ in 0..n {
                qp.wqe_builder(posted).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
                posted += 1;
            }
            let mut ready = n;
            for b in budgets.into_iter().cycle() {
                if ready == 0 {
                    break;
                }
                let o = cq.poll(b);
                prop_assert_eq!((o.completions, o.unknown), (b.min(ready), 0));
                ready -= o.completions;
            }
            prop_assert_eq!(cq.poll(8).consumed(), 0, "nothing past the ready CQEs");
        }
        let want: Vec<_> = (0..posted).map(|e| (e, Status::Success)).collect();
        prop_assert_eq!(&*seen.borrow(), &want);
        prop_assert!(cq.check().is_ok());
    }
}

/// [`run`] on CQs of `cq_size` entries that the traffic laps many times:
/// the ops go out in bursts of at most `burst` WQEs (one doorbell each),
/// both CQs are drained after each, and a receive is posted ahead of every
/// op that consumes one. Sessions then start anywhere in the ring, straddle
/// its end and follow uncompressed CQEs (a burst of one, a lone READ among
/// SENDs). Returns (receiver, sender) completions and the sender CQ's laps.
fn run_lapping(
    ops: &[Op],
    burst: usize,
    cq_size: u32,
    compression: Option<MiniCqeFormat>,
    poller: Poller,
) -> (Seen, Seen, u32) {
    let (_f, mut a, mut b) = pair_with(
        ExecMode::Deterministic,
        move || match compression {
            Some(f) => CqConfig::new(cq_size).compressed(f),
            None => CqConfig::new(cq_size),
        },
        false,
    );
    let (rb, rk) = (b.mr.addr(), b.mr.rkey());
    let key = |v: Vec<(mlx5::Completion, u64)>| -> Seen {
        v.into_iter().map(|(c, e)| (e, c.status, c.opcode, c.byte_len, c.imm)).collect()
    };
    let (mut rv, mut sv) = (Seen::new(), Seen::new());
    let mut recvs = 0u64;
    for (chunk_no, chunk) in ops.chunks(burst).enumerate() {
        for (i, o) in chunk.iter().enumerate() {
            let e = (chunk_no * burst + i) as u64;
            if matches!(o, Op::Ring) {
                continue;
            }
            if !matches!(o, Op::Read { .. }) {
                recv(&b, 1000 + recvs, 8192 + (recvs % 100) * 256, 256);
                recvs += 1;
            }
            post_op(&a, o, e, (rb, rk));
        }
        a.qp.ring_sq_doorbell();
        rv.extend(key(drain_by(&mut b.rcq, &b.given.1, poller)));
        sv.extend(key(drain_by(&mut a.scq, &a.given.0, poller)));
    }
    assert!(a.scq.take_unknown().is_none() && b.rcq.take_unknown().is_none());
    let laps = sv.len() as u32 / cq_size;
    (rv, sv, laps)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    /// Compression across ring laps: CQs of 16 or 32 entries lapped several
    /// times by bursts that start anywhere, so sessions straddle the ring's
    /// end and follow one another across laps, mixed with uncompressed CQEs.
    /// Compressed or not, the completions are the same. A poller that did
    /// not give a consumed session's slots back (op_own 0xF0, spec §5.8)
    /// reads stale titles on the next lap and fails this. Each run is
    /// polled by the shared loop, the exclusive one, and one CQE per call
    /// (whose fast path finds nothing while a session is open, and must
    /// then expand it): a poller that read a session's slots as plain
    /// CQEs, or left it half expanded, fails this too.
    #[test]
    fn compression_across_ring_laps_gives_the_same_completions(
        ops in proptest::collection::vec(op(), 150..260),
        burst in 1usize..=15,
        big in any::<bool>(),
    ) {
        let cq_size = if big { 32 } else { 16 };
        // At least three laps of requester completions, whatever the draw:
        // signalled SENDs are appended while fewer ops than that are signalled.
        let mut ops = ops;
        let signalled = |ops: &[Op]| {
            ops.iter().filter(|o| !matches!(o, Op::Ring | Op::Send { signaled: false, .. })).count()
        };
        while signalled(&ops) < 3 * cq_size as usize {
            ops.push(Op::Send { len: 8, signaled: true });
        }
        let (r0, s0, laps) = run_lapping(&ops, burst, cq_size, None, Poller::With);
        prop_assert!(laps >= 3, "the sender's CQ lapped only {} times", laps);
        for f in [None, Some(MiniCqeFormat::Hash), Some(MiniCqeFormat::Csum)] {
            for p in [Poller::With, Poller::Exclusive(1), Poller::Exclusive(3), Poller::Exclusive(64)] {
                let (r, s, _) = run_lapping(&ops, burst, cq_size, f, p);
                prop_assert_eq!(&r, &r0, "{:?} {:?}", f, p);
                prop_assert_eq!(&s, &s0, "{:?} {:?}", f, p);
            }
        }
    }
}
