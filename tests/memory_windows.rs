//! Memory windows, LOCAL_INV, SEND with invalidate and indirect mkeys (step 13,
//! docs/mlx5-wire-format.md §3.7): UMR WQEs built by the front-end, decoded and carried
//! out by the simulator with its own code. What each test expects follows IB semantics
//! (a window grants what it was bound with, over its range only, until it is invalidated
//! or bound again; a type-2 window only to requests arriving at its QP) and rdma-core's
//! rules for the bind, never the simulator's tables.
mod common;
use common::*;
use mlx5::sim::Sim;
use mlx5::{
    AccessFlags, ConnectParams, Error, InvalidArgument, MemoryRegion, MemoryWindow, MkeyKind, MkeyMisuse,
    QpConfig, RcQp, Sge, Status, Syndrome, WcOpcode, WqeFlags,
};

const S: WqeFlags = WqeFlags::SIGNALED;

/// B's region windows may be bound to (64 KiB, every right, MW_BIND).
fn bindable(p: &Pair) -> MemoryRegion<Sim> {
    p.b.pd.alloc_mr(1 << 16, AccessFlags::ALL | AccessFlags::MW_BIND).unwrap()
}

fn write(qp: &RcQp<Sim, u64>, e: u64, src: Sge, raddr: u64, rkey: u32) {
    qp.wqe_builder(e)
        .unwrap()
        .ctrl_rdma_write(S)
        .unwrap()
        .rdma(raddr, rkey)
        .unwrap()
        .sge(src)
        .unwrap()
        .finish()
        .unwrap();
}

fn read(qp: &RcQp<Sim, u64>, e: u64, dst: Sge, raddr: u64, rkey: u32) {
    qp.wqe_builder(e)
        .unwrap()
        .ctrl_rdma_read(S)
        .unwrap()
        .rdma(raddr, rkey)
        .unwrap()
        .sge(dst)
        .unwrap()
        .finish()
        .unwrap();
}

/// B binds `mw` over `[off, off+len)` of `mr` with `access` on its QP; the bind's
/// completion is a successful UMR.
fn bind(
    p: &mut Pair,
    mw: &MemoryWindow<Sim>,
    mr: &MemoryRegion<Sim>,
    off: usize,
    len: usize,
    access: AccessFlags,
) {
    let b = mw.bind(mr, off, len, access).unwrap();
    p.b.qp.wqe_builder(7).unwrap().bind_mw(S, &b).unwrap().finish().unwrap();
    let c = p.b.drain();
    assert_eq!(
        c.iter().map(|(c, e)| (*e, c.status, c.opcode)).collect::<Vec<_>>(),
        [(7, Status::Success, WcOpcode::Umr)]
    );
}

/// A's single completion after one request: its status.
fn one_status(p: &mut Pair) -> Status {
    let c = p.a.drain();
    assert_eq!(c.len(), 1, "{c:?}");
    c[0].0.status
}

fn remote_access_error(p: &mut Pair) -> String {
    let c = p.a.drain();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::RemoteAccess), "{c:?}");
    p.a.cq.explain(&c[0].0)
}

#[test]
fn a_type_2_window_grants_its_range_and_rights_only() {
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    let before = mw.rkey();
    bind(&mut p, &mw, &mr, 0x1000, 0x800, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ);
    // The key moved to the next variant (ibv_inc_rkey), same index.
    assert_eq!(mw.rkey(), (before & !0xff) | ((before + 1) & 0xff));
    let base = mr.addr() + 0x1000;
    fill(&p.a.mr, 0, 0x800, 3);
    write(&p.a.qp, 1, p.a.mr.sge(0, 0x800).unwrap(), base, mw.rkey());
    assert_eq!(one_status(&mut p), Status::Success);
    assert_eq!(bytes(&mr, 0x1000, 0x800), bytes(&p.a.mr, 0, 0x800));
    read(&p.a.qp, 2, p.a.mr.sge(0x10000, 0x100).unwrap(), base + 0x700, mw.rkey());
    assert_eq!(one_status(&mut p), Status::Success);
    assert_eq!(bytes(&p.a.mr, 0x10000, 0x100), bytes(&mr, 0x1700, 0x100));
    // One byte past the window's end (inside the MR): refused, nothing written.
    let untouched = bytes(&mr, 0x1800, 1);
    write(&p.a.qp, 3, p.a.mr.sge(0, 2).unwrap(), base + 0x7ff, mw.rkey());
    let why = remote_access_error(&mut p);
    assert!(why.contains(&format!("rkey 0x{:x}", mw.rkey())) && why.contains("window"), "{why}");
    assert_eq!(bytes(&mr, 0x1800, 1), untouched);
}

