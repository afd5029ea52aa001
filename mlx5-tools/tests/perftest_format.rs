//! Every line the programs print is one of perftest's: each is matched
//! against perftest's own format strings (`perftest_parameters.c`'s test
//! block, `perftest_communication.h`'s address formats, the `RESULT_FMT*`
//! and `REPORT_FMT*` of `perftest_parameters.h`), with the numbers and
//! strings as the conversions (`%d`, `%#04x`, `%-7.2f`, `%s`) and every
//! other character, spaces and tabs included, as it is there. The programs
//! run in each mode a parser meets: latency and bandwidth of every verb,
//! several QPs, UD, `-D`, `--report_gbits`, `-o`.

use std::process::Command;

const RESULT_FMT_MIB: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const REPORT_FMT_BW: &str = " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf";

/// perftest's formats, in the order perftest prints them. `PRIu64` is
/// written `lu`, and `RESULT_LINE` without its newline.
const FORMATS: &[&str] = &[
    "Requested mtu is higher than active mtu ",
    "Changing to active mtu - %d",
    " WARNING: BW peak won't be measured in this run.",
    "Post List requested - CQ moderation will be the size of the post list",
    "---------------------------------------------------------------------------------------",
    "                    %s Latency Test",
    "                    %s %s Latency Test",
    "                    %s BW Test",
    "                    %s %s BW Test",
    " Test with events. Using %s_comp%d",
    " Dual-port       : %s\t\tDevice         : %s",
    " Number of qps   : %d\t\tTransport type : %s",
    " Connection type : %s\t\tUsing SRQ      : %s",
    " PCIe relax order: %s\t\tLock-free      : %s",
    " ibv_wr* API     : %s\t\tUsing Enhanced Reorder      : %s",
    " TX depth        : %d",
    " Post List       : %d",
    " RX depth        : %d",
    " CQ Moderation   : %d",
    " CQE Poll Batch  : Dynamic",
    " Mtu             : %lu[B]",
    " Link type       : %s",
    " GID index       : %d",
    " Max inline data : %d[B]",
    " Outstand reads  : %d",
    " rdma_cm QPs\t : %s",
    " Data ex. method : %s",
    // BASIC_ADDR_FMT, + READ_FMT, + RDMA_FMT, as the verb has them.
    " %s address: LID %#04x QPN %#06x PSN %#06x",
    " %s address: LID %#04x QPN %#06x PSN %#06x RKey %#08x VAddr %#016llx",
    " %s address: LID %#04x QPN %#06x PSN %#06x OUT %#04x RKey %#08x VAddr %#016llx",
    // PERF_GID_FMT
    " %s: %02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d:%02d",
    // RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT, RESULT_FMT_LAT_DUR
    RESULT_FMT_MIB,
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] ",
    " #bytes        #iterations       t_avg[usec]    tps average",
    // REPORT_FMT, REPORT_FMT_LAT, REPORT_FMT_LAT_DUR
    REPORT_FMT_BW,
    " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f",
    " %-7lu       %lu            %-7.2f        %-7.2f",
    // print_report_lat's -H / -U lines.
    "#, %s",
    "%d, %g",
];

#[derive(Debug, Clone, Copy)]
enum Conv {
    Int,
    Hex,
    Float,
    /// `%g`: a number, with or without a point or an exponent.
    G,
    Str,
}

#[derive(Debug)]
enum Tok {
    Lit(String),
    /// A conversion; `left`: `-` flag (padding after), else before.
    Conv(Conv, bool),
}

fn tokens(fmt: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut lit = String::new();
    let mut it = fmt.chars().peekable();
    while let Some(c) = it.next() {
        if c != '%' {
            lit.push(c);
            continue;
        }
        if it.peek() == Some(&'%') {
            it.next();
            lit.push('%');
            continue;
        }
        if !lit.is_empty() {
            out.push(Tok::Lit(std::mem::take(&mut lit)));
        }
        let mut left = false;
        let conv = loop {
            match it.next().expect("a conversion") {
                '-' => left = true,
                '#' | '0'..='9' | '.' | 'l' | 'h' | 'z' => {}
                'd' | 'i' | 'u' => break Conv::Int,
                'x' => break Conv::Hex,
                'f' => break Conv::Float,
                'g' => break Conv::G,
                's' => break Conv::Str,
                other => panic!("conversion {other} in {fmt:?}"),
            }
        };
        out.push(Tok::Conv(conv, left));
    }
    if !lit.is_empty() {
        out.push(Tok::Lit(lit));
    }
    out
}

/// Whether `s` is what conversion `c` prints (with its padding spaces on
/// the side the flag puts them).
fn fits(c: Conv, left: bool, s: &str) -> bool {
    let v = if left { s.trim_end_matches(' ') } else { s.trim_start_matches(' ') };
    if v.is_empty() || v.contains(' ') {
        return matches!(c, Conv::Str) && !s.is_empty();
    }
    match c {
        Conv::Int => v.trim_start_matches('-').chars().all(|d| d.is_ascii_digit()),
        Conv::Hex => {
            let h = v.strip_prefix("0x").unwrap_or(v);
            !h.is_empty() && h.chars().all(|d| d.is_ascii_hexdigit() && !d.is_ascii_uppercase())
        }
        Conv::Float => v.contains('.') && v.parse::<f64>().is_ok(),
        Conv::G => v.parse::<f64>().is_ok(),
        Conv::Str => true,
    }
}

