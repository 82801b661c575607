//! Inputs have one shape: the same `wgalloc::Inputs` map (tensor → values) feeds the CPU
//! reference, a graph context, a stream and plain tensor memory, and all four agree.

mod common;

use wgalloc::device::{allocate_plan, WgpuStorage};
use wgalloc::exec::cpu_ref;
use wgalloc::exec::Inputs;
use wgalloc::exec::TensorData;
use wgalloc::graph::{DType, GraphBuilder};
use wgalloc::plan::{plan_graph, plan_weights, Planner};
use wgalloc::runtime::GraphContext;
use wgalloc::storage::STORAGE_USAGE;
use wgalloc::stream::{ExecuteRequest, Stream};
use wgalloc::{Executor, TensorMemory};

#[test]
fn one_inputs_map_feeds_every_runner_and_they_agree() {
    let Some(gpu) = common::gpu() else { return };
    let mut b = GraphBuilder::new("one-shape");
    let x = b.input("x", DType::F32, &[4, 8]);
    let w = b.weight("w", DType::F32, &[8, 8]);
    let h = b.node("matmul", &[x, w], &[4, 8], false);
    let y = b.node("softmax", &[h], &[4, 8], false);
    b.mark_output(y);
    let graph = b.build().expect("graph");
    let inputs: Inputs = [
        (
            x,
            TensorData::F32((0..32).map(|i| (i % 7) as f32 / 7.0).collect()),
        ),
        (
            w,
            TensorData::F32((0..64).map(|i| (i % 5) as f32 / 10.0 - 0.2).collect()),
        ),
    ]
    .into_iter()
    .collect();

    let want = cpu_ref::evaluate(&graph, &inputs).expect("cpu")[y.index()]
        .clone()
        .expect("y");
    let want = want.as_f32().expect("f32").to_vec();
    let close = |got: &[f32], who: &str| {
        assert_eq!(got.len(), want.len(), "{who}");
        for (g, c) in got.iter().zip(&want) {
            assert!((g - c).abs() <= 1e-4 * (1.0 + c.abs()), "{who}: {g} vs {c}");
        }
    };

    let mut context = GraphContext::new(graph.clone(), Planner::Ggml).expect("context");
    let run = context.execute(&gpu, &inputs).expect("graph context runs");
    close(&run.read_f32(&gpu, y).expect("read"), "graph context");

    // Activations in one plan, the weight in a layer of its own; the same map writes
    // both.
    let storage = gpu.buffer_types().expect("types").storage.desc;
    let plan = plan_graph(&graph, &storage).expect("plan");
    let weight_plan = plan_weights(&graph, &storage).expect("weight plan");
    let weights = allocate_plan(
        &gpu,
        &weight_plan,
        STORAGE_USAGE,
        &WgpuStorage::shared(&gpu),
    )
    .expect("weights");
    let mut stream = Stream::new(&gpu, "one-shape");
    let request = ExecuteRequest::new(&graph, &plan)
        .inputs(&inputs)
        .layer(&weight_plan, &weights)
        .read_back(y);
    let id = stream.execute(&request).expect("stream runs");
    stream.synchronize().expect("sync");
    let result = stream.take_result(id).expect("result");
    close(&result.output_f32(y).expect("y"), "stream");

    let memory =
        allocate_plan(&gpu, &plan, STORAGE_USAGE, &WgpuStorage::shared(&gpu)).expect("alloc");
    let tensors = TensorMemory::single(&plan, &memory).with_layer(&weight_plan, &weights);
    tensors.write_inputs(&gpu, &graph, &inputs).expect("write");
    Executor::new(&gpu).run(&graph, &tensors).expect("runs");
    close(
        &tensors.read_f32(&gpu, &graph, y).expect("read"),
        "tensor memory",
    );
}
