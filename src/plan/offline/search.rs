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
//! * of several identical items only the first in rank order is a candidate;
//! * hatless: when the item just placed is live with no unplaced item, its placement
//!   changed nothing for the others, so if that branch fails the later candidates
//!   (all no lower) fail too;
//! * a candidate whose top would exceed the capacity is not placed;
//! * independent parts (no unplaced item of one live with one of another) are solved
//!   one after the other;
//! * lifted offset: every later placement sits at or above the lowest floor among the
//!   items that may go next, so a node works at that offset (the section check counts
//!   the space below it as lost);
//! * failed states ([`memo`]): the unplaced items with their floors decide what lies
//!   below a node; a state that failed is skipped when met again (placing the items
//!   below in another order often leads back to it), at the same or a higher offset,
//!   in this round and in the later ones of the same preorder.
//!
//! Nodes allocate nothing: the open items and candidates of the nodes on the current
//! path live on two shared stacks, and placements are undone from logs.
//!
//! Several preorders (MiniMalloc's WAT, TAW and TWA) take turns, each with a work limit
//! that doubles every round, so that a lucky order finds a solution early and a hard
//! instance still gets a long run. Each preorder's round is a depth-first turn and a
//! limited-discrepancy turn ([`Lds`]) with half its work: depth-first search revises the
//! last choices first and may never get back to a wrong early one; a pass that charges
//! k discrepancies for the k-th candidate at a node, and allows a dozen on a path,
//! revises choices at every depth (dsa E fits only thanks to it). Where at least 3/4 of
//! the sections are full at the capacity (a tiling), each round starts every preorder
//! with a corner turn: depth first, but where a section is tight at the offset (the
//! sizes still to place there fill it exactly from the offset up) only the items that
//! can go at the offset and cover it branch ([`Tuning::corners`]).

mod memo;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use super::greedy;
use super::prepared::Prepared;
use memo::{seed, FailedStates, Fingerprint};

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

/// A search without a deadline: the result depends on the work budget alone.
#[cfg(test)]
pub(crate) fn search(p: &Prepared, capacity: u64, budget: u64) -> Found {
    Searcher::new(p).search_until(capacity, budget, None)
}

/// A problem made ready for searches at several capacities: the preorders, the overlap
/// lists and the items by first section are built once, not once per search.
pub(crate) struct Searcher<'a> {
    p: &'a Prepared,
    /// The static preorders, one per turn of a round.
    preorders: Vec<Vec<usize>>,
    /// Items live at a common time with each item.
    overlaps: Vec<Vec<u32>>,
    /// Every item, sorted by first section.
    all: Vec<u32>,
    /// The schedule's knobs.
    tuning: Tuning,
}

/// The knobs of the schedule, fixed in production ([`Tuning::default`]); tests and
/// probes vary them to measure what each part earns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// Whether each round gives every preorder a limited-discrepancy turn.
    pub lds: bool,
    /// How many static preorders take turns (1 to [`ORDERS`]`.len()`).
    pub orders: usize,
    /// Corner branching: when a section is tight at the offset (the sizes still to
    /// place there fill it exactly from the offset up), only items that can go at the
    /// offset and cover that section are candidates.
    pub corners: bool,
    /// Corner turns also where fewer than 3/4 of the sections are full at the
    /// capacity (off in production; tests turn it on).
    pub corners_anywhere: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            lds: true,
            orders: 3,
            corners: true,
            corners_anywhere: false,
        }
    }
}

