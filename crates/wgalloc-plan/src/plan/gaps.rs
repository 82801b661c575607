//! [`FreeMemory`]: one memory's free gaps below its top, for a best fit and for
//! merging.
//!
//! Both of the O(n log n) placements (ggml's walk over intervals and the offline
//! planners' sweep) free and take ranges in time order. The gaps are kept by `(length,
//! offset)` in one ordered set, whose first entry at or above a size is the best fit
//! (the smallest gap that holds it, the lowest of equal ones), and by start and by end
//! in two hash maps, so that a freed range finds the gaps it merges with by two exact
//! lookups, not two searches of an ordered map. A freed range that reaches the top
//! goes back to it, so no gap ever ends at the top.

use std::collections::{BTreeSet, HashMap};

use super::free_blocks::OffsetHash;

/// Disjoint, never adjacent free ranges (neighbours are merged on insert).
#[derive(Debug, Default)]
struct FreeGaps {
    /// `(length, offset)`.
    by_len: BTreeSet<(u64, u64)>,
    /// `offset -> length`.
    by_start: HashMap<u64, u64, OffsetHash>,
    /// `offset + length -> offset`.
    by_end: HashMap<u64, u64, OffsetHash>,
}

impl FreeGaps {
    /// Records the gap `[offset, offset + len)`.
    fn insert(&mut self, offset: u64, len: u64) {
        // A zero-length gap would share its end with the start of the next one.
        debug_assert!(len > 0, "an empty gap at {offset}");
        self.by_len.insert((len, offset));
        self.by_start.insert(offset, len);
        self.by_end.insert(offset + len, offset);
    }

    /// Forgets the gap `[offset, offset + len)`.
    fn remove(&mut self, offset: u64, len: u64) {
        self.by_len.remove(&(len, offset));
        self.by_start.remove(&offset);
        self.by_end.remove(&(offset + len));
    }

    /// The smallest gap at least `size` long (the lowest of equal ones), as `(offset,
    /// length)`. O(log gaps).
    fn best_fit(&self, size: u64) -> Option<(u64, u64)> {
        self.by_len
            .range((size, 0)..)
            .next()
            .map(|&(len, offset)| (offset, len))
    }

    /// Takes `size` bytes from the start of the gap `(offset, len)` (`len >= size`).
    fn take_from(&mut self, offset: u64, len: u64, size: u64) {
        self.remove(offset, len);
        if len > size {
            self.insert(offset + size, len - size);
        }
    }

    /// The gap that ends at `end`, as `(offset, length)`. O(1).
    fn ending_at(&self, end: u64) -> Option<(u64, u64)> {
        self.by_end.get(&end).map(|&start| (start, end - start))
    }

    /// The gap that starts at `start`, as `(offset, length)`. O(1).
    fn starting_at(&self, start: u64) -> Option<(u64, u64)> {
        self.by_start.get(&start).map(|&len| (start, len))
    }

    /// Frees `[offset, offset + size)`, merged with the gaps just before and after it;
    /// returns the merged range `(start, end)` without recording it.
    fn merge_around(&mut self, offset: u64, size: u64) -> (u64, u64) {
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

/// One memory: the free gaps below its top, the top, and the highest top reached.
#[derive(Debug, Default)]
pub(crate) struct FreeMemory {
    gaps: FreeGaps,
    /// One past the highest byte in use.
    top: u64,
    /// The highest `top` reached.
    high_water: u64,
}

impl FreeMemory {
    /// An empty memory whose bytes below `base` are not its to give.
    pub(crate) fn above(base: u64) -> FreeMemory {
        FreeMemory {
            top: base,
            high_water: base,
            ..FreeMemory::default()
        }
    }

    /// The highest top reached.
    pub(crate) fn high_water(&self) -> u64 {
        self.high_water
    }

    /// The offset of `size` bytes: the best-fitting gap, cut from its start, else the
    /// top. `None` if the top would pass 2^64. O(log gaps).
    pub(crate) fn take(&mut self, size: u64) -> Option<u64> {
        if let Some((offset, len)) = self.gaps.best_fit(size) {
            self.gaps.take_from(offset, len, size);
            return Some(offset);
        }
        let offset = self.top;
        self.top = offset.checked_add(size)?;
        self.high_water = self.high_water.max(self.top);
        Some(offset)
    }

    /// Gives back `[offset, offset + size)`, taken and not given back before: it
    /// merges with the gaps around it, or goes back to the top with the gap just below
    /// it.
    pub(crate) fn give(&mut self, offset: u64, size: u64) {
        let (start, end) = self.gaps.merge_around(offset, size);
        if end >= self.top {
            self.top = start;
        } else {
            self.gaps.insert(start, end - start);
        }
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

    #[test]
    fn memory_reuses_the_best_gap_and_gives_back_to_its_top() {
        let mut memory = FreeMemory::above(100);
        let a = memory.take(10).expect("fits");
        let b = memory.take(20).expect("fits");
        let c = memory.take(5).expect("fits");
        assert_eq!((a, b, c), (100, 110, 130));
        memory.give(a, 10);
        assert_eq!(memory.take(4), Some(100), "the freed gap, not the top");
        memory.give(c, 5);
        memory.give(b, 20);
        // b and c went back to the top, with the 6 bytes left of a's gap.
        assert_eq!(memory.take(30), Some(104));
        assert_eq!(memory.high_water(), 135);
        assert_eq!(FreeMemory::above(u64::MAX).take(1), None);
    }
}
