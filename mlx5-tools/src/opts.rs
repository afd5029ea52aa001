//! perftest's options (`ib_write_lat --help`), parsed with clap. A wrong
//! argument is a one-line error and exit status 1, never a panic.

use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

/// The operation a program measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// SEND / receive.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// Atomic compare-and-swap or fetch-and-add.
    Atomic,
}

impl Verb {
    /// perftest's `testsStr`.
    pub fn perftest_name(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
}

/// Latency or bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// Latency (`*_lat`).
    Lat,
    /// Bandwidth (`*_bw`).
    Bw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
/// Which NIC runs the test (`--backend`).
pub enum Backend {
    /// Two simulated hosts in this process.
    Sim,
    /// A ConnectX through rdma-core; server and client over TCP.
    Hw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
/// perftest's `-c`: the transport.
pub enum Connection {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram (SEND tests only, as in perftest).
    Ud,
    /// Dynamically connected: DCIs send to the peer's DCTs, which receive
    /// on an SRQ.
    Dc,
}

impl Connection {
    /// perftest's `connStr`.
    pub fn perftest_name(self) -> &'static str {
        match self {
            Connection::Rc => "RC",
            Connection::Ud => "UD",
            Connection::Dc => "DC",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
/// perftest's `-A`: which atomic.
pub enum AtomicType {
    #[value(name = "CMP_AND_SWAP")]
    /// Compare-and-swap.
    CmpAndSwap,
    #[value(name = "FETCH_AND_ADD")]
    /// Fetch-and-add.
    FetchAndAdd,
}

impl AtomicType {
    /// perftest's `atomicTypesStr`.
    pub fn perftest_name(self) -> &'static str {
        match self {
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// The options, with perftest's names, meanings and help lines (the
/// `(SYMMETRIC)` ones must match on both sides). Each program offers those
/// of its test ([`command`]).
#[derive(Parser, Debug, Clone)]
#[command(version, about = "perftest-compatible test for the mlx5 library (simulator by default)")]
pub struct Opts {
    /// Server host to connect to (client side); none: be the server. Only
    /// with --backend hw: on the simulator both sides run in this process.
    pub server: Option<String>,
    /// Run sizes from 2 till 2^23 (SYMMETRIC)
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Size of message to exchange (default 2 for latency, 65536 for bandwidth) (SYMMETRIC)
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Number of exchanges (at least 5, default 5000 for write bandwidth, 1000 otherwise) (SYMMETRIC)
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run test for a customized period of seconds. (SYMMETRIC)
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u64>,
    /// Num of qp's (default 1) (SYMMETRIC)
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Size of tx queue (default 1 for latency, 128 for bandwidth)
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Rx queue size (default 512; on UD the iterations, up to 8192)
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// Generate Cqe only after <--cq-mod> completion (1 to 1024, default 100)
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Max size of message to be sent in inline (latency defaults as
    /// perftest's: WRITE 220, SEND 236 (UD 188), DC 150; bandwidth 0)
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Connection type RC/UD/DC (default RC; UD for SEND only) (SYMMETRIC)
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = Connection::Rc)]
    pub connection: Connection,
    /// type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD} (default FETCH_AND_ADD) (SYMMETRIC)
    #[arg(short = 'A', long = "atomic_type", value_enum)]
    pub atomic_type: Option<AtomicType>,
    /// Report the bandwidth in Gb/s instead of MiB/s
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Cancel peak-bw calculation (the peak is then 0.00, as it always is with -D)
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Save the report in a json file
    #[arg(long = "out_json")]
    pub out_json: bool,
    /// Name of the report json file (with --out_json)
    #[arg(long = "out_json_file", default_value = "perftest_out.json")]
    pub out_json_file: String,
    /// Use IB device `<dev>` (default first device found)
    #[arg(short = 'd', long = "ib-dev", help = "Use IB device <dev> (default first device found)")]
    pub ib_dev: Option<String>,
    /// Use port `<port>` of IB device (default 1)
    #[arg(
        short = 'i',
        long = "ib-port",
        default_value_t = 1,
        help = "Use port <port> of IB device (default 1)"
    )]
    pub ib_port: u8,
    /// Listen on/connect to port `<port>` (default 18515) (SYMMETRIC)
    #[arg(
        short = 'p',
        long = "port",
        default_value_t = 18515,
        help = "Listen on/connect to port <port> (default 18515) (SYMMETRIC)"
    )]
    pub port: u16,
    /// Backend.
    #[arg(long = "backend", value_enum, default_value_t = Backend::Sim)]
    pub backend: Backend,
    /// Simulator: one thread per NIC instead of running the NICs in this thread.
    #[arg(long = "threaded")]
    pub threaded: bool,
    /// Simulator: write every packet to this pcap file (Wireshark reads it; RoCE v2 as
    /// Ethernet frames, InfiniBand as ERF records).
    #[arg(long = "pcap")]
    pub pcap: Option<String>,
    /// Do not show a warning even if cpufreq_ondemand module is loaded, and cpu-freq is not on max.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// MTU size : 256 - 4096 (default port mtu) (SYMMETRIC)
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// QP timeout, timeout value is 4 usec * 2 ^(timeout), default 14
    #[arg(short = 'u', long = "qp-timeout")]
    pub qp_timeout: Option<u8>,
    /// num of outstanding read/atom (default 16)
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u32>,
    /// SL (default 0)
    #[arg(short = 'S', long = "sl")]
    pub sl: Option<u8>,
    /// Test uses GID with GID index
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u8>,
    /// Measure bidirectional bandwidth (default unidirectional) (SYMMETRIC)
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Sleep on CQ events (default poll)
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Post list of send WQEs of `<list size>` size (instead of single post)
    #[arg(short = 'l', long = "post_list")]
    pub post_list: Option<u32>,
    /// report times in cpu cycle units (default microseconds)
    #[arg(short = 'C', long = "report-cycles")]
    pub report_cycles: bool,
    /// Print out all results (default print summary only)
    #[arg(short = 'H', long = "report-histogram")]
    pub report_histogram: bool,
    /// (implies -H) print out unsorted results (default sorted)
    #[arg(short = 'U', long = "report-unsorted")]
    pub report_unsorted: bool,
    /// Use a Shared Receive Queue. --rx-depth controls max-wr size of the SRQ
    #[arg(long = "use-srq")]
    pub use_srq: bool,
    /// Run test forever, print results every `<duration>` seconds
    #[arg(long = "run_infinitely")]
    pub run_infinitely: bool,
    /// Connect QPs with rdma_cm and run test on those QPs
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Meet the peer over perftest's own out-of-band exchange, so that the peer may be
    /// perftest (ib_write_lat, ib_write_bw, ib_send_lat, ib_send_bw); RC
    #[arg(long = "perftest_exchange")]
    pub perftest_exchange: bool,
}

/// The perftest flags this tool takes but cannot honour yet, each with the
/// line that says so (perftest's meaning, and what to run instead).
fn not_yet(o: &Opts) -> Option<&'static str> {
    [
        (o.rdma_cm, "-R: rdma_cm is not supported: QPs connect over the TCP exchange (perftest's default); run without -R"),
    ]
    .into_iter()
    .find_map(|(given, why)| given.then_some(why))
}