impl<'a> Searcher<'a> {
    /// Builds what every search of `p` shares.
    pub(crate) fn new(p: &'a Prepared) -> Searcher<'a> {
        Searcher::tuned(p, Tuning::default())
    }

    /// [`Searcher::new`] with other knobs.
    pub(crate) fn tuned(p: &'a Prepared, tuning: Tuning) -> Searcher<'a> {
        let mut all: Vec<u32> = (0..p.items.len() as u32).collect();
        all.sort_by_key(|&i| p.items[i as usize].a);
        Searcher {
            p,
            preorders: preorders(p, tuning.orders),
            overlaps: overlap_lists(p),
            all,
            tuning,
        }
    }

    /// Searches for a placement with peak at most `capacity`, doing at most `budget`
    /// units of work (one per open item or section a node visits, one per floor it
    /// updates) over all preorders, and giving up (with [`Found::Unknown`]) once
    /// `deadline` has passed. The clock is read every [`CLOCK_EVERY`] nodes, never per
    /// node; without a deadline the result depends on the work budget alone
    /// (deterministic).
    pub(crate) fn search_until(
        &self,
        capacity: u64,
        budget: u64,
        deadline: Option<Instant>,
    ) -> Found {
        self.run(capacity, budget, deadline).0
    }

    /// The search over the preorders, taking turns with a doubling work limit. Each
    /// preorder gets two turns per round: a depth-first turn (complete, so it can prove
    /// infeasibility) and a limited-discrepancy turn (see [`Lds`]).
    fn run(&self, capacity: u64, budget: u64, deadline: Option<Instant>) -> (Found, Stats) {
        let p = self.p;
        let mut stats = Stats::default();
        if p.lower_bound > capacity {
            return (Found::Infeasible, stats);
        }
        if p.items.is_empty() || self.preorders.is_empty() {
            return (Found::Plan(Vec::new(), 0), stats);
        }
        let mut left = budget;
        // About as many nodes as items in the first round.
        let n = p.items.len() as u64;
        let mut limit = n.saturating_mul(n + p.sections as u64).max(1024);
        // Per preorder, one table for each kind of turn, kept over the rounds: a state
        // proven to fail in one round is skipped in the later, longer ones.
        let mut turns: Vec<Turns> = self
            .preorders
            .iter()
            .map(|_| Turns {
                depth_first: FailedStates::for_items(p.items.len()),
                lds: Lds::new(p.items.len()),
            })
            .collect();
        // Corner turns only where most sections are full at this capacity (a tiling):
        // elsewhere few sections become tight and the turns only take work from the
        // others (dsa B, 61% full, took 1.8 times as long with them; E no longer fit
        // within `best`'s budget).
        let full = p.live.iter().filter(|&&l| l == capacity).count();
        let corners =
            self.tuning.corners && (self.tuning.corners_anywhere || 4 * full >= 3 * p.sections);
        loop {
            for (order, turn) in turns.iter_mut().enumerate() {
                let search = self.over(order, capacity, deadline, false);
                let cornered = self.over(order, capacity, deadline, true);
                for kind in [Kind::Corner, Kind::DepthFirst, Kind::Lds] {
                    let skip = match kind {
                        Kind::Corner => !corners,
                        Kind::DepthFirst => false,
                        Kind::Lds => !self.tuning.lds,
                    };
                    if skip {
                        continue;
                    }
                    // Limited-discrepancy turns get half the depth-first turns' work.
                    let share = match kind {
                        Kind::Corner | Kind::DepthFirst => limit,
                        Kind::Lds => (limit / 2).max(1),
                    };
                    let work = share.min(left);
                    if work == 0 {
                        return (Found::Unknown, stats);
                    }
                    left -= work;
                    let (found, unused) = match kind {
                        // Both depth-first kinds are complete under the same contract:
                        // a state one proves to fail fails for the other too.
                        Kind::Corner => {
                            cornered.depth_first(&mut turn.depth_first, work, &mut stats)
                        }
                        Kind::DepthFirst => {
                            search.depth_first(&mut turn.depth_first, work, &mut stats)
                        }
                        Kind::Lds => turn.lds.turn(&search, work, &mut stats),
                    };
                    // Work a turn did not use goes back to the budget.
                    left += unused;
                    if let Some(found) = found {
                        return (found, stats);
                    }
                }
            }
            limit = limit.saturating_mul(2);
        }
    }

    /// The passes over preorder `order` at `capacity` share this.
    fn over(
        &self,
        order: usize,
        capacity: u64,
        deadline: Option<Instant>,
        corners: bool,
    ) -> Search<'_> {
        Search {
            p: self.p,
            capacity,
            order: &self.preorders[order],
            overlaps: &self.overlaps,
            all: &self.all,
            deadline,
            corners,
        }
    }
}

/// Nodes between two looks at the clock when a deadline is set.
pub(crate) const CLOCK_EVERY: u64 = 4096;

/// What one search run did, for measurements and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Nodes visited over all preorders.
    pub nodes: u64,
    /// Nodes cut off because their state had failed before.
    pub memo_hits: u64,
}

/// The kinds of turn each preorder takes per round.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Depth first with corner branching ([`Tuning::corners`]).
    Corner,
    /// Depth first over the candidates in (floor, rank) order.
    DepthFirst,
    /// Limited discrepancy ([`Lds`]).
    Lds,
}

/// One preorder's tables, kept between rounds.
struct Turns {
    /// Failed states of the depth-first turns.
    depth_first: FailedStates,
    /// The limited-discrepancy turns.
    lds: Lds,
}

/// What every search pass over one preorder shares.
struct Search<'a> {
    p: &'a Prepared,
    capacity: u64,
    order: &'a [usize],
    overlaps: &'a [Vec<u32>],
    /// Every item, sorted by first section.
    all: &'a [u32],
    deadline: Option<Instant>,
    /// Corner branching on tight sections ([`Tuning::corners`]).
    corners: bool,
}

impl Search<'_> {
    /// One pass from the root with at most `discrepancies` on a path (`None`: plain
    /// depth first), `work` units and the failed states in `failed`.
    fn pass(
        &self,
        failed: &mut FailedStates,
        discrepancies: Option<u64>,
        work: u64,
        stats: &mut Stats,
    ) -> Pass {
        let hits_before = failed.hits;
        let mut state = State::new(
            self.p,
            self.capacity,
            self.order,
            self.overlaps,
            failed,
            work,
            self.deadline,
        );
        state.disc_left = discrepancies.unwrap_or(u64::MAX);
        state.limited = discrepancies.is_some();
        state.corners = self.corners;
        state.stack.extend_from_slice(self.all);
        let step = state.descend(0, self.all.len(), 0, 0);
        stats.nodes += state.nodes;
        stats.memo_hits += state.failed.hits - hits_before;
        let found = match step {
            Step::Solved => Some(Found::Plan(state.offsets.clone(), state.peak())),
            // A depth-first failure is a complete search: infeasible. (A limited pass
            // proves nothing: its limit, or a state that failed under a limit before,
            // may have cut the solution.)
            Step::Failed if !state.limited => Some(Found::Infeasible),
            Step::OutOfBudget if state.timed_out => Some(Found::Unknown),
            Step::Failed | Step::OutOfBudget => None,
        };
        Pass {
            found,
            exhausted: matches!(step, Step::OutOfBudget),
            work_left: state.work_left,
        }
    }

    /// A depth-first turn: what it found (if anything final) and the work it left.
    fn depth_first(
        &self,
        failed: &mut FailedStates,
        work: u64,
        stats: &mut Stats,
    ) -> (Option<Found>, u64) {
        let pass = self.pass(failed, None, work, stats);
        (pass.found, pass.work_left)
    }
}

