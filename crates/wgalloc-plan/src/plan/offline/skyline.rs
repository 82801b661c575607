//! Lowest-floor-first placement ("skyline"): the first descent of MiniMalloc's search,
//! without backtracking. Every section of the time axis has a height (the top of the
//! highest item placed there); an unplaced item's *floor* is the largest height over
//! its sections. At each step the item with the lowest floor is placed on it (ties: the
//! earlier item of a static order), raising its sections to its top. Offsets never go
//! down, so a gap left below a floor is never filled again; in exchange a step costs
//! O(log T) plus the heap operations, with no overlap lists: 28,526 buffers take a few
//! milliseconds.
//!
//! Floors only rise, so the heap holds a lower estimate per item and re-checks it when
//! the item comes out on top (lazy update): an item whose floor rose goes back in with
//! the new one.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::BinaryHeap;

use std::time::Instant;

use super::greedy::{self, Key, Order};
use super::prepared::Prepared;

/// Heights per section, for the skyline: range maximum and range raise. Up to
/// [`TREE_SECTIONS`] sections a tree ([`TreeHeights`], O(log T) an operation, its
/// arrays small enough to stay in cache); beyond, two levels of blocks
/// ([`BlockHeights`], adjacent entries only), which on the long lifetimes of large
/// traces took a quarter of the tree's time a heap pop.
pub(crate) enum Heights {
    /// Up to [`TREE_SECTIONS`] sections.
    Tree(TreeHeights),
    /// More sections.
    Blocks(BlockHeights),
}

/// See [`Heights`].
const TREE_SECTIONS: usize = 1 << 17;

impl Heights {
    /// All heights zero over `sections` sections.
    pub fn new(sections: usize) -> Heights {
        if sections <= TREE_SECTIONS {
            Heights::Tree(TreeHeights::new(sections))
        } else {
            Heights::Blocks(BlockHeights::new(sections))
        }
    }

    /// The largest height over sections `[a, b)` (`a < b <= sections`).
    pub fn max_in(&self, a: usize, b: usize) -> u64 {
        match self {
            Heights::Tree(h) => h.max_in(a, b),
            Heights::Blocks(h) => h.max_in(a, b),
        }
    }

    /// Raises sections `[a, b)` (`a < b <= sections`) to at least `height`.
    pub fn raise(&mut self, a: usize, b: usize, height: u64) {
        match self {
            Heights::Tree(h) => h.raise(a, b, height),
            Heights::Blocks(h) => h.raise(a, b, height),
        }
    }
}

/// Heights per section: range maximum and range raise in O(log T), bottom-up with no
/// pushing down (heights only rise).
pub(crate) struct TreeHeights {
    /// Leaves (a power of two, at least the section count); leaf `s` is node
    /// `leaves + s`, the root node 1.
    leaves: usize,
    /// `tag[v]`: a height every section of node `v` has reached (the largest raise
    /// whose canonical cover included `v`).
    tag: Vec<u64>,
    /// `max[v]`: the largest height of a section of node `v`, counting raises at `v`
    /// and below (not those at its ancestors).
    max: Vec<u64>,
    /// The heights again, for short ranges (up to [`FLAT_SPAN`] sections), which read
    /// them here instead of walking the tree: section `s` has height
    /// `max(flat[s], block[s / TREE_BLOCK])`. A raise writes the sections of the blocks it
    /// covers in part and the tags of those it covers whole: O(TREE_BLOCK + length / TREE_BLOCK).
    flat: Vec<u64>,
    /// A height every section of the block has reached.
    block: Vec<u64>,
}

/// Ranges up to this many sections read [`TreeHeights::flat`] instead of the tree.
const FLAT_SPAN: usize = 16;

/// Sections per block of [`Heights::block`].
const TREE_BLOCK: usize = 64;

impl TreeHeights {
    /// All heights zero over `sections` sections.
    pub fn new(sections: usize) -> TreeHeights {
        let leaves = sections.max(1).next_power_of_two();
        TreeHeights {
            leaves,
            tag: vec![0; 2 * leaves],
            max: vec![0; 2 * leaves],
            flat: vec![0; leaves],
            block: vec![0; leaves.div_ceil(TREE_BLOCK)],
        }
    }

