//! The search state along one path: the open items, their floors and the placements,
//! and one node's expansion (decomposition, failed states, section check, corner
//! branching, candidates).
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use super::memo::{seed, FailedStates, Fingerprint};
use super::{Runner, CLOCK_EVERY};
use crate::plan::offline::greedy::{self, Key};
use crate::plan::offline::prepared::Prepared;

pub(super) enum Step {
    Solved,
    Failed,
    OutOfBudget,
}

pub(super) struct State<'a> {
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
    pub(super) disc_left: u64,
    /// Whether discrepancies are limited (a limited-discrepancy pass).
    pub(super) limited: bool,
    /// Whether tight sections at the offset restrict the candidates (corner branching).
    pub(super) corners: bool,
    /// Scratch per section: tight at the current node's offset (all false between
    /// nodes).
    tight: Vec<bool>,
    /// Scratch per section boundary: open items at the offset ending there (all 0
    /// between nodes).
    low_ends: Vec<u32>,
    /// Scratch per section boundary: candidates starting minus ending there.
    fillers: Vec<i64>,
    /// Scratch per section boundary for the cover check ([`State::coverable`]).
    covered: Vec<bool>,
    /// Scratch per section: the lowest fill where the section is tight, else
    /// `u64::MAX` (for the cover check, [`State::wells_coverable`]).
    level: Vec<u64>,
    /// Scratch per section: the index of the first well ending after it.
    well_at: Vec<u32>,
    /// Scratch: the wells (first section, end section, height).
    wells: Vec<(u32, u32, u64)>,
    /// Scratch: (well, end, start) of the items that may cover part of a well.
    spans: Vec<(u32, u32, u32)>,
    /// Whether the cover check runs ([`State::wells_coverable`]).
    pub(super) cover: bool,
    /// The preorder's keys, when independent parts get their own preorder
    /// ([`State::rerank`]).
    pub(super) rerank: Option<[Key; 3]>,
    /// Undo log of `rank` changes: (item, old rank).
    rank_log: Vec<(u32, usize)>,
    /// The state the current part's preorder was made from (zero: the static
    /// preorder). Ranks depend on it, so failed states are keyed with it.
    rank_basis: Fingerprint,
    /// Scratch for [`State::rerank`]: (keys, caller index, item).
    part_order: Vec<(greedy::KeyValues, usize, u32)>,
    /// Restart seed: nonzero perturbs the order candidates at one floor are tried in
    /// (each rank moves up by a pseudo-random amount below `spread`), never which
    /// ones are tried, so every pass stays complete.
    pub(super) shuffle: u64,
    /// How far a restart may move a candidate's rank ([`State::shuffle`]).
    pub(super) spread: u32,
    /// Undo log of `floor` changes: (item, old floor).
    floor_log: Vec<(u32, u64)>,
    remaining: Vec<u64>,
    placed: Vec<bool>,
    pub(super) offsets: Vec<u64>,
    /// Work units left (one per open item or section visited, per overlap updated).
    pub(super) work_left: u64,
    /// The most items placed at once (for measurements).
    pub(super) deepest: usize,
    /// Nodes visited (for measurements).
    pub(super) nodes: u64,
    /// Stop once this instant has passed (looked at every [`CLOCK_EVERY`] nodes).
    deadline: Option<Instant>,
    /// Set when the deadline, not the work budget, stopped the search.
    pub(super) timed_out: bool,
    /// The race this pass takes part in (looked at every [`CLOCK_EVERY`] nodes).
    pub(super) cutoff: Option<Cutoff<'a>>,
    /// Set when another preorder's answer stopped the search ([`super::Race`]).
    pub(super) cut: bool,
    /// The fingerprint of the unplaced items and their floors.
    state: Fingerprint,
    /// Each item's fingerprint seed.
    seeds: Vec<u64>,
    /// States seen to fail under this preorder, with the lowest (offset, rank) they
    /// failed at.
    pub(super) failed: &'a mut FailedStates,
    /// Scratch for the sweep over sections: (lowest offset, end section) of the open
    /// items covering the current section, smallest offset on top.
    covering: BinaryHeap<Reverse<(u64, u32)>>,
    /// Placements in order, each with the floor log length before it.
    trail: Vec<(usize, usize)>,
    /// The open items of every node on the current path, each node's above its
    /// parent's.
    pub(super) stack: Vec<u32>,
    /// The candidates (floor, order key, item) of every node on the current path: the
    /// key is the rank, perturbed in a restart ([`State::shuffle`]).
    cand: Vec<(u64, u32, u32)>,
}

