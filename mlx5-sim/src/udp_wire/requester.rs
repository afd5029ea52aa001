//! The requester's side of the UDP wire: an RC message whose responder QP another
//! process owns leaves as RoCE v2 request packets, and the send queue waits at its WQE
//! ([`Outcome::Pending`]) until the answer comes: an ACK (SEND, WRITE), the READ
//! responses, an ATOMIC ACKNOWLEDGE, an RNR NAK or an error NAK. Then the endpoint's
//! thread runs the send queue again; the WQE, still at the hardware counter, is executed
//! afresh (its local checks again), finds its answer here and is concluded as any other:
//! READ data and atomic results go to its scatter list (or its CQE), the send PSN moves
//! past it.
//!
//! Flow: a message has at most [`WINDOW`] packets on the wire beyond those acknowledged;
//! a SEND or WRITE asks for an acknowledgement every [`WINDOW`]` / 2` packets, and each
//! moves its window on; a READ asks for its responses a window at a time, each request a
//! READ of its own to the responder.
//!
//! Reliability (IBA 9.7): a PSN sequence error NAK resends from the PSN it names, a gap in
//! READ responses asks again for the rest of the window, and the local ACK timeout resends
//! from the first packet not known to have arrived; each resend on a timeout costs one of
//! the QP's `retry_cnt` retries, and with none left the WQE fails with
//! TRANSPORT_RETRY_EXC_ERR, as on a NIC whose peer died.

use std::time::{Duration, Instant};

use super::{psn_add, psn_diff, send, Dest, WireEnd};
use crate::dma::{self, Src};
use crate::hosts::FabricState;
use crate::net::packet::{aeth, op, send_opcode, write_opcode, AtomicEth, Masks, Packet, Pos, Reth};
use crate::net::roce::Parsed;
use crate::net::transport::local_ack_timeout_ns;
use crate::psn::advance_sq_psn;
use crate::responder::{fail, store_u64, Outcome, Request};
use crate::route::Sender;
use crate::wire::{opcode, syndrome};

/// The local ACK timeout on the wire is at least this long: the peer is a process that
/// the machine may not run for a while, and a resend before its answer costs a retry.
const MIN_ACK_TIMEOUT: Duration = Duration::from_millis(100);
/// ... and at most this long (a timeout code of 0 is "infinite" in IBA).
const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(4);

/// What a message waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// SEND, WRITE: an ACK of its last PSN.
    Ack,
    /// READ: its responses, in order.
    Read,
    /// Atomic: an ATOMIC ACKNOWLEDGE.
    Atomic,
}

impl Kind {
    /// The request, in words.
    fn noun(self) -> &'static str {
        match self {
            Kind::Ack => "a SEND or RDMA WRITE",
            Kind::Read => "an RDMA READ",
            Kind::Atomic => "an atomic",
        }
    }
}

/// How a message on the wire ended.
#[derive(Debug)]
pub(crate) enum Answer {
    Ack,
    Read(Vec<u8>),
    Atomic(u64),
    Rnr,
    /// An error NAK: the requester's syndrome.
    Nak(u8),
    RetryExceeded,
    /// A response that does not answer the request (IBA's "bad response": an opcode
    /// of another kind, a READ response of another length): BAD_RESP_ERR, why.
    BadResponse(String),
}

/// Most packets a message has on the wire beyond those acknowledged (its window): a
/// socket's receive buffer holds about this many of the largest (4 KiB MTU), so that a
/// long message does not lose most of itself to the receiver's buffer.
pub(crate) const WINDOW: u32 = 32;

/// A SEND or WRITE asks for an acknowledgement every this many packets (and on its
/// last), so that its window moves on before it is spent.
const ACK_EVERY: u32 = WINDOW / 2;

/// Packets to send at the requester's next run: `[from, to)`, and whether they were sent
/// before.
#[derive(Debug, Clone, Copy)]
struct Next {
    from: u32,
    to: u32,
    again: bool,
}

/// The message a QP has in flight.
#[derive(Debug)]
pub(crate) struct Outstanding {
    /// The WQE (at the send queue's hardware counter) and its first PSN.
    counter: u16,
    psn: u32,
    /// PSNs it takes.
    pkts: u32,
    kind: Kind,
    sent: Instant,
    timeout: Duration,
    /// Resends after a timeout so far, and the most allowed.
    tries: u8,
    retry_cnt: u8,
    /// Packets sent so far, `[0, sent_to)` (READ: responses asked for).
    sent_to: u32,
    /// Packets known to have arrived, `[0, done)`: acknowledged (SEND, WRITE), or READ
    /// responses taken.
    done: u32,
    /// What to send at the next run.
    next: Option<Next>,
    /// The READ response offset a resend was asked for after a gap (asked once per gap).
    gap_at: Option<u32>,
    answer: Option<Answer>,
    /// READ responses' bytes so far.
    data: Vec<u8>,
}