    /// The largest height over sections `[a, b)` (`a < b <= sections`).
    pub fn max_in(&self, a: usize, b: usize) -> u64 {
        if b - a <= FLAT_SPAN {
            let sections = self.flat[a..b].iter().copied().max().unwrap_or(0);
            return sections
                .max(self.block[a / TREE_BLOCK])
                .max(self.block[(b - 1) / TREE_BLOCK]);
        }
        // Every node that covers part of [a, b) and more is an ancestor of the leaf of
        // `a` or of `b - 1`: their tags hold for a section in range.
        let mut best = self.path_tags(a, b - 1);
        let (mut l, mut r) = (a + self.leaves, b + self.leaves);
        while l < r {
            if l & 1 == 1 {
                best = best.max(self.max[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                best = best.max(self.max[r]);
            }
            l >>= 1;
            r >>= 1;
        }
        best
    }

    /// Raises sections `[a, b)` (`a < b <= sections`) to at least `height`.
    pub fn raise(&mut self, a: usize, b: usize, height: u64) {
        let (first, last) = (a.div_ceil(TREE_BLOCK), b / TREE_BLOCK);
        if first >= last {
            // No whole block: the sections one by one (at most two blocks' worth).
            self.flat[a..b]
                .iter_mut()
                .for_each(|h| *h = (*h).max(height));
        } else {
            let (head, tail) = (a..first * TREE_BLOCK, last * TREE_BLOCK..b);
            for s in head.chain(tail) {
                self.flat[s] = self.flat[s].max(height);
            }
            self.block[first..last]
                .iter_mut()
                .for_each(|h| *h = (*h).max(height));
        }
        let (mut l, mut r) = (a + self.leaves, b + self.leaves);
        while l < r {
            if l & 1 == 1 {
                self.tag[l] = self.tag[l].max(height);
                self.max[l] = self.max[l].max(height);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.tag[r] = self.tag[r].max(height);
                self.max[r] = self.max[r].max(height);
            }
            l >>= 1;
            r >>= 1;
        }
        // Every ancestor of the boundary leaves holds a raised section.
        let (mut u, mut v) = ((a + self.leaves) >> 1, (b - 1 + self.leaves) >> 1);
        while u != v {
            self.max[u] = self.max[u].max(height);
            self.max[v] = self.max[v].max(height);
            u >>= 1;
            v >>= 1;
        }
        while u >= 1 {
            self.max[u] = self.max[u].max(height);
            u >>= 1;
        }
    }

    /// The largest tag on the paths from the leaves of sections `s <= t` to the root.
    fn path_tags(&self, s: usize, t: usize) -> u64 {
        let (mut u, mut v) = (s + self.leaves, t + self.leaves);
        let mut best = 0;
        while u != v {
            best = best.max(self.tag[u]).max(self.tag[v]);
            u >>= 1;
            v >>= 1;
        }
        while u >= 1 {
            best = best.max(self.tag[u]);
            u >>= 1;
        }
        best
    }
}

/// Heights per section: range maximum and range raise in two levels of blocks
/// ([`BLOCK`] sections, and super-blocks of [`BLOCK`] blocks), each level holding the
/// largest height in it and a height all of it has reached (heights only rise, so
/// nothing is pushed down). An operation on `len` sections touches at most
/// `4 * BLOCK + len / BLOCK^2` entries, all in runs of adjacent ones: on the long
/// lifetimes of large traces far fewer cache misses than the walks of a tree.
pub(crate) struct BlockHeights {
    /// Height raised at each section by raises that covered it only in part of its
    /// block.
    flat: Vec<u64>,
    /// A height every section of the block has reached.
    block_tag: Vec<u64>,
    /// The largest height in the block, but for super-block tags.
    block_max: Vec<u64>,
    /// A height every section of the super-block has reached.
    super_tag: Vec<u64>,
    /// The largest height in the super-block.
    super_max: Vec<u64>,
}

/// Sections per block, and blocks per super-block.
const BLOCK: usize = 64;

/// Sections per super-block.
const SUPER: usize = BLOCK * BLOCK;

impl BlockHeights {
    /// All heights zero over `sections` sections.
    pub fn new(sections: usize) -> BlockHeights {
        let sections = sections.max(1);
        let blocks = sections.div_ceil(BLOCK);
        let supers = sections.div_ceil(SUPER);
        BlockHeights {
            flat: vec![0; sections],
            block_tag: vec![0; blocks],
            block_max: vec![0; blocks],
            super_tag: vec![0; supers],
            super_max: vec![0; supers],
        }
    }

    /// The largest height over sections `[a, b)` inside one block.
    fn max_in_block(&self, a: usize, b: usize) -> u64 {
        let flat = self.flat[a..b].iter().copied().max().unwrap_or(0);
        flat.max(self.block_tag[a / BLOCK])
            .max(self.super_tag[a / SUPER])
    }

    /// Raises sections `[a, b)` inside one block.
    fn raise_in_block(&mut self, a: usize, b: usize, height: u64) {
        self.flat[a..b]
            .iter_mut()
            .for_each(|h| *h = (*h).max(height));
        self.block_max[a / BLOCK] = self.block_max[a / BLOCK].max(height);
        self.super_max[a / SUPER] = self.super_max[a / SUPER].max(height);
    }

    /// The largest height over sections `[a, b)` (`a < b <= sections`).
    pub fn max_in(&self, a: usize, b: usize) -> u64 {
        let head = b.min(a.next_multiple_of(BLOCK));
        let mut best = self.max_in_block(a, head);
        let mut s = head;
        // Whole super-blocks where they fit, else whole blocks.
        while s + BLOCK <= b {
            if s.is_multiple_of(SUPER) && s + SUPER <= b {
                best = best.max(self.super_max[s / SUPER]);
                s += SUPER;
            } else {
                best = best
                    .max(self.block_max[s / BLOCK])
                    .max(self.super_tag[s / SUPER]);
                s += BLOCK;
            }
        }
        if s < b {
            best = best.max(self.max_in_block(s, b));
        }
        best
    }

    /// Raises sections `[a, b)` (`a < b <= sections`) to at least `height`.
    pub fn raise(&mut self, a: usize, b: usize, height: u64) {
        let head = b.min(a.next_multiple_of(BLOCK));
        if a < head {
            self.raise_in_block(a, head, height);
        }
        let mut s = head;
        while s + BLOCK <= b {
            if s.is_multiple_of(SUPER) && s + SUPER <= b {
                let k = s / SUPER;
                self.super_tag[k] = self.super_tag[k].max(height);
                self.super_max[k] = self.super_max[k].max(height);
                s += SUPER;
            } else {
                let k = s / BLOCK;
                self.block_tag[k] = self.block_tag[k].max(height);
                self.block_max[k] = self.block_max[k].max(height);
                self.super_max[s / SUPER] = self.super_max[s / SUPER].max(height);
                s += BLOCK;
            }
        }
        if s < b {
            self.raise_in_block(s, b, height);
        }
    }
}

/// The static orders the skyline tries, in turn: those that are cheap on large
/// instances first (on iopddl_S_1 the first four take about 180 heap pops per item,
/// the last three six times as many).
pub(crate) const ORDERS: [SkyOrder; 7] = [
    SkyOrder::Area,
    SkyOrder::Keys(greedy::TAW),
    SkyOrder::End,
    SkyOrder::Size,
    SkyOrder::Keys(greedy::TWA),
    SkyOrder::Start,
    SkyOrder::Keys(greedy::WAT),
];

/// A static order for breaking ties between items on the same floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SkyOrder {
    /// Largest area first ([`greedy::by_area`]).
    Area,
    /// Latest end first ([`greedy::by_end`]).
    End,
    /// Largest first ([`greedy::by_size`]).
    Size,
    /// Earliest start first ([`greedy::by_start`]).
    Start,
    /// By three keys ([`greedy::by_keys`]).
    Keys([Key; 3]),
}

impl SkyOrder {
    /// The order of the items (positions, best first).
    pub fn order(self, p: &Prepared) -> Order {
        match self {
            SkyOrder::Area => greedy::by_area(p),
            SkyOrder::End => greedy::by_end(p),
            SkyOrder::Size => greedy::by_size(p),
            SkyOrder::Start => greedy::by_start(p),
            SkyOrder::Keys(keys) => greedy::by_keys(p, keys),
        }
    }
}

/// When a skyline placement gives up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cutoffs {
    /// Give up once the peak reaches this (a plan this high is already known).
    pub stop_at: u64,
    /// Give up after this many heap pops.
    pub work: u64,
    /// Give up once this instant has passed (checked every few thousand pops).
    pub deadline: Option<Instant>,
}

