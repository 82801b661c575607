//! Property tests for the offline planners on generated tilings
//! (`wgalloc_plan::plan::offline::generate`): instances whose lower bound is the capacity
//! and which a perfect packing (the tiling itself) reaches. Every plan verifies, none
//! peaks below the bound, and a plan found at the capacity is exactly at it.

use proptest::prelude::*;
use wgalloc_plan::plan::offline::generate::{generate, Shape, Spec, CAPACITY};
use wgalloc_plan::plan::offline::{Budget, Strategy};
use wgalloc_plan::plan::{plan_intervals, IntervalPlan, PlanOptions, Planner};

/// A small work budget: the test checks what comes back, not how far the search gets.
fn budget() -> Budget {
    Budget {
        search_work: 20_000_000,
        climb_work: 2_000_000,
        deadline: None,
        threads: true,
    }
}

fn shape(nonguillotine: bool) -> Shape {
    if nonguillotine {
        Shape::NonGuillotine
    } else {
        Shape::Guillotine
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn generated_tilings_plan_validly_and_never_below_their_bound(
        seed in any::<u64>(),
        buffers in 150usize..=320,
        nonguillotine in any::<bool>(),
        with_capacity in any::<bool>(),
    ) {
        let g = generate(&Spec { seed, buffers, shape: shape(nonguillotine) });
        let problem = &g.problem;
        prop_assert_eq!(problem.intervals.len(), buffers);
        prop_assert_eq!(problem.lower_bound(), CAPACITY);
        // The tiling itself is a placement at the capacity.
        let tiling = IntervalPlan {
            offsets: g.offsets.clone(),
            peak: CAPACITY,
            planner: "tiling".into(),
        };
        prop_assert_eq!(problem.verify(&tiling), Ok(()));
        let options = PlanOptions {
            capacity: with_capacity.then_some(CAPACITY),
            ..PlanOptions::with_planner(Planner::Offline(Strategy::Best)).budget(budget())
        };
        let plan = plan_intervals(problem, 1, &options).expect("plans");
        prop_assert_eq!(problem.verify(&plan), Ok(()));
        prop_assert!(plan.peak >= CAPACITY, "{} below its bound", plan.peak);
        // Deterministic: the same input gives the same plan.
        let again = plan_intervals(problem, 1, &options).expect("plans");
        prop_assert_eq!(plan.peak, again.peak);
        prop_assert_eq!(plan.offsets, again.offsets);
    }
}
