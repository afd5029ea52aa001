//! The requester: a send queue's WQEs to executed messages (spec §2–§4, §7): resolving the
//! destination, executing RC / DC operations through the responder (directly, or over the
//! network model's packets), UD datagrams, RNR waits, and the requester's completion.

use crate::hosts::FabricState;

use crate::completer::*;
use crate::dma::{Sgl, Src, SrcList};
use crate::hosts::Restart;
use crate::lean;
use crate::local::local_side;
use crate::net::roce;
use crate::psn::*;
use crate::responder::*;
use crate::route::{resolve_av, resolve_peer, unanswered, Sender};
use crate::train;
use crate::wire::{opcode, syndrome, DatagramSeg, DS_SIZE, MAX_WQE_DS};
use crate::wires::{DirectWire, PacketWire, Wire};
use crate::wqe::{self, SendWqe};
use crate::{ExecMode, LinkLayer, QpState, QpType};

/// Copies the address vector at DS 1 of `wqe` into a 48-byte buffer; a legacy 16-byte AV
/// (ext bit clear, spec §3.6) leaves bytes 16..47 zero (no GRH, no MAC, no GID).
fn read_av(wqe: &[u8]) -> [u8; 48] {
    let mut av = [0u8; 48];
    let Some(first) = wqe.get(DS_SIZE..2 * DS_SIZE) else {
        return av;
    };
    av[..DS_SIZE].copy_from_slice(first);
    if DatagramSeg::new_unchecked(&av[..]).ext() {
        if let Some(rest) = wqe.get(2 * DS_SIZE..4 * DS_SIZE) {
            av[DS_SIZE..].copy_from_slice(rest);
        }
    }
    av
}

