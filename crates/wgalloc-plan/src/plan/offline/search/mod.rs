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
//! * room above: every placement below a node's child sits at or above the
//!   candidate's floor `f`, so a candidate is not tried where the fullest section of
//!   the node still has more than `capacity - f` to place (the child's inference would
//!   fail: on the published instances four children in five did, each paying a whole
//!   node first);
//! * of several identical items only the first in rank order is a candidate;
//! * hatless: when the item just placed is live with no unplaced item, its placement
//!   changed nothing for the others, so if that branch fails the later candidates
//!   (all no lower) fail too;
//! * a candidate whose top would exceed the capacity is not placed;
//! * independent parts (no unplaced item of one live with one of another) are solved
//!   one after the other, each from offset 0 and (as MiniMalloc does) in a preorder of
//!   its own: the same keys, with each item's total taken over the sizes still to
//!   place; before a node splits, its sections are checked at its offset, which the
//!   parts no longer carry (without these two, MiniMalloc's published instances H and
//!   I did not fit in 30 s);
//! * lifted offset: every later placement sits at or above the lowest floor among the
//!   items that may go next, so a node works at that offset (the section check counts
//!   the space below it as lost);
//! * failed states ([`memo`]): the unplaced items with their floors decide what lies
//!   below a node; a state that failed is skipped when met again (placing the items
//!   below in another order often leads back to it), at the same or a higher offset,
//!   in this round and in the later ones of the same preorder;
//! * wells (on tilings, see below): a run of tight sections with the same lowest fill
//!   `h` must be covered at `h` by items placed exactly there, pairwise apart in time;
//!   a node where some run cannot be ([`state`]'s cover check) fails.
//!
//! Nodes allocate nothing: the open items and candidates of the nodes on the current
//! path live on two shared stacks, and placements are undone from logs.
//!
//! Several preorders (MiniMalloc's WAT, TAW and TWA) race ([`Probe`]): each runs its own
//! schedule of depth-first turns with a work limit that doubles every round (so that a
//! lucky order finds a solution early and a hard instance still gets a long run), on a
//! thread of its own where the machine has cores, and the answer reached with the
//! least work wins, so threads change the time, never the plan. Limited-discrepancy
//! turns ([`Lds`], [`Tuning::lds`]) are off: once parts got their own preorder, every
//! published instance fitted with less work without them. Where at least 3/4 of
//! the sections are full at the capacity (a tiling), each round starts every preorder
//! with a corner turn: depth first, but where a section is tight at the offset (the
//! sizes still to place there fill it exactly from the offset up) only the items that
//! can go at the offset and cover it branch ([`Tuning::corners`]). A corner turn is a
//! series of short restarts ([`Restarts`], Luby's sequence) that try the candidates at
//! one floor in perturbed orders and share the preorder's failed-state table; the cover
//! check runs under the same gate.
//!
//! The files: this one drives the turns; [`pass`] is one pass from the root and the
//! turns made of passes; [`state`] is the state along a path and one node's expansion;
//! [`memo`] the failed-state table.

mod memo;

#[cfg(test)]
mod brute;
mod pass;
#[cfg(test)]
mod probe;
mod state;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::greedy;
use super::prepared::Prepared;
use memo::FailedStates;
use pass::{Lds, Restarts, Search};
pub(crate) use state::overlap_lists;

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
    /// The static preorders with their keys.
    preorders: Vec<(Vec<usize>, [greedy::Key; 3])>,
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
    /// Whether each round gives every preorder a limited-discrepancy turn (off: with
    /// parts in their own preorder every published instance needs less work without).
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
    /// The cover check at corner nodes: the tight sections at the offset must be
    /// coverable by candidates at the offset pairwise apart in time.
    pub cover: bool,
    /// Corner turns are made of restarts ([`Restarts`]) in perturbed orders, each
    /// of about this many nodes times Luby's sequence; 0: one pass in rank order.
    pub restart_nodes: u64,
    /// A restart moves a candidate's rank by less than the item count divided by this.
    pub spread_div: u32,
    /// Depth-first turns are restarts too (as corner turns are).
    pub restart_all: bool,
    /// The preorders run on threads of their own when the machine has more than one
    /// core (the answer is the same either way; see [`Searcher::run`]).
    pub threads: bool,
    /// Independent parts are searched in their own preorder: the same keys, with
    /// each item's total taken over what is still to place (as MiniMalloc does).
    pub rerank: bool,
    /// With `rerank`, runners that keep the static preorder race beside those that
    /// do not.
    pub static_too: bool,
    /// The failed-state table ([`memo`]); off only to measure and test it.
    pub memo: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            lds: false,
            orders: 3,
            corners: true,
            corners_anywhere: false,
            cover: true,
            restart_nodes: 1024,
            spread_div: 8,
            restart_all: false,
            threads: true,
            rerank: true,
            static_too: false,
            memo: true,
        }
    }
}

