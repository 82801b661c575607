//! The offline planners over several buffers (ggml's `reserve_n` buffer ids) and behind
//! the graph allocator: every tensor lands in its buffer, each buffer honours its own
//! type, repeated types share memory, and bad id lists are typed errors.

use std::path::PathBuf;

use wgalloc_plan::graph::synthetic::{random_graph, transformer};
use wgalloc_plan::graph::{read_trace, Graph, Role};
use wgalloc_plan::plan::offline::{Budget, Strategy};
use wgalloc_plan::plan::{
    graph_leaves, lower_bounds, plan, plan_graph, BufferId, BufferIds, BufferTypeDesc,
    GraphAllocator, Plan, PlanError, PlanOptions, Planner,
};

fn buft(name: &str, alignment: u64, max_size: u64) -> BufferTypeDesc {
    BufferTypeDesc::new(name, alignment, max_size).expect("valid buffer type")
}

/// A deterministic buffer id per position (xorshift), below `count`.
fn ids(len: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % count as u64) as usize
        })
        .collect()
}

/// Random buffer ids below `count` for the graph's nodes (seeded by `node_seed`) and
/// for its leaves (`leaf_seed`).
fn node_and_leaf_ids(
    graph: &Graph,
    count: usize,
    node_seed: u64,
    leaf_seed: u64,
) -> (Vec<usize>, Vec<usize>) {
    (
        ids(graph.nodes.len(), count, node_seed),
        ids(graph_leaves(graph).len(), count, leaf_seed),
    )
}

/// One offline strategy over several buffers (`reserve_n`'s ids), default budgets.
fn plan_n(
    graph: &Graph,
    types: &[BufferTypeDesc],
    nodes: &[usize],
    leaves: &[usize],
    strategy: Strategy,
) -> Result<Plan, PlanError> {
    let ids = BufferIds {
        nodes: nodes.to_vec(),
        leaves: leaves.to_vec(),
    };
    let options = PlanOptions::with_planner(Planner::Offline(strategy)).buffer_ids(ids);
    plan(graph, types, &options)
}

/// [`plan_n`] that must succeed, checked with `Plan::verify`.
fn verified_plan_n(
    graph: &Graph,
    types: &[BufferTypeDesc],
    nodes: &[usize],
    leaves: &[usize],
    strategy: Strategy,
) -> Plan {
    let plan = plan_n(graph, types, nodes, leaves, strategy).expect("plans");
    plan.verify(graph).expect("verifies");
    plan
}

/// The buffer each planned tensor was asked for (a view: its root's).
fn wanted_buffer(graph: &Graph, nodes: &[usize], leaves: &[usize]) -> Vec<Option<usize>> {
    let mut want = vec![None; graph.tensors.len()];
    for (leaf, &b) in graph_leaves(graph).iter().zip(leaves) {
        want[leaf.index()] = Some(b);
    }
    for (node, &b) in graph.nodes.iter().zip(nodes) {
        want[node.output.index()] = Some(b);
    }
    want
}

#[test]
fn every_tensor_lands_in_its_buffer_with_that_buffers_alignment() {
    let types = [
        buft("a", 32, 1 << 30),
        buft("b", 256, 1 << 30),
        buft("c", 4, 1 << 30),
    ];
    for seed in 0..40u64 {
        let graph = random_graph(seed, 40).expect("graph");
        let (nodes, leaves) = node_and_leaf_ids(&graph, types.len(), seed * 7 + 1, seed * 11 + 3);
        let want = wanted_buffer(&graph, &nodes, &leaves);
        for strategy in [Strategy::GreedySize, Strategy::Best] {
            let plan = verified_plan_n(&graph, &types, &nodes, &leaves, strategy);
            for t in &graph.tensors {
                let Some(root) = graph.root_of(t.id) else {
                    continue;
                };
                let (Some(p), Some(b)) = (plan.placement(t.id), want[root.index()]) else {
                    continue;
                };
                assert_eq!(p.buffer, BufferId(b), "seed {seed}: {} in buffer", t.name);
                assert!(
                    p.offset.is_multiple_of(types[b].alignment()),
                    "seed {seed}: {} offset {} not aligned to {}",
                    t.name,
                    p.offset,
                    types[b].alignment()
                );
            }
        }
    }
}

#[test]
fn in_place_outputs_stay_within_one_buffer() {
    let graph = transformer(120).expect("graph");
    let types = [buft("a", 32, 1 << 30), buft("b", 64, 1 << 30)];
    let (nodes, leaves) = node_and_leaf_ids(&graph, 2, 5, 9);
    let plan = verified_plan_n(&graph, &types, &nodes, &leaves, Strategy::Best);
    for &(out, input) in &plan.inplace {
        let (o, i) = (plan.placement(out), plan.placement(input));
        assert_eq!(
            o.map(|p| p.buffer),
            i.map(|p| p.buffer),
            "{out} over {input}"
        );
    }
}

