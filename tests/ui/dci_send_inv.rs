// SEND with invalidate is an RC operation; a DCI cannot post it.
use mlx5::ring_only::RingOnly;
use mlx5::{Dci, WqeFlags};

fn post(dci: &Dci<RingOnly, u32>) -> mlx5::Result<()> {
    dci.wqe_builder(1)?.ctrl_send_inv(WqeFlags::SIGNALED, 7)?.av_ib(1, 2, 3)?.finish()
}

fn main() {}
