//! TEST-ONLY mini driver: writes WQEs into a QP's send ring, receive WQEs into its RQ, rings
//! doorbells and polls CQs exactly as spec §1.5–§1.7, §4.1, §5.5 describe. It exists only
//! to exercise the model; the real driver is the mlx5-api crate.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use mlx5_sim::wire::{Cqe64, ErrCqe};
use mlx5_sim::{
    access, CqResources, Fabric, FabricConfig, HostConfig, MrKeys, Nic, QpInitAttr, QpModify, QpResources,
    QpState, QpType, RcPath, SrqInitAttr, SrqResources,
};

/// A segment of a test WQE after the ctrl segment.
#[derive(Clone, Copy, Debug)]
pub enum Seg<'a> {
    Raddr {
        raddr: u64,
        rkey: u32,
    },
    Data {
        addr: u64,
        len: u32,
        lkey: u32,
    },
    Inline(&'a [u8]),
    Atomic {
        swap_add: u64,
        compare: u64,
    },
    /// Raw 16 bytes (for malformed WQEs).
    Raw([u8; 16]),
    /// Address vector (UD / DCI): 48 bytes, or 16 when `ext` is false.
    Av(Av),
}

/// Test-side address vector (spec §3.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Av {
    /// DC key, or the Q_Key in the high 32 bits (UD).
    pub key: u64,
    pub dqpn: u32,
    /// Legacy 16-byte AV when false.
    pub ext: bool,
    pub stat_rate_sl: u8,
    pub fl_mlid: u8,
    pub rlid: u16,
    pub rmac: [u8; 6],
    pub tclass: u8,
    pub hop_limit: u8,
    pub grh: bool,
    pub sgid_index: u8,
    pub flow_label: u32,
    pub rgid: [u8; 16],
}

impl Av {
    /// UD AV to `dqpn` with `qkey`, IB, no GRH.
    pub fn ud_ib(qkey: u32, dqpn: u32, dlid: u16) -> Av {
        Av { key: u64::from(qkey) << 32, dqpn, ext: true, rlid: dlid, ..Default::default() }
    }
    /// UD AV over RoCE to a host with this GID and MAC.
    pub fn ud_roce(qkey: u32, dqpn: u32, gid: [u8; 16], mac: [u8; 6]) -> Av {
        Av {
            key: u64::from(qkey) << 32,
            dqpn,
            ext: true,
            rlid: 0xc000,
            rmac: mac,
            hop_limit: 64,
            rgid: gid,
            ..Default::default()
        }
    }
    /// DC AV (IB, no GRH).
    pub fn dc_ib(dc_key: u64, dct: u32, dlid: u16) -> Av {
        Av { key: dc_key, dqpn: dct, ext: true, rlid: dlid, ..Default::default() }
    }
    /// DC AV over RoCE.
    pub fn dc_roce(dc_key: u64, dct: u32, gid: [u8; 16], mac: [u8; 6]) -> Av {
        Av { key: dc_key, ..Av::ud_roce(0, dct, gid, mac) }
    }
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; 48];
        b[0..8].copy_from_slice(&self.key.to_be_bytes());
        let dqp = (self.dqpn & 0xff_ffff) | if self.ext { 0x8000_0000 } else { 0 };
        b[8..12].copy_from_slice(&dqp.to_be_bytes());
        b[12] = self.stat_rate_sl;
        b[13] = self.fl_mlid;
        b[14..16].copy_from_slice(&self.rlid.to_be_bytes());
        b[20..26].copy_from_slice(&self.rmac);
        b[26] = self.tclass;
        b[27] = self.hop_limit;
        let g =
            (u32::from(self.grh) << 30) | (u32::from(self.sgid_index) << 20) | (self.flow_label & 0xf_ffff);
        b[28..32].copy_from_slice(&g.to_be_bytes());
        b[32..48].copy_from_slice(&self.rgid);
        if !self.ext {
            b.truncate(16);
        }
        b
    }
}

/// Host memory registered as an MR (boxed so its address is stable).
pub struct Buf {
    pub mem: Box<[u8]>,
    pub keys: MrKeys,
}

