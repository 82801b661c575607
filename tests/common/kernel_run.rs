//! Runs a graph on the GPU and on the CPU for the kernel tests (`gpu_kernels.rs`,
//! `gpu_fused_kernels.rs`), and compares the two within a tolerance.

use std::collections::HashMap;

use wgalloc::device::{allocate_plan, GpuContext, WgpuStorage, STORAGE_USAGE};
use wgalloc::exec::cpu_ref;
use wgalloc::exec::TensorData;
use wgalloc::exec::{Executor, TensorMemory};
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};
use wgalloc::model::SeededRng;
use wgalloc::plan::{plan_graph, plan_weights};

/// `len` seeded values in `[-scale, scale)`.
pub fn random(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut rng = SeededRng::new(seed);
    (0..len).map(|_| rng.next_signed() * scale).collect()
}

/// Plans the graph's activations with the ggml planner in the device's storage buffer
/// type (a node flagged in place runs over its dying first input) and its weights with
/// the context planner, allocates both, writes the values as the tensors store them
/// (f32 or f16), runs it on the GPU and on the CPU; returns (gpu, cpu) values of the
/// last node's output.
pub fn run_both(
    ctx: &GpuContext,
    graph: &Graph,
    values: &HashMap<TensorId, TensorData>,
) -> (Vec<f32>, Vec<f32>) {
    let storage = ctx.buffer_types().expect("buffer types").storage.desc;
    let plan = plan_graph(graph, &storage).expect("plan");
    plan.verify(graph).expect("the plan verifies");
    assert_eq!(
        plan.inplace.len(),
        graph.nodes.iter().filter(|n| n.inplace).count(),
        "every node flagged in place is paired with its input"
    );
    let weights = plan_weights(graph, &storage).expect("weight plan");
    weights
        .verify_placed(graph)
        .expect("the weight plan verifies");
    let allocate =
        |p| allocate_plan(ctx, p, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("allocate");
    let (memory, weight_memory) = (allocate(&plan), allocate(&weights));
    let tm = TensorMemory::single(&plan, &memory).with_layer(&weights, &weight_memory);
    for (&id, data) in values {
        match data {
            // Floats as the tensor stores them (f32, or rounded to f16).
            TensorData::F32(v) => tm.write_f32(ctx, graph, id, v),
            other => tm.write(ctx, graph, id, &other.to_bytes()),
        }
        .expect("upload");
    }
    let mut exec = Executor::new(ctx);
    let report = exec.run(graph, &tm).expect("run");
    assert_eq!(report.dispatches, graph.nodes.len());
    assert_eq!(report.inplace_dispatches, plan.inplace.len());
    let out = graph.nodes.last().expect("a node").output;
    let gpu = tm.read_f32(ctx, graph, out).expect("readback");
    let cpu = cpu_ref::evaluate(graph, values).expect("cpu")[out.index()]
        .clone()
        .and_then(|d| d.as_f32().map(<[f32]>::to_vec))
        .expect("cpu value");
    (gpu, cpu)
}

/// |gpu − cpu| ≤ `tol` · (1 + |cpu|) for every element, named `what` on failure.
pub fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            (g - c).abs() <= tol * (1.0 + c.abs()),
            "{what}: element {i}: gpu {g} cpu {c} (tol {tol})"
        );
    }
}

/// One `matmul` (`a[m,k] x w[k,n]`) or `matmul_bt` (`a[m,k] x w[n,k]^T`) node on seeded
/// inputs, run on the GPU and the CPU and compared within 1e-4.
pub fn check_matmul(ctx: &GpuContext, op: &str, m: u64, k: u64, n: u64) {
    let mut b = GraphBuilder::new(op);
    let a = b.input("a", DType::F32, &[m, k]);
    let w_shape = if op == "matmul" { [k, n] } else { [n, k] };
    let w = b.weight("w", DType::F32, &w_shape);
    b.node(op, &[a, w], &[m, n], false);
    let g = b.build().expect("valid");
    let mut values = HashMap::new();
    values.insert(a, TensorData::F32(random(m * k, (m * k) as usize, 1.0)));
    values.insert(w, TensorData::F32(random(k * n + 5, (k * n) as usize, 1.0)));
    let (gpu, cpu) = run_both(ctx, &g, &values);
    assert_close(&format!("{op} {m}x{k}x{n}"), &gpu, &cpu, 1e-4);
}
