//! The lowest-fit greedy placement on two threads, with the very offsets of the
//! sequential one ([`super::place_prefix`]).
//!
//! The order is taken in chunks of `chunk` items. First both threads compute, for the
//! items of a chunk (claimed one at a time from a shared counter, so a thread that is
//! late or descheduled leaves its share to the other), each item's lowest fit among
//! the items placed before the chunk, reading [`PlacedSpans`] only; each keeps the
//! placed ranges past where its scan from 0 stopped (sorted by start:
//! [`super::lowest_fit_unsorted`]'s window).
//! Then this thread places the chunk's items in order. Item `j`'s sequential
//! answer is its lowest fit among the items placed before the chunk *and* the chunk's
//! items placed before it. The obstacles were only added to, so every offset below
//! the speculated one stays taken, and the answer is the lowest offset from the
//! speculated one up that also avoids the earlier chunk items live with `j`: the scan
//! resumes where it stopped, merged with those few items (sorted by start), and where
//! none of them is live with `j` or in the way, stops at once on the speculated
//! offset. So the offsets, the peak and the work counted ([`super::Cut::work`]: the
//! placed items live with each item) are the sequential ones, and the cut (deadline,
//! work, forecast) is looked at before each item exactly as there.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Instant;

use super::{lowest_fit_unsorted, Cut, Pace, Prefix, SortScratch, Stop};
use crate::plan::offline::index::{OverlapIndex, PlacedSpans};
use crate::plan::offline::prepared::Prepared;

/// The helper thread's name.
const HELPER_NAME: &str = "wgalloc-speculate";

/// Items of a chunk by default: large enough that the hand-over between the threads
/// (a wake-up a chunk) is small beside the chunk's work, small enough that an item
/// rarely meets many earlier chunk items live with it (each costs a comparison here
/// and a step of the merged scan).
pub(crate) const CHUNK: usize = 64;

/// Placed ranges a [`Slot`] keeps from where the scan stopped: the resumed scan
/// rarely goes further, and where it would it is redone in full (a chunk's slots so
/// take O(chunk) memory, 1 MiB, where keeping every item's ranges took up to the
/// chunk times the most items live with one: 65 MiB more resident on 100,000
/// malloc-like buffers). There, in the class order (whose consecutive items start
/// together and want the same gap, so 98% meet an earlier chunk item), 32, 256,
/// 1,024 and 4,096 ranges leave 24,904, 9,265, 1,424 and 0 items to place again in
/// full (3.9, 3.6, 2.9 and 2.8 s); greedy by size 1,088 to 0 (about 3.1 s each).
pub(crate) const WINDOW: usize = 1024;

/// One chunk item's lowest fit among the items placed before the chunk.
#[derive(Debug, Default)]
struct Slot {
    /// The placed ranges live with the item from where the scan stopped (every range
    /// before ends at or below `offset`), sorted by start: at most [`WINDOW`].
    window: Vec<(u64, u64)>,
    /// Whether ranges beyond `window` were left out.
    truncated: bool,
    /// The placed ranges live with the item (the work read).
    count: usize,
    /// Its lowest fit among them.
    offset: u64,
}

/// A thread's memory for gathering and ordering an item's placed neighbours.
#[derive(Debug, Default)]
struct Scratch {
    busy: Vec<(u64, u64)>,
    sort: SortScratch,
}

impl Scratch {
    /// The placed ranges of `spans` live in sections `[a, b)`, in any order, in
    /// `self.busy`. O(log T + k) for k ranges.
    fn gather(&mut self, spans: &PlacedSpans<'_>, a: u32, b: u32) {
        self.busy.clear();
        spans.placed_in(a, b, &mut self.busy);
    }

    /// The lowest fit of `size` bytes among the gathered ranges, and up to `window`
    /// ranges past it, sorted ([`lowest_fit_unsorted`]).
    fn fit(&mut self, size: u64, window: usize) -> Stop<'_> {
        lowest_fit_unsorted(&self.busy, size, window, &mut self.sort)
    }
}

