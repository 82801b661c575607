//! Hard interval instances with a known answer, for tuning and testing the exact
//! search on more than the six shared ones.
//!
//! A capacity x time rectangle is cut into pieces that tile it exactly; each piece is a
//! buffer (its time span the lifetime, its height the size). Every time step is then
//! covered to exactly the capacity, so the lower bound equals the capacity and the
//! tiling itself is a placement that reaches it: a planner must find a *perfect*
//! packing. The shapes follow MiniMalloc's challenging suite (A-F): a 1,048,576 x
//! 1,048,576 rectangle on a grid of 1,024 x 1,024 units, 150 to 500 buffers.
//!
//! * [`Shape::Guillotine`]: pieces are cut in two, again and again, by straight cuts
//!   across the whole piece (the piece to cut chosen by area).
//! * [`Shape::NonGuillotine`]: a coarse guillotine cut on a grid of 64 units, then
//!   neighbouring pieces that share a whole edge are merged (which makes pinwheels: no
//!   straight cut splits the rectangle, or some part of it, in two), then the pieces
//!   are cut again, finely, up to the count. Only tilings that [`is_guillotine`] rejects
//!   are kept: the search cannot split those into independent sections in time
//!   all the way down.
//!
//! Everything comes from the seed: the same [`Spec`] gives the same instance on every
//! machine.

use crate::plan::{Interval, IntervalProblem};
use crate::seeded::Rng;

/// Grid units per axis.
const UNITS: u32 = 1024;
/// Bytes (and time steps) per unit: the rectangle is `UNITS * UNIT` on each side.
const UNIT: u64 = 1024;
/// The capacity every generated instance fits exactly: 1,048,576.
pub const CAPACITY: u64 = UNITS as u64 * UNIT;
/// Coarse grid step (in units) of the first cut of a non-guillotine instance.
const COARSE: u32 = 64;
/// Attempts (each from a new stream of the same seed) at a non-guillotine tiling.
const ATTEMPTS: u64 = 64;

/// Whether the tiling may be built from straight cuts alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Recursive straight cuts only.
    Guillotine,
    /// Cuts, then merges of neighbours that share a whole edge, then finer cuts; never
    /// a guillotine tiling.
    NonGuillotine,
}

impl Shape {
    /// A short tag for file names: `g` or `ng`.
    pub fn tag(self) -> &'static str {
        match self {
            Shape::Guillotine => "g",
            Shape::NonGuillotine => "ng",
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Spec {
    /// The seed: every choice comes from it.
    pub seed: u64,
    /// Number of buffers (clamped to 2..=10,000).
    pub buffers: usize,
    /// Guillotine or not.
    pub shape: Shape,
}

/// A piece of the rectangle in grid units: time `[x0, x1)`, height `[y0, y1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Piece {
    /// First time unit.
    pub x0: u32,
    /// One past the last time unit.
    pub x1: u32,
    /// Lowest height unit.
    pub y0: u32,
    /// One past the highest height unit.
    pub y1: u32,
}

impl Piece {
    fn width(&self) -> u32 {
        self.x1 - self.x0
    }

    fn height(&self) -> u32 {
        self.y1 - self.y0
    }

    fn area(&self) -> u64 {
        u64::from(self.width()) * u64::from(self.height())
    }
}

/// A generated instance: the problem (rows in a shuffled order, ids `0..n`) and the
/// tiling's offsets, a placement that reaches [`CAPACITY`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The interval problem, named `gen-<shape>-<seed>`.
    pub problem: IntervalProblem,
    /// `offsets[i]` for `problem.intervals[i]`: the perfect packing.
    pub offsets: Vec<u64>,
    /// The pieces, in the problem's row order.
    pub pieces: Vec<Piece>,
}

impl Generated {
    /// The problem as a CSV file (`id,lower,upper,size`), as [`IntervalProblem::read_csv`]
    /// reads it.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("id,lower,upper,size\n");
        for it in &self.problem.intervals {
            out.push_str(&format!(
                "{},{},{},{}\n",
                it.id, it.lower, it.upper, it.size
            ));
        }
        out
    }
}

/// The generated set the benchmark and `examples/gen_dsa.rs` use: instance `k` of
/// `count` is guillotine for even `k`, non-guillotine for odd `k`, with seed `k` and
/// 150 to 500 buffers (drawn from the seed).
pub fn suite(count: usize) -> Vec<Spec> {
    (0..count as u64)
        .map(|k| Spec {
            seed: k,
            buffers: 150 + Rng(k ^ 0xb0ff_e125).below(351) as usize,
            shape: if k % 2 == 0 {
                Shape::Guillotine
            } else {
                Shape::NonGuillotine
            },
        })
        .collect()
}

