//! Type-state WQE builder for the send queue (spec §2, §3, §3.8).
//!
//! Each state is a marker type; a method exists only in the state where its
//! segment is legal and `finish` only where the WQE is complete, so a wrong
//! segment sequence does not compile. Runtime limits (ring space, SGE count,
//! inline size, WQE size, UD message size) are checked before the offending
//! segment's bytes are written; segments are written only into free ring
//! slots, and the producer counter and doorbell record move only in
//! `finish`, so a WQE abandoned on an error is never visible to the NIC.
//!
//! ```text
//! RC  Init   ─ctrl_send/_imm/_inv─────────────────────────▶ Data ─sge*─▶ Data ─finish
//!            ─ctrl_rdma_write/_imm─▶ NeedsRaddr<Data> ─rdma─▶ Data ─inline─▶ Complete ─finish
//!            ─ctrl_rdma_read──────▶ NeedsRaddr<Scatter> ─rdma─▶ Scatter ─sge*─▶ finish
//!            ─ctrl_atomic_cs/_fa──▶ NeedsRaddr<AtomicArgs> ─rdma─▶ NeedsResult ─result─▶ Complete
//!            ─ctrl_masked_cs/_fa──▶ NeedsRaddr<MaskedArgs> ─rdma─▶ NeedsMaskedResult ─result─▶ Complete
//!            ─ctrl_nop────────────────────────────────────▶ Complete
//! DCI DcInit ─ctrl_*─▶ NeedsAv<X> ─av_ib/av_roce/av─▶ X   (X as for RC: ctrl, AV, then the RC segments)
//! UD  UdInit ─ctrl_send/_imm─▶ NeedsDatagram<Data> ─datagram/datagram_ib─▶ Data
//! ```

use std::marker::PhantomData;

use crate::av::AddressVector;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::ring::seg::{
    self, masked_atomic_opmod, set_atomic_seg, set_ctrl_seg_qpn_word, set_data_ptr_seg, set_datagram_seg,
    set_masked_cs32_seg, set_masked_cs64_segs, set_masked_fa32_seg, set_masked_fa64_seg, set_raddr_seg,
};
use crate::ring::seg::{DS_BYTES, WQEBB_BYTES};
use crate::ring::sq::{copy_in, ds_ptr, over_budget};
use crate::ring::Sge;
use crate::types::WqeFlags;
use crate::wq::SendQueue;

mod umr;
pub use umr::Interleaved;

pub use crate::ring::seg::opcode;

/// Builder states (zero-sized unless they carry operands).
pub mod state {
    /// RC: nothing written yet; choose the opcode.
    #[derive(Debug)]
    pub struct Init;
    /// DCI: nothing written yet; every opcode but NOP is followed by an AV.
    #[derive(Debug)]
    pub struct DcInit;
    /// UD: nothing written yet; SEND or SEND_IMM, then the datagram segment.
    #[derive(Debug)]
    pub struct UdInit;
    /// DCI: the address vector comes next; `N` is the state after it.
    #[derive(Debug)]
    pub struct NeedsAv<N>(pub(crate) N);
    /// UD: the datagram segment comes next; `N` is the state after it.
    #[derive(Debug)]
    pub struct NeedsDatagram<N>(pub(crate) N);
    /// The remote address segment comes next; `N` is the state after it.
    #[derive(Debug)]
    pub struct NeedsRaddr<N>(pub(crate) N);
    /// Gather list (SGEs) or one inline segment may follow; complete as is.
    #[derive(Debug)]
    pub struct Data;
    /// Local scatter list of an RDMA READ; complete as is.
    #[derive(Debug)]
    pub struct Scatter;
    /// Operands of an atomic, written with the raddr segment.
    #[derive(Debug)]
    pub struct AtomicArgs {
        pub(crate) swap: u64,
        pub(crate) compare_add: u64,
    }
    /// An atomic needs its 8-byte local result buffer.
    #[derive(Debug)]
    pub struct NeedsResult;
    /// Operands of a masked atomic, written with the raddr segment: one or
    /// two DS, and the argument width in bytes.
    #[derive(Debug)]
    pub struct MaskedArgs {
        pub(crate) segs: [[u8; 16]; 2],
        pub(crate) n: u32,
        pub(crate) width: u32,
    }
    /// A masked atomic needs its local result buffer of the argument width.
    #[derive(Debug)]
    pub struct NeedsMaskedResult(pub(crate) u32);
    /// The WQE is complete; only `finish` remains.
    #[derive(Debug)]
    pub struct Complete;
}
use state::*;