#[test]
fn a_window_without_the_right_refuses_atomics() {
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    bind(&mut p, &mw, &mr, 0, 64, AccessFlags::REMOTE_READ);
    p.a.qp
        .wqe_builder(1)
        .unwrap()
        .ctrl_atomic_fa(S, 1)
        .unwrap()
        .rdma(mr.addr(), mw.rkey())
        .unwrap()
        .result(p.a.mr.sge(0, 8).unwrap())
        .unwrap()
        .finish()
        .unwrap();
    let why = remote_access_error(&mut p);
    assert!(why.contains("REMOTE_ATOMIC") && why.contains("window"), "{why}");
}

#[test]
fn local_inv_frees_the_window_and_the_old_key_writes_nothing() {
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    bind(&mut p, &mw, &mr, 0, 0x100, AccessFlags::REMOTE_WRITE);
    p.b.qp.wqe_builder(8).unwrap().local_inv(S, mw.rkey()).unwrap().finish().unwrap();
    let c = p.b.drain();
    assert_eq!(
        c.iter().map(|(c, e)| (*e, c.status, c.opcode)).collect::<Vec<_>>(),
        [(8, Status::Success, WcOpcode::Umr)]
    );
    fill(&p.a.mr, 0, 16, 9);
    write(&p.a.qp, 1, p.a.mr.sge(0, 16).unwrap(), mr.addr(), mw.rkey());
    let why = remote_access_error(&mut p);
    assert!(why.contains("not bound") && why.contains("invalidated"), "{why}");
    assert_eq!(bytes(&mr, 0, 16), vec![0; 16]);
}

#[test]
fn a_send_with_invalidate_frees_the_responders_window() {
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    bind(&mut p, &mw, &mr, 0, 0x100, AccessFlags::REMOTE_WRITE);
    let rkey = mw.rkey();
    p.b.qp.post_recv(50, &[p.b.mr.sge(0, 64).unwrap()]).unwrap();
    fill(&p.a.mr, 0, 32, 1);
    p.a.qp
        .wqe_builder(1)
        .unwrap()
        .ctrl_send_inv(S, rkey)
        .unwrap()
        .sge(p.a.mr.sge(0, 32).unwrap())
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(one_status(&mut p), Status::Success);
    let c = p.b.drain();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!((c[0].1, c[0].0.opcode, c[0].0.invalidated_rkey), (50, WcOpcode::RecvInv, Some(rkey)));
    assert_eq!(bytes(&p.b.mr, 0, 32), bytes(&p.a.mr, 0, 32));
    // The window grants nothing now.
    write(&p.a.qp, 2, p.a.mr.sge(0, 8).unwrap(), mr.addr(), rkey);
    let why = remote_access_error(&mut p);
    assert!(why.contains("SEND with invalidate"), "{why}");
    assert_eq!(bytes(&mr, 0, 8), vec![0; 8]);
}

#[test]
fn a_send_with_invalidate_of_an_mr_key_is_an_invalid_request() {
    let mut p = pair();
    p.b.qp.post_recv(50, &[p.b.mr.sge(0, 64).unwrap()]).unwrap();
    p.a.qp
        .wqe_builder(1)
        .unwrap()
        .ctrl_send_inv(S, p.b.mr.rkey())
        .unwrap()
        .sge(p.a.mr.sge(0, 32).unwrap())
        .unwrap()
        .finish()
        .unwrap();
    let c = p.a.drain();
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::RemoteInvalidRequest), "{c:?}");
    let why = p.a.cq.explain(&c[0].0);
    assert!(why.contains(&format!("0x{:x}", p.b.mr.rkey())) && why.contains("not a memory window"), "{why}");
    // The responder's receive completed in error, its buffer untouched.
    let c = p.b.drain();
    assert!(matches!(c[0].0.status, Status::Error(_)), "{c:?}");
    assert_eq!(bytes(&p.b.mr, 0, 32), vec![0; 32]);
}

#[test]
fn a_type_1_window_rebinds_under_a_new_key_and_follows_its_mr() {
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window1).unwrap();
    bind(&mut p, &mw, &mr, 0, 0x100, AccessFlags::REMOTE_READ);
    let first = mw.rkey();
    bind(&mut p, &mw, &mr, 0x100, 0x100, AccessFlags::REMOTE_READ);
    let second = mw.rkey();
    assert_ne!(first, second);
    fill(&mr, 0x100, 0x100, 5);
    read(&p.a.qp, 1, p.a.mr.sge(0, 0x100).unwrap(), mr.addr() + 0x100, second);
    assert_eq!(one_status(&mut p), Status::Success);
    assert_eq!(bytes(&p.a.mr, 0, 0x100), bytes(&mr, 0x100, 0x100));
    // The first key is stale.
    read(&p.a.qp, 2, p.a.mr.sge(0, 8).unwrap(), mr.addr() + 0x100, first);
    let why = remote_access_error(&mut p);
    assert!(why.contains("stale") && why.contains(&format!("0x{second:x}")), "{why}");
}

