//! User ops on planned memory: a SwiGLU op out of place and in place against its CPU
//! reference, beside built-in ops in one pass; a user GELU replacing the built-in one
//! inside the decoder with the logits still matching; every refusal (bad WGSL, wrong
//! binding count, name taken, op not registered, a grid over the device's limit, a
//! workgroup too large) as a typed error with nothing registered or allocated; and the
//! same graph encoded by hand from `TensorMemory::regions`, then proved by the
//! checksum run on the same plan and memory.
//!
//! The test binary shares one device: each test registers ops under its own names.
//! The tests that compare the driver's allocations use a device of their own.

mod common;

use std::collections::HashMap;

use wgalloc::device::{
    allocate_plan, allocator_report, GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE,
};
use wgalloc::exec::checksum::prove;
use wgalloc::exec::cpu_ref;
use wgalloc::exec::TensorData;
use wgalloc::exec::{
    register_op, user_ops, Bind, ExecError, Executor, KernelParams, RegisterError, TensorMemory,
    UserOp,
};
use wgalloc::graph::{DType, Graph, GraphBuilder, NodeId, TensorId};
use wgalloc::model::build_gpt;
use wgalloc::plan::{plan_graph, plan_weights, Plan};

/// SwiGLU, `out = silu(gate) * up`: out of place, and in place over `gate`.
const SWIGLU: &str = include_str!("../examples/shaders/swiglu.wgsl");

/// GELU (tanh form), out of place and in place: a stand-in for the built-in `gelu`.
/// Its parameter block has `KernelParams`' layout, which wgalloc fills by default.
const GELU: &str = "struct Params {
    len: u32,
    unused0: u32,
    unused1: u32,
    unused2: u32,
    unused3: f32,
    unused4: f32,
    unused5: f32,
    unused6: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

fn gelu(v: f32) -> f32 {
    let u = clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -10.0, 10.0);
    return 0.5 * v * (1.0 + tanh(u));
}

@compute @workgroup_size(64)
fn gelu_out(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < params.len {
        y[id.x] = gelu(x[id.x]);
    }
}

@compute @workgroup_size(64)
fn gelu_in(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < params.len {
        x[id.x] = gelu(x[id.x]);
    }
}
";

