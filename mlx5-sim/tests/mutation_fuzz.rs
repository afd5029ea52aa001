//! Mutation fuzzing of the execution engine. Each round posts one WQE that is valid
//! except for (usually) one broken field: opcode, DS count, QPN, an lkey or rkey of
//! another PD (drawn from the live key set), an address one byte past an MR, an address
//! whose range wraps `u64`, a misaligned atomic, or random bytes after the control
//! segment. The targets are RC, UD and DC QPs whose MRs are fenced by canary bytes on
//! both sides. Every round must produce exactly one send CQE with the syndrome the spec
//! (docs/mlx5-wire-format.md §5.4) names for that mutation (any status for random
//! bytes), no canary byte may change, and the QPs end in a state they can be recovered
//! from. The model never panics or hangs.
//!
//! `mutation_fuzz_short` runs in CI; `mutation_fuzz_ten_million` (ignored; run with
//! `cargo test --release -p mlx5-sim --test mutation_fuzz -- --ignored --nocapture`)
//! runs 10 million WQEs and prints the count and rate.

mod common;

use common::*;
use mlx5_sim::{Fabric, FabricConfig, HostConfig, MrKeys, Nic, QpState, RcPath};

const LOCAL_QP_OP_ERR: u8 = 0x02;
const LOCAL_PROT_ERR: u8 = 0x04;
const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
const REMOTE_ACCESS_ERR: u8 = 0x13;
const MR_LEN: usize = 256;
const CANARY: usize = 64;
const CANARY_BYTE: u8 = 0xc5;

/// An MR of `MR_LEN` bytes with `CANARY` canary bytes on each side.
struct Fenced {
    mem: Box<[u8]>,
    keys: MrKeys,
}

impl Fenced {
    fn new(nic: &Nic, pd: u32) -> Fenced {
        let mut mem = vec![CANARY_BYTE; CANARY + MR_LEN + CANARY].into_boxed_slice();
        mem[CANARY..CANARY + MR_LEN].fill(0);
        let addr = mem.as_mut_ptr() as u64 + CANARY as u64;
        // SAFETY: the box outlives every WQE of the test (the fabric is dropped first).
        let keys = unsafe { nic.reg_mr(pd, addr, MR_LEN as u64, ALL_ACCESS) }.unwrap();
        Fenced { mem, keys }
    }
    fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64 + CANARY as u64
    }
    fn canaries_intact(&self) -> bool {
        let p = self.mem.as_ptr();
        let n = self.mem.len();
        // SAFETY: reads of our own allocation, which the model may have written.
        let all = unsafe { std::slice::from_raw_parts(std::ptr::read_volatile(&p), n) };
        all[..CANARY].iter().chain(&all[CANARY + MR_LEN..]).all(|&b| b == CANARY_BYTE)
    }
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Rc,
    Ud,
    Dc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutation {
    None,
    Opcode,
    DsZero,
    DsPastProducer,
    Qpn,
    LkeyOtherPd,
    RkeyOtherPd,
    LocalOnePastEnd,
    RemoteOnePastEnd,
    LocalWraps,
    RemoteWraps,
    MisalignedAtomic,
    Garbage,
}

/// Opcodes the spec's table does not define, and LSO (raw Ethernet only).
const BAD_OPCODES: [u8; 10] = [0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x0c, 0x0e, 0x13, 0x30];

struct World {
    _fabric: Fabric,
    a: Nic,
    b: Nic,
    cq_a: TestCq,
    cq_b: TestCq,
    rc_a: TestQp,
    rc_b: TestQp,
    ud_a: TestQp,
    ud_b: TestQp,
    dci: TestQp,
    dct_num: u32,
    _srq: TestSrq,
    /// A's MRs in its PD, and one in another PD; the same on B.
    la: [Fenced; 2],
    la_other: Fenced,
    rb: [Fenced; 2],
    rb_other: Fenced,
    rc_recvs: u32,
    ud_recvs: u32,
}

const DC_KEY: u64 = 0xdc;