fn matches(toks: &[Tok], line: &str) -> bool {
    match toks.split_first() {
        None => line.is_empty(),
        Some((Tok::Lit(l), rest)) => line.strip_prefix(l.as_str()).is_some_and(|r| matches(rest, r)),
        Some((Tok::Conv(c, left), rest)) => (1..=line.len())
            .filter(|&k| line.is_char_boundary(k))
            .any(|k| fits(*c, *left, &line[..k]) && matches(rest, &line[k..])),
    }
}

/// The index of the format `line` is printed by.
fn format_of(line: &str) -> Option<usize> {
    FORMATS.iter().position(|f| matches(&tokens(f), line))
}

fn check(bin: &str, args: &[&str]) {
    let o = Command::new(bin).args(args).output().expect("run the tool");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{bin} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let mut kinds = Vec::new();
    for line in out.lines() {
        let k =
            format_of(line).unwrap_or_else(|| panic!("{bin} {args:?}: not a perftest line: {line:?}\n{out}"));
        kinds.push(k);
    }
    // The test block, the address lines, the table header and its rows, in
    // perftest's order (the block's lines in the order of FORMATS).
    let at = |f: &str| FORMATS.iter().position(|x| *x == f).unwrap();
    let (dual, data_ex) = (at(" Dual-port       : %s\t\tDevice         : %s"), at(" Data ex. method : %s"));
    let addr = at(" %s address: LID %#04x QPN %#06x PSN %#06x");
    let (first_header, first_row) = (at(RESULT_FMT_MIB), at(REPORT_FMT_BW));
    let block: Vec<usize> = kinds.iter().copied().filter(|k| (dual..=data_ex).contains(k)).collect();
    assert!(block.windows(2).all(|w| w[0] < w[1]), "{bin} {args:?}: test block out of order\n{out}");
    let first_addr = kinds.iter().position(|k| (addr..addr + 3).contains(k)).expect("address lines");
    let header = kinds.iter().position(|k| (first_header..first_row).contains(k)).expect("a table header");
    let last_row = kinds.iter().rposition(|k| (first_row..first_row + 3).contains(k)).expect("a result row");
    let end_of_block = kinds.iter().position(|&k| k == data_ex).expect("the test block");
    assert!(end_of_block < first_addr && first_addr < header && header < last_row, "{bin} {args:?}\n{out}");
}

#[test]
fn the_matcher_takes_perftests_lines_and_only_them() {
    let lat = " 2       20          4.06           5.18         4.17     \t       4.17        \t0.08   \t\t5.18    \t\t5.18   ";
    let at = |f: &str| FORMATS.iter().position(|x| *x == f);
    let lat_fmt = " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f";
    assert_eq!(format_of(lat), at(lat_fmt));
    assert_eq!(
        format_of(" local address: LID 0x01 QPN 0x1000 PSN 0x68e465"),
        at(" %s address: LID %#04x QPN %#06x PSN %#06x")
    );
    let rdma = " local address: LID 0x01 QPN 0x1000 PSN 0x68e465 RKey 0x010000 VAddr 0x00563d7bd4b000";
    assert!(format_of(rdma).is_some());
    assert_eq!(format_of("3, 5.8385"), at("%d, %g"));
    // One space too few, a tab for spaces, an upper-case hex digit: not perftest's.
    assert_eq!(format_of(" Mtu            : 1024[B]"), None);
    assert_eq!(format_of(" Dual-port       : OFF\tDevice         : sim0"), None);
    assert_eq!(format_of(" local address: LID 0x01 QPN 0x1000 PSN 0x68E465"), None);
}

#[test]
fn every_program_prints_perftests_lines() {
    for (bin, extra) in [
        (env!("CARGO_BIN_EXE_mlx5_write_lat"), &[][..]),
        (env!("CARGO_BIN_EXE_mlx5_send_lat"), &["-c", "UD"][..]),
        (env!("CARGO_BIN_EXE_mlx5_read_lat"), &["-o", "4"][..]),
        (env!("CARGO_BIN_EXE_mlx5_atomic_lat"), &["-A", "CMP_AND_SWAP"][..]),
        (env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-q", "3", "--report_gbits"][..]),
        (env!("CARGO_BIN_EXE_mlx5_send_bw"), &["-q", "2"][..]),
        (env!("CARGO_BIN_EXE_mlx5_read_bw"), &["-m", "512"][..]),
        (env!("CARGO_BIN_EXE_mlx5_atomic_bw"), &[][..]),
    ] {
        let mut args = vec!["-n", "50"];
        args.extend_from_slice(extra);
        check(bin, &args);
    }
    check(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-a", "-n", "10"]);
    check(env!("CARGO_BIN_EXE_mlx5_send_lat"), &["-D", "1"]);
    check(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-D", "1", "-s", "64"]);
    check(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-n", "20", "-H", "-U"]);
    check(env!("CARGO_BIN_EXE_mlx5_send_bw"), &["-n", "64", "--use-srq", "-q", "2"]);
    check(env!("CARGO_BIN_EXE_mlx5_read_lat"), &["-n", "50", "-e"]);
    check(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-n", "20", "-C", "-U"]);
    check(env!("CARGO_BIN_EXE_mlx5_send_bw"), &["-n", "100", "-b", "-q", "2"]);
    check(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-n", "64", "-l", "8", "-s", "64"]);
}
