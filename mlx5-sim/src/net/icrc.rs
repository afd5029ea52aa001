//! The invariant CRC (IBA 7.8.1; RoCE v2: annex A17.3.3) and the InfiniBand variant CRC
//! (IBA 7.8.2).

/// CRC-32 as Ethernet and zlib compute it (reflected polynomial 0xedb88320, initial and
/// final value all ones).
pub(crate) fn crc32(data: &[u8]) -> u32 {
    crc32_update(0xffff_ffff, data) ^ 0xffff_ffff
}

/// The byte-at-a-time table of the reflected polynomial 0xedb88320.
const CRC32_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xedb8_8320 } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = (crc >> 8) ^ CRC32_TABLE[((crc ^ u32::from(b)) & 0xff) as usize];
    }
    crc
}

/// The ICRC of a RoCE v2 packet. `ip_udp_bth_on` is the packet from the IP header on,
/// without the ICRC. Covered, with the variant fields set to ones: 8 bytes of ones in
/// place of the LRH, the IP header (IPv4: TOS, TTL and checksum; IPv6: traffic class,
/// flow label and hop limit), the UDP header (checksum), the BTH (its reserved byte 4,
/// with FECN/BECN), then everything up to the ICRC. Sent least significant byte first,
/// as rdma-core's rxe writes it.
pub(crate) fn roce_v2_icrc(ip_udp_bth_on: &[u8]) -> [u8; 4] {
    let mut masked = Vec::with_capacity(8 + ip_udp_bth_on.len());
    masked.extend_from_slice(&[0xff; 8]);
    masked.extend_from_slice(ip_udp_bth_on);
    let ip = &mut masked[8..];
    // (A byte the input is too short to have is not masked: no panic on a runt.)
    let mut ones = |at: usize| {
        if let Some(b) = ip.get_mut(at) {
            *b = 0xff;
        }
    };
    let ip_len = if ip_udp_bth_on.first().is_some_and(|b| b >> 4 == 4) {
        ones(1); // TOS
        ones(8); // TTL
        ones(10); // header checksum
        ones(11);
        20
    } else {
        ones(1); // traffic class and flow label (with the low half of byte 0, below)
        ones(2);
        ones(3);
        ones(7); // hop limit
        40
    };
    ones(ip_len + 6); // UDP checksum
    ones(ip_len + 7);
    ones(ip_len + 8 + 4); // BTH resv8a
    if ip_len == 40 {
        if let Some(b) = ip.first_mut() {
            *b |= 0x0f;
        }
    }
    crc32(&masked).to_le_bytes()
}

/// The ICRC of a native InfiniBand packet without GRH: `lrh_on` from the LRH on, without
/// ICRC and VCRC; the LRH's VL and the BTH's reserved byte 4 are ones.
pub(crate) fn ib_icrc(lrh_on: &[u8]) -> [u8; 4] {
    let mut masked = lrh_on.to_vec();
    masked[0] |= 0xf0; // VL
    masked[8 + 4] = 0xff; // BTH resv8a
    crc32(&masked).to_le_bytes()
}

/// The VCRC of a native InfiniBand packet: CRC-16 (polynomial 0x100b, reflected,
/// initial and final value all ones) over LRH through ICRC [unverified: bit order and
/// byte order of the result; Wireshark does not check it].
pub(crate) fn ib_vcrc(lrh_to_icrc: &[u8]) -> [u8; 2] {
    let mut crc: u16 = 0xffff;
    for &b in lrh_to_icrc {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xd008 } else { crc >> 1 };
        }
    }
    (crc ^ 0xffff).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RoCE v2 CNP captured on a ConnectX-4 Lx, as published with scapy's RoCE tests
    /// (`test/contrib/roce.uts`): the ICRC the NIC computed is the packet's last 4 bytes.
    #[test]
    fn roce_v2_icrc_matches_a_connectx_capture() {
        let hex = "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161\
                   0a0011010a0012010000 12b70028 0000 8100ffff4000011800000000\
                   00000000000000000000000000000000 82fd002a";
        let b: Vec<u8> = hex
            .split_whitespace()
            .collect::<String>()
            .as_bytes()
            .chunks(2)
            .map(|c| u8::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap())
            .collect();
        assert_eq!(b.len(), 74);
        let (frame, icrc) = b.split_at(70);
        assert_eq!(roce_v2_icrc(&frame[14..]), icrc);
    }

    #[test]
    fn crc32_check_value() {
        // The standard check value of CRC-32 (ISO-HDLC).
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    /// The table gives what the bit-at-a-time definition gives.
    #[test]
    fn crc32_table_is_the_bitwise_crc() {
        let bitwise = |data: &[u8]| {
            let mut crc = 0xffff_ffffu32;
            for &b in data {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
                }
            }
            crc ^ 0xffff_ffff
        };
        let data: Vec<u8> = (0..1000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for n in [0, 1, 3, 64, 999, 1000] {
            assert_eq!(crc32(&data[..n]), bitwise(&data[..n]), "{n} bytes");
        }
    }
}
