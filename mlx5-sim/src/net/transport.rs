//! Reliable delivery of a train of RC or DC messages as packets over a link that may lose,
//! corrupt, delay, duplicate or reorder them (IBA vol. 1, 9.7), on the simulated clock.
//!
//! A train is the messages of one send queue that are ready together (one message, or
//! the WQEs one doorbell covers): their PSNs follow each other, and the requester sends
//! every request packet of the train back to back without waiting for acknowledgements
//! (pipelining: no stop-and-wait between WQEs). The responder accepts only the PSN it
//! expects: it answers one NAK per gap, and a duplicate (a PSN it already accepted) with
//! a new acknowledgement, never executing the message again: an atomic replays its saved
//! result, a READ sends its response again. The requester retires messages in order:
//! a SEND or WRITE when an acknowledgement covers its last PSN, a READ when its last
//! response is in, an atomic with its ACKNOWLEDGE; a READ response, an atomic ACKNOWLEDGE
//! or a NAK also acknowledges every PSN before its message (IBA 9.7.5.1.1, implicit
//! acknowledgement). It retransmits (go-back-N) from the PSN a sequence-error NAK names,
//! and from its first unacknowledged PSN after its local ACK timeout (4.096 µs ×
//! 2^`timeout`); each retransmission costs one of `retry_cnt` retries, and with none left
//! the first unfinished message ends with retries exceeded.
//!
//! ACK coalescing (IBA 9.7.5.1.1 lets a responder acknowledge several requests at once):
//! the requester asks for an acknowledgement (AckReq) on the last packet of the train's
//! last message and of every [`ACK_EVERY`]th message, and the responder acknowledges only
//! those (and duplicates); one ACK then retires every SEND and WRITE before it.
//!
//! Model choices: the responder executes a message once, when its last request packet is
//! accepted in order (data placement by packet is not visible to anyone before that);
//! after an RNR NAK it drops the packets that follow, without another NAK, until the
//! NAKed one comes again; the train ends at an RNR NAK, an error NAK or retries exceeded
//! (its later messages are the requester's to flush or resend).

use std::collections::VecDeque;

use super::PACKET_GAP_NS;
use crate::fixed::Fixed;
use crate::hosts::FabricState;
use crate::responder::Outcome;

/// The requester asks for an acknowledgement every this many messages of a train (and on
/// its last).
pub(crate) const ACK_EVERY: u32 = 8;

/// Most messages in one train.
pub(crate) const MAX_TRAIN: usize = 16;

/// Each message's first PSN in a train, as an offset, and the PSN after the train.
pub(crate) type Offsets = [u32; MAX_TRAIN + 1];

/// How the messages of a train of at most `N` ended ([`deliver`]).
pub(crate) type Deliveries<const N: usize> = Fixed<Delivery, N>;

/// What one message of a train needs from the network.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Request packets (SEND / WRITE: one per MTU; READ, atomic: one).
    pub req_pkts: u32,
    /// Response packets carrying data (READ: one per MTU; atomic: one; else none).
    pub resp_pkts: u32,
    /// An atomic: its one response is an ATOMIC ACKNOWLEDGE.
    pub atomic: bool,
}

impl Shape {
    /// A READ or atomic: answered with responses, not acknowledged.
    fn read_like(&self) -> bool {
        self.resp_pkts > 0
    }

    /// PSNs the message takes: its request packets, or its responses.
    fn span(&self) -> u32 {
        if self.read_like() {
            self.resp_pkts
        } else {
            self.req_pkts
        }
    }
}

/// A train of messages between two hosts on one QP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Train<'a> {
    /// Requester and responder host.
    pub req: usize,
    pub resp: usize,
    pub msgs: &'a [Shape],
    /// The QP's local ACK timeout code ([`local_ack_timeout_ns`]).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
}

impl Train<'_> {
    /// Whether the requester asks for an acknowledgement of message `i` (on its last
    /// packet): the train's last message, and every [`ACK_EVERY`]th.
    pub(crate) fn ack_req(&self, i: u32) -> bool {
        i as usize + 1 == self.msgs.len() || (i + 1).is_multiple_of(ACK_EVERY)
    }
}

