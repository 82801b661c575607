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

mod class_sweep;
mod eject;
mod elementary;
mod fill;
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
use greedy::{Fit, Order};
use index::OverlapIndex;
use prepared::Prepared;
use search::{Found, Searcher};

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
    /// 131,072 items: beyond, `best` does not run it and can be above it. With a
    /// deadline every phase gives up once it passes (checked every 64 greedy
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
    /// for [`Strategy::GreedySizeHoles`], which it runs after all the others.
    pub const ALL: [Strategy; 12] = [
        Strategy::GreedySize,
        Strategy::GreedySizeHoles,
        Strategy::GreedySizeBestFit,
        Strategy::GreedySizeClass,
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
    /// size, ended once they reach the goal; [`greedy_by_size_alone`]).
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

/// Heap pops each item may cost the skyline orders of one run (the cheap orders take
/// about 180 per item on iopddl_S_1, at about 0.1 us each), on top of
/// [`SKYLINE_WORK_FLOOR`].
const SKYLINE_WORK_PER_ITEM: u64 = 192;

/// Items that get the full per-item pop budgets. Beyond, a heap pop costs more (the
/// heap and heights leave the caches: about 7 us a pop at a million items on a loaded
/// 2-core machine, 0.6 us on iopddl_S_1), so the full share is spread over the items
/// (it shrinks as `FULL_ITEMS / n`) and each further item adds `1 / TAIL_SHARE` of the
/// per-item budget: a default plan of a million buffers takes seconds, with the
/// skyline completing only where its floors rarely rise (few buffers live at once).
const FULL_ITEMS: u64 = 32_768;

/// See [`FULL_ITEMS`].
const TAIL_SHARE: u64 = 128;

/// The heap pops a skyline phase may spend: [`SKYLINE_WORK_FLOOR`], plus `per_item`
/// for each item up to [`FULL_ITEMS`] items, that share shrinking as `FULL_ITEMS / n`
/// beyond, plus `per_item / TAIL_SHARE` for each item beyond: deterministic, at most
/// linear in n.
fn pops_for(p: &Prepared, per_item: u64) -> u64 {
    let n = p.items.len() as u64;
    let full = n.min(FULL_ITEMS);
    let shared = per_item.saturating_mul(full).saturating_mul(full) / n.max(1);
    SKYLINE_WORK_FLOOR
        .saturating_add(shared)
        .saturating_add((per_item / TAIL_SHARE).saturating_mul(n - full))
}

/// Heap pops per item the first skyline order may spend after the sweep (on top of
/// [`SKYLINE_WORK_FLOOR`]): iopddl_S_1 takes about 180.
const FIRST_ORDER_WORK_PER_ITEM: u64 = 256;

/// Heap pops the skyline orders of one run may always spend (a few hundred ms).
const SKYLINE_WORK_FLOOR: u64 = 1_000_000;

/// The skyline orders in turn into `best` until `goal` is reached, the deadline passes
/// or their shared work budget runs out. The first order always completes when `best`
/// holds nothing yet; later ones give up once they peak at the best so far. Returns the
/// heap pops the first order took, or at its pace would have taken to complete where it
/// gave up ([`skyline::SkyRun::pops_for_all`]; 0 if none ran).
fn skyline_orders(p: &Prepared, goal: &Goal, best: &mut Option<Placement>) -> u64 {
    let mut work = pops_for(p, SKYLINE_WORK_PER_ITEM);
    let mut first_pops = None;
    for which in skyline::ORDERS {
        let limits = match best.as_ref() {
            None => skyline::Cutoffs::NONE,
            Some(b) if goal.done(b.1) || (first_pops.is_some() && work == 0) => break,
            // The first order after the sweep gets a budget of its own (on long
            // lifetimes an item comes out of the heap again each time its floor
            // rises, so its pops have no bound in n alone).
            Some(b) => skyline::Cutoffs {
                stop_at: b.1,
                work: if first_pops.is_some() {
                    work
                } else if goal.budget.deadline.is_some() {
                    // With a deadline, the deadline is its budget.
                    u64::MAX
                } else {
                    pops_for(p, FIRST_ORDER_WORK_PER_ITEM)
                },
                deadline: goal.budget.deadline,
            },
        };
        let started = Instant::now();
        let order = which.order(p);
        let run = skyline::place_within(p, &order, &limits);
        log::debug!(
            "skyline {which:?}: {:?} with {} pops ({} items) in {:?}",
            run.placed.as_ref().map(|x| x.1),
            run.pops,
            run.items,
            started.elapsed()
        );
        work = work.saturating_sub(run.pops);
        let first = first_pops.is_none();
        let needed = run.pops_for_all(p.items.len());
        first_pops.get_or_insert(needed);
        if first && run.placed.is_none() && needed >= pops_for(p, FIRST_ORDER_WORK_PER_ITEM) {
            // The first order ran out of pops, or its pace showed it would: the
            // others (no cheaper) would too.
            break;
        }
        if let Some((offsets, peak)) = run.placed {
            keep_lower(best, (offsets, peak, Strategy::Skyline));
        }
    }
    first_pops.unwrap_or(0)
}

/// Heap pops per item the column repair of one run may spend (a skyline order with
/// the column first takes about 170 per item on iopddl_S_1, so about three orders), on
/// top of [`SKYLINE_WORK_FLOOR`].
const REPAIR_WORK_PER_ITEM: u64 = 512;

/// The column repair ([`repair`]) of the best placement so far, within its pop budget
/// and the goal's deadline; keeps a lower peak (found by the skyline). Skipped when the
/// first skyline order took, or at its pace would have taken, more pops
/// (`skyline_pops`) than the whole repair budget: a repair run costs about as much, so
/// it could not complete one.
fn column_repair(p: &Prepared, goal: &Goal, skyline_pops: u64, best: &mut Option<Placement>) {
    let Some((offsets, peak, _)) = best.as_ref() else {
        return;
    };
    let work = pops_for(p, REPAIR_WORK_PER_ITEM);
    if goal.done(*peak) || skyline_pops > work {
        return;
    }
    let budget = repair::Budget {
        target: goal.target,
        work,
        deadline: goal.budget.deadline,
    };
    let started = Instant::now();
    let (offsets, peak, spent) = repair::repair(p, offsets.clone(), *peak, &budget);
    log::debug!(
        "column repair: {peak} with {spent} pops in {:?}",
        started.elapsed()
    );
    keep_lower(best, (offsets, peak, Strategy::Skyline));
}

/// Above this many items `best` places by the O(n log n) sweep first.
const SWEEP_FIRST_ITEMS: usize = 20_000;

/// Above this many overlapping pairs `best` skips the greedy orders: each costs a
/// visit per pair (about a second on iopddl_S_1's 43 million) and the skyline does
/// better there.
const GREEDY_MAX_PAIRS: u64 = 4_000_000;

/// Above [`GREEDY_MAX_PAIRS`] `best` still runs greedy-by-size (the best of the greedy
/// orders on malloc-like traces), alone, within this much work: a unit per placed
/// buffer read while placing one (one per unordered overlapping pair: half of
/// [`Prepared::overlap_pairs`], which counts ordered pairs). A unit costs 7 ns
/// (2,000 live) to 16 ns (20,000 live: the placed neighbours leave the cache) on the
/// idle 2-core build machine. Where the work (or the deadline) runs out, the buffers
/// still to place, the smallest, are swept above the greedy part. 100,000 malloc-like
/// buffers with 2,000 live (3.7 x 10^8 pairs) complete in 2.5 s; a million (4.0 x
/// 10^9 pairs) place about the largest two thirds by greedy, about 1% over the bound
/// where the sweep alone is 25% over; a million with 20,000 live (3.8 x 10^10 pairs)
/// the largest fifth or so (where the class sweep, cut by this work, may split, it
/// does instead: [`class_sweep_then_size`]). The budget keeps the greedy orders of a default plan of a
/// million buffers within about half a minute (the whole plan within about a minute,
/// the refill included: [`refilled_and_repaired`]); `--time-limit` cuts that. Without a deadline, where
/// each of the two orders by size completes within it alone, each has it to itself
/// (both run: side by side on two threads, in about the time of one, or in turn on
/// one thread, in up to twice it); otherwise they share it.
const GREEDY_SIZE_WORK: u64 = 1_500_000_000;

/// Every strategy in turn, keeping the smallest peak; stops as soon as one reaches the
/// goal. The local search starts from the best placement found before it.
///
/// On large instances (more than [`SWEEP_FIRST_ITEMS`] items or [`GREEDY_MAX_PAIRS`]
/// overlapping pairs) the O(n log n) sweep ([`sweep::place`]) goes first, so that a
/// plan exists at once and every later placement may give up at the deadline; there
/// the greedy orders other than greedy-by-size run only with a deadline (each given up
/// if it passes), as their O(n L log L) cost (L buffers live at a time) has no bound in
/// n alone; greedy-by-size runs within [`GREEDY_SIZE_WORK`] (about a visit a pair),
/// sweeping what it has not placed when that runs out (not where the class sweep,
/// cut by that work, splits and is repaired in rounds: [`class_sweep_then_size`]).
/// Every other phase has a work
/// budget linear in the item count (times the logarithms of its structures), so the
/// default plan of a million buffers takes under a minute.
fn best(p: &Prepared, goal: &Goal) -> Placement {
    let mut best = best_of_the_others(p, goal);
    // Greedy by size into holes: its cost does not grow with the pair count, so on
    // every instance up to holes::FULL_SCAN_ITEMS items where the goal is unreached,
    // last, so that it changes no other phase's path (the search and the climb
    // start from what they started from before it existed). Beyond, it took 8-16 s
    // of CPU on a million buffers and landed above the sweep, so it does not run.
    if p.items.len() <= holes::FULL_SCAN_ITEMS && !goal.done(best.1) {
        let started = Instant::now();
        let order = greedy::by_size(p);
        if let Some((offsets, peak)) = holes::place_until(p, &order, goal.budget.deadline) {
            log::debug!("greedy-size-holes: {peak} in {:?}", started.elapsed());
            keep_lower_placement(&mut best, (offsets, peak, Strategy::GreedySizeHoles));
        }
    }
    best
}

/// [`best`] without greedy-size-holes.
fn best_of_the_others(p: &Prepared, goal: &Goal) -> Placement {
    let mut index: Option<OverlapIndex> = None;
    // The ejection repair runs last, from the start placement, so that the search's
    // and the climb's paths do not change and `best` is never above either (nor above
    // the ejection repair alone) without a deadline. With one it has the time they
    // leave: taking a share of it from the start cost more than it gave (the class
    // order then foresees missing the deadline and gives up: few-sizes 100k in 2 s
    // 1.0024 -> 1.0114).
    let Some((offsets, peak, strategy)) = start(p, goal, &mut index) else {
        return (Vec::new(), 0, Strategy::Best);
    };
    if goal.done(peak) {
        return (offsets, peak, strategy);
    }
    let mut best = searched_and_climbed(p, goal, &mut index, offsets.clone(), peak, strategy);
    if !goal.done(best.1) && !repaired_in_rounds_already(goal, strategy) {
        let index = index.get_or_insert_with(|| OverlapIndex::new(p));
        let refill = refill_applies(p, goal, strategy, best.1);
        let start = refill.then(|| offsets.clone());
        let (ejected, ejected_peak) = eject_repair(p, index, offsets, goal);
        keep_lower_placement(&mut best, (ejected, ejected_peak, Strategy::Eject));
        if let Some(start) = start.filter(|_| !goal.done(best.1)) {
            let (refilled, refilled_peak) =
                refilled_and_repaired(p, index, start, goal, best.1, Duration::ZERO);
            keep_lower_placement(&mut best, (refilled, refilled_peak, Strategy::Eject));
        }
    }
    best
}

/// Whether [`best_of_the_others`] refills its start plan ([`refilled_and_repaired`]),
/// made by `strategy`, with the plan at hand peaking at `peak`: without a deadline,
/// where the start is the class order's plan and a refill may run
/// ([`refill_may_run`]: a large instance short of the goal). The refill then
/// makes, from the complete class order, the plan the deadline's path starts from
/// where the class order cannot complete and is placed by the class sweep (its largest
/// classes in the class order and the fill: [`class_by_sweep`]; [`class_then_fill`]
/// may take them by exact size). Under a deadline the refill runs from the start on
/// the second core where it may ([`refill_beside_applies`]), else the orders by size
/// refill the class sweep's complete plan themselves, where the time left allows
/// ([`refill_in_the_time_left`]). From greedy by size's plan (narrow, wide and bursts
/// at a million) it lowered nothing measured and cost 6-15 s.
fn refill_applies(p: &Prepared, goal: &Goal, strategy: Strategy, peak: u64) -> bool {
    goal.budget.deadline.is_none()
        && strategy == Strategy::GreedySizeClass
        && refill_may_run(p, goal, peak)
}

/// The plan `start` with its largest size classes ([`large_classes`] of the class
/// order) kept where they are and every smaller item filled again into the holes they
/// leave ([`fill::place_into`]), then repaired by the ejection repair in rounds while
/// each lowers it and it may still end below `to_beat`, the plan at hand
/// ([`repair_in_rounds`], at most 1 + [`MORE_REPAIR_ROUNDS`]). The
/// repair lowers such a plan further than the start plan it came from, though the
/// start is lower: on a million malloc-like buffers (seed 26) the class order's plan is
/// 1.0108 of the bound and repairs to 1.0090, refilled it is 1.0125 and repairs to
/// 1.0075, then 1.0023; at 100,000 buffers it is lower on some seeds and higher on
/// others, so both are repaired and the lower kept. O(fill) + the repair's work.
fn refilled_and_repaired(
    p: &Prepared,
    index: &OverlapIndex,
    start: Vec<u64>,
    goal: &Goal,
    to_beat: u64,
    sweep_per_item: Duration,
) -> (Vec<u64>, u64) {
    let started = Instant::now();
    let order = greedy::by_size_class(p);
    let fixed = large_classes(p, &order);
    if fixed == order.len() {
        // Nothing to fill again: the start itself, which its own repair had.
        let peak = p.peak_of(&start);
        return (start, peak);
    }
    let mut offsets = start;
    let peak = fill::place_into(
        p,
        &order[fixed..],
        &mut offsets,
        goal.budget.deadline,
        sweep_per_item,
    );
    log::debug!(
        "the start's {fixed} largest items kept, the rest filled: {peak} in {:?}",
        started.elapsed()
    );
    repair_in_rounds(
        p,
        index,
        (offsets, peak),
        goal,
        1 + MORE_REPAIR_ROUNDS,
        Some(to_beat),
    )
}

/// Under a deadline, the refill ([`refilled_and_repaired`]) of the class order's plan
/// complete by the class sweep ([`class_sweep_then_size`]; `class`, with the time it
/// took; nothing where it did not complete) into `best` if lower, where the instance is large (more than
/// [`SWEEP_FIRST_ITEMS`] items), `best` is short of the goal and the time left is at
/// least what the class order took: the fill and a round of the repair take about
/// that or less (a million malloc-like buffers: 2.3 s and 5.3 s against 13.2 s). It
/// runs after greedy by size and the repair's rounds in the time left, which under a
/// tight deadline take that time, so it is the step of a farther one: a million
/// malloc-like buffers (seed 26) with `--time-limit 60` ended at the class order's
/// repaired plan (1.0089) without it, 1.0008 with it (the plan without a limit).
/// Cut by the deadline (the fill sweeps above what it has no time for, `sweep_time`
/// being what sweeping every item took; the repair stops), it loses nothing, since
/// the lower plan is kept. Not after the class order placed by the greedy (where the
/// class sweep does not pay): on 24,000 malloc-like buffers with 400 live (seeds 1-8,
/// `--time-limit 600`) the refill was never below what that path reached without it,
/// and took up to 2 s more.
fn refill_in_the_time_left(
    p: &Prepared,
    goal: &Goal,
    class: Option<(Vec<u64>, Duration)>,
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &mut Option<Placement>,
) {
    let (Some((class, class_took)), Some(deadline), Some(to_beat)) =
        (class, goal.budget.deadline, best.as_ref().map(|b| b.1))
    else {
        return;
    };
    if !refill_may_run(p, goal, to_beat) || !greedy::time_left_for(deadline, class_took) {
        return;
    }
    let sweep_per_item = per_item(p, sweep_time);
    let (offsets, peak) = refilled_and_repaired(p, index, class, goal, to_beat, sweep_per_item);
    keep_lower(best, (offsets, peak, Strategy::Eject));
}

/// Whether a refill ([`refilled_and_repaired`]) may run on `p` with a plan at hand
/// peaking at `peak`: a large instance (more than [`SWEEP_FIRST_ITEMS`] items) short
/// of the goal.
fn refill_may_run(p: &Prepared, goal: &Goal, peak: u64) -> bool {
    p.items.len() > SWEEP_FIRST_ITEMS && !goal.done(peak)
}

/// What [`refill_in_the_time_left`] starts from, under a deadline: the class order's
/// plan and the time it took, cloned only where it completed and a refill may run
/// ([`refill_may_run`]; 8 MB at a million items).
fn refill_start(
    p: &Prepared,
    goal: &Goal,
    class: &greedy::Swept,
    took: Duration,
) -> Option<(Vec<u64>, Duration)> {
    (class.complete && refill_may_run(p, goal, class.peak)).then(|| (class.offsets.clone(), took))
}

/// The refill runs beside the orders by size ([`greedy_by_size_alone`]) only where a
/// second [`MovableSpans`](index::MovableSpans) takes at most this many bytes: at a
/// million buffers the spans take several hundred MB, and a second set would take the
/// plan past the 1 GB it is to stay under.
const REFILL_BESIDE_MAX_BYTES: usize = 256 << 20;

/// Whether the refill runs from the start on a second thread beside the orders by
/// size ([`large_classes_filled_and_repaired`]): under a deadline, where a refill may
/// run on `p` ([`refill_may_run`]), the orders by size take the single-threaded class
/// sweep ([`class_sweep_pays`]; the other paths place on two threads themselves), the
/// machine has a second core and [`Budget::threads`] allows it, and the refill's
/// repair fits [`REFILL_BESIDE_MAX_BYTES`].
///
/// After the class order the refill's own start costs little (its largest classes
/// are the class order's first items: 15,000 of 100,000 malloc-like buffers, placed
/// in about 0.04 s, the rest filled in about 0.16 s) but, run after it, it has no time
/// left under a tight deadline; beside it, its repair starts about 0.4 s before the
/// class order's and has the time to the deadline.
fn refill_beside_applies(
    p: &Prepared,
    goal: &Goal,
    index: &OverlapIndex,
    best: &Option<Placement>,
) -> bool {
    let Some(peak) = best.as_ref().map(|b| b.1) else {
        return false;
    };
    goal.budget.deadline.is_some()
        && goal.budget.two_threads()
        && refill_may_run(p, goal, peak)
        && class_sweep_pays(p)
        && index.spans_bytes() <= REFILL_BESIDE_MAX_BYTES
}

/// The refill without the class order's complete plan: the class order's largest
/// classes ([`large_classes`]) placed by the class sweep (the same offsets as in the
/// complete order, which places them first), every smaller item filled into their
/// holes ([`fill::place_into`]), then the ejection repair of that in rounds
/// ([`repair_in_rounds`], at most 1 + [`MORE_REPAIR_ROUNDS`]) within the goal's
/// deadline. `None` where the largest classes are every item (nothing to fill).
/// Under a deadline the classes stop where the time left is what filling the items
/// after them takes ([`greedy::FILL_SWEEPS`] sweeps an item, `sweep_time` being what
/// sweeping every item took), and those left are filled too.
fn large_classes_filled_and_repaired(
    p: &Prepared,
    goal: &Goal,
    index: &OverlapIndex,
    sweep_time: Duration,
    stop: &AtomicBool,
) -> Option<(Vec<u64>, u64)> {
    let started = Instant::now();
    let order = greedy::by_size_class(p);
    let large = large_classes(p, &order);
    if large == order.len() {
        return None;
    }
    let sweep_per_item = per_item(p, sweep_time);
    let reserve = sweep_per_item.saturating_mul(greedy::FILL_SWEEPS);
    let filled_after =
        reserve.saturating_mul(u32::try_from(order.len() - large).unwrap_or(u32::MAX));
    // No time for the largest classes before the fill's: nothing to offer.
    let deadline = match goal.budget.deadline {
        Some(d) => Some(d.checked_sub(filled_after).filter(|&d| d > started)?),
        None => None,
    };
    let limits = class_sweep::Limits {
        deadline,
        reserve_per_item: reserve,
        ..class_sweep::Limits::UNLIMITED
    };
    let placed = class_sweep::place_classes(p, &order[..large], &limits);
    let (offsets, peak) =
        filled_after_classes(p, &order, placed, goal.budget.deadline, sweep_per_item);
    log::debug!(
        "beside: the largest items by classes, the rest filled: {peak} in {:?}",
        started.elapsed()
    );
    let stoppable = Goal {
        stop: Some(stop),
        ..*goal
    };
    let repaired = repair_in_rounds(
        p,
        index,
        (offsets, peak),
        &stoppable,
        1 + MORE_REPAIR_ROUNDS,
        None,
    );
    log::debug!(
        "beside: repaired to {} in {:?}",
        repaired.1,
        started.elapsed()
    );
    Some(repaired)
}

/// The plan of `order`'s first items placed by the class sweep (`placed`, a prefix of
/// `order`: all of it, or cut by its limits), every later item of `order` filled into
/// their holes ([`fill::place_into`] within `deadline`, `sweep_per_item` kept for each
/// item it has no time for); its offsets and peak. O(fill).
fn filled_after_classes(
    p: &Prepared,
    order: &[usize],
    placed: class_sweep::ClassesPlaced,
    deadline: Option<Instant>,
    sweep_per_item: Duration,
) -> (Vec<u64>, u64) {
    let mut offsets = placed.offsets;
    let rest = &order[placed.placed..];
    if rest.is_empty() {
        return (offsets, placed.peak);
    }
    let peak = fill::place_into(p, rest, &mut offsets, deadline, sweep_per_item).max(placed.peak);
    (offsets, peak)
}

/// The ejection repair ([`eject_repair`]) of `plan` again and again, each round with
/// fresh weights, step and work, at most `rounds` times, while each lowers the peak
/// and the goal is unreached; the lowest plan. With `to_beat` (the peak of a plan
/// already at hand) the rounds also stop where the plan, lowered at its last round's
/// gain in every round left, would still end at or above it (the catch-up stop): the
/// rounds' gains usually fall from one to the next (bimodal at a million buffers:
/// 199,680 bytes, then 57,344, then 48,384), so those rounds would buy nothing. Where they do not fall, that gives
/// up some gain: few-sizes at a million (3.9 MB, 17 KB, 1.3 MB, 0.7 MB) stops after the
/// second round at 1.00358 where four rounds reach 1.00288.
fn repair_in_rounds(
    p: &Prepared,
    index: &OverlapIndex,
    plan: (Vec<u64>, u64),
    goal: &Goal,
    rounds: u32,
    to_beat: Option<u64>,
) -> (Vec<u64>, u64) {
    let mut plan = plan;
    for round in 0..rounds {
        if goal.done(plan.1) {
            break;
        }
        let repaired = eject_repair(p, index, plan.0.clone(), goal);
        if repaired.1 >= plan.1 {
            break;
        }
        let gain = plan.1 - repaired.1;
        plan = repaired;
        let left = u64::from(rounds - round - 1);
        if to_beat.is_some_and(|beat| plan.1.saturating_sub(gain.saturating_mul(left)) >= beat) {
            break;
        }
    }
    plan
}

/// Work the ejection repair may spend per item (a unit per item read): on 100,000
/// malloc-like buffers about two seconds.
pub const EJECT_WORK_PER_ITEM: u64 = 500;

/// Work the ejection repair may spend at most, whatever the item count: about six
/// seconds on a million malloc-like buffers.
pub const EJECT_MAX_WORK: u64 = 100_000_000;

/// The placement `best` starts from ([`start`]), lowered by the ejection repair
/// ([`eject_repair`]) unless it reached the goal. `None` only for an instance with no
/// items.
fn start_then_eject(
    p: &Prepared,
    goal: &Goal,
    index: &mut Option<OverlapIndex>,
) -> Option<Placement> {
    let (offsets, peak, strategy) = start(p, goal, index)?;
    if goal.done(peak) || repaired_in_rounds_already(goal, strategy) {
        return Some((offsets, peak, strategy));
    }
    let index = index.get_or_insert_with(|| OverlapIndex::new(p));
    let (offsets, lowered) = eject_repair(p, index, offsets, goal);
    Some(if lowered < peak {
        (offsets, lowered, Strategy::Eject)
    } else {
        (offsets, peak, strategy)
    })
}

/// Whether a start plan made by `strategy` was already repaired in rounds until one
/// lowered nothing or the rounds ran out, so that another round would repeat the
/// last: without a deadline, a start made by the ejection repair (the split class
/// order's, [`class_sweep_then_size`]). [`best_of_the_others`] and
/// [`start_then_eject`] then do not repair it again.
fn repaired_in_rounds_already(goal: &Goal, strategy: Strategy) -> bool {
    goal.budget.deadline.is_none() && strategy == Strategy::Eject
}

/// The ejection repair of a valid placement within [`EJECT_WORK_PER_ITEM`] per item
/// (at most [`EJECT_MAX_WORK`]) and the goal's deadline and stop flag, aiming at its
/// target.
fn eject_repair(
    p: &Prepared,
    index: &OverlapIndex,
    mut offsets: Vec<u64>,
    goal: &Goal,
) -> (Vec<u64>, u64) {
    let started = Instant::now();
    let limits = eject::Limits {
        target: goal.target,
        // The work bounds it with a deadline too (a far deadline is a cap, not a
        // request to spend it), as it bounds the search and the climb.
        work: (p.items.len() as u64)
            .saturating_mul(EJECT_WORK_PER_ITEM)
            .min(EJECT_MAX_WORK),
        deadline: goal.budget.deadline,
        stop: goal.stop,
    };
    let peak = eject::lower(p, index, &mut offsets, &limits);
    log::debug!("ejection repair: {peak} in {:?}", started.elapsed());
    (offsets, peak)
}

/// The search below a start placement and the climb (from the searched placement
/// and, where the search lowered it, from the start placement too), as
/// [`best_of_the_others`] runs them; the lowest of the start and what they found.
fn searched_and_climbed(
    p: &Prepared,
    goal: &Goal,
    index: &mut Option<OverlapIndex>,
    offsets: Vec<u64>,
    peak: u64,
    strategy: Strategy,
) -> Placement {
    let (searched, searched_peak) = search_below(p, offsets.clone(), peak, goal);
    let (start, start_peak, start_by) = if searched_peak < peak {
        (searched, searched_peak, Strategy::Search)
    } else {
        (offsets.clone(), peak, strategy)
    };
    if goal.done(start_peak) || !climb_applies(p, goal) {
        return (start, start_peak, start_by);
    }
    let index = index.get_or_insert_with(|| OverlapIndex::new(p));
    let started = Instant::now();
    let mut best = (start.clone(), start_peak, start_by);
    let (climbed, climbed_peak) = climb(p, index, start, goal);
    log::debug!(
        "climb from {start_peak} to {climbed_peak} in {:?}",
        started.elapsed()
    );
    keep_lower_placement(&mut best, (climbed, climbed_peak, Strategy::Climb));
    // The climb strategy climbs from the placement before the search: where the
    // search lowered it, that climb runs too, so that `best` is never above it.
    if start_peak < peak && !goal.done(best.1) {
        let (climbed, climbed_peak) = climb(p, index, offsets, goal);
        keep_lower_placement(&mut best, (climbed, climbed_peak, Strategy::Climb));
    }
    best
}

/// Keeps `candidate` in `best` if it peaks lower (ties: the earlier one stays).
fn keep_lower_placement(best: &mut Placement, candidate: Placement) {
    if candidate.1 < best.1 {
        *best = candidate;
    }
}

/// The placement `best`, [`Strategy::Search`] and [`Strategy::Climb`] start from: on
/// large instances the sweep, then the greedy orders (where affordable; greedy-by-size
/// alone within [`GREEDY_SIZE_WORK`], here above [`FULL_ITEMS`] items), the
/// skyline orders, on instances too large for the search the column repair, then
/// greedy-by-size alone (costly band, up to [`FULL_ITEMS`] items) if the goal is still
/// unreached, and last, with a deadline, the other costly greedy orders; the lowest of
/// them. `index` is built if a greedy order needs it. `None` only for an instance with
/// no items.
fn start(p: &Prepared, goal: &Goal, index: &mut Option<OverlapIndex>) -> Option<Placement> {
    let started = Instant::now();
    let mut best: Option<Placement> = None;
    let pairs = p.overlap_pairs();
    let large = p.items.len() > SWEEP_FIRST_ITEMS || pairs > GREEDY_MAX_PAIRS;
    // What sweeping every item took: greedy-by-size keeps time for sweeping the items
    // it leaves before the deadline.
    let mut sweep_time = Duration::ZERO;
    if large {
        let (offsets, peak) = sweep::place(p);
        sweep_time = started.elapsed();
        log::debug!("sweep ({pairs} pairs): {peak} in {sweep_time:?}");
        keep_lower(&mut best, (offsets, peak, Strategy::Best));
    }
    // The overlap index (O(n log T) memory) is built only for what uses it.
    if pairs <= GREEDY_MAX_PAIRS {
        let index = index.get_or_insert_with(|| OverlapIndex::new(p));
        greedy_orders(p, index, Some(goal), &GREEDY, &mut best);
    }
    // Costly but affordable: the greedy orders by size alone (within a work budget,
    // the rest swept above where it or the deadline runs out).
    // Beyond FULL_ITEMS items, where the skyline's pop budget no longer lets it
    // complete, it goes before the skyline (which then gives up once it peaks at
    // greedy's peak); below, after the skyline and the column repair, only where they
    // left the goal unreached (iopddl_S_1 reaches its bound there).
    let greedy_size_band = pairs > GREEDY_MAX_PAIRS;
    let greedy_size_first = greedy_size_band && p.items.len() as u64 > FULL_ITEMS;
    if greedy_size_first {
        greedy_by_size_alone(p, goal, pairs, sweep_time, index, &mut best);
    }
    let skyline_pops = skyline_orders(p, goal, &mut best);
    if !searchable(p) {
        // Too large for the search: repair the peak's column instead.
        column_repair(p, goal, skyline_pops, &mut best);
    }
    if greedy_size_band && !greedy_size_first && best.as_ref().is_some_and(|b| !goal.done(b.1)) {
        greedy_by_size_alone(p, goal, pairs, sweep_time, index, &mut best);
    }
    // With a deadline, last, the greedy orders too where they are costly (each given
    // up if it passes): after the column repair, which reaches iopddl_S_1's bound
    // within a second where they would spend that second first.
    if pairs > GREEDY_MAX_PAIRS
        && goal.budget.deadline.is_some()
        && best.as_ref().is_some_and(|b| !goal.done(b.1))
    {
        let index = index.get_or_insert_with(|| OverlapIndex::new(p));
        // The orders by size already ran where affordable.
        let rest: Vec<Strategy> = GREEDY
            .into_iter()
            .filter(|s| !(greedy_size_band && BY_SIZE.contains(s)))
            .collect();
        greedy_orders(p, index, Some(goal), &rest, &mut best);
    }
    if let Some((_, peak, strategy)) = best.as_ref() {
        log::debug!(
            "greedy orders and skyline: {peak} by {strategy} in {:?}",
            started.elapsed()
        );
    }
    best
}

/// The greedy orders by size run alone on large instances, within one
/// [`GREEDY_SIZE_WORK`] each where each completes within it alone and there is no
/// deadline, else in turn within one in all. Complete, the class order is lower on five of the six
/// generated families at 100,000 buffers (and faster: its start order keeps the
/// placed neighbours of consecutive items alike), but not everywhere (bursts at a
/// million: 1.0236 against 1.0035); cut by the budget or a deadline (the rest swept
/// above) it is higher on four of six at a million (a cut falls inside a class, so a
/// class's later half goes to the sweep). So both run where the budget covers both,
/// and only then does the class order go first, so that a deadline finds it complete
/// (it decides after a sixteenth of its work whether it would miss the deadline, and
/// gives up if so: [`greedy::place_then_sweep`] with a forecast); elsewhere the exact order goes
/// first.
const BY_SIZE: [Strategy; 2] = [Strategy::GreedySize, Strategy::GreedySizeClass];

/// The class order goes first, under a deadline, only where the time left is at least
/// this many times what sweeping the instance took: before its forecast it spends a
/// sixteenth of its work, which under a tighter deadline is the time greedy by size
/// needed (40,000 malloc-like buffers with 0.1 s ended at the sweep's 1.17 where greedy
/// by size, cut, gives 1.05).
const CLASS_FIRST_SWEEPS: u32 = 16;

/// The greedy orders by size ([`BY_SIZE`]) into `best` on a large instance with
/// `pairs` overlapping pairs (ordered: a greedy placement reads half as many); builds
/// `index` if it runs either. Nothing where `best` already reaches the goal.
///
/// * Where the class order costs less by [`class_sweep`] ([`class_sweep_pays`]) and
///   the next case does not hold: [`class_sweep_then_size`] (under a deadline, the
///   class order then its ejection repair, then greedy by size and more rounds of
///   the repair in whatever time the repair leaves: [`size_in_the_time_left`];
///   without one, the complete class order then greedy by size in the budget left,
///   or, where the budget cut the class order, its largest classes, the fill and the
///   repair in rounds). Where it gives up, the cases below.
/// * No deadline, and each order within [`GREEDY_SIZE_WORK`] alone: both, side by
///   side on two threads where [`Budget::threads`] and the machine allow, else in
///   turn (both complete: the same plans); greedy-size's plan is offered first, so
///   that a tie keeps it.
///
/// Otherwise within [`GREEDY_SIZE_WORK`] in all:
///
/// * Both orders within the budget, and (here always) a deadline at least
///   [`CLASS_FIRST_SWEEPS`] sweeps away: greedy-size-class first (complete, cut at the
///   deadline with the rest swept above, or given up after a sixteenth of its work
///   where it foresees missing the deadline), then the ejection repair of its plan
///   with the time left ([`eject_the_class_order`]), then greedy by size and more
///   rounds of the repair ([`size_in_the_time_left`]). Where the class order took at
///   most a quarter of the time left ([`SIZE_FIRST_TIMES`]), greedy by size goes
///   before the repair instead. Where it gave up, its largest classes and the fill
///   ([`class_then_fill`]) and their repair in its place, then the same.
/// * Otherwise, under a deadline, [`class_then_fill`] and its repair where it runs,
///   then greedy by size and more rounds of the repair.
///   Elsewhere greedy-size first. Where the work or the goal's deadline runs out, the
///   items still to place (the smallest) are swept above the greedy part
///   ([`greedy::place_then_sweep`]) rather than the work thrown away: on a million
///   malloc-like buffers with 10 s, 1% over the bound where the sweep alone is 25%
///   over. The class order follows only where the first completed and the work left
///   is at least what it took.
///
/// Under a deadline, where the class sweep is the path and a second core and the
/// memory allow ([`refill_beside_applies`]), the refill runs from the start on a
/// thread of its own ([`large_classes_filled_and_repaired`]) beside these orders, and
/// the lower plan is kept.
fn greedy_by_size_alone(
    p: &Prepared,
    goal: &Goal,
    pairs: u64,
    sweep_time: Duration,
    index: &mut Option<OverlapIndex>,
    best: &mut Option<Placement>,
) {
    if best.as_ref().is_some_and(|b| goal.done(b.1)) {
        return;
    }
    let index = index.get_or_insert_with(|| OverlapIndex::new(p));
    if !refill_beside_applies(p, goal, index, best) {
        orders_by_size(p, goal, pairs, sweep_time, index, best, true);
        return;
    }
    log::debug!(
        "beside: the refill on a second thread (spans {} MiB)",
        index.spans_bytes() >> 20
    );
    // Raised once the orders reach the goal: the refill can then only tie, and the
    // run is not kept waiting for it.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("wgalloc-refill".into())
            .spawn_scoped(scope, || {
                large_classes_filled_and_repaired(p, goal, index, sweep_time, &stop)
            });
        let Ok(handle) = spawned else {
            // Refused: the refill comes after the orders, in the time they leave
            // ([`refill_in_the_time_left`]), as on one core.
            orders_by_size(p, goal, pairs, sweep_time, index, best, true);
            return;
        };
        // The refill has the second core: the orders keep to one thread.
        let one_thread = Goal {
            budget: Budget {
                threads: false,
                ..goal.budget
            },
            ..*goal
        };
        orders_by_size(p, &one_thread, pairs, sweep_time, index, best, false);
        if best.as_ref().is_some_and(|b| goal.reached(b.1)) {
            stop.store(true, Ordering::Relaxed);
        }
        let refilled = handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        if let Some((offsets, peak)) = refilled {
            keep_lower(best, (offsets, peak, Strategy::Eject));
        }
    });
}

