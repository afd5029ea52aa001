//! Execution over the network model ([`crate::net`]): an RC or DC message travels as
//! packets with real PSNs, ACKs and NAKs and is retransmitted as the link demands; a UD
//! datagram is one packet the link may lose. Every packet goes to the capture when one
//! runs. The engine enters here only when faults are configured or a capture runs.

use crate::dma;
use crate::fixed::Fixed;
use crate::hosts::FabricState;
use crate::net::packet::{self, aeth, op, AtomicEth, Packet, Pos, Reth};
use crate::net::transport::{self, Delivery, Ends, Shape, Train, Wire, MAX_TRAIN};
use crate::net::PACKET_GAP_NS;
use crate::psn;
use crate::responder::{self, Datagram, Outcome, Request, Target};
use crate::wire::{opcode, syndrome};

/// The RNR NAK timer of IBA table 45 in nanoseconds (code 0: 655.36 ms).
pub(crate) fn rnr_timer_ns(code: u8) -> u64 {
    const UNITS_10US: [u64; 32] = [
        65_536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
        3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    // Table values in units of 10 µs (code 1 = 0.01 ms).
    UNITS_10US[usize::from(code & 31)] * 10_000
}

/// What the packets of a train of RC / DC messages carry, and the responder's side
/// effects.
struct TrainEnds<'a, 'w, const N: usize> {
    tgt: Target,
    /// The messages, as the responder receives each once its last packet is in.
    rqs: &'a [Request<'a, 'w>],
    req: usize,
    qpn: u32,
    mtu: u32,
    base_psn: u32,
    /// Each message's first PSN, as an offset from `base_psn` ([`transport::offsets`]).
    offs: transport::Offsets,
    shapes: &'a [Shape],
    /// The message bytes (SEND / WRITE) or the bytes read (READ, atomic), for capture.
    data: [Option<Vec<u8>>; N],
    /// What each message's execution gave: success, or the syndrome of its NAK.
    committed: [Option<(bool, u8)>; N],
}

impl<const N: usize> Ends for TrainEnds<'_, '_, N> {
    fn commit(&mut self, st: &mut FabricState, msg: u32) -> Outcome {
        let i = msg as usize;
        let rq = &self.rqs[i];
        let endian = st.cfg.atomic_endianness;
        let o = responder::respond(&mut st.hosts[self.tgt.h], endian, self.tgt, rq);
        // A NAK travels: the requester's error CQE comes later, maybe in another pass.
        if let Outcome::Fail { .. } = &o {
            if let Some(why) = crate::why::take() {
                st.hosts[self.req].why.pend(self.qpn, why);
            }
        }
        match &o {
            Outcome::Done { .. } => {
                self.committed[i] = Some((true, 0));
                if st.net.capture.is_some()
                    && matches!(
                        rq.op,
                        opcode::RDMA_READ
                            | opcode::ATOMIC_CS
                            | opcode::ATOMIC_FA
                            | opcode::ATOMIC_MASKED_CS
                            | opcode::ATOMIC_MASKED_FA
                    )
                {
                    let mut d = vec![0u8; rq.len as usize];
                    let mut off = 0;
                    for r in rq.sink.regions() {
                        let n = (r.len() as usize).min(d.len() - off);
                        dma::read(r, 0, &mut d[off..off + n]);
                        off += n;
                    }
                    self.data[i] = Some(d);
                }
            }
            Outcome::DoneInline { byte_cnt, data } => {
                self.committed[i] = Some((true, 0));
                self.data[i] = Some(data[..*byte_cnt as usize].to_vec());
            }
            Outcome::Fail { synd, .. } => self.committed[i] = Some((false, *synd)),
            // Nothing done (`respond` never restarts: every host is held here).
            Outcome::Rnr | Outcome::Restart | Outcome::Pending => {}
        }
        o
    }

    #[inline]
    fn sent(&mut self, st: &mut FabricState, t: u64, wire: Wire) {
        if st.net.capture.is_some() {
            self.capture(st, t, wire);
        }
    }
}

impl<const N: usize> TrainEnds<'_, '_, N> {
    /// Records packet `wire`, sent at `t`, in the running capture.
    #[cold]
    fn capture(&mut self, st: &mut FabricState, t: u64, wire: Wire) {
        let i = match wire {
            Wire::Req { msg, .. }
            | Wire::ReadResponse { msg, .. }
            | Wire::AtomicAck { msg }
            | Wire::RnrNak { msg }
            | Wire::NakError { msg } => msg as usize,
            Wire::Ack { .. } | Wire::NakSeq { .. } => 0,
        };
        let w = &self.rqs[i];
        let op_ = w.op;
        let (h, rh, rq) = (self.req, self.tgt.h, self.tgt.report_qpn);
        let mtu = self.mtu as usize;
        if matches!(
            op_,
            opcode::SEND
                | opcode::SEND_IMM
                | opcode::SEND_INVAL
                | opcode::RDMA_WRITE
                | opcode::RDMA_WRITE_IMM
        ) && self.data[i].is_none()
        {
            let mut d = vec![0u8; w.len as usize];
            dma::gather(w.srcs, &mut d);
            self.data[i] = Some(d);
        }
        let data = self.data[i].as_deref().unwrap_or(&[]);
        let chunk = |k: u32| {
            let from = (k as usize * mtu).min(data.len());
            &data[from..(from + mtu).min(data.len())]
        };
        // A PSN: train offset `off`, or offset `off` in this message.
        let psn = |off: u32| self.base_psn.wrapping_add(off) & 0xff_ffff;
        let mpsn = |off: u32| psn(self.offs[i] + off);
        let ack_req =
            Train { req: h, resp: rh, msgs: self.shapes, timeout: 0, retry_cnt: 0 }.ack_req(i as u32);
        let p = match wire {
            Wire::Req { off, .. } => {
                let mut p = Packet::new(h, rh, 0, self.qpn, rq, mpsn(off));
                let n = (w.len as u32).div_ceil(self.mtu).max(1);
                let pos = Pos::of(off, n);
                let last = matches!(pos, Pos::Last | Pos::Only);
                match op_ {
                    opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {
                        p.opcode =
                            packet::send_opcode(pos, op_ == opcode::SEND_IMM, op_ == opcode::SEND_INVAL);
                        p.payload = chunk(off);
                        p.se = last && w.se;
                        p.imm = (last && op_ == opcode::SEND_IMM).then_some(w.imm);
                        p.ieth = (last && op_ == opcode::SEND_INVAL).then_some(w.imm);
                        p.ack_req = last && ack_req;
                    }
                    opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
                        let imm = op_ == opcode::RDMA_WRITE_IMM;
                        p.opcode = packet::write_opcode(pos, imm);
                        p.payload = chunk(off);
                        if matches!(pos, Pos::First | Pos::Only) {
                            p.reth = Some(Reth { va: w.raddr, rkey: w.rkey, len: w.len as u32 });
                        }
                        p.imm = (last && imm).then_some(w.imm);
                        p.ack_req = last && ack_req;
                    }
                    opcode::RDMA_READ => {
                        let done = u64::from(off) * mtu as u64;
                        p.opcode = op::READ_REQUEST;
                        p.reth = Some(Reth {
                            va: w.raddr + done,
                            rkey: w.rkey,
                            len: (w.len.saturating_sub(done)) as u32,
                        });
                        p.ack_req = true;
                    }
                    _ => {
                        p.opcode = op::rc_atomic(op::atomic_of(op_).unwrap_or(op::FETCH_ADD));
                        p.atomic = Some(AtomicEth {
                            va: w.raddr,
                            rkey: w.rkey,
                            swap_add: w.swap_add,
                            compare: w.compare,
                        });
                        if w.width != 0 {
                            p.masks = Some(packet::Masks {
                                swap_mask: w.swap_mask,
                                compare_mask: w.compare_mask,
                                width: w.width,
                            });
                        }
                        p.ack_req = true;
                    }
                }
                p
            }
            Wire::Ack { upto } => ack(rh, h, rq, self.qpn, psn(upto), aeth::ACK),
            Wire::NakSeq { expected } => ack(rh, h, rq, self.qpn, psn(expected), aeth::NAK_PSN_SEQ),
            Wire::RnrNak { .. } => {
                let timer = st.hosts[rh].qps.get(&self.tgt.qpn).map_or(0, |q| q.attrs.min_rnr_timer);
                ack(rh, h, rq, self.qpn, mpsn(0), aeth::RNR_NAK | (timer & 31))
            }
            Wire::NakError { .. } => {
                let code = match self.committed[i] {
                    Some((false, syndrome::REMOTE_ACCESS_ERR)) => aeth::NAK_REMOTE_ACCESS,
                    Some((false, syndrome::REMOTE_OP_ERR)) => aeth::NAK_REMOTE_OP,
                    _ => aeth::NAK_INVALID_REQUEST,
                };
                ack(rh, h, rq, self.qpn, mpsn(0), code)
            }
            Wire::ReadResponse { k, .. } => {
                let mut p = Packet::new(rh, h, 0, rq, self.qpn, mpsn(k));
                let pos = Pos::of(k, self.shapes[i].resp_pkts);
                p.opcode = packet::read_response_opcode(pos);
                if pos != Pos::Middle {
                    p.aeth = Some((aeth::ACK, 0));
                }
                p.payload = chunk(k);
                p
            }
            Wire::AtomicAck { .. } => {
                let mut p = ack(rh, h, rq, self.qpn, mpsn(0), aeth::ACK);
                p.opcode = op::ATOMIC_ACKNOWLEDGE;
                let mut b = [0u8; 8];
                let n = data.len().min(8);
                b[..n].copy_from_slice(&data[..n]);
                p.atomic_ack = Some(if w.width != 0 {
                    responder::load_masked(b, w.width, st.cfg.atomic_endianness)
                } else {
                    responder::load_u64(b, st.cfg.atomic_endianness)
                });
                p
            }
        };
        let FabricState { net, hosts, .. } = st;
        if let Some(c) = net.capture.as_mut() {
            c.record(&hosts[p.src].cfg, &hosts[p.dst].cfg, t, &p);
        }
    }
}