impl<B: Backend, T, S> std::fmt::Debug for WqeBuilder<'_, B, T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WqeBuilder")
            .field("qpn", &format_args!("{:#x}", self.sq.desc.qpn))
            .field("wqe_index", &(self.start & 0xffff))
            .field("ds", &self.ds)
            .field("state", &std::any::type_name::<S>().replace("mlx5_api::wqe::state::", ""))
            .finish()
    }
}

/// A WQE being written into the send queue of a QP.
#[must_use = "a WQE is posted only by finish()"]
pub struct WqeBuilder<'q, B: Backend, T, S> {
    sq: &'q SendQueue<B, T>,
    entry: T,
    /// The ring and its byte mask, copied out of the descriptor so that
    /// stores into the ring do not force reloads of them.
    buf: *mut u8,
    mask: usize,
    /// The WQE's first WQEBB (DS 0 to 3 never wrap) and its ring slot.
    wqe: *mut u8,
    /// The WQEBB after it, where DS 4 to 7 lie (the ring's first at its
    /// end). Computed whether or not the WQE reaches it: unused, it costs
    /// nothing once inlined.
    wqe2: *mut u8,
    slot: u32,
    /// Counter of the WQE's first WQEBB.
    start: u32,
    /// DS units written so far, ctrl included.
    ds: u32,
    /// Free WQEBBs at the start (at least 1).
    free: u32,
    /// WQEBBs the WQE may take without a DS-exact check: the free ones, at
    /// most the whole WQEBBs of the largest WQE (`SendQueue::max_bbs`).
    /// One compare in WQEBBs per segment past the first WQEBB, the same
    /// for every DS of a WQEBB (so that later ones fold away).
    bbs: u32,
    nsge: u32,
    /// Message bytes so far (gather SGEs or inline).
    msg_len: u32,
    opcode: u8,
    /// The ctrl segment's `opmod` (masked atomics: their size; else 0).
    opmod: u8,
    fm_ce_se: u8,
    /// Immediate / invalidate rkey, already in wire (big-endian) byte order.
    imm: [u8; 4],
    state: S,
    _not_send: PhantomData<*const ()>,
}

impl<'q, B: Backend, T, S> WqeBuilder<'q, B, T, S> {
    /// Start a WQE at the producer counter. `Err` (the entry given back)
    /// when the queue is closed (the QP is not in RTS: `SendQueue::open` is
    /// 0) or full: the caller sorts out which.
    #[inline(always)]
    pub(crate) fn new(sq: &'q SendQueue<B, T>, entry: T, state: S) -> core::result::Result<Self, T> {
        let d = &sq.desc;
        // Everything the post reads from the descriptor, before the Acquire
        // load of the consumer (after it, each would be loaded again).
        let (buf, start, open) = (d.buf, d.producer(), sq.open.get());
        let used = start.wrapping_sub(d.consumer());
        if used >= open {
            return Err(entry);
        }
        // Open, `open` is wqe_cnt (and `slot` masks with wqe_cnt - 1).
        let free = open - used;
        let slot = d.slot(start);
        let slot2 = d.slot(start.wrapping_add(1));
        Ok(WqeBuilder {
            sq,
            entry,
            buf,
            mask: d.byte_mask(),
            wqe: buf.wrapping_add(slot as usize * WQEBB_BYTES as usize),
            wqe2: buf.wrapping_add(slot2 as usize * WQEBB_BYTES as usize),
            slot,
            start,
            ds: 1,
            free,
            bbs: free.min(sq.max_bbs),
            nsge: 0,
            msg_len: 0,
            opcode: 0,
            opmod: 0,
            fm_ce_se: 0,
            imm: [0; 4],
            state,
            _not_send: PhantomData,
        })
    }

    /// Take the state out, leaving a builder in the unit state.
    #[inline(always)]
    fn split(self) -> (S, WqeBuilder<'q, B, T, ()>) {
        self.replace(())
    }

