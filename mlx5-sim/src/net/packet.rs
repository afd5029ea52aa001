//! InfiniBand transport packets (IBA vol. 1, ch. 9): the base transport header's opcodes
//! and the extension headers each opcode carries, as the model puts them on the wire.

/// BTH opcodes (IBA table 38): RC (prefix 000) and UD (prefix 011).
#[allow(dead_code)]
pub(crate) mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    pub const SEND_LAST_INV: u8 = 0x16;
    pub const SEND_ONLY_INV: u8 = 0x17;
    pub const UD_SEND_ONLY: u8 = 0x64;
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;

    /// A DC request on the UDP wire: the RC request opcode `rc` in the manufacturer-specific
    /// range (prefix 110), with a DCETH after the BTH [model choice: ConnectX's DC wire
    /// format is not public; IBA leaves opcodes 0xc0-0xff to manufacturers].
    pub const fn dc(rc: u8) -> u8 {
        0xc0 | rc
    }

    /// Masked compare-and-swap and fetch-and-add (spec §3.5) as the model's RC operation
    /// codes: IBA defines no masked atomics and ConnectX's packets for them are not
    /// public, so these two codes of the RC range that IBA reserves stand for them inside
    /// the model, and never go on the wire as such: an RC request carries them in the
    /// manufacturer range ([`vendor`], 0xfc and 0xfd), a DC one as any DC request
    /// ([`dc`], 0xdc and 0xdd), each with a MaskedAtomicETH (the AtomicETH, then the
    /// swap mask, the compare mask, the argument width and 3 reserved bytes) [model
    /// choice].
    pub const MASKED_COMPARE_SWAP: u8 = 0x1c;
    pub const MASKED_FETCH_ADD: u8 = 0x1d;

    /// The wire opcode of an RC request of model operation `rc` that IBA does not define
    /// (the masked atomics): in the manufacturer range, prefix 111.
    pub const fn vendor(rc: u8) -> u8 {
        0xe0 | rc
    }

    /// The model operation of manufacturer RC opcode `o` ([`vendor`]), if it is one.
    pub const fn vendor_rc(o: u8) -> Option<u8> {
        match o {
            0xfc => Some(MASKED_COMPARE_SWAP),
            0xfd => Some(MASKED_FETCH_ADD),
            _ => None,
        }
    }

    /// The RC operation of an atomic mlx5 send opcode (`crate::wire::opcode`): compare-
    /// and-swap and fetch-and-add, masked or not; `None` for any other.
    pub const fn atomic_of(wqe_op: u8) -> Option<u8> {
        use crate::wire::opcode;
        match wqe_op {
            opcode::ATOMIC_CS => Some(COMPARE_SWAP),
            opcode::ATOMIC_FA => Some(FETCH_ADD),
            opcode::ATOMIC_MASKED_CS => Some(MASKED_COMPARE_SWAP),
            opcode::ATOMIC_MASKED_FA => Some(MASKED_FETCH_ADD),
            _ => None,
        }
    }

    /// The BTH opcode of RC atomic operation `rc` ([`atomic_of`]): a masked one in the
    /// manufacturer range ([`vendor`]).
    pub const fn rc_atomic(rc: u8) -> u8 {
        if is_masked(rc) {
            vendor(rc)
        } else {
            rc
        }
    }

    /// Whether model operation `rc` is a masked atomic.
    pub const fn is_masked(rc: u8) -> bool {
        matches!(rc, MASKED_COMPARE_SWAP | MASKED_FETCH_ADD)
    }

    /// The RC opcode of DC request opcode `o` ([`dc`]), if it is one.
    pub const fn dc_rc(o: u8) -> Option<u8> {
        if o & 0xe0 == 0xc0 {
            Some(o & 0x1f)
        } else {
            None
        }
    }
}

/// AETH syndromes (IBA 9.7.5.1.2): ACK with credit field 0b11111 (no credit
/// information), RNR NAK with its timer, NAK codes.
pub(crate) mod aeth {
    pub const ACK: u8 = 0x1f;
    pub const RNR_NAK: u8 = 0x20;
    pub const NAK_PSN_SEQ: u8 = 0x60;
    pub const NAK_INVALID_REQUEST: u8 = 0x61;
    pub const NAK_REMOTE_ACCESS: u8 = 0x62;
    pub const NAK_REMOTE_OP: u8 = 0x63;
}

