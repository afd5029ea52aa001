//! End-to-end scenarios written once, generic over the backend. Each runs
//! on the simulator always, and on ConnectX hardware when the build found
//! one (see `conformance.rs`). A "bed" is two endpoints that can reach each
//! other: two simulated hosts, or loopback between QPs of one port.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use mlx5::{
    AccessFlags, AddressVector, AsCq, AsyncEvent, Backend, Completion, CompletionQueue, ConnectParams,
    Context, CqConfig, CqeSize, Error, MemoryRegion, MiniCqeFormat, PortInfo, ProtectionDomain, QpConfig,
    RcQp, RemoteQpInfo, Sge, SharedReceiveQueue, Status, Syndrome, WcOpcode, WqeFlags,
};

pub const MR_LEN: usize = 1 << 20;
/// Completions on hardware arrive in microseconds; this only bounds a hang.
const DEADLINE: Duration = Duration::from_secs(10);

pub struct End<B: Backend> {
    pub srq: SharedReceiveQueue<B, u64>,
    pub cq: CompletionQueue<B, u64>,
    pub mr: MemoryRegion<B>,
    pub pd: ProtectionDomain<B>,
    pub ctx: Context<B>,
    pub port: PortInfo,
}

impl<B: Backend> End<B> {
    pub fn new(ctx: Context<B>) -> Self {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(1024, |_, _: u64| {}).unwrap();
        let mr = pd.alloc_mr(MR_LEN, AccessFlags::ALL).unwrap();
        let srq = ctx.create_srq(&pd, 63, 1).unwrap();
        let port = ctx.query_port(1).unwrap();
        End { srq, cq, mr, pd, ctx, port }
    }

    /// Poll until `n` completions arrived (bounded by a generous deadline).
    pub fn wait(&mut self, n: usize) -> Vec<(Completion, u64)> {
        let mut v = Vec::new();
        let t0 = Instant::now();
        while v.len() < n {
            self.cq.poll_with(64, |c, e| v.push((c, e)));
            assert!(t0.elapsed() < DEADLINE, "waited for {n} completions, got {v:?}");
        }
        v
    }

    pub fn fill(&self, off: usize, len: usize, seed: u8) -> Vec<u8> {
        let v: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect();
        self.mr.write(off, &v).unwrap();
        v
    }

    pub fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.mr.read(off, &mut v).unwrap();
        v
    }
}

pub struct Bed<B: Backend> {
    pub a: End<B>,
    pub b: End<B>,
}

impl<B: Backend> Bed<B> {
    pub fn new(a: Context<B>, b: Context<B>) -> Self {
        Bed { a: End::new(a), b: End::new(b) }
    }

    /// The address vector from `a` to `b` (on RoCE, with `a`'s source GID index).
    pub fn av_a_to_b(&self) -> AddressVector {
        AddressVector::between(&self.a.port, &self.b.port, 0)
    }

    /// A connected RC pair (b's side on its SRQ when `srq`).
    pub fn rc(&self, srq: bool) -> (RcQp<B, u64>, RcQp<B, u64>) {
        let cfg = QpConfig {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
            ..QpConfig::default()
        };
        let qa = self.a.ctx.create_rc_qp(&self.a.pd, &self.a.cq, &self.a.cq, &cfg).unwrap();
        let qb = if srq {
            self.b.ctx.create_rc_qp_with_srq(&self.b.pd, &self.b.cq, &self.b.cq, &self.b.srq, &cfg).unwrap()
        } else {
            self.b.ctx.create_rc_qp(&self.b.pd, &self.b.cq, &self.b.cq, &cfg).unwrap()
        };
        let p = ConnectParams::default();
        qa.activate(&ConnectParams { remote: Some(qb.local_info().unwrap()), ..p.clone() }).unwrap();
        qb.activate(&ConnectParams { remote: Some(qa.local_info().unwrap()), ..p.clone() }).unwrap();
        (qa, qb)
    }
}

pub fn rc_write_and_read<B: Backend>(mut t: Bed<B>) {
    let (qa, _qb) = t.rc(false);
    let data = t.a.fill(0, 8192, 1);
    let far = t.b.fill(0x10000, 4096, 2);
    let (la, lk, rb, rk) = (t.a.mr.addr(), t.a.mr.lkey(), t.b.mr.addr(), t.b.mr.rkey());
    qa.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::NONE)
        .unwrap()
        .rdma(rb, rk)
        .unwrap()
        .sge(Sge::new(la, 8192, lk))
        .unwrap()
        .finish()
        .unwrap();
    qa.wqe_builder(2)
        .unwrap()
        .ctrl_rdma_read(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(rb + 0x10000, rk)
        .unwrap()
        .sge(Sge::new(la + 0x20000, 4096, lk))
        .unwrap()
        .finish()
        .unwrap();
    let c = t.a.wait(1);
    assert_eq!(
        (c[0].1, c[0].0.status, c[0].0.opcode, c[0].0.byte_len),
        (2, Status::Success, WcOpcode::RdmaRead, 4096)
    );
    assert_eq!(t.b.bytes(0, 8192), data, "the unsignaled WRITE landed (covered by the READ's CQE)");
    assert_eq!(t.a.bytes(0x20000, 4096), far);
}

