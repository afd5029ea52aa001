//! `hot_path [c] KIND N`: N operations of KIND (see `mlx5_bench::KINDS`) in
//! Rust, or with `c` in the C baseline, for `benches/callgrind.sh`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (c, rest) = match args.first().map(String::as_str) {
        Some("c") => (true, &args[1..]),
        _ => (false, &args[..]),
    };
    let what = rest.first().map(String::as_str).unwrap_or("post");
    let n: u32 = rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    if c {
        if !mlx5_bench::run_c(what, n) {
            eprintln!("no C baseline for {what} (built only where rdma-core's mlx5dv.h is installed)");
            std::process::exit(2);
        }
    } else {
        mlx5_bench::run(what, n);
    }
}