/// The result of one [`Search::pass`].
struct Pass {
    /// A plan, proven infeasibility, or a timeout; `None` when the pass failed
    /// within its discrepancy limit or ran out of work.
    found: Option<Found>,
    /// Whether the work limit stopped the pass.
    exhausted: bool,
    /// Work units left.
    work_left: u64,
}

/// Limited-discrepancy search: at each node the k-th candidate tried (counting from
/// 0) costs k discrepancies, and a pass allows at most `level` on a path. Depth-first
/// search spends its work at the bottom of the tree, revising the last choices first;
/// where an early choice is wrong (dsa E) it never gets back to it, while a pass with
/// few discrepancies revises choices at every depth. The level rises by one after every
/// pass, also after one the work limit cut short (the next round's limit is twice as
/// large), so that the level and the work grow together. The passes search for a plan
/// only: the depth-first turns prove infeasibility.
struct Lds {
    /// The discrepancies allowed in the next pass.
    level: u64,
    /// Failed states, keyed with the discrepancies left.
    failed: FailedStates,
}

impl Lds {
    fn new(items: usize) -> Lds {
        Lds {
            level: 0,
            failed: FailedStates::for_items(items),
        }
    }

    /// Passes at rising levels until `work` runs out: what was found (if anything
    /// final) and the work left.
    fn turn(
        &mut self,
        search: &Search<'_>,
        mut work: u64,
        stats: &mut Stats,
    ) -> (Option<Found>, u64) {
        while work > 0 {
            let pass = search.pass(&mut self.failed, Some(self.level), work, stats);
            if pass.found.is_some() {
                return (pass.found, pass.work_left);
            }
            self.level += 1;
            if pass.exhausted {
                return (None, 0);
            }
            work = pass.work_left;
        }
        (None, 0)
    }
}

/// The static preorders' keys, in turn order: MiniMalloc's WAT, TAW and TWA (see
/// [`greedy::Key`]), then the other three orders of the same keys.
const ORDERS: [[greedy::Key; 3]; 6] = {
    use greedy::Key::{Area, Total, Width};
    [
        greedy::WAT,
        greedy::TAW,
        greedy::TWA,
        [Area, Total, Width],
        [Width, Total, Area],
        [Area, Width, Total],
    ]
};

