//! The emulated `write()` under random and mutated commands: a length or
//! one of the kernel's errnos each time, nothing written outside the
//! response window the command names, no object left once the command fds
//! close, no object of one context usable from another.

use super::*;

extern "C" {
    fn mlx5sk_live_of(fd: c_int) -> c_int;
}

/// xorshift64*: a fast, reproducible stream for a million commands.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const GUARD: u8 = 0xa5;

/// The tests share the process's one simulated device: one at a time, so
/// that what the simulator holds is one test's alone.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A million random and mutated commands on the emulated write(): no
/// crash, a length or one of the kernel's errnos each time, nothing
/// written outside the response window the command names, EFAULT for
/// a response pointer that is no memory, and no context left once the
/// descriptors close.
#[test]
fn a_million_commands() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Room for the largest window a header can name (out_words and
    // provider_out_words of 65535 8-byte words each).
    let mut resp = vec![GUARD; (1 << 20) + 8192];
    let fds = [900, 901, 902, 903];
    for round in 0..1_000_000u32 {
        let fd = fds[rng.below(4) as usize];
        let dev = rng.below(4) as c_int; // devices 1..3 do not exist
                                         // The response window: inside `resp` (from 64, so that bytes
                                         // before it are checked too), or a pointer that is no memory.
        let room_words = rng.below(64) as u16;
        let at = 64 + rng.below(4096) as usize;
        let bad = rng.below(16) == 0;
        let ptr = if bad { 0x10 + rng.below(4096) } else { resp.as_ptr() as u64 + at as u64 };
        let cmd = match rng.below(4) {
            // Random bytes.
            0 => (0..rng.below(160)).map(|_| rng.next() as u8).collect::<Vec<u8>>(),
            // A well-formed command of each kind, then perhaps a byte flipped.
            k => {
                let which = if k == 1 { 0 } else { rng.below(4) };
                let mut c = Vec::new();
                let le32 = |c: &mut Vec<u8>, v: u32| c.extend_from_slice(&v.to_ne_bytes());
                match which {
                    0 => {
                        // GET_CONTEXT with mlx5_ib_alloc_ucontext_req_v2 (DEVX now and then).
                        le32(&mut c, 0);
                        c.extend_from_slice(&12u16.to_ne_bytes());
                        c.extend_from_slice(&room_words.to_ne_bytes());
                        c.extend_from_slice(&ptr.to_ne_bytes());
                        le32(&mut c, 16);
                        le32(&mut c, 4);
                        le32(&mut c, u32::from(rng.below(8) == 0));
                        le32(&mut c, 0);
                        c.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
                        c.extend_from_slice(&0u64.to_ne_bytes());
                    }
                    1 => {
                        // QUERY_DEVICE
                        le32(&mut c, 1);
                        c.extend_from_slice(&4u16.to_ne_bytes());
                        c.extend_from_slice(&room_words.to_ne_bytes());
                        c.extend_from_slice(&ptr.to_ne_bytes());
                    }
                    2 => {
                        // QUERY_PORT of port 1 (or another)
                        le32(&mut c, 2);
                        c.extend_from_slice(&6u16.to_ne_bytes());
                        c.extend_from_slice(&room_words.to_ne_bytes());
                        c.extend_from_slice(&ptr.to_ne_bytes());
                        c.push(if rng.below(8) == 0 { rng.next() as u8 } else { 1 });
                        c.extend_from_slice(&[0; 7]);
                    }
                    _ => {
                        // EX_QUERY_DEVICE with 0..3 words of mlx5 udata out
                        le32(&mut c, 0x8000_0001);
                        c.extend_from_slice(&1u16.to_ne_bytes());
                        c.extend_from_slice(&room_words.to_ne_bytes());
                        c.extend_from_slice(&ptr.to_ne_bytes());
                        c.extend_from_slice(&0u16.to_ne_bytes());
                        c.extend_from_slice(&(rng.below(4) as u16).to_ne_bytes());
                        le32(&mut c, 0);
                        c.extend_from_slice(&[0; 8]);
                    }
                }
                if rng.below(4) == 0 {
                    // A flipped bit anywhere but the response pointer
                    // (bytes 8..16), which the test keeps inside `resp`
                    // or in no memory.
                    let i = rng.below(c.len() as u64) as usize;
                    if !(8..16).contains(&i) {
                        c[i] ^= 1 << rng.below(8);
                    }
                }
                c
            }
        };
        // SAFETY: `cmd` holds its length; the response pointer is inside
        // `resp` or no memory (the emulator checks it).
        let r = unsafe { mlx5sk_write(fd, dev, cmd.as_ptr().cast(), cmd.len()) };
        assert!(
            r == cmd.len() as c_int
                || [
                    libc::EINVAL,
                    libc::ENOSYS,
                    libc::EFAULT,
                    libc::ENOMEM,
                    libc::ENODEV,
                    libc::ENOENT,
                    libc::EBUSY,
                    libc::EOPNOTSUPP,
                    libc::EMFILE
                ]
                .contains(&-r),
            "round {round}: {r}"
        );
        // Nothing outside [at, at + out room), the room as the command's
        // (possibly flipped) header gives it: legacy out_words of 4
        // bytes; extended out_words and provider_out_words of 8.
        let word = |i: usize| u16::from_ne_bytes([cmd[i], cmd[i + 1]]) as usize;
        let room = match cmd.len() {
            n if n >= 20 && u32::from_ne_bytes(cmd[0..4].try_into().unwrap()) & 0x8000_0000 != 0 => {
                (word(6) + word(18)) * 8
            }
            n if n >= 8 => word(6) * 4,
            _ => 0,
        };
        // A response written to no memory is EFAULT (the command may
        // still succeed when it writes nothing: no room).
        if bad && r == cmd.len() as c_int && room > 0 && cmd.len() >= 16 {
            let command = u32::from_ne_bytes(cmd[0..4].try_into().unwrap());
            assert!(
                ![0u32, 1, 2, 0x8000_0001].contains(&command),
                "round {round}: a bad response pointer was accepted"
            );
        }
        let end = (at + room).min(resp.len());
        // The 64 bytes either side of the window (the whole buffer every
        // 10,000 rounds), then the window back to the guard byte.
        let (lo, hi) =
            if round % 10_000 == 0 { (0, resp.len()) } else { (at - 64, (end + 64).min(resp.len())) };
        assert!(resp[lo..at].iter().all(|&b| b == GUARD), "round {round}: written before the response");
        assert!(resp[end..hi].iter().all(|&b| b == GUARD), "round {round}: written after the response");
        resp[at..end].fill(GUARD);
        if round % 50_000 == 0 {
            // A command fd closes now and then (its context goes).
            for &f in &fds {
                // SAFETY: the fds are not open files here; the emulator's
                // context for them is all that closes.
                unsafe { mlx5sk_close(f) };
            }
        }
    }
    for &f in &fds {
        // SAFETY: as above.
        unsafe { mlx5sk_close(f) };
    }
    for &f in &fds {
        // SAFETY: a plain query.
        assert_eq!(unsafe { mlx5sk_live_of(f) }, 0, "a context left behind on fd {f}");
    }
}

