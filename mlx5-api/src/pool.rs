//! Where the driver keeps the per-QP state that every post and poll touches: each
//! QP's work-queue view ([`crate::wq::WorkQueues`], through [`PoolRc`]) and its wr-id
//! tables ([`crate::tracker`], through [`alloc`] and [`PoolSlice`]).
//!
//! Blocks are carved from 2 MiB chunks that the kernel is asked to back with huge
//! pages (`madvise(MADV_HUGEPAGE)`, in the spirit of rdma-core's
//! `MLX5_QP_ALLOC_TYPE=HUGE` for queue buffers, and of the simulator's arena for its
//! rings).
//!
//! Why: with thousands of QPs taken in turn, each message reaches another QP's
//! state. From the heap, a QP's few hot lines sat on a 4 KiB page of their own, among
//! the QP's cold objects and its peer's, so that every post and every poll paid a TLB
//! miss, and under a hypervisor a miss is a walk of two page tables. From the chunks
//! the hot state of thousands of QPs lies in a few huge pages. Measured (deterministic
//! simulator, 4096 RC QPs round robin, ns per message, interleaved runs, in the
//! README's performance section): the same as the whole heap in huge pages
//! (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), 11-18 ns below the heap; one QP unchanged.
//!
//! * Sizes are rounded up to an **odd number of cache lines**: blocks of one size
//!   carved one after another then put the same field (a tracker's current slot, a
//!   queue's counters) on different sets of the cache, where a power-of-two stride
//!   would pile thousands of QPs' hot lines onto a sixteenth of them.
//! * Freed blocks go to a free list of their size and are handed out again; chunks
//!   stay mapped for the life of the process (the pool holds the peak of what was
//!   live, as a heap that never trims would).
//! * Chunks come from the global allocator, 2 MiB-aligned. Blocks over
//!   [`MAX_BLOCK`] bytes, alignments over 64, and every block once no chunk can be had
//!   come from the global allocator directly; a block knows where it came from by its
//!   address.
//! * Allocation and release take one lock: they happen on the control path only
//!   (creating and destroying QPs, SRQs and their tables), never in a post or a poll.

use std::alloc::{handle_alloc_error, Layout};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Size (and alignment) of a chunk: one huge page on x86-64 and arm64 (4 KiB granule).
const CHUNK: usize = 2 << 20;

/// Largest block carved from a chunk; larger ones come from the global allocator.
pub(crate) const MAX_BLOCK: usize = 64 << 10;

/// Largest alignment the chunks serve (a cache line).
const MAX_ALIGN: usize = 64;

const LINE: usize = 64;

/// Chunks, the one being carved, and the free blocks by stride.
struct Pool {
    /// Base addresses of the chunks (each `CHUNK`-aligned and `CHUNK` long).
    chunks: BTreeSet<usize>,
    /// The chunk being carved: its base and the offset of its first free byte.
    cur: Option<(usize, usize)>,
    /// Free blocks, by stride.
    free: BTreeMap<usize, Vec<usize>>,
    /// No chunk could be had once: take everything from the global allocator from
    /// then on.
    no_chunks: bool,
}

static POOL: Mutex<Pool> =
    Mutex::new(Pool { chunks: BTreeSet::new(), cur: None, free: BTreeMap::new(), no_chunks: false });

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // Nothing in between can panic and leave the lists half-updated.
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bytes a block of `layout` takes in a chunk: its size in whole lines, made odd;
/// `None` when the chunks do not serve it.
fn stride(layout: Layout) -> Option<usize> {
    if layout.size() == 0 || layout.size() > MAX_BLOCK || layout.align() > MAX_ALIGN {
        return None;
    }
    let lines = layout.size().div_ceil(LINE);
    Some((lines | 1) * LINE)
}

