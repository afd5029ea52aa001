//! Doorbells and ticks, what starts the requester (spec §1.6, §2.1, §5.6): doorbell and
//! BlueFlame matching against the send queue, UAR scanning in watch and threaded modes, the
//! RNR timer's ticks.

use crate::hosts::FabricState;

use crate::completer::*;
use crate::host::*;
use crate::qp::Qp;
use crate::requester::*;
use crate::wire::{CtrlSeg, WQEBB_SIZE};
use crate::{ExecMode, QpState};

/// Checks an 8-byte doorbell against the WQE it names (spec §1.6, §8 step 1).
fn doorbell_matches(qp: &Qp, value: &[u8; 8], strict: bool) -> bool {
    let idx = u16::from_be_bytes([value[1], value[2]]);
    let p = qp.sq_producer();
    let ci = qp.sq_ci;
    let (ctrl8, nbb) = if idx.wrapping_sub(ci) < p.wrapping_sub(ci) {
        let c8 = qp.read_ctrl8(idx);
        // ds is the low 6 bits of byte 7 (qpn_ds).
        (c8, crate::wire::wqebbs_of(CtrlSeg::new_unchecked(&c8[..]).ds()))
    } else {
        // Strict (a doorbell handled when rung): only a WQE that ends at the producer
        // matches, and an executed one that does is the last executed (see `Qp::last`).
        let s = qp.shadow_of(idx, !strict);
        if !strict && s.valid && s.counter.wrapping_sub(idx).wrapping_sub(1) < 0x7fff {
            // Threaded mode: the slot was reused by a newer WQE before this (queued)
            // doorbell was handled; it can no longer be verified.
            return true;
        }
        if !s.valid || s.counter != idx {
            return false;
        }
        (s.ctrl8, s.wqebbs)
    };
    let end = idx.wrapping_add(nbb);
    let end_ok = if strict { end == p } else { p.wrapping_sub(end) < 0x8000 };
    ctrl8 == *value && end_ok
}

/// Checks BlueFlame data against the ring copy of the WQE it carries.
fn bf_matches(qp: &Qp, data: &[u8]) -> bool {
    if data.is_empty() || !data.len().is_multiple_of(WQEBB_SIZE) || data.len() > BF_SIZE as usize {
        return false;
    }
    let ctrl = match CtrlSeg::new_checked(data) {
        Ok(c) => crate::wire::CtrlRepr::parse(&c),
        Err(_) => return false,
    };
    if ctrl.ds == 0 || usize::from(ctrl.wqebbs()) * WQEBB_SIZE != data.len() {
        return false;
    }
    let idx = ctrl.wqe_index;
    let p = qp.sq_producer();
    if idx.wrapping_sub(qp.sq_ci) >= p.wrapping_sub(qp.sq_ci) {
        // Already executed (threaded race): only the ctrl bytes remain to compare, and
        // doorbell_matches does that.
        return true;
    }
    let mut ring = [0u8; BF_SIZE as usize];
    qp.read_sq(idx, 0, &mut ring[..data.len()]);
    ring[..data.len()] == *data
}

/// Handles one UAR write (plain doorbell when `bf` is `None`) delivered as a bus write.
/// `epoch`: threaded mode's count of doorbells coalesced on this NIC when the write
/// was queued. A coalesced doorbell flipped its register's half without reaching the
/// NIC, so a write queued after a coalescing (a new epoch for its register) starts the
/// register's alternation afresh instead of being checked against it.
pub(crate) fn doorbell(
    st: &mut FabricState,
    h: usize,
    uar_index: u32,
    offset: u32,
    value: [u8; 8],
    bf: Option<&[u8]>,
    epoch: Option<u64>,
) {
    let via = match (st.cfg.mode, epoch) {
        (ExecMode::Deterministic, _) => Via::Bus,
        (_, Some(e)) => Via::Queue(e),
        (_, None) => Via::Memory,
    };
    doorbell_checked(st, h, uar_index, offset, value, bf, via)
}