/// Generates the instance `spec` describes.
pub fn generate(spec: &Spec) -> Generated {
    let n = spec.buffers.clamp(2, 10_000);
    let pieces = match spec.shape {
        Shape::Guillotine => {
            let mut rng = Rng(spec.seed);
            let mut pieces = vec![whole()];
            cut_to(&mut pieces, n, 1, &mut rng);
            pieces
        }
        Shape::NonGuillotine => non_guillotine(spec.seed, n),
    };
    let mut rng = Rng(spec.seed ^ 0x005e_ed0f_0dd5);
    let mut pieces = pieces;
    // Shuffle the rows (Fisher-Yates), as the published files are not sorted.
    for i in (1..pieces.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        pieces.swap(i, j);
    }
    let intervals = pieces
        .iter()
        .enumerate()
        .map(|(id, q)| Interval {
            id: id.to_string(),
            lower: u64::from(q.x0) * UNIT,
            upper: u64::from(q.x1) * UNIT,
            size: u64::from(q.height()) * UNIT,
        })
        .collect();
    let offsets = pieces.iter().map(|q| u64::from(q.y0) * UNIT).collect();
    Generated {
        problem: IntervalProblem {
            name: format!("gen-{}-{:04}", spec.shape.tag(), spec.seed),
            intervals,
        },
        offsets,
        pieces,
    }
}

/// The whole rectangle.
fn whole() -> Piece {
    Piece {
        x0: 0,
        x1: UNITS,
        y0: 0,
        y1: UNITS,
    }
}

/// Cuts pieces in two (a piece chosen with probability proportional to its area, cut
/// across its longer side more often, at a multiple of `grain` units) until there are
/// `n`, or no piece can be cut.
fn cut_to(pieces: &mut Vec<Piece>, n: usize, grain: u32, rng: &mut Rng) {
    while pieces.len() < n {
        let cuttable = |q: &Piece| q.width() >= 2 * grain || q.height() >= 2 * grain;
        let total: u64 = pieces.iter().filter(|q| cuttable(q)).map(Piece::area).sum();
        if total == 0 {
            return;
        }
        let mut pick = rng.below(total);
        let mut at = 0;
        for (k, q) in pieces.iter().enumerate() {
            if !cuttable(q) {
                continue;
            }
            if pick < q.area() {
                at = k;
                break;
            }
            pick -= q.area();
        }
        let q = pieces[at];
        let (w, h) = (q.width(), q.height());
        // Across time (a vertical cut) with probability w / (w + h), when both can.
        let in_time = if w < 2 * grain {
            false
        } else if h < 2 * grain {
            true
        } else {
            rng.below(u64::from(w + h)) < u64::from(w)
        };
        let (lo, hi) = if in_time { (q.x0, q.x1) } else { (q.y0, q.y1) };
        let steps = (hi - lo) / grain; // at least 2
        let cut = lo + grain * (1 + rng.below(u64::from(steps - 1)) as u32);
        let (a, b) = if in_time {
            (Piece { x1: cut, ..q }, Piece { x0: cut, ..q })
        } else {
            (Piece { y1: cut, ..q }, Piece { y0: cut, ..q })
        };
        pieces[at] = a;
        pieces.push(b);
    }
}

/// Two pieces that share a whole edge make one rectangle: that rectangle.
fn merged(a: &Piece, b: &Piece) -> Option<Piece> {
    let side_by_side = a.y0 == b.y0 && a.y1 == b.y1 && (a.x1 == b.x0 || b.x1 == a.x0);
    let stacked = a.x0 == b.x0 && a.x1 == b.x1 && (a.y1 == b.y0 || b.y1 == a.y0);
    (side_by_side || stacked).then(|| Piece {
        x0: a.x0.min(b.x0),
        x1: a.x1.max(b.x1),
        y0: a.y0.min(b.y0),
        y1: a.y1.max(b.y1),
    })
}

/// A non-guillotine tiling of `n` pieces: coarse cuts, merges, fine cuts, kept once
/// [`is_guillotine`] rejects it (a new stream of the seed for each attempt; after
/// [`ATTEMPTS`] the last attempt is kept, which has never happened for 2..=500).
fn non_guillotine(seed: u64, n: usize) -> Vec<Piece> {
    let mut last = Vec::new();
    for attempt in 0..ATTEMPTS {
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ attempt);
        let mut pieces = vec![whole()];
        // Coarse: about a third of the pieces, on a 16 x 16 grid.
        let coarse = (n / 3).clamp(2, 200);
        cut_to(&mut pieces, coarse, COARSE, &mut rng);
        // Merge random neighbours sharing a whole edge; each merge may enable others.
        let merges = pieces.len() / 3;
        for _ in 0..merges {
            let mut pairs = Vec::new();
            for i in 0..pieces.len() {
                for j in i + 1..pieces.len() {
                    if merged(&pieces[i], &pieces[j]).is_some() {
                        pairs.push((i, j));
                    }
                }
            }
            if pairs.is_empty() {
                break;
            }
            let (i, j) = pairs[rng.below(pairs.len() as u64) as usize];
            if let Some(m) = merged(&pieces[i], &pieces[j]) {
                pieces[i] = m;
                pieces.swap_remove(j);
            }
        }
        if is_guillotine(&pieces) {
            continue;
        }
        // Fine: up to the count, anywhere on the unit grid.
        cut_to(&mut pieces, n, 1, &mut rng);
        if !is_guillotine(&pieces) {
            return pieces;
        }
        last = pieces;
    }
    last
}

