//! The area class order ([`greedy::by_area_class`]: pairs of octaves of size times
//! lifetime, largest first, each class in start order) at the lowest fit, placed by
//! the class sweep ([`class_sweep`]) within [`WORK_PER_ITEM`] units of work a buffer,
//! at most [`MAX_WORK`] (so 100 a buffer at a million: there it is cut after its
//! first class); where the budget or the deadline cuts it, [`place`] fills the items
//! it leaves into its holes ([`fill::place_into`]) and [`place_whole`] gives up.
//!
//! Ordered by area, a long-lived small buffer goes down with the short-lived large
//! ones, before the holes they leave are taken; ordered by size, it comes last and
//! finds few holes that stay free as long as it lives. Where many buffers are live
//! through long stretches of churn near the bound, it can be the lower plan
//! (generated `wide` 100k buffers, seed 26: 1.0143 of the bound against the size
//! class order's 1.0173, on 2 of 12 seeds lower; `churn` seed 26: 1.0086 against
//! 1.0168); on malloc-like traces, bursts, few sizes and narrow live sets it ends
//! 0.8-46% above the size class order (1.01-1.46 of the bound), so `best` runs it
//! beside the size class order, never instead of it.
//!
//! Cost: as the class sweep, O(C n log n + walks) for C classes, within
//! [`WORK_PER_ITEM`] units a buffer (at most [`MAX_WORK`]); the fill O(n log n).

use std::time::{Duration, Instant};

use super::class_sweep::{self, ClassesPlaced, Limits};
use super::prepared::{ClassKey, Prepared};
use super::{fill, greedy};

/// The class sweep's work per buffer ([`Limits::work`]): wide 100k takes about 470 an
/// item, churn 100k about 910 (set so that both complete, with little margin on
/// churn).
pub(crate) const WORK_PER_ITEM: u64 = 1_000;

/// The class sweep's work at most: about 20-50 s on the 2-core build machine.
pub(crate) const MAX_WORK: u64 = 100_000_000;

/// The area class order placed (see the module doc), the rest filled after a cut by
/// the work or `deadline`: offsets per item position and the peak. After the first
/// class it goes on only while its pace forecasts the whole order within the work
/// (and the deadline).
pub(crate) fn place(p: &Prepared, deadline: Option<Instant>) -> (Vec<u64>, u64) {
    place_within(p, deadline, budget(p))
}

/// [`place`] where the class sweep places the whole order; `None` where the work or the
/// deadline cuts it (no fill: `best` keeps only a whole order, since a filled one was
/// far above its other plans at a million buffers).
pub(crate) fn place_whole(p: &Prepared, deadline: Option<Instant>) -> Option<(Vec<u64>, u64)> {
    place_whole_within(p, deadline, budget(p))
}

/// [`place_whole`] within `work` units of the class sweep.
fn place_whole_within(
    p: &Prepared,
    deadline: Option<Instant>,
    work: u64,
) -> Option<(Vec<u64>, u64)> {
    let (order, placed) = sweep(p, deadline, work);
    (placed.placed == order.len()).then_some((placed.offsets, placed.peak))
}

/// The class sweep's work for `p`: [`WORK_PER_ITEM`] a buffer, at most [`MAX_WORK`].
fn budget(p: &Prepared) -> u64 {
    (p.items.len() as u64)
        .saturating_mul(WORK_PER_ITEM)
        .min(MAX_WORK)
}

/// [`place`] within `work` units of the class sweep.
fn place_within(p: &Prepared, deadline: Option<Instant>, work: u64) -> (Vec<u64>, u64) {
    let (order, placed) = sweep(p, deadline, work);
    let peak = placed.peak;
    let mut offsets = placed.offsets;
    let rest = &order[placed.placed..];
    if rest.is_empty() {
        return (offsets, peak);
    }
    let filled = fill::place_into(p, rest, &mut offsets, deadline, Duration::ZERO);
    (offsets, filled.max(peak))
}

