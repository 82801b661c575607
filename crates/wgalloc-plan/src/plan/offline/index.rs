//! A static index of which items are live at a common time, built once per problem.
//!
//! Item `j` overlaps item `i` (sections `[a, b)`) exactly when `j` covers section `a`,
//! or `j` starts strictly inside `(a, b)`. The first set is a stabbing query on a
//! segment tree whose nodes list the items that cover them canonically (each covering
//! item sits on exactly one node of the root-to-leaf path); the second is a contiguous
//! slice of the items sorted by first section. A query costs `O(log T + answers)`, and
//! the index takes `O(n log T)` memory: no per-pair lists.

use std::sync::Mutex;

use super::elementary::for_each_cover;
use super::prepared::Prepared;

/// Items by time, for overlap queries.
#[derive(Debug)]
pub(crate) struct OverlapIndex {
    /// Leaves of the segment tree (a power of two, at least the section count).
    leaves: usize,
    /// `node_items[node_start[v]..node_start[v + 1]]`: items stored at node `v`.
    node_start: Vec<u32>,
    node_items: Vec<u32>,
    /// Items sorted by first section, and for each section where its items begin.
    by_start: Vec<u32>,
    start_at: Vec<u32>,
    /// The memory of the last [`MovableSpans`] dropped, for the next one to reuse
    /// ([`MovableSpans::new`]).
    spare_spans: Mutex<Option<SpanSlots>>,
}

impl OverlapIndex {
    /// Builds the index for every item of the problem.
    pub fn new(p: &Prepared) -> OverlapIndex {
        let leaves = p.sections.max(1).next_power_of_two();
        let mut count = vec![0u32; 2 * leaves + 1];
        for it in &p.items {
            for_each_cover(leaves, it.a as usize, it.b as usize, |v| count[v] += 1);
        }
        let mut node_start = vec![0u32; 2 * leaves + 1];
        for v in 0..2 * leaves {
            node_start[v + 1] = node_start[v] + count[v];
        }
        let mut fill = node_start.clone();
        let mut node_items = vec![0u32; node_start[2 * leaves] as usize];
        for (i, it) in p.items.iter().enumerate() {
            for_each_cover(leaves, it.a as usize, it.b as usize, |v| {
                node_items[fill[v] as usize] = i as u32;
                fill[v] += 1;
            });
        }
        let mut by_start: Vec<u32> = (0..p.items.len() as u32).collect();
        by_start.sort_by_key(|&i| p.items[i as usize].a);
        let mut start_at = vec![0u32; p.sections + 2];
        for it in &p.items {
            start_at[it.a as usize + 1] += 1;
        }
        for s in 0..=p.sections {
            start_at[s + 1] += start_at[s];
        }
        OverlapIndex {
            leaves,
            node_start,
            node_items,
            by_start,
            start_at,
            spare_spans: Mutex::new(None),
        }
    }

    /// The bytes a [`MovableSpans`] over this index takes ([`SpanSlots`]: a span and
    /// its position per node slot, O(n log T), and a span and two positions per
    /// item), so that a caller can tell whether a second one fits beside the first.
    /// O(1).
    pub fn spans_bytes(&self) -> usize {
        let span = std::mem::size_of::<Span>();
        let position = std::mem::size_of::<u32>();
        let per_slot = span + position;
        let per_item = span + 2 * position;
        self.node_items
            .len()
            .saturating_mul(per_slot)
            .saturating_add(self.by_start.len().saturating_mul(per_item))
    }

    /// Calls `f` with each node on section `a`'s path from its leaf to the root and
    /// its slot (a range of `node_items`): the items stored there are those covering
    /// `a`.
    #[inline]
    fn for_each_path_slot(&self, a: u32, mut f: impl FnMut(usize, std::ops::Range<usize>)) {
        let mut v = a as usize + self.leaves;
        while v >= 1 {
            f(
                v,
                self.node_start[v] as usize..self.node_start[v + 1] as usize,
            );
            v >>= 1;
        }
    }

    /// The positions in `by_start` of the items whose first section is inside
    /// `(a, b)` (`a < b`).
    #[inline]
    fn started_inside(&self, a: u32, b: u32) -> std::ops::Range<usize> {
        self.start_at[a as usize + 1] as usize..self.start_at[b as usize] as usize
    }

    /// Each item's position in `by_start`.
    fn start_positions(&self) -> Vec<u32> {
        let mut start_pos = vec![0u32; self.by_start.len()];
        for (pos, &i) in self.by_start.iter().enumerate() {
            start_pos[i as usize] = pos as u32;
        }
        start_pos
    }

    /// Calls `f` once for every item other than `i` live at a common time with it, and
    /// returns how many it reported.
    pub fn for_each_overlapping(&self, p: &Prepared, i: usize, f: impl FnMut(usize)) -> u64 {
        let it = &p.items[i];
        self.for_each_in(it.a, it.b, Some(i), f)
    }

