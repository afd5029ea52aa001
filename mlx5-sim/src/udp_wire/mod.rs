//! The UDP wire between processes (step 12, `docs/udp-wire.md`): a host whose device other
//! processes simulate too ([`crate::Nic::open_wire`]) has an endpoint, a UDP socket on a
//! loopback address of its own, and a thread that receives on it. A message for a QP that
//! another process owns (the device's registry says which, [`crate::registry`]) leaves as
//! RoCE v2 datagrams ([`crate::net::roce`]); what arrives is carried out by this host's
//! responder, or answers a message of one of its requesters.
//!
//! - [`requester`]: where the requester finds no local responder, it sends the message and
//!   its send queue waits at it ([`crate::responder::Outcome::Pending`]); the answer, a
//!   retransmission timer or a NAK run the queue on. One message per QP is in flight
//!   (stop and wait: the send queue runs in order anyway, and a process pair on the
//!   loopback gains little from a window).
//! - [`responder`]: the responder's expected PSN, reassembly of multi-packet messages,
//!   the message carried out by the same [`crate::responder::respond`] as in-process
//!   traffic, and duplicates answered from the saved response, never executed again.
//! - [`ud`]: UD datagrams, both ways.
//!
//! Every arrival is handled holding the host's lock, as a NIC thread holds it.

pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod ud;

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::hosts::{FabricState, Shared};
use crate::net::packet::{op, Packet};
use crate::net::roce::Parsed;
use crate::net::udp::{UdpEnd, WireDrops};

/// The UDP port of RoCE v2, where every endpoint listens.
pub(crate) const PORT: u16 = 4791;

/// How often the endpoint's thread looks at its requesters' timers.
const TIMER_PERIOD: Duration = Duration::from_millis(2);

/// The endpoint of one host: its socket, and what its thread needs.
pub(crate) struct WireEnd {
    pub(crate) end: UdpEnd,
    /// Where it is bound.
    pub(crate) at: SocketAddrV4,
    stop: AtomicBool,
    /// `MLX5_SIM_WIRE_LOSS`: the share of datagrams this end loses instead of sending
    /// (as a link would), in millionths, and the generator that draws them.
    loss: Option<(u32, Mutex<u64>)>,
}

/// The environment variable that makes endpoints lose a share of what they send (a
/// probability, `0.01` for one datagram in a hundred): RC's retransmission and duplicate
/// handling at work between processes, for tests and for users who want to see them.
pub const LOSS_ENV: &str = "MLX5_SIM_WIRE_LOSS";

impl std::fmt::Debug for WireEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireEnd").field("at", &self.at).finish_non_exhaustive()
    }
}