    /// Move to state `N`, keeping everything written so far.
    #[inline(always)]
    fn to<N>(self, state: N) -> WqeBuilder<'q, B, T, N> {
        self.replace(state).1
    }

    /// Swap the state for `state`: the old one, and the builder in the new
    /// one with everything written so far.
    #[inline(always)]
    fn replace<N>(self, state: N) -> (S, WqeBuilder<'q, B, T, N>) {
        let WqeBuilder {
            sq,
            entry,
            buf,
            mask,
            wqe,
            wqe2,
            slot,
            start,
            ds,
            free,
            bbs,
            nsge,
            msg_len,
            opcode,
            opmod,
            fm_ce_se,
            imm,
            state: old,
            _not_send,
        } = self;
        let b = WqeBuilder {
            sq,
            entry,
            buf,
            mask,
            wqe,
            wqe2,
            slot,
            start,
            ds,
            free,
            bbs,
            nsge,
            msg_len,
            opcode,
            opmod,
            fm_ce_se,
            imm,
            state,
            _not_send,
        };
        (old, b)
    }

    /// The ctrl fields of a masked atomic: its opcode and the opmod of its
    /// width (carried by `N`, the state after the AV or the raddr).
    #[inline(always)]
    fn masked<N: HasWidth>(self, opcode: u8, flags: WqeFlags, state: N) -> Result<WqeBuilder<'q, B, T, N>> {
        let opmod = masked_atomic_opmod(state.width());
        let mut b = self.ctrl(opcode, flags, [0; 4], state)?;
        b.opmod = opmod;
        Ok(b)
    }

    #[inline(always)]
    fn ctrl<N>(self, opcode: u8, flags: WqeFlags, imm: [u8; 4], state: N) -> Result<WqeBuilder<'q, B, T, N>> {
        let mut b = self.to(state);
        b.opcode = opcode;
        b.fm_ce_se = flags.bits();
        b.imm = imm;
        Ok(b)
    }

    /// Check that the WQE may grow to `ds` DS before writing its next
    /// segment. One WQEBB always fits: `new` found one free, and a QP's
    /// WQEs may be at least one WQEBB (`max_ds >= 4`, checked at creation
    /// by `qp_geometry`), so the check costs nothing for the segments that
    /// the builder's state puts in the first WQEBB. Past it, one compare
    /// in WQEBBs against `bbs` (the same for each DS of a WQEBB, so that
    /// the compiler keeps one per WQEBB); the DS-exact limit (the last
    /// WQEBB of the largest WQE may be partly usable) is checked cold.
    /// (That limit is defensive: `qp_geometry` sizes the gather list and
    /// the inline payload so that no WQE the builder takes exceeds it.)
    #[inline(always)]
    fn reserve(&self, ds: u32) -> Result<()> {
        if ds <= 4 || ds.div_ceil(4) <= self.bbs {
            Ok(())
        } else {
            reserve_exact(ds, self.sq.desc.max_ds, self.free)
        }
    }

    /// DS `i` of the WQE, in the ring (modulo rule of spec §1.3; a WQEBB
    /// never wraps).
    #[inline(always)]
    fn ds_at(&self, i: u32) -> *mut [u8; 16] {
        if i < 4 {
            self.wqe.wrapping_add(i as usize * DS_BYTES as usize) as *mut [u8; 16]
        } else if i < 8 {
            self.wqe2.wrapping_add((i - 4) as usize * DS_BYTES as usize) as *mut [u8; 16]
        } else {
            ds_ptr(self.buf, self.mask, self.start, i)
        }
    }

    /// Ask for the second WQEBB's cache line before writing into it. A
    /// store's line is fetched when the store reaches the head of the
    /// store buffer (x86), that is after every store before it, the first
    /// WQEBB's included, has its line: with thousands of QPs taking turns
    /// both lines were last written a ring lap ago, so the second fetch
    /// would wait for the first, and the doorbell's fence (a locked
    /// instruction, `sfence`) for both. Measured with the simulator, 4096
    /// QPs, 64-byte inline WRITEs: 270 -> 255 ns a message. One
    /// instruction, in the inline writer's two-WQEBB case only: asked for
    /// in `ds_at` or `reserve` (every writer), it cost a DCI post 7 to 9
    /// instructions more, not 1, as the compiler laid the builder out.
    #[inline(always)]
    fn ask_for_second(&self) {
        crate::ring::hint::prefetch_w(self.wqe2);
    }

    /// The next DS of the WQE, in the ring.
    #[inline(always)]
    fn next_ds(&mut self) -> &'q mut [u8; 16] {
        let p = self.ds_at(self.ds);
        self.ds += 1;
        // SAFETY: the DS lies in a free slot of the live ring (`reserve`
        // was checked against the free space); the device does not read it
        // before the doorbell record moves, and no other reference to it
        // exists.
        unsafe { &mut *p }
    }

    /// Count `len` message bytes against the QP's message limit (the path
    /// MTU on UD).
    #[inline(always)]
    fn add_msg(&mut self, len: u32) -> Result<()> {
        let total = self.msg_len as u64 + len as u64;
        let max = self.sq.desc.max_msg;
        if total > max as u64 {
            return Err(Error::MessageTooLong { len: total, max });
        }
        self.msg_len = total as u32;
        Ok(())
    }

    /// Append one data pointer segment (spec §3.2) after the limit checks.
    /// Zero-length SGEs are skipped, as rdma-core does.
    #[inline(always)]
    fn push_sge(&mut self, addr: u64, len: u32, lkey: u32) -> Result<()> {
        if self.nsge == 0 && len.wrapping_sub(1) < self.sq.first_sge_max {
            // The first entry of a non-empty message (known when the builder
            // is inlined): within every limit below but the WQE's size.
            self.reserve(self.ds + 1)?;
            debug_assert_eq!(self.msg_len, 0);
            self.msg_len = len;
            set_data_ptr_seg(self.next_ds(), len, lkey, addr);
            self.nsge = 1;
            return Ok(());
        }
        if len == 0 {
            return Ok(());
        }
        if len > i32::MAX as u32 {
            return Err(Error::SgeTooLong { len: len as u64 });
        }
        let max_sge = self.sq.desc.max_sge;
        if self.nsge >= max_sge {
            return Err(Error::TooManySge { count: self.nsge + 1, max: max_sge });
        }
        self.reserve(self.ds + 1)?;
        self.add_msg(len)?;
        set_data_ptr_seg(self.next_ds(), len, lkey, addr);
        self.nsge += 1;
        Ok(())
    }

    /// Write the ctrl segment (spec §2.1), hand the doorbell value (the
    /// ctrl segment's first 8 bytes), the start counter and the DS count to
    /// `publish` (which moves the producer, and rings), then record the
    /// WQE's entry. The entry is recorded last because its tracker line,
    /// like the ring's, was last written a ring lap ago when many QPs take
    /// turns: a store there before the doorbell would hold up the
    /// doorbell's fence (x86 stores reach the cache in order, each after
    /// its line arrives) for one more trip to memory. Nothing reads the
    /// entry before the call returns: it is retired by a poll of this
    /// thread (the queue is not `Sync`).
    #[inline(always)]
    fn write_ctrl_then(self, publish: impl FnOnce([u8; 8], u32, u32)) {
        let sq = self.sq;
        let mut ctrl = [0u8; 16];
        set_ctrl_seg_qpn_word(
            &mut ctrl,
            self.start,
            self.opcode,
            self.opmod,
            sq.ctrl_qpn,
            self.fm_ce_se,
            self.ds,
            self.imm,
        );
        // SAFETY: DS 0 of this WQE, a free slot of the live ring.
        unsafe { self.wqe.cast::<[u8; 16]>().write(ctrl) };
        let mut db = [0u8; 8];
        db.copy_from_slice(&ctrl[..8]);
        publish(db, self.start, self.ds);
        // SAFETY: the tracker has a slot per WQEBB, indexed as the ring is
        // (`slot` is masked by the ring's wqe_cnt, which sized the tracker);
        // `ds` is 1 (the ctrl segment) to 63 (its 6-bit field; `reserve`
        // keeps it within the largest WQE), so 1..=16 WQEBBs. The slot is
        // still free: its WQE cannot have completed and been polled yet.
        unsafe { sq.tracker.record(self.slot, self.start.wrapping_add(self.ds.div_ceil(4)), self.entry) };
    }

    /// [`Self::write_ctrl_then`] advancing the producer without ringing.
    #[inline(always)]
    fn commit(self) {
        let sq = self.sq;
        self.write_ctrl_then(|_, start, ds| sq.desc.commit(start, ds));
    }
}