impl Buf {
    pub fn new(nic: &Nic, pd: u32, len: usize, acc: u32) -> Buf {
        let mut mem = vec![0u8; len].into_boxed_slice();
        let addr = mem.as_mut_ptr() as u64;
        // SAFETY: the box lives as long as the Buf; tests drop Bufs after the fabric work.
        let keys = unsafe { nic.reg_mr(pd, addr, len as u64, acc) }.expect("reg_mr");
        Buf { mem, keys }
    }
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    /// Reads through a raw pointer (the model may write concurrently in threaded tests).
    pub fn read(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.mem.len()];
        // SAFETY: in-bounds copy of our own allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.mem.as_ptr(), v.as_mut_ptr(), v.len()) };
        v
    }
    pub fn fill(&mut self, f: impl Fn(usize) -> u8) {
        for (i, b) in self.mem.iter_mut().enumerate() {
            *b = f(i);
        }
    }
}

pub const ALL_ACCESS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

pub struct TestCq {
    pub res: CqResources,
    pub ci: u32,
}

/// A parsed CQE, success or error.
#[derive(Debug, Clone, Copy)]
pub struct Polled {
    pub raw: [u8; 64],
}

impl Polled {
    pub fn cqe(&self) -> Cqe64<&[u8]> {
        Cqe64::new_checked(&self.raw[..]).unwrap()
    }
    pub fn err(&self) -> ErrCqe<&[u8]> {
        ErrCqe::new_checked(&self.raw[..]).unwrap()
    }
    pub fn opcode(&self) -> u8 {
        self.raw[63] >> 4
    }
    pub fn owner(&self) -> u8 {
        self.raw[63] & 1
    }
    pub fn syndrome(&self) -> u8 {
        self.err().syndrome()
    }
    pub fn vendor(&self) -> u8 {
        self.err().vendor_err_synd()
    }
    pub fn wqe_counter(&self) -> u16 {
        self.cqe().wqe_counter()
    }
    /// Opcode byte of sop_drop_qpn / s_wqe_opcode_qpn.
    pub fn wqe_opcode(&self) -> u8 {
        (self.cqe().sop_drop_qpn() >> 24) as u8
    }
    pub fn qpn(&self) -> u32 {
        self.cqe().sop_drop_qpn() & 0xff_ffff
    }
}

impl TestCq {
    pub fn new(nic: &Nic, cnt: u32, size: u32) -> TestCq {
        TestCq { res: nic.create_cq(cnt, size).expect("create_cq"), ci: 0 }
    }

    /// Polls one CQE (Acquire on op_own), publishes the consumer index (Release).
    pub fn poll(&mut self) -> Option<Polled> {
        let r = &self.res;
        let slot = (self.ci & (r.cqe_cnt - 1)) as usize * r.cqe_size as usize;
        let proper = slot + r.cqe_size as usize - 64;
        // SAFETY: in-bounds byte of the model-owned CQ ring, accessed atomically.
        let op_own = unsafe { AtomicU8::from_ptr(r.buf.add(proper + 63)) }.load(Ordering::Acquire);
        let owner_expected = ((self.ci >> r.cqe_cnt.trailing_zeros()) & 1) as u8;
        if op_own >> 4 == 15 || op_own & 1 != owner_expected {
            return None;
        }
        let mut raw = [0u8; 64];
        // SAFETY: the CQE is ours now (owner bit seen with Acquire).
        unsafe { std::ptr::copy_nonoverlapping(r.buf.add(proper), raw.as_mut_ptr(), 63) };
        raw[63] = op_own;
        self.ci += 1;
        // SAFETY: dbrec word 0 of the model-owned CQ doorbell record.
        unsafe { AtomicU32::from_ptr(r.dbrec) }.store((self.ci & 0xff_ffff).to_be(), Ordering::Release);
        Some(raw).map(|raw| Polled { raw })
    }

    pub fn poll_all(&mut self) -> Vec<Polled> {
        std::iter::from_fn(|| self.poll()).collect()
    }

    pub fn expect_one(&mut self) -> Polled {
        let v = self.poll_all();
        assert_eq!(v.len(), 1, "expected exactly one CQE, got {v:?}");
        v[0]
    }
}

pub struct TestQp {
    pub nic: Nic,
    pub res: QpResources,
    pub pi: u16,
    pub rq_head: u16,
    pub bf_offset: u32,
}

impl TestQp {
    pub fn new(nic: &Nic, pd: u32, scq: u32, rcq: u32, sq: u32, rq: u32, uidx: u32) -> TestQp {
        TestQp::create(
            nic,
            &QpInitAttr {
                qp_type: QpType::Rc,
                pdn: pd,
                send_cqn: scq,
                recv_cqn: rcq,
                sq_wqe_cnt: sq,
                rq_wqe_cnt: rq,
                rq_stride: 64,
                user_index: uidx,
                srqn: None,
                dc_key: 0,
                ..Default::default()
            },
        )
    }

