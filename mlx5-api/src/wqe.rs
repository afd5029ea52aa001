//! Type-state WQE builder for the send queue (spec §2, §3, §3.8).
//!
//! Each state is a marker type; a method exists only in the state where its
//! segment is legal and `finish` only where the WQE is complete, so a wrong
//! segment sequence does not compile. Runtime limits (ring space, SGE count,
//! inline size, WQE size) are checked before the offending segment's bytes are
//! written; segments are written only into free ring slots, and the producer
//! counter and doorbell record move only in `finish`, so a WQE abandoned on
//! an error is never visible to the NIC.
//!
//! ```text
//! Init ─ctrl_send/_imm/_inv──────────────────────────▶ Data ─sge*─▶ Data ─finish
//!      ─ctrl_rdma_write/_imm─▶ NeedsRaddr<Data> ─rdma─▶ Data ─inline─▶ Complete ─finish
//!      ─ctrl_rdma_read──────▶ NeedsRaddr<Scatter> ─rdma─▶ Scatter ─sge*─▶ finish
//!      ─ctrl_atomic_cs/_fa──▶ NeedsRaddr<AtomicArgs> ─rdma─▶ NeedsResult ─result─▶ Complete
//!      ─ctrl_nop───────────────────────────────────────▶ Complete
//! ```

use std::marker::PhantomData;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::sq::SendQueue;
use crate::types::WqeFlags;

/// mlx5 send opcodes (spec §2.3).
pub mod opcode {
    pub const NOP: u8 = 0x00;
    pub const SEND_INVAL: u8 = 0x01;
    pub const RDMA_WRITE: u8 = 0x08;
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const SEND_IMM: u8 = 0x0b;
    pub const RDMA_READ: u8 = 0x10;
    pub const ATOMIC_CS: u8 = 0x11;
    pub const ATOMIC_FA: u8 = 0x12;
}

/// `MLX5_INLINE_SEG`: bit 31 of an inline segment's byte_count.
const INLINE_SEG: u32 = 0x8000_0000;

/// Builder states (zero-sized unless they carry operands).
pub mod state {
    /// Nothing written yet: choose the opcode.
    pub struct Init;
    /// The remote address segment comes next; `N` is the state after it.
    pub struct NeedsRaddr<N>(pub(crate) N);
    /// Gather list (SGEs) or one inline segment may follow; complete as is.
    pub struct Data;
    /// Local scatter list of an RDMA READ; complete as is.
    pub struct Scatter;
    /// Operands of an atomic, written with the raddr segment.
    pub struct AtomicArgs {
        pub(crate) swap_add: u64,
        pub(crate) compare: u64,
    }
    /// An atomic needs its 8-byte local result buffer.
    pub struct NeedsResult;
    /// The WQE is complete; only `finish` remains.
    pub struct Complete;
}
use state::*;

