//! The area class order ([`Strategy::GreedyAreaClass`], `offline/area_order.rs`) after
//! every other phase but greedy by size into holes, so that it changes no other
//! phase's path; repaired where it is the lower plan.

use std::time::Instant;

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{area_order, keep_lower_placement, Goal, Placement, Strategy};

use super::repair_rounds::eject_repair;

/// The area class order ([`area_order::place`], within its work budget and the goal's
/// deadline) kept in `best` where it peaks lower, then lowered by the ejection repair
/// ([`eject_repair`]) unless that reached the goal. Nothing where `best` reached the goal
/// or the deadline has passed. `index` is built for the repair if it is not yet.
pub(super) fn area_classes_repaired(
    p: &Prepared,
    goal: &Goal,
    index: &mut Option<OverlapIndex>,
    best: &mut Placement,
) {
    if goal.done(best.1) {
        return;
    }
    let started = Instant::now();
    let (offsets, peak) = area_order::place(p, goal.budget.deadline);
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