    /// Calls `f` once for every item (but `skip`) live in some section of `[a, b)`
    /// (`a < b`), and returns how many it reported.
    pub fn for_each_in(
        &self,
        a: u32,
        b: u32,
        skip: Option<usize>,
        mut f: impl FnMut(usize),
    ) -> u64 {
        let mut seen = 0u64;
        let mut report = |items: &[u32]| {
            for &j in items {
                if Some(j as usize) != skip {
                    f(j as usize);
                    seen += 1;
                }
            }
        };
        self.for_each_path_slot(a, |_, slot| report(&self.node_items[slot]));
        report(self.by_start.get(self.started_inside(a, b)).unwrap_or(&[]));
        seen
    }
}

/// The offset ranges of the placed items, stored where the index lists each item: at
/// its canonical nodes (each node's placed items packed at the front of its slot, in
/// the order they were placed) and at its place among the items by first section (an
/// item not yet placed there has the empty range `(0, 0)` and is skipped). The placed
/// items live in a range are so read from contiguous memory instead of item by item.
///
/// Placing an item costs O(log T) (its canonical nodes); a query costs O(log T) plus
/// the placed items it reports plus the items that start inside the range.
#[derive(Debug, Clone)]
pub(crate) struct PlacedSpans<'a> {
    index: &'a OverlapIndex,
    /// Laid out as `index.node_items`; node `v`'s placed items are the first
    /// `node_fill[v]` of its slot.
    node_spans: Vec<(u64, u64)>,
    node_fill: Vec<u32>,
    /// Parallel to `index.by_start`.
    start_spans: Vec<(u64, u64)>,
    /// Item to its position in `index.by_start`.
    start_pos: Vec<u32>,
}

impl<'a> PlacedSpans<'a> {
    /// No item placed yet.
    pub fn new(index: &'a OverlapIndex) -> PlacedSpans<'a> {
        PlacedSpans {
            index,
            node_spans: vec![(0, 0); index.node_items.len()],
            node_fill: vec![0; index.node_start.len()],
            start_spans: vec![(0, 0); index.by_start.len()],
            start_pos: index.start_positions(),
        }
    }

    /// Records item `i` (sections `[a, b)`, the item's own) at `[start, end)`
    /// (`start < end`). Each item is placed once.
    pub fn place(&mut self, i: usize, a: u32, b: u32, start: u64, end: u64) {
        let index = self.index;
        for_each_cover(index.leaves, a as usize, b as usize, |v| {
            let at = index.node_start[v] + self.node_fill[v];
            debug_assert!(at < index.node_start[v + 1], "node {v} over-filled");
            self.node_spans[at as usize] = (start, end);
            self.node_fill[v] += 1;
        });
        self.start_spans[self.start_pos[i] as usize] = (start, end);
    }

    /// Pushes onto `out` the range of every placed item live in some section of
    /// `[a, b)` (`a < b`).
    pub fn placed_in(&self, a: u32, b: u32, out: &mut Vec<(u64, u64)>) {
        let index = self.index;
        index.for_each_path_slot(a, |v, slot| {
            // The node's placed items are the first `node_fill[v]` of its slot.
            let placed = slot.start..slot.start + self.node_fill[v] as usize;
            out.extend_from_slice(&self.node_spans[placed]);
        });
        if let Some(spans) = self.start_spans.get(index.started_inside(a, b)) {
            // Copied whole, then the unplaced (empty) ones squeezed out without a
            // branch per range.
            let from = out.len();
            out.extend_from_slice(spans);
            let mut kept = from;
            for at in from..out.len() {
                let span = out[at];
                out[kept] = span;
                kept += usize::from(span.1 != 0);
            }
            out.truncate(kept);
        }
    }
}

/// One placed item as [`MovableSpans`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Span {
    /// Offset of the item.
    pub offset: u64,
    /// One past its last byte; 0 while the item is not placed.
    pub top: u64,
    /// What moving the item costs, as its owner weighs it.
    pub weight: u64,
    /// The item's position.
    pub item: u32,
}

/// The offset ranges of the placed items, as [`PlacedSpans`], but an item may also be
/// lifted and placed again: each item has a fixed slot at each of its canonical nodes
/// and at its place among the items by first section (a slot of an item not placed
/// has `top` 0), so a query reads contiguous memory (every slot of the nodes on the
/// path, placed or not) and an update writes O(log T) slots.
#[derive(Debug)]
pub(crate) struct MovableSpans<'a> {
    index: &'a OverlapIndex,
    slots: SpanSlots,
}

