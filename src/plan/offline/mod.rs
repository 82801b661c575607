//! Offline planners: they see every lifetime at once and place all buffers together,
//! landing at or near the lower bound (the largest total size live at one time).
//!
//! * [`plan_ranges`]: offsets for a list of [`LiveRange`]s with one [`Strategy`].
//! * [`plan_intervals`]: the same for an [`IntervalProblem`] (dsa/*.csv), as an
//!   [`IntervalPlan`] that [`IntervalProblem::verify`] checks.
//! * [`plan_graph_offline`]: a full [`Plan`](crate::plan::Plan) for a graph, with
//!   in-place merging and chunking by the buffer type's max size.
//!
//! Strategies: greedy placement (lowest free offset, or smallest free gap, among the
//! buffers live at the same time) in four orders (size, breadth, lifetime, conflict), a bounded exact search over
//! canonical solutions ([`Strategy::Search`]), a seeded ruin-and-repair local
//! search around the peak ([`Strategy::Climb`]), and [`Strategy::Best`], which runs them all and keeps the
//! smallest peak. Every strategy has a deterministic work budget ([`Budget`]): the same
//! input gives the same output on every machine.

mod graph;
mod greedy;
mod improve;
mod index;
mod prepared;
mod search;

use std::fmt;

pub use graph::{
    graph_live_ranges, plan_graph_offline, plan_graph_offline_n, plan_graph_offline_with,
    GraphRanges,
};

pub use crate::plan::intervals::IntervalPlan;
use crate::plan::{IntervalProblem, PlanError};
use greedy::{Fit, Order};
use index::OverlapIndex;
use prepared::Prepared;
use search::Found;

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
    GreedySize,
    /// Largest first, each in the smallest free gap that holds it (TFLite's variant).
    GreedySizeBestFit,
    /// Buffers live at the busiest steps first (by the total size live at the buffer's
    /// busiest step), then by size.
    GreedyBreadth,
    /// Longest lifetime first, then by size.
    GreedyLifetime,
    /// Largest conflict first (total size of the buffers live with it), then by size.
    GreedyConflict,
    /// Bounded exact search over canonical solutions, aiming at the lower bound, then
    /// at capacities between it and the best greedy peak.
    Search,
    /// Seeded local search from the best greedy placement: lifts the highest items
    /// around the peak and places them back, keeping changes that lower it.
    Climb,
    /// All of the above; keeps the smallest peak (ties: the earlier strategy).
    Best,
}

impl Strategy {
    /// Every strategy, in the order [`Strategy::Best`] tries them (itself last).
    pub const ALL: [Strategy; 8] = [
        Strategy::GreedySize,
        Strategy::GreedySizeBestFit,
        Strategy::GreedyBreadth,
        Strategy::GreedyLifetime,
        Strategy::GreedyConflict,
        Strategy::Search,
        Strategy::Climb,
        Strategy::Best,
    ];

    /// The name used by the CLI and recorded in plans.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::GreedySize => "greedy-size",
            Strategy::GreedySizeBestFit => "greedy-size-best-fit",
            Strategy::GreedyBreadth => "greedy-breadth",
            Strategy::GreedyLifetime => "greedy-lifetime",
            Strategy::GreedyConflict => "greedy-conflict",
            Strategy::Search => "search",
            Strategy::Climb => "climb",
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

/// Deterministic work budgets. A unit is roughly one visit of a buffer or a time section.
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
}

