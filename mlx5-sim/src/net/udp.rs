//! A simulated host's end of the UDP wire (step 12, `docs/udp-wire.md`): a UDP socket on
//! the host's own loopback address that sends RoCE v2 datagrams ([`super::roce`]) and
//! takes in what arrives, dropping and counting, by reason, anything it cannot accept:
//! whatever reaches the port may be foreign, truncated or corrupt.

use std::io;
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Mutex;

use super::packet::Packet;
use super::roce::{self, Malformed, Parsed};

/// Datagrams a device's end of the UDP wire dropped before they reached a QP, by reason
/// ([`crate::Nic::wire_drops`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireDrops {
    /// From an address where no simulated host is.
    pub foreign: u64,
    /// Shorter than the headers they name.
    pub short: u64,
    /// ICRC mismatch: corrupt, or not between the GIDs taken.
    pub icrc: u64,
    /// BTH transport version other than 0.
    pub version: u64,
    /// A P_Key other than the default partition.
    pub pkey: u64,
    /// An opcode neither RC, UD nor the model's DC.
    pub opcode: u64,
    /// Payload, pad and headers that do not add up.
    pub length: u64,
}

impl WireDrops {
    fn count(&mut self, m: Malformed) {
        let c = match m {
            Malformed::Short => &mut self.short,
            Malformed::Icrc => &mut self.icrc,
            Malformed::Version(_) => &mut self.version,
            Malformed::PKey(_) => &mut self.pkey,
            Malformed::Opcode(_) => &mut self.opcode,
            Malformed::Length => &mut self.length,
        };
        *c += 1;
    }

    /// Every datagram dropped.
    pub(crate) fn total(&self) -> u64 {
        self.foreign + self.short + self.icrc + self.version + self.pkey + self.opcode + self.length
    }
}

/// One host's socket on the wire.
#[derive(Debug)]
pub(crate) struct UdpEnd {
    sock: UdpSocket,
    /// The host's GID (the ICRC's destination address for what arrives, source for what
    /// leaves).
    gid: [u8; 16],
    /// (Counted by the one thread that receives; read by whoever asks.)
    drops: Mutex<WireDrops>,
}

impl UdpEnd {
    /// A socket at `at` (the host's loopback address and port 4791; port 0 picks one) for
    /// the host whose GID is `gid`.
    pub(crate) fn bind(at: SocketAddrV4, gid: [u8; 16]) -> io::Result<UdpEnd> {
        Ok(UdpEnd { sock: UdpSocket::bind(at)?, gid, drops: Mutex::new(WireDrops::default()) })
    }

