//! The class order ([`greedy::by_size_class`](super::greedy::by_size_class) with the
//! lowest fit; or any order by classes each in start order, such as the area class
//! order, [`greedy::by_area_class`](super::greedy::by_area_class), with its
//! [`ClassKey`]) placed without overlap lists: one class after the other, each by one
//! sweep over time. The same offsets as the greedy placement, at a cost that grows
//! with the free and blocked stretches below each answer rather than with every item
//! live with it.
//!
//! Within a class the order is by start, so a class is placed by visiting its items'
//! starts in order. An item `[a, b)` of the class must avoid three kinds of items:
//!
//! * items of the classes placed before it (the *fixed* items) live at `a`;
//! * fixed items that start before `b`;
//! * items of its own class placed before it that are still live at `a` (those placed
//!   after it start at or after `a`, and are placed after it).
//!
//! The fixed items are kept in a segment tree over the elementary ranges between their
//! boundaries ([`Blocked`]). Each item sits at the O(log F) nodes that cover its range,
//! each node's items in start order behind a cursor past the ended ones. Fixed items
//! at one node share offsets, so they are disjoint in time: the cursor's item is live
//! now or the next to start there. A range of offsets is free of fixed items for
//! `[a, b)` where every node above and on it has its cursor's start at or after `b`.
//! Two subtree aggregates find the first blocked and the first free elementary range
//! at or after an offset in O(log F). The class's own live items are a book of merged
//! runs of occupied offsets ([`Runs`]).
//!
//! The lowest fit walks up from offset 0: the first fixed block or own run at or
//! after the candidate either lies above the candidate's end (the item fits), or the
//! candidate moves past it. Each step passes one blocked stretch, so the walk costs
//! O(log F) for each alternation of free and blocked stretches below the answer, where
//! the greedy reads every placed item live with the item.
//!
//! Cost: per class, O(F log F) to build the tree and to pass the fixed items' ends
//! (F the items of the larger classes), plus the walk of each of its items; in all
//! O(C n log n + walks) for C classes. The fixed items' boundaries and their orders
//! by start and by end are kept from class to class and each class merged in
//! ([`FixedItems`]), not sorted and searched again. Memory: O(F log F) for the tree.

use std::cmp::Reverse;
use std::collections::btree_map::Range;
use std::collections::{BTreeMap, BinaryHeap};
use std::ops::Bound::{Excluded, Unbounded};
use std::time::Instant;

use super::elementary;
use super::fixed_items::{FixedItems, FixedSpan};
use super::prepared::{ClassKey, Prepared};
use super::time_for;

/// How many items are placed between two looks at the clock.
const CLOCK_EVERY: usize = 256;

/// What [`place_classes`] placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClassesPlaced {
    /// Offsets per item position (those of items not placed are meaningless).
    pub offsets: Vec<u64>,
    /// The peak of the placed items.
    pub peak: u64,
    /// How many items of the order were placed (a prefix of it).
    pub placed: usize,
    /// Units of work spent ([`Limits::work`]).
    pub work: u64,
}

/// When [`place_classes`] stops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// It stops where the time left before this is what the items still to place
    /// would take at `reserve_per_item` each (looked at every [`CLOCK_EVERY`] items).
    pub deadline: Option<Instant>,
    /// The time kept for each item it leaves (for whatever places them after it).
    pub reserve_per_item: std::time::Duration,
    /// The time kept besides for each item placed, wherever it leaves an item: the
    /// fill that places them ([`fill::place_into`](super::fill::place_into)) passes
    /// every item placed before too, so its time grows with them, not only with the
    /// items left. The first look ([`Limits::whole_or_first`]) goes on only where the
    /// whole order is forecast to end this much for every item before the deadline
    /// (else a cut near its end leaves the fill no time).
    pub reserve_per_placed: std::time::Duration,
    /// Units of work: one per fixed item a class's sweep passes and one per step of a
    /// walk ([`lowest_free`]), each about 0.2-0.4 us on the 2-core build machine. A
    /// deterministic bound, looked at every [`CLOCK_EVERY`] items.
    pub work: u64,
    /// Where the first this many items of the order are placed (whole classes), it
    /// goes on only if its pace says the whole order ends within the deadline (less
    /// nothing: it then leaves no item) and the work: [`STEPS_LATER`] times the walk
    /// steps an item so far for each item left, and every item each class left
    /// passes. Elsewhere it stops there. Without a deadline it also looks after every
    /// other class, from that class's steps an item (before the first look only where
    /// not [`Limits::filled_after`]). 0: no such look.
    pub whole_or_first: usize,
    /// Under a deadline, where the first look (at [`Limits::whole_or_first`]) forecasts
    /// that the whole order misses the deadline or the work: `None` stops there;
    /// `Some(t)` goes on past it and stops where the time left before the earlier of
    /// `t` and the deadline is what the items still to place would take at
    /// `reserve_per_item` each (as at the deadline, so possibly inside a class), or
    /// where the work runs out. Ignored where the first look forecasts the order to
    /// fit, and without a deadline (its looks after each class still stop).
    pub or_until: Option<Instant>,
    /// Under a deadline, with a first look ([`Limits::whole_or_first`] above 0): the
    /// first `whole_or_first` items also stop once this instant has passed (looked at
    /// every [`CLOCK_EVERY`] items, with no time kept for the items left: the deadline
    /// keeps that); from the first look on only the deadline (and
    /// [`Limits::or_until`]) stop it. Ignored without a deadline or a first look.
    /// Where it stops inside a class, the items of that class placed so far are left
    /// too: the fill after it places a cut class's larger items badly (a million
    /// `wide` buffers with 10 s, seed 2: cut at 113,591 of a class of 82,871-149,293,
    /// the rest filled to 1.0699 of the bound and repaired to 1.0510; the class left
    /// whole, 1.0162; seed 1 1.0211 -> 1.0202, `churn` seed 26 1.0389 -> 1.0349).
    pub first_by: Option<Instant>,
    /// Whether the caller fills the items a cut after the first
    /// [`Limits::whole_or_first`] leaves: then, without a deadline, the looks after
    /// each class begin only at the first look, so that the first classes are placed
    /// as far as the work allows.
    pub filled_after: bool,
}

