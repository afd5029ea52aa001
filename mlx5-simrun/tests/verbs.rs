//! Verbs programs through the unmodified libibverbs and libmlx5, on the
//! emulated device: libmlx5 allocates the rings and writes every WQE and
//! doorbell record, the simulator executes them in the program's memory.
//! Each program checks every byte and completion itself and exits 0 only
//! when all hold. Ignored, with the reason, without libibverbs-dev (which
//! `.ci/run` installs).

mod common;

use common::{compile, compile_with, simrun};
use std::path::PathBuf;
use std::process::Command;

fn run_under_simrun(prog: &PathBuf, simrun_args: &[&str], args: &[&str]) -> String {
    let o = simrun().args(simrun_args).arg("--").arg(prog).args(args).output().expect("run mlx5_simrun");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{simrun_args:?} {args:?}: {}\n{out}{err}", o.status);
    out
}

/// RC WRITE, SEND with immediate, READ, fetch-and-add, compare-and-swap and
/// a burst, posted by libmlx5 (`ibv_post_send`, and the `ibv_wr_*` API with
/// `ibv_create_cq_ex`), between two devices and within one, on InfiniBand
/// and RoCE.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn rc_traffic_posted_by_libmlx5_runs_on_the_simulator() {
    let prog = compile("rc_verbs");
    for link in ["ib", "roce"] {
        for args in [&[][..], &["same"], &["ex"], &["same", "ex"]] {
            let out = run_under_simrun(&prog, &["--devices", "2", "--link", link], args);
            assert!(out.contains("all right"), "{link} {args:?}: {out}");
        }
    }
}

/// `--pcap FILE`: the packets of libmlx5's RC traffic on the simulated wire,
/// as Wireshark reads them: InfiniBand ERF records or RoCE v2 Ethernet
/// frames, every one decoded without a malformed packet, the RDMA WRITE's
/// three packets (1024-byte MTU) and the atomics among them.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
#[cfg_attr(no_tshark, ignore = "tshark not installed (Debian package tshark; .ci/run installs it)")]
fn pcap_captures_the_programs_packets() {
    let prog = compile("rc_verbs");
    for link in ["ib", "roce"] {
        let pcap = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rc_verbs_{link}.pcap"));
        let pcap_s = pcap.to_str().unwrap();
        run_under_simrun(&prog, &["--devices", "2", "--link", link, "--pcap", pcap_s], &[]);
        let o = Command::new("tshark").arg("-r").arg(&pcap).output().expect("run tshark");
        assert!(o.status.success(), "tshark: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(!text.to_lowercase().contains("malformed"), "{link}:\n{text}");
        for what in [
            "RDMA Write First",
            "RDMA Write Middle",
            "RDMA Write Last",
            "Fetch Add",
            "Compare Swap",
            "RDMA Read Request",
        ] {
            assert!(text.contains(what), "{link}: no {what} in\n{text}");
        }
    }
}

/// The device clock as libmlx5 reads it: the internal timer page
/// (`ibv_query_rt_values_ex`) brackets a completion's timestamp, the clock
/// info page (`mlx5dv_get_clock_info`) converts it to wall-clock time as
/// libmlx5's own wall-clock CQ does, and the mmaps mlx5_ib refuses for those
/// pages (writable, executable, private, a later version) are refused with
/// its errno; on InfiniBand and RoCE.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn the_device_clock_reaches_the_program() {
    let prog = compile_with("clock", &["-lmlx5"]);
    for link in ["ib", "roce"] {
        let out = run_under_simrun(&prog, &["--link", link], &[]);
        assert!(out.contains("all right"), "{link}: {out}");
    }
}

/// Address vectors are checked as the kernel checks them before mlx5_ib
/// sees them: an empty source GID entry is ENODATA, one past the table
/// EINVAL, a RoCE address without a GRH EINVAL; for `ibv_modify_qp` and
/// `ibv_create_ah`, on InfiniBand and RoCE.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn address_vectors_are_checked_as_the_kernel_checks_them() {
    let prog = compile("address");
    for link in ["ib", "roce"] {
        let out = run_under_simrun(&prog, &["--link", link], &[]);
        assert!(out.contains("all right"), "{link}: {out}");
    }
}

