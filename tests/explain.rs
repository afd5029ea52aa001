//! Error completions that explain themselves (step 13): each syndrome the simulator
//! produces is provoked here, and the sentence `CompletionQueue::explain` gives names
//! the work request, the syndrome and the object of the failed check (the key, the MR
//! and its range, the QP and the right it lacks), as the check saw it. MW_BIND_ERR is
//! provoked here and in `tests/memory_windows.rs`; BAD_RESP_ERR by a faulty responder on
//! the UDP wire (`tests/wire_bad_response.rs`); REMOTE_ABORTED_ERR by an on-demand-paging
//! page fault on an SRQ receive buffer. Every syndrome of spec §5.4 is provoked.
mod common;
use common::*;
use mlx5::sim::ExecMode;
use mlx5::{AccessFlags, Completion, ConnectParams, RemoteQpInfo, Sge, Syndrome, WcOpcode, WqeFlags};

/// The one error completion `side` got, with its explanation.
fn failed(side: &mut Side) -> (Completion, String) {
    let c = side.drain();
    let (c, _) = *c.iter().find(|(c, _)| !c.status.is_ok()).unwrap_or_else(|| panic!("no error in {c:?}"));
    (c, side.cq.explain(&c))
}

fn syndrome(c: &Completion) -> Syndrome {
    c.status.syndrome().expect("an error")
}

/// Asserts that `s` contains each of `parts`.
fn says(s: &str, parts: &[&str]) {
    for p in parts {
        assert!(s.contains(p), "{p:?} missing from: {s}");
    }
}

fn write(p: &Pair, e: u64, local: Sge, raddr: u64, rkey: u32) {
    p.a.qp
        .wqe_builder(e)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(raddr, rkey)
        .unwrap()
        .sge(local)
        .unwrap()
        .finish()
        .unwrap();
}

fn send(p: &Pair, e: u64, len: u32) {
    let sge = Sge::new(p.a.mr.addr(), len, p.a.mr.lkey());
    p.a.qp.wqe_builder(e).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().sge(sge).unwrap().finish().unwrap();
}

#[test]
fn remote_access_error_names_the_rkey_and_the_missing_right() {
    let mut p = pair();
    // An MR the responder registered for READs only.
    let ro = p.b.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    let local = Sge::new(p.a.mr.addr(), 64, p.a.mr.lkey());
    write(&p, 7, local, ro.addr(), ro.rkey());
    let (c, s) = failed(&mut p.a);
    assert_eq!((syndrome(&c), c.opcode), (Syndrome::RemoteAccess, WcOpcode::RdmaWrite));
    says(
        &s,
        &[
            &format!("RDMA WRITE on QP 0x{:x} (WQE {}) failed: remote access error", c.qpn, c.wqe_counter),
            "syndrome 0x13 REMOTE_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR; vendor syndrome 0x88",
            &format!(
                "What failed: rkey 0x{:x} does not allow RDMA WRITE (its MR was registered without REMOTE_WRITE)",
                ro.rkey()
            ),
            "Usual causes:",
        ],
    );
    // Hardware says what the CQE says, no more.
    assert!(!c.explain().contains("What failed"), "{}", c.explain());
}

#[test]
fn remote_access_error_beyond_the_mr_names_its_range() {
    let mut p = pair();
    let (rb, rk) = (p.b.mr.addr(), p.b.mr.rkey());
    let end = rb + MR_LEN as u64;
    write(&p, 1, Sge::new(p.a.mr.addr(), 64, p.a.mr.lkey()), end - 32, rk);
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::RemoteAccess);
    says(
        &s,
        &[&format!(
            "RDMA WRITE of 64 bytes at 0x{:x} lies outside the MR [0x{rb:x}, 0x{end:x}) of rkey 0x{rk:x}",
            end - 32
        )],
    );
}

#[test]
fn local_protection_error_names_the_lkey() {
    let mut p = pair();
    let bad = p.a.mr.lkey() + 0x100;
    write(&p, 1, Sge::new(p.a.mr.addr(), 64, bad), p.b.mr.addr(), p.b.mr.rkey());
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::LocalProtection);
    says(
        &s,
        &[
            "local protection error",
            &format!("What failed: lkey 0x{bad:x} is not a memory key of this device"),
        ],
    );
}

