//! Scenario tests of the ggml-semantics planner: one behaviour per test, on small
//! hand-built graphs and on the shared traces.

use std::path::PathBuf;

use wgalloc_plan::graph::{read_trace, DType, Graph, GraphBuilder, TensorId};
use wgalloc_plan::plan::{
    graph_leaves, lower_bounds, naive_size, plan_graph, BufferTypeDesc, GraphAllocator, Placement,
    PlanError,
};

fn buft(name: &str, alignment: u64, max_size: u64) -> BufferTypeDesc {
    BufferTypeDesc::new(name, alignment, max_size).expect("valid buffer type")
}

fn trace(name: &str) -> Graph {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("traces")
        .join(format!("{name}.json"));
    read_trace(&path).expect("trace imports")
}

const TRACES: [(&str, u64, u64); 5] = [
    ("bert_base_seq128", 3_539_072, 2_359_424),
    ("efficientnet_b0", 9_633_792, 9_633_792),
    ("gpt2_seq256", 52_249_600, 52_249_600),
    ("mobilenet_v2", 9_633_792, 9_633_792),
    ("resnet50", 9_633_792, 9_633_792),
];

#[test]
fn lower_bounds_match_the_format_reference_table() {
    for (name, strict, inplace_aware) in TRACES {
        let bounds = lower_bounds(&trace(name)).expect("bounds");
        assert_eq!(bounds.strict, strict, "{name} strict");
        assert_eq!(bounds.inplace_aware, inplace_aware, "{name} in-place-aware");
    }
}

#[test]
fn every_trace_plans_verifies_and_stays_between_bound_and_naive() {
    for (name, _, _) in TRACES {
        let graph = trace(name);
        let bounds = lower_bounds(&graph).expect("bounds");
        let naive = naive_size(&graph);
        for alignment in [1, 32] {
            let plan = plan_graph(&graph, &buft("storage", alignment, 1 << 31)).expect("plan");
            plan.verify(&graph).expect("verifies");
            let total = plan.total_size();
            eprintln!(
                "{name:18} align {alignment:2}: ggml {total:>11} strict {:>11} in-place-aware {:>11} naive {naive:>11}",
                bounds.strict, bounds.inplace_aware
            );
            assert!(
                total >= bounds.inplace_aware,
                "{name}: {total} below the bound"
            );
            assert!(total < naive, "{name}: {total} reuses nothing");
        }
    }
}

/// x -> a -> b -> c with sizes in bytes (f32 lengths), none in place.
fn chain_of(lens: &[u64]) -> (Graph, Vec<TensorId>) {
    let mut b = GraphBuilder::new("chain");
    let mut ids = vec![b.input("x", DType::F32, &[lens[0]])];
    for &len in &lens[1..] {
        let last = *ids.last().expect("non-empty");
        ids.push(b.node("map", &[last], &[len], false));
    }
    let last = *ids.last().expect("non-empty");
    b.mark_output(last);
    (b.build().expect("valid"), ids)
}

#[test]
fn more_tensors_than_one_chunk_holds_open_a_second_chunk() {
    // Each of x and a is 60 bytes; both are live at step 0 and the max size is 100.
    let (g, ids) = chain_of(&[15, 15]);
    let plan = plan_graph(&g, &buft("small", 4, 100)).expect("plan");
    plan.verify(&g).expect("verifies");
    assert_eq!(plan.buffers[0].chunks.len(), 2);
    assert_eq!(plan.placement(ids[0]).map(|p| p.chunk), Some(0));
    assert_eq!(plan.placement(ids[1]).map(|p| p.chunk), Some(1));
    assert!(plan.buffers[0]
        .chunks
        .iter()
        .all(|c| c.size <= 100 && !c.oversized));
}

#[test]
fn tensor_larger_than_max_size_gets_an_oversized_chunk() {
    let (g, ids) = chain_of(&[4, 100, 4]);
    let plan = plan_graph(&g, &buft("small", 4, 64)).expect("plan");
    plan.verify(&g).expect("verifies");
    let big = plan.placement(ids[1]).expect("placed");
    let chunk = plan.buffers[0].chunks[big.chunk];
    assert!(chunk.oversized);
    assert_eq!((big.offset, chunk.size), (0, 400));
    assert_ne!(plan.placement(ids[2]).map(|p| p.chunk), Some(big.chunk));
}