/// The body of [`greedy_by_size_alone`]: the orders by size, on `index`. `refill`:
/// whether the refill may follow the class order in the time left
/// ([`refill_in_the_time_left`]; not where it already runs beside them).
fn orders_by_size(
    p: &Prepared,
    goal: &Goal,
    pairs: u64,
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &mut Option<Placement>,
    refill: bool,
) {
    let mut left = GREEDY_SIZE_WORK;
    // A greedy placement reads each unordered pair once.
    let work = pairs / 2;
    let deadline = best.as_ref().and(goal.budget.deadline);
    if !(deadline.is_none() && work <= GREEDY_SIZE_WORK)
        && class_sweep_pays(p)
        && class_sweep_then_size(
            p,
            goal,
            GREEDY_SIZE_WORK,
            work,
            sweep_time,
            index,
            best,
            refill,
        )
    {
        return;
    }
    let time_for_class =
        deadline.is_none_or(|d| Instant::now() + sweep_time.saturating_mul(CLASS_FIRST_SWEEPS) < d);
    let both_fit = work.saturating_mul(2) <= GREEDY_SIZE_WORK;
    // Without a deadline, where each order completes within the budget alone, both
    // run and the lower plan is kept: side by side on two threads where allowed (in
    // the time of the longer: on 100,000 malloc-like buffers 2.4 s where they took
    // 4.1 s in turn), else in turn; each completes, so the plans are the same either
    // way. With a deadline they run in turn (below): beside each other each runs
    // slower (they share the memory bandwidth) and the plans moved both ways
    // (few-sizes 100k with 2 s: 1.0114 against 1.00243 in turn; a million buffers
    // with 10 s, where the budget covers one order: few-sizes 1.0069 against 1.0166,
    // malloc 1.0155 against 1.0090).
    if deadline.is_none() && work <= GREEDY_SIZE_WORK {
        let runs = [
            (Strategy::GreedySize, RunLimits::work(GREEDY_SIZE_WORK)),
            (Strategy::GreedySizeClass, RunLimits::work(GREEDY_SIZE_WORK)),
        ];
        let threads = goal.budget.two_threads();
        let [size, class] = if threads {
            by_size_side_by_side(p, goal, runs, sweep_time, index, best)
        } else {
            runs.map(|(strategy, limits)| {
                by_size_run(p, goal, strategy, limits, sweep_time, index, best)
            })
        };
        // Greedy-size's first, so that a tie keeps it.
        for (swept, strategy) in [
            (size, Strategy::GreedySize),
            (class, Strategy::GreedySizeClass),
        ] {
            if let Some(s) = swept {
                keep_lower(best, (s.offsets, s.peak, strategy));
            }
        }
        return;
    }
    if both_fit && time_for_class {
        let class_started = Instant::now();
        let class = by_size_run(
            p,
            goal,
            Strategy::GreedySizeClass,
            RunLimits {
                work: u64::MAX,
                forecast: Some(work),
                forecast_early: false,
                threads: goal.budget.two_threads(),
            },
            sweep_time,
            index,
            best,
        );
        // Here there is a deadline (without one, both orders ran above where they
        // fit): the class order's plan, or its largest classes and the fill, then its
        // ejection repair, then greedy by size and the repair again in the time left;
        // where the class order was cheap, greedy by size before the repair.
        let Some(class) = class else {
            if let Some((offsets, peak)) = class_then_fill(p, goal, work, sweep_time, index, best) {
                eject_the_class_order(p, goal, index, offsets, peak, best);
            }
            size_in_the_time_left(p, goal, left, sweep_time, index, best);
            return;
        };
        let left = left.saturating_sub(class.work);
        if class.complete
            && !class_sweep_pays(p)
            && time_for_size_before_the_repair(goal, class_started.elapsed())
        {
            keep_lower(best, (class.offsets, class.peak, Strategy::GreedySizeClass));
            size_in_the_time_left(p, goal, left, sweep_time, index, best);
            return;
        }
        eject_the_class_order(p, goal, index, class.offsets, class.peak, best);
        size_in_the_time_left(p, goal, left, sweep_time, index, best);
        return;
    }
    if deadline.is_some() {
        if let Some((offsets, peak)) = class_then_fill(p, goal, work, sweep_time, index, best) {
            eject_the_class_order(p, goal, index, offsets, peak, best);
            size_in_the_time_left(p, goal, left, sweep_time, index, best);
            return;
        }
    }
    let mut needed = 0u64;
    for strategy in BY_SIZE {
        if needed > left {
            return;
        }
        match by_size_within(p, goal, strategy, left, sweep_time, index, best) {
            Some(work) => {
                left = left.saturating_sub(work);
                needed = work;
            }
            None => return,
        }
    }
}

