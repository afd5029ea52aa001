//! Completion queue ring owned by the model (spec §5.5–§5.8): owner bit per pass, `op_own`
//! written last, overrun against the consumer index in the CQ doorbell record (the CQ
//! then goes to error), CQE compression into sessions of a title and mini-CQE arrays,
//! and the arm state that raises completion events.
//!
//! Compression: CQEs produced while the CQ's host is held are gathered into a pending
//! session and written when the host is let go (the model's "burst"), or earlier when
//! the next CQE cannot join. A session needs at least two CQEs; a single one is written
//! as a plain CQE.

use crate::mem::DevMem;
use crate::wire::cqe::OP_OWN_OFFSET;

/// Initial `op_own` of every slot: opcode INVALID, owner 0 (spec §5.5).
pub(crate) const OP_OWN_INIT: u8 = 0xf0;
/// CQE opcode that ends the old ring of a resized CQ (spec §5.2, `MLX5_CQE_RESIZE_CQ`).
const RESIZE_CQ: u8 = 5;

/// Most completions in one compressed session (the model's `cqe_comp max_num`).
pub const MAX_SESSION: usize = 64;

/// Responder mini-CQE layout of a compressing CQ (spec §5.8; `mini_cqe_res_format`).
/// Requester CQEs always use the requester layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiniCqeFormat {
    /// Hardware format 0: BE32 RSS hash (CQE 0x0c), BE32 byte count.
    Hash,
    /// Hardware format 1: BE16 checksum (CQE 0x14), 2 bytes reserved, BE32 byte count.
    Csum,
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub mem: DevMem,
    pub dbrec: DevMem,
    pub cqe_cnt: u32,
    pub cqe_size: u32,
    log_cnt: u32,
    /// Free-running producer index (slots written, holes of sessions included).
    pi: u32,
    /// The consumer index last read from the doorbell record. It only moves forward,
    /// so room counted from it is never more than there is; it is read again only
    /// when that room runs out. (In threaded mode the driver's core writes the record
    /// with every poll, so that a read per CQE was a trip between the cores.)
    ci_seen: u32,
    /// The CQ overran and is in error: nothing more is written (spec §5.5).
    pub error: bool,
    /// Compression on, with this responder layout.
    comp: Option<MiniCqeFormat>,
    /// CQEs gathered for the next session (compression only).
    pending: Vec<[u8; 64]>,
    /// Completion channel events go to.
    pub channel: Option<u32>,
    /// Armed: `Some(solicited_only)`.
    arm: Option<bool>,
    /// Free-running index just past the newest solicited or error CQE.
    last_solicited: Option<u32>,
    /// An event is due (taken by the engine, which owns the channels).
    event: bool,
}

/// The CQE did not fit: `pi - ci >= cqe_cnt`, or the CQ is in error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overrun;

const BYTE_CNT: usize = 0x2c;
const WQE_COUNTER: usize = 0x3c;
const SOP_DROP_QPN: usize = 0x38;
const TIMESTAMP: usize = 0x30;
const HASH: usize = 0x0c;
const CSUM: usize = 0x14;
/// Format bits of `op_own` (bits 3..2): 3 = compressed-session title.
const FORMAT_TITLE: u8 = 3 << 2;

fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

fn is_error(op_own: u8) -> bool {
    matches!(op_own >> 4, 13 | 14)
}

fn is_requester(op_own: u8) -> bool {
    op_own >> 4 == 0
}

impl Cq {
    pub(crate) fn new(
        cqe_cnt: u32,
        cqe_size: u32,
        comp: Option<MiniCqeFormat>,
        channel: Option<u32>,
    ) -> Option<Cq> {
        let len = (cqe_cnt as usize).checked_mul(cqe_size as usize)?;
        let mem = DevMem::new(len, 4096)?;
        let dbrec = DevMem::new(64, 64)?;
        for i in 0..cqe_cnt as usize {
            mem.write(i * cqe_size as usize + cqe_size as usize - 1, &[OP_OWN_INIT]);
        }
        Some(Cq::with_mem(mem, dbrec, cqe_cnt, cqe_size, comp, channel))
    }

