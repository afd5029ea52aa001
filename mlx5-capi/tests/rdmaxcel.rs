//! One regression test per RDMaxcel defect listed in PITFALLS.md ("The flat
//! host/device posting API"), each showing that the C ABI gets it right.
//! The functions are called as C calls them; the simulator runs in
//! deterministic mode and executes what the doorbells and doorbell records
//! say when `mlx5r_sim_progress` runs.

use std::ptr;

use mlx5_api::ring::{AddressVector, CqDesc, SendWr, Sge, SqDesc, UmrWr};
use mlx5r::*;

struct Rig {
    f: *mut FabricObj,
    ctx: [*mut CtxObj; 2],
    pd: [*mut PdObj; 2],
    cq: [*mut CqObj; 2],
    qp: [*mut QpObj; 2],
    mr: [*mut MrObj; 2],
    mem: [Vec<u64>; 2],
    lkey: [u32; 2],
    rkey: [u32; 2],
}

const MEM: usize = 1 << 16;

impl Rig {
    /// Two hosts, an RC pair (or two UD QPs), CQs of `cqe`, registered memory.
    fn new(qp_type: u32, sq_wr: u32, contexts_qps: usize) -> Rig {
        // SAFETY (whole function): C-ABI calls with live objects and writable outs.
        unsafe {
            let mut f = ptr::null_mut();
            assert_eq!(mlx5r_sim_fabric_new(MLX5R_SIM_DETERMINISTIC, &mut f), 0);
            mlx5r_sim_add_host(f, 1);
            mlx5r_sim_add_host(f, 2);
            let mut r = Rig {
                f,
                ctx: [ptr::null_mut(); 2],
                pd: [ptr::null_mut(); 2],
                cq: [ptr::null_mut(); 2],
                qp: [ptr::null_mut(); 2],
                mr: [ptr::null_mut(); 2],
                mem: [vec![0u64; MEM / 8], vec![0u64; MEM / 8]],
                lkey: [0; 2],
                rkey: [0; 2],
            };
            let attr = mlx5r_qp_attr {
                qp_type,
                max_send_wr: sq_wr,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 2,
                max_inline_data: 64,
                ..Default::default()
            };
            for h in 0..2 {
                assert_eq!(mlx5r_sim_open(f, h as u32, &mut r.ctx[h]), 0);
                assert_eq!(mlx5r_pd_alloc(r.ctx[h], &mut r.pd[h]), 0);
                assert_eq!(mlx5r_cq_create(r.ctx[h], 256, &mut r.cq[h]), 0);
                let p = r.mem[h].as_mut_ptr() as *mut u8;
                assert_eq!(mlx5r_mr_reg(r.pd[h], p, MEM, 15 | MLX5R_ACCESS_MW_BIND, &mut r.mr[h]), 0);
                assert_eq!(mlx5r_mr_keys(r.mr[h], &mut r.lkey[h], &mut r.rkey[h]), 0);
                // Extra QPs first, so that the tested one shares a register.
                for _ in 0..contexts_qps {
                    let mut q = ptr::null_mut();
                    assert_eq!(
                        mlx5r_qp_create(r.ctx[h], r.pd[h], r.cq[h], r.cq[h], ptr::null_mut(), &attr, &mut q),
                        0
                    );
                    let _ = q; // kept alive for the test's lifetime (never freed)
                }
                assert_eq!(
                    mlx5r_qp_create(
                        r.ctx[h],
                        r.pd[h],
                        r.cq[h],
                        r.cq[h],
                        ptr::null_mut(),
                        &attr,
                        &mut r.qp[h]
                    ),
                    0
                );
            }
            let mut info = [mlx5r_remote::default(); 2];
            for (qp, i) in r.qp.iter().zip(info.iter_mut()) {
                assert_eq!(mlx5r_qp_local(*qp, i), 0);
            }
            for h in 0..2 {
                assert_eq!(mlx5r_qp_connect(r.qp[h], &info[1 - h], 0x1111), 0);
            }
            r
        }
    }
    fn addr(&self, h: usize, off: usize) -> u64 {
        self.mem[h].as_ptr() as u64 + off as u64
    }
    fn sq(&self, h: usize) -> &SqDesc {
        // SAFETY: a live QP.
        unsafe { &*mlx5r_qp_sq(self.qp[h]) }
    }
    fn cq(&self, h: usize) -> *const CqDesc {
        // SAFETY: a live CQ.
        unsafe { mlx5r_cq_desc(self.cq[h]) }
    }
    fn progress(&self) {
        // SAFETY: a live fabric.
        unsafe { mlx5r_sim_progress(self.f) };
    }
    fn poll(&self, h: usize) -> (i32, mlx5r_cqe) {
        let mut c = mlx5r_cqe::default();
        self.progress();
        // SAFETY: a live CQ descriptor, polled from this thread only.
        (unsafe { mlx5r_cqe_poll(self.cq(h), &mut c) }, c)
    }
    fn post(&self, h: usize, wr: &SendWr) -> i32 {
        // SAFETY: a live send queue, posted from this thread only.
        unsafe { mlx5r_send_wqe(self.sq(h), wr) }
    }
    fn ring(&self, h: usize, flags: u32) -> i32 {
        // SAFETY: as above.
        unsafe { mlx5r_db_ring(self.sq(h), flags) }
    }
    /// The ctrl segment of the WQE at counter `pi`.
    fn ctrl(&self, h: usize, pi: u32) -> [u8; 16] {
        let sq = self.sq(h);
        // SAFETY: a ctrl segment inside the live ring.
        unsafe { *sq.ds_ptr(pi, 0) }
    }
    fn stats(&self, h: usize) -> mlx5_sim::NicStats {
        // SAFETY: a live fabric (read-only use of its NIC list).
        let nics = unsafe { (*self.f).nics() };
        nics[h].stats()
    }
}