/// An ACKNOWLEDGE with AETH `syndrome` (MSN 0: the model keeps no message sequence
/// number [model choice]).
fn ack(src: usize, dst: usize, sqpn: u32, dqpn: u32, psn: u32, syndrome: u8) -> Packet<'static> {
    let mut p = Packet::new(src, dst, op::ACKNOWLEDGE, sqpn, dqpn, psn);
    p.aeth = Some((syndrome, 0));
    p
}

/// Carries RC or DC request `rq` of QP `qpn` of host `h` to `tgt` over the network model:
/// a train of one message ([`execute_train`]).
pub(crate) fn execute(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    tgt: Target,
    rq: &Request<'_, '_>,
) -> Outcome {
    let mut o = Outcomes::<1>::new();
    execute_train(st, h, qpn, tgt, std::slice::from_ref(rq), &mut o);
    o.pop().unwrap_or(Outcome::Restart)
}

/// What the requester learns of each message of a train of at most `N`.
pub(crate) type Outcomes<const N: usize> = Fixed<Outcome, N>;

/// Carries the requests `rqs` of QP `qpn` of host `h`, consecutive on its send queue, to
/// `tgt` over the network model as one train: packets with PSNs, ACKs and NAKs, sent
/// back to back and retransmitted as the link demands ([`transport::deliver`]); the
/// responder takes each message when its last packet is in. Returns what the requester
/// learns of each message (into `outcomes`, empty before), in order, up to and including
/// the one the train ended at (an error, an RNR NAK, retries exceeded): any after it were
/// not carried out. At most `N` (and [`MAX_TRAIN`]) requests travel; any beyond are not
/// carried out.
pub(crate) fn execute_train<const N: usize>(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    tgt: Target,
    rqs: &[Request<'_, '_>],
    outcomes: &mut Outcomes<N>,
) {
    let rqs = &rqs[..rqs.len().min(N).min(MAX_TRAIN)];
    let Some(me) = st.hosts[h].qps.get(&qpn) else {
        outcomes.push(responder::fail(syndrome::LOCAL_QP_OP_ERR));
        return;
    };
    let mtu = me.attrs.path_mtu.max(256);
    let (base_psn, timeout, retry_cnt) = (me.attrs.sq_psn, me.attrs.timeout, me.attrs.retry_cnt);
    let mut shape_of = [Shape { req_pkts: 1, resp_pkts: 0, atomic: false }; N];
    for (s, rq) in shape_of.iter_mut().zip(rqs) {
        let len = rq.len as u32;
        *s = match rq.op {
            opcode::RDMA_READ => Shape { req_pkts: 1, resp_pkts: len.div_ceil(mtu).max(1), atomic: false },
            opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA => {
                Shape { req_pkts: 1, resp_pkts: 1, atomic: true }
            }
            _ => Shape { req_pkts: len.div_ceil(mtu).max(1), resp_pkts: 0, atomic: false },
        };
    }
    let shapes = &shape_of[..rqs.len()];
    let t = Train { req: h, resp: tgt.h, msgs: shapes, timeout, retry_cnt };
    let mut ends = TrainEnds::<N> {
        tgt,
        rqs,
        req: h,
        qpn,
        mtu,
        base_psn,
        offs: transport::offsets(shapes),
        shapes,
        data: std::array::from_fn(|_| None),
        committed: [None; N],
    };
    let mut ds = transport::Deliveries::<N>::new();
    transport::deliver(st, &t, &mut ends, &mut ds);
    // The requester's send PSN moves past every message the responder carried out.
    for (rq, c) in rqs.iter().zip(&ends.committed) {
        if matches!(c, Some((true, _))) {
            psn::advance_sq_psn(&mut st.hosts[h], qpn, rq.pkts);
        }
    }
    for o in ds.into_iter().map(|d| match d {
        Delivery::Answered(o) => o,
        Delivery::Rnr => {
            let timer = st.hosts[tgt.h].qps.get(&tgt.qpn).map_or(0, |q| q.attrs.min_rnr_timer);
            st.net.now_ns += rnr_timer_ns(timer);
            Outcome::Rnr
        }
        Delivery::RetryExceeded { committed } => {
            // A fatal NAK that never arrived still moved the RC responder to ERR.
            let responder = match committed {
                Some(Outcome::Fail { responder, .. }) => responder,
                _ => None,
            };
            Outcome::Fail { synd: syndrome::TRANSPORT_RETRY_EXC_ERR, responder }
        }
    }) {
        outcomes.push(o);
    }
}