/// The first `count` static preorders (item positions, best first).
fn preorders(p: &Prepared, count: usize) -> Vec<Vec<usize>> {
    ORDERS
        .into_iter()
        .take(count.clamp(1, ORDERS.len()))
        .map(|keys| greedy::by_keys(p, keys))
        .collect()
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
    /// Discrepancies left: taking the k-th candidate tried at a node costs k.
    disc_left: u64,
    /// Whether discrepancies are limited (a limited-discrepancy pass).
    limited: bool,
    /// Whether tight sections at the offset restrict the candidates (corner branching).
    corners: bool,
    /// Scratch per section: tight at the current node's offset (all false between
    /// nodes).
    tight: Vec<bool>,
    /// Scratch per section boundary: candidates starting minus ending there.
    fillers: Vec<i64>,
    /// Undo log of `floor` changes: (item, old floor).
    floor_log: Vec<(u32, u64)>,
    remaining: Vec<u64>,
    placed: Vec<bool>,
    offsets: Vec<u64>,
    /// Work units left (one per open item or section visited, per overlap updated).
    work_left: u64,
    /// Nodes visited (for measurements).
    nodes: u64,
    /// Stop once this instant has passed (looked at every [`CLOCK_EVERY`] nodes).
    deadline: Option<Instant>,
    /// Set when the deadline, not the work budget, stopped the search.
    timed_out: bool,
    /// The fingerprint of the unplaced items and their floors.
    state: Fingerprint,
    /// Each item's fingerprint seed.
    seeds: Vec<u64>,
    /// States seen to fail under this preorder, with the lowest (offset, rank) they
    /// failed at.
    failed: &'a mut FailedStates,
    /// Scratch for the sweep over sections: (lowest offset, end section) of the open
    /// items covering the current section, smallest offset on top.
    covering: BinaryHeap<Reverse<(u64, u32)>>,
    /// Placements in order, each with the floor log length before it.
    trail: Vec<(usize, usize)>,
    /// The open items of every node on the current path, each node's above its
    /// parent's.
    stack: Vec<u32>,
    /// The candidates (floor, rank, item) of every node on the current path.
    cand: Vec<(u64, u32, u32)>,
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
        failed: &'a mut FailedStates,
        work: u64,
        deadline: Option<Instant>,
    ) -> State<'a> {
        let seeds: Vec<u64> = (0..p.items.len()).map(seed).collect();
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
            disc_left: u64::MAX,
            limited: false,
            corners: true,
            tight: vec![false; p.sections + 1],
            fillers: vec![0; p.sections + 1],
            floor_log: Vec::new(),
            remaining: p.live.clone(),
            placed: vec![false; p.items.len()],
            offsets: vec![0; p.items.len()],
            work_left: work,
            nodes: 0,
            deadline,
            timed_out: false,
            state: seeds.iter().fold(Fingerprint::default(), |mut f, &s| {
                f.add(s, 0);
                f
            }),
            seeds,
            failed,
            covering: BinaryHeap::with_capacity(p.items.len()),
            trail: Vec::with_capacity(p.items.len()),
            stack: Vec::with_capacity(p.items.len() * 4),
            cand: Vec::with_capacity(p.items.len() * 4),
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

    /// One node over the open items listed in `self.stack[from..to]` (sorted by first
    /// section; items outside it are placed or belong to an independent part).
    /// `offset` and `last_rank` are those of the item placed last in this scope. On
    /// failure the state is as on entry; on success the scope's placements stay. Uses
    /// the stacks above their current lengths as scratch and leaves them as found.
    fn descend(&mut self, from: usize, to: usize, offset: u64, last_rank: usize) -> Step {
        let base = self.stack.len();
        for k in from..to {
            let i = self.stack[k];
            if !self.placed[i as usize] {
                self.stack.push(i);
            }
        }
        let step = self.node(base, offset, last_rank);
        self.stack.truncate(base);
        step
    }

    /// [`State::descend`] once the open items are `self.stack[base..]`.
    fn node(&mut self, base: usize, offset: u64, last_rank: usize) -> Step {
        let end = self.stack.len();
        if end == base {
            return Step::Solved;
        }
        if self.work_left == 0 {
            return Step::OutOfBudget;
        }
        self.nodes += 1;
        if self.nodes.is_multiple_of(CLOCK_EVERY)
            && self.deadline.is_some_and(|d| Instant::now() >= d)
        {
            self.timed_out = true;
            self.work_left = 0;
            return Step::OutOfBudget;
        }
        // Independent parts (no item of one is live with an item of another) are runs
        // of the open list: solve each on its own; one that fails makes the whole fail.
        let mut reach = 0u32;
        let mut cut = None;
        for k in base..end {
            let it = &self.p.items[self.stack[k] as usize];
            if k > base && it.a >= reach {
                cut = Some(k);
                break;
            }
            reach = reach.max(it.b);
        }
        if let Some(cut) = cut {
            let mark = self.trail.len();
            let step = self.descend(base, cut, 0, 0);
            let step = match step {
                Step::Solved => self.descend(cut, end, 0, 0),
                other => other,
            };
            if !matches!(step, Step::Solved) {
                self.undo_to(mark);
            }
            return step;
        }
        // Every later placement sits at or above the lowest floor among the items that
        // may go next (floor above `offset`, or equal with a rank not below
        // `last_rank`): lift the offset to it. States that differ only below it are the
        // same state, and the section check may count the space below it as lost.
        let mut next_floor = u64::MAX;
        for &i in &self.stack[base..end] {
            let floor = self.floor[i as usize];
            if floor > offset || (floor == offset && self.rank[i as usize] >= last_rank) {
                next_floor = next_floor.min(floor);
            }
        }
        if next_floor == u64::MAX {
            return Step::Failed; // every open item is stuck below the offset
        }
        let (offset, last_rank) = if next_floor > offset {
            (next_floor, 0)
        } else {
            (offset, last_rank)
        };
        // The same unplaced items with the same floors failed before at this offset
        // and rank or below: this node fails too.
        let rank = last_rank as u32;
        if self.failed.known_to_fail(self.key(), offset, rank) {
            return Step::Failed;
        }
        let step = self.expand(base, end, offset, last_rank, reach);
        if matches!(step, Step::Failed) {
            self.failed.record(self.key(), offset, rank);
        }
        step
    }

    /// [`State::node`] past the decomposition and the failed-state table: the section
    /// check, then each candidate in turn.
    fn expand(
        &mut self,
        base: usize,
        end: usize,
        offset: u64,
        last_rank: usize,
        reach: u32,
    ) -> Step {
        // The lowest top any open item could reach, and the lowest fill of every
        // section the open items cover: a sweep over the sections with the covering
        // items in a heap by lowest offset (the open items are sorted by first section).
        let first = self.p.items[self.stack[base] as usize].a;
        let last = reach;
        self.work_left = self
            .work_left
            .saturating_sub((end - base + (last - first) as usize) as u64);
        let mut min_top = u64::MAX;
        let cand_base = self.cand.len();
        self.covering.clear();
        let mut next = base;
        let mut fits = true;
        let mut corner: Option<u32> = None;
        for t in first..last {
            while next < end && self.p.items[self.stack[next] as usize].a == t {
                let i = self.stack[next] as usize;
                next += 1;
                let floor = self.floor[i];
                let it = self.p.items[i];
                min_top = min_top.min(floor.saturating_add(it.size));
                let lowest = floor.max(offset);
                // An item no lower than the heap's top that leaves no later never
                // becomes the lowest: skip it.
                if !self
                    .covering
                    .peek()
                    .is_some_and(|Reverse((top, b))| *top <= lowest && *b >= it.b)
                {
                    self.covering.push(Reverse((lowest, it.b)));
                }
                let rank = self.rank[i];
                let canonical = floor > offset || (floor == offset && rank >= last_rank);
                if canonical && floor.saturating_add(it.size) <= self.capacity {
                    self.cand.push((floor, rank as u32, i as u32));
                }
            }
            while self.covering.peek().is_some_and(|Reverse((_, b))| *b <= t) {
                self.covering.pop();
            }
            if let Some(&Reverse((lowest, _))) = self.covering.peek() {
                let need = lowest.saturating_add(self.remaining[t as usize]);
                if need > self.capacity {
                    fits = false;
                    break;
                }
                // A tight section at the offset: its space at `offset` must be filled
                // by an item placed at `offset` now.
                if self.corners && lowest == offset && need == self.capacity {
                    self.tight[t as usize] = true;
                    corner = Some(t);
                }
            }
        }
        if fits && corner.is_some() {
            // Of the tight sections, the one the fewest candidates can fill (none: the
            // node fails).
            corner = self.fewest_fillers(cand_base, first, last, offset);
            fits = corner.is_some();
        }
        for t in first..last {
            self.tight[t as usize] = false;
        }
        let mut step = Step::Failed;
        if fits {
            // Discrepancies this node has charged: the k-th candidate tried costs k.
            let mut tried = 0u64;
            self.cand[cand_base..].sort_unstable();
            for k in cand_base..self.cand.len() {
                let (floor, rank, i) = self.cand[k];
                let i = i as usize;
                if floor >= min_top {
                    break; // an item fits wholly below: found with that item first
                }
                if self.twin[i].is_some_and(|t| !self.placed[t]) {
                    continue;
                }
                let it = self.p.items[i];
                if let Some(t) = corner {
                    if floor > offset {
                        break; // the corner can no longer be filled
                    }
                    if it.a > t || it.b <= t {
                        continue;
                    }
                }
                if tried > self.disc_left {
                    break;
                }
                let mark = self.trail.len();
                self.disc_left -= tried;
                let hatless = self.put(i, floor);
                // After a corner placement the items still to go at `offset` may come
                // in any order of rank at least `last_rank` (they are pairwise apart in
                // time, so any order places them the same).
                let child_rank = if corner.is_some() {
                    last_rank
                } else {
                    rank as usize
                };
                let next = self.descend(base, end, floor, child_rank);
                self.disc_left += tried;
                tried += 1;
                if matches!(next, Step::Solved) {
                    step = next;
                    break;
                }
                self.undo_to(mark);
                if matches!(next, Step::OutOfBudget) || hatless {
                    // Hatless: no open item is live with `i`, so placing it changed
                    // nothing for them; every later candidate sits no lower, and its
                    // solutions would work with `i` here too.
                    step = next;
                    break;
                }
            }
        }
        self.cand.truncate(cand_base);
        step
    }

    /// Of the sections `first..last` marked tight, the one that the fewest candidates
    /// at `offset` (in `self.cand[cand_base..]`) cover, the leftmost on a tie; `None`
    /// when some tight section has no such candidate.
    fn fewest_fillers(
        &mut self,
        cand_base: usize,
        first: u32,
        last: u32,
        offset: u64,
    ) -> Option<u32> {
        let (first, last) = (first as usize, last as usize);
        self.fillers[first..=last].fill(0);
        for &(floor, _, i) in &self.cand[cand_base..] {
            if floor == offset {
                let it = self.p.items[i as usize];
                self.fillers[it.a as usize] += 1;
                self.fillers[it.b as usize] -= 1;
            }
        }
        let mut best: Option<(i64, u32)> = None;
        let mut covering = 0i64;
        for t in first..last {
            covering += self.fillers[t];
            if self.tight[t] && best.is_none_or(|(c, _)| covering < c) {
                best = Some((covering, t as u32));
            }
        }
        self.work_left = self.work_left.saturating_sub((last - first) as u64);
        match best {
            Some((0, _)) | None => None,
            Some((_, t)) => Some(t),
        }
    }

    /// The failed-state key: the fingerprint, with the discrepancies left when limited.
    fn key(&self) -> Fingerprint {
        let mut key = self.state;
        if self.limited {
            key.add(seed(usize::MAX), self.disc_left);
        }
        key
    }

    /// Takes back every placement made since the trail had length `mark`.
    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            if let Some((i, floor_mark)) = self.trail.pop() {
                self.take(i, floor_mark);
            }
        }
    }

    /// Places item `i` at `offset`; true when no open item is live with it.
    fn put(&mut self, i: usize, offset: u64) -> bool {
        self.trail.push((i, self.floor_log.len()));
        let it = self.p.items[i];
        let top = offset.saturating_add(it.size);
        for t in it.a as usize..it.b as usize {
            self.remaining[t] -= it.size;
        }
        self.work_left = self.work_left.saturating_sub(self.overlaps[i].len() as u64);
        self.state.remove(self.seeds[i], self.floor[i]);
        let mut hatless = true;
        for &j in &self.overlaps[i] {
            let j = j as usize;
            if !self.placed[j] {
                hatless = false;
                if self.floor[j] < top {
                    self.floor_log.push((j as u32, self.floor[j]));
                    self.state.remove(self.seeds[j], self.floor[j]);
                    self.state.add(self.seeds[j], top);
                    self.floor[j] = top;
                }
            }
        }
        self.placed[i] = true;
        self.offsets[i] = offset;
        hatless
    }

    /// Undoes [`State::put`], replaying the floor log back to `mark`.
    fn take(&mut self, i: usize, mark: usize) {
        let it = self.p.items[i];
        self.placed[i] = false;
        for t in it.a as usize..it.b as usize {
            self.remaining[t] += it.size;
        }
        while self.floor_log.len() > mark {
            if let Some((j, old)) = self.floor_log.pop() {
                let j = j as usize;
                self.state.remove(self.seeds[j], self.floor[j]);
                self.state.add(self.seeds[j], old);
                self.floor[j] = old;
            }
        }
        self.state.add(self.seeds[i], self.floor[i]);
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
        p.assert_valid(&offsets, peak);
    }

    #[test]
    fn small_item_on_top_lets_two_others_share_offset_zero() {
        // a [0,2) size 2 and b [1,3) size 1 overlap; c [2,3) size 2 overlaps b only.
        // Bound 3 (a+b at t=1, b+c at t=2), reached by b at 2, a at 0, c at 0.
        let p = Prepared::new(&[r(0, 2, 2), r(1, 3, 1), r(2, 3, 2)], 1).expect("valid");
        assert!(matches!(search(&p, 3, 1000), Found::Plan(_, 3)));
    }

    #[test]
    fn a_passed_deadline_stops_the_search_as_unknown_within_a_clock_period() {
        // E at its bound is far beyond this budget's reach: only the deadline stops it.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dsa/E.1048576.csv");
        let problem = crate::plan::IntervalProblem::read_csv(path.as_ref()).expect("reads");
        let p = Prepared::new(&crate::plan::offline::interval_ranges(&problem), 1).expect("valid");
        let started = Instant::now();
        let found = Searcher::new(&p).search_until(p.lower_bound, u64::MAX, Some(started));
        assert_eq!(found, Found::Unknown);
        assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    }

    #[test]
    fn without_a_deadline_search_until_is_search() {
        let ranges: Vec<LiveRange> = (0..30u64).map(|i| r(i % 5, i % 5 + 3, 1 + i % 4)).collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        for cap in p.lower_bound..p.lower_bound + 3 {
            assert_eq!(
                Searcher::new(&p).search_until(cap, 1 << 30, None),
                search(&p, cap, 1 << 30)
            );
            let later = Instant::now() + std::time::Duration::from_secs(3600);
            assert_eq!(
                Searcher::new(&p).search_until(cap, 1 << 30, Some(later)),
                search(&p, cap, 1 << 30)
            );
        }
    }

    #[test]
    fn an_exhausted_budget_is_reported_as_unknown() {
        let ranges: Vec<LiveRange> = (0..40u64).map(|i| r(i % 7, i % 7 + 3, 1 + i % 5)).collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        assert_eq!(search(&p, p.lower_bound, 1), Found::Unknown);
    }
}