fn silu_times(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

fn swiglu(name: &str) -> UserOp {
    UserOp::new(name, SWIGLU, "swiglu", 2)
        .inplace("swiglu_inplace", &[Bind::Input(0), Bind::Input(1)])
        .check(|s| {
            if s.input(0)? == s.input(1)? && s.input(0)? == s.output() {
                Ok(())
            } else {
                Err(format!("gate, up and out differ: {s:?}").into())
            }
        })
        .cpu(|inputs, _| {
            inputs[0]
                .iter()
                .zip(inputs[1])
                .map(|(&g, &u)| silu_times(g, u))
                .collect()
        })
}

fn user_gelu(name: &str) -> UserOp {
    UserOp::new(name, GELU, "gelu_out", 1)
        .inplace("gelu_in", &[Bind::Input(0)])
        .workgroups(|s| Ok([s.output_len().div_ceil(64), 1, 1]))
        .cpu(|inputs, _| inputs[0].iter().map(|&v| cpu_ref::gelu(v)).collect())
}

fn storage(ctx: &GpuContext) -> wgalloc::plan::BufferTypeDesc {
    ctx.buffer_types().expect("buffer types").storage.desc
}

/// Memory for `plan` from plain wgpu buffers.
fn allocate(ctx: &GpuContext, plan: &Plan) -> PlannedMemory {
    allocate_plan(ctx, plan, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("allocate")
}

fn plan_and_allocate(ctx: &GpuContext, graph: &Graph) -> (Plan, PlannedMemory) {
    let plan = plan_graph(graph, &storage(ctx)).expect("plan");
    plan.verify(graph).expect("verifies");
    let memory = allocate(ctx, &plan);
    (plan, memory)
}

fn values(len: usize, seed: f32) -> Vec<f32> {
    (0..len)
        .map(|i| (i as f32 * 0.731 + seed).sin() * 3.0)
        .collect()
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

/// `y = scale(op(gate, up) , 0.5)`, `[rows, cols]`; `inplace` marks the user node.
fn swiglu_graph(op: &str, rows: u64, cols: u64, inplace: bool) -> (Graph, [TensorId; 4]) {
    let mut b = GraphBuilder::new("swiglu");
    let gate = b.input("gate", DType::F32, &[rows, cols]);
    let up = b.input("up", DType::F32, &[rows, cols]);
    // The gate is computed, so that the planner may write the user op over it.
    let g = b.node_with_params("scale", &[gate], &[rows, cols], false, &[1.5]);
    let h = b.node(op, &[g, up], &[rows, cols], inplace);
    let y = b.node_with_params("scale", &[h], &[rows, cols], true, &[0.5]);
    b.mark_output(y);
    (b.build().expect("valid"), [gate, up, h, y])
}

/// Runs the SwiGLU graph through the executor and checks it against the CPU
/// reference of the device's user ops; returns the run's in-place dispatches.
fn run_swiglu(ctx: &GpuContext, op: &str, rows: u64, cols: u64, inplace: bool) -> usize {
    let (graph, [gate, up, _, y]) = swiglu_graph(op, rows, cols, inplace);
    let (plan, memory) = plan_and_allocate(ctx, &graph);
    let mem = TensorMemory::single(&plan, &memory);
    let len = (rows * cols) as usize;
    let inputs = HashMap::from([
        (gate, TensorData::F32(values(len, 0.3))),
        (up, TensorData::F32(values(len, 1.7))),
    ]);
    for (&id, data) in &inputs {
        mem.write(ctx, &graph, id, &data.to_bytes()).expect("write");
    }
    let mut exec = Executor::new(ctx);
    assert!(exec.runs(op) && !Executor::supports(op));
    let report = exec.run(&graph, &mem).expect("runs");
    assert_eq!(
        report.dispatches, 3,
        "user op beside built-in ones, one pass"
    );
    let gpu = mem.read_f32(ctx, &graph, y).expect("read");
    let cpu = cpu_ref::evaluate_with(&graph, &inputs, &user_ops(ctx)).expect("cpu");
    let cpu = cpu[y.index()].as_ref().and_then(|d| d.as_f32()).expect("y");
    // The CPU reference closure is checked against an independent computation too.
    let direct: Vec<f32> = values(len, 0.3)
        .iter()
        .zip(values(len, 1.7))
        .map(|(&g, u)| 0.5 * silu_times(1.5 * g, u))
        .collect();
    assert_close("cpu reference", cpu, &direct, 1e-5);
    assert_close(op, &gpu, cpu, 1e-4);
    report.inplace_dispatches
}

#[test]
fn a_user_op_out_of_place_matches_its_cpu_reference() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, swiglu("swiglu_oop")).expect("registers");
    // 70 000 elements: more than one row of workgroups.
    let inplace = run_swiglu(&ctx, "swiglu_oop", 70, 1000, false);
    assert_eq!(inplace, 1, "only the last scale runs in place");
}

#[test]
fn a_user_op_runs_in_place_when_the_plan_puts_it_over_its_first_input() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, swiglu("swiglu_ip")).expect("registers");
    let inplace = run_swiglu(&ctx, "swiglu_ip", 33, 65, true);
    assert_eq!(inplace, 2, "the user op and the last scale run in place");
}

#[test]
fn an_in_place_plan_of_an_op_without_an_in_place_entry_is_refused() {
    let Some(ctx) = common::gpu() else { return };
    let op = UserOp::new("swiglu_oop_only", SWIGLU, "swiglu", 2);
    register_op(&ctx, op).expect("registers");
    let (graph, _) = swiglu_graph("swiglu_oop_only", 4, 64, true);
    let (plan, memory) = plan_and_allocate(&ctx, &graph);
    let error = Executor::new(&ctx)
        .run(&graph, &TensorMemory::single(&plan, &memory))
        .expect_err("no in-place entry");
    assert_eq!(
        error,
        ExecError::NoInPlaceKernel {
            node: NodeId(1),
            op: "swiglu_oop_only".into()
        }
    );
}

