//! The offline planners at scale: `best` never above any of its strategies on
//! generated instances of many sizes and shapes, and `--time-limit` honoured when it is
//! ten times smaller than the unlimited run.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use wgalloc_plan::plan::offline::{Budget, Strategy};
use wgalloc_plan::plan::{plan_intervals, Interval, IntervalProblem, PlanOptions, Planner};

/// Small budgets, so that a case takes milliseconds.
const QUICK: Budget = Budget {
    deadline: None,
    search_work: 2_000_000,
    climb_work: 1_000_000,
    threads: true,
};

/// A malloc-like trace: `n` buffers, one allocation every `gap` steps (bursts when
/// `gap` is 0: a new step every 8th), sizes from a few classes or spread over
/// `16 << 0..spread`, lifetimes up to `life` steps.
fn generated(n: usize, seed: u64, life: u64, spread: u32, gap: u64) -> IntervalProblem {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut t = 0u64;
    let intervals = (0..n)
        .map(|i| {
            t += if gap == 0 {
                u64::from(next().is_multiple_of(8))
            } else {
                gap
            };
            let size = 16u64 << (next() % u64::from(spread.max(1)));
            let size = size + next() % size;
            let lifetime = 1 + next() % life.max(1);
            Interval {
                id: i.to_string(),
                lower: t,
                upper: t + lifetime,
                size,
            }
        })
        .collect();
    IntervalProblem {
        name: format!("generated-{n}-{seed}"),
        intervals,
    }
}

fn run(problem: &IntervalProblem, planner: Planner, options: PlanOptions) -> u64 {
    let plan = plan_intervals(problem, 1, &PlanOptions { planner, ..options })
        .unwrap_or_else(|e| panic!("{} {}: {e}", problem.name, planner.name()));
    problem
        .verify(&plan)
        .unwrap_or_else(|e| panic!("{} {}: {e}", problem.name, planner.name()));
    plan.peak
}

/// Every strategy `best` runs or starts from on instances of this size.
const STRATEGIES: [Strategy; 12] = [
    Strategy::GreedySize,
    Strategy::GreedyAreaClass,
    Strategy::GreedySizeHoles,
    Strategy::GreedySizeBestFit,
    Strategy::GreedyBreadth,
    Strategy::GreedyLifetime,
    Strategy::GreedyConflict,
    Strategy::GreedySizeClass,
    Strategy::Skyline,
    Strategy::Search,
    Strategy::Climb,
    Strategy::Eject,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn best_is_never_above_any_of_its_strategies(
        n in prop_oneof![1usize..40, 40usize..300, 300usize..1_500],
        seed in any::<u64>(),
        life in prop_oneof![1u64..8, 8u64..200, 200u64..2_000],
        spread in 1u32..18,
        gap in 0u64..3,
    ) {
        let problem = generated(n, seed, life, spread, gap);
        let options = PlanOptions::default().budget(QUICK);
        let best = run(&problem, Planner::Offline(Strategy::Best), options.clone());
        prop_assert!(best >= problem.lower_bound());
        for strategy in STRATEGIES {
            let peak = run(&problem, Planner::Offline(strategy), options.clone());
            prop_assert!(best <= peak, "{}: best {} > {} {}", problem.name, best, strategy, peak);
        }
    }
}

#[test]
fn time_limit_holds_when_ten_times_below_the_unlimited_run() {
    // Large enough for `best` to spend a while without a limit (sweep, skyline orders,
    // column repair), long lifetimes so that the skyline's heap works hard.
    let problem = generated(25_000, 26, 6_000, 16, 1);
    let best = Planner::Offline(Strategy::Best);
    let started = Instant::now();
    let unlimited = run(&problem, best, PlanOptions::default());
    let full = started.elapsed();
    let limit = full / 10;
    let started = Instant::now();
    let limited = run(&problem, best, PlanOptions::default().time_limit(limit));
    let took = started.elapsed();
    eprintln!("unlimited {full:?} ({unlimited}), limit {limit:?}: {took:?} ({limited})");
    // Generous: the limit plus half of the unlimited run's time (import and
    // verification are outside both).
    assert!(
        took < limit + full / 2,
        "asked {limit:?}, took {took:?} (unlimited {full:?})"
    );
    assert!(limited >= problem.lower_bound() && unlimited >= problem.lower_bound());
    // A limit already past still gives a valid plan at once.
    let started = Instant::now();
    run(
        &problem,
        best,
        PlanOptions::default().time_limit(Duration::ZERO),
    );
    assert!(started.elapsed() < full / 2 + Duration::from_millis(50));
}

