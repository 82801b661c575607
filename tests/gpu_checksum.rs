//! The GPU alias proof end to end on a real adapter: plans made by the real planners
//! (ggml and the offline `best`) of every shared trace verify with zero mismatches while
//! really reusing memory; a corrupted plan is caught and the clobbered tensor and the
//! node that saw it are named.
//!
//! One checksum run per plan (the traces are hundreds of MB on a software adapter).
//! No adapter: each test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;

use std::path::{Path, PathBuf};

use wgalloc::device::{
    allocate_plan, read_buffer_range, write_buffer, GpuContext, PlannedMemory, WgpuStorage,
    STORAGE_USAGE,
};
use wgalloc::exec::checksum::{prove, ChecksumReport};
use wgalloc::graph::{read_trace, DType, Graph, GraphBuilder, Lifetimes, NodeId, TensorId};
use wgalloc::plan::{inject_clobber, naive_plan, plant_clobber, BufferTypeDesc, Plan, Planner};
use wgalloc::storage::Region;

/// Every trace under `traces/`; `every_shared_trace_is_proved_here` keeps it complete.
const TRACES: &[&str] = &[
    "mobilenet_v2",
    "efficientnet_b0",
    "resnet50",
    "bert_base_seq128",
    "gpt2_seq256",
];

fn run(ctx: &GpuContext, graph: &Graph, plan: &Plan) -> ChecksumReport {
    let memory =
        allocate_plan(ctx, plan, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("buffers");
    prove(ctx, graph, plan, &memory).expect("checksum run")
}

fn storage(ctx: &GpuContext) -> BufferTypeDesc {
    ctx.buffer_types().expect("buffer types").storage.desc
}

fn naive(ctx: &GpuContext, graph: &Graph) -> Plan {
    naive_plan(graph, &storage(ctx)).expect("plan")
}

/// x -> a = relu(x) (in place) -> b = neg(a) -> c = add(a, b) -> d = mul(c, w).
fn small_graph() -> (Graph, [TensorId; 4]) {
    let mut g = GraphBuilder::new("small");
    let x = g.input("x", DType::F32, &[1000]);
    let w = g.weight("w", DType::F32, &[1000]);
    let a = g.node("relu", &[x], &[1000], true);
    let b = g.node("neg", &[a], &[1000], false);
    let c = g.node("add", &[a, b], &[1000], true);
    let d = g.node("mul", &[c, w], &[1000], true);
    g.mark_output(d);
    (g.build().expect("valid graph"), [a, b, c, d])
}

#[test]
fn honest_naive_plan_of_a_small_graph_verifies() {
    let Some(ctx) = common::gpu() else { return };
    let (graph, _) = small_graph();
    let report = run(&ctx, &graph, &naive(&ctx, &graph));
    assert!(report.verified(), "{report}");
    assert_eq!(report.nodes, 4);
    // x, a, b, c read by nodes, d checked at the end.
    assert_eq!(report.tensors, 5);
    assert_eq!(
        report.to_string(),
        "verified: 4 nodes, 5 tensors, 0 mismatches"
    );
}

#[test]
fn chunks_that_are_ranges_of_a_larger_buffer_are_proved_in_place() {
    let Some(ctx) = common::gpu() else { return };
    let (graph, _) = small_graph();
    let plan = naive(&ctx, &graph);
    // Every chunk is a range of one pool, after a 256-byte guard; the guard and the
    // bytes after the last chunk must come out untouched.
    let guard = 256u64;
    let sizes: Vec<u64> = plan.buffers[0]
        .chunks
        .iter()
        .map(|c| c.size.div_ceil(256) * 256)
        .collect();
    let end = guard + sizes.iter().sum::<u64>();
    let pool_size = end + guard;
    let pool = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("pool"),
        size: pool_size,
        usage: STORAGE_USAGE,
        mapped_at_creation: false,
    });
    let mut offset = guard;
    let regions: Vec<Region> = sizes
        .iter()
        .map(|&size| {
            let region = Region {
                buffer: pool.clone(),
                offset,
                size,
            };
            offset += size;
            region
        })
        .collect();
    write_buffer(&ctx, &pool, 0, &vec![0xAB; pool_size as usize]).expect("guard written");
    let memory = PlannedMemory::from_regions(vec![regions]);
    let report = prove(&ctx, &graph, &plan, &memory).expect("checksum run");
    assert!(report.verified(), "{report}");
    let before = read_buffer_range(&ctx, &pool, 0, guard).expect("reads");
    let after = read_buffer_range(&ctx, &pool, end, guard).expect("reads");
    assert!(
        before.iter().chain(&after).all(|&b| b == 0xAB),
        "a guard was written"
    );
}