#[test]
fn a_user_gelu_inside_the_decoder_keeps_the_logits() {
    let Some(ctx) = common::gpu() else { return };
    register_op(&ctx, user_gelu("user_gelu")).expect("registers");
    // The per-head form of the decoder (a head width that is not a multiple of 4): its
    // activations are nodes of their own (the fused form folds GELU into a matmul).
    let config = wgalloc::model::ModelConfig {
        width: 24,
        heads: 4,
        ..common::tiny_model(2)
    };
    assert!(!wgalloc::model::fused_layers(&config));
    let model = build_gpt(&config).expect("model");
    let mut graph = model.graph.clone();
    let mut replaced = Vec::new();
    for (step, node) in graph.nodes.iter_mut().enumerate() {
        if node.op == "gelu" {
            node.op = "user_gelu".into();
            replaced.push(step);
        }
    }
    assert_eq!(replaced.len(), 2, "one activation per layer");
    let (plan, activations) = plan_and_allocate(&ctx, &graph);
    let weights_plan = plan_weights(&graph, &storage(&ctx)).expect("weight plan");
    let weights = allocate(&ctx, &weights_plan);
    let mem = TensorMemory::single(&plan, &activations).with_layer(&weights_plan, &weights);
    let mut inputs = HashMap::new();
    inputs.insert(model.tokens, TensorData::U32(model.token_ids()));
    for w in model.weights() {
        inputs.insert(w, TensorData::F32(model.weight_values(w)));
    }
    for (&id, data) in &inputs {
        mem.write(&ctx, &graph, id, &data.to_bytes())
            .expect("write");
    }
    let report = Executor::new(&ctx).run(&graph, &mem).expect("runs");
    // The planner wrote each user GELU over its input, as it does the built-in one.
    for &step in &replaced {
        let node = &graph.nodes[step];
        assert_eq!(
            plan.placements[node.inputs[0].index()],
            plan.placements[node.output.index()],
            "node {step} in place"
        );
    }
    assert!(report.inplace_dispatches >= replaced.len());
    let gpu = mem.read_f32(&ctx, &graph, model.logits).expect("logits");
    // Against the built-in model's own reference (built-in gelu on the CPU) ...
    let builtin = model
        .reference_logits(model.token_ids())
        .expect("reference");
    assert_close("logits vs built-in reference", &gpu, &builtin, 1e-3);
    // ... and against the CPU reference of the graph with the user op.
    let with_user = cpu_ref::evaluate_with(&graph, &inputs, &user_ops(&ctx)).expect("cpu");
    let with_user = with_user[model.logits.index()]
        .as_ref()
        .and_then(|d| d.as_f32())
        .expect("logits");
    assert_close("logits vs user reference", &gpu, with_user, 1e-3);
}

/// Bytes the driver has allocated on `ctx`'s device (Vulkan); `None` elsewhere.
fn driver_bytes(ctx: &GpuContext) -> Option<u64> {
    allocator_report(&ctx.device).map(|r| r.total_allocated_bytes)
}

