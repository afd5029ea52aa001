//! perftest's out-of-band exchange over TCP ("Data ex. method: Ethernet"), byte for byte
//! as perftest v4.5-0.17 speaks it (`src/perftest_communication.c`), so that our tools
//! and perftest's can be the two ends of one test (step 12). Every exchange is raw bytes
//! of a fixed size: the client writes its part then reads the server's; the server reads
//! then writes. In `ib_write_lat` the order is: versions ([`Xchg::versions`]), system
//! data ([`Xchg::sys_data`]), MTU ([`Xchg::mtu`]), a key message per QP ([`Xchg::keys`]),
//! more key messages as barriers, the bandwidth tests' report ([`Xchg::bw_report`]) and at
//! the end [`Xchg::close`] (the order of each program: `crate::perftest_peer`).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};

/// The version string our side reports: perftest's own (v4.5-0.17 reports "6.06"), so
/// that a perftest peer takes every exchange its version gates.
pub const VERSION: &str = "6.06";

/// `char version[MAX_VERSION]`.
const VERSION_LEN: usize = 16;
/// `KEY_MSG_SIZE`, `KEY_MSG_SIZE_GID` (the terminating NUL included).
const KEY_MSG: usize = 59;
const KEY_MSG_GID: usize = 108;

/// perftest's `struct pingpong_dest`, as its key message carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READs / atomics the QP takes.
    pub out_reads: u16,
    /// The QP number.
    pub qpn: u32,
    /// The QP's first PSN.
    pub psn: u32,
    /// The buffer's rkey.
    pub rkey: u32,
    /// The buffer's address.
    pub vaddr: u64,
    /// Present when a GID index is in use (RoCE, or `-x`): the 108-byte message.
    pub gid: Option<[u8; 16]>,
    /// The SRQ number (`--use-srq`), else 0.
    pub srqn: u32,
}

impl Dest {
    /// The key message: `KEY_PRINT_FMT` ("%04x:%04x:%06x:%06x:%08x:%016llx:%08x") in 59
    /// bytes, or with a GID `KEY_PRINT_FMT_GID` (the GID's 16 bytes as "%02x:" between
    /// the address and the SRQN, and a ':' after it) in 108, NUL-padded.
    pub fn message(&self) -> Vec<u8> {
        let head = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        let (mut s, size) = match self.gid {
            None => (format!("{head}{:08x}", self.srqn), KEY_MSG),
            Some(g) => {
                let gid: String = g.iter().map(|b| format!("{b:02x}:")).collect();
                (format!("{head}{gid}{:08x}:", self.srqn), KEY_MSG_GID)
            }
        };
        s.truncate(size - 1);
        let mut b = s.into_bytes();
        b.resize(size, 0);
        b
    }

    /// Reads a key message (59 bytes, or 108 with a GID), as perftest's `sscanf` and
    /// `strtol` do: hexadecimal fields between colons.
    pub fn parse(msg: &[u8]) -> Result<Dest, String> {
        let text = msg.split(|&b| b == 0).next().unwrap_or(&[]);
        let text = std::str::from_utf8(text).map_err(|_| "key message: not text".to_string())?;
        let f: Vec<&str> = text.split(':').collect();
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|e| format!("key message field {s:?}: {e}"));
        let gid = match f.len() {
            7 => None,
            // 6 fields, 16 GID bytes, the SRQN, and what follows the last ':'.
            24 => {
                let mut g = [0u8; 16];
                for (i, b) in g.iter_mut().enumerate() {
                    *b = hex(f[6 + i])? as u8;
                }
                Some(g)
            }
            n => return Err(format!("key message of {n} fields: {text:?}")),
        };
        Ok(Dest {
            lid: hex(f[0])? as u16,
            out_reads: hex(f[1])? as u16,
            qpn: hex(f[2])? as u32,
            psn: hex(f[3])? as u32,
            rkey: hex(f[4])? as u32,
            vaddr: hex(f[5])?,
            srqn: hex(f[if gid.is_some() { 22 } else { 6 }])? as u32,
            gid,
        })
    }
}

