//! Receive-side WQE segments: RQ/SRQ scatter entries and the SRQ next segment (spec §4.1, §4.3).

use super::{get_u16, get_u32, get_u64, set_u16, set_u32, set_u64, view_common};

/// `MLX5_INVALID_LKEY`: terminates a receive scatter list shorter than the stride (spec §4.1).
pub const INVALID_LKEY: u32 = 0x100;

mod field {
    use crate::wire::Field;
    pub const BYTE_COUNT: Field = 0..4;
    pub const LKEY: Field = 4..8;
    pub const ADDR: Field = 8..16;
    pub const NEXT_WQE_INDEX: Field = 2..4;
    pub const SIGNATURE: usize = 4;
}

/// One receive scatter entry (same layout as the send data segment, spec §3.2/§4.1).
#[derive(Debug, Clone)]
pub struct RecvDataSeg<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(RecvDataSeg, 16, "receive data segment");

impl<T: AsRef<[u8]>> RecvDataSeg<T> {
    /// BE32 @0: buffer length.
    pub fn byte_count(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::BYTE_COUNT)
    }
    /// BE32 @4: local key; [`INVALID_LKEY`] terminates the list.
    pub fn lkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::LKEY)
    }
    /// BE64 @8: buffer address.
    pub fn addr(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::ADDR)
    }
    /// True for the terminator entry.
    pub fn is_terminator(&self) -> bool {
        self.lkey() == INVALID_LKEY
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> RecvDataSeg<T> {
    /// Sets `byte_count`.
    pub fn set_byte_count(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::BYTE_COUNT, v)
    }
    /// Sets `lkey`.
    pub fn set_lkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::LKEY, v)
    }
    /// Sets `addr`.
    pub fn set_addr(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::ADDR, v)
    }
}

/// SRQ WQE head (`struct mlx5_wqe_srq_next_seg`).
#[derive(Debug, Clone)]
pub struct SrqNextSeg<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(SrqNextSeg, 16, "SRQ next segment");

impl<T: AsRef<[u8]>> SrqNextSeg<T> {
    /// BE16 @2: index of the next WQE in the free list.
    pub fn next_wqe_index(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::NEXT_WQE_INDEX)
    }
    /// u8 @4: signature.
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> SrqNextSeg<T> {
    /// Sets `next_wqe_index`.
    pub fn set_next_wqe_index(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::NEXT_WQE_INDEX, v)
    }
    /// Sets `signature`.
    pub fn set_signature(&mut self, v: u8) {
        self.buffer.as_mut()[field::SIGNATURE] = v
    }
}