#[test]
fn remote_invalid_request_names_the_qp_and_the_right_it_lacks() {
    // The responder QP allows READs only.
    let mut p = pair_with(
        ExecMode::Deterministic,
        &small_cfg(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        &ConnectParams::default(),
    );
    write(&p, 1, Sge::new(p.a.mr.addr(), 64, p.a.mr.lkey()), p.b.mr.addr(), p.b.mr.rkey());
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::RemoteInvalidRequest);
    let bq = p.b.qp.local_info().unwrap().qpn;
    says(
        &s,
        &[
            "remote invalid request",
            &format!("What failed: the responder QP 0x{bq:x} was not given REMOTE_WRITE in its access flags"),
        ],
    );
    // A misaligned atomic on a QP that allows atomics.
    let mut p = pair();
    p.a.qp
        .wqe_builder(2)
        .unwrap()
        .ctrl_atomic_fa(WqeFlags::SIGNALED, 1)
        .unwrap()
        .rdma(p.b.mr.addr() + 4, p.b.mr.rkey())
        .unwrap()
        .result(Sge::new(p.a.mr.addr(), 8, p.a.mr.lkey()))
        .unwrap()
        .finish()
        .unwrap();
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::RemoteInvalidRequest);
    says(&s, &[&format!("the atomic's address 0x{:x} is not aligned to its 8 bytes", p.b.mr.addr() + 4)]);
}

/// A SEND longer than the receive posted for it: the responder's receive completes with
/// LOCAL_LENGTH_ERR and the requester's SEND with REMOTE_INVAL_REQ_ERR; both sentences
/// give the two sizes.
#[test]
fn a_send_longer_than_its_receive_explains_both_sides() {
    let mut p = pair();
    p.b.qp.post_recv(9, &[Sge::new(p.b.mr.addr(), 16, p.b.mr.lkey())]).unwrap();
    send(&p, 1, 64);
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::RemoteInvalidRequest);
    let bq = p.b.qp.local_info().unwrap().qpn;
    let why = format!("a 64-byte SEND arrived at QP 0x{bq:x}, whose receive WQE 0 holds 16 bytes");
    says(&s, &[&why]);
    let (r, rs) = failed(&mut p.b);
    assert_eq!((syndrome(&r), r.opcode), (Syndrome::LocalLength, WcOpcode::RecvError));
    says(&rs, &[&format!("A receive on QP 0x{bq:x} (WQE 0) failed: local length error"), &why]);
}

/// A receive whose lkey is not valid: the responder cannot complete the SEND (the
/// requester's REMOTE_OP_ERR names that receive).
#[test]
fn remote_operation_error_names_the_receive() {
    let mut p = pair();
    p.b.qp.post_recv(9, &[Sge::new(p.b.mr.addr(), 256, p.b.mr.lkey() + 0x100)]).unwrap();
    send(&p, 1, 64);
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::RemoteOperation);
    let bq = p.b.qp.local_info().unwrap().qpn;
    says(&s, &[&format!("the receive WQE 0 of QP 0x{bq:x} has an lkey or range that is not valid")]);
}

#[test]
fn transport_retry_exceeded_names_the_missing_peer() {
    let (_fabric, da, db) = mlx5::sim::two_hosts(ExecMode::Deterministic);
    let mut a = Side::new(&da, &small_cfg(), AccessFlags::ALL);
    let b = Side::new(&db, &small_cfg(), AccessFlags::ALL);
    let info = b.qp.local_info().unwrap();
    let ghost = RemoteQpInfo { qpn: info.qpn + 0x77, ..info.clone() };
    a.qp.activate(&ConnectParams { remote: Some(ghost.clone()), ..ConnectParams::default() }).unwrap();
    let sge = Sge::new(a.mr.addr(), 8, a.mr.lkey());
    a.qp.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().sge(sge).unwrap().finish().unwrap();
    let (c, s) = failed(&mut a);
    assert_eq!(syndrome(&c), Syndrome::TransportRetryExceeded);
    says(
        &s,
        &[
            "transport retry counter exceeded",
            &format!(
                "What failed: nothing answered QP 0x{:x}: no QP 0x{:x} at LID 0x{:x}",
                c.qpn, ghost.qpn, ghost.lid
            ),
        ],
    );
}