/// perftest's `struct bw_report_data` as `xchg_bw_reports` carries it: the last size's
/// bandwidth report, in the sender's unit (MB/s of 2^20 bytes, or Gb/s with
/// `--report_gbits`) and Mpps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations per QP.
    pub iters: u64,
    /// Peak bandwidth (0 where not measured).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Average message rate, millions per second.
    pub msg_rate: f64,
}

/// The first perftest version that sends the iteration count in 8 bytes.
const ITERS_U64_SINCE: f64 = 5.33;

/// A version string as perftest's `atof` reads it ("6.06" is 6.06; text that is no
/// number is 0).
pub fn version_number(v: &str) -> f64 {
    let end = v.find(|ch: char| !(ch.is_ascii_digit() || ch == '.')).unwrap_or(v.len());
    v[..end].parse().unwrap_or(0.0)
}

/// One end of the exchange.
#[derive(Debug)]
pub struct Xchg {
    s: TcpStream,
    client: bool,
}

impl Xchg {
    /// Client: connect to a perftest server at `addr` (`host:port`).
    pub fn connect(addr: &str) -> io::Result<Xchg> {
        Ok(Xchg { s: TcpStream::connect(addr)?, client: true })
    }

    /// Server: take one client on `listener`.
    pub fn accept(listener: &TcpListener) -> io::Result<Xchg> {
        Ok(Xchg { s: listener.accept()?.0, client: false })
    }