impl<'a> Searcher<'a> {
    /// Builds what every search of `p` shares.
    #[cfg(test)]
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

    /// The search over the preorders in one go: a [`Probe`] advanced by `budget`.
    fn run(&self, capacity: u64, budget: u64, deadline: Option<Instant>) -> (Found, Stats) {
        let mut probe = self.probe(capacity, deadline);
        let found = probe.advance(budget);
        (found, probe.stats())
    }

    /// A search for a placement at most `capacity` high that can be advanced by more
    /// work a piece at a time ([`Probe::advance`]).
    pub(crate) fn probe(&self, capacity: u64, deadline: Option<Instant>) -> Probe<'_> {
        let p = self.p;
        let settled = if p.lower_bound > capacity {
            Some(Found::Infeasible)
        } else if p.items.is_empty() || self.preorders.is_empty() {
            Some(Found::Plan(Vec::new(), 0))
        } else {
            None
        };
        let race = Arc::new(Race::new());
        let runs = match settled {
            Some(_) => Vec::new(),
            None => self
                .portfolio()
                .into_iter()
                .enumerate()
                .map(|(id, (order, rerank))| {
                    let runner = Runner {
                        race: Arc::clone(&race),
                        id,
                        spent: Arc::new(AtomicU64::new(0)),
                    };
                    OrderRun::new(self, order, rerank, runner, capacity, deadline)
                })
                .collect(),
        };
        Probe {
            runs,
            settled,
            threads: self.tuning.threads,
        }
    }

    /// The passes over preorder `order` at `capacity` share this.
    /// The runners of a probe: (preorder, whether independent parts get their own
    /// preorder), the static ones first.
    fn portfolio(&self) -> Vec<(usize, bool)> {
        let orders = 0..self.preorders.len();
        let mut runners = Vec::new();
        if !self.tuning.rerank || self.tuning.static_too {
            runners.extend(orders.clone().map(|order| (order, false)));
        }
        if self.tuning.rerank {
            runners.extend(orders.map(|order| (order, true)));
        }
        runners
    }

    #[allow(clippy::too_many_arguments)]
    fn over(
        &self,
        order: usize,
        rerank: bool,
        capacity: u64,
        deadline: Option<Instant>,
        corners: bool,
        cover: bool,
        runner: Runner,
    ) -> Search<'_> {
        Search {
            p: self.p,
            capacity,
            order: &self.preorders[order].0,
            rerank: rerank.then_some(self.preorders[order].1),
            overlaps: &self.overlaps,
            all: &self.all,
            deadline,
            corners,
            cover,
            spread: (self.p.items.len() as u32 / self.tuning.spread_div.max(1)).max(1),
            runner,
        }
    }
}

/// One capacity's search, advanced a piece of work at a time. Each preorder runs its
/// own schedule of turns ([`OrderRun`]) on an equal share of every piece, on a thread
/// of its own when the machine has more than one core. The answer is the one reached
/// with the least work (ties: the earlier preorder), so it does not depend on how
/// the threads happen to run: a preorder stops once it has spent more than the best
/// answer so far ([`Race`]), and preorders taking turns on one core (the one that
/// has spent the least going next) give the same answer. Without a deadline the
/// result depends on the pieces of work alone.
pub(crate) struct Probe<'s> {
    runs: Vec<OrderRun<'s>>,
    /// The answer when it needs no search (capacity below the bound, nothing to place).
    settled: Option<Found>,
    threads: bool,
}