#[test]
fn rnr_retry_exceeded_says_no_receive_was_posted() {
    let params = ConnectParams { rnr_retry: 1, ..ConnectParams::default() };
    let p = pair_with(ExecMode::Deterministic, &small_cfg(), AccessFlags::ALL, &params);
    send(&p, 1, 8);
    let c = poll_ticks(&p.a.cq, 1, 10_000);
    let c = c.first().expect("a completion").0;
    assert_eq!(syndrome(&c), Syndrome::RnrRetryExceeded);
    says(&p.a.cq.explain(&c), &["receiver-not-ready retry counter exceeded", "got an RNR NAK on every try"]);
}

/// The WQE after a failed one is flushed: the sentence says why a flush happens (there
/// is no failed check of its own to name).
#[test]
fn a_flush_says_the_qp_was_in_error() {
    let mut p = pair();
    let bad = p.a.mr.lkey() + 0x100;
    write(&p, 1, Sge::new(p.a.mr.addr(), 64, bad), p.b.mr.addr(), p.b.mr.rkey());
    write(&p, 2, Sge::new(p.a.mr.addr(), 64, p.a.mr.lkey()), p.b.mr.addr(), p.b.mr.rkey());
    let c = p.a.drain();
    let (flush, _) = c.iter().find(|(_, e)| *e == 2).expect("the second WQE");
    assert_eq!(syndrome(flush), Syndrome::WrFlush);
    let s = p.a.cq.explain(flush);
    says(&s, &["flushed: the QP was in the error state", "an earlier work request on this QP failed"]);
    assert!(!s.contains("What failed"), "{s}");
}

/// A WQE whose opcode byte no device knows: LOCAL_QP_OP_ERR, and the sentence gives the
/// opcode and what the check found.
#[test]
fn local_qp_operation_error_names_the_malformed_wqe() {
    let mut p = pair();
    p.a.qp
        .wqe_builder(1)
        .unwrap()
        .ctrl_rdma_write(WqeFlags::SIGNALED)
        .unwrap()
        .rdma(p.b.mr.addr(), p.b.mr.rkey())
        .unwrap()
        .sge(Sge::new(p.a.mr.addr(), 8, p.a.mr.lkey()))
        .unwrap()
        .finish_batch()
        .unwrap();
    // SAFETY: the WQE's ctrl segment (ring bytes 0..16) is not yet published; byte 3 is
    // its opcode.
    unsafe { *p.a.qp.sq_buf().add(3) = 0x3f };
    p.a.qp.ring_sq_doorbell();
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::LocalQpOperation);
    says(
        &s,
        &[
            "local QP operation error",
            "What failed: the ? WQE (opcode 0x3f, opmod 0x00, 3 DS) is malformed: unknown opcode",
        ],
    );
}

/// A success says what completed.
#[test]
fn a_success_says_what_completed() {
    let mut p = pair();
    write(&p, 1, Sge::new(p.a.mr.addr(), 64, p.a.mr.lkey()), p.b.mr.addr(), p.b.mr.rkey());
    let c = p.a.drain();
    let s = p.a.cq.explain(&c[0].0);
    assert!(s.starts_with("RdmaWrite on QP") && s.ends_with("completed: 64 bytes."), "{s}");
}

/// Explanations cost nothing until asked for: a reason a check left is kept with its
/// CQE, and an unrelated later failure does not inherit it.
#[test]
fn a_reason_belongs_to_its_own_completion() {
    let mut p = pair();
    let bad = p.a.mr.lkey() + 0x100;
    write(&p, 1, Sge::new(p.a.mr.addr(), 64, bad), p.b.mr.addr(), p.b.mr.rkey());
    let (c1, s1) = failed(&mut p.a);
    let mut q = pair();
    let ro = q.b.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let local = Sge::new(q.a.mr.addr(), 8, q.a.mr.lkey());
    write(&q, 1, local, ro.addr(), ro.rkey());
    let (_, s2) = failed(&mut q.a);
    assert!(s1.contains("lkey") && !s1.contains("rkey"), "{s1}");
    assert!(s2.contains(&format!("rkey 0x{:x}", ro.rkey())) && !s2.contains("lkey 0x"), "{s2}");
    assert_eq!(p.a.cq.explain(&c1), s1, "asked again, the same");
}