#[test]
fn a_repeated_buffer_type_shares_the_first_buffers_memory() {
    let graph = transformer(60).expect("graph");
    let gpu = buft("gpu", 32, 1 << 30);
    let types = [gpu.clone(), gpu.clone()];
    let (nodes, leaves) = node_and_leaf_ids(&graph, 2, 3, 4);
    let shared = verified_plan_n(&graph, &types, &nodes, &leaves, Strategy::Best);
    assert_eq!(shared.buffers[1].same_as, Some(BufferId(0)));
    assert!(shared.buffers[1].chunks.is_empty());
    assert!(shared
        .placements
        .iter()
        .flatten()
        .all(|p| p.buffer == BufferId(0)));
    // Sharing one memory is the single-buffer plan.
    let single = plan_n(
        &graph,
        &types[..1],
        &vec![0; nodes.len()],
        &vec![0; leaves.len()],
        Strategy::Best,
    )
    .expect("plans");
    assert_eq!(shared.total_size(), single.total_size());
}

#[test]
fn each_buffer_is_chunked_by_its_own_max_size() {
    let graph = transformer(80).expect("graph");
    let largest = graph
        .tensors
        .iter()
        .filter(|t| t.role != Role::Weight)
        .map(|t| t.size)
        .max()
        .expect("tensors");
    let small = largest.div_ceil(32) * 32; // one tensor per chunk at most
    let types = [buft("small", 32, small), buft("big", 32, 1 << 30)];
    let (nodes, leaves) = node_and_leaf_ids(&graph, 2, 21, 22);
    let plan = verified_plan_n(&graph, &types, &nodes, &leaves, Strategy::Best);
    assert!(plan.buffers[0].chunks.iter().all(|c| c.size <= small));
    assert!(
        plan.buffers[0].chunks.len() > 1,
        "the small buffer needs chunks"
    );
    assert_eq!(plan.buffers[1].chunks.len(), 1);
}

#[test]
fn wrong_id_lists_are_typed_errors() {
    let graph = transformer(10).expect("graph");
    let types = [buft("a", 32, 1 << 30)];
    let leaves = vec![0; graph_leaves(&graph).len()];
    let nodes = vec![0; graph.nodes.len()];
    let short = &nodes[1..];
    assert!(matches!(
        plan_n(&graph, &types, short, &leaves, Strategy::Best),
        Err(PlanError::BufferIdCount {
            what: "node_buffer_ids",
            ..
        })
    ));
    let mut past = nodes.clone();
    past[0] = 1;
    assert!(matches!(
        plan_n(&graph, &types, &past, &leaves, Strategy::Best),
        Err(PlanError::UnknownBuffer {
            buffer: 1,
            count: 1
        })
    ));
    assert!(matches!(
        plan_n(&graph, &[], &nodes, &leaves, Strategy::Best),
        Err(PlanError::UnknownBuffer { .. })
    ));
}

#[test]
fn graph_allocator_with_an_offline_strategy_reserves_at_the_bound_and_reuses() {
    let path =
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("traces/resnet50.json");
    let graph = read_trace(&path).expect("trace");
    let storage = buft("gpu", 1, 1 << 40);
    let mut galloc =
        GraphAllocator::with_strategy(vec![storage.clone()], Strategy::Best, Budget::default());
    assert_eq!(galloc.planner_name(), "best");
    let plan = galloc.alloc_graph(&graph).expect("plans");
    plan.verify(&graph).expect("verifies");
    let bound = lower_bounds(&graph).expect("bounds").inplace_aware;
    let ggml = plan_graph(&graph, &storage).expect("ggml").total_size();
    assert_eq!(galloc.buffer_size(0).expect("size"), bound);
    assert!(bound < ggml, "resnet50: the offline plan beats ggml's walk");
    assert!(!galloc.needs_realloc(&graph));
    let again = galloc.alloc_graph(&graph).expect("reuses");
    assert_eq!(again.placements, plan.placements);
    assert_eq!(again.planner, "best");
}

#[test]
fn graph_allocator_reserve_n_with_an_offline_strategy_keeps_buffer_ids() {
    let graph = transformer(50).expect("graph");
    let types = vec![buft("a", 32, 1 << 30), buft("b", 128, 1 << 30)];
    let (nodes, leaves) = node_and_leaf_ids(&graph, 2, 77, 78);
    let mut galloc =
        GraphAllocator::with_strategy(types.clone(), Strategy::GreedySize, Budget::default());
    galloc.reserve_n(&graph, &nodes, &leaves).expect("reserves");
    let plan = galloc.alloc_graph(&graph).expect("allocates");
    plan.verify(&graph).expect("verifies");
    let want = wanted_buffer(&graph, &nodes, &leaves);
    for (t, p) in plan.placements.iter().enumerate() {
        if let (Some(p), Some(b)) = (p, want[t]) {
            assert_eq!(p.buffer, BufferId(b));
        }
    }
    for b in 0..2 {
        let reserved: u64 = plan.buffers[b].chunks.iter().map(|c| c.size).sum();
        assert_eq!(galloc.buffer_size(b).expect("size"), reserved);
    }
}
