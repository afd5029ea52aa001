//! Noise for the UDP wire (step 12's fuzz tests): datagrams that a simulated host's
//! endpoint must drop and count, never act on. Each is one of [`NoiseKind`]; every
//! datagram that carries a well-formed packet names a QPN at or above [`FIRST_QPN`],
//! which no registry hands out, so that noise never reaches a live QP.

use super::packet::{op, AtomicEth, Packet, Reth};
use super::roce;

/// Noise packets name QPNs from here on (registries hand out QPNs below it).
pub const FIRST_QPN: u32 = 0xf0_0000;

/// What a noise datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoiseKind {
    /// Random bytes (0 to 199 of them).
    Random,
    /// A valid packet cut short or lengthened (resealed with a good ICRC or not).
    Resized,
    /// A valid packet with bytes changed, then resealed with a good ICRC: its headers
    /// are what the receiver's checks see.
    Mutated,
    /// A valid packet with one bit flipped after sealing: the ICRC does not match.
    BadIcrc,
    /// A well-formed packet for a QPN nobody has.
    UnknownQpn,
    /// A well-formed packet of another partition (P_Key).
    WrongPKey,
}

/// The kinds in the order [`Noise`] cycles through them.
pub const KINDS: [NoiseKind; 6] = [
    NoiseKind::Random,
    NoiseKind::Resized,
    NoiseKind::Mutated,
    NoiseKind::BadIcrc,
    NoiseKind::UnknownQpn,
    NoiseKind::WrongPKey,
];

/// The opcodes noise packets take.
const OPCODES: [u8; 20] = [
    op::SEND_FIRST,
    op::SEND_MIDDLE,
    op::SEND_LAST,
    op::SEND_ONLY,
    op::SEND_ONLY_IMM,
    op::WRITE_FIRST,
    op::WRITE_MIDDLE,
    op::WRITE_LAST,
    op::WRITE_ONLY,
    op::WRITE_ONLY_IMM,
    op::READ_REQUEST,
    op::READ_RESPONSE_FIRST,
    op::READ_RESPONSE_ONLY,
    op::ACKNOWLEDGE,
    op::ATOMIC_ACKNOWLEDGE,
    op::COMPARE_SWAP,
    op::FETCH_ADD,
    op::SEND_ONLY_INV,
    op::UD_SEND_ONLY,
    op::UD_SEND_ONLY_IMM,
];

/// A seeded source of noise datagrams from the host with GID `src` (whose socket has
/// port `sport`) to the host with GID `dst`.
#[derive(Debug, Clone)]
pub struct Noise {
    rng: u64,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    i: usize,
}

impl Noise {
    /// Noise from seed `seed` (not 0).
    pub fn new(seed: u64, src: [u8; 16], dst: [u8; 16], sport: u16) -> Noise {
        Noise { rng: seed.max(1), src, dst, sport, i: 0 }
    }

