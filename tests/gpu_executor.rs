//! The executor on whole graphs: the built-in GPT model (tiny and default sizes) in one
//! pass over two memory layers (activations with in-place reuse, then weights) against
//! the CPU reference, bind-group reuse on a second run, and the errors a bad graph or
//! plan gets before anything is submitted.
//!
//! Tolerance: |gpu − cpu| ≤ 1e-3 · (1 + |cpu|) on the logits (a dozen chained kernels).
//!
//! No adapter: each test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

use std::collections::HashMap;

use wgalloc::device::{GpuContext, PlannedMemory};
use wgalloc::exec::cpu_ref::{self, TensorData};
use wgalloc::exec::{ExecError, Executor, TensorMemory};
use wgalloc::graph::{DType, Graph, GraphBuilder, Role, TensorId};
use wgalloc::model::{build_gpt, GptModel, ModelConfig};
use wgalloc::plan::{align_up, BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan};

/// The device from the environment; `None` (after printing SKIPPED) when there is none
/// and the GPU is not required.
fn gpu() -> Option<GpuContext> {
    match GpuContext::from_env() {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            if std::env::var("WGALLOC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("WGALLOC_REQUIRE_GPU=1 but no adapter: {e}");
            }
            eprintln!("SKIPPED: no wgpu adapter");
            None
        }
    }
}

/// Places the tensors `keep` selects one after another in one chunk; an in-place
/// node's output takes its first input's range when that input dies at the node.
fn layer_plan(graph: &Graph, alignment: u64, keep: impl Fn(Role) -> bool, inplace: bool) -> Plan {
    let mut last_read = vec![usize::MAX; graph.tensors.len()];
    for (step, n) in graph.nodes.iter().enumerate() {
        for &i in &n.inputs {
            last_read[graph.root_of(i).expect("root").index()] = step;
        }
    }
    let mut placements: Vec<Option<Placement>> = vec![None; graph.tensors.len()];
    let mut offset = 0u64;
    for t in graph
        .tensors
        .iter()
        .filter(|t| t.view_of.is_none() && keep(t.role))
    {
        let size = align_up(t.size, alignment).expect("size");
        placements[t.id.index()] = Some(Placement {
            buffer: BufferId(0),
            chunk: 0,
            offset,
            size,
        });
        offset += size;
    }
    if inplace {
        for (step, n) in graph.nodes.iter().enumerate() {
            let input = &graph.tensors[n.inputs[0].index()];
            let out = &graph.tensors[n.output.index()];
            if n.inplace
                && input.role == Role::Intermediate
                && input.view_of.is_none()
                && input.size == out.size
                && last_read[input.id.index()] == step
            {
                placements[out.id.index()] = placements[input.id.index()];
            }
        }
    }
    Plan {
        planner: "test-layer".into(),
        placements,
        buffers: vec![BufferPlan {
            buffer_type: BufferTypeDesc::new("storage", alignment, u64::MAX).expect("type"),
            chunks: vec![ChunkPlan {
                size: offset.max(4),
                oversized: false,
            }],
            same_as: None,
        }],
        inplace: Vec::new(),
    }
}

fn allocate(ctx: &GpuContext, plan: &Plan) -> PlannedMemory {
    let chunks = plan
        .buffers
        .iter()
        .map(|b| {
            b.chunks
                .iter()
                .map(|c| {
                    ctx.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("test chunk"),
                        size: c.size,
                        usage: wgpu::BufferUsages::STORAGE
                            | wgpu::BufferUsages::COPY_SRC
                            | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                })
                .collect()
        })
        .collect();
    PlannedMemory::from_buffers(chunks)
}

fn model_values(model: &GptModel) -> HashMap<TensorId, TensorData> {
    let mut values = HashMap::new();
    values.insert(model.tokens, TensorData::U32(model.token_ids()));
    for w in model.weights() {
        values.insert(w, TensorData::F32(model.weight_values(w)));
    }
    values
}

fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            (g - c).abs() <= tol * (1.0 + c.abs()),
            "{what}: element {i}: gpu {g} cpu {c}"
        );
    }
}

