//! Send-side segments after the ctrl segment: remote address, data pointer, inline and
//! atomic segments (spec §3.1–§3.4).

use super::{get_u32, get_u64, set_u32, set_u64, view_common};

/// Bit 31 of an inline segment's first word (`MLX5_INLINE_SEG`, spec §3.3).
pub const INLINE_SEG: u32 = 0x8000_0000;

mod field {
    use crate::wire::Field;
    // raddr segment (spec §3.1)
    pub const RADDR: Field = 0..8;
    pub const RKEY: Field = 8..12;
    // data pointer segment (spec §3.2)
    pub const BYTE_COUNT: Field = 0..4;
    pub const LKEY: Field = 4..8;
    pub const ADDR: Field = 8..16;
    // atomic segment (spec §3.4)
    pub const SWAP_ADD: Field = 0..8;
    pub const COMPARE: Field = 8..16;
}

/// Remote address segment (`struct mlx5_wqe_raddr_seg`).
#[derive(Debug, Clone)]
pub struct RaddrSeg<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(RaddrSeg, 16, "raddr segment");

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// BE64 @0: remote virtual address.
    pub fn raddr(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::RADDR)
    }
    /// BE32 @8: remote key.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::RKEY)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> RaddrSeg<T> {
    /// Sets `raddr`.
    pub fn set_raddr(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::RADDR, v)
    }
    /// Sets `rkey`.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v)
    }
}

/// Data pointer segment (`struct mlx5_wqe_data_seg`), gather or scatter entry.
#[derive(Debug, Clone)]
pub struct DataSeg<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(DataSeg, 16, "data segment");

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// BE32 @0: length; bit 31 set means this is an inline segment instead.
    pub fn byte_count(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::BYTE_COUNT)
    }
    /// True when bit 31 of `byte_count` marks an inline segment.
    pub fn is_inline(&self) -> bool {
        self.byte_count() & INLINE_SEG != 0
    }
    /// BE32 @4: local key.
    pub fn lkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::LKEY)
    }
    /// BE64 @8: local virtual address.
    pub fn addr(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::ADDR)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
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

/// Inline data segment header (`struct mlx5_wqe_inl_data_seg`): a BE32 followed by the
/// payload bytes. The view covers only the 4-byte header.
#[derive(Debug, Clone)]
pub struct InlineSeg<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(InlineSeg, 4, "inline segment header");

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// BE32 @0: `length | 0x80000000`.
    pub fn byte_count(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::BYTE_COUNT)
    }
    /// Payload length (bits 30..0).
    pub fn len(&self) -> u32 {
        self.byte_count() & !INLINE_SEG
    }
    /// True when the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// DS units covered by header plus payload: `ceil((4 + len) / 16)`.
    pub fn ds_count(&self) -> usize {
        (4 + self.len() as usize).div_ceil(16)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> InlineSeg<T> {
    /// Sets `byte_count` (caller ORs in [`INLINE_SEG`]).
    pub fn set_byte_count(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::BYTE_COUNT, v)
    }
}

/// Atomic segment (`struct mlx5_wqe_atomic_seg`).
#[derive(Debug, Clone)]
pub struct AtomicSeg<T: AsRef<[u8]>> {
    buffer: T,
}
view_common!(AtomicSeg, 16, "atomic segment");

impl<T: AsRef<[u8]>> AtomicSeg<T> {
    /// BE64 @0: swap value (CS) or add value (FA).
    pub fn swap_add(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::SWAP_ADD)
    }
    /// BE64 @8: compare value (CS only).
    pub fn compare(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::COMPARE)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicSeg<T> {
    /// Sets `swap_add`.
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::SWAP_ADD, v)
    }
    /// Sets `compare`.
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::COMPARE, v)
    }
}
