//! The pure CQE reader (spec §5.1–§5.4): decodes a 64-byte CQE (or error
//! CQE) into a [`Cqe`] without knowing who posted the work it completes.

/// CQE opcodes (`op_own[7:4]`, spec §5.3).
pub mod cqe_opcode {
    /// Requester success.
    pub const REQ: u8 = 0;
    /// Responder: RDMA WRITE with immediate consumed a receive.
    pub const RESP_WR_IMM: u8 = 1;
    /// Responder: SEND.
    pub const RESP_SEND: u8 = 2;
    /// Responder: SEND with immediate.
    pub const RESP_SEND_IMM: u8 = 3;
    /// Responder: SEND with invalidate.
    pub const RESP_SEND_INV: u8 = 4;
    /// Requester error (flush included).
    pub const REQ_ERR: u8 = 13;
    /// Responder error (flush included).
    pub const RESP_ERR: u8 = 14;
    /// Never written by hardware: every slot's initial value.
    pub const INVALID: u8 = 15;
}

/// Error syndromes of an error CQE (spec §5.4), by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// 0x01 LOCAL_LENGTH_ERR.
    LocalLength,
    /// 0x02 LOCAL_QP_OP_ERR.
    LocalQpOperation,
    /// 0x04 LOCAL_PROT_ERR.
    LocalProtection,
    /// 0x05 WR_FLUSH_ERR.
    WrFlush,
    /// 0x06 MW_BIND_ERR.
    MwBind,
    /// 0x10 BAD_RESP_ERR.
    BadResponse,
    /// 0x11 LOCAL_ACCESS_ERR.
    LocalAccess,
    /// 0x12 REMOTE_INVAL_REQ_ERR.
    RemoteInvalidRequest,
    /// 0x13 REMOTE_ACCESS_ERR.
    RemoteAccess,
    /// 0x14 REMOTE_OP_ERR.
    RemoteOperation,
    /// 0x15 TRANSPORT_RETRY_EXC_ERR.
    TransportRetryExceeded,
    /// 0x16 RNR_RETRY_EXC_ERR.
    RnrRetryExceeded,
    /// 0x22 REMOTE_ABORTED_ERR.
    RemoteAborted,
    /// A syndrome this library does not name (reported as `IBV_WC_GENERAL_ERR`).
    Other(u8),
}

impl Syndrome {
    /// Decode the syndrome byte (offset 0x37).
    pub fn from_raw(v: u8) -> Self {
        match v {
            0x01 => Self::LocalLength,
            0x02 => Self::LocalQpOperation,
            0x04 => Self::LocalProtection,
            0x05 => Self::WrFlush,
            0x06 => Self::MwBind,
            0x10 => Self::BadResponse,
            0x11 => Self::LocalAccess,
            0x12 => Self::RemoteInvalidRequest,
            0x13 => Self::RemoteAccess,
            0x14 => Self::RemoteOperation,
            0x15 => Self::TransportRetryExceeded,
            0x16 => Self::RnrRetryExceeded,
            0x22 => Self::RemoteAborted,
            other => Self::Other(other),
        }
    }
    /// The raw syndrome byte.
    pub fn raw(self) -> u8 {
        match self {
            Self::LocalLength => 0x01,
            Self::LocalQpOperation => 0x02,
            Self::LocalProtection => 0x04,
            Self::WrFlush => 0x05,
            Self::MwBind => 0x06,
            Self::BadResponse => 0x10,
            Self::LocalAccess => 0x11,
            Self::RemoteInvalidRequest => 0x12,
            Self::RemoteAccess => 0x13,
            Self::RemoteOperation => 0x14,
            Self::TransportRetryExceeded => 0x15,
            Self::RnrRetryExceeded => 0x16,
            Self::RemoteAborted => 0x22,
            Self::Other(v) => v,
        }
    }
}

/// The error part of an error CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{syndrome:?} (syndrome 0x{:02x}, vendor 0x{vendor_err:02x})", syndrome.raw())]
pub struct CqeError {
    /// `syndrome` (0x37), by name.
    pub syndrome: Syndrome,
    /// `vendor_err_synd` (0x36, → `ibv_wc.vendor_err`).
    pub vendor_err: u8,
    /// Byte 0x34 (kernel name `hw_err_synd`).
    pub hw_err_synd: u8,
    /// Byte 0x35 (kernel name `hw_synd_type`).
    pub hw_synd_type: u8,
}