/// [`WqeBuilder::reserve`] past its `bbs`: the DS limit of the largest WQE
/// and the free WQEBBs, each with its error. Out of line, with the builder's
/// values passed, so that the builder stays in registers.
#[cold]
#[inline(never)]
fn reserve_exact(ds: u32, max_ds: u32, free: u32) -> Result<()> {
    if ds <= max_ds && ds.div_ceil(4) <= free {
        Ok(())
    } else {
        Err(over_budget(ds, max_ds, free).into())
    }
}

/// The opcode choices. `$wrap` wraps the state that follows the ctrl
/// segment: identity for RC, `NeedsAv` for DCI.
macro_rules! ctrl_methods {
    ($init:ident, $wrap:ident) => {
        impl<'q, B: Backend, T> WqeBuilder<'q, B, T, $init> {
            /// SEND.
            #[inline(always)]
            pub fn ctrl_send(self, flags: WqeFlags) -> Result<WqeBuilder<'q, B, T, $wrap<Data>>> {
                self.ctrl(opcode::SEND, flags, [0; 4], $wrap(Data))
            }
            /// SEND with immediate data (`imm` is delivered to the responder CQE).
            #[inline(always)]
            pub fn ctrl_send_imm(
                self,
                flags: WqeFlags,
                imm: u32,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<Data>>> {
                self.ctrl(opcode::SEND_IMM, flags, imm.to_be_bytes(), $wrap(Data))
            }
            /// RDMA WRITE.
            #[inline(always)]
            pub fn ctrl_rdma_write(
                self,
                flags: WqeFlags,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<NeedsRaddr<Data>>>> {
                self.ctrl(opcode::RDMA_WRITE, flags, [0; 4], $wrap(NeedsRaddr(Data)))
            }
            /// RDMA WRITE with immediate (consumes a receive WQE at the responder).
            #[inline(always)]
            pub fn ctrl_rdma_write_imm(
                self,
                flags: WqeFlags,
                imm: u32,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<NeedsRaddr<Data>>>> {
                self.ctrl(opcode::RDMA_WRITE_IMM, flags, imm.to_be_bytes(), $wrap(NeedsRaddr(Data)))
            }
            /// RDMA READ into the local scatter list.
            #[inline(always)]
            pub fn ctrl_rdma_read(
                self,
                flags: WqeFlags,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<NeedsRaddr<Scatter>>>> {
                self.ctrl(opcode::RDMA_READ, flags, [0; 4], $wrap(NeedsRaddr(Scatter)))
            }
            /// ATOMIC compare-and-swap: `if *r == compare { *r = swap }`; the
            /// old value lands in the result buffer.
            #[inline(always)]
            pub fn ctrl_atomic_cs(
                self,
                flags: WqeFlags,
                swap: u64,
                compare: u64,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<NeedsRaddr<AtomicArgs>>>> {
                let args = AtomicArgs { swap, compare_add: compare };
                self.ctrl(opcode::ATOMIC_CS, flags, [0; 4], $wrap(NeedsRaddr(args)))
            }
            /// ATOMIC fetch-and-add: `*r += add`; the old value lands in the result buffer.
            #[inline(always)]
            pub fn ctrl_atomic_fa(
                self,
                flags: WqeFlags,
                add: u64,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<NeedsRaddr<AtomicArgs>>>> {
                let args = AtomicArgs { swap: 0, compare_add: add };
                self.ctrl(opcode::ATOMIC_FA, flags, [0; 4], $wrap(NeedsRaddr(args)))
            }
            /// Masked compare-and-swap on 4 or 8 bytes (spec §3.5,
            /// `MLX5_OPCODE_ATOMIC_MASKED_CS`): where `(*r ^ compare) &
            /// compare_mask == 0`, `*r = (*r & !swap_mask) | (swap &
            /// swap_mask)`; the old value lands in the result buffer (of the
            /// argument's width). With `compare_mask` 0 it always swaps: UCX
            /// builds atomic AND, OR and SWAP so.
            #[inline(always)]
            pub fn ctrl_masked_cs<W: MaskedWord>(
                self,
                flags: WqeFlags,
                args: MaskedCs<W>,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<NeedsRaddr<MaskedArgs>>>> {
                let next = W::cs(&args);
                self.masked(opcode::ATOMIC_MASKED_CS, flags, $wrap(NeedsRaddr(next)))
            }
            /// Masked fetch-and-add on 4 or 8 bytes (spec §3.5,
            /// `MLX5_OPCODE_ATOMIC_MASKED_FA`): `*r += add`, split into
            /// fields: a set bit of `field_boundary` marks a field's top bit,
            /// whose carry is dropped. With every bit a boundary, it is XOR.
            #[inline(always)]
            pub fn ctrl_masked_fa<W: MaskedWord>(
                self,
                flags: WqeFlags,
                args: MaskedFa<W>,
            ) -> Result<WqeBuilder<'q, B, T, $wrap<NeedsRaddr<MaskedArgs>>>> {
                let next = W::fa(&args);
                self.masked(opcode::ATOMIC_MASKED_FA, flags, $wrap(NeedsRaddr(next)))
            }
            /// NOP (ctrl segment only).
            #[inline(always)]
            pub fn ctrl_nop(self, flags: WqeFlags) -> Result<WqeBuilder<'q, B, T, Complete>> {
                self.ctrl(opcode::NOP, flags, [0; 4], Complete)
            }
        }
    };
}

/// The identity wrapper: RC continues directly with the segment after ctrl.
#[allow(non_snake_case)]
#[inline(always)]
fn Direct<N>(n: N) -> N {
    n
}
#[allow(non_camel_case_types)]
type Direct<N> = N;

ctrl_methods!(Init, Direct);
ctrl_methods!(DcInit, NeedsAv);

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Init> {
    /// SEND with invalidate of the responder's `rkey` (RC only).
    #[inline(always)]
    pub fn ctrl_send_inv(self, flags: WqeFlags, rkey: u32) -> Result<WqeBuilder<'q, B, T, Data>> {
        self.ctrl(opcode::SEND_INVAL, flags, rkey.to_be_bytes(), Data)
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, UdInit> {
    /// UD SEND.
    #[inline(always)]
    pub fn ctrl_send(self, flags: WqeFlags) -> Result<WqeBuilder<'q, B, T, NeedsDatagram<Data>>> {
        self.ctrl(opcode::SEND, flags, [0; 4], NeedsDatagram(Data))
    }
    /// UD SEND with immediate.
    #[inline(always)]
    pub fn ctrl_send_imm(
        self,
        flags: WqeFlags,
        imm: u32,
    ) -> Result<WqeBuilder<'q, B, T, NeedsDatagram<Data>>> {
        self.ctrl(opcode::SEND_IMM, flags, imm.to_be_bytes(), NeedsDatagram(Data))
    }
}

impl<'q, B: Backend, T, N> WqeBuilder<'q, B, T, NeedsAv<N>> {
    /// The address vector of the target DCT (spec §3.6): DC access key, DCT
    /// number and the pre-encoded path (`AddressVector::ib` / `roce_v2`).
    #[inline(always)]
    pub fn av(mut self, dc_key: u64, dctn: u32, av: &AddressVector) -> Result<WqeBuilder<'q, B, T, N>> {
        self.push_av(dc_key, dctn, av)?;
        let (NeedsAv(next), b) = self.split();
        Ok(b.to(next))
    }
    /// InfiniBand AV without GRH: DC key, DCT number, destination LID (SL 0).
    #[inline(always)]
    pub fn av_ib(self, dc_key: u64, dctn: u32, dlid: u16) -> Result<WqeBuilder<'q, B, T, N>> {
        self.av(dc_key, dctn, &AddressVector::ib(dlid, 0))
    }
    /// RoCE v2 AV: DC key, DCT number, and the RoCE path.
    #[inline(always)]
    pub fn av_roce(
        self,
        dc_key: u64,
        dctn: u32,
        roce: &crate::av::RoceAv,
    ) -> Result<WqeBuilder<'q, B, T, N>> {
        self.av(dc_key, dctn, &AddressVector::roce_v2(roce))
    }
}