impl Limits {
    /// No deadline and no work limit.
    pub const UNLIMITED: Limits = Limits {
        deadline: None,
        reserve_per_item: std::time::Duration::ZERO,
        reserve_per_placed: std::time::Duration::ZERO,
        work: u64::MAX,
        whole_or_first: 0,
        or_until: None,
        first_by: None,
        filled_after: false,
    };
}

/// The work [`place_classes`] is expected to take on `p`, in its units: the items
/// each class's sweep passes (those of the larger classes, exactly) and
/// [`EXPECTED_STEPS`] walk steps an item. O(n).
pub(crate) fn expected_work(p: &Prepared) -> u64 {
    let mut per_class = [0u64; 65];
    for it in &p.items {
        per_class[p.size_class(it.size) as usize] += 1;
    }
    let (mut larger, mut passed) = (0u64, 0u64);
    for &count in per_class.iter().rev() {
        if count > 0 {
            passed += larger;
            larger += count;
        }
    }
    passed.saturating_add((p.items.len() as u64).saturating_mul(EXPECTED_STEPS))
}

/// Walk steps an item is expected to take: about 40 on malloc-like buffers with 2,000
/// live at a time, 400 with 20,000, at 100,000 buffers.
const EXPECTED_STEPS: u64 = 40;

/// Places `order` (the class order: [`greedy::by_size_class`](super::greedy::by_size_class),
/// or any order whose items of one size class, [`Prepared::size_class`], are contiguous
/// and in start order) at the lowest offsets free of the items placed before them and
/// live with them: the offsets of the greedy lowest fit in that order. Stops where `limits` say, with the
/// prefix placed so far (whole classes or part of one).
pub(crate) fn place_classes(p: &Prepared, order: &[usize], limits: &Limits) -> ClassesPlaced {
    place_classes_by(p, ClassKey::Size, order, limits, &Instant::now)
}

/// [`place_classes`] for an order whose classes are those of `key` (each contiguous
/// and in start order).
pub(crate) fn place_classes_keyed(
    p: &Prepared,
    key: ClassKey,
    order: &[usize],
    limits: &Limits,
) -> ClassesPlaced {
    place_classes_by(p, key, order, limits, &Instant::now)
}