/// The options `verb`'s `test` offers, as perftest's `usage` lists them
/// for it: the others are hidden from its help (and refused, with
/// perftest's words, where perftest refuses them). Named `prog` in usage,
/// errors and `-V`.
pub fn command(verb: Verb, test: Test, prog: &str) -> clap::Command {
    let bw = test == Test::Bw;
    let atomic = verb == Verb::Atomic;
    let offered = |id: &str| match id {
        "atomic_type" => atomic,
        "all" | "size" => !atomic,
        "qps" | "cq_mod" | "tx_depth" | "no_peak" | "bidirectional" | "post_list" | "run_infinitely" => bw,
        "report_cycles" | "report_histogram" | "report_unsorted" => !bw,
        "outs" => matches!(verb, Verb::Read | Verb::Atomic),
        "events" => verb != Verb::Write,
        "use_srq" => verb == Verb::Send,
        "rx_depth" => verb == Verb::Send,
        "inline_size" => matches!(verb, Verb::Write | Verb::Send),
        _ => true,
    };
    let what = match test {
        Test::Lat => "Latency",
        Test::Bw => "BW",
    };
    let mut cmd = Opts::command().name(prog.to_string()).bin_name(prog.to_string()).about(format!(
        "perftest's {} {what} test for the mlx5 library (simulator by default; --backend hw for a ConnectX)",
        verb.perftest_name()
    ));
    let ids: Vec<String> = cmd.get_arguments().map(|a| a.get_id().to_string()).collect();
    for id in ids.iter().filter(|id| !offered(id)) {
        cmd = cmd.mut_arg(id, |a| a.hide(true));
    }
    cmd
}