/// A unit of [`class_sweep`]'s work costs about this many units of a greedy
/// placement's (a placed item read, about 7 ns with 2,000 live): a walk step or a
/// fixed item passed takes 0.2-0.4 us on the 2-core build machine.
const SWEEP_UNIT_PAIRS: u64 = 32;

/// Whether the class order costs less by [`class_sweep`] (O(C n log n) and its
/// walks, C the size classes) than by the greedy's reads of the placed items live with
/// each item (half of [`Prepared::overlap_pairs`]): on 100,000 malloc-like buffers
/// (2,000 live, 19 classes) 0.95 s against 2.3 s, few-sizes 0.23 against 2.5 s, 20,000
/// live 5.4 against 35 s of CPU; with 100 live the greedy's 0.26 s against 0.59 s.
fn class_sweep_pays(p: &Prepared) -> bool {
    let sweep = class_sweep::expected_work(p);
    sweep.saturating_mul(SWEEP_UNIT_PAIRS) < p.overlap_pairs() / 2
}

/// Where the refill runs beside the orders by size ([`refill_beside_applies`]) and the
/// whole class order is not forecast to fit the deadline, [`class_by_sweep`] goes on
/// past its largest classes (which the refill beside starts from and repairs) for this
/// share of the time from its start to the deadline, and fills the rest: more classes
/// placed by the sweep start the repair lower. Wide (20,000 live) at 100,000 buffers,
/// seed 1, no limit: cut after 83% of the area and filled 1.0120, after 95% 1.0069,
/// the whole order 1.0044. With 2 s, seeds 1, 2, 3, 4 and 26 (one run each; every
/// share in docs/scale.md, twenty-first round): 1.0101, 1.0048, 1.0071, 1.0203 and
/// 1.0229 with the cut after the largest classes, 1.0054, 1.0024, 1.0037, 1.0180 and
/// 1.0200 with three quarters; half the time or seven eighths were higher on some
/// seeds and lower on others, all of it gave the early cut's plans again. Without the
/// refill beside no thread repairs the early cut, and the later one leaves the repair
/// too little time: malloc at a million buffers with 10 s, seed 3, 1.0036 -> 1.0174.
const LATER_CUT_SHARE: (u32, u32) = (3, 4);

/// Under a deadline, where the refill does not run beside (no later cut,
/// [`LATER_CUT_SHARE`]), where the largest classes ([`large_classes`]) are not every
/// class and a plan cut among them may be filled (else [`class_by_sweep`] would give
/// up), the class sweep stops placing the largest classes once this share of the time
/// from its start to the deadline has passed (looked at every 256 items), and every
/// item it left is filled: the ejection repair keeps the time. On a million
/// malloc-like buffers the largest classes take 0.8 s of the 10 s and nothing changes;
/// with 20,000 live they took 5.2 s, the fill 2.2 s, and the repair had 1.1 s. Wide at
/// a million buffers with 10 s (the twenty-first round, one run each), seeds 1, 2, 3:
/// 1.0334, 1.0600, 1.0210 before; a third of the time 1.0223, 1.0395, 1.0171; a
/// quarter 1.0202, 1.0163, 1.0164 (seeds 4-8 and 26, not used to choose it: every one
/// lower, docs/scale.md); malloc seed 3, few-sizes, bursts and bimodal seed 1 the
/// same (1.0036-1.0042, 1.00415, 1.00020, 1.00000).
const FIRST_CLASSES_SHARE: (u32, u32) = (1, 4);

/// The instant `share` (numerator, denominator) of the way from `started` to
/// `deadline` (divided first: a far deadline does not overflow).
fn share_of_the_way(started: Instant, deadline: Instant, share: (u32, u32)) -> Instant {
    started + deadline.saturating_duration_since(started) / share.1 * share.0
}

/// [`class_by_sweep`]'s [`class_sweep::Limits::or_until`] and
/// [`class_sweep::Limits::first_by`], its sweep started at `started`, the first `large`
/// of `items` items its largest classes: both only under a `deadline` and where a plan
/// cut among the largest classes may be filled (`split`); with `later_cut` the later
/// cut ([`LATER_CUT_SHARE`] of the way), else, where the largest classes are not every
/// class, the quarter cap ([`FIRST_CLASSES_SHARE`]).
fn cut_instants(
    deadline: Option<Instant>,
    started: Instant,
    large: usize,
    items: usize,
    split: bool,
    later_cut: bool,
) -> (Option<Instant>, Option<Instant>) {
    let Some(deadline) = deadline.filter(|_| split) else {
        return (None, None);
    };
    if later_cut {
        (
            Some(share_of_the_way(started, deadline, LATER_CUT_SHARE)),
            None,
        )
    } else if large < items {
        (
            None,
            Some(share_of_the_way(started, deadline, FIRST_CLASSES_SHARE)),
        )
    } else {
        (None, None)
    }
}

