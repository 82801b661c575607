//! Property tests for the offline planners on random graphs (views, in-place nodes,
//! outputs, several chunks): every plan passes the shared `Plan::verify`, never goes
//! below the in-place-aware lower bound, and is deterministic.

use proptest::prelude::*;
use wgalloc_plan::graph::synthetic::random_graph;
use wgalloc_plan::plan::offline::Strategy;
use wgalloc_plan::plan::{lower_bounds, BufferTypeDesc};

/// One offline strategy through the one entry point, default budgets.
fn plan_offline(
    graph: &wgalloc_plan::graph::Graph,
    buffer_type: &BufferTypeDesc,
    strategy: Strategy,
) -> Result<wgalloc_plan::plan::Plan, wgalloc_plan::plan::PlanError> {
    let options = wgalloc_plan::plan::PlanOptions::with_planner(
        wgalloc_plan::plan::Planner::Offline(strategy),
    );
    wgalloc_plan::plan::plan(graph, std::slice::from_ref(buffer_type), &options)
}

const MAX_NODES: usize = 24;

/// The cheap strategies: the search and climb have their own tests on the interval
/// files and would make thousands of cases slow.
const STRATEGIES: [Strategy; 7] = [
    Strategy::GreedySize,
    Strategy::GreedyAreaClass,
    Strategy::GreedySizeBestFit,
    Strategy::GreedyBreadth,
    Strategy::GreedyLifetime,
    Strategy::GreedyConflict,
    Strategy::GreedySizeClass,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn offline_plans_of_random_graphs_verify_and_respect_the_bound(
        seed in any::<u64>(),
        alignment in prop::sample::select(vec![1u64, 4, 32, 256]),
        max_size in prop::sample::select(vec![64u64, 256, 4096, 1 << 20]),
        strategy in prop::sample::select(STRATEGIES.to_vec()),
    ) {
        let graph = random_graph(seed, MAX_NODES).expect("generator builds valid graphs");
        let buffer_type = BufferTypeDesc::new("s", alignment, max_size).expect("valid");
        let plan = plan_offline(&graph, &buffer_type, strategy).expect("plans");
        prop_assert_eq!(plan.verify(&graph), Ok(()), "{}", strategy);
        let bound = lower_bounds(&graph).expect("bounds").inplace_aware;
        prop_assert!(plan.total_size() >= bound, "{} total {} below bound {}",
            strategy, plan.total_size(), bound);
        let again = plan_offline(&graph, &buffer_type, strategy).expect("plans");
        prop_assert_eq!(&plan, &again, "same input, same plan");
    }
}

#[test]
fn best_plans_of_random_graphs_verify() {
    for seed in 0..200u64 {
        let graph = random_graph(seed, MAX_NODES).expect("valid");
        let buffer_type = BufferTypeDesc::new("s", 32, 4096).expect("valid");
        let plan = plan_offline(&graph, &buffer_type, Strategy::Best).expect("plans");
        assert_eq!(plan.verify(&graph), Ok(()), "seed {seed}");
    }
}

mod regressions {
    use super::plan_offline;
    use wgalloc_plan::graph::{DType, GraphBuilder};
    use wgalloc_plan::plan::offline::Strategy;
    use wgalloc_plan::plan::{plan_graph, BufferTypeDesc, PlanError};

    fn storage() -> BufferTypeDesc {
        BufferTypeDesc::new("s", 4, 1 << 20).expect("valid")
    }

    #[test]
    fn no_planner_writes_in_place_over_memory_that_holds_an_output_view() {
        let mut b = GraphBuilder::new("g");
        let input = b.input("in", DType::F32, &[16]);
        let x = b.node("relu", &[input], &[16], false);
        let xv = b.view("xv", x, &[4, 4]);
        b.mark_output(xv);
        let y = b.node("neg", &[x], &[16], true);
        b.mark_output(y);
        let graph = b.build().expect("valid");
        for strategy in Strategy::ALL {
            let plan = plan_offline(&graph, &storage(), strategy).expect("plans");
            assert!(plan.inplace.is_empty(), "{strategy}: {:?}", plan.inplace);
            plan.verify(&graph).expect("verifies");
        }
        let mut ggml = plan_graph(&graph, &storage()).expect("plans");
        assert!(ggml.inplace.is_empty());
        // Claiming the pair anyway is refused by verify.
        ggml.placements[y.index()] = ggml.placements[x.index()];
        ggml.inplace.push((y, x));
        assert!(matches!(
            ggml.verify(&graph),
            Err(PlanError::BadInplace { .. })
        ));
    }

    #[test]
    fn no_planner_writes_in_place_while_a_view_of_the_input_is_read_alongside() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[16]);
        let a = b.node("relu", &[x], &[16], false);
        let at = b.view("a_t", a, &[4, 4]);
        let y = b.node("add", &[a, at], &[16], true);
        b.mark_output(y);
        let graph = b.build().expect("valid");
        for strategy in Strategy::ALL {
            let plan = plan_offline(&graph, &storage(), strategy).expect("plans");
            assert!(plan.inplace.is_empty(), "{strategy}: {:?}", plan.inplace);
            plan.verify(&graph).expect("verifies");
        }
        assert!(plan_graph(&graph, &storage())
            .expect("plans")
            .inplace
            .is_empty());
    }

    #[test]
    fn an_in_place_output_that_only_partly_covers_its_input_is_rejected() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[16]);
        let y = b.node("relu", &[x], &[16], true);
        b.mark_output(y);
        let graph = b.build().expect("valid");
        let mut plan = plan_graph(&graph, &storage()).expect("plans");
        assert_eq!(plan.inplace, vec![(y, x)]);
        plan.verify(&graph).expect("honest in-place plan verifies");
        let mut shifted = plan.placements[y.index()].expect("placed");
        shifted.offset += 32;
        plan.buffers[0].chunks[0].size += 32;
        plan.placements[y.index()] = Some(shifted);
        assert!(matches!(
            plan.verify(&graph),
            Err(PlanError::BadInplace { .. })
        ));
    }
}
