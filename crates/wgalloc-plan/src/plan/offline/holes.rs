//! Greedy by size without overlap lists: the largest buffer first, each at the lowest
//! offset among a bounded set of candidates that never needs the placed buffers live
//! with it.
//!
//! The placed memory is described by two structures:
//!
//! * the **skyline**: for each time section the top of the highest buffer placed
//!   there, kept as maximal runs of sections of equal height in an ordered map;
//! * **holes**: disjoint free rectangles (sections `[t0, t1)`, offsets `[lo, hi)`)
//!   below the skyline. A buffer placed on the skyline over `[a, b)` sits at the
//!   highest top `F` of the runs under it; the free space it closes off below itself
//!   (a histogram hanging from `F` down to each run's top) is cut into disjoint
//!   rectangles, widest at the top (the Cartesian decomposition of the histogram, by a
//!   stack). A buffer placed in a hole at its bottom leaves up to three rectangles:
//!   the hole's whole width above it, and the two sides of its own height.
//!
//! A buffer of size `s` over `[a, b)` goes to the lowest hole that contains `[a, b)`
//! in time and is at least `s` high, else on the skyline (the highest top over
//! `[a, b)`, a range maximum in a segment tree; any such hole is below it, so this is
//! the lowest of the candidates). Holes are stored once, at the
//! lowest node of a segment tree over sections whose range holds them (the nodes
//! above the node of `[a, b)` are the only ones that can hold a containing hole), in
//! one ordered map by (node, lo). A query reads at most [`SCAN_PER_QUERY`] holes on
//! that path (fewer beyond [`FULL_SCAN_ITEMS`] items) (lowest node first, each node's holes from the lowest), dropping holes too low for the current size (sizes only
//! shrink): it is a bounded-work approximation of the exact lowest fit (free space
//! split between two holes, or beyond the scan, is not found).
//!
//! Cost: O(n log n) for the order, each placement O(SCAN_PER_QUERY + log T log H)
//! for the query (H holes, O(n) of them: each placement adds at most three plus one
//! per skyline run it covers, and the runs it covers are removed), plus amortised
//! O(log n) per skyline run: O(n (SCAN_PER_QUERY + log T log n)) in all, independent of
//! how many pairs of buffers are live together; O(n) memory.

use std::collections::BTreeMap;
use std::time::Instant;

use super::prepared::Prepared;

/// Holes a query examines in all (over the nodes from the lowest one holding the
/// item's lifetime up) on up to [`FULL_SCAN_ITEMS`] items: a bound on the work per
/// placement (a fitting hole beyond it is missed).
pub(crate) const SCAN_PER_QUERY: usize = 512;

/// Beyond this many items the scan per query shrinks as `FULL_SCAN_ITEMS / n` (at
/// least [`MIN_SCAN`]), so that the whole scan work stays at most about
/// `SCAN_PER_QUERY * FULL_SCAN_ITEMS + MIN_SCAN * n` (a million malloc-like buffers
/// took 16 s of CPU with the full scan, a hundred thousand 0.6 s).
pub(crate) const FULL_SCAN_ITEMS: usize = 1 << 17;

/// The least scan per query.
const MIN_SCAN: usize = 32;

/// The scan per query on `n` items (see [`FULL_SCAN_ITEMS`]).
fn scan_for(n: usize) -> usize {
    if n <= FULL_SCAN_ITEMS {
        SCAN_PER_QUERY
    } else {
        (SCAN_PER_QUERY * FULL_SCAN_ITEMS / n).max(MIN_SCAN)
    }
}

/// How often (in items placed) [`place_until`] looks at the clock.
const CLOCK_EVERY: usize = 256;

/// A free rectangle: sections `[t0, t1)`, offsets `[lo, hi)`.
#[derive(Debug, Clone, Copy)]
struct Hole {
    t0: u32,
    t1: u32,
    lo: u64,
    hi: u64,
}

/// The free space below the skyline.
struct Holes {
    leaves: usize,
    holes: Vec<Hole>,
    /// (node, lo, hole id) of every live hole,
    /// with the hole's sections and top inline (a scan reads no other memory).
    by_node: BTreeMap<(u32, u64, u32), (u32, u32, u64)>,
    /// Live holes per node (a query skips the empty nodes without a tree lookup).
    count: Vec<u32>,
    /// Reused ids of removed holes.
    free_ids: Vec<u32>,
}

impl Holes {
    fn new(sections: usize) -> Holes {
        Holes {
            leaves: sections.max(1).next_power_of_two(),
            holes: Vec::new(),
            by_node: BTreeMap::new(),
            count: vec![0; 2 * sections.max(1).next_power_of_two()],
            free_ids: Vec::new(),
        }
    }

    /// The lowest node whose range holds sections `[a, b)` (`a < b`).
    fn node(&self, a: u32, b: u32) -> u32 {
        let (mut l, mut r) = (a as usize + self.leaves, b as usize - 1 + self.leaves);
        while l != r {
            l >>= 1;
            r >>= 1;
        }
        l as u32
    }

