//! Reliable delivery of one RC or DC message as packets over a link that may lose,
//! corrupt, delay, duplicate or reorder them (IBA vol. 1, 9.7), on the simulated clock.
//!
//! The requester sends the request packets with consecutive PSNs and waits for the
//! responder's answer; it retransmits (go-back-N) after a NAK for a PSN sequence error,
//! and from its first unacknowledged PSN after its local ACK timeout
//! (4.096 µs × 2^`timeout`); each retransmission costs one of `retry_cnt` retries, and
//! with none left the message ends with retries exceeded. The responder accepts only the
//! PSN it expects: it answers one NAK per gap, and a duplicate (a PSN it already
//! accepted) with a new acknowledgement, never executing the message again: an atomic
//! replays its saved result, a READ sends its response again.
//!
//! Model choices: the responder executes the message once, when its last request packet
//! is accepted in order (data placement by packet is not visible to anyone before that);
//! a message is acknowledged before the requester starts the next one (no pipelining
//! across WQEs); the responder acknowledges the last packet of a message (and answers
//! duplicates), not every packet.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::PACKET_GAP_NS;
use crate::hosts::FabricState;
use crate::responder::Outcome;

/// What one message needs from the network.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg {
    /// Requester and responder host.
    pub req: usize,
    pub resp: usize,
    /// Request packets (SEND / WRITE: one per MTU; READ, atomic: one).
    pub req_pkts: u32,
    /// Response packets carrying data (READ: one per MTU; atomic: one; else none).
    pub resp_pkts: u32,
    /// An atomic: its one response is an ATOMIC ACKNOWLEDGE.
    pub atomic: bool,
    /// The QP's local ACK timeout code ([`local_ack_timeout_ns`]).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
}

/// A packet of the exchange. `Req` carries the offset of its PSN from the message's
/// first PSN (READ: the response PSN it asks for first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Req {
        off: u32,
        retransmit: bool,
    },
    /// Acknowledges request packets up to and including `upto`.
    Ack {
        upto: u32,
    },
    ReadResponse {
        k: u32,
    },
    AtomicAck,
    NakSeq {
        expected: u32,
    },
    RnrNak,
    /// A NAK for an error of the request (remote access, invalid request, remote
    /// operation): `Outcome::Fail` of the commit.
    NakError,
}

impl Wire {
    fn to_responder(self) -> bool {
        matches!(self, Wire::Req { .. })
    }
}

/// The two ends' side effects.
pub(crate) trait Ends {
    /// The responder executes the message (called at most once per delivery, except
    /// after an RNR NAK, which undoes nothing because nothing was done).
    fn commit(&mut self, st: &mut FabricState) -> Outcome;
    /// `w` was put on the wire at `t` (for capture).
    fn sent(&mut self, st: &mut FabricState, t: u64, w: Wire);
}

/// How the delivery ended.
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

/// The local ACK timeout of code `t` (IBA 9.7.6.1.3): 4.096 µs × 2^t. Code 0
/// means "wait forever"; it is modelled as 31 (about 2.4 h of simulated time),
/// so that a lost packet still ends in bounded simulated time [model choice].
pub(crate) fn local_ack_timeout_ns(t: u8) -> u64 {
    let t = if t == 0 { 31 } else { t.min(31) };
    4096u64 << t
}

