// The old safe-code crash (issue 39): `blueflame_legal` read the register
// through the descriptor's raw `bf` pointer from safe code, and a null `bf`
// died with SIGSEGV. It is an `unsafe fn` now: safe code cannot call it.
use mlx5::ring::{SqDesc, SqKind};

fn main() {
    let mut ring = [0u8; 64];
    let mut dbrec = 0u32;
    let d = SqDesc::new(ring.as_mut_ptr(), 1, &mut dbrec, std::ptr::null_mut(), 0, SqKind::Rc, 1, 0, 4, 0).unwrap();
    let _ = d.blueflame_legal();
}
