//! Offline planners: they see every lifetime at once and place all buffers together,
//! landing at or near the lower bound (the largest total size live at one time).
//!
//! * [`plan_ranges`]: offsets for a list of [`LiveRange`]s with one [`Strategy`].
//! * Interval problems (dsa/*.csv) and graphs are planned through the one entry point
//!   of each, [`crate::plan::plan_intervals`] and [`crate::plan::plan`], with a
//!   [`crate::plan::PlanOptions`] naming the strategy (`Planner::Offline`), capacity,
//!   time limit and budgets; a graph plan gets in-place merging and chunking by the
//!   buffer type's max size.
//!
//! Strategies: greedy placement (lowest free offset, or smallest free gap, among the
//! buffers live at the same time) in four orders (size, breadth, lifetime, conflict),
//! lowest-floor-first placement in several static orders ([`Strategy::Skyline`]), a
//! bounded exact search over canonical solutions ([`Strategy::Search`]), a seeded
//! ruin-and-repair local search around the peak ([`Strategy::Climb`]), and
//! [`Strategy::Best`], which runs them all and keeps the smallest peak. Every strategy
//! has a deterministic work budget ([`Budget`]): the same input gives the same output
//! on every machine, unless the budget also carries a deadline.
//!
//! With a target capacity (`PlanOptions::capacity`), `best` stops at the first plan
//! that fits it and aims its search at it.

mod area_order;
mod best;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod churn;
mod class_sweep;
mod eject;
mod elementary;
mod fill;
mod fixed_items;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod generate;
mod graph;
mod greedy;
mod holes;
mod improve;
mod index;
mod prepared;
mod repair;
mod search;
mod skyline;
mod sweep;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod workload;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use graph::{graph_live_ranges, GraphRanges};
pub(crate) use graph::{
    plan_checked_graph_offline_n, plan_graph_offline_n, plan_graph_offline_with,
};

pub use crate::plan::intervals::IntervalPlan;
use crate::plan::{IntervalProblem, PlanError};
use best::{
    best, class_sweep_pays, climb, climb_applies, search_below, skyline_orders, start,
    start_then_eject,
};
use greedy::{Fit, Order};
use index::OverlapIndex;
use prepared::Prepared;

/// One buffer to place: live over the half-open time range `[start, end)`, needing
/// `size` bytes. A range with `start >= end` or `size == 0` is never live with anything
/// and gets offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LiveRange {
    /// First time step at which the buffer is live.
    pub start: u64,
    /// First time step after `start` at which it is dead again.
    pub end: u64,
    /// Bytes needed (rounded up to the alignment by the planner).
    pub size: u64,
}