    /// Gives up on a peer that neither sends nor takes bytes for `t` (`None`: waits as
    /// long as the peer keeps the connection, as while it runs a long test).
    pub fn set_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        self.s.set_read_timeout(t)?;
        self.s.set_write_timeout(t)
    }

    /// One exchange of `mine.len()` bytes each way: the client writes first, the server
    /// reads first (`ctx_xchg_data_ethernet`).
    pub fn xchg(&mut self, mine: &[u8]) -> io::Result<Vec<u8>> {
        let mut theirs = vec![0u8; mine.len()];
        if self.client {
            self.s.write_all(mine)?;
            self.s.read_exact(&mut theirs)?;
        } else {
            self.s.read_exact(&mut theirs)?;
            self.s.write_all(mine)?;
        }
        Ok(theirs)
    }

    /// `exchange_versions`: our version, NUL-padded to 16 bytes, for the peer's.
    pub fn versions(&mut self, mine: &str) -> io::Result<String> {
        let mut b = mine.as_bytes().to_vec();
        b.resize(VERSION_LEN, 0);
        let theirs = self.xchg(&b[..VERSION_LEN])?;
        let end = theirs.iter().position(|&c| c == 0).unwrap_or(VERSION_LEN);
        Ok(String::from_utf8_lossy(&theirs[..end]).into_owned())
    }

    /// `check_sys_data` (a peer of version 5.32 or later): the cycle buffer and the
    /// cache line size, each an `int` in network byte order, in two exchanges. Returns
    /// the peer's.
    pub fn sys_data(&mut self, cycle_buffer: i32, cache_line: i32) -> io::Result<(i32, i32)> {
        let c = self.xchg(&cycle_buffer.to_be_bytes())?;
        let l = self.xchg(&cache_line.to_be_bytes())?;
        let int = |b: Vec<u8>| i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        Ok((int(c), int(l)))
    }

    /// `check_mtu` (a peer of version 5.1 or later): the active MTU as its `ibv_mtu`
    /// value (1 = 256 ... 5 = 4096) in decimal text, in 2 bytes to a peer of version 5.31
    /// or later. Returns the peer's.
    pub fn mtu(&mut self, ibv_mtu: u8) -> io::Result<u8> {
        let mut b = ibv_mtu.to_string().into_bytes();
        b.resize(2, 0);
        let theirs = self.xchg(&b[..2])?;
        let end = theirs.iter().position(|&c| c == 0).unwrap_or(2);
        std::str::from_utf8(&theirs[..end])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other(format!("the peer's MTU {theirs:?}")))
    }

    /// `ctx_hand_shake`: our key message for the peer's (also the barrier perftest uses
    /// between phases). Both sides use a GID or neither: `mine.gid` decides the size.
    pub fn keys(&mut self, mine: &Dest) -> io::Result<Dest> {
        let theirs = self.xchg(&mine.message())?;
        Dest::parse(&theirs).map_err(io::Error::other)
    }

    /// `xchg_bw_reports` (without `--report-per-port`): five exchanges, each field in
    /// network byte order: the size (8 bytes, an LP64 `unsigned long`), the iterations (8
    /// bytes to a peer of version 5.33 or later, else a 4-byte `int`), then the peak and
    /// average bandwidth and the message rate as `double`s byte-swapped. Returns the
    /// peer's report.
    pub fn bw_report(&mut self, mine: &BwReport, peer_version: &str) -> io::Result<BwReport> {
        let size = self.xchg(&mine.size.to_be_bytes())?;
        let u64_of = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
        let iters = if version_number(peer_version) >= ITERS_U64_SINCE {
            u64_of(&self.xchg(&mine.iters.to_be_bytes())?)
        } else {
            let b = self.xchg(&(mine.iters as u32).to_be_bytes())?;
            u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let mut f = [0f64; 3];
        for (out, x) in f.iter_mut().zip([mine.bw_peak, mine.bw_avg, mine.msg_rate]) {
            *out = f64::from_bits(u64_of(&self.xchg(&x.to_bits().to_be_bytes())?));
        }
        Ok(BwReport { size: u64_of(&size), iters, bw_peak: f[0], bw_avg: f[1], msg_rate: f[2] })
    }

    /// `ctx_close_connection`: a last handshake, then "done" with its NUL.
    pub fn close(&mut self, mine: &Dest) -> io::Result<()> {
        self.keys(mine)?;
        self.s.write_all(b"done\0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key message perftest's `ib_write_lat` sent on the simulator (captured in a
    /// run under `mlx5_simrun`).
    const PERFTEST_KEYS: &[u8] = b"0001:0001:001000:8bec10:00010000:000055e3d0a6b000:00000000\0";

    #[test]
    fn the_key_message_is_perftests() {
        assert_eq!(PERFTEST_KEYS.len(), KEY_MSG);
        let d = Dest::parse(PERFTEST_KEYS).unwrap();
        assert_eq!(
            d,
            Dest {
                lid: 1,
                out_reads: 1,
                qpn: 0x1000,
                psn: 0x8bec10,
                rkey: 0x10000,
                vaddr: 0x55e3_d0a6_b000,
                gid: None,
                srqn: 0
            }
        );
        assert_eq!(d.message(), PERFTEST_KEYS);
    }

    #[test]
    fn the_gid_key_message_has_108_bytes_in_perftests_layout() {
        let d = Dest {
            lid: 0,
            out_reads: 16,
            qpn: 0x12,
            psn: 0x34,
            rkey: 0x56,
            vaddr: 0x78,
            gid: Some([0xab; 16]),
            srqn: 9,
        };
        let m = d.message();
        assert_eq!(m.len(), KEY_MSG_GID);
        let text = std::str::from_utf8(&m[..KEY_MSG_GID - 1]).unwrap();
        assert_eq!(
            text,
            "0000:0010:000012:000034:00000056:0000000000000078:\
             ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:ab:00000009:"
        );
        assert_eq!(m[KEY_MSG_GID - 1], 0);
        assert_eq!(Dest::parse(&m).unwrap(), d);
        assert!(Dest::parse(b"1:2:3").is_err());
        assert!(Dest::parse(b"zz:0001:001000:8bec10:00010000:000055e3d0a6b000:00000000").is_err());
    }

    /// The report's bytes as `xchg_bw_reports` puts them on the socket (x86-64, a peer
    /// of 5.33 or later): size and iterations as big-endian 64-bit integers, then three
    /// byte-swapped doubles; to an older peer the iterations take 4 bytes.
    #[test]
    fn the_bw_report_is_perftests_five_fields() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mine = BwReport { size: 65536, iters: 5000, bw_peak: 150.5, bw_avg: 149.25, msg_rate: 0.0024 };
        for (version, iters_len) in [("6.06", 8), ("5.32", 4)] {
            let raw = std::thread::spawn({
                let l = l.try_clone().unwrap();
                move || {
                    // A server's side of each exchange: read the client's field, answer
                    // with its own (size 1, iterations 2, then 3.0, 4.0, 5.0).
                    let mut s = l.accept().unwrap().0;
                    let iters: Vec<u8> =
                        if iters_len == 8 { 2u64.to_be_bytes().into() } else { 2u32.to_be_bytes().into() };
                    let answers: [Vec<u8>; 5] = [
                        1u64.to_be_bytes().into(),
                        iters,
                        3.0f64.to_bits().to_be_bytes().into(),
                        4.0f64.to_bits().to_be_bytes().into(),
                        5.0f64.to_bits().to_be_bytes().into(),
                    ];
                    let mut got = Vec::new();
                    for a in answers {
                        let mut field = vec![0u8; a.len()];
                        s.read_exact(&mut field).unwrap();
                        got.extend(field);
                        s.write_all(&a).unwrap();
                    }
                    got
                }
            });
            let mut x = Xchg::connect(&addr.to_string()).unwrap();
            let theirs = x.bw_report(&mine, version).unwrap();
            let got = raw.join().unwrap();
            let mut want = 65536u64.to_be_bytes().to_vec();
            want.extend(if iters_len == 8 {
                5000u64.to_be_bytes().to_vec()
            } else {
                5000u32.to_be_bytes().to_vec()
            });
            // 150.5 is 0x4062d00000000000, byte-swapped on the wire (bswap_double).
            want.extend([0x40, 0x62, 0xd0, 0, 0, 0, 0, 0]);
            want.extend(149.25f64.to_bits().to_be_bytes());
            want.extend(0.0024f64.to_bits().to_be_bytes());
            assert_eq!(got, want, "to a peer of version {version}");
            assert_eq!(theirs, BwReport { size: 1, iters: 2, bw_peak: 3.0, bw_avg: 4.0, msg_rate: 5.0 });
        }
    }

    #[test]
    fn versions_read_as_atof_reads_them() {
        assert_eq!(version_number("6.06"), 6.06);
        assert_eq!(version_number("5.33"), 5.33);
        assert_eq!(version_number("5.3x"), 5.3);
        assert_eq!(version_number(""), 0.0);
    }

    /// Both ends of ours, over loopback: each learns what the other sent.
    #[test]
    fn two_ends_exchange_in_perftests_order() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let mut x = Xchg::accept(&l).unwrap();
            let v = x.versions(VERSION).unwrap();
            let sys = x.sys_data(8192, 64).unwrap();
            let mtu = x.mtu(5).unwrap();
            let d = Dest { lid: 2, qpn: 0x200, ..Dest::default() };
            let peer = x.keys(&d).unwrap();
            (v, sys, mtu, peer)
        });
        let mut x = Xchg::connect(&addr).unwrap();
        assert_eq!(x.versions("5.99").unwrap(), VERSION);
        assert_eq!(x.sys_data(4096, 128).unwrap(), (8192, 64));
        assert_eq!(x.mtu(3).unwrap(), 5);
        let peer = x.keys(&Dest { lid: 1, qpn: 0x100, ..Dest::default() }).unwrap();
        assert_eq!((peer.lid, peer.qpn), (2, 0x200));
        let (v, sys, mtu, peer) = server.join().unwrap();
        assert_eq!((v.as_str(), sys, mtu, peer.qpn), ("5.99", (4096, 128), 3, 0x100));
    }
}
