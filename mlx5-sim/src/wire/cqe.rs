//! 64-byte completion queue entries: `struct mlx5_cqe64` and `struct mlx5_err_cqe`
//! (spec §5.1–§5.4).

use super::{get_u16, get_u32, get_u64, set_u16, set_u32, set_u64, view_common};

/// CQE opcodes, bits 7..4 of `op_own` (spec §5.3).
pub mod cqe_opcode {
    /// Requester success.
    pub const REQ: u8 = 0;
    /// Responder: RDMA WRITE with immediate.
    pub const RESP_WR_IMM: u8 = 1;
    /// Responder: SEND.
    pub const RESP_SEND: u8 = 2;
    /// Responder: SEND with immediate.
    pub const RESP_SEND_IMM: u8 = 3;
    /// Responder: SEND with invalidate.
    pub const RESP_SEND_INV: u8 = 4;
    /// Resize marker.
    pub const RESIZE_CQ: u8 = 5;
    /// Tag matching: no packet.
    pub const NO_PACKET: u8 = 6;
    /// Signature error.
    pub const SIG_ERR: u8 = 12;
    /// Requester error (incl. flush).
    pub const REQ_ERR: u8 = 13;
    /// Responder error (incl. flush).
    pub const RESP_ERR: u8 = 14;
    /// Software initial value, never written by the device.
    pub const INVALID: u8 = 15;

    /// Human name of a CQE opcode.
    pub fn name(op: u8) -> &'static str {
        match op {
            REQ => "REQ",
            RESP_WR_IMM => "RESP_WR_IMM",
            RESP_SEND => "RESP_SEND",
            RESP_SEND_IMM => "RESP_SEND_IMM",
            RESP_SEND_INV => "RESP_SEND_INV",
            RESIZE_CQ => "RESIZE_CQ",
            NO_PACKET => "NO_PACKET",
            SIG_ERR => "SIG_ERR",
            REQ_ERR => "REQ_ERR",
            RESP_ERR => "RESP_ERR",
            INVALID => "INVALID",
            _ => "?",
        }
    }
}

/// Error CQE syndromes (spec §5.4).
pub mod syndrome {
    /// Receive buffer too small.
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    /// Malformed WQE / illegal operation.
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    /// Bad lkey, bounds or permission on a local SGE.
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    /// Flushed because the QP is in error.
    pub const WR_FLUSH_ERR: u8 = 0x05;
    /// Memory window bind failed.
    pub const MW_BIND_ERR: u8 = 0x06;
    /// Unexpected response.
    pub const BAD_RESP_ERR: u8 = 0x10;
    /// Local access error while handling an incoming request.
    pub const LOCAL_ACCESS_ERR: u8 = 0x11;
    /// Responder NAK: invalid request.
    pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    /// Responder NAK: remote access error.
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
    /// Responder NAK: remote operational error.
    pub const REMOTE_OP_ERR: u8 = 0x14;
    /// Transport retries exhausted.
    pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    /// RNR retries exhausted.
    pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
    /// Responder aborted.
    pub const REMOTE_ABORTED_ERR: u8 = 0x22;

    /// Human name of a syndrome.
    pub fn name(s: u8) -> &'static str {
        match s {
            LOCAL_LENGTH_ERR => "LOCAL_LENGTH_ERR",
            LOCAL_QP_OP_ERR => "LOCAL_QP_OP_ERR",
            LOCAL_PROT_ERR => "LOCAL_PROT_ERR",
            WR_FLUSH_ERR => "WR_FLUSH_ERR",
            MW_BIND_ERR => "MW_BIND_ERR",
            BAD_RESP_ERR => "BAD_RESP_ERR",
            LOCAL_ACCESS_ERR => "LOCAL_ACCESS_ERR",
            REMOTE_INVAL_REQ_ERR => "REMOTE_INVAL_REQ_ERR",
            REMOTE_ACCESS_ERR => "REMOTE_ACCESS_ERR",
            REMOTE_OP_ERR => "REMOTE_OP_ERR",
            TRANSPORT_RETRY_EXC_ERR => "TRANSPORT_RETRY_EXC_ERR",
            RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR",
            REMOTE_ABORTED_ERR => "REMOTE_ABORTED_ERR",
            _ => "GENERAL_ERR",
        }
    }
}

