//! mlx5 direct-verbs front-end: type-state WQE builders writing straight
//! into the send ring, ring bookkeeping, wr-id tracking and CQE polling,
//! generic over a static [`Backend`] (the `mlx5-sim` software NIC, or
//! ConnectX hardware through mlx5dv).
//!
//! Single-threaded by design: handles use `Rc`/`Cell`; the post and poll
//! paths allocate nothing, take no lock and make no dynamic call (except
//! `CompletionQueue`'s boxed callback, which `MonoCq` avoids).

pub mod av;
pub mod backend;
pub mod barrier;
pub mod cq;
pub mod device;
pub mod error;
pub mod qp;
pub mod ring_only;
pub mod rq;
#[cfg(feature = "sim")]
pub mod sim;
pub mod sizing;
mod sq;
pub mod srq;
pub mod types;
pub mod wqe;

pub use av::{AddressVector, IbGrh, RoceAv};
pub use backend::{Backend, CqResources, QpCaps, QpKind, QpResources, SrqResources};
pub use cq::{
    AsCq, Completion, CompletionQueue, CqeError, CqeFields, MonoCq, PollOutcome, RoceL3, Status, Syndrome,
    UnknownCqe, UnknownReason, WcOpcode,
};
pub use device::{Context, Device, MemoryRegion, ProtectionDomain, RcQpConfig};
pub use error::{Error, Result};
pub use qp::{Dci, Dct, RcQp, UdQp};
pub use rq::Sge;
pub use srq::SharedReceiveQueue;
pub use types::{
    AccessFlags, ConnectParams, DeviceCaps, LinkLayer, PortInfo, QpState, RemoteQpInfo, WqeFlags,
};
pub use wqe::WqeBuilder;
