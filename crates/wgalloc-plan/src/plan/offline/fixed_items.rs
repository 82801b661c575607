//! The class sweep's fixed items (those of the classes placed so far), kept from one
//! class to the next: the elementary boundaries of their offsets
//! ([`elementary`](super::elementary)) and each item's elementary ranges, in start
//! order and in end order.
//!
//! [`class_sweep`](super::class_sweep) builds its segment tree afresh for every class
//! from these. Rebuilt for each class, they took the boundaries sorted again, two
//! binary searches and a random read of the item per fixed item, and the fixed items
//! sorted by start and by end through their positions. Here a class is merged in: its
//! boundaries into the sorted boundaries (every old boundary stays, so an old range's
//! indices move by a monotone map), its items into the two orders. O(F + c log(F +
//! c)) for F fixed items and c new ones: the merges sequential, the remap's reads of
//! the index map and the new items' sorts and searches not.

use super::elementary;
use super::prepared::Prepared;

/// A fixed item as the tree reads it: its time sections `[a, b)` and its elementary
/// ranges `[l, r)` (boundary indices of its offset and its top).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedSpan {
    /// First time section.
    pub a: u32,
    /// One past the last time section.
    pub b: u32,
    /// Index of the boundary at its offset.
    pub l: u32,
    /// Index of the boundary at its top (above `l`: items have a size).
    pub r: u32,
}

/// The fixed items' boundaries and spans (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct FixedItems {
    /// Their offsets and tops, with 0 and `u64::MAX`, sorted and without repeats:
    /// elementary range `k` is `[bounds[k], bounds[k + 1])`.
    pub bounds: Vec<u64>,
    /// Their spans by start (of equal starts, the earlier class first, then the
    /// class's own order).
    pub by_start: Vec<FixedSpan>,
    /// Their spans by end.
    pub by_end: Vec<FixedSpan>,
}

impl FixedItems {
    /// No items fixed yet, room for `capacity` (so that adding classes never moves
    /// the spans).
    pub fn with_capacity(capacity: usize) -> Self {
        FixedItems {
            bounds: vec![0, u64::MAX],
            by_start: Vec::with_capacity(capacity),
            by_end: Vec::with_capacity(capacity),
        }
    }

    /// How many items are fixed.
    pub fn len(&self) -> usize {
        self.by_start.len()
    }

    /// Fixes the items `class` (positions in start order) at `offsets`.
    /// O(F + c log(F + c)) for F items fixed before and c in `class`.
    pub fn add(&mut self, p: &Prepared, class: &[usize], offsets: &[u64]) {
        debug_assert!(class.windows(2).all(|w| p.items[w[0]].a <= p.items[w[1]].a));
        // The class's boundaries (with 0 and u64::MAX, which every state has too).
        let added = elementary::boundaries(p, class, offsets);
        let moved = self.merge_bounds(&added);
        for span in self.by_start.iter_mut().chain(self.by_end.iter_mut()) {
            span.l = moved[span.l as usize];
            span.r = moved[span.r as usize];
        }
        let spans: Vec<FixedSpan> = class
            .iter()
            .map(|&i| {
                let it = &p.items[i];
                let (l, r) = elementary::ranges_of(&self.bounds, offsets[i], it.size);
                FixedSpan {
                    a: it.a,
                    b: it.b,
                    l: l as u32,
                    r: r as u32,
                }
            })
            .collect();
        merge_into(&mut self.by_start, &spans, |s| s.a);
        let mut by_end = spans;
        by_end.sort_by_key(|s| s.b);
        merge_into(&mut self.by_end, &by_end, |s| s.b);
    }