/// An offline planning strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// Largest first, each at the lowest offset free of the buffers live with it.
    /// O(n log T + P) for P overlapping pairs, about O(n L) for L buffers live with
    /// one (the placed ones live with a buffer read from a static segment-tree index
    /// that holds their offsets, no per-pair lists, and bucket-sorted by offset):
    /// linear in n at a fixed live-set size, not O(n log n) when L grows with n.
    GreedySize,
    /// Largest first, each at the lowest of a bounded set of candidate offsets: the
    /// free rectangles (holes) left below the placed buffers, or on top of the highest
    /// one placed in its lifetime (`plan/offline/holes.rs`). Needs no overlap lists:
    /// O(n (K + log T log n)) for T time sections and at most K = 512 holes examined
    /// per buffer (K shrinks as 2^17 / n beyond 2^17 buffers, at least 32), whatever
    /// the number of overlapping pairs; O(n) memory. An approximation of
    /// [`Strategy::GreedySize`] (free space split between two holes, or beyond the
    /// scan, is not found): 6-36 points above it on 100,000 generated buffers.
    GreedySizeHoles,
    /// Largest first, each in the smallest free gap that holds it (TFLite's variant).
    /// Cost as [`Strategy::GreedySize`].
    GreedySizeBestFit,
    /// Size classes (octaves) largest first, each class in start order, each buffer at
    /// the lowest offset free of the buffers live with it: for one size, lowest fit in
    /// start order is an optimal interval colouring. Cost as [`Strategy::GreedySize`].
    GreedySizeClass,
    /// Area classes (pairs of octaves of size times lifetime) largest first, each class
    /// in start order, each buffer at the lowest offset free of the buffers live with
    /// it: a long-lived small buffer goes down with the short-lived large ones. Placed
    /// by the class sweep (no overlap lists), O(C n log n + walks) for C classes,
    /// within about 1,000 units of work a buffer (at most 10^8); where that or the
    /// deadline cuts it, the buffers it leaves are filled into its holes
    /// (`plan/offline/area_order.rs`). It can be the lower plan where many buffers live
    /// through long stretches near the bound; far above the size class order elsewhere.
    GreedyAreaClass,
    /// Buffers live at the busiest steps first (by the total size live at the buffer's
    /// busiest step), then by size. The order in O(n log n + T log T) (a sparse table
    /// over the live profile); placement as [`Strategy::GreedySize`].
    GreedyBreadth,
    /// Longest lifetime first, then by size. Cost as [`Strategy::GreedySize`].
    GreedyLifetime,
    /// Largest conflict first (total size of the buffers live with it), then by size.
    /// The order in O(n log n) (prefix sums over starts and ends); placement as
    /// [`Strategy::GreedySize`].
    GreedyConflict,
    /// Lowest floor first: repeatedly places, among the buffers whose floor (the top
    /// of the highest buffer already placed in their lifetime) is lowest, the first of
    /// a static order, on that floor; several static orders (area, MiniMalloc's TAW,
    /// TWA and WAT, latest end, size, earliest start) in turn, keeping the lowest peak.
    /// Needs no overlap lists: a heap pop costs O(log n) plus a range maximum over
    /// the item's sections (O(log T) in a tree, or O(64 + len / 64) in two levels of
    /// blocks beyond 2^17 sections); an item is popped again each time its floor
    /// rises, so the pops per item grow with how often the floors under a lifetime
    /// rise (about 180 on iopddl_S_1, hundreds on long malloc-like lifetimes). Every
    /// order after the first gives up at a shared pop budget linear in n.
    Skyline,
    /// Bounded exact search over canonical solutions, aiming at the lower bound, then
    /// at capacities between it and the best peak of the placements `best` starts
    /// from (greedy orders, skyline). Exponential in the worst
    /// case, bounded by [`Budget::search_work`]; not run above 3,000 items.
    Search,
    /// Seeded local search from the placement `best` starts from (greedy orders,
    /// skyline): lifts the highest items around the peak and places them back,
    /// keeping changes that lower it. Where `best` would not climb (the search ran on
    /// a non-tiling, or the budget allows too few moves) it returns that placement. A move
    /// costs O(n + overlaps of the moved items); moves are bounded by
    /// [`Budget::climb_work`].
    Climb,
    /// Ejection repair (`plan/offline/eject.rs`) from the placement `best` starts from
    /// (greedy orders, skyline): a ceiling a step under the
    /// peak, every buffer above it placed again under it where the buffers it
    /// displaces weigh least (size times lifetime, more each time one is displaced),
    /// the displaced ones placed again the same way, until none is left (the ceiling
    /// holds; the next is a step lower) or the attempt's work runs out (the buffers
    /// left go to their lowest free offsets, above the ceiling where need be, and that
    /// placement is kept where it peaks lower, else the last complete one is; half the
    /// step; three failures in a row end it). A
    /// step costs O(L) for the L buffers live with the one placed, read from
    /// contiguous slots of the overlap index (O(n log T) memory, 32 bytes a slot); the
    /// work (a unit per buffer read) is bounded by [`EJECT_WORK_PER_ITEM`] per buffer,
    /// at most [`EJECT_MAX_WORK`] (and by the deadline, if one is set).
    Eject,
    /// All of the above in turn; keeps the smallest peak (ties: the earlier strategy)
    /// and stops at the first plan at the lower bound (or within the capacity, see
    /// `plan_ranges_to`). Skips what cannot help or would not finish: the
    /// overlap-list greedy orders on instances with more than 4 million overlapping
    /// pairs, the search above 3,000 items or 4 million pairs (there a repair of the
    /// peak's column runs instead: the skyline again with the items live at the step
    /// that sets the peak first); the climb runs there and after a search on a tiling
    /// (most sections full at the lower bound), not after other searches (their
    /// bisection leaves it nothing) nor when its budget allows fewer than 1,024 moves.
    ///
    /// Above 20,000 items or 4 million overlapping pairs an O(n log n) sweep
    /// (start order, smallest free gap of the live set, kept in a book of free gaps)
    /// places everything first, so that a plan exists at once; the skyline and
    /// the column repair then run within pop budgets at most linear in n (with a
    /// deadline, the skyline's first order has the deadline as its only budget, and the
    /// greedy orders run after the skyline where they are costly). Greedy-by-size still
    /// runs, within a work budget of about one unit per overlapping pair (1.5 x 10^9
    /// units, 7-16 ns each: 100,000 malloc-like buffers with 2,000 live complete in
    /// 2.5 s); where the budget or the deadline runs out, the buffers still
    /// to place (the smallest) are swept above its part. Where the budget covers
    /// greedy-by-size-class as well, that order runs first (given up after a
    /// sixteenth of its work if it foresees missing the deadline), and greedy-by-size
    /// after it. It runs before the skyline
    /// above 32,768 items, after the skyline and the repair below, only where they left
    /// the goal unreached. The ejection repair ([`Strategy::Eject`]) runs after the
    /// search and the climb, from the placement they started from (so that their
    /// paths do not change; with a deadline, in the time they leave). Greedy by size into
    /// holes ([`Strategy::GreedySizeHoles`], no overlap lists) runs after everything
    /// else where the goal is still unreached (it changes no other path), up to
    /// 131,072 items: beyond, `best` does not run it and can be above it. The area class
    /// order ([`Strategy::GreedyAreaClass`]) runs last of all where the goal is still
    /// unreached and the deadline has not passed (it changes no other path, nor takes
    /// their time), and is repaired by the ejection repair where it is the lower plan;
    /// above 20,000 items only where a buffer overlaps at least 8,192 others on average
    /// (many live at once: elsewhere it was far above and costly) and only where the
    /// class sweep places it whole within its work, so there `best` can be above it run
    /// alone. With a deadline every phase gives up once it passes (checked every 64 greedy
    /// placements, every 4,096 heap pops, before every search probe and climb move),
    /// returning the lowest plan so far. Up to those sizes it runs every strategy above
    /// that it does not skip and is never above any of them on the instances of
    /// `tests/offline_scale.rs`. Beyond the greedy work budget (about 1.5 x 10^9
    /// overlapping pairs) it can end above [`Strategy::GreedySize`] run alone, which
    /// has no budget.
    Best,
}

