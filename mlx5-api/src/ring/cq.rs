//! The completion queue as plain data (spec §5.5, §5.6, §5.8): [`CqDesc`] is
//! `struct mlx5dv_cq` plus the consumer index, the arm sequence number and
//! the state of a compressed session being expanded. Ownership: entry
//! `ci & (cqe_cnt - 1)` belongs to software iff its opcode is not INVALID
//! and its owner bit equals `(ci >> log2(cqe_cnt)) & 1`; then the read
//! barrier, then the rest of the CQE. The consumer index goes to doorbell
//! record word 0 (24 bits) once the CQE has been read.
//!
//! Compressed sessions (spec §5.8): a title CQE (format 3) whose `byte_cnt`
//! says how many completions follow in mini-CQE arrays (array #0 at slot
//! T+1, array #k at T+8k). [`CqDesc::next`] expands each completion into a
//! full 64-byte CQE in the descriptor's scratch buffer, so every reader
//! downstream sees ordinary CQEs. The consumer index advances per
//! completion; once the session is consumed its slots are given back
//! looking device-owned (`op_own` = 0xF0, as DPDK does: holes keep stale
//! owner bits from older passes) and only then is the index published.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::ring::barrier::{udma_from_device_barrier, udma_to_device_barrier};
use crate::ring::cqe::{cqe_opcode, Cqe};
use crate::ring::error::{check_pow2, check_ptr, check_range, DescArg, DescError};
use crate::ring::mmio::Mmio;

/// Responder mini-CQE layout of a compressing CQ (spec §5.8), as the
/// hardware numbers it (`mini_cqe_res_format`); requester sessions always
/// use the requester layout.
pub mod mini_format {
    /// BE32 RSS hash (CQE 0x0c), BE32 byte count.
    pub const HASH: u32 = 0;
    /// BE16 checksum (CQE 0x14), 2 bytes reserved, BE32 byte count.
    pub const CSUM: u32 = 1;
}

/// What [`CqDesc::peek_plain`] found at a consumer index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// An owned requester CQE (opcode REQ) of format 0: its CQE proper and
    /// `op_own`, after the read barrier.
    Req(*const u8, u8),
    /// An owned CQE of format 0 with another opcode, as [`Peek::Req`].
    Plain(*const u8, u8),
    /// Nothing owned yet.
    Empty,
    /// An owned CQE of another format (a compressed title, scatter-to-CQE
    /// data): for [`CqDesc::next`].
    Other,
}

/// Where [`CqDesc::peek_plain_at`] looks: the base of the CQE propers (see
/// [`CqDesc::fast`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fast(*mut u8);

/// Largest CQ in entries (the doorbell record's consumer index has 24
/// bits; ConnectX's `log_max_cq_sz` is 22).
pub const MAX_CQES: u32 = 1 << 22;

/// Offset of the CQ doorbell in the CQ's UAR page (`MLX5_CQ_DOORBELL`).
pub const CQ_DOORBELL: u32 = 0x20;

/// A completion queue. The fields after `scratch` are derived from the
/// others by [`CqDesc::new`]: the public fields are read-only after it.
#[derive(Debug)]
#[repr(C)]
pub struct CqDesc {
    /// `cqe_cnt` slots of `cqe_size` bytes.
    pub buf: *mut u8,
    /// Doorbell record: word 0 set_ci, word 1 arm.
    pub dbrec: *mut u32,
    /// Number of slots, a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128 (the CQE proper is the second half of a 128-byte slot).
    pub cqe_size: u32,
    /// CQ number.
    pub cqn: u32,
    /// Free-running consumer index.
    pub ci: AtomicU32,
    /// Responder mini-CQE layout ([`mini_format`]) when compression is on.
    pub mini_format: u32,
    /// Arm sequence number (2 bits go into the arm word).
    pub arm_sn: AtomicU32,
    /// Compressed session: completions it holds (0: none open).
    zip_n: AtomicU32,
    /// Compressed session: index of the completion `next` hands out.
    zip_i: AtomicU32,
    /// Compressed session: consumer index of its title.
    zip_t: AtomicU32,
    /// Compressed session: the title's `wqe_counter`.
    zip_ctr: AtomicU32,
    /// The expanded CQE of a compressed session's current completion.
    scratch: UnsafeCell<[u8; 64]>,
    /// Derived by `new`: `buf + cqe_size - 64`, the CQE proper of slot 0.
    proper0: *mut u8,
    /// Derived by `new`: `cqe_cnt - 1`.
    mask: u32,
    /// Where the plain fast path ([`CqDesc::peek_plain`]) looks: `proper0`
    /// and `mask`, or while a compressed session is open a CQE proper whose
    /// `op_own` is `PARKED`'s at every index (base `PARKED - 63`, mask 0),
    /// so that the fast path needs no session test of its own: it finds
    /// nothing it takes and goes to the path that expands sessions. Read
    /// and written by the polling thread only (as `scratch`).
    fast0: UnsafeCell<*mut u8>,
    fast_mask: AtomicU32,
}

