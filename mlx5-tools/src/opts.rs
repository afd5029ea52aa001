//! perftest's options (`ib_write_lat --help`), parsed with clap. A wrong
//! argument is a one-line error and exit status 1, never a panic.

use clap::{Parser, ValueEnum};

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

/// The options, with perftest's names and meanings.
#[derive(Parser, Debug, Clone)]
#[command(version, about = "perftest-compatible test for the mlx5 library (simulator by default)")]
pub struct Opts {
    /// Server host to connect to (client side); none: be the server.
    /// Only with `--backend hw`: on the simulator both sides run here.
    pub server: Option<String>,
    /// Run sizes from 2 up to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Message size in bytes (latency default 2, bandwidth 65536).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Iterations per size (latency default 1000, bandwidth 5000).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    /// `-D`: run for this many seconds instead.
    pub duration: Option<u64>,
    /// Number of QPs (bandwidth tests; latency tests use one).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    /// QPs (`-q`).
    pub qps: u32,
    /// Outstanding send WQEs per QP (latency default 1, bandwidth 128).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receive queue depth (SEND tests; default 512, on UD the iterations
    /// up to 8192).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// Completion moderation: one signaled WQE every this many (bandwidth).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    /// Signal every Nth send (`-Q`).
    pub cq_mod: u32,
    /// Largest message sent inline (latency defaults as perftest's: WRITE 220,
    /// SEND 236 (UD 188), DC 150; 0 for bandwidth, READ and atomics).
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Connection type.
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = Connection::Rc)]
    pub connection: Connection,
    /// Atomic operation (atomic tests).
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value_t = AtomicType::FetchAndAdd)]
    pub atomic_type: AtomicType,
    /// Report bandwidth in Gb/s instead of MiB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Cancel the peak-bandwidth calculation (bandwidth tests; the peak is
    /// then 0, as it always is with -D).
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Write the results as JSON (to `--out_json_file`).
    #[arg(long = "out_json")]
    pub out_json: bool,
    /// The JSON report's file.
    #[arg(long = "out_json_file", default_value = "perftest_out.json")]
    pub out_json_file: String,
    /// Device name (hardware: e.g. mlx5_0).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Device port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// TCP port of the connection exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
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
    /// Accepted for perftest compatibility (CPU frequency warnings do not apply).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
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
        let iters = opts.iters.unwrap_or(if lat { 1000 } else { 5000 });
        if iters < 5 && opts.duration.is_none() {
            return Err(format!("-n {iters}: at least 5 iterations"));
        }
        if opts.duration == Some(0) {
            return Err("-D 0: the duration is at least one second".into());
        }
        if opts.no_peak && lat {
            return Err("-N: NoPeak only valid for BW tests".into());
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
        let cq_mod = opts.cq_mod.clamp(1, tx_depth);
        Ok(Config {
            verb,
            test,
            sizes,
            iters,
            duration: opts.duration,
            qps: opts.qps,
            tx_depth,
            rx_depth,
            connection: conn,
            cq_mod,
            inline_size,
            no_peak: opts.no_peak || opts.duration.is_some(),
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
            (AtomicType::CmpAndSwap, Backend::Hw, Some("server1"))
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
    }

    #[test]
    fn defaults_are_perftests() {
        let c = Config::new(Verb::Write, Test::Lat, parse(&[]).unwrap()).unwrap();
        assert_eq!((c.sizes.clone(), c.iters, c.tx_depth, c.inline_size), (vec![2], 1000, 1, 220));
        let c = Config::new(Verb::Write, Test::Bw, parse(&[]).unwrap()).unwrap();
        assert_eq!((c.sizes.clone(), c.iters, c.tx_depth, c.cq_mod), (vec![65536], 5000, 128, 100));
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
