//! Improvement by seeded ruin and repair around the peak: pick an item that reaches
//! the peak and a time window inside its lifetime, lift the highest items live in that
//! window, and place them back one by one (largest first, with a little shuffling)
//! among the items that stayed. A move is kept when the peak does not rise and, at an
//! equal peak, no more items reach it; otherwise it is undone. Random numbers come from
//! a fixed-seed `seeded::Rng` (SplitMix64) and the number of moves from a work budget (overlaps
//! visited), so the result is deterministic.

use std::time::Instant;

use super::greedy::{fit_among_placed, Fit, FitScratch};
use super::index::OverlapIndex;
use super::prepared::Prepared;
use crate::seeded::Rng;

/// The peak of a placement and how many items reach it.
fn peak_and_count(p: &Prepared, offsets: &[u64]) -> (u64, usize) {
    let mut peak = 0u64;
    let mut count = 0usize;
    for (it, &o) in p.items.iter().zip(offsets) {
        let top = o.saturating_add(it.size);
        if top > peak {
            peak = top;
            count = 1;
        } else if top == peak {
            count += 1;
        }
    }
    (peak, count)
}

/// When the local search stops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cutoffs {
    /// About this many units (one per overlap visited or item scanned).
    pub work: u64,
    /// Once the peak is at or below this (at least the lower bound).
    pub target: u64,
    /// Once this instant has passed (checked before every move).
    pub deadline: Option<Instant>,
}

/// Ruin-and-repair local search from a valid placement `offsets` (per item position)
/// within `limits`. Returns the best placement and its peak.
pub(crate) fn repack(
    p: &Prepared,
    index: &OverlapIndex,
    mut offsets: Vec<u64>,
    limits: &Cutoffs,
    seed: u64,
) -> (Vec<u64>, u64) {
    let n = p.items.len();
    let (mut peak, mut at_peak) = peak_and_count(p, &offsets);
    if n < 2 {
        return (offsets, peak);
    }
    let mut rng = Rng::new(seed);
    let mut placed = vec![true; n];
    let mut scratch = FitScratch::default();
    let mut window: Vec<(u64, usize)> = Vec::new();
    let mut lifted: Vec<(usize, u64)> = Vec::new();
    let mut spent = 0u64;
    let max_lift = n.min(64);
    let target = limits.target.max(p.lower_bound);
    while spent < limits.work && peak > target && limits.deadline.is_none_or(|d| Instant::now() < d)
    {
        // An item at the peak, chosen at random among them.
        let nth = rng.index(at_peak);
        let Some(j) = (0..n)
            .filter(|&i| offsets[i].saturating_add(p.items[i].size) == peak)
            .nth(nth)
        else {
            break;
        };
        spent = spent.saturating_add(n as u64);
        let it = p.items[j];
        let t = it.a + rng.index((it.b - it.a) as usize) as u32;
        let half = (1u32 << rng.index(6)) - 1;
        let lo = t.saturating_sub(half);
        let hi = t.saturating_add(half + 1).min(p.sections as u32);
        window.clear();
        spent = spent.saturating_add(index.for_each_in(lo, hi, None, |i| {
            window.push((offsets[i].saturating_add(p.items[i].size), i));
        }));
        // The highest items of the window (ties: item position, for determinism).
        window.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        let lift = (2usize << rng.index(6)).min(max_lift).min(window.len());
        lifted.clear();
        for &(_, i) in &window[..lift] {
            lifted.push((i, offsets[i]));
            placed[i] = false;
        }
        // Largest first, then a few random swaps of neighbours.
        lifted.sort_unstable_by(|x, y| {
            p.items[y.0]
                .size
                .cmp(&p.items[x.0].size)
                .then(x.0.cmp(&y.0))
        });
        let swaps = rng.index(lift.max(1));
        for _ in 0..swaps {
            if lift < 2 {
                break;
            }
            let k = rng.index(lift - 1);
            lifted.swap(k, k + 1);
        }
        let fit = if rng.index(4) == 0 {
            Fit::Smallest
        } else {
            Fit::Lowest
        };
        for &(i, _) in &lifted {
            let (offset, visited) =
                fit_among_placed(p, index, &offsets, &placed, i, fit, &mut scratch);
            spent = spent.saturating_add(visited);
            offsets[i] = offset;
            placed[i] = true;
        }
        spent = spent.saturating_add(n as u64);
        let (new_peak, new_at_peak) = peak_and_count(p, &offsets);
        if (new_peak, new_at_peak) <= (peak, at_peak) {
            peak = new_peak;
            at_peak = new_at_peak;
        } else {
            for &(i, old) in &lifted {
                offsets[i] = old;
            }
        }
    }
    (offsets, peak)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy::{by_size, place};
    use crate::plan::offline::LiveRange;

    fn work(work: u64) -> Cutoffs {
        Cutoffs {
            work,
            target: 0,
            deadline: None,
        }
    }

    fn staggered() -> Prepared {
        let ranges: Vec<LiveRange> = (0..60u64)
            .map(|i| LiveRange {
                start: (i * 7) % 23,
                end: (i * 7) % 23 + 1 + i % 6,
                size: 1 + (i * 13) % 9,
            })
            .collect();
        Prepared::new(&ranges, 1).expect("valid")
    }

    #[test]
    fn repacking_keeps_the_placement_valid_and_the_peak_no_higher() {
        let p = staggered();
        let index = OverlapIndex::new(&p);
        let (offsets, peak) = place(&p, &index, &by_size(&p), Fit::Lowest);
        let (improved, improved_peak) = repack(&p, &index, offsets, &work(200_000), 1);
        assert!(improved_peak <= peak);
        assert!(improved_peak >= p.lower_bound);
        p.assert_valid(&improved, improved_peak);
    }

    #[test]
    fn repacking_is_deterministic_for_a_seed() {
        let p = staggered();
        let index = OverlapIndex::new(&p);
        let (offsets, _) = place(&p, &index, &by_size(&p), Fit::Lowest);
        let first = repack(&p, &index, offsets.clone(), &work(50_000), 9);
        let second = repack(&p, &index, offsets, &work(50_000), 9);
        assert_eq!(first, second);
    }
}
