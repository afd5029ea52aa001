//! Control segment, the first 16 bytes of every send WQE (spec §2.1–§2.3).

use super::{get_u16, get_u32, set_u16, set_u32, view_common};

/// Send WQE opcodes (spec §2.3), the low byte of `opmod_idx_opcode`.
pub mod opcode {
    /// No operation (ctrl only).
    pub const NOP: u8 = 0x00;
    /// SEND with invalidate.
    pub const SEND_INVAL: u8 = 0x01;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND.
    pub const SEND: u8 = 0x0a;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x10;
    /// Atomic compare-and-swap (8 bytes).
    pub const ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch-and-add (8 bytes).
    pub const ATOMIC_FA: u8 = 0x12;
    /// Masked compare-and-swap (4 or 8 bytes by `opmod`, spec §3.5).
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    /// Masked fetch-and-add (4 or 8 bytes by `opmod`, spec §3.5).
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    /// User-mode memory registration: binds and invalidates memory windows, gives an
    /// indirect mkey its KLM list (docs/mlx5-wire-format.md §3.7).
    pub const UMR: u8 = 0x25;

    /// Human name of a send opcode, `"?"` when unknown.
    pub fn name(op: u8) -> &'static str {
        match op {
            NOP => "NOP",
            SEND_INVAL => "SEND_INVAL",
            RDMA_WRITE => "RDMA_WRITE",
            RDMA_WRITE_IMM => "RDMA_WRITE_IMM",
            SEND => "SEND",
            SEND_IMM => "SEND_IMM",
            0x0e => "TSO",
            RDMA_READ => "RDMA_READ",
            ATOMIC_CS => "ATOMIC_CS",
            ATOMIC_FA => "ATOMIC_FA",
            ATOMIC_MASKED_CS => "ATOMIC_MASKED_CS",
            ATOMIC_MASKED_FA => "ATOMIC_MASKED_FA",
            UMR => "UMR",
            _ => "?",
        }
    }
}

mod field {
    use crate::wire::Field;
    pub const OPMOD_IDX_OPCODE: Field = 0..4;
    pub const QPN_DS: Field = 4..8;
    pub const SIGNATURE: usize = 8;
    pub const DCI_STREAM_CHANNEL_ID: Field = 9..11;
    pub const FM_CE_SE: usize = 11;
    pub const IMM: Field = 12..16;
}

