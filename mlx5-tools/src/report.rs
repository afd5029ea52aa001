//! perftest's output: the test block, the connection lines, the result
//! table (same columns in the same order) and the JSON report (same keys),
//! from `perftest_parameters.h` (`RESULT_FMT*`, `REPORT_FMT*`) and
//! `perftest_communication.h` (`BASIC_ADDR_FMT`, `RDMA_FMT`, `PERF_GID_FMT`).

use crate::opts::{Config, Connection, Test, Verb};
use crate::stats::{BwStats, LatStats};

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
/// `RESULT_FMT_LAT`.
pub const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
/// `RESULT_FMT_LAT_DUR`.
pub const RESULT_FMT_LAT_DUR: &str = " #bytes        #iterations       t_avg[usec]    tps average";
/// `RESULT_FMT` (MiB/s).
pub const RESULT_FMT: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
/// `RESULT_FMT_G` (`--report_gbits`).
pub const RESULT_FMT_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";

/// What the connection lines show of one side.
#[derive(Debug, Clone)]
pub struct Dest {
    /// LID.
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// Start PSN.
    pub psn: u32,
    /// Remote key of the test buffer.
    pub rkey: u32,
    /// Address of the test buffer.
    pub vaddr: u64,
    /// Port GID.
    pub gid: [u8; 16],
}

/// perftest's ON/OFF.
fn on_off(b: bool) -> &'static str {
    if b {
        "ON"
    } else {
        "OFF"
    }
}

/// The test block perftest prints before connecting.
pub fn test_block(c: &Config, device: &str, link: &str, mtu: u32) -> String {
    let mut s = format!("{RESULT_LINE}\n                    {} ", c.verb.perftest_name());
    if c.verb == Verb::Atomic {
        s += &format!("{} ", c.atomic_type.perftest_name());
    }
    s += if c.test == Test::Bw { "BW Test\n" } else { "Latency Test\n" };
    if c.opts.events {
        s += &format!(" Test with events. Using {device}_comp0\n");
    }
    s += &format!(" Dual-port       : OFF\t\tDevice         : {device}\n");
    s += &format!(" Number of qps   : {}\t\tTransport type : IB\n", c.qps);
    s += &format!(
        " Connection type : {}\t\tUsing SRQ      : {}\n",
        c.connection.perftest_name(),
        on_off(c.connection == Connection::Dc || c.opts.use_srq)
    );
    // Current perftest's two lines: no PCIe relaxed ordering or lock-free
    // mode here; WQEs are written by this library, not ibv_wr_*.
    s += " PCIe relax order: Unsupported\t\tLock-free      : OFF\n";
    s += " ibv_wr* API     : OFF\t\tUsing Enhanced Reorder      : OFF\n";
    s += &format!(" TX depth        : {}\n", c.tx_depth);
    if c.post_list > 1 {
        s += &format!(" Post List       : {}\n", c.post_list);
    }
    if c.verb == Verb::Send {
        s += &format!(" RX depth        : {}\n", c.rx_depth);
    }
    if c.test == Test::Bw {
        s += &format!(" CQ Moderation   : {}\n CQE Poll Batch  : Dynamic\n", c.cq_mod);
    }
    s += &format!(" Mtu             : {mtu}[B]\n Link type       : {link}\n");
    if let Some(g) = c.opts.gid_index {
        s += &format!(" GID index       : {g}\n");
    }
    if matches!(c.verb, Verb::Read | Verb::Atomic) {
        s += &format!(" Outstand reads  : {}\n", c.out_reads.unwrap_or(16));
    } else {
        s += &format!(" Max inline data : {}[B]\n", c.inline_size);
    }
    s += " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n";
    s += RESULT_LINE;
    s
}

/// `BASIC_ADDR_FMT` (+ `READ_FMT` / `RDMA_FMT` as the verb has them) and
/// `PERF_GID_FMT` (perftest prints the GID bytes in decimal, `%02d`).
pub fn dest_lines(side: &str, d: &Dest, verb: Verb, out_reads: u32) -> String {
    // C's `%#04x` counts the "0x" in the width, as Rust's `{:#04x}` does.
    let mut s = format!(" {side} address: LID {:#04x} QPN {:#06x} PSN {:#06x}", d.lid, d.qpn, d.psn);
    if verb == Verb::Read {
        s += &format!(" OUT {:#04x}", out_reads);
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        s += &format!(" RKey {:#08x} VAddr {:#016x}", d.rkey, d.vaddr);
    }
    let g: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
    s += &format!("\n GID: {}", g.join(":"));
    s
}

/// perftest's histogram (`-H`, `-U`): `#, usec`, then `i, sample` per
/// line, the sample as C's `%g` writes it.
pub fn histogram(samples: &[f64], units: &str) -> String {
    let mut s = format!("#, {units}\n");
    for (i, x) in samples.iter().enumerate() {
        s += &format!("{}, {}\n", i + 1, c_g(*x));
    }
    s
}