    pub fn create(nic: &Nic, attr: &QpInitAttr) -> TestQp {
        let res = nic.create_qp(attr).expect("create_qp");
        TestQp { nic: nic.clone(), res, pi: 0, rq_head: 0, bf_offset: 0 }
    }

    /// Posts `n` unsignaled NOPs (to move pi, e.g. to a golden example's index).
    pub fn advance_with_nops(&mut self, n: u16) {
        for _ in 0..n {
            self.post(0x00, 0, [0; 4], &[]);
        }
    }

    pub fn qpn(&self) -> u32 {
        self.res.qpn
    }

    fn ring_len(&self) -> usize {
        self.res.sq_wqe_cnt as usize * 64
    }

    /// Builds the WQE bytes (ctrl + segments, DS-padded).
    pub fn build(&self, opcode: u8, fm_ce_se: u8, imm: [u8; 4], segs: &[Seg]) -> Vec<u8> {
        let mut body = Vec::new();
        for s in segs {
            match *s {
                Seg::Raddr { raddr, rkey } => {
                    body.extend_from_slice(&raddr.to_be_bytes());
                    body.extend_from_slice(&rkey.to_be_bytes());
                    body.extend_from_slice(&[0; 4]);
                }
                Seg::Data { addr, len, lkey } => {
                    body.extend_from_slice(&len.to_be_bytes());
                    body.extend_from_slice(&lkey.to_be_bytes());
                    body.extend_from_slice(&addr.to_be_bytes());
                }
                Seg::Inline(d) => {
                    body.extend_from_slice(&(d.len() as u32 | 0x8000_0000).to_be_bytes());
                    body.extend_from_slice(d);
                    while body.len() % 16 != 0 {
                        body.push(0xee); // stale pad bytes are don't-care
                    }
                }
                Seg::Atomic { swap_add, compare } => {
                    body.extend_from_slice(&swap_add.to_be_bytes());
                    body.extend_from_slice(&compare.to_be_bytes());
                }
                Seg::Raw(b) => body.extend_from_slice(&b),
                Seg::Av(av) => body.extend_from_slice(&av.bytes()),
            }
        }
        let ds = 1 + body.len() / 16;
        let mut w = Vec::with_capacity(ds * 16);
        w.extend_from_slice(&((u32::from(self.pi) << 8) | u32::from(opcode)).to_be_bytes());
        w.extend_from_slice(&((self.qpn() << 8) | ds as u32).to_be_bytes());
        w.extend_from_slice(&[0, 0, 0, fm_ce_se]);
        w.extend_from_slice(&imm);
        w.extend_from_slice(&body);
        w
    }

    /// Writes WQE bytes at the current pi (byte ring, wrapping), advances pi, returns the
    /// wqe_index and the first 8 bytes.
    pub fn write_wqe(&mut self, w: &[u8]) -> (u16, [u8; 8]) {
        let ring = self.ring_len();
        let start = (usize::from(self.pi) & (self.res.sq_wqe_cnt as usize - 1)) * 64;
        for (i, b) in w.iter().enumerate() {
            // SAFETY: offset modulo the ring length stays inside the SQ buffer.
            unsafe { self.res.sq_buf.add((start + i) % ring).write(*b) };
        }
        let idx = self.pi;
        self.pi = self.pi.wrapping_add(w.len().div_ceil(64) as u16);
        let mut db = [0u8; 8];
        db.copy_from_slice(&w[..8]);
        (idx, db)
    }

    /// Stores the SQ doorbell record (Release, BE).
    pub fn update_sq_dbr(&self) {
        // SAFETY: word 1 of the model-owned doorbell record.
        unsafe { AtomicU32::from_ptr(self.res.dbrec.add(1)) }
            .store(u32::from(self.pi).to_be(), Ordering::Release);
    }

    pub fn ring(&mut self, db: [u8; 8]) {
        self.nic.uar_write64(self.res.uar_index, self.bf_offset, db);
        self.bf_offset ^= self.res.bf_size;
    }