/// The `op_own` the fast path reads while a session is open: opcode
/// INVALID, owner 0 (never a plain CQE software owns, whatever the lap).
static PARKED: AtomicU8 = AtomicU8::new(cqe_opcode::INVALID << 4);

// SAFETY: atomic counters; the ring and the scratch buffer are used through
// `unsafe` methods (one polling thread).
unsafe impl Send for CqDesc {}
// SAFETY: as above.
unsafe impl Sync for CqDesc {}

impl CqDesc {
    /// A CQ over memory described as `mlx5dv_init_obj` does.
    ///
    /// Checks what every method relies on and refuses the rest with a
    /// [`DescError`]: `buf` non-null and 64-byte aligned (CQEs are read as
    /// aligned words), `dbrec` non-null and 4-byte aligned, `cqe_cnt` a
    /// power of two up to [`MAX_CQES`] (the doorbell record's 24-bit
    /// consumer index), `cqe_size` 64 or 128, `cqn` 24 bits.
    pub fn new(
        buf: *mut u8,
        cqe_cnt: u32,
        cqe_size: u32,
        dbrec: *mut u32,
        cqn: u32,
    ) -> Result<Self, DescError> {
        check_ptr(DescArg::Buf, buf, 64)?;
        check_ptr(DescArg::Dbrec, dbrec, 4)?;
        check_pow2(DescArg::Count, cqe_cnt, 1, MAX_CQES)?;
        check_pow2(DescArg::CqeSize, cqe_size, 64, 128)?;
        check_range(DescArg::Number, cqn, 0, 0xff_ffff)?;
        let proper0 = buf.wrapping_add((cqe_size - 64) as usize);
        Ok(CqDesc {
            buf,
            dbrec,
            cqe_cnt,
            cqe_size,
            cqn,
            ci: AtomicU32::new(0),
            mini_format: mini_format::HASH,
            arm_sn: AtomicU32::new(0),
            zip_n: AtomicU32::new(0),
            zip_i: AtomicU32::new(0),
            zip_t: AtomicU32::new(0),
            zip_ctr: AtomicU32::new(0),
            scratch: UnsafeCell::new([0; 64]),
            proper0,
            mask: cqe_cnt - 1,
            fast0: UnsafeCell::new(proper0),
            fast_mask: AtomicU32::new(cqe_cnt - 1),
        })
    }

    /// The 64-byte CQE proper of slot `idx` (free-running).
    #[inline(always)]
    fn proper(&self, idx: u32) -> *mut u8 {
        self.proper_from(self.proper0, idx)
    }

    /// [`CqDesc::proper`] from `proper0` as the caller holds it.
    #[inline(always)]
    fn proper_from(&self, proper0: *mut u8, idx: u32) -> *mut u8 {
        // A multiply, not a shift by log2(cqe_size): x86 shifts by a
        // variable count only from CL, which costs a poll loop a move.
        proper0.wrapping_add(((idx & self.mask).wrapping_mul(self.cqe_size)) as usize)
    }

    /// The owner bit a CQE software owns carries in `idx`'s lap of the
    /// ring (spec §5.5), and the slots from `idx` to that lap's end.
    #[inline(always)]
    pub(crate) fn lap(&self, idx: u32) -> (u8, u32) {
        ((idx & self.cqe_cnt != 0) as u8, self.cqe_cnt.wrapping_sub(idx & self.mask))
    }