/// Asks for the lines a doorbell will need (see [`Qp::prefetch_doorbell`]) before it is
/// handled: for the next message of a NIC thread's queue.
pub(crate) fn prefetch_doorbell(st: &FabricState, h: usize, value: &[u8; 8]) {
    if let Some(qp) = st.hosts[h].qps.get(&doorbell_qpn(value)) {
        qp.prefetch_doorbell(u16::from_be_bytes([value[1], value[2]]));
    }
}

/// Whether the driver has taken every CQE of the send CQ of the QP that a doorbell value
/// names (false for an unknown QP): threaded mode's cue that the application waits for
/// the doorbell's work (see `Link::run_here`).
pub(crate) fn send_cq_taken(st: &FabricState, h: usize, value: &[u8; 8]) -> bool {
    let host = &st.hosts[h];
    host.qps
        .get(&doorbell_qpn(value))
        .and_then(|q| host.cqs.get(&q.send_cqn))
        .is_some_and(|cq| cq.all_taken())
}

/// The QPN a doorbell value names: ctrl bytes 4..7 are `qpn << 8 | ds` (spec §2.1).
pub(crate) fn doorbell_qpn(value: &[u8; 8]) -> u32 {
    u32::from_be_bytes([value[4], value[5], value[6], value[7]]) >> 8
}

/// How a UAR write reached the NIC.
#[derive(Clone, Copy)]
enum Via {
    /// A synchronous bus write (deterministic mode): the named WQE must end
    /// exactly at the producer.
    Bus,
    /// Threaded mode's queue, with the NIC's count of coalesced doorbells when
    /// it was queued (see [`doorbell`]); the named WQE may be older.
    Queue(u64),
    /// Read from the register's memory (watch mode); the WQE may be older.
    Memory,
}

/// Handles one UAR write that arrived `via` the bus, the queue or memory.
fn doorbell_checked(
    st: &mut FabricState,
    h: usize,
    uar_index: u32,
    offset: u32,
    value: [u8; 8],
    bf: Option<&[u8]>,
    via: Via,
) {
    let strict = matches!(via, Via::Bus);
    let host = &mut st.hosts[h];
    host.stats.doorbells += 1;
    if bf.is_some() {
        host.stats.bf_writes += 1;
    }
    // A register has two halves, at 0 and BF_SIZE (spec §1.6): a store
    // anywhere else is a program's bug the device survives. Counted and
    // ignored before anything (the half alternation included) takes it in.
    if offset & !BF_SIZE != 0 {
        host.stats.doorbell_bad_offset += 1;
        return;
    }
    let Some(uar) = host.uars.get_mut(&uar_index) else {
        host.stats.doorbell_mismatch += 1;
        return;
    };
    let resync = match via {
        Via::Queue(e) => std::mem::replace(&mut uar.epoch, e) != e,
        _ => false,
    };
    if resync {
        uar.expected_offset = offset ^ BF_SIZE;
    } else if offset != uar.expected_offset {
        host.stats.bf_offset_mismatch += 1;
        uar.expected_offset = offset ^ BF_SIZE;
    } else {
        uar.expected_offset ^= BF_SIZE;
    }
    let qpn = doorbell_qpn(&value);
    let Some(qp) = host.qps.get(&qpn).filter(|q| q.sq_wqe_cnt != 0) else {
        host.stats.doorbell_mismatch += 1;
        return;
    };
    // Threaded and watch modes: the store `process_sq` makes there, asked for now.
    qp.prefetch_shadow(qp.sq_ci);
    let db_ok = qp.uar_index == uar_index && doorbell_matches(qp, &value, strict);
    let bf_ok = bf.is_none_or(|d| bf_matches(qp, d));
    if !db_ok {
        host.stats.doorbell_mismatch += 1;
    }
    if !bf_ok {
        host.stats.bf_content_mismatch += 1;
    }
    process_sq(st, h, qpn, false);
}