mod field {
    use crate::wire::Field;
    pub const WQE_ID: Field = 0x02..0x04;
    pub const RSS_HASH_RESULT: Field = 0x0c..0x10;
    pub const ML_PATH: usize = 0x11;
    pub const CHECK_SUM: Field = 0x14..0x16;
    pub const SLID: Field = 0x16..0x18;
    pub const FLAGS_RQPN: Field = 0x18..0x1c;
    pub const HDS_IP_EXT: usize = 0x1c;
    pub const L4_HDR_TYPE_ETC: usize = 0x1d;
    pub const VLAN_INFO: Field = 0x1e..0x20;
    pub const SRQN_UIDX: Field = 0x20..0x24;
    pub const IMM_INVAL_PKEY: Field = 0x24..0x28;
    pub const APP: usize = 0x28;
    pub const APP_OP: usize = 0x29;
    pub const APP_INFO: Field = 0x2a..0x2c;
    pub const BYTE_CNT: Field = 0x2c..0x30;
    pub const TIMESTAMP: Field = 0x30..0x38;
    pub const SOP_DROP_QPN: Field = 0x38..0x3c;
    pub const WQE_COUNTER: Field = 0x3c..0x3e;
    pub const SIGNATURE: usize = 0x3e;
    pub const OP_OWN: usize = 0x3f;
    // error CQE
    pub const ERR_SRQN: Field = 0x20..0x24;
    pub const HW_ERR_SYND: usize = 0x34;
    pub const HW_SYND_TYPE: usize = 0x35;
    pub const VENDOR_ERR_SYND: usize = 0x36;
    pub const SYNDROME: usize = 0x37;
    pub const S_WQE_OPCODE_QPN: Field = 0x38..0x3c;
}

/// Byte offset of `op_own` inside a 64-byte CQE.
pub const OP_OWN_OFFSET: usize = field::OP_OWN;

/// A 64-byte CQE (`struct mlx5_cqe64`).
#[derive(Debug, Clone)]
pub struct Cqe64<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(Cqe64, 64, "CQE");

impl<T: AsRef<[u8]>> Cqe64<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// BE16 @0x02: striding-RQ WQE id.
    pub fn wqe_id(&self) -> u16 {
        get_u16(self.b(), field::WQE_ID)
    }
    /// BE32 @0x0c: RSS hash.
    pub fn rss_hash_result(&self) -> u32 {
        get_u32(self.b(), field::RSS_HASH_RESULT)
    }
    /// u8 @0x11: DLID path bits.
    pub fn ml_path(&self) -> u8 {
        self.b()[field::ML_PATH]
    }
    /// BE16 @0x14: L4 checksum.
    pub fn check_sum(&self) -> u16 {
        get_u16(self.b(), field::CHECK_SUM)
    }
    /// BE16 @0x16: source LID.
    pub fn slid(&self) -> u16 {
        get_u16(self.b(), field::SLID)
    }
    /// BE32 @0x18: GRH/SL/L3 flags and source QPN (bits 23..0).
    pub fn flags_rqpn(&self) -> u32 {
        get_u32(self.b(), field::FLAGS_RQPN)
    }
    /// u8 @0x1c.
    pub fn hds_ip_ext(&self) -> u8 {
        self.b()[field::HDS_IP_EXT]
    }
    /// u8 @0x1d.
    pub fn l4_hdr_type_etc(&self) -> u8 {
        self.b()[field::L4_HDR_TYPE_ETC]
    }
    /// BE16 @0x1e.
    pub fn vlan_info(&self) -> u16 {
        get_u16(self.b(), field::VLAN_INFO)
    }
    /// BE32 @0x20: user index (CQE v1) in bits 23..0.
    pub fn srqn_uidx(&self) -> u32 {
        get_u32(self.b(), field::SRQN_UIDX)
    }
    /// @0x24: immediate / invalidated rkey / P_Key bytes, verbatim (network order).
    pub fn imm_inval_pkey(&self) -> [u8; 4] {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.b()[field::IMM_INVAL_PKEY]);
        a
    }
    /// u8 @0x28.
    pub fn app(&self) -> u8 {
        self.b()[field::APP]
    }
    /// u8 @0x29.
    pub fn app_op(&self) -> u8 {
        self.b()[field::APP_OP]
    }
    /// BE16 @0x2a.
    pub fn app_info(&self) -> u16 {
        get_u16(self.b(), field::APP_INFO)
    }
    /// BE32 @0x2c: bytes transferred.
    pub fn byte_cnt(&self) -> u32 {
        get_u32(self.b(), field::BYTE_CNT)
    }
    /// BE64 @0x30: completion timestamp.
    pub fn timestamp(&self) -> u64 {
        get_u64(self.b(), field::TIMESTAMP)
    }
    /// BE32 @0x38: send opcode (31..24, requester) and local QPN (23..0).
    pub fn sop_drop_qpn(&self) -> u32 {
        get_u32(self.b(), field::SOP_DROP_QPN)
    }
    /// BE16 @0x3c: WQE counter.
    pub fn wqe_counter(&self) -> u16 {
        get_u16(self.b(), field::WQE_COUNTER)
    }
    /// u8 @0x3e.
    pub fn signature(&self) -> u8 {
        self.b()[field::SIGNATURE]
    }
    /// u8 @0x3f: opcode (7..4), format (3..2), SE (1), owner (0).
    pub fn op_own(&self) -> u8 {
        self.b()[field::OP_OWN]
    }
    /// CQE opcode.
    pub fn opcode(&self) -> u8 {
        self.op_own() >> 4
    }
    /// CQE format (0 normal, 1/2 scatter-to-CQE, 3 compressed title).
    pub fn format(&self) -> u8 {
        (self.op_own() >> 2) & 3
    }
    /// Solicited-event bit.
    pub fn se(&self) -> bool {
        self.op_own() & 2 != 0
    }
    /// Owner bit.
    pub fn owner(&self) -> u8 {
        self.op_own() & 1
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe64<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets `ml_path`.
    pub fn set_ml_path(&mut self, v: u8) {
        self.bm()[field::ML_PATH] = v
    }
    /// Sets `slid`.
    pub fn set_slid(&mut self, v: u16) {
        set_u16(self.bm(), field::SLID, v)
    }
    /// Sets `flags_rqpn`.
    pub fn set_flags_rqpn(&mut self, v: u32) {
        set_u32(self.bm(), field::FLAGS_RQPN, v)
    }
    /// Sets `srqn_uidx`.
    pub fn set_srqn_uidx(&mut self, v: u32) {
        set_u32(self.bm(), field::SRQN_UIDX, v)
    }
    /// Sets the `imm_inval_pkey` bytes verbatim.
    pub fn set_imm_inval_pkey(&mut self, v: [u8; 4]) {
        self.bm()[field::IMM_INVAL_PKEY].copy_from_slice(&v)
    }
    /// Sets `byte_cnt`.
    pub fn set_byte_cnt(&mut self, v: u32) {
        set_u32(self.bm(), field::BYTE_CNT, v)
    }
    /// Sets `timestamp`.
    pub fn set_timestamp(&mut self, v: u64) {
        set_u64(self.bm(), field::TIMESTAMP, v)
    }
    /// Sets `sop_drop_qpn`.
    pub fn set_sop_drop_qpn(&mut self, v: u32) {
        set_u32(self.bm(), field::SOP_DROP_QPN, v)
    }
    /// Sets `wqe_counter`.
    pub fn set_wqe_counter(&mut self, v: u16) {
        set_u16(self.bm(), field::WQE_COUNTER, v)
    }
    /// Sets `signature`.
    pub fn set_signature(&mut self, v: u8) {
        self.bm()[field::SIGNATURE] = v
    }
    /// Sets `op_own`.
    pub fn set_op_own(&mut self, v: u8) {
        self.bm()[field::OP_OWN] = v
    }
}