/// View of a control segment (`struct mlx5_wqe_ctrl_seg`).
#[derive(Debug, Clone)]
pub struct CtrlSeg<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(CtrlSeg, 16, "ctrl segment");

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// BE32 @0: opmod (31..24), wqe_index (23..8), opcode (7..0).
    pub fn opmod_idx_opcode(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::OPMOD_IDX_OPCODE)
    }
    /// Opcode modifier (bits 31..24).
    pub fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode() >> 24) as u8
    }
    /// WQE index: the 16-bit producer counter at which the WQE was posted.
    pub fn wqe_index(&self) -> u16 {
        (self.opmod_idx_opcode() >> 8) as u16
    }
    /// Opcode (bits 7..0).
    pub fn opcode(&self) -> u8 {
        self.opmod_idx_opcode() as u8
    }
    /// BE32 @4: QPN (31..8), ds (5..0).
    pub fn qpn_ds(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::QPN_DS)
    }
    /// QP/SQ number (24 bits).
    pub fn qpn(&self) -> u32 {
        self.qpn_ds() >> 8
    }
    /// WQE size in 16-byte units, ctrl included (6 bits).
    pub fn ds(&self) -> u8 {
        (self.qpn_ds() & 0x3f) as u8
    }
    /// u8 @8: WQE signature.
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
    /// BE16 @9: DCI stream channel id.
    pub fn dci_stream_channel_id(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DCI_STREAM_CHANNEL_ID)
    }
    /// u8 @11: fence mode, completion mode, solicited (spec §2.2).
    pub fn fm_ce_se(&self) -> u8 {
        self.buffer.as_ref()[field::FM_CE_SE]
    }
    /// Fence mode (bits 7..5 of `fm_ce_se`).
    pub fn fm(&self) -> u8 {
        self.fm_ce_se() >> 5
    }
    /// Completion mode (bits 3..2 of `fm_ce_se`).
    pub fn ce(&self) -> u8 {
        (self.fm_ce_se() >> 2) & 3
    }
    /// Solicited event (bit 1 of `fm_ce_se`).
    pub fn se(&self) -> bool {
        self.fm_ce_se() & 2 != 0
    }
    /// The 4 `imm` bytes exactly as stored (network order).
    pub fn imm(&self) -> [u8; 4] {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::IMM]);
        a
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    /// Sets `opmod_idx_opcode`.
    pub fn set_opmod_idx_opcode(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::OPMOD_IDX_OPCODE, v)
    }
    /// Sets `qpn_ds`.
    pub fn set_qpn_ds(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::QPN_DS, v)
    }
    /// Sets the signature byte.
    pub fn set_signature(&mut self, v: u8) {
        self.buffer.as_mut()[field::SIGNATURE] = v
    }
    /// Sets the DCI stream channel id.
    pub fn set_dci_stream_channel_id(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::DCI_STREAM_CHANNEL_ID, v)
    }
    /// Sets `fm_ce_se`.
    pub fn set_fm_ce_se(&mut self, v: u8) {
        self.buffer.as_mut()[field::FM_CE_SE] = v
    }
    /// Sets the `imm` bytes verbatim.
    pub fn set_imm(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::IMM].copy_from_slice(&v)
    }
}

/// Decoded control segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtrlRepr {
    /// Opcode modifier.
    pub opmod: u8,
    /// 16-bit WQE index.
    pub wqe_index: u16,
    /// Opcode.
    pub opcode: u8,
    /// QPN (24 bits).
    pub qpn: u32,
    /// Size in DS.
    pub ds: u8,
    /// Signature byte.
    pub signature: u8,
    /// DCI stream channel id.
    pub dci_stream_channel_id: u16,
    /// Fence/completion/solicited byte.
    pub fm_ce_se: u8,
    /// Immediate bytes (network order).
    pub imm: [u8; 4],
}

impl CtrlRepr {
    /// Decodes a control segment.
    pub fn parse<T: AsRef<[u8]>>(seg: &CtrlSeg<T>) -> Self {
        CtrlRepr {
            opmod: seg.opmod(),
            wqe_index: seg.wqe_index(),
            opcode: seg.opcode(),
            qpn: seg.qpn(),
            ds: seg.ds(),
            signature: seg.signature(),
            dci_stream_channel_id: seg.dci_stream_channel_id(),
            fm_ce_se: seg.fm_ce_se(),
            imm: seg.imm(),
        }
    }

    /// Encodes into a control segment.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, seg: &mut CtrlSeg<T>) {
        seg.set_opmod_idx_opcode(
            (u32::from(self.opmod) << 24) | (u32::from(self.wqe_index) << 8) | u32::from(self.opcode),
        );
        seg.set_qpn_ds(((self.qpn & 0xff_ffff) << 8) | u32::from(self.ds & 0x3f));
        seg.set_signature(self.signature);
        seg.set_dci_stream_channel_id(self.dci_stream_channel_id);
        seg.set_fm_ce_se(self.fm_ce_se);
        seg.set_imm(self.imm);
    }

    /// Number of WQEBBs the WQE occupies (`ceil(ds/4)`; at least 1).
    pub fn wqebbs(&self) -> u16 {
        wqebbs_of(self.ds)
    }
}

/// WQEBBs a WQE of `ds` 16-byte units occupies (at least one).
pub fn wqebbs_of(ds: u8) -> u16 {
    (u16::from(ds).div_ceil(4)).max(1)
}