impl Strategy {
    /// Every strategy (itself last); [`Strategy::Best`] tries them in this order but
    /// for [`Strategy::GreedySizeHoles`] and [`Strategy::GreedyAreaClass`], which it
    /// runs after all the others, in that order.
    pub const ALL: [Strategy; 13] = [
        Strategy::GreedySize,
        Strategy::GreedySizeHoles,
        Strategy::GreedySizeBestFit,
        Strategy::GreedySizeClass,
        Strategy::GreedyAreaClass,
        Strategy::GreedyBreadth,
        Strategy::GreedyLifetime,
        Strategy::GreedyConflict,
        Strategy::Skyline,
        Strategy::Search,
        Strategy::Climb,
        Strategy::Eject,
        Strategy::Best,
    ];

    /// The name used by the CLI and recorded in plans.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::GreedySize => "greedy-size",
            Strategy::GreedySizeHoles => "greedy-size-holes",
            Strategy::GreedySizeBestFit => "greedy-size-best-fit",
            Strategy::GreedySizeClass => "greedy-size-class",
            Strategy::GreedyAreaClass => "greedy-area-class",
            Strategy::GreedyBreadth => "greedy-breadth",
            Strategy::GreedyLifetime => "greedy-lifetime",
            Strategy::GreedyConflict => "greedy-conflict",
            Strategy::Skyline => "skyline",
            Strategy::Search => "search",
            Strategy::Climb => "climb",
            Strategy::Eject => "eject",
            Strategy::Best => "best",
        }
    }

    /// The strategy with this name (see [`Strategy::name`]), if any.
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Work budgets, and an optional deadline. A unit is roughly one visit of a buffer or
/// a time section. Without a deadline (the default) planning is deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Work allowed to [`Strategy::Search`] (a search node costs a unit per unplaced
    /// buffer and per time section it looks at, plus one per buffer whose floor a
    /// placement raises).
    pub search_work: u64,
    /// Work allowed to [`Strategy::Climb`] (a unit per overlapping buffer visited or
    /// buffer scanned; a move costs about twice the buffer count plus the overlaps of
    /// the buffers it moves).
    pub climb_work: u64,
    /// When set, every phase stops once this instant has passed and the best plan so
    /// far is returned; the first complete placement is always made, so a deadline
    /// already past still gives a valid (greedy) plan. The result then depends on the
    /// machine's speed.
    pub deadline: Option<Instant>,
    /// Whether [`Strategy::Best`] may use more than one thread where the machine has
    /// more than one core (default `true`): the search's preorders each on a thread of
    /// its own; without a deadline, the two greedy orders by size of a large
    /// instance side by side where each completes within the work budget alone; and
    /// elsewhere a greedy order by size (or a greedy strategy run alone) placed on two
    /// threads by speculative chunks, with the very offsets of one thread; under a
    /// deadline, on a large instance whose class order is placed by the class sweep,
    /// the refill (the class order's largest classes, the rest filled, repaired) beside
    /// the orders by size, which then keep to one thread.
    /// Without a deadline the plan is the same either way and only the time changes
    /// (in turn, those two orders take up to twice as long); with one, what each phase
    /// reaches before it depends on the threads, as on the machine's speed.
    pub threads: bool,
}