impl Cutoffs {
    /// No limit: the placement always completes.
    pub const NONE: Cutoffs = Cutoffs {
        stop_at: u64::MAX,
        work: u64::MAX,
        deadline: None,
    };
}

/// How often (in heap pops) a placement looks at the clock.
const CLOCK_EVERY: u64 = 4096;

/// Places every item on the lowest floor, ties broken by position in `order` (item
/// positions, best first; every item exactly once). Returns offsets per item position
/// and the peak.
#[cfg(test)]
pub(crate) fn place(p: &Prepared, order: &[usize]) -> (Vec<u64>, u64) {
    place_within(p, order, &Cutoffs::NONE)
        .placed
        .unwrap_or_else(|| (vec![0; p.items.len()], 0))
}

/// Why a [`place_within`] run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every item placed below the cutoff's peak.
    Placed,
    /// The peak reached [`Cutoffs::stop_at`].
    AtStop,
    /// The pops reached [`Cutoffs::work`].
    OutOfWork,
    /// Its pace showed it would run out of work ([`PACE_CHECKS`]).
    OutOfPace,
    /// The deadline passed.
    Deadline,
}

/// What [`place_within`] did.
#[derive(Debug)]
pub(crate) struct SkyRun {
    /// The offsets and peak, or `None` where it gave up.
    pub placed: Option<(Vec<u64>, u64)>,
    /// Why it ended.
    pub ended: Ended,
    /// Heap pops spent.
    pub pops: u64,
    /// Items placed before it ended.
    pub items: usize,
}