impl Default for Budget {
    /// A few seconds of search and about a second of climb on a 2020s CPU core.
    fn default() -> Budget {
        Budget {
            search_work: 1_000_000_000,
            climb_work: 40_000_000,
        }
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
pub fn plan_ranges_with(
    ranges: &[LiveRange],
    alignment: u64,
    strategy: Strategy,
    budget: &Budget,
) -> Result<RangePlan, PlanError> {
    let p = Prepared::new(ranges, alignment)?;
    let (item_offsets, peak, found_by) = run(&p, strategy, budget);
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

/// Plans an interval problem (alignment 1) with the default [`Budget`].
///
/// # Errors
/// [`PlanError::SizeOverflow`] if the sizes do not add up within 64 bits.
pub fn plan_intervals(
    problem: &IntervalProblem,
    strategy: Strategy,
) -> Result<IntervalPlan, PlanError> {
    plan_intervals_with(problem, strategy, &Budget::default())
}

/// Plans an interval problem (alignment 1) with an explicit budget.
///
/// # Errors
/// As [`plan_intervals`].
pub fn plan_intervals_with(
    problem: &IntervalProblem,
    strategy: Strategy,
    budget: &Budget,
) -> Result<IntervalPlan, PlanError> {
    let plan = plan_ranges_with(&interval_ranges(problem), 1, strategy, budget)?;
    Ok(IntervalPlan {
        offsets: plan.offsets,
        peak: plan.peak,
        planner: strategy.name().to_string(),
    })
}

/// Runs one strategy on a prepared problem: offsets per item, peak, and who found them.
fn run(p: &Prepared, strategy: Strategy, budget: &Budget) -> (Vec<u64>, u64, Strategy) {
    let index = OverlapIndex::new(p);
    match strategy {
        Strategy::GreedySize
        | Strategy::GreedySizeBestFit
        | Strategy::GreedyBreadth
        | Strategy::GreedyLifetime
        | Strategy::GreedyConflict => {
            let (order, fit) = greedy_order(p, strategy);
            let (offsets, peak) = greedy::place(p, &index, &order, fit);
            (offsets, peak, strategy)
        }
        Strategy::Search => {
            let (offsets, peak, _) = best_greedy(p, &index);
            let (offsets, peak) = search_below(p, offsets, peak, budget.search_work);
            (offsets, peak, strategy)
        }
        Strategy::Climb => {
            let (offsets, _, _) = best_greedy(p, &index);
            let (offsets, peak) = climb(p, &index, offsets, budget.climb_work);
            (offsets, peak, strategy)
        }
        Strategy::Best => best(p, &index, budget),
    }
}

/// The greedy strategies, in the order [`Strategy::Best`] tries them.
const GREEDY: [Strategy; 5] = [
    Strategy::GreedySize,
    Strategy::GreedySizeBestFit,
    Strategy::GreedyBreadth,
    Strategy::GreedyLifetime,
    Strategy::GreedyConflict,
];

/// The order and gap choice of a greedy strategy.
fn greedy_order(p: &Prepared, strategy: Strategy) -> (Order, Fit) {
    match strategy {
        Strategy::GreedySizeBestFit => (greedy::by_size(p), Fit::Smallest),
        Strategy::GreedyBreadth => (greedy::by_breadth(p), Fit::Lowest),
        Strategy::GreedyLifetime => (greedy::by_lifetime(p), Fit::Lowest),
        Strategy::GreedyConflict => (greedy::by_conflict(p), Fit::Lowest),
        _ => (greedy::by_size(p), Fit::Lowest),
    }
}

/// Every greedy strategy; the lowest peak (first on ties), with its strategy.
fn best_greedy(p: &Prepared, index: &OverlapIndex) -> (Vec<u64>, u64, Strategy) {
    let mut best: Option<(Vec<u64>, u64, Strategy)> = None;
    for strategy in GREEDY {
        let (order, fit) = greedy_order(p, strategy);
        let (offsets, peak) = greedy::place(p, index, &order, fit);
        if best.as_ref().is_none_or(|b| peak < b.1) {
            best = Some((offsets, peak, strategy));
        }
    }
    best.unwrap_or_else(|| (Vec::new(), 0, Strategy::GreedySize))
}

/// Every strategy in turn, keeping the smallest peak; stops as soon as one reaches the
/// lower bound. The local search starts from the best placement found before it.
fn best(p: &Prepared, index: &OverlapIndex, budget: &Budget) -> (Vec<u64>, u64, Strategy) {
    let (offsets, peak, strategy) = best_greedy(p, index);
    if peak <= p.lower_bound {
        return (offsets, peak, strategy);
    }
    let (searched, searched_peak) = search_below(p, offsets.clone(), peak, budget.search_work);
    let (start, start_peak, start_by) = if searched_peak < peak {
        (searched, searched_peak, Strategy::Search)
    } else {
        (offsets, peak, strategy)
    };
    if start_peak <= p.lower_bound {
        return (start, start_peak, start_by);
    }
    let (climbed, climbed_peak) = climb(p, index, start.clone(), budget.climb_work);
    if climbed_peak < start_peak {
        (climbed, climbed_peak, Strategy::Climb)
    } else {
        (start, start_peak, start_by)
    }
}

/// The seeded ruin-and-repair local search with the climb budget.
fn climb(p: &Prepared, index: &OverlapIndex, offsets: Vec<u64>, work: u64) -> (Vec<u64>, u64) {
    improve::repack(p, index, offsets, work, 0x5EED_0FF1_1E00_0001)
}

/// The search keeps a list of overlapping items per item: above this many pairs it is
/// not run (iopddl_S_1 has 43 million).
const SEARCH_MAX_PAIRS: u64 = 4_000_000;

/// The search recurses once per placed item: above this many items it is not run, so
/// that it stays well within a 2 MiB thread stack.
const SEARCH_MAX_ITEMS: usize = 3_000;

/// Improves on a known placement with the bounded search: first at the lower bound,
/// then bisecting between the best capacity known infeasible and the best peak found.
fn search_below(p: &Prepared, offsets: Vec<u64>, peak: u64, work: u64) -> (Vec<u64>, u64) {
    if p.items.len() > SEARCH_MAX_ITEMS || p.overlap_pairs() > SEARCH_MAX_PAIRS {
        return (offsets, peak);
    }
    let mut work_left = work;
    let (mut best, mut best_peak) = (offsets, peak);
    // Capacities below `floor` are infeasible or were given up on.
    let mut floor = p.lower_bound;
    let mut first = true;
    while work_left > 0 && floor < best_peak {
        // First probe at the bound with half the budget; then bisect with a quarter of
        // what is left each time.
        let target = if first {
            floor
        } else {
            floor + (best_peak - floor) / 2
        };
        let share = if first {
            work_left / 2
        } else {
            (work_left / 4).max(1)
        };
        first = false;
        work_left = work_left.saturating_sub(share);
        match search::search(p, target, share) {
            Found::Plan(offsets, found) => {
                best = offsets;
                best_peak = found;
            }
            // Proven impossible, or given up on: look higher up.
            Found::Infeasible | Found::Unknown => floor = target + 1,
        }
    }
    (best, best_peak)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        let plan = plan_ranges_with(&ranges, 1, Strategy::Search, &budget).expect("plans");
        assert!(plan.peak >= plan.lower_bound);
    }
}
