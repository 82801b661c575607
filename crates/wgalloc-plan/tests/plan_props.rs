//! Property tests of the ggml-semantics planner over seeded random graphs (views,
//! in-place nodes, outputs, inputs, weights): every plan verifies, never beats the
//! in-place-aware lower bound, is deterministic, and a plan corrupted by moving one
//! live tensor over another is rejected naming both.

use proptest::prelude::*;
use wgalloc_plan::graph::synthetic::random_graph;
use wgalloc_plan::graph::{Graph, Lifetimes, TensorId};
use wgalloc_plan::plan::{
    graph_leaves, lower_bounds, plan_graph, BufferTypeDesc, FreeBlockAllocator, GraphAllocator,
    Plan, PlanError,
};

const MAX_NODES: usize = 24;

fn buft(alignment: u64, max_size: u64) -> BufferTypeDesc {
    BufferTypeDesc::new("t", alignment, max_size).expect("valid buffer type")
}

/// A pair (moved, target) of distinct memory owners, both non-empty, not part of any
/// in-place pair, with `moved` live only while `target` is and no larger than it.
fn corruption_candidate(graph: &Graph, plan: &Plan) -> Option<(TensorId, TensorId)> {
    let lifetimes = Lifetimes::of(graph);
    let in_pair = |t: TensorId| plan.inplace.iter().any(|&(o, i)| o == t || i == t);
    let owners: Vec<TensorId> = graph
        .planned_tensors()
        .filter(|&t| !in_pair(t) && plan.placement(t).is_some_and(|p| p.size > 0))
        .collect();
    for &target in &owners {
        for &moved in &owners {
            let (Some(lm), Some(lt)) = (lifetimes.get(moved), lifetimes.get(target)) else {
                continue;
            };
            let (Some(pm), Some(pt)) = (plan.placement(moved), plan.placement(target)) else {
                continue;
            };
            if moved != target
                && lt.first <= lm.first
                && lm.last <= lt.last
                && pm.size <= pt.size
                && pm.buffer == pt.buffer
            {
                return Some((moved, target));
            }
        }
    }
    None
}

/// Moves `moved` (and its views) to `target`'s chunk and offset.
fn corrupt(graph: &Graph, plan: &mut Plan, moved: TensorId, target: TensorId) {
    let Some(to) = plan.placement(target) else {
        return;
    };
    let Some(from) = plan.placement(moved) else {
        return;
    };
    let new = wgalloc_plan::plan::Placement {
        size: from.size,
        ..to
    };
    for t in &graph.tensors {
        if graph.root_of(t.id) == Some(moved) {
            plan.placements[t.id.index()] = Some(new);
        }
    }
}

/// Corrupts `plan` where [`corruption_candidate`] finds a pair and checks that `verify`
/// names both tensors: `Ok(true)` checked, `Ok(false)` no candidate (nothing checked),
/// `Err` what went wrong.
fn check_corruption(graph: &Graph, plan: &mut Plan) -> Result<bool, String> {
    let Some((moved, target)) = corruption_candidate(graph, plan) else {
        return Ok(false);
    };
    corrupt(graph, plan, moved, target);
    match plan.verify(graph) {
        Err(PlanError::Overlap { first, second, .. }) => {
            let mut named = [first, second];
            named.sort();
            let mut expected = [moved, target];
            expected.sort();
            if named == expected {
                Ok(true)
            } else {
                Err(format!("named {named:?}, expected {expected:?}"))
            }
        }
        other => Err(format!(
            "expected an overlap of {moved} and {target}, got {other:?}"
        )),
    }
}