    /// The consumer index.
    #[inline(always)]
    pub fn consumer(&self) -> u32 {
        self.ci.load(Ordering::Relaxed)
    }

    /// The CQE proper (64 bytes) at the consumer index if software owns it,
    /// after the read barrier; `None` when there is nothing yet. Inside a
    /// compressed session: the current completion expanded into a full CQE
    /// (in the descriptor's scratch buffer).
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread polls.
    #[inline(always)]
    pub unsafe fn next(&self) -> Option<*const u8> {
        if self.zip_n.load(Ordering::Relaxed) != 0 {
            // SAFETY: forwarded.
            return Some(unsafe { self.expand() });
        }
        let ci = self.consumer();
        // SAFETY: forwarded; no session is open and `ci` is the consumer index.
        let (cqe, op_own) = unsafe { self.peek(ci) }?;
        if op_own & 0x0c == 0x0c {
            // A title announcing no completions is malformed: handed out
            // as it is (readers report its format).
            // SAFETY: the title is owned; byte_cnt is inside it.
            if unsafe { *(cqe.add(0x2c) as *const u32) } != 0 {
                // SAFETY: forwarded; the title is owned and read.
                return Some(unsafe { self.open_session(ci, cqe) });
            }
        }
        Some(cqe)
    }

    /// Whether a compressed session is being expanded ([`CqDesc::next`]
    /// hands out its completions, [`CqDesc::advance`] closes it).
    #[inline(always)]
    pub fn in_session(&self) -> bool {
        self.zip_n.load(Ordering::Relaxed) != 0
    }

    /// The fast path of [`CqDesc::next`] for a poller that checked
    /// [`CqDesc::in_session`] before its loop: the CQE proper at consumer
    /// index `ci` (the current one) and its `op_own` if software owns it,
    /// after the read barrier. A title (format 3) is handed out as it is:
    /// the caller leaves titles and other formats (`op_own & 0x0c != 0`) to
    /// `next`, which has not consumed anything yet.
    ///
    /// # Safety
    /// As [`CqDesc::next`]; no session is open and `ci` is the consumer index.
    #[inline(always)]
    pub unsafe fn peek(&self, ci: u32) -> Option<(*const u8, u8)> {
        let cqe = self.proper(ci);
        // SAFETY: op_own is byte 63 of the CQE; the device stores it last.
        let op_own = unsafe { AtomicU8::from_ptr(cqe.add(63)) }.load(Ordering::Acquire);
        if op_own >= cqe_opcode::INVALID << 4 || (op_own & 1) != (ci & self.cqe_cnt != 0) as u8 {
            return None;
        }
        udma_from_device_barrier();
        Some((cqe, op_own))
    }

    /// [`CqDesc::peek`] for a poller whose loop takes plain CQEs (format
    /// 0) only: one test of `op_own` finds the commonest case, a requester
    /// CQE software owns, and one more the other plain ones (owner bit as
    /// the lap expects, opcode not INVALID, format 0). The owner bit is
    /// flipped into bit 0, so that bits 0, 2 and 3 are clear in those
    /// cases; the requester's opcode is 0; adding 0x10 carries the INVALID
    /// opcode (0xF) into bit 8, which no other opcode reaches. While a
    /// compressed session is open it takes nothing ([`Peek::Other`]: the
    /// session is [`CqDesc::next`]'s), at the cost of no test of its own.
    ///
    /// # Safety
    /// As [`CqDesc::peek`], except that a session may be open.
    #[inline(always)]
    pub unsafe fn peek_plain(&self, ci: u32) -> Peek {
        // SAFETY: forwarded.
        unsafe { self.peek_plain_at(self.fast(), ci) }
    }

    /// Where the fast path looks for CQE propers, for
    /// [`CqDesc::peek_plain_at`] (a poll loop may keep it in a register
    /// until it leaves for the general path, the only one that opens a
    /// session; the mask that goes with it is read where it is used, which
    /// costs no instruction and keeps a register free).
    ///
    /// # Safety
    /// Called by the polling thread (the one that opens and closes sessions).
    #[inline(always)]
    pub(crate) unsafe fn fast(&self) -> Fast {
        // SAFETY: only the polling thread reads or writes `fast0` (caller
        // contract, and `open_session` / `close_session`'s).
        Fast(unsafe { *self.fast0.get() })
    }

