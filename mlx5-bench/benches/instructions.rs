//! Instruction counts of the hot path with gungraun (callgrind), each Rust
//! figure beside the C baseline's for the same work (`compare_by_id`: the
//! C bench of the same id follows with its difference). Every bench does
//! `N` = 1000 operations and is counted only inside the phase function doing
//! them (its entry point), so set-up and checks are left out: instructions
//! per operation are the count over 1000. The kinds are listed in
//! `mlx5_bench::KINDS`; `poll_zip` has no C counterpart.
//!
//! Needs valgrind and `cargo install gungraun-runner --version 0.20.0`, then
//! `cargo bench -p mlx5-bench --bench instructions`. The C baseline is built
//! where rdma-core's mlx5dv.h is installed (Debian: libibverbs-dev).

use std::hint::black_box;

use gungraun::{
    library_benchmark, library_benchmark_group, main, Callgrind, EntryPoint, LibraryBenchmarkConfig,
};

/// Operations per bench.
const N: u32 = 1000;

/// Count only inside the function `phase` (its Rust or C symbol).
fn only(phase: &str) -> LibraryBenchmarkConfig {
    let mut tool = Callgrind::default();
    tool.entry_point(EntryPoint::Custom(format!("*{phase}*")));
    let mut config = LibraryBenchmarkConfig::default();
    config.tool(tool);
    config
}

#[library_benchmark]
#[bench::post(args = ("post"), config = only("post_phase"))]
#[bench::post_vary(args = ("post_vary"), config = only("post_vary_phase"))]
#[bench::post_inline(args = ("post_inline"), config = only("post_inline_phase"))]
#[bench::post_ud(args = ("post_ud"), config = only("post_ud_phase"))]
#[bench::post_dc(args = ("post_dc"), config = only("post_dc_phase"))]
#[bench::post_bf(args = ("post_bf"), config = only("post_bf_phase"))]
#[bench::recv(args = ("recv"), config = only("recv_phase"))]
#[bench::poll(args = ("poll"), config = only("poll_phase"))]
#[bench::poll1(args = ("poll1"), config = only("poll1_phase"))]
#[bench::poll_zip(args = ("poll_zip"), config = only("poll_phase"))]
#[bench::poll_resp(args = ("poll_resp"), config = only("poll_phase"))]
#[bench::poll_err(args = ("poll_err"), config = only("poll_phase"))]
fn rust(what: &str) {
    mlx5_bench::run(what, black_box(N));
}

#[cfg(c_baseline)]
#[library_benchmark]
#[bench::post(args = ("post"), config = only("post_phase"))]
#[bench::post_vary(args = ("post_vary"), config = only("post_vary_phase"))]
#[bench::post_inline(args = ("post_inline"), config = only("post_inline_phase"))]
#[bench::post_ud(args = ("post_ud"), config = only("post_ud_phase"))]
#[bench::post_dc(args = ("post_dc"), config = only("post_dc_phase"))]
#[bench::post_bf(args = ("post_bf"), config = only("post_bf_phase"))]
#[bench::recv(args = ("recv"), config = only("recv_phase"))]
#[bench::poll(args = ("poll"), config = only("poll_phase"))]
#[bench::poll1(args = ("poll1"), config = only("poll1_phase"))]
#[bench::poll_resp(args = ("poll_resp"), config = only("poll_phase"))]
#[bench::poll_err(args = ("poll_err"), config = only("poll_phase"))]
fn c(what: &str) {
    assert!(mlx5_bench::run_c(what, black_box(N)));
}

#[cfg(c_baseline)]
library_benchmark_group!(name = hot_path, compare_by_id = true, benchmarks = [rust, c]);
#[cfg(not(c_baseline))]
library_benchmark_group!(name = hot_path, benchmarks = [rust]);

main!(library_benchmark_groups = hot_path);
