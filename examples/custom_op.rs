//! Your own kernel on planned memory: a SwiGLU MLP block (`gate = x·Wg`, `up = x·Wu`,
//! `h = silu(gate) * up`, `y = h·Wd`) whose SwiGLU is a user op registered with its
//! WGSL, an in-place entry point and a CPU reference.
//!
//! (For a graph of your own ops end to end with less code, see `examples/engine_mlp.rs`
//! and its `Session`.)
//!
//! 1. The executor runs it beside the built-in matmuls in one pass on planned memory
//!    (in place over `gate`, as the plan asks), checked against the CPU reference and
//!    proved by the checksum run.
//! 2. The same graph encoded by hand: every planned tensor's bindable region from
//!    `TensorMemory::regions`, the engine's own pipelines, bind groups and pass, then
//!    the checksum proof on the same plan and memory.
//!
//! ```sh
//! WGPU_BACKEND=vulkan cargo run --release --example custom_op
//! ```

use std::collections::HashMap;

use wgalloc::device::{allocate_plan, GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE};
use wgalloc::exec::checksum::prove;
use wgalloc::exec::cpu_ref;
use wgalloc::exec::TensorData;
use wgalloc::exec::{register_op, user_ops, Bind, Executor, KernelParams, TensorMemory, UserOp};
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};
use wgalloc::plan::{plan, plan_weights, Plan, PlanOptions};
use wgalloc::storage::Region;

/// The user op: `out = silu(gate) * up`, out of place (`swiglu`) and in place over
/// `gate` (`swiglu_inplace`): a WGSL module of its own (its parameter block at binding
/// 0, its buffers at 1..=3).
const SWIGLU: &str = include_str!("shaders/swiglu.wgsl");

/// The hand-encoded path's own matmul (one thread per output element): an engine's
/// kernel that wgalloc never sees. `params` is `[m, k, n, 0]`.
const MATMUL: &str = "struct Params {
    m: u32,
    k: u32,
    n: u32,
    unused0: u32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(8, 8)
fn naive_matmul(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.y;
    let col = id.x;
    if row >= params.m || col >= params.n {
        return;
    }
    var sum = 0.0;
    for (var i = 0u; i < params.k; i++) {
        sum += a[row * params.k + i] * b[i * params.n + col];
    }
    c[row * params.n + col] = sum;
}
";

fn silu_times(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

fn swiglu_op() -> UserOp {
    UserOp::new("swiglu", SWIGLU, "swiglu", 2)
        .inplace("swiglu_inplace", &[Bind::Input(0), Bind::Input(1)])
        .check(|s| {
            let (gate, up) = (s.input(0)?, s.input(1)?);
            if gate == up && gate == s.output() {
                Ok(())
            } else {
                Err(format!("gate {gate:?}, up {up:?} and out {:?} differ", s.output()).into())
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

/// The graph's tensors the example reads or writes.
struct Block {
    graph: Graph,
    x: TensorId,
    weights: [TensorId; 3],
    gate: TensorId,
    up: TensorId,
    h: TensorId,
    y: TensorId,
}

fn block(seq: u64, d: u64, f: u64) -> Result<Block, Box<dyn std::error::Error>> {
    let mut b = GraphBuilder::new("swiglu-mlp");
    let x = b.input("x", DType::F32, &[seq, d]);
    let wg = b.weight("w_gate", DType::F32, &[d, f]);
    let wu = b.weight("w_up", DType::F32, &[d, f]);
    let wd = b.weight("w_down", DType::F32, &[f, d]);
    let gate = b.node("matmul", &[x, wg], &[seq, f], false);
    let up = b.node("matmul", &[x, wu], &[seq, f], false);
    let h = b.node("swiglu", &[gate, up], &[seq, f], true);
    let y = b.node("matmul", &[h, wd], &[seq, d], false);
    for (t, name) in [(gate, "gate"), (up, "up"), (h, "h"), (y, "y")] {
        b.rename(t, name);
    }
    b.mark_output(y);
    Ok(Block {
        graph: b.build()?,
        x,
        weights: [wg, wu, wd],
        gate,
        up,
        h,
        y,
    })
}

fn max_error(gpu: &[f32], cpu: &[f32]) -> f32 {
    if gpu.len() != cpu.len() {
        return f32::INFINITY;
    }
    gpu.iter()
        .zip(cpu)
        .fold(0f32, |m, (g, c)| m.max((g - c).abs()))
}

/// One storage-and-uniform bind-group layout with `storage` read-write bindings.
fn layout(device: &wgpu::Device, storage: u32) -> wgpu::BindGroupLayout {
    let buffer = |ty| wgpu::BindingType::Buffer {
        ty,
        has_dynamic_offset: false,
        min_binding_size: None,
    };
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: buffer(wgpu::BufferBindingType::Uniform),
        count: None,
    }];
    for binding in 1..=storage {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: buffer(wgpu::BufferBindingType::Storage { read_only: false }),
            count: None,
        });
    }
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &entries,
    })
}