    /// Posts one WQE and rings a plain doorbell; returns its wqe_index.
    pub fn post(&mut self, opcode: u8, fm_ce_se: u8, imm: [u8; 4], segs: &[Seg]) -> u16 {
        let w = self.build(opcode, fm_ce_se, imm, segs);
        let (idx, db) = self.write_wqe(&w);
        self.update_sq_dbr();
        self.ring(db);
        idx
    }

    /// Writes one WQE and moves the doorbell record, without ringing: returns the
    /// doorbell value a later [`TestQp::ring`] for it (and every WQE before it) takes.
    pub fn post_unrung(&mut self, opcode: u8, fm_ce_se: u8, imm: [u8; 4], segs: &[Seg]) -> [u8; 8] {
        let w = self.build(opcode, fm_ce_se, imm, segs);
        let (_, db) = self.write_wqe(&w);
        self.update_sq_dbr();
        db
    }

    /// Posts one WQE and rings BlueFlame with the whole WQE copied from the ring.
    pub fn post_bf(&mut self, opcode: u8, fm_ce_se: u8, imm: [u8; 4], segs: &[Seg]) -> u16 {
        let w = self.build(opcode, fm_ce_se, imm, segs);
        let start = self.pi;
        let (idx, _) = self.write_wqe(&w);
        self.update_sq_dbr();
        let n = w.len().div_ceil(64) * 64;
        let ring = self.ring_len();
        let s = (usize::from(start) & (self.res.sq_wqe_cnt as usize - 1)) * 64;
        // SAFETY: reads modulo ring length inside the SQ buffer.
        let data: Vec<u8> = (0..n).map(|i| unsafe { *self.res.sq_buf.add((s + i) % ring) }).collect();
        self.nic.uar_write_bf(self.res.uar_index, self.bf_offset, &data);
        self.bf_offset ^= self.res.bf_size;
        idx
    }

    /// Posts a receive WQE with these (addr, len, lkey) entries and a terminator.
    pub fn post_recv(&mut self, sges: &[(u64, u32, u32)]) -> u16 {
        let stride = self.res.rq_stride as usize;
        let slot = (usize::from(self.rq_head) & (self.res.rq_wqe_cnt as usize - 1)) * stride;
        let mut buf = [0u8; 1024];
        let w = &mut buf[..stride];
        for (i, &(addr, len, lkey)) in sges.iter().enumerate() {
            w[i * 16..i * 16 + 4].copy_from_slice(&len.to_be_bytes());
            w[i * 16 + 4..i * 16 + 8].copy_from_slice(&lkey.to_be_bytes());
            w[i * 16 + 8..i * 16 + 16].copy_from_slice(&addr.to_be_bytes());
        }
        if sges.len() * 16 < stride {
            let i = sges.len();
            w[i * 16 + 4..i * 16 + 8].copy_from_slice(&0x100u32.to_be_bytes());
        }
        // SAFETY: one stride inside the RQ part of the QP buffer.
        unsafe { std::ptr::copy_nonoverlapping(w.as_ptr(), self.res.rq_buf.add(slot), stride) };
        let c = self.rq_head;
        self.rq_head = self.rq_head.wrapping_add(1);
        // SAFETY: word 0 of the doorbell record.
        unsafe { AtomicU32::from_ptr(self.res.dbrec) }
            .store(u32::from(self.rq_head).to_be(), Ordering::Release);
        c
    }

    /// Posts a prebuilt WQE (from `build`) with the current pi patched in, without heap
    /// allocation; rings a plain doorbell, or BlueFlame when `bf`.
    pub fn post_template(&mut self, t: &[u8], bf: bool) -> u16 {
        let mut w = [0u8; 1024];
        let n = t.len().div_ceil(64) * 64;
        w[..t.len()].copy_from_slice(t);
        w[1..3].copy_from_slice(&self.pi.to_be_bytes());
        let (idx, db) = self.write_wqe(&w[..t.len()]);
        self.update_sq_dbr();
        if bf {
            self.nic.uar_write_bf(self.res.uar_index, self.bf_offset, &w[..n]);
            self.bf_offset ^= self.res.bf_size;
        } else {
            self.ring(db);
        }
        idx
    }

    pub fn state(&self) -> QpState {
        self.nic.qp_state(self.qpn()).unwrap()
    }
}

