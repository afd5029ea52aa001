// The remote address segment appears once.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags};

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.ctrl_rdma_write(WqeFlags::SIGNALED)?.rdma(0x1000, 2)?.rdma(0x2000, 2)?.finish()
}

fn main() {}