#[test]
fn legal_inplace_reuse_verifies() {
    let Some(ctx) = common::gpu() else { return };
    let (graph, [_, _, c, d]) = small_graph();
    let mut plan = naive(&ctx, &graph);
    // d = mul(c, w) is elementwise and c dies there: d may live in c's memory.
    plan.placements[d.index()] = plan.placements[c.index()];
    plan.inplace.push((d, c));
    let report = run(&ctx, &graph, &plan);
    assert!(report.verified(), "{report}");
}

#[test]
fn tensor_moved_over_a_live_tensor_is_named_with_the_node_that_saw_it() {
    let Some(ctx) = common::gpu() else { return };
    let (graph, [a, b, _, _]) = small_graph();
    let mut plan = naive(&ctx, &graph);
    // b is written at node 1 while a is still live (read again by node 2).
    plan.placements[b.index()] = plan.placements[a.index()];
    let report = run(&ctx, &graph, &plan);
    assert!(!report.verified(), "corruption not detected: {report}");
    let first = report.first().expect("a mismatch record");
    assert_eq!(first.tensor, a);
    assert_eq!(first.tensor_name, "relu_0");
    assert_eq!(first.node, Some(NodeId(2)));
    assert!(report.to_string().contains("relu_0"), "{report}");
}

#[test]
fn output_clobbered_after_its_last_reader_is_caught_by_the_final_check() {
    let Some(ctx) = common::gpu() else { return };
    let mut g = GraphBuilder::new("late");
    let x = g.input("x", DType::F32, &[64]);
    let y = g.node("relu", &[x], &[64], false);
    g.mark_output(y);
    let z = g.node("neg", &[x], &[64], false);
    g.mark_output(z);
    let graph = g.build().expect("valid graph");
    let mut plan = naive(&ctx, &graph);
    plan.placements[z.index()] = plan.placements[y.index()];
    let report = run(&ctx, &graph, &plan);
    let first = report.first().expect("a mismatch record");
    assert_eq!(first.tensor, y);
    assert_eq!(first.node, None);
}

#[test]
fn view_nodes_write_nothing_and_views_read_their_root() {
    let Some(ctx) = common::gpu() else { return };
    let mut g = GraphBuilder::new("views");
    let x = g.input("x", DType::F32, &[8, 8]);
    let p = g.node("split", &[x], &[2, 8, 8], false);
    let v0 = g.view("v0", p, &[8, 8]);
    g.push_node("getitem", &[p], v0, false, &[]);
    let e = g.view("e", v0, &[4, 8, 8]);
    g.push_node("expand", &[v0], e, false, &[]);
    let y = g.node("add", &[e, x], &[4, 8, 8], false);
    g.mark_output(y);
    let graph = g.build().expect("valid graph");
    let report = run(&ctx, &graph, &naive(&ctx, &graph));
    assert!(report.verified(), "{report}");
}

#[test]
fn odd_sized_tensors_are_checked_over_whole_words() {
    let Some(ctx) = common::gpu() else { return };
    let mut g = GraphBuilder::new("bytes");
    let x = g.input("x", DType::U8, &[7]);
    let y = g.node("cast", &[x], &[3], false);
    g.mark_output(y);
    let graph = g.build().expect("valid graph");
    let report = run(&ctx, &graph, &naive(&ctx, &graph));
    assert!(report.verified(), "{report}");
}

fn traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("traces")
}

fn trace(name: &str) -> Graph {
    read_trace(&traces_dir().join(format!("{name}.json"))).expect("trace")
}