/// Runs the model twice over activations + weights layers; checks the logits against
/// the CPU and that the second run creates no bind group.
fn check_gpt(ctx: &GpuContext, config: ModelConfig) {
    let model = build_gpt(&config).expect("model");
    let graph = &model.graph;
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    let activations = layer_plan(graph, alignment, |r| r != Role::Weight, true);
    let weights = layer_plan(graph, alignment, |r| r == Role::Weight, false);
    let (act_mem, weight_mem) = (allocate(ctx, &activations), allocate(ctx, &weights));
    let memory = TensorMemory::single(&activations, &act_mem).with_layer(&weights, &weight_mem);
    let values = model_values(&model);
    for (&id, data) in &values {
        memory
            .write(ctx, graph, id, &data.to_bytes())
            .expect("upload");
    }
    let mut exec = Executor::new(ctx);
    let first = exec.run(graph, &memory).expect("first run");
    let gpu = memory.read_f32(ctx, graph, model.logits).expect("read");
    let cpu_all = cpu_ref::evaluate(graph, &values).expect("cpu");
    let cpu = cpu_all[model.logits.index()]
        .as_ref()
        .and_then(|d| d.as_f32())
        .expect("logits");
    assert_close(graph.name.as_str(), &gpu, cpu, 1e-3);
    assert_eq!(first.dispatches, graph.nodes.len());
    assert!(
        first.inplace_dispatches > 0,
        "the plan shares in-place ranges"
    );
    assert!(first.bind_groups_created > 0);

    let second = exec.run(graph, &memory).expect("second run");
    assert_eq!(second.bind_groups_created, 0);
    assert_eq!(second.bind_groups_reused, graph.nodes.len());
    let again = memory.read_f32(ctx, graph, model.logits).expect("read");
    assert_eq!(gpu, again, "a repeated run is deterministic");
    eprintln!(
        "{}: {} nodes, {} in place; first run encode {:?} wait {:?} gpu {:?} ({} bind groups, {} pipelines); \
         second run encode {:?} wait {:?} gpu {:?}",
        graph.name,
        first.dispatches,
        first.inplace_dispatches,
        first.encode_time,
        first.wait_time,
        first.gpu_time,
        first.bind_groups_created,
        first.pipelines,
        second.encode_time,
        second.wait_time,
        second.gpu_time,
    );
}

#[test]
fn tiny_gpt_runs_in_one_pass_and_matches_the_cpu_reference() {
    let Some(ctx) = gpu() else { return };
    check_gpt(
        &ctx,
        ModelConfig {
            layers: 1,
            width: 32,
            heads: 2,
            seq: 8,
            vocab: 50,
            seed: 7,
        },
    );
}

#[test]
fn default_gpt_matches_the_cpu_reference() {
    let Some(ctx) = gpu() else { return };
    check_gpt(&ctx, ModelConfig::default());
}

/// A three-node graph `y = gelu(scale(x)) + b` and one-chunk memory for it.
fn small_graph() -> (Graph, TensorId, TensorId) {
    let mut g = GraphBuilder::new("small");
    let x = g.input("x", DType::F32, &[4, 8]);
    let b = g.input("b", DType::F32, &[8]);
    let s = g.node_with_params("scale", &[x], &[4, 8], true, &[2.0]);
    let a = g.node("gelu", &[s], &[4, 8], true);
    let y = g.node("add", &[a, b], &[4, 8], true);
    g.mark_output(y);
    (g.build().expect("valid"), x, b)
}

#[test]
fn an_op_without_a_kernel_is_refused_before_submit() {
    let Some(ctx) = gpu() else { return };
    let mut g = GraphBuilder::new("conv");
    let x = g.input("x", DType::F32, &[4]);
    g.node("conv2d", &[x], &[4], false);
    let graph = g.build().expect("valid");
    let plan = layer_plan(&graph, 256, |_| true, false);
    let mem = allocate(&ctx, &plan);
    let err = Executor::new(&ctx)
        .run(&graph, &TensorMemory::single(&plan, &mem))
        .expect_err("no kernel");
    assert_eq!(
        err,
        ExecError::NoKernel {
            node: 0,
            op: "conv2d".into()
        }
    );
    assert!(!Executor::supports("conv2d") && Executor::supports("matmul_bt"));
}

