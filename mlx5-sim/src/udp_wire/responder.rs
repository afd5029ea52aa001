//! The responder's side of the UDP wire: request packets for an RC QP of this host, from
//! a requester in another process.
//!
//! The QP accepts only the PSN it expects (IBA 9.7.4): the next of the message it is
//! reassembling, or its expected PSN. Ahead of it, it sends one PSN sequence error NAK per
//! gap; behind it, the request is a duplicate: a READ is carried out again from the
//! request's RETH (as IBA allows; it changes nothing), anything else is answered from the
//! saved response of the last message, or with an ACK of the PSN before the expected one.
//! A message is carried out once, when its last packet is in (its data is placed then,
//! as the in-process wires do), by [`respond`]: the same checks, memory access, receive
//! consumption and CQEs as a message from a QP of this process.

use std::net::SocketAddrV4;

use super::{psn_add, psn_diff, send, send_raw, From, WireEnd};
use crate::dma::{Region, Sgl, Src};
use crate::hosts::FabricState;
use crate::net::packet::{aeth, op, read_response_opcode, AtomicEth, Packet, Pos, Reth};
use crate::net::roce::Parsed;
use crate::psn::packets;
use crate::responder::{accept_rc, load_u64, respond, Outcome, Request};
use crate::wire::{opcode, syndrome};
use crate::{access, QpState, QpType};

/// The largest message a SEND may carry (IBA: 2^31 bytes).
const MAX_MESSAGE: u64 = 1 << 31;

/// A multi-packet SEND or WRITE being reassembled.
#[derive(Debug)]
pub(crate) struct Assembly {
    /// WRITE (else SEND).
    write: bool,
    first: u32,
    next: u32,
    pkts: u32,
    reth: Option<Reth>,
    data: Vec<u8>,
}

/// A connection's responder state: the message being reassembled, the last response,
/// whether a PSN sequence error NAK was sent for the current gap, the messages carried
/// out (the AETH's MSN), and for a DC connection the PSN expected (an RC QP's is its
/// `rq_psn`; a DCT takes a new DCI's first PSN as it comes).
#[derive(Debug, Default)]
pub(crate) struct Conn {
    asm: Option<Assembly>,
    saved: Option<Saved>,
    nak_sent: bool,
    msn: u32,
    epsn: Option<u32>,
}

/// The last message's response, for duplicates of it.
#[derive(Debug)]
pub(crate) struct Saved {
    first: u32,
    last: u32,
    dgs: Vec<Vec<u8>>,
    to: SocketAddrV4,
}

/// The request packet's family: SEND or WRITE, and where in its message it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    First,
    Middle,
    Last,
    Only,
}

fn part(opc: u8) -> Option<(bool, Part)> {
    Some(match opc {
        op::SEND_FIRST => (false, Part::First),
        op::SEND_MIDDLE => (false, Part::Middle),
        op::SEND_LAST | op::SEND_LAST_IMM | op::SEND_LAST_INV => (false, Part::Last),
        op::SEND_ONLY | op::SEND_ONLY_IMM | op::SEND_ONLY_INV => (false, Part::Only),
        op::WRITE_FIRST => (true, Part::First),
        op::WRITE_MIDDLE => (true, Part::Middle),
        op::WRITE_LAST | op::WRITE_LAST_IMM => (true, Part::Last),
        op::WRITE_ONLY | op::WRITE_ONLY_IMM => (true, Part::Only),
        _ => return None,
    })
}

/// Whether request opcode `opc` (RC, or a DC or manufacturer one made RC) is an atomic,
/// masked or not.
fn is_atomic(opc: u8) -> bool {
    matches!(opc, op::COMPARE_SWAP | op::FETCH_ADD | op::MASKED_COMPARE_SWAP | op::MASKED_FETCH_ADD)
}

/// Whether request opcode `opc` asks for data back (a READ or an atomic).
fn is_read_like(opc: u8) -> bool {
    opc == op::READ_REQUEST || is_atomic(opc)
}

