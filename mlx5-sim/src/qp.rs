//! QP context: ring memory, doorbell record, hardware counters and the state machine of
//! spec §7 (transition table and required attributes).

use crate::mem::DevMem;
use crate::wire::{CtrlRepr, CtrlSeg, DS_SIZE, MAX_WQE_DS, WQEBB_SIZE};
use crate::{access, QpInitAttr, QpModify, QpState, QpType, RcPath, SimError};

/// Byte offset of the SQ counter in the doorbell record (spec §1.5).
const SND_DBR: usize = 4;
/// Byte offset of the RQ counter in the doorbell record.
const RCV_DBR: usize = 0;
/// Largest RQ stride the model accepts (64 scatter entries).
pub(crate) const MAX_RQ_STRIDE: u32 = 1024;

/// What the model remembers of an executed (or flushed) WQE, to check later doorbells
/// against: the last one ([`Qp::last`]), and in threaded and watch modes one per SQ slot
/// ([`Qp::shadow`]; the ring slot may have been reused by then).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Shadow {
    pub valid: bool,
    pub counter: u16,
    pub ctrl8: [u8; 8],
    pub wqebbs: u16,
}

/// Connection attributes set by modify_qp.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct QpAttrs {
    pub port: u8,
    pub access_flags: u32,
    pub path: Option<RcPath>,
    pub path_mtu: u32,
    pub min_rnr_timer: u8,
    pub rnr_retry: u8,
    pub retry_cnt: u8,
    pub timeout: u8,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub qkey: u32,
}

#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pdn: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub user_index: u32,
    pub state: QpState,
    pub buf: DevMem,
    pub sq_off: usize,
    pub sq_wqe_cnt: u32,
    pub rq_wqe_cnt: u32,
    pub rq_stride: u32,
    pub dbrec: DevMem,
    pub uar_index: u32,
    /// Hardware SQ consumer counter (WQEBB units, 16 bits).
    pub sq_ci: u16,
    /// Hardware RQ consumer counter (WQE units, 16 bits).
    pub rq_ci: u16,
    pub attrs: QpAttrs,
    /// `Some(n)`: the SQ is blocked at `sq_ci` by an RNR NAK after `n` failed retries.
    pub rnr: Option<u8>,
    /// The SQ waits at `sq_ci` for the answer to a message on the UDP wire
    /// ([`crate::udp_wire`]): the endpoint's thread runs it on when the answer comes.
    pub waiting: bool,
    /// The QP's transport state on the UDP wire, when it has a peer in another process.
    pub wire: Option<Box<crate::udp_wire::QpWire>>,
    /// The last WQE executed or flushed. A doorbell handled when it is rung
    /// (deterministic mode) can match an executed WQE only if that WQE ends at the
    /// producer, and then it is this one: executed WQEs end at or before the hardware
    /// counter, which is at most the producer.
    pub last: Shadow,
    /// Threaded and watch modes, where a doorbell may reach the model after the WQE it
    /// names ran and its slot was reused: one entry per SQ slot
    /// ([`Qp::keep_shadow_per_slot`]). Empty in deterministic mode, where it would
    /// cost every message a store to a line of its own, a line that thousands of QPs
    /// taking turns would find long out of cache.
    pub shadow: Vec<Shadow>,
    /// Receive from this SRQ instead of the own RQ.
    pub srqn: Option<u32>,
    /// DCT: access key.
    pub dc_key: u64,
    /// DCT: number assigned at INIT→RTR (released on RESET).
    pub dct_num: Option<u32>,
    /// The QP has a register of its own (freed with the QP).
    pub dedicated_uar: bool,
    /// Scatter-to-CQE enabled.
    pub scatter_to_cqe: bool,
    /// RC: the host the path led to (low 16 bits) and the address epoch it was found in
    /// (high 16 bits; see [`crate::hosts::FabricState::addr_epoch`]); 0: none. Forgotten
    /// when the path changes. Hosts and epochs from 2^16 on are not kept (the search runs
    /// every time), so that the cache fits the struct's padding.
    pub peer: u32,
}

