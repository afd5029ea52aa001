//! The measurement loops, generic over the backend: one endpoint per side
//! (context, PD, one CQ, QPs, one MR laid out as `[source | landing]`),
//! latency ping-pongs and bandwidth streams as perftest runs them.

use std::time::{Duration, Instant};

use mlx5_api::{
    AccessFlags, AddressVector, Backend, CompletionQueue, ConnectParams, Context, Dci, Dct, Device,
    MemoryRegion, PortInfo, ProtectionDomain, QpConfig, RcQp, RemoteQpInfo, Sge, SharedReceiveQueue, Status,
    UdQp, WqeFlags, DEFAULT_QKEY,
};

use crate::opts::{AtomicType, Config, Connection, Verb};

/// Why a run stopped.
pub type RunResult<T> = Result<T, String>;

/// perftest's DC access key (`DC_KEY` in `perftest_resources.c`).
pub const DC_KEY: u64 = 0xffee_ddcc;

/// The bytes a UD receive needs before the data: the GRH slot.
pub const UD_GRH: u64 = 40;

/// The length of every receive: the run's largest message (UD: plus the
/// GRH slot), so that receives left over from one size fit the next.
pub fn recv_len(c: &Config) -> u64 {
    let max = c.sizes.iter().copied().max().unwrap_or(8);
    max + if c.connection == Connection::Ud { UD_GRH } else { 0 }
}

/// perftest's `cycle_buffer` (the page size): a perftest bandwidth client writes
/// messages of up to half of it at successive cache lines of the buffer it was
/// given, wrapping at this many bytes.
pub const PERFTEST_CYCLE_BUFFER: u64 = 4096;

/// The landing area starts this far into the MR; the source area before it
/// (UD receives land their 40-byte GRH slot first). With `--perftest_exchange`
/// it holds perftest's whole cycle buffer past the largest message.
pub fn half(c: &Config) -> u64 {
    let least = if c.opts.perftest_exchange { 2 * PERFTEST_CYCLE_BUFFER } else { 64 };
    recv_len(c).max(least).next_power_of_two()
}

/// One of the test's QPs, by transport.
#[derive(Debug)]
pub enum TestQp<B: Backend> {
    /// Reliable connected.
    Rc(RcQp<B, u64>),
    /// Unreliable datagram: each WQE carries the peer's address.
    Ud(UdQp<B, u64>),
    /// Dynamically connected: a DCI sends, a DCT (on the SRQ) answers.
    Dc {
        /// Initiator.
        dci: Dci<B, u64>,
        /// Target the peer's DCI addresses.
        dct: Dct<B, u64>,
    },
}

/// Dispatch to the sending half of a [`TestQp`].
macro_rules! sender {
    ($q:expr, $s:ident => $e:expr) => {
        match $q {
            TestQp::Rc($s) => $e,
            TestQp::Ud($s) => $e,
            TestQp::Dc { dci: $s, .. } => $e,
        }
    };
}

impl<B: Backend> TestQp<B> {
    /// What the peer needs to reach this QP: for DC, the DCT (its number
    /// as the QPN) with the DCI's start PSN.
    pub fn info(&self) -> RunResult<RemoteQpInfo> {
        match self {
            TestQp::Dc { dci, dct } => {
                let psn = dci.local_info().map_err(e("QP info"))?.psn;
                Ok(RemoteQpInfo { psn, ..dct.local_info().map_err(e("DCT info"))? })
            }
            q => sender!(q, q => q.local_info().map_err(e("QP info"))),
        }
    }
    pub(crate) fn sq_free(&self) -> u32 {
        sender!(self, q => q.sq_free())
    }
    pub(crate) fn sq_wqebbs(&self) -> u32 {
        sender!(self, q => q.sq_wqebbs())
    }
    fn ring(&self) {
        sender!(self, q => q.ring_sq_doorbell())
    }
}

/// Where a UD or DC QP sends: the peer's address and its QPN (UD) or DCT
/// number (DC).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The encoded path to the peer.
    pub av: AddressVector,
    /// Destination QPN or DCT number.
    pub qpn: u32,
}

