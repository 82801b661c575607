//! The tuner's timing rounds, apart from the device: the order the candidates are
//! timed in, round by round, and the statistic kept of each candidate's times.
//!
//! The candidates of a shape class are timed in interleaved rounds, each round timing
//! every candidate once, so that a stretch in which the machine runs slow (clocks, other
//! work on a shared host) falls on every candidate alike instead of on whichever was
//! timed then. Nothing here touches the GPU: [`time_in_rounds`] takes the dispatch as a
//! closure, so the schedule and its bounds are tested on the host.

use std::time::Duration;

/// The order in which `candidates` candidates are timed in each of `rounds` rounds:
/// round `r` starts at candidate `r * candidates / rounds` and goes on in index order,
/// wrapping around. Every round times every candidate once; the starts are spread
/// evenly over the candidates, so with at least as many rounds as candidates each
/// candidate is timed at every position of a round, and with fewer no two rounds start
/// with the same candidate.
pub(crate) fn round_orders(candidates: usize, rounds: u32) -> Vec<Vec<usize>> {
    let rounds = rounds as usize;
    (0..rounds)
        .map(|r| {
            let start = r * candidates / rounds;
            (0..candidates).map(|i| (start + i) % candidates).collect()
        })
        .collect()
}

/// The statistic kept of a candidate's timed dispatches: the fastest, or `None` for no
/// dispatch.
///
/// The fastest, not the median: what disturbs a dispatch's time on the machines
/// measured (a shared host's other work and frequency changes on lavapipe, clock states
/// on a GPU) only ever adds time, so each candidate's fastest round is its best
/// estimate of its own cost, and as every round times every candidate, the fastest
/// stretch of the machine is one the candidates shared. A slow stretch no longer than a
/// round covers at most two of a candidate's rounds ([`round_orders`]): from three
/// rounds on it cannot hide a candidate's clean time, where the median of three would
/// take the slow one.
pub(crate) fn best(samples: &[Duration]) -> Option<Duration> {
    samples.iter().min().copied()
}