/// Thread domains: libmlx5 maps a dynamic UAR page per domain
/// (`MLX5_IB_MMAP_ALLOC_WC`) and names its register when it creates a QP of
/// a parent domain (`MLX5_QP_FLAG_BFREG_INDEX`); BlueFlame and doorbell
/// WRITEs of two such QPs, interleaved, all land and complete.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn thread_domains_ring_their_own_uar() {
    let prog = compile("thread_domain");
    for link in ["ib", "roce"] {
        let out = run_under_simrun(&prog, &["--link", link], &[]);
        assert!(out.contains("all right"), "{link}: {out}");
    }
}

/// A duplicated command fd names the same context, as in the kernel:
/// commands through `dup`, `fcntl(F_DUPFD_CLOEXEC)` and `dup2` duplicates
/// reach its objects, the context outlives its first descriptor, and
/// `ibv_import_device` on a duplicate is EPROTONOSUPPORT (no ioctl-only
/// QUERY_CONTEXT), which pyverbs' shared-PD test reads as "not supported".
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn duplicated_command_fds_name_the_same_context() {
    let prog = compile("dup");
    let out = run_under_simrun(&prog, &[], &[]);
    assert!(out.contains("all right"), "{out}");
}

/// `ibv_resize_cq`: libmlx5's new ring, the kernel's RESIZE_CQ and the
/// simulator's RESIZE CQE, after which libmlx5 copies the unpolled
/// completions across; growing and shrinking with CQEs unpolled, the same
/// size, and a shrink below what is unpolled (EINVAL), on IB and RoCE.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn resized_cqs_keep_their_completions() {
    let prog = compile("resize_cq");
    for link in ["ib", "roce"] {
        let out = run_under_simrun(&prog, &["--link", link], &[]);
        assert!(out.contains("all right"), "{link}: {out}");
    }
}

/// `ibv_rereg_mr`: a new translation, PD or rights for an MR, its keys
/// kept; WRITEs follow the new range and are refused without the right;
/// PD use is accounted; bad requests are refused; on IB and RoCE.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn reregistered_mrs_move_and_change_rights() {
    let prog = compile("rereg_mr");
    for link in ["ib", "roce"] {
        let out = run_under_simrun(&prog, &["--link", link], &[]);
        assert!(out.contains("all right"), "{link}: {out}");
    }
}

/// An SRQ's limit through libibverbs: `ibv_modify_srq` arms it, receives
/// consume the SRQ below it, `IBV_EVENT_SRQ_LIMIT_REACHED` naming the SRQ
/// arrives once on the async fd, `ibv_query_srq` reports it disarmed, and a
/// limit above the SRQ's size is refused.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn srq_limit_event_reaches_the_program() {
    let prog = compile("srq_limit");
    let out = run_under_simrun(&prog, &[], &[]);
    assert!(out.contains("all right"), "{out}");
}

/// Completion channels the program destroys (`ibv_destroy_comp_channel`
/// only closes a descriptor) take nothing with them: 500 created and
/// destroyed, half with a CQ on them, leave the descriptor count as it was.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn destroyed_channels_leave_nothing_behind() {
    let prog = compile("channels");
    let out = run_under_simrun(&prog, &[], &[]);
    assert!(out.contains("all right"), "{out}");
}