pub fn rc_send_and_write_with_immediate<B: Backend>(mut t: Bed<B>) {
    let (qa, qb) = t.rc(false);
    let data = t.a.fill(0, 300, 3);
    let (la, lk) = (t.a.mr.addr(), t.a.mr.lkey());
    let sge = |off| Sge { addr: t.b.mr.addr() + off, len: 1024, lkey: t.b.mr.lkey() };
    qb.post_recv(10, &[sge(0x1000)]).unwrap();
    qb.post_recv(11, &[sge(0x2000)]).unwrap();
    qa.wqe_builder(1)
        .unwrap()
        .ctrl_send_imm(WqeFlags::SIGNALED, 0xabcd)
        .unwrap()
        .sge(Sge::new(la, 300, lk))
        .unwrap()
        .finish()
        .unwrap();
    qa.wqe_builder(2)
        .unwrap()
        .ctrl_rdma_write_imm(WqeFlags::SIGNALED, 0x1234)
        .unwrap()
        .rdma(t.b.mr.addr() + 0x3000, t.b.mr.rkey())
        .unwrap()
        .inline(b"inline bytes")
        .unwrap()
        .finish_with_blueflame()
        .unwrap();
    assert!(t.a.wait(2).iter().all(|(c, _)| c.status == Status::Success));
    let r = t.b.wait(2);
    let got: Vec<_> = r.iter().map(|(c, e)| (*e, c.opcode, c.byte_len, c.imm)).collect();
    assert_eq!(
        got,
        vec![(10, WcOpcode::RecvImm, 300, Some(0xabcd)), (11, WcOpcode::RecvRdmaImm, 12, Some(0x1234))]
    );
    assert_eq!(t.b.bytes(0x1000, 300), data);
    assert_eq!(t.b.bytes(0x3000, 12), b"inline bytes");
}

