// A DCI WQE needs its address vector before the remote address.
use mlx5::ring_only::RingOnly;
use mlx5::{Dci, WqeFlags, Sge};

fn post(dci: &Dci<RingOnly, u32>) -> mlx5::Result<()> {
    dci.wqe_builder(1)?.ctrl_rdma_write(WqeFlags::SIGNALED)?.rdma(0x1000, 2)?.sge(Sge::new(0x1000, 8, 1))?.finish()
}

fn main() {}