/// [`place_classes`] with the clock `now` (the tests' stepping clock).
fn place_classes_by(
    p: &Prepared,
    key: ClassKey,
    order: &[usize],
    limits: &Limits,
    now: &dyn Fn() -> Instant,
) -> ClassesPlaced {
    let mut offsets = vec![0u64; p.items.len()];
    let mut peak = 0u64;
    let mut work = 0u64;
    let mut steps = 0u64;
    let mut last_class_steps_per_item = 0u64;
    let started = now();
    // The placed items, by start and by end (the tree's input).
    let mut fixed = FixedItems::with_capacity(order.len());
    let mut class_start = 0;
    // The deadline the sweep stops at: the given one, or after a first look that
    // forecast the whole order past it or the work, the earlier of it and `or_until`;
    // before the first look also `first_by` (with no time kept: the deadline keeps
    // it).
    let mut stop_at = limits.deadline;
    let mut first_by = limits
        .first_by
        .filter(|_| limits.whole_or_first > 0 && limits.deadline.is_some());
    let must_stop =
        |placed: usize, work: u64, stop_at: Option<Instant>, first_by: Option<Instant>| {
            let reserve = time_for(limits.reserve_per_item, order.len() - placed)
                .saturating_add(time_for(limits.reserve_per_placed, placed));
            let now = now();
            if first_by.is_some_and(|f| now >= f) {
                Some(Stop::FirstBy)
            } else if work >= limits.work
                || stop_at.is_some_and(|d| now.checked_add(reserve).is_none_or(|t| t >= d))
            {
                Some(Stop::Limit)
            } else {
                None
            }
        };
    while class_start < order.len() {
        // After its largest classes: go on only where the whole order is forecast to
        // fit; without a deadline, look after every class too, from that class's
        // steps an item (the work budget is not spent on an order it cannot end).
        let first_look = limits.whole_or_first > 0 && class_start == limits.whole_or_first;
        let steps_per_item = if first_look {
            Some(STEPS_LATER * steps.div_ceil(class_start as u64))
        } else if limits.whole_or_first > 0
            && class_start > 0
            && limits.deadline.is_none()
            && !(limits.filled_after && class_start < limits.whole_or_first)
        {
            Some(last_class_steps_per_item)
        } else {
            None
        };
        if steps_per_item.is_some_and(|per_item| {
            let rest = work_left(p, key, order, class_start, per_item);
            let kept = time_for(limits.reserve_per_placed, order.len());
            !fits_within(limits, work, rest, kept, started, now)
        }) {
            match limits.or_until {
                Some(until) if first_look => {
                    stop_at = Some(stop_at.map_or(until, |d| d.min(until)));
                    if must_stop(class_start, work, stop_at, first_by).is_some() {
                        break;
                    }
                }
                _ => break,
            }
        }
        let class_end = p.class_end_by(key, order, class_start);
        let class_items = &order[class_start..class_end];
        debug_assert!(class_items
            .windows(2)
            .all(|w| p.items[w[0]].a <= p.items[w[1]].a));
        let class_steps = steps;
        let peak_before = peak;
        let mut tree = Blocked::new(&fixed);
        let by_end = &fixed.by_end;
        work += fixed.len() as u64;
        let mut ended = 0;
        let mut runs = Runs::default();
        let mut own_ends: BinaryHeap<Reverse<(u32, usize)>> = BinaryHeap::new();
        for (k, &i) in class_items.iter().enumerate() {
            let stop = if k % CLOCK_EVERY == 0 {
                must_stop(class_start + k, work, stop_at, first_by)
            } else {
                None
            };
            if let Some(stop) = stop {
                // Cut by `first_by` inside one of the first classes: the class is left
                // whole (see `Limits::first_by`).
                let whole = stop == Stop::FirstBy;
                return ClassesPlaced {
                    offsets,
                    peak: if whole { peak_before } else { peak },
                    placed: class_start + if whole { 0 } else { k },
                    work,
                };
            }
            let it = &p.items[i];
            while ended < by_end.len() && by_end[ended].b <= it.a {
                tree.pass_end(by_end[ended], it.a);
                ended += 1;
            }
            while let Some(&Reverse((b, j))) = own_ends.peek() {
                if b > it.a {
                    break;
                }
                own_ends.pop();
                runs.release(offsets[j], p.items[j].size);
            }
            let (offset, walked) = lowest_free(&tree, &runs, it.size, it.b);
            work += walked;
            steps += walked;
            offsets[i] = offset;
            peak = peak.max(offset + it.size);
            runs.occupy(offset, it.size);
            own_ends.push(Reverse((it.b, i)));
        }
        last_class_steps_per_item = (steps - class_steps).div_ceil(class_items.len() as u64);
        // The tree goes before the merge, so that the two are not held at once.
        drop(tree);
        fixed.add(p, class_items, &offsets);
        class_start = class_end;
        if class_start >= limits.whole_or_first {
            first_by = None;
        }
        if class_start < order.len() && must_stop(class_start, work, stop_at, first_by).is_some() {
            break;
        }
    }
    ClassesPlaced {
        offsets,
        peak,
        placed: class_start,
        work,
    }
}

/// Why [`place_classes_by`] stops where it looks at its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// [`Limits::first_by`] has passed (inside the first classes).
    FirstBy,
    /// The work, or the deadline less the time kept for the items left.
    Limit,
}

/// The smaller classes' buffers walk about this many times the steps of the largest
/// classes' (those holding 4/5 of the area): on a million malloc-like buffers 14 an
/// item over the classes of 16 KiB and up, 42 over all.
const STEPS_LATER: u64 = 3;

/// The work forecast for placing the items of `order` from `placed` on (classes by
/// `key`): every item each class left passes, and `steps_per_item` walk steps an item.
fn work_left(
    p: &Prepared,
    key: ClassKey,
    order: &[usize],
    placed: usize,
    steps_per_item: u64,
) -> u64 {
    let left = (order.len() - placed) as u64;
    let mut passes = 0u64;
    let mut at = placed;
    while at < order.len() {
        passes += at as u64;
        at = p.class_end_by(key, order, at);
    }
    passes.saturating_add(left.saturating_mul(steps_per_item))
}

/// Whether `rest` more units, after `work` spent since `started` (by the clock `now`),
/// fit within `limits` (see [`Limits::whole_or_first`]): the work, and at the pace so
/// far the deadline, `kept` before it.
fn fits_within(
    limits: &Limits,
    work: u64,
    rest: u64,
    kept: std::time::Duration,
    started: Instant,
    now: &dyn Fn() -> Instant,
) -> bool {
    if work.saturating_add(rest) > limits.work {
        return false;
    }
    limits.deadline.is_none_or(|deadline| {
        let at = now();
        let per_unit = at.saturating_duration_since(started).as_secs_f64() / work.max(1) as f64;
        let needed = std::time::Duration::from_secs_f64(per_unit * rest as f64);
        at.checked_add(needed.saturating_add(kept))
            .is_some_and(|t| t < deadline)
    })
}