/// The memory of [`MovableSpans`]: O(n log T) spans of 32 bytes (hundreds of MB at a
/// million items), kept by the index when a [`MovableSpans`] is dropped so that the
/// next one (the ejection repair's next round) writes into memory already mapped: on
/// a million malloc-like buffers, mapping it afresh (the kernel zeroing each page on
/// its first touch) took about a second of each round's time.
#[derive(Debug, Default)]
pub(crate) struct SpanSlots {
    /// Laid out as `index.node_items`.
    node_spans: Vec<Span>,
    /// Parallel to `index.by_start`.
    start_spans: Vec<Span>,
    /// `slots[slot_start[i]..slot_start[i + 1]]`: item `i`'s slots in `node_spans`.
    slot_start: Vec<u32>,
    slots: Vec<u32>,
    /// Item to its position in `index.by_start`.
    start_pos: Vec<u32>,
}

impl SpanSlots {
    /// The slots of every item of `index`, none placed.
    fn new(index: &OverlapIndex) -> SpanSlots {
        let n = index.by_start.len();
        let mut count = vec![0u32; n + 1];
        for &i in &index.node_items {
            count[i as usize + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let slot_start = count.clone();
        let mut fill = count;
        let mut slots = vec![0u32; index.node_items.len()];
        for (at, &i) in index.node_items.iter().enumerate() {
            slots[fill[i as usize] as usize] = at as u32;
            fill[i as usize] += 1;
        }
        let unplaced = |&item: &u32| Span {
            item,
            ..Span::default()
        };
        SpanSlots {
            node_spans: index.node_items.iter().map(unplaced).collect(),
            start_spans: index.by_start.iter().map(unplaced).collect(),
            slot_start,
            slots,
            start_pos: index.start_positions(),
        }
    }

    /// Every item not placed again (the slots' layout is the index's, unchanged).
    fn clear(&mut self) {
        for span in self
            .node_spans
            .iter_mut()
            .chain(self.start_spans.iter_mut())
        {
            *span = Span {
                item: span.item,
                ..Span::default()
            };
        }
    }
}

impl<'a> MovableSpans<'a> {
    /// No item placed yet. Reuses the memory of the index's last dropped
    /// [`MovableSpans`] where there is one.
    pub fn new(index: &'a OverlapIndex) -> MovableSpans<'a> {
        let spare = index
            .spare_spans
            .lock()
            .map(|mut spare| spare.take())
            .unwrap_or(None);
        let slots = match spare {
            Some(mut slots) => {
                slots.clear();
                slots
            }
            None => SpanSlots::new(index),
        };
        MovableSpans { index, slots }
    }

    /// Records item `i` at `[offset, top)` with `weight` (`top` 0: not placed).
    pub fn set(&mut self, i: usize, offset: u64, top: u64, weight: u64) {
        let span = Span {
            offset,
            top,
            weight,
            item: i as u32,
        };
        let slots = &mut self.slots;
        let mine = slots.slot_start[i] as usize..slots.slot_start[i + 1] as usize;
        for &at in &slots.slots[mine] {
            slots.node_spans[at as usize] = span;
        }
        slots.start_spans[slots.start_pos[i] as usize] = span;
    }

    /// Pushes onto `out` every placed item but `skip` live in some section of `[a, b)`
    /// (`a < b`).
    pub fn placed_in(&self, a: u32, b: u32, skip: usize, out: &mut Vec<Span>) {
        let index = self.index;
        let keep = |s: &&Span| s.top != 0 && s.item as usize != skip;
        index.for_each_path_slot(a, |_, slot| {
            out.extend(self.slots.node_spans[slot].iter().filter(keep))
        });
        if let Some(spans) = self.slots.start_spans.get(index.started_inside(a, b)) {
            out.extend(spans.iter().filter(keep));
        }
    }
}

impl Drop for MovableSpans<'_> {
    /// Leaves the memory to the index for the next [`MovableSpans`] (where a lock
    /// poisoned by a panic elsewhere refuses it, the memory is freed).
    fn drop(&mut self) {
        if let Ok(mut spare) = self.index.spare_spans.lock() {
            *spare = Some(std::mem::take(&mut self.slots));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::LiveRange;

    #[test]
    fn placed_spans_report_exactly_the_placed_overlapping_items() {
        let ranges: Vec<LiveRange> = (0..400u64)
            .map(|i| LiveRange {
                start: (i * 53) % 157,
                end: (i * 53) % 157 + 1 + (i * 7) % 60,
                size: 1 + i % 9,
            })
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let mut spans = PlacedSpans::new(&index);
        let mut placed = vec![None; p.items.len()];
        // Place every third item, in a scattered order, at a made-up offset.
        for k in (0..p.items.len()).filter(|k| k % 3 != 1) {
            let i = (k * 97) % p.items.len();
            if placed[i].is_none() {
                let it = &p.items[i];
                let start = (i as u64) * 11;
                placed[i] = Some((start, start + it.size));
                spans.place(i, it.a, it.b, start, start + it.size);
            }
        }
        let mut got = Vec::new();
        for i in 0..p.items.len() {
            let x = &p.items[i];
            got.clear();
            spans.placed_in(x.a, x.b, &mut got);
            got.sort_unstable();
            let mut expected: Vec<(u64, u64)> = (0..p.items.len())
                .filter(|&j| p.items[j].a < x.b && x.a < p.items[j].b)
                .filter_map(|j| placed[j])
                .collect();
            expected.sort_unstable();
            assert_eq!(got, expected, "item {i}");
        }
    }

    #[test]
    fn spans_bytes_is_the_memory_of_the_spans_slots() {
        for n in [1u64, 50, 700] {
            let ranges: Vec<LiveRange> = (0..n)
                .map(|i| LiveRange {
                    start: (i * 29) % 97,
                    end: (i * 29) % 97 + 1 + (i * 11) % 70,
                    size: 1 + i % 5,
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            let index = OverlapIndex::new(&p);
            let slots = SpanSlots::new(&index);
            let held = |len: usize, each: usize| len * each;
            let span = std::mem::size_of::<Span>();
            let actual = held(slots.node_spans.len(), span)
                + held(slots.start_spans.len(), span)
                + held(slots.slots.len(), 4)
                + held(slots.start_pos.len(), 4)
                + held(slots.slot_start.len(), 4);
            // The item count's one extra `slot_start` entry aside, exactly.
            assert_eq!(index.spans_bytes() + 4, actual, "{n} items");
        }
    }

    #[test]
    fn movable_spans_report_exactly_the_placed_overlapping_items_after_moves() {
        let ranges: Vec<LiveRange> = (0..300u64)
            .map(|i| LiveRange {
                start: (i * 41) % 131,
                end: (i * 41) % 131 + 1 + (i * 13) % 50,
                size: 1 + i % 7,
            })
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        // The second round's spans reuse the memory the first's left to the index:
        // they start with nothing placed all the same.
        for round in 0..2u64 {
            let mut spans = MovableSpans::new(&index);
            assert_eq!(
                index.spare_spans.lock().map(|s| s.is_some()).ok(),
                Some(false)
            );
            let mut got = Vec::new();
            for i in 0..p.items.len() {
                spans.placed_in(p.items[i].a, p.items[i].b, i, &mut got);
            }
            assert!(
                got.is_empty(),
                "round {round}: {} placed at first",
                got.len()
            );
            let mut at: Vec<Option<(u64, u64, u64)>> = vec![None; p.items.len()];
            // Place, move and lift items in a scattered order.
            for step in 0..3 * p.items.len() {
                let i = (step * 89) % p.items.len();
                at[i] = if step % 5 == 4 {
                    None
                } else {
                    let o = (step as u64 * 17 + round * 5) % 1000;
                    Some((o, o + p.items[i].size, step as u64 + round))
                };
                let (o, t, w) = at[i].unwrap_or((0, 0, 0));
                spans.set(i, o, t, w);
            }
            for i in 0..p.items.len() {
                let x = &p.items[i];
                got.clear();
                spans.placed_in(x.a, x.b, i, &mut got);
                let mut got: Vec<(usize, u64, u64, u64)> = got
                    .iter()
                    .map(|s| (s.item as usize, s.offset, s.top, s.weight))
                    .collect();
                got.sort_unstable();
                let expected: Vec<(usize, u64, u64, u64)> = (0..p.items.len())
                    .filter(|&j| j != i && p.items[j].a < x.b && x.a < p.items[j].b)
                    .filter_map(|j| at[j].map(|(o, t, w)| (j, o, t, w)))
                    .collect();
                assert_eq!(got, expected, "round {round}, item {i}");
            }
            drop(spans);
            assert_eq!(
                index.spare_spans.lock().map(|s| s.is_some()).ok(),
                Some(true)
            );
        }
    }

    #[test]
    fn index_reports_exactly_the_overlapping_items_once() {
        let ranges: Vec<LiveRange> = (0..300u64)
            .map(|i| LiveRange {
                start: (i * 37) % 101,
                end: (i * 37) % 101 + 1 + (i * 11) % 40,
                size: 1,
            })
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        for i in 0..p.items.len() {
            let mut seen = Vec::new();
            let count = index.for_each_overlapping(&p, i, |j| seen.push(j));
            seen.sort_unstable();
            let x = &p.items[i];
            let expected: Vec<usize> = (0..p.items.len())
                .filter(|&j| j != i && p.items[j].a < x.b && x.a < p.items[j].b)
                .collect();
            assert_eq!(seen, expected, "item {i}");
            assert_eq!(count, expected.len() as u64);
        }
    }
}