/// One side of a test.
#[derive(Debug)]
pub struct End<B: Backend> {
    /// The test's QPs.
    pub qps: Vec<TestQp<B>>,
    /// UD and DC: where QP `i` sends (set by `connect`).
    pub peers: Vec<Peer>,
    /// DC: the SRQ under the DCTs.
    pub srq: Option<SharedReceiveQueue<B, u64>>,
    /// One CQ for sends and receives.
    pub cq: CompletionQueue<B, u64>,
    /// Source and sink memory.
    pub mr: MemoryRegion<B>,
    /// The port the QPs use.
    pub port: PortInfo,
    /// `-e`: what the CQ's callback was given, and its completion channel.
    events: Events,
    _channel: Option<mlx5_api::CompChannel<B>>,
    _pd: ProtectionDomain<B>,
    /// The opened device.
    pub ctx: Context<B>,
}

/// What the CQ's callback was given (`-e`, where the CQ is waited on).
type Events = std::rc::Rc<std::cell::RefCell<Vec<(mlx5_api::Completion, u64)>>>;

/// Where the peer's memory is (exchanged with the QP information).
#[derive(Debug, Clone, Copy)]
pub struct Remote {
    /// Virtual address of the peer's buffer.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
}

fn e<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("{what}: {err}")
}

/// A failed post, as one line.
fn p<T>(r: mlx5_api::Result<T>) -> RunResult<T> {
    r.map_err(e("post"))
}

/// A start PSN for QP `i`: 24 random-looking bits, as perftest draws them
/// (`lrand48() & 0xffffff`), from the time and the process id.
fn start_psn(i: u32) -> u32 {
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let x = (u64::from(t) ^ u64::from(std::process::id()) << 20 ^ u64::from(i))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 40) as u32 & 0xff_ffff
}

/// The connection attributes of the test: the MTU (`-m`, else the port's,
/// perftest's default), the ACK timeout (`-u`), the READ/atomic depth
/// (`-o`), the service level (`-S`), RC's peer.
fn params(c: &Config, port: &PortInfo, peer: Option<RemoteQpInfo>) -> ConnectParams {
    let d = ConnectParams::default();
    let outs = c.out_reads.map_or(d.max_rd_atomic, |o| o.min(255) as u8);
    ConnectParams {
        remote: peer,
        path_mtu: c.path_mtu(port.active_mtu),
        timeout: c.opts.qp_timeout.unwrap_or(d.timeout),
        max_rd_atomic: outs,
        max_dest_rd_atomic: outs,
        sl: c.opts.sl.unwrap_or(0),
        ..d
    }
}