/// A WQE being written into the send queue of a QP.
#[must_use = "a WQE is posted only by finish()"]
pub struct WqeBuilder<'q, B: Backend, T, S> {
    sq: &'q SendQueue<B, T>,
    entry: T,
    /// Counter of the WQE's first WQEBB.
    start: u32,
    /// DS units written so far, ctrl included.
    ds: u32,
    /// Largest DS count this WQE may reach (ring space and size limit).
    budget: u32,
    nsge: u32,
    opcode: u8,
    fm_ce_se: u8,
    /// Immediate / invalidate rkey, already in wire (big-endian) byte order.
    imm: [u8; 4],
    state: S,
    _not_send: PhantomData<*const ()>,
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Init> {
    #[inline(always)]
    pub(crate) fn new(sq: &'q SendQueue<B, T>, entry: T) -> Self {
        WqeBuilder {
            sq,
            entry,
            start: sq.pi(),
            ds: 1,
            budget: sq.ds_budget(),
            nsge: 0,
            opcode: 0,
            fm_ce_se: 0,
            imm: [0; 4],
            state: Init,
            _not_send: PhantomData,
        }
    }

    #[inline(always)]
    fn ctrl<S>(self, opcode: u8, flags: WqeFlags, imm: [u8; 4], state: S) -> Result<WqeBuilder<'q, B, T, S>> {
        Ok(WqeBuilder {
            sq: self.sq,
            entry: self.entry,
            start: self.start,
            ds: 1,
            budget: self.budget,
            nsge: 0,
            opcode,
            fm_ce_se: flags.bits(),
            imm,
            state,
            _not_send: PhantomData,
        })
    }

    /// SEND.
    #[inline(always)]
    pub fn ctrl_send(self, flags: WqeFlags) -> Result<WqeBuilder<'q, B, T, Data>> {
        self.ctrl(opcode::SEND, flags, [0; 4], Data)
    }
    /// SEND with immediate data (`imm` is delivered to the responder CQE).
    #[inline(always)]
    pub fn ctrl_send_imm(self, flags: WqeFlags, imm: u32) -> Result<WqeBuilder<'q, B, T, Data>> {
        self.ctrl(opcode::SEND_IMM, flags, imm.to_be_bytes(), Data)
    }
    /// SEND with invalidate of the responder's `rkey`.
    #[inline(always)]
    pub fn ctrl_send_inv(self, flags: WqeFlags, rkey: u32) -> Result<WqeBuilder<'q, B, T, Data>> {
        self.ctrl(opcode::SEND_INVAL, flags, rkey.to_be_bytes(), Data)
    }
    /// RDMA WRITE.
    #[inline(always)]
    pub fn ctrl_rdma_write(self, flags: WqeFlags) -> Result<WqeBuilder<'q, B, T, NeedsRaddr<Data>>> {
        self.ctrl(opcode::RDMA_WRITE, flags, [0; 4], NeedsRaddr(Data))
    }
    /// RDMA WRITE with immediate (consumes a receive WQE at the responder).
    #[inline(always)]
    pub fn ctrl_rdma_write_imm(
        self,
        flags: WqeFlags,
        imm: u32,
    ) -> Result<WqeBuilder<'q, B, T, NeedsRaddr<Data>>> {
        self.ctrl(opcode::RDMA_WRITE_IMM, flags, imm.to_be_bytes(), NeedsRaddr(Data))
    }
    /// RDMA READ into the local scatter list.
    #[inline(always)]
    pub fn ctrl_rdma_read(self, flags: WqeFlags) -> Result<WqeBuilder<'q, B, T, NeedsRaddr<Scatter>>> {
        self.ctrl(opcode::RDMA_READ, flags, [0; 4], NeedsRaddr(Scatter))
    }
    /// ATOMIC compare-and-swap: `if *r == compare { *r = swap }`; the old value
    /// lands in the result buffer.
    #[inline(always)]
    pub fn ctrl_atomic_cs(
        self,
        flags: WqeFlags,
        swap: u64,
        compare: u64,
    ) -> Result<WqeBuilder<'q, B, T, NeedsRaddr<AtomicArgs>>> {
        self.ctrl(opcode::ATOMIC_CS, flags, [0; 4], NeedsRaddr(AtomicArgs { swap_add: swap, compare }))
    }
    /// ATOMIC fetch-and-add: `*r += add`; the old value lands in the result buffer.
    #[inline(always)]
    pub fn ctrl_atomic_fa(
        self,
        flags: WqeFlags,
        add: u64,
    ) -> Result<WqeBuilder<'q, B, T, NeedsRaddr<AtomicArgs>>> {
        self.ctrl(opcode::ATOMIC_FA, flags, [0; 4], NeedsRaddr(AtomicArgs { swap_add: add, compare: 0 }))
    }
    /// NOP (ctrl segment only).
    #[inline(always)]
    pub fn ctrl_nop(self, flags: WqeFlags) -> Result<WqeBuilder<'q, B, T, Complete>> {
        self.ctrl(opcode::NOP, flags, [0; 4], Complete)
    }
}

impl<'q, B: Backend, T, S> WqeBuilder<'q, B, T, S> {
    /// Check that the WQE may grow to `ds` DS before writing its next segment.
    #[inline(always)]
    fn reserve(&self, ds: u32) -> Result<()> {
        if ds <= self.budget {
            Ok(())
        } else {
            Err(self.sq.over_budget(ds))
        }
    }

