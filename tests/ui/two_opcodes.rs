// The opcode is chosen once.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags};

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.ctrl_send(WqeFlags::SIGNALED)?.ctrl_rdma_write(WqeFlags::SIGNALED)?.finish()
}

fn main() {}