impl Default for Budget {
    /// About two seconds of search and a second of climb on a 2020s CPU core; no
    /// deadline.
    fn default() -> Budget {
        Budget {
            search_work: 500_000_000,
            climb_work: 40_000_000,
            deadline: None,
            threads: true,
        }
    }
}

impl Budget {
    /// Whether a phase may run a second thread: [`Budget::threads`] and a machine
    /// with a second core ([`has_second_core`]).
    pub(crate) fn two_threads(&self) -> bool {
        self.threads && has_second_core()
    }

    /// The default work budgets with a deadline `limit` from now (no deadline if the
    /// clock cannot represent it).
    pub fn with_time_limit(limit: Duration) -> Budget {
        Budget {
            deadline: Instant::now().checked_add(limit),
            ..Budget::default()
        }
    }

    /// Whether the deadline, if any, has passed.
    fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Offsets for a list of live ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangePlan {
    /// `offsets[i]` for range `i`; each a multiple of the alignment.
    pub offsets: Vec<u64>,
    /// The highest `offset + aligned size`: the memory the plan needs.
    pub peak: u64,
    /// The lower bound for these ranges with aligned sizes (no plan peaks below it).
    pub lower_bound: u64,
    /// The strategy whose placement this is (for [`Strategy::Best`], the winner).
    pub found_by: Strategy,
}

/// Plans live ranges with the default [`Budget`].
///
/// # Errors
/// [`PlanError::BadAlignment`] unless `alignment` is a power of two;
/// [`PlanError::SizeOverflow`] (with the range index as tensor id) if the aligned sizes
/// do not add up within 64 bits.
pub fn plan_ranges(
    ranges: &[LiveRange],
    alignment: u64,
    strategy: Strategy,
) -> Result<RangePlan, PlanError> {
    plan_ranges_with(ranges, alignment, strategy, &Budget::default())
}

/// Plans live ranges with an explicit budget.
///
/// # Errors
/// As [`plan_ranges`].
pub(crate) fn plan_ranges_with(
    ranges: &[LiveRange],
    alignment: u64,
    strategy: Strategy,
    budget: &Budget,
) -> Result<RangePlan, PlanError> {
    plan_ranges_to(ranges, alignment, strategy, budget, None)
}

/// Plans live ranges towards a target capacity (bytes). With `Some(capacity)` at or
/// above the lower bound, [`Strategy::Best`] stops at the first plan whose peak fits
/// it (so a greedy plan that fits ends it at once), and the search
/// ([`Strategy::Search`], and inside `best`) probes the capacity first instead of the
/// lower bound, then, if that fails, bisects upwards for the smallest plan it can
/// find; [`Strategy::Climb`] stops once it fits. Greedy and skyline strategies ignore
/// it. With `None`, or a capacity below the lower bound (nothing can fit it), every
/// strategy aims at the lower bound, as [`plan_ranges_with`]. The peak may still
/// exceed the capacity: compare [`RangePlan::peak`] with it.
///
/// # Errors
/// As [`plan_ranges`].
pub(crate) fn plan_ranges_to(
    ranges: &[LiveRange],
    alignment: u64,
    strategy: Strategy,
    budget: &Budget,
    capacity: Option<u64>,
) -> Result<RangePlan, PlanError> {
    let p = Prepared::new(ranges, alignment)?;
    let goal = Goal::new(&p, budget, capacity);
    let (item_offsets, peak, found_by) = run(&p, strategy, &goal);
    let mut offsets = vec![0u64; p.count];
    for (it, offset) in p.items.iter().zip(item_offsets) {
        offsets[it.index] = offset;
    }
    Ok(RangePlan {
        offsets,
        peak,
        lower_bound: p.lower_bound,
        found_by,
    })
}

/// The live ranges of an interval problem, in file order (`[lower, upper)`, `size`).
pub fn interval_ranges(problem: &IntervalProblem) -> Vec<LiveRange> {
    problem
        .intervals
        .iter()
        .map(|iv| LiveRange {
            start: iv.lower,
            end: iv.upper,
            size: iv.size,
        })
        .collect()
}

/// What a planning run aims at and how long it may take.
#[derive(Debug, Clone, Copy)]
struct Goal<'a> {
    /// Stop as soon as a plan peaks at or below this: the capacity when one at or
    /// above the lower bound was given, else the lower bound.
    target: u64,
    /// Whether the target is a capacity the caller gave (not the lower bound).
    capacity: bool,
    budget: Budget,
    /// Stop once this is raised (by another thread: the refill beside the orders by
    /// size, ended once they reach the goal; `greedy_by_size_alone`).
    stop: Option<&'a AtomicBool>,
}

