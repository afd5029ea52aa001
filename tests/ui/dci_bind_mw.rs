// Memory window binds (UMR WQEs) are RC operations, as in libmlx5: a DCI and a UD QP
// have no bind_mw, local_inv or mr_list.
use mlx5::ring_only::RingOnly;
use mlx5::{Dci, MwBind, UdQp, WqeFlags};

fn bind(dci: &Dci<RingOnly, u32>, b: &MwBind) -> mlx5::Result<()> {
    dci.wqe_builder(1)?.bind_mw(WqeFlags::SIGNALED, b)?.finish()
}

fn inv(ud: &UdQp<RingOnly, u32>) -> mlx5::Result<()> {
    ud.wqe_builder(1)?.local_inv(WqeFlags::SIGNALED, 7)?.finish()
}

fn main() {}