#[test]
fn a_type_1_window_over_a_deregistered_mr_grants_nothing() {
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window1).unwrap();
    bind(&mut p, &mw, &mr, 0, 0x100, AccessFlags::REMOTE_READ);
    let (lkey, addr) = (mr.lkey(), mr.addr());
    drop(mr);
    read(&p.a.qp, 1, p.a.mr.sge(0, 8).unwrap(), addr, mw.rkey());
    let why = remote_access_error(&mut p);
    assert!(why.contains(&format!("MR 0x{lkey:x}")) && why.contains("no longer registered"), "{why}");
}

#[test]
fn a_type_2_window_serves_its_own_qp_only() {
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    bind(&mut p, &mw, &mr, 0, 0x100, AccessFlags::REMOTE_READ);
    // A second connection between the same hosts, B's end in the window's PD.
    let cq2 = p.b.ctx.create_cq(64, |_, _: u64| {}).unwrap();
    let b2 = p.b.ctx.create_rc_qp(&p.b.pd, &cq2, &cq2, &small_cfg()).unwrap();
    let a2 = p.a.ctx.create_rc_qp(&p.a.pd, &p.a.cq, &p.a.cq, &small_cfg()).unwrap();
    let (ia, ib) = (a2.local_info().unwrap(), b2.local_info().unwrap());
    let cp = |r| mlx5::ConnectParams { remote: Some(r), access: AccessFlags::ALL, ..Default::default() };
    a2.activate(&cp(ib)).unwrap();
    b2.activate(&cp(ia)).unwrap();
    read(&a2, 1, p.a.mr.sge(0, 8).unwrap(), mr.addr(), mw.rkey());
    let why = remote_access_error(&mut p);
    assert!(
        why.contains(&format!("bound to QP 0x{:x}", p.b.qp.qpn()))
            && why.contains(&format!("0x{:x}", b2.qpn())),
        "{why}"
    );
}

#[test]
fn binds_the_nic_would_refuse_are_typed_errors() {
    let p = pair();
    let plain = p.b.pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let bindable_ro = p.b.pd.alloc_mr(4096, AccessFlags::REMOTE_READ | AccessFlags::MW_BIND).unwrap();
    let other_pd =
        p.b.ctx.alloc_pd().unwrap().alloc_mr(4096, AccessFlags::ALL | AccessFlags::MW_BIND).unwrap();
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    let mw1 = p.b.pd.alloc_mw(MkeyKind::Window1).unwrap();
    let key = mw.rkey();
    let r = AccessFlags::REMOTE_READ;
    let m = |e| Error::InvalidArgument(InvalidArgument::Mkey(e));
    assert_eq!(mw.bind(&plain, 0, 64, r).unwrap_err(), m(MkeyMisuse::MrWithoutMwBind { lkey: plain.lkey() }));
    assert_eq!(
        mw.bind(&other_pd, 0, 64, r).unwrap_err(),
        m(MkeyMisuse::DifferentPd { lkey: other_pd.lkey() })
    );
    let w = AccessFlags::REMOTE_WRITE;
    assert!(matches!(
        mw.bind(&bindable_ro, 0, 64, w).unwrap_err(),
        Error::InvalidArgument(InvalidArgument::Mkey(MkeyMisuse::Access { .. }))
    ));
    assert!(matches!(
        mw.bind(&bindable_ro, 4000, 200, r).unwrap_err(),
        Error::InvalidArgument(InvalidArgument::OutsideMr { .. })
    ));
    assert_eq!(mw1.bind_zero_based(&bindable_ro, 0, 64, r).unwrap_err(), m(MkeyMisuse::ZeroBasedType1));
    assert_eq!(mw.rkey(), key, "a refused bind leaves the key");
    assert!(p.b.pd.alloc_mw(MkeyKind::Indirect { max_entries: 4, remote_invalidate: false }).is_err());
    let mk = p.b.pd.create_indirect_mkey(2).unwrap();
    assert_eq!(mk.max_entries(), 4);
    let sges = vec![p.b.mr.sge(0, 8).unwrap(); 5];
    assert_eq!(
        p.b.qp.wqe_builder(1).unwrap().mr_list(S, &mk, r, &sges).unwrap_err(),
        m(MkeyMisuse::TooManyEntries { count: 5, max: 4 })
    );
}

