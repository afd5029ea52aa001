//! The checked "DMA" layer: the only code that touches registered host memory. It turns
//! (lkey or rkey, address, length, required access, expected PD) into a `Region` and
//! copies through raw pointers (spec §3.2, §4.1, §6.2).
//!
//! Host memory may be read or written by the driver at the same time, so the model never
//! creates Rust references over it; every access is a `ptr::copy_nonoverlapping` between a
//! checked region and a local buffer. Region checks and copies happen under the fabric
//! lock, and `dereg_mr` takes the same lock, so a region stays registered while it is used.

use std::mem::MaybeUninit;

use crate::access;

/// A memory region as registered with `reg_mr`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mr {
    pub pdn: u32,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DmaError {
    /// No MR with this key.
    #[error("unknown key {key:#x}")]
    UnknownKey {
        /// The key.
        key: u32,
    },
    /// The MR belongs to another protection domain.
    #[error("key {key:#x} belongs to PD {mr_pdn:#x}, QP uses PD {pdn:#x}")]
    PdMismatch {
        /// The key.
        key: u32,
        /// The MR's PD.
        mr_pdn: u32,
        /// The QP's PD.
        pdn: u32,
    },
    /// The range is not inside the MR.
    #[error("[{addr:#x}, +{len:#x}) is outside the MR of key {key:#x}")]
    OutOfBounds {
        /// The key.
        key: u32,
        /// Start address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// The MR lacks an access right.
    #[error("key {key:#x} lacks access {need:#x}")]
    AccessDenied {
        /// The key.
        key: u32,
        /// Missing `access::*` bits.
        need: u32,
    },
    /// A window or indirect mkey named with a variant it no longer has (bound again, or
    /// invalidated, since).
    #[error("key {key:#x} is stale: the window is now {now:#x}")]
    Stale {
        /// The key.
        key: u32,
        /// Its current key.
        now: u32,
    },
    /// A memory window's key used as an lkey: windows grant remote access only.
    #[error("key {key:#x} is a memory window, not usable as an lkey")]
    NotLocal {
        /// The key.
        key: u32,
    },
    /// A window or indirect mkey that is not bound (never, or invalidated since).
    #[error("key {key:#x} is not bound")]
    NotBound {
        /// The key.
        key: u32,
    },
    /// A type-2 window used by a request that arrived at another QP than its own.
    #[error("key {key:#x} is bound to QP {bound:#x}, not {qpn:#x}")]
    WrongQp {
        /// The key.
        key: u32,
        /// The QP the request arrived at.
        qpn: u32,
        /// The window's QP.
        bound: u32,
    },
    /// A KLM entry of key `key` names MR `entry`, which is not registered (any more).
    #[error("key {key:#x}: its entry's MR {entry:#x} is not registered")]
    EntryGone {
        /// The window or indirect mkey.
        key: u32,
        /// The MR key its entry names.
        entry: u32,
    },
    /// The access resolves to more pieces of memory than one region (an indirect mkey's
    /// range across entries): the caller gathers them (`MrTable::check_sgl`).
    #[error("key {key:#x}: the access spans several KLM entries")]
    Spans {
        /// The key.
        key: u32,
    },
}

/// A checked range of registered memory. Only [`MrTable::check`] creates one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    addr: u64,
    len: u64,
}

impl Region {
    pub(crate) const EMPTY: Region = Region { addr: 0, len: 0 };

    /// Its length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// A region over the model's own buffer `b`, not registered memory: where a READ
    /// or an atomic for a requester in another process leaves its result
    /// ([`crate::udp_wire`]). It is valid while `b` is neither moved nor dropped; the
    /// caller keeps `b` for as long as it uses the region.
    pub(crate) fn scratch(b: &mut [u8]) -> Region {
        Region { addr: b.as_mut_ptr() as u64, len: b.len() as u64 }
    }

    /// The part of this (checked) region after its first `n` bytes.
    fn after(&self, n: u64) -> Region {
        let n = n.min(self.len);
        Region { addr: self.addr + n, len: self.len - n }
    }
}