    fn add(&mut self, hole: Hole, min_size: u64) {
        if hole.t0 >= hole.t1 || hole.hi - hole.lo < min_size {
            return;
        }
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.holes[id as usize] = hole;
                id
            }
            None => {
                self.holes.push(hole);
                (self.holes.len() - 1) as u32
            }
        };
        let node = self.node(hole.t0, hole.t1);
        self.by_node
            .insert((node, hole.lo, id), (hole.t0, hole.t1, hole.hi));
        self.count[node as usize] += 1;
    }

    fn remove(&mut self, id: u32) {
        let h = self.holes[id as usize];
        let node = self.node(h.t0, h.t1);
        self.by_node.remove(&(node, h.lo, id));
        self.count[node as usize] -= 1;
        self.free_ids.push(id);
    }

    /// The lowest examined hole that holds `size` bytes over `[a, b)`, looking only
    /// below `below` (the skyline's candidate); drops the holes it meets that are
    /// lower than `size` (no later item is larger).
    fn find(
        &mut self,
        a: u32,
        b: u32,
        size: u64,
        below: u64,
        scan: usize,
        stale: &mut Vec<u32>,
    ) -> Option<u32> {
        let mut best: Option<(u64, u32)> = None;
        stale.clear();
        // Only the nodes from the lowest one holding [a, b) up can hold a hole that
        // contains it.
        let mut node = self.node(a, b);
        let mut seen = 0usize;
        while node >= 1 && seen < scan {
            if self.count[node as usize] == 0 {
                node >>= 1;
                continue;
            }
            for (&(_, lo, id), &(t0, t1, hi)) in self.by_node.range((node, 0, 0)..(node + 1, 0, 0))
            {
                seen += 1;
                if seen > scan || lo >= best.map_or(below, |(b, _)| b) {
                    break;
                }
                if hi - lo < size {
                    stale.push(id);
                } else if t0 <= a && t1 >= b {
                    best = Some((lo, id));
                    break;
                }
            }
            node >>= 1;
        }
        for &id in stale.iter() {
            self.remove(id);
        }
        best.map(|(_, id)| id)
    }
}

/// The skyline's heights in a segment tree (range maximum; every raise lifts a range
/// to at least its maximum, so a tag per node suffices).
struct Heights {
    leaves: usize,
    /// The maximum over the node's range.
    max: Vec<u64>,
    /// A height the whole node's range has reached.
    tag: Vec<u64>,
}

impl Heights {
    fn new(sections: usize) -> Heights {
        let leaves = sections.max(1).next_power_of_two();
        Heights {
            leaves,
            max: vec![0; 2 * leaves],
            tag: vec![0; 2 * leaves],
        }
    }

    /// The highest top over sections `[a, b)` (0 if empty).
    fn max_in(&self, a: u32, b: u32) -> u64 {
        if a >= b {
            return 0;
        }
        self.query(1, 0, self.leaves, a as usize, b as usize)
    }

    fn query(&self, v: usize, nl: usize, nr: usize, a: usize, b: usize) -> u64 {
        if b <= nl || nr <= a {
            return 0;
        }
        if a <= nl && nr <= b {
            return self.max[v];
        }
        let mid = (nl + nr) / 2;
        self.tag[v]
            .max(self.query(2 * v, nl, mid, a, b))
            .max(self.query(2 * v + 1, mid, nr, a, b))
    }

    /// Raises sections `[a, b)` to `height` (at least their maximum).
    fn raise(&mut self, a: u32, b: u32, height: u64) {
        if a < b {
            self.update(1, 0, self.leaves, a as usize, b as usize, height);
        }
    }

    fn update(&mut self, v: usize, nl: usize, nr: usize, a: usize, b: usize, h: u64) {
        if b <= nl || nr <= a {
            return;
        }
        self.max[v] = self.max[v].max(h);
        if a <= nl && nr <= b {
            self.tag[v] = self.tag[v].max(h);
            return;
        }
        let mid = (nl + nr) / 2;
        self.update(2 * v, nl, mid, a, b, h);
        self.update(2 * v + 1, mid, nr, a, b, h);
    }
}

/// The skyline: runs of sections of equal height, `start -> (end, height)`, covering
/// every section.
struct Skyline {
    runs: BTreeMap<u32, (u32, u64)>,
}

impl Skyline {
    fn new(sections: usize) -> Skyline {
        Skyline {
            runs: BTreeMap::from([(0, (sections.max(1) as u32, 0))]),
        }
    }

    /// Makes `t` the start of a run (if inside the covered sections).
    fn split_at(&mut self, t: u32) {
        let Some((&start, &(end, height))) = self.runs.range(..=t).next_back() else {
            return;
        };
        if start < t && t < end {
            self.runs.insert(start, (t, height));
            self.runs.insert(t, (end, height));
        }
    }

    /// Removes the runs over `[a, b)` into `out` (in order).
    fn take(&mut self, a: u32, b: u32, out: &mut Vec<(u32, u32, u64)>) {
        self.split_at(a);
        self.split_at(b);
        out.clear();
        out.extend(self.runs.range(a..b).map(|(&s, &(e, h))| (s, e, h)));
        for &(s, _, _) in out.iter() {
            self.runs.remove(&s);
        }
    }
}