impl<'q, B: Backend, T, N> WqeBuilder<'q, B, T, NeedsDatagram<N>> {
    /// The datagram segment (spec §3.6): destination QPN, Q_Key and path.
    #[inline(always)]
    pub fn datagram(
        mut self,
        av: &AddressVector,
        remote_qpn: u32,
        qkey: u32,
    ) -> Result<WqeBuilder<'q, B, T, N>> {
        self.push_av((qkey as u64) << 32, remote_qpn, av)?;
        let (NeedsDatagram(next), b) = self.split();
        Ok(b.to(next))
    }
}

impl<'q, B: Backend, T, S> WqeBuilder<'q, B, T, S> {
    #[inline(always)]
    fn push_av(&mut self, key: u64, dqpn: u32, av: &AddressVector) -> Result<()> {
        self.reserve(self.ds + 3)?;
        let p = self.ds_at(self.ds) as *mut [u8; 48];
        // SAFETY: DS 1..4 of the WQE (the AV follows the ctrl, which opens a
        // WQEBB, so it never wraps), in free slots (`reserve`).
        set_datagram_seg(unsafe { &mut *p }, key, dqpn, av);
        self.ds += 3;
        Ok(())
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
        // Any WQEs pending from finish_batch() go with it: the doorbell
        // record covers them all, the doorbell carries this (last) WQE's ctrl.
        // SAFETY: the descriptor describes the backend QP's live ring and
        // register; handles are single-threaded.
        // (A builder exists: the queue has slots and a register.)
        self.write_ctrl_then(|ctrl, start, ds| unsafe {
            sq.desc.commit_and_ring(sq.mmio(), start, ds, ctrl)
        });
        Ok(())
    }