    /// [`CqDesc::peek_plain`] given [`CqDesc::fast`].
    ///
    /// # Safety
    /// As [`CqDesc::peek_plain`], except that a session may be open (the
    /// CQE is then not taken); `fast` is what [`CqDesc::fast`] gave since
    /// the last session opened or closed.
    #[inline(always)]
    pub(crate) unsafe fn peek_plain_at(&self, fast: Fast, ci: u32) -> Peek {
        // SAFETY: forwarded; the owner bit of `ci`'s lap.
        unsafe { self.peek_plain_own(fast, ci, self.lap(ci).0) }
    }

    /// [`CqDesc::peek_plain_at`] given the owner bit software owns in
    /// `ci`'s lap of the ring (`ci & cqe_cnt != 0`), which a poll loop may
    /// keep for the lap.
    ///
    /// # Safety
    /// As [`CqDesc::peek_plain_at`]; `own` is the owner bit of `ci`'s lap.
    #[inline(always)]
    pub(crate) unsafe fn peek_plain_own(&self, fast: Fast, ci: u32, own: u8) -> Peek {
        debug_assert_eq!(own, self.lap(ci).0);
        let (Fast(base), mask) = (fast, self.fast_mask.load(Ordering::Relaxed));
        // (Wrapping: parked, `base` lies before PARKED, outside any object;
        // base + 63 is PARKED again.)
        let cqe = base.wrapping_add(((ci & mask).wrapping_mul(self.cqe_size)) as usize);
        // SAFETY: op_own is byte 63 of the CQE (or PARKED itself); the
        // device stores it last.
        let op_own = unsafe { AtomicU8::from_ptr(cqe.wrapping_add(63)) }.load(Ordering::Acquire);
        let x = op_own ^ own;
        if x & 0xfd == 0 {
            udma_from_device_barrier();
            return Peek::Req(cqe, op_own);
        }
        if (u32::from(x) + 0x10) & 0x10d == 0 {
            udma_from_device_barrier();
            return Peek::Plain(cqe, op_own);
        }
        // SAFETY: forwarded.
        unsafe { self.peek_other(ci) }
    }

    /// What [`CqDesc::peek_plain`] did not take: an open session, nothing
    /// owned yet, or an owned CQE of another format (looked at again: it
    /// may have arrived since, and is then handed to the general path as
    /// it is).
    #[cold]
    #[inline(never)]
    unsafe fn peek_other(&self, ci: u32) -> Peek {
        if self.in_session() {
            return Peek::Other;
        }
        // SAFETY: forwarded.
        match unsafe { self.peek(ci) } {
            None => Peek::Empty,
            Some(_) => Peek::Other,
        }
    }

    /// [`CqDesc::advance`] outside a compressed session, the consumer
    /// index being `ci`.
    ///
    /// # Safety
    /// As [`CqDesc::advance`]; no session is open and `ci` is the consumer
    /// index.
    #[inline(always)]
    pub unsafe fn advance_plain(&self, ci: u32) {
        // SAFETY: forwarded.
        unsafe { self.advance_plain_to(ci.wrapping_add(1)) };
    }

    /// [`CqDesc::advance_plain`] given the consumer index after the CQE.
    ///
    /// # Safety
    /// As [`CqDesc::advance_plain`]; `next` is the consumer index plus one.
    #[inline(always)]
    pub(crate) unsafe fn advance_plain_to(&self, next: u32) {
        self.ci.store(next, Ordering::Relaxed);
        // SAFETY: caller contract.
        unsafe { self.publish(next) };
    }