/// On the packet wire (faults on) the responder's NAK reaches the requester later, in
/// another pass: the reason still goes with that WQE's error completion, and an
/// unanswered request's with its own.
#[test]
fn reasons_survive_the_packet_wire() {
    for mode in [ExecMode::Deterministic, ExecMode::Threaded] {
        reasons_on_the_packet_wire(mode);
    }
}

fn reasons_on_the_packet_wire(mode: ExecMode) {
    let p = pair_with(mode, &small_cfg(), AccessFlags::ALL, &ConnectParams::default());
    p.fabric.set_faults(3, mlx5::sim::LinkFaults { drop: 0.3, ..mlx5::sim::LinkFaults::none() });
    let ro = p.b.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    write(&p, 1, Sge::new(p.a.mr.addr(), 64, p.a.mr.lkey()), ro.addr(), ro.rkey());
    let c = poll_ticks(&p.a.cq, 1, 100_000);
    let c = c.first().expect("a completion").0;
    assert_eq!(syndrome(&c), Syndrome::RemoteAccess);
    says(&p.a.cq.explain(&c), &[&format!("What failed: rkey 0x{:x} does not allow RDMA WRITE", ro.rkey())]);
    // A second pair whose peer does not exist: retries run out on the simulated clock.
    let (fabric, da, db) = mlx5::sim::two_hosts(mode);
    fabric.set_faults(3, mlx5::sim::LinkFaults { drop: 0.1, ..mlx5::sim::LinkFaults::none() });
    let a = Side::new(&da, &small_cfg(), AccessFlags::ALL);
    let b = Side::new(&db, &small_cfg(), AccessFlags::ALL);
    let info = b.qp.local_info().unwrap();
    let ghost = RemoteQpInfo { qpn: info.qpn + 0x77, ..info.clone() };
    a.qp.activate(&ConnectParams {
        remote: Some(ghost),
        timeout: 4,
        retry_cnt: 2,
        ..ConnectParams::default()
    })
    .unwrap();
    let sge = Sge::new(a.mr.addr(), 8, a.mr.lkey());
    a.qp.wqe_builder(1).unwrap().ctrl_send(WqeFlags::SIGNALED).unwrap().sge(sge).unwrap().finish().unwrap();
    let c = poll_ticks(&a.cq, 1, 1_000_000);
    let c = c.first().expect("a completion").0;
    assert_eq!(syndrome(&c), Syndrome::TransportRetryExceeded);
    says(&a.cq.explain(&c), &["What failed: nothing answered QP"]);
}

#[test]
fn local_access_error_is_the_responders_side_of_a_refused_write_with_immediate() {
    let mut p = pair();
    p.b.qp.post_recv(5, &[p.b.mr.sge(0, 64).unwrap()]).unwrap();
    let ro = p.b.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    let local = Sge::new(p.a.mr.addr(), 16, p.a.mr.lkey());
    p.a.qp
        .wqe_builder(8)
        .unwrap()
        .ctrl_rdma_write_imm(WqeFlags::SIGNALED, 0x1234)
        .unwrap()
        .rdma(ro.addr(), ro.rkey())
        .unwrap()
        .sge(local)
        .unwrap()
        .finish()
        .unwrap();
    let (c, s) = failed(&mut p.a);
    assert_eq!(syndrome(&c), Syndrome::RemoteAccess);
    says(&s, &[&format!("rkey 0x{:x} does not allow RDMA WRITE with immediate", ro.rkey())]);
    // The responder's receive: LOCAL_ACCESS_ERR (0x11), the same reason.
    let r = p.b.drain();
    let (rc, e) = r[0];
    assert_eq!((e, syndrome(&rc)), (5, Syndrome::LocalAccess), "{r:?}");
    let s = p.b.cq.explain(&rc);
    says(
        &s,
        &[
            "syndrome 0x11 LOCAL_ACCESS_ERR",
            &format!("rkey 0x{:x} does not allow RDMA WRITE with immediate", ro.rkey()),
            "REMOTE_WRITE",
        ],
    );
    assert_eq!(bytes(&ro, 0, 16), vec![0; 16]);
}

