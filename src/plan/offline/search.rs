//! Bounded exact search over canonical solutions, built on the ideas MiniMalloc
//! (Moffitt, ASPLOS 2023) published; the code here is our own.
//!
//! Any valid placement can be pushed down until every item *rests* on offset 0 or on
//! an item live with it; listed by (offset, a fixed preorder rank) such a solution
//! places each item at its *floor*: the highest top, over its sections, of the items
//! placed before it. The search builds these lists depth first:
//!
//! * candidates: unplaced items whose floor is at least the last offset used (offsets
//!   never go down), and, at equal offset, of higher rank than the last item;
//! * dominance: an item is not placed at offset `x` if another unplaced item would
//!   fit entirely below `x` (that solution is found with the other item first);
//! * inference: an unplaced item ends up no lower than its floor, so every section's
//!   lowest possible fill plus the sizes still to place there must fit the capacity;
//! * of several identical items only the first in rank order is a candidate.
//!
//! Several preorders take turns, each with a node limit that doubles every round, so
//! that a lucky order finds a solution early and a hard instance still gets a long run.

use super::prepared::Prepared;

/// What the search found for one capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// A placement (offsets per item position) with its peak, at most the capacity.
    Plan(Vec<u64>, u64),
    /// The whole space was searched: no placement fits the capacity.
    Infeasible,
    /// The node budget ran out first.
    Unknown,
}

/// Searches for a placement with peak at most `capacity`, visiting at most `budget`
/// nodes over all preorders. Deterministic.
pub(crate) fn search(p: &Prepared, capacity: u64, budget: u64) -> Found {
    if p.lower_bound > capacity {
        return Found::Infeasible;
    }
    if p.items.is_empty() {
        return Found::Plan(Vec::new(), 0);
    }
    let preorders = preorders(p);
    let overlaps = overlap_lists(p);
    let mut all: Vec<usize> = (0..p.items.len()).collect();
    all.sort_by_key(|&i| p.items[i].a);
    let mut left = budget;
    let mut limit = (p.items.len() as u64).max(16);
    loop {
        for order in &preorders {
            let nodes = limit.min(left);
            if nodes == 0 {
                return Found::Unknown;
            }
            left -= nodes;
            let mut state = State::new(p, capacity, order, &overlaps, nodes);
            match state.descend(&all, 0, 0) {
                Step::Solved => {
                    let peak = state.peak();
                    return Found::Plan(state.offsets, peak);
                }
                // Complete search with any order proves infeasibility.
                Step::Failed => return Found::Infeasible,
                Step::OutOfBudget => {}
            }
        }
        limit = limit.saturating_mul(2);
    }
}

/// Static preorders (item positions, best first): by breadth, size and width in three
/// priorities.
fn preorders(p: &Prepared) -> Vec<Vec<usize>> {
    let breadth = p.breadths();
    let key = |i: usize| {
        let it = &p.items[i];
        let width = u64::from(it.b - it.a);
        let area = u128::from(it.size) * u128::from(it.len);
        (breadth[i], width, area)
    };
    let mut out = Vec::new();
    for rule in 0..3 {
        let mut order: Vec<usize> = (0..p.items.len()).collect();
        order.sort_by(|&x, &y| {
            let ((tx, wx, ax), (ty, wy, ay)) = (key(x), key(y));
            let primary = match rule {
                0 => (ty, wy, ay).cmp(&(tx, wx, ax)),
                1 => (ay, ty, wy).cmp(&(ax, tx, wx)),
                _ => (wy, ty, ay).cmp(&(wx, tx, ax)),
            };
            primary.then(p.items[x].index.cmp(&p.items[y].index))
        });
        out.push(order);
    }
    out
}

enum Step {
    Solved,
    Failed,
    OutOfBudget,
}

struct State<'a> {
    p: &'a Prepared,
    capacity: u64,
    /// `rank[i]`: position of item `i` in `order`.
    rank: Vec<usize>,
    /// `twin[i]`: the previous item in preorder with the same sections and size.
    twin: Vec<Option<usize>>,
    /// Items live at a common time with each item.
    overlaps: &'a [Vec<u32>],
    /// Per item: the highest top of the placed items live with it.
    floor: Vec<u64>,
    /// Undo log of `floor` changes: (item, old floor).
    floor_log: Vec<(u32, u64)>,
    remaining: Vec<u64>,
    placed: Vec<bool>,
    offsets: Vec<u64>,
    unplaced: usize,
    nodes_left: u64,
    /// Scratch per section: lowest offset an unplaced item covering it can take.
    section_floor: Vec<u64>,
    /// Placements in order, each with the floor log length before it.
    trail: Vec<(usize, usize)>,
}

