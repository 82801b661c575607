//! The GPU alias proof end to end on a real adapter: honest plans verify with zero
//! mismatches, a corrupted plan is caught and the clobbered tensor and the node that
//! saw it are named.
//!
//! No adapter: each test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

use std::path::Path;
use std::sync::OnceLock;

use wgalloc::device::GpuContext;
use wgalloc::exec::checksum::{
    checksum_run, create_plan_buffers, storage_buffer_type, ChecksumReport,
};
use wgalloc::graph::{read_trace, DType, Graph, GraphBuilder, Lifetimes, NodeId, TensorId};
use wgalloc::plan::{naive_plan, Plan};

fn gpu() -> Option<&'static GpuContext> {
    static CTX: OnceLock<Option<GpuContext>> = OnceLock::new();
    let ctx = CTX.get_or_init(|| match GpuContext::from_env() {
        Ok(ctx) => Some(ctx),
        Err(error) => {
            if std::env::var("WGALLOC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("WGALLOC_REQUIRE_GPU=1 but no adapter: {error}");
            }
            None
        }
    });
    if ctx.is_none() {
        println!("SKIPPED: no wgpu adapter");
    }
    ctx.as_ref()
}

fn run(ctx: &GpuContext, graph: &Graph, plan: &Plan) -> ChecksumReport {
    let memory = create_plan_buffers(ctx, plan).expect("buffers");
    checksum_run(ctx, graph, plan, &memory).expect("checksum run")
}

fn naive(ctx: &GpuContext, graph: &Graph) -> Plan {
    naive_plan(
        graph,
        &storage_buffer_type(&ctx.limits).expect("buffer type"),
    )
    .expect("plan")
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
    let Some(ctx) = gpu() else { return };
    let (graph, _) = small_graph();
    let report = run(ctx, &graph, &naive(ctx, &graph));
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
fn legal_inplace_reuse_verifies() {
    let Some(ctx) = gpu() else { return };
    let (graph, [a, _, c, d]) = small_graph();
    let mut plan = naive(ctx, &graph);
    // d = mul(c, w) is elementwise and c dies there: d may live in c's memory.
    plan.placements[d.index()] = plan.placements[c.index()];
    plan.inplace.push((d, c));
    let _ = a;
    let report = run(ctx, &graph, &plan);
    assert!(report.verified(), "{report}");
}

#[test]
fn tensor_moved_over_a_live_tensor_is_named_with_the_node_that_saw_it() {
    let Some(ctx) = gpu() else { return };
    let (graph, [a, b, _, _]) = small_graph();
    let mut plan = naive(ctx, &graph);
    // b is written at node 1 while a is still live (read again by node 2).
    plan.placements[b.index()] = plan.placements[a.index()];
    let report = run(ctx, &graph, &plan);
    assert!(!report.verified(), "corruption not detected: {report}");
    let first = report.first().expect("a mismatch record");
    assert_eq!(first.tensor, a);
    assert_eq!(first.tensor_name, "relu_0");
    assert_eq!(first.node, Some(NodeId(2)));
    assert!(report.to_string().contains("relu_0"), "{report}");
}

#[test]
fn output_clobbered_after_its_last_reader_is_caught_by_the_final_check() {
    let Some(ctx) = gpu() else { return };
    let mut g = GraphBuilder::new("late");
    let x = g.input("x", DType::F32, &[64]);
    let y = g.node("relu", &[x], &[64], false);
    g.mark_output(y);
    let z = g.node("neg", &[x], &[64], false);
    g.mark_output(z);
    let graph = g.build().expect("valid graph");
    let mut plan = naive(ctx, &graph);
    plan.placements[z.index()] = plan.placements[y.index()];
    let report = run(ctx, &graph, &plan);
    let first = report.first().expect("a mismatch record");
    assert_eq!(first.tensor, y);
    assert_eq!(first.node, None);
}

#[test]
fn view_nodes_write_nothing_and_views_read_their_root() {
    let Some(ctx) = gpu() else { return };
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
    let report = run(ctx, &graph, &naive(ctx, &graph));
    assert!(report.verified(), "{report}");
}

#[test]
fn odd_sized_tensors_are_checked_over_whole_words() {
    let Some(ctx) = gpu() else { return };
    let mut g = GraphBuilder::new("bytes");
    let x = g.input("x", DType::U8, &[7]);
    let y = g.node("cast", &[x], &[3], false);
    g.mark_output(y);
    let graph = g.build().expect("valid graph");
    let report = run(ctx, &graph, &naive(ctx, &graph));
    assert!(report.verified(), "{report}");
}

fn trace(name: &str) -> Graph {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(format!("{name}.json"));
    read_trace(&path).expect("trace")
}

fn honest_trace_verifies(name: &str) {
    let Some(ctx) = gpu() else { return };
    let graph = trace(name);
    let report = run(ctx, &graph, &naive(ctx, &graph));
    assert!(report.verified(), "{name}: {report}");
    assert_eq!(report.nodes, graph.nodes.len());
    println!("{name}: {report} ({} dispatches)", report.dispatches);
}

#[test]
fn honest_plan_of_mobilenet_v2_verifies() {
    honest_trace_verifies("mobilenet_v2");
}

#[test]
fn honest_plan_of_resnet50_verifies() {
    honest_trace_verifies("resnet50");
}

#[test]
fn honest_plan_of_efficientnet_b0_verifies() {
    honest_trace_verifies("efficientnet_b0");
}

#[test]
fn honest_plan_of_gpt2_seq256_verifies() {
    honest_trace_verifies("gpt2_seq256");
}

#[test]
fn honest_plan_of_bert_base_seq128_verifies() {
    honest_trace_verifies("bert_base_seq128");
}

/// In a real network, moves a tensor B over a tensor A that is still read after B is
/// written: the proof names A and the first node reading A after B's producer.
#[test]
fn corrupted_plan_of_a_trace_names_the_clobbered_tensor_and_node() {
    let Some(ctx) = gpu() else { return };
    let graph = trace("mobilenet_v2");
    let lifetimes = Lifetimes::of(&graph);
    let mut plan = naive(ctx, &graph);
    let mut found = None;
    'search: for (step, node) in graph.nodes.iter().enumerate() {
        let b = node.output;
        let Some(b_place) = plan.placement(b) else {
            continue;
        };
        if !graph.is_planned(b) {
            continue;
        }
        for a in graph.planned_tensors() {
            let (Some(la), Some(a_place)) = (lifetimes.get(a), plan.placement(a)) else {
                continue;
            };
            // a is produced before b and read by a later node than b's producer.
            let later_reader = graph
                .nodes
                .iter()
                .enumerate()
                .skip(step + 1)
                .find(|(_, n)| n.inputs.iter().any(|&i| graph.root_of(i) == Some(a)));
            if a != b
                && la.first < step as u32
                && b_place.size <= a_place.size
                && graph.tensors[b.index()].size > 0
            {
                if let Some((reader, _)) = later_reader {
                    found = Some((a, b, reader));
                    break 'search;
                }
            }
        }
    }
    let (a, b, reader) = found.expect("mobilenet has a live tensor to clobber");
    plan.placements[b.index()] = plan.placements[a.index()];
    let report = run(ctx, &graph, &plan);
    let first = report.first().expect("the clobber is detected");
    assert_eq!(first.tensor, a, "{report}");
    assert_eq!(first.node, Some(NodeId(reader as u32)), "{report}");
    println!("{report}");
}
