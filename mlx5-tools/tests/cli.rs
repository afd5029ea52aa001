//! The programs as a user runs them: perftest's table and JSON on the
//! simulator, and one-line errors with exit status 1 for bad arguments.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(bin).args(args).output().expect("run the tool");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_latency_program_prints_perftests_table() {
    for (bin, name) in [
        (env!("CARGO_BIN_EXE_mlx5_write_lat"), "RDMA_Write Latency Test"),
        (env!("CARGO_BIN_EXE_mlx5_send_lat"), "Send Latency Test"),
        (env!("CARGO_BIN_EXE_mlx5_read_lat"), "RDMA_Read Latency Test"),
        (env!("CARGO_BIN_EXE_mlx5_atomic_lat"), "Atomic FETCH_AND_ADD Latency Test"),
    ] {
        let (ok, out, err) = run(bin, &["-n", "50"]);
        assert!(ok, "{bin}: {err}");
        assert!(out.contains(name), "{out}");
        assert!(
            out.contains(" local address: LID 0x01 QPN ") && out.contains(" remote address: LID 0x02"),
            "{out}"
        );
        assert!(out.contains("t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"));
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with(if name.starts_with("Atomic") { "8 " } else { "2 " }))
            .unwrap();
        let f: Vec<f64> = row.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert_eq!(f.len(), 9, "{row}");
        assert_eq!(f[1], 50.0);
        assert!(f[2] <= f[4] && f[4] <= f[3], "t_min ≤ t_typical ≤ t_max: {row}");
    }
}

#[test]
fn bandwidth_programs_print_perftests_columns_and_json() {
    let dir = std::env::temp_dir().join(format!("mlx5-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for bin in [
        env!("CARGO_BIN_EXE_mlx5_write_bw"),
        env!("CARGO_BIN_EXE_mlx5_send_bw"),
        env!("CARGO_BIN_EXE_mlx5_read_bw"),
        env!("CARGO_BIN_EXE_mlx5_atomic_bw"),
    ] {
        let json = dir.join("out.json");
        let j = json.to_str().unwrap();
        let size = if bin.ends_with("atomic_bw") { "8" } else { "4096" };
        let (ok, out, err) =
            run(bin, &["-s", size, "-n", "300", "-q", "2", "-t", "64", "--out_json", "--out_json_file", j]);
        assert!(ok, "{bin}: {err}");
        assert!(
            out.contains(
                " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
            ),
            "{out}"
        );
        // 300 per QP on 2 QPs: perftest's row counts the messages of every QP
        // (print_report_bw: num_of_calculated_iters *= num_of_qps).
        let row = out.lines().find(|l| l.contains(" 600 ")).expect("a result row");
        let f: Vec<f64> = row.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert!(f[2] >= f[3] && f[3] > 0.0, "peak ≥ average > 0: {row}");
        let text = std::fs::read_to_string(&json).unwrap();
        for k in [
            "\"test_info\"",
            "\"Number_of_qps\": 2",
            "\"results\"",
            "\"n_iterations\": 600",
            "\"BW_peak\"",
            "\"BW_average\"",
            "\"MsgRate\"",
        ] {
            assert!(text.contains(k), "{k} in {text}");
        }
    }
    let (ok, out, _) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-a", "-n", "20", "--report_gbits"]);
    assert!(ok && out.contains("BW peak[Gb/sec]") && out.contains("\n 8388608 "), "{out}");
}

#[test]
fn duration_mode_reports_average_and_rate() {
    let (ok, out, err) = run(env!("CARGO_BIN_EXE_mlx5_send_lat"), &["-D", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains(" #bytes        #iterations       t_avg[usec]    tps average"), "{out}");
}

/// Run with a watchdog: the program is killed, and the test fails, if it
/// has not finished after `limit` (a hang guard, far above the run's own
/// length, not a timing assertion).
fn run_within(bin: &str, args: &[&str], limit: std::time::Duration) -> (bool, String, String) {
    use std::io::Read;
    let mut child = Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the tool");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        out.read_to_string(&mut o).unwrap();
        err.read_to_string(&mut e).unwrap();
        (o, e)
    });
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            child.kill().unwrap();
            panic!("{bin} {args:?} still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (o, e) = reader.join().unwrap();
    (status.success(), o, e)
}

/// Run for `after`, then kill the program (one that runs until killed):
/// its status and what it printed so far.
fn run_within_then_kill(bin: &str, args: &[&str], after: std::time::Duration) -> (bool, String, String) {
    use std::io::Read;
    let mut child = Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the tool");
    std::thread::sleep(after);
    let _ = child.kill();
    let status = child.wait().unwrap();
    let (mut o, mut e) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut o).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
    (status.success(), o, e)
}

