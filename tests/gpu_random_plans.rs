//! Random graphs with every shape the graph model allows, through every planner, the
//! verifier, the device check and the checksum run on the GPU.
//!
//! The generator makes broadcast views larger than their root, partial views, views of
//! views, views as graph outputs, in-place nodes and chains of them, zero-length
//! tensors, element types whose sizes are not whole words, one to three buffer ids, and
//! tight limits (alignment up to 256, a storage binding limit smaller than some
//! tensors, so that "never fits" is exercised too). Each case:
//!
//! * every planner (`naive`, `ggml`, every offline strategy) plans it, and `verify`
//!   accepts the plan;
//! * allocating it and proving it ([`wgalloc::prove`]) either refuses it with a "never fits" error exactly when some
//!   binding exceeds the (tightened) limit, computed here independently of the crate's
//!   rule, or proves it with zero mismatches.
//!
//! `WGALLOC_RANDOM_PLAN_CASES` sets the number of cases (default 300). A failing case
//! writes a trace that reproduces it (the shrunk, minimal one last) to
//! `$CARGO_TARGET_TMPDIR/random-plan-failure.json`, with the case's limits and buffer
//! ids in an extra `wgalloc_case` field (readers ignore unknown fields).

mod common;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use wgalloc::device::{GpuContext, WgpuStorage};
use wgalloc::error::ErrorKind;
use wgalloc::graph::{write_trace, DType, Graph, GraphBuilder, Role, Tensor, TensorId};
use wgalloc::plan::offline::Budget;
use wgalloc::plan::{graph_leaves, BufferTypeDesc, GraphAllocator, Plan, Planner};

/// One step of the generator; the picks index into the tensors made so far.
#[derive(Debug, Clone)]
struct Step {
    kind: u8,
    picks: [u16; 3],
    extra_inputs: u8,
    len: u8,
    output: bool,
}

/// Elements per unit of a generated length: tensors of up to tens of KiB, so that a
/// binding limit of a few KiB is smaller than some of them while the checksum run's own
/// tables still fit it; odd, so that u8 and f16 tensors are not whole words.
const UNIT: u64 = 257;

/// A whole case: the graph's ingredients and the limits it is planned and run under.
#[derive(Debug, Clone)]
struct Case {
    dtype: DType,
    inputs: Vec<u8>,
    weights: Vec<u8>,
    steps: Vec<Step>,
    /// Alignment as a multiple of the device's storage offset alignment (so a plan can
    /// be bound on this device), at least 256 bytes for the largest.
    alignment_factor: u64,
    /// A storage binding limit (and buffer max size) in bytes, or the device's own.
    tight_binding: Option<u64>,
    buffers: usize,
    buffer_ids: Vec<u8>,
}

fn length() -> impl Strategy<Value = u8> {
    prop_oneof![1 => Just(0u8), 12 => 1u8..=64]
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..6,
        any::<[u16; 3]>(),
        0u8..3,
        length(),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(kind, picks, extra_inputs, len, output)| Step {
            kind,
            picks,
            extra_inputs,
            len,
            output,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec![DType::F32, DType::F16, DType::U8]),
        prop::collection::vec(length(), 1..=3),
        prop::collection::vec(1u8..=64, 0..=2),
        prop::collection::vec(step(), 1..=20),
        prop::sample::select(vec![1u64, 2, 8]),
        prop_oneof![3 => Just(None), 1 => prop::sample::select(vec![16u64 << 10, 32 << 10, 64 << 10]).prop_map(Some)],
        1usize..=3,
        prop::collection::vec(any::<u8>(), 1..=8),
    )
        .prop_map(
            |(dtype, inputs, weights, steps, alignment_factor, tight_binding, buffers, buffer_ids)| {
                Case {
                    dtype,
                    inputs,
                    weights,
                    steps,
                    alignment_factor,
                    tight_binding,
                    buffers,
                    buffer_ids,
                }
            },
        )
}

fn pick(from: &[TensorId], index: u16) -> Option<TensorId> {
    (!from.is_empty()).then(|| from[usize::from(index) % from.len()])
}