impl WireEnd {
    /// Binds the endpoint of the host numbered `n` (from 1; its device `mlx5_{n-1}`) for
    /// GID `gid`: `127.0.0.n:4791` when free, else `127.k.0.n:4791` for the first `k` from 1
    /// that is (another process simulating the same device holds the ones before). The
    /// kernel's `bind` is the allocator: a process that dies lets its address go.
    pub(crate) fn bind(n: u8, gid: [u8; 16]) -> io::Result<WireEnd> {
        let mut last = None;
        for k in 0..=255u8 {
            let at = SocketAddrV4::new(Ipv4Addr::new(127, k, 0, n), PORT);
            match UdpEnd::bind(at, gid) {
                Ok(end) => {
                    end.set_read_timeout(Some(TIMER_PERIOD))?;
                    end.grow_receive_buffer();
                    let loss = std::env::var(LOSS_ENV)
                        .ok()
                        .and_then(|v| v.parse::<f64>().ok())
                        .filter(|p| *p > 0.0)
                        .map(|p| {
                            ((p.min(1.0) * 1e6) as u32, Mutex::new(0x9e37_79b9_7f4a_7c15 ^ u64::from(k)))
                        });
                    return Ok(WireEnd { end, at, stop: AtomicBool::new(false), loss });
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no loopback address left")))
    }

    /// Whether the next datagram is lost ([`LOSS_ENV`]).
    fn loses(&self) -> bool {
        let Some((ppm, rng)) = &self.loss else { return false };
        let mut r = rng.lock().unwrap_or_else(|e| e.into_inner());
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        (*r % 1_000_000) < u64::from(*ppm)
    }

    /// Asks the endpoint's thread to return.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Datagrams dropped before they reached a host, by reason.
    pub(crate) fn drops(&self) -> WireDrops {
        self.end.drops()
    }
}

/// The host at a loopback address of the wire, `127.k.0.n` (any port): host `n - 1`, if
/// this fabric has it. Every process of a run simulates the same devices, so the
/// sender's host here has the sender's GID and LID.
fn host_at(shared: &Shared, at: SocketAddrV4) -> Option<From> {
    let [a, _, c, n] = at.ip().octets();
    if a != 127 || c != 0 || n == 0 || usize::from(n) > shared.len() {
        return None;
    }
    let h = usize::from(n) - 1;
    let addr = shared.cell(h).addr;
    Some(From { at, gid: addr.gid, lid: addr.lid })
}

/// The endpoint's thread: receives and handles datagrams for host `h`, and every
/// [`TIMER_PERIOD`] runs its requesters' timers, until asked to stop.
pub(crate) fn run(shared: Arc<Shared>, h: usize, end: Arc<WireEnd>) {
    let mut buf = vec![0u8; 1 << 16];
    let mut timers = Instant::now();
    while !end.stop.load(Ordering::Acquire) {
        match end.end.recv(&mut buf, |at| host_at(&shared, at).map(|f| f.gid)) {
            Ok(Some((p, _, at))) => {
                let Some(from) = host_at(&shared, at) else { continue };
                let mut st = shared.host(h);
                st.hosts[h].stats.datagrams_received += 1;
                dispatch(&mut st, h, &end, &p, from);
            }
            Ok(None) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // (A socket error, e.g. an ICMP error queued by an earlier send: keep going.)
            Err(_) => {}
        }
        if timers.elapsed() >= TIMER_PERIOD {
            let mut st = shared.host(h);
            requester::timers(&mut st, h, &end);
            timers = Instant::now();
        }
    }
}

/// Where a datagram came from: the sending host's socket, GID and LID.
#[derive(Debug, Clone, Copy)]
pub(crate) struct From {
    pub at: SocketAddrV4,
    pub gid: [u8; 16],
    pub lid: u16,
}

/// Records packet `p` that host `h` sent or received on the UDP wire in the capture, when
/// one runs (`Fabric::start_capture`; a process captures what its hosts send and
/// receive, stamped with the time of day). Its two ends are host `h`'s device: the
/// processes of a run share it. Saved responses sent again are not recorded.
fn capture(st: &mut FabricState, h: usize, p: &Packet<'_>) {
    if !st.lossy() {
        return;
    }
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let FabricState { net, hosts, .. } = st;
    if let Some(c) = net.capture.as_mut() {
        let cfg = &hosts[h].cfg;
        c.record(cfg, cfg, t, p);
    }
}

/// The packet a decoded datagram carries (its source QPN, which an RC packet does not
/// carry, taken as 0).
fn packet_of<'a>(h: usize, p: &Parsed<'a>) -> Packet<'a> {
    let mut q = Packet::new(h, h, p.opcode, p.deth.map_or(0, |d| d.1), p.dqpn, p.psn);
    q.se = p.se;
    q.ack_req = p.ack_req;
    q.qkey = p.deth.map(|d| d.0);
    q.reth = p.reth;
    q.atomic = p.atomic;
    q.aeth = p.aeth;
    q.atomic_ack = p.atomic_ack;
    q.imm = p.imm;
    q.ieth = p.ieth;
    q.dceth = p.dceth;
    q.masks = p.masks;
    q.payload = p.payload;
    q
}

/// Hands packet `p` that arrived for host `h` to the side it is for.
fn dispatch(st: &mut FabricState, h: usize, end: &WireEnd, p: &Parsed<'_>, from: From) {
    capture(st, h, &packet_of(h, p));
    match p.opcode {
        op::UD_SEND_ONLY | op::UD_SEND_ONLY_IMM => ud::receive(st, h, p, from),
        op::ACKNOWLEDGE | op::ATOMIC_ACKNOWLEDGE => requester::on_response(st, h, end, p),
        o if op::dc_rc(o).is_some() => responder::on_dc_request(st, h, end, p, from),
        o if (op::READ_RESPONSE_FIRST..=op::READ_RESPONSE_ONLY).contains(&o) => {
            requester::on_response(st, h, end, p)
        }
        _ => responder::on_request(st, h, end, p, from),
    }
}

/// Sends packet `p` from host `h` to the host with GID `gid` at `to`; counted, and
/// captured when a capture runs.
pub(crate) fn send(
    st: &mut FabricState,
    h: usize,
    end: &WireEnd,
    p: &Packet<'_>,
    gid: &[u8; 16],
    to: SocketAddrV4,
) {
    st.hosts[h].stats.datagrams_sent += 1;
    capture(st, h, p);
    if end.loses() {
        st.hosts[h].stats.link_drops += 1;
        return;
    }
    // (A full socket buffer or an unreachable peer is a lost packet: the transport's
    // retransmission, or nobody for UD, takes care of it.)
    let _ = end.end.send(p, gid, to);
}

/// Sends encoded datagram `dg` (a saved response) from host `h` to `to`; counted.
pub(crate) fn send_raw(st: &mut FabricState, h: usize, end: &WireEnd, dg: &[u8], to: SocketAddrV4) {
    st.hosts[h].stats.datagrams_sent += 1;
    if end.loses() {
        st.hosts[h].stats.link_drops += 1;
        return;
    }
    let _ = end.end.send_raw(dg, to);
}

/// Where an RC QP's peer in another process is: its QPN, its GID and its endpoint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dest {
    pub dqpn: u32,
    pub gid: [u8; 16],
    pub to: SocketAddrV4,
}

