//! A live-range problem made ready for the strategies: sizes aligned, time compressed to
//! sections, the live-size profile and each range's busiest step precomputed.

use super::LiveRange;
use crate::graph::TensorId;
use crate::plan::{align_up, PlanError};

/// One range as the strategies see it: sections `[a, b)` of the compressed time axis and
/// an aligned size. Only ranges with a non-empty lifetime and a non-zero size become items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Item {
    /// Position of the range in the caller's slice.
    pub index: usize,
    /// First section the range covers.
    pub a: u32,
    /// One past the last section it covers.
    pub b: u32,
    /// Aligned size (> 0).
    pub size: u64,
    /// Lifetime length in the caller's time units.
    pub len: u64,
    /// The caller's start time.
    pub start: u64,
}

/// The share of the area (size times lifetime) the smallest size octaves may hold and
/// still be one size class ([`Prepared::class_floor`]), as (numerator, denominator).
/// They take what the larger buffers leave, a handful of bytes each; as one class the
/// class order's sweep builds one tree for them and passes the larger classes' ends
/// once, not once an octave. On a million malloc-like buffers that makes octaves 4-8
/// (16-511 B: a quarter of the buffers, 0.4% of the area) one class, 15 classes instead
/// of 19, and the class order by the sweep took 16 s instead of 23 s (seed 1), the same
/// plan. The greedy class order on 100k buffers, seeds 1-3, six families: no plan more
/// than 2e-5 of the bound higher at 1/256, 1e-4 at 1/64.
const TAIL_AREA: (u128, u128) = (1, 128);

/// What makes the classes of an order by classes (each class in start order): the
/// class sweep ([`super::class_sweep`]) places any such order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassKey {
    /// Size octaves, the smallest one class: [`Prepared::size_class`].
    Size,
    /// Pairs of area octaves: [`area_class`].
    Area,
}

/// The area class of `item`: the octave of its area (size times lifetime in the
/// caller's units) halved, so that a class spans a factor of four. O(1).
pub(crate) fn area_class(item: &Item) -> u32 {
    (u128::from(item.size) * u128::from(item.len).max(1)).ilog2() / 2
}

/// The prepared problem. Every sum of item sizes fits in a `u64` (checked by
/// [`Prepared::new`]), so heights and offsets built from them cannot overflow.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// Ranges that need memory, in the caller's order.
    pub items: Vec<Item>,
    /// How many ranges the caller gave (items plus empty ones, which get offset 0).
    pub count: usize,
    /// Number of time sections.
    pub sections: usize,
    /// Total size live in each section.
    pub live: Vec<u64>,
    /// The largest total size live at one time: no plan peaks below it.
    pub lower_bound: u64,
    /// [`Prepared::overlap_pairs`], counted once (the items do not change).
    pairs: std::sync::OnceLock<u64>,
    /// [`Prepared::class_floor`], found once.
    floor: std::sync::OnceLock<u32>,
}

impl Prepared {
    /// Aligns sizes, compresses time and computes the live profile.
    ///
    /// # Errors
    /// [`PlanError::BadAlignment`] unless `alignment` is a power of two;
    /// [`PlanError::SizeOverflow`] (naming the range index as the tensor) if an aligned
    /// size or the sum of all sizes overflows 64 bits.
    pub fn new(ranges: &[LiveRange], alignment: u64) -> Result<Prepared, PlanError> {
        if !alignment.is_power_of_two() {
            return Err(PlanError::BadAlignment { alignment });
        }
        let overflow = |index: usize| PlanError::SizeOverflow {
            tensor: TensorId(u32::try_from(index).unwrap_or(u32::MAX)),
        };
        let mut points: Vec<u64> = Vec::with_capacity(ranges.len() * 2);
        let mut total = 0u64;
        for (index, r) in ranges.iter().enumerate() {
            if r.start < r.end && r.size > 0 {
                let size = align_up(r.size, alignment).ok_or_else(|| overflow(index))?;
                total = total.checked_add(size).ok_or_else(|| overflow(index))?;
                points.push(r.start);
                points.push(r.end);
            }
        }
        points.sort_unstable();
        points.dedup();
        let section = |t: u64| points.partition_point(|&p| p < t) as u32;
        let mut items = Vec::new();
        for (index, r) in ranges.iter().enumerate() {
            if r.start < r.end && r.size > 0 {
                let size = align_up(r.size, alignment).ok_or_else(|| overflow(index))?;
                items.push(Item {
                    index,
                    a: section(r.start),
                    b: section(r.end),
                    size,
                    len: r.end - r.start,
                    start: r.start,
                });
            }
        }
        let sections = points.len().saturating_sub(1);
        let mut delta = vec![0i128; sections + 1];
        for it in &items {
            delta[it.a as usize] += i128::from(it.size);
            delta[it.b as usize] -= i128::from(it.size);
        }
        let mut live = Vec::with_capacity(sections);
        let mut running = 0i128;
        for d in delta.iter().take(sections) {
            running += d;
            // The running sum is a sum of sizes whose total fits in u64 (checked above).
            live.push(u64::try_from(running).unwrap_or(u64::MAX));
        }
        let lower_bound = live.iter().copied().max().unwrap_or(0);
        Ok(Prepared {
            items,
            count: ranges.len(),
            sections,
            live,
            lower_bound,
            pairs: std::sync::OnceLock::new(),
            floor: std::sync::OnceLock::new(),
        })
    }