/// The class order by [`class_sweep`] (cut by the deadline, keeping
/// [`greedy::FILL_SWEEPS`] sweeps' time an item for those it leaves, or by `work` in
/// greedy units), the items it leaves filled into its holes ([`fill::place_into`]).
/// Where it cannot place the whole order, it places its largest classes
/// ([`large_classes`]) and fills the rest, but only under a deadline, or without one
/// where `fill_without_deadline`, and where their overlapping pairs are at most 1 /
/// [`SPLIT_WORK_SHARE`] of all (`whole_work`, half of [`Prepared::overlap_pairs`]), as
/// [`class_then_fill`]; elsewhere it gives up (`None`, its work not counted). Without
/// a deadline the work cuts it, its largest classes placed as far as the work allows
/// (no look before them: [`class_sweep::Limits::filled_after`]); the split alone took
/// the budget from greedy by size (a million buffers with 20,000 live: 1.0203 against
/// 1.0171), repaired in rounds it ends far lower ([`class_sweep_then_size`]).
/// `later_cut`: under a deadline, go on past the largest classes for
/// [`LATER_CUT_SHARE`] of the time left instead (where the refill beside repairs the
/// early cut).
fn class_by_sweep(
    p: &Prepared,
    work: u64,
    whole_work: u64,
    deadline: Option<Instant>,
    sweep_time: Duration,
    later_cut: bool,
    fill_without_deadline: bool,
) -> Option<greedy::Swept> {
    let started = Instant::now();
    let order = greedy::by_size_class(p);
    let sweep_per_item = per_item(p, sweep_time);
    let large = large_classes(p, &order);
    // Whether a plan cut after the largest classes may be filled (else it gives up
    // below, and the later cut would only have taken time from what follows).
    let split = pairs_among(p, &order[..large]).saturating_mul(SPLIT_WORK_SHARE) <= whole_work;
    let (or_until, first_by) =
        cut_instants(deadline, started, large, order.len(), split, later_cut);
    let limits = class_sweep::Limits {
        deadline,
        reserve_per_item: sweep_per_item.saturating_mul(greedy::FILL_SWEEPS),
        work: work / SWEEP_UNIT_PAIRS,
        whole_or_first: large,
        or_until,
        first_by,
        filled_after: split && fill_without_deadline,
    };
    let placed = class_sweep::place_classes(p, &order, &limits);
    let complete = placed.placed == order.len();
    log::debug!(
        "greedy-size-class by classes: {} of {} items in {:?}",
        placed.placed,
        order.len(),
        started.elapsed()
    );
    if !complete && (!split || (deadline.is_none() && !fill_without_deadline)) {
        log::debug!("greedy-size-class by classes: given up (incomplete, and no split here)");
        return None;
    }
    let placed_work = placed.work;
    let (offsets, peak) = filled_after_classes(p, &order, placed, deadline, sweep_per_item);
    log::debug!(
        "greedy-size-class by classes ({}): {peak} in {:?}",
        if complete {
            "complete"
        } else {
            "the rest filled"
        },
        started.elapsed()
    );
    Some(greedy::Swept {
        offsets,
        peak,
        complete,
        work: placed_work.saturating_mul(SWEEP_UNIT_PAIRS),
    })
}

/// The orders by size where the class order runs by [`class_sweep`] and the two do not
/// each run alone within [`GREEDY_SIZE_WORK`] without a deadline: the class order
/// first ([`class_by_sweep`], cut by the deadline or the budget, the rest filled into
/// its holes: it is the lower of the two complete on five of six generated families).
/// `false` (nothing done) where [`class_by_sweep`] gave up. `budget`: the work both
/// orders may spend, in greedy units ([`GREEDY_SIZE_WORK`]); `work`: half of
/// [`Prepared::overlap_pairs`].
///
/// * Without a deadline, where the class order completed, greedy by size then runs
///   within what is left of the budget, unless the class order reached the goal;
///   greedy-size's plan is offered first, so that a tie keeps it. Where the work cut
///   it (its largest classes placed, the rest filled), that plan is repaired in
///   rounds ([`repair_in_rounds`], at most 2 + [`MORE_REPAIR_ROUNDS`]) instead of
///   greedy by size, as under a deadline: with 20,000 live (the twenty-second round,
///   docs/scale.md) 200,000 buffers 1.0242 -> 1.0163, 300,000 1.0166 -> 1.0090,
///   500,000 1.0219 -> 1.0154, a million (seeds 1, 2, 26) 1.0298 -> 1.0206, 1.0183
///   -> 1.0122, 1.0186 -> 1.0105 (seeds 3-5, measured after: every one lower), each
///   in less CPU time, though up to 7 s more wall time on two cores (greedy by size,
///   cut by the work and swept, ran on both and ended at 1.0197 on seed 26).
/// * Under a deadline, the time left goes to the ejection repair of the class order's
///   plan ([`eject_repair`], complete or split) first: greedy by size would be cut
///   at the deadline and swept. Greedy by size has whatever time the repair leaves
///   ([`size_in_the_time_left`]; with time to spare it completes), and the refill of
///   the complete plan what they leave ([`refill_in_the_time_left`]). Same sitting, seeds 1-4 at a million buffers with
///   10 s (the fifteenth round): cut greedy by size ended above the class order's plan on every malloc-like
///   seed (1.0074-1.0204), and the repair took malloc from 1.0015 / 1.0095 / 1.0117
///   (min / median / max) to 1.0003 / 1.0027 / 1.0048 (within 0.5% on 4 of 4 seeds
///   where it was 2), bimodal to its bound in 3.7 s; narrow, few-sizes and bursts
///   kept their counts, wide its run-to-run spread. At 100,000 buffers with 2 s (seeds
///   1-8) malloc's median fell 1.0051 -> 1.0045 (within 0.25% on 3 seeds where it
///   was 2) and narrow's max 1.0042 -> 1.0007.
///
/// `refill`: whether the refill of the complete class order follows in the time left
/// ([`refill_in_the_time_left`]); `false` where it already runs beside these orders
/// ([`greedy_by_size_alone`]), and then the class sweep, where the whole class order
/// is not forecast to fit, goes on past the largest classes the refill beside starts
/// from ([`LATER_CUT_SHARE`]).
#[allow(clippy::too_many_arguments)]
fn class_sweep_then_size(
    p: &Prepared,
    goal: &Goal,
    budget: u64,
    work: u64,
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &mut Option<Placement>,
    refill: bool,
) -> bool {
    let deadline = best.as_ref().and(goal.budget.deadline);
    let class_started = Instant::now();
    let Some(class) = class_by_sweep(p, budget, work, deadline, sweep_time, !refill, true) else {
        return false;
    };
    let class_took = class_started.elapsed();
    if deadline.is_some() {
        let refill_from = refill
            .then(|| refill_start(p, goal, &class, class_took))
            .flatten();
        eject_the_class_order(p, goal, index, class.offsets, class.peak, best);
        size_in_the_time_left(
            p,
            goal,
            budget.saturating_sub(class.work),
            sweep_time,
            index,
            best,
        );
        refill_in_the_time_left(p, goal, refill_from, sweep_time, index, best);
        return true;
    }
    if !class.complete {
        // Split by the work: its repair in rounds, as under a deadline, rather than
        // greedy by size cut by the work and swept. The plan is the repair's (its
        // input where no round lowered it): [`best_of_the_others`] neither repairs nor
        // refills it again, so the rounds here include the one it would add.
        let rounds = 2 + MORE_REPAIR_ROUNDS;
        let (offsets, peak) =
            repair_in_rounds(p, index, (class.offsets, class.peak), goal, rounds, None);
        keep_lower(best, (offsets, peak, Strategy::Eject));
        return true;
    }
    if !goal.done(class.peak) {
        let left = budget.saturating_sub(class.work);
        by_size_within(p, goal, Strategy::GreedySize, left, sweep_time, index, best);
    }
    keep_lower(best, (class.offsets, class.peak, Strategy::GreedySizeClass));
    true
}

/// Under a deadline, the class order's plan (`offsets` peaking at `peak`: complete,
/// cut and swept, or its largest classes and the fill) into `best` if lower, then,
/// unless it reached the goal, its ejection repair ([`eject_repair`]) with the time
/// left, into `best` if lower: greedy by size, the alternative, would be cut at the
/// deadline and swept (see [`class_sweep_then_size`]).
fn eject_the_class_order(
    p: &Prepared,
    goal: &Goal,
    index: &OverlapIndex,
    offsets: Vec<u64>,
    peak: u64,
    best: &mut Option<Placement>,
) {
    keep_lower(best, (offsets.clone(), peak, Strategy::GreedySizeClass));
    if !goal.done(peak) {
        let (ejected, ejected_peak) = eject_repair(p, index, offsets, goal);
        keep_lower(best, (ejected, ejected_peak, Strategy::Eject));
    }
}

/// Greedy by size within `work` and what is left of the deadline, into `best` if
/// lower, where `best` is short of the goal and the deadline has not passed, then the
/// ejection repair of `best` again in the time still left
/// ([`repair_in_the_time_left`]). It comes after the class order's ejection repair
/// ([`eject_the_class_order`]), which stops on its own (failed ceilings, its work)
/// with time left under a far deadline, or, where the class order was cheap
/// ([`SIZE_FIRST_TIMES`]), right after the class order. So with time to spare greedy by size still
/// completes and `best` is at most its plan; under a tight deadline the repair used
/// the time and this does nothing.
///
/// Greedy by size forecasts its time by an eighth of the time left
/// ([`greedy::Cut::forecast_early`]) and gives up where even its pace per item so far
/// misses the deadline: cut, it would be swept above and end far over the repair's
/// plan, so that time goes to the repair's next round. On a million malloc-like
/// buffers with 10 s (seeds 1-8, the two binaries alternated seed by seed, the
/// seventeenth round) the first repair stops on its work after about 8.5 s, greedy by
/// size gives up after 0.4 s, and a second round takes seed 3 from 1.00672 to 1.00420
/// and seed 8 from 1.00547 to 1.00496 (no seed higher); on the narrow family greedy by
/// size still completes at the bound. At a moment when the machine ran a few percent
/// slower the first repair reached the deadline before its work cap on those seeds,
/// and no round followed.
fn size_in_the_time_left(
    p: &Prepared,
    goal: &Goal,
    work: u64,
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &mut Option<Placement>,
) {
    if best.as_ref().is_none_or(|b| !goal.done(b.1)) {
        let limits = RunLimits {
            work,
            forecast: Some(p.overlap_pairs() / 2),
            forecast_early: true,
            threads: goal.budget.two_threads(),
        };
        let strategy = Strategy::GreedySize;
        if let Some(swept) = by_size_run(p, goal, strategy, limits, sweep_time, index, best) {
            keep_lower(best, (swept.offsets, swept.peak, strategy));
        }
    }
    repair_in_the_time_left(p, goal, index, best);
}

/// Greedy by size runs before the ejection repair, under a deadline, where the time
/// left is at least this many times what the class order took (placed by the same
/// greedy, complete: the same work): greedy by size will take about as long, and the
/// repair still has most of the time ([`size_in_the_time_left`], called before the
/// repair). Else the repair, which would take all the time, would leave greedy by size
/// none: on 100,000 buffers of the narrow family with 2 s (seed
/// 26) the class order took 0.2 s and the repair the rest, ending at 1.00004, where
/// greedy by size alone reaches the bound in 0.3 s.
const SIZE_FIRST_TIMES: u32 = 4;

/// Whether greedy by size runs before the ejection repair ([`SIZE_FIRST_TIMES`]), the
/// class order having taken `class_took`: never without a deadline.
fn time_for_size_before_the_repair(goal: &Goal, class_took: Duration) -> bool {
    goal.budget
        .deadline
        .is_some_and(|d| greedy::time_left_for(d, class_took.saturating_mul(SIZE_FIRST_TIMES)))
}

/// At most this many more rounds of the ejection repair run in the time left
/// ([`repair_in_the_time_left`]): a far deadline is a cap on the repair, not a
/// request to spend it (these rounds take about 5 s each at most on a million
/// buffers; the skyline's first order after them has the deadline as its budget, so
/// a far deadline is spent there: [`skyline_orders`]). Without a deadline the refill's
/// repair has one round and at most this many more ([`refilled_and_repaired`]).
const MORE_REPAIR_ROUNDS: u32 = 3;

/// Under a deadline, with time left, the ejection repair of `best` again
/// ([`eject_repair`]: its weights and step start afresh, its work is a round's
/// again), as long as each round lowers it and the goal is not reached, at most
/// [`MORE_REPAIR_ROUNDS`] times.
fn repair_in_the_time_left(
    p: &Prepared,
    goal: &Goal,
    index: &OverlapIndex,
    best: &mut Option<Placement>,
) {
    if goal.budget.deadline.is_none() || goal.budget.expired() {
        return;
    }
    let Some((offsets, peak, _)) = best.as_ref() else {
        return;
    };
    let (offsets, lowered) = repair_in_rounds(
        p,
        index,
        (offsets.clone(), *peak),
        goal,
        MORE_REPAIR_ROUNDS,
        None,
    );
    keep_lower(best, (offsets, lowered, Strategy::Eject));
}

/// [`class_then_fill`] places by the class order the items of its largest size classes,
/// up to the first with which they hold at least this share of the area (size times
/// lifetime) of all items: the fill ([`fill::place_into`]) is left a fifth of the
/// memory's use, in the smallest items. On a million malloc-like buffers that is the
/// buffers of 16 KiB or more (15% of them), on few-sizes those of 3 and 4 MiB (25%).
const LARGE_AREA: (u128, u128) = (4, 5);

/// How many of the class order's first items (`order`) [`class_then_fill`] places by the
/// greedy: whole size classes, up to the first with which they hold [`LARGE_AREA`] of
/// the area. O(n).
fn large_classes(p: &Prepared, order: &[usize]) -> usize {
    let area = |i: usize| u128::from(p.items[i].size) * u128::from(p.items[i].len);
    let total: u128 = order.iter().map(|&i| area(i)).sum();
    let (share, of) = LARGE_AREA;
    let mut held = 0u128;
    let mut end = 0;
    while end < order.len() && held * of < total * share {
        let next = p.class_end(order, end);
        held += order[end..next].iter().map(|&i| area(i)).sum::<u128>();
        end = next;
    }
    end
}

/// The unordered pairs of the items at positions `which` live at a common time: the
/// work a greedy placement of them reads. O(k log k).
fn pairs_among(p: &Prepared, which: &[usize]) -> u64 {
    let mut starts: Vec<u32> = which.iter().map(|&i| p.items[i].a).collect();
    let mut ends: Vec<u32> = which.iter().map(|&i| p.items[i].b).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    let (mut pairs, mut ended) = (0u64, 0usize);
    for (started, &a) in starts.iter().enumerate() {
        ended += ends[ended..].partition_point(|&b| b <= a);
        pairs = pairs.saturating_add((started - ended) as u64);
    }
    pairs
}

/// [`class_then_fill`] runs only where its greedy part reads at most 1 / this of what
/// the whole class order reads (the pairs live at a common time among its items,
/// against all), in each of its two orders (twice that in all where both run): it is
/// meant to be cheap beside the orders it takes the time of. Set
/// after the held-out runs: on bimodal 1M the largest classes holding 4/5 of the area
/// are 43% of the buffers (a fifth of the work), the split took 5.6-6.1 s of 10 and
/// ended above greedy by size given the whole time; malloc's are 15% (2%), few-sizes'
/// 25% (6%).
const SPLIT_WORK_SHARE: u64 = 8;

/// Under a deadline, where the class order cannot complete in time: its largest size
/// classes ([`large_classes`]) placed by the class order, then (where that completed)
/// the same items by exact size ([`greedy::by_size`]'s order), every smaller item filled
/// into the holes the lower of the two leaves ([`greedy::place_then_fill`]), into
/// `best` if lower, and returned (`None` where it did not run or gave up). On a million
/// bursty buffers with 10 s (seed 26) the class order's prefix peaked 3.8% above the
/// exact order's, its fill ended at 1.028 of the bound and the repair at 1.016; the
/// exact order's at 1.0078 and 1.0004 (seeds 1-8: the two prefixes within 0.7% of each
/// other, either order the lower). The second prefix costs about what the first did
/// (0.8 s there). The greedy part keeps the fill's time ([`greedy::FILL_SWEEPS`] sweeps an item), gives up
/// after a sixteenth of its work where its pace says it would miss that, and does not
/// run where it would read more than 1 / [`SPLIT_WORK_SHARE`] of the whole order's work.
/// On a million few-sizes buffers with 10 s: 1.0042 where greedy by size, cut and
/// swept, gave 1.0142. `whole_work` is what the whole class order reads (half of
/// [`Prepared::overlap_pairs`]).
fn class_then_fill(
    p: &Prepared,
    goal: &Goal,
    whole_work: u64,
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &mut Option<Placement>,
) -> Option<(Vec<u64>, u64)> {
    if best.as_ref().is_some_and(|b| goal.done(b.1)) {
        return None;
    }
    let deadline = best.as_ref().and(goal.budget.deadline)?;
    let started = Instant::now();
    let order = greedy::by_size_class(p);
    let fixed = large_classes(p, &order);
    let work = pairs_among(p, &order[..fixed]);
    if work.saturating_mul(SPLIT_WORK_SHARE) > whole_work {
        log::debug!("greedy-size-class on its {fixed} largest items: too much work ({work})");
        return None;
    }
    let sweep_per_item = per_item(p, sweep_time);
    let left = u32::try_from(order.len() - fixed).unwrap_or(u32::MAX);
    let reserve = sweep_per_item
        .saturating_mul(greedy::FILL_SWEEPS)
        .saturating_mul(left);
    let greedy_deadline = deadline.checked_sub(reserve).filter(|&d| d > started)?;
    let cut = greedy::Cut {
        deadline: Some(greedy_deadline),
        sweep_per_item,
        work: u64::MAX,
        forecast: Some(work),
        forecast_early: false,
        threads: goal.budget.two_threads(),
    };
    // The same largest items by exact size, as a second order of the prefix.
    let mut exact = order.clone();
    greedy::sort_by_size(p, &mut exact[..fixed]);
    let orders: [&[usize]; 2] = [&order, &exact];
    let filled = greedy::place_then_fill(p, index, &orders, fixed, &cut, Some(deadline));
    log::debug!(
        "greedy-size-class on its {fixed} largest items, the rest filled: {} in {:?}",
        filled
            .as_ref()
            .map_or("given up".to_string(), |f| f.peak.to_string()),
        started.elapsed()
    );
    let filled = filled?;
    keep_lower(
        best,
        (
            filled.offsets.clone(),
            filled.peak,
            Strategy::GreedySizeClass,
        ),
    );
    Some((filled.offsets, filled.peak))
}

