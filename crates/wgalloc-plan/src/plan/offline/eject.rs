//! Ejection repair: a complete placement lowered under a ceiling one step at a time,
//! each item above the ceiling placed under it where what it displaces weighs least,
//! the displaced items placed again the same way.
//!
//! A greedy placement of a large malloc-like instance peaks above the lower bound by a
//! pile of small long-lived buffers: the holes the larger buffers leave are free at
//! some times of such a buffer's lifetime and not at others, so it goes on top. No
//! order of the greedy removes the pile (docs/scale.md, fourth and fifth rounds);
//! moving the buffers in the way does. An attempt at a ceiling `goal`:
//!
//! 1. lifts every item whose top is above `goal` onto a queue (largest first);
//! 2. takes the next item from the queue and places it at the lowest offset where it
//!    fits among the placed items live with it under `goal`; where none is free, at
//!    the offset under `goal` where the items it overlaps weigh least in all (the
//!    lowest such offset), and lifts those items onto the queue;
//! 3. succeeds when the queue is empty (every item under `goal`), fails when its
//!    steps run out.
//!
//! An item weighs its size times its lifetime (in time sections): a short-lived item
//! finds a free place again far more often than a long-lived one of the same size.
//! Each time an item is lifted its weight grows by its base weight, so that two items
//! do not lift each other in turn for ever (the weights of the classic min-conflicts
//! and guided local searches).
//!
//! [`lower`] starts with a ceiling a 32nd of the excess (peak minus lower bound)
//! under the peak; after a success it keeps the step (doubles it, up to the first,
//! where the success was cheap: [`GROW_BELOW`]). After a failure it first completes
//! the attempt's placement: every item still lifted goes, largest first, to the
//! lowest offset free over its lifetime, above the ceiling where need be. Where that
//! placement ends under the ceiling after all, the ceiling holds (a success); else
//! it is kept where it peaks below the last complete one (most of the pile went
//! under the ceiling before the work ran out), and otherwise the repair goes back to
//! the last complete placement. Either way it halves the step (an attempt may spend
//! a quarter of the work left), until the step is below the sizes' common unit,
//! [`MISSES_IN_A_ROW`] attempts have failed in a row (a kept completion is not a
//! failure), the target is reached, the work
//! runs out or the deadline passes. Every placement it keeps is complete and valid.
//!
//! A step costs O(L) for L items live with the one placed (read from
//! [`MovableSpans`]' contiguous slots and bucket-sorted by offset and by top), plus
//! O(log T) per item lifted or placed; completing a missed attempt costs O(k L) for
//! the k items it left, plus O(n + k log k) to find and order them; restoring the
//! last complete placement after a failure costs O(n log T). An attempt cut by the
//! deadline is not completed (the completion checks the clock first), so under a
//! deadline the last attempt's work is lost, as before.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::greedy::{sort_by_start, SortScratch};
use super::index::{MovableSpans, OverlapIndex, Span};
use super::prepared::Prepared;

/// What [`lower`] aims at and may spend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    /// Stop once the peak is at or below this.
    pub target: u64,
    /// Work all attempts may spend together: a unit per item live with an item placed
    /// (read from the spans), at least one per step, and a unit per item per attempt.
    /// The completion of a missed attempt is not cut by the work
    /// (its items are at most those the attempt had left): it may take the total a
    /// little past this, never further than that completion.
    pub work: u64,
    /// Stop once this instant has passed (checked every [`DEADLINE_STEPS`] steps).
    pub deadline: Option<Instant>,
    /// Stop once this is raised (by another thread; looked at with the clock).
    pub stop: Option<&'a AtomicBool>,
}

impl Limits<'_> {
    /// When the attempts must end besides their work.
    fn until(&self) -> Until<'_> {
        Until {
            deadline: self.deadline,
            stop: self.stop,
        }
    }
}

/// When a step of the repair must end: a deadline, a flag another thread may raise.
#[derive(Debug, Clone, Copy, Default)]
struct Until<'a> {
    deadline: Option<Instant>,
    stop: Option<&'a AtomicBool>,
}

impl Until<'_> {
    /// Whether the deadline has passed or the flag was raised.
    fn passed(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) || expired(self.deadline)
    }
}

/// How many steps run between two looks at the clock: a step reads the items live
/// with one item (at most a few tens of thousands, well under a millisecond).
const DEADLINE_STEPS: u64 = 16;