/// Parse `args` (the program name first) for `verb`'s `test`.
pub fn parse_for<I, T>(verb: Verb, test: Test, prog: &str, args: I) -> Result<Opts, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let m = command(verb, test, prog).try_get_matches_from(args)?;
    Opts::from_arg_matches(&m)
}

/// A parser error as one line: clap's message, the accepted values and its
/// tip, without the usage block.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(|l| l.trim_start_matches("error: "))
        .collect();
    let mut line = parts.join("; ");
    if line.is_empty() {
        line = "bad arguments".into();
    }
    line + " (--help lists the options)"
}

/// What a run does, resolved from the options and the program.
#[derive(Debug, Clone)]
pub struct Config {
    /// The operation measured.
    pub verb: Verb,
    /// Latency or bandwidth.
    pub test: Test,
    /// Message sizes to run (one, or 2..2^23 with `-a`).
    pub sizes: Vec<u64>,
    /// Iterations per size.
    pub iters: u64,
    /// `-D`: run for this many seconds instead.
    pub duration: Option<u64>,
    /// QPs (`-q`).
    pub qps: u32,
    /// Send queue depth (`-t`).
    pub tx_depth: u32,
    /// Receive queue depth (`-r`).
    pub rx_depth: u32,
    /// Transport (`-c`).
    pub connection: Connection,
    /// Signal every Nth send (`-Q`).
    pub cq_mod: u32,
    /// Inline threshold (`-I`).
    pub inline_size: u32,
    /// No peak bandwidth: `-N`, or `-D` (perftest's `noPeak`).
    pub no_peak: bool,
    /// The atomic (`-A`; atomic tests only, FETCH_AND_ADD by default).
    pub atomic_type: AtomicType,
    /// `-o`: outstanding READs / atomics (READ and atomic tests).
    pub out_reads: Option<u32>,
    /// `-l`: WQEs per doorbell (1: as many as the round posts).
    pub post_list: u32,
    /// The parsed command line.
    pub opts: Opts,
}

/// The largest message the tools register memory for (`-a` goes to 2^23).
pub const MAX_SIZE: u64 = 1 << 23;