/// Doorbells stored into the UAR pages of host `h` since the last scan (spec §1.6): for
/// each register in use, each half whose first 8 bytes are not zero holds a doorbell (a
/// ctrl segment's first 8 bytes are never all zero: `ds` >= 1). The 8 bytes are taken
/// with an atomic swap to zero. A BlueFlame write leaves the rest of the WQE behind them;
/// memory does not show store sizes, so a write whose bytes 8.. are still zero counts as a
/// plain doorbell, and one whose bytes differ from the ring is re-read for a while (the
/// writer may be between its 64-byte chunks) before it counts as a content mismatch. The
/// half is then cleared. When both halves were written since the last scan, the one the
/// alternation expects is taken first. Returns the doorbells seen.
pub(crate) fn scan_uars(st: &mut FabricState, h: usize) -> u64 {
    let mut regs = std::mem::take(&mut st.hosts[h].scratch);
    regs.clear();
    regs.extend(st.hosts[h].uars.iter().filter(|(_, u)| u.users > 0).map(|(r, _)| *r));
    regs.sort_unstable();
    let mut seen = 0;
    // The CQ doorbell (arm request) word of the host's CQ page.
    let cq_db = st.hosts[h].cq_page.ptr().wrapping_add(0x20);
    // SAFETY: 8-aligned inside the host's live CQ page.
    let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(cq_db.cast::<u64>()) }
        .swap(0, std::sync::atomic::Ordering::AcqRel);
    if v != 0 {
        seen += 1;
        cq_doorbell(&mut st.hosts[h], v.to_ne_bytes());
    }
    for i in 0..st.hosts[h].cq_db_pages.len() {
        let page = st.hosts[h].cq_db_pages[i];
        let cq_db = st.hosts[h].uar_pages[page].ptr().wrapping_add(0x20);
        // SAFETY: 8-aligned inside a live UAR page of the program's, attached until its
        // context closes (which removes it from `cq_db_pages` first).
        let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(cq_db.cast::<u64>()) }
            .swap(0, std::sync::atomic::Ordering::AcqRel);
        if v != 0 {
            seen += 1;
            cq_doorbell(&mut st.hosts[h], v.to_ne_bytes());
        }
    }
    for &r in &regs {
        let Some(u) = st.hosts[h].uars.get(&r).copied() else { continue };
        let base = st.hosts[h].reg_ptr(r);
        // Only 0 or BF_SIZE ever reaches `expected_offset` (doorbell_checked refuses
        // other offsets); masked again so that no value of it addresses outside the page.
        let first = u.expected_offset & BF_SIZE;
        for half in [first, first ^ BF_SIZE] {
            let p = base.wrapping_add(half as usize);
            // SAFETY: `p` is 8-aligned inside a live UAR page owned by this host; writers
            // store to it with plain 8-byte (or wider) stores.
            let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(p.cast::<u64>()) }
                .swap(0, std::sync::atomic::Ordering::AcqRel);
            if v == 0 {
                continue;
            }
            seen += 1;
            let value = v.to_ne_bytes();
            let mut data = [0u8; BF_SIZE as usize];
            data[..8].copy_from_slice(&value);
            let len = bf_len(&value);
            let bf = read_bf_half(st, h, p, &value, &mut data[..len]);
            // SAFETY: bytes 8..BF_SIZE of the half, inside the live page (a writer may be
            // storing to them: the shared-memory zeroing).
            unsafe { crate::shared::zero(p.add(8), BF_SIZE as usize - 8) };
            doorbell_checked(st, h, r, half, value, bf.then_some(&data[..len]), Via::Memory);
        }
    }
    st.hosts[h].scratch = regs;
    seen
}

/// Bytes a BlueFlame write of the WQE whose ctrl starts with `value` covers.
fn bf_len(value: &[u8; 8]) -> usize {
    let ds = usize::from(value[7] & 0x3f).max(1);
    (ds.div_ceil(4) * WQEBB_SIZE).min(BF_SIZE as usize)
}