/// Memory for `layout` (uninitialised), from the chunks where they serve it.
/// Aborts through [`handle_alloc_error`] where the system has no memory, as `Box`
/// does. A zero-sized layout gets a dangling, aligned pointer.
pub(crate) fn alloc(layout: Layout) -> NonNull<u8> {
    if layout.size() == 0 {
        // An address that is a multiple of the alignment, never dereferenced.
        return NonNull::new(std::ptr::without_provenance_mut(layout.align())).unwrap_or(NonNull::dangling());
    }
    if let Some(s) = stride(layout) {
        if let Some(p) = pool().carve(s) {
            return p;
        }
    }
    // SAFETY: a layout of non-zero size.
    NonNull::new(unsafe { std::alloc::alloc(layout) }).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Gives back memory of [`alloc`].
///
/// # Safety
/// `p` came from [`alloc`] with this `layout` and is not used after this call.
pub(crate) unsafe fn dealloc(p: NonNull<u8>, layout: Layout) {
    if layout.size() == 0 {
        return;
    }
    // Only a size the chunks serve can be in one: no lock for the others.
    if let Some(s) = stride(layout) {
        if pool().give_back(p, s) {
            return;
        }
    }
    // SAFETY: not in a chunk, so it came from the global allocator with `layout`
    // (caller contract).
    unsafe { std::alloc::dealloc(p.as_ptr(), layout) }
}

/// Whether `p` lies in one of the process pool's chunks.
#[cfg(test)]
pub(crate) fn in_chunk<T>(p: *const T) -> bool {
    pool().holds(p as usize)
}

impl Pool {
    /// Whether address `a` lies in one of this pool's chunks.
    fn holds(&self, a: usize) -> bool {
        self.chunks.contains(&(a & !(CHUNK - 1)))
    }

    /// Puts block `p` of `stride` bytes on its free list if it lies in one of
    /// the chunks (`false`: it came from the global allocator).
    fn give_back(&mut self, p: NonNull<u8>, stride: usize) -> bool {
        if !self.holds(p.as_ptr() as usize) {
            return false;
        }
        self.free.entry(stride).or_default().push(p.as_ptr() as usize);
        true
    }

    /// A block of `stride` bytes, line-aligned: a freed one of that stride, else
    /// carved; `None` where no chunk can be mapped.
    fn carve(&mut self, stride: usize) -> Option<NonNull<u8>> {
        if let Some(p) = self.free.get_mut(&stride).and_then(Vec::pop) {
            return NonNull::new(p as *mut u8);
        }
        let (base, off) = match self.cur.filter(|&(_, off)| off + stride <= CHUNK) {
            Some(c) => c,
            None => {
                if self.no_chunks {
                    return None;
                }
                let Some(base) = map_chunk() else {
                    self.no_chunks = true;
                    return None;
                };
                self.chunks.insert(base);
                (base, 0)
            }
        };
        self.cur = Some((base, off + stride));
        NonNull::new((base + off) as *mut u8)
    }
}

/// A CHUNK-aligned chunk of CHUNK bytes from the global allocator (with that
/// alignment the system's takes it from a mapping of its own), asking for huge pages.
/// Chunks are never given back.
fn map_chunk() -> Option<usize> {
    let layout = Layout::from_size_align(CHUNK, CHUNK).ok()?;
    // SAFETY: a layout of non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        return None;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: advice on memory we own; it changes no byte. Refused (THP off), the
    // chunk is made of small pages, and still packs the QPs' hot state together.
    unsafe {
        libc::madvise(p.cast(), CHUNK, libc::MADV_HUGEPAGE);
    }
    Some(p as usize)
}

/// A reference-counted value in the pool: `Rc` for the driver's per-QP state (a
/// stable `Rc` cannot be told where to live). Single-threaded, as `Rc` is.
pub(crate) struct PoolRc<T> {
    ptr: NonNull<RcBox<T>>,
    /// Owns an `RcBox<T>` (drop check), and is neither `Send` nor `Sync`.
    _own: PhantomData<RcBox<T>>,
}

/// The value first, on the block's first line; the count, touched only by clone and
/// drop, after it.
#[repr(C)]
struct RcBox<T> {
    value: T,
    count: Cell<usize>,
}

impl<T> PoolRc<T> {
    pub(crate) fn new(value: T) -> Self {
        let ptr = alloc(Layout::new::<RcBox<T>>()).cast::<RcBox<T>>();
        // SAFETY: fresh memory for one RcBox<T>, suitably aligned.
        unsafe { ptr.as_ptr().write(RcBox { value, count: Cell::new(1) }) };
        PoolRc { ptr, _own: PhantomData }
    }

    /// Handles to this value, this one included.
    #[cfg(test)]
    pub(crate) fn count(this: &Self) -> usize {
        this.inner().count.get()
    }

    fn inner(&self) -> &RcBox<T> {
        // SAFETY: live while a handle is (the count is at least this one).
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Clone for PoolRc<T> {
    fn clone(&self) -> Self {
        let c = &self.inner().count;
        // As `Rc`: a count that would wrap means leaked handles; stop.
        c.set(c.get().checked_add(1).unwrap_or_else(|| std::process::abort()));
        PoolRc { ptr: self.ptr, _own: PhantomData }
    }
}

impl<T> std::ops::Deref for PoolRc<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.inner().value
    }
}

impl<T> Drop for PoolRc<T> {
    fn drop(&mut self) {
        let c = &self.inner().count;
        c.set(c.get() - 1);
        if c.get() == 0 {
            // SAFETY: the last handle: nobody else refers to the box; the value is
            // dropped once, then its block goes back to where `new` took it.
            unsafe {
                std::ptr::drop_in_place(&raw mut (*self.ptr.as_ptr()).value);
                dealloc(self.ptr.cast(), Layout::new::<RcBox<T>>());
            }
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for PoolRc<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// A boxed slice in the pool (a wr-id table): `Box<[T]>` for memory that lives there.
pub(crate) struct PoolSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    _own: PhantomData<T>,
}

// SAFETY: owns its elements as a Box<[T]> does.
unsafe impl<T: Send> Send for PoolSlice<T> {}
// SAFETY: as above; `&PoolSlice` gives `&[T]` only.
unsafe impl<T: Sync> Sync for PoolSlice<T> {}

impl<T> PoolSlice<T> {
    /// `len` elements made by `f(i)`. Aborts where the size overflows, as
    /// `Vec::with_capacity` panics: callers size tables by a ring's entries, a `u32`.
    pub(crate) fn from_fn(len: usize, mut f: impl FnMut(usize) -> T) -> Self {
        let layout = Layout::array::<T>(len).unwrap_or_else(|_| std::process::abort());
        let ptr = alloc(layout).cast::<T>();
        for i in 0..len {
            // SAFETY: in bounds of the fresh block; each element written once. (A
            // panicking `f` leaks the block and the elements before it: nothing is
            // dropped twice.)
            unsafe { ptr.as_ptr().add(i).write(f(i)) };
        }
        PoolSlice { ptr, len, _own: PhantomData }
    }
}

impl<T> std::ops::Deref for PoolSlice<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements, owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for PoolSlice<T> {
    fn drop(&mut self) {
        // SAFETY: the elements are initialised and dropped once; then the block goes
        // back with the layout it was taken with.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len));
            dealloc(self.ptr.cast(), Layout::array::<T>(self.len).unwrap_unchecked());
        }
    }
}

impl<T> std::fmt::Debug for PoolSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolSlice").field("len", &self.len).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn strides_are_odd_lines_and_only_for_what_the_chunks_serve() {
        let l = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(stride(l(1, 1)), Some(64));
        assert_eq!(stride(l(64, 64)), Some(64));
        assert_eq!(stride(l(65, 8)), Some(192));
        assert_eq!(stride(l(1024, 8)), Some(1088));
        assert_eq!(stride(l(MAX_BLOCK, 8)), Some(MAX_BLOCK + 64));
        assert_eq!(stride(l(MAX_BLOCK + 1, 8)), None);
        assert_eq!(stride(l(64, 128)), None);
        assert_eq!(stride(l(0, 1)), None);
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_writable() {
        let layout = Layout::from_size_align(200, 64).unwrap();
        let blocks: Vec<NonNull<u8>> = (0..100).map(|_| alloc(layout)).collect();
        for (i, p) in blocks.iter().enumerate() {
            assert_eq!(p.as_ptr() as usize % 64, 0);
            // SAFETY: 200 bytes of our own block.
            unsafe { std::ptr::write_bytes(p.as_ptr(), i as u8, 200) };
        }
        let mut addrs: Vec<usize> = blocks.iter().map(|p| p.as_ptr() as usize).collect();
        addrs.sort_unstable();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 200), "blocks overlap");
        for (i, p) in blocks.iter().enumerate() {
            // SAFETY: as above; every byte still holds what its block's owner wrote.
            assert!(unsafe { std::slice::from_raw_parts(p.as_ptr(), 200) }.iter().all(|&b| b == i as u8));
        }
        // SAFETY: each block once, with its layout.
        blocks.into_iter().for_each(|p| unsafe { dealloc(p, layout) });
    }

    #[test]
    fn a_pool_carves_in_order_and_hands_a_freed_block_out_again() {
        // A pool of its own (the process's is shared with the other tests).
        let mut pool = Pool { chunks: BTreeSet::new(), cur: None, free: BTreeMap::new(), no_chunks: false };
        let Some(a) = pool.carve(320) else {
            return; // no chunk to be had: everything comes from the heap, as documented
        };
        let b = pool.carve(320).unwrap();
        let c = pool.carve(64).unwrap();
        let (a, b, c) = (a.as_ptr() as usize, b.as_ptr() as usize, c.as_ptr() as usize);
        assert_eq!((a % CHUNK, b - a, c - b), (0, 320, 320), "carved one after another from a chunk's start");
        assert!(pool.chunks.contains(&a));
        let heap = Box::new([0u8; 320]);
        assert!(!pool.give_back(NonNull::from(&heap[0]), 320), "not a block of this pool's chunks");
        assert!(pool.give_back(NonNull::new(a as *mut u8).unwrap(), 320));
        assert_eq!(pool.carve(64).unwrap().as_ptr() as usize, c + 64, "another stride does not take it");
        assert_eq!(pool.carve(320).unwrap().as_ptr() as usize, a, "the freed block of that stride");
        assert_eq!(pool.carve(320).unwrap().as_ptr() as usize, c + 128, "then carving goes on");
        // A block that does not fit the chunk's rest starts a new chunk.
        let big = pool.carve(CHUNK - 64).unwrap().as_ptr() as usize;
        assert_eq!(big % CHUNK, 0);
        assert_eq!(pool.chunks.len(), 2);
    }

    #[test]
    fn large_and_over_aligned_blocks_come_from_the_heap_and_go_back_there() {
        for layout in
            [Layout::from_size_align(MAX_BLOCK + 1, 8).unwrap(), Layout::from_size_align(64, 4096).unwrap()]
        {
            let p = alloc(layout);
            assert_eq!(p.as_ptr() as usize % layout.align(), 0);
            assert!(!in_chunk(p.as_ptr()));
            // SAFETY: our block; once, with its layout.
            unsafe {
                std::ptr::write_bytes(p.as_ptr(), 1, layout.size());
                dealloc(p, layout);
            }
        }
        let z = Layout::from_size_align(0, 16).unwrap();
        let p = alloc(z);
        assert_eq!(p.as_ptr() as usize % 16, 0);
        // SAFETY: zero-sized: nothing to give back.
        unsafe { dealloc(p, z) };
    }

    #[test]
    fn pool_rc_counts_handles_and_drops_its_value_once_with_the_last() {
        let witness = Rc::new(());
        let a = PoolRc::new((witness.clone(), [7u64; 20]));
        assert!(in_chunk(&*a) || pool().no_chunks, "in the pool");
        let b = a.clone();
        assert_eq!((PoolRc::count(&a), Rc::strong_count(&witness)), (2, 2));
        assert_eq!(b.1[19], 7);
        drop(a);
        assert_eq!((PoolRc::count(&b), Rc::strong_count(&witness)), (1, 2), "value alive with b");
        drop(b);
        assert_eq!(Rc::strong_count(&witness), 1, "dropped once, with the last handle");
    }

    #[test]
    fn pool_slice_holds_its_elements_and_drops_each_once() {
        let witness = Rc::new(());
        let s = PoolSlice::from_fn(1000, |i| (i, witness.clone()));
        assert_eq!(s.len(), 1000);
        assert!(s.iter().enumerate().all(|(i, e)| e.0 == i));
        assert_eq!(Rc::strong_count(&witness), 1001);
        drop(s);
        assert_eq!(Rc::strong_count(&witness), 1);
        let empty = PoolSlice::<u64>::from_fn(0, |_| unreachable!());
        assert!(empty.is_empty());
    }
}