/// The mlx5 opcode of the request whose last (or only) packet has BTH opcode `opc`.
fn wqe_opcode(opc: u8) -> u8 {
    match opc {
        op::SEND_LAST_IMM | op::SEND_ONLY_IMM => opcode::SEND_IMM,
        op::SEND_LAST_INV | op::SEND_ONLY_INV => opcode::SEND_INVAL,
        op::SEND_LAST | op::SEND_ONLY => opcode::SEND,
        op::WRITE_LAST_IMM | op::WRITE_ONLY_IMM => opcode::RDMA_WRITE_IMM,
        op::READ_REQUEST => opcode::RDMA_READ,
        op::COMPARE_SWAP => opcode::ATOMIC_CS,
        op::FETCH_ADD => opcode::ATOMIC_FA,
        op::MASKED_COMPARE_SWAP => opcode::ATOMIC_MASKED_CS,
        op::MASKED_FETCH_ADD => opcode::ATOMIC_MASKED_FA,
        _ => opcode::RDMA_WRITE,
    }
}

/// What a responder QP needs to answer.
struct Me {
    /// The responder QP (an RC QP, or the DCT's QP).
    qpn: u32,
    /// The requester's QPN (the RC peer, or the DCI).
    peer_qpn: u32,
    mtu: u32,
    rnr_timer: u8,
    /// A DCT: its number and DC key, and the DCI's endpoint.
    dc: Option<(u32, u64, SocketAddrV4)>,
}

/// The connection state `me` answers from.
fn conn<'a>(host: &'a mut crate::host::Host, me: &Me) -> Option<&'a mut Conn> {
    let w = host.qps.get_mut(&me.qpn)?.wire.get_or_insert_with(Default::default);
    Some(match me.dc {
        None => &mut w.rc,
        Some((_, _, at)) => w.dc.entry((at, me.peer_qpn)).or_default(),
    })
}

/// DC request packet `p` arrived at host `h` from `from`: for a DCT of this host, with
/// its key (a wrong key is dropped and counted, silence to the DCI).
pub(crate) fn on_dc_request(st: &mut FabricState, h: usize, end: &WireEnd, p: &Parsed<'_>, from: From) {
    let (Some(rc), Some((key, dci))) = (op::dc_rc(p.opcode), p.dceth) else { return };
    let host = &mut st.hosts[h];
    let Some(q) = host.dcts.get(&p.dqpn).and_then(|n| host.qps.get(n)) else {
        host.stats.datagrams_dropped += 1;
        return;
    };
    if q.state != QpState::Rtr || q.qp_type != QpType::Dct {
        host.stats.datagrams_dropped += 1;
        return;
    }
    if q.dc_key != key {
        host.stats.dc_key_violations += 1;
        return;
    }
    let me = Me {
        qpn: q.qpn,
        peer_qpn: dci,
        mtu: q.attrs.path_mtu.max(256),
        rnr_timer: q.attrs.min_rnr_timer,
        dc: Some((p.dqpn, key, from.at)),
    };
    let mut q = *p;
    q.opcode = rc;
    take(st, h, end, &me, &q, from);
}

/// Request packet `p` arrived at host `h` from `from`.
pub(crate) fn on_request(st: &mut FabricState, h: usize, end: &WireEnd, p: &Parsed<'_>, from: From) {
    let host = &mut st.hosts[h];
    let me = match host.qps.get(&p.dqpn) {
        Some(q) if q.qp_type == QpType::Rc && matches!(q.state, QpState::Rtr | QpState::Rts) => {
            match q.attrs.path {
                Some(path) => Me {
                    qpn: q.qpn,
                    peer_qpn: path.dest_qpn,
                    mtu: q.attrs.path_mtu.max(256),
                    rnr_timer: q.attrs.min_rnr_timer,
                    dc: None,
                },
                None => {
                    host.stats.datagrams_dropped += 1;
                    return;
                }
            }
        }
        _ => {
            host.stats.datagrams_dropped += 1;
            return;
        }
    };
    // A masked atomic's manufacturer opcode: its model operation from here on.
    match op::vendor_rc(p.opcode) {
        Some(rc) => take(st, h, end, &me, &Parsed { opcode: rc, ..*p }, from),
        None => take(st, h, end, &me, p, from),
    }
}