/// Executes the validated WQE `w` (bytes in `wqe`) of QP `qpn` on host `h`, including the
/// responder side (the model's simplification: the requester's NIC runs both ends, holding
/// the requester's and the responder's hosts, see [`crate::hosts`]). Nothing is written to
/// memory unless every check passed.
///
/// Choices where the spec is silent (see README.md): zero-length SGEs are 0 bytes and not
/// checked [unverified, §11.4]; a zero-length RDMA WRITE/READ does not check the rkey; an
/// unreachable or unconnected destination fails at once with TRANSPORT_RETRY_EXC_ERR
/// (retries assumed exhausted instantly); every NAK the responder causes moves an RC
/// responder QP to ERR [IB semantics, unverified on mlx5, §6.2], never a DCT.
fn execute(st: &mut FabricState, h: usize, qpn: u32, me: &Sender, wqe: &[u8], w: &SendWqe) -> Outcome {
    let op = w.ctrl.opcode;
    if op == opcode::NOP {
        return Outcome::Done { byte_cnt: 0 };
    }
    let (pdn, path, peer, qtype, mtu, sq_psn) = (me.pdn, me.path, me.peer, me.qtype, me.mtu, me.sq_psn);
    // Requester scatter-to-CQE: RC only, and only for a signaled WQE (an unsignaled one
    // has no CQE to carry the data, so it goes to memory) [model choice, spec §5.7].
    let req_scatter = if qtype == QpType::Rc && me.scatter_to_cqe && w.ctrl.fm_ce_se & 0x08 != 0 {
        scatter_limit(&st.hosts[h], me.send_cqn)
    } else {
        0
    };

    // 1. Local side: gather sources (SEND/WRITE) or scatter sinks (READ/atomic).
    let mut srcs = SrcList::new();
    let mut sink = Sgl::new();
    if !local_side(&st.hosts[h].mrs, pdn, w, wqe, &mut srcs, &mut sink) {
        return fail(syndrome::LOCAL_PROT_ERR);
    }
    let srcs = srcs.as_slice();
    let src_lid = st.hosts[h].cfg.lid;

    // 2. Destination.
    let tgt = match qtype {
        QpType::Ud => {
            let av = read_av(wqe);
            return execute_ud(st, h, qpn, w, srcs, &DatagramSeg::new_unchecked(&av[..]));
        }
        // RC: host by path, QP by dest_qpn; it must be a connected RC QP in RTR/RTS
        // pointing back at us, else packets are lost and retries run out.
        QpType::Rc => {
            let Some(p) = path else {
                return unanswered(st, h, qpn);
            };
            let Some(found) = resolve_peer(st, h, qpn, &p, peer) else {
                return unanswered(st, h, qpn);
            };
            if st.need(found).is_err() {
                return Outcome::Restart;
            }
            let rh = found.h;
            match accept_rc(&mut st.hosts[rh], rh, p.dest_qpn, qpn, sq_psn) {
                Some(t) => t,
                // No local QP answers: one in another process may (the UDP wire).
                None => {
                    let pkts = packets(op, w.len as u32, mtu);
                    let rq = Request::of(w, srcs, &sink, qpn, src_lid, req_scatter, pkts);
                    let peer = crate::udp_wire::requester::Peer::Rc { dqpn: p.dest_qpn };
                    return crate::udp_wire::requester::request(st, h, qpn, me, peer, rh, &rq)
                        .unwrap_or_else(|| unanswered(st, h, qpn));
                }
            }
        }
        // DCI: host by the AV, DCT by its number; a wrong DC key is dropped by the DCT
        // (counted there) and looks like silence to the DCI: retries exhausted at once
        // [unverified].
        QpType::Dci => {
            let avb = read_av(wqe);
            let av = DatagramSeg::new_unchecked(&avb[..]);
            let cfg = &st.hosts[h].cfg;
            if cfg.grh_required && cfg.link_layer == LinkLayer::InfiniBand && !av.grh() {
                return unanswered(st, h, qpn);
            }
            let Some(found) = resolve_av(st, h, &av) else {
                return unanswered(st, h, qpn);
            };
            if st.need(found).is_err() {
                return Outcome::Restart;
            }
            let rh = found.h;
            match accept_dc(&mut st.hosts[rh], rh, av.dqpn(), av.dc_key()) {
                Some(t) => t,
                // No local DCT answers: one in another process may (the UDP wire).
                None => {
                    let rq = Request::of(w, srcs, &sink, qpn, src_lid, req_scatter, 0);
                    let peer = crate::udp_wire::requester::Peer::Dc { dct: av.dqpn(), key: av.dc_key() };
                    return crate::udp_wire::requester::request(st, h, qpn, me, peer, rh, &rq)
                        .unwrap_or_else(|| unanswered(st, h, qpn));
                }
            }
        }
        QpType::Dct => return fail(syndrome::LOCAL_QP_OP_ERR),
    };
    let pkts = if qtype == QpType::Rc { packets(op, w.len as u32, mtu) } else { 0 };
    let rq = Request::of(w, srcs, &sink, qpn, src_lid, req_scatter, pkts);
    if st.lossy() {
        PacketWire::request(st, h, qpn, tgt, &rq)
    } else {
        DirectWire::request(st, h, qpn, tgt, &rq)
    }
}

/// The network header a UD receive finds in its GRH slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UdL3 {
    /// IB without GRH: the slot is left untouched.
    None,
    /// IB GRH (40 bytes).
    IbGrh,
    /// RoCE v2 over IPv6 (40-byte IPv6 header).
    Ipv6,
    /// RoCE v2 over IPv4 (20-byte IPv4 header in slot bytes 20..39).
    Ipv4,
}

/// Bytes after the network header as on the wire: UD transport headers (BTH 12, DETH 8,
/// ImmDt 4), payload, pad to 4 bytes, ICRC 4 [unverified: the model reports wire lengths].
fn ud_transport_len(len: u64, imm: bool) -> u64 {
    12 + 8 + if imm { 4 } else { 0 } + len + (4 - len % 4) % 4 + 4
}