    #[inline(always)]
    fn to<N>(self, state: N) -> WqeBuilder<'q, B, T, N> {
        WqeBuilder {
            sq: self.sq,
            entry: self.entry,
            start: self.start,
            ds: self.ds,
            budget: self.budget,
            nsge: self.nsge,
            opcode: self.opcode,
            fm_ce_se: self.fm_ce_se,
            imm: self.imm,
            state,
            _not_send: PhantomData,
        }
    }

    /// Append one data pointer segment (spec §3.2) after the limit checks.
    /// Zero-length SGEs are skipped, as rdma-core does.
    #[inline(always)]
    fn push_sge(&mut self, addr: u64, len: u32, lkey: u32) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if len > i32::MAX as u32 {
            return Err(Error::SgeTooLong { len: len as u64 });
        }
        if self.nsge >= self.sq.max_sge {
            return Err(Error::TooManySge { count: self.nsge + 1, max: self.sq.max_sge });
        }
        self.reserve(self.ds + 1)?;
        let mut seg = [0u8; 16];
        seg[0..4].copy_from_slice(&len.to_be_bytes());
        seg[4..8].copy_from_slice(&lkey.to_be_bytes());
        seg[8..16].copy_from_slice(&addr.to_be_bytes());
        self.sq.write_ds(self.start, self.ds, seg);
        self.ds += 1;
        self.nsge += 1;
        Ok(())
    }

    /// Write the ctrl segment (spec §2.1), record the WQE and advance the
    /// producer; the doorbell is left to the caller.
    #[inline(always)]
    fn commit(self) {
        let sq = self.sq;
        let mut ctrl = [0u8; 16];
        let idx_opcode = ((self.start & 0xffff) << 8) | self.opcode as u32;
        ctrl[0..4].copy_from_slice(&idx_opcode.to_be_bytes());
        ctrl[4..8].copy_from_slice(&((sq.qpn << 8) | (self.ds & 0x3f)).to_be_bytes());
        ctrl[11] = self.fm_ce_se;
        ctrl[12..16].copy_from_slice(&self.imm);
        sq.write_ds(self.start, 0, ctrl);
        sq.commit(self.start, self.ds, self.opcode, self.entry);
    }
}

/// States in which the WQE is complete.
pub trait Finishable {}
impl Finishable for Data {}
impl Finishable for Scatter {}
impl Finishable for Complete {}

impl<'q, B: Backend, T, S: Finishable> WqeBuilder<'q, B, T, S> {
    /// Post the WQE and ring the doorbell (8-byte doorbell write).
    #[inline(always)]
    pub fn finish(self) -> Result<()> {
        let sq = self.sq;
        self.commit();
        sq.ring_doorbell();
        Ok(())
    }

    /// Post the WQE and write it through the BlueFlame register when it is
    /// the only WQE since the last doorbell and fits the BlueFlame size;
    /// otherwise a plain doorbell (spec §1.6).
    #[inline(always)]
    pub fn finish_with_blueflame(self) -> Result<()> {
        let sq = self.sq;
        self.commit();
        sq.ring_blueflame();
        Ok(())
    }

    /// Write the WQE without ringing: batch several WQEs and ring once with
    /// `ring_sq_doorbell()` on the QP.
    #[inline(always)]
    pub fn finish_batch(self) -> Result<()> {
        self.commit();
        Ok(())
    }
}

