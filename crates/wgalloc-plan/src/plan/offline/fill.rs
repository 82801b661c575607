//! Filling the holes of a partial placement: the items a greedy order did not reach
//! (the smallest, in an order by size) placed into the free space the placed ones
//! leave, by one sweep over time, instead of above them all.
//!
//! The sweep visits the sections in order. At each it frees the items that end there,
//! takes the place of the placed ("fixed") items that start there, and places the
//! items to fill that start there, the largest first. The free space of the moment is
//! a book of gaps ([`Gaps`]); a gap that is free now may not stay free, since a fixed
//! item may start in it later, so each candidate position is checked against the
//! fixed items still to start: [`Pending`] gives the earliest section at which one of
//! them covers a range of offsets. A position holds an item `[a, b)` where that
//! section is at or after `b`. Items to fill placed earlier are in the book while they
//! live, so later ones avoid them, and the result is valid by construction.
//!
//! An item tries the [`CANDIDATES`] smallest gaps that hold it (the best fit), at each
//! gap's bottom and then its top; where none stays free long enough it goes to the
//! free space above everything live, or above every fixed item where a fixed item is
//! still to start there. After a deadline the rest go above everything by the sweep.
//!
//! Cost: O(n log n) to sort the events, O(f log F) per fixed item (its place in the
//! book, and its [`Pending`] nodes, F fixed items), and per item to fill
//! O(CANDIDATES log F) at most: no overlap lists. Memory O(F log F) for
//! [`Pending`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::elementary;
use super::out_of_time;
use super::prepared::Prepared;

/// Gaps an item to fill tries (the smallest that hold it first) before it goes above
/// everything: a bound on the work per item.
const CANDIDATES: usize = 64;

/// How many items to fill are placed between two looks at the clock.
const CLOCK_EVERY: usize = 256;

/// The free space below the top at one moment: disjoint, never adjacent gaps, by start
/// (to find the gap around an offset) and by `(length, start)` (the best fit).
#[derive(Debug, Default)]
struct Gaps {
    /// `start -> end`.
    by_start: BTreeMap<u64, u64>,
    /// `(length, start)`.
    by_len: BTreeSet<(u64, u64)>,
    /// Everything at or above this is free.
    top: u64,
    /// The highest top reached.
    high_water: u64,
}

impl Gaps {
    fn insert(&mut self, start: u64, end: u64) {
        self.by_start.insert(start, end);
        self.by_len.insert((end - start, start));
    }

    fn remove(&mut self, start: u64, end: u64) {
        self.by_start.remove(&start);
        self.by_len.remove(&(end - start, start));
    }

    /// Marks `[offset, offset + size)` used; it must be free. O(log gaps).
    fn occupy(&mut self, offset: u64, size: u64) {
        let end = offset + size;
        if offset >= self.top {
            if offset > self.top {
                self.insert(self.top, offset);
            }
            self.top = end;
            self.high_water = self.high_water.max(end);
            return;
        }
        let (&start, &gap_end) = self
            .by_start
            .range(..=offset)
            .next_back()
            .expect("an occupied range lies in a free gap");
        debug_assert!(gap_end >= end, "[{offset}, {end}) is not free");
        self.remove(start, gap_end);
        if start < offset {
            self.insert(start, offset);
        }
        if end < gap_end {
            self.insert(end, gap_end);
        }
    }

    /// Frees `[offset, offset + size)`, merged with its neighbours (or the top).
    fn release(&mut self, offset: u64, size: u64) {
        let (mut start, mut end) = (offset, offset + size);
        if let Some((&before, &before_end)) = self.by_start.range(..start).next_back() {
            if before_end == start {
                self.remove(before, before_end);
                start = before;
            }
        }
        if let Some(&after_end) = self.by_start.get(&end) {
            self.remove(end, after_end);
            end = after_end;
        }
        if end >= self.top {
            self.top = start;
        } else {
            self.insert(start, end);
        }
    }

    /// Up to `count` gaps at least `size` long, the smallest first (the lowest of equal
    /// ones), as `(start, end)`.
    fn best_fits(&self, size: u64, count: usize) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_len
            .range((size, 0)..)
            .take(count)
            .map(|&(len, start)| (start, start + len))
    }
}

/// The fixed items still to start, by the offsets they cover: a segment tree over the
/// elementary ranges between their boundaries, each item kept at the O(log F) nodes
/// that cover its range, each node's items in start order behind a cursor that passes
/// the started ones, and each node's earliest pending start over its subtree.
#[derive(Debug)]
struct Pending {
    /// The fixed items' range boundaries, sorted, with 0 and `u64::MAX`.
    bounds: Vec<u64>,
    /// Leaves of the tree (a power of two, at least the elementary ranges).
    leaves: usize,
    /// Node `v`'s starts are `starts[first[v]..first[v + 1]]`, ascending.
    first: Vec<u32>,
    starts: Vec<u32>,
    /// Node `v`'s first start not yet passed.
    cursor: Vec<u32>,
    /// The earliest pending start at node `v` or below it (`u32::MAX`: none).
    earliest: Vec<u32>,
}