#[cfg(test)]
mod probe {
    use super::*;
    use crate::plan::offline::interval_ranges;
    use crate::plan::IntervalProblem;

    /// Time and nodes to fit each shared dsa instance at 1,048,576:
    /// `cargo test --release --lib search::probe -- --ignored --nocapture`
    /// (`PROBE=B,E` picks instances, `PROBE_WORK` sets the budget, `PROBE_CAP` another
    /// capacity, `PROBE_DIR` another folder of `NAME.1048576.csv` files).
    #[test]
    #[ignore]
    fn dsa_instances_at_capacity() {
        let names = std::env::var("PROBE").unwrap_or_else(|_| "A,B,C,D,E,F".into());
        let budget: u64 = std::env::var("PROBE_WORK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000_000_000);
        for name in names.split(',') {
            let dir = std::env::var("PROBE_DIR")
                .unwrap_or_else(|_| format!("{}/dsa", env!("CARGO_MANIFEST_DIR")));
            let path = format!("{dir}/{name}.1048576.csv");
            let problem = IntervalProblem::read_csv(path.as_ref()).expect("reads");
            let p = Prepared::new(&interval_ranges(&problem), 1).expect("valid");
            let started = std::time::Instant::now();
            let cap: u64 = std::env::var("PROBE_CAP")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1_048_576);
            let tuning = Tuning {
                lds: std::env::var("PROBE_LDS").map_or(true, |v| v == "1"),
                orders: std::env::var("PROBE_ORDERS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(3),
                corners: std::env::var("PROBE_CORNERS").map_or(true, |v| v != "0"),
                corners_anywhere: std::env::var("PROBE_CORNERS").is_ok_and(|v| v == "2"),
            };
            let (found, stats) = Searcher::tuned(&p, tuning).run(cap, budget, None);
            let secs = started.elapsed().as_secs_f64();
            let what = match &found {
                Found::Plan(_, peak) => format!("plan {peak}"),
                other => format!("{other:?}"),
            };
            println!(
                "{name}: {what} in {secs:.3} s, {} nodes, {} memo hits",
                stats.nodes, stats.memo_hits
            );
        }
    }
    /// Fits of the generated set (`generate::suite`) at its capacity with a fixed work
    /// budget per instance (deterministic, unlike the benchmark's time limit):
    /// `PROBE_GEN=200 PROBE_WORK=200000000 cargo test --release --lib
    /// search::probe::generated -- --ignored --nocapture` (`PROBE_GEN_FROM` skips the
    /// first instances, `PROBE_VERBOSE=1` prints every instance).
    #[test]
    #[ignore]
    fn generated_at_capacity() {
        use crate::plan::offline::generate::{generate, suite, CAPACITY};
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let count = var("PROBE_GEN", 40) as usize;
        let from = var("PROBE_GEN_FROM", 0) as usize;
        let budget = var("PROBE_WORK", 200_000_000);
        let verbose = std::env::var_os("PROBE_VERBOSE").is_some();
        let tuning = Tuning {
            lds: var("PROBE_LDS", 1) == 1,
            orders: var("PROBE_ORDERS", 3) as usize,
            corners: var("PROBE_CORNERS", 1) == 1,
            corners_anywhere: var("PROBE_CORNERS", 1) == 2,
        };
        let (mut fitted, mut nodes, mut secs) = (0, 0u64, Vec::new());
        let mut missed = Vec::new();
        for spec in suite(count).into_iter().skip(from) {
            let g = generate(&spec);
            let p = Prepared::new(&interval_ranges(&g.problem), 1).expect("valid");
            let started = std::time::Instant::now();
            let (found, stats) = Searcher::tuned(&p, tuning).run(CAPACITY, budget, None);
            let s = started.elapsed().as_secs_f64();
            nodes += stats.nodes;
            if verbose {
                println!(
                    "{} n={}: {:?} {s:.3} s {} nodes",
                    g.problem.name,
                    p.items.len(),
                    matches!(found, Found::Plan(..)),
                    stats.nodes
                );
            }
            match found {
                Found::Plan(offsets, peak) => {
                    p.assert_valid(&offsets, peak);
                    fitted += 1;
                    secs.push(s);
                }
                _ => missed.push(g.problem.name.clone()),
            }
        }
        secs.sort_by(f64::total_cmp);
        let q = |f: f64| {
            secs.get(((f * secs.len() as f64).ceil() as usize).max(1) - 1)
                .copied()
                .unwrap_or(0.0)
        };
        println!(
            "fitted {fitted} / {}; median {:.3} s, p95 {:.3} s, worst {:.3} s; {nodes} nodes; missed {missed:?}",
            count - from.min(count),
            q(0.5),
            q(0.95),
            q(1.0)
        );
    }
}

#[cfg(test)]
mod brute {
    use super::*;
    use crate::plan::offline::LiveRange;