fn sge(addr: u64, len: u32, lkey: u32) -> Sge {
    Sge { addr, len, lkey }
}

#[test]
fn ds_count_is_the_real_number_of_units() {
    let r = Rig::new(MLX5R_QPT_RC, 64, 0);
    let s3 = [
        sge(r.addr(0, 0), 8, r.lkey[0]),
        sge(r.addr(0, 64), 8, r.lkey[0]),
        sge(r.addr(0, 128), 8, r.lkey[0]),
    ];
    let cases: [(u32, u32, u32, u32); 5] = [
        (MLX5R_OPCODE_SEND, 1, 0, 2),                       // ctrl + data: no raddr
        (MLX5R_OPCODE_RDMA_WRITE, 3, 0, 5),                 // ctrl + raddr + 3 data
        (MLX5R_OPCODE_RDMA_WRITE, 2, MLX5R_SEND_INLINE, 4), // ctrl + raddr + inline (4 + 16 bytes: 2 DS)
        (MLX5R_OPCODE_ATOMIC_FA, 1, 0, 4),                  // ctrl + raddr + atomic + data
        (MLX5R_OPCODE_NOP, 0, 0, 1),
    ];
    for (op, n, flags, ds) in cases {
        let pi = r.sq(0).producer();
        let wr = SendWr {
            sg_list: s3.as_ptr(),
            num_sge: n,
            opcode: op,
            send_flags: flags,
            remote_addr: r.addr(1, 0),
            rkey: r.rkey[1],
            ..Default::default()
        };
        assert_eq!(r.post(0, &wr), 0, "opcode {op:#x}");
        assert_eq!(r.ctrl(0, pi)[7] & 0x3f, ds as u8, "opcode {op:#x} with {n} SGE(s)");
    }
}