/// Deliver one message to a responder that exists (a peer that does not is
/// `lossy::silent_peer`: only the clock moves).
pub(crate) fn deliver(st: &mut FabricState, m: &Msg, ends: &mut impl Ends) -> Delivery {
    let read_like = m.resp_pkts > 0;
    let timeout_ns = local_ack_timeout_ns(m.timeout);
    let mut retries = m.retry_cnt;
    let mut q = Queue::default();
    let mut now = st.net.now_ns;
    // Requester.
    let mut acked = 0u32; // request packets acknowledged (SEND / WRITE)
    let mut got = 0u32; // response packets received in order (READ / atomic)
                        // Responder.
    let mut epsn = 0u32;
    let mut nak_sent = false;
    let mut committed: Option<Outcome> = None;
    let mut dead = false;

    let first_req = |acked: u32, got: u32| if read_like { got.min(m.resp_pkts - 1) } else { acked };
    let burst = |from: u32| if read_like { from..from + 1 } else { from..m.req_pkts };
    let mut last_tx = transmit(st, &mut q, ends, m, burst(0), now, false);
    loop {
        while let Some((at, w)) = q.pop() {
            now = now.max(at);
            if w.to_responder() {
                let Wire::Req { off, .. } = w else { continue };
                if dead {
                    continue;
                }
                // Responder logic.
                let mut reply = None;
                let mut read_from = None;
                if read_like {
                    if committed.is_none() {
                        if off != 0 {
                            continue;
                        }
                        let o = ends.commit(st);
                        let ok = matches!(o, Outcome::Done { .. } | Outcome::DoneInline { .. });
                        committed = Some(o);
                        if ok {
                            epsn = m.resp_pkts;
                            read_from = Some(0);
                        } else {
                            reply = Some(Wire::NakError);
                            dead = responder_dies(&committed);
                        }
                    } else {
                        // A duplicate READ or atomic request: answer again (atomics from
                        // the saved result), never execute again.
                        st.hosts[m.resp].stats.duplicates += 1;
                        match &committed {
                            Some(Outcome::Done { .. } | Outcome::DoneInline { .. }) => read_from = Some(off),
                            _ => reply = Some(Wire::NakError),
                        }
                    }
                } else if off == epsn {
                    epsn += 1;
                    nak_sent = false;
                    if epsn == m.req_pkts {
                        let o = ends.commit(st);
                        match o {
                            // (`respond` never restarts: every host is held here.)
                            Outcome::Rnr | Outcome::Restart => {
                                epsn = 0; // nothing accepted: the message starts over
                                reply = Some(Wire::RnrNak);
                            }
                            Outcome::Done { .. } | Outcome::DoneInline { .. } => {
                                committed = Some(o);
                                reply = Some(Wire::Ack { upto: m.req_pkts - 1 });
                            }
                            Outcome::Fail { .. } => {
                                committed = Some(o);
                                reply = Some(Wire::NakError);
                                dead = responder_dies(&committed);
                            }
                        }
                    }
                } else if off < epsn {
                    st.hosts[m.resp].stats.duplicates += 1;
                    reply = Some(match &committed {
                        Some(Outcome::Fail { .. }) => Wire::NakError,
                        _ => Wire::Ack { upto: epsn - 1 },
                    });
                } else if !nak_sent {
                    nak_sent = true;
                    reply = Some(Wire::NakSeq { expected: epsn });
                }
                if let Some(w) = reply {
                    ends.sent(st, now, w);
                    q.put(st, m, now, w);
                }
                if let Some(from) = read_from {
                    let mut t = now;
                    for k in from..m.resp_pkts {
                        let w = if m.atomic { Wire::AtomicAck } else { Wire::ReadResponse { k } };
                        ends.sent(st, t, w);
                        q.put(st, m, t, w);
                        t += PACKET_GAP_NS;
                    }
                }
                continue;
            }
            // Requester logic. Whatever completes the message was sent by the
            // responder after it executed it: `committed` holds its outcome.
            let complete = match w {
                Wire::Ack { upto } => {
                    acked = acked.max(upto + 1);
                    !read_like && acked == m.req_pkts
                }
                Wire::ReadResponse { k } => {
                    if k == got {
                        got += 1;
                    }
                    got == m.resp_pkts
                }
                Wire::AtomicAck | Wire::NakError => true,
                _ => false,
            };
            if complete {
                if let Some(o) = committed.take() {
                    return finish(st, now, Delivery::Answered(o));
                }
            }
            match w {
                Wire::RnrNak => {
                    return finish(st, now, Delivery::Rnr);
                }
                Wire::NakSeq { expected } => {
                    st.hosts[m.req].stats.seq_naks += 1;
                    if expected < acked {
                        continue; // stale
                    }
                    acked = expected;
                    if retries == 0 {
                        return finish(st, now, Delivery::RetryExceeded { committed: committed.take() });
                    }
                    retries -= 1;
                    // Go back to the PSN the responder expects.
                    last_tx = transmit(st, &mut q, ends, m, burst(acked), now, true);
                }
                Wire::Req { .. }
                | Wire::Ack { .. }
                | Wire::ReadResponse { .. }
                | Wire::AtomicAck
                | Wire::NakError => {}
            }
        }
        // Nothing in flight and no answer: the local ACK timer runs out.
        now = now.max(last_tx + timeout_ns);
        st.hosts[m.req].stats.ack_timeouts += 1;
        if retries == 0 {
            return finish(st, now, Delivery::RetryExceeded { committed: committed.take() });
        }
        retries -= 1;
        last_tx = transmit(st, &mut q, ends, m, burst(first_req(acked, got)), now, true);
    }
}

