// One inline segment carries the whole payload; nothing may follow it.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags, Sge};

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.ctrl_send(WqeFlags::SIGNALED)?.inline(b"abc")?.sge(Sge::new(0x1000, 8, 1))?.finish()
}

fn main() {}
