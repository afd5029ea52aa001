//! Cache hints of the post path: a hint reads and writes no byte the
//! program can observe and never faults, whatever the address.

/// Ask for the cache line holding `p` ahead of a store to it: `prefetchw`
/// where the target has it, else `prefetcht0` (x86-64), `prfm pstl1keep`
/// (arm64), nothing elsewhere. `p` may point anywhere, even past an
/// allocation's end (form it with `wrapping_add`): nothing is accessed.
#[inline(always)]
pub fn prefetch_w<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it accesses no memory the program can
    // observe and does not fault.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_ET0 }>(p.cast::<i8>())
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint: it accesses no memory the program can observe
    // and does not fault.
    unsafe {
        core::arch::asm!("prfm pstl1keep, [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tracker asks for the line past its table's end once a lap: a hint
    /// at any address must neither fault nor change memory.
    #[test]
    fn a_hint_anywhere_neither_faults_nor_writes() {
        let table = [7u64; 4];
        prefetch_w(table.as_ptr());
        prefetch_w(table.as_ptr().wrapping_add(8));
        prefetch_w(core::ptr::null::<u8>());
        prefetch_w(usize::MAX as *const u8);
        assert_eq!(table, [7; 4]);
    }
}