/// A packet of the exchange. PSNs are offsets from the train's first PSN: `Req` carries
/// its message and the offset within it (a READ: the response it asks for first), the
/// others the train offset they name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Req {
        msg: u32,
        off: u32,
        retransmit: bool,
    },
    /// Acknowledges request packets up to and including `upto`.
    Ack {
        upto: u32,
    },
    ReadResponse {
        msg: u32,
        k: u32,
    },
    AtomicAck {
        msg: u32,
    },
    NakSeq {
        expected: u32,
    },
    RnrNak {
        msg: u32,
    },
    /// A NAK for an error of the request (remote access, invalid request, remote
    /// operation): `Outcome::Fail` of the commit.
    NakError {
        msg: u32,
    },
}

impl Wire {
    fn to_responder(self) -> bool {
        matches!(self, Wire::Req { .. })
    }
}

/// The two ends' side effects.
pub(crate) trait Ends {
    /// The responder executes message `msg` (called at most once per message, except
    /// after an RNR NAK, which undoes nothing because nothing was done).
    fn commit(&mut self, st: &mut FabricState, msg: u32) -> Outcome;
    /// `w` was put on the wire at `t` (for capture).
    fn sent(&mut self, st: &mut FabricState, t: u64, w: Wire);
}

/// How one message's delivery ended.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// The responder's answer reached the requester: the commit's outcome.
    Answered(Outcome),
    /// The responder had no receive WQE (RNR NAK received).
    Rnr,
    /// No answer after the last retry. `committed`: what the responder did if it
    /// executed the message anyway (its answers were lost).
    RetryExceeded { committed: Option<Outcome> },
}

impl Delivery {
    /// Whether the train goes on after this message.
    fn goes_on(&self) -> bool {
        matches!(self, Delivery::Answered(Outcome::Done { .. } | Outcome::DoneInline { .. }))
    }
}

/// The local ACK timeout of code `t` (IBA 9.7.6.1.3): 4.096 µs × 2^t. Code 0
/// means "wait forever"; it is modelled as 31 (about 2.4 h of simulated time),
/// so that a lost packet still ends in bounded simulated time [model choice].
pub(crate) fn local_ack_timeout_ns(t: u8) -> u64 {
    let t = if t == 0 { 31 } else { t.min(31) };
    4096u64 << t
}

/// The responder's side of a train of at most `N` messages.
struct Responder<const N: usize> {
    /// The train offset it expects next.
    epsn: u32,
    /// A NAK was sent for the gap at `epsn` (or an RNR NAK for the message there).
    nak_sent: bool,
    /// It NAKed an error and moved to ERR: it ignores everything after.
    dead: bool,
    /// What each message's execution gave (kept for duplicates).
    committed: [Option<Outcome>; N],
}

/// The requester's side of a train of at most `N` messages.
struct Requester<const N: usize> {
    /// Train offsets acknowledged (everything below).
    acked: u32,
    /// Responses received in order, per message (READ / atomic).
    got: [u32; N],
    /// Messages whose answer is complete.
    complete: [bool; N],
    /// The first message not yet retired.
    first: usize,
    /// The message an RNR NAK or an error NAK named.
    stopped: Option<(usize, Wire)>,
    retries: u8,
}

/// The train offset of each message's first PSN, and (after the last) of the PSN after
/// the train; at most [`MAX_TRAIN`] messages are counted.
#[inline]
pub(crate) fn offsets(msgs: &[Shape]) -> Offsets {
    let mut base = [0u32; MAX_TRAIN + 1];
    let mut at = 0u32;
    for (i, m) in msgs.iter().take(MAX_TRAIN).enumerate() {
        base[i] = at;
        at += m.span();
        base[i + 1] = at;
    }
    base
}