    /// A title CQE at `ci`: copy it into the scratch buffer and expand the
    /// session's first completion.
    #[cold]
    unsafe fn open_session(&self, ci: u32, title: *const u8) -> *const u8 {
        // SAFETY: the scratch buffer belongs to the one polling thread;
        // the title is 64 readable bytes.
        let (n, ctr) = unsafe {
            core::ptr::copy_nonoverlapping(title, (*self.scratch.get()).as_mut_ptr(), 64);
            let c = &*self.scratch.get();
            (u32::from_be_bytes([c[0x2c], c[0x2d], c[0x2e], c[0x2f]]), u16::from_be_bytes([c[0x3c], c[0x3d]]))
        };
        self.zip_ctr.store(u32::from(ctr), Ordering::Relaxed);
        // Never more completions than the ring holds.
        self.zip_n.store(n.min(self.cqe_cnt), Ordering::Relaxed);
        // SAFETY: the polling thread (this method's contract, via `next`).
        unsafe { *self.fast0.get() = PARKED.as_ptr().wrapping_sub(63) };
        self.fast_mask.store(0, Ordering::Relaxed);
        self.zip_i.store(0, Ordering::Relaxed);
        self.zip_t.store(ci, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { self.expand() }
    }

    /// Expand completion `zip_i` of the open session (spec §5.8): the title
    /// with `byte_cnt` from the mini CQE; requester: `wqe_counter` and WQE
    /// opcode from the mini CQE; responder: `wqe_counter` = title's + i and
    /// the hash or checksum; `op_own` with format 0 and the owner bit of
    /// its logical slot.
    #[inline]
    unsafe fn expand(&self) -> *const u8 {
        let i = self.zip_i.load(Ordering::Relaxed);
        let t = self.zip_t.load(Ordering::Relaxed);
        let arr = t.wrapping_add(if i < 8 { 1 } else { i & !7 });
        let mut mini = [0u8; 8];
        // SAFETY: the array slot lies inside the ring and belongs to the
        // session the title made ours.
        unsafe {
            core::ptr::copy_nonoverlapping(self.proper(arr).add(((i & 7) * 8) as usize), mini.as_mut_ptr(), 8)
        };
        // SAFETY: the scratch buffer belongs to the one polling thread.
        let c = unsafe { &mut *self.scratch.get() };
        let title_op_own = c[63];
        c[0x2c..0x30].copy_from_slice(&mini[4..8]);
        if title_op_own >> 4 == cqe_opcode::REQ {
            c[0x3c..0x3e].copy_from_slice(&mini[0..2]);
            c[0x38] = mini[2];
        } else {
            let ctr = (self.zip_ctr.load(Ordering::Relaxed) as u16).wrapping_add(i as u16);
            c[0x3c..0x3e].copy_from_slice(&ctr.to_be_bytes());
            if self.mini_format == mini_format::CSUM {
                c[0x14..0x16].copy_from_slice(&mini[0..2]);
            } else {
                c[0x0c..0x10].copy_from_slice(&mini[0..4]);
            }
        }
        let pass = (t.wrapping_add(i) & self.cqe_cnt != 0) as u8;
        c[63] = (title_op_own & 0xf2) | pass;
        c.as_ptr()
    }

    /// Hand the CQE at the consumer index back to the device: advance the
    /// index and publish it in doorbell record word 0. Inside a compressed
    /// session the index is published once the whole session is consumed,
    /// after its slots were made to look device-owned again.
    ///
    /// # Safety
    /// The descriptor describes live memory; the CQE was read.
    #[inline(always)]
    pub unsafe fn advance(&self) {
        let n = self.zip_n.load(Ordering::Relaxed);
        if n != 0 {
            self.ci.store(self.consumer().wrapping_add(1), Ordering::Relaxed);
            let i = self.zip_i.load(Ordering::Relaxed) + 1;
            if i < n {
                self.zip_i.store(i, Ordering::Relaxed);
                return;
            }
            // SAFETY: forwarded.
            unsafe { self.close_session(n) };
            // SAFETY: the doorbell record is live (caller contract).
            unsafe { self.publish(self.consumer()) };
            return;
        }
        // SAFETY: forwarded; no session is open.
        unsafe { self.advance_plain(self.consumer()) };
    }

    /// The consumer index `ci` into doorbell record word 0 (24 bits).
    ///
    /// # Safety
    /// The doorbell record is live.
    #[inline(always)]
    unsafe fn publish(&self, ci: u32) {
        // SAFETY: caller contract.
        unsafe { AtomicU32::from_ptr(self.dbrec) }.store((ci & 0xff_ffff).to_be(), Ordering::Release);
    }

    #[cold]
    unsafe fn close_session(&self, n: u32) {
        let t = self.zip_t.load(Ordering::Relaxed);
        for k in 0..n {
            // SAFETY: a slot of the consumed session, inside the ring.
            unsafe { AtomicU8::from_ptr(self.proper(t.wrapping_add(k)).add(63)) }
                .store(0xf0, Ordering::Relaxed);
        }
        self.zip_n.store(0, Ordering::Relaxed);
        // SAFETY: as in `open_session`.
        unsafe { *self.fast0.get() = self.proper0 };
        self.fast_mask.store(self.mask, Ordering::Relaxed);
        // The slot resets reach memory before the device sees the new index.
        udma_to_device_barrier();
    }

    /// Ask for a completion event (spec §5.6): the arm word
    /// `sn << 28 | solicited << 24 | ci` into doorbell record word 1, then
    /// one 8-byte store of (arm word, CQN) at `cq_uar + 0x20`. The arm
    /// sequence number advances with every arm (rdma-core advances it with
    /// every event consumed; one arm per event gives the same sequence).
    ///
    /// # Safety
    /// The descriptor describes live memory; `cq_uar` is the CQ's UAR page
    /// as `mmio` expects it.
    #[inline]
    pub unsafe fn arm<M: Mmio>(&self, mmio: &M, cq_uar: *mut u8, solicited_only: bool) {
        let sn = self.arm_sn.fetch_add(1, Ordering::Relaxed) & 3;
        let word = sn << 28 | u32::from(solicited_only) << 24 | (self.consumer() & 0xff_ffff);
        // SAFETY: the doorbell record is live (caller contract); word 1 is the arm word.
        unsafe { AtomicU32::from_ptr(self.dbrec.add(1)) }.store(word.to_be(), Ordering::Release);
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&word.to_be_bytes());
        v[4..].copy_from_slice(&self.cqn.to_be_bytes());
        // SAFETY: forwarded (the write does barrier B before the store).
        unsafe { mmio.write_db(cq_uar, CQ_DOORBELL, v) };
    }