/// A responder whose NAK kills it (an RC QP) ignores everything after it.
fn responder_dies(o: &Option<Outcome>) -> bool {
    matches!(o, Some(Outcome::Fail { responder: Some(_), .. }))
}

fn finish(st: &mut FabricState, now: u64, d: Delivery) -> Delivery {
    st.net.now_ns = st.net.now_ns.max(now);
    d
}

/// Sends request packets `offs` back to back from `t`; returns the time of the last.
fn transmit(
    st: &mut FabricState,
    q: &mut Queue,
    ends: &mut impl Ends,
    m: &Msg,
    offs: std::ops::Range<u32>,
    mut t: u64,
    retransmit: bool,
) -> u64 {
    let mut last = t;
    for off in offs {
        let w = Wire::Req { off, retransmit };
        if retransmit {
            st.hosts[m.req].stats.retransmits += 1;
        }
        ends.sent(st, t, w);
        q.put(st, m, t, w);
        last = t;
        t += PACKET_GAP_NS;
    }
    last
}

/// Packets in flight, by arrival time (ties in sending order).
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    wires: Vec<Wire>,
}

impl Queue {
    /// Puts `w`, sent at `t`, on the link: its copies that arrive are queued.
    fn put(&mut self, st: &mut FabricState, m: &Msg, t: u64, w: Wire) {
        let (a, b) = if w.to_responder() { (m.req, m.resp) } else { (m.resp, m.req) };
        let fate = st.net.fate(a, b, t);
        if fate.lost {
            st.hosts[a].stats.link_drops += 1;
        }
        if fate.corrupted {
            st.hosts[b].stats.icrc_errors += 1;
        }
        for at in fate.arrivals.into_iter().flatten() {
            self.heap.push(Reverse((at, self.wires.len())));
            self.wires.push(w);
        }
    }

    fn pop(&mut self) -> Option<(u64, Wire)> {
        self.heap.pop().map(|Reverse((at, i))| (at, self.wires[i]))
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

    /// Records what went on the wire and counts executions.
    struct Log {
        commits: u32,
        sent: Vec<Wire>,
    }

    impl Ends for Log {
        fn commit(&mut self, _: &mut FabricState) -> Outcome {
            self.commits += 1;
            Outcome::Done { byte_cnt: 1 }
        }
        fn sent(&mut self, _: &mut FabricState, _: u64, w: Wire) {
            self.sent.push(w);
        }
    }

    fn msg(req_pkts: u32, resp_pkts: u32, atomic: bool) -> Msg {
        Msg { req: 0, resp: 1, req_pkts, resp_pkts, atomic, timeout: 4, retry_cnt: 3 }
    }

    fn run(m: Msg, script: &[bool]) -> (Seen, Log, Delivery) {
        let f = fabric();
        let mut st = f.all();
        st.net.script = script.iter().copied().collect();
        let mut log = Log { commits: 0, sent: Vec::new() };
        let d = deliver(&mut st, &m, &mut log);
        let seen = Seen { a: st.hosts[0].stats, b: st.hosts[1].stats, now_ns: st.net.now_ns };
        (seen, log, d)
    }

    const fn req(off: u32, retransmit: bool) -> Wire {
        Wire::Req { off, retransmit }
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
        assert_eq!(log.sent, [req(0, false), Wire::AtomicAck, req(0, true), Wire::AtomicAck]);
        assert_eq!(log.commits, 1);
    }

    #[test]
    fn read_resumes_at_the_first_missing_response() {
        // Responses 0, 1 arrive, 2 is lost: the request is sent again for response 2
        // only; the READ is not executed again.
        let (_, log, d) = run(msg(1, 3, false), &[false, false, false, true]);
        assert!(matches!(d, Delivery::Answered(_)));
        let w = |k| Wire::ReadResponse { k };
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