/// The first ceiling is this fraction of the excess under the peak.
const FIRST_STEP_DIVISOR: u64 = 32;

/// One attempt may spend at most this fraction of the work left (at least
/// [`MIN_ATTEMPT_WORK`]): a ceiling that is out of reach must not take all of it.
const ATTEMPT_SHARE: u64 = 4;

/// After a success that spent under 1 / this of the work it was allowed, the step
/// doubles again (up to the first step): the ceiling was far from tight, and a step
/// halved by an early miss would otherwise stay small for the rest of the repair. On
/// a million malloc-like buffers with 10 s (seed 3, the fifteenth round) the step
/// fell from 16,893 to 4,223 bytes after two misses and the repair crept to 1.0058 by
/// the deadline; growing again it reached 1.0048.
const GROW_BELOW: u64 = 16;

/// Work an attempt may always spend, whatever is left.
const MIN_ATTEMPT_WORK: u64 = 1 << 20;

/// After this many failed attempts in a row the repair stops: on instances whose peak
/// is set by the largest items (few sizes, up to 4 MiB; 20,000 buffers live at once)
/// ceilings from a 32nd of the excess down to a few hundred bytes under the peak all
/// failed, each with a quarter of the work left.
const MISSES_IN_A_ROW: u32 = 3;

/// Lowers the valid placement `offsets` as far as `limits` allow and returns its
/// peak; `offsets` ends at the lowest complete placement found (unchanged if none is
/// lower). Deterministic without a deadline.
pub(crate) fn lower(
    p: &Prepared,
    index: &OverlapIndex,
    offsets: &mut [u64],
    limits: &Limits,
) -> u64 {
    lower_traced(p, index, offsets, limits, &mut |_| {})
}

/// One attempt of [`lower`] at a ceiling, as [`lower_traced`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attempt {
    /// The ceiling.
    goal: u64,
    /// The step it was set with: about how far under the last complete placement's
    /// peak it was (the ceiling is rounded down to the sizes' common unit and never
    /// under the target or the bound).
    step: u64,
    /// Whether every item went under it.
    reached: bool,
    /// Where it missed: the peak of its placement completed above the ceiling, if
    /// that was kept (lower than the last).
    completed: Option<u64>,
    /// The peak of the last complete placement after it.
    peak: u64,
}

/// [`lower`], reporting each attempt to `trace` as it ends.
fn lower_traced(
    p: &Prepared,
    index: &OverlapIndex,
    offsets: &mut [u64],
    limits: &Limits,
    trace: &mut dyn FnMut(Attempt),
) -> u64 {
    let mut best_peak = p.peak_of(offsets);
    let unit = p.items.iter().map(|it| it.size).fold(0u64, gcd).max(1);
    let floor = p.lower_bound.max(limits.target);
    let until = limits.until();
    if best_peak <= floor || limits.work == 0 || until.passed() {
        return best_peak;
    }
    let mut step = ((best_peak - p.lower_bound) / FIRST_STEP_DIVISOR).max(unit);
    let first_step = step;
    let mut state = State::new(p, index, offsets);
    let mut work_left = limits.work;
    let items = p.items.len() as u64;
    let mut misses = 0u32;
    while best_peak > floor && work_left > 0 && !until.passed() {
        let goal = best_peak.saturating_sub(step).max(floor);
        let goal = goal - goal % unit;
        if goal < p.lower_bound {
            break;
        }
        let allowed = (work_left / ATTEMPT_SHARE)
            .max(MIN_ATTEMPT_WORK)
            .min(work_left);
        let (placed_under, spent) = state.attempt(goal, allowed, until);
        // An attempt also scans every item (the lift, the peak, the copy or the
        // restore): a unit each, so that many cheap attempts cannot outrun the work.
        // A completion after a miss counts the items it reads and places.
        work_left = work_left.saturating_sub(spent.saturating_add(items));
        // A miss: the items still lifted go to the lowest place free for them, above
        // the ceiling where need be, so that the placement is complete again (its
        // peak). Where that peak is under the ceiling after all, the ceiling holds.
        let completed = if placed_under {
            None
        } else {
            state.complete_above(until).map(|(peak, read)| {
                work_left = work_left.saturating_sub(read);
                peak
            })
        };
        let reached = placed_under || completed.is_some_and(|peak| peak <= goal);
        // A completed placement above the ceiling is kept where it peaks lower.
        let kept = completed.filter(|&peak| !reached && peak < best_peak);
        log::debug!(
            "ejection repair: ceiling {goal} (step {step}) {} with {spent} work",
            if reached { "reached" } else { "missed" }
        );
        if reached || kept.is_some() {
            best_peak = completed.unwrap_or_else(|| p.peak_of(&state.offsets));
            offsets.copy_from_slice(&state.offsets);
            misses = 0;
        } else {
            misses += 1;
        }
        trace(Attempt {
            goal,
            step,
            reached,
            completed: kept,
            peak: best_peak,
        });
        if reached {
            step = grown(step, first_step, spent, allowed);
            continue;
        }
        if let Some(peak) = kept {
            log::debug!("ejection repair: completed above the ceiling at {peak}");
        }
        if step <= unit || misses >= MISSES_IN_A_ROW || until.passed() {
            break;
        }
        if kept.is_none() {
            state.restore(offsets);
        }
        step = (step / 2).max(unit);
    }
    best_peak
}