    /// A CQ in the program's memory (`user`: the buffer and doorbell record libmlx5
    /// allocates and passes in CREATE_CQ's udata). The driver has initialised the
    /// entries' ownership itself, as mlx5_ib leaves them to it; nothing is written here.
    ///
    /// # Safety
    /// As [`DevMem::borrowed`] for `user.buf` (`cqe_cnt * cqe_size` bytes) and
    /// `user.dbrec` (8 bytes).
    pub(crate) unsafe fn new_in(
        cqe_cnt: u32,
        cqe_size: u32,
        comp: Option<MiniCqeFormat>,
        channel: Option<u32>,
        user: crate::UserRings,
    ) -> Option<Cq> {
        let len = (cqe_cnt as usize).checked_mul(cqe_size as usize)?;
        // SAFETY: caller contract.
        let (mem, dbrec) =
            unsafe { (DevMem::borrowed(user.buf, len, 64)?, DevMem::borrowed(user.dbrec, 8, 4)?) };
        Some(Cq::with_mem(mem, dbrec, cqe_cnt, cqe_size, comp, channel))
    }

    fn with_mem(
        mem: DevMem,
        dbrec: DevMem,
        cqe_cnt: u32,
        cqe_size: u32,
        comp: Option<MiniCqeFormat>,
        channel: Option<u32>,
    ) -> Cq {
        Cq {
            mem,
            dbrec,
            cqe_cnt,
            cqe_size,
            log_cnt: cqe_cnt.trailing_zeros(),
            pi: 0,
            ci_seen: 0,
            error: false,
            comp,
            pending: Vec::with_capacity(if comp.is_some() { MAX_SESSION } else { 0 }),
            channel,
            arm: None,
            last_solicited: None,
            event: false,
        }
    }

    /// Consumer index published by the driver in dbrec word 0 (24 bits).
    pub(crate) fn consumer_index(&self) -> u32 {
        self.dbrec.load_be32(0) & 0xff_ffff
    }

    /// Whether the driver has taken every CQE written: its published consumer index
    /// has reached the producer and no session is gathering.
    pub(crate) fn all_taken(&self) -> bool {
        self.pending.is_empty() && self.pi & 0xff_ffff == self.consumer_index()
    }

    /// Whether CQEs wait in a pending session.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Delivers `cqe` (its owner bit is replaced): written now, or gathered into the
    /// pending session when compression is on and it can be compressed. Fails, and puts
    /// the CQ in error, when it does not fit (spec §5.5).
    #[cfg(test)]
    pub(crate) fn push(&mut self, cqe: &[u8; 64]) -> Result<(), Overrun> {
        self.push_with(cqe, &[])
    }

    /// [`Cq::push`] with the first half of a 128-byte slot (scatter-to-CQE format 2).
    pub(crate) fn push_with(&mut self, cqe: &[u8; 64], first_half: &[u8]) -> Result<(), Overrun> {
        if self.error {
            return Err(Overrun);
        }
        let end = self.pi.wrapping_add(self.pending.len() as u32);
        let cnt = self.cqe_cnt;
        let full = |ci: u32| end.wrapping_sub(ci) & 0xff_ffff >= cnt;
        if full(self.ci_seen) {
            self.ci_seen = self.consumer_index();
        }
        if full(self.ci_seen) {
            self.error = true;
            self.pending.clear();
            self.arm = None;
            return Err(Overrun);
        }
        match self.comp {
            Some(fmt) if compressible(cqe) => {
                if let Some(title) = self.pending.first() {
                    if self.pending.len() == MAX_SESSION || !joins(fmt, title, cqe, self.pending.len()) {
                        self.flush();
                    }
                }
                self.pending.push(*cqe);
            }
            _ => {
                if !self.pending.is_empty() {
                    self.flush();
                }
                self.write_slot(cqe, first_half);
            }
        }
        Ok(())
    }

    /// Writes the pending session (or single CQE).
    pub(crate) fn flush(&mut self) {
        match self.pending.len() {
            0 => {}
            1 => {
                let c = self.pending[0];
                self.write_one(&c);
            }
            _ => self.write_session(),
        }
        self.pending.clear();
    }

    fn slot(&self, idx: u32) -> usize {
        let s = (idx & (self.cqe_cnt - 1)) as usize * self.cqe_size as usize;
        s + self.cqe_size as usize - 64
    }

    fn owner(&self, idx: u32) -> u8 {
        ((idx >> self.log_cnt) & 1) as u8
    }