    /// Data scattered into the CQE at `cqe` (spec §5.7): format 1 → bytes
    /// 0.. of the CQE, format 2 → the first half of its 128-byte slot;
    /// `byte_cnt` long (clamped to 32 or 64). `None` for other formats.
    ///
    /// # Safety
    /// `cqe` is a CQE proper this descriptor's `next` returned and not yet
    /// handed back.
    #[inline(always)]
    pub unsafe fn scattered(&self, cqe: *const u8) -> Option<&[u8]> {
        // SAFETY: caller contract: 64 readable bytes (128 with format 2).
        unsafe {
            let op_own = *cqe.add(63);
            let len = u32::from_be_bytes(*(cqe.add(0x2c) as *const [u8; 4])) as usize;
            match (op_own >> 2) & 3 {
                1 => Some(core::slice::from_raw_parts(cqe, len.min(32))),
                2 if self.cqe_size == 128 => Some(core::slice::from_raw_parts(cqe.sub(64), len.min(64))),
                _ => None,
            }
        }
    }

    /// The next CQE decoded and handed back, or `None` when there is
    /// nothing yet. An error CQE is a result (its `error` is set).
    ///
    /// # Safety
    /// The descriptor describes live memory; one thread polls.
    #[inline(always)]
    pub unsafe fn poll(&self) -> Option<Cqe> {
        // SAFETY: forwarded.
        unsafe {
            let p = self.next()?;
            let c = Cqe::read(p);
            self.advance();
            Some(c)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `peek_plain`'s one test against the spec's rules written out
    /// (§5.5: software owns a CQE whose opcode is not INVALID and whose
    /// owner bit is the lap's; §5.2: format in op_own[3:2]), for
    /// every `op_own` on both laps.
    #[test]
    fn peek_plain_sorts_every_op_own_as_the_spec_rules_do() {
        let mut ring = Ring::new(4);
        let d = ring.desc(4);
        for ci in [0u32, 4, 1, 7] {
            let lap_owner = (ci >> 2) & 1;
            for op_own in 0..=255u8 {
                let cqe = d.buf.wrapping_add((ci as usize & 3) * 64);
                // SAFETY: byte 63 of a slot of the live ring.
                unsafe { *cqe.add(63) = op_own };
                let owned = op_own >> 4 != 0xf && u32::from(op_own & 1) == lap_owner;
                let want = match (owned, (op_own >> 2) & 3) {
                    (false, _) => Peek::Empty,
                    (true, 0) if op_own >> 4 == cqe_opcode::REQ => Peek::Req(cqe, op_own),
                    (true, 0) => Peek::Plain(cqe, op_own),
                    (true, _) => Peek::Other,
                };
                // SAFETY: the ring is live; no session is open.
                assert_eq!(unsafe { d.peek_plain(ci) }, want, "ci {ci}, op_own {op_own:#04x}");
            }
        }
    }

    fn hex(s: &str) -> [u8; 64] {
        let v: Vec<u8> = s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        v.try_into().unwrap()
    }
    const Z: &str = "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";

    /// One CQE slot, aligned as a CQ buffer must be.
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Slot([u8; 64]);

    struct Ring {
        buf: Vec<Slot>,
        dbrec: [u32; 2],
    }

    impl Ring {
        fn new(cnt: usize) -> Ring {
            let mut line = [0u8; 64];
            line[63] = 0xf0;
            Ring { buf: vec![Slot(line); cnt], dbrec: [0; 2] }
        }
        fn desc(&mut self, cnt: u32) -> CqDesc {
            CqDesc::new(self.buf.as_mut_ptr().cast(), cnt, 64, self.dbrec.as_mut_ptr(), 0x42).unwrap()
        }
        fn put(&mut self, slot: usize, b: &[u8; 64]) {
            self.buf[slot].0 = *b;
        }
    }

    /// Golden C5 (spec §9) on the consumer side: the title at CQ index 0x20
    /// and its array expand into three completions; #1 is byte for byte the
    /// spec's expanded CQE; the session's slots are given back as 0xF0 and
    /// the index is published once, after the last one.
    #[test]
    fn golden_c5_expands_and_gives_the_session_back() {
        let mut r = Ring::new(256);
        r.put(
            0x20,
            &hex(&format!(
                "{Z} {Z} 00 00 00 02  00 00 00 00  00 00 00 00  00 00 00 03 \
                 00 00 00 00  00 00 00 00  00 00 04 56  00 10 00 2c"
            )),
        );
        r.put(
            0x21,
            &hex(&format!(
                "11 11 11 11  00 00 00 40  22 22 22 22  00 00 00 80 \
                 33 33 33 33  00 00 01 00  00 00 00 00  00 00 00 00 {Z} {Z}"
            )),
        );
        let d = r.desc(256);
        d.ci.store(0x20, Ordering::Relaxed);
        let mut got = Vec::new();
        for _ in 0..3 {
            // SAFETY: the ring and dbrec live in `r` for the whole test.
            let p = unsafe { d.next() }.expect("a completion");
            let mut b = [0u8; 64];
            // SAFETY: 64 readable bytes.
            unsafe { core::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), 64) };
            got.push(b);
            assert_eq!(r.dbrec[0], 0, "no index published inside the session");
            // SAFETY: as above.
            unsafe { d.advance() };
        }
        let want1 = hex(&format!(
            "00 00 00 00  00 00 00 00  00 00 00 00  22 22 22 22 {Z} \
             00 00 00 02  00 00 00 00  00 00 00 00  00 00 00 80 \
             00 00 00 00  00 00 00 00  00 00 04 56  00 11 00 20"
        ));
        assert_eq!(got[1], want1);
        let c0 = Cqe::parse(&got[0]);
        let c2 = Cqe::parse(&got[2]);
        assert_eq!((c0.byte_cnt, c0.wqe_counter, c0.op_own), (64, 0x10, 0x20));
        assert_eq!((c2.byte_cnt, c2.wqe_counter), (256, 0x12));
        assert_eq!(&got[2][0x0c..0x10], &[0x33; 4]);
        assert_eq!(u32::from_be(r.dbrec[0]), 0x23);
        for s in 0x20..0x23 {
            assert_eq!(r.buf[s].0[63], 0xf0, "slot {s:#x} given back");
        }
        // SAFETY: as above.
        assert!(unsafe { d.next() }.is_none());
    }

