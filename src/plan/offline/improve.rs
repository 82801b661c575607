//! Improvement by seeded perturbation: starting from the best greedy order, swap a few
//! items (mostly near each other in the order) and keep the new order when the greedy
//! placement does not peak higher. The random numbers come from a fixed-seed SplitMix64,
//! and the number of tries from a work budget, so the result is deterministic.

use super::greedy::{place, Fit, Order};
use super::prepared::Prepared;

/// SplitMix64: a tiny, fast, seedable generator (enough for shuffling orders).
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator with the given seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }
}

/// Hill climbing over orders. `start` is the order to improve, `peak` its placement's
/// peak; `tries` placements are evaluated at most. Stops early at `lower_bound`.
pub(crate) fn climb(
    p: &Prepared,
    start: Order,
    start_offsets: Vec<u64>,
    peak: u64,
    tries: u64,
    seed: u64,
) -> (Vec<u64>, u64) {
    let n = start.len();
    let (mut best_order, mut best_offsets, mut best_peak) = (start, start_offsets, peak);
    if n < 2 {
        return (best_offsets, best_peak);
    }
    let mut rng = SplitMix64::new(seed);
    for _ in 0..tries {
        if best_peak <= p.lower_bound {
            break;
        }
        let mut order = best_order.clone();
        let moves = 1 + rng.below(3);
        for _ in 0..moves {
            let i = rng.below(n);
            let j = if rng.below(4) == 0 {
                rng.below(n)
            } else {
                let window = 8.min(n - 1);
                let step = 1 + rng.below(window);
                if rng.below(2) == 0 {
                    i.saturating_sub(step)
                } else {
                    (i + step).min(n - 1)
                }
            };
            order.swap(i, j);
        }
        let (offsets, peak) = place(p, &order, Fit::Lowest);
        if peak <= best_peak {
            best_order = order;
            best_offsets = offsets;
            best_peak = peak;
        }
    }
    (best_offsets, best_peak)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy::by_size;
    use crate::plan::offline::LiveRange;

    #[test]
    fn same_seed_gives_same_numbers() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert!((0..1000).all(|_| a.below(5) < 5));
    }

    #[test]
    fn climbing_never_makes_the_peak_worse() {
        let ranges: Vec<LiveRange> = (0..60u64)
            .map(|i| LiveRange {
                start: (i * 7) % 23,
                end: (i * 7) % 23 + 1 + i % 6,
                size: 1 + (i * 13) % 9,
            })
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let order = by_size(&p);
        let (offsets, peak) = place(&p, &order, Fit::Lowest);
        let (_, improved) = climb(&p, order, offsets, peak, 200, 1);
        assert!(improved <= peak);
        assert!(improved >= p.lower_bound);
    }
}