#[test]
fn a_bind_the_nic_refuses_completes_with_mw_bind_err_and_names_the_mr() {
    let mut p = pair();
    let plain = p.b.pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    // Arguments the front-end would refuse, written as a raw bind: the NIC checks too.
    let b = mlx5::MwBind {
        kind: MkeyKind::Window2,
        rkey: mw.rkey(),
        new_rkey: mw.rkey() + 1,
        mr_lkey: plain.lkey(),
        addr: plain.addr(),
        len: 64,
        access: AccessFlags::REMOTE_READ,
        zero_based: false,
    };
    p.b.qp.wqe_builder(1).unwrap().bind_mw(S, &b).unwrap().finish().unwrap();
    let c = p.b.drain();
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::MwBind), "{c:?}");
    let why = p.b.cq.explain(&c[0].0);
    assert!(why.contains(&format!("MR 0x{:x}", plain.lkey())) && why.contains("MW_BIND"), "{why}");
}

#[test]
fn local_inv_of_a_window_bound_elsewhere_is_refused() {
    let mut p = pair();
    let mw = p.b.pd.alloc_mw(MkeyKind::Window2).unwrap();
    // Never bound: not bound to this QP.
    p.b.qp.wqe_builder(1).unwrap().local_inv(S, mw.rkey()).unwrap().finish().unwrap();
    let c = p.b.drain();
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::MwBind), "{c:?}");
    assert!(p.b.cq.explain(&c[0].0).contains("not bound"));
}

/// Three pieces of B's region, out of order, as one indirect mkey.
fn scattered(p: &mut Pair, access: AccessFlags) -> (mlx5::IndirectMkey<Sim>, Vec<(usize, usize)>) {
    let mk = p.b.pd.create_indirect_mkey(3).unwrap();
    let pieces = vec![(0x3000usize, 100usize), (0x1000, 28), (0x2000, 200)];
    let sges: Vec<Sge> = pieces.iter().map(|&(o, l)| p.b.mr.sge(o, l as u32).unwrap()).collect();
    p.b.qp.wqe_builder(9).unwrap().mr_list(S, &mk, access, &sges).unwrap().finish().unwrap();
    let c = p.b.drain();
    assert_eq!(
        c.iter().map(|(c, e)| (*e, c.status, c.opcode)).collect::<Vec<_>>(),
        [(9, Status::Success, WcOpcode::Umr)]
    );
    (mk, pieces)
}

#[test]
fn an_indirect_mkey_scatters_a_write_and_gathers_a_read_across_its_entries() {
    let mut p = pair();
    let (mk, pieces) = scattered(&mut p, AccessFlags::ALL);
    fill(&p.a.mr, 0, 328, 7);
    // Zero-based: byte 0 of the key is the first entry's first byte.
    write(&p.a.qp, 1, p.a.mr.sge(0, 328).unwrap(), 0, mk.key());
    assert_eq!(one_status(&mut p), Status::Success);
    let mut landed = Vec::new();
    for &(o, l) in &pieces {
        landed.extend(bytes(&p.b.mr, o, l));
    }
    assert_eq!(landed, bytes(&p.a.mr, 0, 328));
    // A READ from offset 90 to 150: the end of entry 0, all of entry 1, entry 2's start.
    read(&p.a.qp, 2, p.a.mr.sge(0x8000, 60).unwrap(), 90, mk.key());
    assert_eq!(one_status(&mut p), Status::Success);
    assert_eq!(bytes(&p.a.mr, 0x8000, 60), landed[90..150].to_vec());
    // Past its 328 bytes: refused.
    read(&p.a.qp, 3, p.a.mr.sge(0x8000, 2).unwrap(), 327, mk.key());
    let why = remote_access_error(&mut p);
    assert!(why.contains("indirect mkey"), "{why}");
}

#[test]
fn an_indirect_mkey_is_a_local_key_too() {
    let mut p = pair();
    let (mk, pieces) = scattered(&mut p, AccessFlags::LOCAL_WRITE);
    for &(o, l) in &pieces {
        fill(&p.b.mr, o, l, o as u8);
    }
    // B sends 328 bytes gathered through the mkey's lkey.
    p.a.qp.post_recv(3, &[p.a.mr.sge(0, 512).unwrap()]).unwrap();
    p.b.qp
        .wqe_builder(10)
        .unwrap()
        .ctrl_send(S)
        .unwrap()
        .sge(Sge::new(0, 328, mk.key()))
        .unwrap()
        .finish()
        .unwrap();
    let c = p.b.drain();
    assert_eq!(c[0].0.status, Status::Success, "{c:?}");
    let mut sent = Vec::new();
    for &(o, l) in &pieces {
        sent.extend(bytes(&p.b.mr, o, l));
    }
    assert_eq!(p.a.drain()[0].0.byte_len, 328);
    assert_eq!(bytes(&p.a.mr, 0, 328), sent);
}