/// Appends node `op(inputs)` writing a new intermediate of `dtype` and `shape`.
fn produce(
    b: &mut GraphBuilder,
    op: &str,
    inputs: &[TensorId],
    dtype: DType,
    shape: &[u64],
    inplace: bool,
) -> TensorId {
    let size = shape.iter().product::<u64>() * dtype.size();
    let out = b.tensor(Tensor {
        id: TensorId(0),
        name: format!("{op}_out"),
        dtype,
        shape: shape.to_vec(),
        size,
        role: Role::Intermediate,
        view_of: None,
        dynamic: None,
    });
    b.push_node(op, inputs, out, inplace, &[]);
    out
}

/// Builds the case's graph; every graph it builds is valid.
fn build(case: &Case) -> Graph {
    let mut b = GraphBuilder::new("random");
    let mut readable: Vec<TensorId> = Vec::new();
    let mut memory: Vec<TensorId> = Vec::new();
    for (i, &len) in case.inputs.iter().enumerate() {
        let t = b.input(format!("in{i}"), case.dtype, &[u64::from(len) * UNIT]);
        readable.push(t);
        memory.push(t);
    }
    for (i, &len) in case.weights.iter().enumerate() {
        readable.push(b.weight(format!("w{i}"), case.dtype, &[u64::from(len) * UNIT]));
    }
    for (s, step) in case.steps.iter().enumerate() {
        let len = u64::from(step.len) * UNIT;
        let extra = |first: TensorId| {
            let mut inputs = vec![first];
            for k in 0..usize::from(step.extra_inputs) {
                inputs.extend(pick(&readable, step.picks[(k + 1) % 3]));
            }
            inputs
        };
        let out = match step.kind {
            // A plain op reading one to three tensors.
            0 => {
                let Some(first) = pick(&readable, step.picks[0]) else {
                    continue;
                };
                let inputs = extra(first);
                produce(
                    &mut b,
                    &format!("op{s}"),
                    &inputs,
                    case.dtype,
                    &[len],
                    false,
                )
            }
            // In place over any earlier tensor (a view or a weight now and then).
            1 | 2 => {
                let from = if step.kind == 1 { &memory } else { &readable };
                let Some(first) = pick(from, step.picks[0]) else {
                    continue;
                };
                let shape = b.graph().tensors[first.index()].shape.clone();
                let inputs = extra(first);
                produce(
                    &mut b,
                    &format!("inplace{s}"),
                    &inputs,
                    case.dtype,
                    &shape,
                    true,
                )
            }
            // An in-place chain: over the newest tensor.
            3 => {
                let Some(&first) = memory.last() else {
                    continue;
                };
                let shape = b.graph().tensors[first.index()].shape.clone();
                produce(
                    &mut b,
                    &format!("chain{s}"),
                    &[first],
                    case.dtype,
                    &shape,
                    true,
                )
            }
            // A node that produces a view: broadcast (larger), partial or same size.
            4 => {
                let Some(of) = pick(&memory, step.picks[0]) else {
                    continue;
                };
                let v = b.view(
                    format!("view{s}"),
                    of,
                    &[len * u64::from(step.picks[1] % 3 + 1)],
                );
                b.push_node("view", &[of], v, false, &[]);
                v
            }
            // A view no node produces (of a view, when the pick is one).
            _ => {
                let Some(of) = pick(&memory, step.picks[0]) else {
                    continue;
                };
                b.view(
                    format!("alias{s}"),
                    of,
                    &[len * u64::from(step.picks[2] % 4 + 1)],
                )
            }
        };
        readable.push(out);
        memory.push(out);
        if step.output {
            b.mark_output(out);
        }
    }
    b.build().expect("the generator builds valid graphs")
}

/// The buffer types of the case: `buffers` types of the case's alignment and max size.
fn buffer_types(case: &Case, ctx: &GpuContext) -> Vec<BufferTypeDesc> {
    let device = u64::from(ctx.limits.min_storage_buffer_offset_alignment.max(4));
    let alignment = if case.alignment_factor == 8 {
        (device * 8).max(256)
    } else {
        device * case.alignment_factor
    };
    let max_size = case.tight_binding.map_or_else(
        || {
            ctx.limits
                .max_storage_buffer_binding_size
                .min(ctx.limits.max_buffer_size)
        },
        |tight| tight.max(alignment),
    );
    (0..case.buffers)
        .map(|k| BufferTypeDesc::new(format!("b{k}"), alignment, max_size).expect("valid type"))
        .collect()
}