/// Little-endian (native) field writers for building commands.
struct Cmd(Vec<u8>);
impl Cmd {
    /// A legacy command: `ib_uverbs_cmd_hdr` then `body` bytes (zeroed).
    fn legacy(command: u32, body: usize, out_words: u16) -> Cmd {
        let mut v = vec![0u8; 8 + body];
        v[0..4].copy_from_slice(&command.to_ne_bytes());
        v[4..6].copy_from_slice(&(((8 + body) / 4) as u16).to_ne_bytes());
        v[6..8].copy_from_slice(&out_words.to_ne_bytes());
        Cmd(v)
    }
    /// An extended command: headers, then `core` and `drv` bytes (8-byte
    /// words), responses of `out_core` and `out_drv` bytes at `response`.
    fn ex(command: u32, core: usize, drv: usize, response: u64, out_core: usize, out_drv: usize) -> Cmd {
        let mut v = vec![0u8; 24 + core + drv];
        v[0..4].copy_from_slice(&(command | 0x8000_0000).to_ne_bytes());
        v[4..6].copy_from_slice(&((core / 8) as u16).to_ne_bytes());
        v[6..8].copy_from_slice(&((out_core / 8) as u16).to_ne_bytes());
        v[8..16].copy_from_slice(&response.to_ne_bytes());
        v[16..18].copy_from_slice(&((drv / 8) as u16).to_ne_bytes());
        v[18..20].copy_from_slice(&((out_drv / 8) as u16).to_ne_bytes());
        Cmd(v)
    }
    /// `v` at byte `at` of the body (after the 8-byte legacy header or the
    /// 24 bytes of the extended ones: the caller adds the header).
    fn u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u8(&mut self, at: usize, v: u8) -> &mut Self {
        self.0[at] = v;
        self
    }
}