    /// Datagrams dropped so far, by reason.
    pub(crate) fn drops(&self) -> WireDrops {
        *self.drops.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut WireDrops)) {
        f(&mut self.drops.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// How long [`UdpEnd::recv`] waits (`None`: for ever).
    pub(crate) fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(t)
    }

    /// Asks for a receive buffer of 8 MiB (the kernel caps it at `net.core.rmem_max`):
    /// a READ response or a long WRITE arrives as a burst of datagrams, and what the
    /// buffer cannot hold is lost and sent again.
    pub(crate) fn grow_receive_buffer(&self) {
        use std::os::fd::AsRawFd;
        let size: libc::c_int = 8 << 20;
        // SAFETY: setsockopt on our own socket with a pointer to an int and its size.
        unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }

    /// Where the socket is bound.
    pub(crate) fn local(&self) -> io::Result<SocketAddrV4> {
        match self.sock.local_addr()? {
            std::net::SocketAddr::V4(a) => Ok(a),
            std::net::SocketAddr::V6(_) => Err(io::Error::other("an IPv6 socket")),
        }
    }

    /// Sends packet `p` to the host with GID `dst_gid` at `to`. Its ICRC takes this
    /// socket's port as the UDP source port (the receiver sees it; an RC packet does not
    /// carry the source QPN that the capture's flow entropy comes from).
    pub(crate) fn send(&self, p: &Packet<'_>, dst_gid: &[u8; 16], to: SocketAddrV4) -> io::Result<()> {
        let dg = self.encode(p, dst_gid)?;
        self.sock.send_to(&dg, to)?;
        Ok(())
    }

    /// The datagram [`UdpEnd::send`] sends for packet `p` to the host with GID `dst_gid`.
    pub(crate) fn encode(&self, p: &Packet<'_>, dst_gid: &[u8; 16]) -> io::Result<Vec<u8>> {
        let mut dg = Vec::with_capacity(64 + p.payload.len());
        roce::encode(p, &self.gid, dst_gid, self.local()?.port(), &mut dg);
        Ok(dg)
    }

    /// Sends a datagram [`UdpEnd::encode`] made.
    pub(crate) fn send_raw(&self, dg: &[u8], to: SocketAddrV4) -> io::Result<()> {
        self.sock.send_to(dg, to)?;
        Ok(())
    }

    /// Waits for the next datagram (into `buf`) and decodes it. `gid_of` names the GID of
    /// the host at a source address (`None`: no simulated host there). `Ok(None)`: it was
    /// dropped and counted; else the packet, the sender's GID and its address.
    #[allow(clippy::type_complexity)]
    pub(crate) fn recv<'b>(
        &self,
        buf: &'b mut [u8],
        gid_of: impl Fn(SocketAddrV4) -> Option<[u8; 16]>,
    ) -> io::Result<Option<(Parsed<'b>, [u8; 16], SocketAddrV4)>> {
        let (n, from) = self.sock.recv_from(buf)?;
        let std::net::SocketAddr::V4(from) = from else {
            self.count(|d| d.foreign += 1);
            return Ok(None);
        };
        let Some(src_gid) = gid_of(from) else {
            self.count(|d| d.foreign += 1);
            return Ok(None);
        };
        match roce::decode(&buf[..n], &src_gid, &self.gid, from.port()) {
            Ok(p) => Ok(Some((p, src_gid, from))),
            Err(m) => {
                self.count(|d| d.count(m));
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::packet::{op, Reth};
    use super::super::roce::tests::gid4;
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_packet_crosses_and_noise_is_counted_by_reason() {
        let local = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
        let (ga, gb) = (gid4([10, 0, 0, 1]), gid4([10, 0, 0, 2]));
        let a = UdpEnd::bind(local, ga).unwrap();
        let b = UdpEnd::bind(local, gb).unwrap();
        let (at_a, at_b) = (a.local().unwrap(), b.local().unwrap());
        let gid_of = |from: SocketAddrV4| (from == at_a).then_some(ga);
        let mut p = Packet::new(0, 1, op::WRITE_ONLY, 0x11, 0x22, 5);
        p.reth = Some(Reth { va: 0x1000, rkey: 7, len: 3 });
        p.payload = b"abc";
        p.ack_req = true;
        a.send(&p, &gb, at_b).unwrap();
        let mut buf = [0u8; 9000];
        let (got, from, at) = b.recv(&mut buf, gid_of).unwrap().expect("accepted");
        assert_eq!(at, at_a);
        assert_eq!(
            (got.opcode, got.dqpn, got.psn, got.reth, got.payload),
            (op::WRITE_ONLY, 0x22, 5, p.reth, &b"abc"[..])
        );
        assert_eq!(from, ga);
        // From a socket no host has: foreign. From A, bytes with a bad ICRC, a runt.
        let stranger = UdpSocket::bind(local).unwrap();
        stranger.send_to(&[1, 2, 3], at_b).unwrap();
        assert!(b.recv(&mut buf, gid_of).unwrap().is_none());
        a.sock.send_to(&[0u8; 40], at_b).unwrap();
        assert!(b.recv(&mut buf, gid_of).unwrap().is_none());
        a.sock.send_to(&[0u8; 3], at_b).unwrap();
        assert!(b.recv(&mut buf, gid_of).unwrap().is_none());
        assert_eq!(b.drops(), WireDrops { foreign: 1, icrc: 1, short: 1, ..WireDrops::default() });
        assert_eq!(b.drops().total(), 3);
        // And a good packet still gets through after the noise.
        a.send(&p, &gb, at_b).unwrap();
        assert!(b.recv(&mut buf, gid_of).unwrap().is_some());
    }
}
