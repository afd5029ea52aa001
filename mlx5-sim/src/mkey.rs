//! Memory windows (type 1 and type 2) and indirect mkeys: the keys a UMR WQE binds,
//! invalidates or points at a list of KLM entries ([`crate::umr`]), and how an access
//! through one of them resolves to registered memory (docs/mlx5-wire-format.md §3.7).
//!
//! A key is `index << 8 | variant`: the UMR that binds a window names it by its index
//! and gives it its new variant (the low byte, `ibv_inc_rkey`), so an rkey from before a
//! rebind no longer matches. The model's indices start at [`INDEX_BASE`], so that these
//! keys (at or above 0x8000_0000) never meet the MR keys ([`crate::dma::MrTable`]), which
//! are plain numbers below that.
//!
//! Resolution happens on every access, entry by entry: a window's one KLM entry names
//! its MR, so a type-1 window follows its MR (deregistered, the window grants nothing);
//! an indirect mkey's entries are checked against their MRs' bounds when used, not when
//! the UMR wrote them (the NIC does the same: the UMR only stores the list).

use crate::idmap::DirectMap;

/// The first index of a window or indirect mkey: their keys are at or above
/// `INDEX_BASE << 8` = 0x8000_0000.
pub(crate) const INDEX_BASE: u32 = 0x80_0000;

/// What a key of this table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MkeyKind {
    /// A type-1 memory window (`ibv_alloc_mw(IBV_MW_TYPE_1)`): bound by `ibv_bind_mw`,
    /// to no QP.
    Mw1,
    /// A type-2 memory window: bound to the QP that posted the bind, invalidated by
    /// LOCAL_INV or a peer's SEND with invalidate.
    Mw2,
    /// An indirect mkey (`mlx5dv_create_mkey`, KLM access mode) with room for
    /// `max_entries` KLM entries.
    Indirect {
        /// Most KLM entries a UMR may give it.
        max_entries: u32,
        /// A peer's SEND with invalidate may free it (`en_rinval`,
        /// `MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE`).
        remote_invalidate: bool,
    },
}

impl MkeyKind {
    /// Whether this is a memory window (either type).
    pub(crate) fn is_window(self) -> bool {
        matches!(self, MkeyKind::Mw1 | MkeyKind::Mw2)
    }

    /// Its name in sentences.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            MkeyKind::Mw1 => "type-1 memory window",
            MkeyKind::Mw2 => "type-2 memory window",
            MkeyKind::Indirect { .. } => "indirect mkey",
        }
    }
}

/// One KLM entry: `len` bytes of the MR of `key` from `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Klm {
    pub len: u32,
    pub key: u32,
    pub addr: u64,
}

/// A repeated block (`mlx5dv_wr_mr_interleaved`): `count` repetitions of the entries'
/// bytes in order, repetition `r` of entry `e` at `e.addr + r * stride`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repeat {
    /// Each entry and its stride (its bytes and the bytes it skips).
    pub ents: Vec<(Klm, u64)>,
    pub count: u32,
}

/// How a bound key's bytes map onto memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// A KLM list: the entries' bytes in order.
    List(Vec<Klm>),
    /// A repeated block of entries.
    Repeat(Repeat),
}

impl Layout {
    /// Bytes the layout covers.
    pub(crate) fn total(&self) -> u64 {
        match self {
            Layout::List(k) => k.iter().map(|k| u64::from(k.len)).sum(),
            Layout::Repeat(r) => {
                r.ents.iter().map(|(k, _)| u64::from(k.len)).sum::<u64>() * u64::from(r.count)
            }
        }
    }

    /// Hands `f` the pieces of memory the layout maps `[off, off + len)` to, in order,
    /// as (MR key, address, bytes), until `f` returns false or the range is covered;
    /// the bytes of the range it does not cover.
    pub(crate) fn pieces(&self, mut off: u64, len: u64, mut f: impl FnMut(u32, u64, u64) -> bool) -> u64 {
        let mut left = len;
        let mut one = |k: &Klm, addr: u64, off: &mut u64, left: &mut u64| -> bool {
            let kl = u64::from(k.len);
            if *off >= kl {
                *off -= kl;
                return true;
            }
            let piece = (*left).min(kl - *off);
            let go = f(k.key, addr.wrapping_add(*off), piece);
            *off = 0;
            *left -= piece;
            go && *left > 0
        };
        match self {
            Layout::List(ks) => {
                for k in ks {
                    if left == 0 || !one(k, k.addr, &mut off, &mut left) {
                        break;
                    }
                }
            }
            Layout::Repeat(r) => {
                let block: u64 = r.ents.iter().map(|(k, _)| u64::from(k.len)).sum();
                if block == 0 {
                    return left;
                }
                let mut rep = off / block;
                off %= block;
                'outer: while left > 0 && rep < u64::from(r.count) {
                    for (k, stride) in &r.ents {
                        let addr = k.addr.wrapping_add(rep.wrapping_mul(*stride));
                        if !one(k, addr, &mut off, &mut left) {
                            break 'outer;
                        }
                    }
                    rep += 1;
                }
            }
        }
        left
    }
}

