//! mlx5-hw: the ConnectX backend of the mlx5 front-end, over rdma-core's
//! `libibverbs` and `libmlx5` (mlx5dv), **loaded at run time** with
//! libloading, so that everything builds and tests without rdma-core.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let devices = mlx5_hw::devices()?;          // Vec<mlx5_api::Device<mlx5_hw::Hw>>
//! let ctx = devices[0].open()?;               // mlx5_api::Context<Hw>
//! println!("{} fw {}", ctx.raw().info().name, ctx.raw().info().fw_ver);
//! # Ok(()) }
//! ```
//!
//! * Control path ([`Hw`]'s `Backend` impl, `hw.rs`): device list, open,
//!   `ibv_query_device` / `ibv_query_port` / `ibv_query_gid`,
//!   `mlx5dv_query_device`, PD, MR, CQ, SRQ, QPs (RC, UD, DCI, DCT through
//!   `mlx5dv_create_qp`), `mlx5dv_init_obj` for the rings, and
//!   `ibv_modify_qp` with the attribute masks of spec §7 (`masks.rs`).
//! * Data path (`doorbell.rs`): the doorbell / BlueFlame write with the
//!   MMIO barriers of spec §1.7; everything else is the front-end's.
//! * Errors ([`HwError`]): typed, with the errno of the verb; converted to
//!   [`mlx5_api::Error`] when crossing the `Backend` trait.
//!
//! The FFI declarations (`ffi.rs`) are checked against the system's
//! `infiniband/verbs.h` and `mlx5dv.h` by a layout test where the headers
//! are installed (and reported ignored, with the reason, where not).

#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
pub(crate) mod async_events;
/// mlx5 devices without the dynamically connected transport.
pub mod dc_parts;
pub mod decode;
pub mod doorbell;
pub mod error;
pub mod ffi;
pub mod gid;
pub mod hw;
#[cfg(test)]
mod layout_tests;
pub mod loader;
pub mod masks;

pub use doorbell::HwUar;
pub use error::HwError;
pub use hw::{
    device, devices, DeviceInfo, Hw, HwContext, HwCq, HwDevice, HwMr, HwPd, HwQp, HwSrq, Mlx5Caps,
    PortDetails,
};
pub use loader::{Rdma, LIBIBVERBS, LIBMLX5};

/// Environment variable naming the device the hardware tests use.
pub const TEST_DEVICE_ENV: &str = "MLX5_TEST_DEVICE";