#[test]
fn every_refusal_is_typed_and_leaves_nothing_registered_or_allocated() {
    if common::gpu().is_none() {
        return;
    }
    // A device of its own: nothing else allocates on it meanwhile.
    let (ctx, _) = common::two_devices_of_one_adapter();
    let before = driver_bytes(&ctx);

    // Registration refusals.
    let broken = SWIGLU.replace("let i = id.x;", "let i = id.x(;");
    match register_op(&ctx, UserOp::new("bad_wgsl", broken, "swiglu", 2)) {
        Err(RegisterError::Parse { at: Some(at), .. }) => assert!(at.line > 1, "{at}"),
        other => panic!("expected a parse error with a position, got {other:?}"),
    }
    let wrong_count = swiglu("wrong_count").bindings(&[Bind::Input(0), Bind::Output]);
    assert!(matches!(
        register_op(&ctx, wrong_count),
        Err(RegisterError::BindingCount { expected: 2, .. })
    ));
    assert!(matches!(
        register_op(&ctx, swiglu("softmax")),
        Err(RegisterError::NameTaken { builtin: true, .. })
    ));
    // More invocations per workgroup than the device allows (each dimension within
    // its own limit).
    let y_size = ctx.limits.max_compute_invocations_per_workgroup / 64 + 1;
    assert!(y_size <= ctx.limits.max_compute_workgroup_size_y);
    let huge = SWIGLU.replace(
        "@workgroup_size(256)",
        &format!("@workgroup_size(64, {y_size})"),
    );
    let error = register_op(&ctx, UserOp::new("huge_group", huge, "swiglu", 2));
    assert!(
        matches!(error, Err(RegisterError::WorkgroupSizeTooLarge { .. })),
        "{error:?}"
    );
    assert!(user_ops(&ctx).is_empty(), "nothing registered");
    register_op(&ctx, swiglu("taken")).expect("registers");
    assert!(matches!(
        register_op(&ctx, swiglu("taken")),
        Err(RegisterError::NameTaken { builtin: false, .. })
    ));
    assert_eq!(user_ops(&ctx).names(), vec!["taken".to_string()]);
    assert_eq!(
        driver_bytes(&ctx),
        before,
        "registration allocates no buffer"
    );

    // Graph refusals, before any submit.
    let (graph, _) = swiglu_graph("never_registered", 4, 64, false);
    let (plan, memory) = plan_and_allocate(&ctx, &graph);
    let mem = TensorMemory::single(&plan, &memory);
    // The executor's own buffers (a timestamp query's, where the device has them)
    // exist before any run.
    let mut exec = Executor::new(&ctx);
    let allocated = driver_bytes(&ctx);
    let error = exec.run(&graph, &mem).expect_err("not registered");
    assert_eq!(
        error,
        ExecError::NoKernel {
            node: NodeId(1),
            op: "never_registered".into()
        }
    );
    let message = error.to_string();
    assert!(
        message.contains("node n1") && message.contains("never_registered"),
        "{message}"
    );
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    let wide = swiglu("too_wide").workgroups(move |_| Ok([1, u64::from(max) + 1, 1]));
    register_op(&ctx, wide).expect("registers");
    let (graph, _) = swiglu_graph("too_wide", 4, 64, false);
    let error = exec.run(&graph, &mem).expect_err("grid over the limit");
    assert_eq!(
        error,
        ExecError::TooManyWorkgroups {
            node: NodeId(1),
            groups: u64::from(max) + 1,
            max
        }
    );
    assert_eq!(exec.workspace_bytes(), 0);
    assert_eq!(
        driver_bytes(&ctx),
        allocated,
        "a refused run allocates nothing (no parameter buffer, no workspace)"
    );
    drop(mem);
    drop(memory);
    ctx.device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
}