/// The chunk the helper thread is to work on.
#[derive(Debug, Clone, Copy, Default)]
struct Job {
    /// Counts the chunks published (the high half of [`Shared::claim`]).
    epoch: u32,
    /// The chunk is `order[from..from + len]`.
    from: usize,
    len: usize,
    /// The placement is over: the helper returns.
    quit: bool,
}

/// What the two threads share.
struct Shared<'a> {
    spans: RwLock<PlacedSpans<'a>>,
    /// Ranges each slot keeps ([`WINDOW`] but in tests).
    window: usize,
    slots: Vec<Mutex<Slot>>,
    /// The chunk's epoch (high 32 bits) and the next chunk position to compute.
    claim: AtomicU64,
    /// Chunk items computed.
    done: AtomicUsize,
    job: Mutex<Job>,
    job_posted: Condvar,
    /// Held while `done` reaches the chunk's length and while it is waited for.
    finished: Mutex<()>,
    all_done: Condvar,
    /// The helper unwound (a bug): this thread stops waiting for it and computes
    /// every item of the chunk itself, so a failing helper never leaves it waiting.
    helper_failed: AtomicBool,
    /// Tests: the helper panics when it claims this slot or a later one.
    #[cfg(test)]
    helper_panics_at: Option<usize>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared<'_> {
    /// The next position of chunk `epoch` (of `len` items) for the caller, if any is
    /// left. O(1) but for contention.
    fn claim(&self, epoch: u32, len: usize) -> Option<usize> {
        let mut v = self.claim.load(Ordering::Acquire);
        loop {
            let next = (v & u64::from(u32::MAX)) as usize;
            if (v >> 32) as u32 != epoch || next >= len {
                return None;
            }
            match self
                .claim
                .compare_exchange_weak(v, v + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(next),
                Err(now) => v = now,
            }
        }
    }

    /// Computes the chunk items of `epoch` this thread claims: each one's placed
    /// neighbours gathered, and its lowest fit among them. O(sum of k) over the items
    /// it claims (the bucket scan), k the placed items live with one.
    fn compute(&self, p: &Prepared, order: &[usize], job: Job, scratch: &mut Scratch) {
        let spans = self.spans.read().unwrap_or_else(PoisonError::into_inner);
        while let Some(c) = self.claim(job.epoch, job.len) {
            #[cfg(test)]
            if self.helper_panics_at.is_some_and(|at| c >= at)
                && std::thread::current().name() == Some(HELPER_NAME)
            {
                panic!("the helper fails (a test)");
            }
            self.fill(&spans, p, order, job, c, scratch);
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == job.len {
                let _held = lock(&self.finished);
                self.all_done.notify_one();
            }
        }
    }

    /// Slot `c` of chunk `job`: its item's lowest fit among `spans`. O(log T + k).
    fn fill(
        &self,
        spans: &PlacedSpans<'_>,
        p: &Prepared,
        order: &[usize],
        job: Job,
        c: usize,
        scratch: &mut Scratch,
    ) {
        let it = &p.items[order[job.from + c]];
        scratch.gather(spans, it.a, it.b);
        let count = scratch.busy.len();
        let stop = scratch.fit(it.size, self.window);
        let mut slot = lock(&self.slots[c]);
        slot.window.clear();
        slot.window.extend_from_slice(stop.past);
        slot.truncated = stop.truncated;
        slot.count = count;
        slot.offset = stop.offset;
    }

    /// The helper thread: computes its share of each chunk posted until told to quit.
    fn help(&self, p: &Prepared, order: &[usize]) {
        let _failed = FailedOnUnwind(self);
        let mut scratch = Scratch::default();
        let mut seen = 0u32;
        loop {
            let job = {
                let mut job = lock(&self.job);
                while job.epoch == seen && !job.quit {
                    job = self
                        .job_posted
                        .wait(job)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                *job
            };
            if job.quit {
                return;
            }
            seen = job.epoch;
            self.compute(p, order, job, &mut scratch);
        }
    }

    /// Tells the helper to return.
    fn quit(&self) {
        lock(&self.job).quit = true;
        self.job_posted.notify_all();
    }
}

