//! insta snapshots of the UMR WQEs the builder writes (docs/mlx5-wire-format.md §3.7):
//! a type-2 and a type-1 memory window bind, LOCAL_INV, and an indirect mkey's list of
//! five entries, the last from the ring's last WQEBB so that it wraps. One 16-byte DS
//! per line, named by the simulator's dissector (written independently of the encoder).
//! The bytes of a bind and of LOCAL_INV are libmlx5's (W10 to W13, checked through the
//! emulated device by `memory_windows_posted_by_libmlx5_match_our_builders`).

use mlx5::ring_only::{RingOnly, RingOnlyDevice};
use mlx5::sim::{dissect::dissect_send_wqe, QpType};
use mlx5::{
    AccessFlags, CompletionQueue, ConnectParams, Context, Device, MkeyKind, MwBind, ProtectionDomain,
    QpConfig, RcQp, RemoteQpInfo, Sge, WqeFlags,
};

struct Fx {
    _ctx: Context<RingOnly>,
    _cq: CompletionQueue<RingOnly, u32>,
    pd: ProtectionDomain<RingOnly>,
    qp: RcQp<RingOnly, u32>,
}

/// An RC QP 0x123 of a 16-WQEBB ring at producer counter `pi`.
fn fixture(pi: u32) -> Fx {
    let dev = RingOnlyDevice::new(0x123, 256);
    let ctx = Device::<RingOnly>::new(dev).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, |_, _: u32| {}).unwrap();
    let cfg = QpConfig {
        max_send_wr: 4,
        max_recv_wr: 1,
        max_send_sge: 4,
        max_inline_data: 188,
        ..QpConfig::default()
    };
    let qp = ctx.create_rc_qp(&pd, &cq, &cq, &cfg).unwrap();
    qp.activate(&ConnectParams::to(RemoteQpInfo::ib(0x456, 2))).unwrap();
    // SAFETY: ring-only backend, empty queue.
    unsafe { qp.skip_sq(pi).unwrap() };
    Fx { _ctx: ctx, _cq: cq, pd, qp }
}

fn render(fx: &Fx, pi: u32) -> String {
    let ring = fx.qp.sq_ring_bytes();
    let d = dissect_send_wqe(&ring, pi as u16, QpType::Rc).expect("dissects");
    format!("SQ DBR = 0x{:08x}; ring of {} WQEBBs\n{d}", fx.qp.sq_dbrec(), ring.len() / 64)
}

fn bind(kind: MkeyKind) -> MwBind {
    MwBind {
        kind,
        rkey: 0x8000_0100,
        new_rkey: 0x8000_0101,
        mr_lkey: 0x1234,
        addr: 0x0000_7f12_3456_1000,
        len: 0x800,
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        zero_based: false,
    }
}

#[test]
fn umr_layouts() {
    let snap = |name: &str, text: String| {
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(name, text);
        });
    };
    let fx = fixture(0x10);
    let b = fx.qp.wqe_builder(1).unwrap().bind_mw(WqeFlags::SIGNALED, &bind(MkeyKind::Window2)).unwrap();
    b.finish().unwrap();
    snap("rc_umr_bind_mw_type2", render(&fx, 0x10));

    let fx = fixture(0x10);
    let b = fx.qp.wqe_builder(1).unwrap().bind_mw(WqeFlags::SIGNALED, &bind(MkeyKind::Window1)).unwrap();
    b.finish().unwrap();
    snap("rc_umr_bind_mw_type1", render(&fx, 0x10));

    let fx = fixture(0x10);
    let f = WqeFlags::SIGNALED | WqeFlags::SMALL_FENCE;
    fx.qp.wqe_builder(1).unwrap().local_inv(f, 0x8000_0101).unwrap().finish().unwrap();
    snap("rc_umr_local_inv", render(&fx, 0x10));

    // Five entries (two WQEBBs of them, three zero ones after), from the ring's last
    // WQEBB: the UMR ctrl there, the mkey context and the entries at the ring's start.
    let fx = fixture(0x1f);
    let mk = fx.pd.create_indirect_mkey(5).unwrap();
    let sges: Vec<Sge> =
        (0..5).map(|i| Sge::new(0x0000_7f12_3456_0000 + 0x1000 * i, 100 + i as u32, 0x1234)).collect();
    let b = fx.qp.wqe_builder(1).unwrap().mr_list(WqeFlags::SIGNALED, &mk, AccessFlags::ALL, &sges).unwrap();
    b.finish().unwrap();
    snap("rc_umr_mr_list_5_entries_wraps_ring_end", render(&fx, 0x1f));
}