#[test]
fn immediate_fence_and_solicited_are_what_was_asked() {
    let r = Rig::new(MLX5R_QPT_RC, 64, 0);
    let s = [sge(r.addr(0, 0), 16, r.lkey[0])];
    let rs = [sge(r.addr(1, 4096), 64, r.lkey[1])];
    // SAFETY: a live receive queue.
    assert_eq!(unsafe { mlx5r_recv_wqe(mlx5r_qp_rq(r.qp[1]), rs.as_ptr(), 1, 5) }, 0);
    let pi = r.sq(0).producer();
    let wr = SendWr {
        sg_list: s.as_ptr(),
        num_sge: 1,
        opcode: MLX5R_OPCODE_RDMA_WRITE_IMM,
        send_flags: MLX5R_SEND_SIGNALED | MLX5R_SEND_FENCE,
        imm: 0xdead_beef,
        remote_addr: r.addr(1, 0),
        rkey: r.rkey[1],
        ..Default::default()
    };
    assert_eq!(r.post(0, &wr), 0);
    let c = r.ctrl(0, pi);
    assert_eq!(c[12..16], [0xde, 0xad, 0xbe, 0xef], "the immediate is in ctrl bytes 12..15");
    assert_eq!(c[11], 0x88, "FM = 4 (fence) and CE = 2; SOLICITED only when asked");
    r.ring(0, 0);
    let (rc, cqe) = r.poll(1);
    assert_eq!((rc, cqe.opcode, cqe.imm, cqe.solicited), (MLX5R_CQE_OK, 1, 0xdead_beef, 0));
}

#[test]
fn wr_ids_are_the_users_and_unsignaled_wqes_retire_with_the_next_cqe() {
    let r = Rig::new(MLX5R_QPT_RC, 64, 0);
    let s = [sge(r.addr(0, 0), 8, r.lkey[0])];
    for (id, flags) in [(0xaaaa_u64, 0), (0xbbbb, 0), (0xcccc, MLX5R_SEND_SIGNALED)] {
        let wr = SendWr {
            wr_id: id,
            sg_list: s.as_ptr(),
            num_sge: 1,
            opcode: MLX5R_OPCODE_RDMA_WRITE,
            send_flags: flags,
            remote_addr: r.addr(1, 0),
            rkey: r.rkey[1],
            ..Default::default()
        };
        assert_eq!(r.post(0, &wr), 0);
    }
    assert_eq!(r.ring(0, 0), 1, "one doorbell for the batch");
    let (rc, c) = r.poll(0);
    assert_eq!(rc, MLX5R_CQE_OK);
    let mut id = 0;
    // SAFETY: a live send queue.
    assert_eq!(unsafe { mlx5r_sq_retire(r.sq(0), c.wqe_counter, &mut id) }, 0);
    assert_eq!(id, 0xcccc);
    assert_eq!(r.sq(0).free(), r.sq(0).wqe_cnt, "the unsignaled WQEs were retired with it");
    assert_eq!(r.stats(0).doorbells, 1);
}

#[test]
fn wqe_index_and_doorbell_record_are_16_bits_after_65536_wqes() {
    let r = Rig::new(MLX5R_QPT_RC, 64, 0);
    let batch = r.sq(0).wqe_cnt;
    let mut posted = 0u32;
    while posted < 0x1_0000 + 3 * batch {
        for _ in 0..batch {
            let wr =
                SendWr { opcode: MLX5R_OPCODE_NOP, send_flags: MLX5R_SEND_SIGNALED, ..Default::default() };
            assert_eq!(r.post(0, &wr), 0);
            posted += 1;
        }
        r.ring(0, 0);
        for _ in 0..batch {
            let (rc, c) = r.poll(0);
            assert_eq!(rc, MLX5R_CQE_OK);
            // SAFETY: a live send queue.
            assert_eq!(unsafe { mlx5r_sq_retire(r.sq(0), c.wqe_counter, ptr::null_mut()) }, 0);
        }
    }
    let pi = r.sq(0).producer();
    assert!(pi > 0x1_0000);
    let last = r.ctrl(0, pi - 1);
    assert_eq!(last[0], 0, "opmod intact: the index was masked before the shift");
    assert_eq!(u16::from_be_bytes([last[1], last[2]]), (pi - 1) as u16);
    // SAFETY: the doorbell record word of a live QP.
    let dbrec = u32::from_be(unsafe { *r.sq(0).dbrec });
    assert_eq!(dbrec, pi & 0xffff, "16 bits of the counter, as rdma-core writes");
    let s = r.stats(0);
    assert_eq!((s.malformed_wqes, s.doorbell_mismatch, s.bf_offset_mismatch), (0, 0, 0), "{s:?}");
}

