//! Large, realistic interval instances (thousands to tens of thousands of buffers) for
//! measuring the planners where the exact search does not run: the memory of a training
//! step of a deep network, made up from a seed.
//!
//! A step runs `layers` layers forward, then backward in reverse. Each layer has
//! weights (live for the whole step), activations saved for its backward pass (made at
//! its forward step, freed at its backward step, so that saved activations nest like a
//! stack), short-lived temporaries (one to three steps), and in the backward pass an
//! activation gradient (freed a step or two later) and a weight gradient (kept to the
//! optimizer at the end). A fraction of the saved activations is freed up to 8 steps early
//! or late (recomputation, fused kernels), so that the lifetimes are not perfectly
//! nested, and a few small tensors live over random spans. Sizes are powers of two times 1 to 3 (shapes of batch x channels x pixels),
//! scaled per layer, plus a small odd remainder as real tensor sizes have. The lower
//! bound is not known to be reachable: the instances measure how close a planner gets.
//!
//! Everything comes from the seed: [`training_step`] gives the same instance on every
//! machine.

use crate::plan::{Interval, IntervalProblem};
use crate::seeded::Rng;

/// A tensor size: `scale` times 2^(0..=spread) times 1 to 3, plus an odd remainder
/// below 64 bytes.
fn size(rng: &mut Rng, scale: u64, spread: u64) -> u64 {
    (scale << rng.below(spread + 1)) * (1 + rng.below(3)) + rng.below(64)
}

/// Buffers drawn per layer on average (weights, saved activations, temporaries and
/// gradients).
const PER_LAYER: usize = 12;

/// A training step of about `buffers` buffers (at least one layer), named
/// `train-<buffers>-<seed>`.
pub fn training_step(seed: u64, buffers: usize) -> IntervalProblem {
    let mut rng = Rng(seed ^ 0x7a11_c0de_5eed_0001);
    let layers = (buffers / PER_LAYER).max(1) as u64;
    // Forward step of layer l is 4l .. 4l + 4; backward of layer l mirrors it.
    let end = 8 * layers + 2;
    let backward = |t: u64| end - 1 - t;
    let mut intervals: Vec<Interval> = Vec::with_capacity(buffers + PER_LAYER);
    let mut push = |lower: u64, upper: u64, size: u64| {
        intervals.push(Interval {
            id: intervals.len().to_string(),
            lower,
            upper: upper.max(lower + 1),
            size,
        });
    };
    // Layer widths drift: blocks of layers share a scale, as stages of a network do.
    let mut scale = 1u64 << (12 + rng.below(4));
    for l in 0..layers {
        if rng.below(8) == 0 {
            scale = 1u64 << (8 + rng.below(12));
        }
        let f = 4 * l;
        // Weights and their optimizer state: the whole step (every other layer on
        // average).
        if rng.below(2) == 0 {
            push(0, end, size(&mut rng, scale / 8, 3));
        }
        // A prefetch or communication buffer, live a few to tens of steps anywhere.
        if rng.below(2) == 0 {
            let t = rng.below(end - 1);
            push(t, t + 4 + rng.below(60), size(&mut rng, scale / 2, 3));
        }
        // Small tensors (shapes, indices, scalars), live from a step to a whole phase.
        for _ in 0..rng.below(3) {
            let t = rng.below(end - 1);
            let span = 1 + rng.below(end - t);
            push(t, t + 1 + rng.below(span), 1 + rng.below(256));
        }
        // Saved activations, freed at the mirrored backward step (sometimes a little
        // off it).
        for k in 0..2 + rng.below(3) {
            let made = f + k.min(3);
            let mut freed = backward(made) + 1;
            if rng.below(5) < 2 {
                freed = (freed + rng.below(17)).saturating_sub(8).max(made + 1);
            }
            push(made, freed.min(end), size(&mut rng, scale, 5));
        }
        // Forward temporaries.
        for _ in 0..2 + rng.below(3) {
            let t = f + rng.below(4);
            push(t, t + 1 + rng.below(3), size(&mut rng, scale / 2, 3));
        }
        // Backward: activation gradients, temporaries, and the weight gradient, kept to
        // the optimizer at the end.
        let b = backward(f + 3);
        for _ in 0..1 + rng.below(2) {
            let t = b + rng.below(4);
            push(t, t + 1 + rng.below(2), size(&mut rng, scale, 2));
        }
        for _ in 0..1 + rng.below(3) {
            let t = b + rng.below(4);
            push(t, t + 1 + rng.below(3), size(&mut rng, scale / 2, 3));
        }
        push(b + rng.below(4), end, size(&mut rng, scale / 8, 3));
    }
    IntervalProblem {
        name: format!("train-{buffers}-{seed}"),
        intervals,
    }
}