/// One step of the property test below.
#[derive(Debug, Clone)]
enum Op {
    /// B binds the window over `[off, off + len)` of its region.
    Bind { off: usize, len: usize, write: bool, read: bool },
    /// B invalidates the window (LOCAL_INV).
    LocalInv,
    /// A's SEND with invalidate names the window's key.
    SendInv,
    /// A WRITEs `len` bytes at `at` (an offset in B's region), from its RC QP or its
    /// DCI (to B's DCT).
    Write { at: usize, len: usize, seed: u8, dc: bool },
    /// A READs `len` bytes at `at`.
    Read { at: usize, len: usize, dc: bool },
    /// A WRITEs through the key the window had before its last bind (a stale key),
    /// when there is one.
    WriteStale,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0usize..0x800, 1usize..0x800, any::<bool>(), any::<bool>())
            .prop_map(|(off, len, write, read)| Op::Bind { off, len, write, read }),
        1 => Just(Op::LocalInv),
        1 => Just(Op::SendInv),
        4 => (0usize..0x1000, 1usize..0x200, any::<u8>(), any::<bool>())
            .prop_map(|(at, len, seed, dc)| Op::Write { at, len, seed, dc }),
        2 => (0usize..0x1000, 1usize..0x200, any::<bool>()).prop_map(|(at, len, dc)| Op::Read { at, len, dc }),
        1 => Just(Op::WriteStale),
    ]
}

/// A's DCI and B's DCT (on an SRQ) beside the RC pair of `p`.
fn dc_beside(p: &Pair) -> (mlx5::Dci<Sim, u64>, mlx5::Dct<Sim, u64>, mlx5::SharedReceiveQueue<Sim, u64>) {
    let cfg = QpConfig { max_send_wr: 64, max_send_sge: 2, max_inline_data: 64, ..QpConfig::default() };
    let dci = p.a.ctx.create_dci(&p.a.pd, &p.a.cq, &cfg).unwrap();
    dci.activate(&ConnectParams::default()).unwrap();
    let srq = p.b.ctx.create_srq(&p.b.pd, 63, 2).unwrap();
    let dct =
        p.b.ctx
            .create_dct(&p.b.pd, &p.b.cq, &srq, &QpConfig { dc_key: DC_KEY, ..QpConfig::default() })
            .unwrap();
    dct.activate(&ConnectParams { access: AccessFlags::ALL, ..ConnectParams::default() }).unwrap();
    (dci, dct, srq)
}