impl World {
    fn new() -> World {
        let fabric = Fabric::new(FabricConfig::default());
        let a = fabric.add_host(HostConfig::infiniband("a", 1));
        let b = fabric.add_host(HostConfig::infiniband("b", 2));
        let (pda, pdb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (pda2, pdb2) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let cq_a = TestCq::new(&a, 256, 64);
        let cq_b = TestCq::new(&b, 256, 64);
        let rc_a = TestQp::new(&a, pda, cq_a.res.cqn, cq_a.res.cqn, 8, 8, 1);
        let rc_b = TestQp::new(&b, pdb, cq_b.res.cqn, cq_b.res.cqn, 8, 8, 2);
        let ud_a = ud_qp(&a, pda, cq_a.res.cqn, cq_a.res.cqn, 8, None, 3);
        let ud_b = ud_qp(&b, pdb, cq_b.res.cqn, cq_b.res.cqn, 8, None, 4);
        let dci = dci_qp(&a, pda, cq_a.res.cqn, 8, 5);
        let srq = TestSrq::new(&b, pdb, 8, 64);
        let dct = dct_qp(&b, pdb, cq_b.res.cqn, srq.res.srqn, DC_KEY, 6);
        let dct_num = dct_up(&b, dct, ALL_ACCESS);
        let w = World {
            la: [Fenced::new(&a, pda), Fenced::new(&a, pda)],
            la_other: Fenced::new(&a, pda2),
            rb: [Fenced::new(&b, pdb), Fenced::new(&b, pdb)],
            rb_other: Fenced::new(&b, pdb2),
            _fabric: fabric,
            a,
            b,
            cq_a,
            cq_b,
            rc_a,
            rc_b,
            ud_a,
            ud_b,
            dci,
            dct_num,
            _srq: srq,
            rc_recvs: 0,
            ud_recvs: 0,
        };
        let mut w = w;
        w.reset_rc();
        w.reset_ud();
        w.reset_dci();
        w
    }

    fn reset_rc(&mut self) {
        let (qpn_a, qpn_b) = (self.rc_a.qpn(), self.rc_b.qpn());
        for (q, nic, peer, dlid) in
            [(&mut self.rc_a, &self.a, qpn_b, 2u16), (&mut self.rc_b, &self.b, qpn_a, 1)]
        {
            modify(nic, q.qpn(), mlx5_sim::QpModify { state: Some(QpState::Reset), ..Default::default() });
            q.pi = 0;
            q.rq_head = 0;
            init_rtr_rts(nic, q.qpn(), RcPath { dest_qpn: peer, dlid, ..Default::default() }, ALL_ACCESS, 7);
        }
        self.rc_recvs = 0;
    }

    fn reset_ud(&mut self) {
        for (q, nic) in [(&mut self.ud_a, &self.a), (&mut self.ud_b, &self.b)] {
            modify(nic, q.qpn(), mlx5_sim::QpModify { state: Some(QpState::Reset), ..Default::default() });
            q.pi = 0;
            q.rq_head = 0;
            ud_up(nic, q.qpn(), 0x11);
        }
        self.ud_recvs = 0;
    }

    fn reset_dci(&mut self) {
        modify(
            &self.a,
            self.dci.qpn(),
            mlx5_sim::QpModify { state: Some(QpState::Reset), ..Default::default() },
        );
        self.dci.pi = 0;
        dci_up(&self.a, self.dci.qpn(), 7);
    }

    fn canaries_intact(&self) -> bool {
        [&self.la[0], &self.la[1], &self.la_other, &self.rb[0], &self.rb[1], &self.rb_other]
            .iter()
            .all(|m| m.canaries_intact())
    }
}

/// The opcodes each transport is fuzzed with.
fn opcodes(via: Via) -> &'static [u8] {
    match via {
        Via::Rc => &[op::RDMA_WRITE, op::RDMA_READ, op::SEND, op::ATOMIC_FA, op::ATOMIC_CS],
        Via::Dc => &[op::RDMA_WRITE, op::RDMA_READ, op::ATOMIC_FA, op::ATOMIC_CS],
        Via::Ud => &[op::SEND],
    }
}

/// The mutations that apply to `opcode`.
fn mutations(opcode: u8) -> Vec<Mutation> {
    let mut v = vec![
        Mutation::None,
        Mutation::Opcode,
        Mutation::DsZero,
        Mutation::DsPastProducer,
        Mutation::Qpn,
        Mutation::LkeyOtherPd,
        Mutation::LocalOnePastEnd,
        Mutation::LocalWraps,
        Mutation::Garbage,
    ];
    if opcode != op::SEND {
        v.extend([Mutation::RkeyOtherPd, Mutation::RemoteOnePastEnd, Mutation::RemoteWraps]);
    }
    if matches!(opcode, op::ATOMIC_FA | op::ATOMIC_CS) {
        v.push(Mutation::MisalignedAtomic);
    }
    v
}

