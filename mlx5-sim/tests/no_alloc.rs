//! The steady-state data path does not allocate: doorbells, WQE execution, CQE writes and
//! ticks in deterministic mode (all on the calling thread), and the doorbell send path in
//! threaded mode. Counted with a per-thread counting global allocator.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use mlx5_sim::{ExecMode, FabricConfig};

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ON.with(|o| o.get()) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if ON.with(|o| o.get()) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn counted(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ON.with(|o| o.set(true));
    f();
    ON.with(|o| o.set(false));
    COUNT.with(|c| c.get())
}

/// Rounds of WRITE (SGE, doorbell), WRITE (inline, BlueFlame) and SEND_IMM with a posted
/// receive; returns the allocations counted on this thread over 1000 rounds.
fn run(mode: ExecMode) -> u64 {
    let mut p = Pair::with(PairOpts {
        cfg: FabricConfig { mode, ..Default::default() },
        sq: 64,
        ..Default::default()
    });
    let src = Buf::new(&p.a, p.pda, 4096, ALL_ACCESS);
    let dst = Buf::new(&p.b, p.pdb, 4096, ALL_ACCESS);
    let raddr = Seg::Raddr { raddr: dst.addr(), rkey: dst.keys.rkey };
    let sge = Seg::Data { addr: src.addr(), len: 64, lkey: src.keys.lkey };
    let w1 = p.qa.build(op::RDMA_WRITE, SIGNALED, [0; 4], &[raddr, sge]);
    let w2 = p.qa.build(op::RDMA_WRITE, SIGNALED, [0; 4], &[raddr, Seg::Inline(&[1; 32])]);
    let w3 = p.qa.build(op::SEND_IMM, SIGNALED, [0, 0, 0, 7], &[sge]);
    let round = |p: &mut Pair| {
        p.qb.post_recv(&[(dst.addr(), 4096, dst.keys.lkey)]);
        p.qa.post_template(&w1, false);
        p.qa.post_template(&w2, true);
        p.qa.post_template(&w3, false);
        let (mut sends, mut recvs) = (0, 0);
        while sends < 3 || recvs < 1 {
            while p.scq_a.poll().is_some() {
                sends += 1;
            }
            while p.rcq_b.poll().is_some() {
                recvs += 1;
            }
            p.a.tick();
        }
    };
    for _ in 0..100 {
        round(&mut p); // warm-up: lazily initialised state in std and the channels
    }
    let n = counted(|| {
        for _ in 0..1000 {
            round(&mut p);
        }
    });
    let s = p.a.stats();
    assert_eq!(s.doorbell_mismatch + s.bf_content_mismatch + s.bf_offset_mismatch, 0, "{s:?}");
    n
}

#[test]
fn deterministic_data_path_does_not_allocate() {
    assert_eq!(run(ExecMode::Deterministic), 0);
}

#[test]
fn threaded_doorbell_path_does_not_allocate() {
    assert_eq!(run(ExecMode::Threaded), 0);
}