    /// Post the WQE and write it through the BlueFlame register when it is
    /// the only WQE since the last doorbell and fits the BlueFlame size;
    /// otherwise a plain doorbell (spec §1.6).
    #[inline(always)]
    pub fn finish_with_blueflame(self) -> Result<()> {
        let sq = self.sq;
        // SAFETY: as in `finish`.
        self.write_ctrl_then(|ctrl, start, ds| unsafe {
            sq.desc.commit_and_ring_bf(sq.mmio(), start, ds, ctrl)
        });
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
    /// The state after the remote address segment.
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
        let op = b.opcode;
        set_atomic_seg(b.next_ds(), op, self.swap, self.compare_add);
        Ok(NeedsResult)
    }
}

impl AfterRaddr for MaskedArgs {
    type Next = NeedsMaskedResult;
    /// Masked atomic operands (spec §3.5): one DS, or two for an 8-byte
    /// compare-and-swap (the second may lie past the ring's end).
    #[inline(always)]
    fn after_raddr<B: Backend, T>(self, b: &mut WqeBuilder<'_, B, T, ()>) -> Result<NeedsMaskedResult> {
        b.reserve(b.ds + self.n)?;
        for seg in &self.segs[..self.n as usize] {
            *b.next_ds() = *seg;
        }
        Ok(NeedsMaskedResult(self.width))
    }
}