impl Probe<'_> {
    /// Searches on with `work` more units (shared equally by the preorders): a plan,
    /// proven infeasibility, or `Unknown` while neither is known. Once final, the
    /// answer stays.
    pub(crate) fn advance(&mut self, work: u64) -> Found {
        if let Some(found) = &self.settled {
            return found.clone();
        }
        let share = (work / self.runs.len() as u64).max(1);
        for run in &mut self.runs {
            run.left = run.left.saturating_add(share);
        }
        let parallel = self.threads
            && self.runs.iter().filter(|run| run.going()).count() > 1
            && super::has_second_core();
        if parallel {
            std::thread::scope(|scope| {
                for run in self.runs.iter_mut().filter(|run| run.going()) {
                    // A preorder whose thread is refused runs here below instead.
                    let _refused = std::thread::Builder::new()
                        .name("wgalloc-search".into())
                        .stack_size(SEARCH_STACK)
                        .spawn_scoped(scope, || while run.step() {});
                }
            });
            for run in &mut self.runs {
                while run.step() {}
            }
        } else {
            loop {
                let next = (0..self.runs.len())
                    .filter(|&id| self.runs[id].going())
                    .min_by_key(|&id| (self.runs[id].spent(), id));
                let Some(next) = next else { break };
                self.runs[next].step();
            }
        }
        let best = self
            .runs
            .iter()
            .filter_map(|run| run.answer.as_ref())
            .min_by_key(|answer| answer.key);
        match best {
            Some(answer) => {
                self.settled = Some(answer.found.clone());
                answer.found.clone()
            }
            None => Found::Unknown,
        }
    }

    /// What the search did so far, over all preorders.
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for run in &self.runs {
            stats.add(&run.stats);
        }
        stats
    }
}

/// One preorder's schedule: rounds of turns with a work limit that doubles every
/// round. Each round is a corner turn (on tilings), a depth-first turn (complete, so
/// it can prove infeasibility) and, where [`Tuning::lds`] is on, a limited-discrepancy
/// turn (see [`Lds`]) with half the work. It runs on the work it is given
/// ([`OrderRun::left`]); a turn that work cuts short is taken again, whole, when more
/// comes.
struct OrderRun<'s> {
    /// Searches without and with corner branching.
    search: Search<'s>,
    cornered: Search<'s>,
    runner: Runner,
    /// Corner turns run (a tiling-like instance at this capacity).
    corners: bool,
    /// Restart passes (Luby's sequence) of depth-first turns too.
    restart_all: bool,
    lds: bool,
    restarts_on: bool,
    /// The tables and counters of the turns, kept over the rounds.
    turns: Turns,
    /// Work given and not yet spent.
    left: u64,
    /// The work limit of this round's turns.
    limit: u64,
    /// The next kind of turn in the round.
    next: usize,
    /// Set once the preorder answered, hit the deadline, or can no longer win.
    done: bool,
    /// What the preorder found (a plan or proven infeasibility).
    answer: Option<Answer>,
    stats: Stats,
}