    /// The highest top (`offset + size`) of a placement (offsets per item position);
    /// 0 for no items.
    pub fn peak_of(&self, offsets: &[u64]) -> u64 {
        self.items
            .iter()
            .zip(offsets)
            .map(|(it, &o)| o + it.size)
            .max()
            .unwrap_or(0)
    }

    /// For each item, the total size live at its busiest section (a sparse-table range
    /// maximum over the live profile: O(T log T + n)).
    pub fn breadths(&self) -> Vec<u64> {
        let mut table: Vec<Vec<u64>> = vec![self.live.clone()];
        let mut width = 1usize;
        while width * 2 <= self.sections {
            let prev = &table[table.len() - 1];
            let next: Vec<u64> = (0..=self.sections - width * 2)
                .map(|i| prev[i].max(prev[i + width]))
                .collect();
            table.push(next);
            width *= 2;
        }
        self.items
            .iter()
            .map(|it| {
                let (a, b) = (it.a as usize, it.b as usize);
                let level = (usize::BITS - 1 - (b - a).leading_zeros()) as usize;
                let row = &table[level];
                row[a].max(row[b - (1 << level)])
            })
            .collect()
    }

    /// For each item, the total size of the items whose lifetimes overlap it (itself
    /// included), in O(n log n) by prefix sums over ends and starts.
    pub fn conflict_sizes(&self) -> Vec<u64> {
        self.conflict_weights(|it| it.size)
    }

    /// Whether at least 3/4 of the time sections are full at `capacity` (the total
    /// live there is exactly it): a tiling of the capacity, or close to one. There the
    /// search branches on tight corners ([`super::search`]) and `best` expects the
    /// capacity to be reachable.
    pub fn mostly_full_at(&self, capacity: u64) -> bool {
        let full = self.live.iter().filter(|&&l| l == capacity).count();
        4 * full >= 3 * self.sections
    }

    /// The size class of an item of `size` bytes in the class order
    /// ([`by_size_class`](super::greedy::by_size_class)): its octave (the highest set
    /// bit), where the octaves at and below [`Prepared::class_floor`] are one class.
    pub fn size_class(&self, size: u64) -> u32 {
        size.ilog2().max(self.class_floor())
    }

    /// One past the last item of `order` from position `start` on that shares the size
    /// class of the item at `start` (`start < order.len()`): the end of its class in
    /// an order that keeps each class together. O(log n).
    pub fn class_end(&self, order: &[usize], start: usize) -> usize {
        self.class_end_by(ClassKey::Size, order, start)
    }

    /// [`Prepared::class_end`] for the classes of `key`. O(log n).
    pub fn class_end_by(&self, key: ClassKey, order: &[usize], start: usize) -> usize {
        let class = self.class_of(key, &self.items[order[start]]);
        start + order[start..].partition_point(|&i| self.class_of(key, &self.items[i]) == class)
    }

    /// The class of `item` by `key`: its size class ([`Prepared::size_class`]) or its
    /// area class ([`area_class`]).
    pub fn class_of(&self, key: ClassKey, item: &Item) -> u32 {
        match key {
            ClassKey::Size => self.size_class(item.size),
            ClassKey::Area => area_class(item),
        }
    }

    /// The highest size octave holding items such that the items of it and every
    /// smaller octave hold at most [`TAIL_AREA`] of the area (size times lifetime); 0
    /// where the smallest octave alone holds more. O(n) once, then cached.
    pub fn class_floor(&self) -> u32 {
        *self.floor.get_or_init(|| {
            let mut per_octave = [0u128; 64];
            for it in &self.items {
                per_octave[it.size.ilog2() as usize] += u128::from(it.size) * u128::from(it.len);
            }
            let total: u128 = per_octave.iter().sum();
            let mut held = 0u128;
            let mut floor = 0;
            for (octave, &area) in per_octave.iter().enumerate() {
                held += area;
                if held * TAIL_AREA.1 > total * TAIL_AREA.0 {
                    break;
                }
                if area > 0 {
                    floor = octave as u32;
                }
            }
            floor
        })
    }

    /// How many ordered pairs of distinct items are live at a common time (the work of
    /// one greedy placement is about this plus the item count). O(n log n) the first
    /// time, then kept.
    pub fn overlap_pairs(&self) -> u64 {
        *self.pairs.get_or_init(|| {
            let with_self = self
                .conflict_weights(|_| 1)
                .iter()
                .fold(0u64, |acc, &c| acc.saturating_add(c));
            with_self.saturating_sub(self.items.len() as u64)
        })
    }