#[test]
fn freed_hole_is_preferred_to_exact_fit_tail() {
    // Offsets (alignment 4): x [0,4) h [4,8) a [8,72) k [72,76) c [76,108).
    // Step 4 frees a (a 64-byte hole), step 5 frees c (back to the tail, leaving exactly
    // 32 bytes below the high-water mark); f (32 B) then takes the hole.
    let mut b = GraphBuilder::new("hole");
    let x = b.input("x", DType::F32, &[1]);
    let h = b.node("h", &[x], &[1], false);
    let a = b.node("a", &[x], &[16], false);
    let k = b.node("k", &[x], &[1], false);
    b.mark_output(k);
    let c = b.node("c", &[x], &[8], false);
    let d = b.node("relu", &[h, a], &[1], true); // in place over h; a dies
    let e = b.node("relu", &[d, c], &[1], true); // in place over d; c dies
    let f = b.node("f", &[e, k], &[8], false);
    b.mark_output(f);
    let g = b.build().expect("valid");
    let plan = plan_graph(&g, &buft("t", 4, 1 << 20)).expect("plan");
    plan.verify(&g).expect("verifies");
    let at = |t: TensorId| plan.placement(t).map(|p| p.offset).expect("placed");
    assert_eq!([x, h, a, k, c].map(at), [0, 4, 8, 72, 76]);
    assert_eq!(plan.inplace, vec![(d, h), (e, d)]);
    assert_eq!(
        at(f),
        8,
        "f goes into the freed hole, not the exact-fit tail at 76"
    );
    assert_eq!(plan.total_size(), 108);
}

#[test]
fn neighbouring_freed_tensors_merge_into_one_reused_block() {
    let mut b = GraphBuilder::new("merge");
    let x = b.input("x", DType::F32, &[1]);
    let p = b.node("p", &[x], &[8], false); // 32 B
    let q = b.node("q", &[x], &[8], false); // 32 B, right after p
    let keep = b.node("keep", &[x], &[1], false); // pins the top
    let s = b.node("s", &[p, q], &[1], false); // p and q die here
    let big = b.node("big", &[s, keep], &[16], false); // 64 B fits the merged block
    b.mark_output(big);
    let g = b.build().expect("valid");
    let plan = plan_graph(&g, &buft("t", 4, 1 << 20)).expect("plan");
    plan.verify(&g).expect("verifies");
    let at = |t: TensorId| plan.placement(t).map(|p| p.offset).expect("placed");
    assert_eq!(
        at(big),
        at(p),
        "the two 32-byte blocks merged into one 64-byte block"
    );
    assert_eq!(at(q), at(p) + 32);
}

#[test]
fn inplace_node_reuses_its_dying_input() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, &[16]);
    let a = b.node("neg", &[x], &[16], false);
    let r = b.node("relu", &[a], &[16], true);
    b.mark_output(r);
    let g = b.build().expect("valid");
    let plan = plan_graph(&g, &buft("t", 32, 1 << 20)).expect("plan");
    assert_eq!(plan.inplace, vec![(r, a)]);
    assert_eq!(plan.placement(r), plan.placement(a));
    plan.verify(&g).expect("verifies");
}

#[test]
fn inplace_never_over_a_view_an_output_or_an_input_still_read_later() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, &[16]);
    let a = b.node("neg", &[x], &[16], false);
    let v = b.view("v", a, &[4, 4]);
    let over_view = b.node("relu", &[v], &[4, 4], true); // a dies here, but via a view
    let o = b.node("neg", &[over_view], &[16], false);
    b.mark_output(o);
    let over_output = b.node("relu", &[o], &[16], true); // o is an output
    let read_later = b.node("relu", &[over_output], &[16], true); // still read below
    let last = b.node("add", &[read_later, over_output], &[16], false);
    b.mark_output(last);
    let g = b.build().expect("valid");
    let plan = plan_graph(&g, &buft("t", 32, 1 << 20)).expect("plan");
    plan.verify(&g).expect("verifies");
    assert!(plan.inplace.is_empty(), "{:?}", plan.inplace);
    for (t, u) in [(over_view, a), (over_output, o), (read_later, over_output)] {
        assert_ne!(plan.placement(t), plan.placement(u), "{t} over {u}");
    }
}