/// The MRs of one host, keyed by lkey (the model uses the same value as rkey).
#[derive(Debug)]
pub(crate) struct MrTable {
    /// By key: the model chooses the keys ([`MrTable::next_key`]), so a direct table
    /// finds one in an index and a compare (a key a WQE names is looked up the same way:
    /// a slot holding another key is no match).
    mrs: crate::idmap::DirectMap<Mr>,
    /// Memory windows and indirect mkeys ([`crate::mkey`]): looked up when no MR has the
    /// key.
    pub(crate) mkeys: crate::mkey::Mkeys,
    /// On-demand-paging MRs (`access::ON_DEMAND`): the 4 KiB pages the NIC has touched
    /// ([`MrTable::odp_fault`]), by key.
    odp: std::collections::HashMap<u32, std::collections::HashSet<u64>>,
}

impl Default for MrTable {
    fn default() -> Self {
        MrTable::new(0)
    }
}

impl MrTable {
    /// An empty table for keys counted from `base`.
    pub(crate) fn new(base: u32) -> Self {
        MrTable {
            mrs: crate::idmap::DirectMap::new(base),
            mkeys: crate::mkey::Mkeys::default(),
            odp: Default::default(),
        }
    }

    /// The key a new MR gets: the first at or after `from` that the table can hold
    /// without a collision ([`crate::idmap::DirectMap::next_free`]).
    pub(crate) fn next_key(&mut self, from: u32) -> u32 {
        self.mrs.next_free(from)
    }

    pub(crate) fn insert(&mut self, key: u32, mr: Mr) {
        if mr.access & access::ON_DEMAND != 0 {
            self.odp.insert(key, Default::default());
        } else {
            self.odp.remove(&key);
        }
        self.mrs.insert(key, mr);
    }

    pub(crate) fn remove(&mut self, key: u32) -> Option<Mr> {
        self.odp.remove(&key);
        self.mrs.remove(&key)
    }

    /// Whether any MR is an on-demand-paging one.
    #[inline]
    pub(crate) fn has_odp(&self) -> bool {
        !self.odp.is_empty()
    }

    /// The NIC touches `[addr, addr+len)` of the MR of `key`: when it is an
    /// on-demand-paging MR with a page of that range not yet in the NIC's page table, a
    /// page fault, which brings every page of the range in. The first such page, if
    /// there was a fault.
    #[cold]
    pub(crate) fn odp_fault(&mut self, key: u32, addr: u64, len: u64) -> Option<u64> {
        let pages = self.odp.get_mut(&key)?;
        let (first, last) = (addr / 4096, (addr + len.max(1) - 1) / 4096);
        let missing = (first..=last).find(|p| !pages.contains(p))?;
        pages.extend(first..=last);
        Some(missing * 4096)
    }

    /// MRs registered.
    pub(crate) fn count(&self) -> usize {
        self.mrs.len()
    }

    pub(crate) fn uses_pd(&self, pdn: u32) -> bool {
        self.mrs.values().any(|m| m.pdn == pdn) || self.mkeys.uses_pd(pdn)
    }

    /// The MR of `key`, if there is one.
    pub(crate) fn mr(&self, key: u32) -> Option<&Mr> {
        self.mrs.get(&key)
    }

    /// `[addr, addr+len)` of the MR of `key`, or of the bound window or indirect mkey of
    /// `key`, if there is one.
    pub(crate) fn bounds(&self, key: u32) -> Option<(u64, u64)> {
        match self.mrs.get(&key) {
            Some(m) => Some((m.addr, m.len)),
            None => self.mkeys.by_index(key).and_then(|k| k.bound.as_ref()).map(|b| (b.start, b.len)),
        }
    }