fn pipeline(
    device: &wgpu::Device,
    source: &str,
    entry: &str,
    layout: &wgpu::BindGroupLayout,
) -> wgpu::ComputePipeline {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(entry),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(layout)],
        immediate_size: 0,
    });
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    })
}

/// Records the whole graph by hand into one pass over the planned regions.
fn encode_by_hand(
    ctx: &GpuContext,
    blk: &Block,
    regions: &HashMap<TensorId, Region>,
) -> Result<(wgpu::CommandBuffer, bool), Box<dyn std::error::Error>> {
    let device = &ctx.device;
    let three = layout(device, 3);
    let two = layout(device, 2);
    let matmul = pipeline(device, MATMUL, "naive_matmul", &three);
    let mut dispatches = Vec::new();
    let mut inplace = false;
    for node in &blk.graph.nodes {
        let shape = |t: TensorId| blk.graph.tensors[t.index()].shape.clone();
        let out_len = shape(node.output).iter().product::<u64>() as u32;
        let mut bound: Vec<TensorId> = node.inputs.clone();
        let (pipe, group_layout, params, grid) = if node.op == "matmul" {
            let (a, b) = (shape(node.inputs[0]), shape(node.inputs[1]));
            let (m, k, n) = (a[0] as u32, a[1] as u32, b[1] as u32);
            bound.push(node.output);
            let grid = [n.div_ceil(8), m.div_ceil(8), 1];
            (matmul.clone(), &three, [m, k, n, 0], grid)
        } else {
            // The plan puts h over gate: bind the one range once, in place.
            let (out, first) = (&regions[&node.output], &regions[&node.inputs[0]]);
            inplace = out.buffer == first.buffer && out.offset == first.offset;
            let (entry, group_layout) = if inplace {
                ("swiglu_inplace", &two)
            } else {
                bound.push(node.output);
                ("swiglu", &three)
            };
            let pipe = pipeline(device, SWIGLU, entry, group_layout);
            (
                pipe,
                group_layout,
                [out_len, 0, 0, 0],
                [out_len.div_ceil(256), 1, 1],
            )
        };
        let uniform = wgpu::util::DeviceExt::create_buffer_init(
            device,
            &wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: bytemuck::bytes_of(&KernelParams {
                    ints: params,
                    floats: [0.0; 4],
                }),
                usage: wgpu::BufferUsages::UNIFORM,
            },
        );
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        for (k, t) in bound.iter().enumerate() {
            let binding = regions[t].binding().ok_or("an empty region")?;
            entries.push(wgpu::BindGroupEntry {
                binding: k as u32 + 1,
                resource: wgpu::BindingResource::Buffer(binding),
            });
        }
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: group_layout,
            entries: &entries,
        });
        dispatches.push((pipe, group, grid));
    }
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("hand-encoded"),
    });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        for (pipe, group, [x, y, z]) in &dispatches {
            pass.set_pipeline(pipe);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(*x, *y, *z);
        }
    }
    Ok((encoder.finish(), inplace))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = match GpuContext::from_env() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter ({e})");
            return Ok(());
        }
    };
    println!("adapter: {}", wgalloc::device::describe_adapter(&ctx.info));
    register_op(&ctx, swiglu_op())?;
    println!(
        "registered user op: {:?} (checked by naga)",
        user_ops(&ctx).names()
    );

    let (seq, d, f) = (32u64, 64u64, 176u64);
    let blk = block(seq, d, f)?;
    let graph = &blk.graph;
    let storage = ctx.buffer_types()?.storage.desc;
    let plan: Plan = plan(
        graph,
        std::slice::from_ref(&storage),
        &PlanOptions::default(),
    )?;
    plan.verify(graph)?;
    let weights_plan = plan_weights(graph, &storage)?;
    let buffers = WgpuStorage::shared(&ctx);
    let activations: PlannedMemory = allocate_plan(&ctx, &plan, STORAGE_USAGE, &buffers)?;
    let weights = allocate_plan(&ctx, &weights_plan, STORAGE_USAGE, &buffers)?;
    let memory = TensorMemory::single(&plan, &activations).with_layer(&weights_plan, &weights);

    let mut values = HashMap::new();
    // Seeded values in [-0.5, 0.5) (a 64-bit LCG).
    let fill = |len: u64, seed: u64| -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    };
    values.insert(blk.x, TensorData::F32(fill(seq * d, 1)));
    for (i, &w) in blk.weights.iter().enumerate() {
        let len = graph.tensors[w.index()].size / 4;
        values.insert(w, TensorData::F32(fill(len, 2 + i as u64)));
    }
    let write_all = |memory: &TensorMemory<'_>| -> Result<(), Box<dyn std::error::Error>> {
        for (&id, data) in &values {
            memory.write(&ctx, graph, id, &data.to_bytes())?;
        }
        Ok(())
    };
    let cpu = cpu_ref::evaluate_with(graph, &values, &user_ops(&ctx))?;
    let reference = cpu[blk.y.index()]
        .as_ref()
        .and_then(TensorData::as_f32)
        .ok_or("no reference for y")?
        .to_vec();
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    println!(
        "graph: {} nodes, activations planned in {} bytes (h over gate: {})",
        graph.nodes.len(),
        plan.total_size(),
        plan.placement(blk.h) == plan.placement(blk.gate)
    );

    // 1. The executor: built-in matmuls and the user op in one pass.
    write_all(&memory)?;
    let run = Executor::new(&ctx).run(graph, &memory)?;
    let gpu = memory.read_f32(&ctx, graph, blk.y)?;
    let error = max_error(&gpu, &reference);
    println!(
        "executor: {} dispatches in one pass, {} in place; max |gpu - cpu| = {error:.2e} (max |y| = {scale:.2})",
        run.dispatches, run.inplace_dispatches
    );
    let proof = prove(&ctx, graph, &plan, &activations)?;
    println!(
        "  checksum proof: {} ({} checks over {} nodes)",
        if proof.verified() {
            "verified"
        } else {
            "FAILED"
        },
        proof.checks,
        proof.nodes
    );

    // 2. By hand: the regions, your own pipelines and pass, then the same proof.
    write_all(&memory)?;
    let regions: HashMap<TensorId, Region> =
        memory.regions(graph, &ctx.limits)?.into_iter().collect();
    for t in [blk.gate, blk.up, blk.h] {
        let r = &regions[&t];
        println!(
            "  region of {:>6}: offset {:>6}, {:>6} bytes (alignment {} checked)",
            graph.tensors[t.index()].name,
            r.offset,
            r.size,
            ctx.limits.min_storage_buffer_offset_alignment
        );
    }
    let (commands, inplace) = encode_by_hand(&ctx, &blk, &regions)?;
    ctx.queue.submit([commands]);
    let by_hand = memory.read_f32(&ctx, graph, blk.y)?;
    let hand_error = max_error(&by_hand, &reference);
    println!(
        "hand-encoded: {} dispatches, swiglu in place: {inplace}; max |gpu - cpu| = {hand_error:.2e}",
        graph.nodes.len()
    );
    let hand_proof = prove(&ctx, graph, &plan, &activations)?;
    println!(
        "  checksum proof: {}",
        if hand_proof.verified() {
            "verified"
        } else {
            "FAILED"
        }
    );
    let tolerance = 1e-3 * scale.max(1.0);
    if error > tolerance || hand_error > tolerance || !proof.verified() || !hand_proof.verified() {
        return Err("a result differs from the CPU reference or a proof failed".into());
    }
    Ok(())
}
