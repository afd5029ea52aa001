// An RDMA WRITE needs its remote address segment before any data.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags, Sge};

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.ctrl_rdma_write(WqeFlags::SIGNALED)?.sge(Sge::new(0x1000, 8, 1))?.finish()
}

fn main() {}