/// Marks the helper failed and wakes this thread when the helper unwinds
/// ([`Shared::helper_failed`]).
struct FailedOnUnwind<'s, 'a>(&'s Shared<'a>);

impl Drop for FailedOnUnwind<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.helper_failed.store(true, Ordering::Release);
            let _held = lock(&self.0.finished);
            self.0.all_done.notify_one();
        }
    }
}

/// Tells the helper to return when dropped (also when this thread unwinds), so that
/// the scope that joins it ends.
struct QuitOnDrop<'s, 'a>(&'s Shared<'a>);

impl Drop for QuitOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.quit();
    }
}

/// The lowest offset at or above `candidate` at which `size` bytes avoid every range
/// of `busy[from..]` and of `extra` (both sorted by start), where every range of
/// `busy[..from]` ends at or below `candidate`; and where the scan stopped in `busy`.
/// With `from` and `candidate` 0 and no `extra`, the lowest fit among `busy` and the
/// position its scan stopped at. O(ranges scanned).
pub(crate) fn lowest_fit_from(
    busy: &[(u64, u64)],
    from: usize,
    extra: &[(u64, u64)],
    mut candidate: u64,
    size: u64,
) -> (u64, usize) {
    let (mut b, mut e) = (from, 0usize);
    loop {
        let from_busy = match (busy.get(b), extra.get(e)) {
            (Some(x), Some(y)) => x.0 <= y.0,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return (candidate, b),
        };
        let (start, end) = if from_busy { busy[b] } else { extra[e] };
        if start >= candidate.saturating_add(size) {
            return (candidate, b);
        }
        if from_busy {
            b += 1;
        } else {
            e += 1;
        }
        candidate = candidate.max(end);
    }
}

/// [`super::place_prefix`] with [`super::Fit::Lowest`] on two threads (this one and a
/// helper, in a scope), in chunks of `chunk` items (at least 1), each item keeping
/// `window` ranges ([`WINDOW`]) beyond its speculated offset: the same offsets, peak,
/// work counted and cut.
///
/// The work is the sequential placement's, O(n log T + sum over items of k), k
/// the placed items live with an item, shared between the threads, plus, on this
/// thread alone, O(chunk) comparisons per item with the earlier items of its chunk
/// and the merged scan from the speculated offset (usually one step), and the
/// placement in [`PlacedSpans`] (O(log T)); an item whose scan goes beyond its
/// [`WINDOW`] is placed again in full here (O(log T + k log k)). Memory: O(chunk) and
/// each thread's O(k) scratch.
pub(super) fn place_prefix(
    p: &Prepared,
    index: &OverlapIndex,
    order: &[usize],
    cut: &Cut,
    chunk: usize,
    window: usize,
) -> Prefix {
    let chunk = chunk.clamp(1, u32::MAX as usize);
    let shared = Shared {
        spans: RwLock::new(PlacedSpans::new(index)),
        window,
        slots: (0..chunk.min(order.len()).max(1))
            .map(|_| Mutex::default())
            .collect(),
        claim: AtomicU64::new(0),
        done: AtomicUsize::new(0),
        job: Mutex::default(),
        job_posted: Condvar::new(),
        finished: Mutex::new(()),
        all_done: Condvar::new(),
        helper_failed: AtomicBool::new(false),
        #[cfg(test)]
        helper_panics_at: HELPER_PANICS_AT.with(|c| c.get()),
    };
    std::thread::scope(|scope| {
        let quit = QuitOnDrop(&shared);
        // Where the helper cannot start, this thread claims every item itself.
        let _helper = std::thread::Builder::new()
            .name(HELPER_NAME.into())
            .spawn_scoped(scope, || shared.help(p, order));
        let prefix = place_chunks(p, order, cut, &shared);
        drop(quit);
        prefix
    })
}