/// The property above skips a graph with no corruption candidate; this counts the
/// skips over 2,000 seeded graphs and fails if most graphs check nothing.
#[test]
fn most_random_graphs_have_a_corruption_to_check() {
    let (mut checked, mut skipped) = (0u32, 0u32);
    for seed in 0..2_000u64 {
        let graph = random_graph(seed, MAX_NODES).expect("generator builds valid graphs");
        let mut plan = plan_graph(&graph, &buft(32, 1 << 20)).expect("plans");
        match check_corruption(&graph, &mut plan) {
            Ok(true) => checked += 1,
            Ok(false) => skipped += 1,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    println!("corruptions checked on {checked} graphs, {skipped} had no candidate");
    assert!(
        checked >= 3 * skipped,
        "only {checked} of {} graphs had a corruption to check",
        checked + skipped
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn random_graph_plans_verify_and_respect_the_bound(
        seed in any::<u64>(),
        alignment in prop::sample::select(vec![1u64, 4, 32, 256]),
        max_size in prop::sample::select(vec![64u64, 256, 4096, 1 << 20]),
    ) {
        let graph = random_graph(seed, MAX_NODES).expect("generator builds valid graphs");
        let plan = plan_graph(&graph, &buft(alignment, max_size)).expect("plans");
        prop_assert_eq!(plan.verify(&graph), Ok(()));
        let bounds = lower_bounds(&graph).expect("bounds");
        prop_assert!(plan.total_size() >= bounds.inplace_aware,
            "total {} below in-place-aware bound {}", plan.total_size(), bounds.inplace_aware);
        let again = plan_graph(&graph, &buft(alignment, max_size)).expect("plans");
        prop_assert_eq!(&plan, &again, "same input, same plan");
    }

    #[test]
    fn corrupted_plan_is_rejected_naming_both_tensors(seed in any::<u64>()) {
        let graph = random_graph(seed, MAX_NODES).expect("generator builds valid graphs");
        let mut plan = plan_graph(&graph, &buft(32, 1 << 20)).expect("plans");
        let outcome = check_corruption(&graph, &mut plan);
        prop_assert!(outcome.is_ok(), "{}", outcome.err().unwrap_or_default());
    }

    #[test]
    fn multi_buffer_reservations_verify(seed in any::<u64>(), ids_seed in any::<u64>()) {
        let graph = random_graph(seed, MAX_NODES).expect("generator builds valid graphs");
        // Three buffers; the third repeats the first's type and so shares its memory.
        let types = vec![buft(32, 4096), buft(4, 256), buft(32, 4096)];
        let mut galloc = GraphAllocator::new(types);
        let pick = |i: usize| ((ids_seed >> (i % 32 * 2)) % 3) as usize;
        let nodes: Vec<usize> = (0..graph.nodes.len()).map(pick).collect();
        let leaves: Vec<usize> = (0..graph_leaves(&graph).len()).map(|i| pick(i + 7)).collect();
        galloc.reserve_n(&graph, &nodes, &leaves).expect("reserves");
        let plan = galloc.alloc_graph(&graph).expect("allocates");
        prop_assert_eq!(plan.verify(&graph), Ok(()));
        prop_assert_eq!(galloc.buffer_size(2), Ok(0));
        prop_assert!(!galloc.needs_realloc(&graph));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn dynamic_allocator_never_hands_out_overlapping_live_blocks(
        ops in prop::collection::vec((any::<bool>(), 1u64..200, any::<u16>()), 1..80),
    ) {
        let mut a = FreeBlockAllocator::new(8, 256).expect("valid");
        let mut live: Vec<(usize, u64, u64)> = Vec::new();
        for (is_alloc, size, which) in ops {
            if is_alloc || live.is_empty() {
                let got = a.alloc(size).expect("alloc");
                prop_assert!(got.offset.is_multiple_of(8));
                prop_assert!(got.size >= size);
                for &(c, o, s) in &live {
                    prop_assert!(c != got.chunk || o + s <= got.offset || got.offset + got.size <= o,
                        "{:?} overlaps ({}, {}, {})", got, c, o, s);
                }
                prop_assert!(a.is_oversized(got.chunk) || got.offset + got.size <= 256);
                live.push((got.chunk, got.offset, got.size));
            } else {
                let (c, o, s) = live.swap_remove(usize::from(which) % live.len());
                a.free(c, o, s).expect("free of a live block");
            }
        }
        let allocated: u64 = live.iter().map(|&(_, _, s)| s).sum();
        prop_assert_eq!(a.allocated(), allocated);
    }
}

#[test]
fn random_graphs_exercise_corruption_inplace_views_and_chunks() {
    let (mut corruptible, mut inplace, mut views, mut chunked) = (0, 0, 0, 0);
    for seed in 0..1000u64 {
        let graph = random_graph(seed, MAX_NODES).expect("valid");
        let plan = plan_graph(&graph, &buft(32, 1 << 20)).expect("plans");
        corruptible += usize::from(corruption_candidate(&graph, &plan).is_some());
        inplace += usize::from(!plan.inplace.is_empty());
        views += usize::from(graph.tensors.iter().any(|t| t.is_view()));
        let small = plan_graph(&graph, &buft(32, 64)).expect("plans");
        chunked += usize::from(small.buffers[0].chunks.len() > 1);
    }
    assert!(
        corruptible > 500,
        "only {corruptible} of 1000 graphs could be corrupted"
    );
    assert!(
        inplace > 200,
        "only {inplace} of 1000 plans have an in-place pair"
    );
    assert!(views > 500, "only {views} of 1000 graphs have a view");
    assert!(
        chunked > 500,
        "only {chunked} of 1000 plans open several chunks"
    );
}
