//! The skyline's static orders ([`skyline_orders`]) and the column repair
//! ([`column_repair`]) as phases of `best`: without a deadline each within a heap-pop
//! budget linear in the item count (the first order excepted, where no plan exists
//! yet); under one, the first order has the deadline as its budget.

use std::time::Instant;

use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{keep_lower, repair, skyline, Goal, Placement, Strategy};

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
pub(super) const FULL_ITEMS: u64 = 32_768;

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
pub(in crate::plan::offline) fn skyline_orders(
    p: &Prepared,
    goal: &Goal,
    best: &mut Option<Placement>,
) -> u64 {
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
pub(super) fn column_repair(
    p: &Prepared,
    goal: &Goal,
    skyline_pops: u64,
    best: &mut Option<Placement>,
) {
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