/// Plans with `planner`, over several buffers (ids from the case) when the case has
/// them and the planner takes ids (naive plans one buffer).
fn plan_with(planner: Planner, graph: &Graph, case: &Case, types: &[BufferTypeDesc]) -> Plan {
    if types.len() == 1 || planner == Planner::Naive {
        return planner.plan_graph(graph, &types[0]).expect("plans");
    }
    let id = |k: usize| usize::from(case.buffer_ids[k % case.buffer_ids.len()]) % types.len();
    let nodes: Vec<usize> = (0..graph.nodes.len()).map(id).collect();
    let leaves: Vec<usize> = (0..graph_leaves(graph).len()).map(|k| id(k + 7)).collect();
    let mut galloc = match planner {
        Planner::Offline(strategy) => {
            GraphAllocator::with_strategy(types.to_vec(), strategy, Budget::default())
        }
        _ => GraphAllocator::new(types.to_vec()),
    };
    galloc.reserve_n(graph, &nodes, &leaves).expect("reserves");
    galloc
        .alloc_graph(graph)
        .expect("hands out the reservation")
}

/// The largest binding any placed tensor needs, computed here from first principles
/// (a view binds the bytes it shares with its root, rounded up to 4), not with the
/// crate's rule: the oracle for "never fits".
fn largest_binding(graph: &Graph, plan: &Plan) -> u64 {
    graph
        .tensors
        .iter()
        .filter(|t| plan.placements[t.id.index()].is_some())
        .map(|t| {
            let mut root = t;
            while let Some(of) = root.view_of {
                root = &graph.tensors[of.index()];
            }
            t.size.min(root.size).div_ceil(4) * 4
        })
        .max()
        .unwrap_or(0)
}

/// Saves a trace that reproduces the failing case.
fn save_repro(graph: &Graph, case: &Case, planner: Planner, why: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("random-plan-failure.json");
    let trace = write_trace(graph).unwrap_or_else(|e| format!("{{\"unwritable\": \"{e}\"}}"));
    let mut doc: serde_json::Value = serde_json::from_str(&trace).unwrap_or_default();
    if let serde_json::Value::Object(map) = &mut doc {
        map.insert(
            "wgalloc_case".into(),
            serde_json::json!({
                "planner": planner.name(),
                "failure": why,
                "alignment_factor": case.alignment_factor,
                "tight_binding": case.tight_binding,
                "buffers": case.buffers,
                "buffer_ids": case.buffer_ids,
            }),
        );
    }
    let text = serde_json::to_string_pretty(&doc).unwrap_or(trace);
    match std::fs::write(&path, text) {
        Ok(()) => format!("{why}\nreproducing trace: {}", path.display()),
        Err(e) => format!("{why}\n(could not write {}: {e})", path.display()),
    }
}

fn check_case(ctx: &GpuContext, case: &Case) -> Result<(), TestCaseError> {
    let graph = build(case);
    let types = buffer_types(case, ctx);
    let mut limits = ctx.limits.clone();
    if let Some(tight) = case.tight_binding {
        limits.max_storage_buffer_binding_size = tight;
    }
    let device = GpuContext {
        limits,
        ..ctx.clone()
    };
    for planner in Planner::all() {
        let fail = |why: String| TestCaseError::fail(save_repro(&graph, case, planner, &why));
        let plan = plan_with(planner, &graph, case, &types);
        plan.verify(&graph)
            .map_err(|e| fail(format!("{}: verify refused: {e}", planner.name())))?;
        let never_fits =
            largest_binding(&graph, &plan) > device.limits.max_storage_buffer_binding_size;
        match common::allocate_and_prove(&device, &graph, &plan, &WgpuStorage::shared(ctx)) {
            Ok(report) if never_fits => {
                return Err(fail(format!(
                    "{}: a binding exceeds the limit but the plan ran: {report}",
                    planner.name()
                )))
            }
            Ok(report) if !report.verified() => {
                return Err(fail(format!("{}: {report}", planner.name())))
            }
            Ok(_) => {}
            Err(error) if never_fits && error.kind() == ErrorKind::NeverFits => {}
            Err(error) => {
                return Err(fail(format!(
                    "{}: {error} (kind: {}; expected never-fits: {never_fits})",
                    planner.name(),
                    error.kind()
                )))
            }
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("WGALLOC_RANDOM_PLAN_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_graphs_plan_verify_and_prove_on_the_gpu(case in case()) {
        let Some(ctx) = common::gpu() else { return Ok(()) };
        check_case(&ctx, &case)?;
    }
}