/// Builds the GRH / IPv6 (40 bytes) or IPv4 (20 bytes) header of a UD datagram.
fn ud_header(kind: UdL3, av: &DatagramSeg<&[u8]>, sgid: [u8; 16], len: u64, imm: bool) -> ([u8; 40], usize) {
    let mut hdr = [0u8; 40];
    let t = ud_transport_len(len, imm);
    match kind {
        UdL3::None => (hdr, 0),
        UdL3::IbGrh | UdL3::Ipv6 => {
            let (paylen, next) = if kind == UdL3::IbGrh { (t, 0x1b) } else { (8 + t, 17) };
            let w0 = (6u32 << 28) | (u32::from(av.tclass()) << 20) | av.flow_label();
            hdr[0..4].copy_from_slice(&w0.to_be_bytes());
            hdr[4..6].copy_from_slice(&(paylen as u16).to_be_bytes());
            hdr[6] = next;
            hdr[7] = av.hop_limit();
            hdr[8..24].copy_from_slice(&sgid);
            hdr[24..40].copy_from_slice(&av.rgid());
            (hdr, 40)
        }
        UdL3::Ipv4 => {
            let mut v4 = [0u8; 20];
            v4[0] = 0x45;
            v4[1] = av.tclass();
            v4[2..4].copy_from_slice(&((20 + 8 + t) as u16).to_be_bytes());
            v4[6] = 0x40; // DF
            v4[8] = av.hop_limit();
            v4[9] = 17; // UDP
            v4[12..16].copy_from_slice(&sgid[12..16]);
            v4[16..20].copy_from_slice(&av.rgid()[12..16]);
            let csum = roce::ipv4_checksum(&v4);
            v4[10..12].copy_from_slice(&csum.to_be_bytes());
            hdr[..20].copy_from_slice(&v4);
            (hdr, 20)
        }
    }
}