impl SkyRun {
    /// The pops a complete run would take: the pops spent, or where the run ran out of
    /// work or of pace, the pops at its pace for every item (a forecast: a run's later
    /// items may cost more pops or fewer than its earlier ones).
    pub fn pops_for_all(&self, n: usize) -> u64 {
        if !matches!(self.ended, Ended::OutOfWork | Ended::OutOfPace) || self.items >= n {
            return self.pops;
        }
        let forecast = u128::from(self.pops) * n as u128 / self.items.max(1) as u128;
        u64::try_from(forecast).unwrap_or(u64::MAX)
    }
}

/// How many times a run with a pop budget compares its pace with it: at each
/// `1 / PACE_CHECKS` of the budget, once it has spent at least a pop per item (every
/// item costs one, so a budget below the item count cannot complete anyway), a run
/// that has placed less than half the share of the items that it spent of the budget
/// gives up. A forecast, not a proof: where the earliest items cost the most pops (a
/// block of items all live at once costs `n - k` pops for its `k`-th, so after a share
/// `f` of its pops it has placed at least `f / 2` of the items) the half covers it. On
/// large malloc-like instances, where the budget allows a few pops an item and the
/// skyline takes tens, this ends a run that would spend all of its budget and fail.
const PACE_CHECKS: u64 = 8;

