pub use mlx5_api::*;
