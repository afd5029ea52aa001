//! The send queue as plain data (spec §1.2–§1.7): [`SqDesc`] holds what
//! `mlx5dv_init_obj` gives (ring, WQEBB count, doorbell record, register)
//! plus the producer/consumer counters and the limits the post path checks.
//! Its methods address DS units with the ring's modulo rule, copy inline
//! data across the ring end, commit WQEs and ring the doorbell in
//! rdma-core's order: WQE stores, barrier A, doorbell record, barrier B,
//! register write, barrier C, offset toggle.
//!
//! Producer and consumer may be two threads (a single-producer,
//! single-consumer queue): the poster owns `pi`, `last` and `unrung`, the
//! poller advances `ci` ([`SqDesc::retire`]) with a Release store that the
//! poster reads with Acquire. The counters are atomics so that both sides
//! work through shared references; their loads and stores are plain moves
//! on x86_64 and arm64.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::ring::barrier::udma_to_device_barrier;
use crate::ring::error::{check_pow2, check_ptr, check_range, DescArg, DescError, PostError};
use crate::ring::mmio::{BfReg, Mmio, BF_CHUNK};
use crate::ring::seg::{DS_BYTES, WQEBB_BYTES};

/// Largest send ring in WQEBBs: a CQE's 16-bit `wqe_counter` must name
/// every slot without ambiguity (ConnectX's `log_max_qp_sz` is 15).
pub const MAX_SQ_WQEBBS: u32 = 1 << 15;

/// Transport of a send queue (what [`crate::ring::send_wqe`] accepts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SqKind {
    /// Reliable connected.
    Rc = 0,
    /// Unreliable datagram: an address vector per WQE, SEND only.
    Ud = 1,
    /// DC initiator: an address vector per WQE.
    Dci = 2,
}

/// A send queue (the SQ half of `struct mlx5dv_qp` plus its counters).
#[derive(Debug)]
#[repr(C)]
pub struct SqDesc {
    /// Ring of `wqe_cnt` 64-byte WQEBBs.
    pub buf: *mut u8,
    /// The SQ word of the doorbell record (`dbrec[1]`, `MLX5_SND_DBR`).
    pub dbrec: *mut u32,
    /// The doorbell / BlueFlame register (shared by the QPs on it).
    pub bf: *mut BfReg,
    /// Optional `wqe_cnt` wr-ids, indexed by the slot of a WQE's first
    /// WQEBB (null: the caller tracks work requests itself).
    pub wrid: *mut u64,
    /// Number of WQEBBs, a power of two.
    pub wqe_cnt: u32,
    /// Free-running producer counter in WQEBBs (`sq.cur_post`).
    pub pi: AtomicU32,
    /// Free-running counter of the oldest WQEBB not yet retired (advanced
    /// by the poller).
    pub ci: AtomicU32,
    /// Counter of the last WQE written (its ctrl goes into the doorbell).
    pub last: AtomicU32,
    /// WQEs written since the last doorbell.
    pub unrung: AtomicU32,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Transport ([`SqKind`] as u32).
    pub kind: u32,
    /// Largest gather list.
    pub max_sge: u32,
    /// Largest inline payload.
    pub max_inline: u32,
    /// Largest WQE in DS units (at most 63).
    pub max_ds: u32,
    /// Largest message (UD: the path MTU; otherwise 2^31).
    pub max_msg: u32,
    /// Derived by `new`: `wqe_cnt - 1`, the slot mask (in what was the
    /// struct's padding), so that the post masks with one instruction.
    mask: u32,
}

/// What [`SqDesc::retire`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retired {
    /// Ring slot of the completed WQE's first WQEBB.
    pub slot: u32,
    /// Its wr-id, if the queue tracks them.
    pub wr_id: Option<u64>,
}

