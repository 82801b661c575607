//! The class order placed by the class sweep ([`class_by_sweep`]): where it cannot
//! complete in the time or work it has, its largest classes are placed and every
//! smaller buffer filled into their holes. Where the sweep does not pay or gave up, the
//! largest classes are placed by the greedy and the rest filled ([`class_then_fill`]).
//! Then greedy by size, or the repair in rounds ([`class_sweep_then_size`]).

use std::time::{Duration, Instant};

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{class_sweep, greedy, keep_lower, Goal, Placement, Strategy};

use super::by_size::{by_size_within, per_item, size_in_the_time_left};
use super::refill::{filled_after_classes, refill_in_the_time_left, refill_start};
use super::repair_rounds::{eject_the_class_order, repair_in_rounds, MORE_REPAIR_ROUNDS};

/// A unit of [`class_sweep`]'s work costs about this many units of a greedy
/// placement's (a placed item read, about 7 ns with 2,000 live): a walk step or a
/// fixed item passed takes 0.2-0.4 us on the 2-core build machine.
pub(super) const SWEEP_UNIT_PAIRS: u64 = 32;

/// Whether the class order costs less by [`class_sweep`] (O(C n log n) and its
/// walks, C the size classes) than by the greedy's reads of the placed items live with
/// each item (half of [`Prepared::overlap_pairs`]): on 100,000 malloc-like buffers
/// (2,000 live, 19 classes) 0.95 s against 2.3 s, few-sizes 0.23 against 2.5 s, 20,000
/// live 5.4 against 35 s of CPU; with 100 live the greedy's 0.26 s against 0.59 s.
pub(in crate::plan::offline) fn class_sweep_pays(p: &Prepared) -> bool {
    let sweep = class_sweep::expected_work(p);
    sweep.saturating_mul(SWEEP_UNIT_PAIRS) < p.overlap_pairs() / 2
}

/// Where the refill runs beside the orders by size
/// ([`refill_beside_applies`](super::refill::refill_beside_applies)) and the whole class
/// order is not forecast to fit the deadline, [`class_by_sweep`] goes on past its largest
/// classes (which the refill beside starts from and repairs) for this share of the time
/// from its start to the deadline, and fills the rest: more classes placed by the sweep
/// start the repair lower. Wide (20,000 live) at 100,000 buffers, seed 1, no limit: cut
/// after 83% of the area and filled 1.0120, after 95% 1.0069, the whole order 1.0044. With
/// 2 s, seeds 1, 2, 3, 4 and 26 (one run each; every share in docs/scale.md, twenty-first
/// round): 1.0101, 1.0048, 1.0071, 1.0203 and 1.0229 with the cut after the largest
/// classes, 1.0054, 1.0024, 1.0037, 1.0180 and 1.0200 with three quarters; half the time or
/// seven eighths were higher on some seeds and lower on others, all of it gave the early
/// cut's plans again. Without the refill beside no thread repairs the early cut, and the
/// later one leaves the repair too little time: malloc at a million buffers with 10 s, seed
/// 3, 1.0036 -> 1.0174.
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
pub(super) fn cut_instants(
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

/// Where [`class_by_sweep`] may cut the class order, and what it does then. The
/// default is greedy by size's run ([`by_size_run`](super::by_size::by_size_run)):
/// under a deadline the early cut, and without one it gives up where the work cuts
/// it; [`class_sweep_then_size`] splits without a deadline, and takes the later cut
/// where the refill runs beside. Either cut applies only where a plan cut after the
/// largest classes may be filled.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CutRules {
    /// Under a deadline, go on past the largest classes, class by class, until
    /// [`LATER_CUT_SHARE`] of the time left (where the refill beside repairs the early
    /// cut). Without it (the early cut), the sweep stops after the largest classes
    /// where the whole order is forecast to miss the deadline, and where they are not
    /// every class their placement ends by [`FIRST_CLASSES_SHARE`] of the time left.
    pub(super) later_cut: bool,
    /// Without a deadline, where the work cuts the order and a cut may be filled, place
    /// the largest classes as far as the work allows and fill the rest, instead of
    /// giving up.
    pub(super) split_without_deadline: bool,
}