/// The argument width a state after the ctrl segment carries (masked atomics).
#[doc(hidden)]
pub trait HasWidth {
    fn width(&self) -> u32;
}
impl HasWidth for NeedsRaddr<MaskedArgs> {
    #[inline(always)]
    fn width(&self) -> u32 {
        self.0.width
    }
}
impl HasWidth for NeedsAv<NeedsRaddr<MaskedArgs>> {
    #[inline(always)]
    fn width(&self) -> u32 {
        self.0 .0.width
    }
}

/// Operands of a masked compare-and-swap ([`WqeBuilder::ctrl_masked_cs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaskedCs<W> {
    /// The value swapped in, where `swap_mask` has ones.
    pub swap: W,
    /// The value compared with, where `compare_mask` has ones.
    pub compare: W,
    /// Which bits the swap writes.
    pub swap_mask: W,
    /// Which bits the comparison looks at (0: always swap).
    pub compare_mask: W,
}

/// Operands of a masked fetch-and-add ([`WqeBuilder::ctrl_masked_fa`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaskedFa<W> {
    /// The addend.
    pub add: W,
    /// A set bit ends a field there: its carry goes no further (0: one field).
    pub field_boundary: W,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// The argument widths of masked atomics: `u32` and `u64` (4 and 8 bytes).
pub trait MaskedWord: Copy + sealed::Sealed {
    /// Bytes of an argument.
    const BYTES: u32;
    #[doc(hidden)]
    fn cs(args: &MaskedCs<Self>) -> MaskedArgs;
    #[doc(hidden)]
    fn fa(args: &MaskedFa<Self>) -> MaskedArgs;
}

impl MaskedWord for u32 {
    const BYTES: u32 = 4;
    #[inline(always)]
    fn cs(a: &MaskedCs<u32>) -> MaskedArgs {
        let mut segs = [[0u8; 16]; 2];
        set_masked_cs32_seg(&mut segs[0], a.swap, a.compare, a.swap_mask, a.compare_mask);
        MaskedArgs { segs, n: 1, width: 4 }
    }
    #[inline(always)]
    fn fa(a: &MaskedFa<u32>) -> MaskedArgs {
        let mut segs = [[0u8; 16]; 2];
        set_masked_fa32_seg(&mut segs[0], a.add, a.field_boundary);
        MaskedArgs { segs, n: 1, width: 4 }
    }
}