#[test]
fn a_tensor_no_layer_places_is_named() {
    let Some(ctx) = gpu() else { return };
    let (graph, _, b) = small_graph();
    let plan = layer_plan(&graph, 256, |_| true, false);
    let mut missing = plan.clone();
    missing.placements[b.index()] = None;
    let mem = allocate(&ctx, &missing);
    let err = Executor::new(&ctx)
        .run(&graph, &TensorMemory::single(&missing, &mem))
        .expect_err("b has no memory");
    assert!(
        matches!(err, ExecError::NotPlaced { tensor, .. } if tensor == b.0),
        "{err}"
    );
}

#[test]
fn an_output_over_the_second_input_is_an_overlap_error() {
    let Some(ctx) = gpu() else { return };
    let (graph, _, b) = small_graph();
    let mut plan = layer_plan(&graph, 256, |_| true, false);
    let y = graph.nodes[2].output;
    plan.placements[y.index()] = plan.placements[b.index()].map(|mut p| {
        p.size = 4 * 32;
        p
    });
    let mem = allocate(&ctx, &plan);
    let err = Executor::new(&ctx)
        .run(&graph, &TensorMemory::single(&plan, &mem))
        .expect_err("overlap");
    assert_eq!(
        err,
        ExecError::OverlappingBindings {
            node: 2,
            first: b.0,
            second: y.0
        }
    );
}

#[test]
fn a_norm_placed_over_its_input_has_no_in_place_kernel() {
    let Some(ctx) = gpu() else { return };
    let mut g = GraphBuilder::new("norm");
    let x = g.input("x", DType::F32, &[2, 8]);
    let w = g.weight("g", DType::F32, &[8]);
    let y = g.node("rms_norm", &[x, w], &[2, 8], false);
    let graph = g.build().expect("valid");
    let mut plan = layer_plan(&graph, 256, |_| true, false);
    plan.placements[y.index()] = plan.placements[x.index()];
    let mem = allocate(&ctx, &plan);
    let err = Executor::new(&ctx)
        .run(&graph, &TensorMemory::single(&plan, &mem))
        .expect_err("no in-place rms_norm");
    assert!(
        matches!(err, ExecError::NoInPlaceKernel { node: 0, .. }),
        "{err}"
    );
}

#[test]
fn a_misaligned_offset_is_refused_with_the_device_alignment() {
    let Some(ctx) = gpu() else { return };
    let alignment = ctx.limits.min_storage_buffer_offset_alignment;
    if alignment <= 4 {
        eprintln!("SKIPPED: device accepts any 4-byte offset");
        return;
    }
    let (graph, x, _) = small_graph();
    let mut plan = layer_plan(&graph, 256, |_| true, false);
    if let Some(p) = plan.placements[x.index()].as_mut() {
        p.offset += 4;
        p.size -= 4;
    }
    let mem = allocate(&ctx, &plan);
    let err = Executor::new(&ctx)
        .run(&graph, &TensorMemory::single(&plan, &mem))
        .expect_err("misaligned");
    assert_eq!(
        err,
        ExecError::MisalignedOffset {
            tensor: x.0,
            offset: 4,
            alignment
        }
    );
}

