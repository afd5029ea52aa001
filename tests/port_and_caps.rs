//! What a real port or device may lack or demand, on the simulator: ports that
//! require a GRH (InfiniBand SR-IOV virtual functions), devices without DC
//! (ConnectX-4 Lx), and a READ/atomic depth below the default 16.

mod common;
use common::*;
use mlx5::sim::HostConfig;
use mlx5::sim::Sim;
use mlx5::sim::{ExecMode, NicCaps};
use mlx5::{
    AddressVector, ConnectParams, Error, QpConfig, QpState, RcQp, RemoteQpInfo, Sge, Status, Syndrome,
    WqeFlags,
};

fn cfg() -> QpConfig {
    QpConfig { max_send_wr: 16, max_recv_wr: 16, ..QpConfig::default() }
}

/// A connected RC pair between nodes 0 and 1, brought up from each other's
/// `local_info()`.
fn rc_pair(n: &[Node]) -> (RcQp<Sim, u64>, RcQp<Sim, u64>) {
    let a = n[0].ctx.create_rc_qp(&n[0].pd, &n[0].cq, &n[0].cq, &cfg()).unwrap();
    let b = n[1].ctx.create_rc_qp(&n[1].pd, &n[1].cq, &n[1].cq, &cfg()).unwrap();
    let (ia, ib) = (a.local_info().unwrap(), b.local_info().unwrap());
    a.activate(&ConnectParams::to(ib)).unwrap();
    b.activate(&ConnectParams::to(ia)).unwrap();
    (a, b)
}