/// An error CQE (`struct mlx5_err_cqe`), opcode 13 or 14.
#[derive(Debug, Clone)]
pub struct ErrCqe<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(ErrCqe, 64, "error CQE");

impl<T: AsRef<[u8]>> ErrCqe<T> {
    /// BE32 @0x20: user index / SRQ number.
    pub fn srqn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ERR_SRQN)
    }
    /// u8 @0x34 (kernel name; reserved in mlx5dv.h).
    pub fn hw_err_synd(&self) -> u8 {
        self.buffer.as_ref()[field::HW_ERR_SYND]
    }
    /// u8 @0x35 (kernel name; reserved in mlx5dv.h).
    pub fn hw_synd_type(&self) -> u8 {
        self.buffer.as_ref()[field::HW_SYND_TYPE]
    }
    /// u8 @0x36: vendor syndrome.
    pub fn vendor_err_synd(&self) -> u8 {
        self.buffer.as_ref()[field::VENDOR_ERR_SYND]
    }
    /// u8 @0x37: syndrome.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    /// BE32 @0x38: failing send opcode (31..24), QPN (23..0).
    pub fn s_wqe_opcode_qpn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::S_WQE_OPCODE_QPN)
    }
    /// BE16 @0x3c: WQE counter of the failing/flushed WQE.
    pub fn wqe_counter(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::WQE_COUNTER)
    }
    /// u8 @0x3e.
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
    /// u8 @0x3f.
    pub fn op_own(&self) -> u8 {
        self.buffer.as_ref()[field::OP_OWN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ErrCqe<T> {
    /// Sets `srqn`.
    pub fn set_srqn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ERR_SRQN, v)
    }
    /// Sets `hw_err_synd`.
    pub fn set_hw_err_synd(&mut self, v: u8) {
        self.buffer.as_mut()[field::HW_ERR_SYND] = v
    }
    /// Sets `hw_synd_type`.
    pub fn set_hw_synd_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::HW_SYND_TYPE] = v
    }
    /// Sets `vendor_err_synd`.
    pub fn set_vendor_err_synd(&mut self, v: u8) {
        self.buffer.as_mut()[field::VENDOR_ERR_SYND] = v
    }
    /// Sets `syndrome`.
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME] = v
    }
    /// Sets `s_wqe_opcode_qpn`.
    pub fn set_s_wqe_opcode_qpn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::S_WQE_OPCODE_QPN, v)
    }
    /// Sets `wqe_counter`.
    pub fn set_wqe_counter(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::WQE_COUNTER, v)
    }
    /// Sets `op_own`.
    pub fn set_op_own(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP_OWN] = v
    }
}

