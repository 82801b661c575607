//! A sweep placement in O(n log n): the items in order of their first section (larger
//! first at the same section), each put in the smallest free gap of the memory left by
//! the items live at that moment, or on top. Because every item live with a later one
//! is either live when it starts or starts after it (and is placed after it, avoiding
//! it), only the live set matters: its free gaps are kept in a [`FreeMemory`] (by
//! length then offset, to find the smallest gap that holds an item, the lowest of
//! equal ones; by start and end, to merge a freed range with its neighbours). An item costs
//! one or two ordered-set operations and a few hash lookups: O(log n), no overlap
//! lists.
//!
//! It is the online best-fit of a malloc with the whole trace known only in the order
//! of frees before allocations at a step, so it lands well above the bound on
//! fragmenting traces (10-20%); [`super::Strategy::Best`] makes it first on large
//! instances so that a plan exists at once, whatever the deadline.

use super::prepared::Prepared;
use crate::plan::gaps::FreeMemory;

/// Places every item by the sweep. Returns offsets per item position and the peak.
/// O(n log n) time, O(n) memory.
pub(crate) fn place(p: &Prepared) -> (Vec<u64>, u64) {
    let mut offsets = vec![0u64; p.items.len()];
    let all: Vec<usize> = (0..p.items.len()).collect();
    let peak = place_above(p, &all, 0, &mut offsets);
    (offsets, peak)
}

/// Places the items at positions `which` by the sweep, at or above `base` (every
/// offset `base` plus a sum of item sizes), writing their `offsets`; the others are
/// neither read nor written. Returns the top of what it placed (at least `base`).
/// O(k log k) for k items.
pub(crate) fn place_above(p: &Prepared, which: &[usize], base: u64, offsets: &mut [u64]) -> u64 {
    let mut starts: Vec<u32> = which.iter().map(|&i| i as u32).collect();
    starts.sort_unstable_by_key(|&i| {
        let it = &p.items[i as usize];
        (it.a, std::cmp::Reverse(it.size), i)
    });
    let mut ends = starts.clone();
    ends.sort_unstable_by_key(|&i| (p.items[i as usize].b, i));
    let mut memory = FreeMemory::above(base);
    let mut next_end = 0usize;
    for &i in &starts {
        let it = &p.items[i as usize];
        while let Some(&j) = ends.get(next_end) {
            let jt = &p.items[j as usize];
            if jt.b > it.a {
                break;
            }
            memory.give(offsets[j as usize], jt.size);
            next_end += 1;
        }
        // The top cannot pass 2^64: `base` is at most the sizes of the items placed
        // before, and `Prepared::new` checks that all sizes together fit in a u64.
        offsets[i as usize] = memory.take(it.size).unwrap_or(u64::MAX);
    }
    memory.high_water()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::LiveRange;

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    #[test]
    fn freed_memory_is_reused_and_the_smallest_gap_wins() {
        // 0: [0,4) 8 bytes, 1: [0,9) 2 bytes, 2: [0,4) 4 bytes; at 4 the gaps are
        // [0,8) and [10,14); 3 (3 bytes) goes to the smaller one.
        let p = Prepared::new(&[r(0, 4, 8), r(0, 9, 2), r(0, 4, 4), r(4, 9, 3)], 1).expect("valid");
        let (offsets, peak) = place(&p);
        p.assert_valid(&offsets, peak);
        assert_eq!(offsets, vec![0, 12, 8, 0]);
        assert_eq!(peak, 14);
    }

    #[test]
    fn a_sweep_above_a_base_stays_above_it_and_leaves_the_others() {
        let ranges: Vec<LiveRange> = (0..60u64)
            .map(|i| r(i % 17, i % 17 + 1 + i % 5, 1 + i % 7))
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let which: Vec<usize> = (0..p.items.len()).filter(|i| i % 2 == 0).collect();
        let mut offsets = vec![u64::MAX; p.items.len()];
        let top = place_above(&p, &which, 100, &mut offsets);
        for (i, &o) in offsets.iter().enumerate() {
            if i % 2 == 0 {
                assert!(o >= 100 && o + p.items[i].size <= top, "item {i} at {o}");
            } else {
                assert_eq!(o, u64::MAX, "item {i} untouched");
            }
        }
        // The placed ones do not overlap each other.
        for &i in &which {
            for &j in &which {
                let (x, y) = (&p.items[i], &p.items[j]);
                if i < j && x.a < y.b && y.a < x.b {
                    assert!(
                        offsets[i] + x.size <= offsets[j] || offsets[j] + y.size <= offsets[i],
                        "{i} and {j} overlap"
                    );
                }
            }
        }
    }

    #[test]
    fn sweep_placements_are_valid_on_random_instances() {
        let mut rng = crate::seeded::Rng::new(11);
        for _ in 0..2000 {
            let n = 1 + rng.index(60);
            let ranges: Vec<LiveRange> = (0..n)
                .map(|_| {
                    let start = rng.index(40) as u64;
                    r(
                        start,
                        start + 1 + rng.index(15) as u64,
                        1 + rng.index(20) as u64,
                    )
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            let (offsets, peak) = place(&p);
            p.assert_valid(&offsets, peak);
            assert!(peak >= p.lower_bound);
            assert_eq!(peak, p.peak_of(&offsets));
        }
    }
}