impl Goal<'_> {
    fn new(p: &Prepared, budget: &Budget, capacity: Option<u64>) -> Goal<'static> {
        let capacity = capacity.filter(|&c| c >= p.lower_bound);
        Goal {
            target: capacity.unwrap_or(p.lower_bound),
            capacity: capacity.is_some(),
            budget: *budget,
            stop: None,
        }
    }

    fn reached(&self, peak: u64) -> bool {
        peak <= self.target
    }

    /// Whether a run holding a plan that peaks at `peak` should stop: the goal is
    /// reached, the deadline has passed or the stop flag is raised.
    fn done(&self, peak: u64) -> bool {
        self.reached(peak) || self.budget.expired() || self.stopped()
    }

    /// Whether the stop flag, if any, is raised.
    fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// A placement (offsets per item position), its peak and who found it.
type Placement = (Vec<u64>, u64, Strategy);

/// Runs one strategy on a prepared problem: offsets per item, peak, and who found them.
fn run(p: &Prepared, strategy: Strategy, goal: &Goal) -> Placement {
    match strategy {
        Strategy::GreedySize
        | Strategy::GreedySizeBestFit
        | Strategy::GreedySizeClass
        | Strategy::GreedyBreadth
        | Strategy::GreedyLifetime
        | Strategy::GreedyConflict => {
            if strategy == Strategy::GreedySizeClass && class_sweep_pays(p) {
                let order = greedy::by_size_class(p);
                let placed = class_sweep::place_classes(p, &order, &class_sweep::Limits::UNLIMITED);
                return (placed.offsets, placed.peak, strategy);
            }
            let index = OverlapIndex::new(p);
            let (order, fit) = greedy_order(p, strategy);
            let threads = goal.budget.two_threads();
            let (offsets, peak) = greedy::place_on(p, &index, &order, fit, threads);
            (offsets, peak, strategy)
        }
        Strategy::GreedySizeHoles => {
            let (offsets, peak) = holes::place(p, &greedy::by_size(p));
            (offsets, peak, strategy)
        }
        Strategy::GreedyAreaClass => {
            let (offsets, peak) = area_order::place(p, goal.budget.deadline);
            (offsets, peak, strategy)
        }
        Strategy::Skyline => {
            let mut best = None;
            let _ = skyline_orders(p, goal, &mut best);
            best.unwrap_or_else(|| (Vec::new(), 0, strategy))
        }
        Strategy::Search => {
            let mut index = None;
            let Some((offsets, peak, _)) = start(p, goal, &mut index) else {
                return (Vec::new(), 0, strategy);
            };
            if goal.done(peak) {
                return (offsets, peak, strategy);
            }
            let (offsets, peak) = search_below(p, offsets, peak, goal);
            (offsets, peak, strategy)
        }
        Strategy::Climb => {
            let mut index = None;
            let Some((offsets, peak, _)) = start(p, goal, &mut index) else {
                return (Vec::new(), 0, strategy);
            };
            if goal.done(peak) || !climb_applies(p, goal) {
                return (offsets, peak, strategy);
            }
            let index = index.get_or_insert_with(|| OverlapIndex::new(p));
            let (offsets, peak) = climb(p, index, offsets, goal);
            (offsets, peak, strategy)
        }
        Strategy::Eject => {
            let mut index = None;
            start_then_eject(p, goal, &mut index).unwrap_or_else(|| (Vec::new(), 0, strategy))
        }
        Strategy::Best => best(p, goal),
    }
}