impl<'s> OrderRun<'s> {
    fn new(
        searcher: &'s Searcher<'_>,
        order: usize,
        rerank: bool,
        runner: Runner,
        capacity: u64,
        deadline: Option<Instant>,
    ) -> OrderRun<'s> {
        let p = searcher.p;
        let tuning = searcher.tuning;
        // About as many nodes as items in the first round.
        let n = p.items.len() as u64;
        let limit = n.saturating_mul(n + p.sections as u64).max(1024);
        let unit = tuning.restart_nodes.saturating_mul(n + p.sections as u64);
        // Corner turns only where most sections are full at this capacity (a tiling):
        // elsewhere few sections become tight and the turns only take work from the
        // others (dsa B, 61% full, took 1.8 times as long with them; E no longer fit
        // within `best`'s budget).
        let corners = tuning.corners && (tuning.corners_anywhere || p.mostly_full_at(capacity));
        // The cover check under the same gate: on dsa E (8% full) it changed which
        // nodes the limited-discrepancy passes reach within their work, and E no longer
        // fit in 1e9 units.
        let cover = tuning.cover && corners;
        OrderRun {
            search: searcher.over(
                order,
                rerank,
                capacity,
                deadline,
                false,
                cover,
                runner.clone(),
            ),
            cornered: searcher.over(
                order,
                rerank,
                capacity,
                deadline,
                true,
                cover,
                runner.clone(),
            ),
            runner,
            corners,
            restart_all: tuning.restart_all && tuning.restart_nodes > 0,
            lds: tuning.lds,
            restarts_on: tuning.restart_nodes > 0,
            turns: Turns {
                depth_first: if tuning.memo {
                    FailedStates::for_items(p.items.len())
                } else {
                    FailedStates::disabled()
                },
                lds: Lds::new(p.items.len()),
                restarts: Restarts { passes: 0, unit },
                restarts_df: Restarts { passes: 0, unit },
            },
            left: 0,
            limit,
            next: 0,
            done: false,
            answer: None,
            stats: Stats::default(),
        }
    }

    /// The work this preorder has spent.
    fn spent(&self) -> u64 {
        self.runner.spent.load(Ordering::Relaxed)
    }

    /// Whether it can take another turn now.
    fn going(&self) -> bool {
        !self.done && self.left > 0
    }

    /// Runs the next turn; false once the preorder is done (it answered, the deadline
    /// passed, or another preorder answered with less work) or its work ran out.
    fn step(&mut self) -> bool {
        const KINDS: [Kind; 3] = [Kind::Corner, Kind::DepthFirst, Kind::Lds];
        if !self.going() {
            return false;
        }
        if self.runner.race.beaten(self.spent(), self.runner.id) {
            self.done = true;
            return false;
        }
        let at = self.next;
        let kind = KINDS[at];
        let limit = self.limit;
        self.next = (at + 1) % KINDS.len();
        if self.next == 0 {
            // The next round's turns get twice the work.
            self.limit = self.limit.saturating_mul(2);
        }
        let skip = match kind {
            Kind::Corner => !self.corners,
            Kind::DepthFirst => false,
            Kind::Lds => !self.lds,
        };
        if skip {
            return true;
        }
        // Limited-discrepancy turns get half the depth-first turns' work.
        let full = match kind {
            Kind::Corner | Kind::DepthFirst => limit,
            Kind::Lds => (limit / 2).max(1),
        };
        let work = full.min(self.left);
        self.left -= work;
        let turns = &mut self.turns;
        let stats = &mut self.stats;
        let (found, unused) = match kind {
            // Both depth-first kinds are complete under the same contract: a state one
            // proves to fail fails for the other too.
            Kind::Corner if self.restarts_on => {
                turns
                    .restarts
                    .turn(&self.cornered, &mut turns.depth_first, work, stats)
            }
            Kind::Corner => self
                .cornered
                .depth_first(&mut turns.depth_first, work, stats),
            Kind::DepthFirst if self.restart_all => {
                turns
                    .restarts_df
                    .turn(&self.search, &mut turns.depth_first, work, stats)
            }
            Kind::DepthFirst => self.search.depth_first(&mut turns.depth_first, work, stats),
            Kind::Lds => turns.lds.turn(&self.search, work, stats),
        };
        // Work a turn did not use goes back.
        self.left += unused;
        match found {
            None if work < full
                && self.left == 0
                && !self.runner.race.beaten(self.spent(), self.runner.id) =>
            {
                // Cut short by the work given: take this turn again, whole, when more
                // work comes.
                self.next = at;
                self.limit = limit;
                false
            }
            None => true,
            // A timeout ends this preorder without an answer.
            Some(Found::Unknown) => {
                self.done = true;
                false
            }
            Some(found) => {
                let key = self.runner.race.finish(self.spent(), self.runner.id);
                log::debug!(
                    "preorder runner {} answered after {} work units, {} nodes, {} passes ({:?} turn)",
                    self.runner.id,
                    self.spent(),
                    self.stats.nodes,
                    self.stats.passes,
                    kind
                );
                self.answer = Some(Answer { found, key });
                self.done = true;
                false
            }
        }
    }
}

/// Nodes between two looks at the clock when a deadline is set (and at the race
/// between preorders).
pub(crate) const CLOCK_EVERY: u64 = 4096;

/// More runners than a probe ever has (a power of two: race keys are work times it).
const MAX_RUNNERS: u64 = 16;

/// Stack of a search thread: the search recurses once per placed item (at most
/// `SEARCH_MAX_ITEMS`, well within 2 MiB); the rest is headroom.
const SEARCH_STACK: usize = 16 << 20;

/// A final answer of one preorder and its race key ([`Race`]).
struct Answer {
    found: Found,
    key: u64,
}

/// The race between preorders searching at one capacity: the least key (work spent
/// when answering, times 8, plus the preorder) of any answer so far. A preorder that
/// has spent more than that can no longer win and stops; one that could still win
/// never stops for it, so the winner does not depend on the threads' timing.
pub(super) struct Race {
    best: AtomicU64,
}