/// Ring memory for the fuzzer's objects: page-aligned, owned by the test
/// for its whole length, so that whatever the simulator does with a ring
/// or an MR the commands name stays inside it.
struct Arena {
    _mem: Vec<u8>,
    base: u64,
}

impl Arena {
    const LEN: usize = 4 << 20;
    fn new() -> Arena {
        let mem = vec![0u8; Arena::LEN + 4096];
        let base = (mem.as_ptr() as u64 + 4095) & !4095;
        Arena { _mem: mem, base }
    }
    /// An address for a ring or MR of `len` bytes: in the arena (aligned
    /// to `align`), or, now and then, one the kernel must refuse (no
    /// memory, misaligned).
    fn addr(&self, rng: &mut Rng, len: u64, align: u64) -> u64 {
        if len > Arena::LEN as u64 {
            // Larger than the arena: memory the test does not own would
            // follow it (a program that names it corrupts itself, as on a
            // NIC); give the kernel something to refuse instead.
            return 0x10;
        }
        match rng.below(16) {
            0 => 0x10 + rng.below(4096), // no memory
            1 => self.base + 1,          // misaligned
            _ => {
                let room = Arena::LEN as u64 - len;
                self.base + rng.below(room / align + 1) * align
            }
        }
    }
}

/// A million commands of every kind the emulated kernel answers (PD, MR,
/// completion channel, CQ, QP, SRQ, legacy and extended), with random
/// handles (live, destroyed, of another type, of no object, and the same
/// numbers in other contexts), counts from 0 to 2^32-1, rings in the test's
/// arena or at addresses that are no memory, a flipped bit in one command
/// of four: the kernel's errno or success each time, nothing written
/// outside the response window, no crash or hang, and nothing left once
/// the command fds close.
#[test]
fn a_million_object_commands() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let arena = Arena::new();
    // Room for the largest window a header can name (out_words and
    // provider_out_words of 65535 8-byte words each): the emulator may
    // write anywhere in the window the command names.
    let mut resp = vec![GUARD; (1 << 20) + 16384];
    let fds = [910, 911, 912];
    let allowed = [
        libc::EINVAL,
        libc::ENOSYS,
        libc::EFAULT,
        libc::ENOMEM,
        libc::ENOENT,
        libc::EBUSY,
        libc::EOPNOTSUPP,
        libc::ENODEV,
        libc::EMFILE,
        libc::EHOSTUNREACH,
        libc::ENODATA, // an address naming an empty GID entry
    ];
    let get_context = |c: &mut Cmd, ptr: u64| {
        c.u64(8, ptr).u32(16, 16).u32(20, 4);
    };
    let count = |rng: &mut Rng| -> u32 {
        match rng.below(8) {
            0 => 0,
            1 => u32::MAX,
            2 => rng.next() as u32,
            _ => 1 << rng.below(12),
        }
    };
    let handle = |rng: &mut Rng| -> u32 {
        if rng.below(32) == 0 {
            rng.next() as u32
        } else {
            rng.below(24) as u32
        }
    };
    // What the simulator holds.
    let held = || device::devices().nics[0].objects();
    let held_before = held();
    for f in fds {
        let mut c = Cmd::legacy(0, 40, 20);
        get_context(&mut c, resp.as_ptr() as u64 + 64);
        // SAFETY: the command holds its length; the response window is in `resp`.
        let r = unsafe { mlx5sk_write(f, 0, c.0.as_ptr().cast(), c.0.len()) };
        assert_eq!(r, c.0.len() as c_int, "GET_CONTEXT on fd {f}");
        let async_fd = i32::from_ne_bytes(resp[64..68].try_into().unwrap());
        // SAFETY: the program's end of the new context's async fd.
        unsafe { libc::close(async_fd) };
    }
    resp.fill(GUARD);
    for round in 0..1_000_000u32 {
        if round % 20_000 == 19_999 {
            // The contexts close and open again (what they made goes with
            // them: completion channels hold descriptors until then).
            for f in fds {
                // SAFETY: the emulator's context of a test fd.
                unsafe { mlx5sk_close(f) };
                // SAFETY: a plain query.
                assert_eq!(unsafe { mlx5sk_live_of(f) }, 0, "round {round}: objects left behind on fd {f}");
            }
            assert_eq!(held(), held_before, "round {round}: the simulator kept objects of closed contexts");
            for f in fds {
                let mut c = Cmd::legacy(0, 40, 20);
                get_context(&mut c, resp.as_ptr() as u64 + 64);
                // SAFETY: the command holds its length; the response window is in `resp`.
                let r = unsafe { mlx5sk_write(f, 0, c.0.as_ptr().cast(), c.0.len()) };
                assert_eq!(r, c.0.len() as c_int, "round {round}: GET_CONTEXT on fd {f}");
                let async_fd = i32::from_ne_bytes(resp[64..68].try_into().unwrap());
                // SAFETY: the program's end of the new context's async fd.
                unsafe { libc::close(async_fd) };
            }
            resp.fill(GUARD);
        }
        let fd = fds[rng.below(3) as usize];
        let at = 64 + 8 * rng.below(1024) as usize;
        let ptr = if rng.below(32) == 0 { 0x10 } else { resp.as_ptr() as u64 + at as u64 };
        let out = rng.below(40) as u16;
        // Bytes that name ring memory (addresses, entry counts, sizes) are
        // never flipped: a ring the simulator writes must stay inside the
        // arena, since the emulator shares the process with its program (a
        // program that names memory it does not own corrupts itself, as
        // with a NIC; the test must not).
        let mut keep: &[(usize, usize)] = &[];
        let mut c = match rng.below(20) {
            19 => {
                if rng.below(2) == 0 {
                    // CREATE_AH: response, user_handle, pd_handle, reserved,
                    // ib_uverbs_ah_attr (a GRH toward device 0's GID or not).
                    let mut c = Cmd::legacy(5, 56, out);
                    c.u64(8, ptr).u64(16, rng.next()).u32(24, handle(&mut rng));
                    // attr at body 24: is_global at +29, port_num at +30.
                    c.u8(8 + 24 + 29, (rng.below(2)) as u8).u8(8 + 24 + 30, 1 + (rng.below(8) == 0) as u8);
                    c
                } else {
                    let mut c = Cmd::legacy(8, 4, 0); // DESTROY_AH
                    c.u32(8, handle(&mut rng));
                    c
                }
            }
            0 => {
                let mut c = Cmd::legacy(3, 8, out); // ALLOC_PD
                c.u64(8, ptr);
                c
            }
            1 => {
                let mut c = Cmd::legacy(4, 4, 0); // DEALLOC_PD
                c.u32(8, handle(&mut rng));
                c
            }
            2 => {
                let len = 1 + rng.below(1 << 16);
                let start = arena.addr(&mut rng, len, 1);
                keep = &[(16, 40)];
                let mut c = Cmd::legacy(9, 40, out); // REG_MR
                c.u64(8, ptr).u64(16, start).u64(24, len).u64(32, start).u32(40, handle(&mut rng));
                c.u32(44, rng.below(16) as u32);
                c
            }
            3 => {
                if rng.below(2) == 0 {
                    let mut c = Cmd::legacy(13, 4, 0); // DEREG_MR
                    c.u32(8, handle(&mut rng));
                    c
                } else {
                    // REREG_MR: any of TRANS, PD, ACCESS (and unknown bits).
                    let len = 1 + rng.below(1 << 16);
                    let start = arena.addr(&mut rng, len, 1);
                    keep = &[(24, 48)];
                    let mut c = Cmd::legacy(11, 48, out);
                    c.u64(8, ptr).u32(16, handle(&mut rng)).u32(20, rng.below(9) as u32);
                    c.u64(24, start).u64(32, len).u64(40, start);
                    c.u32(48, handle(&mut rng)).u32(52, rng.below(16) as u32);
                    c
                }
            }
            4 => {
                let mut c = Cmd::legacy(17, 8, out); // CREATE_COMP_CHANNEL
                c.u64(8, ptr);
                c
            }
            5 | 6 => {
                let cqe = count(&mut rng);
                let size = if rng.below(2) == 0 { 64 } else { 128 };
                let bytes = (u64::from(cqe) + 1).next_power_of_two() * size;
                keep = &[(24, 28), (40, 60)];
                let mut c = Cmd::legacy(18, 64, out); // CREATE_CQ + mlx5_ib_create_cq
                c.u64(8, ptr).u64(16, rng.next()).u32(24, cqe).u32(32, u32::MAX); // no channel
                c.u64(40, arena.addr(&mut rng, bytes, 4096)).u64(48, arena.addr(&mut rng, 8, 8));
                c.u32(56, size as u32).u8(60, (rng.below(4) == 0) as u8).u8(61, 1 << rng.below(3));
                c
            }
            7 => {
                if rng.below(2) == 0 {
                    let mut c = Cmd::legacy(20, 16, out); // DESTROY_CQ
                    c.u64(8, ptr).u32(16, handle(&mut rng));
                    c
                } else {
                    // RESIZE_CQ + mlx5_ib_resize_cq onto a ring in the arena.
                    let cqe = count(&mut rng);
                    let size = if rng.below(2) == 0 { 64 } else { 128 };
                    let bytes = (u64::from(cqe) + 1).next_power_of_two() * size;
                    keep = &[(20, 36)];
                    let mut c = Cmd::legacy(19, 32, out);
                    c.u64(8, ptr).u32(16, handle(&mut rng)).u32(20, cqe);
                    c.u64(24, arena.addr(&mut rng, bytes, 4096)).u32(32, size as u32);
                    c
                }
            }
            8 | 9 => {
                let (sq, rq, shift) = (count(&mut rng), count(&mut rng), 4 + rng.below(4) as u32);
                let bytes = (u64::from(rq) << shift).max(64) + u64::from(sq) * 64;
                keep = &[(64, 92)];
                let mut c = Cmd::legacy(24, 112, out); // CREATE_QP + mlx5_ib_create_qp
                c.u64(8, ptr).u64(16, rng.next());
                c.u32(24, handle(&mut rng)).u32(28, handle(&mut rng)).u32(32, handle(&mut rng));
                c.u32(36, handle(&mut rng));
                c.u8(61, [2, 4, 0xff, 3][rng.below(4) as usize]).u8(62, (rng.below(4) == 0) as u8);
                c.u64(64, arena.addr(&mut rng, bytes, 4096)).u64(72, arena.addr(&mut rng, 8, 8));
                c.u32(80, sq).u32(84, rq).u32(88, shift);
                c.u32(92, [0, 1 << 1, 1 << 4, 1 << 5, 1 << 3][rng.below(5) as usize]);
                c
            }
            10 | 11 => {
                let mut c = Cmd::legacy(26, 112, 0); // MODIFY_QP
                c.u32(8 + 64, handle(&mut rng)).u32(8 + 68, rng.next() as u32 & 0x1f_ffff);
                c.u8(8 + 96, rng.below(7) as u8); // qp_state
                for i in 72..96 {
                    c.u8(8 + i, rng.next() as u8 & 7);
                }
                c.u8(8 + 98, 1 + rng.below(5) as u8).u8(8 + 108, 1);
                c.u32(8 + 80, rng.next() as u32 & 0xff_ffff); // dest_qp_num
                c
            }
            12 => {
                let mut c = Cmd::legacy(25, 16, out); // QUERY_QP
                c.u64(8, ptr).u32(16, handle(&mut rng)).u32(20, u32::MAX);
                c
            }
            13 => {
                let mut c = Cmd::legacy(27, 16, out); // DESTROY_QP
                c.u64(8, ptr).u32(16, handle(&mut rng));
                c
            }
            14 => {
                let (wr, sge) = (count(&mut rng), rng.below(8) as u32);
                keep = &[(28, 36), (40, 56)];
                let mut c = Cmd::legacy(32, 64, out); // CREATE_SRQ + mlx5_ib_create_srq
                c.u64(8, ptr).u64(16, rng.next()).u32(24, handle(&mut rng)).u32(28, wr).u32(32, sge);
                // mlx5_ib: a descriptor of 16 + 16 * max_sge bytes, a power of two: 128 here.
                let bytes = (u64::from(wr) + 1).next_power_of_two() * 128;
                c.u64(40, arena.addr(&mut rng, bytes, 4096)).u64(48, arena.addr(&mut rng, 4, 4));
                c
            }
            15 => {
                let mut c = Cmd::legacy(35, 16, out); // DESTROY_SRQ
                c.u64(8, ptr).u32(16, handle(&mut rng));
                c
            }
            16 => {
                if rng.below(2) == 0 {
                    let mut c = Cmd::legacy(33, 16, 0); // MODIFY_SRQ: handle, mask, max_wr, limit
                    c.u32(8, handle(&mut rng)).u32(12, rng.below(4) as u32).u32(16, count(&mut rng));
                    c
                } else {
                    let mut c = Cmd::legacy(34, 16, out); // QUERY_SRQ: response, handle
                    c.u64(8, ptr).u32(16, handle(&mut rng));
                    c
                }
            }
            17 => {
                // EX_CREATE_CQ with mlx5_ib_create_cq.
                let cqe = count(&mut rng);
                let bytes = (u64::from(cqe) + 1).next_power_of_two() * 64;
                let (oc, od) = (8 * rng.below(3) as usize, 8 * rng.below(2) as usize);
                keep = &[(32, 36), (56, 76)];
                let mut c = Cmd::ex(18, 32, 32, ptr, oc, od);
                c.u64(24, rng.next()).u32(32, cqe).u32(40, u32::MAX);
                c.u64(56, arena.addr(&mut rng, bytes, 4096)).u64(64, arena.addr(&mut rng, 8, 8)).u32(72, 64);
                c
            }
            _ => {
                // EX_MODIFY_QP with mlx5_ib_modify_qp, or EX_CREATE_QP.
                let (oc, od) = (8 * rng.below(3) as usize, 8 * rng.below(3) as usize);
                if rng.below(2) == 0 {
                    let mut c = Cmd::ex(26, 120, 16, ptr, oc, od);
                    c.u32(24 + 64, handle(&mut rng)).u32(24 + 68, rng.next() as u32 & 0x1f_ffff);
                    c.u8(24 + 96, rng.below(7) as u8);
                    c
                } else {
                    let (sq, rq) = (count(&mut rng), count(&mut rng));
                    let bytes = (u64::from(rq) << 4).max(64) + u64::from(sq) * 64;
                    keep = &[(88, 116)];
                    let mut c = Cmd::ex(24, 64, 56, ptr, oc, od);
                    c.u64(24, rng.next()).u32(32, handle(&mut rng)).u32(36, handle(&mut rng));
                    c.u32(40, handle(&mut rng)).u8(24 + 45, [2, 4, 0xff][rng.below(3) as usize]);
                    c.u64(88, arena.addr(&mut rng, bytes, 4096)).u64(96, arena.addr(&mut rng, 8, 8));
                    c.u32(104, sq)
                        .u32(108, rq)
                        .u32(112, 4)
                        .u32(116, [0, 1 << 4, 1 << 5][rng.below(3) as usize]);
                    c
                }
            }
        };
        if rng.below(4) == 0 {
            // A flipped bit anywhere but a response pointer (legacy bytes
            // 8..16, extended 8..16): those stay in `resp` or no memory.
            let i = rng.below(c.0.len() as u64) as usize;
            if !(8..16).contains(&i) && !keep.iter().any(|&(a, b)| (a..b).contains(&i)) {
                c.0[i] ^= 1 << rng.below(8);
            }
        }
        // SAFETY: the command holds its length; every pointer in it is the
        // response window in `resp`, no memory, or the arena.
        let r = unsafe { mlx5sk_write(fd, 0, c.0.as_ptr().cast(), c.0.len()) };
        assert!(r == c.0.len() as c_int || allowed.contains(&-r), "round {round}: {r}");
        let word = |i: usize| u16::from_ne_bytes([c.0[i], c.0[i + 1]]) as usize;
        let command = u32::from_ne_bytes(c.0[0..4].try_into().unwrap());
        let room = if command & 0x8000_0000 != 0 && c.0.len() >= 20 {
            (word(6) + word(18)) * 8
        } else {
            word(6) * 4
        };
        let end = (at + room).min(resp.len());
        if (command == 17 || command == 0) && r > 0 && room >= 4 && ptr != 0x10 {
            // The program's end of a new completion channel (or async
            // fd) is the program's to close, as a program closes it.
            let fd = i32::from_ne_bytes(resp[at..at + 4].try_into().unwrap());
            // SAFETY: a descriptor the emulator just made for the "program".
            unsafe { libc::close(fd) };
        }
        assert!(resp[at - 64..at].iter().all(|&b| b == GUARD), "round {round}: written before the response");
        let hi = (end + 64).min(resp.len());
        assert!(
            resp[end..hi].iter().all(|&b| b == GUARD),
            "round {round}: written after the response: {:02x?} at {at} room {room}",
            c.0
        );
        resp[at..end].fill(GUARD);
    }
    // One context's objects are not another's: a PD of fd 910 is no PD of
    // fd 911 (whose handle table is its own), and after the fds close,
    // nothing is left.
    let mut c = Cmd::legacy(3, 8, 2);
    c.u64(8, resp.as_ptr() as u64 + 64);
    // SAFETY: as above.
    assert_eq!(unsafe { mlx5sk_write(fds[0], 0, c.0.as_ptr().cast(), c.0.len()) }, c.0.len() as c_int);
    let h = u32::from_ne_bytes(resp[64..68].try_into().unwrap());
    // SAFETY: a plain query.
    let before = unsafe { mlx5sk_live_of(fds[1]) };
    let mut d = Cmd::legacy(4, 4, 0);
    d.u32(8, h);
    // SAFETY: as above.
    let r = unsafe { mlx5sk_write(fds[1], 0, d.0.as_ptr().cast(), d.0.len()) };
    // SAFETY: a plain query.
    let after = unsafe { mlx5sk_live_of(fds[1]) };
    assert!(r < 0 || after == before - 1, "fd 911 freed one of its own PDs, or refused: {r}");
    // SAFETY: a plain query.
    assert!(unsafe { mlx5sk_live_of(fds[0]) } >= 2, "fd 910's PD is still there");
    for &f in &fds {
        // SAFETY: the emulator's contexts for these fds close.
        unsafe { mlx5sk_close(f) };
        // SAFETY: a plain query.
        assert_eq!(unsafe { mlx5sk_live_of(f) }, 0, "objects left behind on fd {f}");
    }
    assert_eq!(held(), held_before, "the simulator kept objects of closed contexts");
}