/// Whether the pieces (a tiling of their bounding box) can be split in two by a
/// straight cut that crosses no piece, and each side again, down to single pieces.
pub fn is_guillotine(pieces: &[Piece]) -> bool {
    if pieces.len() <= 1 {
        return true;
    }
    for in_time in [true, false] {
        let span = |q: &Piece| if in_time { (q.x0, q.x1) } else { (q.y0, q.y1) };
        let mut spans: Vec<(u32, u32)> = pieces.iter().map(span).collect();
        spans.sort_unstable();
        let mut reach = spans[0].1;
        for &(lo, hi) in &spans[1..] {
            if lo >= reach {
                // A cut at `lo` crosses no piece.
                let (a, b): (Vec<Piece>, Vec<Piece>) = pieces.iter().partition(|q| span(q).1 <= lo);
                return is_guillotine(&a) && is_guillotine(&b);
            }
            reach = reach.max(hi);
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> impl Iterator<Item = Spec> {
        (0..40u64).flat_map(|seed| {
            [Shape::Guillotine, Shape::NonGuillotine].map(|shape| Spec {
                seed,
                buffers: 150 + (seed as usize * 37) % 351,
                shape,
            })
        })
    }

    #[test]
    fn every_time_step_is_covered_to_exactly_the_capacity() {
        for spec in specs() {
            let g = generate(&spec);
            let mut live = vec![0u64; UNITS as usize];
            for it in &g.problem.intervals {
                for t in it.lower / UNIT..it.upper / UNIT {
                    live[t as usize] += it.size;
                }
            }
            assert!(live.iter().all(|&l| l == CAPACITY), "{spec:?}");
            assert_eq!(g.problem.lower_bound(), CAPACITY, "{spec:?}");
        }
    }

    #[test]
    fn the_tiling_is_a_valid_placement_at_the_capacity() {
        for spec in specs() {
            let g = generate(&spec);
            let plan = crate::plan::IntervalPlan {
                offsets: g.offsets.clone(),
                peak: CAPACITY,
                planner: String::from("tiling"),
            };
            g.problem.verify(&plan).expect("the tiling is a placement");
        }
    }

    #[test]
    fn the_same_spec_gives_the_same_instance_and_seeds_differ() {
        for spec in specs().take(10) {
            assert_eq!(generate(&spec), generate(&spec));
            let other = Spec {
                seed: spec.seed + 1000,
                ..spec
            };
            assert_ne!(generate(&spec).problem, generate(&other).problem);
        }
    }

    #[test]
    fn counts_are_as_asked_within_150_to_500() {
        for spec in specs() {
            let g = generate(&spec);
            assert_eq!(g.problem.intervals.len(), spec.buffers, "{spec:?}");
            assert!((150..=500).contains(&g.pieces.len()));
        }
    }

    #[test]
    fn guillotine_shapes_are_guillotine_and_the_others_are_not() {
        for spec in specs() {
            let g = generate(&spec);
            assert_eq!(
                is_guillotine(&g.pieces),
                spec.shape == Shape::Guillotine,
                "{spec:?}"
            );
        }
    }

    #[test]
    fn merges_join_only_pieces_sharing_a_whole_edge() {
        let a = Piece {
            x0: 0,
            x1: 4,
            y0: 0,
            y1: 2,
        };
        let right = Piece { x0: 4, x1: 6, ..a };
        let above = Piece { y0: 2, y1: 5, ..a };
        let shorter = Piece {
            x0: 4,
            x1: 6,
            y0: 0,
            y1: 1,
        };
        let apart = Piece { x0: 5, x1: 6, ..a };
        assert_eq!(merged(&a, &right), Some(Piece { x1: 6, ..a }));
        assert_eq!(merged(&above, &a), Some(Piece { y1: 5, ..a }));
        assert_eq!(merged(&a, &shorter), None);
        assert_eq!(merged(&a, &apart), None);
    }

    #[test]
    fn a_pinwheel_is_not_guillotine_and_a_grid_is() {
        let p = |x0, x1, y0, y1| Piece { x0, x1, y0, y1 };
        let pinwheel = [
            p(0, 2, 0, 1),
            p(2, 3, 0, 2),
            p(1, 3, 2, 3),
            p(0, 1, 1, 3),
            p(1, 2, 1, 2),
        ];
        assert!(!is_guillotine(&pinwheel));
        let grid = [p(0, 1, 0, 1), p(1, 2, 0, 1), p(0, 1, 1, 2), p(1, 2, 1, 2)];
        assert!(is_guillotine(&grid));
    }

    #[test]
    fn sizes_and_lifetimes_are_whole_units_within_the_rectangle() {
        for spec in specs() {
            for it in &generate(&spec).problem.intervals {
                assert!(it.size > 0 && it.size % UNIT == 0 && it.size <= CAPACITY);
                assert!(it.lower < it.upper && it.upper <= CAPACITY);
                assert_eq!(it.lower % UNIT, 0);
            }
        }
    }
}