#[test]
fn two_buffer_types_with_per_node_and_per_leaf_ids() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, &[8]);
    let y = b.input("y", DType::F32, &[8]);
    let a = b.node("add", &[x, y], &[8], false);
    let c = b.node("neg", &[a], &[8], true);
    let d = b.node("mul", &[c, x], &[8], false);
    b.mark_output(d);
    let g = b.build().expect("valid");
    assert_eq!(graph_leaves(&g), vec![x, y]);
    let mut galloc = GraphAllocator::new(vec![buft("gpu", 32, 1 << 20), buft("cpu", 16, 1 << 20)]);
    galloc.reserve_n(&g, &[1, 1, 0], &[0, 1]).expect("reserve");
    let plan = galloc.alloc_graph(&g).expect("alloc");
    plan.verify(&g).expect("verifies");
    let buffer = |t: TensorId| plan.placement(t).map(|p| p.buffer.0);
    assert_eq!(
        [x, y, a, c, d].map(buffer),
        [Some(0), Some(1), Some(1), Some(1), Some(0)]
    );
    assert_eq!(plan.inplace, vec![(c, a)], "same buffer, dying input");
    assert_eq!(galloc.buffer_size(0), Ok(64));
    // y [0,32) dies at step 0; a [32,64) stays above the hole; c replaces a.
    assert_eq!(galloc.buffer_size(1), Ok(64));
    assert_eq!(plan.total_size(), 128);
}

#[test]
fn buffer_repeating_an_earlier_buffer_type_reports_size_zero() {
    let (g, ids) = chain_of(&[8, 8, 8]);
    let gpu = buft("gpu", 32, 1 << 20);
    let mut galloc = GraphAllocator::new(vec![gpu.clone(), buft("cpu", 16, 1 << 20), gpu]);
    galloc.reserve_n(&g, &[2, 2], &[0]).expect("reserve");
    assert!(galloc.buffer_size(0).expect("size") > 0);
    assert_eq!(galloc.buffer_size(1), Ok(0), "nothing placed there");
    assert_eq!(galloc.buffer_size(2), Ok(0), "repeats buffer 0");
    let plan = galloc.alloc_graph(&g).expect("alloc");
    plan.verify(&g).expect("verifies");
    assert!(ids
        .iter()
        .all(|&t| plan.placement(t).map(|p| p.buffer.0) == Some(0)));
    assert_eq!(plan.buffers[2].same_as.map(|b| b.0), Some(0));
    assert_eq!(plan.total_size(), galloc.buffer_size(0).expect("size"));
}

fn small_graph(op: &str, len: u64, swap: bool) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, &[len]);
    let y = b.input("y", DType::F32, &[len]);
    let inputs = if swap { [y, x] } else { [x, y] };
    let a = b.node(op, &inputs, &[len], false);
    let c = b.node("neg", &[a], &[len], false);
    b.mark_output(c);
    b.build().expect("valid")
}

#[test]
fn changed_graph_triggers_replanning_and_same_shape_does_not() {
    let base = small_graph("add", 16, false);
    let mut galloc = GraphAllocator::new(vec![buft("gpu", 32, 1 << 20)]);
    galloc.reserve(&base).expect("reserve");
    assert!(!galloc.needs_realloc(&base));
    assert!(
        !galloc.needs_realloc(&small_graph("add", 16, false)),
        "same shape"
    );
    assert!(
        !galloc.needs_realloc(&small_graph("add", 8, false)),
        "smaller fits"
    );
    assert!(
        galloc.needs_realloc(&small_graph("mul", 16, false)),
        "op changed"
    );
    assert!(
        galloc.needs_realloc(&small_graph("add", 16, true)),
        "inputs changed"
    );
    assert!(
        galloc.needs_realloc(&small_graph("add", 64, false)),
        "tensor grew"
    );
    let (chain, _) = chain_of(&[16, 16]);
    assert!(galloc.needs_realloc(&chain), "node and leaf counts changed");

    // One buffer: alloc_graph re-plans by itself and sizes grow.
    let before = galloc.buffer_size(0).expect("size");
    let grown = small_graph("add", 64, false);
    let plan = galloc.alloc_graph(&grown).expect("alloc");
    plan.verify(&grown).expect("verifies");
    assert!(galloc.buffer_size(0).expect("size") > before);
    assert!(!galloc.needs_realloc(&grown));
}

#[test]
fn alloc_graph_with_several_buffers_needs_reserve() {
    let g = small_graph("add", 16, false);
    let mut galloc = GraphAllocator::new(vec![buft("gpu", 32, 1 << 20), buft("cpu", 16, 1 << 20)]);
    assert_eq!(
        galloc.alloc_graph(&g),
        Err(PlanError::NeedsReserve { buffers: 2 })
    );
    galloc.reserve_n(&g, &[0, 1], &[0, 0]).expect("reserve");
    galloc
        .alloc_graph(&g)
        .expect("reserved")
        .verify(&g)
        .expect("verifies");
    let grown = small_graph("add", 64, false);
    assert_eq!(
        galloc.alloc_graph(&grown),
        Err(PlanError::NeedsReserve { buffers: 2 })
    );
}

