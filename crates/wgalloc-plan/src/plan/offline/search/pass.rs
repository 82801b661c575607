//! One pass of the search over one preorder (depth first, or under a discrepancy
//! limit), and the limited-discrepancy turns made of such passes.
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::memo::FailedStates;
use super::state::{Cutoff, State, Step};
use super::{Found, Runner, Stats};
use crate::plan::offline::greedy::Key;
use crate::plan::offline::prepared::Prepared;

/// What every search pass over one preorder shares.
pub(super) struct Search<'a> {
    pub(super) p: &'a Prepared,
    pub(super) capacity: u64,
    pub(super) order: &'a [usize],
    /// The preorder's keys, when independent parts get their own preorder.
    pub(super) rerank: Option<[Key; 3]>,
    pub(super) overlaps: &'a [Vec<u32>],
    /// Every item, sorted by first section.
    pub(super) all: &'a [u32],
    pub(super) deadline: Option<Instant>,
    /// Corner branching on tight sections ([`Tuning::corners`]).
    pub(super) corners: bool,
    /// The cover check at corner nodes ([`super::Tuning::cover`]).
    pub(super) cover: bool,
    /// How far a restart may move a candidate's rank ([`State::shuffle`]).
    pub(super) spread: u32,
    /// The race between preorders this pass takes part in.
    pub(super) runner: Runner,
}

impl Search<'_> {
    /// One pass from the root with at most `discrepancies` on a path (`None`: plain
    /// depth first), `work` units and the failed states in `failed`.
    pub(super) fn pass(
        &self,
        failed: &mut FailedStates,
        discrepancies: Option<u64>,
        work: u64,
        stats: &mut Stats,
    ) -> Pass {
        self.pass_shuffled(failed, discrepancies, work, stats, 0)
    }

    /// [`Search::pass`] with the candidates at one floor tried in an order perturbed by
    /// `shuffle` (0: rank order; see [`State::shuffle`]).
    fn pass_shuffled(
        &self,
        failed: &mut FailedStates,
        discrepancies: Option<u64>,
        work: u64,
        stats: &mut Stats,
        shuffle: u64,
    ) -> Pass {
        let before = self.runner.spent.load(Ordering::Relaxed);
        if self.runner.race.beaten(before, self.runner.id) {
            return Pass {
                found: None,
                exhausted: true,
                cut: true,
                work_left: 0,
            };
        }
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
        state.cover = self.cover;
        state.rerank = self.rerank;
        state.shuffle = shuffle;
        state.spread = self.spread;
        state.cutoff = Some(Cutoff {
            runner: &self.runner,
            before,
            work,
        });
        state.stack.extend_from_slice(self.all);
        let step = state.descend(0, self.all.len(), 0, 0);
        self.runner
            .spent
            .store(before + (work - state.work_left), Ordering::Relaxed);
        stats.nodes += state.nodes;
        stats.passes += 1;
        stats.deepest = stats.deepest.max(state.deepest as u64);
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
            cut: state.cut,
            work_left: state.work_left,
        }
    }

    /// A depth-first turn: what it found (if anything final) and the work it left.
    pub(super) fn depth_first(
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
pub(super) struct Pass {
    /// A plan, proven infeasibility, or a timeout; `None` when the pass failed
    /// within its discrepancy limit or ran out of work.
    pub(super) found: Option<Found>,
    /// Whether the work limit stopped the pass.
    pub(super) exhausted: bool,
    /// Whether another preorder's answer stopped it ([`super::Race`]).
    pub(super) cut: bool,
    /// Work units left.
    pub(super) work_left: u64,
}

/// Limited-discrepancy search: at each node the k-th candidate tried (counting from
/// 0) costs k discrepancies, and a pass allows at most `level` on a path. Depth-first
/// search spends its work at the bottom of the tree, revising the last choices first;
/// where an early choice is wrong (dsa E) it never gets back to it, while a pass with
/// few discrepancies revises choices at every depth. The level rises by one after every
/// pass, also after one the work limit cut short (the next round's limit is twice as
/// large), so that the level and the work grow together. The passes search for a plan
/// only: the depth-first turns prove infeasibility.
pub(super) struct Lds {
    /// The discrepancies allowed in the next pass.
    level: u64,
    /// Failed states, keyed with the discrepancies left.
    failed: FailedStates,
}

impl Lds {
    pub(super) fn new(items: usize) -> Lds {
        Lds {
            level: 0,
            failed: FailedStates::for_items(items),
        }
    }

    /// Passes at rising levels until `work` runs out: what was found (if anything
    /// final) and the work left.
    pub(super) fn turn(
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
            if pass.cut {
                return (None, 0);
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

/// Restarts of a complete depth-first search: pass `k` tries the candidates at one
/// floor in an order perturbed by seed `k` (pass 0 in rank order) and stops after
/// `unit` times the k-th term of Luby's sequence (1, 1, 2, 1, 1, 2, 4, ...) in work.
/// On tilings a pass either fits in a few thousand nodes or thrashes below an early
/// wrong choice for a very long time; short passes in other orders get past it. Every
/// pass is complete (the perturbation changes the order candidates are tried in,
/// never which), so the passes share one failed-state table and a pass that fails
/// proves infeasibility.
pub(super) struct Restarts {
    /// Passes made so far (over all rounds).
    pub(super) passes: u64,
    /// Work units of a pass of Luby weight 1.
    pub(super) unit: u64,
}

impl Restarts {
    /// Passes until `work` runs out: what was found (if anything final) and the work
    /// left.
    pub(super) fn turn(
        &mut self,
        search: &Search<'_>,
        failed: &mut FailedStates,
        mut work: u64,
        stats: &mut Stats,
    ) -> (Option<Found>, u64) {
        while work > 0 {
            let share = self.unit.saturating_mul(luby(self.passes + 1)).min(work);
            work -= share;
            let pass = search.pass_shuffled(failed, None, share, stats, self.passes);
            self.passes += 1;
            work += pass.work_left;
            if pass.found.is_some() {
                return (pass.found, work);
            }
            if pass.cut {
                return (None, 0);
            }
        }
        (None, 0)
    }
}

/// The `i`-th term (from 1) of Luby's restart sequence: 1, 1, 2, 1, 1, 2, 4, 1, ...
pub(super) fn luby(i: u64) -> u64 {
    let mut i = i.max(1);
    loop {
        // The smallest k with 2^k - 1 >= i.
        let k = 64 - i.leading_zeros() as u64;
        if i == (1u64 << k) - 1 {
            return 1 << (k - 1);
        }
        i -= (1u64 << (k - 1)) - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::luby;

    #[test]
    fn luby_sequence_starts_as_published() {
        let got: Vec<u64> = (1..=15).map(luby).collect();
        assert_eq!(got, [1, 1, 2, 1, 1, 2, 4, 1, 1, 2, 1, 1, 2, 4, 8]);
    }
}