/// For each item, the items whose lifetimes overlap it (a sweep over sections).
pub(crate) fn overlap_lists(p: &Prepared) -> Vec<Vec<u32>> {
    let mut by_start: Vec<usize> = (0..p.items.len()).collect();
    by_start.sort_by_key(|&i| p.items[i].a);
    let mut lists = vec![Vec::new(); p.items.len()];
    let mut active: Vec<usize> = Vec::new();
    for &i in &by_start {
        let a = p.items[i].a;
        active.retain(|&j| p.items[j].b > a);
        for &j in &active {
            lists[i].push(j as u32);
            lists[j].push(i as u32);
        }
        active.push(i);
    }
    lists
}

impl<'a> State<'a> {
    fn new(
        p: &'a Prepared,
        capacity: u64,
        order: &'a [usize],
        overlaps: &'a [Vec<u32>],
        nodes: u64,
    ) -> State<'a> {
        let mut rank = vec![0; p.items.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        let mut twin = vec![None; p.items.len()];
        let mut last_seen = std::collections::HashMap::new();
        for &i in order {
            let it = &p.items[i];
            twin[i] = last_seen.insert((it.a, it.b, it.size), i);
        }
        State {
            p,
            capacity,
            rank,
            twin,
            overlaps,
            floor: vec![0; p.items.len()],
            floor_log: Vec::new(),
            remaining: p.live.clone(),
            placed: vec![false; p.items.len()],
            offsets: vec![0; p.items.len()],
            unplaced: p.items.len(),
            nodes_left: nodes,
            section_floor: vec![0; p.sections],
            trail: Vec::new(),
        }
    }

    /// The peak of the placed items.
    fn peak(&self) -> u64 {
        self.p
            .items
            .iter()
            .zip(&self.offsets)
            .map(|(it, &o)| o.saturating_add(it.size))
            .max()
            .unwrap_or(0)
    }

    /// One node over `scope` (unplaced item positions sorted by first section; items
    /// outside it are placed or belong to an independent part). `offset` and
    /// `last_rank` are those of the item placed last in this scope. On failure the
    /// state is as on entry; on success the scope's placements stay.
    fn descend(&mut self, scope: &[usize], offset: u64, last_rank: usize) -> Step {
        let open: Vec<usize> = scope.iter().copied().filter(|&i| !self.placed[i]).collect();
        if open.is_empty() {
            return Step::Solved;
        }
        if self.nodes_left == 0 {
            return Step::OutOfBudget;
        }
        self.nodes_left -= 1;
        if let Some(parts) = self.split(&open) {
            // Independent parts (no item of one is live with an item of another):
            // solve each on its own; one that fails makes the whole fail.
            let mark = self.trail.len();
            for part in parts {
                let step = self.descend(&part, 0, 0);
                if !matches!(step, Step::Solved) {
                    self.undo_to(mark);
                    return step;
                }
            }
            return Step::Solved;
        }
        // The lowest top any open item could reach, and the lowest fill of every
        // section the open items cover.
        let mut candidates: Vec<(u64, usize)> = Vec::with_capacity(open.len());
        let mut min_top = u64::MAX;
        let (first, last) = open.iter().fold((u32::MAX, 0u32), |(f, l), &i| {
            (f.min(self.p.items[i].a), l.max(self.p.items[i].b))
        });
        let span = first as usize..last as usize;
        self.section_floor[span.clone()].fill(u64::MAX);
        for &i in &open {
            let floor = self.floor[i];
            let it = self.p.items[i];
            min_top = min_top.min(floor.saturating_add(it.size));
            let lowest = floor.max(offset);
            for f in &mut self.section_floor[it.a as usize..it.b as usize] {
                *f = (*f).min(lowest);
            }
            if floor > offset || (floor == offset && self.rank[i] >= last_rank) {
                candidates.push((floor, i));
            }
        }
        let fits = span.clone().all(|t| {
            self.section_floor[t] == u64::MAX
                || self.section_floor[t].saturating_add(self.remaining[t]) <= self.capacity
        });
        if !fits {
            return Step::Failed;
        }
        candidates.sort_unstable_by_key(|&(floor, i)| (floor, self.rank[i]));
        for (floor, i) in candidates {
            if floor >= min_top {
                break; // an item fits wholly below: found with that item first
            }
            if self.twin[i].is_some_and(|t| !self.placed[t]) {
                continue;
            }
            let mark = self.trail.len();
            self.put(i, floor);
            let step = self.descend(&open, floor, self.rank[i]);
            if matches!(step, Step::Solved) {
                return step;
            }
            self.undo_to(mark);
            if matches!(step, Step::OutOfBudget) {
                return step;
            }
        }
        Step::Failed
    }

