//! [`Strategy::Best`]: every strategy in turn, the lowest verified plan kept.
//!
//! On a small instance: the greedy orders, the skyline and its column repair, the
//! bounded search and the climb ([`search_climb`]), the ejection repair and greedy by
//! size into holes. On a large one (more than [`SWEEP_FIRST_ITEMS`] items or
//! `GREEDY_MAX_PAIRS` overlapping pairs) the sweep first, then the phases of the
//! README's issue-26 section, a module each:
//!
//! * [`skyline_runs`]: the skyline's orders and the column repair (without a deadline
//!   within pop budgets linear in n, the first order excepted);
//! * [`by_size`]: the greedy orders by size within their work budget or the deadline,
//!   and the refill beside them on a second thread;
//! * [`class_split`]: the class order by the class sweep, split after its largest
//!   classes (the rest filled into their holes) where it cannot complete;
//! * [`repair_rounds`]: the ejection repair, in rounds while each lowers the plan;
//! * [`refill`]: the class order's largest classes kept, the rest filled again and
//!   the plan repaired;
//! * [`area_classes`]: the area class order, repaired where it is the lower plan.
//!
//! `best` itself, the start ([`start`]) and the thresholds between small and large
//! are here; the tests of every phase are in `tests.rs`.

mod area_classes;
mod by_size;
mod class_split;
mod refill;
mod repair_rounds;
mod search_climb;
mod skyline_runs;
#[cfg(test)]
mod tests;

pub(super) use class_split::class_sweep_pays;
pub(super) use repair_rounds::start_then_eject;
pub(super) use search_climb::{climb, climb_applies, search_below};
pub(super) use skyline_runs::skyline_orders;

use std::time::{Duration, Instant};

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{
    greedy, greedy_orders, holes, keep_lower, keep_lower_placement, sweep, Goal, Placement,
    Strategy, GREEDY,
};

#[cfg(test)]
use area_classes::area_classes_apply;
use area_classes::area_classes_repaired;
use by_size::{greedy_by_size_alone, BY_SIZE};
use refill::{refill_applies, refilled_and_repaired};
use repair_rounds::{eject_repair, repaired_in_rounds_already};
use search_climb::{searchable, searched_and_climbed};
use skyline_runs::{column_repair, FULL_ITEMS};

/// Above this many items `best` places by the O(n log n) sweep first.
const SWEEP_FIRST_ITEMS: usize = 20_000;

/// Above this many overlapping pairs `best` skips the greedy orders: each costs a
/// visit per pair (about a second on iopddl_S_1's 43 million) and the skyline does
/// better there.
const GREEDY_MAX_PAIRS: u64 = 4_000_000;

/// Above [`GREEDY_MAX_PAIRS`] `best` still runs greedy-by-size (the best of the greedy
/// orders on malloc-like traces), alone, within this much work: a unit per placed buffer
/// read while placing one (one per unordered overlapping pair: half of
/// [`Prepared::overlap_pairs`], which counts ordered pairs). A unit costs 7 ns (2,000 live)
/// to 16 ns (20,000 live: the placed neighbours leave the cache) on the idle 2-core build
/// machine. Where the work (or the deadline) runs out, the buffers still to place, the
/// smallest, are swept above the greedy part. 100,000 malloc-like buffers with 2,000 live
/// (3.7 x 10^8 pairs) complete in 2.5 s; a million (4.0 x 10^9 pairs) place about the
/// largest two thirds by greedy, about 1% over the bound where the sweep alone is 25% over;
/// a million with 20,000 live (3.8 x 10^10 pairs) the largest fifth or so (where the class
/// sweep, cut by this work, may split, it does instead:
/// [`class_sweep_then_size`](class_split::class_sweep_then_size)). The budget keeps the
/// greedy orders of a default plan of a million buffers within about half a minute (the
/// whole plan within about a minute, the refill included: [`refilled_and_repaired`]);
/// `--time-limit` cuts that. Without a deadline, where each of the two orders by size
/// completes within it alone, each has it to itself (both run: side by side on two threads,
/// in about the time of one, or in turn on one thread, in up to twice it); otherwise they
/// share it.
const GREEDY_SIZE_WORK: u64 = 1_500_000_000;

/// Every strategy in turn, keeping the smallest peak; stops as soon as one reaches the
/// goal. The local search starts from the best placement found before it.
///
/// On large instances (more than [`SWEEP_FIRST_ITEMS`] items or [`GREEDY_MAX_PAIRS`]
/// overlapping pairs) the O(n log n) sweep ([`sweep::place`]) goes first, so that a plan
/// exists at once and every later placement may give up at the deadline; there the greedy
/// orders other than greedy-by-size run only with a deadline (each given up if it passes),
/// as their O(n L log L) cost (L buffers live at a time) has no bound in n alone;
/// greedy-by-size runs within [`GREEDY_SIZE_WORK`] (about a visit a pair), sweeping what it
/// has not placed when that runs out (not where the class sweep, cut by that work, splits
/// and is repaired in rounds:
/// [`class_sweep_then_size`](class_split::class_sweep_then_size)). Every other phase has a
/// work budget linear in the item count (times the logarithms of its structures), so the
/// default plan of a million buffers takes under a minute.
pub(super) fn best(p: &Prepared, goal: &Goal) -> Placement {
    let (mut best, mut index) = best_of_the_others(p, goal);
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
    // The area class order last of all, so that under a deadline it takes no time
    // from any phase that ran before it existed.
    area_classes_repaired(p, goal, &mut index, &mut best);
    best
}

/// [`best`] without greedy-size-holes and the area class order, with the overlap
/// index where a phase built it.
fn best_of_the_others(p: &Prepared, goal: &Goal) -> (Placement, Option<OverlapIndex>) {
    let mut index: Option<OverlapIndex> = None;
    // The ejection repair runs last, from the start placement, so that the search's
    // and the climb's paths do not change and `best` is never above either (nor above
    // the ejection repair alone) without a deadline. With one it has the time they
    // leave: taking a share of it from the start cost more than it gave (the class
    // order then foresees missing the deadline and gives up: few-sizes 100k in 2 s
    // 1.0024 -> 1.0114).
    let Some((offsets, peak, strategy)) = start(p, goal, &mut index) else {
        return ((Vec::new(), 0, Strategy::Best), index);
    };
    if goal.done(peak) {
        return ((offsets, peak, strategy), index);
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
    (best, index)
}

/// The placement `best`, [`Strategy::Search`] and [`Strategy::Climb`] start from: on
/// large instances the sweep, then the greedy orders (where affordable; greedy-by-size
/// alone within [`GREEDY_SIZE_WORK`], here above [`FULL_ITEMS`] items), the
/// skyline orders, on instances too large for the search the column repair, then
/// greedy-by-size alone (costly band, up to [`FULL_ITEMS`] items) if the goal is still
/// unreached, and last, with a deadline, the other costly greedy orders; the lowest of
/// them. `index` is built if a greedy order needs it. `None` only for an instance with
/// no items.
pub(super) fn start(
    p: &Prepared,
    goal: &Goal,
    index: &mut Option<OverlapIndex>,
) -> Option<Placement> {
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