/// FNV-1a over a plan's offsets and peak: one number that changes with any offset.
fn fingerprint(offsets: &[u64], peak: u64) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for &x in offsets.iter().chain(std::iter::once(&peak)) {
        for b in x.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
        }
    }
    h
}

#[test]
fn ggml_plans_are_those_of_the_linear_hole_scan() {
    // Recorded with the allocator that scanned every hole per allocation (before the
    // holes were indexed by size): ggml's offsets must stay bit-identical.
    let cases: [(usize, u64, u64, u32, u64); 6] = [
        (2_000, 1, 40, 12, 1),
        (20_000, 2, 2_000, 16, 1),
        (20_000, 3, 300, 8, 0),
        (50_000, 4, 5_000, 18, 2),
        (5_000, 5, 10, 3, 1),
        (30_000, 6, 800, 14, 0),
    ];
    let mut report = String::new();
    for (n, seed, life, spread, gap) in cases {
        let problem = generated(n, seed, life, spread, gap);
        for alignment in [1u64, 32] {
            let plan = plan_intervals(
                &problem,
                alignment,
                &PlanOptions::with_planner(Planner::Ggml),
            )
            .expect("plans");
            problem.verify(&plan).expect("verifies");
            report.push_str(&format!(
                "({n}, {seed}, a{alignment}): peak {} fingerprint {:#x}\n",
                plan.peak,
                fingerprint(&plan.offsets, plan.peak)
            ));
        }
    }
    assert_eq!(report, RECORDED, "got:\n{report}");
}

/// What the linear hole scan gave on the cases above.
const RECORDED: &str = "\
(2000, 1, a1): peak 462874 fingerprint 0xbcc2e364cdc8ab0f\n\
(2000, 1, a32): peak 463104 fingerprint 0x35599787370eadd1\n\
(20000, 2, a1): peak 132848015 fingerprint 0xab80c603506d304b\n\
(20000, 2, a32): peak 133851328 fingerprint 0x64b95df062384391\n\
(20000, 3, a1): peak 1118231 fingerprint 0x734b4bfda90c3841\n\
(20000, 3, a32): peak 1129888 fingerprint 0xb54ab71db2abef90\n\
(50000, 4, a1): peak 586185297 fingerprint 0x49bfd49da562059f\n\
(50000, 4, a32): peak 592554880 fingerprint 0xee1be05dbd81b299\n\
(5000, 5, a1): peak 900 fingerprint 0xa9fa4bd5ea50092e\n\
(5000, 5, a32): peak 960 fingerprint 0xc65c5c8576595a6f\n\
(30000, 6, a1): peak 111637724 fingerprint 0x2e31b9837998208e\n\
(30000, 6, a32): peak 110160512 fingerprint 0x7ae3099195e22642\n\
";

#[test]
fn with_time_to_spare_best_keeps_both_greedy_orders_by_size_on_a_large_instance() {
    // 25,000 buffers with about 800 live: past the sweep-first size and the greedy
    // orders' pair limit, so `best` runs the orders by size alone, the class order
    // first. With a deadline far off both complete, as without one: `best` is at most
    // either order run alone.
    let problem = generated(25_000, 9, 1_600, 14, 1);
    let alone = |strategy| run(&problem, Planner::Offline(strategy), PlanOptions::default());
    let by_size = alone(Strategy::GreedySize);
    let by_class = alone(Strategy::GreedySizeClass);
    let best = Planner::Offline(Strategy::Best);
    for options in [
        PlanOptions::default(),
        PlanOptions::default().time_limit(Duration::from_secs(600)),
    ] {
        let peak = run(&problem, best, options);
        assert!(
            peak <= by_size.min(by_class),
            "best {peak}, greedy-size {by_size}, greedy-size-class {by_class}"
        );
    }
}

#[test]
fn a_second_thread_changes_no_plan_without_a_deadline() {
    // The same large instance: without a deadline both greedy orders by size complete,
    // side by side on two threads where the machine has two cores, in turn on one.
    // Every offset is the same either way.
    let problem = generated(25_000, 9, 1_600, 14, 1);
    let plan = |threads| {
        let options = PlanOptions {
            planner: Planner::Offline(Strategy::Best),
            budget: Some(Budget {
                threads,
                ..Budget::default()
            }),
            ..PlanOptions::default()
        };
        let plan = plan_intervals(&problem, 1, &options).expect("plans");
        problem.verify(&plan).expect("valid");
        plan
    };
    let (in_turn, side_by_side) = (plan(false), plan(true));
    assert_eq!(in_turn.peak, side_by_side.peak);
    assert_eq!(in_turn.offsets, side_by_side.offsets);
}