/// C's `%g`: six significant digits, trailing zeros dropped, an exponent
/// below 1e-4 or from 1e6.
pub fn c_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let exp = x.abs().log10().floor() as i32;
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let m = x / 10f64.powi(exp);
        let m = trim(format!("{m:.5}"));
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    trim(format!("{x:.*}", (5 - exp).max(0) as usize))
}

/// The table header for the test.
pub fn table_header(c: &Config) -> &'static str {
    match (c.test, c.duration.is_some(), c.opts.report_gbits) {
        (Test::Lat, false, _) => RESULT_FMT_LAT,
        (Test::Lat, true, _) => RESULT_FMT_LAT_DUR,
        (Test::Bw, _, false) => RESULT_FMT,
        (Test::Bw, _, true) => RESULT_FMT_G,
    }
}

/// `REPORT_FMT_LAT`.
pub fn lat_row(size: u64, iters: u64, s: &LatStats) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size, iters, s.t_min, s.t_max, s.t_typical, s.t_avg, s.t_stdev, s.p99, s.p99_9
    )
}

/// `REPORT_FMT_LAT_DUR`: average latency (µs) and transactions per second.
pub fn lat_dur_row(size: u64, iters: u64, t_avg: f64, tps: f64) -> String {
    format!(" {:<7}       {}            {:<7.2}        {:<7.2}", size, iters, t_avg, tps)
}

/// Bandwidth in the table's unit: MiB/s (perftest's `0x100000`) or Gb/s
/// (`125000000` bytes per Gb).
pub fn bw_unit(bps: f64, gbits: bool) -> f64 {
    if gbits {
        bps / 125_000_000.0
    } else {
        bps / 1_048_576.0
    }
}

/// `REPORT_FMT`. `iters` is what perftest prints there: the messages of every QP
/// together (`print_report_bw` multiplies its per-QP count by `num_of_qps`).
pub fn bw_row(size: u64, iters: u64, s: &BwStats, gbits: bool) -> String {
    format!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t     {:<7.6}",
        size,
        iters,
        bw_unit(s.peak_bps, gbits),
        bw_unit(s.avg_bps, gbits),
        s.msg_rate / 1e6
    )
}

/// The JSON report: perftest's `test_info` and `results` objects, with its
/// keys (`write_test_info_to_file`, `REPORT_FMT_LAT_JSON`,
/// `REPORT_FMT_JSON`).
pub fn json(c: &Config, device: &str, link: &str, mtu: u32, results: &str) -> String {
    let mut t = format!("\"test\": \"{}_", c.verb.perftest_name());
    if c.verb == Verb::Atomic {
        t += &format!("{}_", c.atomic_type.perftest_name());
    }
    t += if c.test == Test::Bw { "BW_Test\"" } else { "Latency_Test\"" };
    let mut info = vec![
        t,
        "\"Dual_port\": \"OFF\"".into(),
        format!("\"Device\": \"{device}\""),
        format!("\"Number_of_qps\": {}", c.qps),
        "\"Transport_type\": \"IB\"".into(),
        format!("\"Connection_type\": \"{}\"", c.connection.perftest_name()),
        format!("\"Using_SRQ\": \"{}\"", on_off(c.connection == Connection::Dc)),
        format!("\"TX_depth\": {}", c.tx_depth),
    ];
    if c.test == Test::Bw {
        info.push(format!("\"CQ_Moderation\": {}", c.cq_mod));
    }
    if c.verb == Verb::Send {
        info.push(format!("\"RX_depth\": {}", c.rx_depth));
    }
    info.push(format!("\"Mtu\": {mtu}"));
    info.push(format!("\"Link_type\": \"{link}\""));
    if matches!(c.verb, Verb::Read | Verb::Atomic) {
        info.push("\"Outstand_reads\": 16".into());
    } else {
        info.push(format!("\"Max_inline_data\": {}", c.inline_size));
    }
    info.push("\"rdma_cm_QPs\": \"OFF\"".into());
    info.push("\"Data_ex_method\": \"Ethernet\"".into());
    format!("{{\n\"test_info\": {{\n{}\n}},\n\"results\": {{\n{}\n}}\n}}\n", info.join(",\n"), results)
}

/// `REPORT_FMT_LAT_JSON`.
pub fn lat_json(size: u64, iters: u64, s: &LatStats) -> String {
    format!(
        "\"MsgSize\": {size},\n\"n_iterations\": {iters},\n\"t_min\": {:.2},\n\"t_max\": {:.2},\n\"t_typical\": {:.2},\n\"t_avg\": {:.2},\n\"t_stdev\": {:.2},\n\"percentile_99\": {:.2},\n\"percentile_99.9\": {:.2}",
        s.t_min, s.t_max, s.t_typical, s.t_avg, s.t_stdev, s.p99, s.p99_9
    )
}

