//! perftest's statistics, from its `print_report_lat` and `print_report_bw`
//! (`src/perftest_parameters.c`), on time stamps in nanoseconds.
//!
//! Latency: `iters` post time stamps give `iters - 1` deltas; they are
//! sorted, the largest `LAT_MEASURE_TAIL` (2) dropped from the average,
//! median and deviation; t_max and the percentiles index the sorted array
//! as perftest does. One difference, on purpose: perftest computes the
//! standard deviation through `int` temporaries (truncating every term to
//! whole microseconds); here it is computed in floating point.
//!
//! Bandwidth: the average is `size × iters / (last completion − first
//! post)`; the peak is perftest's best window: the minimum over posted
//! WQE `i` and signaled completion `j ≥ i` of `(completed[j] − posted[i]) /
//! (j − i + 1)`. perftest tries every pair (quadratic: minutes for a
//! `-D` run or `-q 256`); here the same minimum comes from one pass with a
//! convex hull (`best_window`), in O(n log n). With `-N`, and always under
//! `-D`, there is no peak (perftest prints 0.00).

/// Dropped from the top of the sorted latency samples (perftest's
/// `LAT_MEASURE_TAIL`).
pub const LAT_MEASURE_TAIL: usize = 2;

/// One latency row, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// Smallest sample (µs).
    pub t_min: f64,
    /// Largest sample (µs).
    pub t_max: f64,
    /// The median (perftest's `t_typical`).
    pub t_typical: f64,
    /// Mean (µs).
    pub t_avg: f64,
    /// Standard deviation (µs).
    pub t_stdev: f64,
    /// 99th percentile (µs).
    pub p99: f64,
    /// 99.9th percentile (µs).
    pub p99_9: f64,
}

impl LatStats {
    /// Every figure multiplied by `k` (`-C`: µs to cycles, `k` the MHz).
    pub fn scaled(self, k: f64) -> LatStats {
        LatStats {
            t_min: self.t_min * k,
            t_max: self.t_max * k,
            t_typical: self.t_typical * k,
            t_avg: self.t_avg * k,
            t_stdev: self.t_stdev * k,
            p99: self.p99 * k,
            p99_9: self.p99_9 * k,
        }
    }
}

/// The CPU clock rate in MHz, as perftest's `get_cpu_mhz` reads it
/// (`/proc/cpuinfo`'s first `cpu MHz`), for `-C`.
pub fn cpu_mhz() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&m: &f64| m > 0.0)
}

/// perftest's `get_median` on the first `n` sorted values.
fn median(n: usize, d: &[f64]) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if (n - 1) % 2 == 1 {
        (d[n / 2] + d[n / 2 - 1]) / 2.0
    } else {
        d[n / 2]
    }
}

/// The latency samples (µs) of post time stamps (ns), in order: what
/// perftest's `-U` prints (and `-H`, sorted, less the tail).
pub fn samples(posted_ns: &[u64], rtt_factor: u32) -> Vec<f64> {
    let q = 1000.0 * f64::from(rtt_factor);
    posted_ns.windows(2).map(|w| (w[1] - w[0]) as f64 / q).collect()
}

/// Latency statistics from post time stamps (ns) of consecutive
/// iterations; `rtt_factor` 2 for ping-pong tests (one-way = RTT/2), 1 for
/// READ and atomics. `None` with fewer than `LAT_MEASURE_TAIL + 2` stamps.
pub fn latency(posted_ns: &[u64], rtt_factor: u32) -> Option<LatStats> {
    if posted_ns.len() < LAT_MEASURE_TAIL + 2 {
        return None;
    }
    let q = 1000.0 * f64::from(rtt_factor);
    let mut d: Vec<f64> = posted_ns.windows(2).map(|w| (w[1] - w[0]) as f64 / q).collect();
    d.sort_by(f64::total_cmp);
    let m = d.len() - LAT_MEASURE_TAIL;
    let avg = d[..m].iter().sum::<f64>() / m as f64;
    let var = d[..m].iter().map(|x| (avg - x) * (avg - x)).sum::<f64>() / m as f64;
    let at = |i: usize| d[i.min(d.len() - 1)];
    Some(LatStats {
        t_min: d[0],
        t_max: at(m),
        t_typical: median(m, &d),
        t_avg: avg,
        t_stdev: var.sqrt(),
        p99: at((m as f64 * 0.99).ceil() as usize),
        p99_9: at((m as f64 * 0.999).ceil() as usize),
    })
}

/// One bandwidth row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwStats {
    /// Bytes per second, best window.
    pub peak_bps: f64,
    /// Bytes per second over the whole run.
    pub avg_bps: f64,
    /// Messages per second over the whole run.
    pub msg_rate: f64,
}