/// Where in its first page the buffer of QP `qpn` (`len` bytes) starts: a multiple of
/// 64 that fits the slack of its last page, so that it takes no more pages than
/// page-aligned, chosen from the QPN so that QPs numbered in a row start their rings at
/// different lines. (The spec fixes the layout inside the buffer, RQ then SQ, §1.8,
/// not where the buffer lies; the driver is given its queues' addresses.)
///
/// Why: QPs taking turns are all at about the same ring slot. Page-aligned, every QP's
/// slot lay at the same offset in its page, and so in the same 32 of the 2048 sets of
/// a 2 MiB 16-way second-level cache (set bits 6-16, of which the page offset gives
/// 6-11): with more than 512 QPs the lines that the model asks for ahead of the
/// driver's next WQEs pushed each other out before the driver wrote them.
pub(crate) fn buf_color(qpn: u32, len: usize) -> usize {
    let slack = len.next_multiple_of(crate::mem::PAGE) - len;
    let colors = slack / WQEBB_SIZE + 1;
    // Two lines apart: a WQE of two WQEBBs (a 64-byte inline payload) fills the gap.
    (qpn as usize * 2 % 64) % colors * WQEBB_SIZE
}

fn pow2_in(v: u32, lo: u32, hi: u32) -> bool {
    v.is_power_of_two() && v >= lo && v <= hi
}

impl Qp {
    /// Validates `attr` and allocates the QP buffer: RQ at offset 0, SQ after it (the RQ
    /// part is rounded up to 64 bytes so that the SQ is WQEBB-aligned), starting at the
    /// line of its page that [`buf_color`] gives.
    #[cfg(test)]
    pub(crate) fn new(qpn: u32, uar_index: u32, attr: &QpInitAttr) -> Result<Qp, SimError> {
        // SAFETY: no user memory.
        unsafe { Qp::new_in(qpn, uar_index, attr, None) }
    }