/// The fields of a success CQE that the model fills (spec §5.1, §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqeRepr {
    /// CQE opcode (bits 7..4 of `op_own`).
    pub opcode: u8,
    /// Solicited-event bit.
    pub se: bool,
    /// Owner bit.
    pub owner: u8,
    /// Source LID.
    pub slid: u16,
    /// Flags and source QPN.
    pub flags_rqpn: u32,
    /// User index.
    pub srqn_uidx: u32,
    /// Immediate / invalidated rkey bytes, verbatim.
    pub imm_inval_pkey: [u8; 4],
    /// Bytes transferred.
    pub byte_cnt: u32,
    /// Timestamp.
    pub timestamp: u64,
    /// Send opcode << 24 | QPN.
    pub sop_drop_qpn: u32,
    /// WQE counter.
    pub wqe_counter: u16,
}

impl CqeRepr {
    /// Decodes a CQE.
    pub fn parse<T: AsRef<[u8]>>(c: &Cqe64<T>) -> Self {
        CqeRepr {
            opcode: c.opcode(),
            se: c.se(),
            owner: c.owner(),
            slid: c.slid(),
            flags_rqpn: c.flags_rqpn(),
            srqn_uidx: c.srqn_uidx(),
            imm_inval_pkey: c.imm_inval_pkey(),
            byte_cnt: c.byte_cnt(),
            timestamp: c.timestamp(),
            sop_drop_qpn: c.sop_drop_qpn(),
            wqe_counter: c.wqe_counter(),
        }
    }

    /// Encodes into a CQE; bytes the repr does not cover are left as they are.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, c: &mut Cqe64<T>) {
        c.set_slid(self.slid);
        c.set_flags_rqpn(self.flags_rqpn);
        c.set_srqn_uidx(self.srqn_uidx);
        c.set_imm_inval_pkey(self.imm_inval_pkey);
        c.set_byte_cnt(self.byte_cnt);
        c.set_timestamp(self.timestamp);
        c.set_sop_drop_qpn(self.sop_drop_qpn);
        c.set_wqe_counter(self.wqe_counter);
        c.set_op_own(self.op_own());
    }

    /// The `op_own` byte (format 0).
    pub fn op_own(&self) -> u8 {
        (self.opcode << 4) | (u8::from(self.se) << 1) | (self.owner & 1)
    }
}

/// The fields of an error CQE (spec §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrCqeRepr {
    /// 13 (REQ_ERR) or 14 (RESP_ERR).
    pub opcode: u8,
    /// Owner bit.
    pub owner: u8,
    /// User index.
    pub srqn: u32,
    /// Vendor syndrome.
    pub vendor_err_synd: u8,
    /// Syndrome.
    pub syndrome: u8,
    /// Failing send opcode << 24 | QPN.
    pub s_wqe_opcode_qpn: u32,
    /// WQE counter.
    pub wqe_counter: u16,
}

impl ErrCqeRepr {
    /// Decodes an error CQE.
    pub fn parse<T: AsRef<[u8]>>(c: &ErrCqe<T>) -> Self {
        ErrCqeRepr {
            opcode: c.op_own() >> 4,
            owner: c.op_own() & 1,
            srqn: c.srqn(),
            vendor_err_synd: c.vendor_err_synd(),
            syndrome: c.syndrome(),
            s_wqe_opcode_qpn: c.s_wqe_opcode_qpn(),
            wqe_counter: c.wqe_counter(),
        }
    }

    /// Encodes into an error CQE; other bytes are left as they are.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, c: &mut ErrCqe<T>) {
        c.set_srqn(self.srqn);
        c.set_vendor_err_synd(self.vendor_err_synd);
        c.set_syndrome(self.syndrome);
        c.set_s_wqe_opcode_qpn(self.s_wqe_opcode_qpn);
        c.set_wqe_counter(self.wqe_counter);
        c.set_op_own(self.op_own());
    }

    /// The `op_own` byte.
    pub fn op_own(&self) -> u8 {
        (self.opcode << 4) | (self.owner & 1)
    }
}