/// The class order by [`class_sweep`] (cut by the deadline, keeping [`greedy::FILL_SWEEPS`]
/// sweeps' time an item for those it leaves, or by `work` in greedy units), the items it
/// leaves filled into its holes
/// ([`fill::place_into`](crate::plan::offline::fill::place_into)). Where it cannot place
/// the whole order, it places its largest classes ([`large_classes`]) and fills the rest,
/// but only under a deadline, or without one where [`CutRules::split_without_deadline`],
/// and where their overlapping pairs are at most 1 / [`SPLIT_WORK_SHARE`] of all
/// (`whole_work`, half of [`Prepared::overlap_pairs`]), as [`class_then_fill`]; elsewhere
/// it gives up (`None`, its work not counted). Without a deadline the work cuts it, its
/// largest classes placed as far as the work allows (no look before them:
/// [`class_sweep::Limits::filled_after`]); the split alone took the budget from greedy by
/// size (a million buffers with 20,000 live: 1.0203 against 1.0171), repaired in rounds it
/// ends far lower ([`class_sweep_then_size`]). `rules`: where the order may be cut and what
/// then ([`CutRules`]).
pub(super) fn class_by_sweep(
    p: &Prepared,
    work: u64,
    whole_work: u64,
    deadline: Option<Instant>,
    sweep_time: Duration,
    rules: CutRules,
) -> Option<greedy::Swept> {
    let CutRules {
        later_cut,
        split_without_deadline,
    } = rules;
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
        // The fill passes every item placed too: at a million malloc-like buffers with
        // 10 s (seed 4), once the class sweep got faster, its first look forecast the
        // whole order within the deadline, the sweep was cut at 957,856 items and
        // filling the 42,144 left took 3.0 s (about 4 sweeps an item placed; with
        // 850,000 left, 1.7 s): the plan ended at 12.9 s.
        reserve_per_placed: sweep_per_item.saturating_mul(greedy::FILL_SWEEPS),
        work: work / SWEEP_UNIT_PAIRS,
        whole_or_first: large,
        or_until,
        first_by,
        filled_after: split && split_without_deadline,
    };
    let placed = class_sweep::place_classes(p, &order, &limits);
    let complete = placed.placed == order.len();
    log::debug!(
        "greedy-size-class by classes: {} of {} items in {:?}",
        placed.placed,
        order.len(),
        started.elapsed()
    );
    if !complete && (!split || (deadline.is_none() && !split_without_deadline)) {
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

/// The orders by size where the class order runs by [`class_sweep`] and the two do not each
/// run alone within [`GREEDY_SIZE_WORK`](super::GREEDY_SIZE_WORK) without a deadline: the
/// class order first ([`class_by_sweep`], cut by the deadline or the budget, the rest
/// filled into its holes: it is the lower of the two complete on five of six generated
/// families). `false` (nothing done) where [`class_by_sweep`] gave up. `budget`: the work
/// both orders may spend, in greedy units ([`GREEDY_SIZE_WORK`](super::GREEDY_SIZE_WORK));
/// `work`: half of [`Prepared::overlap_pairs`].
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
/// * Under a deadline, the time left goes to the ejection repair of the class order's plan
///   ([`eject_repair`](super::repair_rounds::eject_repair), complete or split) first:
///   greedy by size would be cut at the deadline and swept. Greedy by size has whatever
///   time the repair leaves ([`size_in_the_time_left`]; with time to spare it completes),
///   and the refill of the complete plan what they leave ([`refill_in_the_time_left`]).
///   Same sitting, seeds 1-4 at a million buffers with 10 s (the fifteenth round): cut
///   greedy by size ended above the class order's plan on every malloc-like seed
///   (1.0074-1.0204), and the repair took malloc from 1.0015 / 1.0095 / 1.0117 (min /
///   median / max) to 1.0003 / 1.0027 / 1.0048 (within 0.5% on 4 of 4 seeds where it was
///   2), bimodal to its bound in 3.7 s; narrow, few-sizes and bursts kept their counts,
///   wide its run-to-run spread. At 100,000 buffers with 2 s (seeds 1-8) malloc's median
///   fell 1.0051 -> 1.0045 (within 0.25% on 3 seeds where it was 2) and narrow's max 1.0042
///   -> 1.0007.
///
/// `refill`: whether the refill of the complete class order follows in the time left
/// ([`refill_in_the_time_left`]); `false` where it already runs beside these orders
/// ([`greedy_by_size_alone`](super::by_size::greedy_by_size_alone)), and then the class
/// sweep, where the whole class order is not forecast to fit, goes on past the largest
/// classes the refill beside starts from ([`LATER_CUT_SHARE`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn class_sweep_then_size(
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
    let Some(class) = class_by_sweep(
        p,
        budget,
        work,
        deadline,
        sweep_time,
        CutRules {
            later_cut: !refill,
            split_without_deadline: true,
        },
    ) else {
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

/// [`class_then_fill`] places by the class order the items of its largest size classes, up
/// to the first with which they hold at least this share of the area (size times lifetime)
/// of all items: the fill ([`fill::place_into`](crate::plan::offline::fill::place_into)) is
/// left a fifth of the memory's use, in the smallest items. On a million malloc-like
/// buffers that is the buffers of 16 KiB or more (15% of them), on few-sizes those of 3 and
/// 4 MiB (25%).
const LARGE_AREA: (u128, u128) = (4, 5);

/// How many of the class order's first items (`order`) [`class_then_fill`] places by the
/// greedy: whole size classes, up to the first with which they hold [`LARGE_AREA`] of
/// the area. O(n).
pub(super) fn large_classes(p: &Prepared, order: &[usize]) -> usize {
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
pub(super) fn pairs_among(p: &Prepared, which: &[usize]) -> u64 {
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
/// classes ([`large_classes`]) placed by the class order, then (where that completed) the
/// same items by exact size ([`greedy::by_size`]'s order), every smaller item filled into
/// the holes the lower of the two leaves ([`greedy::place_then_fill`]), into `best` if
/// lower, and returned (`None` where it did not run or gave up). On a million bursty
/// buffers with 10 s (seed 26) the class order's prefix peaked 3.8% above the exact
/// order's, its fill ended at 1.028 of the bound and the repair at 1.016; the exact order's
/// at 1.0078 and 1.0004 (seeds 1-8: the two prefixes within 0.7% of each other, either
/// order the lower). The second prefix costs about what the first did (0.8 s there). The
/// greedy part keeps the fill's time ([`greedy::FILL_SWEEPS`] sweeps an item), gives up
/// after a sixteenth of its work where its pace says it would miss that, and does not run
/// where it would read more than 1 / [`SPLIT_WORK_SHARE`] of the whole order's work. On a
/// million few-sizes buffers with 10 s: 1.0042 where greedy by size, cut and swept, gave
/// 1.0142. `whole_work` is what the whole class order reads (half of
/// [`Prepared::overlap_pairs`]).
pub(super) fn class_then_fill(
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