    /// What `key` names, in words ("the MR", "the type-2 memory window").
    fn noun(&self, key: u32) -> &'static str {
        match self.mkeys.by_index(key) {
            Some(k) if !self.mrs.contains_key(&key) => k.kind.noun(),
            _ => "MR",
        }
    }

    /// A refused check in words, naming the key (`which`: "lkey" or "rkey"), the MR and
    /// its range, and what `op` needed ([`crate::why`]).
    #[cold]
    pub(crate) fn explain(&self, e: &DmaError, which: &str, op: &str) -> String {
        match *e {
            DmaError::UnknownKey { key } => {
                format!("{which} 0x{key:x} is not a memory key of this device (never registered, or deregistered)")
            }
            DmaError::PdMismatch { key, mr_pdn, pdn } => {
                format!("{which} 0x{key:x} belongs to PD 0x{mr_pdn:x}, and the QP to PD 0x{pdn:x}")
            }
            DmaError::OutOfBounds { key, addr, len } => {
                let noun = self.noun(key);
                let mr =
                    self.bounds(key).map_or(String::new(), |(a, l)| format!(" [0x{a:x}, 0x{:x})", a + l));
                format!("{op} of {len} bytes at 0x{addr:x} lies outside the {noun}{mr} of {which} 0x{key:x}")
            }
            DmaError::AccessDenied { key, need } if self.mrs.contains_key(&key) => format!(
                "{which} 0x{key:x} does not allow {op} (its MR was registered without {})",
                crate::access::names(need)
            ),
            DmaError::AccessDenied { key, need } => format!(
                "{which} 0x{key:x} does not allow {op} (the {} was bound without {})",
                self.noun(key),
                crate::access::names(need)
            ),
            DmaError::Stale { key, now } => format!(
                "{which} 0x{key:x} is a stale key of {} 0x{now:x}: it was bound or invalidated again since, and its key is now 0x{now:x}",
                self.noun(key)
            ),
            DmaError::NotLocal { key } => format!(
                "{which} 0x{key:x} is a memory window, which grants remote access only: it cannot be used for {op}"
            ),
            DmaError::NotBound { key } => {
                let how = match self.mkeys.by_index(key).map(|k| k.freed) {
                    Some(crate::mkey::Freed::Local(q)) => format!(" (invalidated by a UMR on QP 0x{q:x})"),
                    Some(crate::mkey::Freed::Remote(q)) => {
                        format!(" (invalidated by a SEND with invalidate that arrived at QP 0x{q:x})")
                    }
                    _ => " (never bound)".into(),
                };
                format!("{which} 0x{key:x} names a {} that is not bound{how}", self.noun(key))
            }
            DmaError::WrongQp { key, qpn, bound } => format!(
                "{which} 0x{key:x} is a type-2 memory window bound to QP 0x{bound:x}; the {op} arrived at QP 0x{qpn:x}"
            ),
            DmaError::EntryGone { key, entry } => format!(
                "{which} 0x{key:x} is a {} over MR 0x{entry:x}, which is no longer registered",
                self.noun(key)
            ),
            DmaError::Spans { key } => format!(
                "{op} through {which} 0x{key:x} spans more pieces of memory than a request may gather ({MAX_SGL})"
            ),
        }
    }

    /// Checks `[addr, addr+len)` against the MR of `key`: it must exist, belong to `pdn`,
    /// contain the range and grant every bit of `need`. A key no MR has may be an
    /// indirect mkey ([`crate::mkey`]), resolved when the range lies in one of its entries
    /// (`Spans` otherwise: [`MrTable::check_sgl`]); a memory window is refused (an lkey).
    #[inline]
    pub(crate) fn check(
        &self,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
        pdn: u32,
    ) -> Result<Region, DmaError> {
        self.check_as(key, addr, len, need, pdn, None)
    }

    /// [`MrTable::check`] for a request that arrived at QP `qpn` (remote access: an RDMA
    /// WRITE, READ or atomic's rkey): memory windows are allowed, a type-2 one only on
    /// its own QP.
    #[inline]
    pub(crate) fn check_remote(
        &self,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
        pdn: u32,
        qpn: u32,
    ) -> Result<Region, DmaError> {
        self.check_as(key, addr, len, need, pdn, Some(qpn))
    }

    #[inline(always)]
    fn check_as(
        &self,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
        pdn: u32,
        remote: Option<u32>,
    ) -> Result<Region, DmaError> {
        let Some(mr) = self.mrs.get(&key) else {
            return self.check_mkey(Ask { key, addr, len, need, pdn, remote });
        };
        if mr.pdn != pdn {
            return Err(DmaError::PdMismatch { key, mr_pdn: mr.pdn, pdn });
        }
        let end = addr.checked_add(len);
        let mr_end = mr.addr + mr.len; // cannot overflow: checked at registration
        match end {
            Some(end) if addr >= mr.addr && end <= mr_end => {}
            _ => return Err(DmaError::OutOfBounds { key, addr, len }),
        }
        if mr.access & need != need {
            return Err(DmaError::AccessDenied { key, need: need & !mr.access });
        }
        Ok(Region { addr, len })
    }
}

