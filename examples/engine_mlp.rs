//! An engine adopts wgalloc: its own wgpu device, its own WGSL kernels (matmul, relu,
//! add, `shaders/engine.wgsl`), a 3-layer residual MLP with weights
//! (`x += relu(x·W1)·W2`, x 64x256, W1 256x1024, W2 1024x256), planned, allocated,
//! run, compared with the same computation on the CPU and proved on the GPU.
//!
//! The wgalloc-facing code is [`mlp_on_wgalloc`]: registering the kernels, the graph,
//! the session, writes, the run, the read and the proof. Everything else is the
//! engine's (its device, its data, its CPU check).
//!
//! ```sh
//! cargo run --release --example engine_mlp
//! ```

use wgalloc::exec::{register_op, Bind, OpShapes, UserOp};
use wgalloc::graph::{DType, GraphBuilder};
use wgalloc::{GpuContext, PlanOptions, Session};

/// The engine's kernels: plain WGSL, each entry point declaring its own bindings.
const KERNELS: &str = include_str!("shaders/engine.wgsl");
/// Rows of x.
const SEQ: u64 = 64;
/// Width of x.
const D: u64 = 256;
/// Hidden width.
const F: u64 = 1024;
/// Residual layers.
const LAYERS: usize = 3;

/// What the engine gets back: the output, planned bytes, naive bytes, whether the
/// proof verified.
struct Outcome(Vec<f32>, u64, u64, bool);

/// The whole wgalloc side (with the three `use` lines and `GpuContext::adopt` in
/// [`engine_device`]: 40 lines).
fn mlp_on_wgalloc(ctx: &GpuContext, x: &[f32], w: &[Vec<f32>]) -> wgalloc::Result<Outcome> {
    let matmul = UserOp::new("eng_matmul", KERNELS, "matmul", 2).params(|s: &OpShapes| {
        let ([m, k], [_, n]) = (s.dims(0)?, s.dims(1)?);
        Ok([OpShapes::u32(m)?, OpShapes::u32(k)?, OpShapes::u32(n)?, 0])
    });
    let (one, two) = ([Bind::Input(0)], [Bind::Input(0), Bind::Input(1)]);
    let relu = UserOp::new("eng_relu", KERNELS, "relu", 1).inplace("relu_inplace", &one);
    let add = UserOp::new("eng_add", KERNELS, "add", 2).inplace("add_inplace", &two);
    for op in [matmul, relu, add] {
        register_op(ctx, op)?;
    }
    let mut b = GraphBuilder::new("residual-mlp");
    let input = b.input("x", DType::F32, &[SEQ, D]);
    let (mut h, mut weights) = (input, Vec::new());
    for l in 0..LAYERS {
        let w1 = b.weight(format!("w1.{l}"), DType::F32, &[D, F]);
        let w2 = b.weight(format!("w2.{l}"), DType::F32, &[F, D]);
        let up = b.node("eng_matmul", &[h, w1], &[SEQ, F], false);
        let act = b.node("eng_relu", &[up], &[SEQ, F], true);
        let down = b.node("eng_matmul", &[act, w2], &[SEQ, D], false);
        h = b.node("eng_add", &[down, h], &[SEQ, D], true);
        weights.extend([w1, w2]);
    }
    b.mark_output(h);
    let graph = b.build()?;
    let naive = wgalloc::plan::naive_size(&graph);
    let mut session = Session::new(ctx, graph, &PlanOptions::default())?;
    for (&id, values) in weights.iter().zip(w) {
        session.write(id, values)?;
    }
    session.write(input, x)?;
    session.run()?;
    let (y, planned) = (session.read(h)?, session.plan().total_size());
    let proved = session.prove()?.verified();
    Ok(Outcome(y, planned, naive, proved))
}

/// The engine's own device (here: the first adapter, with its own limits).
fn engine_device() -> Result<GpuContext, Box<dyn std::error::Error>> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all());
    let instance = wgpu::Instance::new(desc);
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("engine"),
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;
    Ok(GpuContext::adopt(device, queue, adapter.get_info()))
}

/// Seeded values in [-scale, scale).
fn values(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// `a[m, k] · b[k, n]` on the CPU.
fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p];
            for j in 0..n {
                c[i * n + j] += av * b[p * n + j];
            }
        }
    }
    c
}

/// The same MLP on the CPU.
fn mlp_on_cpu(x: &[f32], w: &[Vec<f32>]) -> Vec<f32> {
    let (seq, d, f) = (SEQ as usize, D as usize, F as usize);
    let mut h = x.to_vec();
    for pair in w.chunks(2) {
        let act: Vec<f32> = matmul(&h, &pair[0], seq, d, f)
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        let down = matmul(&act, &pair[1], seq, f, d);
        h.iter_mut().zip(down).for_each(|(h, v)| *h += v);
    }
    h
}

/// Builds the device, runs the MLP on wgalloc and on the CPU, and fails unless they
/// agree and the plan is proved.
pub fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = engine_device()?;
    println!("adapter: {}", wgalloc::device::describe_adapter(&ctx.info));
    let x = values((SEQ * D) as usize, 1, 1.0);
    let w: Vec<Vec<f32>> = (0..2 * LAYERS)
        .map(|i| {
            let (rows, cols) = if i % 2 == 0 { (D, F) } else { (F, D) };
            values(
                (rows * cols) as usize,
                2 + i as u64,
                1.0 / (rows as f32).sqrt(),
            )
        })
        .collect();
    let Outcome(y, planned, naive, proved) = mlp_on_wgalloc(&ctx, &x, &w)?;
    let cpu = mlp_on_cpu(&x, &w);
    let scale = cpu.iter().fold(1f32, |m, v| m.max(v.abs()));
    let error = y
        .iter()
        .zip(&cpu)
        .fold(0f32, |m, (g, c)| m.max((g - c).abs()));
    println!(
        "activations: {} B planned ({} B naive); max |gpu - cpu| = {error:.2e} (max |y| {scale:.2}); proof: {}",
        planned,
        naive,
        if proved { "verified" } else { "FAILED" }
    );
    if y.len() != cpu.len() || error > 1e-4 * scale || !proved {
        return Err("the GPU result differs from the CPU or the proof failed".into());
    }
    Ok(())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    run()
}