impl Config {
    /// Check and complete the options; the error is one line for the user.
    pub fn new(verb: Verb, test: Test, opts: Opts) -> Result<Config, String> {
        let lat = test == Test::Lat;
        let mut sizes = match (opts.all, opts.size) {
            (true, _) => (1..=23).map(|i| 1u64 << i).collect(),
            (false, Some(s)) => vec![s],
            (false, None) => vec![if lat { 2 } else { 65536 }],
        };
        if verb == Verb::Atomic {
            if opts.size.is_some_and(|s| s != 8) {
                return Err("atomic tests use 8-byte operands (-s 8)".into());
            }
            sizes = vec![8];
        }
        if let Some(&s) = sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
            return Err(format!("message size {s} out of range 1..={MAX_SIZE}"));
        }
        if opts.qps == 0 || (lat && opts.qps != 1) {
            return Err(format!("-q {}: latency tests use one QP, bandwidth tests 1 or more", opts.qps));
        }
        let tx_depth = opts.tx_depth.unwrap_or(if lat { 1 } else { 128 });
        if tx_depth == 0 || tx_depth > 8192 {
            return Err(format!("--tx-depth {tx_depth} out of range 1..=8192"));
        }
        // DEF_ITERS_WB for write bandwidth, DEF_ITERS for the rest (perftest_parameters.c).
        let iters = opts.iters.unwrap_or(if verb == Verb::Write && !lat { 5000 } else { 1000 });
        if iters < 5 && opts.duration.is_none() {
            return Err(format!("-n {iters}: at least 5 iterations"));
        }
        if opts.duration == Some(0) {
            return Err("-D 0: the duration is at least one second".into());
        }
        if opts.no_peak && lat {
            return Err("-N: NoPeak only valid for BW tests".into());
        }
        if opts.atomic_type.is_some() && verb != Verb::Atomic {
            return Err("-A: You are not running the atomic_lat/bw test! To change the atomic action type, you must run one of the atomic tests".into());
        }
        if let Some(q) = opts.cq_mod.filter(|q| !(1..=1024).contains(q)) {
            return Err(format!("-Q {q}: CQ moderation should be between 1 and 1024"));
        }
        if let Some(why) = not_yet(&opts) {
            return Err(why.into());
        }
        if opts.all && opts.duration.is_some() {
            return Err("-a: Duration mode currently doesn't support running on all sizes.".into());
        }
        if opts.run_infinitely && lat {
            return Err("--run_infinitely: run_infinitely exists only in BW tests for now.".into());
        }
        if opts.bidirectional && lat {
            return Err("-b: Bidirectional is only available in BW test".into());
        }
        if opts.run_infinitely && opts.bidirectional && verb == Verb::Send {
            return Err(
                "--run_infinitely: run_infinitely mode is not supported in SEND Bidirectional BW test".into(),
            );
        }
        if opts.run_infinitely && opts.events {
            return Err("--run_infinitely: run_infinitely does not support events feature yet.".into());
        }
        if opts.events && verb == Verb::Write {
            return Err("-e: Events feature not available on WRITE verb".into());
        }
        if opts.events && opts.duration.is_some() {
            return Err("-e: Duration mode doesn't work with events".into());
        }
        if opts.use_srq && verb != Verb::Send {
            return Err("--use-srq: Using SRQ only available in SEND tests".into());
        }
        if opts.outs.is_some() && !matches!(verb, Verb::Read | Verb::Atomic) {
            return Err("-o: Setting Outstanding reads only available on READ verb".into());
        }
        if opts.outs == Some(0) {
            return Err("-o 0: at least one outstanding read".into());
        }
        if opts.sl.is_some_and(|sl| sl > 15) {
            return Err(format!("-S {}: Only 15 Service levels", opts.sl.unwrap_or(0)));
        }

