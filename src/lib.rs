//! # mlx5
//!
//! Direct-verbs data path for NVIDIA/Mellanox ConnectX (mlx5) RDMA NICs:
//! WQEs written straight into the send ring, doorbells and BlueFlame, CQEs
//! polled straight from the completion queue — generic over a static
//! backend, so the same code runs on the bit-accurate simulator
//! (`mlx5::sim`, default feature `sim`) and on hardware (`mlx5::hw`).
//!
//! This facade re-exports the front-end (`mlx5-api`), the device model
//! (`mlx5::model`, the `mlx5-sim` crate) and the hardware backend. With the
//! `sim` feature the README follows, and its code runs as doctests.
#![cfg_attr(feature = "sim", doc = "")]
#![cfg_attr(feature = "sim", doc = include_str!("../README.md"))]
#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
pub use mlx5_api::*;
/// The hardware backend (feature `hw`).
#[cfg(feature = "hw")]
pub use mlx5_hw as hw;
/// The software NIC (device model) behind the `sim` backend (feature `sim`).
#[cfg(feature = "sim")]
pub use mlx5_sim as model;