#[test]
fn every_shared_trace_is_proved_here() {
    let mut on_disk: Vec<String> = std::fs::read_dir(traces_dir())
        .expect("traces/ exists")
        .filter_map(|entry| {
            let path = entry.expect("directory entry").path();
            (path.extension()? == "json").then(|| path.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = TRACES.iter().map(|s| (*s).to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "TRACES must list every traces/*.json");
}

/// Plans the trace with a real planner, checks that the plan reuses memory (smaller
/// than one buffer per tensor) and proves it on the GPU: zero mismatches.
fn real_plan_of_trace_verifies(name: &str, planner: &str) {
    let Some(ctx) = common::gpu() else { return };
    let graph = trace(name);
    let storage = storage(&ctx);
    let plan = Planner::from_name(planner)
        .expect("known planner")
        .plan_graph(&graph, &storage)
        .expect("plan");
    let naive_size = naive_plan(&graph, &storage)
        .expect("naive plan")
        .total_size();
    assert!(
        plan.total_size() < naive_size,
        "{name}/{planner}: {} bytes is no reuse (naive {naive_size})",
        plan.total_size()
    );
    let report = run(&ctx, &graph, &plan);
    assert!(report.verified(), "{name}/{planner}: {report}");
    assert_eq!(report.nodes, graph.nodes.len());
    assert_eq!(report.mismatches, 0);
    println!(
        "{name}/{planner}: {} of {naive_size} bytes; {report} ({} dispatches)",
        plan.total_size(),
        report.dispatches
    );
}

macro_rules! real_plan_tests {
    ($($trace:ident: $ggml:ident, $best:ident;)*) => {$(
        #[test]
        fn $ggml() {
            real_plan_of_trace_verifies(stringify!($trace), "ggml");
        }

        #[test]
        fn $best() {
            real_plan_of_trace_verifies(stringify!($trace), "best");
        }
    )*};
}

real_plan_tests! {
    mobilenet_v2: ggml_plan_of_mobilenet_v2_verifies, best_plan_of_mobilenet_v2_verifies;
    efficientnet_b0: ggml_plan_of_efficientnet_b0_verifies, best_plan_of_efficientnet_b0_verifies;
    resnet50: ggml_plan_of_resnet50_verifies, best_plan_of_resnet50_verifies;
    bert_base_seq128: ggml_plan_of_bert_base_seq128_verifies, best_plan_of_bert_base_seq128_verifies;
    gpt2_seq256: ggml_plan_of_gpt2_seq256_verifies, best_plan_of_gpt2_seq256_verifies;
}

/// Corrupts the ggml plan of a real network with `inject_clobber` (the intruder is
/// written over the victim while the victim is still live): the proof names the victim
/// and the first node that reads it after the intruder's producer.
#[test]
fn clobber_injected_into_a_ggml_plan_of_a_trace_names_the_victim_and_the_node() {
    let Some(ctx) = common::gpu() else { return };
    let graph = trace("mobilenet_v2");
    let mut plan = Planner::Ggml
        .plan_graph(&graph, &storage(&ctx))
        .expect("plan");
    let clobber = inject_clobber(&mut plan, &graph).expect("mobilenet has a pair to clobber");
    let lifetimes = Lifetimes::of(&graph);
    let written = lifetimes.by_tensor[clobber.intruder.index()]
        .expect("intruder is planned")
        .first as usize;
    let reader = graph
        .nodes
        .iter()
        .enumerate()
        .skip(written + 1)
        .find(|(_, n)| {
            n.inputs
                .iter()
                .any(|&i| graph.root_of(i) == Some(clobber.victim))
        })
        .map(|(step, _)| NodeId(step as u32));
    let report = run(&ctx, &graph, &plan);
    assert!(!report.verified(), "clobber not detected: {report}");
    let first = report.first().expect("a mismatch record");
    assert_eq!(first.tensor, clobber.victim, "{report}");
    assert_eq!(first.node, reader, "{report}");
    let victim_name = &graph.tensors[clobber.victim.index()].name;
    assert_eq!(&first.tensor_name, victim_name);
    assert!(
        report.to_string().contains(victim_name.as_str()),
        "{report}"
    );
    println!("{clobber:?}: {report}");
}

/// The fused decoder leaves `inject_clobber` no pair (every tensor written while
/// another is live touches it in the same node, or differs in size), so a pair is
/// planted: layer 0's QKV projection is placed over the residual stream it is computed
/// beside, which the attention's output projection reads later. The proof, run with
/// the fused kernels, names the residual stream.
#[test]
fn a_clobber_planted_in_the_fused_decoder_is_caught_by_the_proof() {
    let Some(ctx) = common::gpu() else { return };
    let config = common::tiny_model(2);
    assert!(
        wgalloc::model::fused_layers(&config),
        "the tiny model is fused"
    );
    let model = wgalloc::model::build_gpt(&config).expect("model");
    let graph = &model.graph;
    let mut plan = wgalloc::plan(graph, &[storage(&ctx)], &Default::default()).expect("plan");
    assert_eq!(
        inject_clobber(&mut plan.clone(), graph),
        None,
        "the fused decoder has no pair for inject_clobber (if it has one now, this test \
         and the CLI's refusal need another look)"
    );
    let named = |name: &str| {
        graph
            .tensors
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.id)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    };
    let (victim, intruder) = (named("embed"), named("h0.qkv"));
    plant_clobber(&mut plan, victim, intruder).expect("both are placed");
    assert!(plan.verify(graph).is_err(), "the CPU verifier sees it too");
    let report = run(&ctx, graph, &plan);
    assert!(!report.verified(), "clobber not detected: {report}");
    assert!(
        report.first_mismatches.iter().any(|m| m.tensor == victim),
        "the residual stream is named: {report}"
    );
}
