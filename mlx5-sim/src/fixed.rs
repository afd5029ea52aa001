//! A list of at most `N` items kept inline (no heap allocation), for the per-train
//! bookkeeping of the packet wire, whose trains have a fixed upper size.

/// At most `N` items, in order, inline.
#[derive(Debug)]
pub(crate) struct Fixed<T, const N: usize> {
    items: [Option<T>; N],
    len: usize,
}

impl<T, const N: usize> Fixed<T, N> {
    pub(crate) fn new() -> Self {
        Fixed { items: std::array::from_fn(|_| None), len: 0 }
    }

    /// Appends `v`; false (and `v` dropped) when full.
    pub(crate) fn push(&mut self, v: T) -> bool {
        let Some(slot) = self.items.get_mut(self.len) else {
            return false;
        };
        *slot = Some(v);
        self.len += 1;
        true
    }

    /// Removes and returns the last item.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let last = self.len.checked_sub(1)?;
        self.len = last;
        self.items[last].take()
    }
}

impl<T, const N: usize> IntoIterator for Fixed<T, N> {
    type Item = T;
    type IntoIter = std::iter::Flatten<std::iter::Take<std::array::IntoIter<Option<T>, N>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().take(self.len).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_n_in_order() {
        let mut f: Fixed<u32, 3> = Fixed::new();
        assert_eq!(f.pop(), None);
        assert!(f.push(1) && f.push(2) && f.push(3));
        assert!(!f.push(4), "full");
        assert_eq!(f.pop(), Some(3));
        assert!(f.push(5));
        assert_eq!(f.into_iter().collect::<Vec<_>>(), [1, 2, 5]);
    }
}