const DC_KEY: u64 = 0x0dc0_ffee;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]
    /// Binds, invalidations (local and remote) and WRITEs and READs, from an RC QP and
    /// from a DCI, through a type-1 or a type-2 window, against a model of the window
    /// (its range and rights, or unbound; a type-2 window serves its own RC QP only, so
    /// never a DCT) and of B's memory: each operation succeeds exactly when the model's
    /// window grants it, and memory equals the model's after every step; the first
    /// refused one (REMOTE_ACCESS_ERR, nothing written, its explanation naming the key)
    /// ends the run, as it moves the requester to ERR.
    #[test]
    fn windows_against_a_model(type2 in proptest::bool::ANY, ops in proptest::collection::vec(op(), 1..24)) {
        let mut p = pair();
        let mr = bindable(&p);
        let (dci, dct, _srq) = dc_beside(&p);
        let (dctn, av) = (dct.dct_number().unwrap(), mlx5::AddressVector::ib(2, 0));
        let kind = if type2 { MkeyKind::Window2 } else { MkeyKind::Window1 };
        let mw = p.b.pd.alloc_mw(kind).unwrap();
        // The model: the bound range and rights, B's region, the key before the last bind.
        let mut bound: Option<(usize, usize, bool, bool)> = None;
        let mut mem = vec![0u8; mr.len()];
        let mut stale: Option<u32> = None;
        let base = mr.addr() as usize;
        for (i, op) in ops.iter().enumerate() {
            let e = 100 + i as u64;
            match *op {
                Op::Bind { off, len, write, read } => {
                    if type2 && bound.is_some() {
                        // A bound type-2 window must be invalidated first: that refusal
                        // (MW_BIND_ERR) is tested on its own above.
                        continue;
                    }
                    let mut acc = AccessFlags::empty();
                    if write { acc |= AccessFlags::REMOTE_WRITE; }
                    if read { acc |= AccessFlags::REMOTE_READ; }
                    let before = mw.rkey();
                    bind(&mut p, &mw, &mr, off, len, acc);
                    stale = Some(before);
                    bound = Some((off, len, write, read));
                }
                Op::LocalInv | Op::SendInv if !type2 || bound.is_none() => continue,
                Op::LocalInv => {
                    p.b.qp.wqe_builder(e).unwrap().local_inv(S, mw.rkey()).unwrap().finish().unwrap();
                    let c = p.b.drain();
                    proptest::prop_assert_eq!(c[0].0.status, Status::Success);
                    bound = None;
                }
                Op::SendInv => {
                    p.b.qp.post_recv(e, &[p.b.mr.sge(0, 64).unwrap()]).unwrap();
                    p.a.qp.wqe_builder(e).unwrap().ctrl_send_inv(S, mw.rkey()).unwrap()
                        .sge(p.a.mr.sge(0, 8).unwrap()).unwrap().finish().unwrap();
                    proptest::prop_assert_eq!(one_status(&mut p), Status::Success);
                    let c = p.b.drain();
                    proptest::prop_assert_eq!(c[0].0.invalidated_rkey, Some(mw.rkey()));
                    bound = None;
                }
                Op::Write { at, len, dc, .. } | Op::Read { at, len, dc } => {
                    let (is_write, seed) = match *op { Op::Write { seed, .. } => (true, seed), _ => (false, 0) };
                    let ok = (!dc || !type2) && bound.is_some_and(|(off, blen, w, r)| {
                        at >= off && at + len <= off + blen && if is_write { w } else { r }
                    });
                    let raddr = (base + at) as u64;
                    let (src, dst) = (p.a.mr.sge(0, len as u32).unwrap(), p.a.mr.sge(0x10000, len as u32).unwrap());
                    if is_write {
                        fill(&p.a.mr, 0, len, seed);
                    }
                    match (dc, is_write) {
                        (false, true) => write(&p.a.qp, e, src, raddr, mw.rkey()),
                        (false, false) => read(&p.a.qp, e, dst, raddr, mw.rkey()),
                        (true, true) => dci.wqe_builder(e).unwrap().ctrl_rdma_write(S).unwrap().av(DC_KEY, dctn, &av)
                            .unwrap().rdma(raddr, mw.rkey()).unwrap().sge(src).unwrap().finish().unwrap(),
                        (true, false) => dci.wqe_builder(e).unwrap().ctrl_rdma_read(S).unwrap().av(DC_KEY, dctn, &av)
                            .unwrap().rdma(raddr, mw.rkey()).unwrap().sge(dst).unwrap().finish().unwrap(),
                    }
                    let c = p.a.drain();
                    proptest::prop_assert_eq!(c.len(), 1, "{:?}", c);
                    let st = c[0].0.status;
                    if !ok {
                        proptest::prop_assert_eq!(st.syndrome(), Some(Syndrome::RemoteAccess));
                        let why = p.a.cq.explain(&c[0].0);
                        proptest::prop_assert!(why.contains(&format!("rkey 0x{:x}", mw.rkey())), "{}", why);
                        proptest::prop_assert!(mr.to_vec() == mem, "a refused access wrote memory");
                        return Ok(());
                    }
                    proptest::prop_assert_eq!(st, Status::Success);
                    if is_write {
                        mem[at..at + len].copy_from_slice(&bytes(&p.a.mr, 0, len));
                    } else {
                        proptest::prop_assert_eq!(bytes(&p.a.mr, 0x10000, len), mem[at..at + len].to_vec());
                    }
                }
                Op::WriteStale => {
                    let Some(old) = stale else { continue };
                    write(&p.a.qp, e, p.a.mr.sge(0, 8).unwrap(), base as u64, old);
                    proptest::prop_assert_eq!(one_status(&mut p).syndrome(), Some(Syndrome::RemoteAccess));
                    proptest::prop_assert!(mr.to_vec() == mem, "a stale key wrote memory");
                    return Ok(());
                }
            }
            proptest::prop_assert!(mr.to_vec() == mem);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// An indirect mkey over random pieces of B's region (in random order, some empty),
    /// then WRITEs and READs through it at random offsets, from the RC QP or the DCI,
    /// against a model that maps each offset to its piece: inside the mkey's length
    /// every access lands (or reads) exactly where the model says, across pieces; past
    /// it, REMOTE_ACCESS_ERR and nothing written.
    #[test]
    fn indirect_mkeys_against_a_model(
        pieces in proptest::collection::vec((0usize..64, 0u32..300), 1..6),
        ops in proptest::collection::vec((0usize..1600, 1usize..400, proptest::bool::ANY, proptest::bool::ANY), 1..12),
    ) {
        let mut p = pair();
        let (dci, dct, _srq) = dc_beside(&p);
        let (dctn, av) = (dct.dct_number().unwrap(), mlx5::AddressVector::ib(2, 0));
        let mk = p.b.pd.create_indirect_mkey(pieces.len() as u32).unwrap();
        // Piece k: `len` bytes at 1 KiB slot `slot` of B's region (slots may repeat).
        let sges: Vec<Sge> = pieces.iter().map(|&(slot, len)| p.b.mr.sge(slot * 1024, len).unwrap()).collect();
        p.b.qp.wqe_builder(1).unwrap().mr_list(S, &mk, AccessFlags::ALL, &sges).unwrap().finish().unwrap();
        proptest::prop_assert_eq!(p.b.drain()[0].0.status, Status::Success);
        // The model: byte i of the key is at this offset of B's region.
        let map: Vec<usize> = pieces.iter().flat_map(|&(slot, len)| (0..len as usize).map(move |i| slot * 1024 + i)).collect();
        let mut mem = p.b.mr.to_vec();
        for (n, &(at, len, is_write, dc)) in ops.iter().enumerate() {
            let e = 10 + n as u64;
            let (src, dst) = (p.a.mr.sge(0, len as u32).unwrap(), p.a.mr.sge(0x10000, len as u32).unwrap());
            if is_write {
                fill(&p.a.mr, 0, len, n as u8);
            }
            match (dc, is_write) {
                (false, true) => write(&p.a.qp, e, src, at as u64, mk.key()),
                (false, false) => read(&p.a.qp, e, dst, at as u64, mk.key()),
                (true, true) => dci.wqe_builder(e).unwrap().ctrl_rdma_write(S).unwrap().av(DC_KEY, dctn, &av)
                    .unwrap().rdma(at as u64, mk.key()).unwrap().sge(src).unwrap().finish().unwrap(),
                (true, false) => dci.wqe_builder(e).unwrap().ctrl_rdma_read(S).unwrap().av(DC_KEY, dctn, &av)
                    .unwrap().rdma(at as u64, mk.key()).unwrap().sge(dst).unwrap().finish().unwrap(),
            }
            let c = p.a.drain();
            proptest::prop_assert_eq!(c.len(), 1, "{:?}", c);
            if at + len > map.len() {
                proptest::prop_assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::RemoteAccess));
                proptest::prop_assert!(p.b.mr.to_vec() == mem, "a refused access wrote memory");
                return Ok(());
            }
            proptest::prop_assert_eq!(c[0].0.status, Status::Success);
            if is_write {
                // Later bytes win where pieces overlap (the copy runs in order).
                for (i, b) in bytes(&p.a.mr, 0, len).into_iter().enumerate() {
                    mem[map[at + i]] = b;
                }
                proptest::prop_assert!(p.b.mr.to_vec() == mem);
            } else {
                let want: Vec<u8> = (at..at + len).map(|i| mem[map[i]]).collect();
                proptest::prop_assert_eq!(bytes(&p.a.mr, 0x10000, len), want);
            }
        }
    }
}

