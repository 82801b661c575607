//! The area class order ([`Strategy::GreedyAreaClass`], `offline/area_order.rs`) after
//! every other phase, so that it changes no other phase's path (nor, under a deadline,
//! their time); repaired where it is the lower plan.

use std::time::Instant;

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{area_order, keep_lower_placement, Goal, Placement, Strategy};

use super::repair_rounds::eject_repair;
use super::SWEEP_FIRST_ITEMS;

/// On an instance of more than [`SWEEP_FIRST_ITEMS`] items the area class order runs
/// only where a buffer overlaps at least this many others on average
/// ([`Prepared::overlap_pairs`] over the item count). The generated families at 100k
/// buffers: `wide` about 28,000 and `churn` about 62,000, where the order is the lower
/// plan on some seeds; `malloc`, `few-sizes`, `bursts` and `bimodal` 1,900-4,100 and
/// `narrow` 200, where it ends 0.8-46% above the size class order and, at a million
/// buffers, took 3-21 s for nothing (a threshold set from these families, twice the
/// highest of the second group).
const AREA_MIN_OVERLAPS: u64 = 8_192;

/// Whether `best` runs the area class order on `p` (see [`AREA_MIN_OVERLAPS`]).
pub(super) fn area_classes_apply(p: &Prepared) -> bool {
    p.items.len() <= SWEEP_FIRST_ITEMS
        || p.overlap_pairs() / (p.items.len() as u64) >= AREA_MIN_OVERLAPS
}

/// The area class order (within its work budget and the goal's deadline: up to
/// [`SWEEP_FIRST_ITEMS`] items [`area_order::place`], the rest filled after a cut;
/// beyond, [`area_order::place_whole`], nothing after a cut) kept in `best` where it
/// peaks lower, then lowered by the ejection repair ([`eject_repair`]) unless that
/// reached the goal. Nothing where `best` reached the goal, the deadline has passed or
/// [`area_classes_apply`] says no. `index` is built for the repair if it is not yet.
pub(super) fn area_classes_repaired(
    p: &Prepared,
    goal: &Goal,
    index: &mut Option<OverlapIndex>,
    best: &mut Placement,
) {
    if goal.done(best.1) || !area_classes_apply(p) {
        return;
    }
    let started = Instant::now();
    // Up to the sweep-first size the order cut and filled too (as run alone, so that
    // `best` is never above it there); beyond, only whole.
    let placed = if p.items.len() <= SWEEP_FIRST_ITEMS {
        Some(area_order::place(p, goal.budget.deadline))
    } else {
        area_order::place_whole(p, goal.budget.deadline)
    };
    let Some((offsets, peak)) = placed else {
        log::debug!(
            "greedy-area-class: cut, given up in {:?}",
            started.elapsed()
        );
        return;
    };
    log::debug!("greedy-area-class: {peak} in {:?}", started.elapsed());
    if peak >= best.1 {
        return;
    }
    keep_lower_placement(best, (offsets.clone(), peak, Strategy::GreedyAreaClass));
    if goal.done(peak) {
        return;
    }
    let index = index.get_or_insert_with(|| OverlapIndex::new(p));
    let (repaired, repaired_peak) = eject_repair(p, index, offsets, goal);
    log::debug!(
        "greedy-area-class repaired: {repaired_peak} in {:?}",
        started.elapsed()
    );
    keep_lower_placement(best, (repaired, repaired_peak, Strategy::Eject));
}