/// Executes a UD SEND / SEND_IMM: unreliable, so every delivery problem is a silent drop
/// (counted in `ud_dropped`) and the sender completes successfully. A message longer than the
/// port's active MTU fails with LOCAL_LENGTH_ERR (the caller moves the QP to SQE).
fn execute_ud(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    w: &SendWqe,
    srcs: &[Src<'_>],
    av: &DatagramSeg<&[u8]>,
) -> Outcome {
    let op = w.ctrl.opcode;
    if !matches!(op, opcode::SEND | opcode::SEND_IMM) {
        return fail(syndrome::LOCAL_QP_OP_ERR);
    }
    let len = w.len;
    let done = Outcome::Done { byte_cnt: len as u32 };
    let me = &st.hosts[h];
    let (ll, src_lid, sgid) = (me.cfg.link_layer, me.cfg.lid, me.cfg.gid);
    if len > u64::from(active_mtu(ll)) {
        crate::why::note(|| {
            format!("a UD message of {len} bytes is longer than the port's MTU of {}", active_mtu(ll))
        });
        return fail(syndrome::LOCAL_LENGTH_ERR);
    }
    let own_qkey = me.qps.get(&qpn).map_or(0, |q| q.attrs.qkey);
    // A port that requires a GRH puts no packet without one on the wire
    // [unverified: dropped, as the switch or PF does for a VF].
    if me.cfg.grh_required && ll == LinkLayer::InfiniBand && !av.grh() {
        st.hosts[h].stats.ud_dropped += 1;
        return done;
    }
    let Some(found) = resolve_av(st, h, av) else {
        st.hosts[h].stats.ud_dropped += 1;
        return done;
    };
    if st.need(found).is_err() {
        return Outcome::Restart;
    }
    let rh = found.h;
    // IB rule: a Q_Key with the high-order bit set means "use the sender QP's own Q_Key".
    let qkey = if av.qkey() & 0x8000_0000 != 0 { own_qkey } else { av.qkey() };
    let rqpn = av.dqpn();
    // The datagram takes the QP's next PSN, on either wire.
    let psn = st.hosts[h].qps.get_mut(&qpn).map_or(0, |q| {
        let p = q.attrs.sq_psn;
        q.attrs.sq_psn = p.wrapping_add(1) & 0xff_ffff;
        p
    });
    let imm = op == opcode::SEND_IMM;
    let roce = ll == LinkLayer::Ethernet;
    let kind = match (roce, av.grh()) {
        (false, false) => UdL3::None,
        (false, true) => UdL3::IbGrh,
        (true, _) if roce::ipv4_of(&av.rgid()).is_some() => UdL3::Ipv4,
        (true, _) => UdL3::Ipv6,
    };
    // A QP another process owns: one datagram on the UDP wire.
    if let Some(to) = crate::udp_wire::ud::remote(st, h, qpn, rh, rqpn) {
        let gid = st.hosts[rh].cfg.gid;
        let o = crate::udp_wire::ud::Out {
            qpn,
            dqpn: rqpn,
            psn,
            qkey,
            imm: imm.then_some(w.ctrl.imm),
            se: w.ctrl.fm_ce_se & 2 != 0,
            len,
            srcs,
        };
        crate::udp_wire::ud::send_datagram(st, h, &o, &gid, to);
        return done;
    }
    let (hdr, hlen) = ud_header(kind, av, sgid, len, imm);
    let dg = Datagram {
        imm: imm.then_some(w.ctrl.imm),
        se: w.ctrl.fm_ce_se & 2 != 0,
        len,
        qkey,
        dqpn: rqpn,
        hdr: &hdr[..hlen],
        slid: if roce { 0 } else { src_lid },
        flags_rqpn: ud_flags_rqpn(kind, av, qpn),
        srcs,
    };
    if st.lossy() {
        PacketWire::datagram(st, h, qpn, psn, rh, &dg);
    } else {
        DirectWire::datagram(st, h, qpn, psn, rh, &dg);
    }
    done
}

/// UD responder `flags_rqpn` (spec §5.1, §6.6): `g` (bits 29..28) = 1 when a GRH / IP
/// header is present; IB: SL (bits 27..24) from the AV's `stat_rate_sl`; RoCE: L3 type
/// (bits 25..24: 1 IPv6, 2 IPv4); bits 23..0 the source QPN.
fn ud_flags_rqpn(kind: UdL3, av: &DatagramSeg<&[u8]>, src_qpn: u32) -> u32 {
    let g = if kind == UdL3::None { 0 } else { 1u32 << 28 };
    let low = match kind {
        UdL3::None | UdL3::IbGrh => u32::from(av.stat_rate_sl() & 0xf) << 24,
        UdL3::Ipv6 => 1 << 24,
        UdL3::Ipv4 => 2 << 24,
    };
    g | low | (src_qpn & 0xff_ffff)
}

/// Active MTU of a port (what `NicInfo::active_mtu` reports).
pub(crate) fn active_mtu(ll: LinkLayer) -> u32 {
    match ll {
        LinkLayer::InfiniBand => 4096,
        LinkLayer::Ethernet => 1024,
    }
}

/// The RNR retries of QP `qpn` ran out ([`crate::why`]).
#[cold]
#[inline(never)]
fn rnr_why(qpn: u32) {
    crate::why::note(|| {
        format!("QP 0x{qpn:x} got an RNR NAK on every try: the responder had no receive posted for it, rnr_retry times")
    });
}

/// A UMR WQE (a memory window's bind or invalidation, an indirect mkey's KLM list) of
/// QP `qpn`: RC QPs only ([`crate::umr`]); on another QP, or malformed, it is a malformed
/// WQE.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn umr(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    me: &Sender,
    ctrl: &crate::wire::CtrlRepr,
    wqe: &[u8],
    counter: u16,
    avail: u16,
) -> Outcome {
    match crate::umr::parse(ctrl, wqe) {
        Ok(u) if me.qtype == QpType::Rc => crate::umr::execute(&mut st.hosts[h], qpn, me.pdn, &u),
        _ => malformed(st, h, qpn, counter, avail),
    }
}