/// Posts one WQE of `opcode` on `via`, broken by `m`. Returns the syndrome expected
/// (0: success; `None`: any).
fn round(w: &mut World, r: &mut Rng, via: Via, opcode: u8, m: Mutation) -> Option<u8> {
    let atomic = matches!(opcode, op::ATOMIC_FA | op::ATOMIC_CS);
    // A valid operation: local and remote ranges inside MRs of the right PDs.
    let max = if via == Via::Ud { MR_LEN - 40 } else { MR_LEN } as u64;
    let len: u32 = if atomic { 8 } else { 1 + r.below(max) as u32 };
    let lm = &w.la[r.below(2) as usize];
    let rm = &w.rb[r.below(2) as usize];
    let mut laddr = lm.addr() + r.below(MR_LEN as u64 - u64::from(len) + 1);
    let mut lkey = lm.keys.lkey;
    let mut raddr = rm.addr()
        + if atomic { 8 * r.below(MR_LEN as u64 / 8) } else { r.below(MR_LEN as u64 - u64::from(len) + 1) };
    let mut rkey = rm.keys.rkey;
    let mut opc = opcode;
    match m {
        Mutation::None | Mutation::Garbage | Mutation::DsZero | Mutation::DsPastProducer | Mutation::Qpn => {}
        Mutation::Opcode => opc = r.pick(&BAD_OPCODES),
        Mutation::LkeyOtherPd => lkey = w.la_other.keys.lkey,
        Mutation::RkeyOtherPd => rkey = w.rb_other.keys.rkey,
        Mutation::LocalOnePastEnd => laddr = lm.addr() + MR_LEN as u64 - u64::from(len) + 1,
        Mutation::RemoteOnePastEnd => {
            raddr = rm.addr() + MR_LEN as u64 - u64::from(len) + 1 + if atomic { 7 } else { 0 }
        }
        Mutation::LocalWraps => laddr = u64::MAX - u64::from(len) / 2,
        Mutation::RemoteWraps => raddr = (u64::MAX - u64::from(len) / 2) & if atomic { !7 } else { !0 },
        Mutation::MisalignedAtomic => raddr += 1 + r.below(7),
    }
    let expect = match m {
        Mutation::None => Some(0),
        Mutation::Garbage => None,
        Mutation::Opcode | Mutation::DsZero | Mutation::DsPastProducer | Mutation::Qpn => {
            Some(LOCAL_QP_OP_ERR)
        }
        Mutation::LkeyOtherPd | Mutation::LocalOnePastEnd | Mutation::LocalWraps => Some(LOCAL_PROT_ERR),
        Mutation::RkeyOtherPd | Mutation::RemoteOnePastEnd | Mutation::RemoteWraps => Some(REMOTE_ACCESS_ERR),
        Mutation::MisalignedAtomic => Some(REMOTE_INVAL_REQ_ERR),
    };
    // Receives for SENDs, one outstanding at most, always valid.
    if opcode == op::SEND {
        let (q, n, dst) = match via {
            Via::Ud => (&mut w.ud_b, &mut w.ud_recvs, &w.rb[0]),
            _ => (&mut w.rc_b, &mut w.rc_recvs, &w.rb[0]),
        };
        if *n == 0 {
            // The whole MR: a UD message (at most MR_LEN) plus its 40-byte GRH slot
            // would not fit, so UD SENDs are kept at most MR_LEN - 40 bytes below.
            q.post_recv(&[(dst.addr(), MR_LEN as u32, dst.keys.lkey)]);
            *n = 1;
        }
    }
    let data = Seg::Data { addr: laddr, len, lkey };
    let raddr_seg = Seg::Raddr { raddr, rkey };
    let av = match via {
        Via::Dc => Some(Av::dc_ib(DC_KEY, w.dct_num, 2)),
        Via::Ud => Some(Av::ud_ib(0x11, w.ud_b.qpn(), 2)),
        Via::Rc => None,
    };
    let mut segs: Vec<Seg> = Vec::new();
    segs.extend(av.map(Seg::Av));
    match opcode {
        op::SEND => segs.push(data),
        op::RDMA_WRITE | op::RDMA_READ => {
            segs.push(raddr_seg);
            segs.push(data);
        }
        _ => {
            segs.push(raddr_seg);
            segs.push(Seg::Atomic { swap_add: r.next(), compare: r.next() });
            segs.push(data);
        }
    }
    let q = match via {
        Via::Rc => &mut w.rc_a,
        Via::Ud => &mut w.ud_a,
        Via::Dc => &mut w.dci,
    };
    let mut wqe = q.build(opc, SIGNALED, [0; 4], &segs);
    match m {
        Mutation::DsZero => wqe[7] = 0,
        // More DS than the WQEBBs posted: the WQE would extend past the producer.
        Mutation::DsPastProducer => wqe[7] = 63,
        Mutation::Qpn => {
            let other = q.qpn() ^ (1 + r.below(0xff) as u32);
            wqe[4..7].copy_from_slice(&(other << 8).to_be_bytes()[..3]);
        }
        Mutation::Garbage => {
            for b in wqe[16..].iter_mut() {
                *b = r.next() as u8;
            }
            // Keep the garbage aimed at our own MRs half of the time (keys from the live set).
            if r.below(2) == 0 && wqe.len() >= 32 {
                let live = [w.la[0].keys.lkey, w.la_other.keys.lkey, w.rb[1].keys.rkey, w.rb_other.keys.rkey];
                let k = live[r.below(4) as usize];
                let at = 16 + 16 * r.below((wqe.len() as u64 - 16) / 16) as usize;
                wqe[at + 4..at + 8].copy_from_slice(&k.to_be_bytes());
            }
        }
        _ => {}
    }
    let (_, mut db) = q.write_wqe(&wqe);
    // The doorbell names the QP it is rung for (only the ring's ctrl segment is broken).
    db[4..7].copy_from_slice(&(q.qpn() << 8).to_be_bytes()[..3]);
    q.update_sq_dbr();
    q.ring(db);
    expect
}