    fn next_u64(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// A well-formed packet's datagram, for a QPN at or above [`FIRST_QPN`].
    fn valid(&mut self) -> Vec<u8> {
        let f: [u64; 5] = std::array::from_fn(|_| self.next_u64());
        let opcode = OPCODES[(f[0] % OPCODES.len() as u64) as usize];
        let payload: Vec<u8> = (0..(f[1] % 64) as usize).map(|k| (f[2] >> (k % 8)) as u8).collect();
        let dqpn = FIRST_QPN | (f[3] as u32 & 0xf_ffff);
        let mut p = Packet::new(0, 0, opcode, f[4] as u32 & 0xff_ffff, dqpn, f[2] as u32);
        p.ack_req = f[3] & (1 << 40) != 0;
        match opcode {
            op::UD_SEND_ONLY | op::UD_SEND_ONLY_IMM => p.qkey = Some(f[4] as u32),
            op::READ_REQUEST | op::WRITE_FIRST | op::WRITE_ONLY | op::WRITE_ONLY_IMM => {
                p.reth = Some(Reth { va: f[4], rkey: f[1] as u32, len: payload.len() as u32 })
            }
            op::COMPARE_SWAP | op::FETCH_ADD => {
                p.atomic = Some(AtomicEth { va: f[4] & !7, rkey: f[1] as u32, swap_add: f[0], compare: f[3] })
            }
            _ => {}
        }
        if matches!(
            opcode,
            op::READ_RESPONSE_FIRST | op::READ_RESPONSE_ONLY | op::ACKNOWLEDGE | op::ATOMIC_ACKNOWLEDGE
        ) {
            p.aeth = Some((0x1f, 0));
        }
        if opcode == op::ATOMIC_ACKNOWLEDGE {
            p.atomic_ack = Some(f[0]);
        }
        if matches!(opcode, op::SEND_ONLY_IMM | op::WRITE_ONLY_IMM | op::UD_SEND_ONLY_IMM) {
            p.imm = Some([1, 2, 3, 4]);
        }
        if opcode == op::SEND_ONLY_INV {
            p.ieth = Some([5, 6, 7, 8]);
        }
        let has_payload = !matches!(
            opcode,
            op::READ_REQUEST | op::ACKNOWLEDGE | op::ATOMIC_ACKNOWLEDGE | op::COMPARE_SWAP | op::FETCH_ADD
        );
        if has_payload {
            p.payload = &payload;
        }
        let mut dg = Vec::new();
        roce::encode(&p, &self.src, &self.dst, self.sport, &mut dg);
        dg
    }

    /// Replaces the last 4 bytes of `dg` (if it has them) with the ICRC of the rest.
    fn seal(&self, dg: &mut Vec<u8>) {
        let n = dg.len().saturating_sub(4);
        dg.truncate(n);
        let crc = roce::icrc_of(&self.src, &self.dst, self.sport, dg);
        dg.extend_from_slice(&crc);
    }

    /// The next datagram and its kind (the kinds take turns).
    pub fn datagram(&mut self) -> (NoiseKind, Vec<u8>) {
        let kind = KINDS[self.i % KINDS.len()];
        self.i += 1;
        let r = self.next_u64();
        let dg = match kind {
            NoiseKind::Random => (0..(r % 200) as usize).map(|_| self.next_u64() as u8).collect(),
            NoiseKind::Resized => {
                let mut dg = self.valid();
                let n = (r as usize) % (dg.len() + 20);
                dg.resize(n, 0xa5);
                if r & (1 << 40) != 0 {
                    self.seal(&mut dg);
                }
                dg
            }
            NoiseKind::Mutated => {
                let mut dg = self.valid();
                for _ in 0..1 + r % 4 {
                    let at = (self.next_u64() as usize) % dg.len();
                    dg[at] = self.next_u64() as u8;
                }
                // The destination QP stays one nobody has.
                if dg.len() >= 8 {
                    dg[5] |= (FIRST_QPN >> 16) as u8;
                }
                self.seal(&mut dg);
                dg
            }
            NoiseKind::BadIcrc => {
                let mut dg = self.valid();
                let at = (r as usize) % dg.len();
                // (Not BTH byte 4, which the ICRC masks; not the ICRC's own bytes' bits
                // alone either: any flip outside the masked fields breaks it.)
                let at = if at == 4 { 0 } else { at };
                dg[at] ^= 1 << ((r >> 32) % 8);
                dg
            }
            NoiseKind::UnknownQpn => self.valid(),
            NoiseKind::WrongPKey => {
                let mut dg = self.valid();
                let pkey = 0x8000 | (r as u16 & 0x7ffe);
                dg[2..4].copy_from_slice(&pkey.to_be_bytes());
                self.seal(&mut dg);
                dg
            }
        };
        (kind, dg)
    }
}

/// A READ RESPONSE ONLY packet's datagram from the host with GID `src` (its socket's
/// port `sport`) to QP `dqpn` of the host with GID `dst`, PSN `psn`, with an ACK AETH and
/// `payload`, sealed with its ICRC: what a responder sends, for tests that play a
/// responder that answers wrongly (a response of the wrong length or kind).
pub fn read_response_only(
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dqpn: u32,
    psn: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut p = Packet::new(0, 0, op::READ_RESPONSE_ONLY, 0, dqpn, psn & 0xff_ffff);
    p.aeth = Some((super::packet::aeth::ACK, 0));
    p.payload = payload;
    let mut dg = Vec::new();
    roce::encode(&p, &src, &dst, sport, &mut dg);
    dg
}

/// The opcode, destination QPN and PSN of a datagram's BTH (its first 12 bytes), when
/// it has one and an ICRC after it.
pub fn bth(dg: &[u8]) -> Option<(u8, u32, u32)> {
    if dg.len() < 16 {
        return None;
    }
    let qpn = u32::from_be_bytes([0, dg[5], dg[6], dg[7]]);
    let psn = u32::from_be_bytes([0, dg[9], dg[10], dg[11]]);
    Some((dg[0], qpn, psn))
}

#[cfg(test)]
mod tests {
    use super::super::roce::tests::gid4;
    use super::*;

    /// Each kind is what it says to the decoder: random bytes, bad ICRCs and foreign
    /// P_Keys are refused; unknown-QPN packets are accepted and name a QPN nobody has.
    #[test]
    fn each_kind_reads_as_it_says() {
        let (a, b) = (gid4([10, 0, 0, 1]), gid4([10, 0, 0, 2]));
        let mut n = Noise::new(7, a, b, 4791);
        let mut accepted = std::collections::HashMap::new();
        for _ in 0..60_000 {
            let (kind, dg) = n.datagram();
            let r = roce::decode(&dg, &a, &b, 4791);
            match kind {
                NoiseKind::Random | NoiseKind::BadIcrc => {
                    assert!(
                        matches!(r, Err(roce::Malformed::Icrc | roce::Malformed::Short)),
                        "{kind:?}: {r:?}"
                    )
                }
                NoiseKind::WrongPKey => assert!(matches!(r, Err(roce::Malformed::PKey(_))), "{r:?}"),
                NoiseKind::UnknownQpn => assert!(r.expect("well formed").dqpn >= FIRST_QPN),
                NoiseKind::Mutated | NoiseKind::Resized => {
                    if let Ok(p) = &r {
                        assert!(p.dqpn >= FIRST_QPN, "{kind:?} reached QPN {:#x}", p.dqpn);
                    }
                }
            }
            *accepted.entry(kind).or_insert(0) += u32::from(r.is_ok());
        }
        // Some resized and mutated packets are still well formed.
        assert!(accepted[&NoiseKind::Mutated] > 100 && accepted[&NoiseKind::Resized] > 100, "{accepted:?}");
    }
}