/// [`place`] that gives up at `limits`, or where its pace shows that it cannot
/// complete within their work ([`PACE_CHECKS`]).
pub(crate) fn place_within(p: &Prepared, order: &[usize], limits: &Cutoffs) -> SkyRun {
    let mut heights = Heights::new(p.sections);
    let mut offsets = vec![0u64; p.items.len()];
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = (0..order.len() as u32)
        .map(|rank| Reverse((0, rank)))
        .collect();
    let mut peak = 0u64;
    let mut pops = 0u64;
    let mut items = 0usize;
    let n = order.len() as u128;
    let check_every = if limits.work == u64::MAX {
        u64::MAX
    } else {
        (limits.work / PACE_CHECKS).max(1)
    };
    let give_up = |ended: Ended, pops: u64, items: usize| SkyRun {
        placed: None,
        ended,
        pops,
        items,
    };
    while let Some(mut top_entry) = heap.peek_mut() {
        // The pops spent before this one.
        let spent = pops;
        pops += 1;
        if pops > limits.work {
            return give_up(Ended::OutOfWork, pops, items);
        }
        if peak >= limits.stop_at {
            return give_up(Ended::AtStop, pops, items);
        }
        if pops.is_multiple_of(CLOCK_EVERY) && limits.deadline.is_some_and(|d| Instant::now() >= d)
        {
            return give_up(Ended::Deadline, pops, items);
        }
        if spent > 0
            && spent.is_multiple_of(check_every)
            && spent >= n as u64
            && 2 * (items as u128) * u128::from(limits.work) < n * u128::from(spent)
        {
            return give_up(Ended::OutOfPace, pops, items);
        }
        let Reverse((estimate, rank)) = *top_entry;
        let i = order[rank as usize];
        let it = &p.items[i];
        let (a, b) = (it.a as usize, it.b as usize);
        let floor = heights.max_in(a, b);
        if floor > estimate {
            // Floors only rise: put the item back in place with its new floor (one
            // sift down instead of a pop and a push).
            *top_entry = Reverse((floor, rank));
            continue;
        }
        PeekMut::pop(top_entry);
        // A floor is the top of a stack of distinct items, so `top` is at most the sum
        // of all sizes, which fits in u64 (checked by `Prepared::new`).
        let top = floor.saturating_add(it.size);
        heights.raise(a, b, top);
        offsets[i] = floor;
        peak = peak.max(top);
        items += 1;
    }
    if peak >= limits.stop_at {
        return give_up(Ended::AtStop, pops, items);
    }
    SkyRun {
        placed: Some((offsets, peak)),
        ended: Ended::Placed,
        pops,
        items,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy::{self, Fit};
    use crate::plan::offline::index::OverlapIndex;
    use crate::plan::offline::LiveRange;

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    #[test]
    fn a_block_live_at_once_completes_where_its_budget_allows() {
        // 100 items live together: the k-th costs about 100 - k pops (5,050 in all),
        // the earliest the most, so the pace is worst at the start.
        let ranges: Vec<LiveRange> = (0..100).map(|_| r(0, 1, 1)).collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order: Vec<usize> = (0..100).collect();
        let run = |work| {
            place_within(
                &p,
                &order,
                &Cutoffs {
                    stop_at: u64::MAX,
                    work,
                    deadline: None,
                },
            )
        };
        let full = run(u64::MAX);
        assert_eq!(full.ended, Ended::Placed);
        for work in [full.pops, full.pops + 1, 6_000, 20_000] {
            let within = run(work);
            assert_eq!(within.ended, Ended::Placed, "work {work}");
            assert_eq!(within.placed, full.placed, "work {work}");
        }
        assert_eq!(run(full.pops - 1).ended, Ended::OutOfWork);
    }

    #[test]
    fn small_budgets_complete_when_they_cover_the_pops_and_the_pace_gives_up_early() {
        // Items apart in time: one pop each.
        let ranges: Vec<LiveRange> = (0..12).map(|k| r(k, k + 1, 1)).collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order: Vec<usize> = (0..12).collect();
        let at = |work| Cutoffs {
            stop_at: u64::MAX,
            work,
            deadline: None,
        };
        for work in 12..20 {
            assert_eq!(
                place_within(&p, &order, &at(work)).ended,
                Ended::Placed,
                "{work}"
            );
        }
        assert_eq!(place_within(&p, &order, &at(11)).ended, Ended::OutOfWork);
        // A stack whose floors rise for every item (each item live with all before
        // it, placed in reverse of the order that is cheap) spends its budget fast:
        // the pace ends it before the budget does, and the forecast is past the budget.
        let ranges: Vec<LiveRange> = (0..400).map(|k| r(0, 400 - k, 1)).collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order: Vec<usize> = (0..400).collect();
        let full = place_within(&p, &order, &at(u64::MAX));
        let budget = full.pops / 4;
        let cut = place_within(&p, &order, &at(budget));
        assert!(cut.placed.is_none());
        if cut.ended == Ended::OutOfPace {
            assert!(cut.pops < budget);
        }
        assert!(cut.pops_for_all(400) > budget, "{cut:?}");
    }

    #[test]
    fn heights_answer_range_maxima_after_raises() {
        let mut h = Heights::new(10);
        h.raise(2, 5, 7);
        h.raise(4, 8, 9);
        assert_eq!(h.max_in(0, 2), 0);
        assert_eq!(h.max_in(0, 3), 7);
        assert_eq!(h.max_in(2, 4), 7);
        assert_eq!(h.max_in(3, 10), 9);
        assert_eq!(h.max_in(8, 10), 0);
        h.raise(0, 10, 12);
        assert_eq!(h.max_in(9, 10), 12);
    }

    #[test]
    fn heights_match_a_plain_array_across_super_blocks() {
        let mut rng = crate::seeded::Rng::new(8);
        for _ in 0..20 {
            let sections = 1 + rng.index(3 * SUPER);
            let mut h = BlockHeights::new(sections);
            let mut plain = vec![0u64; sections];
            for _ in 0..60 {
                let a = rng.index(sections);
                let b = a + 1 + rng.index(sections - a);
                let expected = plain[a..b].iter().copied().max().unwrap_or(0);
                assert_eq!(h.max_in(a, b), expected, "[{a}, {b}) of {sections}");
                let top = expected + 1 + rng.index(9) as u64;
                h.raise(a, b, top);
                plain[a..b].iter_mut().for_each(|x| *x = top);
                for s in [a, b - 1, (a + b) / 2] {
                    assert_eq!(h.max_in(s, s + 1), plain[s]);
                }
            }
        }
    }

    #[test]
    fn lowest_floor_goes_first_whatever_the_order() {
        // Item 1 is first in the order but item 0 starts on the lower floor.
        let p = Prepared::new(&[r(0, 2, 4), r(1, 3, 4), r(4, 6, 2)], 1).expect("valid");
        let (offsets, peak) = place(&p, &[1, 0, 2]);
        assert_eq!(offsets, vec![4, 0, 0]);
        assert_eq!(peak, 8);
    }

    #[test]
    fn skyline_by_area_beats_greedy_by_size_on_a_small_instance() {
        // Greedy by size puts [0,3) at 0, [2,6) on it at 3 and [3,6) at 0, leaving
        // [4,6) a one-byte hole: peak 7. The skyline places [3,6) then [4,6) before
        // [2,6), whose floor is then 4: peak 6, the bound.
        let ranges = [r(4, 6, 2), r(0, 3, 3), r(2, 6, 2), r(3, 6, 2)];
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let by_size = greedy::by_size(&p);
        for fit in [Fit::Lowest, Fit::Smallest] {
            assert_eq!(greedy::place(&p, &index, &by_size, fit).1, 7);
        }
        let (offsets, peak) = place(&p, &SkyOrder::Area.order(&p));
        p.assert_valid(&offsets, peak);
        assert_eq!(peak, 6);
        assert_eq!(offsets, vec![2, 0, 4, 0]);
    }

    #[test]
    fn placement_gives_up_above_a_known_peak_or_out_of_work() {
        let ranges = [r(4, 6, 2), r(0, 3, 3), r(2, 6, 2), r(3, 6, 2)];
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order = SkyOrder::Area.order(&p);
        let at = |stop_at, work| Cutoffs {
            stop_at,
            work,
            deadline: None,
        };
        assert!(place_within(&p, &order, &at(7, u64::MAX)).placed.is_some());
        assert!(place_within(&p, &order, &at(6, u64::MAX)).placed.is_none());
        assert!(place_within(&p, &order, &at(u64::MAX, 2)).placed.is_none());
        let past = Cutoffs {
            deadline: Some(Instant::now()),
            ..Cutoffs::NONE
        };
        // The clock is read every few thousand pops: a small instance completes.
        assert!(place_within(&p, &order, &past).placed.is_some());
    }

    #[test]
    fn heights_match_a_plain_array_on_random_raises() {
        let mut rng = crate::seeded::Rng::new(5);
        for _ in 0..200 {
            // Up to several blocks, so that raises cover some whole.
            let sections = 1 + rng.index(300);
            let mut h = Heights::new(sections);
            let mut plain = vec![0u64; sections];
            for _ in 0..30 {
                // A short range too (read from the flat heights).
                let a = rng.index(sections);
                let b = (a + 1 + rng.index(16)).min(sections);
                let expected = plain[a..b].iter().copied().max().unwrap_or(0);
                assert_eq!(h.max_in(a, b), expected, "short [{a}, {b})");
                let a = rng.index(sections);
                let b = a + 1 + rng.index(sections - a);
                let expected = plain[a..b].iter().copied().max().unwrap_or(0);
                assert_eq!(h.max_in(a, b), expected, "[{a}, {b})");
                let top = expected + 1 + rng.index(9) as u64;
                h.raise(a, b, top);
                plain[a..b].iter_mut().for_each(|x| *x = top);
            }
        }
    }

    #[test]
    fn skyline_placements_are_valid_on_random_instances() {
        let mut rng = crate::seeded::Rng::new(3);
        for round in 0..2000 {
            let n = 1 + rng.index(40);
            let ranges: Vec<LiveRange> = (0..n)
                .map(|_| {
                    let start = rng.index(30) as u64;
                    r(
                        start,
                        start + 1 + rng.index(12) as u64,
                        1 + rng.index(9) as u64,
                    )
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            let which = ORDERS[round % ORDERS.len()];
            let (offsets, peak) = place(&p, &which.order(&p));
            p.assert_valid(&offsets, peak);
            assert!(peak >= p.lower_bound);
        }
    }
}
