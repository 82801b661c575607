//! Churning instances with a known packing: a plateau of load at the capacity through
//! which buffers keep ending and starting, built so that a packing within a known
//! height exists, to measure how far a planner ends from it (the lower bound alone
//! cannot say whether a plateau's churn forces waste).
//!
//! A *tiling* fills `[0, capacity)` with buffers at time 0, then at every step frees
//! the buffers that end, merges each freed range with the free ranges beside it, and
//! after a random delay (0 to [`REFILL_DELAY`] steps) fills every free range again with
//! new buffers, the last one cut to fit. Sizes are drawn as the scale bench's `wide`
//! draws them (log-normal, median 2 KiB, log-deviation 2, at most 4 MiB) and lifetimes
//! with its spread (log-deviation 1.2), but the cuts (down to 1 B) make the sizes drift
//! smaller on the plateau, and more buffers live at once than the capacity's aim (at
//! 100,000 buffers a median of about 900 B and about 40,000 live at the bound; at a
//! million about 350 B and 160,000 live): a regime of its own, not `wide`'s. Every buffer is placed as it is
//! made, so the tiling is itself a packing within the capacity.
//!
//! Read forward, a tiling is an online placement (the sweep plans one at its bound);
//! read backward in time it is not. So [`churn`] stacks two tilings of half the
//! buffers each: one forward, the other reversed in time, their plateaus starting at
//! the same step. The known packing is the two stacked, and a planner has no time
//! direction to follow.
//!
//! Everything comes from the seed and the buffer count: the same call gives the same
//! instance on every machine.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::plan::{Interval, IntervalPlan, IntervalProblem};
use crate::seeded::Rng;

/// The longest delay, in steps, before a freed range is filled again (ranges freed
/// within it merge first, so larger buffers keep coming).
pub const REFILL_DELAY: u64 = 200;

/// Median buffer size in bytes (log-normal, log-deviation [`SIZE_SIGMA`]), clamped to
/// 16 B-4 MiB as the scale bench's families are.
const SIZE_MEDIAN: f64 = 2048.0;
/// Log-deviation of the sizes.
const SIZE_SIGMA: f64 = 2.0;
/// Log-deviation of the lifetimes.
const LIFE_SIGMA: f64 = 1.2;

/// A churning instance and the packing it was built with.
#[derive(Debug, Clone)]
pub struct Churn {
    /// The buffers, `churn-<buffers>-<seed>`.
    pub problem: IntervalProblem,
    /// A packing of them: [`IntervalPlan::peak`] is the two tilings' highest buffers
    /// stacked, so no optimal plan peaks above it.
    pub packing: IntervalPlan,
}

/// One placed buffer of a tiling: `[start, end)`, its size and offset.
#[derive(Debug, Clone, Copy)]
struct Placed {
    start: u64,
    end: u64,
    size: u64,
    offset: u64,
}

/// Draws of one tiling: sizes, lifetimes (a mean of about `live` steps, so that about
/// `live` buffers of the drawn sizes would fill the capacity) and refill delays.
struct Draws {
    rng: Rng,
    life_median: f64,
}

impl Draws {
    fn size(&mut self) -> u64 {
        (self.rng.log_normal(SIZE_MEDIAN, SIZE_SIGMA) as u64).clamp(16, 4 << 20)
    }

    fn life(&mut self) -> u64 {
        (self.rng.log_normal(self.life_median, LIFE_SIGMA) as u64).max(1)
    }

    fn delay(&mut self) -> u64 {
        self.rng.below(REFILL_DELAY + 1)
    }
}

/// Fills `[lo, hi)` at step `t` with new buffers, the last cut to fit, until `buffers`
/// are made.
fn fill(
    lo: u64,
    hi: u64,
    t: u64,
    buffers: usize,
    draws: &mut Draws,
    placed: &mut Vec<Placed>,
    ends: &mut BinaryHeap<Reverse<(u64, u64, u64)>>,
) {
    let mut offset = lo;
    while offset < hi && placed.len() < buffers {
        let size = draws.size().min(hi - offset);
        let end = t + draws.life();
        placed.push(Placed {
            start: t,
            end,
            size,
            offset,
        });
        ends.push(Reverse((end, offset, size)));
        offset += size;
    }
}

