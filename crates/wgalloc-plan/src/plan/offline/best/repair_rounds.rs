//! The ejection repair ([`super::super::eject`]) as a phase of `best`: after the start
//! ([`eject_repair`]), after the class order under a deadline, and in rounds while
//! each lowers the plan ([`repair_in_rounds`], [`repair_in_the_time_left`]).

use std::time::Instant;

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{
    eject, keep_lower, Goal, Placement, Strategy, EJECT_MAX_WORK, EJECT_WORK_PER_ITEM,
};

use super::start;

/// The ejection repair ([`eject_repair`]) of `plan` again and again, each round with fresh
/// weights, step and work, at most `rounds` times, while each lowers the peak and the goal
/// is unreached; the lowest plan. With `to_beat` (the peak of a plan already at hand) the
/// rounds also stop where the plan, lowered at its last round's gain in every round left,
/// would still end at or above it (the catch-up stop): the rounds' gains usually fall from
/// one to the next (bimodal at a million buffers: 199,680 bytes, then 57,344, then 48,384),
/// so those rounds would buy nothing. Where they do not fall, that gives up some gain:
/// few-sizes at a million (3.9 MB, 17 KB, 1.3 MB, 0.7 MB) stops after the second round at
/// 1.00358 where four rounds reach 1.00288.
pub(super) fn repair_in_rounds(
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

/// The placement `best` starts from ([`start`]), lowered by the ejection repair
/// ([`eject_repair`]) unless it reached the goal. `None` only for an instance with no
/// items.
pub(in crate::plan::offline) fn start_then_eject(
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

/// Whether a start plan made by `strategy` was already repaired in rounds until one lowered
/// nothing or the rounds ran out, so that another round would repeat the last: without a
/// deadline, a start made by the ejection repair (the split class order's,
/// [`class_sweep_then_size`](super::class_split::class_sweep_then_size)).
/// [`best_of_the_others`](super::best_of_the_others) and [`start_then_eject`] then do not
/// repair it again.
pub(super) fn repaired_in_rounds_already(goal: &Goal, strategy: Strategy) -> bool {
    goal.budget.deadline.is_none() && strategy == Strategy::Eject
}

/// The ejection repair of a valid placement within [`EJECT_WORK_PER_ITEM`] per item
/// (at most [`EJECT_MAX_WORK`]) and the goal's deadline and stop flag, aiming at its
/// target.
pub(super) fn eject_repair(
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

/// Under a deadline, the class order's plan (`offsets` peaking at `peak`: complete,
/// cut and swept, or its largest classes and the fill) into `best` if lower, then,
/// unless it reached the goal, its ejection repair ([`eject_repair`]) with the time
/// left, into `best` if lower: greedy by size, the alternative, would be cut at the
/// deadline and swept (see [`class_sweep_then_size`](super::class_split::class_sweep_then_size)).
pub(super) fn eject_the_class_order(
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

/// At most this many more rounds of the ejection repair run in the time left
/// ([`repair_in_the_time_left`]): a far deadline is a cap on the repair, not a request to
/// spend it (these rounds take about 5 s each at most on a million buffers; the skyline's
/// first order after them has the deadline as its budget, so a far deadline is spent there:
/// [`skyline_orders`](super::skyline_runs::skyline_orders)). Without a deadline the
/// refill's repair has one round and at most this many more
/// ([`refilled_and_repaired`](super::refill::refilled_and_repaired)).
pub(super) const MORE_REPAIR_ROUNDS: u32 = 3;

/// Under a deadline, with time left, the ejection repair of `best` again
/// ([`eject_repair`]: its weights and step start afresh, its work is a round's
/// again), as long as each round lowers it and the goal is not reached, at most
/// [`MORE_REPAIR_ROUNDS`] times.
pub(super) fn repair_in_the_time_left(
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