    /// [`Qp::new`], with the ring and doorbell record in the program's memory when `user`
    /// names them (the rings libmlx5 allocates and passes in CREATE_QP's udata): the same
    /// layout, RQ at offset 0 and the SQ after it.
    ///
    /// # Safety
    /// As [`DevMem::borrowed`] for `user.buf` (the ring's length) and `user.dbrec` (8 bytes).
    pub(crate) unsafe fn new_in(
        qpn: u32,
        uar_index: u32,
        attr: &QpInitAttr,
        user: Option<crate::UserRings>,
    ) -> Result<Qp, SimError> {
        let bad = |what| Err(SimError::InvalidArgument { what });
        let t = attr.qp_type;
        match t {
            QpType::Rc | QpType::Ud | QpType::Dci => {
                if !pow2_in(attr.sq_wqe_cnt, 1, 32768) {
                    return bad("sq_wqe_cnt must be a power of two in 1..=32768");
                }
            }
            QpType::Dct => {
                if attr.sq_wqe_cnt != 0 || attr.rq_wqe_cnt != 0 {
                    return bad("a DCT has no SQ and no RQ (sq_wqe_cnt and rq_wqe_cnt must be 0)");
                }
                if attr.srqn.is_none() {
                    return bad("a DCT needs an SRQ");
                }
            }
        }
        if t == QpType::Dci && (attr.rq_wqe_cnt != 0 || attr.srqn.is_some()) {
            return bad("a DCI has no receive side (rq_wqe_cnt 0, no SRQ)");
        }
        if attr.srqn.is_some() && attr.rq_wqe_cnt != 0 {
            return bad("a QP with an SRQ has no own RQ (rq_wqe_cnt must be 0)");
        }
        if attr.rq_wqe_cnt != 0 && !pow2_in(attr.rq_wqe_cnt, 1, 32768) {
            return bad("rq_wqe_cnt must be 0 or a power of two <= 32768");
        }
        if attr.rq_wqe_cnt != 0 && !pow2_in(attr.rq_stride, 16, MAX_RQ_STRIDE) {
            return bad("rq_stride must be a power of two in 16..=1024");
        }
        if attr.user_index > 0xff_ffff {
            return bad("user_index must fit in 24 bits");
        }
        let rq_bytes = if attr.rq_wqe_cnt == 0 {
            0
        } else {
            (attr.rq_wqe_cnt as usize * attr.rq_stride as usize).max(WQEBB_SIZE)
        };
        let sq_bytes = attr.sq_wqe_cnt as usize * WQEBB_SIZE;
        let len = rq_bytes + sq_bytes;
        let (buf, dbrec) = match user {
            None => (
                DevMem::new_at(len, buf_color(qpn, len)).ok_or(SimError::OutOfMemory)?,
                DevMem::new(64, 64).ok_or(SimError::OutOfMemory)?,
            ),
            // SAFETY: caller contract; a DCT has no ring (len 0: refused).
            Some(u) => unsafe {
                (
                    DevMem::borrowed(u.buf, len, 64).ok_or(SimError::InvalidArgument {
                        what: "QP buffer: null, empty or not 64-byte aligned",
                    })?,
                    DevMem::borrowed(u.dbrec, 8, 4).ok_or(SimError::InvalidArgument {
                        what: "doorbell record: null or not 4-byte aligned",
                    })?,
                )
            },
        };
        // DCI: no receive CQ of its own; DCT: no send CQ (see QpInitAttr).
        let (send_cqn, recv_cqn) = match t {
            QpType::Dci => (attr.send_cqn, attr.send_cqn),
            QpType::Dct => (attr.recv_cqn, attr.recv_cqn),
            _ => (attr.send_cqn, attr.recv_cqn),
        };
        Ok(Qp {
            qpn,
            qp_type: attr.qp_type,
            pdn: attr.pdn,
            send_cqn,
            recv_cqn,
            user_index: attr.user_index,
            state: QpState::Reset,
            buf,
            sq_off: rq_bytes,
            sq_wqe_cnt: attr.sq_wqe_cnt,
            rq_wqe_cnt: attr.rq_wqe_cnt,
            rq_stride: attr.rq_stride,
            dbrec,
            uar_index,
            sq_ci: 0,
            rq_ci: 0,
            attrs: QpAttrs::default(),
            rnr: None,
            waiting: false,
            wire: None,
            last: Shadow::default(),
            shadow: Vec::new(),
            srqn: attr.srqn,
            dc_key: attr.dc_key,
            dct_num: None,
            dedicated_uar: attr.dedicated_uar,
            scatter_to_cqe: attr.scatter_to_cqe,
            peer: 0,
        })
    }

    /// Keeps a [`Shadow`] per SQ slot, not only the last: for modes where doorbells
    /// may be handled late (threaded and watch modes).
    pub(crate) fn keep_shadow_per_slot(&mut self) {
        self.shadow = vec![Shadow::default(); self.sq_wqe_cnt as usize];
    }

    /// Remembers the WQE of `counter` (`wqebbs` WQEBBs, ctrl bytes `ctrl8`) as executed
    /// or flushed.
    pub(crate) fn record_shadow(&mut self, counter: u16, ctrl8: [u8; 8], wqebbs: u16) {
        let s = Shadow { valid: true, counter, ctrl8, wqebbs };
        self.last = s;
        let slot = self.sq_slot(usize::from(counter));
        if let Some(e) = self.shadow.get_mut(slot) {
            *e = s;
        }
    }

    /// What is remembered of the executed WQE of `counter`: from its slot's entry where
    /// one is kept per slot (`per_slot`), else from [`Qp::last`] (valid only if that is
    /// the WQE of `counter`; the caller compares).
    pub(crate) fn shadow_of(&self, counter: u16, per_slot: bool) -> Shadow {
        match self.shadow.get(self.sq_slot(usize::from(counter))) {
            Some(s) if per_slot => *s,
            _ => self.last,
        }
    }