/// What sweeping one item of `p` takes, the whole sweep having taken `sweep_time`.
fn per_item(p: &Prepared, sweep_time: Duration) -> Duration {
    sweep_time / u32::try_from(p.items.len().max(1)).unwrap_or(u32::MAX)
}

/// Whether the machine offers more than one thread of execution (where a second
/// thread can run beside the first).
pub(crate) fn has_second_core() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// The two greedy orders by size of `runs` (each with its `limits` of
/// [`by_size_run`]) at once, one on a thread of its own and one here (both here, in
/// turn, where the thread is refused). Each keeps its own work budget and the
/// goal's deadline; without a deadline the plans are those of the two run in turn.
fn by_size_side_by_side(
    p: &Prepared,
    goal: &Goal,
    runs: [(Strategy, RunLimits); 2],
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &Option<Placement>,
) -> [Option<greedy::Swept>; 2] {
    let [(first, first_limits), (second, second_limits)] = runs;
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("wgalloc-greedy".into())
            .spawn_scoped(scope, || {
                by_size_run(p, goal, second, second_limits, sweep_time, index, best)
            });
        let here = by_size_run(p, goal, first, first_limits, sweep_time, index, best);
        let there = match spawned {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => by_size_run(p, goal, second, second_limits, sweep_time, index, best),
        };
        [here, there]
    })
}

/// What one greedy order by size may spend ([`by_size_run`]).
#[derive(Debug, Clone, Copy)]
struct RunLimits {
    /// Units of work ([`greedy::Cut::work`]).
    work: u64,
    /// The work it is expected to read, where it is to forecast its pace
    /// ([`greedy::Cut::forecast`]).
    forecast: Option<u64>,
    /// Whether the forecast comes by an eighth of the time to the deadline at the
    /// latest ([`greedy::Cut::forecast_early`]).
    forecast_early: bool,
    /// Whether it may place on two threads ([`greedy::Cut::threads`]: the same plan).
    threads: bool,
}

impl RunLimits {
    /// `work` units, no forecast, one thread. O(1).
    const fn work(work: u64) -> RunLimits {
        RunLimits {
            work,
            forecast: None,
            forecast_early: false,
            threads: false,
        }
    }
}

/// One greedy order by size into `best` within `work` units and the goal's deadline
/// ([`by_size_run`]). Returns the work it took where it completed; `None` where it was
/// cut or did not start.
fn by_size_within(
    p: &Prepared,
    goal: &Goal,
    strategy: Strategy,
    work: u64,
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &mut Option<Placement>,
) -> Option<u64> {
    let limits = RunLimits {
        threads: goal.budget.two_threads(),
        ..RunLimits::work(work)
    };
    let swept = by_size_run(p, goal, strategy, limits, sweep_time, index, best)?;
    let took = swept.complete.then_some(swept.work);
    keep_lower(best, (swept.offsets, swept.peak, strategy));
    took
}

/// One greedy order by size on a large instance, `best` being the plan in hand: within
/// `limits.work` units of work and the goal's deadline, the items it has not placed when
/// either runs out swept above its part ([`greedy::place_then_sweep`]), on two threads
/// where `limits.threads` (the same plan, see [`greedy::Cut::threads`]); with an
/// expected work `limits.forecast`, given up instead after a sixteenth of it (or by an
/// eighth of the time left, [`greedy::Cut::forecast_early`]) where it
/// foresees missing the deadline. `None` where it did not start (the goal reached, or
/// too little time left to sweep everything) or gave up.
fn by_size_run(
    p: &Prepared,
    goal: &Goal,
    strategy: Strategy,
    limits: RunLimits,
    sweep_time: Duration,
    index: &OverlapIndex,
    best: &Option<Placement>,
) -> Option<greedy::Swept> {
    if best.as_ref().is_some_and(|b| goal.done(b.1)) {
        return None;
    }
    // With a plan in hand and a deadline, greedy keeps the time the sweep of what it
    // leaves needs (the whole sweep's time, per item), and does not start without it.
    let deadline = best.as_ref().and(goal.budget.deadline);
    if deadline.is_some_and(|d| Instant::now() + sweep_time >= d) {
        return None;
    }
    if strategy == Strategy::GreedySizeClass && class_sweep_pays(p) {
        let whole_work = p.overlap_pairs() / 2;
        return class_by_sweep(
            p,
            limits.work,
            whole_work,
            deadline,
            sweep_time,
            false,
            false,
        );
    }
    let started = Instant::now();
    let (order, fit) = greedy_order(p, strategy);
    let cut = greedy::Cut {
        deadline,
        sweep_per_item: per_item(p, sweep_time),
        work: limits.work,
        forecast: limits.forecast,
        forecast_early: limits.forecast_early,
        threads: limits.threads,
    };
    let swept = greedy::place_then_sweep(p, index, &order, fit, &cut);
    log::debug!(
        "{strategy} ({}) in {:?}",
        match &swept {
            None => "given up: it would miss the deadline".to_string(),
            Some(s) if s.complete => format!("complete: {}", s.peak),
            Some(s) => format!("the rest swept above: {}", s.peak),
        },
        started.elapsed()
    );
    swept
}

/// Whether the local search runs after the search (in `best`) or at all
/// ([`Strategy::Climb`]). Where the search ran, its bisection probed every capacity
/// down to within 0.1% of its best peak with far more work than the climb gets: after
/// it the climb lowered no peak on dsa D and J without a capacity (0.55-0.66 s for
/// nothing). On a tiling (most sections full at the bound) the probes above the bound
/// run without corner turns and stay far above it; there the climb lowered 7 of 71
/// generated tilings without a capacity by 0.08-0.6%, so it still runs there. It does
/// not run either when its budget allows fewer than [`CLIMB_MIN_MOVES`] moves (a move
/// costs at least two scans of the items).
fn climb_applies(p: &Prepared, goal: &Goal) -> bool {
    let after_search = searchable(p) && !p.mostly_full_at(p.lower_bound);
    let enough = goal.budget.climb_work / CLIMB_MIN_MOVES >= 2 * p.items.len() as u64;
    !after_search && enough
}

/// `best` skips the local search when its budget allows fewer moves than this: on
/// iopddl_S_1 the default budget is about 700 moves (1.4 s), which never lowered the
/// skyline's peak (nor did 10 times as many).
const CLIMB_MIN_MOVES: u64 = 1024;

/// The seeded ruin-and-repair local search with the climb budget, until the goal.
fn climb(p: &Prepared, index: &OverlapIndex, offsets: Vec<u64>, goal: &Goal) -> (Vec<u64>, u64) {
    let limits = improve::Cutoffs {
        work: goal.budget.climb_work,
        target: goal.target,
        deadline: goal.budget.deadline,
    };
    improve::repack(p, index, offsets, &limits, 0x5EED_0FF1_1E00_0001)
}

/// The search keeps a list of overlapping items per item: above this many pairs it is
/// not run (iopddl_S_1 has 43 million).
const SEARCH_MAX_PAIRS: u64 = 4_000_000;

/// The search recurses once per placed item: above this many items it is not run, so
/// that it stays well within a 2 MiB thread stack.
const SEARCH_MAX_ITEMS: usize = 3_000;

/// Whether the search runs on `p`: at most [`SEARCH_MAX_ITEMS`] items and
/// [`SEARCH_MAX_PAIRS`] overlapping pairs.
fn searchable(p: &Prepared) -> bool {
    p.items.len() <= SEARCH_MAX_ITEMS && p.overlap_pairs() <= SEARCH_MAX_PAIRS
}

/// The first probe's share of the search budget (numerator, denominator) at a
/// capacity the caller gave (fitting it is the point), and at a lower bound where most
/// sections are full (a tiling of it, [`Prepared::mostly_full_at`]: the bound is
/// likely reachable, and hard tilings need the work).
const SHARE_AT_CAPACITY: (u64, u64) = (3, 4);

/// The first probe's share at any other lower bound: on instances whose bound is out
/// of reach (dsa D, J) bisection needs the work, and every published instance whose
/// bound is reachable fits it with a tenth of this.
const SHARE_AT_BOUND: (u64, u64) = (1, 4);

/// The first probe at the target runs in two pieces: this fraction of its share first,
/// then (after the quick round) the rest.
const FIRST_PIECE: u64 = 2;

/// Each probe of the quick round gets this fraction of the budget.
const QUICK_SHARE: u64 = 64;

/// The quick round probes at most this many capacities.
const QUICK_PROBES: u32 = 8;

/// Bisection (the quick round's and the last one) stops once the gap between the
/// capacities it has given up on and the best peak is below the peak divided by this:
/// the probes that close the last 0.1% almost never find a plan and cost as much as
/// the others.
const BISECT_GAP: u64 = 1024;

/// Improves on a known placement with the bounded search, stopping at the first plan
/// within the goal's target:
///
/// 1. a first piece of the probe at the target (the capacity, else the lower bound);
/// 2. unless that settled it or the target is a capacity the caller gave, a quick
///    round: a few bisection probes with small shares between the target and the
///    best peak, so that a lower bound out of reach does not hold back the plans just
///    above it (they come in a fraction of the budget);
/// 3. the rest of the target probe's share of the budget ([`SHARE_AT_CAPACITY`],
///    [`SHARE_AT_BOUND`]);
/// 4. bisection between the best capacity known infeasible (or given up on) and the
///    best peak found, each probe with a quarter of what is left.
fn search_below(p: &Prepared, offsets: Vec<u64>, peak: u64, goal: &Goal) -> (Vec<u64>, u64) {
    if !searchable(p) {
        return (offsets, peak);
    }
    let (mut best, mut best_peak) = (offsets, peak);
    if goal.target >= best_peak || goal.budget.expired() {
        return (best, best_peak);
    }
    let budget = goal.budget.search_work;
    let deadline = goal.budget.deadline;
    let searcher = Searcher::tuned(
        p,
        search::Tuning {
            threads: goal.budget.threads,
            ..search::Tuning::default()
        },
    );
    let keep = |found: Found, best: &mut Vec<u64>, best_peak: &mut u64| match found {
        Found::Plan(offsets, peak) if peak < *best_peak => {
            *best = offsets;
            *best_peak = peak;
            true
        }
        Found::Plan(..) => true,
        Found::Infeasible | Found::Unknown => false,
    };
    // Capacities below `floor` are infeasible or were given up on.
    let mut floor = goal.target;
    let (num, den) = if goal.capacity || p.mostly_full_at(goal.target) {
        SHARE_AT_CAPACITY
    } else {
        SHARE_AT_BOUND
    };
    let share = budget / den * num;
    let first_piece = share / FIRST_PIECE;
    let mut first = searcher.probe(goal.target, deadline);
    let found = first.advance(first_piece);
    log::debug!(
        "first piece of the probe at {} with {first_piece} work units: {}",
        goal.target,
        describe(&found)
    );
    let first_open = match found {
        found @ Found::Plan(..) => {
            keep(found, &mut best, &mut best_peak);
            return (best, best_peak);
        }
        Found::Infeasible => {
            floor = goal.target + 1;
            false
        }
        Found::Unknown => true,
    };
    // The quick round: what it gives up on it may come back to later.
    let mut work_left = budget - share;
    let mut quick_floor = floor;
    let mut probes = 0;
    while !goal.capacity
        && probes < QUICK_PROBES
        && quick_floor < best_peak
        && best_peak - quick_floor > best_peak / BISECT_GAP
        && !goal.budget.expired()
    {
        probes += 1;
        let target = quick_floor + (best_peak - quick_floor) / 2;
        let share = (budget / QUICK_SHARE).max(1);
        work_left = work_left.saturating_sub(share);
        match logged_probe(&searcher, "quick", target, share, deadline) {
            found @ Found::Plan(..) => {
                keep(found, &mut best, &mut best_peak);
            }
            Found::Infeasible => {
                floor = floor.max(target + 1);
                quick_floor = floor;
            }
            Found::Unknown => quick_floor = target + 1,
        }
    }
    if first_open && floor < best_peak && !goal.budget.expired() {
        let found = first.advance(share - first_piece);
        log::debug!(
            "rest of the probe at {} with {} work units: {}",
            goal.target,
            share - first_piece,
            describe(&found)
        );
        if keep(found, &mut best, &mut best_peak) {
            return (best, best_peak);
        }
        floor = floor.max(goal.target + 1);
    }
    while work_left > 0
        && floor < best_peak
        && best_peak - floor > best_peak / BISECT_GAP
        && !goal.budget.expired()
    {
        // Bisect with a quarter of what is left each time.
        let target = floor + (best_peak - floor) / 2;
        let share = (work_left / 4).max(1);
        work_left = work_left.saturating_sub(share);
        let found = logged_probe(&searcher, "bisection", target, share, deadline);
        // Proven impossible, or given up on: look higher up (above a capacity too,
        // for the smallest plan that does not fit it).
        if !keep(found, &mut best, &mut best_peak) {
            floor = target + 1;
        } else if goal.reached(best_peak) {
            break;
        }
    }
    (best, best_peak)
}

/// One search at `target` with `share` work units, logged at debug level.
fn logged_probe(
    searcher: &Searcher<'_>,
    kind: &str,
    target: u64,
    share: u64,
    deadline: Option<Instant>,
) -> Found {
    let started = Instant::now();
    let found = searcher.search_until(target, share, deadline);
    log::debug!(
        "{kind} probe at {target} with {share} work units: {} in {:?}",
        describe(&found),
        started.elapsed()
    );
    found
}