/// Delivers the train `t` to a responder that exists (a peer that does not is
/// `lossy::silent_peer`: only the clock moves). Returns how each message ended, in order,
/// up to and including the one the train ended at (any after it were not delivered).
/// A train holds at most `N` (and [`MAX_TRAIN`]) messages: any beyond are not delivered.
/// (`N` sizes the bookkeeping: a train of one keeps none for fifteen more.)
pub(crate) fn deliver<const N: usize>(
    st: &mut FabricState,
    t: &Train,
    ends: &mut impl Ends,
    out: &mut Deliveries<N>,
) {
    // The queue's storage is kept from one delivery to the next (two allocations per
    // message otherwise).
    let mut q = std::mem::take(&mut st.net.queue);
    q.clear();
    deliver_on(st, t, ends, out, &mut q);
    st.net.queue = q;
}

/// [`deliver`] with the (empty) queue `q`.
fn deliver_on<const N: usize>(
    st: &mut FabricState,
    t: &Train,
    ends: &mut impl Ends,
    out: &mut Deliveries<N>,
    q: &mut Queue,
) {
    let t = &Train { msgs: &t.msgs[..t.msgs.len().min(N).min(MAX_TRAIN)], ..*t };
    let n = t.msgs.len();
    let base = offsets(t.msgs);
    let base = &base[..=n];
    // The message that holds train offset `psn`.
    let msg_of = |psn: u32| base.partition_point(|&b| b <= psn).saturating_sub(1).min(n - 1);
    let timeout_ns = local_ack_timeout_ns(t.timeout);
    let mut now = st.net.now_ns;
    let mut rs =
        Responder { epsn: 0, nak_sent: false, dead: false, committed: std::array::from_fn(|_| None) };
    let mut rq = Requester {
        acked: 0,
        got: [0; N],
        complete: [false; N],
        first: 0,
        stopped: None,
        retries: t.retry_cnt,
    };

    let mut last_tx = transmit(st, q, ends, t, 0, 0, now, false);
    loop {
        while let Some((at_ns, w)) = q.pop() {
            now = now.max(at_ns);
            if let Wire::Req { msg, off, .. } = w {
                respond(st, q, ends, t, base, &mut rs, now, msg as usize, off);
                continue;
            }
            // Requester: what the answer says, then retire messages in order.
            match w {
                Wire::Ack { upto } => rq.acked = rq.acked.max(upto + 1),
                Wire::ReadResponse { msg, k } => {
                    let i = msg as usize;
                    if k == rq.got[i] {
                        rq.got[i] += 1;
                    }
                    rq.complete[i] |= rq.got[i] == t.msgs[i].resp_pkts;
                    rq.acked = rq.acked.max(base[i]);
                }
                Wire::AtomicAck { msg } => {
                    rq.complete[msg as usize] = true;
                    rq.acked = rq.acked.max(base[msg as usize]);
                }
                Wire::RnrNak { msg } | Wire::NakError { msg } => {
                    rq.acked = rq.acked.max(base[msg as usize]);
                    if rq.stopped.is_none_or(|(s, _)| s >= msg as usize) && msg as usize >= rq.first {
                        rq.stopped = Some((msg as usize, w));
                    }
                }
                Wire::NakSeq { expected } => {
                    st.hosts[t.req].stats.seq_naks += 1;
                    if expected >= rq.acked {
                        // Everything before `expected` is acknowledged.
                        rq.acked = expected;
                        if retire(t, base, &mut rq, &mut rs, out) {
                            return finish(st, now);
                        }
                        if rq.retries == 0 {
                            give_up(&mut rq, &mut rs, out);
                            return finish(st, now);
                        }
                        rq.retries -= 1;
                        // Go back to the PSN the responder expects, and everything after.
                        let i = msg_of(expected);
                        let from = if t.msgs[i].read_like() { rq.got[i] } else { expected - base[i] };
                        last_tx = transmit(st, q, ends, t, i, from, now, true);
                    }
                }
                Wire::Req { .. } => {}
            }
            if retire(t, base, &mut rq, &mut rs, out) {
                return finish(st, now);
            }
        }
        // Nothing in flight and the train unfinished: the local ACK timer runs out.
        now = now.max(last_tx + timeout_ns);
        st.hosts[t.req].stats.ack_timeouts += 1;
        if rq.retries == 0 {
            give_up(&mut rq, &mut rs, out);
            return finish(st, now);
        }
        rq.retries -= 1;
        // Again from the first unfinished message: where its answer stopped.
        let i = rq.first;
        let from = if t.msgs[i].read_like() {
            rq.got[i].min(t.msgs[i].resp_pkts - 1)
        } else {
            rq.acked.saturating_sub(base[i]).min(t.msgs[i].req_pkts - 1)
        };
        last_tx = transmit(st, q, ends, t, i, from, now, true);
    }
}