pub fn rc_atomics<B: Backend>(mut t: Bed<B>) {
    let (qa, _qb) = t.rc(false);
    t.b.mr.write(0x40, &10u64.to_ne_bytes()).unwrap();
    let (la, lk, ra, rk) = (t.a.mr.addr(), t.a.mr.lkey(), t.b.mr.addr() + 0x40, t.b.mr.rkey());
    qa.wqe_builder(1)
        .unwrap()
        .ctrl_atomic_fa(WqeFlags::SIGNALED, 5)
        .unwrap()
        .rdma(ra, rk)
        .unwrap()
        .result(Sge::new(la, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
    qa.wqe_builder(2)
        .unwrap()
        .ctrl_atomic_cs(WqeFlags::SIGNALED, 99, 15)
        .unwrap()
        .rdma(ra, rk)
        .unwrap()
        .result(Sge::new(la + 8, 8, lk))
        .unwrap()
        .finish()
        .unwrap();
    let c = t.a.wait(2);
    assert!(c.iter().all(|(c, _)| c.status == Status::Success && c.byte_len == 8));
    let word = |off| u64::from_ne_bytes(t.a.bytes(off, 8).try_into().unwrap());
    assert_eq!((word(0), word(8)), (10, 15));
    assert_eq!(u64::from_ne_bytes(t.b.bytes(0x40, 8).try_into().unwrap()), 99);
}

pub fn rc_remote_access_error_then_flush<B: Backend>(mut t: Bed<B>) {
    let (qa, _qb) = t.rc(false);
    qa.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::NONE)
        .unwrap()
        .rdma(t.b.mr.addr(), 0xdead_beef)
        .unwrap()
        .inline(b"x")
        .unwrap()
        .finish_batch()
        .unwrap();
    qa.wqe_builder(2).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
    qa.ring_sq_doorbell();
    let c = t.a.wait(2);
    let got: Vec<_> = c.iter().map(|(c, e)| (*e, c.status.syndrome())).collect();
    assert_eq!(got, vec![(1, Some(Syndrome::RemoteAccess)), (2, Some(Syndrome::WrFlush))]);
    assert_eq!(qa.state(), mlx5::QpState::Err);
}

/// Memory windows (step 13): B binds a type-2 window over part of a region
/// registered with MW_BIND; A WRITEs and READs through it; B invalidates it
/// (LOCAL_INV), and A's next WRITE through it is a remote access error that
/// writes nothing. The same front-end code on every backend: on hardware the
/// window comes from libmlx5 (`ibv_alloc_mw`) and the UMR WQEs are ours.
pub fn rc_memory_windows<B: Backend>(mut t: Bed<B>) {
    let (qa, qb) = t.rc(false);
    let mr = t.b.pd.alloc_mr(1 << 16, AccessFlags::ALL | AccessFlags::MW_BIND).unwrap();
    let mw = t.b.pd.alloc_mw(mlx5::MkeyKind::Window2).unwrap();
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let bind = mw.bind(&mr, 0x1000, 0x1000, access).unwrap();
    qb.wqe_builder(1).unwrap().bind_mw(WqeFlags::SIGNALED, &bind).unwrap().finish().unwrap();
    let c = t.b.wait(1);
    assert_eq!((c[0].1, c[0].0.status, c[0].0.opcode), (1, Status::Success, WcOpcode::Umr));
    let data = t.a.fill(0, 256, 9);
    let (raddr, src) = (mr.addr() + 0x1800, t.a.mr.sge(0, 256).unwrap());
    let w = |e| {
        let b = qa.wqe_builder(e).unwrap().ctrl_rdma_write(WqeFlags::SIGNALED).unwrap();
        b.rdma(raddr, mw.rkey()).unwrap().sge(src).unwrap().finish().unwrap();
    };
    w(2);
    assert_eq!(t.a.wait(1)[0].0.status, Status::Success);
    let mut got = vec![0; 256];
    mr.read(0x1800, &mut got).unwrap();
    assert_eq!(got, data);
    let dst = t.a.mr.sge(0x8000, 256).unwrap();
    let b = qa.wqe_builder(3).unwrap().ctrl_rdma_read(WqeFlags::SIGNALED).unwrap();
    b.rdma(raddr, mw.rkey()).unwrap().sge(dst).unwrap().finish().unwrap();
    assert_eq!(t.a.wait(1)[0].0.status, Status::Success);
    assert_eq!(t.a.bytes(0x8000, 256), data);
    let inv = qb.wqe_builder(4).unwrap().local_inv(WqeFlags::SIGNALED | WqeFlags::SMALL_FENCE, mw.rkey());
    inv.unwrap().finish().unwrap();
    let c = t.b.wait(1);
    assert_eq!((c[0].1, c[0].0.status, c[0].0.opcode), (4, Status::Success, WcOpcode::Umr));
    t.a.fill(0, 256, 77);
    w(5);
    let c = t.a.wait(1);
    assert_eq!((c[0].1, c[0].0.status.syndrome()), (5, Some(Syndrome::RemoteAccess)));
    mr.read(0x1800, &mut got).unwrap();
    assert_eq!(got, data, "the invalidated window wrote nothing");
}

/// The PSN is given once (`QpConfig::psn`, reported by `local_info`); a
/// responder told another PSN never executes the requests, and the
/// requester's retries run out (hardware: after `retry_cnt` local ACK
/// timeouts, short ones here).
pub fn rc_psn_mismatch_is_retry_exceeded<B: Backend>(mut t: Bed<B>) {
    let cfg = |psn| QpConfig { psn, max_send_wr: 16, max_recv_wr: 16, ..QpConfig::default() };
    let qa = t.a.ctx.create_rc_qp(&t.a.pd, &t.a.cq, &t.a.cq, &cfg(0x10)).unwrap();
    let qb = t.b.ctx.create_rc_qp(&t.b.pd, &t.b.cq, &t.b.cq, &cfg(0x20)).unwrap();
    let p = ConnectParams { timeout: 8, retry_cnt: 1, ..ConnectParams::default() };
    let ia = qa.local_info().unwrap();
    assert_eq!(ia.psn, 0x10);
    qa.activate(&ConnectParams { remote: Some(qb.local_info().unwrap()), ..p.clone() }).unwrap();
    // b is told a's PSN is 0x1000: a's requests are 0xff0 behind it.
    qb.activate(&ConnectParams { remote: Some(RemoteQpInfo { psn: 0x1000, ..ia }), ..p }).unwrap();
    t.a.fill(0, 64, 4);
    for e in [1, 2] {
        qa.wqe_builder(e)
            .unwrap()
            .ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(t.b.mr.addr(), t.b.mr.rkey())
            .unwrap()
            .sge(t.a.mr.sge(0, 64).unwrap())
            .unwrap()
            .finish()
            .unwrap();
    }
    let c = t.a.wait(2);
    let got: Vec<_> = c.iter().map(|(c, e)| (*e, c.status.syndrome())).collect();
    assert_eq!(got, vec![(1, Some(Syndrome::TransportRetryExceeded)), (2, Some(Syndrome::WrFlush))]);
    assert_eq!(qa.state(), mlx5::QpState::Err);
    assert_eq!(t.b.bytes(0, 64), vec![0; 64], "the responder executed nothing");
}

pub fn ud_send_recv<B: Backend>(mut t: Bed<B>) {
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let ua = t.a.ctx.create_ud_qp(&t.a.pd, &t.a.cq, &t.a.cq, None, &cfg).unwrap();
    let ub = t.b.ctx.create_ud_qp(&t.b.pd, &t.b.cq, &t.b.cq, None, &cfg).unwrap();
    ua.activate(&ConnectParams { qkey: 0x1111_1111, ..ConnectParams::default() }).unwrap();
    ub.activate(&ConnectParams { qkey: 0x1111_1111, ..ConnectParams::default() }).unwrap();
    ub.post_recv(5, &[Sge { addr: t.b.mr.addr(), len: 4096, lkey: t.b.mr.lkey() }]).unwrap();
    let data = t.a.fill(0, 256, 9);
    let av = t.av_a_to_b();
    ua.wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .datagram(&av, ub.qpn(), 0x1111_1111)
        .unwrap()
        .sge(Sge::new(t.a.mr.addr(), 256, t.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(t.a.wait(1)[0].0.status, Status::Success);
    let r = t.b.wait(1);
    assert_eq!((r[0].1, r[0].0.byte_len, r[0].0.src_qpn), (5, 296, ua.qpn()));
    assert_eq!(t.b.bytes(40, 256), data, "payload after the 40-byte GRH slot");
}

/// A UD SEND addressed by the device's own address handle
/// (`pd.create_av`: `ibv_create_ah` on hardware, where on RoCE the kernel
/// resolves the peer's MAC): the datagram arrives, its payload after the
/// GRH slot.
pub fn ud_with_the_devices_address_handle<B: Backend>(mut t: Bed<B>) {
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpConfig::default()
    };
    let ua = t.a.ctx.create_ud_qp(&t.a.pd, &t.a.cq, &t.a.cq, None, &cfg).unwrap();
    let ub = t.b.ctx.create_ud_qp(&t.b.pd, &t.b.cq, &t.b.cq, None, &cfg).unwrap();
    ua.activate(&ConnectParams { qkey: 0x2222, ..ConnectParams::default() }).unwrap();
    ub.activate(&ConnectParams { qkey: 0x2222, ..ConnectParams::default() }).unwrap();
    let av = t.a.pd.create_av(1, &ub.local_info().unwrap()).unwrap();
    ub.post_recv(8, &[Sge { addr: t.b.mr.addr(), len: 4096, lkey: t.b.mr.lkey() }]).unwrap();
    let data = t.a.fill(0, 100, 5);
    let b = ua.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    let b = b.datagram(&av, ub.qpn(), 0x2222).unwrap();
    b.sge(Sge::new(t.a.mr.addr(), 100, t.a.mr.lkey())).unwrap().finish().unwrap();
    assert_eq!(t.a.wait(1)[0].0.status, Status::Success);
    let r = t.b.wait(1);
    assert_eq!((r[0].1, r[0].0.status, r[0].0.byte_len, r[0].0.src_qpn), (8, Status::Success, 140, ua.qpn()));
    assert_eq!(t.b.bytes(40, 100), data, "payload after the 40-byte GRH slot");
}

pub fn dc_write_and_send_through_srq<B: Backend>(mut t: Bed<B>) {
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let dci = t.a.ctx.create_dci(&t.a.pd, &t.a.cq, &cfg).unwrap();
    dci.activate(&ConnectParams::default()).unwrap();
    let dct =
        t.b.ctx
            .create_dct(&t.b.pd, &t.b.cq, &t.b.srq, &QpConfig { dc_key: 0xdc, ..QpConfig::default() })
            .unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    let n = dct.dct_number().unwrap();
    t.b.srq.post_recv(7, &[Sge { addr: t.b.mr.addr() + 0x8000, len: 1024, lkey: t.b.mr.lkey() }]).unwrap();
    let data = t.a.fill(0, 512, 4);
    let av = t.av_a_to_b();
    dci.wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .av(0xdc, n, &av)
        .unwrap()
        .rdma(t.b.mr.addr(), t.b.mr.rkey())
        .unwrap()
        .sge(Sge::new(t.a.mr.addr(), 512, t.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    dci.wqe_builder(2)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .av(0xdc, n, &av)
        .unwrap()
        .sge(Sge::new(t.a.mr.addr(), 100, t.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    assert!(t.a.wait(2).iter().all(|(c, _)| c.status == Status::Success));
    let r = t.b.wait(1);
    assert_eq!((r[0].1, r[0].0.opcode, r[0].0.byte_len, r[0].0.qpn), (7, WcOpcode::Recv, 100, n));
    assert_eq!(t.b.bytes(0, 512), data);
    assert_eq!(t.b.bytes(0x8000, 100), data[..100]);
}

pub fn srq_shared_by_two_rc_qps<B: Backend>(mut t: Bed<B>) {
    let (a1, _b1) = t.rc(true);
    let (a2, _b2) = t.rc(true);
    for e in 0..4 {
        t.b.srq
            .post_recv(e, &[Sge { addr: t.b.mr.addr() + 0x100 * e, len: 64, lkey: t.b.mr.lkey() }])
            .unwrap();
    }
    for (i, q) in [&a1, &a2, &a1, &a2].into_iter().enumerate() {
        q.wqe_builder(i as u64)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .inline(&[i as u8; 16])
            .unwrap()
            .finish()
            .unwrap();
    }
    t.a.wait(4);
    let r = t.b.wait(4);
    let mut messages: Vec<u8> = r
        .iter()
        .map(|(c, e)| {
            assert_eq!(c.status, Status::Success);
            let m = t.b.bytes(0x100 * *e as usize, 16);
            assert!(m.iter().all(|&x| x == m[0]), "entry {e} holds one whole message");
            m[0]
        })
        .collect();
    messages.sort();
    assert_eq!(
        messages,
        vec![0, 1, 2, 3],
        "every message landed in the buffer of the entry returned with it"
    );
}

/// Instantiate every scenario as a test of module `$m` on the bed `$bed`,
/// Completion side (step 5): a CQ on a completion channel, armed, woken by
/// a SEND (`wait` blocks on the channel where the device runs by itself);
/// scatter-to-CQE of a 20-byte SEND into a 64-byte CQE, copied into the
/// posted buffer; `poll_into` on the sender.
pub fn cq_events_scatter_and_poll_into<B: Backend>(t: Bed<B>) {
    let ch = t.b.ctx.create_comp_channel().unwrap();
    let mut cq = t.b.ctx.create_cq(mlx5::CqConfig::new(64).channel(&ch), |_, _: u64| {}).unwrap();
    let cfg = QpConfig { max_send_wr: 16, max_recv_wr: 16, scatter_to_cqe: true, ..QpConfig::default() };
    let qa = t.a.ctx.create_rc_qp(&t.a.pd, &t.a.cq, &t.a.cq, &cfg).unwrap();
    let qb = t.b.ctx.create_rc_qp(&t.b.pd, &cq, &cq, &cfg).unwrap();
    let p = ConnectParams::default();
    qa.activate(&ConnectParams { remote: Some(qb.local_info().unwrap()), ..p.clone() }).unwrap();
    qb.activate(&ConnectParams { remote: Some(qa.local_info().unwrap()), ..p.clone() }).unwrap();
    let msg = t.a.fill(0, 20, 3);
    qb.post_recv(7, &[Sge { addr: t.b.mr.addr() + 4096, len: 64, lkey: t.b.mr.lkey() }]).unwrap();
    cq.arm(false);
    qa.wqe_builder(1)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .sge(Sge::new(t.a.mr.addr(), 20, t.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    let out = cq.wait(16, Some(DEADLINE)).unwrap();
    assert_eq!(out.completions, 1);
    assert_eq!(t.b.bytes(4096, 20), msg, "the data is in the receive buffer either way");
    let mut wcs = [(Completion::default(), 0u64); 4];
    let t0 = Instant::now();
    let mut n = 0;
    while n == 0 {
        n = t.a.cq.poll_into(&mut wcs).completions;
        assert!(t0.elapsed() < DEADLINE);
    }
    assert_eq!((n, wcs[0].1, wcs[0].0.opcode, wcs[0].0.status), (1, 1, WcOpcode::Send, Status::Success));
    drop(qb);
    drop(cq);
}

/// Poll `cq` until `n` completions arrived (bounded by the deadline).
fn drain<B: Backend>(cq: &mut CompletionQueue<B, u64>, n: usize) -> Vec<(Completion, u64)> {
    let mut v = Vec::new();
    let t0 = Instant::now();
    while v.len() < n {
        cq.poll_with(64, |c, e| v.push((c, e)));
        assert!(t0.elapsed() < DEADLINE, "waited for {n} completions, got {v:?}");
    }
    v
}

impl<B: Backend> Bed<B> {
    /// A connected RC pair: a's QP on `acq`, b's on `bcq` (send and receive).
    pub fn rc_on(
        &self,
        acq: &impl AsCq<B, u64>,
        bcq: &impl AsCq<B, u64>,
        cfg: &QpConfig,
    ) -> (RcQp<B, u64>, RcQp<B, u64>) {
        let qa = self.a.ctx.create_rc_qp(&self.a.pd, acq, acq, cfg).unwrap();
        let qb = self.b.ctx.create_rc_qp(&self.b.pd, bcq, bcq, cfg).unwrap();
        let p = ConnectParams::default();
        qa.activate(&ConnectParams { remote: Some(qb.local_info().unwrap()), ..p.clone() }).unwrap();
        qb.activate(&ConnectParams { remote: Some(qa.local_info().unwrap()), ..p.clone() }).unwrap();
        (qa, qb)
    }
}

/// CQE compression on both ends of a burst of SENDs (requester and
/// responder sessions, hash format): every completion arrives once, in
/// order, with its own entry, opcode and byte count, exactly as without
/// compression. Then 128-byte CQEs with scatter-to-CQE of a 60-byte SEND.
pub fn cq_compression_and_128_byte_cqes<B: Backend>(t: Bed<B>) {
    const N: u64 = 48;
    let mut acq =
        t.a.ctx.create_cq(CqConfig::new(256).compressed(MiniCqeFormat::Hash), |_, _: u64| {}).unwrap();
    let mut bcq =
        t.b.ctx.create_cq(CqConfig::new(256).compressed(MiniCqeFormat::Hash), |_, _: u64| {}).unwrap();
    let cfg = QpConfig { max_send_wr: 64, max_recv_wr: 64, ..QpConfig::default() };
    let (qa, qb) = t.rc_on(&acq, &bcq, &cfg);
    t.a.fill(0, 4096, 9);
    for i in 0..N {
        qb.post_recv(100 + i, &[Sge { addr: t.b.mr.addr() + i * 256, len: 256, lkey: t.b.mr.lkey() }])
            .unwrap();
    }
    for i in 0..N {
        let len = 1 + 5 * i as u32;
        let b = qa.wqe_builder(i).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
        b.sge(Sge::new(t.a.mr.addr() + i * 64, len, t.a.mr.lkey())).unwrap().finish().unwrap();
    }
    let sent: Vec<_> = drain(&mut acq, N as usize).iter().map(|(c, e)| (*e, c.opcode, c.status)).collect();
    assert_eq!(sent, (0..N).map(|i| (i, WcOpcode::Send, Status::Success)).collect::<Vec<_>>());
    let got: Vec<_> =
        drain(&mut bcq, N as usize).iter().map(|(c, e)| (*e, c.opcode, c.byte_len, c.status)).collect();
    let want: Vec<_> = (0..N).map(|i| (100 + i, WcOpcode::Recv, 1 + 5 * i as u32, Status::Success)).collect();
    assert_eq!(got, want);
    for i in [0, 7, N - 1] {
        let len = 1 + 5 * i as usize;
        assert_eq!(t.b.bytes(i as usize * 256, len), t.a.bytes(i as usize * 64, len), "SEND {i}");
    }
    drop((qa, qb));

    let mut big = t.b.ctx.create_cq(CqConfig::new(16).cqe_size(CqeSize::B128), |_, _: u64| {}).unwrap();
    let cfg = QpConfig { max_send_wr: 16, max_recv_wr: 16, scatter_to_cqe: true, ..QpConfig::default() };
    let (qa, qb) = t.rc_on(&t.a.cq, &big, &cfg);
    let msg = t.a.fill(0x8000, 60, 1);
    qb.post_recv(5, &[Sge { addr: t.b.mr.addr() + 0x8000, len: 64, lkey: t.b.mr.lkey() }]).unwrap();
    let b = qa.wqe_builder(6).unwrap().ctrl_send(WqeFlags::NONE).unwrap();
    b.sge(Sge::new(t.a.mr.addr() + 0x8000, 60, t.a.mr.lkey())).unwrap().finish().unwrap();
    let r = drain(&mut big, 1);
    assert_eq!(
        (r[0].1, r[0].0.opcode, r[0].0.byte_len, r[0].0.status),
        (5, WcOpcode::Recv, 60, Status::Success)
    );
    if let Some(s) = &r[0].0.scattered {
        assert_eq!(s.data(), &msg[..], "scattered into the first half of the 128-byte CQE");
    }
    assert_eq!(t.b.bytes(0x8000, 60), msg, "and handed over in the posted buffer");
    drop((qa, qb));
}

/// A CQ that gets more CQEs than it holds (nobody polls it) is put in error
/// by the device: `check` and `wait` report `Error::CqOverrun`, the context
/// reports the async CQ error, and what fitted before the overrun is still
/// delivered.
pub fn cq_overrun_is_reported<B: Backend>(t: Bed<B>) {
    let mut cq = t.a.ctx.create_cq(3, |_, _: u64| {}).unwrap();
    let slots = u64::from(cq.capacity());
    let cfg = QpConfig { max_send_wr: 64, max_recv_wr: 16, ..QpConfig::default() };
    let (qa, _qb) = t.rc_on(&cq, &t.b.cq, &cfg);
    for e in 0..slots + 2 {
        qa.wqe_builder(e).unwrap().ctrl_nop(WqeFlags::SIGNALED).unwrap().finish().unwrap();
    }
    let t0 = Instant::now();
    // No poll until the device reported it (a poll would free slots).
    loop {
        match cq.check() {
            Err(Error::CqOverrun { cqn }) => {
                assert_eq!(cqn, cq.cqn());
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(()) => {
                // Drive a deterministic device (no-op elsewhere).
                let _ = cq.wait(0, Some(Duration::from_millis(1)));
                assert!(t0.elapsed() < DEADLINE, "no overrun reported");
            }
        }
    }
    let mut events = Vec::new();
    while let Some(e) = t.a.ctx.async_event().unwrap() {
        events.push(e);
    }
    assert!(events.contains(&AsyncEvent::CqError { cqn: cq.cqn() }), "{events:?}");
    assert!(matches!(cq.wait(16, Some(Duration::from_millis(10))), Err(Error::CqOverrun { .. }) | Ok(_)));
    let mut seen = Vec::new();
    cq.poll_with(64, |_, e| seen.push(e));
    assert!(seen.len() as u64 <= slots && seen.iter().enumerate().all(|(i, &e)| e == i as u64), "{seen:?}");
    assert!(matches!(cq.wait(16, Some(Duration::from_millis(10))), Err(Error::CqOverrun { .. })));
}

macro_rules! conformance_suite {
    ($m:ident, $bed:expr $(, #[$attr:meta])* $(; dc: #[$dc:meta])* $(,)?) => {
        mod $m {
            use super::*;
            $(#[$attr])* #[test] fn rc_write_and_read() { scenarios::rc_write_and_read($bed) }
            $(#[$attr])* #[test] fn rc_send_and_write_with_immediate() { scenarios::rc_send_and_write_with_immediate($bed) }
            $(#[$attr])* #[test] fn rc_atomics() { scenarios::rc_atomics($bed) }
            $(#[$attr])* #[test] fn rc_remote_access_error_then_flush() { scenarios::rc_remote_access_error_then_flush($bed) }
            $(#[$attr])* #[test] fn rc_memory_windows() { scenarios::rc_memory_windows($bed) }
            $(#[$attr])* #[test] fn rc_psn_mismatch_is_retry_exceeded() { scenarios::rc_psn_mismatch_is_retry_exceeded($bed) }
            $(#[$attr])* #[test] fn ud_send_recv() { scenarios::ud_send_recv($bed) }
            $(#[$attr])* #[test] fn ud_with_the_devices_address_handle() { scenarios::ud_with_the_devices_address_handle($bed) }
            $(#[$attr])* $(#[$dc])* #[test] fn dc_write_and_send_through_srq() { scenarios::dc_write_and_send_through_srq($bed) }
            $(#[$attr])* #[test] fn srq_shared_by_two_rc_qps() { scenarios::srq_shared_by_two_rc_qps($bed) }
            $(#[$attr])* #[test] fn cq_events_scatter_and_poll_into() { scenarios::cq_events_scatter_and_poll_into($bed) }
            $(#[$attr])* #[test] fn cq_compression_and_128_byte_cqes() { scenarios::cq_compression_and_128_byte_cqes($bed) }
            $(#[$attr])* #[test] fn cq_overrun_is_reported() { scenarios::cq_overrun_is_reported($bed) }
        }
    };
}

/// The differential scenario (step 10): one script of RC WRITE / READ /
/// SEND with immediate / WRITE with immediate / both atomics, UD SEND, DC
/// WRITE and SEND through an SRQ, and a remote access error with the flush
/// after it; its transcript is every completion (which end, wr_id, status,
/// opcode, byte count, immediate, WQE counter, flags) in order and a hash of
/// each 64 KiB of both MRs at the end. What differs by nature between two
/// beds (QP numbers, LIDs, time stamps, addresses) is left out. The same
/// transcript from the simulator backend and from the hardware backend on
/// the emulated device means the same completions and the same memory.
pub fn differential_transcript<B: Backend>(mut t: Bed<B>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut log = |side: &str, c: &[(Completion, u64)]| {
        for (c, e) in c {
            let _ = writeln!(
                out,
                "{side} wr={e} {:?} {:?} len={} imm={:?} wqe={} solicited={} grh={}",
                c.status, c.opcode, c.byte_len, c.imm, c.wqe_counter, c.solicited, c.grh
            );
        }
    };
    // RC.
    let (qa, qb) = t.rc(false);
    let data = t.a.fill(0, 8192, 1);
    t.b.fill(0x10000, 4096, 2);
    t.b.mr.write(0x48000, &10u64.to_ne_bytes()).unwrap();
    let (la, lk, rb, rk) = (t.a.mr.addr(), t.a.mr.lkey(), t.b.mr.addr(), t.b.mr.rkey());
    qb.post_recv(10, &[Sge { addr: rb + 0x30000, len: 1024, lkey: t.b.mr.lkey() }]).unwrap();
    qb.post_recv(11, &[Sge { addr: rb + 0x31000, len: 1024, lkey: t.b.mr.lkey() }]).unwrap();
    let b = qa.wqe_builder(1).unwrap().ctrl_rdma_write(WqeFlags::NONE).unwrap();
    b.rdma(rb, rk).unwrap().sge(Sge::new(la, 8192, lk)).unwrap().finish().unwrap();
    let b = qa.wqe_builder(2).unwrap().ctrl_rdma_read(WqeFlags::SIGNALED).unwrap();
    b.rdma(rb + 0x10000, rk).unwrap().sge(Sge::new(la + 0x20000, 4096, lk)).unwrap().finish().unwrap();
    let b = qa.wqe_builder(3).unwrap().ctrl_send_imm(WqeFlags::SIGNALED, 0xabcd).unwrap();
    b.sge(Sge::new(la, 300, lk)).unwrap().finish().unwrap();
    let b = qa.wqe_builder(4).unwrap().ctrl_rdma_write_imm(WqeFlags::SIGNALED, 0x1234).unwrap();
    b.rdma(rb + 0x32000, rk).unwrap().inline(b"inline bytes").unwrap().finish_with_blueflame().unwrap();
    let b = qa.wqe_builder(5).unwrap().ctrl_atomic_fa(WqeFlags::SIGNALED, 5).unwrap();
    b.rdma(rb + 0x48000, rk).unwrap().result(Sge::new(la + 0x50000, 8, lk)).unwrap().finish().unwrap();
    let b = qa.wqe_builder(6).unwrap().ctrl_atomic_cs(WqeFlags::SIGNALED, 99, 15).unwrap();
    b.rdma(rb + 0x48000, rk).unwrap().result(Sge::new(la + 0x50008, 8, lk)).unwrap().finish().unwrap();
    let c = t.a.wait(5);
    log("rc a", &c);
    let c = t.b.wait(2);
    log("rc b", &c);
    assert!(t.b.bytes(0, 8192) == data, "the WRITE landed");
    // UD.
    let cfg = QpConfig {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
        ..QpConfig::default()
    };
    let ua = t.a.ctx.create_ud_qp(&t.a.pd, &t.a.cq, &t.a.cq, None, &cfg).unwrap();
    let ub = t.b.ctx.create_ud_qp(&t.b.pd, &t.b.cq, &t.b.cq, None, &cfg).unwrap();
    ua.activate(&ConnectParams { qkey: 0x1111_1111, ..ConnectParams::default() }).unwrap();
    ub.activate(&ConnectParams { qkey: 0x1111_1111, ..ConnectParams::default() }).unwrap();
    ub.post_recv(20, &[Sge { addr: rb + 0x60000, len: 4096, lkey: t.b.mr.lkey() }]).unwrap();
    t.a.fill(0x70000, 256, 9);
    let av = t.av_a_to_b();
    let b = ua.wqe_builder(21).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    let b = b.datagram(&av, ub.qpn(), 0x1111_1111).unwrap();
    b.sge(Sge::new(la + 0x70000, 256, lk)).unwrap().finish().unwrap();
    let c = t.a.wait(1);
    log("ud a", &c);
    let c = t.b.wait(1);
    log("ud b", &c);
    // DC through an SRQ.
    let dcfg = QpConfig { max_recv_wr: 0, max_recv_sge: 0, ..cfg };
    let dci = t.a.ctx.create_dci(&t.a.pd, &t.a.cq, &dcfg).unwrap();
    dci.activate(&ConnectParams::default()).unwrap();
    let dct =
        t.b.ctx.create_dct(&t.b.pd, &t.b.cq, &t.b.srq, &QpConfig { dc_key: 0xdc, ..QpConfig::default() });
    let dct = dct.unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    let n = dct.dct_number().unwrap();
    t.b.srq.post_recv(30, &[Sge { addr: rb + 0x80000, len: 1024, lkey: t.b.mr.lkey() }]).unwrap();
    let b = dci.wqe_builder(31).unwrap().ctrl_rdma_write(WqeFlags::SIGNALED).unwrap();
    let b = b.av(0xdc, n, &av).unwrap().rdma(rb + 0x90000, rk).unwrap();
    b.sge(Sge::new(la, 512, lk)).unwrap().finish().unwrap();
    let b = dci.wqe_builder(32).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap();
    b.av(0xdc, n, &av).unwrap().sge(Sge::new(la, 100, lk)).unwrap().finish().unwrap();
    let c = t.a.wait(2);
    log("dc a", &c);
    let c = t.b.wait(1);
    log("dc b", &c);
    // A remote access error, then the WQE after it flushed.
    let (qe, _qf) = t.rc(false);
    let b = qe.wqe_builder(40).unwrap().ctrl_rdma_write(WqeFlags::NONE).unwrap();
    b.rdma(rb, 0xdead_beef).unwrap().inline(b"x").unwrap().finish_batch().unwrap();
    qe.wqe_builder(41).unwrap().ctrl_nop(WqeFlags::NONE).unwrap().finish_batch().unwrap();
    qe.ring_sq_doorbell();
    let c = t.a.wait(2);
    for (c, e) in &c {
        let _ = writeln!(out, "err a wr={e} {:?} {:?}", c.status.syndrome(), c.opcode);
    }
    // Memory: a hash per 64 KiB of each MR (FNV-1a).
    for (side, end) in [("a", &t.a), ("b", &t.b)] {
        let bytes = end.bytes(0, MR_LEN);
        for (i, block) in bytes.chunks(1 << 16).enumerate() {
            let h = block
                .iter()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3));
            let _ = writeln!(out, "mem {side} {i:2} {h:016x}");
        }
    }
    out
}