/// A tiling of `buffers` buffers with about `live` live at once: the buffers, the
/// capacity they tile, and the step at which the last one was made (the plateau's end).
/// O(n log n).
fn tiling(seed: u64, buffers: usize, live: u64) -> (Vec<Placed>, u64, u64) {
    // A log-normal's mean is its median times exp(sigma^2 / 2).
    let mean_size = SIZE_MEDIAN * (SIZE_SIGMA * SIZE_SIGMA / 2.0).exp();
    let capacity = (live as f64 * mean_size) as u64;
    let mut draws = Draws {
        rng: Rng::new(seed),
        life_median: live as f64 / (LIFE_SIGMA * LIFE_SIGMA / 2.0).exp(),
    };
    let mut placed: Vec<Placed> = Vec::with_capacity(buffers);
    // Live buffers by end: (end, offset, size).
    let mut ends: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new();
    // Free ranges not yet filled again, by their low end; refills due, by step.
    let mut free: BTreeMap<u64, u64> = BTreeMap::new();
    let mut due: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new();
    let mut t = 0;
    fill(0, capacity, t, buffers, &mut draws, &mut placed, &mut ends);
    while placed.len() < buffers && !(ends.is_empty() && due.is_empty()) {
        t += 1;
        while let Some(&Reverse((end, offset, size))) = ends.peek() {
            if end > t {
                break;
            }
            ends.pop();
            let (mut lo, mut hi) = (offset, offset + size);
            // Merge with the free range ending at `lo` and the one starting at `hi`.
            if let Some((&below, &below_hi)) = free.range(..lo).next_back() {
                if below_hi == lo {
                    free.remove(&below);
                    lo = below;
                }
            }
            if let Some(above_hi) = free.remove(&hi) {
                hi = above_hi;
            }
            free.insert(lo, hi);
            due.push(Reverse((t + draws.delay(), lo, hi)));
        }
        while let Some(&Reverse((when, lo, hi))) = due.peek() {
            if when > t {
                break;
            }
            due.pop();
            // A range merged into a larger one since is filled with it.
            if free.get(&lo) == Some(&hi) {
                free.remove(&lo);
                fill(lo, hi, t, buffers, &mut draws, &mut placed, &mut ends);
            }
        }
    }
    (placed, capacity, t)
}

/// Live buffers each tiling's capacity is sized for (of the drawn sizes; the cuts make
/// more live).
pub const LIVE_EACH: u64 = 8_750;

