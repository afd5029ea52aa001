//! Packet capture: every packet the model puts on the wire, written to a pcap file that
//! Wireshark and tshark read. RoCE v2 fabrics: Ethernet / IPv4 or IPv6 / UDP 4791 / BTH…
//! / ICRC (linktype 1). Fabrics with InfiniBand hosts: ERF records of type 21
//! (InfiniBand: LRH / BTH… / ICRC / VCRC) in a pcap of linktype 197, as ibdump writes
//! them; RoCE hosts of such a fabric appear as ERF Ethernet records (type 2).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use super::icrc;
use super::packet::Packet;
use super::roce;
use crate::{HostConfig, LinkLayer};

/// The RoCE v2 UDP destination port.
pub(crate) const ROCE_V2_PORT: u16 = 4791;
const ERF_TYPE_ETH: u8 = 2;
const ERF_TYPE_INFINIBAND: u8 = 21;

/// A running capture.
pub(crate) struct Capture {
    w: PcapWriter<BufWriter<File>>,
    erf: bool,
    /// Packets written.
    pub packets: u64,
    frame: Vec<u8>,
    tp: Vec<u8>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("erf", &self.erf).field("packets", &self.packets).finish()
    }
}

fn pcap_err(e: pcap_file::PcapError) -> io::Error {
    io::Error::other(e.to_string())
}

impl Capture {
    /// Create `path`; `erf`: ERF records (a fabric with InfiniBand hosts), else Ethernet.
    pub(crate) fn create(path: &Path, erf: bool) -> io::Result<Capture> {
        let header = PcapHeader {
            datalink: if erf { DataLink::ERF } else { DataLink::ETHERNET },
            ts_resolution: TsResolution::NanoSecond,
            // What libpcap writes on the machines that read these files.
            endianness: Endianness::Little,
            ..PcapHeader::default()
        };
        let w = PcapWriter::with_header(BufWriter::new(File::create(path)?), header).map_err(pcap_err)?;
        Ok(Capture { w, erf, packets: 0, frame: Vec::new(), tp: Vec::new() })
    }

    /// Write `p`, sent at `t_ns` from the host `src` to `dst`.
    pub(crate) fn record(&mut self, src: &HostConfig, dst: &HostConfig, t_ns: u64, p: &Packet<'_>) {
        self.tp.clear();
        p.transport(&mut self.tp);
        self.frame.clear();
        match (src.link_layer, self.erf) {
            (LinkLayer::Ethernet, false) => roce_frame(&mut self.frame, src, dst, p),
            (LinkLayer::Ethernet, true) => {
                let mut eth = Vec::new();
                roce_frame(&mut eth, src, dst, p);
                erf_record(&mut self.frame, t_ns, ERF_TYPE_ETH, &[0, 0], &eth);
            }
            (LinkLayer::InfiniBand, _) => {
                let mut ib = Vec::new();
                ib_frame(&mut ib, src, dst, &self.tp);
                erf_record(&mut self.frame, t_ns, ERF_TYPE_INFINIBAND, &[], &ib);
            }
        }
        let len = self.frame.len() as u32;
        if self.w.write_packet(&PcapPacket::new(Duration::from_nanos(t_ns), len, &self.frame)).is_ok() {
            self.packets += 1;
        }
    }

    /// Write what is buffered and close the file.
    pub(crate) fn finish(self) -> io::Result<()> {
        self.w.into_writer().flush()
    }
}

/// Ethernet / IP / UDP / transport / ICRC: the headers of [`roce::ip_udp`], then the
/// UDP payload [`roce::encode`] writes (what the UDP wire carries), which the model's own
/// decoder must read back (checked in debug builds).
fn roce_frame(out: &mut Vec<u8>, src: &HostConfig, dst: &HostConfig, p: &Packet<'_>) {
    let v4 = roce::ipv4_of(&src.gid).is_some() && roce::ipv4_of(&dst.gid).is_some();
    out.extend_from_slice(&dst.mac);
    out.extend_from_slice(&src.mac);
    out.extend_from_slice(if v4 { &[0x08, 0x00] } else { &[0x86, 0xdd] });
    let ip_at = out.len();
    let sport = roce::udp_sport(p.sqpn, p.dqpn);
    let mut tp = Vec::new();
    p.transport(&mut tp);
    let (h, n) = roce::ip_udp(&src.gid, &dst.gid, sport, tp.len());
    out.extend_from_slice(&h[..n]);
    let payload_at = out.len();
    roce::encode(p, &src.gid, &dst.gid, sport, out);
    debug_assert!(
        roce::decode(&out[payload_at..], &src.gid, &dst.gid, sport).is_ok(),
        "a captured packet the decoder refuses: {:02x?}",
        &out[payload_at..]
    );
    if !v4 {
        // UDP over IPv6 must carry a checksum (RFC 8200 8.1); the ICRC masks it, so it
        // is computed last, over the whole datagram with the ICRC.
        let udp_at = ip_at + 40;
        let c = udp6_checksum(&src.gid, &dst.gid, &out[udp_at..]);
        out[udp_at + 6..udp_at + 8].copy_from_slice(&c.to_be_bytes());
    }
}

/// The UDP checksum over IPv6: pseudo-header (addresses, length, next header 17), then
/// the datagram; 0 is sent as 0xffff.
fn udp6_checksum(src: &[u8; 16], dst: &[u8; 16], udp: &[u8]) -> u16 {
    let mut sum = 0u32;
    let mut add = |b: &[u8]| {
        for w in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
    };
    add(src);
    add(dst);
    add(&(udp.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 17]);
    add(udp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

/// LRH (local: no GRH) / transport / ICRC / VCRC.
fn ib_frame(out: &mut Vec<u8>, src: &HostConfig, dst: &HostConfig, tp: &[u8]) {
    // Packet length in 4-byte words, LRH through ICRC.
    let words = ((8 + tp.len() + 4) / 4) as u16;
    out.push(0x00); // VL 0, LVer 0
    out.push(0x02); // SL 0, LNH = 0b10: IBA local, BTH follows
    out.extend_from_slice(&dst.lid.to_be_bytes());
    out.extend_from_slice(&(words & 0x07ff).to_be_bytes());
    out.extend_from_slice(&src.lid.to_be_bytes());
    out.extend_from_slice(tp);
    let crc = icrc::ib_icrc(out);
    out.extend_from_slice(&crc);
    let v = icrc::ib_vcrc(out);
    out.extend_from_slice(&v);
}

/// An ERF record: 16-byte header (little-endian 32.32 time stamp, type, flags, record
/// length, loss counter, wire length), `pad`, then the frame.
fn erf_record(out: &mut Vec<u8>, t_ns: u64, ty: u8, pad: &[u8], frame: &[u8]) {
    let secs = t_ns / 1_000_000_000;
    let frac = ((t_ns % 1_000_000_000) << 32) / 1_000_000_000;
    out.extend_from_slice(&((secs << 32) | frac).to_le_bytes());
    out.push(ty);
    out.push(0x04); // varying-length record, interface 0
    out.extend_from_slice(&((16 + pad.len() + frame.len()) as u16).to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&(frame.len() as u16).to_be_bytes());
    out.extend_from_slice(pad);
    out.extend_from_slice(frame);
}