#[test]
fn an_interleaved_mkey_repeats_its_entries_at_their_strides() {
    use mlx5::wqe::Interleaved;
    let mut p = pair();
    let mk = p.b.pd.create_indirect_mkey(2).unwrap();
    let base = p.b.mr.addr();
    let lk = p.b.mr.lkey();
    // 16 bytes every 64 from 0x1000, then 8 bytes every 16 from 0x8000; 4 repetitions.
    let ents = [
        Interleaved { addr: base + 0x1000, bytes_count: 16, bytes_skip: 48, lkey: lk },
        Interleaved { addr: base + 0x8000, bytes_count: 8, bytes_skip: 8, lkey: lk },
    ];
    p.b.qp
        .wqe_builder(9)
        .unwrap()
        .mr_interleaved(S, &mk, AccessFlags::ALL, 4, &ents)
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(p.b.drain()[0].0.status, Status::Success);
    fill(&p.a.mr, 0, 96, 11);
    write(&p.a.qp, 1, p.a.mr.sge(0, 96).unwrap(), 0, mk.key());
    assert_eq!(one_status(&mut p), Status::Success);
    let src = bytes(&p.a.mr, 0, 96);
    for r in 0..4 {
        assert_eq!(bytes(&p.b.mr, 0x1000 + 64 * r, 16), src[24 * r..24 * r + 16], "repetition {r}, entry 0");
        assert_eq!(
            bytes(&p.b.mr, 0x8000 + 16 * r, 8),
            src[24 * r + 16..24 * r + 24],
            "repetition {r}, entry 1"
        );
        // What the strides skip is untouched.
        assert_eq!(bytes(&p.b.mr, 0x1000 + 64 * r + 16, 48), vec![0; 48]);
    }
    // A READ from byte 20 (repetition 0, entry 1) to byte 50 (repetition 2, entry 0).
    read(&p.a.qp, 2, p.a.mr.sge(0x8000, 30).unwrap(), 20, mk.key());
    assert_eq!(one_status(&mut p), Status::Success);
    assert_eq!(bytes(&p.a.mr, 0x8000, 30), src[20..50].to_vec());
    // Its length is 96 bytes.
    write(&p.a.qp, 3, p.a.mr.sge(0, 2).unwrap(), 95, mk.key());
    assert!(remote_access_error(&mut p).contains("indirect mkey"));
}