/// About `buffers` buffers (at least 2): a forward tiling and a tiling reversed in
/// time, each of half the buffers, its capacity sized for [`LIVE_EACH`] live (fewer
/// below 70,000 buffers: a quarter of each half, so that a plateau forms), stacked (the reversed one
/// above the forward one's highest buffer), their plateaus starting at the same step.
/// O(n log n).
pub fn churn(seed: u64, buffers: usize) -> Churn {
    let half = (buffers / 2).max(1);
    let other = buffers.saturating_sub(half).max(1);
    let live = LIVE_EACH.min((half as u64 / 4).max(1));
    let mut seeds = Rng::new(seed ^ ((buffers as u64) << 20) ^ 0xc4a5_0c4a);
    let (forward_seed, backward_seed) = (seeds.next_u64(), seeds.next_u64());
    let (forward, _, _) = tiling(forward_seed, half, live);
    let (backward, _, backward_plateau) = tiling(backward_seed, other, live);
    let top = |tiling: &[Placed]| tiling.iter().map(|b| b.offset + b.size).max().unwrap_or(0);
    let forward_top = top(&forward);
    // Reversed, the backward tiling's plateau [0, its end) becomes [horizon - end,
    // horizon); the forward one is shifted to start there too.
    let horizon = backward.iter().map(|b| b.end).max().unwrap_or(0);
    let shift = horizon - backward_plateau.min(horizon);
    let mut intervals = Vec::with_capacity(forward.len() + backward.len());
    let mut offsets = Vec::with_capacity(forward.len() + backward.len());
    for b in &forward {
        intervals.push((b.start + shift, b.end + shift, b.size));
        offsets.push(b.offset);
    }
    for b in &backward {
        intervals.push((horizon - b.end, horizon - b.start, b.size));
        offsets.push(forward_top + b.offset);
    }
    let intervals = intervals
        .into_iter()
        .enumerate()
        .map(|(i, (lower, upper, size))| Interval {
            id: i.to_string(),
            lower,
            upper,
            size,
        })
        .collect();
    Churn {
        problem: IntervalProblem {
            name: format!("churn-{buffers}-{seed}"),
            intervals,
        },
        packing: IntervalPlan {
            offsets,
            peak: forward_top + top(&backward),
            planner: "known".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffers of `tiling` as an interval problem and their offsets as its plan.
    fn as_plan(tiling: &[Placed], peak: u64) -> (IntervalProblem, IntervalPlan) {
        let intervals = tiling
            .iter()
            .enumerate()
            .map(|(i, b)| Interval {
                id: i.to_string(),
                lower: b.start,
                upper: b.end,
                size: b.size,
            })
            .collect();
        let plan = IntervalPlan {
            offsets: tiling.iter().map(|b| b.offset).collect(),
            peak,
            planner: "tiling".into(),
        };
        let problem = IntervalProblem {
            name: "tiling".into(),
            intervals,
        };
        (problem, plan)
    }

    #[test]
    fn the_known_packing_is_valid_and_near_the_bound_through_a_plateau() {
        for seed in [1, 2, 3] {
            let c = churn(seed, 100_000);
            assert_eq!(c.problem.intervals.len(), 100_000);
            c.problem
                .verify(&c.packing)
                .expect("the known packing is valid");
            let bound = c.problem.lower_bound();
            assert!(bound <= c.packing.peak);
            // Both tilings are at their capacity at once, but for refills due.
            assert!(
                bound as f64 >= 0.99 * c.packing.peak as f64,
                "seed {seed}: bound {bound}, packing {}",
                c.packing.peak
            );
        }
    }

    #[test]
    fn the_same_seed_and_count_give_the_same_instance_and_others_another() {
        let a = churn(7, 20_000);
        assert_eq!(a.problem, churn(7, 20_000).problem);
        assert_ne!(a.problem, churn(8, 20_000).problem);
        // Seeds that differ in their low bits do not share tilings.
        let (b, c) = (churn(1, 20_000), churn(2, 20_000));
        let first = |x: &Churn| x.problem.intervals[0].clone();
        assert_ne!(first(&b), first(&c));
        assert_ne!(
            b.problem.intervals[..100],
            c.problem.intervals[10_000..10_100]
        );
    }

    #[test]
    fn a_tiling_is_a_packing_within_its_capacity_and_starts_full() {
        let (placed, capacity, plateau) = tiling(5, 30_000, 2_000);
        assert!(plateau > 0);
        let (problem, plan) = as_plan(&placed, capacity);
        problem.verify(&plan).expect("a tiling is a packing");
        let at_zero: u64 = placed.iter().filter(|b| b.start == 0).map(|b| b.size).sum();
        assert!(
            at_zero + (4 << 20) > capacity,
            "{at_zero} of {capacity} at time 0"
        );
    }

    #[test]
    fn a_few_buffers_still_give_a_valid_packing() {
        for n in [0, 1, 2, 3, 10, 1_000] {
            let c = churn(3, n);
            assert_eq!(c.problem.intervals.len(), n.max(2));
            c.problem.verify(&c.packing).expect("valid");
            assert!(c.problem.lower_bound() <= c.packing.peak);
        }
    }
}
