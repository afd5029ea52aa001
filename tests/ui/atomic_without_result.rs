// An atomic is complete only with its 8-byte result buffer.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags};

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.ctrl_atomic_fa(WqeFlags::SIGNALED, 1)?.rdma(0x1000, 2)?.finish()
}

fn main() {}