/// The WQE that ran into a [`crate::dma::DmaError::Spans`] on the lean path (an
/// indirect mkey's SGE across its KLM entries), carried out by the general path instead.
#[cold]
#[inline(never)]
pub(crate) fn general(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    me: &Sender,
    wqe: &[u8],
    ctrl: crate::wire::CtrlRepr,
) -> Outcome {
    match wqe::parse_with_ctrl(me.qtype, ctrl, wqe) {
        Ok(w) => execute(st, h, qpn, me, wqe, &w),
        Err(_) => fail(syndrome::LOCAL_QP_OP_ERR),
    }
}

/// A WQE that breaks the layout rules (spec §8 step 3, `why`): counted, and
/// LOCAL_QP_OP_ERR.
#[cold]
#[inline(never)]
fn malformed(st: &mut FabricState, h: usize, qpn: u32, counter: u16, avail: u16) -> Outcome {
    st.hosts[h].stats.malformed_wqes += 1;
    // What the check found, found again here: carried out of the send loop, the reason
    // cost every WQE registers.
    if let Some(qp) = st.hosts[h].qps.get(&qpn) {
        let mut buf = Box::new([0u8; MAX_WQE_DS * DS_SIZE]);
        let (ctrl, len) = qp.fetch_wqe(counter, &mut buf);
        let why = match fetched(&ctrl, len, qpn, counter, avail) {
            Err(e) => e,
            Ok(_) if ctrl.opcode == opcode::UMR && qp.qp_type != QpType::Rc => {
                "a UMR (memory window bind, LOCAL_INV, mkey list) is posted on an RC QP only"
            }
            Ok(l) if ctrl.opcode == opcode::UMR => crate::umr::parse(&ctrl, &buf[..l]).err().unwrap_or("?"),
            Ok(l) => wqe::parse_with_ctrl(qp.qp_type, ctrl, &buf[..l]).err().unwrap_or("?"),
        };
        let (op, opmod, ds) = (ctrl.opcode, ctrl.opmod, ctrl.ds);
        crate::why::note(|| {
            format!(
                "the {} WQE (opcode 0x{op:02x}, opmod 0x{opmod:02x}, {ds} DS) is malformed: {why}",
                opcode::name(op)
            )
        });
    }
    fail(syndrome::LOCAL_QP_OP_ERR)
}

/// The WQE fetched at `counter` (`len` bytes copied, `None`: larger than the ring) as the
/// send loop takes it: the ctrl segment names this QP and this counter, and the WQE ends
/// before the producer (`avail` WQEBBs on); else why not.
#[inline(always)]
fn fetched(
    ctrl: &crate::wire::CtrlRepr,
    len: Option<usize>,
    qpn: u32,
    counter: u16,
    avail: u16,
) -> Result<usize, &'static str> {
    match len {
        None => Err("WQE larger than the ring"),
        Some(_) if ctrl.qpn != qpn => Err("QPN in ctrl is not this QP"),
        Some(_) if ctrl.wqe_index != counter => Err("wqe_index is not the hardware counter"),
        Some(_) if ctrl.wqebbs() > avail => Err("WQE extends past the producer"),
        Some(l) => Ok(l),
    }
}

/// Counts a WQE the requester carried out, at the clock's next tick; `rnr`: the
/// responder answered with an RNR NAK. `None` when the WQE waits the NAK out (retries
/// left: the send queue stops there until the NIC's timer), else the tick and whether
/// the RNR retries are exceeded (the WQE then fails with RNR_RETRY_EXC_ERR).
#[inline(always)]
fn counted(st: &mut FabricState, h: usize, qpn: u32, rnr: bool) -> Option<(u64, bool)> {
    let me = &mut st.hosts[h];
    me.stats.wqes_executed += 1;
    let ts = me.tick_clock();
    if !rnr {
        return Some((ts, false));
    }
    st.hosts[h].stats.rnr_naks += 1;
    let qp = st.hosts[h].qps.get_mut(&qpn)?;
    let limit = qp.attrs.rnr_retry;
    let tries = match qp.rnr {
        Some(n) => n.saturating_add(1),
        None => 0,
    };
    if limit == 0 || (limit != 7 && tries >= limit) {
        Some((ts, true))
    } else {
        qp.rnr = Some(tries);
        None
    }
}

