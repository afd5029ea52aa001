//! Shared fixture of the cross-crate suites: two simulated hosts, each with a
//! PD, one CQ for sends and receives, an RC QP and a registered buffer.
#![allow(dead_code)]

use mlx5::sim::{two_hosts, Sim};
use mlx5::sim::{ExecMode, Fabric};
use mlx5::{
    AccessFlags, Completion, CompletionQueue, ConnectParams, Context, Device, MemoryRegion, ProtectionDomain,
    QpConfig, RcQp,
};

pub const MR_LEN: usize = 1 << 20;

pub struct Side {
    pub qp: RcQp<Sim, u64>,
    pub cq: CompletionQueue<Sim, u64>,
    pub mr: MemoryRegion<Sim>,
    pub pd: ProtectionDomain<Sim>,
    pub ctx: Context<Sim>,
}

impl Side {
    pub fn new(dev: &Device<Sim>, cfg: &QpConfig, mr_access: AccessFlags) -> Side {
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(1024, |_, _: u64| {}).unwrap();
        let qp = ctx.create_rc_qp(&pd, &cq, &cq, cfg).unwrap();
        let mr = pd.alloc_mr(MR_LEN, mr_access).unwrap();
        Side { qp, cq, mr, pd, ctx }
    }

    pub fn drain(&mut self) -> Vec<(Completion, u64)> {
        drain(&self.cq)
    }

    /// Poll until `n` completions arrived (threaded mode), bounded in time.
    pub fn wait(&mut self, n: usize) -> Vec<(Completion, u64)> {
        let mut v = Vec::new();
        let t0 = std::time::Instant::now();
        while v.len() < n {
            self.cq.poll_with(64, |c, e| v.push((c, e)));
            assert!(t0.elapsed().as_secs() < 20, "timed out waiting for {n} completions, got {}", v.len());
        }
        v
    }

    pub fn poll_ticks(&mut self, n: usize, max_polls: usize) -> Vec<(Completion, u64)> {
        poll_ticks(&self.cq, n, max_polls)
    }
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub fabric: Fabric,
}

pub fn small_cfg() -> QpConfig {
    QpConfig {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 128,
        ..QpConfig::default()
    }
}

/// Two connected RC QPs; `access` is B's responder access (A gets ALL).
pub fn pair_with(mode: ExecMode, cfg: &QpConfig, b_access: AccessFlags, params: &ConnectParams) -> Pair {
    let (fabric, da, db) = two_hosts(mode);
    let a = Side::new(&da, cfg, AccessFlags::ALL);
    let b = Side::new(&db, cfg, AccessFlags::ALL);
    let ia = a.qp.local_info().unwrap();
    let ib = b.qp.local_info().unwrap();
    a.qp.activate(&ConnectParams { remote: Some(ib.clone()), access: AccessFlags::ALL, ..params.clone() })
        .unwrap();
    b.qp.activate(&ConnectParams { remote: Some(ia.clone()), access: b_access, ..params.clone() }).unwrap();
    Pair { a, b, fabric }
}

pub fn pair() -> Pair {
    pair_with(ExecMode::Deterministic, &small_cfg(), AccessFlags::ALL, &ConnectParams::default())
}

/// Fill `mr[off..off+len]` with a recognisable pattern.
pub fn fill(mr: &MemoryRegion<Sim>, off: usize, len: usize, seed: u8) {
    let v: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    mr.write(off, &v).unwrap();
}

pub fn bytes(mr: &MemoryRegion<Sim>, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    mr.read(off, &mut v).unwrap();
    v
}

/// Addressing of a test fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    Ib,
    Roce,
}

/// One host of a cluster: a context, a PD, one CQ for everything, a big MR
/// and an SRQ.
pub struct Node {
    pub srq: mlx5::SharedReceiveQueue<Sim, u64>,
    pub cq: CompletionQueue<Sim, u64>,
    pub mr: MemoryRegion<Sim>,
    pub pd: ProtectionDomain<Sim>,
    pub ctx: Context<Sim>,
    pub port: mlx5::PortInfo,
}