pub fn init_rtr_rts(nic: &Nic, qpn: u32, path: RcPath, acc: u32, rnr_retry: u8) {
    nic.modify_qp(
        qpn,
        &QpModify {
            state: Some(QpState::Init),
            port: Some(1),
            access_flags: Some(acc),
            ..Default::default()
        },
    )
    .unwrap();
    nic.modify_qp(
        qpn,
        &QpModify {
            state: Some(QpState::Rtr),
            path: Some(path),
            path_mtu: Some(4096),
            rq_psn: Some(0),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..Default::default()
        },
    )
    .unwrap();
    nic.modify_qp(
        qpn,
        &QpModify {
            state: Some(QpState::Rts),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(rnr_retry),
            sq_psn: Some(0),
            max_rd_atomic: Some(16),
            ..Default::default()
        },
    )
    .unwrap();
}

/// Two IB hosts (LID 1 and 2), a PD, send/recv CQs and a connected RC QP on each.
pub struct Pair {
    pub fabric: Fabric,
    pub a: Nic,
    pub b: Nic,
    pub pda: u32,
    pub pdb: u32,
    pub scq_a: TestCq,
    pub rcq_a: TestCq,
    pub scq_b: TestCq,
    pub rcq_b: TestCq,
    pub qa: TestQp,
    pub qb: TestQp,
}

pub struct PairOpts {
    pub cfg: FabricConfig,
    pub sq: u32,
    pub cq: u32,
    pub cqe_size: u32,
    pub acc_a: u32,
    pub acc_b: u32,
    pub rnr_retry: u8,
}

impl Default for PairOpts {
    fn default() -> Self {
        PairOpts {
            cfg: FabricConfig::default(),
            sq: 8,
            cq: 64,
            cqe_size: 64,
            acc_a: ALL_ACCESS & !access::LOCAL_WRITE,
            acc_b: ALL_ACCESS & !access::LOCAL_WRITE,
            rnr_retry: 7,
        }
    }
}

impl Pair {
    pub fn new() -> Pair {
        Pair::with(PairOpts::default())
    }

    pub fn with(o: PairOpts) -> Pair {
        let fabric = Fabric::new(o.cfg);
        let a = fabric.add_host(HostConfig::infiniband("mlx5_0", 1));
        let b = fabric.add_host(HostConfig::infiniband("mlx5_1", 2));
        let pda = a.alloc_pd().unwrap();
        let pdb = b.alloc_pd().unwrap();
        let scq_a = TestCq::new(&a, o.cq, o.cqe_size);
        let rcq_a = TestCq::new(&a, o.cq, o.cqe_size);
        let scq_b = TestCq::new(&b, o.cq, o.cqe_size);
        let rcq_b = TestCq::new(&b, o.cq, o.cqe_size);
        let qa = TestQp::new(&a, pda, scq_a.res.cqn, rcq_a.res.cqn, o.sq, 16, 0x11);
        let qb = TestQp::new(&b, pdb, scq_b.res.cqn, rcq_b.res.cqn, o.sq, 16, 0x22);
        let pa = RcPath { dest_qpn: qb.qpn(), dlid: 2, ..Default::default() };
        let pb = RcPath { dest_qpn: qa.qpn(), dlid: 1, ..Default::default() };
        init_rtr_rts(&a, qa.qpn(), pa, o.acc_a, o.rnr_retry);
        init_rtr_rts(&b, qb.qpn(), pb, o.acc_b, o.rnr_retry);
        Pair { fabric, a, b, pda, pdb, scq_a, rcq_a, scq_b, rcq_b, qa, qb }
    }
}

/// Opcodes (spec §2.3), repeated here so the tests read like the spec.
pub mod op {
    pub const NOP: u8 = 0x00;
    pub const SEND_INVAL: u8 = 0x01;
    pub const RDMA_WRITE: u8 = 0x08;
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    pub const SEND: u8 = 0x0a;
    pub const SEND_IMM: u8 = 0x0b;
    pub const RDMA_READ: u8 = 0x10;
    pub const ATOMIC_CS: u8 = 0x11;
    pub const ATOMIC_FA: u8 = 0x12;
}

/// fm_ce_se: CE = 2 (always generate a CQE).
pub const SIGNALED: u8 = 0x08;

/// A test-side SRQ driver (spec §4.3), like rdma-core's: every WQE i initially points to
/// i+1 (the last to 0); posts go to `head`, which then follows `next_wqe_index`; `free`
/// re-links a completed WQE at the tail. One WQE stays unposted as the list's sentinel.
pub struct TestSrq {
    pub res: SrqResources,
    pub head: u16,
    pub tail: u16,
    pub posted: u16,
}

