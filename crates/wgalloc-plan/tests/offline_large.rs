//! `best` on large interval instances (above the exact search's 3,000 buffers), where
//! it repairs the skyline's peak column: generated training steps
//! (`wgalloc_plan::plan::offline::workload`), parts of the production instance S_1, and S_1
//! itself. Every plan verifies, none is above the skyline's or below the bound, and a
//! deadline already past still gives a valid plan. No timing here (see the footprint
//! benchmark's large set).

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use wgalloc_plan::plan::offline::workload::{subsample, training_step};
use wgalloc_plan::plan::offline::Strategy;
use wgalloc_plan::plan::{plan_intervals, IntervalProblem, PlanOptions, Planner};

fn peak(problem: &IntervalProblem, options: &PlanOptions) -> u64 {
    let plan = plan_intervals(problem, 1, options).expect("plans");
    problem.verify(&plan).expect("valid plan");
    assert!(plan.peak >= problem.lower_bound());
    plan.peak
}

fn options(strategy: Strategy) -> PlanOptions {
    PlanOptions::with_planner(Planner::Offline(strategy))
}

fn s1() -> IntervalProblem {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("dsa/iopddl_S_1.csv");
    IntervalProblem::read_csv(&path).expect("dsa/iopddl_S_1.csv reads")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4))]

    #[test]
    fn best_on_generated_training_steps_is_valid_and_no_worse_than_the_skyline(
        seed in any::<u64>(),
        buffers in 3_500usize..6_000,
    ) {
        let problem = training_step(seed, buffers);
        let best = peak(&problem, &options(Strategy::Best));
        prop_assert!(best <= peak(&problem, &options(Strategy::Skyline)));
    }
}

#[test]
fn best_on_parts_of_s1_is_valid_and_no_worse_than_the_skyline() {
    let s1 = s1();
    for (keep, seed) in [(20, 1), (35, 2)] {
        let part = subsample(&s1, keep, seed);
        assert!(part.intervals.len() > 3_000, "large enough for the repair");
        let best = peak(&part, &options(Strategy::Best));
        assert!(
            best <= peak(&part, &options(Strategy::Skyline)),
            "{}",
            part.name
        );
    }
}

#[test]
fn best_takes_s1_to_its_bound_where_the_skyline_alone_does_not() {
    let s1 = s1();
    let bound = s1.lower_bound();
    assert!(peak(&s1, &options(Strategy::Skyline)) > bound);
    assert_eq!(peak(&s1, &options(Strategy::Best)), bound);
}

#[test]
fn best_with_a_deadline_already_past_still_plans_s1_validly() {
    let limited = options(Strategy::Best).time_limit(Duration::ZERO);
    let _ = peak(&s1(), &limited);
}