/// Runs `n` rounds; returns the number of WQEs posted.
fn fuzz(seed: u64, n: u64) -> u64 {
    let mut w = World::new();
    let mut r = Rng(seed);
    for i in 0..n {
        let via = r.pick(&[Via::Rc, Via::Rc, Via::Ud, Via::Dc]);
        let opc = r.pick(opcodes(via));
        let m = r.pick(&mutations(opc));
        let expect = round(&mut w, &mut r, via, opc, m);
        check(&mut w, i, via, m, opc, expect);
    }
    n
}

/// One round's completions, canaries and recovery.
fn check(w: &mut World, i: u64, via: Via, m: Mutation, opc: u8, expect: Option<u8>) {
    let got = w.cq_a.poll_all();
    assert!(!got.is_empty(), "round {i}: {via:?} {m:?} opcode {opc:#x}: a send CQE");
    // A DS count smaller than the WQE leaves its remaining WQEBBs to be read as
    // further WQEs; the QP is in error by then, so they are flushed.
    for extra in &got[1..] {
        assert_eq!(
            (extra.opcode(), extra.syndrome()),
            (13, 0x05),
            "round {i}: {via:?} {m:?}: only flushes follow"
        );
    }
    let c = &got[0];
    let synd = if c.opcode() == 13 { c.syndrome() } else { 0 };
    if let Some(e) = expect {
        assert_eq!(synd, e, "round {i}: {via:?} {m:?} opcode {opc:#x}: syndrome");
    }
    for c in w.cq_b.poll_all() {
        // Receives completed (or flushed): their WQEs are gone.
        if c.qpn() == w.rc_b.qpn() {
            w.rc_recvs = w.rc_recvs.saturating_sub(1);
        } else if c.qpn() == w.ud_b.qpn() {
            w.ud_recvs = w.ud_recvs.saturating_sub(1);
        }
    }
    assert!(w.canaries_intact(), "round {i}: {via:?} {m:?}: a canary byte changed");
    // The DCT never leaves RTR; requesters in error are recovered.
    if w.rc_a.state() != QpState::Rts || w.rc_b.state() != QpState::Rts {
        w.reset_rc();
    }
    if w.ud_a.state() != QpState::Rts || w.ud_b.state() != QpState::Rts {
        w.reset_ud();
    }
    if w.dci.state() != QpState::Rts {
        w.reset_dci();
    }
}

/// Every violation class on every transport and opcode it applies to, once each, with
/// the syndrome the spec names: the classes the fuzzer draws from, each pinned.
#[test]
fn every_violation_class_on_rc_ud_and_dc() {
    let mut w = World::new();
    let mut r = Rng(7);
    let mut n = 0;
    for via in [Via::Rc, Via::Ud, Via::Dc] {
        for &opc in opcodes(via) {
            for m in mutations(opc) {
                let expect = round(&mut w, &mut r, via, opc, m);
                check(&mut w, n, via, m, opc, expect);
                n += 1;
            }
        }
    }
    // RC: WRITE 12, READ 12, SEND 9, FA 13, CS 13; UD: SEND 9; DC: 12 + 12 + 13 + 13.
    assert_eq!(n, 59 + 9 + 50);
}

#[test]
fn mutation_fuzz_short() {
    fuzz(0x5eed, 20_000);
}

#[test]
#[ignore = "10 million WQEs: run in release with --ignored --nocapture"]
fn mutation_fuzz_ten_million() {
    let t0 = std::time::Instant::now();
    let n = fuzz(0x1234_5678, 10_000_000);
    let s = t0.elapsed().as_secs_f64();
    println!(
        "mutation fuzz: {n} WQEs in {s:.1} s ({:.0} WQEs/s), 0 panics, 0 hangs, canaries intact",
        n as f64 / s
    );
}