    /// The SQ slot (WQEBB index in the ring) of counter `counter` (0 without an SQ).
    #[inline(always)]
    fn sq_slot(&self, counter: usize) -> usize {
        counter & (self.sq_wqe_cnt as usize).wrapping_sub(1)
    }

    /// SQ producer counter from doorbell record word 1 (Acquire).
    pub(crate) fn sq_producer(&self) -> u16 {
        if self.sq_wqe_cnt == 0 {
            return self.sq_ci; // no SQ (DCT): never anything to execute or flush
        }
        self.dbrec.load_be32(SND_DBR) as u16
    }

    /// Whether a scan has something to do here: send WQEs past the hardware counter
    /// (not blocked by RNR), or receive WQEs to flush in ERR.
    pub(crate) fn has_work(&self) -> bool {
        match self.state {
            QpState::Err => {
                self.sq_producer() != self.sq_ci || (self.rq_wqe_cnt != 0 && self.rq_producer() != self.rq_ci)
            }
            QpState::Rts | QpState::Sqe => {
                self.rnr.is_none() && !self.waiting && self.sq_producer() != self.sq_ci
            }
            _ => false,
        }
    }

    /// RQ producer counter from doorbell record word 0 (Acquire).
    pub(crate) fn rq_producer(&self) -> u16 {
        self.dbrec.load_be32(RCV_DBR) as u16
    }

    fn sq_ring_len(&self) -> usize {
        self.sq_wqe_cnt as usize * WQEBB_SIZE
    }

    /// Copies `out.len()` bytes of the SQ byte ring starting at the WQEBB of `counter`,
    /// wrapping at the ring end (spec §1.3).
    pub(crate) fn read_sq(&self, counter: u16, skip: usize, out: &mut [u8]) {
        let ring = self.sq_ring_len();
        if ring == 0 {
            out.fill(0); // no SQ (DCT)
            return;
        }
        let start = self.sq_slot(usize::from(counter)) * WQEBB_SIZE;
        // The ring is a power of two WQEBBs.
        let mut pos = (start + skip) & (ring - 1);
        let mut done = 0;
        while done < out.len() {
            let n = (ring - pos).min(out.len() - done);
            self.buf.read(self.sq_off + pos, &mut out[done..done + n]);
            done += n;
            pos = 0;
        }
    }

    /// The first 8 bytes of the WQE at `counter` (what a doorbell carries): one load, a
    /// WQEBB never wrapping.
    #[inline]
    pub(crate) fn read_ctrl8(&self, counter: u16) -> [u8; 8] {
        if self.sq_ring_len() == 0 {
            return [0; 8]; // no SQ (DCT)
        }
        self.buf.read8(self.sq_off + self.sq_slot(usize::from(counter)) * WQEBB_SIZE)
    }

    /// Reads the ctrl segment at `counter`.
    pub(crate) fn read_ctrl(&self, counter: u16) -> CtrlRepr {
        let mut c = [0u8; DS_SIZE];
        self.read_sq(counter, 0, &mut c);
        CtrlRepr::parse(&CtrlSeg::new_unchecked(&c[..]))
    }

    /// Copies the WQE at `counter` (its `ds` units, at most 63) into `out`; returns the ctrl
    /// and the number of bytes copied. Returns `None` when the WQE is larger than the ring.
    /// The send queue moves past the WQE of `nbb` WQEBBs at `counter` that ran (its first
    /// 8 bytes `ctrl8` recorded as its shadow), and no RNR wait is pending.
    #[inline(always)]
    pub(crate) fn finish_wqe(&mut self, counter: u16, ctrl8: [u8; 8], nbb: u16) {
        self.record_shadow(counter, ctrl8, nbb);
        self.sq_ci = counter.wrapping_add(nbb);
        self.rnr = None;
    }