impl Race {
    fn new() -> Race {
        Race {
            best: AtomicU64::new(u64::MAX),
        }
    }

    /// The key of an answer by preorder `order` after `spent` work units.
    fn key(spent: u64, id: usize) -> u64 {
        spent.saturating_mul(MAX_RUNNERS) | id as u64
    }

    /// Records an answer; returns its key.
    fn finish(&self, spent: u64, id: usize) -> u64 {
        let key = Race::key(spent, id);
        self.best.fetch_min(key, Ordering::Relaxed);
        key
    }

    /// Whether preorder `id`, having spent `spent`, can no longer win.
    pub(super) fn beaten(&self, spent: u64, id: usize) -> bool {
        Race::key(spent, id) > self.best.load(Ordering::Relaxed)
    }
}

/// What a pass needs to take part in the race: the race, its preorder, and the work
/// the preorder has spent.
#[derive(Clone)]
pub(super) struct Runner {
    pub race: Arc<Race>,
    pub id: usize,
    pub spent: Arc<AtomicU64>,
}

/// What one search run did, for measurements and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Nodes visited over all preorders.
    pub nodes: u64,
    /// Nodes cut off because their state had failed before.
    pub memo_hits: u64,
    /// The most items placed at once on a path.
    pub deepest: u64,
    /// Passes from the root (restarts and turns).
    pub passes: u64,
}

impl Stats {
    /// Adds another preorder's counts.
    fn add(&mut self, other: &Stats) {
        self.nodes += other.nodes;
        self.memo_hits += other.memo_hits;
        self.deepest = self.deepest.max(other.deepest);
        self.passes += other.passes;
    }
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
    /// The corner turns' restarts.
    restarts: Restarts,
    /// The depth-first turns' restarts ([`Tuning::restart_all`]).
    restarts_df: Restarts,
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
fn preorders(p: &Prepared, count: usize) -> Vec<(Vec<usize>, [greedy::Key; 3])> {
    ORDERS
        .into_iter()
        .take(count.clamp(1, ORDERS.len()))
        .map(|keys| (greedy::by_keys(p, keys), keys))
        .collect()
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
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dsa/E.1048576.csv");
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
    fn preorders_on_threads_give_the_same_answer_as_taking_turns_on_one_core() {
        let on = |threads| Tuning {
            threads,
            ..Tuning::default()
        };
        let mut seen_plans = 0;
        for seed in 0..40u64 {
            let ranges: Vec<LiveRange> = (0..28u64)
                .map(|i| {
                    let x = (i * 7 + seed * 13) % 11;
                    r(x, x + 1 + (i + seed) % 5, 1 + (i * seed + 3) % 6)
                })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            for cap in [p.lower_bound, p.lower_bound + 1] {
                // Small budgets too, so that the race and the shares decide.
                for budget in [2_000, 20_000, 1 << 24] {
                    let alone = Searcher::tuned(&p, on(false)).run(cap, budget, None).0;
                    let threaded = Searcher::tuned(&p, on(true)).run(cap, budget, None).0;
                    assert_eq!(alone, threaded, "seed {seed} cap {cap} budget {budget}");
                    if let Found::Plan(offsets, peak) = &threaded {
                        p.assert_valid(offsets, *peak);
                        seen_plans += 1;
                    }
                }
            }
        }
        assert!(seen_plans > 40, "{seen_plans}");
        // A published instance where the preorders race for a long time (the third
        // one wins on its own; the others are cut when it answers).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dsa/F.1048576.csv");
        let problem = crate::plan::IntervalProblem::read_csv(path.as_ref()).expect("reads");
        let p = Prepared::new(&crate::plan::offline::interval_ranges(&problem), 1).expect("valid");
        let alone = Searcher::tuned(&p, on(false)).run(1_048_576, 200_000_000, None);
        let threaded = Searcher::tuned(&p, on(true)).run(1_048_576, 200_000_000, None);
        assert!(
            matches!(alone.0, Found::Plan(_, 1_048_576)),
            "{:?}",
            alone.1
        );
        assert_eq!(alone.0, threaded.0);
    }

    #[test]
    fn an_exhausted_budget_is_reported_as_unknown() {
        let ranges: Vec<LiveRange> = (0..40u64).map(|i| r(i % 7, i % 7 + 3, 1 + i % 5)).collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        assert_eq!(search(&p, p.lower_bound, 1), Found::Unknown);
    }
}