/// One access to check against a window or indirect mkey: `[addr, addr+len)` of `key`,
/// needing `need` (`access::*`), in PD `pdn`; `remote`: the QP a remote request arrived
/// at (`None` for an lkey).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub key: u32,
    pub addr: u64,
    pub len: u64,
    pub need: u32,
    pub pdn: u32,
    pub remote: Option<u32>,
}

impl MrTable {
    /// A key no MR has: a window or indirect mkey, when the access resolves to one
    /// region; `Spans` when it resolves to several ([`MrTable::check_sgl`]).
    #[cold]
    #[inline(never)]
    fn check_mkey(&self, a: Ask) -> Result<Region, DmaError> {
        let (mut first, mut n) = (Region { addr: a.addr, len: 0 }, 0);
        self.walk(a, |r| {
            if n == 0 {
                first = r;
            }
            n += 1;
            true
        })?;
        if n > 1 {
            return Err(DmaError::Spans { key: a.key });
        }
        Ok(first)
    }

    /// The regions access `a` resolves to, appended to `out` (checked as
    /// [`MrTable::check`], or [`MrTable::check_remote`] with `a.remote`, does): an
    /// indirect mkey's range across several KLM entries. `Spans` when `out` cannot hold
    /// them.
    #[cold]
    #[inline(never)]
    pub(crate) fn check_sgl(&self, a: Ask, out: &mut Sgl) -> Result<(), DmaError> {
        if self.mrs.contains_key(&a.key) {
            let r = self.check(a.key, a.addr, a.len, a.need, a.pdn)?;
            return if out.push(r) { Ok(()) } else { Err(DmaError::Spans { key: a.key }) };
        }
        let mut full = false;
        self.walk(a, |r| {
            full = !out.push(r);
            !full
        })?;
        if full {
            return Err(DmaError::Spans { key: a.key });
        }
        Ok(())
    }

    /// Resolves access `a` through its window or indirect mkey piece by piece, handing
    /// each piece to `f` (which may stop the walk by returning false).
    fn walk(&self, a: Ask, mut f: impl FnMut(Region) -> bool) -> Result<(), DmaError> {
        let Ask { key, addr, len, need, pdn, remote } = a;
        let Some(mk) = self.mkeys.by_index(key) else {
            return Err(DmaError::UnknownKey { key });
        };
        if mk.kind.is_window() && remote.is_none() {
            return Err(DmaError::NotLocal { key });
        }
        // Not bound first: an invalidation also sets the variant (to 0 for
        // rdma-core's LOCAL_INV), and "invalidated" says more than "stale".
        let Some(b) = &mk.bound else {
            return Err(DmaError::NotBound { key });
        };
        if mk.variant != key as u8 {
            return Err(DmaError::Stale { key, now: mk.key(key) });
        }
        if mk.pdn != pdn {
            return Err(DmaError::PdMismatch { key, mr_pdn: mk.pdn, pdn });
        }
        if let (Some(bound), Some(qpn)) = (b.qpn, remote) {
            if bound != qpn {
                return Err(DmaError::WrongQp { key, qpn, bound });
            }
        }
        let inside = addr.checked_add(len).is_some_and(|end| addr >= b.start && end - b.start <= b.len);
        if !inside {
            return Err(DmaError::OutOfBounds { key, addr, len });
        }
        if b.access & need != need {
            return Err(DmaError::AccessDenied { key, need: need & !b.access });
        }
        let (mut refused, mut stopped) = (None, false);
        let left = b.layout.pieces(addr - b.start, len, |k, a, piece| {
            let Some(mr) = self.mrs.get(&k) else {
                refused = Some(DmaError::EntryGone { key, entry: k });
                return false;
            };
            if mr.pdn != pdn {
                refused = Some(DmaError::PdMismatch { key: k, mr_pdn: mr.pdn, pdn });
                return false;
            }
            let fits = a.checked_add(piece).is_some_and(|end| a >= mr.addr && end <= mr.addr + mr.len);
            if !fits {
                refused = Some(DmaError::OutOfBounds { key: k, addr: a, len: piece });
                return false;
            }
            stopped = !f(Region { addr: a, len: piece });
            !stopped
        });
        if let Some(e) = refused {
            return Err(e);
        }
        if left > 0 && !stopped {
            // The entries cover less than the key's length.
            return Err(DmaError::OutOfBounds { key, addr, len });
        }
        Ok(())
    }
}