/// Times `once.len()` candidates in `rounds` interleaved rounds ([`round_orders`]) by
/// calling `dispatch(candidate)`, which gives one timed dispatch's time, or `None` when
/// it failed (its caller warns): each candidate's times in round order, `None` for a
/// candidate that failed (it is not dispatched again).
///
/// A candidate whose `once` is set (its warm-up was slow) is timed in the first round
/// only. The first round always runs; before each later one `past_deadline()` is asked,
/// and once it says yes no further round runs, so the rounds end at most one round past
/// the deadline, with the same number of rounds for every candidate not timed once.
pub(crate) fn time_in_rounds(
    once: &[bool],
    rounds: u32,
    mut past_deadline: impl FnMut() -> bool,
    mut dispatch: impl FnMut(usize) -> Option<Duration>,
) -> Vec<Option<Vec<Duration>>> {
    let mut samples: Vec<Option<Vec<Duration>>> = vec![Some(Vec::new()); once.len()];
    for (r, order) in round_orders(once.len(), rounds.max(1))
        .into_iter()
        .enumerate()
    {
        if r > 0 && past_deadline() {
            break;
        }
        for c in order {
            if r > 0 && once[c] {
                continue;
            }
            let Some(times) = samples[c].as_mut() else {
                continue;
            };
            match dispatch(c) {
                Some(took) => times.push(took),
                None => samples[c] = None,
            }
        }
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(x: u64) -> Duration {
        Duration::from_micros(x)
    }

    #[test]
    fn every_round_times_every_candidate_once() {
        for candidates in 0..=8 {
            for rounds in 0..=10 {
                let orders = round_orders(candidates, rounds);
                assert_eq!(orders.len(), rounds as usize);
                for order in &orders {
                    let mut sorted = order.clone();
                    sorted.sort_unstable();
                    assert_eq!(sorted, (0..candidates).collect::<Vec<_>>());
                }
            }
        }
    }

    #[test]
    fn as_many_rounds_as_candidates_put_each_at_every_position() {
        for candidates in 1..=8 {
            for rounds in candidates as u32..=12 {
                let orders = round_orders(candidates, rounds);
                for c in 0..candidates {
                    let mut positions: Vec<usize> = orders
                        .iter()
                        .map(|o| o.iter().position(|&x| x == c).expect("timed"))
                        .collect();
                    positions.sort_unstable();
                    positions.dedup();
                    assert_eq!(positions.len(), candidates, "{candidates} in {rounds}");
                }
            }
        }
    }

    #[test]
    fn fewer_rounds_than_candidates_start_with_different_candidates() {
        for candidates in 2..=8 {
            for rounds in 2..=candidates as u32 {
                let mut firsts: Vec<usize> = round_orders(candidates, rounds)
                    .iter()
                    .map(|o| o[0])
                    .collect();
                firsts.sort_unstable();
                firsts.dedup();
                assert_eq!(firsts.len(), rounds as usize, "{candidates} in {rounds}");
            }
        }
        // Three rounds of eight start a third of the way apart.
        let starts: Vec<usize> = round_orders(8, 3).iter().map(|o| o[0]).collect();
        assert_eq!(starts, [0, 2, 5]);
    }

    #[test]
    fn the_rounds_interleave_and_time_each_candidate_once_a_round() {
        let mut calls = Vec::new();
        let samples = time_in_rounds(
            &[false; 3],
            3,
            || false,
            |c| {
                calls.push(c);
                Some(us(10 * (c as u64 + 1) + calls.len() as u64))
            },
        );
        assert_eq!(calls, [0, 1, 2, 1, 2, 0, 2, 0, 1]);
        let counts: Vec<usize> = samples
            .iter()
            .map(|s| s.as_ref().map_or(0, Vec::len))
            .collect();
        assert_eq!(counts, [3, 3, 3]);
        assert_eq!(samples[0], Some(vec![us(11), us(16), us(18)]));
        assert_eq!(
            best(samples[0].as_deref().unwrap_or_default()),
            Some(us(11))
        );
        assert_eq!(best(&[]), None);
    }

    #[test]
    fn a_slow_candidate_is_timed_in_the_first_round_only() {
        let mut calls = Vec::new();
        let samples = time_in_rounds(
            &[false, true, false],
            4,
            || false,
            |c| {
                calls.push(c);
                Some(us(1))
            },
        );
        assert_eq!(calls.iter().filter(|&&c| c == 1).count(), 1);
        assert_eq!(calls.len(), 1 + 2 * 4);
        assert_eq!(samples[1].as_ref().map(Vec::len), Some(1));
        assert_eq!(samples[2].as_ref().map(Vec::len), Some(4));
    }

    #[test]
    fn a_failed_candidate_is_dropped_and_the_others_go_on() {
        let mut calls = Vec::new();
        let samples = time_in_rounds(
            &[false; 3],
            3,
            || false,
            |c| {
                calls.push(c);
                // Candidate 1 fails in its second round.
                let failing = c == 1 && calls.iter().filter(|&&x| x == 1).count() == 2;
                (!failing).then_some(us(5))
            },
        );
        assert_eq!(samples[1], None);
        assert_eq!(calls.iter().filter(|&&c| c == 1).count(), 2);
        assert_eq!(samples[0].as_ref().map(Vec::len), Some(3));
        assert_eq!(samples[2].as_ref().map(Vec::len), Some(3));
    }

    #[test]
    fn the_deadline_ends_the_rounds_after_a_whole_round() {
        // Past the deadline from the start: the first round still runs, and only it.
        let mut asked = 0;
        let mut calls = 0;
        let samples = time_in_rounds(
            &[false; 4],
            8,
            || {
                asked += 1;
                true
            },
            |_| {
                calls += 1;
                Some(us(1))
            },
        );
        assert_eq!((asked, calls), (1, 4));
        assert!(samples.iter().all(|s| s.as_ref().map(Vec::len) == Some(1)));
        // Past it after the second round: every candidate has two.
        let mut asked = 0;
        let samples = time_in_rounds(
            &[false; 4],
            8,
            || {
                asked += 1;
                asked >= 2
            },
            |_| Some(us(1)),
        );
        assert!(samples.iter().all(|s| s.as_ref().map(Vec::len) == Some(2)));
    }

    /// The times of a fake machine whose dispatches number `slow` run 3x slower: the
    /// fastest candidate is 1 (90 us against 100 for the others).
    fn drifting(slow: std::ops::Range<usize>) -> impl FnMut(usize) -> Option<Duration> {
        let mut clock = 0;
        move |c| {
            let base = if c == 1 { 90 } else { 100 };
            let factor = if slow.contains(&clock) { 3 } else { 1 };
            clock += 1;
            Some(us(base * factor))
        }
    }

    fn fastest_of(samples: &[Option<Vec<Duration>>]) -> Option<usize> {
        (0..samples.len()).min_by_key(|&c| samples[c].as_deref().and_then(best))
    }

    #[test]
    fn a_slow_stretch_as_long_as_a_round_never_flips_three_interleaved_rounds() {
        let (candidates, rounds) = (4, 3);
        let dispatches = candidates * rounds;
        for start in 0..dispatches {
            let slow = start..start + candidates;
            let samples = time_in_rounds(&[false; 4], 3, || false, drifting(slow.clone()));
            assert_eq!(fastest_of(&samples), Some(1), "slow at {slow:?}");
        }
        // Timed one after another (each candidate's rounds in a row), the same stretch
        // over candidate 1's three dispatches flips the choice: the test can fail.
        let mut sequential = drifting(3..3 + candidates);
        let samples: Vec<Option<Vec<Duration>>> = (0..candidates)
            .map(|c| (0..rounds).map(|_| sequential(c)).collect())
            .collect();
        assert_ne!(fastest_of(&samples), Some(1));
    }
}
