//! A session for a user's graph on the user's device (issue 25): the engine example
//! runs; user kernels written as plain WGSL (their own parameter blocks or none, read
//! bindings) fill every output element with the default grid (the 16x16 matmul that
//! used to leave rows 16-31 at zero); user ops belong to the context and its clones,
//! and the refusal on another adopted context says so; graph
//! mismatches are refused before planning with nothing allocated; inputs are kept
//! across runs by default, or reused only when asked and then refused until written;
//! a run with an unwritten weight is refused; f16 kernels register where the device
//! has `SHADER_F16` and are refused with a clear error where it does not.

mod common;

#[path = "../examples/engine_mlp.rs"]
#[allow(dead_code)]
mod engine_mlp;

use std::sync::Arc;

use wgalloc::device::{GpuContext, WgpuStorage};
use wgalloc::exec::{register_op, user_ops, Bind, ExecError, OpShapes, RegisterError, UserOp};
use wgalloc::graph::{DType, Graph, GraphBuilder, NodeId};
use wgalloc::session::{InputPolicy, Session, SessionError};
use wgalloc::storage::CountingStorage;
use wgalloc::PlanOptions;

const KERNELS: &str = include_str!("../examples/shaders/engine.wgsl");

/// The engine's matmul, `[m, k] · [k, n]`, with its own 16-byte parameter block.
fn matmul(name: &str) -> UserOp {
    UserOp::new(name, KERNELS, "matmul", 2).params(|s| {
        let ([m, k], [_, n]) = (s.dims(0)?, s.dims(1)?);
        Ok([OpShapes::u32(m)?, OpShapes::u32(k)?, OpShapes::u32(n)?, 0])
    })
}

/// The engine's add (no parameter block), in place over input 0 when marked.
fn add(name: &str) -> UserOp {
    UserOp::new(name, KERNELS, "add", 2).inplace("add_inplace", &[Bind::Input(0), Bind::Input(1)])
}

fn values(len: usize, seed: f32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as f32 * 0.37 + seed).sin() * 2.0).round() / 2.0)
        .collect()
}

fn cpu_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

/// `y = a · w` for `a` `[m, k]` and weight `w` `[k, n]`.
fn matmul_graph(op: &str, m: u64, k: u64, n: u64) -> (Graph, [wgalloc::TensorId; 3]) {
    let mut b = GraphBuilder::new("mm");
    let a = b.input("a", DType::F32, &[m, k]);
    let w = b.weight("w", DType::F32, &[k, n]);
    let y = b.node(op, &[a, w], &[m, n], false);
    b.mark_output(y);
    (b.build().expect("valid"), [a, w, y])
}

#[test]
fn the_engine_example_matches_the_cpu_and_is_proved() {
    if common::gpu().is_none() {
        return;
    }
    engine_mlp::run().expect("the engine example");
}

#[test]
fn the_engine_examples_wgalloc_side_is_at_most_40_lines() {
    let source = include_str!("../examples/engine_mlp.rs");
    let uses = source
        .lines()
        .filter(|l| l.starts_with("use wgalloc"))
        .count();
    let adopt = source.matches("GpuContext::adopt(").count();
    let start = source.find("fn mlp_on_wgalloc").expect("the function");
    let end = start + source[start..].find("\n}\n").expect("its end") + 2;
    let body = source[start..end]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    assert!(uses == 3 && adopt == 1, "{uses} use lines, {adopt} adopt");
    assert!(uses + adopt + body <= 40, "{} lines", uses + adopt + body);
}

#[test]
fn a_16x16_matmul_without_a_grid_writes_every_row() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, matmul("s_matmul16")).expect("registers");
    let (m, k, n) = (32usize, 48usize, 40usize);
    let (graph, [a, w, y]) = matmul_graph("s_matmul16", m as u64, k as u64, n as u64);
    let mut session = Session::new(&ctx, graph, &PlanOptions::default()).expect("session");
    let (av, wv) = (values(m * k, 0.5), values(k * n, 1.5));
    session.write(w, &wv).expect("weight");
    session.write(a, &av).expect("input");
    session.run().expect("runs");
    let gpu = session.read(y).expect("read");
    let cpu = cpu_matmul(&av, &wv, m, k, n);
    assert_eq!(gpu.len(), cpu.len());
    if let Some(i) = (0..cpu.len()).find(|&i| gpu[i] != cpu[i]) {
        panic!(
            "row {} column {}: gpu {} cpu {} (every element must be written)",
            i / n,
            i % n,
            gpu[i],
            cpu[i]
        );
    }
    assert!(
        gpu[16 * n..].iter().any(|&v| v != 0.0),
        "the lower rows are computed"
    );
    assert!(session.prove().expect("proof").verified());
}