#[test]
fn mw_bind_error_names_the_window_and_what_its_bind_lacked() {
    let mut p = pair();
    let mr = p.b.pd.alloc_mr(4096, AccessFlags::ALL | AccessFlags::MW_BIND).unwrap();
    let mw = p.b.pd.alloc_mw(mlx5::MkeyKind::Window2).unwrap();
    // The window is bound, and a type-2 window must be invalidated before its next bind.
    for e in [1, 2] {
        let b = mw.bind(&mr, 0, 64, AccessFlags::REMOTE_READ).unwrap();
        p.b.qp.wqe_builder(e).unwrap().bind_mw(WqeFlags::SIGNALED, &b).unwrap().finish().unwrap();
    }
    let (c, s) = failed(&mut p.b);
    assert_eq!((syndrome(&c), c.opcode), (Syndrome::MwBind, WcOpcode::Umr));
    says(
        &s,
        &[
            "syndrome 0x06 MW_BIND_ERR",
            &format!("type-2 window 0x{:x} is still bound", mw.rkey() & !0xff | ((mw.rkey() - 1) & 0xff)),
            "invalidated before it is bound again",
        ],
    );
}

#[test]
fn remote_aborted_is_an_odp_page_fault_on_an_srq_receive_then_the_send_lands() {
    use mlx5::QpConfig;
    let (_f, mut h) = cluster(2, Addressing::Ib, ExecMode::Deterministic);
    let cfg = QpConfig { max_send_wr: 16, max_recv_wr: 16, max_inline_data: 64, ..QpConfig::default() };
    let a = h[0].ctx.create_rc_qp(&h[0].pd, &h[0].cq, &h[0].cq, &cfg).unwrap();
    let b = h[1].ctx.create_rc_qp_with_srq(&h[1].pd, &h[1].cq, &h[1].cq, &h[1].srq, &cfg).unwrap();
    let p = ConnectParams { rnr_retry: 7, ..ConnectParams::default() };
    a.activate(&ConnectParams { remote: Some(b.local_info().unwrap()), ..p.clone() }).unwrap();
    b.activate(&ConnectParams { remote: Some(a.local_info().unwrap()), ..p }).unwrap();
    // Two receive buffers on one page of an on-demand-paging MR that the NIC has not
    // touched yet.
    let odp = h[1].pd.alloc_mr(1 << 16, AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND).unwrap();
    for e in [1, 2] {
        h[1].srq.post_recv(e, &[odp.sge(0x1000 + 0x100 * (e as usize - 1), 256).unwrap()]).unwrap();
    }
    a.wqe_builder(9)
        .unwrap()
        .ctrl_send(WqeFlags::SIGNALED)
        .unwrap()
        .inline(b"paged in")
        .unwrap()
        .finish()
        .unwrap();
    // The requester's SEND succeeds, after an RNR NAK and its retry.
    let s = h[0].poll_ticks(1, 1000);
    assert_eq!((s[0].1, s[0].0.status.is_ok()), (9, true), "{s:?}");
    let r = h[1].drain();
    // First the abort of receive 1, explained; then the retried SEND in receive 2.
    let (c, e) = r[0];
    let vendor = match c.status {
        mlx5::Status::Error(x) => x.vendor_err,
        _ => 0,
    };
    assert_eq!((e, syndrome(&c), vendor), (1, Syndrome::RemoteAborted, 0x93), "{r:?}");
    says(
        &h[1].cq.explain(&c),
        &[
            "syndrome 0x22 REMOTE_ABORTED_ERR",
            "vendor syndrome 0x93",
            &format!("page 0x{:x} of lkey 0x{:x}", (odp.addr() + 0x1000) & !0xfff, odp.lkey()),
            "post it again",
        ],
    );
    assert_eq!((r[1].1, r[1].0.status.is_ok(), r[1].0.byte_len), (2, true, 8), "{r:?}");
    let mut got = [0u8; 8];
    odp.read(0x1100, &mut got).unwrap();
    assert_eq!(&got, b"paged in");
    assert_eq!(b.state(), mlx5::QpState::Rts, "an ODP abort is not a QP error");
}
