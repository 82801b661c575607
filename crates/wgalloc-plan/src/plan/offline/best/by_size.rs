//! The greedy orders by size on a large instance ([`greedy_by_size_alone`]): the class
//! order and greedy by size within [`GREEDY_SIZE_WORK`] or the deadline; without a
//! deadline, side by side on two threads where each fits the work alone; under one,
//! the refill beside them on the second thread where it may. What a cut order has not
//! placed is swept above.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::plan::offline::index::OverlapIndex;
use crate::plan::offline::prepared::Prepared;
use crate::plan::offline::{greedy, greedy_order, keep_lower, Budget, Goal, Placement, Strategy};

use super::class_split::{
    class_by_sweep, class_sweep_pays, class_sweep_then_size, class_then_fill, CutRules,
};
use super::refill::{large_classes_filled_and_repaired, refill_beside_applies};
use super::repair_rounds::{eject_the_class_order, repair_in_the_time_left};
use super::GREEDY_SIZE_WORK;

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
pub(super) const BY_SIZE: [Strategy; 2] = [Strategy::GreedySize, Strategy::GreedySizeClass];

/// The class order goes first, under a deadline, only where the time left is at least
/// this many times what sweeping the instance took: before its forecast it spends a
/// sixteenth of its work, which under a tighter deadline is the time greedy by size
/// needed (40,000 malloc-like buffers with 0.1 s ended at the sweep's 1.17 where greedy
/// by size, cut, gives 1.05).
pub(super) const CLASS_FIRST_SWEEPS: u32 = 16;

/// The greedy orders by size ([`BY_SIZE`]) into `best` on a large instance with
/// `pairs` overlapping pairs (ordered: a greedy placement reads half as many); builds
/// `index` if it runs either. Nothing where `best` already reaches the goal.
///
/// * Where the class order costs less by [`class_sweep`](crate::plan::offline::class_sweep)
///   ([`class_sweep_pays`]) and the next case does not hold: [`class_sweep_then_size`]
///   (under a deadline, the class order then its ejection repair, then greedy by size and
///   more rounds of the repair in whatever time the repair leaves:
///   [`size_in_the_time_left`]; without one, the complete class order then greedy by size
///   in the budget left, or, where the budget cut the class order, its largest classes, the
///   fill and the repair in rounds). Where it gives up, the cases below.
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
pub(super) fn greedy_by_size_alone(
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

/// The body of [`greedy_by_size_alone`]: the orders by size, on `index`. `refill`: whether
/// the refill may follow the class order in the time left
/// ([`refill_in_the_time_left`](super::refill::refill_in_the_time_left); not where it
/// already runs beside them).
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
pub(super) fn size_in_the_time_left(
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
pub(super) fn time_for_size_before_the_repair(goal: &Goal, class_took: Duration) -> bool {
    goal.budget
        .deadline
        .is_some_and(|d| greedy::time_left_for(d, class_took.saturating_mul(SIZE_FIRST_TIMES)))
}

/// What sweeping one item of `p` takes, the whole sweep having taken `sweep_time`.
pub(super) fn per_item(p: &Prepared, sweep_time: Duration) -> Duration {
    sweep_time / u32::try_from(p.items.len().max(1)).unwrap_or(u32::MAX)
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
pub(super) struct RunLimits {
    /// Units of work ([`greedy::Cut::work`]).
    pub(super) work: u64,
    /// The work it is expected to read, where it is to forecast its pace
    /// ([`greedy::Cut::forecast`]).
    pub(super) forecast: Option<u64>,
    /// Whether the forecast comes by an eighth of the time to the deadline at the
    /// latest ([`greedy::Cut::forecast_early`]).
    pub(super) forecast_early: bool,
    /// Whether it may place on two threads ([`greedy::Cut::threads`]: the same plan).
    pub(super) threads: bool,
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
pub(super) fn by_size_within(
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
pub(super) fn by_size_run(
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
            CutRules::default(),
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
