//! [`FreeGaps`]: free byte ranges of one memory, kept for a best fit and for merging.
//!
//! Both of the O(n log n) placements (ggml's walk over intervals and the offline
//! planners' sweep) free and take ranges in time order. The gaps are kept by `(length,
//! offset)` in one ordered set, whose first entry at or above a size is the best fit
//! (the smallest gap that holds it, the lowest of equal ones), and by start and by end
//! in two hash maps, so that a freed range finds the gaps it merges with by two exact
//! lookups, not two searches of an ordered map. What happens at the top of the used
//! memory is the caller's rule.

use std::collections::{BTreeSet, HashMap};

use super::free_blocks::OffsetHash;

/// Disjoint, never adjacent free ranges (the callers merge neighbours on insert).
#[derive(Debug, Default)]
pub(crate) struct FreeGaps {
    /// `(length, offset)`.
    by_len: BTreeSet<(u64, u64)>,
    /// `offset -> length`.
    by_start: HashMap<u64, u64, OffsetHash>,
    /// `offset + length -> offset`.
    by_end: HashMap<u64, u64, OffsetHash>,
}

impl FreeGaps {
    /// Records the gap `[offset, offset + len)`.
    pub(crate) fn insert(&mut self, offset: u64, len: u64) {
        // A zero-length gap would share its end with the start of the next one.
        debug_assert!(len > 0, "an empty gap at {offset}");
        self.by_len.insert((len, offset));
        self.by_start.insert(offset, len);
        self.by_end.insert(offset + len, offset);
    }

    /// Forgets the gap `[offset, offset + len)`.
    pub(crate) fn remove(&mut self, offset: u64, len: u64) {
        self.by_len.remove(&(len, offset));
        self.by_start.remove(&offset);
        self.by_end.remove(&(offset + len));
    }

    /// The smallest gap at least `size` long (the lowest of equal ones), as `(offset,
    /// length)`. O(log gaps).
    pub(crate) fn best_fit(&self, size: u64) -> Option<(u64, u64)> {
        self.by_len
            .range((size, 0)..)
            .next()
            .map(|&(len, offset)| (offset, len))
    }

    /// Takes `size` bytes from the start of the gap `(offset, len)` (`len >= size`).
    pub(crate) fn take_from(&mut self, offset: u64, len: u64, size: u64) {
        self.remove(offset, len);
        if len > size {
            self.insert(offset + size, len - size);
        }
    }

    /// The gap that ends at `end`, as `(offset, length)`. O(1).
    pub(crate) fn ending_at(&self, end: u64) -> Option<(u64, u64)> {
        self.by_end.get(&end).map(|&start| (start, end - start))
    }

    /// The gap that starts at `start`, as `(offset, length)`. O(1).
    pub(crate) fn starting_at(&self, start: u64) -> Option<(u64, u64)> {
        self.by_start.get(&start).map(|&len| (start, len))
    }

    /// Frees `[offset, offset + size)`, merged with the gaps just before and after it;
    /// returns the merged range `(start, end)` without recording it: the caller
    /// records it as a gap, or lowers its top to it.
    pub(crate) fn merge_around(&mut self, offset: u64, size: u64) -> (u64, u64) {
        let (mut start, mut end) = (offset, offset + size);
        if let Some((o, len)) = self.ending_at(start) {
            self.remove(o, len);
            start = o;
        }
        if let Some((o, len)) = self.starting_at(end) {
            self.remove(o, len);
            end = o + len;
        }
        (start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_fit_is_the_smallest_then_lowest_gap() {
        let mut gaps = FreeGaps::default();
        gaps.insert(100, 10);
        gaps.insert(0, 20);
        gaps.insert(50, 10);
        assert_eq!(gaps.best_fit(5), Some((50, 10)));
        assert_eq!(gaps.best_fit(11), Some((0, 20)));
        assert_eq!(gaps.best_fit(21), None);
        gaps.take_from(50, 10, 4);
        assert_eq!(gaps.best_fit(5), Some((54, 6)));
        assert_eq!(gaps.starting_at(50), None);
    }

    #[test]
    fn a_freed_range_merges_with_both_neighbours() {
        let mut gaps = FreeGaps::default();
        gaps.insert(0, 10);
        gaps.insert(20, 5);
        assert_eq!(gaps.merge_around(10, 10), (0, 25));
        assert_eq!(
            gaps.best_fit(1),
            None,
            "the caller records the merged range"
        );
        gaps.insert(0, 25);
        assert_eq!(gaps.ending_at(25), Some((0, 25)));
        assert_eq!(gaps.merge_around(30, 5), (30, 35));
    }
}