/// `per_item` for each of `items`, saturating: the time kept or forecast for them.
pub(crate) fn time_for(per_item: Duration, items: usize) -> Duration {
    per_item.saturating_mul(u32::try_from(items).unwrap_or(u32::MAX))
}

/// Whether `left` items at `per_item` each, from now, would end at or after
/// `deadline`.
pub(crate) fn out_of_time(deadline: Instant, per_item: Duration, left: usize) -> bool {
    Instant::now()
        .checked_add(time_for(per_item, left))
        .is_none_or(|t| t >= deadline)
}

/// The greedy strategies, in the order [`Strategy::Best`] tries them.
const GREEDY: [Strategy; 6] = [
    Strategy::GreedySize,
    Strategy::GreedySizeBestFit,
    Strategy::GreedyBreadth,
    Strategy::GreedyLifetime,
    Strategy::GreedyConflict,
    Strategy::GreedySizeClass,
];

/// The order and gap choice of a greedy strategy.
fn greedy_order(p: &Prepared, strategy: Strategy) -> (Order, Fit) {
    match strategy {
        Strategy::GreedySizeBestFit => (greedy::by_size(p), Fit::Smallest),
        Strategy::GreedySizeClass => (greedy::by_size_class(p), Fit::Lowest),
        Strategy::GreedyBreadth => (greedy::by_breadth(p), Fit::Lowest),
        Strategy::GreedyLifetime => (greedy::by_lifetime(p), Fit::Lowest),
        Strategy::GreedyConflict => (greedy::by_conflict(p), Fit::Lowest),
        _ => (greedy::by_size(p), Fit::Lowest),
    }
}

/// Keeps `candidate` in `best` if it peaks lower (ties: the earlier one stays).
fn keep_lower(best: &mut Option<Placement>, candidate: Placement) {
    if best.as_ref().is_none_or(|b| candidate.1 < b.1) {
        *best = Some(candidate);
    }
}

/// The greedy orders `strategies` in turn into `best`, stopping once `goal` (if any) is reached or
/// its deadline has passed (checked between placements, after the first).
fn greedy_orders(
    p: &Prepared,
    index: &OverlapIndex,
    goal: Option<&Goal>,
    strategies: &[Strategy],
    best: &mut Option<Placement>,
) {
    for &strategy in strategies {
        if let (Some(goal), Some(b)) = (goal, best.as_ref()) {
            if goal.done(b.1) {
                return;
            }
        }
        // The first placement always completes; later ones give up at the deadline.
        let deadline = match (goal, best.as_ref()) {
            (Some(goal), Some(_)) => goal.budget.deadline,
            _ => None,
        };
        let (order, fit) = greedy_order(p, strategy);
        if let Some((offsets, peak)) = greedy::place_until(p, index, &order, fit, deadline) {
            keep_lower(best, (offsets, peak, strategy));
        }
    }
}

/// Work the ejection repair may spend per item (a unit per item read): on 100,000
/// malloc-like buffers about two seconds.
pub const EJECT_WORK_PER_ITEM: u64 = 500;

/// Work the ejection repair may spend at most, whatever the item count: about six
/// seconds on a million malloc-like buffers.
pub const EJECT_MAX_WORK: u64 = 100_000_000;

/// Keeps `candidate` in `best` if it peaks lower (ties: the earlier one stays).
fn keep_lower_placement(best: &mut Placement, candidate: Placement) {
    if candidate.1 < best.1 {
        *best = candidate;
    }
}

