//! The ring core: plain-data queue descriptors and pure segment writers, the
//! layer every executor shares (the Rust handles above it, the C ABI, a
//! foreign thread, later a GPU kernel).
//!
//! `#![no_std]`-compatible: no allocation, no `Rc`, no std type. Building
//! `mlx5-api` with `--no-default-features` compiles this tree alone as a
//! `no_std` crate (`.ci/run` does).
//!
//! | Module | What (spec section) |
//! |---|---|
//! | [`seg`] | pure segment writers named after rdma-core: `set_ctrl_seg` (and `set_ctrl_seg_qpn_word`, its QPN part encoded once per QP), `set_raddr_seg`, `set_data_ptr_seg` (the one data-segment encoder of SQ, RQ and SRQ), `set_atomic_seg`, `set_datagram_seg`, `set_srq_next_seg` (§2–§4) |
//! | [`gid`] | [`Gid`]: 16 bytes in network order, printed as IPv6 |
//! | [`av`] | pre-encoded address vectors for UD and DCI (§3.6) |
//! | [`sq`] | [`SqDesc`]: the send ring, its counters and the doorbell sequence (§1) |
//! | [`post`] | [`send_wqe`]: one flat call that builds any RC/UD/DCI send WQE (§3.8) |
//! | [`rq`], [`srq`] | [`RqDesc`], [`SrqDesc`]: receive rings (§4) |
//! | [`cq`], [`cqe`] | [`CqDesc`] (with compressed-session expansion and arming) and the pure CQE reader (§5) |
//! | [`scatter`] | scatter-to-CQE: data in a CQE copied into the WQE it completes (§5.7) |
//! | [`mmio`], [`barrier`] | the doorbell register view ([`BfReg`]) and the MMIO / DMA barriers (§1.6, §1.7) |
//! | [`hint`] | cache hints: `prefetch_w`, a line about to be written |
//! | [`umr`] | [`umr::UmrLayout`]: what a memory window bind, LOCAL_INV or mkey list carries (§3.7) |
//! | [`error`] | [`PostError`], [`DescError`] |

pub mod av;
pub mod barrier;
pub mod cq;
pub mod cqe;
pub mod error;
pub mod explain;
pub mod gid;
pub mod hint;
pub mod mmio;
pub mod post;
pub mod rq;
pub mod scatter;
pub mod seg;
pub mod sq;
pub mod srq;
pub mod umr;

pub use av::{AddressVector, IbGrh, RoceAv};
pub use cq::{mini_format, CqDesc, Peek};
pub use cqe::{Cqe, CqeError, CqeFormat, CqeView, Status, Syndrome};
pub use error::{DescArg, DescError, PostError};
pub use gid::Gid;
pub use mmio::{BfReg, HostMmio, Mmio};
pub use post::{send_wqe, umr_wqe, SendWr, UmrWr};
pub use rq::RqDesc;
pub use seg::Sge;
pub use sq::{SqDesc, SqKind};
pub use srq::SrqDesc;
