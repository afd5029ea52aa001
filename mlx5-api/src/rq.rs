//! Receive-side names kept at their step-1 paths: [`Sge`] and the
//! invalid-lkey marker (the encoders are the ring core's).

pub use crate::ring::seg::{Sge, INVALID_LKEY};