/// The step after a success that spent `spent` of the `allowed` work: doubled, up to
/// `first_step`, where it spent under 1 / [`GROW_BELOW`] of it; else `step`.
fn grown(step: u64, first_step: u64, spent: u64, allowed: u64) -> u64 {
    if spent.saturating_mul(GROW_BELOW) < allowed {
        step.saturating_mul(2).min(first_step).max(step)
    } else {
        step
    }
}

/// Whether `deadline` has passed.
fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// Greatest common divisor.
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The working placement of the attempts.
struct State<'a> {
    p: &'a Prepared,
    spans: MovableSpans<'a>,
    offsets: Vec<u64>,
    placed: Vec<bool>,
    /// How many times each item was lifted (over every attempt).
    lifted: Vec<u32>,
    /// Items waiting to be placed, largest first (ties: the lower position).
    queue: BinaryHeap<(u64, Reverse<u32>)>,
    near: Vec<Span>,
    by_start: Vec<(u64, u64)>,
    by_top: Vec<(u64, u64)>,
    sort: SortScratch,
}

impl<'a> State<'a> {
    fn new(p: &'a Prepared, index: &'a OverlapIndex, offsets: &[u64]) -> State<'a> {
        let mut state = State {
            p,
            spans: MovableSpans::new(index),
            offsets: offsets.to_vec(),
            placed: vec![true; p.items.len()],
            lifted: vec![0; p.items.len()],
            queue: BinaryHeap::new(),
            near: Vec::new(),
            by_start: Vec::new(),
            by_top: Vec::new(),
            sort: SortScratch::default(),
        };
        state.restore(offsets);
        state
    }

    /// Every item placed at `offsets`.
    fn restore(&mut self, offsets: &[u64]) {
        self.offsets.copy_from_slice(offsets);
        self.queue.clear();
        for i in 0..self.p.items.len() {
            self.placed[i] = true;
            self.record(i);
        }
    }

    /// After a missed attempt: every item not placed, largest first, at the lowest
    /// offset free over its lifetime (above the ceiling where need be), so that the
    /// placement is complete again; returns its peak and the items read (`None`, the
    /// state partial, where `until` passed first). O(k L) for k
    /// items placed with L live with each, plus O(n) to find them.
    fn complete_above(&mut self, until: Until<'_>) -> Option<(u64, u64)> {
        let mut read = 0u64;
        // Every item not placed, not only those queued: the attempt may have taken one
        // from the queue before it stopped. Largest first, as the attempt places them.
        self.queue.clear();
        let mut unplaced: Vec<usize> = (0..self.p.items.len())
            .filter(|&i| !self.placed[i])
            .collect();
        unplaced.sort_by_key(|&i| (Reverse(self.p.items[i].size), i));
        for (k, u) in unplaced.into_iter().enumerate() {
            if (k as u64).is_multiple_of(DEADLINE_STEPS) && until.passed() {
                return None;
            }
            let size = self.p.items[u].size;
            read += self.gather(u) + 1;
            self.offsets[u] = lowest_free(&self.near, &self.by_start, size);
            self.placed[u] = true;
            self.record(u);
        }
        Some((self.p.peak_of(&self.offsets), read))
    }

    /// Reads the placed items live with item `u` into `near` and sorts them by offset
    /// into `by_start`; returns how many it read.
    fn gather(&mut self, u: usize) -> u64 {
        let it = self.p.items[u];
        self.near.clear();
        self.spans.placed_in(it.a, it.b, u, &mut self.near);
        self.by_start.clear();
        self.by_start.extend(
            self.near
                .iter()
                .enumerate()
                .map(|(k, s)| (s.offset, k as u64)),
        );
        sort_by_start(&mut self.by_start, &mut self.sort);
        self.near.len() as u64
    }

    /// What lifting item `i` costs now.
    fn weight(&self, i: usize) -> u64 {
        let it = &self.p.items[i];
        let base = it.size.saturating_mul(u64::from(it.b - it.a));
        base.saturating_mul(1 + u64::from(self.lifted[i]))
    }

    /// Writes item `i`'s span (placed or not) to the spans.
    fn record(&mut self, i: usize) {
        if self.placed[i] {
            let o = self.offsets[i];
            let w = self.weight(i);
            self.spans.set(i, o, o + self.p.items[i].size, w);
        } else {
            self.spans.set(i, 0, 0, 0);
        }
    }

    fn lift(&mut self, i: usize) {
        self.placed[i] = false;
        self.lifted[i] = self.lifted[i].saturating_add(1);
        self.record(i);
        self.queue.push((self.p.items[i].size, Reverse(i as u32)));
    }

    /// Places every item under `goal` within `work`; returns whether it did and the
    /// work spent. On failure the state is partial: complete it
    /// ([`State::complete_above`]) or [`State::restore`] it.
    fn attempt(&mut self, goal: u64, work: u64, until: Until<'_>) -> (bool, u64) {
        for i in 0..self.p.items.len() {
            if self.offsets[i] + self.p.items[i].size > goal {
                self.lift(i);
            }
        }
        let mut spent = 0u64;
        let mut steps = 0u64;
        while let Some((size, Reverse(u))) = self.queue.pop() {
            let u = u as usize;
            if self.placed[u] {
                continue;
            }
            if size > goal || spent >= work {
                return (false, spent);
            }
            steps += 1;
            if steps.is_multiple_of(DEADLINE_STEPS) && until.passed() {
                return (false, spent);
            }
            spent += self.place(u, goal).max(1);
        }
        (true, spent)
    }

    /// Places item `u` under `goal`, lifting what is in the way; returns the items
    /// read.
    fn place(&mut self, u: usize, goal: u64) -> u64 {
        let it = self.p.items[u];
        let read = self.gather(u);
        let free = lowest_free(&self.near, &self.by_start, it.size);
        let x = if free + it.size <= goal {
            free
        } else {
            self.by_top.clear();
            self.by_top
                .extend(self.near.iter().enumerate().map(|(k, s)| (s.top, k as u64)));
            sort_by_start(&mut self.by_top, &mut self.sort);
            let x = cheapest(&self.near, &self.by_start, &self.by_top, it.size, goal);
            for k in 0..self.near.len() {
                let s = self.near[k];
                if s.offset < x + it.size && s.top > x {
                    self.lift(s.item as usize);
                }
            }
            x
        };
        self.offsets[u] = x;
        self.placed[u] = true;
        self.record(u);
        read
    }
}