/// The lowest offset where `size` bytes are free of the fixed items (`tree`) until
/// section `end` and of the class's own live items (`runs`), and the steps taken.
fn lowest_free(tree: &Blocked<'_>, runs: &Runs, size: u64, end: u32) -> (u64, u64) {
    let (mut at, mut leaf) = (0u64, 0usize);
    let mut steps = 0u64;
    // Whether `leaf` is known to be free of fixed items until `end`.
    let mut leaf_free = false;
    // The first own run ending above `at`: it stays so until `at` reaches its end.
    let mut own = runs.cursor(at);
    loop {
        steps += 1;
        let fixed = tree.first_blocked(leaf, end, leaf_free);
        let fixed_from = fixed.map_or(u64::MAX, |l| tree.bounds[l].max(at));
        own.pass(runs, at);
        let own_from = own.run.map_or(u64::MAX, |(start, _)| start.max(at));
        if fixed_from.min(own_from) >= at + size {
            return (at, steps);
        }
        match (own.run, fixed) {
            (Some((_, own_end)), _) if own_from <= fixed_from => {
                at = own_end;
                leaf = tree.leaf_from(leaf, at);
                leaf_free = false;
            }
            (_, Some(l)) => {
                leaf = tree.first_free(l + 1, end);
                at = tree.bounds[leaf];
                leaf_free = true;
            }
            _ => unreachable!("a blocked stretch lies below the candidate's end"),
        }
    }
}

/// The occupied offsets of the class's live items, as merged runs `start -> end`.
#[derive(Debug, Default)]
struct Runs {
    by_start: BTreeMap<u64, u64>,
}

impl Runs {
    /// Marks `[offset, offset + size)` occupied (it is free), merged with the runs it
    /// touches. O(log runs).
    fn occupy(&mut self, offset: u64, size: u64) {
        let (mut start, mut end) = (offset, offset + size);
        if let Some((&before, &before_end)) = self.by_start.range(..start).next_back() {
            if before_end == start {
                self.by_start.remove(&before);
                start = before;
            }
        }
        if let Some(after_end) = self.by_start.remove(&end) {
            end = after_end;
        }
        self.by_start.insert(start, end);
    }

    /// Frees `[offset, offset + size)` (occupied), splitting its run. O(log runs).
    fn release(&mut self, offset: u64, size: u64) {
        let (&start, &end) = self
            .by_start
            .range(..=offset)
            .next_back()
            .expect("a released range lies in a run");
        debug_assert!(end >= offset + size);
        self.by_start.remove(&start);
        if start < offset {
            self.by_start.insert(start, offset);
        }
        if offset + size < end {
            self.by_start.insert(offset + size, end);
        }
    }

    /// A cursor at the run that holds `at`, else the first above it.
    fn cursor(&self, at: u64) -> RunCursor<'_> {
        let run = self.first_at_or_after(at);
        RunCursor {
            run,
            next: self.after(run),
        }
    }

    /// The runs after `run` (all of them where `None`), in order.
    fn after(&self, run: Option<(u64, u64)>) -> Range<'_, u64, u64> {
        match run {
            Some((start, _)) => self.by_start.range((Excluded(start), Unbounded)),
            None => self.by_start.range(u64::MAX..u64::MAX),
        }
    }

    /// The run that holds `at`, else the first above it.
    fn first_at_or_after(&self, at: u64) -> Option<(u64, u64)> {
        if let Some((&start, &end)) = self.by_start.range(..=at).next_back() {
            if end > at {
                return Some((start, end));
            }
        }
        self.by_start
            .range(at..)
            .next()
            .map(|(&start, &end)| (start, end))
    }
}

/// The first run of a [`Runs`] ending above a walk's candidate, and the runs after it:
/// the candidate only rises, so the next such run is usually the next in order, read
/// from the iterator rather than searched for from the root.
struct RunCursor<'r> {
    /// The first run ending above the candidate (`None`: no run does).
    run: Option<(u64, u64)>,
    /// The runs after `run`, in order.
    next: Range<'r, u64, u64>,
}

/// How many runs [`RunCursor::pass`] steps over one by one before it searches.
const RUNS_STEPPED: usize = 4;

impl<'r> RunCursor<'r> {
    /// Moves to the first run of `runs` ending above `at` (at or above where it is),
    /// stepping over at most [`RUNS_STEPPED`] runs, else searching.
    fn pass(&mut self, runs: &'r Runs, at: u64) {
        for _ in 0..RUNS_STEPPED {
            match self.run {
                Some((_, end)) if end <= at => {
                    self.run = self.next.next().map(|(&start, &end)| (start, end));
                }
                _ => return,
            }
        }
        if self.run.is_some_and(|(_, end)| end <= at) {
            *self = runs.cursor(at);
        }
    }
}

/// The fixed items by the offsets they cover (see the module): a segment tree over the
/// elementary ranges between their boundaries.
#[derive(Debug)]
struct Blocked<'a> {
    /// The fixed items' range boundaries, sorted, with 0 and `u64::MAX`.
    bounds: &'a [u64],
    /// Leaves of the tree (a power of two, at least the elementary ranges).
    leaves: usize,
    /// The items' `(start, end)` sections, each node's in start order.
    spans: Vec<(u32, u32)>,
    /// Per node, its first item not yet ended and one past its last item, in `spans`.
    slots: Vec<(u32, u32)>,
    /// Per node, the cursor item's start (`u32::MAX`: none left).
    head: Vec<u32>,
    /// Per node, the earliest cursor start at the node or below it: a range of the node
    /// is blocked before section `s` only where this is below `s`.
    low: Vec<u32>,
    /// Per node, over the leaves below it, the largest of the earliest cursor start on
    /// the path from the node down to the leaf: some range of the node is free before
    /// `s` only where this is at least `s` (and nothing above it blocks it).
    high: Vec<u32>,
}

// The node fields are arrays of their own, not one array of nodes: the walk's searches
// read one field a level (`high` going down for a free range, `low` for a blocked one),
// so each array is a fifth of the memory an array of whole nodes would take and more of
// the tree stays in cache. On a million malloc-like buffers (seed 1, two runs each, one
// sitting) the class order took 16.2-16.6 s so, 16.9-17.6 s with whole nodes.