    #[test]
    fn requester_session_takes_counter_and_opcode_from_minis_across_arrays_and_the_ring_end() {
        // A 16-entry CQ, title at index 12 (second pass: owner 1), 10 completions: array #0
        // at 13, array #1 at 12 + 8 = 20 → slot 4 of the next pass.
        let mut r = Ring::new(16);
        let mut title = [0u8; 64];
        title[0x2c..0x30].copy_from_slice(&10u32.to_be_bytes());
        title[0x38..0x3c].copy_from_slice(&0x0800_0123u32.to_be_bytes());
        title[63] = 0x0d; // REQ | format 3 | owner 1
        r.put(12, &title);
        let mini = |k: u16| {
            let mut m = [0u8; 8];
            m[0..2].copy_from_slice(&(k * 2).to_be_bytes());
            m[2] = if k.is_multiple_of(2) { 0x08 } else { 0x10 };
            m[4..8].copy_from_slice(&(u32::from(k) + 1).to_be_bytes());
            m
        };
        let mut a0 = [0u8; 64];
        let mut a1 = [0u8; 64];
        for k in 0..8u16 {
            a0[k as usize * 8..k as usize * 8 + 8].copy_from_slice(&mini(k));
        }
        for k in 8..10u16 {
            a1[(k as usize - 8) * 8..(k as usize - 8) * 8 + 8].copy_from_slice(&mini(k));
        }
        r.put(13, &a0);
        r.put(4, &a1);
        let d = r.desc(16);
        d.ci.store(16 + 12, Ordering::Relaxed);
        for k in 0..10u16 {
            // SAFETY: the ring and dbrec live in `r`.
            let c = unsafe { Cqe::read(d.next().expect("completion")) };
            assert_eq!((c.wqe_counter, c.byte_cnt, c.qpn), (k * 2, u32::from(k) + 1, 0x123));
            assert_eq!(c.wqe_opcode, if k % 2 == 0 { 0x08 } else { 0x10 });
            let owner = (16 + 12 + u32::from(k)) & 16 != 0;
            assert_eq!((c.owner, c.format), (owner, crate::ring::CqeFormat::Normal));
            // SAFETY: as above.
            unsafe { d.advance() };
        }
        assert_eq!(u32::from_be(r.dbrec[0]), 16 + 22);
    }