/// Outcome of a completed work request: an error CQE is a result, never
/// "nothing yet".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Completed successfully.
    Success,
    /// Completed with an error (flushes included).
    Error(CqeError),
}

impl Status {
    /// Whether the work request succeeded.
    pub fn is_ok(&self) -> bool {
        matches!(self, Status::Success)
    }
    /// The syndrome, if this is an error.
    pub fn syndrome(&self) -> Option<Syndrome> {
        match self {
            Status::Success => None,
            Status::Error(e) => Some(e.syndrome),
        }
    }
}

/// `op_own[3:2]`: where the CQE's data is (spec §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeFormat {
    /// A plain CQE.
    Normal,
    /// Scatter-to-CQE: up to 32 data bytes in bytes 0..32 of this CQE.
    Scatter32,
    /// Scatter-to-CQE: up to 64 data bytes in the first half of a 128-byte slot.
    Scatter64,
    /// The title of a compressed session (spec §5.8): `byte_cnt` mini CQEs follow.
    Compressed,
}

impl CqeFormat {
    #[inline(always)]
    fn from_op_own(op_own: u8) -> Self {
        match (op_own >> 2) & 3 {
            0 => Self::Normal,
            1 => Self::Scatter32,
            2 => Self::Scatter64,
            _ => Self::Compressed,
        }
    }
}

/// A decoded 64-byte CQE (spec §5.1) or error CQE (§5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// `op_own` (0x3f).
    pub op_own: u8,
    /// `op_own[7:4]`, see [`cqe_opcode`].
    pub opcode: u8,
    /// `op_own[3:2]`.
    pub format: CqeFormat,
    /// `op_own[1]`: solicited event.
    pub se: bool,
    /// `op_own[0]`.
    pub owner: bool,
    /// `sop_drop_qpn[23:0]`: the local QPN (DCT number for a DCT).
    pub qpn: u32,
    /// `sop_drop_qpn[31:24]`: the send WQE's opcode (requester CQEs).
    pub wqe_opcode: u8,
    /// `wqe_counter` (0x3c): send WQE index, receive counter or SRQ index.
    pub wqe_counter: u16,
    /// `byte_cnt` (0x2c); 0 in error CQEs; a compressed title's mini-CQE count.
    pub byte_cnt: u32,
    /// `imm_inval_pkey` (0x24) as a host value of the big-endian field.
    pub imm_inval_pkey: u32,
    /// `srqn_uidx` (0x20).
    pub srqn_uidx: u32,
    /// `flags_rqpn` (0x18); 0 in error CQEs.
    pub flags_rqpn: u32,
    /// `slid` (0x16); 0 in error CQEs.
    pub slid: u16,
    /// `timestamp` (0x30); 0 in error CQEs.
    pub timestamp: u64,
    /// Present for REQ_ERR / RESP_ERR CQEs.
    pub error: Option<CqeError>,
}

#[inline(always)]
fn be32(p: *const u8) -> u32 {
    // SAFETY: callers pass a pointer inside a readable CQE.
    u32::from_be(unsafe { (p as *const u32).read_unaligned() })
}

#[inline(always)]
fn be16(p: *const u8) -> u16 {
    // SAFETY: callers pass a pointer inside a readable CQE.
    u16::from_be(unsafe { (p as *const u16).read_unaligned() })
}

/// A CQE in place: each accessor reads one field (big-endian) when asked,
/// so a poller that needs only the opcode, QPN, counter and status reads
/// only those. [`Cqe::read`] decodes everything through it.
#[derive(Clone, Copy, Debug)]
pub struct CqeView {
    p: *const u8,
}