/// The statistics are linear: a `-D` run (millions of WQEs; perftest's
/// every-pair peak ran `mlx5_atomic_bw -D 2` for 581 s before it was
/// killed) and 1024 QPs finish, with perftest's -D behaviour: the warning,
/// then a peak of 0.00. `-N` gives 0.00 too; latency tests refuse it.
#[test]
fn duration_and_many_qps_finish_and_report_as_perftest() {
    let limit = std::time::Duration::from_secs(120);
    for bin in [env!("CARGO_BIN_EXE_mlx5_atomic_bw"), env!("CARGO_BIN_EXE_mlx5_write_bw")] {
        let (ok, out, err) = run_within(bin, &["-D", "1"], limit);
        assert!(ok, "{bin}: {err}");
        assert!(out.starts_with(" WARNING: BW peak won't be measured in this run.\n"), "{out}");
        let row = out.lines().find(|l| l.contains("0.00 ")).expect("a row with a 0.00 peak");
        let f: Vec<f64> = row.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert!(f[1] > 1000.0 && f[2] == 0.0 && f[3] > 0.0, "{row}");
    }
    let bin = env!("CARGO_BIN_EXE_mlx5_write_bw");
    let (ok, out, err) = run_within(bin, &["-q", "1024", "-s", "64", "-n", "1000"], limit);
    assert!(ok, "{err}");
    let row = out.lines().find(|l| l.trim_start().starts_with("64 ")).expect("a row");
    let f: Vec<f64> = row.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert!(f[2] >= f[3] && f[3] > 0.0, "peak ≥ average > 0: {row}");
    let (ok, out, err) = run_within(bin, &["-N", "-n", "200"], limit);
    assert!(ok, "{err}");
    assert!(!out.contains("WARNING"), "{out}");
    let row = out.lines().find(|l| l.contains(" 200 ")).expect("a row");
    assert_eq!(row.split_whitespace().nth(2), Some("0.00"), "{row}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-N"]);
    assert!(!ok && err.contains("NoPeak only valid for BW tests"), "{err}");
}

#[test]
fn bad_arguments_are_one_line_and_status_1() {
    for args in [&["-s", "abc"][..], &["--nope"], &["-q", "2"], &["-s", "0"], &["somehost"], &["-c", "XRC"]] {
        let (ok, out, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), args);
        assert!(!ok, "{args:?} accepted");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("mlx5_write_lat: ") && !err.contains("panicked"), "{err}");
    }
    let (ok, out, _) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["--help"]);
    assert!(
        ok && out.contains("--inline_size")
            && out.contains("--out_json_file")
            && !out.contains("--atomic_type")
    );
}

#[test]
fn devinfo_takes_ibv_devinfos_options_and_lists_simulated_devices() {
    let bin = env!("CARGO_BIN_EXE_mlx5_devinfo");
    let (ok, out, _) = run(bin, &["--backend", "sim", "-l"]);
    assert!(ok);
    assert_eq!(out, "2 HCAs found:\n\tsim0\n\tsim1\n");
    let (ok, out, _) = run(bin, &["-d", "sim0", "-i", "1", "-v"]);
    assert!(ok);
    assert!(out.starts_with("hca_id:\tsim0\n") && !out.contains("sim1"), "{out}");
    assert!(out.contains("\t\t\tport_lid:\t\t1\n") && out.contains("GID[  0]:\t\tfe80::1"), "{out}");
    // Without hardware the listing still works (the reason goes to stderr).
    let (ok, out, _) = run(bin, &[]);
    assert!(ok && out.contains("hca_id:\tsim1"), "{out}");
    for args in [&["-d", "mlx9_9", "--backend", "sim"][..], &["-i", "7", "--backend", "sim"], &["-x"]] {
        let (ok, out, err) = run(bin, args);
        assert!(!ok, "{args:?} accepted");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("mlx5_devinfo: ") && !err.contains("panicked"), "{err}");
    }
}