/// Records one user-op dispatch by hand: a bind group of the tensors' regions.
fn encode_by_hand(
    ctx: &GpuContext,
    graph: &Graph,
    mem: &TensorMemory<'_>,
    pipeline: &wgpu::ComputePipeline,
    layout: &wgpu::BindGroupLayout,
    node: usize,
) -> wgpu::CommandBuffer {
    let regions: HashMap<TensorId, wgalloc::storage::Region> = mem
        .regions(graph, &ctx.limits)
        .expect("regions")
        .into_iter()
        .collect();
    let n = &graph.nodes[node];
    let len = (graph.tensors[n.output.index()].size / 4) as u32;
    let params = KernelParams {
        ints: [len, 0, 0, 0],
        floats: [0.0; 4],
    };
    let uniform = wgpu::util::DeviceExt::create_buffer_init(
        &ctx.device,
        &wgpu::util::BufferInitDescriptor {
            label: Some("hand params"),
            contents: bytemuck::bytes_of(&params),
            usage: wgpu::BufferUsages::UNIFORM,
        },
    );
    let tensors = [n.inputs[0], n.inputs[1], n.output];
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: uniform.as_entire_binding(),
    }];
    for (k, t) in tensors.iter().enumerate() {
        let region = &regions[t];
        assert_eq!(
            region.offset % u64::from(ctx.limits.min_storage_buffer_offset_alignment),
            0
        );
        entries.push(wgpu::BindGroupEntry {
            binding: k as u32 + 1,
            resource: wgpu::BindingResource::Buffer(region.binding().expect("bindable")),
        });
    }
    let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("hand"),
        layout,
        entries: &entries,
    });
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(len.div_ceil(256), 1, 1);
    }
    encoder.finish()
}

#[test]
fn a_graph_encoded_by_hand_from_regions_matches_and_is_proved() {
    let Some(ctx) = common::gpu() else { return };
    // Four SwiGLU nodes, encoded by hand: h = swiglu(a, b), g = swiglu(c, d),
    // k = swiglu(g, e), y = swiglu(h, k) (h stays live while g and k are made).
    let (rows, cols) = (24u64, 100u64);
    let mut b = GraphBuilder::new("hand");
    let shape = [rows, cols];
    let [a, bb, c, d, e] = ["a", "b", "c", "d", "e"].map(|name| b.input(name, DType::F32, &shape));
    let h = b.node("hand_swiglu", &[a, bb], &shape, false);
    let g = b.node("hand_swiglu", &[c, d], &shape, false);
    let k = b.node("hand_swiglu", &[g, e], &shape, false);
    let y = b.node("hand_swiglu", &[h, k], &shape, false);
    b.mark_output(y);
    let graph = b.build().expect("valid");
    let (plan, memory) = plan_and_allocate(&ctx, &graph);
    let mem = TensorMemory::single(&plan, &memory);
    let len = (rows * cols) as usize;
    let inputs: Vec<Vec<f32>> = (0..5).map(|i| values(len, i as f32 * 1.3)).collect();
    for (id, v) in [a, bb, c, d, e].into_iter().zip(&inputs) {
        mem.write_f32(&ctx, &graph, id, v).expect("write");
    }
    // Your own pipeline: the same WGSL module, your own layout.
    let device = &ctx.device;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("hand swiglu"),
        source: wgpu::ShaderSource::Wgsl(SWIGLU.into()),
    });
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }];
    for binding in 1..=3 {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("hand swiglu"),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("swiglu"),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    });
    let commands: Vec<_> = (0..graph.nodes.len())
        .map(|node| encode_by_hand(&ctx, &graph, &mem, &pipeline, &layout, node))
        .collect();
    ctx.queue.submit(commands);
    let gpu = mem.read_f32(&ctx, &graph, y).expect("read");
    let want: Vec<f32> = (0..len)
        .map(|i| {
            let x = |j: usize| inputs[j][i];
            let h = silu_times(x(0), x(1));
            let k = silu_times(silu_times(x(2), x(3)), x(4));
            silu_times(h, k)
        })
        .collect();
    assert_close("hand-encoded", &gpu, &want, 1e-4);

    // The proof on the same plan and memory.
    let report = prove(&ctx, &graph, &plan, &memory).expect("proof runs");
    assert!(report.verified(), "{report:?}");
    // A plan whose reuse clobbers a live tensor is caught on the same path.
    let mut bad = plan.clone();
    let clobber = wgalloc::plan::inject_clobber(&mut bad, &graph).expect("a pair to clobber");
    let bad_memory = allocate(&ctx, &bad);
    let report = prove(&ctx, &graph, &bad, &bad_memory).expect("proof runs");
    assert!(!report.verified(), "{clobber:?}");
}