impl MaskedWord for u64 {
    const BYTES: u32 = 8;
    #[inline(always)]
    fn cs(a: &MaskedCs<u64>) -> MaskedArgs {
        let mut segs = [[0u8; 16]; 2];
        let [first, second] = &mut segs;
        set_masked_cs64_segs(first, second, a.swap, a.compare, a.swap_mask, a.compare_mask);
        MaskedArgs { segs, n: 2, width: 8 }
    }
    #[inline(always)]
    fn fa(a: &MaskedFa<u64>) -> MaskedArgs {
        let mut segs = [[0u8; 16]; 2];
        set_masked_fa64_seg(&mut segs[0], a.add, a.field_boundary);
        MaskedArgs { segs, n: 1, width: 8 }
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, NeedsMaskedResult> {
    /// The local buffer that receives the original remote value: as long as
    /// the arguments (4 or 8 bytes).
    #[inline(always)]
    pub fn result(mut self, sge: Sge) -> Result<WqeBuilder<'q, B, T, Complete>> {
        let width = self.state.0;
        if sge.len != width {
            return Err(Error::InvalidArgument(crate::error::InvalidArgument::OutOfRange {
                arg: crate::error::Arg::AtomicResultLen,
                value: sge.len.into(),
                min: width.into(),
                max: width.into(),
            }));
        }
        self.push_sge(sge.addr, width, sge.lkey)?;
        Ok(self.to(Complete))
    }
}

impl<'q, B: Backend, T, N: AfterRaddr> WqeBuilder<'q, B, T, NeedsRaddr<N>> {
    /// Remote address segment (spec §3.1).
    #[inline(always)]
    pub fn rdma(self, raddr: u64, rkey: u32) -> Result<WqeBuilder<'q, B, T, N::Next>> {
        let (NeedsRaddr(next), mut b) = self.split();
        b.reserve(b.ds + 1)?;
        set_raddr_seg(b.next_ds(), raddr, rkey);
        let next = next.after_raddr(&mut b)?;
        Ok(b.to(next))
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Data> {
    /// Gather entry (data pointer segment): the [`Sge`] a memory region
    /// hands out with [`MemoryRegion::sge`](crate::MemoryRegion::sge), the
    /// same type receives take.
    #[inline(always)]
    pub fn sge(mut self, sge: Sge) -> Result<Self> {
        self.push_sge(sge.addr, sge.len, sge.lkey)?;
        Ok(self)
    }

    /// The whole payload inline in the WQE (spec §3.3): one inline segment,
    /// split at the ring end at byte granularity, pad zeroed. Empty data
    /// writes nothing.
    #[inline(always)]
    pub fn inline(self, data: &[u8]) -> Result<WqeBuilder<'q, B, T, Complete>> {
        let mut b = self;
        if data.is_empty() {
            return Ok(b.to(Complete));
        }
        let seg_ds = (4 + data.len() as u32).div_ceil(16);
        // The message so far is empty (inline is the whole payload), so one
        // compare against min(max_inline, max_msg) passes the common case;
        // the separate checks give the error.
        let within = data.len() <= b.sq.inline_max as usize;
        let fast = within && b.ds + seg_ds <= 4;
        // Two WQEBBs side by side in the ring (the first is not its last
        // slot): the segment is written in one piece there too, once the
        // second WQEBB's room is checked.
        let two = within
            && !fast
            && b.ds + seg_ds <= 8
            && b.wqe2 == b.wqe.wrapping_add(WQEBB_BYTES as usize)
            && b.reserve(b.ds + seg_ds).is_ok();
        let direct = fast || two;
        if !direct {
            let max = b.sq.desc.max_inline as usize;
            if data.len() > max {
                return Err(Error::InlineTooLarge { len: data.len(), max });
            }
            b.reserve(b.ds + seg_ds)?;
            b.add_msg(data.len() as u32)?;
        } else {
            debug_assert_eq!(b.msg_len, 0);
            b.msg_len = data.len() as u32;
        }
        let mut hdr = [0u8; 4];
        seg::set_inline_hdr(&mut hdr, data.len() as u32);
        let base = b.ds * 16;
        // Zero the pad up to the DS boundary so no stale ring bytes go out.
        let pad = (seg_ds * 16 - 4) as usize - data.len();
        if two {
            b.ask_for_second();
        }
        if direct {
            // Inside the first WQEBB, which never wraps, or the first two,
            // which are adjacent.
            // SAFETY: DS ds..ds + seg_ds of this WQE, within its first one
            // or two (adjacent, reserved) WQEBBs: free slots of the live ring.
            unsafe {
                let p = b.wqe.add(base as usize);
                core::ptr::copy_nonoverlapping(hdr.as_ptr(), p, 4);
                core::ptr::copy_nonoverlapping(data.as_ptr(), p.add(4), data.len());
                core::ptr::write_bytes(p.add(4 + data.len()), 0, pad);
            }
        } else {
            // SAFETY: inside the reserved DS, in free slots of the live ring.
            unsafe {
                copy_in(b.buf, b.mask, b.start, base, &hdr);
                copy_in(b.buf, b.mask, b.start, base + 4, data);
                copy_in(b.buf, b.mask, b.start, base + 4 + data.len() as u32, &[0u8; 16][..pad]);
            }
        }
        b.ds += seg_ds;
        Ok(b.to(Complete))
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, Scatter> {
    /// Local scatter entry of an RDMA READ (needs LOCAL_WRITE on the MR).
    #[inline(always)]
    pub fn sge(mut self, sge: Sge) -> Result<Self> {
        self.push_sge(sge.addr, sge.len, sge.lkey)?;
        Ok(self)
    }
}

impl<'q, B: Backend, T> WqeBuilder<'q, B, T, NeedsResult> {
    /// The 8-byte local buffer that receives the original remote value
    /// (`sge.len` must be 8, as for `ibv_post_send` atomics).
    #[inline(always)]
    pub fn result(mut self, sge: Sge) -> Result<WqeBuilder<'q, B, T, Complete>> {
        if sge.len != 8 {
            return Err(Error::InvalidArgument(crate::error::InvalidArgument::OutOfRange {
                arg: crate::error::Arg::AtomicResultLen,
                value: sge.len.into(),
                min: 8,
                max: 8,
            }));
        }
        self.push_sge(sge.addr, 8, sge.lkey)?;
        Ok(self.to(Complete))
    }
}