/// `--explain SYNDROME[:VENDOR]` prints the sentence for an error CQE seen elsewhere
/// (spec §5.4's names), and refuses what is not a byte with one line.
#[test]
fn devinfo_explains_a_syndrome() {
    let bin = env!("CARGO_BIN_EXE_mlx5_devinfo");
    let (ok, out, _) = run(bin, &["--explain", "0x13:0x88"]);
    assert!(ok, "{out}");
    assert!(out.starts_with("Remote access error: "), "{out}");
    assert!(
        out.contains("(syndrome 0x13 REMOTE_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR; vendor syndrome 0x88)"),
        "{out}"
    );
    assert!(out.contains("Usual causes: an rkey"), "{out}");
    let (ok, out, _) = run(bin, &["--explain", "5"]);
    assert!(ok && out.starts_with("Flushed: ") && !out.contains("vendor"), "{out}");
    for bad in ["zz", "0x13:0x1ff", "300"] {
        let (ok, out, err) = run(bin, &["--explain", bad]);
        assert!(!ok && out.is_empty() && err.lines().count() == 1, "{bad}: {err}");
        assert!(err.contains("is not a byte"), "{err}");
    }
}

/// perftest offers UD for the SEND tests and DC for every test; the
/// header names the transport (and DC's SRQ) as perftest's does.
#[test]
fn ud_and_dc_run_where_perftest_offers_them() {
    let runs: &[(&str, &str, &str)] = &[
        (env!("CARGO_BIN_EXE_mlx5_send_lat"), "UD", "2 "),
        (env!("CARGO_BIN_EXE_mlx5_send_bw"), "UD", "4096 "),
        (env!("CARGO_BIN_EXE_mlx5_write_lat"), "DC", "2 "),
        (env!("CARGO_BIN_EXE_mlx5_send_lat"), "DC", "2 "),
        (env!("CARGO_BIN_EXE_mlx5_read_lat"), "DC", "2 "),
        (env!("CARGO_BIN_EXE_mlx5_atomic_lat"), "DC", "8 "),
        (env!("CARGO_BIN_EXE_mlx5_write_bw"), "DC", "65536 "),
        (env!("CARGO_BIN_EXE_mlx5_send_bw"), "DC", "65536 "),
        (env!("CARGO_BIN_EXE_mlx5_read_bw"), "DC", "65536 "),
        (env!("CARGO_BIN_EXE_mlx5_atomic_bw"), "DC", "8 "),
    ];
    for &(bin, conn, row) in runs {
        let (ok, out, err) = run(bin, &["-c", conn, "-n", "40", "-q", "1"]);
        assert!(ok, "{bin} -c {conn}: {err}");
        let srq = if conn == "DC" { "ON" } else { "OFF" };
        assert!(out.contains(&format!(" Connection type : {conn}\t\tUsing SRQ      : {srq}\n")), "{out}");
        // UD's default 65536-byte SEND becomes one MTU, as in perftest.
        assert!(
            out.lines().any(|l| l.starts_with(&format!(" {row}"))),
            "{bin} -c {conn}: no {row:?} row\n{out}"
        );
    }
    // Several DCIs towards the peer's DCTs on one SRQ, on the threaded NICs.
    let (ok, out, err) =
        run(env!("CARGO_BIN_EXE_mlx5_send_bw"), &["-c", "DC", "-q", "4", "-n", "300", "--threaded"]);
    // 300 per DCI, 1200 in the row (perftest counts every QP's).
    assert!(ok && out.contains(" 65536      1200 "), "{err}\n{out}");
    // UD runs only the SEND tests; one line, status 1.
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_read_bw"), &["-c", "UD"]);
    assert!(!ok && err.lines().count() == 1 && err.contains("UD is for the SEND tests"), "{err}");
}