/// Retires the messages the requester has complete answers for, in order, into `out`;
/// true when the train is over (every message retired, or it stopped at one).
fn retire<const N: usize>(
    t: &Train,
    base: &[u32],
    rq: &mut Requester<N>,
    rs: &mut Responder<N>,
    out: &mut Deliveries<N>,
) -> bool {
    while rq.first < t.msgs.len() {
        let i = rq.first;
        let m = &t.msgs[i];
        let done = rq.complete[i] || (!m.read_like() && rq.acked >= base[i + 1]);
        if done {
            // Whatever completes the message was sent by the responder after it
            // executed it: `committed` holds its outcome.
            debug_assert!(rs.committed[i].is_some(), "message {i} answered, never executed");
            let o = rs.committed[i].take().unwrap_or(Outcome::Done { byte_cnt: 0 });
            let d = Delivery::Answered(o);
            let on = d.goes_on();
            out.push(d);
            rq.first += 1;
            if !on {
                return true;
            }
            continue;
        }
        return match rq.stopped {
            Some((s, Wire::RnrNak { .. })) if s == i => {
                out.push(Delivery::Rnr);
                true
            }
            Some((s, _)) if s == i => {
                debug_assert!(rs.committed[i].is_some(), "message {i} NAKed, never executed");
                let o = rs.committed[i].take().unwrap_or(Outcome::Done { byte_cnt: 0 });
                out.push(Delivery::Answered(o));
                true
            }
            _ => false,
        };
    }
    true
}

/// Retries exceeded at the first unfinished message.
fn give_up<const N: usize>(rq: &mut Requester<N>, rs: &mut Responder<N>, out: &mut Deliveries<N>) {
    if let Some(c) = rs.committed.get_mut(rq.first) {
        out.push(Delivery::RetryExceeded { committed: c.take() });
    }
}

/// The responder takes request packet `off` of message `i`.
#[allow(clippy::too_many_arguments)]
fn respond<const N: usize>(
    st: &mut FabricState,
    q: &mut Queue,
    ends: &mut impl Ends,
    t: &Train,
    base: &[u32],
    rs: &mut Responder<N>,
    now: u64,
    i: usize,
    off: u32,
) {
    if rs.dead {
        return;
    }
    let m = &t.msgs[i];
    let psn = base[i] + off;
    let ok = |o: &Option<Outcome>| matches!(o, Some(Outcome::Done { .. } | Outcome::DoneInline { .. }));
    let mut reply = None;
    let mut read_from = None;
    if m.read_like() {
        if psn == rs.epsn && off == 0 {
            let o = ends.commit(st, i as u32);
            match o {
                Outcome::Rnr | Outcome::Restart | Outcome::Pending => {
                    rs.nak_sent = true;
                    reply = Some(Wire::RnrNak { msg: i as u32 });
                }
                o => {
                    rs.committed[i] = Some(o);
                    if ok(&rs.committed[i]) {
                        rs.epsn = base[i + 1];
                        rs.nak_sent = false;
                        read_from = Some(0);
                    } else {
                        reply = Some(Wire::NakError { msg: i as u32 });
                        rs.dead = responder_dies(&rs.committed[i]);
                    }
                }
            }
        } else if psn < rs.epsn {
            // A duplicate READ or atomic request: answer again (atomics from the saved
            // result), never execute again.
            st.hosts[t.resp].stats.duplicates += 1;
            if ok(&rs.committed[i]) {
                read_from = Some(off);
            } else {
                reply = Some(Wire::NakError { msg: i as u32 });
            }
        } else if !rs.nak_sent {
            rs.nak_sent = true;
            reply = Some(Wire::NakSeq { expected: rs.epsn });
        }
    } else if psn == rs.epsn {
        rs.epsn += 1;
        rs.nak_sent = false;
        if off + 1 == m.req_pkts {
            match ends.commit(st, i as u32) {
                // (`respond` never restarts: every host is held here.)
                Outcome::Rnr | Outcome::Restart | Outcome::Pending => {
                    rs.epsn = base[i]; // nothing accepted: the message starts over
                    rs.nak_sent = true;
                    reply = Some(Wire::RnrNak { msg: i as u32 });
                }
                o @ (Outcome::Done { .. } | Outcome::DoneInline { .. }) => {
                    rs.committed[i] = Some(o);
                    if t.ack_req(i as u32) {
                        reply = Some(Wire::Ack { upto: rs.epsn - 1 });
                    }
                }
                o @ Outcome::Fail { .. } => {
                    rs.committed[i] = Some(o);
                    reply = Some(Wire::NakError { msg: i as u32 });
                    rs.dead = responder_dies(&rs.committed[i]);
                }
            }
        }
    } else if psn < rs.epsn {
        st.hosts[t.resp].stats.duplicates += 1;
        reply = Some(match &rs.committed[i] {
            Some(Outcome::Fail { .. }) => Wire::NakError { msg: i as u32 },
            _ => Wire::Ack { upto: rs.epsn - 1 },
        });
    } else if !rs.nak_sent {
        rs.nak_sent = true;
        reply = Some(Wire::NakSeq { expected: rs.epsn });
    }
    if let Some(w) = reply {
        ends.sent(st, now, w);
        q.put(st, t, now, w);
    }
    if let Some(from) = read_from {
        let mut at = now;
        for k in from..m.resp_pkts {
            let w = if m.atomic {
                Wire::AtomicAck { msg: i as u32 }
            } else {
                Wire::ReadResponse { msg: i as u32, k }
            };
            ends.sent(st, at, w);
            q.put(st, t, at, w);
            at += PACKET_GAP_NS;
        }
    }
}