/// B's indirect mkey over its region's first 64 bytes, listed.
fn listed(p: &mut Pair, remote_invalidate: bool) -> mlx5::IndirectMkey<Sim> {
    let mk = if remote_invalidate {
        p.b.pd.create_indirect_mkey_remote_invalidate(1).unwrap()
    } else {
        p.b.pd.create_indirect_mkey(1).unwrap()
    };
    let sge = [p.b.mr.sge(0x100, 64).unwrap()];
    p.b.qp.wqe_builder(30).unwrap().mr_list(S, &mk, AccessFlags::ALL, &sge).unwrap().finish().unwrap();
    assert_eq!(p.b.drain()[0].0.status, Status::Success);
    mk
}

#[test]
fn an_mkey_created_for_remote_invalidation_is_freed_by_a_send_with_invalidate() {
    let mut p = pair();
    let mk = listed(&mut p, true);
    p.b.qp.post_recv(50, &[p.b.mr.sge(0x8000, 64).unwrap()]).unwrap();
    let b = p.a.qp.wqe_builder(1).unwrap().ctrl_send_inv(S, mk.key()).unwrap();
    b.sge(p.a.mr.sge(0, 8).unwrap()).unwrap().finish().unwrap();
    assert_eq!(one_status(&mut p), Status::Success);
    assert_eq!(p.b.drain()[0].0.invalidated_rkey, Some(mk.key()));
    write(&p.a.qp, 2, p.a.mr.sge(0, 8).unwrap(), 0, mk.key());
    let why = remote_access_error(&mut p);
    assert!(why.contains("indirect mkey") && why.contains("SEND with invalidate"), "{why}");
    // One not created for it: an invalid request, nothing invalidated.
    let mut p = pair();
    let mk = listed(&mut p, false);
    p.b.qp.post_recv(50, &[p.b.mr.sge(0x8000, 64).unwrap()]).unwrap();
    let b = p.a.qp.wqe_builder(1).unwrap().ctrl_send_inv(S, mk.key()).unwrap();
    b.sge(p.a.mr.sge(0, 8).unwrap()).unwrap().finish().unwrap();
    let c = p.a.drain();
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::RemoteInvalidRequest), "{c:?}");
    assert!(p.a.cq.explain(&c[0].0).contains("created for remote invalidation"));
}

#[test]
fn local_inv_frees_an_indirect_mkey_and_not_a_type_1_window() {
    let mut p = pair();
    let mk = listed(&mut p, false);
    p.b.qp.wqe_builder(31).unwrap().local_inv(S, mk.key()).unwrap().finish().unwrap();
    assert_eq!(p.b.drain()[0].0.status, Status::Success);
    write(&p.a.qp, 1, p.a.mr.sge(0, 8).unwrap(), 0, mk.key());
    let why = remote_access_error(&mut p);
    assert!(why.contains("not bound") && why.contains("UMR"), "{why}");
    // A type-1 window is unbound by a bind of length 0: LOCAL_INV is refused.
    let mut p = pair();
    let mr = bindable(&p);
    let mw = p.b.pd.alloc_mw(MkeyKind::Window1).unwrap();
    bind(&mut p, &mw, &mr, 0, 64, AccessFlags::REMOTE_READ);
    p.b.qp.wqe_builder(32).unwrap().local_inv(S, mw.rkey()).unwrap().finish().unwrap();
    let c = p.b.drain();
    assert_eq!(c[0].0.status.syndrome(), Some(Syndrome::MwBind), "{c:?}");
    assert!(p.b.cq.explain(&c[0].0).contains("bind of length 0"));
}