/// `-a` runs every size on one set of QPs: the receives left over from one
/// size must fit the next (they once were posted with the old size and
/// failed with a local length error), and UD stops at the MTU.
#[test]
fn all_sizes_with_send_on_every_transport() {
    for conn in ["RC", "UD", "DC"] {
        for bin in [env!("CARGO_BIN_EXE_mlx5_send_lat"), env!("CARGO_BIN_EXE_mlx5_send_bw")] {
            let (ok, out, err) = run(bin, &["-c", conn, "-a", "-n", "5"]);
            assert!(ok, "{bin} -c {conn} -a: {err}");
            let last = if conn == "UD" { " 4096 " } else { " 8388608 " };
            let rows: Vec<&str> =
                out.lines().filter(|l| l.trim_start().starts_with(char::is_numeric)).collect();
            assert_eq!(rows.len(), if conn == "UD" { 12 } else { 23 }, "{out}");
            assert!(rows.last().unwrap().starts_with(last), "{out}");
        }
    }
}

/// `--pcap FILE` writes the simulator's packets: a pcap file with one record per
/// packet (the ERF linktype, 197, on the InfiniBand simulated devices).
#[test]
fn pcap_option_writes_the_wire() {
    let path = std::env::temp_dir().join(format!("mlx5-tools-{}.pcap", std::process::id()));
    let p = path.to_str().unwrap();
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-n", "20", "--pcap", p]);
    assert!(ok, "{err}");
    let b = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    // pcap header: nanosecond magic, linktype 197 (ERF).
    assert_eq!(&b[..4], &0xa1b2_3c4du32.to_le_bytes());
    assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 197);
    assert!(err.contains("packets captured to"), "{err}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["--backend", "hw", "--pcap", p]);
    assert!(!ok && err.contains("ibdump"), "{err}");
}