/// Position of a packet in a multi-packet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pos {
    First,
    Middle,
    Last,
    Only,
}

impl Pos {
    pub(crate) fn of(i: u32, n: u32) -> Pos {
        match (i, n) {
            (_, 1) => Pos::Only,
            (0, _) => Pos::First,
            (i, n) if i + 1 == n => Pos::Last,
            _ => Pos::Middle,
        }
    }
    fn pick(self, first: u8, middle: u8, last: u8, only: u8) -> u8 {
        match self {
            Pos::First => first,
            Pos::Middle => middle,
            Pos::Last => last,
            Pos::Only => only,
        }
    }
}

/// The opcode of packet `pos` of a SEND (`imm`: with immediate, `inv`: with invalidate).
pub(crate) fn send_opcode(pos: Pos, imm: bool, inv: bool) -> u8 {
    let last = if imm {
        op::SEND_LAST_IMM
    } else if inv {
        op::SEND_LAST_INV
    } else {
        op::SEND_LAST
    };
    let only = if imm {
        op::SEND_ONLY_IMM
    } else if inv {
        op::SEND_ONLY_INV
    } else {
        op::SEND_ONLY
    };
    pos.pick(op::SEND_FIRST, op::SEND_MIDDLE, last, only)
}

/// The opcode of packet `pos` of an RDMA WRITE.
pub(crate) fn write_opcode(pos: Pos, imm: bool) -> u8 {
    let (last, only) =
        if imm { (op::WRITE_LAST_IMM, op::WRITE_ONLY_IMM) } else { (op::WRITE_LAST, op::WRITE_ONLY) };
    pos.pick(op::WRITE_FIRST, op::WRITE_MIDDLE, last, only)
}

/// The opcode of READ response packet `pos`.
pub(crate) fn read_response_opcode(pos: Pos) -> u8 {
    pos.pick(
        op::READ_RESPONSE_FIRST,
        op::READ_RESPONSE_MIDDLE,
        op::READ_RESPONSE_LAST,
        op::READ_RESPONSE_ONLY,
    )
}

/// RETH: virtual address, R_Key, DMA length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// AtomicETH: virtual address, R_Key, swap (or add) data, compare data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// One packet as the model sends it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Packet<'a> {
    /// Sending and receiving host.
    pub src: usize,
    pub dst: usize,
    pub opcode: u8,
    /// Solicited event.
    pub se: bool,
    pub dqpn: u32,
    /// The sender's QPN (UDP source port entropy; UD: DETH's source QP).
    pub sqpn: u32,
    pub ack_req: bool,
    pub psn: u32,
    /// UD: Q_Key (DETH).
    pub qkey: Option<u32>,
    pub reth: Option<Reth>,
    pub atomic: Option<AtomicEth>,
    /// AETH: syndrome and MSN.
    pub aeth: Option<(u8, u32)>,
    /// AtomicAckETH: the original remote data.
    pub atomic_ack: Option<u64>,
    /// ImmDt, as the WQE carries it (network order).
    pub imm: Option<[u8; 4]>,
    /// IETH: the R_Key to invalidate, as the WQE carries it (network order).
    pub ieth: Option<[u8; 4]>,
    /// DCETH of a DC request ([`op::dc`]): the DC access key and the DCI's QPN.
    pub dceth: Option<(u64, u32)>,
    /// A masked atomic's extension after its AtomicETH ([`op::MASKED_COMPARE_SWAP`]):
    /// swap mask, compare mask, argument width.
    pub masks: Option<Masks>,
    pub payload: &'a [u8],
}

/// The masked atomic's part of a MaskedAtomicETH ([`op::MASKED_COMPARE_SWAP`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Masks {
    pub swap_mask: u64,
    pub compare_mask: u64,
    /// Argument width in bytes (4 or 8).
    pub width: u8,
}

impl<'a> Packet<'a> {
    /// A packet with only a BTH.
    pub(crate) fn new(src: usize, dst: usize, opcode: u8, sqpn: u32, dqpn: u32, psn: u32) -> Self {
        Packet {
            src,
            dst,
            opcode,
            se: false,
            dqpn,
            sqpn,
            ack_req: false,
            psn: psn & 0xff_ffff,
            qkey: None,
            reth: None,
            atomic: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            dceth: None,
            masks: None,
            payload: &[],
        }
    }