impl Pending {
    /// The fixed items (`fixed`, item positions in start order) placed at `offsets`.
    fn new(p: &Prepared, fixed: &[usize], offsets: &[u64]) -> Pending {
        let bounds = elementary::boundaries(p, fixed, offsets);
        let leaves = (bounds.len() - 1).next_power_of_two();
        let mut pending = Pending {
            bounds,
            leaves,
            first: vec![0; 2 * leaves + 1],
            starts: Vec::new(),
            cursor: vec![0; 2 * leaves],
            earliest: vec![u32::MAX; 2 * leaves],
        };
        // Counting pass, then the items in start order into each node's slice.
        let mut nodes = Vec::new();
        for &i in fixed {
            pending.cover(offsets[i], p.items[i].size, &mut nodes);
            for &v in &nodes {
                pending.first[v + 1] += 1;
            }
        }
        for v in 1..pending.first.len() {
            pending.first[v] += pending.first[v - 1];
        }
        pending.starts = vec![0; pending.first[2 * leaves] as usize];
        let mut next: Vec<u32> = pending.first[..2 * leaves].to_vec();
        for &i in fixed {
            pending.cover(offsets[i], p.items[i].size, &mut nodes);
            for &v in &nodes {
                pending.starts[next[v] as usize] = p.items[i].a;
                next[v] += 1;
            }
        }
        pending.cursor.copy_from_slice(&pending.first[..2 * leaves]);
        for v in (1..2 * leaves).rev() {
            pending.earliest[v] = pending.own(v).min(pending.below(v));
        }
        pending
    }

    /// The elementary ranges `[l, r)` that `[offset, offset + size)` meets.
    fn range(&self, offset: u64, size: u64) -> (usize, usize) {
        elementary::ranges_of(&self.bounds, offset, size)
    }

    /// Calls `visit` on each node of the canonical cover of the elementary ranges
    /// `[l, r)` ([`elementary::for_each_cover`]).
    fn for_each_cover(&self, l: usize, r: usize, visit: impl FnMut(usize)) {
        elementary::for_each_cover(self.leaves, l, r, visit);
    }

    /// The nodes covering the elementary ranges of `[offset, offset + size)`.
    fn cover(&self, offset: u64, size: u64, nodes: &mut Vec<usize>) {
        nodes.clear();
        let (l, r) = self.range(offset, size);
        self.for_each_cover(l, r, |v| nodes.push(v));
    }

    /// Node `v`'s earliest pending start of its own.
    fn own(&self, v: usize) -> u32 {
        let at = self.cursor[v];
        if at < self.first[v + 1] {
            self.starts[at as usize]
        } else {
            u32::MAX
        }
    }

    /// The earliest pending start below node `v`.
    fn below(&self, v: usize) -> u32 {
        if v < self.leaves {
            self.earliest[2 * v].min(self.earliest[2 * v + 1])
        } else {
            u32::MAX
        }
    }

    /// Passes the fixed item at `[offset, offset + size)` that starts at `section`
    /// (and any other at its nodes started by then). O(log^2 F).
    fn start(&mut self, offset: u64, size: u64, section: u32, nodes: &mut Vec<usize>) {
        self.cover(offset, size, nodes);
        for &v in nodes.iter() {
            while self.cursor[v] < self.first[v + 1]
                && self.starts[self.cursor[v] as usize] <= section
            {
                self.cursor[v] += 1;
            }
            let mut up = v;
            while up >= 1 {
                self.earliest[up] = self.own(up).min(self.below(up));
                up >>= 1;
            }
        }
    }

    /// The earliest section at which a pending fixed item covers part of `[offset,
    /// offset + size)` (`u32::MAX`: never): the subtree minimum of each node that
    /// covers part of the range, and the own items of every node above them, all of
    /// which lie on the paths from the range's first and last elementary ranges to the
    /// root (each such node covers one of those two, inside the range). O(log F).
    fn earliest(&self, offset: u64, size: u64) -> u32 {
        let (l, r) = self.range(offset, size);
        let mut earliest = u32::MAX;
        self.for_each_cover(l, r, |v| earliest = earliest.min(self.earliest[v]));
        for leaf in [l, r - 1] {
            let mut up = (leaf + self.leaves) >> 1;
            while up >= 1 {
                earliest = earliest.min(self.own(up));
                up >>= 1;
            }
        }
        earliest
    }
}

