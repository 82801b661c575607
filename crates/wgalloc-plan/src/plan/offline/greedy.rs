//! Greedy placement in a fixed order: each item goes to the lowest offset where it
//! overlaps no already placed item that is live at a common time (the "greedy by size"
//! of TFLite and MNN when the order is by size). The orderings live here too.
//!
//! Overlaps come from the static [`OverlapIndex`], so placing an item costs time
//! proportional to the items live with it (O(n log T + overlapping pairs), not O(n^2)).

use std::time::{Duration, Instant};

use super::index::{OverlapIndex, PlacedSpans};
use super::prepared::{ClassKey, Item, Prepared};
use super::{fill, sweep};

mod speculate;

/// An order of item positions (indices into [`Prepared::items`]).
pub(crate) type Order = Vec<usize>;

/// Largest first; ties: longer lifetime, earlier start, caller order.
pub(crate) fn by_size(p: &Prepared) -> Order {
    sorted(p, |_, it| size_key(it))
}

/// The key of [`by_size`], the caller order aside.
fn size_key(it: &Item) -> (std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, u64) {
    (
        std::cmp::Reverse(it.size),
        std::cmp::Reverse(it.len),
        it.start,
    )
}

/// `order` re-sorted in place as [`by_size`] sorts: largest first; ties: longer
/// lifetime, earlier start, caller order. O(k log k).
pub(crate) fn sort_by_size(p: &Prepared, order: &mut [usize]) {
    order.sort_unstable_by_key(|&i| (size_key(&p.items[i]), p.items[i].index));
}

/// Size classes (octaves: sizes with the same highest set bit; the smallest octaves,
/// holding little of the area, one class: [`Prepared::size_class`]) largest first;
/// within a class earliest start first, then larger, then longer. For buffers of one
/// size, the lowest fit in start order is an optimal interval colouring (each gap
/// below is taken by a buffer that is still live when the next starts), so each class
/// is stacked as tightly as an interval graph allows, where an order by exact size
/// scatters a class's starts over time.
pub(crate) fn by_size_class(p: &Prepared) -> Order {
    by_classes(p, ClassKey::Size)
}

/// Area classes ([`area_class`](super::prepared::area_class): pairs of octaves of
/// size times lifetime) largest first; within a class earliest start first, then
/// larger, then longer. The long-lived small buffers go with the short-lived large
/// ones, before the holes that churn leaves are taken.
pub(crate) fn by_area_class(p: &Prepared) -> Order {
    by_classes(p, ClassKey::Area)
}

/// The classes of `key` ([`Prepared::class_of`]) largest first; within a class
/// earliest start first, then larger, then longer: each class contiguous and in start
/// order, as the class sweep needs.
fn by_classes(p: &Prepared, key: ClassKey) -> Order {
    sorted(p, |_, it| {
        (
            std::cmp::Reverse(p.class_of(key, it)),
            it.a,
            std::cmp::Reverse(it.size),
            std::cmp::Reverse(it.len),
        )
    })
}

/// Busiest step first (the total size live at the range's busiest step); ties by size.
pub(crate) fn by_breadth(p: &Prepared) -> Order {
    let breadth = p.breadths();
    sorted(p, |i, it| {
        (
            std::cmp::Reverse(breadth[i]),
            std::cmp::Reverse(it.size),
            std::cmp::Reverse(it.len),
        )
    })
}

/// Longest lifetime first; ties by size.
pub(crate) fn by_lifetime(p: &Prepared) -> Order {
    sorted(p, |_, it| {
        (
            std::cmp::Reverse(it.len),
            std::cmp::Reverse(it.size),
            it.start,
        )
    })
}

/// Largest conflict first (total size of the ranges live with it); ties by size.
pub(crate) fn by_conflict(p: &Prepared) -> Order {
    let conflict = p.conflict_sizes();
    sorted(p, |i, it| {
        (std::cmp::Reverse(conflict[i]), std::cmp::Reverse(it.size))
    })
}

/// Largest area (size times lifetime length) first; ties: longer, then larger.
pub(crate) fn by_area(p: &Prepared) -> Order {
    sorted(p, |_, it| {
        (
            std::cmp::Reverse(u128::from(it.size) * u128::from(it.len)),
            std::cmp::Reverse(it.len),
            std::cmp::Reverse(it.size),
        )
    })
}

/// Earliest start first; ties: longer, then larger (the order in which a stack of
/// nested lifetimes is built).
pub(crate) fn by_start(p: &Prepared) -> Order {
    sorted(p, |_, it| {
        (it.a, std::cmp::Reverse(it.len), std::cmp::Reverse(it.size))
    })
}

/// Latest end first; ties: longer, then larger.
pub(crate) fn by_end(p: &Prepared) -> Order {
    sorted(p, |_, it| {
        (
            std::cmp::Reverse(it.b),
            std::cmp::Reverse(it.len),
            std::cmp::Reverse(it.size),
        )
    })
}

/// Three keys, each largest first, as MiniMalloc names them: W (lifetime length), A
/// (area) and T (the total size live at the item's busiest section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// Lifetime length.
    Width,
    /// Size times lifetime length.
    Area,
    /// Total size live at the item's busiest section.
    Total,
}

/// MiniMalloc's WAT: lifetime length, then area, then total.
pub(crate) const WAT: [Key; 3] = [Key::Width, Key::Area, Key::Total];

/// MiniMalloc's TAW: total, then area, then lifetime length.
pub(crate) const TAW: [Key; 3] = [Key::Total, Key::Area, Key::Width];

/// MiniMalloc's TWA: total, then lifetime length, then area.
pub(crate) const TWA: [Key; 3] = [Key::Total, Key::Width, Key::Area];

/// Largest first by `keys` in priority (e.g. `[Total, Area, Width]` is MiniMalloc's
/// TAW).
pub(crate) fn by_keys(p: &Prepared, keys: [Key; 3]) -> Order {
    let breadth = p.breadths();
    sorted(p, |i, it| {
        std::cmp::Reverse(key_values(keys, it, breadth[i]))
    })
}

/// An item's values for `keys`, in priority order (compared largest first).
pub(crate) type KeyValues = [u128; 3];

/// The values of `keys` for `it`, with `total` as its T (the total size live at its
/// busiest section, or of what is still to place there).
pub(crate) fn key_values(keys: [Key; 3], it: &Item, total: u64) -> KeyValues {
    keys.map(|k| match k {
        Key::Width => u128::from(it.len),
        Key::Area => u128::from(it.size) * u128::from(it.len),
        Key::Total => u128::from(total),
    })
}

/// The item positions sorted by `key(position, item)`, ties by caller order.
fn sorted<K: Ord>(p: &Prepared, key: impl Fn(usize, &Item) -> K) -> Order {
    let mut order: Order = (0..p.items.len()).collect();
    order.sort_by_key(|&i| (key(i, &p.items[i]), p.items[i].index));
    order
}

/// Which free gap an item takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The lowest offset where it fits.
    Lowest,
    /// The smallest gap that holds it (TFLite's choice); the top if none does.
    Smallest,
}