impl Node {
    /// The address vector that reaches this node.
    pub fn av(&self, sl: u8) -> mlx5::AddressVector {
        match self.port.link_layer {
            mlx5::LinkLayer::InfiniBand => mlx5::AddressVector::ib(self.port.lid, sl),
            mlx5::LinkLayer::Ethernet => {
                mlx5::AddressVector::roce_v2(&mlx5::RoceAv::new(self.port.gid, self.port.mac))
            }
        }
    }

    pub fn drain(&mut self) -> Vec<(Completion, u64)> {
        drain(&self.cq)
    }

    pub fn poll_ticks(&mut self, n: usize, max_polls: usize) -> Vec<(Completion, u64)> {
        poll_ticks(&self.cq, n, max_polls)
    }
}

/// `n` hosts on one fabric, InfiniBand (LIDs 1..) or RoCE v2 (10.0.0.x).
pub fn cluster(n: usize, addressing: Addressing, mode: ExecMode) -> (Fabric, Vec<Node>) {
    use mlx5::sim::HostConfig;
    let hosts = (0..n)
        .map(|i| {
            let name = format!("node{i}");
            match addressing {
                Addressing::Ib => HostConfig::infiniband(&name, i as u16 + 1),
                Addressing::Roce => {
                    HostConfig::roce(&name, [10, 0, 0, i as u8 + 1], [2, 0, 0, 0, 0, i as u8 + 1])
                }
            }
        })
        .collect();
    cluster_of(hosts, mode)
}

/// One node per host configuration, on one fabric.
pub fn cluster_of(hosts: Vec<mlx5::sim::HostConfig>, mode: ExecMode) -> (Fabric, Vec<Node>) {
    use mlx5::sim::{devices, FabricConfig};
    let fabric = Fabric::new(FabricConfig { mode, ..FabricConfig::default() });
    for h in hosts {
        fabric.add_host(h);
    }
    let nodes = devices(&fabric)
        .iter()
        .map(|d| {
            let ctx = d.open().unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(4096, |_, _: u64| {}).unwrap();
            let mr = pd.alloc_mr(MR_LEN, AccessFlags::ALL).unwrap();
            let srq = ctx.create_srq(&pd, 255, 3).unwrap();
            let port = ctx.query_port(1).unwrap();
            Node { srq, cq, mr, pd, ctx, port }
        })
        .collect();
    (fabric, nodes)
}

/// Poll until the CQ is empty; deterministic mode executes at doorbell
/// time, so everything due is already there.
pub fn drain(cq: &CompletionQueue<Sim, u64>) -> Vec<(Completion, u64)> {
    let mut v = Vec::new();
    while cq.poll_with(64, |c, e| v.push((c, e))).consumed() > 0 {}
    assert!(cq.take_unknown().is_none(), "no unattributable CQE");
    v
}

/// Poll with virtual-time ticks (each empty poll advances the simulator's
/// clock by one RNR period) until `n` completions or `max_polls` polls.
pub fn poll_ticks(cq: &CompletionQueue<Sim, u64>, n: usize, max_polls: usize) -> Vec<(Completion, u64)> {
    let mut v = Vec::new();
    for _ in 0..max_polls {
        cq.poll_with(64, |c, e| v.push((c, e)));
        if v.len() >= n {
            break;
        }
    }
    v
}

/// The reference of a masked fetch-and-add on `bits` bits (spec §3.5): split into its
/// fields (one ends at each boundary bit and at the top), each added on its own modulo
/// its width. Written apart from the simulator's bit-serial adder.
pub fn model_masked_fa(old: u64, add: u64, boundary: u64, bits: u32) -> u64 {
    let mut out = 0u64;
    let mut lo = 0;
    for i in 0..bits {
        if boundary >> i & 1 == 1 || i == bits - 1 {
            let width = i - lo + 1;
            let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
            let f = ((old >> lo & mask).wrapping_add(add >> lo & mask)) & mask;
            out |= f << lo;
            lo = i + 1;
        }
    }
    out
}

/// The reference of a masked compare-and-swap (spec §3.5).
pub fn model_masked_cs(old: u64, swap: u64, compare: u64, swap_mask: u64, compare_mask: u64) -> u64 {
    if old & compare_mask == compare & compare_mask {
        (old & !swap_mask) | (swap & swap_mask)
    } else {
        old
    }
}