/// An RC QP's state on the UDP wire (in the QP, under its host's lock).
#[derive(Debug, Default)]
pub(crate) struct QpWire {
    /// Requester: the peer, as found in the registry for the path's destination QPN.
    pub dest: Option<Dest>,
    /// Requester: the message in flight.
    pub out: Option<requester::Outstanding>,
    /// Requester: the message (WQE counter, first PSN) an RNR NAK sent back, to go again.
    pub rnr_of: Option<(u16, u32)>,
    /// Responder (RC QP): its connection's state.
    pub rc: responder::Conn,
    /// Responder (DCT): a connection's state per DCI, by its endpoint and QPN.
    pub dc: std::collections::HashMap<(SocketAddrV4, u32), responder::Conn>,
    /// UD sender: the last destination found in the registry (QPN, host, endpoint, when).
    pub ud_dest: Option<(u32, usize, SocketAddrV4, Instant)>,
}

/// The registry's owner of QPN `dqpn` on host `rh`, when that is another running process
/// and host `rh` has no such QP itself: where to send.
pub(crate) fn remote_owner(st: &FabricState, rh: usize, dqpn: u32) -> Option<SocketAddrV4> {
    let host = &st.hosts[rh];
    if host.qps.contains_key(&dqpn) {
        return None;
    }
    let (reg, _) = host.numbers.as_ref()?;
    let e = reg.owner(crate::registry::Kind::Qp, dqpn).ok()??;
    if e.owner == reg.me() {
        return None;
    }
    let [a, b, c, d] = e.endpoint.addr;
    Some(SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), e.endpoint.port))
}

/// `a - b` in 24-bit PSN arithmetic, as a signed distance (IBA 9.7.2: half the space
/// ahead, half behind).
pub(crate) fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & 0xff_ffff;
    if d & 0x80_0000 != 0 {
        d as i32 - 0x100_0000
    } else {
        d as i32
    }
}

/// `psn + n` in 24-bit PSN arithmetic.
pub(crate) fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & 0xff_ffff
}

/// Guards the endpoint's stop: a holder of the fabric stops its endpoints when it goes.
pub(crate) type Ends = Mutex<Vec<Arc<WireEnd>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_distances_wrap() {
        assert_eq!(psn_diff(5, 3), 2);
        assert_eq!(psn_diff(3, 5), -2);
        assert_eq!(psn_diff(1, 0xff_ffff), 2);
        assert_eq!(psn_diff(0xff_ffff, 1), -2);
        assert_eq!(psn_add(0xff_ffff, 2), 1);
    }
}
