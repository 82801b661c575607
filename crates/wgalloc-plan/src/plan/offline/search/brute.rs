//! The search checked against brute force on small random instances.

use super::memo::FailedStates;
use super::pass::Pass;
use super::state::State;
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
    let runner = Runner {
        race: std::sync::Arc::new(Race::new()),
        id: 0,
        spent: std::sync::Arc::default(),
    };
    let search = searcher.over(0, false, capacity, None, false, true, runner);
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
    let mut state = State::new(&p, 3, &orders[0].0, &overlaps, &mut failed, 10, None);
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
        total.passes += stats.passes;
        match got {
            Found::Plan(offsets, peak) => {
                assert!(expect && peak <= cap, "{ranges:?} {cap}");
                for (i, x) in p.items.iter().enumerate() {
                    assert!(offsets[i] + x.size <= peak);
                    for (j, y) in p.items.iter().enumerate().skip(i + 1) {
                        let apart =
                            offsets[i] + x.size <= offsets[j] || offsets[j] + y.size <= offsets[i];
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
fn short_restarts_in_perturbed_orders_agree_with_brute_force() {
    // Passes of a few nodes each: most instances take several restarts, each trying
    // the candidates in another order and all sharing one failed-state table.
    let restarts = Tuning {
        lds: false,
        orders: 1,
        corners_anywhere: true,
        restart_nodes: 1,
        spread_div: 1,
        ..Tuning::default()
    };
    let mut restarted = 0;
    for ranges in instances(2000, 7, 8, 0x005e_ed0f_7e57_a7a7) {
        // Three capacities: more passes than that means restarts.
        restarted += u64::from(agrees_with_brute_force(&ranges, restarts).passes > 3);
    }
    assert!(restarted > 100, "only {restarted} instances restarted");
}

/// Small generated tilings (5 to 8 buffers), with one buffer a grid unit taller or
/// shorter in two of every three (so that some no longer fit their bound).
fn tilings(count: u64) -> Vec<Vec<LiveRange>> {
    use crate::plan::offline::generate::{generate, Shape, Spec};
    (0..count)
        .map(|k| {
            let g = generate(&Spec {
                seed: 50_000 + k,
                buffers: 5 + (k % 4) as usize,
                shape: Shape::Guillotine,
            });
            let mut ranges = crate::plan::offline::interval_ranges(&g.problem);
            let victim = (k / 3) as usize % ranges.len();
            match k % 3 {
                1 => ranges[victim].size += 1024,
                2 if ranges[victim].size > 1024 => ranges[victim].size -= 1024,
                _ => {}
            }
            ranges
        })
        .collect()
}

#[test]
fn small_tilings_and_near_tilings_agree_with_brute_force() {
    let corners_and_cover = Tuning {
        lds: false,
        orders: 1,
        corners_anywhere: true,
        restart_nodes: 0,
        ..Tuning::default()
    };
    for ranges in tilings(600) {
        agrees_with_brute_force(&ranges, corners_and_cover);
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
        cover: true,
        ..Tuning::default()
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
        let p =
            Prepared::new(&crate::plan::offline::interval_ranges(&g.problem), 1).expect("valid");
        let (found, _) = Searcher::new(&p).run(CAPACITY, 50_000_000, None);
        let Found::Plan(offsets, peak) = found else {
            panic!("{} not fitted", g.problem.name);
        };
        p.assert_valid(&offsets, peak);
        assert!(peak <= CAPACITY);
    }
}

#[test]
fn failed_state_table_prunes_and_agrees_with_the_search_without_it() {
    // Instances of the random generator above on which the search meets a failed
    // state again (the same unplaced items with the same floors, reached by stacking
    // the items below them in another order): there the table cuts the search. The
    // other checks prune so much that only instances of 20 items and more get there,
    // too many for brute force; the search without the table (complete, checked
    // against brute force above) is the reference, at the bound and two above it.
    // Without corner turns, which prune these before a state is met again.
    let plain = Tuning {
        corners: false,
        ..Tuning::default()
    };
    let forgetful = Tuning {
        memo: false,
        ..plain
    };
    let mut pruned = 0;
    for ranges in instances(1500, 24, 12, 0x005e_ed0f_f00d_cafe) {
        let p = Prepared::new(&ranges, 1).expect("valid");
        let caps = p.lower_bound..p.lower_bound + 3;
        let runs: Vec<(Found, Stats)> = caps
            .clone()
            .map(|cap| Searcher::tuned(&p, plain).run(cap, 1 << 40, None))
            .collect();
        if runs.iter().all(|(_, stats)| stats.memo_hits == 0) {
            continue;
        }
        for (cap, (found, _)) in caps.zip(runs) {
            let (reference, stats) = Searcher::tuned(&p, forgetful).run(cap, 1 << 40, None);
            assert_eq!(stats.memo_hits, 0);
            match (&found, &reference) {
                (Found::Plan(offsets, peak), Found::Plan(..)) => {
                    assert!(*peak <= cap);
                    p.assert_valid(offsets, *peak);
                }
                (Found::Infeasible, Found::Infeasible) => {}
                other => panic!("{other:?} at {cap}: {ranges:?}"),
            }
        }
        pruned += 1;
    }
    assert!(
        pruned >= 3,
        "too few instances where the table cuts the search: {pruned}"
    );
}

/// Searches on generated tilings (whose bound is the capacity and which a perfect
/// packing reaches): every plan is valid and at the capacity, none is ever called
/// infeasible at the capacity, and one unit below it nothing fits.
#[test]
fn generated_tilings_are_never_refuted_and_every_plan_is_valid() {
    use crate::plan::offline::generate::{generate, Shape, Spec, CAPACITY};
    use crate::plan::offline::interval_ranges;
    let mut fitted = 0;
    // Seeds far from the benchmark's (0 to 199), small instances, both shapes.
    for seed in 10_000..10_016u64 {
        let shape = if seed % 2 == 0 {
            Shape::Guillotine
        } else {
            Shape::NonGuillotine
        };
        let g = generate(&Spec {
            seed,
            buffers: 60 + (seed as usize % 5) * 20,
            shape,
        });
        let p = Prepared::new(&interval_ranges(&g.problem), 1).expect("valid");
        assert_eq!(p.lower_bound, CAPACITY, "{}", g.problem.name);
        match Searcher::new(&p).run(CAPACITY, 20_000_000, None).0 {
            Found::Plan(offsets, peak) => {
                p.assert_valid(&offsets, peak);
                assert_eq!(peak, CAPACITY, "{}", g.problem.name);
                fitted += 1;
            }
            Found::Infeasible => panic!("{} refuted at its packing's height", g.problem.name),
            Found::Unknown => {}
        }
        assert_eq!(
            Searcher::new(&p).run(CAPACITY - 1, 1_000_000, None).0,
            Found::Infeasible
        );
    }
    assert!(fitted >= 8, "only {fitted} of 16 fitted");
}
