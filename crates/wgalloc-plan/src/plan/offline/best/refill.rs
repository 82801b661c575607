//! The refill: the class order's largest classes kept where they are, every smaller
//! buffer filled again into their holes, and the plan repaired in rounds
//! ([`refilled_and_repaired`]); without a deadline after the start's repair, under one
//! in the time left or beside the orders by size on a second core.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{
    class_sweep, fill, greedy, keep_lower, time_for, Goal, Placement, Strategy,
};

use super::by_size::per_item;
use super::class_split::{class_sweep_pays, large_classes};
use super::repair_rounds::{repair_in_rounds, MORE_REPAIR_ROUNDS};
use super::SWEEP_FIRST_ITEMS;

/// Whether [`best_of_the_others`](super::best_of_the_others) refills its start plan
/// ([`refilled_and_repaired`]), made by `strategy`, with the plan at hand peaking at
/// `peak`: without a deadline, where the start is the class order's plan and a refill may
/// run ([`refill_may_run`]: a large instance short of the goal). The refill then makes,
/// from the complete class order, the plan the deadline's path starts from where the class
/// order cannot complete and is placed by the class sweep (its largest classes in the class
/// order and the fill: [`class_by_sweep`](super::class_split::class_by_sweep);
/// [`class_then_fill`](super::class_split::class_then_fill) may take them by exact size).
/// Under a deadline the refill runs from the start on the second core where it may
/// ([`refill_beside_applies`]), else the orders by size refill the class sweep's complete
/// plan themselves, where the time left allows ([`refill_in_the_time_left`]). From greedy
/// by size's plan (narrow, wide and bursts at a million) it lowered nothing measured and
/// cost 6-15 s.
pub(super) fn refill_applies(p: &Prepared, goal: &Goal, strategy: Strategy, peak: u64) -> bool {
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
pub(super) fn refilled_and_repaired(
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
/// complete by the class sweep
/// ([`class_sweep_then_size`](super::class_split::class_sweep_then_size); `class`, with the
/// time it took; nothing where it did not complete) into `best` if lower, where the
/// instance is large (more than [`SWEEP_FIRST_ITEMS`] items), `best` is short of the goal
/// and the time left is at least what the class order took: the fill and a round of the
/// repair take about that or less (a million malloc-like buffers: 2.3 s and 5.3 s against
/// 13.2 s). It runs after greedy by size and the repair's rounds in the time left, which
/// under a tight deadline take that time, so it is the step of a farther one: a million
/// malloc-like buffers (seed 26) with `--time-limit 60` ended at the class order's repaired
/// plan (1.0089) without it, 1.0008 with it (the plan without a limit). Cut by the deadline
/// (the fill sweeps above what it has no time for, `sweep_time` being what sweeping every
/// item took; the repair stops), it loses nothing, since the lower plan is kept. Not after
/// the class order placed by the greedy (where the class sweep does not pay): on 24,000
/// malloc-like buffers with 400 live (seeds 1-8, `--time-limit 600`) the refill was never
/// below what that path reached without it, and took up to 2 s more.
pub(super) fn refill_in_the_time_left(
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
pub(super) fn refill_start(
    p: &Prepared,
    goal: &Goal,
    class: &greedy::Swept,
    took: Duration,
) -> Option<(Vec<u64>, Duration)> {
    (class.complete && refill_may_run(p, goal, class.peak)).then(|| (class.offsets.clone(), took))
}

/// The refill runs beside the orders by size
/// ([`greedy_by_size_alone`](super::by_size::greedy_by_size_alone)) only where a second
/// [`MovableSpans`](crate::plan::offline::index::MovableSpans) takes at most this many
/// bytes: at a million buffers the spans take several hundred MB, and a second set would
/// take the plan past the 1 GB it is to stay under.
pub(super) const REFILL_BESIDE_MAX_BYTES: usize = 256 << 20;

/// Whether the refill runs from the start on a second thread beside the orders by size
/// ([`large_classes_filled_and_repaired`]): under a deadline, where a refill may run on `p`
/// ([`refill_may_run`]), the orders by size take the single-threaded class sweep
/// ([`class_sweep_pays`]; the other paths place on two threads themselves), the machine has
/// a second core and [`Budget::threads`](crate::plan::offline::Budget::threads) allows it,
/// and the refill's repair fits [`REFILL_BESIDE_MAX_BYTES`].
///
/// After the class order the refill's own start costs little (its largest classes
/// are the class order's first items: 15,000 of 100,000 malloc-like buffers, placed
/// in about 0.04 s, the rest filled in about 0.16 s) but, run after it, it has no time
/// left under a tight deadline; beside it, its repair starts about 0.4 s before the
/// class order's and has the time to the deadline.
pub(super) fn refill_beside_applies(
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
pub(super) fn large_classes_filled_and_repaired(
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
    let filled_after = time_for(reserve, order.len() - large);
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
pub(super) fn filled_after_classes(
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