    /// Merges the sorted boundaries `added` (without repeats among them; those equal to
    /// an old one are kept once) into [`FixedItems::bounds`] and returns where each old
    /// boundary index went.
    fn merge_bounds(&mut self, added: &[u64]) -> Vec<u32> {
        let old = std::mem::take(&mut self.bounds);
        let mut bounds = Vec::with_capacity(old.len() + added.len());
        let mut moved = Vec::with_capacity(old.len());
        let mut next = added.iter().peekable();
        for &b in &old {
            while let Some(&&x) = next.peek() {
                if x >= b {
                    break;
                }
                bounds.push(x);
                next.next();
            }
            if next.peek().is_some_and(|&&x| x == b) {
                next.next();
            }
            moved.push(bounds.len() as u32);
            bounds.push(b);
        }
        bounds.extend(next);
        self.bounds = bounds;
        moved
    }
}

/// Merges `new` into `spans`, both sorted by `key` (of equal keys, `spans`' first), in
/// place from the back: no second copy of the fixed items.
fn merge_into(spans: &mut Vec<FixedSpan>, new: &[FixedSpan], key: impl Fn(&FixedSpan) -> u32) {
    let mut old = spans.len();
    spans.extend_from_slice(new);
    let mut left = new.len();
    let mut at = spans.len();
    while left > 0 {
        at -= 1;
        if old > 0 && key(&spans[old - 1]) > key(&new[left - 1]) {
            spans[at] = spans[old - 1];
            old -= 1;
        } else {
            spans[at] = new[left - 1];
            left -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::LiveRange;
    use crate::seeded::Rng;

    /// Fixing classes one at a time gives the boundaries, ranges and orders of
    /// fixing them all at once.
    #[test]
    fn classes_added_one_at_a_time_match_a_rebuild() {
        let mut rng = Rng::new(11);
        for case in 0..200 {
            let n = 1 + rng.below(300) as usize;
            let steps = 1 + rng.below(100);
            let ranges: Vec<LiveRange> = (0..n)
                .map(|_| {
                    let start = rng.below(steps);
                    let octave = rng.below(12);
                    LiveRange {
                        start,
                        end: start + 1 + rng.below(steps),
                        size: 1 + rng.below(1 << octave),
                    }
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            // Offsets on a coarse grid, so that boundaries repeat.
            let offsets: Vec<u64> = (0..p.items.len()).map(|_| rng.below(64) * 64).collect();
            let mut by_start: Vec<usize> = (0..p.items.len()).collect();
            by_start.sort_by_key(|&i| p.items[i].a);
            let classes = 1 + rng.below(6) as usize;
            let mut fixed = FixedItems::with_capacity(p.items.len());
            let mut all: Vec<usize> = Vec::new();
            for c in 0..classes {
                let class: Vec<usize> = by_start
                    .iter()
                    .copied()
                    .filter(|&i| i % classes == c)
                    .collect();
                fixed.add(&p, &class, &offsets);
                all.extend_from_slice(&class);
                all.sort_by_key(|&i| p.items[i].a);
                let bounds = elementary::boundaries(&p, &all, &offsets);
                assert_eq!(fixed.bounds, bounds, "case {case} class {c}");
                let span = |i: usize| {
                    let (l, r) = elementary::ranges_of(&bounds, offsets[i], p.items[i].size);
                    FixedSpan {
                        a: p.items[i].a,
                        b: p.items[i].b,
                        l: l as u32,
                        r: r as u32,
                    }
                };
                let expected: Vec<FixedSpan> = all.iter().map(|&i| span(i)).collect();
                assert_eq!(fixed.by_start, expected, "case {case} class {c}");
                assert_eq!(fixed.len(), all.len());
                let mut expected_by_end = expected.clone();
                expected_by_end.sort_by_key(|s| (s.b, s.a, s.l, s.r));
                let mut by_end = fixed.by_end.clone();
                assert!(by_end.windows(2).all(|w| w[0].b <= w[1].b));
                by_end.sort_by_key(|s| (s.b, s.a, s.l, s.r));
                assert_eq!(by_end, expected_by_end, "case {case} class {c}");
            }
        }
    }
}