/// `-V` names the program (ibv_devinfo's `-V` too); what perftest refuses
/// is refused in its words; what perftest ignores is said on stderr.
#[test]
fn version_refusals_and_ignored_options() {
    for (bin, name) in [
        (env!("CARGO_BIN_EXE_mlx5_write_lat"), "mlx5_write_lat "),
        (env!("CARGO_BIN_EXE_mlx5_atomic_bw"), "mlx5_atomic_bw "),
        (env!("CARGO_BIN_EXE_mlx5_devinfo"), "mlx5_devinfo "),
    ] {
        let (ok, out, err) = run(bin, &["-V"]);
        assert!(ok && out.starts_with(name), "{out}{err}");
    }
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-A", "CMP_AND_SWAP"]);
    assert!(!ok && err.contains("You are not running the atomic_lat/bw test!"), "{err}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-Q", "0"]);
    assert!(!ok && err.contains("CQ moderation should be between 1 and 1024"), "{err}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-c", "XRC"]);
    assert!(!ok && err.contains("[possible values: RC, UD, DC]") && err.lines().count() == 1, "{err}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_send_lat"), &["-D", "1", "-n", "100"]);
    assert!(ok && err.contains("-n is ignored with -D"), "{err}");
    let dir = std::env::temp_dir().join(format!("mlx5-tools-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("never.json");
    let (ok, _, err) =
        run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-n", "20", "--out_json_file", f.to_str().unwrap()]);
    assert!(ok && err.contains("writes nothing without --out_json") && !f.exists(), "{err}");
}

/// perftest's connection flags take effect (-m the path MTU, -o the READ
/// depth, -S, -u accepted); the flags these tools do not honour yet are
/// each refused in one line that names them, never "unexpected argument".
#[test]
fn perftests_flags_are_taken_or_refused_by_name() {
    let (ok, out, err) = run(
        env!("CARGO_BIN_EXE_mlx5_read_lat"),
        &["-n", "20", "-m", "512", "-o", "4", "-S", "3", "-u", "10"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains(" Mtu             : 512[B]")
            && out.contains(" Outstand reads  : 4")
            && out.contains(" OUT 0x04"),
        "{out}"
    );
    let (ok, out, err) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-n", "20", "-q", "3"]);
    assert!(ok, "{err}");
    assert_eq!(out.matches(" local address:").count(), 3, "one line per QP: {out}");
    assert_eq!(out.matches(" remote address:").count(), 3, "{out}");
    for (bin, flag) in
        [(env!("CARGO_BIN_EXE_mlx5_write_lat"), "-R"), (env!("CARGO_BIN_EXE_mlx5_write_lat"), "-x")]
    {
        let mut args = vec![flag];
        if flag == "-x" {
            args.push("2");
        }
        let (ok, out, err) = run(bin, &args);
        assert!(!ok && out.is_empty(), "{flag} accepted");
        assert_eq!(err.trim_end().lines().count(), 1, "{flag}: {err}");
        assert!(
            err.contains(flag.split('/').next().unwrap()) && !err.contains("unexpected argument"),
            "{err}"
        );
    }
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-o", "2"]);
    assert!(!ok && err.contains("only available on READ verb"), "{err}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-S", "16"]);
    assert!(!ok && err.contains("Only 15 Service levels"), "{err}");
    // -l: lists of 8 WQEs, the CQ moderation their size; iterations whole lists.
    let (ok, out, err) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-l", "8", "-n", "64", "-s", "64"]);
    assert!(ok, "{err}");
    assert!(out.contains(" Post List       : 8") && out.contains(" CQ Moderation   : 8"), "{out}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-l", "8", "-n", "65"]);
    assert!(!ok && err.contains("multiple of post list size"), "{err}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-l", "2"]);
    assert!(!ok && err.contains("BW tests only"), "{err}");
    // -e: the CQ on a completion channel, waited on when empty (threaded:
    // the NIC thread's completion event wakes the tool); not on WRITE.
    for args in [&["-e", "-n", "200"][..], &["-e", "--threaded", "-n", "200"]] {
        let (ok, out, err) = run(env!("CARGO_BIN_EXE_mlx5_send_lat"), args);
        assert!(ok && out.contains(" Test with events. Using sim0_comp0"), "{args:?}: {err}{out}");
    }
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_read_bw"), &["-e", "--threaded", "-n", "500"]);
    assert!(ok, "{err}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-e"]);
    assert!(!ok && err.contains("not available on WRITE verb"), "{err}");
    // --use-srq: SEND's receives from one SRQ (RC and UD); SEND tests only.
    for conn in ["RC", "UD"] {
        let (ok, out, err) =
            run(env!("CARGO_BIN_EXE_mlx5_send_bw"), &["--use-srq", "-c", conn, "-n", "200", "-q", "2"]);
        assert!(ok && out.contains("Using SRQ      : ON"), "{conn}: {err}{out}");
    }
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["--use-srq"]);
    assert!(!ok && err.contains("only available in SEND tests"), "{err}");
    // -b: both directions at once, the row their sum (so above one way's).
    for bin in [env!("CARGO_BIN_EXE_mlx5_write_bw"), env!("CARGO_BIN_EXE_mlx5_send_bw")] {
        let (ok, out, err) = run(bin, &["-b", "-n", "300", "-s", "4096"]);
        assert!(ok, "{err}");
        let row = out.lines().find(|l| l.contains(" 300 ")).expect("a row");
        let avg: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!(avg > 0.0, "{row}");
    }
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-b"]);
    assert!(!ok && err.contains("only available in BW test"), "{err}");
    // -C: cycles (µs × the CPU's MHz), the histogram says so.
    let (ok, out, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-n", "20", "-C", "-H"]);
    assert!(ok && out.contains("#, cycles"), "{err}{out}");
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_mlx5_write_bw"), &["-a", "-D", "1"]);
    assert!(!ok && err.contains("doesn't support running on all sizes"), "{err}");
    // --run_infinitely: a row per -D window until killed (here after 3.5 s,
    // so about three rows), with no peak as under -D.
    let (_, out, _) = run_within_then_kill(
        env!("CARGO_BIN_EXE_mlx5_write_bw"),
        &["--run_infinitely", "-D", "1", "-s", "64"],
        std::time::Duration::from_millis(3500),
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.trim_start().starts_with("64 ")).collect();
    assert!(rows.len() >= 2 && rows.iter().all(|r| r.split_whitespace().nth(2) == Some("0.00")), "{out}");
    // -U every sample in order, -H sorted without perftest's 2-sample tail.
    let (ok, out, err) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-n", "20", "-U"]);
    assert!(ok, "{err}");
    let samples = out.lines().filter(|l| l.split(", ").count() == 2 && !l.starts_with('#')).count();
    assert!(out.contains("#, usec") && samples == 20, "{samples}: {out}");
    let (ok, out, _) = run(env!("CARGO_BIN_EXE_mlx5_write_lat"), &["-n", "20", "-H"]);
    let v: Vec<f64> = out
        .lines()
        .filter(|l| l.split(", ").count() == 2 && !l.starts_with('#'))
        .map(|l| l.split(", ").nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(ok && v.len() == 18 && v.windows(2).all(|w| w[0] <= w[1]), "{out}");
}