/// Where the system refuses `process_vm_writev` (a container's seccomp
/// profile), responses are copied after a mapping check instead: the RC
/// program runs the same (the fallback forced by
/// `MLX5_SIMKERN_NO_PROCESS_VM=1`).
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn responses_reach_the_program_without_process_vm_writev() {
    let prog = compile("rc_verbs");
    let o = simrun()
        .args(["--devices", "2", "--"])
        .arg(&prog)
        .env("MLX5_SIMKERN_NO_PROCESS_VM", "1")
        .output()
        .expect("run mlx5_simrun");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("all right"),
        "{}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `mlx5_simrun --shared` (step 12): two processes on the same device take their numbers
/// from the device's shared registry, so the QPNs and memory keys of one are not the
/// other's. Without it, each process numbers its own device from the start, and the two
/// get the same numbers (which is why sharing is needed before packets can tell them
/// apart).
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn processes_sharing_a_device_get_different_numbers() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let prog = compile("numbers");
    // A registry of this test's own, not the user's /dev/shm one.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("registry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let numbers_of_two = |shared: bool| -> Vec<String> {
        let mut kids: Vec<_> = (0..2)
            .map(|_| {
                let mut c = simrun();
                if shared {
                    c.arg("--shared");
                }
                c.arg("--")
                    .arg(&prog)
                    .env("MLX5_SIM_REGISTRY_DIR", &dir)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("run mlx5_simrun")
            })
            .collect();
        // Both hold their numbers while both lines are read.
        let lines: Vec<String> = kids
            .iter_mut()
            .map(|k| {
                let mut l = String::new();
                BufReader::new(k.stdout.as_mut().unwrap()).read_line(&mut l).unwrap();
                l
            })
            .collect();
        for mut k in kids {
            drop(k.stdin.take());
            assert!(k.wait().unwrap().success());
        }
        lines
    };
    let shared = numbers_of_two(true);
    let fields = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let (a, b) = (fields(&shared[0]), fields(&shared[1]));
    assert_eq!((a.len(), a[0].as_str(), a[2].as_str()), (4, "qpn", "lkey"), "{shared:?}");
    assert_ne!(a[1], b[1], "the same QPN in two processes: {shared:?}");
    assert_ne!(a[3], b[3], "the same memory key in two processes: {shared:?}");
    let own = numbers_of_two(false);
    assert_eq!(own[0], own[1], "without --shared each process numbers the device alike");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fork` in a program under the launcher (step 12): the child of a parent that already
/// used the device runs RC traffic of its own, and so does the parent afterwards.
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn a_forked_child_gets_its_own_working_nic_threads() {
    run_under_simrun(&compile("fork"), &[], &[]);
}

/// What `ours` builds: one WQE libmlx5 wrote (`wqe NAME qpn=N idx=I HEX`) and
/// the arguments it was built from (`args NAME kind=K rkey=R ...`).
#[derive(Debug, Default)]
struct Written {
    qpn: u32,
    idx: u16,
    bytes: Vec<u8>,
    kind: u32,
    rkey: u32,
    new: u32,
    lkey: u32,
    addr: u64,
    len: u64,
    access: u32,
}

fn parse_written(out: &str) -> Vec<(String, Written)> {
    let mut v: Vec<(String, Written)> = Vec::new();
    for line in out.lines() {
        let mut f = line.split_whitespace();
        let (Some(tag), Some(name)) = (f.next(), f.next()) else { continue };
        let kv = |f: std::str::SplitWhitespace<'_>| -> Vec<(String, String)> {
            f.filter_map(|p| p.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
        };
        match tag {
            "wqe" => {
                let parts: Vec<&str> = line.split_whitespace().collect();
                let hex = parts[4];
                let bytes = (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                    .collect();
                let mut w = Written { bytes, ..Written::default() };
                for (k, val) in kv(line.split_whitespace()) {
                    match k.as_str() {
                        "qpn" => w.qpn = val.parse().unwrap(),
                        "idx" => w.idx = val.parse().unwrap(),
                        _ => {}
                    }
                }
                v.push((name.to_string(), w));
            }
            "args" => {
                let w = &mut v.iter_mut().rev().find(|(n, _)| n == name).expect("wqe line first").1;
                for (k, val) in kv(f) {
                    let n: u64 = val.parse().unwrap();
                    match k.as_str() {
                        "kind" => w.kind = n as u32,
                        "rkey" => w.rkey = n as u32,
                        "new" => w.new = n as u32,
                        "lkey" => w.lkey = n as u32,
                        "addr" => w.addr = n,
                        "len" => w.len = n,
                        "access" => w.access = n as u32,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    v
}

/// A connected RC QP of the simulator, fresh (the first WQE our builder writes
/// lands at ring slot 0), its PD, and what keeps them alive (dropped after them).
struct SimQp {
    qp: mlx5_api::RcQp<mlx5_api::sim::Sim, u64>,
    pd: mlx5_api::ProtectionDomain<mlx5_api::sim::Sim>,
    _peer: mlx5_api::RcQp<mlx5_api::sim::Sim, u64>,
    _cqs: [mlx5_api::CompletionQueue<mlx5_api::sim::Sim, u64>; 2],
    _fabric: mlx5_sim::Fabric,
}

fn sim_qp(max_inline_data: u32) -> SimQp {
    use mlx5_api::{ConnectParams, QpConfig};
    let (fabric, da, db) = mlx5_api::sim::two_hosts(mlx5_sim::ExecMode::Deterministic);
    let cfg = QpConfig { max_send_wr: 16, max_send_sge: 1, max_inline_data, ..QpConfig::default() };
    let (ca, cb) = (da.open().unwrap(), db.open().unwrap());
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let cqa = ca.create_cq(64, |_, _: u64| {}).unwrap();
    let cqb = cb.create_cq(64, |_, _: u64| {}).unwrap();
    let qa = ca.create_rc_qp(&pa, &cqa, &cqa, &cfg).unwrap();
    let qb = cb.create_rc_qp(&pb, &cqb, &cqb, &cfg).unwrap();
    let (ia, ib) = (qa.local_info().unwrap(), qb.local_info().unwrap());
    qa.activate(&ConnectParams { remote: Some(ib), ..Default::default() }).unwrap();
    qb.activate(&ConnectParams { remote: Some(ia), ..Default::default() }).unwrap();
    SimQp { qp: qa, pd: pa, _peer: qb, _cqs: [cqa, cqb], _fabric: fabric }
}

/// The WQE our builder wrote at ring slot 0 of `q`, with what differs by
/// construction set to libmlx5's values (`w`): the WQE index (ctrl bytes 1-2:
/// their QP had posted before), the QPN (ctrl bytes 4-6), in a type-2 bind's
/// mkey context the QPN the window binds to (bytes 68-70, the posting QP's),
/// and, for an mkey list, `key` = (ours, theirs): the mkey's number (ctrl
/// `imm`). Its hex, then libmlx5's.
fn ours_as_theirs(q: &SimQp, w: &Written, key: Option<(u32, u32)>) -> (String, String) {
    let ring = q.qp.sq_ring_bytes();
    let mut v = ring[..usize::from(ring[7] & 0x3f) * 16].to_vec();
    v[1..3].copy_from_slice(&w.idx.to_be_bytes());
    v[4..7].copy_from_slice(&w.qpn.to_be_bytes()[1..]);
    if v.len() >= 72 && u32::from_be_bytes(v[68..72].try_into().unwrap()) >> 8 == q.qp.qpn() {
        v[68..71].copy_from_slice(&w.qpn.to_be_bytes()[1..]);
    }
    if let Some((ours, theirs)) = key {
        assert_eq!(u32::from_be_bytes(v[12..16].try_into().unwrap()), ours);
        v[12..16].copy_from_slice(&theirs.to_be_bytes());
    }
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    (hex(&v), hex(&w.bytes))
}

/// The same WQE as `w`, written by our builder on a QP of the simulator
/// ([`ours_as_theirs`]).
fn ours(name: &str, w: &Written) -> (String, String) {
    use mlx5_api::{AccessFlags, MkeyKind, MwBind, Sge, WqeFlags};
    let q = sim_qp(0);
    // libmlx5 gives the WQE after a UMR an initiator small fence (fm_cache):
    // the local_inv follows bind2, rebind2 the local_inv, bind1 rebind2.
    let after_umr = matches!(name, "local_inv" | "rebind2" | "bind1");
    let flags = if after_umr { WqeFlags::SIGNALED | WqeFlags::SMALL_FENCE } else { WqeFlags::SIGNALED };
    let access = AccessFlags::from_bits(w.access).unwrap();
    let b = q.qp.wqe_builder(0).unwrap();
    match name {
        "local_inv" => b.local_inv(flags, w.rkey).unwrap().finish_batch().unwrap(),
        "send_inv" => b
            .ctrl_send_inv(flags, w.rkey)
            .unwrap()
            .sge(Sge::new(w.addr, w.len as u32, w.lkey))
            .unwrap()
            .finish_batch()
            .unwrap(),
        _ => {
            let kind = if w.kind == 1 { MkeyKind::Window1 } else { MkeyKind::Window2 };
            let bind = MwBind {
                kind,
                rkey: w.rkey,
                new_rkey: w.new,
                mr_lkey: w.lkey,
                addr: w.addr,
                len: w.len,
                access,
                zero_based: false,
            };
            b.bind_mw(flags, &bind).unwrap().finish_batch().unwrap()
        }
    }
    ours_as_theirs(&q, w, None)
}

/// Indirect mkeys created by libmlx5 (`mlx5dv_create_mkey`: DEVX
/// CREATE_MKEY, which the emulated kernel takes when `MLX5_SIM_DEVX` is set),
/// one given three pieces of memory by `mlx5dv_wr_mr_list`, one an
/// interleaved layout by `mlx5dv_wr_mr_interleaved`: the simulator resolves
/// WRITEs and a READ through them (the program checks every byte), and our
/// builder's `mr_list` and `mr_interleaved` write the same UMRs but for the
/// WQE index, the QPN and the mkey's number (ctrl `imm`).
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn indirect_mkeys_listed_by_libmlx5_match_our_builder() {
    use mlx5_api::wqe::Interleaved;
    use mlx5_api::{AccessFlags, Sge, WqeFlags};
    let prog = compile_with("mr_list", &["-lmlx5"]);
    let o = simrun().env("MLX5_SIM_DEVX", "1").arg("--").arg(&prog).output().expect("run mlx5_simrun");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success() && out.contains("all right"), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let theirs = parse_written(&out);
    let nums = |prefix: &str| -> Vec<Vec<u64>> {
        out.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
            .collect()
    };
    let arg = |name: &str, key: &str| -> u64 {
        let line = out.lines().find_map(|l| l.strip_prefix(&format!("args {name} "))).expect("args line");
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .expect(key)
            .parse()
            .unwrap()
    };
    for name in ["mr_list", "mr_interleaved"] {
        let w = &theirs.iter().find(|(n, _)| n == name).expect("the WQE").1;
        // Ours: the same UMR on a fresh QP of the simulator.
        let q = sim_qp(64);
        let (qa, pa) = (&q.qp, &q.pd);
        let access = AccessFlags::from_bits(arg(name, "access") as u32).unwrap();
        let b = qa.wqe_builder(0).unwrap();
        let mk;
        if name == "mr_list" {
            let entries: Vec<Sge> =
                nums("entry ").iter().map(|v| Sge::new(v[2], v[0] as u32, v[1] as u32)).collect();
            mk = pa.create_indirect_mkey(entries.len() as u32).unwrap();
            b.mr_list(WqeFlags::SIGNALED, &mk, access, &entries).unwrap().finish_batch().unwrap();
        } else {
            let ents: Vec<Interleaved> = nums("ilv ")
                .iter()
                .map(|v| Interleaved {
                    addr: v[0],
                    bytes_count: v[1] as u32,
                    bytes_skip: v[2] as u32,
                    lkey: v[3] as u32,
                })
                .collect();
            mk = pa.create_indirect_mkey(ents.len() as u32).unwrap();
            // libmlx5 gives a WQE after a UMR an initiator small fence.
            let f = WqeFlags::SIGNALED | WqeFlags::SMALL_FENCE;
            b.mr_interleaved(f, &mk, access, arg(name, "repeat") as u32, &ents)
                .unwrap()
                .finish_batch()
                .unwrap();
        }
        let (ours, libmlx5) = ours_as_theirs(&q, w, Some((mk.key(), arg(name, "key") as u32)));
        assert_eq!(ours, libmlx5, "{name}: ours, then libmlx5's");
    }
}

/// Memory windows posted by libmlx5 (`ibv_wr_bind_mw`, `ibv_wr_local_inv`,
/// `ibv_bind_mw` for a type-1 window, `ibv_wr_send_inv`) on the emulated
/// device: the simulator carries each out as the program checks (WRITE and
/// READ through the windows, the invalidated key refused with nothing
/// written), and our builders write the same bytes, but for the fields
/// `ours` names (the WQE index and QPN of another QP).
#[test]
#[cfg_attr(no_libibverbs_dev, ignore = "libibverbs-dev not installed (.ci/run installs it)")]
fn memory_windows_posted_by_libmlx5_match_our_builders() {
    let prog = compile_with("mw", &["-lmlx5"]);
    let out = run_under_simrun(&prog, &[], &[]);
    assert!(out.contains("all right"), "{out}");
    let written = parse_written(&out);
    let names: Vec<&str> = written.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["bind2", "local_inv", "rebind2", "send_inv", "bind1"], "{out}");
    for (name, w) in &written {
        let (ours, libmlx5) = ours(name, w);
        assert_eq!(ours, libmlx5, "{name}: ours, then libmlx5's");
    }
}