/// Reads bytes 8.. of a register half into `data` (which holds the doorbell's first 8
/// bytes) and says whether they are a BlueFlame copy: all zero → plain doorbell; equal to
/// the ring → BlueFlame; otherwise re-read (bounded) while the writer may still be copying,
/// and report BlueFlame with what is there (the content check then counts the mismatch).
fn read_bf_half(st: &FabricState, h: usize, p: *mut u8, value: &[u8; 8], data: &mut [u8]) -> bool {
    let len = data.len();
    let qpn = doorbell_qpn(value);
    let idx = u16::from_be_bytes([value[1], value[2]]);
    let mut ring = [0u8; BF_SIZE as usize];
    let have_ring = match st.hosts[h].qps.get(&qpn).filter(|q| q.sq_wqe_cnt != 0) {
        Some(q) => {
            q.read_sq(idx, 0, &mut ring[..len]);
            true
        }
        None => false,
    };
    for round in 0..4096 {
        // SAFETY: bytes 8..len of the half, inside the live page; the writer may be storing
        // to them concurrently: the shared-memory copy (atomic loads).
        unsafe { crate::shared::load(p.add(8), &mut data[8..]) };
        if data[8..].iter().all(|&b| b == 0) {
            return false;
        }
        if !have_ring || data[8..] == ring[8..len] || round == 4095 {
            return true;
        }
        std::hint::spin_loop();
    }
    true
}

/// One pass of a NIC that watches memory: doorbells stored into its UAR pages, send
/// queues whose doorbell record moved (executed), receive WQEs posted to QPs in ERR
/// (flushed). Returns whether it found anything to do.
pub(crate) fn scan(st: &mut FabricState, h: usize) -> bool {
    let before = (st.hosts[h].stats.wqes_executed, st.hosts[h].stats.cqes_written);
    let seen = scan_uars(st, h);
    run_qps(st, h, true, false);
    seen > 0 || before != (st.hosts[h].stats.wqes_executed, st.hosts[h].stats.cqes_written)
}

/// One RNR-timer period: retry RNR-blocked SQs, run SQs whose producer moved without a
/// doorbell, flush WQEs posted to QPs in ERR.
pub(crate) fn tick(st: &mut FabricState, h: usize) {
    scan_uars(st, h);
    st.hosts[h].tick_clock();
    run_qps(st, h, false, true);
}

/// Flushes the QPs of host `h` in ERR / SQE and runs those in RTS (`retry`: retry an
/// RNR-blocked WQE), in QPN order so deterministic runs repeat; `only_with_work`: skip
/// QPs with nothing posted.
fn run_qps(st: &mut FabricState, h: usize, only_with_work: bool, retry: bool) {
    let mut qpns = std::mem::take(&mut st.hosts[h].scratch);
    qpns.clear();
    qpns.extend(st.hosts[h].qps.iter().filter(|(_, q)| !only_with_work || q.has_work()).map(|(n, _)| *n));
    qpns.sort_unstable();
    for &qpn in &qpns {
        match st.hosts[h].qps.get(&qpn).map(|q| q.state) {
            Some(QpState::Err) => {
                flush_sq(&mut st.hosts[h], qpn);
                flush_rq(&mut st.hosts[h], qpn);
            }
            Some(QpState::Sqe) => flush_sq(&mut st.hosts[h], qpn),
            Some(QpState::Rts) => process_sq(st, h, qpn, retry),
            _ => {}
        }
    }
    st.hosts[h].scratch = qpns;
}

/// The tick period of an RNR-blocked send queue.
const RNR_TICK: std::time::Duration = std::time::Duration::from_micros(20);
/// The tick period of a QP in ERR (SQE), polled slowly for receive (send) WQEs posted
/// later.
const ERR_TICK: std::time::Duration = std::time::Duration::from_millis(1);