/// A pass's place in the race between preorders: the runner, the work its preorder
/// spent before the pass, and the pass's work.
#[derive(Clone, Copy)]
pub(super) struct Cutoff<'a> {
    pub runner: &'a Runner,
    pub before: u64,
    pub work: u64,
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
    pub(super) fn new(
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
            low_ends: vec![0; p.sections + 1],
            covered: vec![false; p.sections + 1],
            level: vec![u64::MAX; p.sections + 1],
            well_at: vec![0; p.sections + 1],
            wells: Vec::new(),
            spans: Vec::new(),
            cover: true,
            rerank: None,
            rank_log: Vec::new(),
            rank_basis: Fingerprint::default(),
            part_order: Vec::new(),
            shuffle: 0,
            spread: 1,
            floor_log: Vec::new(),
            remaining: p.live.clone(),
            placed: vec![false; p.items.len()],
            offsets: vec![0; p.items.len()],
            work_left: work,
            nodes: 0,
            deepest: 0,
            deadline,
            timed_out: false,
            cutoff: None,
            cut: false,
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
    pub(super) fn peak(&self) -> u64 {
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
    pub(super) fn descend(
        &mut self,
        from: usize,
        to: usize,
        offset: u64,
        last_rank: usize,
    ) -> Step {
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

    /// One independent part, `self.stack[from..to]`, from offset 0, in its own
    /// preorder when parts get one.
    fn descend_part(&mut self, from: usize, to: usize) -> Step {
        let Some(keys) = self.rerank else {
            return self.descend(from, to, 0, 0);
        };
        let mark = self.rank_log.len();
        let basis = self.rank_basis;
        self.rerank(from, to, keys);
        self.rank_basis = self.state;
        let step = self.descend(from, to, 0, 0);
        self.rank_basis = basis;
        while self.rank_log.len() > mark {
            if let Some((i, old)) = self.rank_log.pop() {
                self.rank[i as usize] = old;
            }
        }
        step
    }

    /// Whether every section in `first..last` (those the open items cover) can take
    /// the sizes still to place there above `offset`.
    fn sections_fit(&mut self, first: u32, last: u32, offset: u64) -> bool {
        self.work_left = self.work_left.saturating_sub(u64::from(last - first));
        let room = self.capacity.saturating_sub(offset);
        self.remaining[first as usize..last as usize]
            .iter()
            .all(|&r| r <= room)
    }

    /// Ranks the items of `self.stack[from..to]` among themselves by `keys`, largest
    /// first, with each item's total taken over the sizes still to place in its
    /// sections (ties by caller order, as in the static preorder); the old ranks go to
    /// the log. The ranks depend only on the unplaced items, so the failed-state table
    /// stays consistent.
    fn rerank(&mut self, from: usize, to: usize, keys: [Key; 3]) {
        self.part_order.clear();
        let mut work = 0u64;
        for k in from..to {
            let i = self.stack[k];
            let it = self.p.items[i as usize];
            let total = self.remaining[it.a as usize..it.b as usize]
                .iter()
                .copied()
                .max()
                .unwrap_or(0);
            work += u64::from(it.b - it.a);
            self.part_order
                .push((greedy::key_values(keys, &it, total), it.index, i));
        }
        self.part_order
            .sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        for (r, &(_, _, i)) in self.part_order.iter().enumerate() {
            self.rank_log.push((i, self.rank[i as usize]));
            self.rank[i as usize] = r;
        }
        self.work_left = self.work_left.saturating_sub(work);
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
        self.deepest = self.deepest.max(self.trail.len());
        if self.nodes.is_multiple_of(CLOCK_EVERY)
            && self.deadline.is_some_and(|d| Instant::now() >= d)
        {
            self.timed_out = true;
            self.work_left = 0;
            return Step::OutOfBudget;
        }
        if self.nodes.is_multiple_of(CLOCK_EVERY)
            && self.cutoff.is_some_and(|c| {
                let spent = c.before + (c.work - self.work_left);
                c.runner.race.beaten(spent, c.runner.id)
            })
        {
            self.cut = true;
            self.work_left = 0;
            return Step::OutOfBudget;
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
        // Independent parts (no item of one is live with an item of another) are runs
        // of the open list: solve each on its own; one that fails makes the whole fail.
        // `reach`: the end of the last section the open items cover.
        let mut reach = 0u32;
        let mut cut = None;
        for k in base..end {
            let it = &self.p.items[self.stack[k] as usize];
            if cut.is_none() && k > base && it.a >= reach {
                cut = Some(k);
            }
            reach = reach.max(it.b);
        }
        // Every item left sits at or above `offset`: a section whose items cannot all
        // fit above it fails this node (a plain scan, before the failed-state table
        // and the sweep, which most failing nodes never need). The parts of a split
        // start again from offset 0 and would lose this check.
        let first = self.p.items[self.stack[base] as usize].a;
        if offset > 0 && !self.sections_fit(first, reach, offset) {
            return Step::Failed;
        }
        if let Some(cut) = cut {
            let mark = self.trail.len();
            let step = self.descend_part(base, cut);
            let step = match step {
                Step::Solved => self.descend_part(cut, end),
                other => other,
            };
            if !matches!(step, Step::Solved) {
                self.undo_to(mark);
            }
            return step;
        }
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
        let first = self.p.items[self.stack[base] as usize].a;
        let last = reach;
        self.work_left = self
            .work_left
            .saturating_sub((end - base + (last - first) as usize) as u64);
        let cand_base = self.cand.len();
        let sweep = self.sweep_sections(base, end, offset, last_rank, first, last);
        let mut fits = sweep.fits;
        let mut corner = sweep.corner;
        if fits && self.cover {
            fits = self.wells_coverable(base, end, first as usize, last as usize, offset);
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
            let ceiling = self.capacity.saturating_sub(sweep.most_left);
            self.keep_triable(cand_base, sweep.min_top, ceiling, corner, offset);
            step = self.try_candidates(cand_base, base, end, last_rank, corner.is_some());
        }
        self.cand.truncate(cand_base);
        step
    }

    /// The sweep of [`State::expand`] over the sections `first..last` the open items
    /// `stack[base..end]` cover, with the covering items in a heap by lowest offset (the
    /// open items are sorted by first section): the lowest top any open item could
    /// reach, whether every section still fits under the capacity, the tight sections
    /// (marked in `level` and, with corner turns, `tight`), the most still to place in
    /// one section; the candidates (canonical items that fit) pushed on `cand`.
    fn sweep_sections(
        &mut self,
        base: usize,
        end: usize,
        offset: u64,
        last_rank: usize,
        first: u32,
        last: u32,
    ) -> SectionSweep {
        let mut sweep = SectionSweep {
            min_top: u64::MAX,
            fits: true,
            corner: None,
            most_left: 0,
        };
        self.covering.clear();
        let mut next = base;
        // Open items at the offset that cover the current section; `low_ends` counts
        // them by end section.
        let mut low = 0u32;
        for t in first..last {
            self.level[t as usize] = u64::MAX;
            while next < end && self.p.items[self.stack[next] as usize].a == t {
                let i = self.stack[next] as usize;
                next += 1;
                let floor = self.floor[i];
                let it = self.p.items[i];
                sweep.min_top = sweep.min_top.min(floor.saturating_add(it.size));
                let lowest = floor.max(offset);
                if lowest == offset {
                    // Nothing sits lower than the offset: a count is enough.
                    low += 1;
                    self.low_ends[it.b as usize] += 1;
                } else if !self
                    .covering
                    .peek()
                    .is_some_and(|Reverse((top, b))| *top <= lowest && *b >= it.b)
                {
                    // An item no lower than the heap's top that leaves no later never
                    // becomes the lowest: skipped.
                    self.covering.push(Reverse((lowest, it.b)));
                }
                let rank = self.rank[i];
                let canonical = floor > offset || (floor == offset && rank >= last_rank);
                if canonical && floor.saturating_add(it.size) <= self.capacity {
                    let key = self.order_key(rank as u32);
                    self.cand.push((floor, key, i as u32));
                }
            }
            low -= self.low_ends[t as usize];
            self.low_ends[t as usize] = 0;
            let lowest = if low > 0 {
                Some(offset)
            } else {
                while self.covering.peek().is_some_and(|Reverse((_, b))| *b <= t) {
                    self.covering.pop();
                }
                self.covering.peek().map(|&Reverse((lowest, _))| lowest)
            };
            if let Some(lowest) = lowest {
                sweep.most_left = sweep.most_left.max(self.remaining[t as usize]);
                let need = lowest.saturating_add(self.remaining[t as usize]);
                if need > self.capacity {
                    sweep.fits = false;
                    break;
                }
                // A tight section at the offset: its space at `offset` must be filled
                // by an item placed at `offset` now.
                if need == self.capacity {
                    self.level[t as usize] = lowest;
                }
                if self.corners && lowest == offset && need == self.capacity {
                    self.tight[t as usize] = true;
                    sweep.corner = Some(t);
                }
            }
        }
        // Back to all zeros (a sweep cut short leaves counts past where it stopped).
        self.low_ends[first as usize..=last as usize].fill(0);
        sweep
    }

    /// Keeps in `cand[cand_base..]` only the candidates that may be tried, sorted (most
    /// nodes try one or two of them): not dominated by an item that fits wholly below
    /// (`min_top`), not above `ceiling`, the first unplaced of identical items, and
    /// covering the `corner` at `offset` when there is one.
    fn keep_triable(
        &mut self,
        cand_base: usize,
        min_top: u64,
        ceiling: u64,
        corner: Option<u32>,
        offset: u64,
    ) {
        let mut kept = cand_base;
        for k in cand_base..self.cand.len() {
            let (floor, _, i) = self.cand[k];
            let it = self.p.items[i as usize];
            // An item fits wholly below: found with that item first.
            let dominated = floor >= min_top;
            // Every later placement sits at `floor` or higher, and the items still
            // to place in the fullest section stack above it (a section `i` covers
            // too: the others there rest on `i`): no room.
            let too_high = floor > ceiling;
            // Of identical items only the first unplaced one in rank order.
            let twin = self.twin[i as usize].is_some_and(|t| !self.placed[t]);
            // A corner is filled by an item at the offset that covers it.
            let off_corner = corner.is_some_and(|t| floor > offset || it.a > t || it.b <= t);
            if !(dominated || twin || off_corner || too_high) {
                self.cand[kept] = self.cand[k];
                kept += 1;
            }
        }
        self.cand.truncate(kept);
        self.cand[cand_base..].sort_unstable();
    }

    /// Places each kept candidate in turn and descends, within the discrepancies left
    /// (the k-th candidate tried costs k), until one solves the node, runs out of
    /// budget, or was hatless (no open item live with it: later candidates sit no
    /// lower and would solve nothing more).
    fn try_candidates(
        &mut self,
        cand_base: usize,
        base: usize,
        end: usize,
        last_rank: usize,
        at_corner: bool,
    ) -> Step {
        for (tried, k) in (cand_base..self.cand.len()).enumerate() {
            let tried = tried as u64;
            let (floor, _, i) = self.cand[k];
            let i = i as usize;
            let rank = self.rank[i];
            if tried > self.disc_left {
                break;
            }
            let mark = self.trail.len();
            self.disc_left -= tried;
            let hatless = self.put(i, floor);
            // After a corner placement the items still to go at `offset` may come
            // in any order of rank at least `last_rank` (they are pairwise apart in
            // time, so any order places them the same).
            let child_rank = if at_corner { last_rank } else { rank };
            let next = self.descend(base, end, floor, child_rank);
            self.disc_left += tried;
            if matches!(next, Step::Solved) {
                return next;
            }
            self.undo_to(mark);
            if matches!(next, Step::OutOfBudget) || hatless {
                // Hatless: no open item is live with `i`, so placing it changed
                // nothing for them; every later candidate sits no lower, and its
                // solutions would work with `i` here too.
                return next;
            }
        }
        Step::Failed
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

    /// Whether every *well* can be covered: a well is a run of tight sections (whose
    /// lowest fill plus the sizes still to place there is the capacity) with the same
    /// lowest fill `h` (`self.level`). The space at `h` in each of them must be covered
    /// by an item placed exactly at `h`: every open item there sits at `h` or higher,
    /// and none of the space above `h` may be lost. Such an item has its floor at `h`
    /// now (at the offset or above it), and the items at one height never share a
    /// section: per well, a dynamic program over its sections (`covered[t]` when the
    /// sections of the well before `t` can be covered by such items, clipped to the
    /// well, ending at or before `t`).
    fn wells_coverable(
        &mut self,
        base: usize,
        end: usize,
        first: usize,
        last: usize,
        offset: u64,
    ) -> bool {
        self.wells.clear();
        let mut t = first;
        while t < last {
            let h = self.level[t];
            let s0 = t;
            while t < last && self.level[t] == h {
                self.well_at[t] = self.wells.len() as u32;
                t += 1;
            }
            if h != u64::MAX {
                self.wells.push((s0 as u32, t as u32, h));
            } else {
                // No well here: point past it to the next one.
                for s in s0..t {
                    self.well_at[s] = self.wells.len() as u32;
                }
            }
        }
        if self.wells.is_empty() {
            return true;
        }
        self.spans.clear();
        for k in base..end {
            let i = self.stack[k] as usize;
            let floor = self.floor[i];
            let it = self.p.items[i];
            if floor < offset || floor.saturating_add(it.size) > self.capacity {
                continue;
            }
            let mut w = self.well_at[it.a as usize] as usize;
            while let Some(&(s0, s1, h)) = self.wells.get(w) {
                if s0 >= it.b {
                    break;
                }
                if h == floor {
                    self.spans.push((w as u32, it.b.min(s1), it.a.max(s0)));
                }
                w += 1;
            }
        }
        self.spans.sort_unstable();
        self.work_left = self
            .work_left
            .saturating_sub((last - first + end - base + self.spans.len()) as u64);
        let mut k = 0;
        for (w, &(s0, s1, _)) in self.wells.iter().enumerate() {
            let (s0, s1) = (s0 as usize, s1 as usize);
            self.covered[s0] = true;
            for t in s0..s1 {
                let mut reach = false;
                while let Some(&(sw, b, a)) = self.spans.get(k) {
                    if sw as usize != w || b as usize > t + 1 {
                        break;
                    }
                    k += 1;
                    reach |= self.covered[a as usize];
                }
                self.covered[t + 1] = reach;
            }
            if !self.covered[s1] {
                return false;
            }
        }
        true
    }

    /// The key candidates at one floor are tried in: the rank, moved up by a
    /// pseudo-random amount below `spread` in a restart.
    fn order_key(&self, rank: u32) -> u32 {
        if self.shuffle == 0 {
            return rank;
        }
        let noise = seed(self.shuffle as usize ^ (rank as usize).rotate_left(32));
        rank.saturating_add((noise % u64::from(self.spread.max(1))) as u32)
    }

    /// The failed-state key: the fingerprint, with the discrepancies left when limited.
    pub(super) fn key(&self) -> Fingerprint {
        let mut key = if self.rerank.is_some() {
            self.state.with(self.rank_basis)
        } else {
            self.state
        };
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
/// What [`State::expand`]'s sweep over the sections found.
struct SectionSweep {
    /// The lowest top any open item could reach.
    min_top: u64,
    /// Whether every section the open items cover still fits under the capacity.
    fits: bool,
    /// A tight section at the offset (with corner turns), the last one met.
    corner: Option<u32>,
    /// The most still to place in one section.
    most_left: u64,
}