/// Request packet `p` for responder `me`: accepted in order (reassembled, or its message
/// carried out), answered as a duplicate, or NAKed as out of sequence.
fn take(st: &mut FabricState, h: usize, end: &WireEnd, me: &Me, p: &Parsed<'_>, from: From) {
    let host = &mut st.hosts[h];
    let Some(rq_psn) = host.qps.get(&me.qpn).map(|q| q.attrs.rq_psn) else { return };
    let Some(w) = conn(host, me) else { return };
    let base = if me.dc.is_some() { w.epsn.unwrap_or(p.psn) } else { rq_psn };
    let expected = w.asm.as_ref().map_or(base, |a| a.next);
    let d = psn_diff(p.psn, expected);
    if d > 0 {
        // A gap: one NAK for it, naming the PSN expected.
        if !w.nak_sent {
            w.nak_sent = true;
            let nak = ack_packet(h, me, expected, aeth::NAK_PSN_SEQ, w.msn);
            host.stats.psn_errors += 1;
            send(st, h, end, &nak, &from.gid, from.at);
        }
        return;
    }
    if d < 0 {
        host.stats.duplicates += 1;
        return duplicate(st, h, end, me, p, from, expected);
    }
    w.nak_sent = false;
    // In order. A packet before a message's last that asks for an acknowledgement gets
    // one (the requester's window moves on with it).
    // A message's bytes never outgrow what it may carry: a WRITE its RETH's length, a
    // SEND the largest message; one that would is an invalid request, not a buffer
    // that grows with whatever a peer sends.
    let fits = |write: bool, reth: Option<Reth>, have: usize| {
        let most = if write { reth.map_or(0, |r| u64::from(r.len)) } else { MAX_MESSAGE };
        (have + p.payload.len()) as u64 <= most
    };
    let (first, pkts, reth, data) = match (part(p.opcode), w.asm.take()) {
        (Some((write, Part::First)), None) if fits(write, p.reth, 0) => {
            w.asm = Some(Assembly {
                write,
                first: p.psn,
                next: psn_add(p.psn, 1),
                pkts: 1,
                reth: p.reth,
                data: p.payload.to_vec(),
            });
            return ack_part(st, h, end, me, p, from);
        }
        (Some((write, Part::Middle)), Some(mut a))
            if a.write == write && fits(write, a.reth, a.data.len()) =>
        {
            a.data.extend_from_slice(p.payload);
            a.next = psn_add(a.next, 1);
            a.pkts += 1;
            w.asm = Some(a);
            return ack_part(st, h, end, me, p, from);
        }
        (Some((write, Part::Last)), Some(mut a)) if a.write == write && fits(write, a.reth, a.data.len()) => {
            a.data.extend_from_slice(p.payload);
            (a.first, a.pkts + 1, a.reth, a.data)
        }
        (Some((write, Part::Only)), None) if fits(write, p.reth, 0) => (p.psn, 1, p.reth, p.payload.to_vec()),
        (None, None) if is_read_like(p.opcode) => {
            let n = match (p.opcode, p.reth) {
                (op::READ_REQUEST, Some(r)) => packets(opcode::RDMA_READ, r.len, me.mtu),
                _ => 1,
            };
            (p.psn, n, p.reth, Vec::new())
        }
        // Out of sequence within a message (IBA 9.7.4.1.2), or longer than it may be:
        // an invalid request (an RC responder goes to ERR; a DCT never does).
        _ => {
            let nak = ack_packet(h, me, p.psn, aeth::NAK_INVALID_REQUEST, w.msn);
            if me.dc.is_none() {
                crate::completer::enter_err(host, me.qpn);
            }
            send(st, h, end, &nak, &from.gid, from.at);
            return;
        }
    };
    execute(st, h, end, me, p, from, Msg { first, pkts, reth, data, advance: true });
}

/// A whole request message.
struct Msg {
    first: u32,
    pkts: u32,
    reth: Option<Reth>,
    data: Vec<u8>,
    /// A new message (the expected PSN moves past it); false for a duplicate READ.
    advance: bool,
}