/// How soon QP `q` wants a tick without doorbells.
fn tick_wanted(q: &Qp) -> Option<std::time::Duration> {
    if q.rnr.is_some() {
        Some(RNR_TICK)
    } else {
        matches!(q.state, QpState::Err | QpState::Sqe).then_some(ERR_TICK)
    }
}

/// Whether the QP that a doorbell value names waits for the NIC's timer
/// ([`tick_wanted`]).
pub(crate) fn needs_timer(st: &FabricState, h: usize, value: &[u8; 8]) -> bool {
    st.hosts[h].qps.get(&doorbell_qpn(value)).and_then(tick_wanted).is_some()
}

/// How soon host `h` wants a tick without doorbells: the soonest any of its QPs wants.
pub(crate) fn tick_interval(st: &FabricState, h: usize) -> Option<std::time::Duration> {
    let mut soonest = None;
    for d in st.hosts[h].qps.values().filter_map(tick_wanted) {
        if d == RNR_TICK {
            return Some(d); // none wants one sooner
        }
        soonest = Some(d); // ERR_TICK, the only other period
    }
    soonest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completer::tests::test_qp;
    use crate::wire::opcode;

    /// The doorbell value of a WQE: its ctrl segment's first 8 bytes (spec §2.1).
    fn ctrl8(idx: u16, qpn: u32, ds: u8) -> [u8; 8] {
        let [_, q2, q1, q0] = qpn.to_be_bytes();
        let [i1, i0] = idx.to_be_bytes();
        [0, i1, i0, opcode::RDMA_WRITE, q2, q1, q0, ds]
    }

    /// Three WQEs (2, 1 and 2 WQEBBs) written, rung and executed on QP 0x42.
    fn ran_three(per_slot: bool) -> (Qp, [[u8; 8]; 3]) {
        let mut qp = test_qp(0x42, 0);
        if per_slot {
            qp.keep_shadow_per_slot();
        }
        let v = [ctrl8(0, 0x42, 5), ctrl8(2, 0x42, 3), ctrl8(3, 0x42, 6)];
        for (c, start) in v.iter().zip([0u16, 2, 3]) {
            assert!(qp.buf.write(qp.sq_off + usize::from(start) * 64, c));
        }
        qp.dbrec.store_be32(4, 5);
        for (start, nbb) in [(0u16, 2u16), (2, 1), (3, 2)] {
            record_shadow(&mut qp, start, nbb);
            qp.sq_ci = start + nbb;
        }
        (qp, v)
    }

    #[test]
    fn a_doorbell_handled_when_rung_matches_only_the_last_executed_wqe() {
        // Deterministic mode keeps no shadow per slot, only the last WQE's.
        let (qp, v) = ran_three(false);
        assert!(qp.shadow.is_empty());
        // Rung again for the last WQE (it ends at the producer): a match.
        assert!(doorbell_matches(&qp, &v[2], true));
        // For an earlier one, even with the right bytes: it does not end at the
        // producer, so it is a mismatch, as it is with a shadow per slot.
        let (per_slot, _) = ran_three(true);
        for q in [&qp, &per_slot] {
            assert!(!doorbell_matches(q, &v[0], true));
            assert!(!doorbell_matches(q, &v[1], true));
            // Bytes that are not the last WQE's: a mismatch.
            assert!(!doorbell_matches(q, &ctrl8(3, 0x42, 5), true));
        }
        assert!(doorbell_matches(&per_slot, &v[2], true));
        // Threaded and watch modes keep one per slot: a late doorbell for an
        // earlier WQE is checked against its own bytes.
        assert!(doorbell_matches(&per_slot, &v[1], false));
        assert!(!doorbell_matches(&per_slot, &ctrl8(2, 0x42, 4), false));
        // Back to RESET, nothing executed is remembered.
        let (mut qp, v) = ran_three(false);
        qp.reset();
        qp.dbrec.store_be32(4, 5);
        qp.sq_ci = 5;
        assert!(!doorbell_matches(&qp, &v[2], true));
    }
}