impl Outstanding {
    /// The window after `from`: up to [`WINDOW`] packets, never past the message.
    fn window(&self, from: u32) -> u32 {
        (from + WINDOW).min(self.pkts)
    }
}

/// Whom a request is for: an RC QP's peer, or a DCT (by its number, with the DC access
/// key the DCI's address vector gives).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Peer {
    Rc { dqpn: u32 },
    Dc { dct: u32, key: u64 },
}

impl Peer {
    fn number(self) -> u32 {
        match self {
            Peer::Rc { dqpn } => dqpn,
            Peer::Dc { dct, .. } => dct,
        }
    }
}

/// The destination of QP `qpn` on host `h` whose request goes to host `rh`, QPN or DCT
/// number `dqpn`, when another process owns that QP: from the QP's cache, or the registry.
fn dest(st: &mut FabricState, h: usize, qpn: u32, rh: usize, dqpn: u32) -> Option<Dest> {
    if let Some(d) = st.hosts[h].qps.get(&qpn)?.wire.as_ref().and_then(|w| w.dest) {
        if d.dqpn == dqpn {
            return Some(d);
        }
    }
    let to = super::remote_owner(st, rh, dqpn)?;
    let d = Dest { dqpn, gid: st.hosts[rh].cfg.gid, to };
    st.hosts[h].qps.get_mut(&qpn)?.wire.get_or_insert_with(Default::default).dest = Some(d);
    Some(d)
}

fn kind_of(op: u8) -> Kind {
    match op {
        opcode::RDMA_READ => Kind::Read,
        opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA => {
            Kind::Atomic
        }
        _ => Kind::Ack,
    }
}

/// Request `rq` of RC QP `qpn` on host `h` (its WQE at the hardware counter), whose path
/// `path` leads to host `rh` where no local QP answers: on the UDP wire when another
/// process owns the destination QP. `None`: it does not (nobody answers).
///
/// Sends the message the first time, again when a NAK or the timer asked for it, and
/// concludes it when its answer is in; otherwise the send queue keeps waiting.
pub(crate) fn request(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    me: &Sender,
    peer: Peer,
    rh: usize,
    rq: &Request<'_, '_>,
) -> Option<Outcome> {
    let end = st.hosts[h].wire.clone()?;
    let dest = dest(st, h, qpn, rh, peer.number())?;
    // A DCI's message takes PSNs on the wire as an RC one does (the in-process model
    // keeps none for DC).
    let dc_rq;
    let rq = match peer {
        Peer::Rc { .. } => rq,
        Peer::Dc { .. } => {
            dc_rq = Request { pkts: crate::psn::packets(rq.op, rq.len as u32, me.mtu), ..*rq };
            &dc_rq
        }
    };
    let now = Instant::now();
    let qp = st.hosts[h].qps.get_mut(&qpn)?;
    let counter = qp.sq_ci;
    let timeout =
        Duration::from_nanos(local_ack_timeout_ns(qp.attrs.timeout)).clamp(MIN_ACK_TIMEOUT, MAX_ACK_TIMEOUT);
    let retry_cnt = qp.attrs.retry_cnt;
    let w = qp.wire.get_or_insert_with(Default::default);
    let next = match &mut w.out {
        Some(o) if o.counter == counter && o.psn == me.sq_psn => {
            if let Some(a) = o.answer.take() {
                // After an RNR NAK the same message goes again (not new bytes).
                w.rnr_of = matches!(a, Answer::Rnr).then_some((counter, me.sq_psn));
                w.out = None;
                qp.waiting = false;
                return Some(conclude(st, h, qpn, rq, a));
            }
            let Some(next) = o.next.take() else {
                qp.waiting = true;
                return Some(Outcome::Pending);
            };
            o.sent_to = o.sent_to.max(next.to);
            next
        }
        _ => {
            let mut o = Outstanding {
                counter,
                psn: me.sq_psn,
                pkts: rq.pkts.max(1),
                kind: kind_of(rq.op),
                sent: now,
                timeout,
                tries: 0,
                retry_cnt,
                sent_to: 0,
                done: 0,
                next: None,
                gap_at: None,
                answer: None,
                data: Vec::new(),
            };
            let again = w.rnr_of.take() == Some((counter, me.sq_psn));
            let next = Next { from: 0, to: o.window(0), again };
            o.sent_to = next.to;
            w.out = Some(o);
            next
        }
    };
    qp.waiting = true;
    if next.again {
        st.hosts[h].stats.retransmits += 1;
    }
    transmit(st, h, &end, qpn, (&dest, peer), me, rq, (next.from, next.to, next.again));
    // The timer runs from the end of the transmission (a long message takes a while).
    if let Some(o) = st.hosts[h].qps.get_mut(&qpn).and_then(|q| q.wire.as_mut()).and_then(|w| w.out.as_mut())
    {
        o.sent = Instant::now();
    }
    Some(Outcome::Pending)
}