/// The area class order and the prefix of it the class sweep places within `work` and
/// `deadline`, looking after each class whether the whole order is forecast to fit.
fn sweep(p: &Prepared, deadline: Option<Instant>, work: u64) -> (Vec<usize>, ClassesPlaced) {
    let order = greedy::by_area_class(p);
    let limits = Limits {
        deadline,
        reserve_per_item: Duration::ZERO,
        reserve_per_placed: Duration::ZERO,
        work,
        whole_or_first: if order.is_empty() {
            0
        } else {
            p.class_end_by(ClassKey::Area, &order, 0)
        },
        or_until: None,
        first_by: None,
        filled_after: false,
    };
    let started = Instant::now();
    let placed = class_sweep::place_classes_keyed(p, ClassKey::Area, &order, &limits);
    log::debug!(
        "greedy-area-class by classes: {} of {} items ({} work) in {:?}",
        placed.placed,
        order.len(),
        placed.work,
        started.elapsed()
    );
    (order, placed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy::Fit;
    use crate::plan::offline::index::OverlapIndex;
    use crate::plan::offline::LiveRange;
    use crate::seeded::Rng;

    fn random(seed: u64, n: usize) -> Prepared {
        let mut rng = Rng::new(seed);
        let ranges: Vec<LiveRange> = (0..n)
            .map(|_| {
                let start = rng.below(400);
                let longest = 1 + rng.below(200);
                let len = 1 + rng.below(longest);
                let octaves = 1 + rng.below(16);
                LiveRange {
                    start,
                    end: start + len,
                    size: 1 + rng.below(1 << octaves),
                }
            })
            .collect();
        Prepared::new(&ranges, 1).expect("valid")
    }

    #[test]
    fn within_the_work_it_is_the_greedy_area_class_order() {
        for seed in 0..40 {
            let p = random(seed, 1 + (seed as usize * 37) % 700);
            let index = OverlapIndex::new(&p);
            let (offsets, peak) =
                greedy::place(&p, &index, &greedy::by_area_class(&p), Fit::Lowest);
            assert_eq!(place(&p, None), (offsets.clone(), peak), "seed {seed}");
            assert_eq!(place_whole(&p, None), Some((offsets, peak)), "seed {seed}");
        }
    }

    #[test]
    fn cut_by_the_work_or_the_deadline_the_rest_is_filled_and_valid() {
        for seed in 0..40 {
            let p = random(100 + seed, 800);
            let whole = place(&p, None);
            // No work (the sweep places nothing, the fill everything), a little, more.
            for work in [0, 1_000, 20_000] {
                let (offsets, peak) = place_within(&p, None, work);
                p.assert_valid(&offsets, peak);
                assert!(peak >= p.lower_bound);
                // Nothing whole where cut (at no work, always); where whole, the
                // same plan as with the fill (nothing left to fill).
                match place_whole_within(&p, None, work) {
                    None => assert!(peak > 0),
                    Some(whole) => {
                        assert!(work > 0, "seed {seed}: whole with no work");
                        assert_eq!(whole, (offsets, peak), "seed {seed}");
                    }
                }
            }
            // A deadline already past: still a complete, valid plan; none whole.
            let (offsets, peak) = place(&p, Some(Instant::now()));
            p.assert_valid(&offsets, peak);
            assert_eq!(place_whole(&p, Some(Instant::now())), None);
            assert!(whole.1 >= p.lower_bound);
        }
    }

    #[test]
    fn an_empty_problem_has_an_empty_plan() {
        let p = Prepared::new(
            &[LiveRange {
                start: 3,
                end: 3,
                size: 8,
            }],
            1,
        )
        .expect("valid");
        assert!(p.items.is_empty());
        assert_eq!(place(&p, None), (Vec::new(), 0));
        assert_eq!(place_whole(&p, None), Some((Vec::new(), 0)));
    }
}
