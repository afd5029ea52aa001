//! `ibv_devinfo` for the mlx5 library: hardware and simulated devices.
fn main() -> std::process::ExitCode {
    mlx5_tools::devinfo::main()
}