impl TestSrq {
    pub fn new(nic: &Nic, pd: u32, wqe_cnt: u32, stride: u32) -> TestSrq {
        let res =
            nic.create_srq(&SrqInitAttr { pdn: pd, wqe_cnt, stride, user_index: 0 }).expect("create_srq");
        let s = TestSrq { res, head: 0, tail: (wqe_cnt - 1) as u16, posted: 0 };
        for i in 0..wqe_cnt as u16 {
            s.set_next(i, (i + 1) % wqe_cnt as u16);
        }
        s
    }

    fn wqe(&self, i: u16) -> *mut u8 {
        // SAFETY (arithmetic): index masked into the SRQ buffer.
        self.res.buf.wrapping_add(usize::from(i) % self.res.wqe_cnt as usize * self.res.stride as usize)
    }

    pub fn next(&self, i: u16) -> u16 {
        let p = self.wqe(i);
        // SAFETY: bytes 2..4 of a WQE inside the SRQ buffer.
        unsafe { u16::from_be_bytes([*p.add(2), *p.add(3)]) }
    }

    pub fn set_next(&self, i: u16, next: u16) {
        let p = self.wqe(i);
        // SAFETY: bytes 2..4 of a WQE inside the SRQ buffer.
        unsafe {
            *p.add(2) = (next >> 8) as u8;
            *p.add(3) = next as u8;
        }
    }

    /// Writes the scatter list (with a terminator when shorter than the stride) into WQE
    /// `head`, moves `head` along the list and publishes the posted count; returns the index.
    pub fn post(&mut self, sges: &[(u64, u32, u32)]) -> u16 {
        assert_ne!(self.head, self.tail, "SRQ full (sentinel)");
        let idx = self.head;
        let p = self.wqe(idx);
        let max = (self.res.stride as usize - 16) / 16;
        for (i, &(addr, len, lkey)) in sges.iter().enumerate() {
            let mut e = [0u8; 16];
            e[0..4].copy_from_slice(&len.to_be_bytes());
            e[4..8].copy_from_slice(&lkey.to_be_bytes());
            e[8..16].copy_from_slice(&addr.to_be_bytes());
            // SAFETY: entry i of the WQE, inside the stride.
            unsafe { std::ptr::copy_nonoverlapping(e.as_ptr(), p.add(16 + 16 * i), 16) };
        }
        if sges.len() < max {
            let mut e = [0u8; 16];
            e[4..8].copy_from_slice(&0x100u32.to_be_bytes());
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(e.as_ptr(), p.add(16 + 16 * sges.len()), 16) };
        }
        self.head = self.next(idx);
        self.posted = self.posted.wrapping_add(1);
        // SAFETY: word 0 of the SRQ doorbell record.
        unsafe { AtomicU32::from_ptr(self.res.dbrec) }
            .store(u32::from(self.posted).to_be(), Ordering::Release);
        idx
    }

    /// Re-links a completed WQE at the tail of the free list.
    pub fn free(&mut self, idx: u16) {
        self.set_next(self.tail, idx);
        self.tail = idx;
    }
}

pub fn modify(nic: &Nic, qpn: u32, m: QpModify) {
    nic.modify_qp(qpn, &m).unwrap_or_else(|e| panic!("modify_qp {m:?}: {e}"));
}

/// RESET→INIT→RTR→RTS for a UD QP.
pub fn ud_up(nic: &Nic, qpn: u32, qkey: u32) {
    modify(
        nic,
        qpn,
        QpModify { state: Some(QpState::Init), port: Some(1), qkey: Some(qkey), ..Default::default() },
    );
    modify(nic, qpn, QpModify { state: Some(QpState::Rtr), ..Default::default() });
    modify(nic, qpn, QpModify { state: Some(QpState::Rts), sq_psn: Some(0), ..Default::default() });
}

/// RESET→INIT→RTR→RTS for a DCI.
pub fn dci_up(nic: &Nic, qpn: u32, rnr_retry: u8) {
    modify(nic, qpn, QpModify { state: Some(QpState::Init), port: Some(1), ..Default::default() });
    modify(nic, qpn, QpModify { state: Some(QpState::Rtr), path_mtu: Some(4096), ..Default::default() });
    modify(
        nic,
        qpn,
        QpModify {
            state: Some(QpState::Rts),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(rnr_retry),
            sq_psn: Some(0),
            max_rd_atomic: Some(16),
            ..Default::default()
        },
    );
}