    /// The transport bytes: BTH, the DCETH of a DC request, the extension headers in IBA
    /// order (DETH, RETH,
    /// AtomicETH, AETH, AtomicAckETH, ImmDt, IETH), the payload and its pad to 4 bytes
    /// (not the ICRC). P_Key 0xffff, transport version 0.
    pub(crate) fn transport(&self, out: &mut Vec<u8>) {
        let pad = (4 - self.payload.len() % 4) % 4;
        out.push(self.opcode);
        out.push(u8::from(self.se) << 7 | (pad as u8) << 4);
        out.extend_from_slice(&0xffffu16.to_be_bytes());
        out.push(0);
        out.extend_from_slice(&self.dqpn.to_be_bytes()[1..]);
        out.push(u8::from(self.ack_req) << 7);
        out.extend_from_slice(&self.psn.to_be_bytes()[1..]);
        if let Some((key, dci)) = self.dceth {
            out.extend_from_slice(&key.to_be_bytes());
            out.push(0);
            out.extend_from_slice(&dci.to_be_bytes()[1..]);
        }
        if let Some(q) = self.qkey {
            out.extend_from_slice(&q.to_be_bytes());
            out.push(0);
            out.extend_from_slice(&self.sqpn.to_be_bytes()[1..]);
        }
        if let Some(r) = self.reth {
            out.extend_from_slice(&r.va.to_be_bytes());
            out.extend_from_slice(&r.rkey.to_be_bytes());
            out.extend_from_slice(&r.len.to_be_bytes());
        }
        if let Some(a) = self.atomic {
            out.extend_from_slice(&a.va.to_be_bytes());
            out.extend_from_slice(&a.rkey.to_be_bytes());
            out.extend_from_slice(&a.swap_add.to_be_bytes());
            out.extend_from_slice(&a.compare.to_be_bytes());
        }
        if let Some(m) = self.masks {
            out.extend_from_slice(&m.swap_mask.to_be_bytes());
            out.extend_from_slice(&m.compare_mask.to_be_bytes());
            out.extend_from_slice(&[m.width, 0, 0, 0]);
        }
        if let Some((s, msn)) = self.aeth {
            out.push(s);
            out.extend_from_slice(&msn.to_be_bytes()[1..]);
        }
        if let Some(v) = self.atomic_ack {
            out.extend_from_slice(&v.to_be_bytes());
        }
        if let Some(i) = self.imm {
            out.extend_from_slice(&i);
        }
        if let Some(k) = self.ieth {
            out.extend_from_slice(&k);
        }
        out.extend_from_slice(self.payload);
        out.extend(std::iter::repeat_n(0u8, pad));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_by_position() {
        assert_eq!(Pos::of(0, 1), Pos::Only);
        assert_eq!([Pos::of(0, 3), Pos::of(1, 3), Pos::of(2, 3)], [Pos::First, Pos::Middle, Pos::Last]);
        assert_eq!(send_opcode(Pos::Last, true, false), 0x03);
        assert_eq!(send_opcode(Pos::Only, false, true), 0x17);
        assert_eq!(write_opcode(Pos::First, false), 0x06);
        assert_eq!(write_opcode(Pos::Only, true), 0x0b);
        assert_eq!(read_response_opcode(Pos::Middle), 0x0e);
    }

    /// A WRITE ONLY with 3 bytes of payload: BTH (pad count 1, A bit), RETH, payload, pad.
    #[test]
    fn transport_bytes_of_a_write_only() {
        let mut p = Packet::new(0, 1, op::WRITE_ONLY, 0x11, 0x000123, 0x00abcdef);
        p.ack_req = true;
        p.reth = Some(Reth { va: 0x1000, rkey: 0x2222, len: 3 });
        p.payload = b"abc";
        let mut b = Vec::new();
        p.transport(&mut b);
        assert_eq!(
            b,
            [
                0x0a, 0x10, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23, 0x80, 0xab, 0xcd, 0xef, //
                0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x22, 0x22, 0, 0, 0, 3, //
                b'a', b'b', b'c', 0
            ]
        );
    }
}