/// A requester whose peer does not answer at all (unreachable, not connected): every
/// attempt times out, on the simulated clock, until the retries are spent.
pub(crate) fn silent_peer(st: &mut FabricState, h: usize, qpn: u32) {
    let Some(q) = st.hosts[h].qps.get(&qpn) else { return };
    let tries = u64::from(q.attrs.retry_cnt) + 1;
    st.net.now_ns += tries * transport::local_ack_timeout_ns(q.attrs.timeout);
    let s = &mut st.hosts[h].stats;
    s.ack_timeouts += tries;
    s.retransmits += tries - 1;
}

/// Puts UD datagram `dg` with PSN `psn` on the wire: captured, then lost or not. Returns
/// whether it arrives.
pub(crate) fn datagram(
    st: &mut FabricState,
    h: usize,
    rh: usize,
    qpn: u32,
    psn: u32,
    dg: &Datagram<'_, '_>,
) -> bool {
    let t = st.net.now_ns;
    st.net.now_ns += PACKET_GAP_NS;
    if st.net.capture.is_some() {
        let mut d = vec![0u8; dg.len as usize];
        dma::gather(dg.srcs, &mut d);
        let opcode = if dg.imm.is_some() { op::UD_SEND_ONLY_IMM } else { op::UD_SEND_ONLY };
        let mut p = Packet::new(h, rh, opcode, qpn, dg.dqpn, psn);
        p.qkey = Some(dg.qkey);
        p.imm = dg.imm;
        p.se = dg.se;
        p.payload = &d;
        let FabricState { net, hosts, .. } = st;
        if let Some(c) = net.capture.as_mut() {
            c.record(&hosts[h].cfg, &hosts[rh].cfg, t, &p);
        }
    }
    let fate = st.net.fate(h, rh, t);
    if fate.lost {
        st.hosts[h].stats.link_drops += 1;
    }
    if fate.corrupted {
        st.hosts[rh].stats.icrc_errors += 1;
    }
    // A duplicated datagram is delivered once: the second copy finds the same receive
    // queue and would consume a second WQE [model: duplicates of UD are not modelled].
    fate.arrivals[0].is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rnr_timer_follows_ibas_table() {
        // IBA table 45: code 1 = 0.01 ms, 12 = 0.64 ms, 31 = 491.52 ms, 0 = 655.36 ms.
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(12), 640_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
        assert_eq!(rnr_timer_ns(0), 655_360_000);
    }
}
