//! Where device memory of up to [`MAX_BLOCK`] bytes (rings, doorbell records) comes
//! from: 2 MiB chunks that the kernel is asked to back with huge pages
//! (`madvise(MADV_HUGEPAGE)`, as rdma-core's `MLX5_QP_ALLOC_TYPE=HUGE` does for a real
//! NIC's queues), carved in order, each block aligned as asked.
//!
//! Why: with thousands of QPs taking turns, every message touches a different QP's
//! ring, doorbell record and state. Taken from the heap, each 8-12 KiB ring sat between
//! the QPs' small objects (the model's QP state, the driver's queues and trackers), so
//! that each QP's state was spread over pages of its own, a TLB miss apiece per
//! message. Out of the heap, the rings lie together in the chunks and the small objects
//! together in the heap. Measured, deterministic mode, 4096 QPs of 64 WRs, ns per
//! message: 173-202 from the heap (192-196 with the rings zeroed at creation, so not
//! page faults), 134 from the arena in small pages (THP off), 116-128 in huge pages;
//! one QP 100-105.
//!
//! A chunk is given back to the system once every block carved from it is freed; the
//! one being carved starts over when it empties. Space freed in a chunk that still
//! holds live blocks is not reused. Blocks are zeroed when handed out (which also
//! faults their pages in at creation, not on the data path). Where `mmap` fails, or
//! on systems without it, `None`: the caller takes its memory from the heap.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Size (and alignment) of a chunk: one huge page on x86-64 and arm64 (4 KiB granule).
const CHUNK: usize = 2 << 20;

/// Largest block carved from a chunk; larger ones come from the heap.
const MAX_BLOCK: usize = CHUNK / 4;

/// Chunks and their live blocks. The process has one ([`alloc`], [`free`]).
pub(crate) struct Arena {
    /// The chunk being carved: its base and the offset of its first free byte.
    cur: Option<(usize, usize)>,
    /// Live blocks per chunk base.
    live: BTreeMap<usize, usize>,
}

static ARENA: Mutex<Arena> = Mutex::new(Arena::new());

fn arena() -> std::sync::MutexGuard<'static, Arena> {
    // A panic while holding it leaves the counts consistent (nothing in between panics).
    ARENA.lock().unwrap_or_else(|e| e.into_inner())
}

/// A zeroed block of the process's arena (see [`Arena::alloc`]).
pub(crate) fn alloc(len: usize, align: usize) -> Option<NonNull<u8>> {
    arena().alloc(len, align)
}

/// Gives back a block of [`alloc`].
///
/// # Safety
/// `p` came from [`alloc`] and is not used after this call.
pub(crate) unsafe fn free(p: NonNull<u8>) {
    // SAFETY: caller contract.
    unsafe { arena().free(p) }
}

impl Arena {
    pub(crate) const fn new() -> Arena {
        Arena { cur: None, live: BTreeMap::new() }
    }

    /// A zeroed block of `len` bytes (1..=[`MAX_BLOCK`]) aligned to `align` (a power
    /// of two, at most 4096), or `None` (too large, or no memory from the system).
    pub(crate) fn alloc(&mut self, len: usize, align: usize) -> Option<NonNull<u8>> {
        if len == 0 || len > MAX_BLOCK || !align.is_power_of_two() || align > 4096 {
            return None;
        }
        let fits = |(base, off): (usize, usize)| {
            let start = off.next_multiple_of(align);
            (start + len <= CHUNK).then_some((base, start))
        };
        let (base, start) = match self.cur.and_then(fits) {
            Some(b) => b,
            None => {
                let base = map_chunk()?;
                if let Some((old, _)) = self.cur.filter(|(b, _)| !self.live.contains_key(b)) {
                    // SAFETY: the chunk being left has no live block and will not be
                    // carved again.
                    unsafe { unmap_chunk(old) };
                }
                (base, 0)
            }
        };
        self.cur = Some((base, start + len));
        *self.live.entry(base).or_insert(0) += 1;
        let p = (base + start) as *mut u8;
        // SAFETY: [start, start + len) lies inside the chunk, which is mapped
        // read-write and handed out to nobody else (carved in order; a chunk starts
        // over only once empty).
        unsafe { std::ptr::write_bytes(p, 0, len) };
        NonNull::new(p)
    }