#[test]
fn receives_go_to_their_own_slots_with_a_terminator() {
    let r = Rig::new(MLX5R_QPT_RC, 64, 0);
    // SAFETY: a live receive queue.
    let rq = unsafe { &*mlx5r_qp_rq(r.qp[1]) };
    for i in 0..3u64 {
        let s = [sge(r.addr(1, 1024 * i as usize), 64, r.lkey[1])];
        // SAFETY: as above.
        assert_eq!(unsafe { mlx5r_recv_wqe(rq, s.as_ptr(), 1, 10 + i) }, 0);
    }
    for i in 0..3usize {
        // SAFETY: slot i of the live RQ ring.
        let w = unsafe { std::slice::from_raw_parts(rq.buf.add(i * rq.stride as usize), rq.stride as usize) };
        assert_eq!(u64::from_be_bytes(w[8..16].try_into().unwrap()), r.addr(1, 1024 * i), "slot {i}");
        assert_eq!(u32::from_be_bytes(w[20..24].try_into().unwrap()), 0x100, "invalid-lkey terminator");
    }
    // SAFETY: the doorbell record word 0 of a live QP.
    assert_eq!(u32::from_be(unsafe { *rq.dbrec }), 3);
}

#[test]
fn srq_receives_follow_the_list_which_is_never_rewritten() {
    let r = Rig::new(MLX5R_QPT_RC, 64, 0);
    let mut srq = ptr::null_mut();
    // SAFETY: live objects.
    unsafe {
        assert_eq!(mlx5r_srq_create(r.ctx[1], r.pd[1], 8, 1, &mut srq), 0);
        let d = &*mlx5r_srq_desc(srq);
        for i in 0..3u64 {
            let s = [sge(r.addr(1, 512 * i as usize), 64, r.lkey[1])];
            assert_eq!(mlx5r_srq_recv_wqe(d, s.as_ptr(), 1, i), 0);
        }
        for i in 0..4u32 {
            assert_eq!(d.next(i), i + 1, "next_wqe_index of WQE {i} kept");
            let data = std::slice::from_raw_parts(d.buf.add((i * d.stride) as usize + 16), 16);
            if i < 3 {
                assert_eq!(u64::from_be_bytes(data[8..16].try_into().unwrap()), r.addr(1, 512 * i as usize));
            }
        }
        mlx5r_srq_destroy(srq);
    }
}

#[test]
fn blueflame_toggles_per_register_shared_by_qps() {
    // 16 QPs first on each context: the tested QP is the 17th and shares
    // register 0 with the first; doorbells of both alternate its halves.
    let r = Rig::new(MLX5R_QPT_RC, 64, 16);
    let s = [sge(r.addr(0, 0), 64, r.lkey[0])];
    let bf = r.sq(0).bf;
    for i in 0..6 {
        // SAFETY: the QP's live register view.
        let before = unsafe { (*bf).next_offset() };
        let wr = SendWr {
            sg_list: s.as_ptr(),
            num_sge: 1,
            opcode: MLX5R_OPCODE_RDMA_WRITE,
            send_flags: MLX5R_SEND_SIGNALED | MLX5R_SEND_INLINE,
            remote_addr: r.addr(1, 0),
            rkey: r.rkey[1],
            ..Default::default()
        };
        assert_eq!(r.post(0, &wr), 0);
        r.ring(0, if i % 2 == 0 { MLX5R_DB_BLUEFLAME } else { 0 });
        // SAFETY: as above.
        assert_eq!(unsafe { (*bf).next_offset() }, before ^ 256, "toggled after every doorbell");
        assert_eq!(r.poll(0).0, MLX5R_CQE_OK);
    }
    let s = r.stats(0);
    assert_eq!((s.doorbells, s.bf_writes), (6, 3));
    assert_eq!((s.bf_offset_mismatch, s.bf_content_mismatch, s.doorbell_mismatch), (0, 0, 0), "{s:?}");
}