    #[test]
    fn arm_writes_dbrec_word_1_and_the_d1_doorbell() {
        struct Rec(core::cell::RefCell<Vec<(u32, [u8; 8])>>);
        impl Mmio for Rec {
            unsafe fn write_db(&self, _reg: *mut u8, offset: u32, ctrl: [u8; 8]) {
                self.0.borrow_mut().push((offset, ctrl));
            }
            unsafe fn write_bf(&self, _: *mut u8, _: u32, _: &[u8], _: &[u8]) {}
        }
        let mut r = Ring::new(256);
        let d = r.desc(256);
        d.ci.store(0x106, Ordering::Relaxed);
        d.arm_sn.store(1, Ordering::Relaxed);
        let m = Rec(Default::default());
        // SAFETY: live dbrec; the recorder stores nothing.
        unsafe { d.arm(&m, core::ptr::null_mut(), false) };
        // Golden D1: dbrec word 1 and the 8-byte store.
        assert_eq!(r.dbrec[1].to_ne_bytes(), [0x10, 0x00, 0x01, 0x06]);
        assert_eq!(m.0.borrow()[0], (0x20, [0x10, 0x00, 0x01, 0x06, 0x00, 0x00, 0x00, 0x42]));
        d.arm_sn.store(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { d.arm(&m, core::ptr::null_mut(), true) };
        assert_eq!(m.0.borrow()[1].1, [0x11, 0x00, 0x01, 0x06, 0x00, 0x00, 0x00, 0x42], "solicited-only");
    }
}