/// The large set the footprint benchmark measures: `count` instances of 5,000 to
/// 30,000 buffers (drawn from `k`), seeds `0..count`.
pub fn large_suite(count: usize) -> Vec<IntervalProblem> {
    (0..count as u64)
        .map(|k| {
            let buffers = 5_000 + Rng(k ^ 0x1a29_e5e7).below(25_001) as usize;
            training_step(k, buffers)
        })
        .collect()
}

/// A random part of `problem`: each interval kept with probability `keep_percent` /
/// 100 (seeded), named `<name>-sub<keep_percent>-<seed>`. Parts of a production
/// instance keep its sizes and lifetime shapes but move its peaks and gaps.
pub fn subsample(problem: &IntervalProblem, keep_percent: u64, seed: u64) -> IntervalProblem {
    let mut rng = Rng(seed ^ 0x5b5a_3b1e_0000_0001);
    IntervalProblem {
        name: format!("{}-sub{keep_percent}-{seed}", problem.name),
        intervals: problem
            .intervals
            .iter()
            .filter(|_| rng.below(100) < keep_percent)
            .cloned()
            .collect(),
    }
}

/// The parts of a production instance the footprint benchmark measures: seeds
/// `0..count`, keeping 50% to 95% of the intervals.
pub fn subsample_suite(problem: &IntervalProblem, count: usize) -> Vec<IntervalProblem> {
    (0..count as u64)
        .map(|k| subsample(problem, 50 + (k * 9) % 46, k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_instance_and_sizes_near_the_request() {
        let a = training_step(3, 6_000);
        assert_eq!(a, training_step(3, 6_000));
        assert_ne!(a, training_step(4, 6_000));
        let n = a.intervals.len();
        assert!((4_000..=8_000).contains(&n), "{n} buffers");
        assert!(a
            .intervals
            .iter()
            .all(|iv| iv.lower < iv.upper && iv.size > 0));
    }

    #[test]
    fn subsamples_keep_about_the_share_asked_for() {
        let p = training_step(2, 5_000);
        let half = subsample(&p, 50, 1);
        assert_eq!(half, subsample(&p, 50, 1));
        let n = p.intervals.len();
        let kept = half.intervals.len();
        assert!(kept > n * 2 / 5 && kept < n * 3 / 5, "{kept} of {n}");
        assert!(half.intervals.iter().all(|iv| p.intervals.contains(iv)));
        assert_eq!(subsample(&p, 100, 0).intervals, p.intervals);
        assert!(subsample(&p, 0, 0).intervals.is_empty());
        let suite = subsample_suite(&p, 6);
        assert_eq!(suite.len(), 6);
        assert!(suite[0].name.ends_with("-sub50-0"));
    }

    #[test]
    fn saved_activations_make_the_load_peak_between_forward_and_backward() {
        let p = training_step(1, 5_000);
        let end = p.intervals.iter().map(|iv| iv.upper).max().unwrap_or(0);
        let mut live = vec![0u64; end as usize + 1];
        for iv in &p.intervals {
            for t in iv.lower..iv.upper {
                live[t as usize] += iv.size;
            }
        }
        let peak_at = (0..live.len()).max_by_key(|&t| live[t]).unwrap_or(0) as u64;
        assert!(
            peak_at > end / 4 && peak_at < 3 * end / 4,
            "peak at {peak_at} of {end}"
        );
        assert!(p.lower_bound() > live[1] * 4);
    }
}