#[test]
fn error_completion_is_not_nothing_yet_and_send_inv_is_a_success() {
    let r = Rig::new(MLX5R_QPT_RC, 64, 0);
    let mut c = mlx5r_cqe::default();
    // SAFETY: a live CQ.
    assert_eq!(unsafe { mlx5r_cqe_poll(r.cq(0), &mut c) }, MLX5R_CQE_EMPTY, "nothing yet");
    // A SEND with invalidate frees a type-2 window bound to the responder's QP
    // (an MR's key is never invalidated remotely): B binds one first.
    let mut mw = ptr::null_mut();
    // SAFETY: a live PD, a writable out.
    assert_eq!(unsafe { mlx5r_mw_alloc(r.pd[1], MLX5R_MW_TYPE_2, &mut mw) }, 0);
    let mut next = 0;
    // SAFETY: a live window.
    let now = unsafe { mlx5r_mw_rkey(mw, &mut next) };
    let range = [sge(r.addr(1, 4096), 64, r.lkey[1])];
    let bind = UmrWr {
        wr_id: 0,
        op: MLX5R_UMR_BIND_MW2,
        send_flags: MLX5R_SEND_SIGNALED,
        key: now,
        new_key: next,
        access: 2,
        zero_based: 0,
        sg_list: range.as_ptr(),
        num_sge: 1,
        repeat_count: 0,
        skips: ptr::null(),
    };
    // SAFETY: B's live send queue.
    assert_eq!(unsafe { mlx5r_umr_wqe(mlx5r_qp_sq(r.qp[1]), &bind) }, 0);
    r.ring(1, 0);
    assert_eq!(r.poll(1).0, MLX5R_CQE_OK);
    let rs = [sge(r.addr(1, 0), 64, r.lkey[1])];
    // SAFETY: a live receive queue.
    assert_eq!(unsafe { mlx5r_recv_wqe(mlx5r_qp_rq(r.qp[1]), rs.as_ptr(), 1, 1) }, 0);
    let s = [sge(r.addr(0, 0), 8, r.lkey[0])];
    let inv = SendWr {
        sg_list: s.as_ptr(),
        num_sge: 1,
        opcode: MLX5R_OPCODE_SEND_INVAL,
        send_flags: MLX5R_SEND_SIGNALED,
        imm: next,
        ..Default::default()
    };
    assert_eq!(r.post(0, &inv), 0);
    r.ring(0, 0);
    let (rc, c) = r.poll(1);
    assert_eq!((rc, c.opcode, c.imm), (MLX5R_CQE_OK, 4, next), "RESP_SEND_INV is a success");
    assert_eq!(r.poll(0).0, MLX5R_CQE_OK);
    let bad = SendWr {
        wr_id: 9,
        sg_list: s.as_ptr(),
        num_sge: 1,
        opcode: MLX5R_OPCODE_RDMA_READ,
        remote_addr: r.addr(1, 0),
        rkey: r.rkey[1] ^ 0xff,
        ..Default::default()
    };
    assert_eq!(r.post(0, &bad), 0);
    r.ring(0, 0);
    let (rc, c) = r.poll(0);
    assert_eq!(rc, MLX5R_CQE_ERROR);
    assert_eq!((c.syndrome, c.vendor_err, c.wqe_opcode), (0x13, 0x88, 0x10));
    assert_eq!(c.qpn, r.sq(0).qpn);
    assert_eq!(c.wqe_counter as u32, r.sq(0).producer() - 1);
}

#[test]
fn ud_send_needs_an_address_vector() {
    let r = Rig::new(MLX5R_QPT_UD, 16, 0);
    let s = [sge(r.addr(0, 0), 8, r.lkey[0])];
    let mut wr = SendWr { sg_list: s.as_ptr(), num_sge: 1, opcode: MLX5R_OPCODE_SEND, ..Default::default() };
    let pi = r.sq(0).producer();
    assert_eq!(r.post(0, &wr), MLX5R_ERR_MISSING_AV);
    wr.opcode = MLX5R_OPCODE_RDMA_WRITE;
    assert_eq!(r.post(0, &wr), MLX5R_ERR_BAD_OPCODE);
    assert_eq!(r.sq(0).producer(), pi, "nothing written on error");
    let av = AddressVector::ib(2, 0);
    wr = SendWr { opcode: MLX5R_OPCODE_SEND, av: &av, remote_qpn: 1, remote_qkey: 0x1111, ..wr };
    assert_eq!(r.post(0, &wr), 0);
}