impl SqDesc {
    /// A send queue over memory described as `mlx5dv_init_obj` does, with
    /// counters at 0. `dbrec` is the SQ word (`&dbrec[1]`); `bf` may be
    /// null here and set before the first doorbell.
    ///
    /// Checks what every method relies on and refuses the rest with a
    /// [`DescError`]: `buf` non-null, `dbrec` non-null and 4-byte aligned,
    /// `wqe_cnt` a power of two up to [`MAX_SQ_WQEBBS`] (the 16-bit
    /// `wqe_counter` of a CQE names every slot), `qpn` 24 bits, `max_ds`
    /// at most 63 (the ctrl segment's 6-bit `ds`). The memory itself is
    /// the `unsafe` methods' contract. A QP without a send queue uses
    /// [`SqDesc::empty`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        buf: *mut u8,
        wqe_cnt: u32,
        dbrec: *mut u32,
        bf: *mut BfReg,
        qpn: u32,
        kind: SqKind,
        max_sge: u32,
        max_inline: u32,
        max_ds: u32,
        max_msg: u32,
    ) -> Result<Self, DescError> {
        check_ptr(DescArg::Buf, buf, 1)?;
        check_ptr(DescArg::Dbrec, dbrec, 4)?;
        check_pow2(DescArg::Count, wqe_cnt, 1, MAX_SQ_WQEBBS)?;
        check_range(DescArg::Number, qpn, 0, 0xff_ffff)?;
        check_range(DescArg::MaxDs, max_ds, 0, 63)?;
        Ok(SqDesc {
            buf,
            dbrec,
            bf,
            wrid: core::ptr::null_mut(),
            wqe_cnt,
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
            last: AtomicU32::new(0),
            unrung: AtomicU32::new(0),
            qpn,
            kind: kind as u32,
            max_sge,
            max_inline,
            max_ds,
            max_msg,
            mask: wqe_cnt - 1,
        })
    }

    /// The send queue of a QP that has none (a DCT): no ring, no room;
    /// every post is refused as [`PostError::SqFull`] before anything is
    /// written.
    pub const fn empty() -> Self {
        SqDesc {
            buf: core::ptr::null_mut(),
            dbrec: core::ptr::null_mut(),
            bf: core::ptr::null_mut(),
            wrid: core::ptr::null_mut(),
            wqe_cnt: 0,
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
            last: AtomicU32::new(0),
            unrung: AtomicU32::new(0),
            qpn: 0,
            kind: SqKind::Rc as u32,
            max_sge: 0,
            max_inline: 0,
            max_ds: 0,
            max_msg: 0,
            mask: u32::MAX,
        }
    }

    /// The transport.
    pub fn kind(&self) -> SqKind {
        match self.kind {
            1 => SqKind::Ud,
            2 => SqKind::Dci,
            _ => SqKind::Rc,
        }
    }

    /// The consumer counter (Acquire).
    #[inline(always)]
    pub fn consumer(&self) -> u32 {
        self.ci.load(Ordering::Acquire)
    }

    /// The producer counter (the poster's own view).
    #[inline(always)]
    pub fn producer(&self) -> u32 {
        self.pi.load(Ordering::Relaxed)
    }

    /// Counter of the last WQE committed.
    #[inline(always)]
    pub fn last(&self) -> u32 {
        self.last.load(Ordering::Relaxed)
    }

    /// WQEs committed since the last doorbell.
    #[inline(always)]
    pub fn unrung(&self) -> u32 {
        self.unrung.load(Ordering::Relaxed)
    }

    /// Free WQEBBs (0 when the counters are inconsistent, as a foreign
    /// writer could leave them: nothing more is posted then).
    #[inline(always)]
    pub fn free(&self) -> u32 {
        self.wqe_cnt.saturating_sub(self.producer().wrapping_sub(self.consumer()))
    }

    /// The ring slot (WQEBB index, also the wr-id table's index) of counter
    /// `counter`.
    #[inline(always)]
    pub fn slot(&self, counter: u32) -> u32 {
        counter & self.mask
    }

    /// Ring size in bytes minus one (`usize::MAX` for an empty queue's null
    /// ring, which nothing but a prefetch forms an address in).
    #[inline(always)]
    pub fn byte_mask(&self) -> usize {
        (self.wqe_cnt.wrapping_mul(WQEBB_BYTES) as usize).wrapping_sub(1)
    }

    /// Ask for the lines the next post writes to the device's memory, ahead
    /// of it: the next WQE's first two WQEBBs (a WQE of up to 128 bytes, the
    /// second wrapping to the ring's start) and the doorbell record. Reads
    /// the producer counter and nothing the device writes.
    ///
    /// A hint for executors posting round robin over many QPs: with
    /// thousands taking turns, a queue's next slot was last written a whole
    /// ring lap ago and is out of every cache, and the doorbell waits for
    /// the WQE's stores to reach it (spec §1.6: the WQE before the record,
    /// the record before the doorbell). Asked for while the previous QP is
    /// posted, the lines are there when this one posts.
    ///
    /// Changes no byte and never faults, whatever the descriptor holds
    /// (an empty queue's null ring included): addresses are formed with
    /// wrapping arithmetic and only prefetched.
    #[inline(always)]
    pub fn prefetch_next(&self) {
        let mask = self.byte_mask();
        let at = (self.producer() as usize).wrapping_mul(WQEBB_BYTES as usize);
        super::hint::prefetch_w(self.buf.wrapping_add(at & mask));
        super::hint::prefetch_w(self.buf.wrapping_add(at.wrapping_add(WQEBB_BYTES as usize) & mask));
        super::hint::prefetch_w(self.dbrec);
    }

    /// Address of DS `i` of the WQE whose first WQEBB has counter `start`,
    /// with the modulo rule of spec §1.3.
    #[inline(always)]
    pub fn ds_ptr(&self, start: u32, i: u32) -> *mut [u8; 16] {
        ds_ptr(self.buf, self.byte_mask(), start, i)
    }

    /// Copy `data` into the ring `byte_off` bytes after the start of the WQE
    /// at `start`, split at the ring end byte by byte (spec §3.3).
    ///
    /// # Safety
    /// The descriptor describes live memory and the bytes belong to free slots.
    #[inline(always)]
    pub unsafe fn copy_in(&self, start: u32, byte_off: u32, data: &[u8]) {
        // SAFETY: forwarded.
        unsafe { copy_in(self.buf, self.byte_mask(), start, byte_off, data) }
    }

    /// Record a finished WQE of `ds` DS at `start`: advance the producer.
    /// Nothing reaches the device before the doorbell record.
    #[inline(always)]
    pub fn commit(&self, start: u32, ds: u32) {
        self.last.store(start, Ordering::Relaxed);
        self.unrung.store(self.unrung().wrapping_add(1), Ordering::Relaxed);
        self.pi.store(start.wrapping_add(ds.div_ceil(4)), Ordering::Relaxed);
    }

    /// Barrier A, then the producer counter (16 bits, big-endian) into the
    /// doorbell record (spec §1.5).
    ///
    /// # Safety
    /// `dbrec` points at a live doorbell record word.
    #[inline(always)]
    pub unsafe fn publish(&self) {
        // SAFETY: forwarded.
        unsafe { self.publish_at(self.producer()) }
    }

    /// [`SqDesc::publish`] of a producer value the caller holds.
    ///
    /// # Safety
    /// As [`SqDesc::publish`].
    #[inline(always)]
    unsafe fn publish_at(&self, pi: u32) {
        udma_to_device_barrier();
        // SAFETY: caller contract.
        unsafe { AtomicU32::from_ptr(self.dbrec) }.store((pi & 0xffff).to_be(), Ordering::Release);
    }

    /// The 8-byte doorbell at the register's current half, then the toggle;
    /// nothing is left unrung.
    ///
    /// # Safety
    /// As [`SqDesc::ring_db`]; the doorbell record is already published.
    #[inline(always)]
    unsafe fn doorbell<M: Mmio>(&self, m: &M, ctrl8: [u8; 8]) {
        // SAFETY: caller contract.
        unsafe {
            let bf = &*self.bf;
            let off = bf.next_offset();
            m.write_db(bf.reg, off, ctrl8);
            bf.set_offset(off ^ bf.size);
        }
        self.unrung.store(0, Ordering::Relaxed);
    }

    /// The `bytes` of the WQE at counter `start` copied to the register's
    /// current half (following the wrap at the ring end), then the toggle;
    /// nothing is left unrung.
    ///
    /// # Safety
    /// As [`SqDesc::ring_db`]; the doorbell record is already published and
    /// the WQE (a multiple of 64 bytes) fits one BlueFlame half.
    #[inline(always)]
    unsafe fn blueflame<M: Mmio>(&self, m: &M, start: u32, bytes: usize) {
        let mask = self.byte_mask();
        let off = (start as usize * WQEBB_BYTES as usize) & mask;
        // One WQEBB never wraps.
        let head = if bytes == BF_CHUNK { BF_CHUNK } else { bytes.min(mask + 1 - off) };
        // SAFETY: caller contract; both ranges lie inside the ring and hold
        // the WQE.
        unsafe {
            let (h, t) = (
                core::slice::from_raw_parts(self.buf.add(off), head),
                core::slice::from_raw_parts(self.buf, bytes - head),
            );
            let bf = &*self.bf;
            let o = bf.next_offset();
            m.write_bf(bf.reg, o, h, t);
            bf.set_offset(o ^ bf.size);
        }
        self.unrung.store(0, Ordering::Relaxed);
    }

    /// The first 8 bytes of the last WQE's ctrl segment: the doorbell value.
    ///
    /// # Safety
    /// The descriptor describes live memory.
    #[inline(always)]
    pub unsafe fn last_ctrl8(&self) -> [u8; 8] {
        // SAFETY: a ctrl segment never straddles the ring end.
        unsafe { (self.ds_ptr(self.last(), 0) as *const [u8; 8]).read() }
    }

    /// Ring the doorbell for every WQE committed since the last one: the
    /// doorbell record, then one 8-byte store of the last WQE's first 8
    /// ctrl bytes at the register's current half, then the toggle. Nothing
    /// to ring: nothing happens.
    ///
    /// # Safety
    /// The descriptor describes live memory and its register is not written
    /// by another thread meanwhile.
    #[inline(always)]
    pub unsafe fn ring_db<M: Mmio>(&self, m: &M) {
        if self.unrung() == 0 {
            return;
        }
        // SAFETY: forwarded.
        unsafe { self.ring_db_with(m, self.last_ctrl8()) }
    }

    /// [`SqDesc::ring_db`] with the doorbell value the caller still holds.
    ///
    /// # Safety
    /// As [`SqDesc::ring_db`].
    #[inline(always)]
    pub unsafe fn ring_db_with<M: Mmio>(&self, m: &M, ctrl8: [u8; 8]) {
        // SAFETY: caller contract.
        unsafe {
            self.publish();
            self.doorbell(m, ctrl8);
        }
    }

    /// Commit the WQE of `ds` DS at `start` and ring the doorbell for it
    /// (and for any WQE committed before it and not yet rung): producer,
    /// doorbell record, one 8-byte store of `ctrl8` (its ctrl segment's
    /// first 8 bytes), toggle. [`SqDesc::commit`] then [`SqDesc::ring_db`]
    /// in one, without recording `last` (nothing is left unrung).
    ///
    /// # Safety
    /// As [`SqDesc::ring_db`].
    #[inline(always)]
    pub unsafe fn commit_and_ring<M: Mmio>(&self, m: &M, start: u32, ds: u32, ctrl8: [u8; 8]) {
        let pi = start.wrapping_add(ds.div_ceil(4));
        self.pi.store(pi, Ordering::Relaxed);
        // SAFETY: caller contract (a live doorbell record and register).
        unsafe {
            self.publish_at(pi);
            self.doorbell(m, ctrl8);
        }
    }

    /// [`SqDesc::commit_and_ring`] through BlueFlame when that is legal
    /// (spec §1.6: no WQE is waiting for a doorbell, the register has
    /// BlueFlame and the WQE fits one half): the whole WQE copied to the
    /// register, following its wrap at the ring end. Otherwise a plain
    /// doorbell for it and the WQEs before it.
    ///
    /// # Safety
    /// As [`SqDesc::ring_db`].
    #[inline(always)]
    pub unsafe fn commit_and_ring_bf<M: Mmio>(&self, m: &M, start: u32, ds: u32, ctrl8: [u8; 8]) {
        let nbb = ds.div_ceil(4);
        // SAFETY: `bf` is live (caller contract).
        let bf = unsafe { &*self.bf };
        let bytes = nbb * WQEBB_BYTES;
        if self.unrung() != 0 || bf.size == 0 || bytes > bf.size {
            // SAFETY: forwarded.
            return unsafe { self.commit_and_ring(m, start, ds, ctrl8) };
        }
        let pi = start.wrapping_add(nbb);
        self.pi.store(pi, Ordering::Relaxed);
        // SAFETY: caller contract; the WQE was just written and fits a half.
        unsafe {
            self.publish_at(pi);
            self.blueflame(m, start, bytes as usize);
        }
    }

    /// Whether the last WQE may go through BlueFlame (spec §1.6): it is the
    /// only one since the last doorbell, the register has BlueFlame, and the
    /// WQE fits one half.
    ///
    /// # Safety
    /// `bf` points at a live register view (as for [`SqDesc::ring_db`]): the
    /// register's half size is read through it.
    #[inline(always)]
    pub unsafe fn blueflame_legal(&self) -> bool {
        // SAFETY: `bf` is live (caller contract).
        let size = unsafe { (*self.bf).size };
        self.unrung() == 1 && size != 0 && self.producer().wrapping_sub(self.last()) * WQEBB_BYTES <= size
    }

    /// Ring with BlueFlame when legal (the whole WQE copied to the register,
    /// following its wrap at the ring end), else a plain doorbell.
    ///
    /// # Safety
    /// As [`SqDesc::ring_db`].
    #[inline(always)]
    pub unsafe fn ring_bf<M: Mmio>(&self, m: &M) {
        // SAFETY: `bf` is live (caller contract).
        if !unsafe { self.blueflame_legal() } {
            // SAFETY: forwarded.
            return unsafe { self.ring_db(m) };
        }
        let last = self.last();
        let bytes = (self.producer().wrapping_sub(last) * WQEBB_BYTES) as usize;
        // SAFETY: caller contract; legal: the last WQE alone, fitting a half.
        unsafe {
            self.publish();
            self.blueflame(m, last, bytes);
        }
    }

    /// Retire WQEs up to and including the one whose `wqe_index` is
    /// `wqe_counter` (unsignaled WQEs before it are implicitly complete,
    /// spec §5.9): walks the WQEs from the consumer counter by the `ds` of
    /// their ctrl segments (still in the ring: a slot is reused only after
    /// this), then publishes the new consumer counter. `None` when no
    /// outstanding WQE starts at that index (a CQE that does not match the
    /// ring: report it, never trust it); nothing changes then.
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread retires at a time.
    pub unsafe fn retire(&self, wqe_counter: u16) -> Option<Retired> {
        let pi = self.producer();
        let ci = self.consumer();
        let dist = (wqe_counter as u32).wrapping_sub(ci) & 0xffff;
        if dist >= pi.wrapping_sub(ci) {
            return None;
        }
        let mut at = ci;
        loop {
            // SAFETY: `at` lies in [ci, pi): a posted WQE's ctrl segment.
            let ds = unsafe { (*self.ds_ptr(at, 0))[7] } as u32 & 0x3f;
            if at as u16 == wqe_counter {
                let slot = self.slot(at);
                let wr_id = if self.wrid.is_null() {
                    None
                } else {
                    // SAFETY: `wrid` has wqe_cnt entries (field contract).
                    Some(unsafe { *self.wrid.add(slot as usize) })
                };
                self.ci.store(at.wrapping_add(ds.div_ceil(4).max(1)), Ordering::Release);
                return Some(Retired { slot, wr_id });
            }
            at = at.wrapping_add(ds.div_ceil(4).max(1));
            if at.wrapping_sub(ci) > dist {
                return None;
            }
        }
    }

    /// Forget every WQE (the QP went to RESET): counters back to 0, the
    /// register keeps its toggle.
    pub fn reset(&self) {
        for c in [&self.pi, &self.ci, &self.last, &self.unrung] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// DS `i` of the WQE at counter `start` in a ring at `buf` of `mask + 1` bytes.
#[inline(always)]
pub fn ds_ptr(buf: *mut u8, mask: usize, start: u32, i: u32) -> *mut [u8; 16] {
    // Wrapping: only the low bits survive the mask (a safe function: no
    // argument may panic it).
    let off =
        (start as usize).wrapping_mul(WQEBB_BYTES as usize).wrapping_add(i.wrapping_mul(DS_BYTES) as usize)
            & mask;
    buf.wrapping_add(off) as *mut [u8; 16]
}

/// Copy `data` to `byte_off` bytes after the WQE at `start`, wrapping.
///
/// # Safety
/// The ring at `buf` is `mask + 1` bytes of live memory; the bytes are free.
#[inline(always)]
pub unsafe fn copy_in(buf: *mut u8, mask: usize, start: u32, byte_off: u32, data: &[u8]) {
    let ring = mask + 1;
    let off = ((start as usize) * WQEBB_BYTES as usize + byte_off as usize) & mask;
    let first = data.len().min(ring - off);
    // SAFETY: both copies stay inside the ring (caller contract).
    unsafe {
        core::ptr::copy_nonoverlapping(data.as_ptr(), buf.add(off), first);
        core::ptr::copy_nonoverlapping(data.as_ptr().add(first), buf, data.len() - first);
    }
}

/// The error for a WQE of `ds` DS that exceeds the smaller of the size
/// limit and the free ring space.
#[cold]
pub fn over_budget(ds: u32, max_ds: u32, free: u32) -> PostError {
    if ds > max_ds {
        return PostError::WqeTooLarge { ds, max: max_ds };
    }
    PostError::SqFull { needed: ds.div_ceil(4), free }
}

// SAFETY: the descriptor's mutable state is atomic; the memory it points
// to is reached only through `unsafe` methods whose contracts say who may
// touch it (one posting thread, one retiring thread).
unsafe impl Send for SqDesc {}
// SAFETY: as above.
unsafe impl Sync for SqDesc {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hint reads the producer and changes nothing: not the ring, not the
    /// doorbell record, not a counter; at the ring's last slot (the second
    /// line wraps to the start) and on an empty queue's null ring alike.
    #[test]
    fn asking_for_the_next_posts_lines_changes_nothing() {
        let mut ring = vec![0x5au8; 4 * WQEBB_BYTES as usize];
        let mut dbrec = [0u32, 0x1234_5678];
        let d = SqDesc::new(
            ring.as_mut_ptr(),
            4,
            &mut dbrec[1],
            core::ptr::null_mut(),
            7,
            SqKind::Rc,
            1,
            0,
            4,
            1 << 31,
        )
        .unwrap();
        for pi in [0u32, 3, 0xffff_ffff] {
            d.pi.store(pi, Ordering::Relaxed);
            d.prefetch_next();
            assert_eq!((d.producer(), d.consumer(), d.last(), d.unrung()), (pi, 0, 0, 0));
        }
        assert!(ring.iter().all(|&b| b == 0x5a));
        assert_eq!(dbrec, [0, 0x1234_5678]);

        let empty = SqDesc::empty();
        empty.prefetch_next();
        assert_eq!(empty.producer(), 0);
    }
}
