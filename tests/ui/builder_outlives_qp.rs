// A builder borrows its QP: it cannot outlive it.
use mlx5::ring_only::RingOnly;
use mlx5::{RcQp, WqeFlags};

fn leak(qp: RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    let b = qp.wqe_builder(1)?.ctrl_nop(WqeFlags::SIGNALED)?;
    drop(qp);
    b.finish()
}

fn main() {}