#[test]
fn a_grid_that_leaves_output_unwritten_is_refused_before_planning() {
    let Some(ctx) = common::gpu() else { return };
    // The old default, [ceil(elements / 256), 1, 1], is a layout mistake wgalloc
    // cannot see; a grid that launches too few invocations it can.
    let short = matmul("s_matmul_short").workgroups(|s| Ok([s.output_len() / 512, 1, 1]));
    register_op(&ctx, short).expect("registers");
    let (graph, _) = matmul_graph("s_matmul_short", 32, 16, 32);
    match Session::new(&ctx, graph, &PlanOptions::default()) {
        Err(SessionError::Exec(ExecError::BadShape { node, problem, .. })) => {
            assert_eq!(node, NodeId(0));
            assert!(problem.contains("unwritten"), "{problem}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn user_ops_belong_to_the_context_and_its_clones_and_the_error_says_so() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, matmul("s_matmul_shared")).expect("registers");
    let clone = ctx.clone();
    assert!(user_ops(&clone).contains("s_matmul_shared"));
    let (graph, [a, w, y]) = matmul_graph("s_matmul_shared", 4, 8, 4);
    let mut session =
        Session::new(&clone, graph.clone(), &PlanOptions::default()).expect("session");
    session.write(a, &[1.0; 32]).expect("a");
    session.write(w, &[0.25; 32]).expect("w");
    session.run().expect("runs on a clone");
    assert_eq!(session.read(y).expect("y"), vec![2.0; 16]);
    // Another adopt of the same wgpu::Device is another context: wgpu cannot tell
    // that two device handles are one device, so it starts without the op, and the
    // refusal (before planning) says why.
    let adopted = GpuContext::adopt(ctx.device.clone(), ctx.queue.clone(), ctx.info.clone());
    assert!(!user_ops(&adopted).contains("s_matmul_shared"));
    let error = Session::new(&adopted, graph, &PlanOptions::default()).expect_err("not there");
    assert!(
        matches!(error, SessionError::Exec(ExecError::NoKernel { .. })),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("registered on this GpuContext") && message.contains("GpuContext::adopt"),
        "{message}"
    );
}

#[test]
fn graph_mismatches_are_refused_before_anything_is_planned_or_allocated() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, matmul("s_matmul_chk")).expect("registers");
    register_op(&ctx, UserOp::new("s_relu_oop", KERNELS, "relu", 1)).expect("registers");
    let storage = Arc::new(CountingStorage::new(WgpuStorage::wgpu(&ctx)));
    let session =
        |graph: Graph| Session::with_storage(&ctx, graph, &PlanOptions::default(), storage.clone());
    // A node marked in place whose op has no in-place entry point.
    let mut b = GraphBuilder::new("flag");
    let x = b.input("x", DType::F32, &[64]);
    let h = b.node("s_relu_oop", &[x], &[64], true);
    b.mark_output(h);
    assert!(matches!(
        session(b.build().expect("valid")),
        Err(SessionError::Exec(ExecError::NoInPlaceKernel {
            node: NodeId(0),
            ..
        }))
    ));
    // An op neither built in nor registered.
    let mut b = GraphBuilder::new("unknown");
    let x = b.input("x", DType::F32, &[64]);
    let h = b.node("s_never_registered", &[x], &[64], false);
    b.mark_output(h);
    assert!(matches!(
        session(b.build().expect("valid")),
        Err(SessionError::Exec(ExecError::NoKernel { .. }))
    ));
    // The wrong number of inputs.
    let mut b = GraphBuilder::new("arity");
    let x = b.input("x", DType::F32, &[4, 4]);
    let h = b.node("s_matmul_chk", &[x], &[4, 4], false);
    b.mark_output(h);
    assert!(matches!(
        session(b.build().expect("valid")),
        Err(SessionError::Exec(ExecError::WrongArity {
            expected: 2,
            got: 1,
            ..
        }))
    ));
    // A rank the parameter closure does not take: a typed error, not a panic.
    let mut b = GraphBuilder::new("rank");
    let x = b.input("x", DType::F32, &[16]);
    let w = b.weight("w", DType::F32, &[16, 4]);
    let h = b.node("s_matmul_chk", &[x, w], &[4], false);
    b.mark_output(h);
    match session(b.build().expect("valid")) {
        Err(SessionError::Exec(ExecError::BadShape { problem, .. })) => {
            assert!(problem.contains("rank 2 expected"), "{problem}")
        }
        other => panic!("expected a rank error, got {other:?}"),
    }
    assert_eq!(storage.report().allocations, 0, "nothing was allocated");
}

/// `y = 4x` as `a = add(x, x)`, `y = add(a, a)`: the plan may put `y` over `x`.
fn doubling_graph(op: &str, len: u64) -> (Graph, [wgalloc::TensorId; 2]) {
    let mut b = GraphBuilder::new("doubling");
    let x = b.input("x", DType::F32, &[len]);
    let a = b.node(op, &[x, x], &[len], false);
    let y = b.node(op, &[a, a], &[len], false);
    b.mark_output(y);
    (b.build().expect("valid"), [x, y])
}

#[test]
fn inputs_are_kept_across_runs_or_reused_only_when_asked() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, add("s_add_twice")).expect("registers");
    let (graph, [x, y]) = doubling_graph("s_add_twice", 256);
    let mut session = Session::new(&ctx, graph, &PlanOptions::default()).expect("session");
    assert_eq!(session.input_policy(), InputPolicy::Kept);
    let (px, py) = (
        session.plan().placement(x).expect("x"),
        session.plan().placement(y).expect("y"),
    );
    assert_eq!(
        (px.buffer, px.chunk, px.offset),
        (py.buffer, py.chunk, py.offset),
        "the plan reuses x's bytes for y (else this test checks nothing)"
    );
    let xs = values(256, 0.1);
    let want: Vec<f32> = xs.iter().map(|v| 4.0 * v).collect();
    session.write(x, &xs).expect("x");
    for run in 0..3 {
        session.run().expect("runs");
        assert_eq!(session.read(y).expect("y"), want, "run {run}");
    }
    // A proof overwrites the activations too; the next run writes x again.
    assert!(session.prove().expect("proof").verified());
    session.run().expect("runs");
    assert_eq!(session.read(y).expect("y"), want, "after the proof");

    let mut reused = session.inputs(InputPolicy::Reused);
    reused.write(x, &xs).expect("x");
    reused.run().expect("runs");
    assert_eq!(reused.read(y).expect("y"), want);
    match reused.run() {
        Err(SessionError::NotWritten {
            tensor, since_run, ..
        }) => assert!(tensor == x && since_run),
        other => panic!("expected a refusal, got {other:?}"),
    }
    reused.write(x, &xs).expect("x again");
    reused.run().expect("runs");
    assert_eq!(reused.read(y).expect("y"), want);
}

