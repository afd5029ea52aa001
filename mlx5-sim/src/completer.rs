//! The completer: builds requester and error CQEs, writes every CQE (through the CQ's
//! ring, compression sessions included) with its overrun and event consequences, and moves
//! QPs to ERR / SQE with the flush CQEs that follow (spec §5, §6.1, §7). It works on one
//! host's state ([`Host`]) and nothing else.

use crate::host::*;
use crate::qp::Qp;
use crate::wire::{cqe_opcode, syndrome, Cqe64, CqeRepr, ErrCqe, ErrCqeRepr};
use crate::{AsyncEvent, QpState, QpType};

/// Vendor syndromes written with each syndrome (spec §5.4 and §11.7: firmware-specific;
/// 0xf9, 0x81 and 0x8a are observed values, the others are this model's choice).
pub(crate) fn vendor_syndrome(s: u8) -> u8 {
    match s {
        syndrome::LOCAL_LENGTH_ERR => 0x68,
        syndrome::LOCAL_QP_OP_ERR => 0x51,
        syndrome::LOCAL_PROT_ERR => 0x56,
        syndrome::WR_FLUSH_ERR => 0xf9,
        syndrome::REMOTE_INVAL_REQ_ERR => 0x8a,
        syndrome::REMOTE_ACCESS_ERR => 0x88,
        syndrome::REMOTE_OP_ERR => 0x89,
        syndrome::TRANSPORT_RETRY_EXC_ERR => 0x81,
        syndrome::RNR_RETRY_EXC_ERR => 0x82,
        // The one abort the model makes: an on-demand-paging page fault
        // (`MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`).
        syndrome::REMOTE_ABORTED_ERR => 0x93,
        _ => 0x00,
    }
}

#[cfg(test)]
pub(crate) fn req_cqe(qp: &Qp, op: u8, counter: u16, byte_cnt: u32, ts: u64) -> [u8; 64] {
    req_cqe_of(qp.user_index, qp.qpn, op, counter, byte_cnt, ts)
}

/// The requester's success CQE of WQE `counter` (opcode `op`) of QP `qpn`.
#[inline]
fn req_cqe_of(user_index: u32, qpn: u32, op: u8, counter: u16, byte_cnt: u32, ts: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    CqeRepr {
        opcode: cqe_opcode::REQ,
        srqn_uidx: user_index,
        byte_cnt,
        timestamp: ts,
        sop_drop_qpn: (u32::from(op) << 24) | qpn,
        wqe_counter: counter,
        ..Default::default()
    }
    .emit(&mut Cqe64::new_unchecked(&mut b));
    b
}

pub(crate) fn err_cqe(op: u8, synd: u8, user_index: u32, wqe_op: u8, qpn: u32, counter: u16) -> [u8; 64] {
    let mut b = [0u8; 64];
    ErrCqeRepr {
        opcode: op,
        owner: 0,
        srqn: user_index,
        vendor_err_synd: vendor_syndrome(synd),
        syndrome: synd,
        s_wqe_opcode_qpn: (u32::from(wqe_op) << 24) | qpn,
        wqe_counter: counter,
    }
    .emit(&mut ErrCqe::new_unchecked(&mut b));
    b
}

/// Delivers a CQE to CQ `cqn` of `host`.
pub(crate) fn push_cqe(host: &mut Host, cqn: u32, cqe: &[u8; 64], fatal_qpn: Option<u32>) {
    push_cqe_data(host, cqn, cqe, None, fatal_qpn);
}

/// Delivers a CQE, with `data` scattered into it (spec §5.7): a 64-byte CQE takes up to 32
/// bytes in its bytes 0..32 (format 1), a 128-byte CQE up to 64 in the first half of its
/// slot (format 2). A CQE that does not fit puts the CQ in error (overrun): an async event,
/// and every QP reporting to it moves to ERR (their flush CQEs are lost with it).
pub(crate) fn push_cqe_data(
    host: &mut Host,
    cqn: u32,
    cqe: &[u8; 64],
    data: Option<&[u8]>,
    fatal_qpn: Option<u32>,
) {
    let Some(cq) = host.cqs.get_mut(&cqn) else {
        return;
    };
    let was_error = cq.error;
    // The CQE as given, or (scatter-to-CQE) a copy with the data in it.
    let mut b;
    let mut half: &[u8] = &[];
    let cqe = match data {
        None => cqe,
        Some(d) => {
            b = *cqe;
            if cq.cqe_size == 64 {
                b[..32].fill(0);
                b[..d.len()].copy_from_slice(d);
                b[OP_OWN] = (b[OP_OWN] & !0x0c) | 1 << 2;
            } else {
                half = d;
                b[OP_OWN] = (b[OP_OWN] & !0x0c) | 2 << 2;
            }
            &b
        }
    };
    match cq.push_with(cqe, half) {
        Ok(()) => {
            host.stats.cqes_written += 1;
            if cq.has_pending() && !host.dirty.contains(&cqn) {
                host.dirty.push(cqn);
            }
            // The event for an armed CQ, without looking the CQ up again.
            if let Some(ch) = cq.take_event().then_some(cq.channel).flatten() {
                if let Some(ch) = host.channels.get_mut(&ch) {
                    ch.signal(cqn);
                }
            }
        }
        Err(_) => {
            host.stats.cq_overruns += 1;
            if let Some(qpn) = fatal_qpn {
                host.push_event(AsyncEvent::QpFatal { qpn });
            }
            if !was_error {
                host.push_event(AsyncEvent::CqOverrun { cqn });
                let mut users: Vec<u32> = host
                    .qps
                    .values()
                    .filter(|q| q.state != QpState::Err && (q.send_cqn == cqn || q.recv_cqn == cqn))
                    .map(|q| q.qpn)
                    .collect();
                users.sort_unstable();
                for qpn in users {
                    enter_err(host, qpn);
                }
            }
        }
    }
}

