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
            (LinkLayer::Ethernet, false) => roce_frame(&mut self.frame, src, dst, p, &self.tp),
            (LinkLayer::Ethernet, true) => {
                let mut eth = Vec::new();
                roce_frame(&mut eth, src, dst, p, &self.tp);
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

fn ipv4_of(gid: &[u8; 16]) -> Option<[u8; 4]> {
    (gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff)
        .then(|| [gid[12], gid[13], gid[14], gid[15]])
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for w in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet / IP / UDP / transport / ICRC.
fn roce_frame(out: &mut Vec<u8>, src: &HostConfig, dst: &HostConfig, p: &Packet<'_>, tp: &[u8]) {
    let v4 = ipv4_of(&src.gid).zip(ipv4_of(&dst.gid));
    out.extend_from_slice(&dst.mac);
    out.extend_from_slice(&src.mac);
    out.extend_from_slice(if v4.is_some() { &[0x08, 0x00] } else { &[0x86, 0xdd] });
    let ip_at = out.len();
    let udp_len = (8 + tp.len() + 4) as u16;
    match v4 {
        Some((s, d)) => {
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            h[6] = 0x40; // don't fragment
            h[8] = 64; // TTL
            h[9] = 17; // UDP
            h[12..16].copy_from_slice(&s);
            h[16..20].copy_from_slice(&d);
            let c = ipv4_checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend_from_slice(&h);
        }
        None => {
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&udp_len.to_be_bytes());
            out.push(17); // next header: UDP
            out.push(64); // hop limit
            out.extend_from_slice(&src.gid);
            out.extend_from_slice(&dst.gid);
        }
    }
    // The source port carries flow entropy (rdma-core derives it from the flow label);
    // the model takes it from the QP numbers, in 0xc000..=0xffff.
    let sport = 0xc000 | ((p.sqpn ^ p.dqpn) & 0x3fff) as u16;
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&ROCE_V2_PORT.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]); // IPv4: no UDP checksum (allowed); IPv6: below
    out.extend_from_slice(tp);
    let crc = icrc::roce_v2_icrc(&out[ip_at..]);
    out.extend_from_slice(&crc);
    if v4.is_none() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_checksum_is_ones_complement() {
        // RFC 1071's example header sums to 0xffff with its checksum in place.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00, 0x01, 0xc0,
            0xa8, 0x00, 0xc7,
        ];
        let c = ipv4_checksum(&h);
        assert_eq!(c, 0xb861);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(ipv4_checksum(&h), 0);
    }
}