impl CqeView {
    /// A view of the 64-byte CQE proper at `p`.
    ///
    /// # Safety
    /// `p` must point at 64 readable bytes for as long as the view is used.
    #[inline(always)]
    pub unsafe fn new(p: *const u8) -> Self {
        CqeView { p }
    }
    #[inline(always)]
    fn at(&self, off: usize) -> *const u8 {
        self.p.wrapping_add(off)
    }
    /// `op_own` (0x3f).
    #[inline(always)]
    pub fn op_own(&self) -> u8 {
        // SAFETY: inside the 64 bytes (constructor contract).
        unsafe { *self.at(0x3f) }
    }
    /// `op_own[7:4]`.
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.op_own() >> 4
    }
    /// `op_own[3:2]`.
    #[inline(always)]
    pub fn format(&self) -> CqeFormat {
        CqeFormat::from_op_own(self.op_own())
    }
    /// Whether this is an error CQE (REQ_ERR or RESP_ERR).
    #[inline(always)]
    pub fn is_error(&self) -> bool {
        matches!(self.opcode(), cqe_opcode::REQ_ERR | cqe_opcode::RESP_ERR)
    }
    /// `sop_drop_qpn` (0x38).
    #[inline(always)]
    pub fn sop_drop_qpn(&self) -> u32 {
        be32(self.at(0x38))
    }
    /// `sop_drop_qpn[23:0]`.
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn() & 0xff_ffff
    }
    /// `sop_drop_qpn` as it lies in memory (big-endian, not swapped): for
    /// a compare with a key kept in the same order.
    #[inline(always)]
    pub fn sop_drop_qpn_raw(&self) -> u32 {
        // SAFETY: 0x38..0x3c lies inside the CQE (constructor contract).
        unsafe { (self.at(0x38) as *const u32).read_unaligned() }
    }
    /// `wqe_counter` (0x3c).
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        be16(self.at(0x3c))
    }
    /// `byte_cnt` (0x2c).
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        be32(self.at(0x2c))
    }
    /// `imm_inval_pkey` (0x24).
    #[inline(always)]
    pub fn imm_inval_pkey(&self) -> u32 {
        be32(self.at(0x24))
    }
    /// `srqn_uidx` (0x20).
    #[inline(always)]
    pub fn srqn_uidx(&self) -> u32 {
        be32(self.at(0x20))
    }
    /// `flags_rqpn` (0x18).
    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        be32(self.at(0x18))
    }
    /// `slid` (0x16).
    #[inline(always)]
    pub fn slid(&self) -> u16 {
        be16(self.at(0x16))
    }
    /// `timestamp` (0x30).
    #[inline(always)]
    pub fn timestamp(&self) -> u64 {
        // SAFETY: inside the 64 bytes (constructor contract).
        u64::from_be(unsafe { (self.at(0x30) as *const u64).read_unaligned() })
    }
    /// The syndrome fields (meaningful for error CQEs).
    #[inline(always)]
    pub fn error_fields(&self) -> CqeError {
        // SAFETY: bytes 0x34..0x38 of the CQE (constructor contract).
        let b = unsafe { (self.at(0x34) as *const [u8; 4]).read() };
        CqeError {
            syndrome: Syndrome::from_raw(b[3]),
            vendor_err: b[2],
            hw_err_synd: b[0],
            hw_synd_type: b[1],
        }
    }
    /// The completion status: an error CQE is a result, never "nothing yet".
    #[inline(always)]
    pub fn status(&self) -> Status {
        if self.is_error() {
            Status::Error(self.error_fields())
        } else {
            Status::Success
        }
    }
}

impl Cqe {
    /// Decode a CQE held in a byte array.
    pub fn parse(cqe: &[u8; 64]) -> Self {
        // SAFETY: 64 readable bytes.
        unsafe { Self::read(cqe.as_ptr()) }
    }

    /// Decode the CQE at `p` (the 64-byte CQE proper: for 128-byte CQEs,
    /// the second half of the slot).
    ///
    /// # Safety
    /// `p` must point at 64 readable bytes.
    #[inline(always)]
    pub unsafe fn read(p: *const u8) -> Self {
        // SAFETY: caller contract.
        let v = unsafe { CqeView::new(p) };
        let op_own = v.op_own();
        let error = v.is_error().then(|| v.error_fields());
        let ok = error.is_none();
        let sop_drop_qpn = v.sop_drop_qpn();
        Cqe {
            op_own,
            opcode: op_own >> 4,
            format: CqeFormat::from_op_own(op_own),
            se: op_own & 2 != 0,
            owner: op_own & 1 != 0,
            qpn: sop_drop_qpn & 0xff_ffff,
            wqe_opcode: (sop_drop_qpn >> 24) as u8,
            wqe_counter: v.wqe_counter(),
            byte_cnt: if ok { v.byte_cnt() } else { 0 },
            imm_inval_pkey: if ok { v.imm_inval_pkey() } else { 0 },
            srqn_uidx: v.srqn_uidx(),
            flags_rqpn: if ok { v.flags_rqpn() } else { 0 },
            slid: if ok { v.slid() } else { 0 },
            timestamp: if ok { v.timestamp() } else { 0 },
            error,
        }
    }

