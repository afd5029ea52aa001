//! The device registry across processes (`mlx5_sim::registry`): this test program runs
//! copies of itself as child processes (`MLX5_REG_CHILD` says what a child does), so it
//! has a `main` of its own instead of the test harness.
//!
//! - Processes allocating at the same time never get the same number.
//! - A process that exits without giving its numbers back (as a killed one does) leaves
//!   entries that the next user reclaims: its numbers have no owner, and are handed out
//!   again.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mlx5_sim::registry::{Endpoint, Kind, Registry};

/// A child simulating device `mlx5_0` with its numbers from the registry at `path`:
/// a PD, a CQ, an MR and `count` QPs, whose numbers it prints (`kind number` a line).
fn nic_child(path: &str, count: u32) {
    use mlx5_sim::{Fabric, FabricConfig, HostConfig, QpInitAttr, QpType};
    let fabric = Fabric::new(FabricConfig::default());
    let nic = fabric.add_host(HostConfig::infiniband("mlx5_0", 1));
    let r = std::sync::Arc::new(Registry::open(Path::new(path)).expect("open the registry"));
    nic.share_numbers(r, Endpoint { addr: [127, 0, 0, 1], port: 4791 });
    let pd = nic.alloc_pd().unwrap();
    let cq = nic.create_cq(64, 64).unwrap().cqn;
    let buf = [0u8; 64];
    // SAFETY: `buf` outlives the MR (the process exits below without deregistering).
    let mr = unsafe { nic.reg_mr(pd, buf.as_ptr() as u64, 64, 0) }.unwrap();
    let mut out = format!("pd {pd}\ncq {cq}\nmkey {}\n", mr.lkey);
    for _ in 0..count {
        let attr = QpInitAttr {
            qp_type: QpType::Rc,
            pdn: pd,
            send_cqn: cq,
            recv_cqn: cq,
            sq_wqe_cnt: 8,
            rq_wqe_cnt: 8,
            rq_stride: 16,
            ..QpInitAttr::default()
        };
        out.push_str(&format!("qp {}\n", nic.create_qp(&attr).unwrap().qpn));
    }
    print!("{out}");
    std::process::exit(0);
}

/// A child: allocate `count` QPNs from the registry at `path` and print them, a line
/// each; then give them back if `free`, or exit at once, holding them.
fn child(spec: &str) {
    let mut it = spec.split(',');
    let (path, count, free) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    let r = Registry::open(Path::new(path)).expect("open the registry");
    let ep = Endpoint { addr: [127, 0, 0, 9], port: 4791 };
    let mut out = String::new();
    for _ in 0..count.parse::<u32>().unwrap() {
        out.push_str(&format!("{}\n", r.alloc(Kind::Qp, ep).expect("a QPN")));
    }
    print!("{out}");
    if free == "1" {
        r.free_all().unwrap();
    }
    // Exit without dropping anything (as a process killed here would).
    std::process::exit(0);
}

fn spawn(path: &Path, count: u32, free: bool) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .env("MLX5_REG_CHILD", format!("{},{count},{}", path.display(), u8::from(free)))
        .stdout(Stdio::piped())
        .spawn()
        .expect("run a child")
}

fn numbers(c: std::process::Child) -> Vec<u32> {
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "child failed: {:?}", out.status);
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("mlx5-sim-registry-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn processes_never_share_a_number() {
    let path = scratch("share");
    let kids: Vec<_> = (0..4).map(|_| spawn(&path, 300, true)).collect();
    let mut all: Vec<u32> = kids.into_iter().flat_map(numbers).collect();
    assert_eq!(all.len(), 1200);
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 1200, "two processes got the same QPN");
    let _ = std::fs::remove_file(&path);
}

fn a_process_gone_leaves_nothing_that_blocks() {
    let path = scratch("gone");
    let held = numbers(spawn(&path, 10, false));
    assert_eq!(held.len(), 10);
    let r = Registry::open(&path).unwrap();
    // Its numbers have no owner any more (and their entries are reclaimed).
    for &n in &held {
        assert!(r.owner(Kind::Qp, n).unwrap().is_none(), "QPN {n:#x} still owned");
    }
    // Every slot can be had again: a full lap of the table from its counter.
    let ep = Endpoint::default();
    let lap: Vec<u32> = (0..mlx5_sim::registry::SLOTS).map(|_| r.alloc(Kind::Qp, ep).unwrap()).collect();
    assert_eq!(lap.len(), mlx5_sim::registry::SLOTS);
    assert!(matches!(r.alloc(Kind::Qp, ep), Err(mlx5_sim::registry::RegistryError::Full(Kind::Qp))));
    // And a process that is gone while holding a whole lap is no obstacle either.
    let _ = std::fs::remove_file(&path);
    let path = scratch("gone-full");
    let held = numbers(spawn(&path, mlx5_sim::registry::SLOTS as u32, false));
    assert_eq!(held.len(), mlx5_sim::registry::SLOTS);
    let r = Registry::open(&path).unwrap();
    assert!(r.alloc(Kind::Qp, ep).is_ok());
    let _ = std::fs::remove_file(&path);
}

/// Two processes simulating the same device with a shared registry: every number of every
/// kind differs between them.
fn two_simulated_nics_sharing_a_registry_hand_out_different_numbers() {
    let path = scratch("nics");
    let run = || {
        Command::new(std::env::current_exe().unwrap())
            .env("MLX5_REG_NIC", format!("{},50", path.display()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("run a child")
    };
    let (a, b) = (run(), run());
    let lines = |c: std::process::Child| -> Vec<(String, u32)> {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "child failed: {:?}", out.status);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (k, n) = l.split_once(' ').unwrap();
                (k.to_string(), n.parse().unwrap())
            })
            .collect()
    };
    let (a, b) = (lines(a), lines(b));
    assert_eq!((a.len(), b.len()), (53, 53));
    for (kind, n) in &a {
        assert!(!b.contains(&(kind.clone(), *n)), "both processes got {kind} {n:#x}");
    }
    let _ = std::fs::remove_file(&path);
}

fn main() {
    if let Ok(spec) = std::env::var("MLX5_REG_NIC") {
        let (path, count) = spec.split_once(',').unwrap();
        nic_child(path, count.parse().unwrap());
        return;
    }
    if let Ok(spec) = std::env::var("MLX5_REG_CHILD") {
        child(&spec);
        return;
    }
    let tests: [(&str, fn()); 3] = [
        (
            "two_simulated_nics_sharing_a_registry_hand_out_different_numbers",
            two_simulated_nics_sharing_a_registry_hand_out_different_numbers,
        ),
        ("processes_never_share_a_number", processes_never_share_a_number),
        ("a_process_gone_leaves_nothing_that_blocks", a_process_gone_leaves_nothing_that_blocks),
    ];
    for (name, t) in tests {
        t();
        println!("test {name} ... ok");
    }
    println!("\ntest result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out", tests.len());
}