/// `REPORT_FMT_LAT_DUR_JSON`.
pub fn lat_dur_json(size: u64, iters: u64, t_avg: f64, tps: f64) -> String {
    format!(
        "\"MsgSize\": {size},\n\"n_iterations\": {iters},\n\"t_avg\": {t_avg:.2},\n\"tps_average\": {tps:.2}"
    )
}

/// `REPORT_FMT_JSON`.
pub fn bw_json(size: u64, iters: u64, s: &BwStats, gbits: bool) -> String {
    format!(
        "\"MsgSize\": {size},\n\"n_iterations\": {iters},\n\"BW_peak\": {:.2},\n\"BW_average\": {:.2},\n\"MsgRate\": {:.6}",
        bw_unit(s.peak_bps, gbits),
        bw_unit(s.avg_bps, gbits),
        s.msg_rate / 1e6
    )
}

#[cfg(test)]
mod tests {
    /// C's `%g`, as printf gives it for these values.
    #[test]
    fn c_g_writes_as_printf_does() {
        for (x, want) in [
            (5.8385, "5.8385"),
            (42.548, "42.548"),
            (100.0, "100"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.333333"),
            (123456.7, "123457"),
            (1234567.0, "1.23457e+06"),
            (0.00001234, "1.234e-05"),
            (0.0, "0"),
        ] {
            assert_eq!(c_g(x), want, "{x}");
        }
    }

    use super::*;
    use crate::opts::Opts;
    use clap::Parser;

    fn cfg(verb: Verb, test: Test, args: &[&str]) -> Config {
        let o = Opts::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap();
        Config::new(verb, test, o).unwrap()
    }

    /// The column headers are perftest's strings, byte for byte.
    #[test]
    fn headers_are_perftests() {
        assert_eq!(table_header(&cfg(Verb::Write, Test::Lat, &[])), RESULT_FMT_LAT);
        assert!(RESULT_FMT_LAT.contains("t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"));
        assert_eq!(table_header(&cfg(Verb::Write, Test::Bw, &["--report_gbits"])), RESULT_FMT_G);
        assert_eq!(table_header(&cfg(Verb::Send, Test::Lat, &["-D", "2"])), RESULT_FMT_LAT_DUR);
    }

    #[test]
    fn rows_and_json_carry_perftests_fields() {
        let s = LatStats {
            t_min: 1.0,
            t_max: 9.5,
            t_typical: 1.25,
            t_avg: 1.5,
            t_stdev: 0.5,
            p99: 3.0,
            p99_9: 9.0,
        };
        let r = lat_row(2, 1000, &s);
        assert!(r.starts_with(" 2       1000          1.00           9.50         1.25   "), "{r:?}");
        let j = lat_json(2, 1000, &s);
        for k in
            ["\"MsgSize\": 2", "\"n_iterations\": 1000", "\"t_typical\": 1.25", "\"percentile_99.9\": 9.00"]
        {
            assert!(j.contains(k), "{j}");
        }
        let b = BwStats { peak_bps: 2.0 * 1_048_576.0, avg_bps: 1_048_576.0, msg_rate: 16.0e6 };
        assert!(bw_row(65536, 5000, &b, false)
            .starts_with(" 65536      5000             2.00               1.00"));
        assert!(bw_json(65536, 5000, &b, false).contains("\"BW_average\": 1.00,\n\"MsgRate\": 16.000000"));
        let c = cfg(Verb::Atomic, Test::Lat, &["-A", "CMP_AND_SWAP"]);
        let full = json(&c, "sim0", "IB", 4096, &lat_json(8, 1000, &s));
        assert!(full.contains("\"test\": \"Atomic_CMP_AND_SWAP_Latency_Test\""), "{full}");
        assert!(full.contains("\"Outstand_reads\": 16") && full.starts_with("{\n\"test_info\": {"));
    }

    #[test]
    fn connection_lines_follow_basic_addr_fmt() {
        let d =
            Dest { lid: 1, qpn: 0x108, psn: 0x5c4b82, rkey: 0x1fecbc, vaddr: 0x7f00_0000_1000, gid: [0; 16] };
        let l = dest_lines("local", &d, Verb::Write, 16);
        // What perftest's printf formats give for these values.
        assert!(
            l.starts_with(
                " local address: LID 0x01 QPN 0x0108 PSN 0x5c4b82 RKey 0x1fecbc VAddr 0x007f0000001000"
            ),
            "{l}"
        );
        assert!(l.ends_with(" GID: 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00"));
    }
}