/// A signaled 64-byte WRITE (or READ) from node 0 to node 1 on `qp`; its status.
fn one_op(n: &mut [Node], qp: &RcQp<Sim, u64>, read: bool) -> Status {
    let (la, lk, rb, rk) = (n[0].mr.addr(), n[0].mr.lkey(), n[1].mr.addr(), n[1].mr.rkey());
    let b = qp.wqe_builder(1).unwrap();
    if read {
        b.ctrl_rdma_read(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(rb, rk)
            .unwrap()
            .sge(Sge::new(la, 64, lk))
            .unwrap()
            .finish()
            .unwrap();
    } else {
        b.ctrl_rdma_write(WqeFlags::SIGNALED)
            .unwrap()
            .rdma(rb, rk)
            .unwrap()
            .sge(Sge::new(la, 64, lk))
            .unwrap()
            .finish()
            .unwrap();
    }
    n[0].drain()[0].0.status
}

/// A fabric of two InfiniBand virtual functions whose ports require a GRH.
fn vfs() -> (mlx5::sim::Fabric, Vec<Node>) {
    let hosts = (1..=2u16).map(|i| HostConfig::infiniband(&format!("vf{i}"), i).requiring_grh()).collect();
    cluster_of(hosts, ExecMode::Deterministic)
}

#[test]
fn grh_required_ports_get_grh_addresses_everywhere() {
    let (fabric, mut n) = vfs();
    assert!(n[0].port.grh_required);
    // RC: local_info carries the GID, the path gets a GRH, traffic flows.
    let (a, b) = rc_pair(&n);
    let ib = b.local_info().unwrap();
    assert_eq!(ib.gid, Some(n[1].port.gid), "the GID goes along when the port requires a GRH");
    assert_eq!(one_op(&mut n, &a, false), Status::Success);
    let (la, lk, rb, rk) = (n[0].mr.addr(), n[0].mr.lkey(), n[1].mr.addr(), n[1].mr.rkey());
    // A peer known by LID only cannot be reached from such a port: refused before RTR.
    let c = n[0].ctx.create_rc_qp(&n[0].pd, &n[0].cq, &n[0].cq, &cfg()).unwrap();
    let lid_only = RemoteQpInfo { gid: None, ..ib };
    assert!(matches!(
        c.activate(&ConnectParams::to(lid_only)),
        Err(Error::InvalidArgument(mlx5::InvalidArgument::GrhRequired { port: 1, .. }))
    ));
    assert_eq!(c.state(), QpState::Init, "nothing past INIT was changed");

    // UD: the AV from the peer's info carries a GRH and is delivered; one without is dropped.
    let ud = |x: &Node| {
        let q = x.ctx.create_ud_qp(&x.pd, &x.cq, &x.cq, None, &cfg()).unwrap();
        q.activate(&ConnectParams::default()).unwrap();
        q
    };
    let (ua, ub) = (ud(&n[0]), ud(&n[1]));
    for i in 0..2 {
        ub.post_recv(i, &[Sge::new(rb + 4096, 40 + 64, n[1].mr.lkey())]).unwrap();
    }
    let with_grh = AddressVector::to_peer(&n[0].port, &ub.local_info().unwrap(), 0).unwrap();
    let without = AddressVector::ib(n[1].port.lid, 0);
    for (e, av) in [(10, with_grh), (11, without)] {
        ua.wqe_builder(e)
            .unwrap()
            .ctrl_send(WqeFlags::SIGNALED)
            .unwrap()
            .datagram(&av, ub.qpn(), mlx5::DEFAULT_QKEY)
            .unwrap()
            .sge(Sge::new(la, 64, lk))
            .unwrap()
            .finish()
            .unwrap();
    }
    assert_eq!(n[0].drain().len(), 2, "UD senders complete either way");
    assert_eq!(n[1].drain().len(), 1, "only the datagram with a GRH arrived");
    assert_eq!(fabric.nics()[0].stats().ud_dropped, 1);

    // DC: between() gives a GRH AV; a DCI using a GRH-less AV gets no answer.
    let dct = n[1]
        .ctx
        .create_dct(&n[1].pd, &n[1].cq, &n[1].srq, &QpConfig { dc_key: 5, ..QpConfig::default() })
        .unwrap();
    dct.activate(&ConnectParams::default()).unwrap();
    let num = dct.dct_number().unwrap();
    let dci = n[0].ctx.create_dci(&n[0].pd, &n[0].cq, &cfg()).unwrap();
    dci.activate(&ConnectParams::default()).unwrap();
    let av = AddressVector::between(&n[0].port, &n[1].port, 0);
    let mut dc_write = |av: &AddressVector| {
        let b = dci.wqe_builder(20).unwrap().ctrl_rdma_write(WqeFlags::SIGNALED).unwrap();
        b.av(5, num, av).unwrap().rdma(rb, rk).unwrap().sge(Sge::new(la, 64, lk)).unwrap().finish().unwrap();
        n[0].drain()[0].0.status
    };
    assert_eq!(dc_write(&av), Status::Success);
    let st = dc_write(&without);
    assert!(matches!(st, Status::Error(e) if e.syndrome == Syndrome::TransportRetryExceeded), "{st:?}");
}

#[test]
fn a_device_without_dc_refuses_dci_and_dct_with_a_typed_error() {
    let no_dc = NicCaps { dc: false, ..NicCaps::default() };
    let hosts = (1..=2u16).map(|i| HostConfig::infiniband(&format!("lx{i}"), i).with_caps(no_dc)).collect();
    let (_f, n) = cluster_of(hosts, ExecMode::Deterministic);
    assert!(!n[0].ctx.caps().dc);
    assert!(matches!(
        n[0].ctx.create_dci(&n[0].pd, &n[0].cq, &cfg()),
        Err(Error::Unsupported(mlx5::Unsupported::DcTransport))
    ));
    assert!(matches!(
        n[0].ctx.create_dct(&n[0].pd, &n[0].cq, &n[0].srq, &QpConfig::default()),
        Err(Error::Unsupported(mlx5::Unsupported::DcTransport))
    ));
    // Everything else still works.
    assert!(n[0].ctx.create_rc_qp(&n[0].pd, &n[0].cq, &n[0].cq, &cfg()).is_ok());
}

/// The defaults ask for 16 outstanding READs / atomics; a device with fewer
/// refuses that at RTR / RTS (as the kernel does): the front-end clamps.
#[test]
fn read_and_atomic_depth_is_clamped_to_the_device() {
    let shallow = NicCaps { max_rd_atomic: 4, ..NicCaps::default() };
    let hosts = (1..=2u16).map(|i| HostConfig::infiniband(&format!("h{i}"), i).with_caps(shallow)).collect();
    let (_f, mut n) = cluster_of(hosts, ExecMode::Deterministic);
    assert_eq!(n[0].ctx.caps().max_rd_atomic, 4);
    let p = ConnectParams::default();
    assert_eq!((p.max_rd_atomic, p.max_dest_rd_atomic), (16, 16));
    let (a, _b) = rc_pair(&n);
    assert_eq!(one_op(&mut n, &a, true), Status::Success);
}

/// `create_av` is the device's answer (on hardware: `ibv_create_ah`); on the
/// simulator's flat fabric it is the AV built from the peer's info, on RoCE and
/// on a GRH-required InfiniBand port alike.
#[test]
fn create_av_gives_the_peers_address() {
    for roce in [false, true] {
        let (_f, n) = if roce { cluster(2, Addressing::Roce, ExecMode::Deterministic) } else { vfs() };
        let q = n[1].ctx.create_ud_qp(&n[1].pd, &n[1].cq, &n[1].cq, None, &cfg()).unwrap();
        let peer = q.local_info().unwrap();
        let av = n[0].pd.create_av(1, &peer).unwrap();
        assert_eq!(av, AddressVector::to_peer(&n[0].port, &peer, 0).unwrap());
        // The source GID index is the port's (RoCE v2), never a default 0 unless it is 0.
        assert_eq!(
            u32::from_be_bytes(av.as_bytes()[28..32].try_into().unwrap()) >> 20 & 0xff,
            u32::from(n[0].port.sgid_index)
        );
    }
}

/// A port that goes down raises `PortError` and its peers get no answer
/// (retries exceeded); it comes back with `PortActive`.
#[test]
fn port_down_and_up_are_async_events() {
    let (fabric, mut n) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let nic1 = fabric.nics()[1].clone();
    let (a, _b) = rc_pair(&n);
    nic1.set_port_active(false);
    assert_eq!(n[1].ctx.async_event().unwrap(), Some(mlx5::AsyncEvent::PortError { port: 1 }));
    assert!(
        matches!(one_op(&mut n, &a, false), Status::Error(e) if e.syndrome == Syndrome::TransportRetryExceeded)
    );
    nic1.set_port_active(true);
    assert_eq!(n[1].ctx.async_event().unwrap(), Some(mlx5::AsyncEvent::PortActive { port: 1 }));
    assert_eq!(n[1].ctx.async_event().unwrap(), None);
}

/// A fatal device error: `DeviceFatal` is an async event, outstanding work is
/// flushed, and a waiter returns `Error::DeviceFatal` instead of sleeping until
/// its deadline.
#[test]
fn device_fatal_ends_waits_with_a_typed_error() {
    let (fabric, mut n) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let q = n[0].ctx.create_rc_qp(&n[0].pd, &n[0].cq, &n[0].cq, &cfg()).unwrap();
    let peer = n[1].ctx.create_rc_qp(&n[1].pd, &n[1].cq, &n[1].cq, &cfg()).unwrap();
    q.activate(&ConnectParams::to(peer.local_info().unwrap())).unwrap();
    q.post_recv(5, &[Sge::new(n[0].mr.addr(), 64, n[0].mr.lkey())]).unwrap();
    fabric.nics()[0].inject_fatal();
    assert_eq!(n[0].ctx.async_event().unwrap(), Some(mlx5::AsyncEvent::DeviceFatal));
    let flushed = n[0].drain();
    assert_eq!(flushed.len(), 1);
    assert!(matches!(flushed[0].0.status, Status::Error(e) if e.syndrome == Syndrome::WrFlush));
    let t0 = std::time::Instant::now();
    let r = n[0].cq.wait(16, Some(std::time::Duration::from_secs(10)));
    assert_eq!(r.err(), Some(Error::DeviceFatal));
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "did not sleep to the deadline");
}