        if opts.gid_index.is_some() && opts.backend == Backend::Sim {
            return Err("-x: the GID index selects a RoCE source address; the simulated ports are InfiniBand without a GRH".into());
        }
        let conn = opts.connection;
        if conn == Connection::Ud && verb != Verb::Send {
            return Err(format!(
                "-c UD: {} runs over RC or DC; UD is for the SEND tests (as in perftest)",
                verb.perftest_name()
            ));
        }
        // perftest: on UD with the default depth, one receive per iteration
        // up to UC_MAX_RX (ours: up to the 8192 the option allows).
        let rx_default = if conn == Connection::Ud { iters.clamp(1, 8192) as u32 } else { 512 };
        let rx_depth = opts.rx_depth.unwrap_or(rx_default);
        if rx_depth == 0 || rx_depth > 8192 {
            return Err(format!("--rx-depth {rx_depth} out of range 1..=8192"));
        }
        // DEF_INLINE_WRITE, DEF_INLINE_SEND_RC_UC_XRC, DEF_INLINE_SEND_UD, DEF_INLINE_DC.
        let inline_default = match (lat, verb, conn) {
            (true, Verb::Write | Verb::Send, Connection::Dc) => 150,
            (true, Verb::Write, _) => 220,
            (true, Verb::Send, Connection::Ud) => 188,
            (true, Verb::Send, _) => 236,
            _ => 0,
        };
        let inline_size = opts.inline_size.unwrap_or(inline_default);
        if inline_size > 0 && matches!(verb, Verb::Read | Verb::Atomic) {
            return Err("-I: READ and atomics cannot be inline".into());
        }
        if inline_size > 1024 {
            return Err(format!("-I {inline_size}: at most 1024 bytes inline (MAX_INLINE_UD)"));
        }
        if opts.backend == Backend::Hw && opts.pcap.is_some() {
            return Err("--pcap captures the simulator's wire; on hardware use ibdump".into());
        }
        if opts.backend == Backend::Sim && opts.server.is_some() {
            return Err("a server host is for --backend hw; on the simulator both sides run here".into());
        }
        // perftest: a post list sets the CQ moderation to its size unless
        // -Q was given, which must then divide it; iterations are whole lists.
        let post_list = opts.post_list.unwrap_or(1);
        if post_list > 1 && lat {
            return Err("-l: Post list is supported in BW tests only".into());
        }
        if post_list == 0 || post_list > tx_depth {
            return Err(format!("-l {post_list}: a post list of 1 to the TX depth ({tx_depth}) WQEs"));
        }
        if post_list > 1 {
            if opts.duration.is_none() && !iters.is_multiple_of(u64::from(post_list)) {
                return Err(format!(
                    "-l {post_list}: Number of iterations must be a multiple of post list size"
                ));
            }
            if opts.cq_mod.is_some_and(|q| !post_list.is_multiple_of(q)) {
                return Err(format!("-l {post_list}: Post list size must be a multiple of CQ moderation"));
            }
        }
        if (opts.report_histogram || opts.report_unsorted) && !lat {
            return Err("-H/-U: Available only on Latency tests".into());
        }
        let cq_mod = match opts.cq_mod {
            Some(q) => q,
            None if post_list > 1 => post_list,
            None => 100,
        }
        .clamp(1, tx_depth);
        Ok(Config {
            verb,
            test,
            sizes,
            iters,
            // --run_infinitely: windows of -D seconds (perftest's default 5).
            duration: if opts.run_infinitely { Some(opts.duration.unwrap_or(5)) } else { opts.duration },
            qps: opts.qps,
            tx_depth,
            rx_depth,
            connection: conn,
            cq_mod,
            inline_size,
            no_peak: opts.no_peak || opts.duration.is_some() || opts.run_infinitely,
            atomic_type: opts.atomic_type.unwrap_or(AtomicType::FetchAndAdd),
            out_reads: opts.outs,
            post_list,
            opts,
        })
    }

    /// UD carries at most one MTU per message (`max` is the QP's limit):
    /// as perftest, `-a` stops at it and a larger `-s` becomes it.
    pub fn fit_message(&self, max: u32) -> Config {
        let max = u64::from(max);
        let mut c = self.clone();
        if c.connection == Connection::Ud && c.sizes.iter().any(|&s| s > max) {
            c.sizes =
                if c.opts.all { c.sizes.into_iter().filter(|&s| s <= max).collect() } else { vec![max] };
        }
        c
    }

    /// The path MTU: `-m`, at most the port's (perftest: "Requested mtu
    /// is higher than active mtu", then the active one), else the port's.
    pub fn path_mtu(&self, active: u32) -> u32 {
        self.valid_mtu().map_or(active, |m| m.min(active)).min(4096)
    }

    /// `-m` when it is an MTU (perftest runs with the port's for another
    /// value, after saying so: [`Config::mtu_warning`]).
    pub fn valid_mtu(&self) -> Option<u32> {
        self.opts.mtu.filter(|m| [256, 512, 1024, 2048, 4096].contains(m))
    }

    /// perftest's lines for an `-m` that is no MTU (its `set_mtu`).
    pub fn mtu_warning(&self, active: u32) -> Option<String> {
        let m = self.opts.mtu.filter(|_| self.valid_mtu().is_none())?;
        Some(format!(
            " Invalid MTU - {m} \n Please choose mtu from {{256,512,1024,2048,4096}}\n Will run with the port active mtu - {active}"
        ))
    }

    /// The machine that drives the test: the client (on the simulator,
    /// this process plays both).
    pub fn is_client(&self) -> bool {
        self.opts.backend == Backend::Sim || self.opts.server.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Opts, clap::Error> {
        Opts::try_parse_from(std::iter::once("mlx5_write_lat").chain(args.iter().copied()))
    }

    fn help(verb: Verb, test: Test) -> String {
        command(verb, test, "prog").render_help().to_string()
    }

    /// Each program's help lists the options its test takes, as perftest's
    /// usage does; the name is the program's.
    #[test]
    fn help_is_each_programs_own() {
        let atomic = help(Verb::Atomic, Test::Bw);
        assert!(atomic.contains("--atomic_type") && !atomic.contains("--all") && !atomic.contains("--size"));
        let write_lat = help(Verb::Write, Test::Lat);
        for hidden in ["--atomic_type", "--noPeak", "--cq-mod", "--qp ", "--rx-depth", "--tx-depth"] {
            assert!(!write_lat.contains(hidden), "{hidden} in {write_lat}");
        }
        assert!(write_lat.contains("--inline_size") && write_lat.contains("Run sizes from 2 till 2^23"));
        let send_bw = help(Verb::Send, Test::Bw);
        for shown in ["--rx-depth", "--noPeak", "--cq-mod", "--qp ", "--tx-depth", "--inline_size"] {
            assert!(send_bw.contains(shown), "{shown} in {send_bw}");
        }
        assert!(!help(Verb::Read, Test::Lat).contains("--inline_size"));
        let v = command(Verb::Write, Test::Lat, "mlx5_write_lat").render_version();
        assert!(v.starts_with("mlx5_write_lat "), "{v}");
    }

    /// A parser error is one line with everything clap says: the bad
    /// value, the accepted ones and the tip.
    #[test]
    fn parser_errors_are_complete_on_one_line() {
        let e = parse_for(Verb::Write, Test::Lat, "p", ["p", "-c", "XRC"]).unwrap_err();
        let l = one_line(&e);
        assert!(!l.contains('\n') && l.contains("'XRC'") && l.contains("RC, UD, DC"), "{l}");
        let e = parse_for(Verb::Write, Test::Lat, "p", ["p", "--sise", "8"]).unwrap_err();
        let l = one_line(&e);
        assert!(l.contains("--sise") && l.contains("--size"), "the tip: {l}");
    }

    #[test]
    fn perftest_option_names_parse() {
        let o = parse(&[
            "-s",
            "64",
            "-n",
            "100",
            "-t",
            "32",
            "-I",
            "0",
            "--report_gbits",
            "--out_json",
            "--out_json_file",
            "x.json",
            "-d",
            "mlx5_0",
            "-i",
            "1",
            "-p",
            "20000",
            "-c",
            "RC",
            "-q",
            "2",
            "-F",
        ])
        .unwrap();
        assert_eq!((o.size, o.iters, o.tx_depth, o.inline_size), (Some(64), Some(100), Some(32), Some(0)));
        assert!(o.report_gbits && o.out_json && o.cpu_freq);
        assert_eq!(
            (o.out_json_file.as_str(), o.ib_dev.as_deref(), o.port),
            ("x.json", Some("mlx5_0"), 20000)
        );
        let o = parse(&["-A", "CMP_AND_SWAP", "--backend", "hw", "server1"]).unwrap();
        assert_eq!(
            (o.atomic_type, o.backend, o.server.as_deref()),
            (Some(AtomicType::CmpAndSwap), Backend::Hw, Some("server1"))
        );
    }

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        assert!(parse(&["-s", "big"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["-c", "XRC"]).is_err());
        let e = Config::new(Verb::Write, Test::Lat, parse(&["-q", "2"]).unwrap()).unwrap_err();
        assert!(e.contains("one QP"), "{e}");
        assert!(Config::new(Verb::Write, Test::Bw, parse(&["-s", "0"]).unwrap()).is_err());
        assert!(Config::new(Verb::Read, Test::Lat, parse(&["-I", "64"]).unwrap()).is_err());
        assert!(Config::new(Verb::Write, Test::Lat, parse(&["somehost"]).unwrap()).is_err());
        // What perftest refuses: -A outside the atomic tests, -Q outside 1..=1024, -N on latency.
        let e = Config::new(Verb::Write, Test::Lat, parse(&["-A", "CMP_AND_SWAP"]).unwrap()).unwrap_err();
        assert!(e.contains("not running the atomic_lat/bw test"), "{e}");
        let e = Config::new(Verb::Write, Test::Bw, parse(&["-Q", "0"]).unwrap()).unwrap_err();
        assert!(e.contains("between 1 and 1024"), "{e}");
        assert!(Config::new(Verb::Write, Test::Bw, parse(&["-Q", "1025"]).unwrap()).is_err());
        assert!(Config::new(Verb::Write, Test::Lat, parse(&["-N"]).unwrap()).is_err());
        let c = Config::new(Verb::Atomic, Test::Lat, parse(&["-A", "CMP_AND_SWAP"]).unwrap()).unwrap();
        assert_eq!(c.atomic_type, AtomicType::CmpAndSwap);
    }

    #[test]
    fn defaults_are_perftests() {
        let c = Config::new(Verb::Write, Test::Lat, parse(&[]).unwrap()).unwrap();
        assert_eq!((c.sizes.clone(), c.iters, c.tx_depth, c.inline_size), (vec![2], 1000, 1, 220));
        let c = Config::new(Verb::Write, Test::Bw, parse(&[]).unwrap()).unwrap();
        assert_eq!((c.sizes.clone(), c.iters, c.tx_depth, c.cq_mod), (vec![65536], 5000, 128, 100));
        // DEF_ITERS_WB (5000) is write bandwidth's only: the others run DEF_ITERS (1000).
        for verb in [Verb::Send, Verb::Read, Verb::Atomic] {
            assert_eq!(Config::new(verb, Test::Bw, parse(&[]).unwrap()).unwrap().iters, 1000, "{verb:?}");
        }
        let c = Config::new(Verb::Read, Test::Bw, parse(&["-a"]).unwrap()).unwrap();
        assert_eq!((c.sizes[0], *c.sizes.last().unwrap(), c.sizes.len()), (2, 1 << 23, 23));
        // Inline defaults: DEF_INLINE_WRITE 220, DEF_INLINE_SEND_RC_UC_XRC 236,
        // DEF_INLINE_SEND_UD 188, DEF_INLINE_DC 150 (perftest_parameters.h).
        let inline = |verb, conn: &str| {
            Config::new(verb, Test::Lat, parse(&["-c", conn]).unwrap()).unwrap().inline_size
        };
        assert_eq!(
            [inline(Verb::Write, "RC"), inline(Verb::Send, "RC"), inline(Verb::Send, "UD")],
            [220, 236, 188]
        );
        assert_eq!(
            [inline(Verb::Write, "DC"), inline(Verb::Send, "DC"), inline(Verb::Read, "DC")],
            [150, 150, 0]
        );
        // UD's receive depth follows the iterations (perftest: up to UC_MAX_RX).
        let c = Config::new(Verb::Send, Test::Bw, parse(&["-c", "UD", "-n", "300"]).unwrap()).unwrap();
        assert_eq!((c.rx_depth, c.connection), (300, Connection::Ud));
        assert_eq!(Config::new(Verb::Send, Test::Bw, parse(&["-n", "300"]).unwrap()).unwrap().rx_depth, 512);
    }

    #[test]
    fn ud_is_for_send_and_one_mtu() {
        let e = Config::new(Verb::Write, Test::Bw, parse(&["-c", "UD"]).unwrap()).unwrap_err();
        assert!(e.contains("UD is for the SEND tests"), "{e}");
        // A larger -s becomes the MTU; -a stops at it; RC keeps its sizes.
        let c = Config::new(Verb::Send, Test::Bw, parse(&["-c", "UD"]).unwrap()).unwrap();
        assert_eq!(c.fit_message(4096).sizes, vec![4096]);
        let c = Config::new(Verb::Send, Test::Bw, parse(&["-c", "UD", "-a"]).unwrap()).unwrap();
        assert_eq!(*c.fit_message(1024).sizes.last().unwrap(), 1024);
        let c = Config::new(Verb::Send, Test::Bw, parse(&["-a"]).unwrap()).unwrap();
        assert_eq!(*c.fit_message(1024).sizes.last().unwrap(), 1 << 23);
    }
}