#[cfg(test)]
thread_local! {
    /// Tests: the slot at which the helper started by this thread panics.
    static HELPER_PANICS_AT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The chunks in turn: each computed by both threads, then placed here in order.
fn place_chunks(p: &Prepared, order: &[usize], cut: &Cut, shared: &Shared<'_>) -> Prefix {
    let chunk = shared.slots.len();
    let mut offsets = vec![0u64; p.items.len()];
    let mut scratch = Scratch::default();
    // Items that met an earlier item of their chunk live with them, and those whose
    // scan went beyond the window (for the log).
    let (mut met, mut rescanned) = (0usize, 0usize);
    // The chunk items placed so far: sections and range.
    let mut placed_here: Vec<(u32, u32, u64, u64)> = Vec::with_capacity(chunk);
    let mut extra: Vec<(u64, u64)> = Vec::with_capacity(chunk);
    let mut peak = 0u64;
    let mut read = 0u64;
    let started = Instant::now();
    let mut pace = Pace::default();
    let mut epoch = 0u32;
    let mut from = 0usize;
    while from < order.len() {
        let len = chunk.min(order.len() - from);
        epoch = epoch.wrapping_add(1);
        let job = Job {
            epoch,
            from,
            len,
            quit: false,
        };
        // The helper has finished the chunk before (all its items were computed) and
        // claims nothing of this one before the epoch changes.
        shared.done.store(0, Ordering::Release);
        shared
            .claim
            .store(u64::from(epoch) << 32, Ordering::Release);
        {
            let mut posted = lock(&shared.job);
            *posted = job;
        }
        shared.job_posted.notify_one();
        shared.compute(p, order, job, &mut scratch);
        {
            let mut held = lock(&shared.finished);
            while shared.done.load(Ordering::Acquire) < len
                && !shared.helper_failed.load(Ordering::Acquire)
            {
                held = shared
                    .all_done
                    .wait(held)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
        if shared.done.load(Ordering::Acquire) < len {
            // The helper failed with items of the chunk claimed: which is not known,
            // so every one again here (later chunks this thread claims alone). The
            // scope passes the helper's panic on once this thread is done.
            let spans = shared.spans.read().unwrap_or_else(PoisonError::into_inner);
            for c in 0..len {
                shared.fill(&spans, p, order, job, c, &mut scratch);
            }
        }
        let mut spans = shared.spans.write().unwrap_or_else(PoisonError::into_inner);
        placed_here.clear();
        for c in 0..len {
            let k = from + c;
            if let Some(gave_up) = cut.stops_before(&mut pace, k, order.len(), read, started) {
                return Prefix {
                    offsets,
                    peak,
                    placed: k,
                    read,
                    gave_up,
                };
            }
            let i = order[k];
            let it = &p.items[i];
            extra.clear();
            extra.extend(
                placed_here
                    .iter()
                    .filter(|q| q.0 < it.b && it.a < q.1)
                    .map(|q| (q.2, q.3)),
            );
            let slot = lock(&shared.slots[c]);
            read += (slot.count + extra.len()) as u64;
            let offset = if extra.is_empty() {
                slot.offset
            } else {
                met += 1;
                extra.sort_unstable_by_key(|r| r.0);
                let (offset, stopped) =
                    lowest_fit_from(&slot.window, 0, &extra, slot.offset, it.size);
                if slot.truncated && stopped == slot.window.len() {
                    // The scan needs ranges beyond the window: in full, among the
                    // items placed so far (those before the chunk and the chunk's
                    // earlier ones).
                    rescanned += 1;
                    scratch.gather(&spans, it.a, it.b);
                    scratch.fit(it.size, 0).offset
                } else {
                    offset
                }
            };
            let end = offset.saturating_add(it.size);
            offsets[i] = offset;
            spans.place(i, it.a, it.b, offset, end);
            placed_here.push((it.a, it.b, offset, end));
            peak = peak.max(end);
        }
        from += len;
    }
    log::debug!(
        "speculative placement: {} items, {met} met earlier chunk items, {rescanned} rescanned",
        order.len()
    );
    Prefix {
        offsets,
        peak,
        placed: order.len(),
        read,
        gave_up: false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{by_size, by_size_class, lowest_fit, place_prefix_in_turn, Fit};
    use super::*;
    use crate::plan::offline::LiveRange;
    use crate::seeded::Rng;
    use proptest::prelude::*;

    /// A malloc-like trace of `n` buffers: one allocation a step (bursts: many at one
    /// step), sizes spread over octaves (few-sizes: four sizes), lifetimes from a few
    /// steps to about `live` times a few.
    fn family(name: &str, n: usize, live: usize, seed: u64) -> Vec<LiveRange> {
        let mut rng = Rng::new(seed);
        let mut t = 0u64;
        (0..n)
            .map(|_| {
                let size = match name {
                    "few-sizes" => [64u64, 4096, 65_536, 1 << 20][rng.index(4)],
                    _ => (1u64 << rng.index(20)) + rng.index(1000) as u64,
                };
                if name != "bursts" || rng.index(16) == 0 {
                    t += 1 + if name == "bursts" { rng.index(40) } else { 0 } as u64;
                }
                // Mostly short lives, some long ones (about `live` live at once).
                let len = if rng.index(8) == 0 {
                    1 + rng.index(live * 6)
                } else {
                    1 + rng.index(live / 2 + 1)
                } as u64;
                LiveRange {
                    start: t,
                    end: t + len,
                    size,
                }
            })
            .collect()
    }

    fn in_turn(p: &Prepared, index: &OverlapIndex, order: &[usize], cut: &Cut) -> Prefix {
        place_prefix_in_turn(p, index, order, Fit::Lowest, cut)
    }

    fn assert_same(a: &Prefix, b: &Prefix, what: &str) {
        assert_eq!(a.placed, b.placed, "{what}: placed");
        assert_eq!(a.read, b.read, "{what}: work read");
        assert_eq!(a.peak, b.peak, "{what}: peak");
        assert_eq!(a.gave_up, b.gave_up, "{what}: gave up");
        assert!(a.offsets == b.offsets, "{what}: offsets differ");
    }

    #[test]
    fn the_resumed_scan_is_the_lowest_fit_among_both_lists() {
        let mut rng = Rng::new(33);
        for round in 0..3000 {
            let ranges = |rng: &mut Rng, count: usize| {
                let mut v: Vec<(u64, u64)> = (0..count)
                    .map(|_| {
                        let s = rng.index(400) as u64;
                        (s, s + 1 + rng.index(40) as u64)
                    })
                    .collect();
                v.sort_unstable_by_key(|r| r.0);
                v
            };
            let (many, few) = (rng.index(60), rng.index(8));
            let busy = ranges(&mut rng, many);
            let extra = ranges(&mut rng, few);
            let size = 1 + rng.index(30) as u64;
            let (offset, resume) = lowest_fit_from(&busy, 0, &[], 0, size);
            assert_eq!(offset, lowest_fit(&busy, size), "round {round}");
            assert!(busy[..resume].iter().all(|r| r.1 <= offset));
            assert!(busy.get(resume).is_none_or(|r| r.0 >= offset + size));
            let mut all = [busy.clone(), extra.clone()].concat();
            all.sort_unstable_by_key(|r| r.0);
            let resumed = lowest_fit_from(&busy, resume, &extra, offset, size).0;
            assert_eq!(resumed, lowest_fit(&all, size), "round {round}");
        }
    }

    #[test]
    fn two_threads_place_as_one_on_generated_families() {
        for (f, name) in ["malloc", "few-sizes", "bursts"].into_iter().enumerate() {
            for (s, &(n, live)) in [(300, 20), (4000, 60), (30_000, 300)].iter().enumerate() {
                let ranges = family(name, n, live, 100 + (f * 3 + s) as u64);
                let p = Prepared::new(&ranges, [1, 16][s % 2]).expect("valid");
                let index = OverlapIndex::new(&p);
                for (o, order) in [by_size(&p), by_size_class(&p)].iter().enumerate() {
                    let want = in_turn(&p, &index, order, &Cut::UNLIMITED);
                    assert_eq!(want.placed, n);
                    if n <= 4000 {
                        p.assert_valid(&want.offsets, want.peak);
                    }
                    // Every chunk and window on the small instances; on the large one
                    // (where the windows are exceeded) the default, none and one chunk.
                    let configs: &[(usize, usize)] = if n <= 4000 {
                        &[
                            (1, WINDOW),
                            (2, 1),
                            (7, 0),
                            (CHUNK, WINDOW),
                            (CHUNK, 0),
                            (1000, 3),
                            (n + 5, WINDOW),
                        ]
                    } else {
                        &[(CHUNK, WINDOW), (CHUNK, 0), (n + 5, WINDOW)]
                    };
                    for &(chunk, window) in configs {
                        let got = place_prefix(&p, &index, order, &Cut::UNLIMITED, chunk, window);
                        let what = format!("{name} {n} order {o} chunk {chunk} window {window}");
                        assert_same(&got, &want, &what);
                    }
                }
            }
        }
    }

    /// A helper that unwinds (a bug) does not leave this thread waiting for its items:
    /// the placement ends and the scope passes the panic on.
    #[test]
    fn a_failing_helper_is_passed_on_not_waited_for() {
        let ranges = family("malloc", 30_000, 300, 5);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let order = by_size(&p);
        HELPER_PANICS_AT.with(|c| c.set(Some(0)));
        let n = order.len();
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            place_prefix(&p, &index, &order, &Cut::UNLIMITED, n, WINDOW)
        }));
        HELPER_PANICS_AT.with(|c| c.set(None));
        assert!(got.is_err(), "the helper's panic is passed on");
    }

    #[test]
    fn a_work_budget_cuts_two_threads_where_it_cuts_one() {
        let ranges = family("malloc", 6000, 80, 7);
        let p = Prepared::new(&ranges, 1).expect("valid");
        let index = OverlapIndex::new(&p);
        let order = by_size(&p);
        let total = in_turn(&p, &index, &order, &Cut::UNLIMITED).read;
        for work in [0, 1, total / 3, total - 1, total] {
            let cut = Cut {
                work,
                ..Cut::UNLIMITED
            };
            let want = in_turn(&p, &index, &order, &cut);
            for (chunk, window) in [(1, 0), (5, 2), (CHUNK, WINDOW), (10_000, WINDOW)] {
                let got = place_prefix(&p, &index, &order, &cut, chunk, window);
                assert_same(&got, &want, &format!("work {work} chunk {chunk}"));
            }
        }
        // Through `place_prefix` with threads allowed, and a deadline already past: cut
        // at the first look at the clock, as on one thread.
        let past = Cut {
            deadline: Some(Instant::now()),
            threads: true,
            ..Cut::UNLIMITED
        };
        let got = super::super::place_prefix(&p, &index, &order, Fit::Lowest, &past);
        let want = in_turn(&p, &index, &order, &past);
        assert_same(&got, &want, "a past deadline");
        assert_eq!(got.placed, super::super::CLOCK_EVERY - 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn two_threads_give_the_sequential_offsets(
            raw in prop::collection::vec((0u64..60, 1u64..25, 1u64..64), 1..300),
            chunk in 1usize..40,
            window in 0usize..4,
            class in any::<bool>(),
        ) {
            let ranges: Vec<LiveRange> = raw
                .iter()
                .map(|&(start, len, size)| LiveRange { start, end: start + len, size })
                .collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            let index = OverlapIndex::new(&p);
            let order = if class { by_size_class(&p) } else { by_size(&p) };
            let want = in_turn(&p, &index, &order, &Cut::UNLIMITED);
            let got = place_prefix(&p, &index, &order, &Cut::UNLIMITED, chunk, window);
            prop_assert_eq!(got.offsets, want.offsets);
            prop_assert_eq!((got.peak, got.read, got.placed), (want.peak, want.read, want.placed));
        }
    }
}
