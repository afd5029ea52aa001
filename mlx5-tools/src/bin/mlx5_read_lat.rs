//! `ib_read_lat` for the mlx5 library (perftest's options and output).
fn main() -> std::process::ExitCode {
    mlx5_tools::main(mlx5_tools::opts::Verb::Read, mlx5_tools::opts::Test::Lat)
}