/// A valid (bound) key's translation: `[start, start + len)` maps onto its layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bound {
    pub start: u64,
    pub len: u64,
    /// `access::*` bits.
    pub access: u32,
    /// A type-2 window's QP.
    pub qpn: Option<u32>,
    pub layout: Layout,
}

/// How a key came to be free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freed {
    /// Never bound.
    Never,
    /// By a UMR (LOCAL_INV, or a type-1 bind of length 0) on this QP.
    Local(u32),
    /// By a SEND with invalidate that arrived at this QP.
    Remote(u32),
}

/// A window or indirect mkey.
#[derive(Debug, Clone)]
pub(crate) struct Mkey {
    pub kind: MkeyKind,
    pub pdn: u32,
    pub variant: u8,
    pub bound: Option<Bound>,
    pub freed: Freed,
}

/// A host's windows and indirect mkeys, by index.
#[derive(Debug)]
pub(crate) struct Mkeys {
    map: DirectMap<Mkey>,
    next: u32,
}

impl Default for Mkeys {
    fn default() -> Self {
        Mkeys { map: DirectMap::new(INDEX_BASE), next: INDEX_BASE }
    }
}

impl Mkeys {
    /// A new free key of `kind` in PD `pdn`; `None` when the index space is used up.
    pub(crate) fn alloc(&mut self, kind: MkeyKind, pdn: u32) -> Option<u32> {
        let i = self.map.next_free(self.next);
        if !(INDEX_BASE..=0xff_ffff).contains(&i) {
            return None;
        }
        self.next = i.wrapping_add(1);
        self.map.insert(i, Mkey { kind, pdn, variant: 0, bound: None, freed: Freed::Never });
        Some(i << 8)
    }

    /// The key's entry (by its index; the variant is not compared). A key whose index
    /// is below [`INDEX_BASE`] (an MR's, say) finds none: the table holds only
    /// indices it handed out, and a lookup compares the whole index.
    pub(crate) fn by_index(&self, key: u32) -> Option<&Mkey> {
        self.map.get(&(key >> 8))
    }

    pub(crate) fn by_index_mut(&mut self, key: u32) -> Option<&mut Mkey> {
        self.map.get_mut(&(key >> 8))
    }

    pub(crate) fn remove(&mut self, key: u32) -> Option<Mkey> {
        self.map.remove(&(key >> 8))
    }

    pub(crate) fn uses_pd(&self, pdn: u32) -> bool {
        self.map.values().any(|m| m.pdn == pdn)
    }
}

impl Mkey {
    /// Its current key, given its index's key.
    pub(crate) fn key(&self, any_key: u32) -> u32 {
        (any_key & !0xff) | u32::from(self.variant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(len: u32, key: u32, addr: u64) -> Klm {
        Klm { len, key, addr }
    }

    fn all(l: &Layout, off: u64, len: u64) -> (Vec<(u32, u64, u64)>, u64) {
        let mut v = Vec::new();
        let left = l.pieces(off, len, |key, addr, n| {
            v.push((key, addr, n));
            true
        });
        (v, left)
    }

    #[test]
    fn a_list_maps_offsets_entry_by_entry() {
        let l = Layout::List(vec![k(100, 1, 0x3000), k(28, 1, 0x1000), k(200, 2, 0x2000)]);
        assert_eq!(l.total(), 328);
        assert_eq!(all(&l, 90, 60), (vec![(1, 0x3000 + 90, 10), (1, 0x1000, 28), (2, 0x2000, 22)], 0));
        assert_eq!(all(&l, 300, 40), (vec![(2, 0x2000 + 172, 28)], 12), "past the end: 12 bytes uncovered");
        // A walk the callback stops.
        let mut n = 0;
        l.pieces(0, 328, |_, _, _| {
            n += 1;
            false
        });
        assert_eq!(n, 1);
    }

    #[test]
    fn a_repeated_block_maps_offsets_repetition_by_repetition() {
        // 16 bytes every 64 from 0x1000, then 8 every 16 from 0x8000; 4 repetitions.
        let l =
            Layout::Repeat(Repeat { ents: vec![(k(16, 7, 0x1000), 64), (k(8, 7, 0x8000), 16)], count: 4 });
        assert_eq!(l.total(), 96);
        assert_eq!(
            all(&l, 20, 30),
            (vec![(7, 0x8004, 4), (7, 0x1040, 16), (7, 0x8010, 8), (7, 0x1080, 2)], 0)
        );
        assert_eq!(all(&l, 90, 10), (vec![(7, 0x8030 + 2, 6)], 4));
    }
}