/// Cuts the free space between the runs `below` (in section order, contiguous) and
/// `ceiling` into disjoint rectangles, widest at the top, into `holes`.
fn histogram_holes(
    below: &[(u32, u32, u64)],
    ceiling: u64,
    holes: &mut Holes,
    min_size: u64,
    stack: &mut Vec<(u32, u64)>,
) {
    // Depths below the ceiling, increasing up the stack: (start section, depth).
    stack.clear();
    let close = |stack: &mut Vec<(u32, u64)>, at: u32, depth: u64, holes: &mut Holes| {
        let mut start = at;
        while let Some(&(s, d)) = stack.last() {
            if d <= depth {
                break;
            }
            stack.pop();
            let under = stack.last().map_or(0, |&(_, d2)| d2).max(depth);
            holes.add(
                Hole {
                    t0: s,
                    t1: at,
                    lo: ceiling - d,
                    hi: ceiling - under,
                },
                min_size,
            );
            start = s;
        }
        start
    };
    for &(s, _, h) in below {
        let depth = ceiling - h;
        let start = close(stack, s, depth, holes);
        if stack.last().is_none_or(|&(_, d)| d < depth) {
            stack.push((start, depth));
        }
    }
    let end = below.last().map_or(0, |r| r.1);
    close(stack, end, 0, holes);
}

/// Places the items in `order` (largest first gives greedy by size) as the module
/// says. Returns offsets per item position and the peak.
pub(crate) fn place(p: &Prepared, order: &[usize]) -> (Vec<u64>, u64) {
    place_until(p, order, None).unwrap_or_else(|| (vec![0; p.items.len()], 0))
}

/// [`place`] that gives up (`None`) once `deadline` has passed.
pub(crate) fn place_until(
    p: &Prepared,
    order: &[usize],
    deadline: Option<Instant>,
) -> Option<(Vec<u64>, u64)> {
    let mut offsets = vec![0u64; p.items.len()];
    let mut holes = Holes::new(p.sections);
    let mut skyline = Skyline::new(p.sections);
    let mut heights = Heights::new(p.sections);
    let mut runs = Vec::new();
    let mut stale = Vec::new();
    let mut stack = Vec::new();
    let mut peak = 0u64;
    let scan = scan_for(order.len());
    for (k, &i) in order.iter().enumerate() {
        if k % CLOCK_EVERY == CLOCK_EVERY - 1 && deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let it = &p.items[i];
        let (a, b, size) = (it.a, it.b, it.size);
        let floor = heights.max_in(a, b);
        let offset = if let Some(id) = holes.find(a, b, size, floor, scan, &mut stale) {
            let h = holes.holes[id as usize];
            holes.remove(id);
            // The hole's width above the item, the item's height beside it.
            let top = h.lo + size;
            holes.add(Hole { lo: top, ..h }, 1);
            holes.add(
                Hole {
                    t1: a,
                    hi: top,
                    ..h
                },
                1,
            );
            holes.add(
                Hole {
                    t0: b,
                    hi: top,
                    ..h
                },
                1,
            );
            h.lo
        } else {
            skyline.take(a, b, &mut runs);
            histogram_holes(&runs, floor, &mut holes, 1, &mut stack);
            skyline.runs.insert(a, (b, floor + size));
            heights.raise(a, b, floor + size);
            floor
        };
        offsets[i] = offset;
        peak = peak.max(offset + size);
    }
    Some((offsets, peak))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy;
    use crate::plan::offline::LiveRange;

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    #[test]
    fn a_hole_left_below_a_wide_item_is_reused() {
        // 0: [0,2) 8 bytes; 1: [0,6) 4 bytes sits on it at 8 over [0,6), leaving
        // [2,6) x [0,8) free; 2: [3,5) 6 bytes goes there, at 0.
        let p = Prepared::new(&[r(0, 2, 8), r(0, 6, 4), r(3, 5, 6)], 1).expect("valid");
        let (offsets, peak) = place(&p, &[0, 1, 2]);
        p.assert_valid(&offsets, peak);
        assert_eq!(offsets, vec![0, 8, 0]);
        assert_eq!(peak, 12);
    }

    #[test]
    fn placements_are_valid_on_random_instances() {
        let mut rng = crate::seeded::Rng::new(7);
        for round in 0..1500 {
            let n = 1 + rng.index(80);
            let ranges: Vec<LiveRange> = (0..n)
                .map(|_| {
                    let start = rng.index(50) as u64;
                    r(
                        start,
                        start + 1 + rng.index(20) as u64,
                        1 + rng.index(30) as u64,
                    )
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            let order = greedy::by_size(&p);
            let (offsets, peak) = place(&p, &order);
            p.assert_valid(&offsets, peak);
            assert!(peak >= p.lower_bound, "round {round}");
            assert_eq!(peak, p.peak_of(&offsets));
        }
    }
}