/// Carries out message `m` whose last packet is `p`, and answers it.
fn execute(st: &mut FabricState, h: usize, end: &WireEnd, me: &Me, p: &Parsed<'_>, from: From, m: Msg) {
    let endian = st.cfg.atomic_endianness;
    let wop = wqe_opcode(p.opcode);
    let (raddr, rkey, len) = match (p.reth, p.atomic) {
        (_, Some(a)) => (a.va, a.rkey, p.masks.map_or(8, |m| u64::from(m.width))),
        _ => m.reth.map_or((0, 0, m.data.len() as u64), |r| {
            let len = if wop == opcode::RDMA_READ { u64::from(r.len) } else { m.data.len() as u64 };
            (r.va, r.rkey, len)
        }),
    };
    let read_like = is_read_like(p.opcode);
    // The result's buffer only for a range the responder's memory has: a READ whose rkey
    // check fails (its NAK comes from `respond`) allocates nothing, whatever its RETH
    // claims.
    let host = &st.hosts[h];
    // (The rkey's remote check: a memory window or an indirect mkey too, one across
    // several entries included.)
    let readable = read_like
        && host.qps.get(&me.qpn).is_some_and(|q| {
            let need = if wop == opcode::RDMA_READ { access::REMOTE_READ } else { access::REMOTE_ATOMIC };
            len == 0
                || matches!(
                    host.mrs.check_remote(rkey, raddr, len, need, q.pdn, me.qpn),
                    Ok(_) | Err(crate::dma::DmaError::Spans { .. })
                )
        });
    let mut result = if readable { vec![0u8; len as usize] } else { Vec::new() };
    let mut sink = Sgl::new();
    if !result.is_empty() {
        sink.push(Region::scratch(&mut result));
    }
    let srcs = [Src::Bytes(&m.data)];
    let a: AtomicEth = p.atomic.unwrap_or(AtomicEth { va: 0, rkey: 0, swap_add: 0, compare: 0 });
    let rq = Request {
        op: wop,
        len,
        se: p.se,
        imm: p.imm.or(p.ieth).unwrap_or_default(),
        raddr,
        rkey,
        compare: a.compare,
        swap_add: a.swap_add,
        swap_mask: p.masks.map_or(0, |m| m.swap_mask),
        compare_mask: p.masks.map_or(0, |m| m.compare_mask),
        width: p.masks.map_or(0, |m| m.width),
        srcs: if read_like { &[] } else { &srcs },
        sink: &sink,
        src_qpn: me.peer_qpn,
        src_lid: from.lid,
        req_scatter: 0,
        // (A DCT keeps no PSN of its own: its connection's is kept here.)
        pkts: if m.advance && me.dc.is_none() { m.pkts } else { 0 },
    };
    let host = &mut st.hosts[h];
    let out = match (me.dc, m.advance) {
        // (The PSN is the expected one, so only the QP's state and connection are checked.)
        (None, true) => match accept_rc(host, h, me.qpn, me.peer_qpn, m.first) {
            Some(tgt) => respond(host, endian, tgt, &rq),
            None => return,
        },
        (Some((num, key, _)), _) => match crate::responder::accept_dc(host, h, num, key) {
            Some(tgt) => respond(host, endian, tgt, &rq),
            None => return,
        },
        (None, false) => match host.qps.get(&me.qpn) {
            Some(q) => {
                let tgt = crate::responder::Target::of(h, q, me.qpn);
                respond(host, endian, tgt, &rq)
            }
            None => return,
        },
    };
    // The requester is in another process: a reason its check left goes no further.
    if matches!(out, Outcome::Fail { .. }) {
        crate::why::clear();
    }
    let last = psn_add(m.first, m.pkts - 1);
    let msn = conn(host, me).map_or(0, |w| {
        if matches!(out, Outcome::Done { .. }) && m.advance {
            w.msn = (w.msn + 1) & 0xff_ffff;
        }
        // A DC connection's expected PSN moves past what it carried out.
        if me.dc.is_some() && m.advance && !matches!(out, Outcome::Rnr) {
            w.epsn = Some(psn_add(last, 1));
        }
        w.msn
    });
    let mut dgs = Vec::new();
    let mut payload = 0u64;
    let mut put = |pk: &Packet<'_>| {
        if let Ok(dg) = end.end.encode(pk, &from.gid) {
            dgs.push(dg);
        }
    };
    match out {
        Outcome::Done { .. } | Outcome::DoneInline { .. } => match wop {
            opcode::RDMA_READ => {
                let n = m.pkts.max(1);
                let mtu = me.mtu as usize;
                for i in 0..n {
                    let opc = read_response_opcode(Pos::of(i, n));
                    let mut r = Packet::new(h, h, opc, me.qpn, me.peer_qpn, psn_add(m.first, i));
                    let (a, b) =
                        ((i as usize * mtu).min(result.len()), ((i as usize + 1) * mtu).min(result.len()));
                    r.payload = &result[a..b];
                    if opc != op::READ_RESPONSE_MIDDLE {
                        r.aeth = Some((aeth::ACK, msn));
                    }
                    if m.advance {
                        payload += r.payload.len() as u64;
                    }
                    put(&r);
                }
            }
            opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::ATOMIC_MASKED_CS | opcode::ATOMIC_MASKED_FA => {
                let mut r = Packet::new(h, h, op::ATOMIC_ACKNOWLEDGE, me.qpn, me.peer_qpn, m.first);
                r.aeth = Some((aeth::ACK, msn));
                let mut b = [0u8; 8];
                let n = result.len().min(8);
                b[..n].copy_from_slice(&result[..n]);
                // The original value as a number (a masked one in its own byte order).
                r.atomic_ack = Some(match p.masks {
                    Some(mk) => crate::responder::load_masked(b, mk.width, endian),
                    None => load_u64(b, endian),
                });
                put(&r);
            }
            _ => put(&ack_packet(h, me, last, aeth::ACK, msn)),
        },
        Outcome::Rnr => put(&ack_packet(h, me, m.first, aeth::RNR_NAK | (me.rnr_timer & 0x1f), msn)),
        Outcome::Fail { synd, .. } => {
            let code = match synd {
                syndrome::REMOTE_ACCESS_ERR => aeth::NAK_REMOTE_ACCESS,
                syndrome::REMOTE_OP_ERR => aeth::NAK_REMOTE_OP,
                _ => aeth::NAK_INVALID_REQUEST,
            };
            put(&ack_packet(h, me, m.first, code, msn));
        }
        Outcome::Restart | Outcome::Pending => {}
    }
    st.hosts[h].stats.wire_payload_bytes += payload;
    for dg in &dgs {
        send_raw(st, h, end, dg, from.at);
    }
    // Saved for duplicates of this message (a READ is carried out again instead: its
    // responses may be long).
    if m.advance && wop != opcode::RDMA_READ {
        if let Some(w) = conn(&mut st.hosts[h], me) {
            w.saved = Some(Saved { first: m.first, last, dgs, to: from.at });
        }
    }
}

