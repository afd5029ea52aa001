// A WQE without a ctrl segment cannot be finished.
use mlx5::ring_only::RingOnly;
use mlx5::RcQp;

fn post(qp: &RcQp<RingOnly, u32>) -> mlx5::Result<()> {
    qp.wqe_builder(1)?.finish()
}

fn main() {}