/// What the requester does with answer `a` to request `rq` of QP `qpn` on host `h`.
fn conclude(st: &mut FabricState, h: usize, qpn: u32, rq: &Request<'_, '_>, a: Answer) -> Outcome {
    let endian = st.cfg.atomic_endianness;
    let done = Outcome::Done { byte_cnt: rq.len as u32 };
    match a {
        Answer::Ack => {
            advance_sq_psn(&mut st.hosts[h], qpn, rq.pkts);
            done
        }
        Answer::Read(data) if data.len() as u64 != rq.len => {
            let (got, asked) = (data.len(), rq.len);
            bad_response(format!("the responder answered an RDMA READ of {asked} bytes with {got} bytes"))
        }
        Answer::Read(data) => {
            advance_sq_psn(&mut st.hosts[h], qpn, rq.pkts);
            let n = data.len().min(rq.len as usize);
            if n > 0 && rq.len <= rq.req_scatter {
                let mut inline = Box::new([0u8; 64]);
                inline[..n].copy_from_slice(&data[..n]);
                return Outcome::DoneInline { byte_cnt: rq.len as u32, data: inline };
            }
            dma::stream(&[Src::Bytes(&data[..n])], rq.sink.regions());
            done
        }
        Answer::Atomic(v) => {
            advance_sq_psn(&mut st.hosts[h], qpn, rq.pkts);
            // A masked atomic's result in its own width and byte order.
            let (bytes, n) = match rq.width {
                0 => (store_u64(v, endian), 8),
                w => (crate::responder::store_masked(v, w, endian), usize::from(w)),
            };
            if rq.req_scatter >= n as u64 {
                let mut inline = Box::new([0u8; 64]);
                inline[..n].copy_from_slice(&bytes[..n]);
                return Outcome::DoneInline { byte_cnt: n as u32, data: inline };
            }
            match rq.sink.regions().first() {
                Some(r) => {
                    dma::write(r, 0, &bytes[..n]);
                    Outcome::Done { byte_cnt: n as u32 }
                }
                None => fail(syndrome::LOCAL_QP_OP_ERR),
            }
        }
        Answer::BadResponse(why) => bad_response(why),
        Answer::Rnr => Outcome::Rnr,
        Answer::Nak(synd) => fail(synd),
        Answer::RetryExceeded => fail(syndrome::TRANSPORT_RETRY_EXC_ERR),
    }
}

/// A response that does not answer its request: BAD_RESP_ERR, `why` noted for the error
/// CQE's explanation. Nothing was written to the requester's memory.
#[cold]
#[inline(never)]
fn bad_response(why: String) -> Outcome {
    crate::why::note(|| why);
    fail(syndrome::BAD_RESP_ERR)
}