/// A responder whose NAK kills it (an RC QP) ignores everything after it.
fn responder_dies(o: &Option<Outcome>) -> bool {
    matches!(o, Some(Outcome::Fail { responder: Some(_), .. }))
}

fn finish(st: &mut FabricState, now: u64) {
    st.net.now_ns = st.net.now_ns.max(now);
}

/// Sends, back to back from `t0`, the request packets of message `i` from offset `from`
/// (a READ: the one request asking for responses from there), then every request packet
/// of the messages after it; returns the time of the last.
#[allow(clippy::too_many_arguments)]
fn transmit(
    st: &mut FabricState,
    q: &mut Queue,
    ends: &mut impl Ends,
    t: &Train,
    i: usize,
    from: u32,
    t0: u64,
    retransmit: bool,
) -> u64 {
    let mut at = t0;
    let mut last = t0;
    for (j, m) in t.msgs.iter().enumerate().skip(i) {
        let offs = match (m.read_like(), j == i) {
            (true, true) => from..from + 1,
            (true, false) => 0..1,
            (false, true) => from..m.req_pkts,
            (false, false) => 0..m.req_pkts,
        };
        for off in offs {
            let w = Wire::Req { msg: j as u32, off, retransmit };
            if retransmit {
                st.hosts[t.req].stats.retransmits += 1;
            }
            ends.sent(st, at, w);
            q.put(st, t, at, w);
            last = at;
            at += PACKET_GAP_NS;
        }
    }
    last
}

/// Packets in flight, by arrival time (ties in sending order): kept sorted, each new one
/// put in place from the back. On a link without reordering or jitter every packet
/// arrives after the one sent before it, so that is one step, and taking the next is
/// one (a binary heap took both in log steps, with a side table).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    q: VecDeque<(u64, Wire)>,
}