/// Places the items at positions `rest` into the free space that every other item,
/// placed at `offsets`, leaves (see the module); writes their `offsets` and returns the
/// peak of the whole placement. Once the time left before `deadline` is what sweeping
/// the items still to place takes (`sweep_per_item` each; looked at every
/// [`CLOCK_EVERY`] items and every [`CLOCK_EVERY`] events of the items placed before),
/// they go above everything placed so far, by the O(n log n) sweep
/// ([`super::sweep::place_above`]).
pub(crate) fn place_into(
    p: &Prepared,
    rest: &[usize],
    offsets: &mut [u64],
    deadline: Option<Instant>,
    sweep_per_item: Duration,
) -> u64 {
    let mut to_fill = vec![false; p.items.len()];
    for &i in rest {
        to_fill[i] = true;
    }
    let mut fixed: Vec<usize> = (0..p.items.len()).filter(|&i| !to_fill[i]).collect();
    fixed.sort_unstable_by_key(|&i| p.items[i].a);
    let fixed_peak = fixed
        .iter()
        .map(|&i| offsets[i] + p.items[i].size)
        .max()
        .unwrap_or(0);
    let mut pending = Pending::new(p, &fixed, offsets);
    let mut filling: Vec<usize> = rest.to_vec();
    filling.sort_unstable_by_key(|&i| (p.items[i].a, std::cmp::Reverse(p.items[i].size), i));
    let mut ends: Vec<usize> = (0..p.items.len()).collect();
    ends.sort_unstable_by_key(|&i| p.items[i].b);
    let mut gaps = Gaps::default();
    let mut nodes = Vec::new();
    let (mut next_end, mut next_fixed) = (0usize, 0usize);
    // Events passed, for the looks at the clock between items' events too: near the
    // end of a long order an item's events may be those of most of the items.
    let mut events = 0usize;
    for (k, &i) in filling.iter().enumerate() {
        let it = &p.items[i];
        let out_of_time_now =
            || deadline.is_some_and(|d| out_of_time(d, sweep_per_item, filling.len() - k));
        let mut late = false;
        // The events up to this item's start, in time order (an end before a start at
        // the same section): every item to fill that ends by then was placed before.
        loop {
            let end = ends.get(next_end).map(|&j| p.items[j].b);
            let start = fixed.get(next_fixed).map(|&j| p.items[j].a);
            match (end.filter(|&b| b <= it.a), start.filter(|&a| a <= it.a)) {
                (Some(b), start) if start.is_none_or(|a| b <= a) => {
                    let j = ends[next_end];
                    gaps.release(offsets[j], p.items[j].size);
                    next_end += 1;
                }
                (_, Some(_)) => {
                    let jt = &p.items[fixed[next_fixed]];
                    let offset = offsets[fixed[next_fixed]];
                    gaps.occupy(offset, jt.size);
                    pending.start(offset, jt.size, jt.a, &mut nodes);
                    next_fixed += 1;
                }
                _ => break,
            }
            events += 1;
            if events.is_multiple_of(CLOCK_EVERY) && out_of_time_now() {
                late = true;
                break;
            }
        }
        if late || k % CLOCK_EVERY == 0 && out_of_time_now() {
            // Out of time: the rest by the sweep, above everything placed so far.
            let base = fixed_peak.max(gaps.high_water);
            let top = super::sweep::place_above(p, &filling[k..], base, offsets);
            return top.max(base);
        }
        let free_until = |offset: u64| pending.earliest(offset, it.size) >= it.b;
        let found = gaps
            .best_fits(it.size, CANDIDATES)
            .flat_map(|(start, end)| [start, end - it.size])
            .find(|&offset| free_until(offset));
        // Above everything live (nothing live is at or above the top): the top where no
        // fixed item is still to start there, else above every fixed item.
        let offset = found.unwrap_or_else(|| {
            if gaps.top >= fixed_peak || free_until(gaps.top) {
                gaps.top
            } else {
                fixed_peak
            }
        });
        offsets[i] = offset;
        gaps.occupy(offset, it.size);
    }
    // The fixed items that start after the last item to fill reach the high water too.
    fixed_peak.max(gaps.high_water)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy;
    use crate::plan::offline::index::OverlapIndex;
    use crate::plan::offline::LiveRange;
    use crate::seeded::Rng;

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    #[test]
    fn an_item_fills_a_hole_that_stays_free_for_its_lifetime() {
        // 0: [0,10) at 0, size 4; 1: [0,3) at 4, size 4; 2: [5,10) at 4, size 4.
        // Item 3, [3,5) size 4, fits in the hole 1 leaves until 2 starts; item 4,
        // [3,6) size 2, does not (2 starts at 5) and goes above: at 8.
        let p = Prepared::new(
            &[r(0, 10, 4), r(0, 3, 4), r(5, 10, 4), r(3, 5, 4), r(3, 6, 2)],
            1,
        )
        .expect("valid");
        let mut offsets = vec![0, 4, 4, u64::MAX, u64::MAX];
        let peak = place_into(&p, &[3, 4], &mut offsets, None, Duration::ZERO);
        assert_eq!(offsets[3], 4, "the hole between 1 and 2");
        assert_eq!(offsets[4], 8, "above: the hole closes at 5");
        assert_eq!(peak, 10);
        p.assert_valid(&offsets, peak);
    }

    #[test]
    fn the_book_merges_freed_ranges_and_gives_back_to_the_top() {
        let mut gaps = Gaps::default();
        gaps.occupy(0, 10);
        gaps.occupy(20, 5);
        assert_eq!(gaps.top, 25);
        assert_eq!(gaps.best_fits(1, 8).collect::<Vec<_>>(), vec![(10, 20)]);
        gaps.occupy(12, 3);
        assert_eq!(
            gaps.best_fits(1, 8).collect::<Vec<_>>(),
            vec![(10, 12), (15, 20)]
        );
        gaps.release(12, 3);
        gaps.release(20, 5);
        assert_eq!(gaps.top, 10, "everything above 10 is free again");
        assert_eq!(gaps.best_fits(1, 8).count(), 0);
        assert_eq!(gaps.high_water, 25);
    }

    #[test]
    fn pending_gives_the_earliest_start_over_a_range_of_offsets() {
        let ranges = [r(5, 9, 4), r(2, 4, 4), r(7, 8, 8)];
        let p = Prepared::new(&ranges, 1).expect("valid");
        let offsets = [0u64, 4, 0];
        // Sections: the boundaries 2,4,5,7,8,9 are sections 0..5.
        let (a0, a1, a2) = (p.items[0].a, p.items[1].a, p.items[2].a);
        let mut fixed: Vec<usize> = vec![0, 1, 2];
        fixed.sort_by_key(|&i| p.items[i].a);
        let mut pending = Pending::new(&p, &fixed, &offsets);
        let mut nodes = Vec::new();
        assert_eq!(pending.earliest(0, 4), a0.min(a2));
        assert_eq!(pending.earliest(4, 4), a1.min(a2));
        assert_eq!(pending.earliest(8, 8), u32::MAX);
        pending.start(4, 4, a1, &mut nodes);
        assert_eq!(pending.earliest(4, 4), a2);
        pending.start(0, 4, a0, &mut nodes);
        pending.start(0, 8, a2, &mut nodes);
        assert_eq!(pending.earliest(0, 8), u32::MAX);
    }

    #[test]
    fn filled_placements_are_valid_on_random_instances() {
        let mut rng = Rng::new(29);
        for case in 0..1500 {
            let n = 2 + rng.index(80);
            let ranges: Vec<LiveRange> = (0..n)
                .map(|_| {
                    let start = rng.index(50) as u64;
                    r(
                        start,
                        start + 1 + rng.index(20) as u64,
                        1 + rng.index(40) as u64,
                    )
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            // A greedy prefix (largest first) fixed, the rest filled.
            let order = greedy::by_size(&p);
            let cut = rng.index(p.items.len() + 1);
            let (fixed, rest) = order.split_at(cut);
            let index = OverlapIndex::new(&p);
            let (mut offsets, _) = greedy::place(&p, &index, fixed, greedy::Fit::Lowest);
            let before: Vec<u64> = fixed.iter().map(|&i| offsets[i]).collect();
            let peak = place_into(&p, rest, &mut offsets, None, Duration::ZERO);
            p.assert_valid(&offsets, peak);
            assert_eq!(peak, p.peak_of(&offsets), "case {case}");
            let after: Vec<u64> = fixed.iter().map(|&i| offsets[i]).collect();
            assert_eq!(before, after, "case {case}: a fixed item moved");
        }
    }

    #[test]
    fn after_the_deadline_every_item_goes_above_and_the_plan_stays_valid() {
        let mut rng = Rng::new(31);
        let ranges: Vec<LiveRange> = (0..400)
            .map(|_| {
                let start = rng.index(300) as u64;
                r(
                    start,
                    start + 1 + rng.index(60) as u64,
                    1 + rng.index(100) as u64,
                )
            })
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order = greedy::by_size(&p);
        let rest = &order[100..];
        let (mut offsets, _) = crate::plan::offline::sweep::place(&p);
        let peak = place_into(&p, rest, &mut offsets, Some(Instant::now()), Duration::ZERO);
        p.assert_valid(&offsets, peak);
    }
}