/// Places the items in `order`, each in a gap free of the placed items live with it
/// (chosen by `fit`), on two threads where `threads` allows it and `fit` is
/// [`Fit::Lowest`] (the same offsets and peak either way, see [`place_prefix`]).
/// Returns offsets per item position and the peak.
///
/// O(n log T + overlapping pairs + sum over items of k log k), k the placed items live
/// with an item: on n buffers with about L live at a time, O(n L log L).
pub(crate) fn place_on(
    p: &Prepared,
    index: &OverlapIndex,
    order: &[usize],
    fit: Fit,
    threads: bool,
) -> (Vec<u64>, u64) {
    let cut = Cut {
        threads,
        ..Cut::UNLIMITED
    };
    let prefix = place_prefix(p, index, order, fit, &cut);
    (prefix.offsets, prefix.peak)
}

/// [`place_on`] on one thread.
#[cfg(test)]
pub(crate) fn place(
    p: &Prepared,
    index: &OverlapIndex,
    order: &[usize],
    fit: Fit,
) -> (Vec<u64>, u64) {
    place_on(p, index, order, fit, false)
}

/// How often (in items placed) [`place_until`] looks at the clock.
const CLOCK_EVERY: usize = 64;

/// [`place`] that gives up (`None`) once `deadline` has passed, looked at every
/// [`CLOCK_EVERY`] items.
///
/// The placed items live with an item are read from [`PlacedSpans`] (contiguous
/// memory, not item by item) and ordered by offset with a bucket sort
/// ([`sort_by_start`]): the same offsets as [`fit_among_placed`], in about half of
/// its time on 100,000 malloc-like buffers.
pub(crate) fn place_until(
    p: &Prepared,
    index: &OverlapIndex,
    order: &[usize],
    fit: Fit,
    deadline: Option<Instant>,
) -> Option<(Vec<u64>, u64)> {
    let cut = Cut {
        deadline,
        ..Cut::UNLIMITED
    };
    let prefix = place_prefix(p, index, order, fit, &cut);
    (prefix.placed == order.len()).then_some((prefix.offsets, prefix.peak))
}

/// [`Pace`] forecasts once, when this share (1 / FORECAST_AFTER) of the expected work
/// is done, from a first reading at half of it.
const FORECAST_AFTER: u64 = 16;

/// With [`Cut::forecast_early`], [`Pace`] forecasts by this share (1 / FORECAST_EARLY)
/// of the time from its start to the deadline at the latest (the first reading at half
/// of it): a placement that will be cut by the deadline decides within an eighth of
/// the time it had, not after a sixteenth of its work, which may be more than all of
/// it (greedy by size on a million malloc-like buffers reads about 2e9 units, tens of
/// seconds on the build machine).
const FORECAST_EARLY: u64 = 8;

/// The pace of a greedy placement, for [`place_then_sweep`] with a forecast: placing an item costs
/// a fixed part (finding its slots, the fit) and a part per placed item live with it
/// (reading and ordering them). Early in an order by size few are placed, so the
/// first items cost mostly the fixed part, and a forecast per unit of work alone
/// overestimates the rest (twice over on 100,000 malloc-like buffers). Two readings,
/// at 1/32 and 1/16 of the expected work (or sooner: [`Cut::forecast_early`]), fit
/// both parts; the forecast is made once.
#[derive(Debug, Clone, Copy, Default)]
struct Pace {
    /// Items placed, work read and seconds at the first reading.
    first: Option<(f64, f64, f64)>,
    /// Whether the forecast has been made.
    made: bool,
}

/// Below this share of `k w` the two readings are too nearly proportional (the same
/// work per item at both) to tell the cost per item from the cost per unit, and the
/// forecast takes the pace per unit alone.
const SEPARABLE: f64 = 0.05;

impl Pace {
    /// The seconds that placing `items` in all (reading `total` units) will still
    /// take, `placed` items and `read` units done in `secs`; `None` before the
    /// second reading and after the forecast was made (once).
    ///
    /// With `span` (the seconds from the start to the deadline) the readings come at
    /// 1 / (2 [`FORECAST_EARLY`]) and 1 / [`FORECAST_EARLY`] of it where that is
    /// sooner than at 1/32 and 1/16 of the work.
    fn rest(
        &mut self,
        placed: usize,
        items: usize,
        (read, total): (u64, u64),
        secs: f64,
        span: Option<f64>,
    ) -> Option<f64> {
        let (k, w) = (placed as f64, read as f64);
        // Whether 1 / `of_work` of the work or 1 / `of_span` of the span is done.
        let done = |of_work: u64, of_span: u64| {
            read.saturating_mul(of_work) >= total
                || span.is_some_and(|s| secs * of_span as f64 >= s)
        };
        if self.made || !done(2 * FORECAST_AFTER, 2 * FORECAST_EARLY) {
            return None;
        }
        let Some((k1, w1, t1)) = self.first else {
            self.first = Some((k, w, secs));
            return None;
        };
        if !done(FORECAST_AFTER, FORECAST_EARLY) {
            return None;
        }
        self.made = true;
        // secs = per_item * k + per_unit * w at both readings.
        let det = k1 * w - k * w1;
        let (mut per_item, mut per_unit) = if det.abs() > SEPARABLE * k * w {
            ((t1 * w - secs * w1) / det, (k1 * secs - k * t1) / det)
        } else {
            (0.0, secs / w.max(1.0))
        };
        if per_item < 0.0 || per_unit < 0.0 {
            // Noise beyond what two readings resolve: the pace per unit alone.
            (per_item, per_unit) = (0.0, secs / w.max(1.0));
        }
        let left_items = items.saturating_sub(placed) as f64;
        let left_work = total.saturating_sub(read) as f64;
        Some(per_item * left_items + per_unit * left_work)
    }
}

/// What filling an item into the holes of a greedy placement ([`fill::place_into`])
/// is reserved, in items swept: a million malloc-like buffers swept in 0.86 s, and the
/// 538,000 smallest of them filled into the holes of the other 462,000 in 2.1 s (4.5
/// sweeps an item), 519,000 few-sizes buffers in 0.94 s (about 2). Where the fill still
/// runs out of time it sweeps the rest above.
pub(crate) const FILL_SWEEPS: u32 = 4;

/// When [`place_then_sweep`] stops placing by the greedy order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut {
    /// The sweep of the items left must end by then (looked at every
    /// [`CLOCK_EVERY`] items).
    pub deadline: Option<Instant>,
    /// What sweeping one item takes, reserved before the deadline for every item
    /// still to place.
    pub sweep_per_item: Duration,
    /// At most this many placed items read (one per placed item live with an item
    /// placed: about one per overlapping pair).
    pub work: u64,
    /// The work the whole order is expected to read: where set (with a deadline), the
    /// placement decides once, after a sixteenth of it (or sooner:
    /// [`Cut::forecast_early`]), whether to give up (no sweep) because its [`Pace`]
    /// says it would end after the deadline ([`place_then_sweep`]).
    pub forecast: Option<u64>,
    /// With a forecast: made by [`FORECAST_EARLY`] of the time to the deadline at the
    /// latest, where that is sooner than a sixteenth of the work ([`Pace::rest`]), and
    /// saying late only where the pace per item so far says so too: read early, the
    /// fitted pace overestimates the rest (greedy by size on a million buffers of the
    /// narrow family, about 100 live, forecast 8.0-15.5 s at an eighth of its time
    /// where 2.2-3 s remained; on the malloc-like family 179 s where 1.6 s was left).
    pub forecast_early: bool,
    /// Whether the placement may run on two threads (a helper beside the caller's);
    /// with [`Fit::Lowest`] the offsets, peak, work and cut are the same either way
    /// (see [`place_prefix`]).
    pub threads: bool,
}