/// Whether the machine offers more than one thread of execution (where a second
/// thread can run beside the first).
pub(crate) fn has_second_core() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staggered(n: u64) -> Vec<LiveRange> {
        (0..n)
            .map(|i| LiveRange {
                start: (i * 7) % 23,
                end: (i * 7) % 23 + 1 + i % 6,
                size: 1 + (i * 13) % 9,
            })
            .collect()
    }

    fn assert_valid(ranges: &[LiveRange], plan: &RangePlan) {
        for (i, x) in ranges.iter().enumerate() {
            assert!(
                plan.offsets[i] + x.size <= plan.peak,
                "range {i} above the peak"
            );
            for (j, y) in ranges.iter().enumerate().skip(i + 1) {
                let live_together = x.start < y.end && y.start < x.end;
                let apart = plan.offsets[i] + x.size <= plan.offsets[j]
                    || plan.offsets[j] + y.size <= plan.offsets[i];
                assert!(!live_together || apart, "{i} and {j} overlap");
            }
        }
    }

    #[test]
    fn deadline_already_past_returns_a_valid_greedy_plan() {
        let ranges = staggered(60);
        let greedy = plan_ranges(&ranges, 1, Strategy::GreedySize).expect("plans");
        assert!(
            greedy.peak > greedy.lower_bound,
            "the test needs a gap to close"
        );
        let budget = Budget {
            deadline: Some(Instant::now()),
            ..Budget::default()
        };
        let plan = plan_ranges_with(&ranges, 1, Strategy::Best, &budget).expect("plans");
        assert_eq!(plan.found_by, Strategy::GreedySize);
        assert_eq!(plan.peak, greedy.peak);
        assert_valid(&ranges, &plan);
    }

    #[test]
    fn time_limit_sets_a_deadline_and_default_has_none() {
        assert_eq!(Budget::default().deadline, None);
        let before = Instant::now();
        let budget = Budget::with_time_limit(Duration::from_secs(5));
        let deadline = budget.deadline.expect("representable");
        assert!(deadline >= before + Duration::from_secs(5));
        assert_eq!(budget.search_work, Budget::default().search_work);
    }

    #[test]
    fn capacity_reached_by_greedy_stops_before_search_and_climb() {
        let ranges = staggered(60);
        let greedy = plan_ranges(&ranges, 1, Strategy::GreedySize).expect("plans");
        let best = plan_ranges(&ranges, 1, Strategy::Best).expect("plans");
        assert!(
            best.peak < greedy.peak,
            "without a capacity best goes lower"
        );
        let budget = Budget::default();
        let plan =
            plan_ranges_to(&ranges, 1, Strategy::Best, &budget, Some(greedy.peak)).expect("plans");
        assert_eq!(plan.found_by, Strategy::GreedySize);
        assert_eq!(plan.peak, greedy.peak);
        assert_valid(&ranges, &plan);
    }

    #[test]
    fn capacity_between_bound_and_greedy_is_met_by_the_search() {
        let ranges = staggered(60);
        let greedy = plan_ranges(&ranges, 1, Strategy::GreedySize).expect("plans");
        let best = plan_ranges(&ranges, 1, Strategy::Best).expect("plans");
        let budget = Budget::default();
        for strategy in [Strategy::Search, Strategy::Best] {
            let plan = plan_ranges_to(&ranges, 1, strategy, &budget, Some(greedy.peak - 1))
                .expect("plans");
            assert!(plan.peak < greedy.peak, "{strategy}");
            assert!(plan.peak >= best.peak, "{strategy}");
            assert_valid(&ranges, &plan);
        }
    }

    #[test]
    fn capacity_below_the_bound_plans_as_without_one() {
        let ranges = staggered(60);
        let free = plan_ranges(&ranges, 1, Strategy::Best).expect("plans");
        let budget = Budget::default();
        let plan = plan_ranges_to(
            &ranges,
            1,
            Strategy::Best,
            &budget,
            Some(free.lower_bound - 1),
        )
        .expect("plans");
        assert_eq!(plan, free);
    }

    #[test]
    fn skyline_strategy_keeps_its_lowest_order_and_verifies() {
        let ranges = staggered(60);
        let plan = plan_ranges(&ranges, 1, Strategy::Skyline).expect("plans");
        assert_eq!(plan.found_by, Strategy::Skyline);
        assert!(plan.peak >= plan.lower_bound);
        assert_valid(&ranges, &plan);
        let p = Prepared::new(&ranges, 1).expect("valid");
        for which in skyline::ORDERS {
            let (_, peak) = skyline::place(&p, &which.order(&p));
            assert!(plan.peak <= peak, "{which:?}");
        }
    }
}
