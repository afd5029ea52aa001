//! # mlx5
//!
//! Direct-verbs data path for NVIDIA/Mellanox ConnectX (mlx5) RDMA NICs:
//! WQEs written straight into the send ring, doorbells and BlueFlame, CQEs
//! polled straight from the completion queue — generic over a static
//! backend, so the same code runs on the bit-accurate simulator
//! (`mlx5::sim`, default feature `sim`) and on hardware (`mlx5::hw`).
//!
//! This facade re-exports the front-end (`mlx5-api`: devices, contexts,
//! protection domains, memory regions, CQs, RC/UD/DC QPs, SRQs, the
//! type-state WQE builder and the ring core), the simulator (`mlx5::sim`:
//! the `mlx5-sim` crate's software NIC and the backend over it, feature
//! `sim`) and the hardware backend (`mlx5::hw`, feature `hw`).
//!
//! ```
//! # #[cfg(feature = "sim")]
//! # fn main() -> Result<(), mlx5::Error> {
//! use mlx5::sim::{two_hosts, ExecMode};
//! use mlx5::{AccessFlags, ConnectParams, QpConfig, WqeFlags};
//!
//! let (_fabric, dev_a, dev_b) = two_hosts(ExecMode::Deterministic);
//! let (a, b) = (dev_a.open()?, dev_b.open()?);
//! let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
//! let mut cq_a = a.create_mono_cq(64, |c, entry: u64| assert!(c.status.is_ok(), "{entry}"))?;
//! let cq_b = b.create_mono_cq(64, |_, _: u64| {})?;
//! let qp_a = a.create_rc_qp(&pd_a, &cq_a, &cq_a, &QpConfig::default())?;
//! let qp_b = b.create_rc_qp(&pd_b, &cq_b, &cq_b, &QpConfig::default())?;
//! qp_a.activate(&ConnectParams::to(qp_b.local_info()?))?;
//! qp_b.activate(&ConnectParams::to(qp_a.local_info()?))?;
//! let (src, dst) = (pd_a.alloc_mr(4096, AccessFlags::ALL)?, pd_b.alloc_mr(4096, AccessFlags::ALL)?);
//! qp_a.wqe_builder(7)?
//!     .ctrl_rdma_write(WqeFlags::SIGNALED)?
//!     .rdma(dst.addr(), dst.rkey())?
//!     .sge(src.sge(0, 64)?)?
//!     .finish()?;
//! while cq_a.poll(16).completions == 0 {}
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "sim"))]
//! # fn main() {}
//! ```
//!
//! The repository's README has the tools, the C ABI, the figures and the
//! hardware notes; `docs/` the wire format and the performance history.
#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
pub use mlx5_api::*;
/// The hardware backend (feature `hw`).
#[cfg(feature = "hw")]
pub use mlx5_hw as hw;
/// The simulator (feature `sim`): the `mlx5-sim` crate's software NIC
/// (`Fabric`, `Nic`, `ExecMode`, `HostConfig`, ...) and the backend that
/// puts the front-end on it (`Sim`, `two_hosts`, `devices`), under one
/// name, as the hardware's is `mlx5::hw`.
#[cfg(feature = "sim")]
pub mod sim {
    pub use mlx5_api::sim::*;
    pub use mlx5_sim::*;
}
/// The software NIC under its old name: everything here is in
/// [`sim`] (kept for one release).
#[cfg(feature = "sim")]
#[deprecated(since = "0.1.0", note = "the simulator is `mlx5::sim` (device model and backend in one)")]
pub mod model {
    pub use mlx5_sim::*;
}

/// The README's code blocks, run as doctests (the crate's front page is the
/// short overview above).
#[cfg(all(doctest, feature = "sim"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