/// Bandwidth from per-WQE post and completion time stamps (ns; an
/// unsignaled WQE completes with the signaled one after it), `cq_mod`
/// the signaling interval (the last WQE is always signaled); `peak`: find
/// the best window (perftest without `-N` and `-D`), else report 0.
pub fn bandwidth(
    size: u64,
    posted_ns: &[u64],
    completed_ns: &[u64],
    cq_mod: usize,
    peak: bool,
) -> Option<BwStats> {
    let n = posted_ns.len();
    if n == 0 || completed_ns.len() != n || cq_mod == 0 {
        return None;
    }
    let total = completed_ns[n - 1].saturating_sub(posted_ns[0]).max(1) as f64;
    let peak_bps = if peak {
        let best = best_window(posted_ns, completed_ns, cq_mod).min(total).max(1e-3);
        size as f64 * 1e9 / best
    } else {
        0.0
    };
    Some(BwStats {
        peak_bps,
        avg_bps: size as f64 * n as f64 * 1e9 / total,
        msg_rate: n as f64 * 1e9 / total,
    })
}

/// perftest's best window: the least `(completed[j] − posted[i]) / (j − i +
/// 1)` over WQEs `i ≤ j` where `j` is signaled (every `cq_mod`-th, and the
/// last), in ns per WQE.
///
/// Each ratio is the slope from the point `(i, posted[i])` to the point
/// `(j + 1, completed[j])`, which lies to the right of every `i ≤ j`. The
/// least slope from a point to points on its left is reached on their
/// upper convex hull, where it falls and then rises along the hull: the
/// hull grows by one point per WQE (a monotone stack) and each signaled `j`
/// finds its minimum by bisection. Exact (integer cross products), O(n log
/// n) instead of perftest's O(n² / cq_mod).
pub fn best_window(posted: &[u64], completed: &[u64], cq_mod: usize) -> f64 {
    let n = posted.len().min(completed.len());
    // Cross product of (b - a) × (c - a) for points (x, y).
    let cross = |a: (i128, i128), b: (i128, i128), c: (i128, i128)| -> i128 {
        (b.0 - a.0) * (c.1 - a.1) - (b.1 - a.1) * (c.0 - a.0)
    };
    let point = |i: usize| (i as i128, i128::from(posted[i]));
    let mut hull: Vec<(i128, i128)> = Vec::new();
    let mut best = f64::INFINITY;
    for (j, &done) in completed.iter().enumerate().take(n) {
        let p = point(j);
        // Upper hull: drop points that fall on or under the new edge.
        while hull.len() >= 2 && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) >= 0 {
            hull.pop();
        }
        hull.push(p);
        if (j + 1) % cq_mod != 0 && j != n - 1 {
            continue;
        }
        let q = ((j + 1) as i128, i128::from(done));
        // slope(h[k], q) falls while the next hull point lies above the
        // line from h[k] to q, and rises after: find the first k where it
        // does not (the next point is on or under that line).
        let (mut lo, mut hi) = (0, hull.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if cross(hull[mid], q, hull[mid + 1]) > 0 {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let (x, y) = hull[lo];
        let t = (q.1 - y) as f64 / (q.0 - x) as f64;
        best = best.min(t);
    }
    best.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 12 stamps 1 µs apart except two slow gaps: 11 deltas, the two
    /// largest dropped; values worked by hand from perftest's formulas.
    #[test]
    fn latency_follows_perftest() {
        let gaps_us = [2.0, 2.0, 2.0, 2.0, 4.0, 2.0, 2.0, 2.0, 2.0, 50.0, 30.0];
        let mut t = vec![0u64];
        for g in gaps_us {
            t.push(t.last().unwrap() + (g * 1000.0) as u64);
        }
        let s = latency(&t, 2).unwrap();
        // sorted (÷2): 1×8, 2, 15, 25; m = 9 kept: eight 1.0 and one 2.0
        assert_eq!(s.t_min, 1.0);
        assert_eq!(s.t_typical, 1.0); // n = 9: (n-1) even → d[4]
        assert!((s.t_avg - 10.0 / 9.0).abs() < 1e-12);
        let var = (8.0 * (1.0f64 / 9.0).powi(2) + (8.0f64 / 9.0).powi(2)) / 9.0;
        assert!((s.t_stdev - var.sqrt()).abs() < 1e-12);
        assert_eq!(s.t_max, 15.0, "perftest's delta[measure_cnt]: the first dropped");
        assert_eq!(s.p99, 15.0, "ceil(9 × 0.99) = 9");
        assert_eq!(latency(&t, 1).unwrap().t_min, 2.0, "READ/atomic: no halving");
        assert_eq!(latency(&t[..3], 2), None);
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_pair() {
        assert_eq!(median(4, &[1.0, 2.0, 4.0, 8.0]), 3.0);
        assert_eq!(median(3, &[1.0, 2.0, 4.0]), 2.0);
    }

    /// 4 WQEs of 1000 bytes, signaled every 2: completions at 10 and 14 µs
    /// for posts at 0, 1, 2, 3 µs. Best window: WQEs 2..3, (14-2)/2 = 6 µs.
    #[test]
    fn bandwidth_peak_is_the_best_window() {
        let posted = [0, 1000, 2000, 3000];
        let completed = [10_000, 10_000, 14_000, 14_000];
        let s = bandwidth(1000, &posted, &completed, 2, true).unwrap();
        assert!((s.avg_bps - 4000.0 / 14e-6).abs() < 1e-3);
        assert!((s.msg_rate - 4.0 / 14e-6).abs() < 1e-6);
        // windows: i=0: j=1 → 10/2=5 µs; j=3 → 14/4=3.5. i=1: j=1 → 9/1; j=3 → 13/3.
        // i=2: j=3 → 12/2=6. i=3: j=3 → 11. Best 3.5 µs.
        assert!((s.peak_bps - 1000.0 / 3.5e-6).abs() < 1e-3);
        let s = bandwidth(1000, &posted, &completed, 2, false).unwrap();
        assert_eq!(s.peak_bps, 0.0, "-N and -D: no peak");
        assert!((s.avg_bps - 4000.0 / 14e-6).abs() < 1e-3);
    }

    /// perftest's rule, every pair: the oracle `best_window` must equal.
    fn best_window_pairs(posted: &[u64], completed: &[u64], cq_mod: usize) -> f64 {
        let n = posted.len();
        let mut best = f64::INFINITY;
        for (i, &p) in posted.iter().enumerate() {
            let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
            while j < n {
                best = best.min(completed[j].saturating_sub(p) as f64 / (j - i + 1) as f64);
                j += cq_mod;
            }
            if !n.is_multiple_of(cq_mod) {
                let j = n - 1;
                best = best.min(completed[j].saturating_sub(p) as f64 / (j - i + 1) as f64);
            }
        }
        best.max(0.0)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]
        /// The hull finds the same best window as trying every pair, on runs
        /// with bursts, stalls and equal stamps (posts and completions
        /// non-decreasing, each completion after its post).
        #[test]
        fn best_window_equals_every_pair(
            gaps in proptest::collection::vec((0u64..3000, 0u64..5000), 1..120),
            cq_mod in 1usize..9,
        ) {
            let mut posted = Vec::new();
            let mut completed: Vec<u64> = Vec::new();
            let (mut t, mut c) = (0u64, 0u64);
            for (g, lag) in &gaps {
                t += g;
                posted.push(t);
                c = c.max(t + lag);
                completed.push(c);
            }
            // An unsignaled WQE completes with the signaled one after it.
            let n = posted.len();
            for i in (0..n).rev() {
                if (i + 1) % cq_mod != 0 && i != n - 1 {
                    completed[i] = completed[i + 1];
                }
            }
            let want = best_window_pairs(&posted, &completed, cq_mod);
            let got = best_window(&posted, &completed, cq_mod);
            proptest::prop_assert!((got - want).abs() <= 1e-9 * want.max(1.0), "{got} vs {want}");
        }
    }

    /// A million WQEs, as many as a `-D` run or `-q 256` records: one
    /// pass (perftest's every-pair rule does not finish in minutes; this
    /// test would hang with it). Posts every 10 ns, every 100th signaled
    /// and completing 500 ns after its post: the longer the window, the
    /// better, so the best is the whole run.
    #[test]
    fn best_window_of_a_million_wqes() {
        let n = 1_000_000usize;
        let posted: Vec<u64> = (0..n as u64).map(|i| i * 10).collect();
        let mut completed = vec![0u64; n];
        for j in (0..n).rev() {
            completed[j] = if (j + 1) % 100 == 0 || j == n - 1 { posted[j] + 500 } else { completed[j + 1] };
        }
        let w = best_window(&posted, &completed, 100);
        // All n WQEs: (10 (n - 1) + 500) / n, just over 10 ns.
        let all = (10.0 * (n - 1) as f64 + 500.0) / n as f64;
        assert!((w - all).abs() < 1e-9, "{w} vs {all}");
    }
}