#[test]
fn a_run_with_a_weight_never_written_is_refused_and_computed_tensors_are_not_writable() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, matmul("s_matmul_w")).expect("registers");
    let (graph, [a, w, y]) = matmul_graph("s_matmul_w", 4, 4, 4);
    let mut session = Session::new(&ctx, graph, &PlanOptions::default()).expect("session");
    session.write(a, &[1.0; 16]).expect("a");
    match session.run() {
        Err(SessionError::NotWritten {
            tensor, since_run, ..
        }) => assert!(tensor == w && !since_run),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(
        session.write(y, &[0.0; 16]),
        Err(SessionError::NotWritable { .. })
    ));
    session.write(w, &[1.0; 16]).expect("w");
    session.run().expect("runs");
    assert_eq!(session.read(y).expect("y"), vec![4.0; 16]);
    // Regions for an engine's own passes: every placed tensor, weights included.
    let regions = session.regions().expect("regions");
    for t in [a, w, y] {
        assert!(regions.iter().any(|(id, _)| *id == t), "{t}");
    }
}

/// An f16 kernel: `y = f32(f16(x))`.
const HALF: &str = "enable f16;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn half(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&y) {
        y[id.x] = f32(f16(x[id.x]));
    }
}
";

#[test]
fn an_f16_kernel_runs_where_the_device_has_shader_f16_and_is_refused_clearly_elsewhere() {
    let Some(ctx) = common::gpu() else { return };
    // A device created without SHADER_F16 (the shared context asks for it where the
    // adapter offers it) refuses the kernel.
    let without = common::device_without_f16(&ctx);
    let error =
        register_op(&without, UserOp::new("s_half", HALF, "half", 1)).expect_err("no SHADER_F16");
    assert!(
        matches!(error, RegisterError::MissingFeature { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("SHADER_F16"), "{error}");
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = wgalloc::device::backends_from_env();
    let instance = wgpu::Instance::new(desc);
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .expect("an adapter");
    if !adapter.features().contains(wgpu::Features::SHADER_F16) {
        common::skip_for_capability(
            "an_f16_kernel_runs_where_the_device_has_shader_f16",
            "the adapter has no SHADER_F16",
        );
        return;
    }
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("f16"),
        required_features: wgpu::Features::SHADER_F16,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .expect("a device with SHADER_F16");
    let half = GpuContext::adopt(device, queue, adapter.get_info());
    register_op(&half, UserOp::new("s_half", HALF, "half", 1)).expect("registers");
    let mut b = GraphBuilder::new("half");
    let x = b.input("x", DType::F32, &[100]);
    let y = b.node("s_half", &[x], &[100], false);
    b.mark_output(y);
    let mut session =
        Session::new(&half, b.build().expect("valid"), &PlanOptions::default()).expect("session");
    let xs: Vec<f32> = (0..100).map(|i| 1.0 + i as f32 / 3.0).collect();
    session.write(x, &xs).expect("x");
    session.run().expect("runs");
    let ys = session.read(y).expect("y");
    for (x, y) in xs.iter().zip(&ys) {
        assert!((x - y).abs() <= x.abs() / 1024.0, "{x} -> {y}");
    }
    // Whether the values were rounded is the driver's business: NVIDIA's Vulkan driver
    // (580, on an H200) folds the f32 -> f16 -> f32 round trip away and returns `x`
    // exactly, lavapipe rounds. Both are within f16's precision, checked above.
}