/// Most regions in one scatter/gather list (63 DS per WQE; receive strides up to 1024 B).
pub(crate) const MAX_SGL: usize = 64;

/// A data source for a stream copy.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Src<'a> {
    /// Bytes held by the model (inline data copied out of the ring).
    Bytes(&'a [u8]),
    /// Registered memory.
    Mem(Region),
}

impl Src<'_> {
    fn len(&self) -> u64 {
        match self {
            Src::Bytes(b) => b.len() as u64,
            Src::Mem(r) => r.len,
        }
    }
}

/// A fixed-capacity list of checked regions (no heap allocation, and no
/// initialisation of the unused capacity: building one per WQE is cheap).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sgl {
    regions: [MaybeUninit<Region>; MAX_SGL],
    n: usize,
    total: u64,
}

impl Sgl {
    pub(crate) const fn new() -> Sgl {
        Sgl { regions: [const { MaybeUninit::uninit() }; MAX_SGL], n: 0, total: 0 }
    }

    /// Appends a region; false when full.
    pub(crate) fn push(&mut self, r: Region) -> bool {
        if self.n == MAX_SGL {
            return false;
        }
        self.regions[self.n].write(r);
        self.n += 1;
        self.total += r.len;
        true
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Its regions as copy sources.
    pub(crate) fn sources(&self) -> Vec<Src<'static>> {
        self.regions().iter().map(|r| Src::Mem(*r)).collect()
    }

    pub(crate) fn regions(&self) -> &[Region] {
        // SAFETY: the first `n` entries were written by `push`; MaybeUninit<Region>
        // has Region's layout.
        unsafe { std::slice::from_raw_parts(self.regions.as_ptr().cast::<Region>(), self.n) }
    }

    /// The list without its first `n` bytes (sub-ranges of checked regions).
    pub(crate) fn skip(&self, mut n: u64) -> Sgl {
        let mut out = Sgl::new();
        for r in self.regions() {
            if n >= r.len {
                n -= r.len;
                continue;
            }
            out.push(r.after(n));
            n = 0;
        }
        out
    }
}

/// A fixed-capacity list of data sources (as [`Sgl`]: no heap, no initialisation
/// of the unused capacity).
#[derive(Debug)]
pub(crate) struct SrcList<'a> {
    srcs: [MaybeUninit<Src<'a>>; MAX_SGL],
    n: usize,
}

impl<'a> SrcList<'a> {
    pub(crate) const fn new() -> Self {
        SrcList { srcs: [const { MaybeUninit::uninit() }; MAX_SGL], n: 0 }
    }

    /// Appends a source; false when full.
    pub(crate) fn push(&mut self, s: Src<'a>) -> bool {
        if self.n == MAX_SGL {
            return false;
        }
        self.srcs[self.n].write(s);
        self.n += 1;
        true
    }

    pub(crate) fn as_slice(&self) -> &[Src<'a>] {
        // SAFETY: the first `n` entries were written by `push`.
        unsafe { std::slice::from_raw_parts(self.srcs.as_ptr().cast::<Src<'a>>(), self.n) }
    }
}

/// Copies `out.len()` bytes from offset `off` of region `r`; false if out of the region.
pub(crate) fn read(r: &Region, off: u64, out: &mut [u8]) -> bool {
    match off.checked_add(out.len() as u64) {
        Some(end) if end <= r.len => {
            // SAFETY: `r` was checked against a registered MR, whose memory the user
            // guaranteed valid until dereg_mr (reg_mr's contract); dereg takes the fabric
            // lock we hold. `out` is a model-owned local buffer, disjoint from user memory.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (r.addr + off) as usize as *const u8,
                    out.as_mut_ptr(),
                    out.len(),
                )
            };
            true
        }
        _ => false,
    }
}

/// Copies `data` to offset `off` of region `r`; false (nothing written) if out of it.
pub(crate) fn write(r: &Region, off: u64, data: &[u8]) -> bool {
    match off.checked_add(data.len() as u64) {
        Some(end) if end <= r.len => {
            // SAFETY: as in `read`; `data` is a model-owned buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), (r.addr + off) as usize as *mut u8, data.len())
            };
            true
        }
        _ => false,
    }
}

