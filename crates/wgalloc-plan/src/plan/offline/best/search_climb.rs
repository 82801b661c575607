//! The bounded exact search below the peak ([`search_below`]) and the seeded climb
//! ([`climb`]), after the start on instances small enough for them
//! ([`searched_and_climbed`]).

use std::time::Instant;

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::search::{Found, Searcher};
use crate::plan::offline::{improve, keep_lower_placement, search, Goal, Placement, Strategy};

/// The search below a start placement and the climb (from the searched placement and, where
/// the search lowered it, from the start placement too), as
/// [`best_of_the_others`](super::best_of_the_others) runs them; the lowest of the start and
/// what they found.
pub(super) fn searched_and_climbed(
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

/// Whether the local search runs after the search (in `best`) or at all
/// ([`Strategy::Climb`]). Where the search ran, its bisection probed every capacity
/// down to within 0.1% of its best peak with far more work than the climb gets: after
/// it the climb lowered no peak on dsa D and J without a capacity (0.55-0.66 s for
/// nothing). On a tiling (most sections full at the bound) the probes above the bound
/// run without corner turns and stay far above it; there the climb lowered 7 of 71
/// generated tilings without a capacity by 0.08-0.6%, so it still runs there. It does
/// not run either when its budget allows fewer than [`CLIMB_MIN_MOVES`] moves (a move
/// costs at least two scans of the items).
pub(in crate::plan::offline) fn climb_applies(p: &Prepared, goal: &Goal) -> bool {
    let after_search = searchable(p) && !p.mostly_full_at(p.lower_bound);
    let enough = goal.budget.climb_work / CLIMB_MIN_MOVES >= 2 * p.items.len() as u64;
    !after_search && enough
}

/// `best` skips the local search when its budget allows fewer moves than this: on
/// iopddl_S_1 the default budget is about 700 moves (1.4 s), which never lowered the
/// skyline's peak (nor did 10 times as many).
const CLIMB_MIN_MOVES: u64 = 1024;

/// The seeded ruin-and-repair local search with the climb budget, until the goal.
pub(in crate::plan::offline) fn climb(
    p: &Prepared,
    index: &OverlapIndex,
    offsets: Vec<u64>,
    goal: &Goal,
) -> (Vec<u64>, u64) {
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
pub(super) const SEARCH_MAX_ITEMS: usize = 3_000;

/// Whether the search runs on `p`: at most [`SEARCH_MAX_ITEMS`] items and
/// [`SEARCH_MAX_PAIRS`] overlapping pairs.
pub(super) fn searchable(p: &Prepared) -> bool {
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
pub(in crate::plan::offline) fn search_below(
    p: &Prepared,
    offsets: Vec<u64>,
    peak: u64,
    goal: &Goal,
) -> (Vec<u64>, u64) {
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
