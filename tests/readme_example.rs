//! The README's builder example, compiled and run as written there.

use mlx5::model::ExecMode;
use mlx5::sim::two_hosts;
use mlx5::{AccessFlags, ConnectParams, QpConfig, Sge, Status, WqeFlags};

#[test]
fn readme_example_runs() -> Result<(), Box<dyn std::error::Error>> {
    let (_fabric, dev_a, dev_b) = two_hosts(ExecMode::Deterministic);
    let (a, b) = (dev_a.open()?, dev_b.open()?);
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let mut done = Vec::new();
    let mut cq_a = a.create_mono_cq(256, |c, entry: u64| done.push((entry, c.status)))?;
    let cq_b = b.create_mono_cq(256, |_, _: u64| {})?;
    let qp_a = a.create_rc_qp(&pd_a, &cq_a, &cq_a, &QpConfig::default())?;
    let qp_b = b.create_rc_qp(&pd_b, &cq_b, &cq_b, &QpConfig::default())?;
    qp_a.activate(&ConnectParams::to(qp_b.local_info()?))?;
    qp_b.activate(&ConnectParams::to(qp_a.local_info()?))?;
    let local = pd_a.alloc_mr(4096, AccessFlags::ALL)?;
    let remote = pd_b.alloc_mr(4096, AccessFlags::ALL)?;
    // WRITE_IMM consumes a receive at the responder.
    qp_b.post_recv(0, &[])?;

    qp_a.wqe_builder(42)?
        .ctrl_rdma_write_imm(WqeFlags::SIGNALED, 0x1234)?
        .rdma(remote.addr(), remote.rkey())?
        .sge(Sge::new(local.addr(), 64, local.lkey()))?
        .finish_with_blueflame()?;
    assert_eq!(cq_a.poll(16).completions, 1);
    drop(cq_a);
    assert_eq!(done, vec![(42, Status::Success)]);
    Ok(())
}
