// UD carries SEND and SEND_IMM only: no RDMA.
use mlx5::ring_only::RingOnly;
use mlx5::{UdQp, WqeFlags};

fn post(ud: &UdQp<RingOnly, u32>) -> mlx5::Result<()> {
    ud.wqe_builder(1)?.ctrl_rdma_write(WqeFlags::SIGNALED)?.finish()
}

fn main() {}