    /// Gives back a block of [`Arena::alloc`].
    ///
    /// # Safety
    /// `p` came from this arena's `alloc` and is not used after this call.
    pub(crate) unsafe fn free(&mut self, p: NonNull<u8>) {
        let base = p.as_ptr() as usize & !(CHUNK - 1);
        let Some(n) = self.live.get_mut(&base) else {
            debug_assert!(false, "a block of no chunk");
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.live.remove(&base);
        match self.cur {
            // The chunk being carved starts over (blocks are zeroed when handed out).
            Some((b, _)) if b == base => self.cur = Some((base, 0)),
            // SAFETY: a chunk of `map_chunk`, no block of it live, and never handed
            // out again (it is not the current one).
            _ => unsafe { unmap_chunk(base) },
        }
    }
}

impl Drop for Arena {
    /// The chunk being carved goes back if nothing in it lives (a chunk with live
    /// blocks stays mapped: they are somebody's memory).
    fn drop(&mut self) {
        if let Some((b, _)) = self.cur.filter(|(b, _)| !self.live.contains_key(b)) {
            // SAFETY: no live block in it, and the arena ends here.
            unsafe { unmap_chunk(b) };
        }
    }
}

/// Maps a CHUNK-aligned chunk of CHUNK bytes, asking for huge pages.
#[cfg(unix)]
fn map_chunk() -> Option<usize> {
    let len = 2 * CHUNK;
    // SAFETY: an anonymous private mapping of fresh memory; no existing memory is
    // touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let at = p as usize;
    let base = at.next_multiple_of(CHUNK);
    // Keep only the aligned chunk: unmap the slack before and after it.
    // SAFETY: both ranges lie inside the mapping just made and are used by nobody.
    unsafe {
        if base > at {
            libc::munmap(p, base - at);
        }
        let end = at + len;
        if end > base + CHUNK {
            libc::munmap((base + CHUNK) as *mut libc::c_void, end - (base + CHUNK));
        }
    }
    #[cfg(target_os = "linux")]
    // SAFETY: advice on our own mapping; it changes no byte. Refused (THP off), the
    // chunk is simply made of small pages.
    unsafe {
        libc::madvise(base as *mut libc::c_void, CHUNK, libc::MADV_HUGEPAGE);
    }
    Some(base)
}

#[cfg(not(unix))]
fn map_chunk() -> Option<usize> {
    None
}

/// # Safety
/// `base` came from `map_chunk` and nothing in it is used any more.
#[cfg(unix)]
unsafe fn unmap_chunk(base: usize) {
    // SAFETY: caller contract.
    unsafe { libc::munmap(base as *mut libc::c_void, CHUNK) };
}

#[cfg(not(unix))]
unsafe fn unmap_chunk(_: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_zeroed_disjoint_and_given_back() {
        let mut a = Arena::new();
        let sizes = [(64, 64), (8256, 4096), (64, 64), (576, 4096), (4096, 4096), (100, 8)];
        let mut blocks = Vec::new();
        for &(len, align) in &sizes {
            let p = a.alloc(len, align).expect("memory");
            assert_eq!(p.as_ptr() as usize % align, 0, "{len} bytes aligned to {align}");
            // SAFETY: a live block of `len` bytes.
            let s = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) };
            assert!(s.iter().all(|&b| b == 0), "zeroed");
            s.fill(0xa5);
            blocks.push((p.as_ptr() as usize, len));
        }
        let mut sorted = blocks.clone();
        sorted.sort();
        assert!(sorted.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "disjoint");
        for &(p, len) in &blocks {
            // SAFETY: still live; each was filled above and nobody else writes it.
            let s = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
            assert!(s.iter().all(|&b| b == 0xa5), "kept");
        }
        assert_eq!(a.live.values().sum::<usize>(), sizes.len());
        for &(p, _) in &blocks {
            // SAFETY: from `alloc`, not used again.
            unsafe { a.free(NonNull::new(p as *mut u8).unwrap()) };
        }
        assert!(a.live.is_empty());
    }

    #[test]
    fn what_the_arena_does_not_carve_is_refused() {
        let mut a = Arena::new();
        assert!(a.alloc(0, 64).is_none());
        assert!(a.alloc(MAX_BLOCK + 1, 64).is_none());
        assert!(a.alloc(64, 3).is_none());
        assert!(a.alloc(64, 8192).is_none());
        assert!(a.cur.is_none(), "nothing mapped for a refusal");
    }

    #[test]
    fn emptied_chunks_go_back_and_reused_memory_is_zeroed() {
        // The process-wide arena is held meanwhile: other tests allocating device memory
        // in parallel would map chunks, possibly at the address this test just unmapped,
        // and `free_checked` would see it mapped.
        let _held = arena();
        let mut a = Arena::new();
        // Twelve quarter-chunk blocks fill three chunks.
        let blocks: Vec<_> = (0..12).map(|_| a.alloc(MAX_BLOCK, 4096).expect("memory")).collect();
        assert_eq!(a.live.len(), 3);
        assert!(a.live.keys().all(|b| b % CHUNK == 0), "chunks are CHUNK-aligned");
        for p in &blocks {
            // SAFETY: a live block of MAX_BLOCK bytes.
            unsafe { std::ptr::write_bytes(p.as_ptr(), 0xff, MAX_BLOCK) };
        }
        let cur = a.cur.unwrap().0;
        for p in blocks {
            // SAFETY: from `alloc`, not used again.
            unsafe { free_checked(&mut a, p) };
        }
        // The two full chunks were unmapped; the current one starts over.
        assert!(a.live.is_empty());
        assert_eq!(a.cur, Some((cur, 0)));
        // Its memory, written before, is handed out zeroed.
        let p = a.alloc(MAX_BLOCK, 4096).expect("memory");
        assert_eq!(p.as_ptr() as usize, cur);
        // SAFETY: a live block of MAX_BLOCK bytes.
        let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), MAX_BLOCK) };
        assert!(s.iter().all(|&b| b == 0));
        // SAFETY: from `alloc`, not used again.
        unsafe { a.free(p) };
    }

    /// `free`, checking that a chunk emptied while not current is no longer mapped
    /// (`msync` on an unmapped range fails with ENOMEM).
    unsafe fn free_checked(a: &mut Arena, p: NonNull<u8>) {
        let base = p.as_ptr() as usize & !(CHUNK - 1);
        // SAFETY: caller contract.
        unsafe { a.free(p) };
        let gone = !a.live.contains_key(&base) && a.cur.map(|c| c.0) != Some(base);
        // SAFETY: msync only asks about the range; it reads and writes no byte.
        let rc = unsafe { libc::msync(base as *mut libc::c_void, CHUNK, libc::MS_ASYNC) };
        assert_eq!(rc != 0, gone, "chunk {base:#x}: mapped iff not emptied");
    }
}