/// A send WQE its requester is done with: QP (its number, user index and send CQ), WQE
/// counter, ctrl opcode and `fm_ce_se`, and the clock when it ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendRetired {
    pub qpn: u32,
    pub user_index: u32,
    pub send_cqn: u32,
    pub counter: u16,
    pub opcode: u8,
    pub fm_ce_se: u8,
    pub ts: u64,
}

/// A send WQE carried out: its requester CQE when it asks for one. CE = 2 or 3 asks for a
/// CQE; CE = 1 ("only on first error") is treated like CE = 0 on success [unverified, spec
/// §2.2]. `byte_cnt`: message length for SEND/WRITE [unverified, §6.3], bytes read for
/// READ, 8 for atomics. `inline`: the READ response or atomic result that goes into the
/// CQE (requester scatter-to-CQE, only ever asked for a signaled WQE).
#[inline(always)]
pub(crate) fn retire_send(host: &mut Host, w: &SendRetired, byte_cnt: u32, inline: Option<&[u8]>) {
    if inline.is_none() && w.fm_ce_se & 0x08 == 0 {
        return;
    }
    let cqe = req_cqe_of(w.user_index, w.qpn, w.opcode, w.counter, byte_cnt, w.ts);
    push_cqe_data(host, w.send_cqn, &cqe, inline, None);
}

/// A send WQE that failed with `synd`: its error CQE (always written; a CQ that cannot
/// take it makes the QP's error fatal). The caller then moves the QP to ERR or SQE
/// ([`fail_qp`]).
pub(crate) fn retire_send_failed(host: &mut Host, w: &SendRetired, synd: u8) {
    if let Some(why) = host.why.take_pending(w.qpn).or_else(crate::why::take) {
        host.why.keep(w.qpn, w.counter, why);
    }
    let cqe = err_cqe(cqe_opcode::REQ_ERR, synd, w.user_index, w.opcode, w.qpn, w.counter);
    push_cqe(host, w.send_cqn, &cqe, Some(w.qpn));
}

const OP_OWN: usize = 63;

/// Signals the CQ's channel if the CQ has an event due.
fn deliver_event(host: &mut Host, cqn: u32) {
    let Some(cq) = host.cqs.get_mut(&cqn) else {
        return;
    };
    if !cq.take_event() {
        return;
    }
    if let Some(ch) = cq.channel.and_then(|c| host.channels.get_mut(&c)) {
        ch.signal(cqn);
    }
}

/// Writes every pending compressed session of `host` (the end of a burst: its lock is
/// being let go). Out of line: only compressing CQs have sessions.
#[cold]
#[inline(never)]
pub(crate) fn flush_sessions(host: &mut Host) {
    while let Some(cqn) = host.dirty.pop() {
        if let Some(cq) = host.cqs.get_mut(&cqn) {
            cq.flush();
            deliver_event(host, cqn);
        }
    }
}

/// The arm doorbell of a CQ (spec §5.6): `value` = BE32 arm word, BE32 CQN.
pub(crate) fn cq_doorbell(host: &mut Host, value: [u8; 8]) {
    let word = u32::from_be_bytes([value[0], value[1], value[2], value[3]]);
    let cqn = u32::from_be_bytes([value[4], value[5], value[6], value[7]]) & 0xff_ffff;
    host.stats.doorbells += 1;
    if let Some(cq) = host.cqs.get_mut(&cqn) {
        cq.arm(word);
        deliver_event(host, cqn);
    }
}

pub(crate) fn record_shadow(qp: &mut Qp, counter: u16, wqebbs: u16) {
    let ctrl8 = qp.read_ctrl8(counter);
    qp.record_shadow(counter, ctrl8, wqebbs);
}

/// Completes every send WQE up to the producer with REQ_ERR WR_FLUSH_ERR.
pub(crate) fn flush_sq(host: &mut Host, qpn: u32) {
    loop {
        let Some(qp) = host.qps.get_mut(&qpn) else {
            return;
        };
        let p = qp.sq_producer();
        if qp.sq_ci == p {
            return;
        }
        let c = qp.sq_ci;
        let ctrl = qp.read_ctrl(c);
        let n = ctrl.wqebbs().min(p.wrapping_sub(c));
        record_shadow(qp, c, n);
        qp.sq_ci = c.wrapping_add(n);
        qp.rnr = None;
        let cqe = err_cqe(cqe_opcode::REQ_ERR, syndrome::WR_FLUSH_ERR, qp.user_index, ctrl.opcode, qpn, c);
        let cqn = qp.send_cqn;
        push_cqe(host, cqn, &cqe, None);
    }
}