/// The completer's part of a WQE carried out: its CQE when it asks for one, or its error
/// CQE and the QP to ERR (SQE for UD). False when the send queue stops here.
#[inline(always)]
fn report(st: &mut FabricState, h: usize, w: &SendRetired, outcome: &Outcome) -> bool {
    match *outcome {
        Outcome::Done { byte_cnt } => {
            if w.fm_ce_se & 0x08 != 0 {
                retire_send(&mut st.hosts[h], w, byte_cnt, None);
            }
            true
        }
        Outcome::DoneInline { byte_cnt, ref data } => {
            retire_send(&mut st.hosts[h], w, byte_cnt, Some(&data[..byte_cnt as usize]));
            true
        }
        Outcome::Fail { synd, .. } => {
            retire_send_failed(&mut st.hosts[h], w, synd);
            fail_qp(&mut st.hosts[h], w.qpn);
            false
        }
        Outcome::Rnr | Outcome::Restart | Outcome::Pending => false,
    }
}

/// What became of the WQEs at the hardware counter after [`by_train`].
enum Train {
    /// Fewer than two made a train: the one at the counter runs alone.
    NotFormed,
    /// The send queue stops (an error, an RNR wait, a busy host in a deferred run).
    Stop,
    /// Look at the QP afresh.
    Again,
}

/// Sends the WQEs from `counter` to `producer` as a train on the packet wire and
/// concludes them ([`train::send`]). Out of line: the direct wire never gets here.
#[cold]
#[inline(never)]
fn by_train(st: &mut FabricState, h: usize, qpn: u32, me: &Sender, counter: u16, producer: u16) -> Train {
    match train::send(st, h, qpn, me, counter, producer) {
        Some(Ok(ran)) => {
            if conclude_train(st, h, qpn, ran) {
                Train::Again
            } else {
                Train::Stop
            }
        }
        Some(Err(Restart)) if st.deferred() => Train::Stop,
        Some(Err(Restart)) => Train::Again,
        None => Train::NotFormed,
    }
}

/// Concludes the WQEs of a train in order (as the loop of [`process_sq`] does one);
/// false when the send queue stops (an error, an RNR wait).
fn conclude_train(st: &mut FabricState, h: usize, qpn: u32, ran: Vec<train::Ran>) -> bool {
    for r in ran {
        let Some((ts, rnr_exceeded)) = counted(st, h, qpn, matches!(r.outcome, Outcome::Rnr)) else {
            return false;
        };
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return false;
        };
        qp.finish_wqe(r.counter, r.ctrl8, r.nbb);
        let w = SendRetired {
            qpn,
            user_index: qp.user_index,
            send_cqn: qp.send_cqn,
            counter: r.counter,
            opcode: r.opcode,
            fm_ce_se: r.fm_ce_se,
            ts,
        };
        if rnr_exceeded {
            rnr_why(qpn);
        }
        let outcome = if rnr_exceeded { &fail(syndrome::RNR_RETRY_EXC_ERR) } else { &r.outcome };
        if !report(st, h, &w, outcome) {
            return false;
        }
    }
    true
}

/// Executes WQEs of QP `qpn` from its hardware counter up to the producer in dbrec word 1.
/// `retry`: retry the WQE the SQ is RNR-blocked at (one tick elapsed).
pub(crate) fn process_sq(st: &mut FabricState, h: usize, qpn: u32, retry: bool) {
    // A WQE's copy: a buffer kept in the fabric state, not a fresh zeroed array per
    // call (a nested call, if one ever happens, gets a new one).
    let mut buf = st.hosts[h].wqe_scratch.take().unwrap_or_else(|| Box::new([0u8; MAX_WQE_DS * DS_SIZE]));
    process_sq_in(st, h, qpn, retry, &mut buf);
    st.hosts[h].wqe_scratch = Some(buf);
}