/// RESET→INIT→RTR for a DCT; returns its DCT number.
pub fn dct_up(nic: &Nic, qpn: u32, acc: u32) -> u32 {
    modify(
        nic,
        qpn,
        QpModify { state: Some(QpState::Init), port: Some(1), access_flags: Some(acc), ..Default::default() },
    );
    modify(
        nic,
        qpn,
        QpModify {
            state: Some(QpState::Rtr),
            path_mtu: Some(4096),
            min_rnr_timer: Some(12),
            ..Default::default()
        },
    );
    nic.dct_number(qpn).expect("DCT number after RTR")
}

/// A UD QP (SQ of `sq` WQEBBs, RQ of 16 × 64 bytes unless `srqn` is given).
pub fn ud_qp(nic: &Nic, pd: u32, scq: u32, rcq: u32, sq: u32, srqn: Option<u32>, uidx: u32) -> TestQp {
    TestQp::create(
        nic,
        &QpInitAttr {
            qp_type: QpType::Ud,
            pdn: pd,
            send_cqn: scq,
            recv_cqn: rcq,
            sq_wqe_cnt: sq,
            rq_wqe_cnt: if srqn.is_some() { 0 } else { 16 },
            rq_stride: 64,
            user_index: uidx,
            srqn,
            dc_key: 0,
            ..Default::default()
        },
    )
}

pub fn dci_qp(nic: &Nic, pd: u32, scq: u32, sq: u32, uidx: u32) -> TestQp {
    TestQp::create(
        nic,
        &QpInitAttr {
            qp_type: QpType::Dci,
            pdn: pd,
            send_cqn: scq,
            recv_cqn: scq,
            sq_wqe_cnt: sq,
            user_index: uidx,
            ..Default::default()
        },
    )
}

/// Creates a DCT (no rings) receiving from `srqn` into CQ `rcq`; returns its QP handle.
pub fn dct_qp(nic: &Nic, pd: u32, rcq: u32, srqn: u32, dc_key: u64, uidx: u32) -> u32 {
    let r = nic
        .create_qp(&QpInitAttr {
            qp_type: QpType::Dct,
            pdn: pd,
            recv_cqn: rcq,
            user_index: uidx,
            srqn: Some(srqn),
            dc_key,
            ..Default::default()
        })
        .expect("create DCT");
    assert!(r.sq_buf.is_null() && r.rq_buf.is_null() && r.dbrec.is_null());
    r.qpn
}

/// The segments after the ctrl of a UMR binding a type-2 memory window to QP `qpn`
/// under key variant `new_rkey & 0xff`: `len` bytes of the MR of `lkey` at `addr`, with
/// the mkey context access byte `access` (0x10 remote read, 0x20 remote write), laid
/// out from the wire-format reference §3.7 (UMR ctrl 48 B, mkey context 64 B, one KLM
/// entry and three zero ones): post with opcode 0x25 and `imm` = the window's key.
pub fn umr_bind2(qpn: u32, new_rkey: u32, lkey: u32, addr: u64, len: u32, access: u8) -> Vec<Seg<'static>> {
    let mut ctrl = [[0u8; 16]; 3];
    ctrl[0][0] = 0x80 | 0x20 | 0x10; // inline, check free, translation offset
    ctrl[0][4..6].copy_from_slice(&4u16.to_be_bytes()); // klm_octowords
    let mask: u64 = 1 << 29 | 1 << 13 | 1 << 14 | 1 | 1 << 6 | 0xf << 18;
    ctrl[0][8..16].copy_from_slice(&mask.to_be_bytes());
    let mut mkey = [[0u8; 16]; 4];
    mkey[0][2] = access;
    mkey[0][4..8].copy_from_slice(&(qpn << 8 | (new_rkey & 0xff)).to_be_bytes());
    mkey[1][0..8].copy_from_slice(&addr.to_be_bytes());
    mkey[1][8..16].copy_from_slice(&u64::from(len).to_be_bytes());
    let mut klm = [[0u8; 16]; 4];
    klm[0][0..4].copy_from_slice(&len.to_be_bytes());
    klm[0][4..8].copy_from_slice(&lkey.to_be_bytes());
    klm[0][8..16].copy_from_slice(&addr.to_be_bytes());
    ctrl.into_iter().chain(mkey).chain(klm).map(Seg::Raw).collect()
}