impl Queue {
    /// Puts `w`, sent at `t`, on the link: its copies that arrive are queued.
    fn put(&mut self, st: &mut FabricState, tr: &Train, t: u64, w: Wire) {
        let (a, b) = if w.to_responder() { (tr.req, tr.resp) } else { (tr.resp, tr.req) };
        let fate = st.net.fate(a, b, t);
        if fate.lost {
            st.hosts[a].stats.link_drops += 1;
        }
        if fate.corrupted {
            st.hosts[b].stats.icrc_errors += 1;
        }
        for at in fate.arrivals.into_iter().flatten() {
            // After every packet arriving at or before `at`.
            let mut i = self.q.len();
            while i > 0 && self.q[i - 1].0 > at {
                i -= 1;
            }
            if i == self.q.len() {
                self.q.push_back((at, w));
            } else {
                self.q.insert(i, (at, w));
            }
        }
    }

    fn clear(&mut self) {
        self.q.clear();
    }

    fn pop(&mut self) -> Option<(u64, Wire)> {
        self.q.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;
    use crate::hosts::{FabricState, Shared};
    use crate::{FabricConfig, HostConfig, NicStats};

    /// Two hosts, a and b, with the network model seeded with 1.
    fn fabric() -> Shared {
        let s = Shared::new(FabricConfig::default(), crate::net::Net::new(1));
        s.push(Host::new(0, HostConfig::infiniband("a", 1)));
        s.push(Host::new(1, HostConfig::infiniband("b", 2)));
        s
    }

    /// What a run leaves: each host's counters, the simulated time.
    struct Seen {
        a: NicStats,
        b: NicStats,
        now_ns: u64,
    }

    /// Records what went on the wire and counts executions; message `rnr` finds no
    /// receive (once), message `fail` fails (an RC responder's NAK).
    #[derive(Default)]
    struct Log {
        commits: u32,
        sent: Vec<Wire>,
        rnr: Option<u32>,
        fail: Option<u32>,
    }

    impl Ends for Log {
        fn commit(&mut self, _: &mut FabricState, msg: u32) -> Outcome {
            if self.rnr == Some(msg) {
                self.rnr = None;
                return Outcome::Rnr;
            }
            self.commits += 1;
            if self.fail == Some(msg) {
                return Outcome::Fail { synd: 0x13, responder: Some((1, 7)) };
            }
            Outcome::Done { byte_cnt: msg + 1 }
        }
        fn sent(&mut self, _: &mut FabricState, _: u64, w: Wire) {
            self.sent.push(w);
        }
    }

    fn msg(req_pkts: u32, resp_pkts: u32, atomic: bool) -> Shape {
        Shape { req_pkts, resp_pkts, atomic }
    }

    /// A train of `msgs` from host 0 to host 1 (timeout 4, three retries), the link's
    /// fates scripted (true: lost).
    fn train(msgs: &[Shape], script: &[bool]) -> (Seen, Log, Vec<Delivery>) {
        train_with(msgs, script, Log::default())
    }

    fn train_with(msgs: &[Shape], script: &[bool], mut log: Log) -> (Seen, Log, Vec<Delivery>) {
        let f = fabric();
        let mut st = f.all();
        st.net.script = script.iter().copied().collect();
        let t = Train { req: 0, resp: 1, msgs, timeout: 4, retry_cnt: 3 };
        let mut d = Deliveries::<MAX_TRAIN>::new();
        deliver(&mut st, &t, &mut log, &mut d);
        let d = d.into_iter().collect();
        let seen = Seen { a: st.hosts[0].stats, b: st.hosts[1].stats, now_ns: st.net.now_ns };
        (seen, log, d)
    }

    /// A train of one message: how it ended.
    fn run(m: Shape, script: &[bool]) -> (Seen, Log, Delivery) {
        let (seen, log, mut d) = train(&[m], script);
        assert_eq!(d.len(), 1, "{d:?}");
        (seen, log, d.remove(0))
    }

    const fn req(off: u32, retransmit: bool) -> Wire {
        Wire::Req { msg: 0, off, retransmit }
    }

    const fn req_of(msg: u32, off: u32, retransmit: bool) -> Wire {
        Wire::Req { msg, off, retransmit }
    }

    /// The byte counts of the messages answered with success, in order.
    fn done(d: &[Delivery]) -> Vec<u32> {
        d.iter()
            .map(|d| match d {
                Delivery::Answered(Outcome::Done { byte_cnt }) => *byte_cnt,
                other => panic!("not a success: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_train_goes_back_to_back_and_one_ack_retires_it() {
        // Three one-packet WRITEs: sent without waiting, one ACK (asked for on the last)
        // for the three, each executed once and retired in order.
        let w = msg(1, 0, false);
        let (st, log, d) = train(&[w, w, w], &[]);
        assert_eq!(
            log.sent,
            [req_of(0, 0, false), req_of(1, 0, false), req_of(2, 0, false), Wire::Ack { upto: 2 }]
        );
        assert_eq!(done(&d), [1, 2, 3]);
        assert_eq!(log.commits, 3);
        // Three packets 100 ns apart, then the ACK: two link latencies after the last.
        assert_eq!(st.now_ns, 2 * PACKET_GAP_NS + 2 * crate::net::LINK_LATENCY_NS);
    }

    #[test]
    fn acks_are_asked_for_every_eighth_message_and_on_the_last() {
        let w = msg(1, 0, false);
        let (_, log, d) = train(&[w; 10], &[]);
        let acks: Vec<Wire> = log.sent.iter().copied().filter(|w| !w.to_responder()).collect();
        assert_eq!(acks, [Wire::Ack { upto: 7 }, Wire::Ack { upto: 9 }]);
        assert_eq!(done(&d).len(), 10);
    }

    #[test]
    fn a_read_response_acknowledges_the_write_before_it() {
        // WRITE (2 packets), READ (3 responses), WRITE: PSNs 0-1, 2-4, 5. The WRITE
        // before the READ asks for no ACK: the READ's response retires it.
        let (_, log, d) = train(&[msg(2, 0, false), msg(1, 3, false), msg(1, 0, false)], &[]);
        let r = |k| Wire::ReadResponse { msg: 1, k };
        assert_eq!(
            log.sent,
            [
                req_of(0, 0, false),
                req_of(0, 1, false),
                req_of(1, 0, false),
                req_of(2, 0, false),
                r(0),
                r(1),
                r(2),
                Wire::Ack { upto: 5 },
            ]
        );
        assert_eq!(done(&d), [1, 2, 3]);
    }

    #[test]
    fn a_lost_packet_goes_back_n_across_messages() {
        // Three one-packet WRITEs, the second lost: the third is a gap (NAK naming PSN 1),
        // and the requester sends 1 and 2 again; the first is acknowledged by the NAK.
        let w = msg(1, 0, false);
        let (st, log, d) = train(&[w, w, w], &[false, true, false]);
        assert_eq!(
            log.sent,
            [
                req_of(0, 0, false),
                req_of(1, 0, false),
                req_of(2, 0, false),
                Wire::NakSeq { expected: 1 },
                req_of(1, 0, true),
                req_of(2, 0, true),
                Wire::Ack { upto: 2 },
            ]
        );
        assert_eq!(done(&d), [1, 2, 3]);
        assert_eq!((log.commits, st.a.seq_naks, st.a.retransmits), (3, 1, 2));
    }

    #[test]
    fn an_rnr_nak_ends_the_train_at_its_message() {
        // The second of three SENDs finds no receive: the first is retired (the RNR NAK
        // acknowledges it), the second waits, the third is dropped without another NAK.
        let w = msg(1, 0, false);
        let (_, log, d) = train_with(&[w, w, w], &[], Log { rnr: Some(1), ..Log::default() });
        assert_eq!(
            log.sent,
            [req_of(0, 0, false), req_of(1, 0, false), req_of(2, 0, false), Wire::RnrNak { msg: 1 }]
        );
        assert!(matches!(d[..], [Delivery::Answered(Outcome::Done { byte_cnt: 1 }), Delivery::Rnr]), "{d:?}");
        assert_eq!(log.commits, 1);
    }

    #[test]
    fn an_error_nak_ends_the_train_and_the_responder_takes_nothing_after() {
        let w = msg(1, 0, false);
        let (_, log, d) = train_with(&[w, w, w], &[], Log { fail: Some(1), ..Log::default() });
        assert_eq!(
            log.sent,
            [req_of(0, 0, false), req_of(1, 0, false), req_of(2, 0, false), Wire::NakError { msg: 1 }]
        );
        assert!(
            matches!(
                d[..],
                [
                    Delivery::Answered(Outcome::Done { .. }),
                    Delivery::Answered(Outcome::Fail { synd: 0x13, .. })
                ]
            ),
            "{d:?}"
        );
        assert_eq!(log.commits, 2, "the third is not executed");
    }

    #[test]
    fn lost_middle_packet_is_a_gap_and_retransmitted_from_its_psn() {
        // Three packets; the second is lost. The third is a gap: NAK with the expected
        // PSN; the requester goes back to packet 1.
        let (st, log, d) = run(msg(3, 0, false), &[false, true, false]);
        assert!(matches!(d, Delivery::Answered(Outcome::Done { .. })), "{d:?}");
        assert_eq!(
            log.sent,
            [
                req(0, false),
                req(1, false),
                req(2, false),
                Wire::NakSeq { expected: 1 },
                req(1, true),
                req(2, true),
                Wire::Ack { upto: 2 }
            ]
        );
        assert_eq!(log.commits, 1);
        assert_eq!((st.a.seq_naks, st.a.retransmits), (1, 2));
    }

    #[test]
    fn lost_ack_makes_a_duplicate_that_is_not_executed_again() {
        // The request arrives, the ACK is lost; after the timeout the retransmitted
        // request is a duplicate: acknowledged again, executed once.
        let (st, log, d) = run(msg(1, 0, false), &[false, true]);
        assert!(matches!(d, Delivery::Answered(_)));
        assert_eq!(log.sent, [req(0, false), Wire::Ack { upto: 0 }, req(0, true), Wire::Ack { upto: 0 }]);
        assert_eq!(log.commits, 1);
        assert_eq!((st.b.duplicates, st.a.ack_timeouts), (1, 1));
        // One timeout of 4.096 µs × 2^4 after the first transmission, plus two latencies.
        assert_eq!(st.now_ns, (4096 << 4) + 2 * crate::net::LINK_LATENCY_NS);
    }

    #[test]
    fn lost_atomic_response_is_replayed_not_executed_again() {
        let (_, log, d) = run(msg(1, 1, true), &[false, true]);
        assert!(matches!(d, Delivery::Answered(_)));
        assert_eq!(
            log.sent,
            [req(0, false), Wire::AtomicAck { msg: 0 }, req(0, true), Wire::AtomicAck { msg: 0 }]
        );
        assert_eq!(log.commits, 1);
    }

    #[test]
    fn read_resumes_at_the_first_missing_response() {
        // Responses 0, 1 arrive, 2 is lost: the request is sent again for response 2
        // only; the READ is not executed again.
        let (_, log, d) = run(msg(1, 3, false), &[false, false, false, true]);
        assert!(matches!(d, Delivery::Answered(_)));
        let w = |k| Wire::ReadResponse { msg: 0, k };
        assert_eq!(log.sent, [req(0, false), w(0), w(1), w(2), req(2, true), w(2)]);
        assert_eq!(log.commits, 1);
    }

    #[test]
    fn silence_exhausts_the_retries_on_the_clock() {
        // retry_cnt 3: four transmissions, four timeouts, then retries exceeded.
        let (st, log, d) = run(msg(1, 0, false), &[true; 8]);
        assert!(matches!(d, Delivery::RetryExceeded { committed: None }), "{d:?}");
        assert_eq!(log.sent, [req(0, false), req(0, true), req(0, true), req(0, true)]);
        assert_eq!(log.commits, 0);
        assert_eq!(st.now_ns, 4 * (4096 << 4));
        assert_eq!((st.a.ack_timeouts, st.a.link_drops), (4, 4));
    }

    #[test]
    fn executed_but_never_acknowledged_is_retry_exceeded_with_the_commit() {
        // Every request arrives, every ACK is lost: executed once, and the requester
        // still ends with retries exceeded (what a real NIC reports too).
        let script: Vec<bool> = (0..8).map(|i| i % 2 == 1).collect();
        let (_, log, d) = run(msg(1, 0, false), &script);
        assert!(matches!(d, Delivery::RetryExceeded { committed: Some(_) }), "{d:?}");
        assert_eq!(log.commits, 1);
    }
}