impl Cut {
    /// No deadline and no work limit: every item is placed by the greedy order.
    pub(crate) const UNLIMITED: Cut = Cut {
        deadline: None,
        sweep_per_item: Duration::ZERO,
        work: u64::MAX,
        forecast: None,
        forecast_early: false,
        threads: false,
    };

    /// Whether the time left is what sweeping `left` items needs.
    fn stops(&self, left: usize) -> bool {
        self.deadline
            .is_some_and(|d| super::out_of_time(d, self.sweep_per_item, left))
    }

    /// Whether the placement stops before the `k`-th item of `items` (`read` units
    /// read so far, since `started`): `Some(gave_up)` where it stops, `gave_up` where
    /// its forecast said it would miss the deadline. The clock (deadline and forecast)
    /// is looked at every [`CLOCK_EVERY`] items, the work before every item. O(1).
    fn stops_before(
        &self,
        pace: &mut Pace,
        k: usize,
        items: usize,
        read: u64,
        started: Instant,
    ) -> Option<bool> {
        let clock = k % CLOCK_EVERY == CLOCK_EVERY - 1;
        let gave_up = clock && self.foresees_overrun(pace, k, items, read, started.elapsed());
        (gave_up || read > self.work || (clock && self.stops(items - k))).then_some(gave_up)
    }

    /// Whether, `placed` of `items` placed and `read` units of [`Cut::forecast`] read
    /// in `elapsed`, the rest at the same [`Pace`] would end after the deadline
    /// (asked once: false before and after the forecast).
    fn foresees_overrun(
        &self,
        pace: &mut Pace,
        placed: usize,
        items: usize,
        read: u64,
        elapsed: Duration,
    ) -> bool {
        let (Some(total), Some(deadline)) = (self.forecast, self.deadline) else {
            return false;
        };
        let span = self
            .forecast_early
            .then(|| (elapsed + deadline.saturating_duration_since(Instant::now())).as_secs_f64());
        let Some(rest) = pace.rest(placed, items, (read, total), elapsed.as_secs_f64(), span)
        else {
            return false;
        };
        log::debug!("greedy pace: {placed} of {items} placed, {rest:.3} s to go");
        // Read early the fitted pace overestimates the rest; the pace per item so far
        // underestimates it (in an order by size an item reads more placed items the
        // more are placed): an early forecast says late only where that one does too.
        let rest = if self.forecast_early {
            let per_item = elapsed.as_secs_f64() / placed.max(1) as f64;
            rest.min(per_item * items.saturating_sub(placed) as f64)
        } else {
            rest
        };
        Instant::now()
            .checked_add(Duration::from_secs_f64(rest.min(1e9)))
            .is_none_or(|t| t >= deadline)
    }
}

/// What [`place_then_sweep`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Offsets per item position.
    pub offsets: Vec<u64>,
    /// The peak.
    pub peak: u64,
    /// Whether every item was placed by the greedy order (none swept).
    pub complete: bool,
    /// Placed items read (the unit of [`Cut::work`]).
    pub work: u64,
}

/// [`place_until`] that, once `cut` says so, places the items still to place by the
/// sweep above the peak so far ([`sweep::place_above`]) instead of giving up: in an
/// order by size those are the smallest.
///
/// With [`Cut::forecast`] (and a deadline) it also decides once, after a sixteenth of
/// its work (or by an eighth of the time left: [`Cut::forecast_early`]), whether it
/// will end before the deadline, and gives up there (`None`, the
/// only case) if it foresees missing it ([`Pace`]: a cost per item and per placed item
/// read, fitted on two readings; the forecast is the work it will read, one unit per
/// unordered pair of items live at a common time, half of
/// [`Prepared::overlap_pairs`]). Having decided to go on, it is cut only as without a
/// forecast; the time lost by giving up is what it spent until it decided.
pub(crate) fn place_then_sweep(
    p: &Prepared,
    index: &OverlapIndex,
    order: &[usize],
    fit: Fit,
    cut: &Cut,
) -> Option<Swept> {
    let Prefix {
        mut offsets,
        peak,
        placed,
        read,
        gave_up,
    } = place_prefix(p, index, order, fit, cut);
    if gave_up {
        return None;
    }
    let complete = placed == order.len();
    let peak = if complete {
        peak
    } else {
        sweep::place_above(p, &order[placed..], peak, &mut offsets)
    };
    Some(Swept {
        offsets,
        peak,
        complete,
        work: read,
    })
}

/// The first `fixed` items of an order placed by the greedy lowest fit (as far as `cut`
/// allows), every other item then filled into the free space they leave
/// ([`fill::place_into`], until `fill_deadline` less the time to sweep those left, by
/// [`Cut::sweep_per_item`], then swept above).
///
/// `orders` are orders of the same items, of one length, whose first `fixed` positions
/// hold the same items (each in its own order): the prefix is placed in the first
/// and, where [`lowest_prefix`] has the time, in each next one; the lowest is filled.
/// Two orders of the same large items can end far apart: on a million bursty buffers
/// (seed 26) the largest size classes stacked class by class peak at 24.50 MB, the
/// same items by exact size at 23.60 MB (the fill then ends at 1.028 and 1.0078 of the
/// bound).
///
/// With [`Cut::forecast`] (the work of one prefix) it gives up (`None`) where its pace
/// says the first order's prefix would miss the cut's deadline, as [`place_then_sweep`]
/// does. Never [`Swept::complete`]; its work is what every prefix read. O(greedy on
/// each prefix) + O(fill). `None` too where `orders` is empty.
pub(crate) fn place_then_fill(
    p: &Prepared,
    index: &OverlapIndex,
    orders: &[&[usize]],
    fixed: usize,
    cut: &Cut,
    fill_deadline: Option<Instant>,
) -> Option<Swept> {
    let Lowest {
        order,
        prefix,
        read,
    } = lowest_prefix(p, index, orders, fixed, cut)?;
    let mut offsets = prefix.offsets;
    let rest = &order[prefix.placed..];
    let peak =
        fill::place_into(p, rest, &mut offsets, fill_deadline, cut.sweep_per_item).max(prefix.peak);
    Some(Swept {
        offsets,
        peak,
        complete: false,
        work: read,
    })
}

/// The prefix [`lowest_prefix`] kept, in its order, and what every prefix read.
struct Lowest<'a> {
    order: &'a [usize],
    prefix: Prefix,
    read: u64,
}