#[test]
fn in_place_chain_over_one_range_matches_the_cpu() {
    let Some(ctx) = gpu() else { return };
    let (graph, x, b) = small_graph();
    // x, scale, gelu and add all share x's range: three in-place dispatches.
    let mut plan = layer_plan(&graph, 256, |_| true, false);
    for n in &graph.nodes {
        plan.placements[n.output.index()] = plan.placements[x.index()];
    }
    let mem = allocate(&ctx, &plan);
    let memory = TensorMemory::single(&plan, &mem);
    let mut values = HashMap::new();
    values.insert(
        x,
        TensorData::F32((0..32).map(|i| i as f32 / 8.0 - 2.0).collect()),
    );
    values.insert(
        b,
        TensorData::F32((0..8).map(|i| i as f32 * 0.25).collect()),
    );
    for (&id, d) in &values {
        memory
            .write(&ctx, &graph, id, &d.to_bytes())
            .expect("upload");
    }
    let report = Executor::new(&ctx).run(&graph, &memory).expect("run");
    assert_eq!(report.inplace_dispatches, 3);
    let y = graph.nodes[2].output;
    let gpu = memory.read_f32(&ctx, &graph, y).expect("read");
    let cpu = cpu_ref::evaluate(&graph, &values).expect("cpu")[y.index()]
        .clone()
        .and_then(|d| d.as_f32().map(<[f32]>::to_vec))
        .expect("value");
    assert_close("in-place chain", &gpu, &cpu, 1e-5);
}

#[test]
fn a_view_is_bound_at_its_roots_range() {
    let Some(ctx) = gpu() else { return };
    let mut g = GraphBuilder::new("view");
    let x = g.input("x", DType::F32, &[4, 8]);
    let flat = g.view("flat", x, &[32]);
    let y = g.node("softmax", &[flat], &[32], false);
    g.mark_output(y);
    let graph = g.build().expect("valid");
    let plan = layer_plan(&graph, 256, |_| true, false);
    assert!(
        plan.placements[flat.index()].is_none(),
        "views get no range of their own"
    );
    let mem = allocate(&ctx, &plan);
    let memory = TensorMemory::single(&plan, &mem);
    let mut values = HashMap::new();
    values.insert(
        x,
        TensorData::F32((0..32).map(|i| (i as f32 * 0.3).sin()).collect()),
    );
    memory
        .write(&ctx, &graph, x, &values[&x].to_bytes())
        .expect("upload");
    Executor::new(&ctx).run(&graph, &memory).expect("run");
    let gpu = memory.read_f32(&ctx, &graph, y).expect("read");
    let cpu = cpu_ref::evaluate(&graph, &values).expect("cpu")[y.index()]
        .clone()
        .and_then(|d| d.as_f32().map(<[f32]>::to_vec))
        .expect("value");
    assert_close("softmax over a view", &gpu, &cpu, 1e-5);
    assert!(
        (gpu.iter().sum::<f32>() - 1.0).abs() < 1e-5,
        "one row of 32"
    );
}

#[test]
fn a_new_memory_gets_new_bind_groups_not_the_old_buffers() {
    let Some(ctx) = gpu() else { return };
    let (graph, x, b) = small_graph();
    let plan = layer_plan(&graph, 256, |_| true, true);
    let (mem_a, mem_b) = (allocate(&ctx, &plan), allocate(&ctx, &plan));
    let (first, second) = (
        TensorMemory::single(&plan, &mem_a),
        TensorMemory::single(&plan, &mem_b),
    );
    let mut exec = Executor::new(&ctx);
    let y = graph.nodes[2].output;
    let mut outputs = Vec::new();
    for (memory, shift) in [(&first, 0.0f32), (&second, 1.0)] {
        let mut values = HashMap::new();
        values.insert(
            x,
            TensorData::F32((0..32).map(|i| i as f32 / 16.0 - shift).collect()),
        );
        values.insert(b, TensorData::F32(vec![shift; 8]));
        for (&id, d) in &values {
            memory
                .write(&ctx, &graph, id, &d.to_bytes())
                .expect("upload");
        }
        let report = exec.run(&graph, memory).expect("run");
        assert_eq!(report.bind_groups_created, graph.nodes.len());
        let gpu = memory.read_f32(&ctx, &graph, y).expect("read");
        let cpu = cpu_ref::evaluate(&graph, &values).expect("cpu")[y.index()]
            .clone()
            .and_then(|d| d.as_f32().map(<[f32]>::to_vec))
            .expect("value");
        assert_close("second memory", &gpu, &cpu, 1e-5);
        outputs.push(gpu);
    }
    assert_ne!(outputs[0], outputs[1]);
}