    pub(crate) fn fetch_wqe(
        &self,
        counter: u16,
        out: &mut [u8; MAX_WQE_DS * DS_SIZE],
    ) -> (CtrlRepr, Option<usize>) {
        let ring = self.sq_ring_len();
        if ring == 0 {
            // No SQ (DCT): an all-zero ctrl and nothing copied, as reading it gives.
            return (self.read_ctrl(counter), Some(0));
        }
        // The first WQEBB never wraps (the ring is whole WQEBBs): one copy for the ctrl
        // segment and whatever else the WQEBB holds.
        let start = self.sq_slot(usize::from(counter)) * WQEBB_SIZE;
        self.buf.read(self.sq_off + start, &mut out[..WQEBB_SIZE]);
        // A fixed-size view: the decoder's field reads need no bounds checks.
        let first: &[u8; DS_SIZE] = out.first_chunk().expect("a WQEBB holds a ctrl segment");
        let ctrl = CtrlRepr::parse(&CtrlSeg::new_unchecked(first));
        let len = usize::from(ctrl.ds) * DS_SIZE;
        if len > ring {
            return (ctrl, None);
        }
        if len > WQEBB_SIZE {
            // The rest in one copy unless it wraps at the ring's end.
            let next = (start + WQEBB_SIZE) & (ring - 1);
            if next + (len - WQEBB_SIZE) <= ring {
                self.buf.read(self.sq_off + next, &mut out[WQEBB_SIZE..len]);
            } else {
                self.read_sq(counter, WQEBB_SIZE, &mut out[WQEBB_SIZE..len]);
            }
        }
        (ctrl, Some(len))
    }

    /// Readies the caches for the send WQEs the driver writes next, once the ring is
    /// drained: the WQEBBs of the next two WQEs at the hardware counter, taken to be of
    /// `nbb` WQEBBs each like the one just run (at most 8 lines), and the shadow slot
    /// the next is recorded in. A hint only: it reads and writes nothing.
    ///
    /// Why: with many QPs taking turns, a slot was last touched a whole lap of the
    /// ring ago (64 WQEs x 4096 QPs of 128 bytes is 32 MiB), out of every cache, and
    /// the driver's store and then this model's read of it each waited on memory. Two
    /// WQEs ahead rather than one, so that each line is asked for twice, a round of the
    /// QPs apart: measured at 4096 QPs, the read of a WQE waits 56-84 cycles so (one
    /// QP: 40), 82-180 with one WQE ahead, 265 with none.
    #[inline]
    pub(crate) fn prefetch_next(&self, nbb: u16) {
        if self.sq_wqe_cnt == 0 {
            return;
        }
        let base = self.buf.ptr();
        for off in self.next_wqe_lines(nbb) {
            crate::mem::prefetch_line(base.wrapping_add(off));
        }
        self.prefetch_shadow(self.sq_ci);
    }

    /// Asks for what a doorbell naming the WQE of `counter` will read (threaded mode,
    /// while the NIC thread handles the message before it): the doorbell record and
    /// the WQE's first two WQEBBs, shared (the driver's core writes them), and the
    /// per-slot shadow entry, for writing.
    #[inline]
    pub(crate) fn prefetch_doorbell(&self, counter: u16) {
        if self.sq_wqe_cnt == 0 {
            return;
        }
        crate::mem::prefetch_read(self.dbrec.ptr());
        let base = self.buf.ptr();
        for i in 0..2 {
            let slot = self.sq_slot(usize::from(counter) + i);
            crate::mem::prefetch_read(base.wrapping_add(self.sq_off + slot * WQEBB_SIZE));
        }
        self.prefetch_shadow(counter);
    }

    /// Readies the line of the per-slot [`Shadow`] that the WQE of `counter` will be
    /// recorded in (none in deterministic mode).
    #[inline]
    pub(crate) fn prefetch_shadow(&self, counter: u16) {
        if !self.shadow.is_empty() {
            let slot = self.sq_slot(usize::from(counter));
            crate::mem::prefetch_line(self.shadow.as_ptr().wrapping_add(slot));
        }
    }