#[test]
fn reserve_n_rejects_wrong_id_counts_and_unknown_buffers() {
    let g = small_graph("add", 16, false);
    let mut galloc = GraphAllocator::new(vec![buft("gpu", 32, 1 << 20)]);
    assert_eq!(
        galloc.reserve_n(&g, &[0], &[0, 0]),
        Err(PlanError::BufferIdCount {
            what: "node_buffer_ids",
            got: 1,
            expected: 2
        })
    );
    assert_eq!(
        galloc.reserve_n(&g, &[0, 0], &[0]),
        Err(PlanError::BufferIdCount {
            what: "leaf_buffer_ids",
            got: 1,
            expected: 2
        })
    );
    assert_eq!(
        galloc.reserve_n(&g, &[0, 3], &[0, 0]),
        Err(PlanError::UnknownBuffer {
            buffer: 3,
            count: 1
        })
    );
}

#[test]
fn verify_rejects_misaligned_out_of_chunk_and_illegal_inplace_plans() {
    let (g, ids) = chain_of(&[8, 8, 8]);
    let good = plan_graph(&g, &buft("t", 32, 1 << 20)).expect("plan");
    good.verify(&g).expect("verifies");
    let moved = |f: &dyn Fn(&mut Placement)| {
        let mut p = good.clone();
        if let Some(Some(pl)) = p.placements.get_mut(ids[1].index()) {
            f(pl);
        }
        p
    };
    assert!(matches!(
        moved(&|p| p.offset += 4).verify(&g),
        Err(PlanError::Misaligned { alignment: 32, .. })
    ));
    assert!(matches!(
        moved(&|p| p.offset += 1 << 10).verify(&g),
        Err(PlanError::OutOfBounds { .. })
    ));
    assert!(matches!(
        moved(&|p| p.size = 4).verify(&g),
        Err(PlanError::OutOfBounds { .. })
    ));
    let mut claim = good.clone();
    claim.inplace.push((ids[2], ids[1]));
    assert!(matches!(
        claim.verify(&g),
        Err(PlanError::BadInplace { .. })
    ));
    let mut big = good.clone();
    big.buffers[0].chunks[0].size = 2 << 20;
    assert!(matches!(
        big.verify(&g),
        Err(PlanError::ChunkTooLarge { .. })
    ));
    let mut short = good.clone();
    short.placements.pop();
    assert!(matches!(
        short.verify(&g),
        Err(PlanError::WrongGraph { .. })
    ));
}

#[test]
fn verify_names_both_tensors_of_an_overlap() {
    let (g, ids) = chain_of(&[8, 8, 8]);
    let mut plan = plan_graph(&g, &buft("t", 32, 1 << 20)).expect("plan");
    // ids[0] and ids[1] are both live at step 0.
    let target = plan.placement(ids[0]);
    plan.placements[ids[1].index()] = target;
    match plan.verify(&g) {
        Err(PlanError::Overlap {
            first,
            second,
            step: 0,
            ..
        }) => {
            let mut pair = [first, second];
            pair.sort();
            assert_eq!(pair, [ids[0], ids[1]]);
        }
        other => panic!("expected an overlap, got {other:?}"),
    }
}

#[test]
fn weights_are_not_planned_and_views_share_their_root() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, &[8]);
    let w = b.weight("w", DType::F32, &[8]);
    let a = b.node("mul", &[x, w], &[8], false);
    let v = b.view("v", a, &[2, 4]);
    let c = b.node("neg", &[v], &[2, 4], false);
    b.mark_output(c);
    let g = b.build().expect("valid");
    let plan = plan_graph(&g, &buft("t", 32, 1 << 20)).expect("plan");
    assert_eq!(plan.placement(w), None);
    assert_eq!(plan.placement(v), plan.placement(a));
    plan.verify(&g).expect("verifies");
}

#[test]
fn invalid_graph_is_an_error_not_a_panic() {
    let mut b = GraphBuilder::new("bad");
    let x = b.input("x", DType::F32, &[8]);
    b.push_node("neg", &[TensorId(7)], x, false, &[]);
    let g = b.graph().clone();
    assert!(matches!(
        plan_graph(&g, &buft("t", 32, 1 << 20)),
        Err(PlanError::InvalidGraph(_))
    ));
    assert!(matches!(lower_bounds(&g), Err(PlanError::InvalidGraph(_))));
    let mut galloc = GraphAllocator::new(vec![buft("t", 32, 1 << 20)]);
    assert!(matches!(
        galloc.alloc_graph(&g),
        Err(PlanError::InvalidGraph(_))
    ));
}