impl<B: Backend> End<B> {
    /// Open `dev` and create the test's objects. UD and DC QPs are brought
    /// up here (they need no peer); RC QPs in [`End::connect`].
    pub fn new(dev: &Device<B>, c: &Config) -> RunResult<Self> {
        let ctx = dev.open().map_err(e("open device"))?;
        let port = ctx.query_port(c.opts.ib_port).map_err(e("query port"))?;
        if let Some(g) = c.opts.gid_index {
            if port.link_layer != mlx5_api::LinkLayer::Ethernet || g != port.sgid_index {
                return Err(format!(
                    "-x {g}: this library sends from the port's RoCE v2 GID (index {} here); another index is not supported yet",
                    port.sgid_index
                ));
            }
        }
        let pd = ctx.alloc_pd().map_err(e("alloc PD"))?;
        let want = (c.tx_depth * c.qps + c.rx_depth * c.qps + 64).next_power_of_two();
        let cqe = want.min(ctx.caps().max_cqe.max(64));
        // -e: the CQ on a completion channel, and a callback that keeps what
        // it is given (the wait dispatches through it).
        let events: Events = Default::default();
        let (cq, channel) = if c.opts.events {
            let ch = ctx.create_comp_channel().map_err(e("create completion channel"))?;
            let seen = events.clone();
            let cq = ctx
                .create_cq(
                    mlx5_api::CqConfig::new(cqe).channel(&ch),
                    move |wc: mlx5_api::Completion, entry: u64| seen.borrow_mut().push((wc, entry)),
                )
                .map_err(e("create CQ"))?;
            (cq, Some(ch))
        } else {
            (ctx.create_cq(cqe, |_, _: u64| {}).map_err(e("create CQ"))?, None)
        };
        let cfg = QpConfig {
            max_send_wr: c.tx_depth.max(2),
            max_recv_wr: if c.verb == Verb::Send { c.rx_depth } else { 1 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: c.inline_size,
            port: c.opts.ib_port,
            dc_key: DC_KEY,
            ..QpConfig::default()
        };
        let srq = match c.connection {
            Connection::Rc | Connection::Ud if c.opts.use_srq => {
                // --use-srq: the receives of every QP from one SRQ of
                // --rx-depth entries (perftest's meaning).
                let n = c.rx_depth.min(ctx.caps().max_qp_wr);
                Some(ctx.create_srq(&pd, n, 1).map_err(e("create SRQ"))?)
            }
            Connection::Dc => {
                let n = (c.rx_depth * c.qps).min(ctx.caps().max_qp_wr);
                Some(ctx.create_srq(&pd, n, 1).map_err(e("create SRQ"))?)
            }
            _ => None,
        };
        let up = params(c, &port, None);
        let mut qps = Vec::new();
        for i in 0..c.qps {
            let cfg = QpConfig { psn: start_psn(i), ..cfg.clone() };
            qps.push(match (c.connection, &srq) {
                (Connection::Rc, None) => {
                    TestQp::Rc(ctx.create_rc_qp(&pd, &cq, &cq, &cfg).map_err(e("create QP"))?)
                }
                (Connection::Rc, Some(srq)) => {
                    TestQp::Rc(ctx.create_rc_qp_with_srq(&pd, &cq, &cq, srq, &cfg).map_err(e("create QP"))?)
                }
                (Connection::Ud, srq) => {
                    let q = ctx.create_ud_qp(&pd, &cq, &cq, srq.as_ref(), &cfg).map_err(e("create UD QP"))?;
                    q.activate(&up).map_err(e("activate UD QP"))?;
                    TestQp::Ud(q)
                }
                (Connection::Dc, Some(srq)) => {
                    let dci = ctx.create_dci(&pd, &cq, &cfg).map_err(e("create DCI"))?;
                    let dct = ctx.create_dct(&pd, &cq, srq, &cfg).map_err(e("create DCT"))?;
                    dci.activate(&up).map_err(e("activate DCI"))?;
                    dct.activate(&up).map_err(e("activate DCT"))?;
                    TestQp::Dc { dci, dct }
                }
                (Connection::Dc, None) => return Err("DC needs its SRQ".into()),
            });
        }
        let mr = pd.alloc_mr(2 * half(c) as usize, AccessFlags::ALL).map_err(e("register memory"))?;
        let src: Vec<u8> = (0..half(c)).map(|i| (i * 7 + 1) as u8).collect();
        mr.write(0, &src).map_err(e("fill"))?;
        Ok(End { qps, peers: Vec::new(), srq, cq, events, _channel: channel, mr, port, _pd: pd, ctx })
    }

    /// What the peer needs to reach each QP.
    pub fn infos(&self) -> RunResult<Vec<RemoteQpInfo>> {
        self.qps.iter().map(TestQp::info).collect()
    }

    /// RC: bring every QP up towards its peer. UD and DC: remember where
    /// each QP sends.
    pub fn connect(&mut self, c: &Config, peers: &[RemoteQpInfo]) -> RunResult<()> {
        if peers.len() != self.qps.len() {
            return Err(format!("the peer has {} QPs, this side {}", peers.len(), self.qps.len()));
        }
        self.peers.clear();
        for (q, p) in self.qps.iter().zip(peers) {
            match q {
                TestQp::Rc(q) => q.activate(&params(c, &self.port, Some(p.clone()))).map_err(e("connect"))?,
                TestQp::Ud(_) | TestQp::Dc { .. } => {
                    // The device's own address handle: on RoCE the kernel resolves
                    // the next hop's MAC (a router's across subnets). With -S,
                    // the address built here, with that service level.
                    let av = match c.opts.sl {
                        Some(sl) if sl != 0 => AddressVector::to_peer(&self.port, p, sl),
                        _ => self._pd.create_av(self.port.port_num, p),
                    }
                    .map_err(e("peer address"))?;
                    self.peers.push(Peer { av, qpn: p.qpn });
                }
            }
        }
        Ok(())
    }

    /// The largest message QP 0 can send in one WQE (UD: the path MTU).
    pub fn max_message(&self) -> u32 {
        sender!(&self.qps[0], q => q.max_message())
    }

    /// The connection line of QP 0.
    pub fn dest(&self) -> RunResult<crate::report::Dest> {
        Ok(self.dests()?.swap_remove(0))
    }

    /// The connection line of every QP (perftest prints one per QP).
    pub fn dests(&self) -> RunResult<Vec<crate::report::Dest>> {
        self.qps
            .iter()
            .map(|q| {
                let i = q.info()?;
                Ok(crate::report::Dest {
                    lid: i.lid,
                    qpn: i.qpn,
                    psn: i.psn,
                    rkey: self.mr.rkey(),
                    vaddr: self.mr.addr(),
                    gid: self.port.gid.0,
                })
            })
            .collect()
    }

    /// Poll, and return the QP index of each receive that completed (its
    /// entry, see `post_recv`), to be reposted.
    pub fn take_receives(&mut self) -> RunResult<Vec<usize>> {
        let mut qps = Vec::new();
        self.poll(|entry, recv| {
            if recv {
                qps.push(entry as usize);
            }
        })?;
        Ok(qps)
    }

    /// Where the peer may write and read (our MR).
    pub fn remote(&self) -> Remote {
        Remote { addr: self.mr.addr(), rkey: self.mr.rkey() }
    }

    /// Poll completions: each success to `f` (entry, is_recv); an error
    /// completion stops the run with its status.
    pub fn poll(&mut self, mut f: impl FnMut(u64, bool)) -> RunResult<u32> {
        let mut bad = None;
        let mut n = 0;
        let mut take = |c: mlx5_api::Completion, entry: u64| {
            n += 1;
            if c.status != Status::Success {
                bad.get_or_insert(format!("completion error: {:?} (opcode {:?})", c.status, c.opcode));
            }
            f(entry, c.opcode.is_recv());
        };
        if self._channel.is_some() {
            // -e: when the CQ is empty, arm it and sleep on the channel (a
            // millisecond at most: the caller's loop has other work).
            if self.cq.poll(64).consumed() == 0 {
                match self.cq.wait(64, Some(Duration::from_millis(1))) {
                    Ok(_) | Err(mlx5_api::Error::Timeout) => {}
                    Err(err) => return Err(format!("waiting for a completion event: {err}")),
                }
            }
            for (c, entry) in self.events.take() {
                take(c, entry);
            }
        } else {
            self.cq.poll_with(64, take);
        }
        bad.map_or(Ok(n), Err)
    }

    /// Post one receive for QP `qp` into the landing area, of the run's
    /// [`recv_len`] (UD: the GRH slot first; DC: on the SRQ).
    pub fn post_recv(&self, c: &Config, qp: usize) -> RunResult<()> {
        let sge = [Sge::new(self.mr.addr() + half(c), recv_len(c) as u32, self.mr.lkey())];
        // The receive's entry is its QP's index: reposted where it completed.
        let r = match (&self.qps[qp], &self.srq) {
            (_, Some(srq)) => srq.post_recv(qp as u64, &sge),
            (TestQp::Rc(q), None) => q.post_recv(qp as u64, &sge),
            (TestQp::Ud(q), None) => q.post_recv(qp as u64, &sge),
            (TestQp::Dc { .. }, None) => return Err("DC without an SRQ".into()),
        };
        r.map_err(e("post receive"))
    }

    /// Post receives until each QP has `per_qp` outstanding (DC: until the
    /// SRQ holds `per_qp` for each QP, at most its capacity). Receives left
    /// from an earlier message size count: they have the run's length.
    pub fn top_up(&self, c: &Config, per_qp: u32) -> RunResult<()> {
        match &self.srq {
            Some(srq) => {
                let want = (per_qp * self.qps.len() as u32).min(srq.capacity());
                while srq.outstanding() < want {
                    self.post_recv(c, 0)?;
                }
            }
            None => {
                for (i, q) in self.qps.iter().enumerate() {
                    let outstanding = || match q {
                        TestQp::Rc(q) => q.rq_outstanding(),
                        TestQp::Ud(q) => q.rq_outstanding(),
                        TestQp::Dc { .. } => per_qp,
                    };
                    while outstanding() < per_qp {
                        self.post_recv(c, i)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Post one operation of `size` bytes to the peer (`batch`: no doorbell).
    #[allow(clippy::too_many_arguments)]
    pub fn post(
        &self,
        c: &Config,
        qp: usize,
        size: u64,
        peer: Remote,
        entry: u64,
        signaled: bool,
        batch: bool,
    ) -> RunResult<()> {
        let flags = if signaled { WqeFlags::SIGNALED } else { WqeFlags::NONE };
        let (la, lk) = (self.mr.addr(), self.mr.lkey());
        let h = half(c);
        let inline = size <= u64::from(c.inline_size);
        let mut buf = [0u8; 1024];
        if inline {
            self.mr.read(0, &mut buf[..size as usize]).map_err(e("read source"))?;
        }
        let to = self.peers.get(qp).copied();
        let dest = || to.ok_or_else(|| "post before connect".to_string());
        // The control segment, then (DC) the DCT's address: from here on
        // an RC and a DC WQE are built alike.
        macro_rules! ctrl {
            ($($call:tt)*) => {
                match &self.qps[qp] {
                    TestQp::Rc(q) => p(q.wqe_builder(entry))?.$($call)*,
                    TestQp::Dc { dci, .. } => {
                        let d = dest()?;
                        p(p(dci.wqe_builder(entry))?.$($call)*)?.av(DC_KEY, d.qpn, &d.av)
                    }
                    TestQp::Ud(_) => return Err(format!("{:?} is not offered on UD", c.verb)),
                }
            };
        }
        macro_rules! fin {
            ($b:expr) => {
                p(if batch { $b.finish_batch() } else { $b.finish() })
            };
        }
        match c.verb {
            Verb::Write => {
                let b = p(p(ctrl!(ctrl_rdma_write(flags)))?.rdma(peer.addr + h, peer.rkey))?;
                if inline {
                    fin!(p(b.inline(&buf[..size as usize]))?)
                } else {
                    fin!(p(b.sge(Sge::new(la, size as u32, lk)))?)
                }
            }
            Verb::Send => {
                let b = match &self.qps[qp] {
                    TestQp::Ud(q) => {
                        let d = dest()?;
                        p(p(p(q.wqe_builder(entry))?.ctrl_send(flags))?.datagram(&d.av, d.qpn, DEFAULT_QKEY))?
                    }
                    _ => p(ctrl!(ctrl_send(flags)))?,
                };
                if inline {
                    fin!(p(b.inline(&buf[..size as usize]))?)
                } else {
                    fin!(p(b.sge(Sge::new(la, size as u32, lk)))?)
                }
            }
            Verb::Read => {
                let b = p(p(ctrl!(ctrl_rdma_read(flags)))?.rdma(peer.addr, peer.rkey))?;
                fin!(p(b.sge(Sge::new(la + h, size as u32, lk)))?)
            }
            Verb::Atomic => {
                let b = match c.atomic_type {
                    AtomicType::FetchAndAdd => p(ctrl!(ctrl_atomic_fa(flags, 1)))?,
                    AtomicType::CmpAndSwap => p(ctrl!(ctrl_atomic_cs(flags, entry + 1, entry)))?,
                };
                let b = p(b.rdma(peer.addr + h, peer.rkey))?;
                fin!(p(b.result(Sge::new(la + h + 8, 8, lk)))?)
            }
        }
    }

    /// The device's asynchronous events since the last look: a port that went
    /// down, a fatal device error or an object in error end the run with that
    /// reason instead of a wait until the deadline.
    pub fn alive(&self) -> RunResult<()> {
        use mlx5_api::AsyncEvent as A;
        while let Some(ev) = self.ctx.async_event().map_err(e("async event"))? {
            match ev {
                A::PortError { port } => return Err(format!("port {port} went down")),
                A::DeviceFatal => return Err("the device reported a fatal error".into()),
                A::CqError { cqn } => return Err(format!("CQ 0x{cqn:x} is in error (overrun)")),
                A::QpFatal { qpn } | A::QpRequestError { qpn } | A::QpAccessError { qpn } => {
                    return Err(format!("QP 0x{qpn:x} failed ({ev:?})"))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Ring QP `qp`'s doorbell for WQEs posted in a batch.
    pub fn ring(&self, qp: usize) {
        self.qps[qp].ring();
    }

    /// Wait until every WQE posted on every QP has completed (its last one
    /// signaled): a process that exits or destroys its QPs with WQEs still in
    /// flight loses them, where perftest, its peer, waits for each one.
    pub fn settle(&mut self) -> RunResult<()> {
        let t0 = Instant::now();
        while self.qps.iter().any(|q| q.sq_free() < q.sq_wqebbs()) {
            self.poll(|_, _| {})?;
            deadline_check(self, t0, "waiting for this side's last completions")?;
        }
        Ok(())
    }

    /// Whether QP 0's send queue has room for another latency iteration.
    pub fn sq_roomy(&self) -> bool {
        let q = &self.qps[0];
        q.sq_free() >= 2 * q.sq_wqebbs() / 3
    }

    /// The last byte of the landing area for `size` (write latency polls it).
    pub fn landed(&self, c: &Config, size: u64) -> u8 {
        let mut b = [0u8];
        let _ = self.mr.read((half(c) + size - 1) as usize, &mut b);
        b[0]
    }

    /// Write `v` into the last byte of the first `size` bytes (the latency tests' arrival mark).
    pub fn mark(&self, size: u64, v: u8) {
        let _ = self.mr.write(size as usize - 1, &[v]);
    }
}

/// How long a wait may take before the run is declared hung.
const HANG: Duration = Duration::from_secs(20);

/// A wait that made no progress: give up after 20 s, or at once when
/// the device said why (port down, fatal error, a CQ or QP in error).
pub fn deadline_check<B: Backend>(me: &End<B>, t0: Instant, what: &str) -> RunResult<()> {
    let waited = t0.elapsed();
    // Async events are read only once a wait is slow (a syscall on hardware):
    // the latency loops spin here.
    if waited > Duration::from_millis(10) {
        me.alive()?;
    }
    if waited > HANG {
        return Err(format!("no progress for {} s while {what}", HANG.as_secs()));
    }
    Ok(())
}

/// Which side a latency loop plays.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// Sends first.
    Client,
    /// Answers.
    Server,
}

/// Latency, both sides in this process (the simulator): `a` is the
/// client. Returns the post time stamps (ns) and the iterations done.
pub fn lat_local<B: Backend>(
    c: &Config,
    size: u64,
    a: &mut End<B>,
    b: &mut End<B>,
    ra: Remote,
    rb: Remote,
) -> RunResult<Vec<u64>> {
    let t0 = Instant::now();
    let stop = c.duration.map(|d| t0 + Duration::from_secs(d));
    let n = if stop.is_some() { u64::MAX } else { c.iters };
    let mut stamps = Vec::with_capacity(c.iters.min(1 << 20) as usize);
    if c.verb == Verb::Send {
        a.top_up(c, c.rx_depth.min(16))?;
        b.top_up(c, c.rx_depth.min(16))?;
    }
    for i in 0..n {
        if stop.is_some_and(|s| Instant::now() >= s) {
            break;
        }
        stamps.push(t0.elapsed().as_nanos() as u64);
        step(c, size, i, Role::Client, a, rb)?;
        if matches!(c.verb, Verb::Write | Verb::Send) {
            step(c, size, i, Role::Server, b, ra)?;
            wait_arrival(c, size, i, a)?;
        }
    }
    stamps.push(t0.elapsed().as_nanos() as u64);
    Ok(stamps)
}

/// The arrival mark of iteration `i`: its count as a C `char`, as perftest's
/// `run_iter_lat_write` writes `(char)++scnt` (so after 255 comes 0: a peer that is
/// perftest expects exactly that).
pub(crate) fn mark_of(i: u64) -> u8 {
    (i + 1) as u8
}

/// One side's turn of iteration `i`: the server first waits for the
/// client's message; each side then sends its own.
pub fn step<B: Backend>(
    c: &Config,
    size: u64,
    i: u64,
    role: Role,
    me: &mut End<B>,
    peer: Remote,
) -> RunResult<()> {
    if role == Role::Server {
        wait_arrival(c, size, i, me)?;
    }
    if c.verb == Verb::Write {
        me.mark(size, mark_of(i));
    }
    // Retire earlier send completions so the SQ never fills.
    while !me.sq_roomy() {
        me.poll(|_, _| {})?;
    }
    let wait_own = matches!(c.verb, Verb::Read | Verb::Atomic);
    me.post(c, 0, size, peer, i, true, false)?;
    if wait_own {
        let t0 = Instant::now();
        let mut done = false;
        while !done {
            me.poll(|entry, recv| done |= !recv && entry == i)?;
            deadline_check(me, t0, "waiting for a completion")?;
        }
    }
    Ok(())
}

/// Wait until iteration `i`'s message from the peer is here.
pub fn wait_arrival<B: Backend>(c: &Config, size: u64, i: u64, me: &mut End<B>) -> RunResult<()> {
    let t0 = Instant::now();
    match c.verb {
        Verb::Write => {
            while me.landed(c, size) != mark_of(i) {
                me.poll(|_, _| {})?;
                deadline_check(me, t0, "waiting for the peer's WRITE")?;
            }
        }
        Verb::Send => {
            let mut got = false;
            while !got {
                me.poll(|_, recv| got |= recv)?;
                deadline_check(me, t0, "waiting for the peer's SEND")?;
            }
            me.post_recv(c, 0)?;
        }
        Verb::Read | Verb::Atomic => {}
    }
    Ok(())
}

/// The receiving side of a SEND bandwidth stream: `iters` SENDs per QP, the receives
/// they take reposted while more are due (keeping `rx_depth` posted until the last ones
/// are covered). Returns the time of the last arrival.
pub fn receive_sends<B: Backend>(c: &Config, me: &mut End<B>) -> RunResult<Instant> {
    let want = c.iters * u64::from(c.qps);
    let (mut got, mut seen) = (0u64, Instant::now());
    while got < want {
        deadline_check(me, seen, "waiting for the client's SENDs")?;
        let done = me.take_receives()?;
        for (j, &q) in done.iter().enumerate() {
            if got + (j as u64) + u64::from(c.rx_depth) < want {
                me.post_recv(c, q)?;
            }
        }
        if !done.is_empty() {
            seen = Instant::now();
        }
        got += done.len() as u64;
    }
    Ok(seen)
}

/// One direction of a bandwidth test: per QP `iters` WQEs (or until the
/// duration ends), `tx_depth` outstanding per QP, one signaled WQE every
/// `cq_mod` (and the last of each QP), doorbells batched per burst (or per
/// `-l` list), QPs served round robin; per-WQE (posted, completed) time
/// stamps in ns, in posting order.
#[derive(Debug)]
pub struct Stream {
    t0: Instant,
    stop: Option<Instant>,
    per_qp: u64,
    posted: Vec<u64>,
    completed: Vec<u64>,
    /// Per QP: WQEs posted so far, and the global indices still outstanding.
    count: Vec<u64>,
    pending: Vec<std::collections::VecDeque<u64>>,
    stopping: bool,
    idle: Instant,
}

impl Stream {
    /// A stream of the run `c` describes, its clock started.
    pub fn new(c: &Config) -> Stream {
        let qn = c.qps as usize;
        let t0 = Instant::now();
        let stop = c.duration.map(|d| t0 + Duration::from_secs(d));
        let cap = (c.iters.min(1 << 22) as usize) * qn;
        Stream {
            t0,
            stop,
            per_qp: if stop.is_some() { u64::MAX } else { c.iters },
            posted: Vec::with_capacity(cap),
            completed: Vec::with_capacity(cap),
            count: vec![0; qn],
            pending: vec![std::collections::VecDeque::new(); qn],
            stopping: false,
            idle: Instant::now(),
        }
    }

    /// Post what fits on every QP of `a` towards `peer`, and ring.
    pub fn post_round<B: Backend>(
        &mut self,
        c: &Config,
        size: u64,
        a: &mut End<B>,
        peer: Remote,
    ) -> RunResult<()> {
        if self.stop.is_some_and(|s| Instant::now() >= s) {
            self.stopping = true;
        }
        let qn = self.count.len();
        let list = u64::from(c.post_list);
        for qi in 0..qn {
            let mut any = false;
            while (self.pending[qi].len() as u32) < c.tx_depth && self.count[qi] < self.per_qp {
                if list > 1
                    && self.count[qi].is_multiple_of(list)
                    && self.pending[qi].len() as u64 + list > u64::from(c.tx_depth)
                {
                    break; // -l: a list starts only with room for all of it
                }
                let idx = self.posted.len() as u64;
                // The last WQE of a QP is signaled so that everything completes;
                // a stream cut by the duration ends with a signaled one.
                let last = self.count[qi] + 1 == self.per_qp || self.stopping;
                let signaled = (self.count[qi] + 1).is_multiple_of(u64::from(c.cq_mod)) || last;
                a.post(c, qi, size, peer, ((qi as u64) << 48) | idx, signaled, true)?;
                self.posted.push(self.t0.elapsed().as_nanos() as u64);
                self.completed.push(0);
                self.pending[qi].push_back(idx);
                self.count[qi] += 1;
                any = true;
                if list > 1 && self.count[qi].is_multiple_of(list) {
                    // -l: one doorbell per list of post_list WQEs.
                    a.ring(qi);
                    any = false;
                }
                if self.stopping {
                    self.count[qi] = self.per_qp; // no more on this QP
                    break;
                }
                if qn > 1
                    && (self.pending[qi].len() as u64).is_multiple_of(u64::from(c.cq_mod))
                    && self.count[qi].is_multiple_of(list)
                {
                    break; // give the other QPs a turn
                }
            }
            if any {
                a.ring(qi);
            }
        }
        Ok(())
    }

    /// Send completions (their entries): each retires its QP's WQEs up to it.
    pub fn complete(&mut self, entries: &[u64]) {
        let now = self.t0.elapsed().as_nanos() as u64;
        for &entry in entries {
            let (qi, idx) = ((entry >> 48) as usize, entry & ((1 << 48) - 1));
            while let Some(&k) = self.pending[qi].front() {
                if k > idx {
                    break;
                }
                self.completed[k as usize] = now;
                self.pending[qi].pop_front();
            }
            self.idle = Instant::now();
        }
    }

    /// Every WQE posted and completed.
    pub fn finished(&self) -> bool {
        self.count.iter().all(|&n| n >= self.per_qp) && self.pending.iter().all(|p| p.is_empty())
    }

    /// The (posted, completed) stamps.
    pub fn stamps(self) -> (Vec<u64>, Vec<u64>) {
        (self.posted, self.completed)
    }
}

/// Bandwidth stream from `a` (the client) to the peer ([`Stream`]). `serve`
/// runs between bursts (the in-process server reposting receives).
pub fn bw_stream<B: Backend>(
    c: &Config,
    size: u64,
    a: &mut End<B>,
    peer: Remote,
    mut serve: impl FnMut() -> RunResult<()>,
) -> RunResult<(Vec<u64>, Vec<u64>)> {
    let mut s = Stream::new(c);
    loop {
        s.post_round(c, size, a, peer)?;
        serve()?;
        let mut done = Vec::new();
        a.poll(|entry, recv| {
            if !recv {
                done.push(entry);
            }
        })?;
        s.complete(&done);
        if s.finished() {
            break;
        }
        deadline_check(a, s.idle, "waiting for completions")?;
    }
    Ok(s.stamps())
}

/// `-b` across machines: this side's stream to the peer, reposting the
/// receives the peer's stream consumes meanwhile; on SEND it goes on until
/// the peer's `iters` SENDs per QP all arrived (the peer may finish later,
/// and needs receives until then).
pub fn bw_stream_serving<B: Backend>(
    c: &Config,
    size: u64,
    me: &mut End<B>,
    peer: Remote,
) -> RunResult<(Vec<u64>, Vec<u64>)> {
    let mut s = Stream::new(c);
    let want = if c.verb == Verb::Send { c.iters * u64::from(c.qps) } else { 0 };
    let mut got = 0u64;
    let mut seen = Instant::now();
    loop {
        if !s.finished() {
            s.post_round(c, size, me, peer)?;
        }
        let (mut done, mut recvs) = (Vec::new(), Vec::new());
        me.poll(|entry, recv| if recv { recvs.push(entry as usize) } else { done.push(entry) })?;
        for (j, q) in recvs.iter().enumerate() {
            // Keep rx_depth posted until the last ones are covered.
            if got + (j as u64) + u64::from(c.rx_depth) < want {
                me.post_recv(c, *q)?;
            }
        }
        if !recvs.is_empty() {
            seen = Instant::now();
        }
        got += recvs.len() as u64;
        s.complete(&done);
        if s.finished() && got >= want {
            break;
        }
        deadline_check(me, if s.finished() { seen } else { s.idle }, "waiting for completions")?;
    }
    Ok(s.stamps())
}

/// `-b`: a stream from `a` to `b` and one from `b` to `a` at once, each
/// side reposting the receives the other's SENDs consumed. The two
/// directions' stamps, `a`'s first.
#[allow(clippy::type_complexity)]
pub fn bw_both<B: Backend>(
    c: &Config,
    size: u64,
    a: &mut End<B>,
    b: &mut End<B>,
    (ra, rb): (Remote, Remote),
) -> RunResult<((Vec<u64>, Vec<u64>), (Vec<u64>, Vec<u64>))> {
    let (mut sa, mut sb) = (Stream::new(c), Stream::new(c));
    loop {
        sa.post_round(c, size, a, rb)?;
        sb.post_round(c, size, b, ra)?;
        for (end, s) in [(&mut *a, &mut sa), (&mut *b, &mut sb)] {
            let (mut done, mut recvs) = (Vec::new(), Vec::new());
            end.poll(|entry, recv| if recv { recvs.push(entry as usize) } else { done.push(entry) })?;
            if c.verb == Verb::Send {
                for q in recvs {
                    end.post_recv(c, q)?;
                }
            }
            s.complete(&done);
        }
        if sa.finished() && sb.finished() {
            break;
        }
        deadline_check(a, sa.idle.max(sb.idle), "waiting for completions")?;
    }
    Ok((sa.stamps(), sb.stamps()))
}