/// Completes every posted receive WQE with RESP_ERR WR_FLUSH_ERR.
pub(crate) fn flush_rq(host: &mut Host, qpn: u32) {
    loop {
        let Some(qp) = host.qps.get_mut(&qpn) else {
            return;
        };
        let p = qp.rq_producer();
        if qp.rq_wqe_cnt == 0 || qp.rq_ci == p {
            return;
        }
        let c = qp.rq_ci;
        qp.rq_ci = c.wrapping_add(1);
        let cqe = err_cqe(cqe_opcode::RESP_ERR, syndrome::WR_FLUSH_ERR, qp.user_index, 0, qpn, c);
        let cqn = qp.recv_cqn;
        push_cqe(host, cqn, &cqe, None);
    }
}

/// Moves a QP to ERR and flushes both of its queues (its own RQ only: SRQ WQEs belong to
/// every QP sharing the SRQ and are never flushed, spec §6.1).
pub(crate) fn enter_err(host: &mut Host, qpn: u32) {
    let Some(qp) = host.qps.get_mut(&qpn) else {
        return;
    };
    qp.state = QpState::Err;
    qp.rnr = None;
    flush_sq(host, qpn);
    flush_rq(host, qpn);
}

/// UD send error (spec §7): the QP moves to SQE, its remaining send WQEs are flushed and its
/// receive side keeps working; SQE→RTS recovers.
pub(crate) fn enter_sqe(host: &mut Host, qpn: u32) {
    let Some(qp) = host.qps.get_mut(&qpn) else {
        return;
    };
    qp.state = QpState::Sqe;
    qp.rnr = None;
    flush_sq(host, qpn);
}

/// A send WQE of QP `qpn` failed: UD QPs go to SQE, all others to ERR.
pub(crate) fn fail_qp(host: &mut Host, qpn: u32) {
    match host.qps.get(&qpn).map(|q| q.qp_type) {
        Some(QpType::Ud) => enter_sqe(host, qpn),
        _ => enter_err(host, qpn),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cq::Cq;
    use crate::wire::opcode;
    use crate::QpType;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
    }

    /// Pushes `cqe` through a real CQ at producer index `pi` and returns the slot bytes.
    pub(crate) fn through_cq(cqe: &[u8; 64], cnt: u32, pi: u32) -> [u8; 64] {
        let mut cq = Cq::new(cnt, 64, None, None).unwrap();
        let filler = [0u8; 64];
        for i in 0..pi {
            cq.dbrec.store_be32(0, i); // the consumer keeps up
            cq.push(&filler).unwrap();
        }
        cq.push(cqe).unwrap();
        let mut out = [0u8; 64];
        cq.mem.read((pi & (cnt - 1)) as usize * 64, &mut out);
        out
    }

    pub(crate) fn test_qp(qpn: u32, uidx: u32) -> Qp {
        let attr = crate::QpInitAttr {
            qp_type: QpType::Rc,
            pdn: 1,
            send_cqn: 1,
            recv_cqn: 1,
            sq_wqe_cnt: 8,
            rq_wqe_cnt: 0,
            rq_stride: 16,
            user_index: uidx,
            srqn: None,
            dc_key: 0,
            ..Default::default()
        };
        Qp::new(qpn, 0, &attr).unwrap()
    }

    #[test]
    fn golden_c1_from_the_engine_writer() {
        let qp = test_qp(0x123, 1);
        let cqe = req_cqe(&qp, opcode::RDMA_READ, 0x12, 0x200, 0x0000_0001_0203_0405);
        let got = through_cq(&cqe, 256, 0x105);
        let want = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 02 00
             00 00 00 01  02 03 04 05  10 00 01 23  00 12 00 01");
        assert_eq!(got[..], want[..]);
    }

    #[test]
    fn golden_c3_c4_from_the_engine_writer() {
        let c3 =
            err_cqe(cqe_opcode::REQ_ERR, syndrome::REMOTE_ACCESS_ERR, 1, opcode::RDMA_WRITE, 0x123, 0x10);
        let want3 = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 88 13  08 00 01 23  00 10 00 d0");
        assert_eq!(through_cq(&c3, 256, 8)[..], want3[..]);
        let c4 = err_cqe(cqe_opcode::REQ_ERR, syndrome::WR_FLUSH_ERR, 1, opcode::RDMA_WRITE_IMM, 0x123, 0x11);
        let want4 = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 01  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 f9 05  09 00 01 23  00 11 00 d0");
        assert_eq!(through_cq(&c4, 256, 9)[..], want4[..]);
    }

    #[test]
    fn vendor_table_is_total() {
        for s in 0..=255u8 {
            let _ = vendor_syndrome(s);
        }
        assert_eq!(vendor_syndrome(syndrome::WR_FLUSH_ERR), 0xf9);
        assert_eq!(vendor_syndrome(syndrome::TRANSPORT_RETRY_EXC_ERR), 0x81);
    }
}