    /// One CQE at the producer index: bytes 0..63 of the CQE proper (for 128-byte CQEs
    /// also the zeroed first half of the slot) except `op_own`, then `op_own` with a
    /// Release store.
    fn write_one(&mut self, cqe: &[u8; 64]) {
        self.write_slot(cqe, &[]);
    }

    /// One CQE; with 128-byte CQEs `first_half` (zero-padded) fills bytes 0..63 of the
    /// slot (scatter-to-CQE, format 2).
    pub(crate) fn write_slot(&mut self, cqe: &[u8; 64], first_half: &[u8]) {
        let idx = self.pi;
        let proper = self.slot(idx);
        if self.cqe_size == 128 {
            let mut h = [0u8; 64];
            h[..first_half.len()].copy_from_slice(first_half);
            self.mem.write(proper - 64, &h);
        }
        self.mem.write_cqe_body(proper, cqe);
        let op_own = (cqe[OP_OWN_OFFSET] & !1) | self.owner(idx);
        self.mem.store_u8_release(proper + OP_OWN_OFFSET, op_own);
        self.pi = self.pi.wrapping_add(1);
        self.visible(op_own, 1);
    }

    /// A compressed session of the N >= 2 pending CQEs (spec §5.8): mini-CQE array #0 at
    /// slot T+1, array #k at T+8k, written first; then the title at T with `op_own` last.
    /// The other slots of the session (holes) are not written.
    fn write_session(&mut self) {
        let n = self.pending.len();
        let t = self.pi;
        let fmt = self.comp.unwrap_or(MiniCqeFormat::Hash);
        let first = self.pending[0];
        let requester = is_requester(first[OP_OWN_OFFSET]);
        for (k, chunk) in self.pending.chunks(8).enumerate() {
            let mut arr = [0u8; 64];
            for (j, c) in chunk.iter().enumerate() {
                let m = &mut arr[j * 8..j * 8 + 8];
                if requester {
                    m[0..2].copy_from_slice(&c[WQE_COUNTER..WQE_COUNTER + 2]);
                    m[2] = c[SOP_DROP_QPN];
                } else {
                    match fmt {
                        MiniCqeFormat::Hash => m[0..4].copy_from_slice(&c[HASH..HASH + 4]),
                        MiniCqeFormat::Csum => m[0..2].copy_from_slice(&c[CSUM..CSUM + 2]),
                    }
                }
                m[4..8].copy_from_slice(&c[BYTE_CNT..BYTE_CNT + 4]);
            }
            let at = t.wrapping_add(if k == 0 { 1 } else { 8 * k as u32 });
            self.mem.write(self.slot(at), &arr);
        }
        let mut title = first;
        title[BYTE_CNT..BYTE_CNT + 4].copy_from_slice(&(n as u32).to_be_bytes());
        if !requester {
            match fmt {
                MiniCqeFormat::Hash => title[HASH..HASH + 4].fill(0),
                MiniCqeFormat::Csum => title[CSUM..CSUM + 2].fill(0),
            }
        }
        let proper = self.slot(t);
        self.mem.write(proper, &title[..OP_OWN_OFFSET]);
        let op_own = (title[OP_OWN_OFFSET] & !0x0d) | FORMAT_TITLE | self.owner(t);
        self.mem.store_u8_release(proper + OP_OWN_OFFSET, op_own);
        self.pi = self.pi.wrapping_add(n as u32);
        self.visible(op_own, n as u32);
    }

    /// `n` CQEs ending at the producer index became visible: note solicited/error ones,
    /// raise the event an arm asked for, and ask for the next slot's line.
    fn visible(&mut self, op_own: u8, _n: u32) {
        // The line the producer index now names, ahead of the write to it: CQEs (and
        // sessions) are written in ring order, whichever QP they belong to, so this is
        // the one line of a message the model can know a message ahead. With thousands of
        // QPs taking turns the ring's lines are a lap old and out of the cache, and the
        // write waited on memory: 4096 QPs 351-391 -> 297-325 ns per message, 1024 QPs
        // 261-271 -> 234-237 (deterministic, 2 cores of an Intel Xeon VM, interleaved);
        // threaded mode and the pingpong unchanged.
        crate::mem::prefetch_line(self.mem.ptr().wrapping_add(self.slot(self.pi)));
        let solicited = op_own & 2 != 0 || is_error(op_own);
        if solicited {
            self.last_solicited = Some(self.pi);
        }
        if let Some(sol_only) = self.arm {
            if !sol_only || solicited {
                self.arm = None;
                self.event = true;
            }
        }
    }

