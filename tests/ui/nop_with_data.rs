// A NOP is a ctrl segment only.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags, Sge};

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.ctrl_nop(WqeFlags::SIGNALED)?.sge(Sge::new(0x1000, 8, 1))?.finish()
}

fn main() {}