/// The first `fixed` items of the first of `orders` placed ([`place_prefix`] under
/// `cut`; `None` where its forecast gave up), then, where that placed all `fixed` and
/// the time left before the cut's deadline is at least twice what the first took, the
/// same items in each next order in turn (one given up or cut is passed over). The
/// prefix that peaks lowest is kept, the earliest on a tie. Each order needs the same
/// items in its first `fixed` positions and the same length (checked in debug builds).
fn lowest_prefix<'a>(
    p: &Prepared,
    index: &OverlapIndex,
    orders: &[&'a [usize]],
    fixed: usize,
    cut: &Cut,
) -> Option<Lowest<'a>> {
    let (&first, others) = orders.split_first()?;
    debug_assert!(others.iter().all(|o| o.len() == first.len()));
    let started = Instant::now();
    let prefix = place_prefix(p, index, &first[..fixed], Fit::Lowest, cut);
    if prefix.gave_up {
        return None;
    }
    let took = started.elapsed();
    log::debug!(
        "prefix 0: {} of {fixed} placed, peak {}",
        prefix.placed,
        prefix.peak
    );
    let mut lowest = Lowest {
        order: first,
        read: prefix.read,
        prefix,
    };
    if lowest.prefix.placed < fixed {
        return Some(lowest);
    }
    for (which, &order) in others.iter().enumerate() {
        if !cut
            .deadline
            .is_none_or(|d| time_left_for(d, took.saturating_mul(2)))
        {
            log::debug!("prefix {}: no time for it", which + 1);
            break;
        }
        let prefix = place_prefix(p, index, &order[..fixed], Fit::Lowest, cut);
        lowest.read = lowest.read.saturating_add(prefix.read);
        log::debug!(
            "prefix {}: {} of {fixed} placed, peak {}{}",
            which + 1,
            prefix.placed,
            prefix.peak,
            if prefix.gave_up { " (given up)" } else { "" }
        );
        if !prefix.gave_up && prefix.placed == fixed && prefix.peak < lowest.prefix.peak {
            lowest.order = order;
            lowest.prefix = prefix;
        }
    }
    Some(lowest)
}

/// Whether `needed` from now still ends by `deadline` (no later than it).
pub(crate) fn time_left_for(deadline: Instant, needed: Duration) -> bool {
    Instant::now()
        .checked_add(needed)
        .is_some_and(|t| t <= deadline)
}

/// What [`place_prefix`] placed.
struct Prefix {
    /// Offsets per item position (0 for items not placed).
    offsets: Vec<u64>,
    /// The peak of the placed items.
    peak: u64,
    /// How many items of the order were placed.
    placed: usize,
    /// Placed items read.
    read: u64,
    /// Whether it stopped because its forecast said it would miss the deadline.
    gave_up: bool,
}

/// Orders shorter than this are placed on one thread even where [`Cut::threads`]
/// allows two: a few chunks do not pay for starting the helper.
const SPECULATE_MIN: usize = 4 * speculate::CHUNK;

/// Places `order` from its start until it ends or `cut` stops it.
///
/// With [`Cut::threads`] and [`Fit::Lowest`] (on orders of at least
/// [`SPECULATE_MIN`] items), on two threads by chunks ([`speculate::place_prefix`]):
/// the same offsets, peak, work counted and cut points, in about half the time where
/// the second core is free. The cost is O(n log T + overlapping pairs + sum over items
/// of k log k), k the placed items live with an item, either way.
fn place_prefix(
    p: &Prepared,
    index: &OverlapIndex,
    order: &[usize],
    fit: Fit,
    cut: &Cut,
) -> Prefix {
    if cut.threads && fit == Fit::Lowest && order.len() >= SPECULATE_MIN {
        return speculate::place_prefix(p, index, order, cut, speculate::CHUNK, speculate::WINDOW);
    }
    place_prefix_in_turn(p, index, order, fit, cut)
}

/// [`place_prefix`] on this thread alone: O(n log T + overlapping pairs + sum over
/// items of k log k), k the placed items live with an item.
fn place_prefix_in_turn(
    p: &Prepared,
    index: &OverlapIndex,
    order: &[usize],
    fit: Fit,
    cut: &Cut,
) -> Prefix {
    let mut offsets = vec![0u64; p.items.len()];
    let mut spans = PlacedSpans::new(index);
    let mut scratch = FitScratch::default();
    let mut peak = 0u64;
    let mut read = 0u64;
    let started = Instant::now();
    let mut pace = Pace::default();
    for (k, &i) in order.iter().enumerate() {
        if let Some(gave_up) = cut.stops_before(&mut pace, k, order.len(), read, started) {
            return Prefix {
                offsets,
                peak,
                placed: k,
                read,
                gave_up,
            };
        }
        let it = &p.items[i];
        scratch.busy.clear();
        spans.placed_in(it.a, it.b, &mut scratch.busy);
        read += scratch.busy.len() as u64;
        let offset = scratch.fit(it.size, fit);
        let end = offset.saturating_add(it.size);
        offsets[i] = offset;
        spans.place(i, it.a, it.b, offset, end);
        peak = peak.max(end);
    }
    Prefix {
        offsets,
        peak,
        placed: order.len(),
        read,
        gave_up: false,
    }
}

/// Below this many ranges [`sort_by_start`] uses the standard sort.
const BUCKET_MIN: usize = 64;

/// [`lowest_fit_unsorted`] buckets about 2^this ranges together: its scan passes a
/// bucket whose starts are all below where it would stop by its highest top, with no
/// sort, so fewer, fuller buckets cost less to count and scatter and no more to scan.
/// On 100,000 malloc-like buffers, 1, 2, 4 and 8 ranges a bucket placed the class
/// order in 2.4, 2.2, 2.1 and 2.3 s (one thread, 2-core build machine).
const SCAN_BUCKET_BITS: u32 = 2;

/// Reused memory of [`sort_by_start`].
#[derive(Debug, Clone, Default)]
pub(crate) struct SortScratch {
    ranges: Vec<(u64, u64)>,
    ends: Vec<u32>,
}

/// Sorts `ranges` by start (ties in any order). One pass of a bucket sort on the
/// starts (about one bucket per range, by the starts' leading bits), then each bucket
/// by the standard sort: O(n) on spread starts, instead of O(n log n) comparisons.
pub(crate) fn sort_by_start(ranges: &mut Vec<(u64, u64)>, scratch: &mut SortScratch) {
    if ranges.len() < BUCKET_MIN {
        ranges.sort_unstable_by_key(|r| r.0);
        return;
    }
    let buckets = scatter_by_start(ranges, scratch, 0);
    let mut from = 0usize;
    for &end in &scratch.ends[..buckets] {
        let bucket = &mut scratch.ranges[from..end as usize];
        if bucket.len() > 1 {
            bucket.sort_unstable_by_key(|r| r.0);
        }
        from = end as usize;
    }
    scratch.ranges.truncate(ranges.len());
    std::mem::swap(ranges, &mut scratch.ranges);
}