    /// Splits open items (sorted by first section) into groups that share no section;
    /// `None` when they form one group.
    fn split(&self, open: &[usize]) -> Option<Vec<Vec<usize>>> {
        let mut reach = 0u32;
        let cut = open.iter().enumerate().any(|(k, &i)| {
            let it = &self.p.items[i];
            let cut_here = k > 0 && it.a >= reach;
            reach = reach.max(it.b);
            cut_here
        });
        if !cut {
            return None;
        }
        let mut parts: Vec<Vec<usize>> = Vec::new();
        let mut reach = 0u32;
        for &i in open {
            let it = &self.p.items[i];
            match parts.last_mut() {
                Some(part) if it.a < reach => part.push(i),
                _ => parts.push(vec![i]),
            }
            reach = reach.max(it.b);
        }
        Some(parts)
    }

    /// Takes back every placement made since the trail had length `mark`.
    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            if let Some((i, floor_mark)) = self.trail.pop() {
                self.take(i, floor_mark);
            }
        }
    }

    fn put(&mut self, i: usize, offset: u64) {
        self.trail.push((i, self.floor_log.len()));
        let it = self.p.items[i];
        let top = offset.saturating_add(it.size);
        for t in it.a as usize..it.b as usize {
            self.remaining[t] -= it.size;
        }
        for &j in &self.overlaps[i] {
            let j = j as usize;
            if !self.placed[j] && self.floor[j] < top {
                self.floor_log.push((j as u32, self.floor[j]));
                self.floor[j] = top;
            }
        }
        self.placed[i] = true;
        self.offsets[i] = offset;
        self.unplaced -= 1;
    }

    /// Undoes [`State::put`], replaying the floor log back to `mark`.
    fn take(&mut self, i: usize, mark: usize) {
        let it = self.p.items[i];
        self.placed[i] = false;
        self.unplaced += 1;
        for t in it.a as usize..it.b as usize {
            self.remaining[t] += it.size;
        }
        while self.floor_log.len() > mark {
            if let Some((j, old)) = self.floor_log.pop() {
                self.floor[j as usize] = old;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::LiveRange;

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    #[test]
    fn minimalloc_example_fits_its_bound() {
        let p = Prepared::new(
            &[r(0, 3, 4), r(3, 9, 4), r(0, 9, 4), r(9, 21, 4), r(0, 21, 4)],
            1,
        )
        .expect("valid");
        match search(&p, 12, 1000) {
            Found::Plan(offsets, peak) => {
                assert_eq!(peak, 12);
                assert_eq!(offsets.len(), 5);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn capacity_below_the_bound_is_infeasible_and_at_the_bound_is_found() {
        let ranges = [r(2, 3, 1), r(0, 1, 2), r(1, 3, 3), r(0, 2, 2)];
        let p = Prepared::new(&ranges, 1).expect("valid");
        assert_eq!(p.lower_bound, 5);
        assert_eq!(search(&p, 4, 1000), Found::Infeasible);
        let Found::Plan(offsets, peak) = search(&p, 5, 1000) else {
            panic!("not found");
        };
        assert_eq!(peak, 5);
        for (i, x) in p.items.iter().enumerate() {
            for (j, y) in p.items.iter().enumerate().skip(i + 1) {
                let live_together = x.a < y.b && y.a < x.b;
                let apart = offsets[i] + x.size <= offsets[j] || offsets[j] + y.size <= offsets[i];
                assert!(!live_together || apart, "{i} and {j} overlap");
            }
        }
    }

    #[test]
    fn small_item_on_top_lets_two_others_share_offset_zero() {
        // a [0,2) size 2 and b [1,3) size 1 overlap; c [2,3) size 2 overlaps b only.
        // Bound 3 (a+b at t=1, b+c at t=2), reached by b at 2, a at 0, c at 0.
        let p = Prepared::new(&[r(0, 2, 2), r(1, 3, 1), r(2, 3, 2)], 1).expect("valid");
        assert!(matches!(search(&p, 3, 1000), Found::Plan(_, 3)));
    }

    #[test]
    fn an_exhausted_budget_is_reported_as_unknown() {
        let ranges: Vec<LiveRange> = (0..40u64).map(|i| r(i % 7, i % 7 + 3, 1 + i % 5)).collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        assert_eq!(search(&p, p.lower_bound, 1), Found::Unknown);
    }
}