/// Copies the concatenation of `src` into `out` (as far as both go); returns the bytes
/// copied.
pub(crate) fn gather(src: &[Src<'_>], out: &mut [u8]) -> usize {
    let mut at = 0;
    for s in src {
        if at == out.len() {
            break;
        }
        let n = (s.len() as usize).min(out.len() - at);
        let ok = match s {
            Src::Bytes(b) => {
                out[at..at + n].copy_from_slice(&b[..n]);
                true
            }
            Src::Mem(r) => read(r, 0, &mut out[at..at + n]),
        };
        if !ok {
            break;
        }
        at += n;
    }
    at
}

/// Copies `n` bytes from offset `soff` of `src` to offset `doff` of `dst`, as
/// `memmove` (the two may overlap: a WRITE between two ranges of one host's memory);
/// false (nothing copied) if either range is out of its region.
fn copy_region(src: &Region, soff: u64, dst: &Region, doff: u64, n: u64) -> bool {
    let fits = |r: &Region, off: u64| off.checked_add(n).is_some_and(|end| end <= r.len);
    if !fits(src, soff) || !fits(dst, doff) {
        return false;
    }
    // SAFETY: both regions were checked against registered MRs, whose memory the user
    // guaranteed valid until dereg_mr (reg_mr's contract; dereg takes the lock of the
    // MR's host, which we hold); `copy` allows the ranges to overlap.
    unsafe {
        std::ptr::copy(
            (src.addr + soff) as usize as *const u8,
            (dst.addr + doff) as usize as *mut u8,
            n as usize,
        )
    };
    true
}

/// Copies bytes of the concatenation of `src`, from its byte `off` on, into `out`, until
/// either runs out. Returns the number of bytes copied.
pub(crate) fn gather_at(src: &[Src<'_>], mut off: u64, out: &mut [u8]) -> usize {
    let mut at = 0;
    for s in src {
        let len = s.len();
        if off >= len {
            off -= len;
            continue;
        }
        let n = ((len - off) as usize).min(out.len() - at);
        let ok = match s {
            Src::Bytes(b) => {
                out[at..at + n].copy_from_slice(&b[off as usize..off as usize + n]);
                true
            }
            Src::Mem(r) => read(r, off, &mut out[at..at + n]),
        };
        if !ok {
            break;
        }
        at += n;
        off = 0;
        if at == out.len() {
            break;
        }
    }
    at
}

/// Streams the concatenation of `src` into the concatenation of `dst`, piece by
/// piece and without a bounce buffer, stopping when either runs out. Returns the
/// number of bytes copied.
pub(crate) fn stream(src: &[Src<'_>], dst: &[Region]) -> u64 {
    let (mut di, mut doff) = (0usize, 0u64);
    let mut copied = 0u64;
    for s in src {
        let slen = s.len();
        let mut soff = 0u64;
        while soff < slen {
            while di < dst.len() && doff == dst[di].len {
                di += 1;
                doff = 0;
            }
            let Some(d) = dst.get(di) else {
                return copied;
            };
            let m = (slen - soff).min(d.len - doff);
            let ok = match s {
                Src::Bytes(b) => write(d, doff, &b[soff as usize..(soff + m) as usize]),
                Src::Mem(r) => copy_region(r, soff, d, doff, m),
            };
            if !ok {
                return copied;
            }
            soff += m;
            doff += m;
            copied += m;
        }
    }
    copied
}

/// [`stream`] of one source into one region: the first `min` of their lengths copied.
#[inline]
pub(crate) fn copy_one(src: &Src<'_>, dst: &Region) -> u64 {
    let m = src.len().min(dst.len);
    let ok = match src {
        Src::Bytes(b) => write(dst, 0, &b[..m as usize]),
        Src::Mem(r) => copy_region(r, 0, dst, 0, m),
    };
    if ok {
        m
    } else {
        0
    }
}

/// Access bits an MR may carry; remote write/atomic require local write (IB rule).
pub(crate) fn valid_mr_access(a: u32) -> bool {
    let needs_lw = access::REMOTE_WRITE | access::REMOTE_ATOMIC;
    a & needs_lw == 0 || a & access::LOCAL_WRITE != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_at_skips_whole_and_partial_sources() {
        let (a, b, c) = (b"abc", b"defg", b"hi");
        let srcs = [Src::Bytes(a), Src::Bytes(&[]), Src::Bytes(b), Src::Bytes(c)];
        let mut out = [0u8; 4];
        assert_eq!(gather_at(&srcs, 2, &mut out), 4);
        assert_eq!(&out, b"cdef");
        assert_eq!(gather_at(&srcs, 7, &mut out), 2);
        assert_eq!(&out[..2], b"hi");
        assert_eq!(gather_at(&srcs, 9, &mut out), 0);
    }

    fn table(buf: &[u8], access: u32) -> MrTable {
        let mut t = MrTable::default();
        t.insert(7, Mr { pdn: 1, addr: buf.as_ptr() as u64, len: buf.len() as u64, access });
        t
    }

    #[test]
    fn checks_key_pd_bounds_access() {
        let buf = vec![0u8; 64];
        let a = buf.as_ptr() as u64;
        let t = table(&buf, access::LOCAL_WRITE);
        assert!(t.check(7, a, 64, 0, 1).is_ok());
        assert_eq!(t.check(8, a, 1, 0, 1), Err(DmaError::UnknownKey { key: 8 }));
        assert!(matches!(t.check(7, a, 1, 0, 2), Err(DmaError::PdMismatch { .. })));
        assert!(matches!(t.check(7, a, 65, 0, 1), Err(DmaError::OutOfBounds { .. })));
        assert!(matches!(t.check(7, a - 1, 1, 0, 1), Err(DmaError::OutOfBounds { .. })));
        assert!(matches!(t.check(7, u64::MAX, 2, 0, 1), Err(DmaError::OutOfBounds { .. })));
        assert_eq!(
            t.check(7, a, 8, access::REMOTE_READ, 1),
            Err(DmaError::AccessDenied { key: 7, need: access::REMOTE_READ })
        );
    }

    #[test]
    fn stream_crosses_regions() {
        let src = [1u8, 2, 3, 4, 5, 6, 7];
        let mut dst = vec![0u8; 8];
        let a = dst.as_mut_ptr() as u64;
        let t = table(&dst, access::LOCAL_WRITE);
        let d1 = t.check(7, a, 3, 0, 1).unwrap();
        let d2 = t.check(7, a + 4, 4, 0, 1).unwrap();
        let n = stream(&[Src::Bytes(&src[..2]), Src::Bytes(&src[2..])], &[d1, d2]);
        assert_eq!(n, 7);
        assert_eq!(dst, [1, 2, 3, 0, 4, 5, 6, 7]);
    }

    #[test]
    fn copy_one_is_a_stream_of_one_source_into_one_region() {
        for (slen, dlen) in [(5, 8), (8, 5), (0, 4), (4, 0), (8, 8)] {
            let src: Vec<u8> = (1..=9).collect();
            let (mut a, mut b) = (vec![0u8; 16], vec![0u8; 16]);
            let (ta, tb) = (table(&a, access::LOCAL_WRITE), table(&b, access::LOCAL_WRITE));
            let da = ta.check(7, a.as_mut_ptr() as u64 + 2, dlen, 0, 1).unwrap();
            let db = tb.check(7, b.as_mut_ptr() as u64 + 2, dlen, 0, 1).unwrap();
            let bytes = Src::Bytes(&src[..slen]);
            assert_eq!(copy_one(&bytes, &da), stream(&[bytes], &[db]), "{slen} into {dlen}");
            assert_eq!(a, b);
            // From registered memory: a region of `src`.
            let ts = table(&src, 0);
            let from = Src::Mem(ts.check(7, src.as_ptr() as u64 + 1, slen as u64, 0, 1).unwrap());
            assert_eq!(copy_one(&from, &da), stream(&[from], &[db]));
            assert_eq!(a, b);
        }
    }

    #[test]
    fn mr_access_rule() {
        assert!(valid_mr_access(access::REMOTE_READ));
        assert!(!valid_mr_access(access::REMOTE_WRITE));
        assert!(valid_mr_access(access::REMOTE_WRITE | access::LOCAL_WRITE));
    }
}