/// The bucket sort's first half: `ranges` (at least [`BUCKET_MIN`]) moved to the
/// front of `scratch.ranges` in order of their bucket (the starts' leading bits, about
/// 2^`per_bucket_bits` ranges a bucket), each bucket in any order; `scratch.ends[k]`
/// is where bucket `k` ends. Returns the number of buckets. `scratch.ranges` may be
/// left longer than `ranges`.
fn scatter_by_start(
    ranges: &[(u64, u64)],
    scratch: &mut SortScratch,
    per_bucket_bits: u32,
) -> usize {
    let n = ranges.len();
    let max = ranges.iter().map(|r| r.0).max().unwrap_or(0);
    let bucket_bits = (usize::BITS - n.leading_zeros()).saturating_sub(per_bucket_bits);
    let width = 64 - max.leading_zeros();
    let shift = width.saturating_sub(bucket_bits);
    let buckets = (max >> shift) as usize + 1;
    // ends[k + 1] counts bucket k, then (prefix sums) is where bucket k ends; the
    // scatter advances ends[k] (bucket k's start) to that end.
    let ends = &mut scratch.ends;
    ends.clear();
    ends.resize(buckets + 1, 0);
    for r in ranges.iter() {
        ends[(r.0 >> shift) as usize + 1] += 1;
    }
    for k in 0..buckets {
        ends[k + 1] += ends[k];
    }
    // Every one of the first `n` places is written below (the buckets' ends add up to
    // `n`): what they held before need not be cleared, only made room for.
    let out = &mut scratch.ranges;
    if out.len() < n {
        out.resize(n, (0, 0));
    }
    for &r in ranges.iter() {
        let k = (r.0 >> shift) as usize;
        out[ends[k] as usize] = r;
        ends[k] += 1;
    }
    buckets
}

/// Where [`lowest_fit_unsorted`] stopped: the lowest fit and the ranges past it.
#[derive(Debug)]
pub(crate) struct Stop<'s> {
    /// The lowest offset at which the size avoids every range.
    pub offset: u64,
    /// The ranges from where the scan stopped (every range before ends at or below
    /// `offset`), sorted by start, at most the window asked for.
    pub past: &'s [(u64, u64)],
    /// Whether ranges beyond `past` were left out.
    pub truncated: bool,
}

/// The lowest fit of `busy` in any order (as a scan of `busy` sorted by start from 0
/// up to the first gap would find it), and up to `window` ranges past where its
/// scan stopped, sorted. The ranges are bucketed by start (about
/// 2^[`SCAN_BUCKET_BITS`] a bucket), but a bucket is sorted only when the scan reaches
/// it and one of its ranges may stop the scan (a bucket whose every start is below
/// where the scan would stop on entering it only raises the candidate to its highest
/// top), and the scan stops at the answer: the buckets above it (about half of an
/// item's neighbours in the greedy orders) are never sorted. O(k) for k ranges, as
/// the bucket sort.
pub(crate) fn lowest_fit_unsorted<'s>(
    busy: &[(u64, u64)],
    size: u64,
    window: usize,
    scratch: &'s mut SortScratch,
) -> Stop<'s> {
    let n = busy.len();
    if n < BUCKET_MIN {
        let sorted = &mut scratch.ranges;
        sorted.clear();
        sorted.extend_from_slice(busy);
        sorted.sort_unstable_by_key(|r| r.0);
        let (offset, resume) = speculate::lowest_fit_from(sorted, 0, &[], 0, size);
        let to = n.min(resume.saturating_add(window));
        return Stop {
            offset,
            past: &sorted[resume..to],
            truncated: to < n,
        };
    }
    let buckets = scatter_by_start(busy, scratch, SCAN_BUCKET_BITS);
    let (ranges, ends) = (&mut scratch.ranges, &scratch.ends[..buckets]);
    let mut candidate = 0u64;
    // Where the scan stopped, and how far the window then needs the ranges sorted.
    let mut stopped: Option<(usize, usize)> = None;
    let mut from = 0usize;
    for &end in ends {
        if stopped.is_some_and(|(_, want)| from >= want) {
            break;
        }
        let bucket = &mut ranges[from..end as usize];
        // Where every start of the bucket is below where the scan would stop on
        // entering it, none of its ranges stops the scan, whatever their order, and
        // the candidate only rises to their highest top: no sort.
        if stopped.is_none() && bucket.len() > 1 {
            let (mut last_start, mut top) = (0u64, 0u64);
            for &(s, t) in bucket.iter() {
                last_start = last_start.max(s);
                top = top.max(t);
            }
            if last_start < candidate.saturating_add(size) {
                candidate = candidate.max(top);
                from = end as usize;
                continue;
            }
        }
        if bucket.len() > 1 {
            bucket.sort_unstable_by_key(|r| r.0);
        }
        if stopped.is_none() {
            for (at, &(start, top)) in bucket.iter().enumerate() {
                if start >= candidate.saturating_add(size) {
                    let resume = from + at;
                    stopped = Some((resume, n.min(resume.saturating_add(window))));
                    break;
                }
                candidate = candidate.max(top);
            }
        }
        from = end as usize;
    }
    let (resume, want) = stopped.unwrap_or((n, n));
    Stop {
        offset: candidate,
        past: &ranges[resume..want],
        truncated: want < n,
    }
}

/// The placed ranges live with an item, gathered by the caller into `busy`, and the
/// memory that orders them; reused from one item to the next.
#[derive(Debug, Clone, Default)]
pub(crate) struct FitScratch {
    /// `[start, end)` of the placed items live with the item to place.
    pub busy: Vec<(u64, u64)>,
    sort: SortScratch,
}

impl FitScratch {
    /// The offset `fit` picks for `size` bytes among [`FitScratch::busy`] (in any
    /// order; the smallest fit reorders them).
    fn fit(&mut self, size: u64, fit: Fit) -> u64 {
        match fit {
            Fit::Lowest => lowest_fit_unsorted(&self.busy, size, 0, &mut self.sort).offset,
            Fit::Smallest => {
                self.busy.sort_unstable();
                best_fit(&self.busy, size)
            }
        }
    }
}

/// The offset `fit` picks for item `i` among the placed items live with it, and the
/// number of overlapping items the index visited (the work done).
pub(crate) fn fit_among_placed(
    p: &Prepared,
    index: &OverlapIndex,
    offsets: &[u64],
    placed: &[bool],
    i: usize,
    fit: Fit,
    scratch: &mut FitScratch,
) -> (u64, u64) {
    scratch.busy.clear();
    let visited = index.for_each_overlapping(p, i, |j| {
        if placed[j] {
            let o = offsets[j];
            scratch.busy.push((o, o.saturating_add(p.items[j].size)));
        }
    });
    (scratch.fit(p.items[i].size, fit), visited)
}

/// The lowest offset at which `size` bytes avoid every `[start, end)` of `busy` (sorted
/// by start): the definition [`lowest_fit_unsorted`] is tested against.
#[cfg(test)]
pub(crate) fn lowest_fit(busy: &[(u64, u64)], size: u64) -> u64 {
    let mut candidate = 0u64;
    for &(start, end) in busy {
        if start >= candidate.saturating_add(size) {
            break;
        }
        candidate = candidate.max(end);
    }
    candidate
}