    /// The arm doorbell (spec §5.6): `word` = `sn << 28 | cmd << 24 | ci`. Fires at once
    /// when a qualifying CQE already sits at or beyond `ci`, else on the next one; one
    /// event per arm [PRM semantics, unverified]. Ignored while the CQ is in error.
    pub(crate) fn arm(&mut self, word: u32) {
        if self.error {
            return;
        }
        let sol_only = (word >> 24) & 1 != 0;
        let ci = word & 0xff_ffff;
        let ahead = self.pi.wrapping_sub(ci) & 0xff_ffff;
        let qualifying = if sol_only {
            // The newest solicited CQE lies in [ci, pi).
            self.last_solicited.is_some_and(|end| {
                end.wrapping_sub(ci) & 0xff_ffff != 0 && (end.wrapping_sub(ci) & 0xff_ffff) <= ahead
            })
        } else {
            ahead != 0 && ahead <= self.cqe_cnt
        };
        if qualifying {
            self.arm = None;
            self.event = true;
        } else {
            self.arm = Some(sol_only);
        }
    }

    /// RESIZE_CQ over a new ring `mem` of `cnt` entries of the same size: the pending
    /// session is written, a RESIZE CQE (opcode 5, spec §5.2) takes the producer's slot in
    /// the old ring, and CQEs go on in the new ring from the slot after it. The driver
    /// copies each unpolled CQE `c` of the old ring to slot `c + 1` of the new one and
    /// steps over the RESIZE CQE (libmlx5's `mlx5_cq_resize_copy_cqes`), so producer and
    /// consumer keep counting as before. Refused when the old ring has no room for the
    /// RESIZE CQE or the new one is smaller than what is unpolled, and for a CQ in error.
    pub(crate) fn resize(&mut self, mem: DevMem, cnt: u32) -> Result<(), Overrun> {
        if self.error || !cnt.is_power_of_two() || mem.len() < cnt as usize * self.cqe_size as usize {
            return Err(Overrun);
        }
        self.flush();
        self.ci_seen = self.consumer_index();
        let unpolled = self.pi.wrapping_sub(self.ci_seen) & 0xff_ffff;
        if unpolled >= self.cqe_cnt || unpolled > cnt {
            return Err(Overrun);
        }
        let idx = self.pi;
        let proper = self.slot(idx);
        if self.cqe_size == 128 {
            self.mem.write(proper - 64, &[0u8; 64]);
        }
        self.mem.write(proper, &[0u8; OP_OWN_OFFSET]);
        self.mem.store_u8_release(proper + OP_OWN_OFFSET, RESIZE_CQ << 4 | self.owner(idx));
        self.mem = mem;
        self.cqe_cnt = cnt;
        self.log_cnt = cnt.trailing_zeros();
        self.pi = self.pi.wrapping_add(1);
        self.last_solicited = self.last_solicited.map(|e| e.wrapping_add(1));
        Ok(())
    }

    /// Whether an event is due; clears it.
    pub(crate) fn take_event(&mut self) -> bool {
        std::mem::take(&mut self.event)
    }
}

/// Whether a CQE may be part of a session: plain format, not an error (spec §5.8: an error
/// CQE is never compressed), a requester or receive opcode.
fn compressible(c: &[u8; 64]) -> bool {
    let op_own = c[OP_OWN_OFFSET];
    op_own & 0x0c == 0 && matches!(op_own >> 4, 0..=4)
}