    /// Whether some order of first-fit placements (every pushed-down solution is one)
    /// fits `capacity`.
    fn fits(p: &Prepared, capacity: u64) -> bool {
        fn go(p: &Prepared, cap: u64, placed: &mut Vec<(usize, u64)>, used: &mut [bool]) -> bool {
            if placed.len() == p.items.len() {
                return true;
            }
            for i in 0..p.items.len() {
                if used[i] {
                    continue;
                }
                let it = p.items[i];
                let mut busy: Vec<(u64, u64)> = placed
                    .iter()
                    .filter(|&&(j, _)| p.items[j].a < it.b && it.a < p.items[j].b)
                    .map(|&(j, o)| (o, o + p.items[j].size))
                    .collect();
                busy.sort_unstable();
                let mut at = 0;
                for (lo, hi) in busy {
                    if lo >= at + it.size {
                        break;
                    }
                    at = at.max(hi);
                }
                if at + it.size > cap {
                    continue;
                }
                used[i] = true;
                placed.push((i, at));
                if go(p, cap, placed, used) {
                    return true;
                }
                placed.pop();
                used[i] = false;
            }
            false
        }
        go(
            p,
            capacity,
            &mut Vec::new(),
            &mut vec![false; p.items.len()],
        )
    }

    /// Random small instances (3 to `3 + spread - 1` items) from a fixed seed.
    fn instances(count: usize, spread: u64, steps: u64, mut seed: u64) -> Vec<Vec<LiveRange>> {
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        (0..count)
            .map(|_| {
                let n = 3 + next(spread) as usize;
                (0..n)
                    .map(|_| {
                        let s = next(steps);
                        LiveRange {
                            start: s,
                            end: s + 1 + next(steps.min(5)),
                            size: 1 + next(6),
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// One pass over the first preorder of `p` at `capacity`, with a fresh table.
    fn one_pass(p: &Prepared, capacity: u64, discrepancies: Option<u64>) -> (Pass, Stats) {
        let searcher = Searcher::new(p);
        let search = searcher.over(0, capacity, None, false);
        let mut failed = FailedStates::for_items(p.items.len());
        let mut stats = Stats::default();
        let pass = search.pass(&mut failed, discrepancies, 1 << 40, &mut stats);
        (pass, stats)
    }

    #[test]
    fn a_pass_without_discrepancies_takes_only_first_candidates_and_proves_nothing() {
        let mut stopped_short = 0;
        for ranges in instances(500, 7, 8, 0x0dd_ba11_5eed_1234) {
            let p = Prepared::new(&ranges, 1).expect("valid");
            let cap = p.lower_bound;
            let (greedy, stats) = one_pass(&p, cap, Some(0));
            // One placement per node on a single path, plus the nodes that only split
            // the open items into independent parts.
            assert!(stats.nodes <= 2 * p.items.len() as u64 + 1, "{ranges:?}");
            match greedy.found {
                Some(Found::Plan(offsets, _)) => p.assert_valid(&offsets, cap),
                Some(other) => panic!("a limited pass reported {other:?}: {ranges:?}"),
                None => {
                    if fits(&p, cap) {
                        stopped_short += 1;
                    }
                }
            }
        }
        // Some feasible instances need a second choice somewhere: the limit bites.
        assert!(stopped_short > 0);
    }

    #[test]
    fn a_pass_with_a_level_above_any_path_cost_finds_what_depth_first_finds() {
        for ranges in instances(500, 7, 8, 0xfeed_f00d_1357_9bdf) {
            let p = Prepared::new(&ranges, 1).expect("valid");
            // A path charges at most (candidates - 1) per placement.
            let n = p.items.len() as u64;
            for cap in p.lower_bound..p.lower_bound + 2 {
                let (limited, _) = one_pass(&p, cap, Some(n * n));
                let (depth_first, _) = one_pass(&p, cap, None);
                match (limited.found, depth_first.found) {
                    (Some(Found::Plan(a, _)), Some(Found::Plan(b, _))) => {
                        assert_eq!(a, b, "{ranges:?} {cap}");
                        p.assert_valid(&a, cap);
                    }
                    (None, Some(Found::Infeasible)) => assert!(!fits(&p, cap)),
                    other => panic!("{other:?}: {ranges:?} {cap}"),
                }
            }
        }
    }

    #[test]
    fn failed_states_under_a_discrepancy_limit_are_keyed_apart() {
        let p = Prepared::new(
            &[LiveRange {
                start: 0,
                end: 2,
                size: 3,
            }],
            1,
        )
        .expect("valid");
        let orders = preorders(&p, 3);
        let overlaps = overlap_lists(&p);
        let mut failed = FailedStates::for_items(1);
        let mut state = State::new(&p, 3, &orders[0], &overlaps, &mut failed, 10, None);
        let complete = state.key();
        state.limited = true;
        state.disc_left = 2;
        let two_left = state.key();
        state.disc_left = 1;
        let one_left = state.key();
        assert_ne!(complete, two_left);
        assert_ne!(complete, one_left);
        assert_ne!(two_left, one_left);
    }

    /// Searches at the bound and two above it, checks each answer against brute force
    /// and every placement found; returns the search's counts summed.
    fn agrees_with_brute_force(ranges: &[LiveRange], tuning: Tuning) -> Stats {
        let p = Prepared::new(ranges, 1).expect("valid");
        let mut total = Stats::default();
        for cap in p.lower_bound..p.lower_bound + 3 {
            let expect = fits(&p, cap);
            let (got, stats) = Searcher::tuned(&p, tuning).run(cap, 1 << 40, None);
            total.nodes += stats.nodes;
            total.memo_hits += stats.memo_hits;
            match got {
                Found::Plan(offsets, peak) => {
                    assert!(expect && peak <= cap, "{ranges:?} {cap}");
                    for (i, x) in p.items.iter().enumerate() {
                        assert!(offsets[i] + x.size <= peak);
                        for (j, y) in p.items.iter().enumerate().skip(i + 1) {
                            let apart = offsets[i] + x.size <= offsets[j]
                                || offsets[j] + y.size <= offsets[i];
                            assert!(apart || x.b <= y.a || y.b <= x.a, "{ranges:?} {cap}");
                        }
                    }
                }
                Found::Infeasible => assert!(!expect, "{ranges:?} {cap}"),
                Found::Unknown => panic!("budget"),
            }
        }
        total
    }

    #[test]
    fn search_agrees_with_brute_force_on_small_instances() {
        for ranges in instances(2000, 7, 8, 0x1234_5678_9abc_def1) {
            agrees_with_brute_force(&ranges, Tuning::default());
        }
    }

    #[test]
    fn corner_branching_alone_agrees_with_brute_force() {
        // One preorder, no limited turns: the corner turn (a complete search) comes
        // first in every round.
        let corners_only = Tuning {
            lds: false,
            orders: 1,
            corners: true,
            corners_anywhere: true,
        };
        for ranges in instances(2000, 7, 8, 0x0c0f_fee0_d00d_2468) {
            agrees_with_brute_force(&ranges, corners_only);
        }
    }

    #[test]
    fn corner_branching_fits_generated_tilings_at_their_bound() {
        use crate::plan::offline::generate::{generate, suite, CAPACITY};
        // The small instances of the generated set (each tiles the rectangle exactly).
        for spec in suite(8).into_iter().filter(|s| s.buffers < 250) {
            let g = generate(&spec);
            let p = Prepared::new(&crate::plan::offline::interval_ranges(&g.problem), 1)
                .expect("valid");
            let (found, _) = Searcher::new(&p).run(CAPACITY, 50_000_000, None);
            let Found::Plan(offsets, peak) = found else {
                panic!("{} not fitted", g.problem.name);
            };
            p.assert_valid(&offsets, peak);
            assert!(peak <= CAPACITY);
        }
    }

    #[test]
    fn failed_state_table_prunes_and_still_agrees_with_brute_force() {
        // Instances (from the random generator above) on which the search meets a
        // failed state again: the same unplaced items with the same floors, reached by
        // stacking the items below them in another order.
        let found: [&[(u64, u64, u64)]; 3] = [
            &[
                (2, 5, 1),
                (1, 3, 5),
                (0, 2, 6),
                (2, 3, 3),
                (2, 6, 3),
                (2, 4, 3),
                (3, 7, 6),
                (2, 3, 1),
                (3, 7, 4),
                (1, 4, 4),
                (2, 6, 2),
            ],
            &[
                (2, 5, 5),
                (2, 5, 1),
                (3, 7, 2),
                (5, 10, 5),
                (2, 3, 6),
                (3, 5, 4),
                (2, 4, 4),
                (1, 5, 4),
                (5, 7, 6),
                (4, 6, 1),
                (5, 6, 6),
            ],
            &[
                (5, 6, 4),
                (2, 5, 4),
                (2, 7, 1),
                (5, 10, 4),
                (0, 5, 3),
                (0, 3, 1),
                (1, 2, 6),
                (2, 4, 4),
                (5, 6, 4),
                (0, 2, 3),
                (4, 8, 4),
                (0, 3, 4),
            ],
        ];
        for triples in found {
            let ranges: Vec<LiveRange> = triples
                .iter()
                .map(|&(start, end, size)| LiveRange { start, end, size })
                .collect();
            // Without corner turns, which prune these before a state is met again.
            let plain = Tuning {
                corners: false,
                ..Tuning::default()
            };
            let stats = agrees_with_brute_force(&ranges, plain);
            assert!(stats.memo_hits > 0, "{ranges:?}");
            agrees_with_brute_force(&ranges, Tuning::default());
        }
    }
}