/// The start of the smallest free gap among `busy` (sorted by start) that holds
/// `size` bytes; the top (above every busy range) if no gap does.
pub(crate) fn best_fit(busy: &[(u64, u64)], size: u64) -> u64 {
    let mut reach = 0u64;
    let mut best: Option<(u64, u64)> = None; // (gap length, start)
    for &(start, end) in busy {
        if start > reach {
            let gap = start - reach;
            if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, reach));
            }
        }
        reach = reach.max(end);
    }
    best.map_or(reach, |(_, start)| start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::LiveRange;

    /// 1 to 300 ranges starting in steps 0-199, living 1-60 steps, of 1-5,000 bytes.
    fn small_random_ranges(rng: &mut crate::seeded::Rng) -> Vec<LiveRange> {
        let n = 1 + rng.index(300);
        (0..n)
            .map(|_| {
                let start = rng.index(200) as u64;
                r(
                    start,
                    start + 1 + rng.index(60) as u64,
                    1 + rng.index(5000) as u64,
                )
            })
            .collect()
    }

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    #[test]
    fn the_bucket_sort_orders_by_start_like_the_standard_sort() {
        let mut rng = crate::seeded::Rng::new(5);
        let mut scratch = SortScratch::default();
        for round in 0..60 {
            let n = [0, 1, 63, 64, 65, 3000][round % 6];
            let scale = [1u64, 7, 1 << 20, u64::MAX >> 31][round % 4];
            let mut ranges: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let s = (rng.index(1 << 30) as u64).wrapping_mul(scale);
                    (s, s.wrapping_add(rng.index(100) as u64))
                })
                .collect();
            let mut expected = ranges.clone();
            expected.sort_unstable_by_key(|r| r.0);
            sort_by_start(&mut ranges, &mut scratch);
            let starts: Vec<u64> = ranges.iter().map(|r| r.0).collect();
            let want: Vec<u64> = expected.iter().map(|r| r.0).collect();
            assert_eq!(starts, want, "round {round}");
            ranges.sort_unstable();
            expected.sort_unstable();
            assert_eq!(ranges, expected, "round {round}: the same ranges");
        }
    }

    #[test]
    fn the_lazy_bucket_scan_is_the_sorted_scan_with_its_window() {
        let mut rng = crate::seeded::Rng::new(41);
        let mut scratch = SortScratch::default();
        for round in 0..3000 {
            let n = [0, 1, 5, 63, 64, 65, 300, 3000][round % 8];
            let spread = [10usize, 1000, 1 << 20, 1 << 40][(round / 8) % 4];
            let len = [1usize, 3, 100, 1 << 16][(round / 32) % 4];
            let mut busy: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let s = rng.index(spread) as u64;
                    (s, s + rng.index(len) as u64)
                })
                .collect();
            let size = [1u64, 7, 64, 4096][(round / 128) % 4];
            let window = [0usize, 1, 16, 1024][(round / 512) % 4];
            let stop = lowest_fit_unsorted(&busy, size, window, &mut scratch);
            let (offset, past, truncated) = (stop.offset, stop.past.to_vec(), stop.truncated);
            busy.sort_unstable();
            assert_eq!(offset, lowest_fit(&busy, size), "round {round}");
            // The window: the ranges from the first that starts at or above the
            // answer's end, in start order.
            let resume = busy.partition_point(|r| r.0 < offset.saturating_add(size));
            let to = n.min(resume + window);
            let starts = |v: &[(u64, u64)]| v.iter().map(|r| r.0).collect::<Vec<_>>();
            assert_eq!(starts(&past), starts(&busy[resume..to]), "round {round}");
            assert_eq!(truncated, to < n, "round {round}");
        }
    }

    #[test]
    fn the_spans_greedy_places_as_the_item_by_item_fit() {
        let mut rng = crate::seeded::Rng::new(21);
        for round in 0..40 {
            let n = 50 + rng.index(600);
            let ranges: Vec<LiveRange> = (0..n)
                .map(|_| {
                    let start = rng.index(300) as u64;
                    r(
                        start,
                        start + 1 + rng.index(80) as u64,
                        1 + rng.index(5000) as u64,
                    )
                })
                .collect();
            let p = Prepared::new(&ranges, [1, 8, 64][round % 3]).expect("valid");
            let index = OverlapIndex::new(&p);
            let order = by_size(&p);
            let (offsets, peak) = place(&p, &index, &order, Fit::Lowest);
            p.assert_valid(&offsets, peak);
            // The item-by-item fit, as the climb uses it, gives the same offsets.
            let mut reference = vec![0u64; p.items.len()];
            let mut placed = vec![false; p.items.len()];
            let mut scratch = FitScratch::default();
            for &i in &order {
                reference[i] = fit_among_placed(
                    &p,
                    &index,
                    &reference,
                    &placed,
                    i,
                    Fit::Lowest,
                    &mut scratch,
                )
                .0;
                placed[i] = true;
            }
            assert_eq!(offsets, reference, "round {round}");
        }
    }

    #[test]
    fn the_class_orders_prefix_placed_and_the_rest_filled_is_valid_and_keeps_the_prefix() {
        let mut rng = crate::seeded::Rng::new(41);
        for case in 0..300 {
            let ranges = small_random_ranges(&mut rng);
            let p = Prepared::new(&ranges, 16).expect("valid");
            let index = OverlapIndex::new(&p);
            let order = by_size_class(&p);
            let fixed = rng.index(order.len() + 1);
            let filled = place_then_fill(&p, &index, &[&order], fixed, &Cut::UNLIMITED, None)
                .expect("no forecast");
            p.assert_valid(&filled.offsets, filled.peak);
            assert_eq!(filled.peak, p.peak_of(&filled.offsets), "case {case}");
            assert!(!filled.complete);
            // The prefix is where the greedy order alone puts it.
            let (greedy, _) = place(&p, &index, &order[..fixed], Fit::Lowest);
            for &i in &order[..fixed] {
                assert_eq!(filled.offsets[i], greedy[i], "case {case}, item {i}");
            }
        }
    }

    #[test]
    fn of_two_orders_of_the_prefix_the_lower_is_kept_and_the_rest_filled() {
        let mut rng = crate::seeded::Rng::new(43);
        let mut second_lower = 0;
        for case in 0..300 {
            let ranges = small_random_ranges(&mut rng);
            let p = Prepared::new(&ranges, 16).expect("valid");
            let index = OverlapIndex::new(&p);
            let class = by_size_class(&p);
            let fixed = rng.index(class.len() + 1);
            let mut exact = class.clone();
            sort_by_size(&p, &mut exact[..fixed]);
            let filled =
                place_then_fill(&p, &index, &[&class, &exact], fixed, &Cut::UNLIMITED, None)
                    .expect("no forecast");
            p.assert_valid(&filled.offsets, filled.peak);
            assert_eq!(filled.peak, p.peak_of(&filled.offsets), "case {case}");
            // The prefix is where the greedy puts it in the order whose prefix peaks
            // lower (the first on a tie).
            let (by_class, class_peak) = place(&p, &index, &class[..fixed], Fit::Lowest);
            let (by_exact, exact_peak) = place(&p, &index, &exact[..fixed], Fit::Lowest);
            let kept = if exact_peak < class_peak {
                second_lower += 1;
                &by_exact
            } else {
                &by_class
            };
            for &i in &class[..fixed] {
                assert_eq!(filled.offsets[i], kept[i], "case {case}, item {i}");
            }
        }
        assert!(second_lower > 0, "no case where the second order was lower");
    }

    #[test]
    fn the_exact_order_of_a_prefix_is_by_size_s_order_of_its_items() {
        let ranges = [
            r(0, 4, 10),
            r(1, 9, 30),
            r(2, 3, 30),
            r(0, 2, 20),
            r(5, 6, 40),
        ];
        let p = Prepared::new(&ranges, 1).expect("valid");
        let class = by_size_class(&p);
        let mut order = class.clone();
        sort_by_size(&p, &mut order[..4]);
        // The prefix holds the same items, by size, then lifetime; the rest stays.
        let mut prefix = order[..4].to_vec();
        let mut before = class[..4].to_vec();
        prefix.sort_unstable();
        before.sort_unstable();
        assert_eq!(prefix, before);
        assert_eq!(order[4..], class[4..]);
        let sizes: Vec<(u64, u64)> = order[..4]
            .iter()
            .map(|&i| (p.items[i].size, p.items[i].len))
            .collect();
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
        // The whole order re-sorted is by_size's.
        let mut all = class;
        sort_by_size(&p, &mut all);
        assert_eq!(all, by_size(&p));
    }

    #[test]
    fn a_passed_deadline_sweeps_the_rest_above_the_greedy_part() {
        let ranges: Vec<LiveRange> = (0..3000u64)
            .map(|i| r(i % 700, i % 700 + 1 + (i * 13) % 90, 1 + (i * 7919) % 4096))
            .collect();
        let p = Prepared::new(&ranges, 16).expect("valid");
        let index = OverlapIndex::new(&p);
        let order = by_size(&p);
        let now = Cut {
            deadline: Some(Instant::now()),
            ..Cut::UNLIMITED
        };
        let Swept {
            offsets,
            peak,
            complete,
            ..
        } = place_then_sweep(&p, &index, &order, Fit::Lowest, &now).expect("no forecast");
        assert!(!complete);
        p.assert_valid(&offsets, peak);
        // The first CLOCK_EVERY - 1 items (the largest) were placed by the greedy order,
        // exactly as without a deadline.
        let (greedy, _) = place(&p, &index, &order, Fit::Lowest);
        for &i in &order[..CLOCK_EVERY - 1] {
            assert_eq!(offsets[i], greedy[i]);
        }
        let all = place_then_sweep(&p, &index, &order, Fit::Lowest, &Cut::UNLIMITED)
            .expect("no forecast");
        assert!(all.complete);
        assert_eq!(
            (all.offsets, all.peak),
            place(&p, &index, &order, Fit::Lowest)
        );
        // A work budget cuts the same way, deterministically.
        let budget = Cut {
            work: 50_000,
            ..Cut::UNLIMITED
        };
        let cut = place_then_sweep(&p, &index, &order, Fit::Lowest, &budget).expect("no forecast");
        assert!(!cut.complete && cut.work > 50_000 && cut.work < all.work);
        p.assert_valid(&cut.offsets, cut.peak);
        assert_eq!(
            cut,
            place_then_sweep(&p, &index, &order, Fit::Lowest, &budget).expect("no forecast")
        );
        // A deadline far enough away for the greedy part, but not for sweeping the rest
        // as slowly as asked, stops at once.
        let slow = Cut {
            deadline: Some(Instant::now() + Duration::from_secs(3600)),
            sweep_per_item: Duration::from_secs(3600),
            ..Cut::UNLIMITED
        };
        assert!(
            !place_then_sweep(&p, &index, &order, Fit::Lowest, &slow)
                .expect("no forecast")
                .complete
        );
    }

    #[test]
    fn pace_fits_a_cost_per_item_and_per_unit_from_two_readings() {
        // Seconds = 2 us an item + 10 ns a unit read; 1,000 items, 100,000 units.
        let cost = |k: usize, w: u64| 2e-6 * k as f64 + 1e-8 * w as f64;
        let mut pace = Pace::default();
        // Before 1/32 of the work: nothing, and no reading taken.
        assert_eq!(
            pace.rest(10, 1000, (3_000, 100_000), cost(10, 3_000), None),
            None
        );
        // The first reading, then nothing until 1/16.
        assert_eq!(
            pace.rest(200, 1000, (3_200, 100_000), cost(200, 3_200), None),
            None
        );
        assert_eq!(
            pace.rest(250, 1000, (5_000, 100_000), cost(250, 5_000), None),
            None
        );
        let rest = pace
            .rest(300, 1000, (6_400, 100_000), cost(300, 6_400), None)
            .expect("a forecast");
        let exact = cost(1000, 100_000) - cost(300, 6_400);
        assert!((rest - exact).abs() < 1e-9, "{rest} against {exact}");
        // Once.
        assert_eq!(
            pace.rest(400, 1000, (9_000, 100_000), cost(400, 9_000), None),
            None
        );
        // Readings that no positive costs explain fall back to the pace per unit.
        let mut odd = Pace::default();
        odd.rest(100, 1000, (3_200, 100_000), 1.0, None);
        let rest = odd
            .rest(900, 1000, (6_400, 100_000), 1.0, None)
            .expect("a forecast");
        assert!((rest - (100_000.0 - 6_400.0) / 6_400.0).abs() < 1e-9);
    }

    #[test]
    fn with_a_span_the_readings_come_by_an_eighth_of_it_where_the_work_is_slower() {
        // 1,000 items, 100,000 units, a span of 1 s: a 16th and an 8th of the span
        // pass long before a 32nd of the work is read.
        let calls = [
            (10, 100, 0.05),
            (20, 300, 0.07),
            (30, 300, 0.1),
            (40, 500, 0.13),
        ];
        let mut by_clock = Pace::default();
        let mut by_work = Pace::default();
        let forecasts: Vec<_> = calls
            .iter()
            .map(|&(k, w, secs)| {
                assert_eq!(by_work.rest(k, 1000, (w, 100_000), secs, None), None);
                by_clock.rest(k, 1000, (w, 100_000), secs, Some(1.0))
            })
            .collect();
        // Before a 16th nothing; the first reading at (20, 300, 0.07); nothing before
        // an 8th; the forecast at (40, 500, 0.13). The two readings fit 2 ms an item
        // and 0.1 ms a unit (a reading at any other call would fit other costs).
        assert_eq!(forecasts[..3], [None, None, None]);
        let rest = forecasts[3].expect("a forecast");
        let exact = 2e-3 * (1000.0 - 40.0) + 1e-4 * (100_000.0 - 500.0);
        assert!((rest - exact).abs() < 1e-9, "{rest} against {exact}");
    }

    #[test]
    fn an_early_forecast_says_late_by_an_eighth_of_the_time_to_the_deadline() {
        // 100,000 units at 75 ms each: a deadline 100 s away is missed by far, but a
        // 32nd of the work is 3,125 units away.
        let cut = |forecast_early| Cut {
            deadline: Some(Instant::now() + Duration::from_secs(100)),
            forecast: Some(100_000),
            forecast_early,
            ..Cut::UNLIMITED
        };
        let secs = Duration::from_secs;
        // `placed` of `items` placed with 100 units read at 7 s (past a 16th of the
        // span), with 200 at 15 s (past an 8th): whether it then says late.
        let late = |early: bool, items: usize, [first, second]: [usize; 2]| {
            let cut = cut(early);
            let mut pace = Pace::default();
            assert!(!cut.foresees_overrun(&mut pace, first, items, 100, secs(7)));
            cut.foresees_overrun(&mut pace, second, items, 200, secs(15))
        };
        // 200 of 100,000 items in 15 s: the pace per item says late too (7,485 s).
        assert!(late(true, 100_000, [100, 200]));
        assert!(!late(false, 100_000, [100, 200]));
        // 900 of 1,000 items in 15 s: the pace per unit says late (7,485 s), the pace
        // per item (1.7 s) does not, and an early forecast goes by the lower.
        assert!(!late(true, 1000, [450, 900]));
    }

    #[test]
    fn with_a_forecast_placement_is_as_without_unless_it_says_late() {
        let ranges: Vec<LiveRange> = (0..3000u64)
            .map(|i| r(i % 700, i % 700 + 1 + (i * 13) % 90, 1 + (i * 7919) % 4096))
            .collect();
        let p = Prepared::new(&ranges, 16).expect("valid");
        let index = OverlapIndex::new(&p);
        let order = by_size_class(&p);
        let work = p.overlap_pairs() / 2;
        let (offsets, peak) = place(&p, &index, &order, Fit::Lowest);
        // No deadline, or one an hour away: the whole order, as `place`, and the work
        // read is one unit per unordered pair.
        for deadline in [None, Some(Instant::now() + Duration::from_secs(3600))] {
            let cut = Cut {
                deadline,
                forecast: Some(work),
                ..Cut::UNLIMITED
            };
            let swept = place_then_sweep(&p, &index, &order, Fit::Lowest, &cut).expect("in time");
            assert!(swept.complete);
            assert_eq!((&swept.offsets, swept.peak), (&offsets, peak));
            assert_eq!(swept.work, work);
        }
        // A deadline already past before the forecast: cut there and the rest swept,
        // as without a forecast.
        let past = Cut {
            deadline: Some(Instant::now()),
            forecast: Some(work),
            ..Cut::UNLIMITED
        };
        let swept =
            place_then_sweep(&p, &index, &order, Fit::Lowest, &past).expect("cut, not given up");
        assert!(!swept.complete);
        p.assert_valid(&swept.offsets, swept.peak);
    }

    #[test]
    fn the_forecast_is_made_once_and_says_late_only_past_the_deadline() {
        // Readings of 1 us an item and 10 ns a unit; 1,000 items, 100,000 units: the
        // rest takes about 1.3 ms.
        let cost = |k: usize, w: u64| 1e-6 * k as f64 + 1e-8 * w as f64;
        let elapsed = |k: usize, w: u64| Duration::from_secs_f64(cost(k, w));
        let cut = |deadline| Cut {
            deadline: Some(deadline),
            forecast: Some(100_000),
            ..Cut::UNLIMITED
        };
        let near = cut(Instant::now() + Duration::from_micros(100));
        let mut pace = Pace::default();
        assert!(!near.foresees_overrun(&mut pace, 200, 1000, 3_200, elapsed(200, 3_200)));
        assert!(near.foresees_overrun(&mut pace, 300, 1000, 6_400, elapsed(300, 6_400)));
        // Asked again: the forecast was made.
        assert!(!near.foresees_overrun(&mut pace, 400, 1000, 9_000, elapsed(400, 9_000)));
        let far = cut(Instant::now() + Duration::from_secs(3600));
        let mut pace = Pace::default();
        assert!(!far.foresees_overrun(&mut pace, 200, 1000, 3_200, elapsed(200, 3_200)));
        assert!(!far.foresees_overrun(&mut pace, 300, 1000, 6_400, elapsed(300, 6_400)));
        // Without a forecast there is nothing to say.
        let mut pace = Pace::default();
        let none = Cut {
            deadline: Some(Instant::now()),
            ..Cut::UNLIMITED
        };
        assert!(!none.foresees_overrun(&mut pace, 300, 1000, 6_400, elapsed(300, 6_400)));
    }

    #[test]
    fn one_size_class_in_start_order_reaches_the_bound() {
        // Lowest fit in start order colours an interval graph optimally: with one
        // size the peak is the most buffers live at once times the size.
        let mut rng = crate::seeded::Rng::new(8);
        for round in 0..50 {
            let size = 1 + rng.index(100) as u64;
            let ranges: Vec<LiveRange> = (0..(20 + rng.index(400)))
                .map(|_| {
                    let start = rng.index(500) as u64;
                    r(start, start + 1 + rng.index(1 + round * 4) as u64, size)
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            let index = OverlapIndex::new(&p);
            let (offsets, peak) = place(&p, &index, &by_size_class(&p), Fit::Lowest);
            p.assert_valid(&offsets, peak);
            assert_eq!(peak, p.lower_bound, "round {round}");
        }
    }

    #[test]
    fn freed_hole_below_is_preferred_to_the_top() {
        assert_eq!(lowest_fit(&[(0, 4), (8, 12)], 4), 4);
        assert_eq!(lowest_fit(&[(0, 4), (6, 12)], 4), 12);
        assert_eq!(lowest_fit(&[(2, 4)], 2), 0);
        assert_eq!(lowest_fit(&[], 7), 0);
    }

    #[test]
    fn smallest_gap_that_holds_the_item_wins() {
        // Gaps [4,10) (6 bytes) and [12,15) (3 bytes): 3 bytes go to the tighter one.
        assert_eq!(best_fit(&[(0, 4), (10, 12), (15, 20)], 3), 12);
        assert_eq!(best_fit(&[(0, 4), (10, 12), (15, 20)], 5), 4);
        assert_eq!(best_fit(&[(0, 4), (10, 12), (15, 20)], 7), 20);
        assert_eq!(best_fit(&[(2, 4)], 2), 0);
    }

    #[test]
    fn items_live_at_different_times_share_offset_zero() {
        let p = Prepared::new(&[r(0, 2, 8), r(2, 4, 8), r(1, 3, 4)], 1).expect("valid");
        let (offsets, peak) = place(&p, &OverlapIndex::new(&p), &by_size(&p), Fit::Lowest);
        assert_eq!(offsets, vec![0, 0, 8]);
        assert_eq!(peak, 12);
    }

    #[test]
    fn greedy_by_size_reaches_the_minimalloc_example_bound() {
        let p = Prepared::new(
            &[r(0, 3, 4), r(3, 9, 4), r(0, 9, 4), r(9, 21, 4), r(0, 21, 4)],
            1,
        )
        .expect("valid");
        let (_, peak) = place(&p, &OverlapIndex::new(&p), &by_lifetime(&p), Fit::Lowest);
        assert_eq!(peak, 12);
    }
}