/// Whether `c` can be completion `i` of the session titled `t`: same QP, opcode and flags,
/// and every byte equal except those a mini CQE carries (byte count; requester: WQE counter
/// and WQE opcode; responder: hash or checksum) and the timestamp; a responder's WQE
/// counter must be the title's plus `i` (the expansion rule).
fn joins(fmt: MiniCqeFormat, t: &[u8; 64], c: &[u8; 64], i: usize) -> bool {
    if (t[OP_OWN_OFFSET] ^ c[OP_OWN_OFFSET]) & !1 != 0 {
        return false;
    }
    let requester = is_requester(t[OP_OWN_OFFSET]);
    if !requester && be16(c, WQE_COUNTER) != be16(t, WQE_COUNTER).wrapping_add(i as u16) {
        return false;
    }
    (0..OP_OWN_OFFSET).all(|b| {
        let carried = (BYTE_CNT..BYTE_CNT + 4).contains(&b)
            || (TIMESTAMP..TIMESTAMP + 8).contains(&b)
            || (requester && ((WQE_COUNTER..WQE_COUNTER + 2).contains(&b) || b == SOP_DROP_QPN))
            || (!requester && (WQE_COUNTER..WQE_COUNTER + 2).contains(&b))
            || (!requester && fmt == MiniCqeFormat::Hash && (HASH..HASH + 4).contains(&b))
            || (!requester && fmt == MiniCqeFormat::Csum && (CSUM..CSUM + 2).contains(&b));
        carried || t[b] == c[b]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(cq: &Cq, slot: u32) -> [u8; 64] {
        let mut b = [0u8; 64];
        cq.mem.read(cq.slot(slot), &mut b);
        b
    }

    /// RESIZE_CQ: the RESIZE CQE (opcode 5, owner of its pass) at the producer's slot of
    /// the old ring, later CQEs in the new ring from the slot after it with the new
    /// ring's owner bit; refused when the new ring cannot hold what is unpolled.
    #[test]
    fn resize_ends_the_old_ring_with_a_resize_cqe_and_goes_on_in_the_new_one() {
        let ring = DevMem::new(4 * 64, 4096).unwrap();
        // SAFETY: `ring` outlives the CQ's view of it, and is read below after the CQ
        // moved to its new ring.
        let view = unsafe { DevMem::borrowed(ring.ptr(), 4 * 64, 64) }.unwrap();
        let mut cq = Cq::with_mem(view, DevMem::new(64, 64).unwrap(), 4, 64, None, None);
        let mut b = [0u8; 64];
        b[0] = 0xab;
        for _ in 0..3 {
            cq.push(&b).unwrap();
        }
        cq.dbrec.store_be32(0, 1); // one CQE polled, two unpolled
        assert_eq!(cq.resize(DevMem::new(64, 64).unwrap(), 1), Err(Overrun), "1 entry < 2 unpolled");
        cq.resize(DevMem::new(8 * 64, 64).unwrap(), 8).unwrap();
        let mut slot = [0u8; 64];
        ring.read(3 * 64, &mut slot);
        assert_eq!(slot[63], 5 << 4, "RESIZE CQE at producer slot 3, first pass (owner 0)");
        assert!(slot[..63].iter().all(|&x| x == 0));
        cq.push(&b).unwrap(); // counter 4: slot 4 of the new 8-entry ring, first pass
        assert_eq!(read(&cq, 4)[0], 0xab);
        assert_eq!(read(&cq, 4)[63], 0, "owner of counter 4 in an 8-entry ring");
        for _ in 0..4 {
            cq.push(&b).unwrap();
        }
        assert_eq!(read(&cq, 8)[63], 1, "counter 8: the new ring's second pass");
        // Room is counted in the new ring: the driver at 4 after taking the copied 2.
        cq.dbrec.store_be32(0, 4);
        for _ in 0..3 {
            cq.push(&b).unwrap();
        }
        assert_eq!(cq.push(&b), Err(Overrun), "pi 12, ci 4: 8 entries full");
    }

    #[test]
    fn owner_flips_per_pass_and_overrun_puts_the_cq_in_error() {
        let mut cq = Cq::new(2, 64, None, None).unwrap();
        let mut b = [0u8; 64];
        let mut slot = [0u8; 1];
        cq.mem.read(63, &mut slot);
        assert_eq!(slot[0], OP_OWN_INIT);
        b[63] = 0x01; // owner bit from the caller is ignored
        cq.push(&b).unwrap();
        cq.push(&b).unwrap();
        cq.dbrec.store_be32(0, 1);
        cq.push(&b).unwrap();
        cq.mem.read(63, &mut slot);
        assert_eq!(slot[0], 0x01, "second pass: owner 1");
        cq.mem.read(127, &mut slot);
        assert_eq!(slot[0], 0x00, "first pass: owner 0");
        assert_eq!(cq.push(&b), Err(Overrun), "ci 1, pi 3: full");
        assert!(cq.error);
        cq.dbrec.store_be32(0, 3);
        assert_eq!(cq.push(&b), Err(Overrun), "a CQ in error stays in error");
    }

    /// The consumer index is read again only when the room counted from the last one
    /// read runs out: what the driver took since still makes room, and a CQ whose
    /// driver took nothing still overruns at `cqe_cnt`. The index wraps at 24 bits.
    #[test]
    fn room_is_counted_from_the_consumer_index_read_when_it_runs_out() {
        let mut cq = Cq::new(8, 64, None, None).unwrap();
        let b = [0u8; 64];
        for _ in 0..8 {
            cq.push(&b).unwrap();
        }
        // Taken while the CQ filled: seen at the next push, which has room again.
        cq.dbrec.store_be32(0, 4);
        for k in 0..4 {
            assert_eq!(cq.push(&b), Ok(()), "push {k} after 4 taken");
        }
        assert_eq!(cq.push(&b), Err(Overrun), "12 written, 4 taken: full");
        // Near the 24-bit wrap of the published index.
        let mut cq = Cq::new(8, 64, None, None).unwrap();
        cq.pi = 0xff_fffc;
        cq.ci_seen = 0xff_fffc;
        cq.dbrec.store_be32(0, 0xff_fffc);
        for _ in 0..8 {
            cq.push(&b).unwrap();
        }
        cq.dbrec.store_be32(0, 2); // 0x1000002 & 0xffffff: 6 taken
        for _ in 0..6 {
            cq.push(&b).unwrap();
        }
        assert_eq!(cq.push(&b), Err(Overrun));
    }

    #[test]
    fn cqe128_proper_is_second_half() {
        let mut cq = Cq::new(4, 128, None, None).unwrap();
        let mut b = [0u8; 64];
        b[0x3c] = 0xab;
        b[63] = 0x20;
        cq.push(&b).unwrap();
        let mut s = [0u8; 128];
        cq.mem.read(0, &mut s);
        assert_eq!(s[64 + 0x3c], 0xab);
        assert_eq!(s[127], 0x20);
        assert_eq!(s[63], 0);
    }

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
    }

    /// Golden C5 (spec §9): three RESP_SEND CQEs of QP 0x456, user index 2, counters
    /// 0x10..0x12, hashes 0x11111111.. and byte counts 64/128/256, written from slot 0x20
    /// of a 256-entry CQ as one HASH session.
    #[test]
    fn golden_c5_session_from_three_cqes() {
        let mut cq = Cq::new(256, 64, Some(MiniCqeFormat::Hash), None).unwrap();
        let filler = [0u8; 64];
        for i in 0..0x20 {
            cq.dbrec.store_be32(0, i);
            cq.write_one(&filler);
        }
        cq.dbrec.store_be32(0, 0x20);
        for (i, (hash, len)) in
            [(0x1111_1111u32, 64u32), (0x2222_2222, 128), (0x3333_3333, 256)].iter().enumerate()
        {
            let mut c = [0u8; 64];
            c[HASH..HASH + 4].copy_from_slice(&hash.to_be_bytes());
            c[0x20..0x24].copy_from_slice(&2u32.to_be_bytes());
            c[BYTE_CNT..BYTE_CNT + 4].copy_from_slice(&len.to_be_bytes());
            c[SOP_DROP_QPN..SOP_DROP_QPN + 4].copy_from_slice(&0x456u32.to_be_bytes());
            c[WQE_COUNTER..WQE_COUNTER + 2].copy_from_slice(&(0x10 + i as u16).to_be_bytes());
            c[63] = 0x20;
            cq.push(&c).unwrap();
        }
        assert_eq!(read(&cq, 0x20)[63], OP_OWN_INIT, "nothing visible before the burst ends");
        cq.flush();
        let z = "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
        let title = hex(&format!(
            "{z} {z} 00 00 00 02  00 00 00 00  00 00 00 00  00 00 00 03 \
             00 00 00 00  00 00 00 00  00 00 04 56  00 10 00 2c"
        ));
        assert_eq!(read(&cq, 0x20)[..], title[..]);
        let arr = hex(&format!(
            "11 11 11 11  00 00 00 40  22 22 22 22  00 00 00 80 \
             33 33 33 33  00 00 01 00  00 00 00 00  00 00 00 00 {z} {z}"
        ));
        assert_eq!(read(&cq, 0x21)[..], arr[..]);
        assert_eq!(read(&cq, 0x22)[63], OP_OWN_INIT, "holes are not written");
        assert_eq!(cq.pi, 0x23);
    }

    fn req(counter: u16, wqe_op: u8, len: u32) -> [u8; 64] {
        let mut c = [0u8; 64];
        c[BYTE_CNT..BYTE_CNT + 4].copy_from_slice(&len.to_be_bytes());
        c[SOP_DROP_QPN..SOP_DROP_QPN + 4].copy_from_slice(&((u32::from(wqe_op) << 24) | 0x123).to_be_bytes());
        c[WQE_COUNTER..WQE_COUNTER + 2].copy_from_slice(&counter.to_be_bytes());
        c
    }

    #[test]
    fn requester_session_carries_counter_and_opcode_and_spans_arrays() {
        let mut cq = Cq::new(64, 64, Some(MiniCqeFormat::Csum), None).unwrap();
        for i in 0..10u16 {
            cq.push(&req(i * 3, if i % 2 == 0 { 0x08 } else { 0x0a }, 100 + u32::from(i))).unwrap();
        }
        cq.flush();
        let t = read(&cq, 0);
        assert_eq!((t[63], be16(&t, WQE_COUNTER)), (0x0c, 0), "REQ | format 3 | owner 0, first counter");
        assert_eq!(t[BYTE_CNT + 3], 10);
        let a0 = read(&cq, 1);
        assert_eq!(&a0[8..16], &[0, 3, 0x0a, 0, 0, 0, 0, 101]);
        let a1 = read(&cq, 8);
        assert_eq!(&a1[0..8], &[0, 24, 0x08, 0, 0, 0, 0, 108], "mini 8 opens array #1 at T+8");
        assert_eq!(&a1[8..16], &[0, 27, 0x0a, 0, 0, 0, 0, 109]);
        assert_eq!(cq.pi, 10);
    }

    #[test]
    fn sessions_break_on_qp_opcode_error_and_counter_gaps() {
        let mut cq = Cq::new(64, 64, Some(MiniCqeFormat::Hash), None).unwrap();
        let mut resp = |qpn: u32, counter: u16, op: u8| {
            let mut c = [0u8; 64];
            c[SOP_DROP_QPN..SOP_DROP_QPN + 4].copy_from_slice(&qpn.to_be_bytes());
            c[WQE_COUNTER..WQE_COUNTER + 2].copy_from_slice(&counter.to_be_bytes());
            c[63] = op << 4;
            cq.push(&c).unwrap();
        };
        resp(1, 0, 2);
        resp(1, 1, 2); // session [0, 1]
        resp(2, 2, 2); // other QP: single
        resp(2, 4, 2); // counter gap: single
        resp(2, 5, 3); // other opcode: single
        resp(2, 6, 14); // error: never compressed (flushes nothing pending)
        cq.flush();
        let ops: Vec<u8> = (0..6).map(|s| read(&cq, s)[63]).collect();
        // Slot 1 holds mini-CQE array #0 (its byte 63 is mini 7's last byte, here 0).
        assert_eq!(ops, vec![0x2c, 0x00, 0x20, 0x20, 0x30, 0xe0]);
    }

    #[test]
    fn arm_fires_on_next_cqe_or_at_once_and_honours_solicited_only() {
        let mut cq = Cq::new(8, 64, None, Some(1)).unwrap();
        let plain = [0u8; 64];
        let mut se = [0u8; 64];
        se[63] = 0x22; // RESP_SEND | SE
        cq.arm(0);
        assert!(!cq.take_event());
        cq.push(&plain).unwrap();
        assert!(cq.take_event(), "next CQE fires an armed CQ");
        cq.push(&plain).unwrap();
        assert!(!cq.take_event(), "one event per arm");
        cq.arm(1);
        assert!(cq.take_event(), "a CQE already at or beyond ci fires at once");
        cq.arm(2 | 1 << 24);
        cq.push(&plain).unwrap();
        assert!(!cq.take_event(), "solicited-only ignores plain CQEs");
        cq.push(&se).unwrap();
        assert!(cq.take_event());
        cq.arm(1 << 24 | 4);
        assert!(!cq.take_event(), "the solicited CQE at index 3 is behind ci 4");
        cq.arm(1 << 24 | 3);
        assert!(cq.take_event());
    }
}
