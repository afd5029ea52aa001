//! `mlx5-capi`: the C ABI of the mlx5 ring core (header `include/mlx5r.h`,
//! generated with cbindgen).
//!
//! * [`ring_ops`]: RDMaxcel's four operations done right, over the ring
//!   core's plain-data descriptors: `mlx5r_send_wqe`, `mlx5r_recv_wqe` /
//!   `mlx5r_srq_recv_wqe`, `mlx5r_db_ring`, `mlx5r_cqe_poll`, and the
//!   retirement calls that map a CQE back to the caller's wr-id.
//! * [`objects`]: create a simulated fabric or open a ConnectX, then PD,
//!   MR, CQ, QP (RC, UD, DCI, DCT), SRQ, connect them, and obtain the
//!   descriptors and the raw resources `mlx5dv_init_obj` gives, so that a C
//!   program written for mlx5dv runs against the simulator with its own WQE
//!   code.
//! * [`completion`]: CQs with a configuration (128-byte CQEs,
//!   compression), arming, completion channels with a file descriptor, the
//!   CQ overrun check and the device's asynchronous events.
//! * [`codes`]: the return codes.
//!
//! Every function returns 0 (or a positive count) on success and a negative
//! `MLX5R_ERR_*` code on error, and writes nothing on error. Null pointers
//! are refused with `MLX5R_ERR_INVALID`, never dereferenced.

#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
pub mod codes;
pub mod completion;
pub mod mkeys;
pub mod objects;
pub mod ring_ops;

pub use codes::*;
pub use completion::*;
pub use mkeys::*;
pub use objects::*;
pub use ring_ops::*;