/// A search answer in a few words, for the debug log.
fn describe(found: &Found) -> String {
    match found {
        Found::Plan(_, peak) => format!("plan of {peak}"),
        Found::Infeasible => "infeasible".into(),
        Found::Unknown => "given up".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` items, one starting at each step, living 1 to `life` steps, sized
    /// `16 << 0..octaves` plus up to 15 bytes (`seed` draws them).
    fn one_start_a_step(seed: u64, n: u64, life: usize, octaves: usize) -> Prepared {
        let mut rng = crate::seeded::Rng::new(seed);
        let ranges: Vec<LiveRange> = (0..n)
            .map(|start| LiveRange {
                start,
                end: start + 1 + rng.index(life) as u64,
                size: (16 << rng.index(octaves)) + rng.index(16) as u64,
            })
            .collect();
        Prepared::new(&ranges, 1).expect("valid")
    }

    /// 3,000 items, one starting at each step, living 1 to 400 steps, each sized one of
    /// `sizes` (`seed` draws them).
    fn few_sizes_a_step(seed: u64, sizes: &[u64]) -> Prepared {
        let mut rng = crate::seeded::Rng::new(seed);
        let ranges: Vec<LiveRange> = (0..3000u64)
            .map(|start| LiveRange {
                start,
                end: start + 1 + rng.index(400) as u64,
                size: sizes[rng.index(sizes.len())],
            })
            .collect();
        Prepared::new(&ranges, 1).expect("valid")
    }

    /// Asserts that [`greedy_by_size_alone`], from the sweep's plan `sweep_plan` under
    /// `goal`, ends at exactly the ejection repair of `plan` in rounds
    /// ([`repaired_in_rounds`]; `what`, peaking at `plan_peak`), and that the repair
    /// (work-bound: the same every time) is below
    /// `plan`, greedy by size's plan and the sweep's: without the repair it would end
    /// at one of those.
    #[allow(clippy::too_many_arguments)]
    fn assert_ends_at_the_repair_of(
        p: &Prepared,
        goal: &Goal,
        sweep_time: Duration,
        index: OverlapIndex,
        sweep_plan: &Option<Placement>,
        plan: Vec<u64>,
        plan_peak: u64,
        what: &str,
    ) {
        let swept = sweep_plan.as_ref().expect("the sweep's plan").1;
        let (_, size_peak) = greedy::place(p, &index, &greedy::by_size(p), greedy::Fit::Lowest);
        let (ejected, ejected_peak) = repaired_in_rounds(p, &index, plan, goal);
        p.assert_valid(&ejected, ejected_peak);
        assert!(
            ejected_peak < plan_peak.min(size_peak).min(swept),
            "{ejected_peak} not below {what}'s {plan_peak}, greedy by size's {size_peak} \
             and the sweep's {swept}"
        );
        let mut best = sweep_plan.clone();
        let mut built = Some(index);
        let pairs = p.overlap_pairs();
        greedy_by_size_alone(p, goal, pairs, sweep_time, &mut built, &mut best);
        let (offsets, peak, strategy) = best.expect("a plan");
        p.assert_valid(&offsets, peak);
        assert_eq!((peak, strategy), (ejected_peak, Strategy::Eject));
        assert!(offsets == ejected, "not the repair's plan");
    }

    #[test]
    fn the_large_classes_then_the_fill_lower_the_sweep_under_a_deadline() {
        let instance = |sizes: &[u64]| few_sizes_a_step(5, sizes);
        // The 4 MiB class alone holds 4/5 of the area: a fifth of the buffers, about a
        // 25th of the work.
        // `class_then_fill` on `p` under `budget`, into `best`.
        let run = |p: &Prepared, budget: &Budget, best: &mut Option<Placement>| {
            let goal = Goal::new(p, budget, None);
            let index = OverlapIndex::new(p);
            let whole = p.overlap_pairs() / 2;
            class_then_fill(p, &goal, whole, Duration::from_millis(1), &index, best)
        };
        let p = instance(&[64, 256, 1024, 4096, 4 << 20]);
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let (offsets, swept) = sweep::place(&p);
        let mut best = Some((offsets, swept, Strategy::Best));
        let filled = run(&p, &budget, &mut best);
        let (offsets, peak, strategy) = best.expect("a plan");
        p.assert_valid(&offsets, peak);
        assert_eq!(strategy, Strategy::GreedySizeClass);
        assert!(peak < swept, "{peak} not below the sweep's {swept}");
        // It returns the plan it kept (for its ejection repair).
        assert_eq!(filled, Some((offsets, peak)));
        // Without a deadline it does nothing: the budget's greedy orders run instead.
        let mut kept = Some((vec![0; p.items.len()], u64::MAX, Strategy::Best));
        assert_eq!(run(&p, &Budget::default(), &mut kept), None);
        assert_eq!(kept.map(|k| k.1), Some(u64::MAX));
        // 4/5 of the area in the 4 and 3 MiB classes (or more): two fifths of the
        // buffers, about a sixth of the work, more than an eighth: it does not run.
        let p = instance(&[64, 4096, 1 << 20, 3 << 20, 4 << 20]);
        let mut kept = Some((vec![0; p.items.len()], u64::MAX, Strategy::Best));
        assert_eq!(run(&p, &budget, &mut kept), None);
        assert_eq!(kept.map(|k| k.1), Some(u64::MAX));
    }

    #[test]
    fn refilled_the_start_s_smaller_items_go_into_the_holes_and_the_plan_is_repaired() {
        let p = one_start_a_step(7, 3000, 1500, 12);
        let index = OverlapIndex::new(&p);
        let goal = Goal::new(&p, &Budget::default(), None);
        // The class order's plan, as best_of_the_others refills it.
        let (start, _) = greedy::place(&p, &index, &greedy::by_size_class(&p), Fit::Lowest);
        let (refilled, peak) =
            refilled_and_repaired(&p, &index, start.clone(), &goal, u64::MAX, Duration::ZERO);
        p.assert_valid(&refilled, peak);
        // The largest classes kept, the rest filled, then the repair in rounds (work
        // bound: the same every time).
        let order = greedy::by_size_class(&p);
        let fixed = large_classes(&p, &order);
        assert!(fixed > 0 && fixed < order.len());
        let mut filled = start.clone();
        let filled_peak = fill::place_into(&p, &order[fixed..], &mut filled, None, Duration::ZERO);
        p.assert_valid(&filled, filled_peak);
        for &i in &order[..fixed] {
            assert_eq!(filled[i], start[i], "item {i} of the largest classes moved");
        }
        assert!(order[fixed..].iter().any(|&i| filled[i] != start[i]));
        let once = eject_repair(&p, &index, filled.clone(), &goal);
        assert!(once.1 < filled_peak, "the repair lowered nothing");
        let rounds = 1 + MORE_REPAIR_ROUNDS;
        let rounds = repair_in_rounds(&p, &index, (filled, filled_peak), &goal, rounds, None);
        assert!(rounds.1 <= once.1);
        assert_eq!((refilled, peak), rounds);
    }

    #[test]
    fn repair_in_rounds_stops_where_a_round_lowers_nothing_the_rounds_run_out_or_it_cannot_catch_up(
    ) {
        let p = one_start_a_step(1, 3000, 1500, 12);
        let index = OverlapIndex::new(&p);
        let goal = Goal::new(&p, &Budget::default(), None);
        let plan = sweep::place(&p);
        assert_eq!(
            repair_in_rounds(&p, &index, plan.clone(), &goal, 0, None),
            plan
        );
        let once = eject_repair(&p, &index, plan.0.clone(), &goal);
        assert_eq!(
            repair_in_rounds(&p, &index, plan.clone(), &goal, 1, None),
            once
        );
        let once_peak = once.1;
        let (mut expected, mut rounds) = (once.clone(), 1);
        loop {
            let next = eject_repair(&p, &index, expected.0.clone(), &goal);
            if next.1 >= expected.1 || rounds == 6 {
                break;
            }
            (expected, rounds) = (next, rounds + 1);
        }
        assert!(
            rounds > 2,
            "two rounds or fewer: the catch-up stop is not tested"
        );
        assert_eq!(
            repair_in_rounds(&p, &index, plan.clone(), &goal, 6, None),
            expected
        );
        // A plan at hand far above: the rounds go on as without one.
        let beat = Some(u64::MAX);
        assert_eq!(
            repair_in_rounds(&p, &index, plan.clone(), &goal, 6, beat),
            expected
        );
        // From the repaired plan, one at the bound: after a round, even its gain in
        // every round left would not reach it.
        let twice = eject_repair(&p, &index, once.0.clone(), &goal);
        let gain = once_peak - twice.1;
        assert!(gain > 0 && twice.1.saturating_sub(gain * 5) >= p.lower_bound);
        // Without that stop a third round would follow and lower it.
        assert_ne!(
            repair_in_rounds(&p, &index, once.clone(), &goal, 6, None),
            twice
        );
        let at_the_bound = repair_in_rounds(&p, &index, once, &goal, 6, Some(p.lower_bound));
        assert_eq!(at_the_bound, twice);
    }

    #[test]
    fn without_a_deadline_best_is_at_most_its_start_refilled_and_repaired() {
        // Large (above SWEEP_FIRST_ITEMS): the refill runs after the start's repair.
        let p = one_start_a_step(5, 24_000, 2000, 16);
        assert!(p.items.len() > SWEEP_FIRST_ITEMS);
        let goal = Goal::new(&p, &Budget::default(), None);
        let mut index = None;
        let (start, start_peak, strategy) = start(&p, &goal, &mut index).expect("a plan");
        assert!(refill_applies(&p, &goal, strategy, start_peak));
        let with_a_deadline =
            Goal::new(&p, &Budget::with_time_limit(Duration::from_secs(600)), None);
        assert!(!refill_applies(&p, &with_a_deadline, strategy, start_peak));
        assert!(!refill_applies(&p, &goal, Strategy::GreedySize, start_peak));
        let index = index.get_or_insert_with(|| OverlapIndex::new(&p));
        let repaired = eject_repair(&p, index, start.clone(), &goal);
        let refilled = refilled_and_repaired(
            &p,
            index,
            start,
            &goal,
            repaired.1.min(start_peak),
            Duration::ZERO,
        );
        assert!(
            refilled.1 < repaired.1.min(start_peak),
            "{} not below the start's repair {}: nothing to test",
            refilled.1,
            repaired.1
        );
        // best_of_the_others passes its own plan at hand (at most the test's) to the
        // rounds' catch-up stop, so this holds here by what the rounds did on this
        // instance, not by construction; the strict precondition above is what makes
        // the test fail where the refill does not run.
        let (offsets, peak, _) = best_of_the_others(&p, &goal);
        p.assert_valid(&offsets, peak);
        assert!(
            peak <= refilled.1,
            "{peak} above the refilled plan's {}",
            refilled.1
        );
    }

    #[test]
    fn under_a_far_deadline_the_complete_class_order_is_refilled_in_the_time_left() {
        // The instance of the test above, where the refill is strictly lower.
        let p = one_start_a_step(5, 24_000, 2000, 16);
        let index = OverlapIndex::new(&p);
        let far = Goal::new(&p, &Budget::with_time_limit(Duration::from_secs(600)), None);
        let order = greedy::by_size_class(&p);
        let (class, _) = greedy::place(&p, &index, &order, Fit::Lowest);
        let (repaired, repaired_peak) = eject_repair(&p, &index, class.clone(), &far);
        let at_hand = Some((repaired.clone(), repaired_peak, Strategy::Eject));
        // The work bounds the refill's repair under a far deadline: the same plan
        // every time.
        let refilled = refilled_and_repaired(
            &p,
            &index,
            class.clone(),
            &far,
            repaired_peak,
            Duration::ZERO,
        );
        assert!(refilled.1 < repaired_peak, "nothing to test");
        let refill = |goal: &Goal, class: Option<(Vec<u64>, Duration)>| {
            let mut best = at_hand.clone();
            refill_in_the_time_left(&p, goal, class, Duration::ZERO, &index, &mut best);
            best
        };
        let took = |secs| Some((class.clone(), Duration::from_secs(secs)));
        let best = refill(&far, took(1));
        assert_eq!(best, Some((refilled.0, refilled.1, Strategy::Eject)));
        // The class order did not complete: nothing to refill.
        assert_eq!(refill(&far, None), at_hand);
        // Less time left than the class order took: no refill.
        assert_eq!(refill(&far, took(700)), at_hand);
        // Without a deadline the refill is best_of_the_others' (refill_applies).
        let unlimited = Goal::new(&p, &Budget::default(), None);
        assert_eq!(refill(&unlimited, took(1)), at_hand);
        // The plan at hand meets the goal (a capacity at its peak): nothing to do.
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let met = Goal::new(&p, &budget, Some(repaired_peak));
        assert_eq!(refill(&met, took(1)), at_hand);
        // Not a large instance: no refill (though it would lower this one).
        let small = one_start_a_step(1, 3000, 1500, 12);
        let small_index = OverlapIndex::new(&small);
        let small_goal = Goal::new(&small, &budget, None);
        let (small_class, small_peak) = greedy::place(
            &small,
            &small_index,
            &greedy::by_size_class(&small),
            Fit::Lowest,
        );
        let small_at_hand = Some((small_class.clone(), small_peak, Strategy::GreedySizeClass));
        let mut kept = small_at_hand.clone();
        let class = Some((small_class.clone(), Duration::from_secs(1)));
        refill_in_the_time_left(
            &small,
            &small_goal,
            class,
            Duration::ZERO,
            &small_index,
            &mut kept,
        );
        assert_eq!(kept, small_at_hand);
        let small_refill = refilled_and_repaired(
            &small,
            &small_index,
            small_class,
            &small_goal,
            small_peak,
            Duration::ZERO,
        );
        assert!(small_refill.1 < small_peak);
    }

    /// `n` malloc-like items, one starting at each step: log-normal sizes (median
    /// 2 KiB, 16 B to 4 MiB) and log-normal lifetimes (about `live` at once).
    fn malloc_like(seed: u64, n: u64, live: f64) -> Prepared {
        let mut rng = crate::seeded::Rng::new(seed);
        let mut normal = || {
            let u = (rng.below(1 << 52) + 1) as f64 / (1u64 << 52) as f64;
            let v = rng.below(1 << 52) as f64 / (1u64 << 52) as f64;
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let ranges: Vec<LiveRange> = (0..n)
            .map(|start| {
                let size = (2048.0 * (2.0 * normal()).exp()) as u64;
                let life = (live / (1.5f64 * 1.5 / 2.0).exp() * (1.5 * normal()).exp()) as u64;
                LiveRange {
                    start,
                    end: start + life.max(1),
                    size: size.clamp(16, 4 << 20),
                }
            })
            .collect();
        Prepared::new(&ranges, 1).expect("valid")
    }

    #[test]
    fn under_a_far_deadline_the_orders_by_size_end_at_most_at_the_class_order_refilled() {
        // Seed 3 of the malloc-like family: without the refill the deadline's path ends
        // at the class order's repair (34,410,648), above its refill (34,305,653);
        // seeds 1, 2 and 4 end below both either way. On one thread the refill follows
        // the orders ([`refill_in_the_time_left`]); with a second core it runs beside
        // them ([`large_classes_filled_and_repaired`]).
        let p = malloc_like(3, 24_000, 2000.0);
        assert!(p.items.len() > SWEEP_FIRST_ITEMS);
        for threads in [false, true] {
            let budget = Budget {
                threads,
                ..Budget::with_time_limit(Duration::from_secs(600))
            };
            let far = Goal::new(&p, &budget, None);
            let started = Instant::now();
            let (swept, swept_peak) = sweep::place(&p);
            let sweep_time = started.elapsed();
            let mut best = Some((swept, swept_peak, Strategy::Best));
            assert_eq!(
                refill_beside_applies(&p, &far, &OverlapIndex::new(&p), &best),
                threads && has_second_core()
            );
            let mut index = None;
            let pairs = p.overlap_pairs();
            greedy_by_size_alone(&p, &far, pairs, sweep_time, &mut index, &mut best);
            let (offsets, peak, _) = best.expect("a plan");
            p.assert_valid(&offsets, peak);
            let index = index.expect("built by the orders by size");
            let (class, _) = greedy::place(&p, &index, &greedy::by_size_class(&p), Fit::Lowest);
            let (_, repaired_peak) = eject_repair(&p, &index, class.clone(), &far);
            let refilled =
                refilled_and_repaired(&p, &index, class, &far, repaired_peak, Duration::ZERO);
            assert!(
                refilled.1 < repaired_peak,
                "{} not below the class order's repair {repaired_peak}: nothing to test",
                refilled.1
            );
            assert!(
                peak <= refilled.1,
                "threads {threads}: {peak} above the refilled plan's {}",
                refilled.1
            );
        }
    }

    #[test]
    fn the_refill_beside_the_orders_is_the_complete_class_order_refilled() {
        // Its largest classes, placed by the class sweep alone, are the complete class
        // order's first items: the same start as the refill of the complete plan, then
        // the same rounds of the repair (no deadline: bound by work, deterministic).
        for (seed, n) in [(5, 21_000), (11, 22_000)] {
            let p = malloc_like(seed, n, 1500.0);
            let goal = Goal::new(&p, &Budget::default(), None);
            let index = OverlapIndex::new(&p);
            let go_on = AtomicBool::new(false);
            let beside =
                large_classes_filled_and_repaired(&p, &goal, &index, Duration::ZERO, &go_on)
                    .expect("smaller classes to fill");
            p.assert_valid(&beside.0, beside.1);
            let order = greedy::by_size_class(&p);
            let class = class_sweep::place_classes(&p, &order, &class_sweep::Limits::UNLIMITED);
            assert_eq!(class.placed, p.items.len());
            let refilled = refilled_and_repaired(
                &p,
                &index,
                class.offsets.clone(),
                &goal,
                u64::MAX,
                Duration::ZERO,
            );
            assert_eq!(beside, refilled, "seed {seed}");
            // Stopped from the start (the orders reached the goal), it offers its start
            // unrepaired: the class order's largest classes where they are, the rest
            // filled.
            let stopped = AtomicBool::new(true);
            let (offsets, peak) =
                large_classes_filled_and_repaired(&p, &goal, &index, Duration::ZERO, &stopped)
                    .expect("smaller classes to fill");
            p.assert_valid(&offsets, peak);
            let large = large_classes(&p, &order);
            let mut start = class.offsets;
            let filled = fill::place_into(&p, &order[large..], &mut start, None, Duration::ZERO);
            assert_eq!((offsets, peak), (start, filled), "seed {seed}");
            assert!(
                refilled.1 < filled,
                "seed {seed}: the repair lowered nothing"
            );
        }
        // Where the largest classes are every item there is nothing to fill.
        let one_size: Vec<LiveRange> = (0..30u64)
            .map(|t| LiveRange {
                start: t,
                end: t + 5,
                size: 64,
            })
            .collect();
        let p = Prepared::new(&one_size, 1).expect("valid");
        let goal = Goal::new(&p, &Budget::default(), None);
        let index = OverlapIndex::new(&p);
        let go_on = AtomicBool::new(false);
        assert_eq!(
            large_classes_filled_and_repaired(&p, &goal, &index, Duration::ZERO, &go_on),
            None
        );
    }

    #[test]
    fn the_refill_beside_offers_nothing_without_time_for_its_classes_and_a_cut_class_order_is_filled(
    ) {
        let p = malloc_like(13, 21_000, 1500.0);
        let index = OverlapIndex::new(&p);
        let go_on = AtomicBool::new(false);
        // The deadline already past: no time for the largest classes.
        let past = Budget {
            deadline: Some(Instant::now()),
            ..Budget::default()
        };
        let goal = Goal::new(&p, &past, None);
        let sweep_time = Duration::from_millis(1);
        assert_eq!(
            large_classes_filled_and_repaired(&p, &goal, &index, sweep_time, &go_on),
            None
        );
        // The class sweep cut inside the largest classes (by its work): the items of
        // those classes it left are filled with the rest, and the plan is valid.
        let order = greedy::by_size_class(&p);
        let large = large_classes(&p, &order);
        let limits = class_sweep::Limits {
            work: 2_000,
            ..class_sweep::Limits::UNLIMITED
        };
        let placed = class_sweep::place_classes(&p, &order[..large], &limits);
        assert!(
            0 < placed.placed && placed.placed < large,
            "{}",
            placed.placed
        );
        let (offsets, peak) = filled_after_classes(&p, &order, placed, None, Duration::ZERO);
        p.assert_valid(&offsets, peak);
        assert_eq!(peak, p.peak_of(&offsets));
    }

    #[test]
    fn the_refill_runs_beside_the_orders_only_under_a_deadline_with_a_second_core_on_a_large_instance(
    ) {
        let p = malloc_like(7, 24_000, 2000.0);
        assert!(p.items.len() > SWEEP_FIRST_ITEMS && class_sweep_pays(&p));
        let index = OverlapIndex::new(&p);
        assert!(index.spans_bytes() <= REFILL_BESIDE_MAX_BYTES);
        let far = Budget::with_time_limit(Duration::from_secs(600));
        let goal = |budget: &Budget| Goal::new(&p, budget, None);
        let above = Some((Vec::new(), u64::MAX, Strategy::Best));
        assert_eq!(
            refill_beside_applies(&p, &goal(&far), &index, &above),
            has_second_core()
        );
        // No deadline, no second thread, no plan yet, or the goal met: not beside.
        let applies = |budget: &Budget, plan: &Option<Placement>| {
            refill_beside_applies(&p, &goal(budget), &index, plan)
        };
        assert!(!applies(&Budget::default(), &above));
        let one_thread = Budget {
            threads: false,
            ..far
        };
        assert!(!applies(&one_thread, &above));
        assert!(!applies(&far, &None));
        let met = Some((Vec::new(), p.lower_bound, Strategy::Best));
        assert!(!applies(&far, &met));
        // A small instance, and one the class sweep does not pay on (about 50 live).
        for other in [
            malloc_like(7, 2_000, 150.0),
            one_start_a_step(1, 21_000, 100, 10),
        ] {
            let index = OverlapIndex::new(&other);
            let goal = Goal::new(&other, &far, None);
            assert!(!refill_beside_applies(&other, &goal, &index, &above));
        }
    }

    #[test]
    fn the_large_classes_are_placed_in_the_order_whose_prefix_peaks_lower() {
        // Bursts of buffers starting at one step, a fifth of them of 1-2 MiB (most of
        // the area), the rest small: seeds where the largest classes by exact size
        // peak below the class order's, and seeds where they do not.
        let bursts = |seed: u64| {
            let mut rng = crate::seeded::Rng::new(seed);
            let ranges: Vec<LiveRange> = (0..3000u64)
                .map(|i| {
                    let start = i / 30 * 30;
                    let size = if rng.index(5) == 0 {
                        (1 << 20) + rng.index(1 << 20) as u64
                    } else {
                        64 + rng.index(4096) as u64
                    };
                    LiveRange {
                        start,
                        end: start + 1 + rng.index(400) as u64,
                        size,
                    }
                })
                .collect();
            Prepared::new(&ranges, 1).expect("valid")
        };
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let (mut exact_lower, mut class_lower) = (0, 0);
        for seed in 0..12 {
            let p = bursts(seed);
            let index = OverlapIndex::new(&p);
            let class = greedy::by_size_class(&p);
            let fixed = large_classes(&p, &class);
            let mut exact = class.clone();
            greedy::sort_by_size(&p, &mut exact[..fixed]);
            let (by_class, class_peak) = greedy::place(&p, &index, &class[..fixed], Fit::Lowest);
            let (by_exact, exact_peak) = greedy::place(&p, &index, &exact[..fixed], Fit::Lowest);
            let goal = Goal::new(&p, &budget, None);
            let (offsets, swept) = sweep::place(&p);
            let mut best = Some((offsets, swept, Strategy::Best));
            let (filled, peak) = class_then_fill(
                &p,
                &goal,
                p.overlap_pairs() / 2,
                Duration::from_millis(1),
                &index,
                &mut best,
            )
            .expect("it runs here");
            p.assert_valid(&filled, peak);
            let kept = if exact_peak < class_peak {
                exact_lower += 1;
                &by_exact
            } else {
                class_lower += 1;
                &by_class
            };
            for &i in &class[..fixed] {
                assert_eq!(filled[i], kept[i], "seed {seed}, item {i}");
            }
        }
        assert!(
            exact_lower > 0 && class_lower > 0,
            "{exact_lower} / {class_lower}"
        );
    }

    /// The ejection repair of `plan` ([`eject_repair`]), then again in rounds
    /// ([`repair_in_the_time_left`]) while they lower it: what greedy by size alone
    /// ends at under a far deadline where the repair is below greedy by size's plan.
    fn repaired_in_rounds(
        p: &Prepared,
        index: &OverlapIndex,
        plan: Vec<u64>,
        goal: &Goal,
    ) -> (Vec<u64>, u64) {
        let (ejected, peak) = eject_repair(p, index, plan, goal);
        let mut best = Some((ejected, peak, Strategy::Eject));
        repair_in_the_time_left(p, goal, index, &mut best);
        let (offsets, peak, _) = best.expect("a plan");
        (offsets, peak)
    }

    #[test]
    fn with_time_left_the_repair_goes_on_in_rounds_while_they_lower_the_peak() {
        let p = one_start_a_step(5, 3000, 1500, 12);
        let index = OverlapIndex::new(&p);
        let far = Goal::new(&p, &Budget::with_time_limit(Duration::from_secs(600)), None);
        let (offsets, peak) = sweep::place(&p);
        let (once, once_peak) = eject_repair(&p, &index, offsets, &far);
        assert!(once_peak < peak && once_peak > p.lower_bound);
        let mut best = Some((once.clone(), once_peak, Strategy::Eject));
        repair_in_the_time_left(&p, &far, &index, &mut best);
        let (rounds, rounds_peak, strategy) = best.expect("a plan");
        assert_eq!(strategy, Strategy::Eject);
        p.assert_valid(&rounds, rounds_peak);
        assert!(
            rounds_peak < once_peak,
            "{rounds_peak} not below one round's {once_peak}"
        );
        // They stop where a round lowers it no more, or after MORE_REPAIR_ROUNDS
        // (work-bound: the same every time).
        let (mut expected, mut expected_peak) = (once.clone(), once_peak);
        for _ in 0..MORE_REPAIR_ROUNDS {
            let (next, next_peak) = eject_repair(&p, &index, expected.clone(), &far);
            if next_peak >= expected_peak {
                break;
            }
            (expected, expected_peak) = (next, next_peak);
        }
        assert_eq!((rounds, rounds_peak), (expected, expected_peak));
        // Without a deadline (the work budget alone, deterministic) or with one
        // already past, nothing more is done.
        for budget in [Budget::default(), Budget::with_time_limit(Duration::ZERO)] {
            let goal = Goal::new(&p, &budget, None);
            let mut best = Some((once.clone(), once_peak, Strategy::Eject));
            repair_in_the_time_left(&p, &goal, &index, &mut best);
            assert_eq!(best, Some((once.clone(), once_peak, Strategy::Eject)));
        }
    }

    #[test]
    fn the_class_order_s_plan_is_kept_then_lowered_by_its_ejection_repair() {
        let p = one_start_a_step(21, 2000, 800, 10);
        let index = OverlapIndex::new(&p);
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let goal = Goal::new(&p, &budget, None);
        // The sweep's plan stands in for the class order's: well above the bound.
        let (offsets, peak) = sweep::place(&p);
        let mut best = None;
        eject_the_class_order(&p, &goal, &index, offsets.clone(), peak, &mut best);
        let (kept, kept_peak, strategy) = best.expect("a plan");
        p.assert_valid(&kept, kept_peak);
        assert!(kept_peak < peak, "{kept_peak} not below {peak}");
        assert_eq!(strategy, Strategy::Eject);
        let (ejected, ejected_peak) = eject_repair(&p, &index, offsets.clone(), &goal);
        assert_eq!((kept, kept_peak), (ejected, ejected_peak));
        // A plan at the goal is kept as it is, not repaired.
        let reached = Goal::new(&p, &budget, Some(peak));
        let mut best = None;
        eject_the_class_order(&p, &reached, &index, offsets.clone(), peak, &mut best);
        assert_eq!(best, Some((offsets, peak, Strategy::GreedySizeClass)));
    }

    #[test]
    fn the_class_order_by_classes_is_the_greedy_s_or_valid_where_cut() {
        let p = one_start_a_step(9, 3000, 1500, 12);
        let pairs = p.overlap_pairs() / 2;
        let by_sweep = |work: u64, deadline: Option<Instant>, whole_work: u64| {
            class_by_sweep(
                &p,
                work,
                whole_work,
                deadline,
                Duration::from_millis(1),
                false,
                false,
            )
        };
        let whole = by_sweep(u64::MAX, None, pairs).expect("complete");
        let index = OverlapIndex::new(&p);
        let order = greedy::by_size_class(&p);
        let (offsets, peak) = greedy::place(&p, &index, &order, greedy::Fit::Lowest);
        assert!(whole.complete);
        assert_eq!((&whole.offsets, whole.peak), (&offsets, peak));
        // A deadline already passed: every item filled.
        let filled = by_sweep(u64::MAX, Some(Instant::now()), pairs).expect("a plan");
        assert!(!filled.complete);
        p.assert_valid(&filled.offsets, filled.peak);
        // A budget of half the work.
        let half = whole.work / 2;
        // Without a deadline it gives up where it does not complete; under one it
        // fills, except where its largest classes read more than an eighth of the
        // whole order's work.
        assert_eq!(by_sweep(half, None, pairs), None);
        // Asked to fill without a deadline too, it places its largest classes within
        // the work (no look after each of them) and fills the rest, the same plan
        // every time; where a cut could not be filled it still gives up.
        let fill = |work: u64, whole_work: u64| {
            class_by_sweep(&p, work, whole_work, None, Duration::ZERO, false, true)
        };
        let split = fill(half, pairs).expect("a plan");
        assert!(!split.complete);
        p.assert_valid(&split.offsets, split.peak);
        assert_eq!(Some(split.clone()), fill(half, pairs));
        let large = large_classes(&p, &order);
        let first =
            class_sweep::place_classes(&p, &order[..large], &class_sweep::Limits::UNLIMITED);
        assert!(
            first.work <= half / SWEEP_UNIT_PAIRS,
            "the largest classes fit the work"
        );
        for &i in &order[..large] {
            assert_eq!(split.offsets[i], whole.offsets[i]);
        }
        assert_eq!(fill(half, 0), None);
        assert_eq!(fill(u64::MAX, pairs), Some(whole.clone()));
        let later = Some(Instant::now() + Duration::from_secs(600));
        let cut = by_sweep(half, later, pairs).expect("a plan");
        assert!(!cut.complete);
        p.assert_valid(&cut.offsets, cut.peak);
        assert_eq!(
            Some(cut.clone()),
            by_sweep(half, later, pairs),
            "the same plan every time"
        );
        assert_eq!(by_sweep(half, later, 0), None);
        assert!(by_sweep(u64::MAX, later, 0).is_some_and(|s| s.complete));
        // With the later cut it goes on past its largest classes (until the work runs
        // out here), so it spends more of it by the sweep; the rest is filled.
        let on = class_by_sweep(
            &p,
            half,
            pairs,
            later,
            Duration::from_millis(1),
            true,
            false,
        )
        .expect("a plan");
        assert!(!on.complete);
        assert!(on.work > cut.work, "{} {}", on.work, cut.work);
        p.assert_valid(&on.offsets, on.peak);
    }

    #[test]
    fn under_a_deadline_the_class_order_is_lowered_by_the_ejection_repair() {
        let p = one_start_a_step(13, 3000, 1500, 12);
        let pairs = p.overlap_pairs() / 2;
        let sweep_time = Duration::from_millis(1);
        let whole =
            class_by_sweep(&p, u64::MAX, pairs, None, sweep_time, false, false).expect("complete");
        // Half the class order's work (in greedy units): it is split, the rest filled.
        let half = whole.work / 2;
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let goal = Goal::new(&p, &budget, None);
        let split = class_by_sweep(&p, half, pairs, budget.deadline, sweep_time, false, false)
            .expect("a plan");
        assert!(!split.complete);
        let index = OverlapIndex::new(&p);
        let (offsets, swept) = sweep::place(&p);
        let mut best = Some((offsets, swept, Strategy::Best));
        assert!(class_sweep_then_size(
            &p, &goal, half, pairs, sweep_time, &index, &mut best, true
        ));
        let (offsets, peak, strategy) = best.expect("a plan");
        p.assert_valid(&offsets, peak);
        assert!(
            peak < split.peak,
            "{peak} not below the split's {}",
            split.peak
        );
        assert_eq!(strategy, Strategy::Eject);
        // The ejection repair of the split's plan, in rounds while they lower it
        // (work-bound: the same every time), not greedy by size.
        let (ejected, ejected_peak) = repaired_in_rounds(&p, &index, split.offsets, &goal);
        assert_eq!((&offsets, peak), (&ejected, ejected_peak));
        // Where the refill runs beside (`refill` false), the class sweep goes on past
        // its largest classes (the later cut, here until the work runs out), and the
        // repair starts from that plan.
        let later = class_by_sweep(&p, half, pairs, budget.deadline, sweep_time, true, false)
            .expect("a plan");
        let (later_ejected, later_peak) = repaired_in_rounds(&p, &index, later.offsets, &goal);
        assert_ne!(later_ejected, ejected, "the two starts repaired alike");
        let mut best = Some((sweep::place(&p).0, swept, Strategy::Best));
        assert!(class_sweep_then_size(
            &p, &goal, half, pairs, sweep_time, &index, &mut best, false
        ));
        let (offsets, peak, _) = best.expect("a plan");
        assert_eq!((offsets, peak), (later_ejected, later_peak));
        // Complete, the same: the repair of its plan.
        let mut best = Some((sweep::place(&p).0, swept, Strategy::Best));
        assert!(class_sweep_then_size(
            &p,
            &goal,
            u64::MAX,
            pairs,
            sweep_time,
            &index,
            &mut best,
            true
        ));
        let (offsets, peak, _) = best.expect("a plan");
        p.assert_valid(&offsets, peak);
        let (ejected, ejected_peak) = repaired_in_rounds(&p, &index, whole.offsets, &goal);
        assert!(ejected_peak <= whole.peak);
        assert_eq!((offsets, peak), (ejected, ejected_peak));
        // Without a deadline, cut by the work: the split plan (its largest classes,
        // the rest filled) repaired in rounds, not greedy by size.
        let unlimited = Goal::new(&p, &Budget::default(), None);
        let mut kept = Some((vec![0; p.items.len()], u64::MAX, Strategy::Best));
        assert!(class_sweep_then_size(
            &p, &unlimited, half, pairs, sweep_time, &index, &mut kept, true
        ));
        let (offsets, peak, strategy) = kept.expect("a plan");
        p.assert_valid(&offsets, peak);
        let split = class_by_sweep(&p, half, pairs, None, sweep_time, false, true).expect("split");
        assert!(!split.complete);
        let rounds = 2 + MORE_REPAIR_ROUNDS;
        let repaired = repair_in_rounds(
            &p,
            &index,
            (split.offsets, split.peak),
            &unlimited,
            rounds,
            None,
        );
        assert!(repaired.1 < split.peak, "the repair lowered nothing");
        assert_eq!(
            (offsets, peak, strategy),
            (repaired.0, repaired.1, Strategy::Eject)
        );
    }

    /// Under a far deadline, where the class sweep does not pay and both orders by size
    /// fit the budget, greedy by size alone runs the class order first, then (the
    /// class order took far less than a quarter of the time left) greedy by size, then
    /// the ejection repair of the lower plan: `best` ends at the repair's plan where
    /// it is below the other two (without the repair it would end at the lower of the
    /// class order's and greedy by size's plans).
    #[test]
    fn where_both_orders_fit_a_deadline_the_class_order_is_lowered_by_the_ejection_repair() {
        // About 50 items live at once: the greedy costs less than the class sweep.
        let p = one_start_a_step(1, 2000, 100, 10);
        assert!(!class_sweep_pays(&p));
        let pairs = p.overlap_pairs();
        assert!(pairs / 2 * 2 <= GREEDY_SIZE_WORK, "both fit the budget");
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let goal = Goal::new(&p, &budget, None);
        // Far less than a sixteenth of the time left: the class order goes first.
        let sweep_time = Duration::from_millis(1);
        let index = OverlapIndex::new(&p);
        let (offsets, swept) = sweep::place(&p);
        let sweep_plan = Some((offsets, swept, Strategy::Best));
        // The class order's plan, complete (the deadline is far), as `by_size_run`
        // makes it there.
        let order = greedy::by_size_class(&p);
        let (class, class_peak) = greedy::place(&p, &index, &order, greedy::Fit::Lowest);
        let limits = RunLimits {
            work: u64::MAX,
            forecast: Some(pairs / 2),
            forecast_early: false,
            threads: budget.two_threads(),
        };
        let strategy = Strategy::GreedySizeClass;
        let run = by_size_run(&p, &goal, strategy, limits, sweep_time, &index, &sweep_plan);
        let run = run.expect("a plan");
        assert!(run.complete);
        assert_eq!((&run.offsets, run.peak), (&class, class_peak));
        // Greedy by size runs before the repair here (the class order took far less
        // than a quarter of the time left) and is above the class order's plan, so
        // the repair starts from the class order's.
        let (_, size_peak) = greedy::place(&p, &index, &greedy::by_size(&p), greedy::Fit::Lowest);
        assert!(class_peak <= size_peak, "{class_peak} above {size_peak}");
        let what = "the class order";
        assert_ends_at_the_repair_of(
            &p,
            &goal,
            sweep_time,
            index,
            &sweep_plan,
            class,
            class_peak,
            what,
        );
    }

    /// Where the class order took far less than a quarter of the time left, greedy by
    /// size runs before the ejection repair, which lowers the lower of the two plans:
    /// here greedy by size's (128,805 against 144,879), whose repair ends at 124,800,
    /// where the class order's repair ends at 124,836 (the repair first, then greedy by
    /// size, would end there).
    #[test]
    fn greedy_by_size_goes_before_the_repair_only_under_a_deadline_four_times_the_class_order_s_time_away(
    ) {
        let p = one_start_a_step(3, 200, 10, 4);
        let goal = |budget: Budget| Goal::new(&p, &budget, None);
        let second = Duration::from_secs(1);
        let far = goal(Budget::with_time_limit(Duration::from_secs(600)));
        assert!(time_for_size_before_the_repair(&far, second));
        assert!(!time_for_size_before_the_repair(&far, 200 * second));
        assert!(!time_for_size_before_the_repair(
            &goal(Budget::default()),
            Duration::ZERO
        ));
        let past = goal(Budget::with_time_limit(Duration::ZERO));
        assert!(!time_for_size_before_the_repair(&past, second));
    }

    #[test]
    fn with_time_to_spare_greedy_by_size_runs_before_the_repair_of_the_lower_plan() {
        let p = one_start_a_step(3, 2000, 100, 10);
        assert!(!class_sweep_pays(&p));
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let goal = Goal::new(&p, &budget, None);
        let index = OverlapIndex::new(&p);
        let by = |order: &[usize]| greedy::place(&p, &index, order, greedy::Fit::Lowest);
        let (class, class_peak) = by(&greedy::by_size_class(&p));
        let (size, size_peak) = by(&greedy::by_size(&p));
        assert!(size_peak < class_peak, "{size_peak} not below {class_peak}");
        let (repaired, repaired_peak) = repaired_in_rounds(&p, &index, size, &goal);
        let (_, class_repaired) = repaired_in_rounds(&p, &index, class, &goal);
        assert!(
            repaired_peak < class_repaired,
            "{repaired_peak} not below {class_repaired}"
        );
        let (offsets, swept) = sweep::place(&p);
        let mut best = Some((offsets, swept, Strategy::Best));
        let mut built = Some(index);
        let pairs = p.overlap_pairs();
        let sweep_time = Duration::from_millis(1);
        greedy_by_size_alone(&p, &goal, pairs, sweep_time, &mut built, &mut best);
        let (offsets, peak, strategy) = best.expect("a plan");
        p.assert_valid(&offsets, peak);
        assert_eq!((peak, strategy), (repaired_peak, Strategy::Eject));
        assert!(
            offsets == repaired,
            "not the repair of greedy by size's plan"
        );
    }

    /// Under a deadline too near for the class order to go first (less than sixteen
    /// sweeps away) yet far enough for its largest classes and the fill, where the
    /// class sweep does not pay, greedy by size alone places the largest classes and
    /// fills the rest in, then runs the ejection repair of that plan, then greedy by
    /// size: `best` ends at the repair's plan where it is below the filled plan,
    /// greedy by size's and the sweep's (without the repair it would end at the
    /// filled plan).
    #[test]
    fn without_time_for_the_class_order_first_its_large_classes_and_fill_are_ejection_repaired() {
        // 4/5 of the area in the 4 MiB class: about a fifth of the buffers.
        let p = few_sizes_a_step(7, &[64, 256, 1024, 4096, 4 << 20]);
        assert!(!class_sweep_pays(&p));
        let pairs = p.overlap_pairs();
        let budget = Budget::with_time_limit(Duration::from_secs(600));
        let goal = Goal::new(&p, &budget, None);
        // Sixteen sweeps of a minute are past the deadline, ten minutes away: no time
        // for the class order first. What the fill keeps (four sweeps an item it
        // fills, at most four minutes) and greedy by size (a sweep) still fit.
        let sweep_time = Duration::from_secs(60);
        assert!(budget
            .deadline
            .is_some_and(|d| Instant::now() + sweep_time.saturating_mul(CLASS_FIRST_SWEEPS) >= d));
        let index = OverlapIndex::new(&p);
        let (offsets, swept) = sweep::place(&p);
        let sweep_plan = Some((offsets, swept, Strategy::Best));
        // The largest classes and the fill, as `class_then_fill` makes them there.
        let mut kept = sweep_plan.clone();
        let (filled, filled_peak) =
            class_then_fill(&p, &goal, pairs / 2, sweep_time, &index, &mut kept).expect("a plan");
        let what = "the filled plan";
        assert_ends_at_the_repair_of(
            &p,
            &goal,
            sweep_time,
            index,
            &sweep_plan,
            filled,
            filled_peak,
            what,
        );
    }

    #[test]
    fn the_class_sweep_pays_where_many_items_are_live_at_once() {
        let instance = |n: u64, life: u64| {
            let ranges: Vec<LiveRange> = (0..n)
                .map(|start| LiveRange {
                    start,
                    end: start + life,
                    size: 16 << (start % 12),
                })
                .collect();
            Prepared::new(&ranges, 1).expect("valid")
        };
        assert!(class_sweep_pays(&instance(20_000, 5_000)));
        assert!(!class_sweep_pays(&instance(20_000, 100)));
    }

    #[test]
    fn the_later_cut_or_the_quarter_cap_only_under_a_deadline_where_a_cut_may_be_filled() {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(8);
        let at = |seconds: u64| Some(started + Duration::from_secs(seconds));
        // The later cut three quarters of the way, the quarter cap a quarter.
        assert_eq!(
            cut_instants(Some(deadline), started, 10, 100, true, true),
            (at(6), None)
        );
        assert_eq!(
            cut_instants(Some(deadline), started, 10, 100, true, false),
            (None, at(2))
        );
        // The later cut also where the largest classes are every class (the first
        // look is then at the end: it is never used); the quarter cap not.
        assert_eq!(
            cut_instants(Some(deadline), started, 100, 100, true, true),
            (at(6), None)
        );
        assert_eq!(
            cut_instants(Some(deadline), started, 100, 100, true, false),
            (None, None)
        );
        // Neither without a deadline or where a cut could not be filled.
        for later_cut in [false, true] {
            assert_eq!(
                cut_instants(None, started, 10, 100, true, later_cut),
                (None, None)
            );
            assert_eq!(
                cut_instants(Some(deadline), started, 10, 100, false, later_cut),
                (None, None)
            );
        }
        // A deadline far off does not overflow (three times this would).
        let far = started + Duration::from_secs(u64::MAX / 3 + 1);
        assert!(cut_instants(Some(far), started, 10, 100, true, true).0 > at(6));
    }

    #[test]
    fn pairs_among_counts_the_pairs_live_at_a_common_time() {
        let range = |start: u64, end: u64| LiveRange {
            start,
            end,
            size: 8,
        };
        // 0 [0,4), 1 [2,6), 2 [4,8), 3 [4,5): pairs 0-1, 1-2, 1-3, 2-3.
        let p =
            Prepared::new(&[range(0, 4), range(2, 6), range(4, 8), range(4, 5)], 1).expect("valid");
        assert_eq!(pairs_among(&p, &[0, 1, 2, 3]), 4);
        assert_eq!(pairs_among(&p, &[0, 2, 3]), 1);
        assert_eq!(pairs_among(&p, &[]), 0);
        assert_eq!(pairs_among(&p, &[0, 1, 2, 3]) * 2, p.overlap_pairs());
    }

    #[test]
    fn the_large_classes_are_whole_octaves_up_to_four_fifths_of_the_area() {
        let range = |start: u64, len: u64, size: u64| LiveRange {
            start,
            end: start + len,
            size,
        };
        // One 1000-byte item over 8 steps (8000), one of 100 bytes over 10 (1000), ten
        // of 10 bytes over 10 (1000): the first class alone holds 4/5 of 10,000.
        let mut ranges = vec![range(0, 8, 1000), range(0, 10, 100)];
        ranges.extend((0..10).map(|k| range(k, 10, 10)));
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order = greedy::by_size_class(&p);
        assert_eq!(large_classes(&p, &order), 1);
        // 700 bytes over 8 steps is 5600 of 7600: under 4/5, so the next class too.
        ranges[0] = range(0, 8, 700);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order = greedy::by_size_class(&p);
        assert_eq!(large_classes(&p, &order), 2);
        // Items of one class: all of them.
        let same: Vec<LiveRange> = (0..5).map(|k| range(k, 3, 64 + k)).collect();
        let p = Prepared::new(&same, 1).expect("valid");
        assert_eq!(large_classes(&p, &greedy::by_size_class(&p)), 5);
        let empty = Prepared::new(&[], 1).expect("valid");
        assert_eq!(large_classes(&empty, &[]), 0);
    }

    #[test]
    fn where_each_order_by_size_fits_the_budget_alone_both_run_the_same_on_any_threads() {
        // A pair count in (GREEDY_SIZE_WORK, 2 GREEDY_SIZE_WORK] (ordered pairs, so the
        // work of one order is in the half of the budget up to all of it): both orders
        // run without a deadline, side by side or in turn, and give the same plan, the
        // lower of the two orders alone.
        let mut rng = crate::seeded::Rng::new(41);
        let ranges: Vec<LiveRange> = (0..3_000u64)
            .map(|i| LiveRange {
                start: i,
                end: i + 1 + rng.index(400) as u64,
                size: 16 << rng.index(10),
            })
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let pairs = GREEDY_SIZE_WORK * 3 / 2;
        let plan = |threads: bool| {
            let budget = Budget {
                threads,
                ..Budget::default()
            };
            let goal = Goal::new(&p, &budget, None);
            let (offsets, peak) = sweep::place(&p);
            let mut best = Some((offsets, peak, Strategy::Best));
            let mut index = None;
            greedy_by_size_alone(&p, &goal, pairs, Duration::ZERO, &mut index, &mut best);
            best.expect("a plan")
        };
        let (in_turn, side_by_side) = (plan(false), plan(true));
        assert_eq!(in_turn, side_by_side);
        let index = OverlapIndex::new(&p);
        let alone = |order: Order| greedy::place(&p, &index, &order, Fit::Lowest).1;
        let lower = alone(greedy::by_size(&p)).min(alone(greedy::by_size_class(&p)));
        assert_eq!(in_turn.1, lower);
        p.assert_valid(&in_turn.0, in_turn.1);
    }

    #[test]
    fn search_on_the_largest_allowed_instance_stays_within_a_test_thread_stack() {
        // Staggered ranges, each overlapping its neighbours: greedy leaves gaps, so the
        // search runs, recursing once per item.
        let ranges: Vec<LiveRange> = (0..SEARCH_MAX_ITEMS as u64)
            .map(|i| LiveRange {
                start: i,
                end: i + 3,
                size: 1 + (i * 7) % 5,
            })
            .collect();
        let budget = Budget {
            search_work: 50_000_000,
            climb_work: 0,
            deadline: None,
            threads: true,
        };
        let plan = plan_ranges_with(&ranges, 1, Strategy::Search, &budget).expect("plans");
        assert!(plan.peak >= plan.lower_bound);
    }

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