impl<'a> Blocked<'a> {
    /// The tree over the items `fixed`. O(F log F): the covers of their ranges.
    fn new(fixed: &'a FixedItems) -> Blocked<'a> {
        let bounds = &fixed.bounds[..];
        let leaves = (bounds.len() - 1).next_power_of_two();
        let mut tree = Blocked {
            bounds,
            leaves,
            spans: Vec::new(),
            slots: vec![(0, 0); 2 * leaves],
            head: vec![u32::MAX; 2 * leaves],
            low: vec![u32::MAX; 2 * leaves],
            high: vec![u32::MAX; 2 * leaves],
        };
        // Counting pass (each node's count in its `end`), then the items in start
        // order into each node's slice (`cursor` the next free place in it).
        let mut cover = Vec::new();
        for span in &fixed.by_start {
            tree.cover(span, &mut cover);
            for &v in &cover {
                tree.slots[v].1 += 1;
            }
        }
        let mut total = 0u32;
        for slot in &mut tree.slots {
            let count = slot.1;
            *slot = (total, total);
            total += count;
        }
        tree.spans = vec![(0, 0); total as usize];
        for span in &fixed.by_start {
            tree.cover(span, &mut cover);
            for &v in &cover {
                let slot = &mut tree.slots[v];
                tree.spans[slot.1 as usize] = (span.a, span.b);
                slot.1 += 1;
            }
        }
        for v in (1..2 * leaves).rev() {
            tree.recompute(v);
        }
        tree
    }

    /// The nodes of the canonical cover of fixed item `span`'s elementary ranges
    /// ([`elementary::for_each_cover`]).
    fn cover(&self, span: &FixedSpan, nodes: &mut Vec<usize>) {
        nodes.clear();
        let (l, r) = (span.l as usize, span.r as usize);
        elementary::for_each_cover(self.leaves, l, r, |v| nodes.push(v));
    }

    /// Node `v`'s aggregates from its own cursor and its children's.
    fn recompute(&mut self, v: usize) {
        let (cursor, end) = self.slots[v];
        let own = if cursor < end {
            self.spans[cursor as usize].0
        } else {
            u32::MAX
        };
        let (low, high) = if v >= self.leaves {
            (own, own)
        } else {
            (
                own.min(self.low[2 * v]).min(self.low[2 * v + 1]),
                own.min(self.high[2 * v].max(self.high[2 * v + 1])),
            )
        };
        self.head[v] = own;
        self.low[v] = low;
        self.high[v] = high;
    }

    /// Passes fixed item `span`, ended at or before `section` (and any other at its
    /// nodes ended by then). O(log F): its cover's nodes, then every node above them,
    /// all on the paths from its first and last elementary ranges to the root, both
    /// paths a level at a time, bottom up.
    fn pass_end(&mut self, span: FixedSpan, section: u32) {
        let (l, r) = (span.l, span.r);
        let (first, last) = (l as usize + self.leaves, r as usize - 1 + self.leaves);
        elementary::for_each_cover(self.leaves, l as usize, r as usize, |v| {
            self.advance(v, section);
        });
        let (mut left, mut right) = (first >> 1, last >> 1);
        while left >= 1 {
            self.recompute(left);
            if right != left {
                self.recompute(right);
            }
            left >>= 1;
            right >>= 1;
        }
    }

    /// Moves node `v`'s cursor past the items ended by `section`.
    fn advance(&mut self, v: usize, section: u32) {
        let (cursor, end) = &mut self.slots[v];
        while *cursor < *end && self.spans[*cursor as usize].1 <= section {
            *cursor += 1;
        }
        self.recompute(v);
    }

    /// The elementary range after `leaf` (or `leaf`) that holds offset `at`, at or
    /// above `leaf`'s start: a galloping search from `leaf`.
    fn leaf_from(&self, leaf: usize, at: u64) -> usize {
        let (mut low, mut step) = (leaf, 1);
        while low + step < self.bounds.len() && self.bounds[low + step] <= at {
            low += step;
            step *= 2;
        }
        let high = (low + step).min(self.bounds.len());
        low + self.bounds[low..high].partition_point(|&x| x <= at) - 1
    }

    /// The first elementary range at or after `from` that a fixed item occupies
    /// before section `end`, if any; `from_free` says `from` is known not to be.
    /// A search up from `from` and down again: O(log F), less where the answer is
    /// near.
    fn first_blocked(&self, from: usize, end: u32, from_free: bool) -> Option<usize> {
        let mut u = from + self.leaves;
        if !from_free {
            let mut up = u;
            while up >= 1 {
                if self.head[up] < end {
                    return Some(from);
                }
                up >>= 1;
            }
        }
        // Nothing on the path blocks: a right sibling's ranges are blocked where
        // something at or below it is.
        while u > 1 {
            if u & 1 == 0 && self.low[u + 1] < end {
                let mut v = u + 1;
                while v < self.leaves && self.head[v] >= end {
                    v = if self.low[2 * v] < end {
                        2 * v
                    } else {
                        2 * v + 1
                    };
                }
                while v < self.leaves {
                    v *= 2;
                }
                return Some(v - self.leaves);
            }
            u >>= 1;
        }
        None
    }

    /// The first elementary range at or after `from` that no fixed item occupies
    /// before section `end`. O(log F), less where the answer is near. There is one:
    /// nothing is fixed above the highest boundary.
    fn first_free(&self, from: usize, end: u32) -> usize {
        // The highest node on the path from `from` up to the root whose cursor starts
        // before `end`: every range under it is blocked, nothing above it blocks. None:
        // `from` is free. (Found in one pass up, with no arrays of the path to fill:
        // on churn those arrays' initialisation was a tenth of the class sweep.)
        let leaf = from + self.leaves;
        let mut blocking = None;
        let mut u = leaf;
        while u >= 1 {
            if self.head[u] < end {
                blocking = Some(u);
            }
            u >>= 1;
        }
        let Some(mut u) = blocking else {
            return from;
        };
        // The first right sibling, from the blocking node up, with a range free of
        // everything at or below it (nothing above it blocks).
        while u > 1 {
            if u & 1 == 0 && self.high[u + 1] >= end {
                let mut v = u + 1;
                while v < self.leaves {
                    v = if self.high[2 * v] >= end {
                        2 * v
                    } else {
                        2 * v + 1
                    };
                }
                return v - self.leaves;
            }
            u >>= 1;
        }
        unreachable!("the range above every fixed item is free")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy::{self, Fit};
    use crate::plan::offline::index::OverlapIndex;
    use crate::plan::offline::LiveRange;
    use crate::seeded::Rng;

    /// `n` random ranges over `steps` steps with sizes up to `max_size`.
    fn random(rng: &mut Rng, n: usize, steps: u64, max_size: u64) -> Vec<LiveRange> {
        (0..n)
            .map(|_| {
                let start = rng.below(steps);
                let spread = 1 + rng.below(steps);
                let len = 1 + rng.below(spread);
                // Sizes over several octaves, many alike.
                let size = if rng.below(4) == 0 {
                    let octave = rng.below(12);
                    1 << octave
                } else {
                    1 + rng.below(max_size)
                };
                LiveRange {
                    start,
                    end: start + len,
                    size,
                }
            })
            .collect()
    }

    /// `n` random ranges from `seed` over 300 steps with sizes up to 64 KiB, their
    /// class order and its whole placement.
    fn whole_class_order(seed: u64, n: usize) -> (Prepared, Vec<usize>, ClassesPlaced) {
        let mut rng = Rng::new(seed);
        let ranges = random(&mut rng, n, 300, 1 << 16);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order = greedy::by_size_class(&p);
        let whole = place_classes(&p, &order, &Limits::UNLIMITED);
        (p, order, whole)
    }

    /// The `case`-th instance of the greedy comparisons: up to 80 ranges (600 every
    /// tenth case) over up to 200 steps, sizes up to 2^0..2^19, alignment 1 to 8.
    fn comparison_case(rng: &mut Rng, case: u32) -> Prepared {
        let n = 1 + rng.below(if case.is_multiple_of(10) { 600 } else { 80 }) as usize;
        let steps = 1 + rng.below(200);
        let octaves = rng.below(20);
        let max_size = 1 + rng.below(1 << octaves);
        let ranges = random(rng, n, steps, max_size);
        let alignment = 1 << rng.below(4);
        Prepared::new(&ranges, alignment).expect("valid")
    }

    /// Asserts that the class sweep places `order` (classes by `key`) whole, at the
    /// greedy lowest fit's offsets and peak.
    fn assert_the_greedy_offsets(p: &Prepared, key: ClassKey, order: &[usize], case: u32) {
        let index = OverlapIndex::new(p);
        let (offsets, peak) = greedy::place(p, &index, order, Fit::Lowest);
        let placed = place_classes_keyed(p, key, order, &Limits::UNLIMITED);
        assert_eq!(placed.placed, order.len(), "case {case}");
        assert_eq!(placed.offsets, offsets, "case {case}");
        assert_eq!(placed.peak, peak, "case {case}");
    }

    #[test]
    fn the_area_class_order_too_gets_the_greedy_offsets() {
        let mut rng = Rng::new(3);
        let mut classes_seen = 0;
        for case in 0..800 {
            let p = comparison_case(&mut rng, case);
            let order = greedy::by_area_class(&p);
            assert_the_greedy_offsets(&p, ClassKey::Area, &order, case);
            let mut at = 0;
            while at < order.len() {
                at = p.class_end_by(ClassKey::Area, &order, at);
                classes_seen += 1;
            }
        }
        // Many classes, not one: the keyed class ends are exercised.
        assert!(classes_seen > 3_000, "{classes_seen}");
    }

    #[test]
    fn the_same_offsets_as_the_greedy_class_order() {
        let mut rng = Rng::new(26);
        // Instances whose smallest octaves are one class (a class of several octaves).
        let mut merged = 0;
        for case in 0..1500 {
            let p = comparison_case(&mut rng, case);
            assert_the_greedy_offsets(&p, ClassKey::Size, &greedy::by_size_class(&p), case);
            let smallest = p.items.iter().map(|it| it.size.ilog2()).min();
            if smallest.is_some_and(|octave| octave < p.class_floor()) {
                merged += 1;
            }
        }
        assert!(
            merged >= 50,
            "only {merged} instances with a merged tail class"
        );
    }

    #[test]
    fn a_passed_deadline_places_a_prefix() {
        let mut rng = Rng::new(7);
        let ranges = random(&mut rng, 500, 100, 4096);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order = greedy::by_size_class(&p);
        let passed = Limits {
            deadline: Some(Instant::now()),
            ..Limits::UNLIMITED
        };
        let placed = place_classes(&p, &order, &passed);
        assert_eq!(placed.placed, 0);
        assert_eq!(placed.peak, 0);
        // A work limit stops it at a class boundary or a clock look, deterministically.
        let whole = place_classes(&p, &order, &Limits::UNLIMITED);
        let limited = Limits {
            work: whole.work / 2,
            ..Limits::UNLIMITED
        };
        let half = place_classes(&p, &order, &limited);
        assert!(half.placed < order.len());
        assert_eq!(half, place_classes(&p, &order, &limited));
        for &i in &order[..half.placed] {
            assert_eq!(half.offsets[i], whole.offsets[i]);
        }
    }

    #[test]
    fn the_whole_order_or_its_first_classes() {
        let (p, order, whole) = whole_class_order(11, 2000);
        // The first three classes.
        let mut first = 0;
        for _ in 0..3 {
            first = p.class_end(&order, first);
        }
        let prefix = place_classes(&p, &order[..first], &Limits::UNLIMITED);
        // Work for the first classes and a little more: under a (distant) deadline it
        // stops after them; without one it looks after each class and stops
        // sooner, at the end of a class.
        let short = Limits {
            deadline: Some(Instant::now() + std::time::Duration::from_secs(600)),
            work: prefix.work + 1,
            whole_or_first: first,
            ..Limits::UNLIMITED
        };
        let stopped = place_classes(&p, &order, &short);
        assert_eq!(stopped.placed, first);
        assert_eq!(stopped.work, prefix.work);
        for &i in &order[..first] {
            assert_eq!(stopped.offsets[i], whole.offsets[i]);
        }
        let sooner = place_classes(
            &p,
            &order,
            &Limits {
                deadline: None,
                ..short
            },
        );
        assert!(sooner.placed < first, "{} {first}", sooner.placed);
        let at = sooner.placed;
        assert!(
            at == 0
                || p.size_class(p.items[order[at - 1]].size)
                    != p.size_class(p.items[order[at]].size)
        );
        // Where the caller fills what a cut leaves, no look before the first: the
        // first classes are placed, as under the deadline.
        let filled_after = Limits {
            deadline: None,
            filled_after: true,
            ..short
        };
        assert_eq!(place_classes(&p, &order, &filled_after), stopped);
        // Work for all of it: it goes on to the end.
        let ample = Limits {
            work: whole.work * 4,
            whole_or_first: first,
            ..Limits::UNLIMITED
        };
        assert_eq!(place_classes(&p, &order, &ample), whole);
    }

    #[test]
    fn where_the_whole_order_is_not_forecast_to_fit_or_until_goes_on_past_the_first_classes() {
        let (p, order, whole) = whole_class_order(12, 2000);
        let first = p.class_end(&order, p.class_end(&order, 0));
        let prefix = place_classes(&p, &order[..first], &Limits::UNLIMITED);
        // Work for about half of what the rest takes: the first look's forecast (three
        // times the steps an item so far) says the whole order does not fit.
        let far = Instant::now() + std::time::Duration::from_secs(600);
        let limits = Limits {
            deadline: Some(far),
            work: prefix.work + (whole.work - prefix.work) / 2,
            whole_or_first: first,
            ..Limits::UNLIMITED
        };
        assert_eq!(place_classes(&p, &order, &limits).placed, first);
        // With a later instant to stop at, it goes on past them (here until the work
        // runs out), each item where the whole order puts it.
        let on = place_classes(
            &p,
            &order,
            &Limits {
                or_until: Some(far),
                ..limits
            },
        );
        assert!(
            first < on.placed && on.placed < order.len(),
            "{}",
            on.placed
        );
        for &i in &order[..on.placed] {
            assert_eq!(on.offsets[i], whole.offsets[i]);
        }
        // An instant already past: it stops right after them, as without one.
        let past = place_classes(
            &p,
            &order,
            &Limits {
                or_until: Some(Instant::now()),
                ..limits
            },
        );
        assert_eq!(past.placed, first);
    }

    #[test]
    fn first_by_stops_the_first_classes_only_under_a_deadline_and_a_first_look() {
        let (p, order, whole) = whole_class_order(13, 2000);
        let first = p.class_end(&order, p.class_end(&order, 0));
        let far = Instant::now() + std::time::Duration::from_secs(600);
        let limits = Limits {
            deadline: Some(far),
            whole_or_first: first,
            first_by: Some(Instant::now()),
            ..Limits::UNLIMITED
        };
        // Passed before the first classes are placed: nothing placed, with the
        // deadline still far.
        assert_eq!(place_classes(&p, &order, &limits).placed, 0);
        // Without a deadline, or without a first look, it is not looked at.
        let no_deadline = Limits {
            deadline: None,
            ..limits
        };
        assert_eq!(place_classes(&p, &order, &no_deadline), whole);
        let no_look = Limits {
            whole_or_first: 0,
            ..limits
        };
        assert_eq!(place_classes(&p, &order, &no_look), whole);
        // Far off: the whole order, as without it.
        let later = Limits {
            first_by: Some(far),
            ..limits
        };
        assert_eq!(place_classes(&p, &order, &later).offsets, whole.offsets);
    }

    #[test]
    fn first_by_is_dropped_at_the_first_look() {
        let (p, order, whole) = whole_class_order(14, 3000);
        // The first classes: two or more, with enough items for several looks at the
        // clock inside them.
        let first_class = p.class_end(&order, 0);
        let mut first = first_class;
        while first < 3 * CLOCK_EVERY || first == first_class {
            first = p.class_end(&order, first);
        }
        assert!(first < order.len(), "one class holds {first} of the items");
        // A clock one millisecond later at each look: every instant of `first_by` is
        // passed at one look, before, at or after the first look.
        let base = Instant::now();
        let looks = std::cell::Cell::new(0u64);
        let clock = || {
            let n = looks.get();
            looks.set(n + 1);
            base + std::time::Duration::from_millis(n)
        };
        let far = base + std::time::Duration::from_secs(3600);
        let limits = Limits {
            deadline: Some(far),
            whole_or_first: first,
            ..Limits::UNLIMITED
        };
        assert_eq!(
            place_classes_by(&p, ClassKey::Size, &order, &limits, &clock),
            whole
        );
        let total = looks.get();
        let mut class_starts = vec![0];
        while *class_starts.last().expect("0") < order.len() {
            let last = *class_starts.last().expect("0");
            class_starts.push(p.class_end(&order, last));
        }
        // Stops inside the first classes, past the first of them (a drop after the
        // first class would leave none), and runs to the end.
        let (mut inside, mut past_the_first, mut to_the_end) = (0, 0, 0);
        for by in 0..=total {
            looks.set(0);
            let first_by = Some(base + std::time::Duration::from_millis(by));
            let placed = place_classes_by(
                &p,
                ClassKey::Size,
                &order,
                &Limits { first_by, ..limits },
                &clock,
            );
            // Stopped inside the first classes, or not at all: never at their end,
            // where it was dropped.
            assert!(
                placed.placed < first || placed == whole,
                "first_by {by} ms of {total}: {} placed, the first classes {first}",
                placed.placed
            );
            if placed.placed < first {
                // Cut inside the first classes by `first_by`: at a class's start (the
                // class it was in left whole), its peak that of the classes before.
                assert!(
                    class_starts.contains(&placed.placed),
                    "first_by {by} ms: cut inside a class, at {}",
                    placed.placed
                );
                let before = order[..placed.placed]
                    .iter()
                    .map(|&i| whole.offsets[i] + p.items[i].size)
                    .max()
                    .unwrap_or(0);
                assert_eq!(placed.peak, before, "first_by {by} ms");
                assert_eq!(
                    order[..placed.placed]
                        .iter()
                        .map(|&i| placed.offsets[i])
                        .collect::<Vec<_>>(),
                    order[..placed.placed]
                        .iter()
                        .map(|&i| whole.offsets[i])
                        .collect::<Vec<_>>()
                );
            }
            if placed.placed > 0 && placed.placed < first {
                inside += 1;
                if placed.placed >= first_class {
                    past_the_first += 1;
                }
            }
            if placed == whole {
                to_the_end += 1;
            }
        }
        assert!(
            inside > 0 && past_the_first > 0 && to_the_end > 0,
            "{inside} {past_the_first} {to_the_end}"
        );
    }

    #[test]
    fn the_expected_work_counts_each_class_s_passes() {
        let range = |size: u64| LiveRange {
            start: 0,
            end: 1,
            size,
        };
        // Classes of 2 (largest), 3 and 1 items: the second class's sweep passes 2,
        // the third's 5.
        let sizes = [1024, 1500, 256, 300, 400, 16];
        let p = Prepared::new(&sizes.map(range), 1).expect("valid");
        assert_eq!(expected_work(&p), 7 + 6 * EXPECTED_STEPS);
        let order = greedy::by_size_class(&p);
        let placed = place_classes(&p, &order, &Limits::UNLIMITED);
        // Passes 7, and at least a step an item.
        assert!(placed.work >= 7 + 6);
    }

    #[test]
    fn runs_merge_and_split() {
        let mut runs = Runs::default();
        runs.occupy(10, 5);
        runs.occupy(15, 5);
        runs.occupy(5, 5);
        assert_eq!(runs.first_at_or_after(0), Some((5, 20)));
        runs.release(10, 5);
        assert_eq!(runs.first_at_or_after(10), Some((15, 20)));
        assert_eq!(runs.first_at_or_after(7), Some((5, 10)));
        assert_eq!(runs.first_at_or_after(20), None);
    }

    #[test]
    fn a_run_cursor_passed_upwards_finds_the_run_a_search_finds() {
        let mut rng = Rng::new(41);
        for case in 0..300 {
            // Disjoint runs with gaps of 1-3 (so that they do not merge).
            let mut runs = Runs::default();
            let mut at = rng.below(5);
            for _ in 0..rng.below(40) {
                let size = 1 + rng.below(6);
                runs.occupy(at, size);
                at += size + 1 + rng.below(3);
            }
            let top = at + 5;
            let mut x = rng.below(8);
            let mut cursor = runs.cursor(x);
            while x <= top {
                cursor.pass(&runs, x);
                assert_eq!(cursor.run, runs.first_at_or_after(x), "case {case} at {x}");
                // Small rises step along the runs, large ones pass many (a search).
                x += if rng.chance(25) {
                    rng.below(60)
                } else {
                    rng.below(4)
                };
            }
        }
    }
}