    /// The completion status.
    #[inline(always)]
    pub fn status(&self) -> Status {
        self.error.map_or(Status::Success, Status::Error)
    }

    /// Whether this is a responder (receive-side) CQE.
    pub fn is_responder(&self) -> bool {
        matches!(self.opcode, cqe_opcode::RESP_WR_IMM..=cqe_opcode::RESP_SEND_INV | cqe_opcode::RESP_ERR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cqe(rows: &[&str]) -> [u8; 64] {
        let v: Vec<u8> =
            rows.join(" ").split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        v.try_into().unwrap()
    }
    const Z: &str = "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";

    #[test]
    fn c1_req_success() {
        let c = Cqe::parse(&cqe(&[
            Z,
            Z,
            "00 00 00 01  00 00 00 00  00 00 00 00  00 00 02 00",
            "00 00 00 01  02 03 04 05  10 00 01 23  00 12 00 01",
        ]));
        assert_eq!((c.opcode, c.owner, c.format), (cqe_opcode::REQ, true, CqeFormat::Normal));
        assert_eq!((c.qpn, c.wqe_opcode, c.wqe_counter, c.byte_cnt), (0x123, 0x10, 0x12, 0x200));
        assert_eq!((c.srqn_uidx, c.timestamp), (1, 0x0102030405));
        assert_eq!(c.status(), Status::Success);
        assert!(!c.is_responder());
    }

    #[test]
    fn c2_resp_send_imm_ud() {
        let c = Cqe::parse(&cqe(&[
            Z,
            "00 00 00 00  00 00 00 11  05 00 07 77  00 00 00 00",
            "00 00 00 02  12 34 56 78  00 00 00 00  00 00 00 68",
            "00 00 00 00  00 00 00 00  00 00 04 56  00 03 00 30",
        ]));
        assert_eq!((c.opcode, c.owner), (cqe_opcode::RESP_SEND_IMM, false));
        assert_eq!((c.slid, c.flags_rqpn & 0xff_ffff, (c.flags_rqpn >> 24) & 0xf), (0x11, 0x777, 5));
        assert_eq!((c.imm_inval_pkey, c.byte_cnt, c.wqe_counter, c.qpn), (0x1234_5678, 0x68, 3, 0x456));
        assert!(c.is_responder());
    }

    #[test]
    fn c3_c4_error_cqes_report_syndrome_and_vendor() {
        let c3 = Cqe::parse(&cqe(&[
            Z,
            Z,
            "00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00",
            "00 00 00 00  00 00 88 13  08 00 01 23  00 10 00 d0",
        ]));
        let e = c3.error.expect("an error CQE is a result");
        assert_eq!((e.syndrome, e.vendor_err), (Syndrome::RemoteAccess, 0x88));
        assert_eq!(
            (c3.opcode, c3.wqe_opcode, c3.qpn, c3.wqe_counter),
            (cqe_opcode::REQ_ERR, 0x08, 0x123, 0x10)
        );
        let c4 = Cqe::parse(&cqe(&[
            Z,
            Z,
            "00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00",
            "00 00 00 00  00 00 f9 05  09 00 01 23  00 11 00 d0",
        ]));
        assert_eq!(c4.status().syndrome(), Some(Syndrome::WrFlush));
        assert_eq!((c4.error.unwrap().vendor_err, c4.wqe_counter, c4.wqe_opcode), (0xf9, 0x11, 0x09));
    }

    #[test]
    fn c5_compressed_title_is_recognised() {
        let c = Cqe::parse(&cqe(&[
            Z,
            Z,
            "00 00 00 02  00 00 00 00  00 00 00 00  00 00 00 03",
            "00 00 00 00  00 00 00 00  00 00 04 56  00 10 00 2c",
        ]));
        assert_eq!(c.format, CqeFormat::Compressed);
        assert_eq!((c.opcode, c.byte_cnt, c.wqe_counter, c.qpn), (cqe_opcode::RESP_SEND, 3, 0x10, 0x456));
    }

    #[test]
    fn syndromes_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(Syndrome::from_raw(v).raw(), v);
        }
    }
}