    /// The buffer offsets of the WQEBBs [`Qp::prefetch_next`] asks for: `2 * nbb` (at
    /// most 8) from the hardware counter's, wrapping at the ring's end (none without
    /// an SQ); each inside the buffer.
    #[inline]
    fn next_wqe_lines(&self, nbb: u16) -> impl Iterator<Item = usize> + '_ {
        let slot = usize::from(self.sq_ci);
        let n = if self.sq_wqe_cnt == 0 { 0 } else { usize::from(nbb.saturating_mul(2).min(8)) };
        (0..n).map(move |i| self.sq_off + self.sq_slot(slot + i) * WQEBB_SIZE)
    }

    /// Copies the receive WQE of `counter` (one stride) into `out`; returns its length.
    pub(crate) fn read_rq(&self, counter: u16, out: &mut [u8; MAX_RQ_STRIDE as usize]) -> usize {
        if self.rq_wqe_cnt == 0 {
            return 0;
        }
        let stride = self.rq_stride as usize;
        let off = (usize::from(counter) & (self.rq_wqe_cnt as usize - 1)) * stride;
        self.buf.read(off, &mut out[..stride]);
        stride
    }

    /// Back to RESET: forget WQEs, zero doorbell record and hardware counters.
    pub(crate) fn reset(&mut self) {
        self.state = QpState::Reset;
        self.dbrec.zero();
        self.sq_ci = 0;
        self.rq_ci = 0;
        self.rnr = None;
        self.waiting = false;
        self.wire = None;
        self.attrs = QpAttrs::default();
        self.peer = 0;
        self.dct_num = None;
        self.last = Shadow::default();
        self.shadow.iter_mut().for_each(|s| *s = Shadow::default());
    }

    /// Validates a modify_qp request against the transition table and required attributes
    /// of spec §7 (per QP type) and applies its attributes (not the state change's side
    /// effects). Attributes a type does not use are accepted and stored.
    pub(crate) fn apply_modify(&mut self, m: &QpModify, roce: bool) -> Result<QpState, SimError> {
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        let to = m.state.ok_or(SimError::InvalidArgument { what: "QpModify.state is required" })?;
        let from = self.state;
        let dct = self.qp_type == QpType::Dct;
        let ok = match from {
            Reset => matches!(to, Reset | Init | QpState::Err),
            Init => matches!(to, Init | Rtr | Reset | QpState::Err),
            // A DCT is final at RTR (spec §7): no RTS.
            Rtr if dct => matches!(to, Reset | QpState::Err),
            Rtr | Rts | Sqd | Sqe => matches!(to, Rts | Reset | QpState::Err),
            QpState::Err => matches!(to, Reset | QpState::Err),
        };
        if !ok {
            return Err(SimError::InvalidTransition { from, to });
        }
        let need = |present: bool, what: &'static str| {
            if present {
                Ok(())
            } else {
                Err(SimError::InvalidArgument { what })
            }
        };
        match (self.qp_type, from, to) {
            (QpType::Rc, Reset, Init) => {
                need(m.port.is_some(), "RESET->INIT needs port")?;
                need(m.access_flags.is_some(), "RESET->INIT needs access_flags")?;
            }
            (QpType::Rc, Init, Rtr) => {
                need(m.path.is_some(), "INIT->RTR needs path")?;
                need(m.path_mtu.is_some(), "INIT->RTR needs path_mtu")?;
                need(m.rq_psn.is_some(), "INIT->RTR needs rq_psn")?;
                need(m.max_dest_rd_atomic.is_some(), "INIT->RTR needs max_dest_rd_atomic")?;
                need(m.min_rnr_timer.is_some(), "INIT->RTR needs min_rnr_timer")?;
            }
            (QpType::Rc | QpType::Dci, Rtr, Rts) => {
                need(m.timeout.is_some(), "RTR->RTS needs timeout")?;
                need(m.retry_cnt.is_some(), "RTR->RTS needs retry_cnt")?;
                need(m.rnr_retry.is_some(), "RTR->RTS needs rnr_retry")?;
                need(m.sq_psn.is_some(), "RTR->RTS needs sq_psn")?;
                need(m.max_rd_atomic.is_some(), "RTR->RTS needs max_rd_atomic")?;
            }
            (QpType::Ud, Reset, Init) => {
                need(m.port.is_some(), "UD RESET->INIT needs port")?;
                need(m.qkey.is_some(), "UD RESET->INIT needs qkey")?;
            }
            (QpType::Ud, Rtr, Rts) => need(m.sq_psn.is_some(), "UD RTR->RTS needs sq_psn")?,
            (QpType::Dci, Reset, Init) => need(m.port.is_some(), "DCI RESET->INIT needs port")?,
            (QpType::Dci, Init, Rtr) => need(m.path_mtu.is_some(), "DCI INIT->RTR needs path_mtu")?,
            (QpType::Dct, Reset, Init) => {
                need(m.port.is_some(), "DCT RESET->INIT needs port")?;
                need(m.access_flags.is_some(), "DCT RESET->INIT needs access_flags")?;
            }
            (QpType::Dct, Init, Rtr) => {
                need(m.path_mtu.is_some(), "DCT INIT->RTR needs path_mtu")?;
                need(m.min_rnr_timer.is_some(), "DCT INIT->RTR needs min_rnr_timer")?;
            }
            // RTS->RTS and SQE->RTS may not change what RTR->RTS set (IBA 11.2.4.2; the
            // kernel's ib_modify_qp_is_ok refuses these mask bits there).
            (_, Rts | Sqe, Rts)
                if m.timeout.is_some()
                    || m.retry_cnt.is_some()
                    || m.rnr_retry.is_some()
                    || m.sq_psn.is_some()
                    || m.max_rd_atomic.is_some() =>
            {
                return Err(SimError::InvalidArgument {
                    what: "RTS->RTS / SQE->RTS cannot set timeout, retry_cnt, rnr_retry, sq_psn or max_rd_atomic",
                });
            }
            _ => {}
        }
        let bad = |what| Err(SimError::InvalidArgument { what });
        if matches!(m.port, Some(p) if p != 1) {
            return bad("port must be 1");
        }
        let remote = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
        if matches!(m.access_flags, Some(a) if a & !(remote | access::LOCAL_WRITE) != 0) {
            return bad("access_flags has unknown bits");
        }
        if matches!(m.path_mtu, Some(v) if !pow2_in(v, 256, 4096)) {
            return bad("path_mtu must be 256, 512, 1024, 2048 or 4096");
        }
        if matches!(m.rnr_retry, Some(v) if v > 7) || matches!(m.retry_cnt, Some(v) if v > 7) {
            return bad("rnr_retry and retry_cnt must be <= 7");
        }
        if matches!(m.min_rnr_timer, Some(v) if v > 31) || matches!(m.timeout, Some(v) if v > 31) {
            return bad("min_rnr_timer and timeout must be <= 31");
        }
        if matches!(m.sq_psn, Some(v) if v > 0xff_ffff) || matches!(m.rq_psn, Some(v) if v > 0xff_ffff) {
            return bad("PSNs must fit in 24 bits");
        }
        if let Some(p) = m.path {
            if p.dest_qpn > 0xff_ffff {
                return bad("dest_qpn must fit in 24 bits");
            }
            if roce && p.dgid.is_none() {
                return bad("RoCE paths need dgid");
            }
            if !roce && p.dlid == 0 {
                return bad("InfiniBand paths need a non-zero dlid");
            }
        }
        if to == Reset {
            return Ok(to);
        }
        let a = &mut self.attrs;
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = m.$f { a.$f = v; } )* };
        }
        set!(
            port,
            access_flags,
            path_mtu,
            min_rnr_timer,
            rnr_retry,
            retry_cnt,
            timeout,
            sq_psn,
            rq_psn,
            max_rd_atomic,
            max_dest_rd_atomic,
            qkey
        );
        if m.path.is_some() {
            a.path = m.path;
            self.peer = 0;
        }
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QpInitAttr;

    fn qp(sq_wqe_cnt: u32) -> Qp {
        let attr = QpInitAttr { sq_wqe_cnt, rq_wqe_cnt: 4, rq_stride: 32, ..QpInitAttr::default() };
        Qp::new(5, 0, &attr).unwrap()
    }

    #[test]
    fn qps_numbered_in_a_row_start_their_buffers_at_different_lines_in_no_more_pages() {
        // 64 WRs of two WQEBBs and one 64-byte receive: the benchmark's QPs.
        let attr = QpInitAttr { sq_wqe_cnt: 128, rq_wqe_cnt: 1, rq_stride: 64, ..QpInitAttr::default() };
        let qps: Vec<Qp> = (0x1000..0x1020).map(|n| Qp::new(n, 0, &attr).unwrap()).collect();
        let mut lines: Vec<usize> = qps.iter().map(|q| q.buf.ptr() as usize % 4096).collect();
        for (q, &at) in qps.iter().zip(&lines) {
            assert_eq!(at % 64, 0, "WQEBB-aligned");
            assert!(at + q.buf.len() <= (64 + 128 * 64usize).next_multiple_of(4096), "no page more");
            // Spec §1.8: RQ at offset 0 of the buffer, the SQ right after it.
            assert_eq!((q.sq_off, q.buf.len()), (64, 64 + 128 * 64));
        }
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines.len(), 32, "32 QPs, 32 lines");
        // A buffer that fills its pages has no slack to move in.
        assert!((0..64).all(|n| buf_color(n, 4096) == 0 && buf_color(n, 3 * 4096) == 0));
        // One with a little slack moves within it.
        assert!((0..64).all(|n| buf_color(n, 4096 - 128) <= 128));
        assert_eq!((0..64).map(|n| buf_color(n, 4096 - 128)).max(), Some(128));
    }

    #[test]
    fn the_lines_readied_are_the_next_two_wqes_in_the_send_ring() {
        let mut q = qp(8);
        // The SQ follows the 4 x 32-byte RQ (spec §1.3's layout, RQ first).
        assert_eq!(q.sq_off, 128);
        let at = |slots: &[usize]| slots.iter().map(|s| 128 + s * 64).collect::<Vec<_>>();
        q.sq_ci = 2;
        assert_eq!(q.next_wqe_lines(2).collect::<Vec<_>>(), at(&[2, 3, 4, 5]));
        assert_eq!(q.next_wqe_lines(1).collect::<Vec<_>>(), at(&[2, 3]));
        // The 16-bit counter wraps; slot 6 of 8, and the lines wrap at the ring's end.
        q.sq_ci = 0xfffe;
        assert_eq!(q.next_wqe_lines(2).collect::<Vec<_>>(), at(&[6, 7, 0, 1]));
        // At most 8 lines, and never past the ring, however large the WQE.
        assert_eq!(q.next_wqe_lines(63).collect::<Vec<_>>(), at(&[6, 7, 0, 1, 2, 3, 4, 5]));
        assert_eq!(q.next_wqe_lines(u16::MAX).count(), 8);
        // A ring smaller than two WQEs: every line it has, some twice, none outside.
        let mut small = qp(2);
        small.sq_ci = 1;
        assert_eq!(small.next_wqe_lines(2).collect::<Vec<_>>(), at(&[1, 0, 1, 0]));
        assert!(small.next_wqe_lines(2).all(|o| o + 64 <= small.buf.len()));
        small.prefetch_next(u16::MAX); // a hint: nothing read, written or faulted
    }

    #[test]
    fn a_qp_without_a_send_queue_readies_nothing() {
        let attr = QpInitAttr { qp_type: QpType::Dct, srqn: Some(1), ..QpInitAttr::default() };
        let q = Qp::new(6, 0, &attr).unwrap();
        assert_eq!(q.next_wqe_lines(2).count(), 0);
        q.prefetch_next(2);
    }
}
