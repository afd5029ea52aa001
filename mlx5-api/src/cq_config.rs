//! What a CQ is created with ([`CqConfig`]): entry count, CQE size,
//! compression and its mini-CQE layout, completion channel. The hardware
//! backend maps them to `mlx5dv_create_cq` attributes and refuses what the
//! device's caps do not allow; the simulator models each.

use crate::backend::{Backend, CqCreate};
use crate::channel::CompChannel;
use crate::ring::mini_format;

/// Size of one CQE slot (spec §5.7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CqeSize {
    /// 64 bytes (the default).
    #[default]
    B64,
    /// 128 bytes: the CQE proper in the second half; scatter-to-CQE takes up
    /// to 64 bytes (in the first half).
    B128,
}

impl CqeSize {
    /// Bytes per slot.
    pub fn bytes(self) -> u32 {
        match self {
            CqeSize::B64 => 64,
            CqeSize::B128 => 128,
        }
    }
}

/// Responder mini-CQE layout of a compressing CQ (spec §5.8). Requester
/// sessions always carry WQE counter, opcode and byte count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MiniCqeFormat {
    /// RSS hash and byte count (`MLX5DV_CQE_RES_FORMAT_HASH`).
    Hash,
    /// L4 checksum and byte count (`MLX5DV_CQE_RES_FORMAT_CSUM`).
    Csum,
}

impl MiniCqeFormat {
    pub(crate) fn raw(self) -> u32 {
        match self {
            MiniCqeFormat::Hash => mini_format::HASH,
            MiniCqeFormat::Csum => mini_format::CSUM,
        }
    }
}

/// CQ creation parameters: `CqConfig::new(256).cqe_size(CqeSize::B128)`.
/// A bare entry count converts into the defaults (64-byte CQEs, no
/// compression, no channel).
#[derive(Debug)]
pub struct CqConfig<'a, B: Backend> {
    /// Entries wanted (rounded up to a power of two above it, as rdma-core does).
    pub cqe: u32,
    /// 64- or 128-byte CQEs.
    pub cqe_size: CqeSize,
    /// CQE compression (64-byte CQEs only) with this responder layout.
    pub compression: Option<MiniCqeFormat>,
    /// Where completion events go after [`crate::CompletionQueue::arm`].
    pub channel: Option<&'a CompChannel<B>>,
}

impl<'a, B: Backend> CqConfig<'a, B> {
    /// `cqe` entries, 64-byte CQEs, no compression, no channel.
    pub fn new(cqe: u32) -> Self {
        CqConfig { cqe, cqe_size: CqeSize::B64, compression: None, channel: None }
    }
    /// The CQE size.
    pub fn cqe_size(mut self, size: CqeSize) -> Self {
        self.cqe_size = size;
        self
    }
    /// Turn CQE compression on.
    pub fn compressed(mut self, format: MiniCqeFormat) -> Self {
        self.compression = Some(format);
        self
    }
    /// Send this CQ's events to `channel`.
    pub fn channel(mut self, channel: &'a CompChannel<B>) -> Self {
        self.channel = Some(channel);
        self
    }
    pub(crate) fn create_attr(&self) -> CqCreate {
        CqCreate {
            cqe: self.cqe,
            cqe_size: self.cqe_size.bytes(),
            compression: self.compression.map(MiniCqeFormat::raw),
        }
    }
}

impl<B: Backend> From<u32> for CqConfig<'_, B> {
    fn from(cqe: u32) -> Self {
        CqConfig::new(cqe)
    }
}