    /// For each item, the sum of `weight` over the items live with it (itself included).
    fn conflict_weights(&self, weight: impl Fn(&Item) -> u64) -> Vec<u64> {
        let total: u64 = self
            .items
            .iter()
            .fold(0, |acc, it| acc.saturating_add(weight(it)));
        let mut by_end: Vec<(u32, u64)> = self.items.iter().map(|it| (it.b, weight(it))).collect();
        let mut by_start: Vec<(u32, u64)> =
            self.items.iter().map(|it| (it.a, weight(it))).collect();
        by_end.sort_unstable();
        by_start.sort_unstable();
        let prefix = |v: &[(u32, u64)]| -> Vec<u64> {
            let mut acc = 0u64;
            let mut out = vec![0u64];
            for &(_, s) in v {
                acc = acc.saturating_add(s);
                out.push(acc);
            }
            out
        };
        let end_prefix = prefix(&by_end);
        let start_prefix = prefix(&by_start);
        self.items
            .iter()
            .map(|it| {
                // Ranges that end at or before this one starts, and those that start at
                // or after it ends, do not overlap it.
                let ended = end_prefix[by_end.partition_point(|&(b, _)| b <= it.a)];
                let later_from = by_start.partition_point(|&(a, _)| a < it.b);
                let later = start_prefix[by_start.len()] - start_prefix[later_from];
                total.saturating_sub(ended).saturating_sub(later)
            })
            .collect()
    }
}

/// Test check shared by the strategies' tests.
#[cfg(test)]
impl Prepared {
    /// Panics unless `offsets` (per item position) keep every item's top at or below
    /// `peak` and no two items live at a common time share a byte.
    pub(crate) fn assert_valid(&self, offsets: &[u64], peak: u64) {
        for (i, x) in self.items.iter().enumerate() {
            assert!(offsets[i] + x.size <= peak, "item {i} above the peak");
            for (j, y) in self.items.iter().enumerate().skip(i + 1) {
                let live_together = x.a < y.b && y.a < x.b;
                let apart = offsets[i] + x.size <= offsets[j] || offsets[j] + y.size <= offsets[i];
                assert!(!live_together || apart, "{i} and {j} overlap");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    #[test]
    fn profile_bound_and_breadth_follow_the_live_sizes() {
        let p = Prepared::new(
            &[r(0, 3, 4), r(3, 9, 4), r(0, 9, 4), r(9, 21, 4), r(0, 21, 4)],
            1,
        )
        .expect("valid");
        assert_eq!(p.lower_bound, 12);
        assert_eq!(p.breadths(), vec![12, 12, 12, 8, 12]);
        assert_eq!(p.conflict_sizes(), vec![12, 12, 16, 8, 20]);
    }

    #[test]
    fn the_smallest_octaves_are_one_class_while_they_hold_little_area() {
        // Octaves 4, 5 and 6 hold 16 + 32 + 64 = 112 of 112 + 2^20 * 10 (each live 10
        // steps): far below 1/128, so they are one class; octave 20 is its own.
        let p = Prepared::new(
            &[r(0, 10, 16), r(0, 10, 32), r(0, 10, 64), r(0, 10, 1 << 20)],
            1,
        )
        .expect("valid");
        assert_eq!(p.class_floor(), 6);
        assert_eq!(p.size_class(16), 6);
        assert_eq!(p.size_class(64), 6);
        assert_eq!(p.size_class(100), 6);
        assert_eq!(p.size_class(128), 7);
        assert_eq!(p.size_class(1 << 20), 20);
        // Above 1/128 of the area an octave stays a class of its own: 64 of 64 + 4,096.
        let p = Prepared::new(&[r(0, 1, 16), r(0, 1, 64), r(0, 1, 4096)], 1).expect("valid");
        assert_eq!(p.class_floor(), 4);
        assert_eq!(p.size_class(16), 4);
        assert_eq!(p.size_class(64), 6);
        // Equal areas: every octave its own class.
        let p = Prepared::new(&[r(0, 4, 16), r(0, 2, 32), r(0, 1, 64)], 1).expect("valid");
        assert_eq!(p.class_floor(), 0);
        assert_eq!(p.size_class(16), 4);
        assert_eq!(p.size_class(32), 5);
    }

    #[test]
    fn sizes_are_aligned_and_empty_ranges_dropped() {
        let p = Prepared::new(&[r(0, 2, 5), r(1, 1, 8), r(1, 3, 0)], 32).expect("valid");
        assert_eq!(p.items.len(), 1);
        assert_eq!(p.items[0].size, 32);
        assert_eq!(p.count, 3);
    }

    #[test]
    fn overflowing_total_is_an_error() {
        let err = Prepared::new(&[r(0, 2, u64::MAX - 4), r(0, 2, 8)], 1);
        assert!(matches!(
            err,
            Err(PlanError::SizeOverflow {
                tensor: TensorId(1)
            })
        ));
        assert!(matches!(
            Prepared::new(&[r(0, 2, 1)], 3),
            Err(PlanError::BadAlignment { alignment: 3 })
        ));
    }
}
