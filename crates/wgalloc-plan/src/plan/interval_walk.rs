//! ggml's walk over an interval problem ([`crate::plan::Planner::Ggml`] on intervals):
//! in time order, the buffers ending at a time are freed before those starting then
//! are placed (file order among equals), each at the best fit of a free-block
//! allocator: the smallest free block that holds it (the lowest on ties), else the
//! top.
//!
//! The walk places into one unbounded memory, so it keeps its own book of free blocks
//! instead of a general [`crate::plan::FreeBlockAllocator`] (chunks, a size limit, a
//! check of every free against the live blocks): [`super::gaps::FreeMemory`], whose freed
//! blocks find the neighbours they merge with by two exact lookups instead of two
//! ordered ones. The offsets are the allocator's (a test compares them over
//! random problems); a million buffers take about half the time.

use super::gaps::FreeMemory;
use super::{align_up, IntervalProblem, PlanError};
use crate::graph::TensorId;

/// The walk's offsets and peak, each size rounded up to `alignment` (a power of two;
/// 0 bytes count as 1, so that every buffer has an address of its own).
///
/// # Errors
/// [`PlanError::SizeOverflow`] where a size rounded up, or the memory, passes 2^64
/// bytes.
pub(crate) fn online_walk(
    problem: &IntervalProblem,
    alignment: u64,
) -> Result<(Vec<u64>, u64), PlanError> {
    let n = problem.intervals.len();
    let overflow = |i: usize| PlanError::SizeOverflow {
        tensor: TensorId(u32::try_from(i).unwrap_or(u32::MAX)),
    };
    // Starts and ends sorted apart and merged, frees first at a time: the order of
    // one sort of (time, start?, index) events, at half the sorting.
    let mut starts: Vec<(u64, usize)> = Vec::with_capacity(n);
    let mut ends: Vec<(u64, usize)> = Vec::with_capacity(n);
    for (i, iv) in problem.intervals.iter().enumerate() {
        starts.push((iv.lower, i));
        ends.push((iv.upper, i));
    }
    starts.sort_unstable();
    ends.sort_unstable();
    let mut offsets = vec![0u64; n];
    // Aligned sizes, each set when its buffer is placed (so that an error names the
    // first buffer in start order that overflows, as the walk meets it).
    let mut sizes = vec![0u64; n];
    let mut placed = vec![false; n];
    let mut memory = FreeMemory::default();
    let mut next_end = 0usize;
    for &(lower, i) in &starts {
        while let Some(&(upper, j)) = ends.get(next_end) {
            if upper > lower {
                break;
            }
            next_end += 1;
            if placed[j] {
                memory.give(offsets[j], sizes[j]);
            }
        }
        let size =
            align_up(problem.intervals[i].size.max(1), alignment).ok_or_else(|| overflow(i))?;
        sizes[i] = size;
        offsets[i] = memory.take(size).ok_or_else(|| overflow(i))?;
        placed[i] = true;
    }
    // The frees after the last start change no offset and no high-water mark.
    Ok((offsets, memory.high_water()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{FreeBlockAllocator, Interval};
    use crate::seeded::Rng;

    /// The walk with the general free-block allocator, as it was written before the
    /// book of its own.
    fn with_the_allocator(problem: &IntervalProblem, alignment: u64) -> (Vec<u64>, u64) {
        let mut allocator = FreeBlockAllocator::new(alignment, u64::MAX).expect("valid");
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (i, iv) in problem.intervals.iter().enumerate() {
            events.push((iv.lower, true, i));
            events.push((iv.upper, false, i));
        }
        // Frees (false) before allocations (true) at a time, then file order.
        events.sort_unstable();
        let mut placed = vec![None; problem.intervals.len()];
        for (_, start, i) in events {
            if start {
                placed[i] = Some(allocator.alloc(problem.intervals[i].size).expect("fits"));
            } else if let Some(a) = placed[i] {
                allocator
                    .free(a.chunk, a.offset, problem.intervals[i].size)
                    .expect("frees");
            }
        }
        let offsets = placed.iter().map(|a| a.map_or(0, |a| a.offset)).collect();
        (offsets, allocator.high_water(0).unwrap_or(0))
    }

    fn random_problem(rng: &mut Rng, n: usize, horizon: usize, max_size: usize) -> IntervalProblem {
        let intervals = (0..n)
            .map(|i| {
                let lower = rng.index(horizon) as u64;
                Interval {
                    id: i.to_string(),
                    lower,
                    upper: lower + 1 + rng.index(horizon / 4 + 1) as u64,
                    size: rng.index(max_size) as u64,
                }
            })
            .collect();
        IntervalProblem {
            name: "random".to_string(),
            intervals,
        }
    }

    #[test]
    fn the_walk_places_every_buffer_where_the_general_allocator_does() {
        let mut rng = Rng::new(77);
        for round in 0..400 {
            let n = [1, 2, 10, 100, 1000][round % 5];
            let horizon = [2, 10, 50, 1000][(round / 5) % 4];
            let max_size = [1, 8, 100, 5000][(round / 20) % 4];
            let alignment = [1, 4, 32][round % 3];
            let problem = random_problem(&mut rng, n, horizon, max_size);
            let got = online_walk(&problem, alignment).expect("plans");
            assert_eq!(
                got,
                with_the_allocator(&problem, alignment),
                "round {round}"
            );
            let plan = crate::plan::IntervalPlan {
                offsets: got.0,
                peak: got.1,
                planner: "ggml".to_string(),
            };
            problem.verify(&plan).expect("valid");
        }
    }

    #[test]
    fn a_memory_past_two_to_the_64_is_an_error_naming_the_buffer() {
        let problem = IntervalProblem::parse_csv("x", "a,0,2,18446744073709551615\nb,0,2,1\n")
            .expect("valid rows");
        assert!(matches!(
            online_walk(&problem, 1),
            Err(PlanError::SizeOverflow {
                tensor: TensorId(1)
            })
        ));
        assert!(matches!(
            online_walk(&problem, 4),
            Err(PlanError::SizeOverflow {
                tensor: TensorId(0)
            })
        ));
    }
}