/// What the raddr segment leads to; atomics write their operands with it.
pub trait AfterRaddr: Sized {
    type Next;
    #[doc(hidden)]
    fn after_raddr<B: Backend, T>(self, b: &mut WqeBuilder<'_, B, T, ()>) -> Result<Self::Next>;
}
impl AfterRaddr for Data {
    type Next = Data;
    #[inline(always)]
    fn after_raddr<B: Backend, T>(self, _: &mut WqeBuilder<'_, B, T, ()>) -> Result<Data> {
        Ok(Data)
    }
}
impl AfterRaddr for Scatter {
    type Next = Scatter;
    #[inline(always)]
    fn after_raddr<B: Backend, T>(self, _: &mut WqeBuilder<'_, B, T, ()>) -> Result<Scatter> {
        Ok(Scatter)
    }
}
impl AfterRaddr for AtomicArgs {
    type Next = NeedsResult;
    /// Atomic segment (spec §3.4): swap/add at +0, compare at +8.
    #[inline(always)]
    fn after_raddr<B: Backend, T>(self, b: &mut WqeBuilder<'_, B, T, ()>) -> Result<NeedsResult> {
        b.reserve(b.ds + 1)?;
        let mut seg = [0u8; 16];
        seg[0..8].copy_from_slice(&self.swap_add.to_be_bytes());
        seg[8..16].copy_from_slice(&self.compare.to_be_bytes());
        b.sq.write_ds(b.start, b.ds, seg);
        b.ds += 1;
        Ok(NeedsResult)
    }
}

impl<'q, B: Backend, T, N: AfterRaddr> WqeBuilder<'q, B, T, NeedsRaddr<N>> {
    /// Remote address segment (spec §3.1).
    #[inline(always)]
    pub fn rdma(self, raddr: u64, rkey: u32) -> Result<WqeBuilder<'q, B, T, N::Next>> {
        self.reserve(self.ds + 1)?;
        let mut seg = [0u8; 16];
        seg[0..8].copy_from_slice(&raddr.to_be_bytes());
        seg[8..12].copy_from_slice(&rkey.to_be_bytes());
        self.sq.write_ds(self.start, self.ds, seg);
        let NeedsRaddr(next) = self.state;
        let mut b = WqeBuilder {
            sq: self.sq,
            entry: self.entry,
            start: self.start,
            ds: self.ds + 1,
            budget: self.budget,
            nsge: 0,
            opcode: self.opcode,
            fm_ce_se: self.fm_ce_se,
            imm: self.imm,
            state: (),
            _not_send: PhantomData,
        };
        let next = next.after_raddr(&mut b)?;
        Ok(b.to(next))
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Data> {
    /// Gather entry (data pointer segment).
    #[inline(always)]
    pub fn sge(mut self, addr: u64, len: u32, lkey: u32) -> Result<Self> {
        self.push_sge(addr, len, lkey)?;
        Ok(self)
    }

    /// The whole payload inline in the WQE (spec §3.3): one inline segment,
    /// split at the ring end at byte granularity. Empty data writes nothing.
    #[inline(always)]
    pub fn inline(self, data: &[u8]) -> Result<WqeBuilder<'q, B, T, Complete>> {
        let mut b = self;
        if data.is_empty() {
            return Ok(b.to(Complete));
        }
        let max = b.sq.max_inline as usize;
        if data.len() > max {
            return Err(Error::InlineTooLarge { len: data.len(), max });
        }
        let seg_ds = (4 + data.len() as u32).div_ceil(16);
        b.reserve(b.ds + seg_ds)?;
        let hdr = (data.len() as u32 | INLINE_SEG).to_be_bytes();
        let base = b.ds * 16;
        b.sq.write_bytes(b.start, base, &hdr);
        b.sq.write_bytes(b.start, base + 4, data);
        // Zero the pad up to the DS boundary so no stale ring bytes go out.
        let pad = (seg_ds * 16 - 4) as usize - data.len();
        b.sq.write_bytes(b.start, base + 4 + data.len() as u32, &[0u8; 16][..pad]);
        b.ds += seg_ds;
        Ok(b.to(Complete))
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Scatter> {
    /// Local scatter entry of an RDMA READ (needs LOCAL_WRITE on the MR).
    #[inline(always)]
    pub fn sge(mut self, addr: u64, len: u32, lkey: u32) -> Result<Self> {
        self.push_sge(addr, len, lkey)?;
        Ok(self)
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, NeedsResult> {
    /// The 8-byte local buffer that receives the original remote value.
    #[inline(always)]
    pub fn result(mut self, addr: u64, lkey: u32) -> Result<WqeBuilder<'q, B, T, Complete>> {
        self.push_sge(addr, 8, lkey)?;
        Ok(self.to(Complete))
    }
}
