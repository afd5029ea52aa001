//! Datagram segment / 48-byte address vector used by UD and DCI WQEs (spec §3.6).

use super::{get_u16, get_u32, get_u64, set_u16, set_u32, set_u64, view_common};

mod field {
    use crate::wire::Field;
    pub const KEY: Field = 0..8;
    pub const QKEY: Field = 0..4;
    pub const DQP_DCT: Field = 8..12;
    pub const STAT_RATE_SL: usize = 12;
    pub const FL_MLID: usize = 13;
    pub const RLID: Field = 14..16;
    pub const RMAC: Field = 20..26;
    pub const TCLASS: usize = 26;
    pub const HOP_LIMIT: usize = 27;
    pub const GRH_GID_FL: Field = 28..32;
    pub const RGID: Field = 32..48;
}

/// `MLX5_EXTENDED_UD_AV`: bit 31 of `dqp_dct`.
pub const EXTENDED_AV: u32 = 0x8000_0000;

/// Address vector (`struct mlx5_wqe_av` inside `mlx5_wqe_datagram_seg`).
#[derive(Debug, Clone)]
pub struct DatagramSeg<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(DatagramSeg, 48, "datagram segment");

impl<T: AsRef<[u8]>> DatagramSeg<T> {
    /// BE64 @0: DC access key (DCI) — for UD the Q_Key is the high half.
    pub fn dc_key(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::KEY)
    }
    /// BE32 @0: Q_Key (UD).
    pub fn qkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::QKEY)
    }
    /// BE32 @8: ext bit 31, destination QPN / DCT number in bits 23..0.
    pub fn dqp_dct(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::DQP_DCT)
    }
    /// Extended (48-byte) AV flag.
    pub fn ext(&self) -> bool {
        self.dqp_dct() & EXTENDED_AV != 0
    }
    /// Destination QPN or DCT number.
    pub fn dqpn(&self) -> u32 {
        self.dqp_dct() & 0xff_ffff
    }
    /// u8 @12: static rate (7..4), SL / priority (3..0).
    pub fn stat_rate_sl(&self) -> u8 {
        self.buffer.as_ref()[field::STAT_RATE_SL]
    }
    /// u8 @13: force loopback (7), source path bits (6..0).
    pub fn fl_mlid(&self) -> u8 {
        self.buffer.as_ref()[field::FL_MLID]
    }
    /// BE16 @14: destination LID (IB) or UDP source port (RoCE v2).
    pub fn rlid(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::RLID)
    }
    /// @20: destination MAC (RoCE).
    pub fn rmac(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::RMAC]);
        a
    }
    /// u8 @26: traffic class.
    pub fn tclass(&self) -> u8 {
        self.buffer.as_ref()[field::TCLASS]
    }
    /// u8 @27: hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// BE32 @28: GRH present (30), source GID index (27..20), flow label (19..0).
    pub fn grh_gid_fl(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::GRH_GID_FL)
    }
    /// GRH present bit (IB only).
    pub fn grh(&self) -> bool {
        self.grh_gid_fl() & (1 << 30) != 0
    }
    /// Source GID index.
    pub fn sgid_index(&self) -> u8 {
        (self.grh_gid_fl() >> 20) as u8
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        self.grh_gid_fl() & 0xf_ffff
    }
    /// @32: destination GID.
    pub fn rgid(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::RGID]);
        a
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DatagramSeg<T> {
    /// Sets the 64-bit key word.
    pub fn set_dc_key(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::KEY, v)
    }
    /// Sets `dqp_dct`.
    pub fn set_dqp_dct(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::DQP_DCT, v)
    }
    /// Sets `stat_rate_sl`.
    pub fn set_stat_rate_sl(&mut self, v: u8) {
        self.buffer.as_mut()[field::STAT_RATE_SL] = v
    }
    /// Sets `fl_mlid`.
    pub fn set_fl_mlid(&mut self, v: u8) {
        self.buffer.as_mut()[field::FL_MLID] = v
    }
    /// Sets `rlid`.
    pub fn set_rlid(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::RLID, v)
    }
    /// Sets `rmac`.
    pub fn set_rmac(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::RMAC].copy_from_slice(&v)
    }
    /// Sets `tclass`.
    pub fn set_tclass(&mut self, v: u8) {
        self.buffer.as_mut()[field::TCLASS] = v
    }
    /// Sets `hop_limit`.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v
    }
    /// Sets `grh_gid_fl`.
    pub fn set_grh_gid_fl(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::GRH_GID_FL, v)
    }
    /// Sets `rgid`.
    pub fn set_rgid(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::RGID].copy_from_slice(&v)
    }
}