fn process_sq_in(
    st: &mut FabricState,
    h: usize,
    qpn: u32,
    mut retry: bool,
    buf: &mut [u8; MAX_WQE_DS * DS_SIZE],
) {
    // Whether this runs in the driver's thread (deterministic mode, or threaded mode's
    // `try_host` run), not a NIC thread: see the prefetch below.
    let posters = st.cfg.mode == ExecMode::Deterministic || st.nowait();
    // The producer last read, while WQEs it covers wait: the doorbell record is read
    // once per run of WQEs, not once per WQE (in threaded mode the driver's core
    // writes it with every post, so that each read is a trip between cores).
    let mut known: Option<u16> = None;
    loop {
        let Some(qp) = st.hosts[h].qps.get(&qpn) else {
            return;
        };
        match qp.state {
            QpState::Err | QpState::Sqe => return flush_sq(&mut st.hosts[h], qpn),
            QpState::Rts if qp.sq_wqe_cnt != 0 => {}
            _ => return,
        }
        let qtype = qp.qp_type;
        let me = Sender::of(qp);
        let producer = match known.take() {
            Some(p) => p,
            None => qp.sq_producer(),
        };
        let counter = qp.sq_ci;
        if counter == producer || ((qp.rnr.is_some() || qp.waiting) && !retry) {
            return;
        }
        let avail = producer.wrapping_sub(counter);
        let (ctrl, len) = qp.fetch_wqe(counter, buf);
        let valid = fetched(&ctrl, len, qpn, counter, avail).map(|l| &buf[..l]);
        let nbb = ctrl.wqebbs().min(avail);
        // An RC WQE of a lean shape on the direct wire takes the lean path; any other
        // the general one (which also answers every malformed WQE).
        let lean = match valid {
            Ok(b) if qtype == QpType::Rc && st.lean_path() => lean::shape(&ctrl, b, me.scatter_to_cqe),
            _ => None,
        };
        let done = match (valid, lean) {
            // (More WQEs ready on the packet wire make a train: below.)
            (Ok(b), Some(m)) if avail <= nbb || !st.lossy() => lean::execute(st, h, qpn, &me, b, &ctrl, &m),
            (Ok(b), _) => {
                // On the packet wire, the RC WQEs that are ready together go as one train.
                if qtype == QpType::Rc && avail > nbb && st.lossy() {
                    match by_train(st, h, qpn, &me, counter, producer) {
                        Train::NotFormed => {}
                        Train::Stop => return,
                        Train::Again => {
                            retry = false;
                            continue;
                        }
                    }
                }
                if ctrl.opcode == opcode::UMR {
                    umr(st, h, qpn, &me, &ctrl, b, counter, avail)
                } else {
                    match wqe::parse_with_ctrl(qtype, ctrl, b) {
                        Ok(w) => execute(st, h, qpn, &me, b, &w),
                        Err(_) => malformed(st, h, qpn, counter, avail),
                    }
                }
            }
            (Err(_), _) => malformed(st, h, qpn, counter, avail),
        };
        if let Outcome::Pending = done {
            return; // on the UDP wire: the answer runs the queue on
        }
        if let Outcome::Restart = done {
            // A host it needs was busy, and this operation does not wait
            // (`Shared::try_host`): the WQE is left as it was, for the NIC.
            if st.deferred() {
                return;
            }
            // Home was let go for a moment: look at the QP afresh.
            continue;
        }
        // (Not moved to another binding: when an `Outcome` was 72 bytes, the copy cost
        // 16 instructions per message.)
        let outcome = &done;
        let Some((ts, rnr_exceeded)) = counted(st, h, qpn, matches!(outcome, Outcome::Rnr)) else {
            return; // waiting out an RNR NAK
        };
        let Some(qp) = st.hosts[h].qps.get_mut(&qpn) else {
            return;
        };
        // The shadow of what ran: its first 8 bytes as fetched (`fetch_wqe` always copies
        // the first WQEBB), not read from the ring a second time.
        let mut ctrl8 = [0u8; 8];
        ctrl8.copy_from_slice(&buf[..8]);
        qp.finish_wqe(counter, ctrl8, nbb);
        // Whether WQEs wait behind this one: up to the producer read before, or else
        // read again while the QP is at hand. One posted after this read comes with a
        // doorbell (or a doorbell-record move a watching NIC sees) of its own.
        let more = if producer != qp.sq_ci {
            known = Some(producer);
            true
        } else {
            qp.sq_producer() != qp.sq_ci
        };
        if !more && posters {
            // The driver writes this QP's next WQEs there (see `prefetch_next`): into
            // this thread's caches when it is the driver's, never a NIC thread's,
            // where it would only move the lines away from the driver's core.
            qp.prefetch_next(nbb);
        }
        let w = SendRetired {
            qpn,
            user_index: qp.user_index,
            send_cqn: qp.send_cqn,
            counter,
            opcode: ctrl.opcode,
            fm_ce_se: ctrl.fm_ce_se,
            ts,
        };
        if rnr_exceeded {
            rnr_why(qpn);
        }
        let outcome = if rnr_exceeded { &fail(syndrome::RNR_RETRY_EXC_ERR) } else { outcome };
        if !report(st, h, &w, outcome) {
            return;
        }
        if !more {
            return;
        }
        retry = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completer::tests::{hex, through_cq};
    use crate::responder::{recv_cqe, RecvCqe, RecvQ, Target};
    use crate::wire::cqe_opcode;

    #[test]
    fn ipv4_header_checksum_verifies() {
        let mut avb = [0u8; 48];
        avb[26] = 0xb8; // tclass
        avb[27] = 64;
        avb[42..44].copy_from_slice(&[0xff, 0xff]);
        avb[44..48].copy_from_slice(&[10, 0, 0, 2]);
        let av = DatagramSeg::new_unchecked(&avb[..]);
        let mut sgid = [0u8; 16];
        sgid[10..12].copy_from_slice(&[0xff, 0xff]);
        sgid[12..16].copy_from_slice(&[10, 0, 0, 1]);
        let (h, n) = ud_header(UdL3::Ipv4, &av, sgid, 100, false);
        assert_eq!(n, 20);
        let mut v4 = [0u8; 20];
        v4.copy_from_slice(&h[..20]);
        // A header including its checksum sums to 0xffff (checksum of it is 0).
        assert_eq!(roce::ipv4_checksum(&v4), 0);
        // Total length: IPv4 20 + UDP 8 + BTH 12 + DETH 8 + 100 + ICRC 4.
        assert_eq!(u16::from_be_bytes([v4[2], v4[3]]), 152);
    }

    #[test]
    fn golden_c2_from_the_engine_writer() {
        // UD RESP_SEND_IMM, IB without GRH: SL 5 from the AV, source QPN 0x777, LID 0x11,
        // 64 payload bytes + the 40-byte GRH slot, RQ counter 3, CQ index 7.
        let mut avb = [0u8; 48];
        avb[12] = 0x05; // stat_rate_sl: SL 5
        let av = DatagramSeg::new_unchecked(&avb[..]);
        let tgt = Target {
            h: 0,
            qpn: 0x456,
            report_qpn: 0x456,
            pdn: 1,
            access: 0,
            cqn: 1,
            uidx: 2,
            recv: RecvQ::Rq(0x456),
            err_on_nak: true,
            scatter: false,
        };
        let c = RecvCqe {
            cop: cqe_opcode::RESP_SEND_IMM,
            se: false,
            imm: [0x12, 0x34, 0x56, 0x78],
            counter: 3,
            slid: 0x11,
            flags_rqpn: ud_flags_rqpn(UdL3::None, &av, 0x777),
            byte_cnt: (64 + GRH_SLOT) as u32,
            ts: 0,
        };
        let got = through_cq(&recv_cqe(&tgt, &c), 256, 7);
        let want = hex("00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
             00 00 00 00  00 00 00 11  05 00 07 77  00 00 00 00
             00 00 00 02  12 34 56 78  00 00 00 00  00 00 00 68
             00 00 00 00  00 00 00 00  00 00 04 56  00 03 00 30");
        assert_eq!(got[..], want[..]);
    }
}