/// Sends packets `[from, to)` of request `rq` (first PSN `me.sq_psn`); `again`: sent
/// before (its payload bytes are not counted again). A READ asks for
/// those responses with one READ request for their bytes (the responder takes it as a
/// READ of its own: a long READ goes as several, a window each).
#[allow(clippy::too_many_arguments)]
fn transmit(
    st: &mut FabricState,
    h: usize,
    end: &WireEnd,
    qpn: u32,
    (dest, peer): (&Dest, Peer),
    me: &Sender,
    rq: &Request<'_, '_>,
    (from, to, again): (u32, u32, bool),
) {
    let psn0 = me.sq_psn;
    let mtu = u64::from(me.mtu);
    // To a DCT: the DC form of each request opcode, with a DCETH.
    let pkt = |opc: u8, i: u32| {
        let mut p = Packet::new(h, h, opc, qpn, dest.dqpn, psn_add(psn0, i));
        if let Peer::Dc { key, .. } = peer {
            p.opcode = op::dc(opc);
            p.dceth = Some((key, qpn));
        }
        p
    };
    match rq.op {
        opcode::RDMA_READ => {
            let a = (u64::from(from) * mtu).min(rq.len);
            let b = (u64::from(to) * mtu).min(rq.len);
            let mut p = pkt(op::READ_REQUEST, from);
            p.ack_req = true;
            p.reth = Some(Reth { va: rq.raddr.wrapping_add(a), rkey: rq.rkey, len: (b - a) as u32 });
            send(st, h, end, &p, &dest.gid, dest.to);
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA => {
            let opc = op::atomic_of(rq.op).unwrap_or(op::FETCH_ADD);
            let mut p = pkt(opc, 0);
            if let Peer::Rc { .. } = peer {
                p.opcode = op::rc_atomic(opc);
            }
            p.ack_req = true;
            p.atomic =
                Some(AtomicEth { va: rq.raddr, rkey: rq.rkey, swap_add: rq.swap_add, compare: rq.compare });
            if rq.width != 0 {
                p.masks =
                    Some(Masks { swap_mask: rq.swap_mask, compare_mask: rq.compare_mask, width: rq.width });
            }
            send(st, h, end, &p, &dest.gid, dest.to);
        }
        o => {
            let len = rq.len;
            let base = (u64::from(from) * mtu).min(len);
            let mut data = vec![0u8; ((u64::from(to) * mtu).min(len) - base) as usize];
            dma::gather_at(rq.srcs, base, &mut data);
            let n = rq.pkts.max(1);
            let write = matches!(o, opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM);
            let imm = matches!(o, opcode::RDMA_WRITE_IMM | opcode::SEND_IMM);
            let inv = o == opcode::SEND_INVAL;
            for i in from..to.min(n) {
                let pos = Pos::of(i, n);
                let last = matches!(pos, Pos::Last | Pos::Only);
                let opc = if write { write_opcode(pos, imm) } else { send_opcode(pos, imm, inv) };
                let mut p = pkt(opc, i);
                let a = ((u64::from(i) * mtu).min(len) - base) as usize;
                let b = ((u64::from(i + 1) * mtu).min(len) - base) as usize;
                p.payload = &data[a..b];
                p.ack_req = last || (i + 1).is_multiple_of(ACK_EVERY);
                if last {
                    p.se = rq.se && (!write || imm);
                    if imm {
                        p.imm = Some(rq.imm);
                    }
                    if inv {
                        p.ieth = Some(rq.imm);
                    }
                }
                if write && i == 0 {
                    p.reth = Some(Reth { va: rq.raddr, rkey: rq.rkey, len: len as u32 });
                }
                if !again {
                    st.hosts[h].stats.wire_payload_bytes += p.payload.len() as u64;
                }
                send(st, h, end, &p, &dest.gid, dest.to);
            }
        }
    }
}

/// An answer `p` arrived for a requester QP of host `h`: taken when it answers the
/// message in flight, and the send queue runs on.
pub(crate) fn on_response(st: &mut FabricState, h: usize, _end: &WireEnd, p: &Parsed<'_>) {
    let qpn = p.dqpn;
    let Some(o) = st.hosts[h].qps.get_mut(&qpn).and_then(|q| q.wire.as_mut()).and_then(|w| w.out.as_mut())
    else {
        st.hosts[h].stats.datagrams_dropped += 1;
        return;
    };
    if o.answer.is_some() {
        return;
    }
    let d = psn_diff(p.psn, o.psn);
    let last = o.pkts as i32 - 1;
    let mut seq_nak = false;
    match p.opcode {
        op::ACKNOWLEDGE => {
            let Some((s, _msn)) = p.aeth else { return };
            match s >> 5 {
                // ACK: of the whole message (SEND, WRITE), or of its packets up to `d`,
                // which moves its window on.
                0 if o.kind == Kind::Ack && d == last => o.answer = Some(Answer::Ack),
                0 if o.kind == Kind::Ack && (0..last).contains(&d) => {
                    o.done = o.done.max(d as u32 + 1);
                    if o.sent_to < o.pkts && o.next.is_none() {
                        o.next = Some(Next { from: o.sent_to, to: o.window(o.done), again: false });
                    }
                }
                1 if (0..=last).contains(&d) => o.answer = Some(Answer::Rnr),
                3 if (0..=last).contains(&d) => match s {
                    aeth::NAK_PSN_SEQ => {
                        // Go back to the PSN the responder expects (IBA 9.7.5.2.2).
                        o.done = o.done.max(d as u32);
                        o.next = Some(Next { from: d as u32, to: o.window(d as u32), again: true });
                        seq_nak = true;
                    }
                    aeth::NAK_REMOTE_ACCESS => o.answer = Some(Answer::Nak(syndrome::REMOTE_ACCESS_ERR)),
                    aeth::NAK_REMOTE_OP => o.answer = Some(Answer::Nak(syndrome::REMOTE_OP_ERR)),
                    _ => o.answer = Some(Answer::Nak(syndrome::REMOTE_INVAL_REQ_ERR)),
                },
                _ => return, // an old or stray acknowledgement
            }
        }
        op::ATOMIC_ACKNOWLEDGE if o.kind == Kind::Atomic && d == 0 => {
            let Some(v) = p.atomic_ack else { return };
            o.answer = Some(Answer::Atomic(v));
        }
        // An answer of another kind at a PSN of the message in flight: a bad response.
        op::ATOMIC_ACKNOWLEDGE if o.kind != Kind::Atomic && (0..=last).contains(&d) => {
            o.answer = Some(Answer::BadResponse(format!(
                "the responder answered {} with an ATOMIC ACKNOWLEDGE",
                o.kind.noun()
            )));
        }
        opc if o.kind != Kind::Read
            && (op::READ_RESPONSE_FIRST..=op::READ_RESPONSE_ONLY).contains(&opc)
            && (0..=last).contains(&d) =>
        {
            o.answer = Some(Answer::BadResponse(format!(
                "the responder answered {} with a READ RESPONSE",
                o.kind.noun()
            )));
        }
        opc if o.kind == Kind::Read && (op::READ_RESPONSE_FIRST..=op::READ_RESPONSE_ONLY).contains(&opc) => {
            if d == o.done as i32 {
                o.data.extend_from_slice(p.payload);
                o.done += 1;
                o.gap_at = None;
                if o.done == o.pkts {
                    o.answer = Some(Answer::Read(std::mem::take(&mut o.data)));
                } else if o.done == o.sent_to && o.next.is_none() {
                    // This window's responses are in: ask for the next.
                    o.next = Some(Next { from: o.sent_to, to: o.window(o.sent_to), again: false });
                } else {
                    return;
                }
            } else if d > o.done as i32 && d < o.sent_to as i32 && o.gap_at != Some(o.done) {
                // A response lost: ask again for the rest of the window, once per gap.
                o.gap_at = Some(o.done);
                o.next = Some(Next { from: o.done, to: o.sent_to, again: true });
            } else {
                return;
            }
        }
        _ => return,
    }
    if seq_nak {
        st.hosts[h].stats.seq_naks += 1;
    }
    if o_ready(st, h, qpn) {
        crate::requester::process_sq(st, h, qpn, true);
    }
}

/// Whether QP `qpn`'s message has an answer or a resend for the send queue to act on.
fn o_ready(st: &FabricState, h: usize, qpn: u32) -> bool {
    st.hosts[h]
        .qps
        .get(&qpn)
        .and_then(|q| q.wire.as_ref())
        .and_then(|w| w.out.as_ref())
        .is_some_and(|o| o.answer.is_some() || o.next.is_some())
}

/// The local ACK timers of host `h`'s requesters: a message unanswered for its timeout
/// is sent again from its first unanswered packet, or fails when its retries are spent.
pub(crate) fn timers(st: &mut FabricState, h: usize, _end: &WireEnd) {
    let now = Instant::now();
    let waiting: Vec<u32> = st.hosts[h].qps.iter().filter(|(_, q)| q.waiting).map(|(n, _)| *n).collect();
    let mut due = Vec::new();
    for qpn in waiting {
        let Some(q) = st.hosts[h].qps.get_mut(&qpn) else { continue };
        let Some(o) = q.wire.as_mut().and_then(|w| w.out.as_mut()) else { continue };
        if o.answer.is_some() || o.next.is_some() || now.duration_since(o.sent) < o.timeout {
            continue;
        }
        if o.tries >= o.retry_cnt {
            o.answer = Some(Answer::RetryExceeded);
        } else {
            o.tries += 1;
            // Go back to the first packet not known to have arrived.
            let from = if o.kind == Kind::Atomic { 0 } else { o.done };
            let to = if o.kind == Kind::Read { o.sent_to.max(from + 1).min(o.pkts) } else { o.window(from) };
            o.next = Some(Next { from, to, again: true });
        }
        due.push(qpn);
    }
    for qpn in due {
        st.hosts[h].stats.ack_timeouts += 1;
        crate::requester::process_sq(st, h, qpn, true);
    }
}
