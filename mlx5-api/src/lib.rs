//! mlx5 direct-verbs front-end, in two layers:
//!
//! * [`ring`], the **ring core**: `#[repr(C)]` plain-data queue descriptors
//!   (send, receive, shared receive, completion), pure segment writers named
//!   after rdma-core, the flat [`ring::send_wqe`], the doorbell sequence and
//!   the pure CQE reader. `no_std`, no allocation: what a C program, another
//!   thread or (later) a GPU kernel uses to post into rings that the
//!   simulator or a ConnectX executes. Without the default `std` feature
//!   this crate is the ring core alone.
//! * The **handle layer** (feature `std`, default): RAII objects generic
//!   over a static [`Backend`] (the `mlx5-sim` software NIC, or ConnectX
//!   through mlx5dv), the type-state WQE builder, wr-id tracking
//!   (`tracker`), and CQ polling that dispatches through an O(1) QPN
//!   table to a small view of each QP's work queues ([`wq`]).
//!
//! Single-threaded handles (`Rc`/`Cell`); the post and poll paths allocate
//! nothing, take no lock and make no dynamic call (except
//! `CompletionQueue`'s boxed callback, which `MonoCq` avoids).

#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
#![cfg_attr(not(feature = "std"), no_std)]

pub mod ring;

#[cfg(feature = "std")]
pub mod async_event;
#[cfg(feature = "std")]
pub mod av;
#[cfg(feature = "std")]
pub mod backend;
#[cfg(feature = "std")]
pub mod channel;
#[cfg(feature = "std")]
pub mod connect;
#[cfg(feature = "std")]
pub mod cq;
#[cfg(feature = "std")]
pub mod cq_config;
#[cfg(feature = "std")]
pub mod ctx;
#[cfg(feature = "std")]
pub mod device;
#[cfg(feature = "std")]
pub mod error;
#[cfg(feature = "std")]
pub mod mkey;
#[cfg(feature = "std")]
pub(crate) mod pool;
#[cfg(feature = "std")]
pub mod qp;
#[cfg(feature = "std")]
pub(crate) mod qpn_table;
#[cfg(feature = "std")]
pub mod ring_only;
#[cfg(feature = "std")]
pub mod rq;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "std")]
pub mod sizing;
#[cfg(feature = "std")]
pub mod srq;
#[cfg(feature = "std")]
pub(crate) mod tracker;
#[cfg(feature = "std")]
pub mod types;
#[cfg(feature = "std")]
pub mod wq;
#[cfg(feature = "std")]
pub mod wqe;

/// The memory barriers of the post and poll paths (spec §1.7).
pub use ring::barrier;

#[cfg(feature = "std")]
#[allow(deprecated)]
pub use connect::RcQpConfig;

#[cfg(feature = "std")]
pub use {
    async_event::AsyncEvent,
    av::{AddressVector, IbGrh, RoceAv},
    backend::{Backend, CqCreate, CqResources, QpCaps, QpKind, QpResources, SrqResources},
    channel::{CompChannel, CqEvent},
    connect::{ConnectParams, QpConfig, RemoteQpInfo, DEFAULT_QKEY},
    cq::{
        AsCq, Completion, CompletionQueue, MonoCq, PollOutcome, RoceL3, Scattered, UnknownCqe, UnknownReason,
        WcOpcode,
    },
    cq_config::{CqConfig, CqeSize, MiniCqeFormat},
    device::{Context, Device, MemoryRegion, ProtectionDomain},
    error::{
        Arg, BackendError, Error, InvalidArgument, MkeyMisuse, Queue, Result, TransitionProblem, Unsupported,
    },
    mkey::{IndirectMkey, MemoryWindow, MwBind},
    qp::{Dci, Dct, RcQp, UdQp},
    ring::cqe::Cqe as CqeFields,
    ring::{CqeError, Gid, Sge, Status, Syndrome},
    srq::SharedReceiveQueue,
    types::{AccessFlags, DeviceCaps, LinkLayer, MkeyKind, PortInfo, QpState, WqeFlags},
    wqe::WqeBuilder,
};