/// The lowest offset at which `size` bytes avoid every span of `near` (`by_start`:
/// `(offset, position in near)` sorted by offset).
fn lowest_free(near: &[Span], by_start: &[(u64, u64)], size: u64) -> u64 {
    let mut candidate = 0u64;
    for &(offset, k) in by_start {
        if offset >= candidate + size {
            break;
        }
        candidate = candidate.max(near[k as usize].top);
    }
    candidate
}

/// The offset `x` in `[0, goal - size]` (`size <= goal`) where the spans of `near` that
/// `[x, x + size)` overlaps weigh least in all, the lowest on ties. `by_start` and
/// `by_top` are `(offset, position)` and `(top, position)` sorted by their first.
///
/// The overlapped weight as a function of `x` is a step function that only drops
/// where a span ends, so its minimum is at 0 or at a top; the candidates are swept
/// in increasing order with the spans starting below `x + size` and those ending at
/// or below `x` counted by two pointers: O(L).
fn cheapest(
    near: &[Span],
    by_start: &[(u64, u64)],
    by_top: &[(u64, u64)],
    size: u64,
    goal: u64,
) -> u64 {
    let (mut begun, mut begun_at) = (0u64, 0usize);
    let (mut ended, mut ended_at) = (0u64, 0usize);
    let mut best: Option<(u64, u64)> = None;
    let mut next_top = 0usize;
    let mut x = 0u64;
    loop {
        if x + size > goal {
            break;
        }
        while begun_at < by_start.len() && by_start[begun_at].0 < x + size {
            begun += near[by_start[begun_at].1 as usize].weight;
            begun_at += 1;
        }
        while ended_at < by_top.len() && by_top[ended_at].0 <= x {
            ended += near[by_top[ended_at].1 as usize].weight;
            ended_at += 1;
        }
        let cost = begun - ended;
        if best.is_none_or(|(c, _)| cost < c) {
            best = Some((cost, x));
            if cost == 0 {
                break;
            }
        }
        // The next candidate: the next top above x.
        while next_top < by_top.len() && by_top[next_top].0 <= x {
            next_top += 1;
        }
        match by_top.get(next_top) {
            Some(&(top, _)) => x = top,
            None => break,
        }
    }
    best.map_or(0, |(_, x)| x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::greedy::{self, Fit};
    use crate::plan::offline::LiveRange;
    use crate::seeded::Rng;

    /// `n` malloc-like ranges, one allocation per step: sizes spread over octaves
    /// (16 B to 64 KiB), lifetimes mostly short with a long tail, about `live` at
    /// once.
    fn malloc_like(n: u64, seed: u64, live: u64) -> Vec<LiveRange> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|t| {
                let size = (16u64 << rng.below(13)) + rng.below(64);
                let life = if rng.chance(10) {
                    1 + rng.below(live * 8)
                } else {
                    1 + rng.below(live)
                };
                LiveRange {
                    start: t,
                    end: t + life,
                    size,
                }
            })
            .collect()
    }

    /// The lowest `x` with the least overlapped weight, by brute force over every
    /// offset.
    fn cheapest_by_brute_force(spans: &[(u64, u64, u64)], size: u64, goal: u64) -> u64 {
        (0..=goal - size)
            .map(|x| {
                let cost: u64 = spans
                    .iter()
                    .filter(|&&(o, t, _)| o < x + size && t > x)
                    .map(|s| s.2)
                    .sum();
                (cost, x)
            })
            .min()
            .map_or(0, |(_, x)| x)
    }

    /// A malloc-like instance on which [`lower`] both grows its step again and keeps
    /// placements completed above a missed ceiling (within [`TRACED_WORK`]), its
    /// overlap index and the class order's placement of it.
    fn traced_instance() -> (Prepared, OverlapIndex, Vec<u64>) {
        let ranges = malloc_like(2000, 1085, 100);
        let p = Prepared::new(&ranges, 8).expect("valid");
        let index = OverlapIndex::new(&p);
        let (offsets, _) = greedy_class(&p, &index);
        (p, index, offsets)
    }

    /// The work [`traced_instance`]'s repair gets.
    const TRACED_WORK: u64 = 5_000_000;

    /// [`lower_traced`] on [`traced_instance`]: its peak, placement and attempts, and
    /// the peak it started from.
    fn traced() -> (Prepared, u64, Vec<u64>, Vec<Attempt>, u64) {
        let (p, index, mut offsets) = traced_instance();
        let start = p.peak_of(&offsets);
        let limits = Limits {
            target: p.lower_bound,
            work: TRACED_WORK,
            deadline: None,
            stop: None,
        };
        let mut attempts = Vec::new();
        let peak = lower_traced(&p, &index, &mut offsets, &limits, &mut |a| attempts.push(a));
        (p, peak, offsets, attempts, start)
    }

    #[test]
    fn after_a_cheap_success_the_step_grows_again_up_to_the_first() {
        let (p, peak, offsets, attempts, _) = traced();
        p.assert_valid(&offsets, peak);
        assert_eq!(peak, p.peak_of(&offsets));
        let first = attempts[0].step;
        assert!(attempts.iter().all(|a| a.step <= first));
        // A step above the one before it follows only a success.
        let grew: Vec<_> = attempts
            .windows(2)
            .filter(|w| w[1].step > w[0].step)
            .collect();
        assert!(!grew.is_empty(), "the step never grew: {attempts:?}");
        let doubled = |w: &&[Attempt]| w[0].reached && w[1].step == (2 * w[0].step).min(first);
        assert!(grew.iter().all(doubled), "{grew:?}");
    }

    #[test]
    fn a_missed_ceiling_whose_completed_placement_peaks_lower_keeps_it() {
        let (p, peak, offsets, attempts, start) = traced();
        p.assert_valid(&offsets, peak);
        assert_eq!(peak, p.peak_of(&offsets));
        let mut last = start;
        let mut completed = 0;
        for a in &attempts {
            if let Some(c) = a.completed {
                // A miss, completed above the ceiling, below the placement before it.
                assert!(!a.reached);
                assert!(a.goal < c && c < last, "{a:?} after {last}");
                assert_eq!(a.peak, c);
                completed += 1;
            } else if a.reached {
                assert!(a.peak <= a.goal && a.peak < last, "{a:?} after {last}");
            } else {
                // Missed, nothing kept.
                assert_eq!(a.peak, last);
            }
            last = a.peak;
        }
        assert!(completed > 0, "no completed placement kept: {attempts:?}");
        assert_eq!(peak, last);
    }

    #[test]
    fn completing_a_missed_attempt_places_every_lifted_item_and_moves_no_other() {
        let (p, index, offsets) = traced_instance();
        let mut state = State::new(&p, &index, &offsets);
        // The bound, with little work: missed, many items left lifted.
        let (reached, _) = state.attempt(p.lower_bound, 10_000, Until::default());
        assert!(!reached);
        let before: Vec<Option<u64>> = (0..p.items.len())
            .map(|i| state.placed[i].then_some(state.offsets[i]))
            .collect();
        assert!(before.iter().any(Option::is_none));
        // With its deadline passed it stops (`lower` then stops at the last complete
        // placement).
        let mut late = State::new(&p, &index, &offsets);
        assert!(!late.attempt(p.lower_bound, 10_000, Until::default()).0);
        assert_eq!(
            late.complete_above(Until {
                deadline: Some(Instant::now()),
                stop: None,
            }),
            None
        );
        let (peak, read) = state.complete_above(Until::default()).expect("no deadline");
        assert!(read > 0);
        assert!(state.placed.iter().all(|&placed| placed));
        p.assert_valid(&state.offsets, peak);
        for (i, kept) in before.iter().enumerate() {
            if let Some(offset) = kept {
                assert_eq!(state.offsets[i], *offset, "item {i} moved");
            }
        }
    }

    #[test]
    fn a_cheap_success_doubles_the_step_up_to_the_first() {
        // Under a sixteenth of the work allowed: doubled, never above the first step.
        assert_eq!(grown(100, 1000, 10, 1000), 200);
        assert_eq!(grown(600, 1000, 10, 1000), 1000);
        assert_eq!(grown(1000, 1000, 0, 1000), 1000);
        assert_eq!(grown(100, 1000, 63, 1009), 200);
        // A sixteenth or more: kept.
        assert_eq!(grown(100, 1000, 63, 1008), 100);
        assert_eq!(grown(100, 1000, 100, 1000), 100);
        assert_eq!(grown(100, 1000, 1000, 1000), 100);
    }

    #[test]
    fn the_cheapest_offset_is_the_brute_force_one() {
        let mut rng = Rng::new(7);
        for case in 0..400 {
            let count = rng.below(12) as usize;
            let spans: Vec<(u64, u64, u64)> = (0..count)
                .map(|_| {
                    let o = rng.below(60);
                    (o, o + 1 + rng.below(15), 1 + rng.below(9))
                })
                .collect();
            let near: Vec<Span> = spans
                .iter()
                .enumerate()
                .map(|(k, &(offset, top, weight))| Span {
                    offset,
                    top,
                    weight,
                    item: k as u32,
                })
                .collect();
            let size = 1 + rng.below(20);
            let goal = size + rng.below(70);
            let mut by_start: Vec<(u64, u64)> = near
                .iter()
                .enumerate()
                .map(|(k, s)| (s.offset, k as u64))
                .collect();
            let mut by_top: Vec<(u64, u64)> = near
                .iter()
                .enumerate()
                .map(|(k, s)| (s.top, k as u64))
                .collect();
            by_start.sort_unstable();
            by_top.sort_unstable();
            assert_eq!(
                cheapest(&near, &by_start, &by_top, size, goal),
                cheapest_by_brute_force(&spans, size, goal),
                "case {case}: {spans:?}, size {size}, goal {goal}"
            );
        }
    }

    fn greedy_class(p: &Prepared, index: &OverlapIndex) -> (Vec<u64>, u64) {
        greedy::place_on(p, index, &greedy::by_size_class(p), Fit::Lowest, false)
    }

    #[test]
    fn a_repaired_placement_is_valid_never_higher_and_often_lower() {
        let mut lowered = 0;
        let cases = 24;
        for seed in 0..cases {
            let ranges = malloc_like(600, 900 + seed * 37, 40);
            let p = Prepared::new(&ranges, 8).expect("valid");
            let index = OverlapIndex::new(&p);
            let (mut offsets, peak) = greedy_class(&p, &index);
            let limits = Limits {
                target: p.lower_bound,
                work: 2_000_000,
                deadline: None,
                stop: None,
            };
            let repaired = lower(&p, &index, &mut offsets, &limits);
            p.assert_valid(&offsets, repaired);
            assert_eq!(repaired, p.peak_of(&offsets));
            assert!(repaired <= peak, "seed {seed}: {repaired} above {peak}");
            assert!(repaired >= p.lower_bound);
            if repaired < peak {
                lowered += 1;
            }
        }
        assert!(lowered * 2 >= cases, "lowered only {lowered} of {cases}");
    }

    #[test]
    fn the_repair_is_deterministic_without_a_deadline() {
        let ranges = malloc_like(800, 4242, 60);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let (start, _) = greedy_class(&p, &index);
        let limits = Limits {
            target: p.lower_bound,
            work: 5_000_000,
            deadline: None,
            stop: None,
        };
        let mut a = start.clone();
        let mut b = start;
        assert_eq!(
            lower(&p, &index, &mut a, &limits),
            lower(&p, &index, &mut b, &limits)
        );
        assert_eq!(a, b);
    }

    #[test]
    fn the_work_bounds_the_attempts_and_a_tiny_budget_still_gives_a_valid_plan() {
        let ranges = malloc_like(700, 31, 50);
        let p = Prepared::new(&ranges, 4).expect("valid");
        let index = OverlapIndex::new(&p);
        let (start, peak) = greedy_class(&p, &index);
        for work in [0u64, 1, 700, 5_000, 50_000] {
            let limits = Limits {
                target: p.lower_bound,
                work,
                deadline: None,
                stop: None,
            };
            let mut offsets = start.clone();
            let repaired = lower(&p, &index, &mut offsets, &limits);
            p.assert_valid(&offsets, repaired);
            assert!(repaired <= peak);
            if work == 0 {
                assert_eq!(offsets, start, "no work, no change");
            }
        }
    }

    #[test]
    fn an_instance_at_its_bound_is_left_alone() {
        // Every range its own time step: the lower bound is the largest size, and
        // any placement at offset 0 reaches it.
        let ranges: Vec<LiveRange> = (0..50u64)
            .map(|t| LiveRange {
                start: t,
                end: t + 1,
                size: 1 + t % 7,
            })
            .collect();
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let mut offsets = vec![0u64; p.items.len()];
        let limits = Limits {
            target: p.lower_bound,
            work: u64::MAX,
            deadline: None,
            stop: None,
        };
        assert_eq!(lower(&p, &index, &mut offsets, &limits), p.lower_bound);
        assert!(offsets.iter().all(|&o| o == 0));
    }

    #[test]
    fn a_raised_stop_flag_changes_nothing() {
        let ranges = malloc_like(500, 77, 50);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let (start, peak) = greedy_class(&p, &index);
        let stop = AtomicBool::new(true);
        let limits = Limits {
            target: p.lower_bound,
            work: 2_000_000,
            deadline: None,
            stop: Some(&stop),
        };
        let mut offsets = start.clone();
        assert_eq!(lower(&p, &index, &mut offsets, &limits), peak);
        assert_eq!(offsets, start);
        // Lowered, the same instance, where the flag is down.
        let down = AtomicBool::new(false);
        let limits = Limits {
            stop: Some(&down),
            ..limits
        };
        assert!(lower(&p, &index, &mut offsets, &limits) < peak);
    }

    #[test]
    fn a_deadline_already_past_changes_nothing() {
        let ranges = malloc_like(500, 99, 50);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let (start, peak) = greedy_class(&p, &index);
        let limits = Limits {
            target: p.lower_bound,
            work: u64::MAX,
            deadline: Some(Instant::now()),
            stop: None,
        };
        let mut offsets = start.clone();
        assert_eq!(lower(&p, &index, &mut offsets, &limits), peak);
        assert_eq!(offsets, start);
    }
}
