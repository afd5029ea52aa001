// An RDMA READ scatters into local memory: inline data is not legal.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags};

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.ctrl_rdma_read(WqeFlags::SIGNALED)?.rdma(0x1000, 2)?.inline(b"abc")?.finish()
}

fn main() {}
