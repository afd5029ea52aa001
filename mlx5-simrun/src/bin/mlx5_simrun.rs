//! `mlx5_simrun [--devices N] [--link ib|roce] [--pcap FILE] -- PROGRAM ARGS...`: run
//! PROGRAM with simulated ConnectX devices `mlx5_0` .. `mlx5_{N-1}` under
//! the unmodified libibverbs and libmlx5. The sysfs tree lives in a private
//! temporary directory, removed at exit; PROGRAM's exit status is passed
//! through (128 + the signal when it was killed). `--pcap FILE`: every
//! packet the devices put on the wire, as Wireshark reads it (RoCE v2
//! Ethernet frames, or InfiniBand ERF records), written when the program
//! exits.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use mlx5_simrun::{write_sysfs, Setup, TempDir, ENV_PCAP, ENV_SETUP};

const USAGE: &str =
    "usage: mlx5_simrun [--devices N] [--link ib|roce] [--shared] [--pcap FILE] -- PROGRAM [ARGS...]";

/// The preload library: `MLX5_SIMKERN` if set, else `libmlx5_simkern.so`
/// beside this executable (cargo builds both into the same directory).
fn preload() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("MLX5_SIMKERN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let dir = exe.parent().ok_or("own directory")?;
    for d in [dir.to_path_buf(), dir.join("deps"), dir.parent().map(|p| p.to_path_buf()).unwrap_or_default()]
    {
        let p = d.join("libmlx5_simkern.so");
        if p.exists() {
            return Ok(p);
        }
    }
    Err(format!(
        "libmlx5_simkern.so is not beside {} (cargo build -p mlx5-simkern, or set MLX5_SIMKERN)",
        exe.display()
    ))
}

fn run() -> Result<ExitCode, String> {
    let mut args = std::env::args().skip(1);
    let mut setup = Setup { devices: 1, roce: false, shared: false };
    let mut program = Vec::new();
    let mut pcap = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--devices" => {
                let n = args.next().ok_or("--devices needs a count")?;
                setup.devices = n.parse().map_err(|_| format!("--devices {n}: a count from 1 to 16"))?;
                if !(1..=16).contains(&setup.devices) {
                    return Err(format!("--devices {n}: a count from 1 to 16"));
                }
            }
            "--link" => match args.next().as_deref() {
                Some("ib") => setup.roce = false,
                Some("roce") => setup.roce = true,
                other => return Err(format!("--link {}: ib or roce", other.unwrap_or(""))),
            },
            "--shared" => setup.shared = true,
            "--pcap" => {
                let f = PathBuf::from(args.next().ok_or("--pcap needs a file")?);
                // The program may change directory: an absolute path.
                let f = std::path::absolute(&f).map_err(|e| format!("--pcap {}: {e}", f.display()))?;
                std::fs::File::create(&f).map_err(|e| format!("--pcap {}: {e}", f.display()))?;
                pcap = Some(f);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            "-V" | "--version" => {
                println!("mlx5_simrun {}", env!("CARGO_PKG_VERSION"));
                return Ok(ExitCode::SUCCESS);
            }
            "--" => {
                program.extend(args.by_ref());
                break;
            }
            other => return Err(format!("unexpected argument {other}; {USAGE}")),
        }
    }
    let (prog, rest) = program.split_first().ok_or(USAGE)?;
    let lib = preload()?;
    let dir = TempDir::new("mlx5_simrun").map_err(|e| format!("temporary directory: {e}"))?;
    write_sysfs(&dir.0, setup).map_err(|e| format!("sysfs tree: {e}"))?;
    let mut preload = lib.display().to_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD") {
        preload = format!("{preload}:{}", old.to_string_lossy());
    }
    let mut cmd = Command::new(prog);
    // UCX's memory hooks patch every library's calls to mmap to go to the C library's,
    // past this launcher's preload: libmlx5's maps of its UAR pages would then miss the
    // emulated device. Off unless the user chose a mode.
    if std::env::var_os("UCX_MEM_MMAP_HOOK_MODE").is_none() {
        cmd.env("UCX_MEM_MMAP_HOOK_MODE", "none");
    }
    if let Some(f) = &pcap {
        cmd.env(ENV_PCAP, f);
    }
    // The program goes when the launcher goes (killed, say): a simulated device whose
    // launcher is gone should not keep its program running, its peers waiting on it.
    // SAFETY: prctl is async-signal-safe; it runs in the child between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let status = cmd
        .args(rest)
        .env("SYSFS_PATH", &dir.0)
        .env("LD_PRELOAD", preload)
        .env(ENV_SETUP, setup.to_env())
        .status()
        .map_err(|e| format!("{prog}: {e}"))?;
    drop(dir);
    use std::os::unix::process::ExitStatusExt;
    Ok(ExitCode::from(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128 + s as u8,
        _ => 1,
    }))
}

fn main() -> ExitCode {
    match run() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mlx5_simrun: {e}");
            ExitCode::from(125)
        }
    }
}