/// Acknowledges packet `p` of a message still being reassembled, if it asks for it.
fn ack_part(st: &mut FabricState, h: usize, end: &WireEnd, me: &Me, p: &Parsed<'_>, from: From) {
    if p.ack_req {
        let msn = conn(&mut st.hosts[h], me).map_or(0, |w| w.msn);
        send(st, h, end, &ack_packet(h, me, p.psn, aeth::ACK, msn), &from.gid, from.at);
    }
}

/// An ACK or NAK (syndrome `s`) of PSN `psn` from responder `me`.
fn ack_packet(h: usize, me: &Me, psn: u32, s: u8, msn: u32) -> Packet<'static> {
    let mut p = Packet::new(h, h, op::ACKNOWLEDGE, me.qpn, me.peer_qpn, psn);
    p.aeth = Some((s, msn));
    p
}

/// A request packet `p` behind the expected PSN `expected`: answered, never executed
/// again (a READ reads again; that changes nothing).
fn duplicate(
    st: &mut FabricState,
    h: usize,
    end: &WireEnd,
    me: &Me,
    p: &Parsed<'_>,
    from: From,
    expected: u32,
) {
    if p.opcode == op::READ_REQUEST {
        let n = p.reth.map_or(1, |r| packets(opcode::RDMA_READ, r.len, me.mtu));
        let m = Msg { first: p.psn, pkts: n, reth: p.reth, data: Vec::new(), advance: false };
        return execute(st, h, end, me, p, from, m);
    }
    // A SEND or WRITE packet is answered only when it asks for an acknowledgement (its
    // message's last): a message sent again after a timeout is not answered per packet.
    if !p.ack_req && !is_atomic(p.opcode) {
        return;
    }
    let Some(w) = conn(&mut st.hosts[h], me) else { return };
    let msn = w.msn;
    match &w.saved {
        Some(s) if psn_diff(p.psn, s.first) >= 0 && psn_diff(p.psn, s.last) <= 0 => {
            let (dgs, to) = (s.dgs.clone(), s.to);
            for dg in &dgs {
                send_raw(st, h, end, dg, to);
            }
        }
        _ => {
            let ack = ack_packet(h, me, psn_add(expected, 0xff_ffff), aeth::ACK, msn);
            send(st, h, end, &ack, &from.gid, from.at);
        }
    }
}
