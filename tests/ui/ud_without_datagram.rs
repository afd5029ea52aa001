// A UD SEND needs its datagram segment (destination QPN, Q_Key, path).
use mlx5::ring_only::RingOnly;
use mlx5::{UdQp, WqeFlags, Sge};

fn post(ud: &UdQp<RingOnly, u32>) -> mlx5::Result<()> {
    ud.wqe_builder(1)?.ctrl_send(WqeFlags::SIGNALED)?.sge(Sge::new(0x1000, 8, 1))?.finish()
}

fn main() {}
