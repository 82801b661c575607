//! GPU tests of graph contexts with user allocation callbacks: results match the CPU
//! reference, the data-dependent graph grows its workspace through realloc, and a
//! counting allocator under every callback shows each block released exactly once.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wgalloc::device::{GpuContext, WgpuStorage};
use wgalloc::exec::TensorData;
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};
use wgalloc::plan::Planner;
use wgalloc::runtime::{
    evaluate, BlockPool, CallbackError, GraphContext, MemoryRole, ReallocFn, RuntimeError,
};
use wgalloc::storage::{CountingStorage, Region, StorageReport};

type Pool = BlockPool<CountingStorage<WgpuStorage>>;

fn pool(gpu: &GpuContext) -> Arc<Pool> {
    BlockPool::new(CountingStorage::new(WgpuStorage::wgpu(gpu)))
}

/// Every block the pool's storage handed out went back exactly once.
fn assert_balanced(pool: &Pool) {
    let report: StorageReport = pool.storage().report();
    assert!(report.allocations > 0, "nothing was allocated: {report:?}");
    assert_eq!(report.allocations, report.frees, "{report:?}");
    assert_eq!(report.bad_frees, 0, "{report:?}");
    assert_eq!(report.live_bytes, 0, "{report:?}");
    assert_eq!(pool.calls().unknown_releases, 0, "double free");
    assert_eq!(pool.outstanding(), 0);
}

/// A context for `graph` on the default (ggml) planner.
fn context(graph: Graph) -> GraphContext {
    GraphContext::new(graph, Planner::Ggml).expect("valid")
}

/// Gives `ctx`'s workspace to `pool` (realloc, free-all and user context).
fn workspace_from(ctx: &mut GraphContext, pool: &Arc<Pool>) {
    workspace_through(ctx, pool, |realloc| realloc);
}

/// Gives `ctx`'s outputs to `pool`.
fn outputs_from(ctx: &mut GraphContext, pool: &Arc<Pool>) {
    let (r, f, u) = pool.callbacks();
    ctx.set_output_allocation(Some(r), Some(f), Some(u))
        .expect("set");
}

/// Gives `ctx`'s workspace to `pool`, with every realloc going through `wrap` first.
fn workspace_through(
    ctx: &mut GraphContext,
    pool: &Arc<Pool>,
    wrap: impl FnOnce(ReallocFn) -> ReallocFn,
) {
    let (inner, free_all, user) = pool.callbacks();
    ctx.set_workspace_allocation(Some(wrap(inner)), Some(free_all), Some(user))
        .expect("set");
}

/// The input values of a graph with one f32 input `x`.
fn values_of(x: TensorId, v: Vec<f32>) -> HashMap<TensorId, TensorData> {
    [(x, TensorData::F32(v))].into_iter().collect()
}

/// x [rows, k] · w [k, n] → gelu → + bias → softmax: a small static graph with weights.
fn mlp() -> (Graph, HashMap<TensorId, TensorData>, TensorId) {
    let (rows, k, n) = (8u64, 32u64, 16u64);
    let mut b = GraphBuilder::new("mlp");
    let x = b.input("x", DType::F32, &[rows, k]);
    let w = b.weight("w", DType::F32, &[k, n]);
    let bias = b.weight("bias", DType::F32, &[n]);
    let h = b.node("matmul", &[x, w], &[rows, n], false);
    let a = b.node("gelu", &[h], &[rows, n], true);
    let s = b.node("add", &[a, bias], &[rows, n], true);
    let y = b.node("softmax", &[s], &[rows, n], false);
    b.mark_output(y);
    let graph = b.build().expect("valid");
    let wave = |len: u64, f: f32| (0..len).map(|i| ((i as f32) * f).sin()).collect();
    let values = [
        (x, TensorData::F32(wave(rows * k, 0.37))),
        (w, TensorData::F32(wave(k * n, 0.11))),
        (bias, TensorData::F32(wave(n, 0.7))),
    ]
    .into_iter()
    .collect();
    (graph, values, y)
}

/// x → count_positive → compact(x) → scale → add(·, itself scaled): every length after
/// the count is data-dependent and unbounded.
fn compacting(len: u64) -> (Graph, TensorId, TensorId) {
    let mut b = GraphBuilder::new("compacting");
    let x = b.input("x", DType::F32, &[len]);
    let pre = b.node("scale", &[x], &[len], false);
    let count = b.node("count_positive", &[pre], &[1], false);
    let kept = b.dynamic_node("compact", &[pre, count], count, None, &[]);
    let scaled = b.dynamic_node("scale", &[kept], count, None, &[3.0]);
    let y = b.dynamic_node("add", &[scaled, kept], count, None, &[]);
    b.mark_output(y);
    let graph = b.build().expect("valid");
    // `pre` = 1 * x, written with params below.
    let mut graph = graph;
    graph.nodes[0].params = vec![1.0];
    (graph, x, y)
}

fn signed_values(len: u64, seed: u64) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 - 400.0) / 100.0)
        .collect()
}

fn close(gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len());
    for (i, (a, b)) in gpu.iter().zip(cpu).enumerate() {
        assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{i}: {a} vs {b}");
    }
}

fn reference(graph: &Graph, values: &HashMap<TensorId, TensorData>, out: TensorId) -> Vec<f32> {
    let (_, result) = evaluate(graph, values).expect("reference");
    result[out.index()]
        .as_ref()
        .and_then(|d| d.as_f32())
        .expect("computed")
        .to_vec()
}

#[test]
fn a_static_graph_with_user_callbacks_matches_the_cpu_and_frees_everything_once() {
    let gpu = require_gpu!();
    let (graph, values, y) = mlp();
    let expected = reference(&graph, &values, y);
    let workspace = pool(&gpu);
    let outputs = pool(&gpu);
    let mut ctx = context(graph);
    workspace_from(&mut ctx, &workspace);
    outputs_from(&mut ctx, &outputs);
    for _ in 0..2 {
        let run = ctx.execute(&gpu, &values).expect("runs");
        assert_eq!(run.phases, 1);
        close(&run.read_f32(&gpu, y).expect("reads"), &expected);
    }
    // The second run reused the blocks of the first.
    assert_eq!(workspace.calls().reallocs, 1);
    assert_eq!(outputs.calls().reallocs, 1);
    drop(ctx);
    assert_eq!(
        (workspace.calls().free_alls, outputs.calls().free_alls),
        (1, 1)
    );
    assert_balanced(&workspace);
    assert_balanced(&outputs);
}

#[test]
fn the_default_allocator_runs_the_same_graph() {
    let gpu = require_gpu!();
    let (graph, values, y) = mlp();
    let expected = reference(&graph, &values, y);
    let mut ctx = context(graph);
    let run = ctx.execute(&gpu, &values).expect("runs");
    close(&run.read_f32(&gpu, y).expect("reads"), &expected);
    assert!(run.workspace_bytes > 0 && run.output_bytes > 0);
}

#[test]
fn a_shared_user_context_gets_one_free_all_for_workspace_and_outputs() {
    let gpu = require_gpu!();
    let (graph, values, y) = mlp();
    let shared = pool(&gpu);
    let mut ctx = context(graph);
    workspace_from(&mut ctx, &shared);
    outputs_from(&mut ctx, &shared);
    let run = ctx.execute(&gpu, &values).expect("runs");
    assert!(run.read_f32(&gpu, y).is_ok());
    drop(ctx);
    assert_eq!(shared.calls().free_alls, 1);
    assert_balanced(&shared);
}

#[test]
fn the_data_dependent_graph_grows_its_workspace_through_realloc_and_matches_the_cpu() {
    let gpu = require_gpu!();
    let len = 5000;
    let (graph, x, y) = compacting(len);
    let workspace = pool(&gpu);
    let sizes = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let seen = sizes.clone();
    let mut ctx = context(graph.clone());
    workspace_through(&mut ctx, &workspace, |inner| {
        Box::new(move |request| {
            if let Ok(mut s) = seen.lock() {
                s.push((request.new_size, request.old_used));
            }
            inner(request)
        })
    });
    for seed in [1, 2] {
        let values = values_of(x, signed_values(len, seed));
        let expected = reference(&graph, &values, y);
        let run = ctx.execute(&gpu, &values).expect("runs");
        assert_eq!(run.phases, 2);
        assert!(run.workspace_per_phase[1] > run.workspace_per_phase[0]);
        let got = run.read_f32(&gpu, y).expect("reads");
        assert!(!expected.is_empty() && (expected.len() as u64) < len);
        close(&got, &expected);
    }
    let calls = sizes.lock().expect("not poisoned").clone();
    eprintln!("workspace reallocs (new_size, old_used): {calls:?}");
    // First run: phase 1 from nothing, then grown for phase 2 keeping phase 1's bytes.
    assert!(calls.len() >= 2, "{calls:?}");
    assert_eq!(calls[0].1, 0);
    assert!(calls[1].0 > calls[0].0, "{calls:?}");
    assert!(
        calls[1].1 > 0,
        "the grown block must keep live bytes: {calls:?}"
    );
    drop(ctx);
    assert_balanced(&workspace);
}

#[test]
fn release_workspace_makes_the_next_execution_realloc_from_nothing() {
    let gpu = require_gpu!();
    let (graph, values, y) = mlp();
    let olds = Arc::new(Mutex::new(Vec::<bool>::new()));
    let workspace = pool(&gpu);
    let seen = olds.clone();
    let mut ctx = context(graph);
    workspace_through(&mut ctx, &workspace, |inner| {
        Box::new(move |request| {
            if let Ok(mut s) = seen.lock() {
                s.push(request.old.is_some());
            }
            inner(request)
        })
    });
    ctx.execute(&gpu, &values).expect("runs");
    ctx.release_workspace();
    assert_eq!(ctx.workspace_bytes(), 0);
    assert_eq!(workspace.outstanding(), 0);
    let run = ctx.execute(&gpu, &values).expect("runs again");
    assert!(run.read_f32(&gpu, y).is_ok());
    assert_eq!(*olds.lock().expect("not poisoned"), vec![false, false]);
    drop(ctx);
    assert_eq!(workspace.calls().free_alls, 2);
    assert_balanced(&workspace);
}

#[test]
fn a_failing_realloc_is_a_typed_error_and_the_context_stays_usable() {
    let gpu = require_gpu!();
    let (graph, values, y) = mlp();
    let expected = reference(&graph, &values, y);
    let workspace = pool(&gpu);
    let failures = Arc::new(AtomicU64::new(1));
    let left = failures.clone();
    let mut ctx = context(graph);
    workspace_through(&mut ctx, &workspace, |inner| {
        Box::new(move |request| {
            if left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
                .is_ok()
            {
                return Err(CallbackError::new("pool exhausted"));
            }
            inner(request)
        })
    });
    match ctx.execute(&gpu, &values) {
        Err(RuntimeError::Callback {
            role: MemoryRole::Workspace,
            source,
            size,
            ..
        }) => {
            assert_eq!(source.message, "pool exhausted");
            assert!(size > 0);
        }
        other => panic!("{other:?}"),
    }
    let run = ctx
        .execute(&gpu, &values)
        .expect("usable after the failure");
    close(&run.read_f32(&gpu, y).expect("reads"), &expected);
    drop(ctx);
    assert_balanced(&workspace);
}

#[test]
fn a_realloc_that_returns_less_than_asked_is_refused_and_leaks_nothing() {
    let gpu = require_gpu!();
    let (graph, values, _) = mlp();
    let workspace = pool(&gpu);
    let mut ctx = context(graph);
    workspace_through(&mut ctx, &workspace, |inner| {
        Box::new(move |mut request| {
            request.new_size = (request.new_size / 2).max(4) & !3;
            inner(request)
        })
    });
    match ctx.execute(&gpu, &values) {
        Err(RuntimeError::ShortBlock {
            role: MemoryRole::Workspace,
            requested,
            got,
            ..
        }) => assert!(got < requested),
        other => panic!("{other:?}"),
    }
    assert_eq!(ctx.workspace_bytes(), 0);
    drop(ctx);
    assert_eq!(workspace.calls().free_alls, 1);
    assert_balanced(&workspace);
}

#[test]
fn a_workspace_above_the_adapter_limit_is_refused_before_any_realloc() {
    let gpu = require_gpu!();
    let max = gpu
        .limits
        .max_storage_buffer_binding_size
        .min(gpu.limits.max_buffer_size);
    let len = max / 4 + 64;
    let mut b = GraphBuilder::new("huge");
    let x = b.input("x", DType::F32, &[len]);
    let y = b.node("relu", &[x], &[len], false);
    b.mark_output(y);
    let graph = b.build().expect("valid");
    let workspace = pool(&gpu);
    let mut ctx = context(graph);
    workspace_from(&mut ctx, &workspace);
    let values = values_of(x, Vec::new());
    match ctx.execute(&gpu, &values) {
        Err(RuntimeError::ChunkTooLarge { size, max_size, .. }) => assert!(size > max_size),
        other => panic!("{other:?}"),
    }
    assert_eq!(workspace.calls().reallocs, 0);
}

#[test]
fn a_realloc_that_returns_a_block_already_held_is_refused() {
    let gpu = require_gpu!();
    let (graph, values, _) = mlp();
    // One buffer handed out for every request, workspace and outputs alike.
    let big = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("one block for all"),
        size: 1 << 20,
        usage: wgalloc::device::STORAGE_USAGE,
        mapped_at_creation: false,
    });
    let frees = Arc::new(AtomicU64::new(0));
    let make = |frees: &Arc<AtomicU64>| {
        let block = big.clone();
        let realloc: ReallocFn = Box::new(move |_| Ok(Region::whole(block.clone())));
        let frees = frees.clone();
        let free_all: wgalloc::runtime::FreeAllFn = Box::new(move |_| {
            frees.fetch_add(1, Ordering::SeqCst);
        });
        (realloc, free_all)
    };
    let mut ctx = context(graph);
    let (r, f) = make(&frees);
    ctx.set_workspace_allocation(Some(r), Some(f), None)
        .expect("set");
    let (r, f) = make(&frees);
    ctx.set_output_allocation(Some(r), Some(f), None)
        .expect("set");
    match ctx.execute(&gpu, &values) {
        Err(RuntimeError::BlockAlreadyHeld {
            role: MemoryRole::Output,
            chunk: 0,
            held_role: MemoryRole::Workspace,
            held_chunk: 0,
        }) => {}
        other => panic!("{other:?}"),
    }
    drop(ctx);
    assert_eq!(
        frees.load(Ordering::SeqCst),
        2,
        "each setting's free-all once"
    );
}

#[test]
fn copy_prefix_of_a_block_whose_size_is_not_a_multiple_of_4_copies_whole_words() {
    let gpu = require_gpu!();
    let old = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("odd-sized user block"),
        size: 10,
        usage: wgalloc::device::STORAGE_USAGE,
        mapped_at_creation: false,
    });
    let new = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("grown block"),
        size: 16,
        usage: wgalloc::device::STORAGE_USAGE,
        mapped_at_creation: false,
    });
    let live = [1u8, 2, 3, 4, 5, 6, 7, 8];
    gpu.queue.write_buffer(&old, 0, &live);
    wgalloc::runtime::copy_prefix(&gpu, &Region::whole(old), &Region::whole(new.clone()), 10)
        .expect("copies 8 bytes");
    let copied = wgalloc::device::read_buffer_range(&gpu, &new, 0, 8).expect("reads");
    assert_eq!(copied, live);
}

#[test]
fn copy_prefix_moves_ranges_of_a_larger_buffer_at_their_offsets() {
    let gpu = require_gpu!();
    // A user's pool: blocks are ranges of one buffer, none at offset 0.
    let pool = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("user pool"),
        size: 2048,
        usage: wgalloc::device::STORAGE_USAGE,
        mapped_at_creation: false,
    });
    let zeros = vec![0u8; 2048];
    gpu.queue.write_buffer(&pool, 0, &zeros);
    let head: Vec<u8> = (100..116).collect();
    gpu.queue.write_buffer(&pool, 0, &head);
    let live: Vec<u8> = (1..=16).collect();
    gpu.queue.write_buffer(&pool, 256, &live);
    let old = Region {
        buffer: pool.clone(),
        offset: 256,
        size: 16,
    };
    let new = Region {
        buffer: pool.clone(),
        offset: 1024,
        size: 64,
    };
    wgalloc::runtime::copy_prefix(&gpu, &old, &new, 16).expect("copies 16 bytes");
    let read = |offset, len| wgalloc::device::read_buffer_range(&gpu, &pool, offset, len);
    assert_eq!(
        read(1024, 16).expect("reads"),
        live,
        "the old block's bytes"
    );
    assert_eq!(
        read(0, 16).expect("reads"),
        head,
        "offset 0 is not the block"
    );
    assert_eq!(
        read(1040, 16).expect("reads"),
        vec![0; 16],
        "only the prefix"
    );
    // A block running past its buffer is refused, not copied.
    let past = Region {
        buffer: pool.clone(),
        offset: 2040,
        size: 64,
    };
    let error = wgalloc::runtime::copy_prefix(&gpu, &old, &past, 16).expect_err("past the end");
    assert!(error.message.contains("past the end"), "{}", error.message);
}

/// x → count_positive → compact(x) bounded by `len` → scale by 2: a bounded
/// data-dependent graph.
fn bounded(len: u64) -> (Graph, TensorId, TensorId, TensorId) {
    let mut b = GraphBuilder::new("bounded");
    let x = b.input("x", DType::F32, &[len]);
    let count = b.node("count_positive", &[x], &[1], false);
    let kept = b.dynamic_node("compact", &[x, count], count, Some(len), &[]);
    let y = b.dynamic_node("scale", &[kept], count, Some(len), &[2.0]);
    b.mark_output(y);
    (b.build().expect("valid"), x, kept, y)
}

#[test]
fn compacting_an_all_negative_input_gives_an_empty_output_like_the_cpu() {
    let gpu = require_gpu!();
    let len = 300;
    let (graph, x, y) = compacting(len);
    let workspace = pool(&gpu);
    let outputs = pool(&gpu);
    let mut ctx = context(graph.clone());
    workspace_from(&mut ctx, &workspace);
    outputs_from(&mut ctx, &outputs);
    let negative = values_of(x, (0..len).map(|i| -1.0 - i as f32).collect());
    assert!(reference(&graph, &negative, y).is_empty());
    let run = ctx.execute(&gpu, &negative).expect("count 0 runs");
    assert_eq!(run.phases, 2);
    assert_eq!(run.output(y).map(|o| o.size), Some(0));
    assert_eq!(run.read_f32(&gpu, y).expect("reads"), Vec::<f32>::new());
    // The same context then runs a non-empty input.
    let mixed = values_of(x, signed_values(len, 3));
    let expected = reference(&graph, &mixed, y);
    assert!(!expected.is_empty());
    let run = ctx.execute(&gpu, &mixed).expect("runs");
    close(&run.read_f32(&gpu, y).expect("reads"), &expected);
    // And empty again after a non-empty run.
    let run = ctx.execute(&gpu, &negative).expect("count 0 again");
    assert!(run.read_f32(&gpu, y).expect("reads").is_empty());
    drop(ctx);
    assert_balanced(&workspace);
    assert_balanced(&outputs);
}

#[test]
fn a_count_equal_to_max_len_keeps_every_element_like_the_cpu() {
    let gpu = require_gpu!();
    let len = 64;
    let (graph, x, _, y) = bounded(len);
    let all_positive = values_of(x, (0..len).map(|i| 0.5 + i as f32).collect());
    let expected = reference(&graph, &all_positive, y);
    assert_eq!(expected.len() as u64, len);
    let mut ctx = context(graph);
    let run = ctx.execute(&gpu, &all_positive).expect("runs");
    close(&run.read_f32(&gpu, y).expect("reads"), &expected);
}

#[test]
fn a_node_with_an_output_over_an_empty_tensor_is_refused_on_the_gpu_and_the_cpu() {
    let gpu = require_gpu!();
    let mut b = GraphBuilder::new("recount");
    let x = b.input("x", DType::F32, &[16]);
    let count = b.node("count_positive", &[x], &[1], false);
    let kept = b.dynamic_node("compact", &[x, count], count, Some(16), &[]);
    let recount = b.node("count_positive", &[kept], &[1], false);
    b.mark_output(recount);
    let graph = b.build().expect("valid");
    let negative = values_of(x, vec![-1.0; 16]);
    let refused = |r: Result<_, RuntimeError>| matches!(r, Err(RuntimeError::EmptyOperand { node: wgalloc::graph::NodeId(2), tensor, .. }) if tensor == kept);
    assert!(refused(evaluate(&graph, &negative).map(|_| ())));
    let mut ctx = context(graph);
    assert!(refused(ctx.execute(&gpu, &negative).map(|_| ())));
    // Not empty: both run.
    let run = ctx
        .execute(&gpu, &values_of(x, vec![1.0; 16]))
        .expect("runs");
    assert_eq!(run.read_f32(&gpu, recount).expect("reads"), vec![16.0]);
}

/// x[8] and c[1] inputs; count = scale(c, 1) written by a kernel; compact(x) bounded
/// by 8 with that count; then scale.
fn kernel_count() -> (Graph, TensorId, TensorId, TensorId) {
    let mut b = GraphBuilder::new("kernel count");
    let x = b.input("x", DType::F32, &[8]);
    let c = b.input("c", DType::F32, &[1]);
    let count = b.node("scale", &[c], &[1], false);
    let kept = b.dynamic_node("compact", &[x, count], count, Some(8), &[]);
    let y = b.dynamic_node("scale", &[kept], count, Some(8), &[2.0]);
    b.mark_output(y);
    let mut graph = b.build().expect("valid");
    graph.nodes[0].params = vec![1.0];
    (graph, x, c, count)
}

#[test]
fn a_nan_or_above_bound_count_from_a_kernel_is_a_typed_error_like_the_cpu() {
    let gpu = require_gpu!();
    let (graph, x, c, count) = kernel_count();
    let mut ctx = context(graph.clone());
    let with = |value: f32| -> HashMap<TensorId, TensorData> {
        [
            (x, TensorData::F32(vec![1.0; 8])),
            (c, TensorData::F32(vec![value])),
        ]
        .into_iter()
        .collect()
    };
    for bad in [f32::NAN, -1.0, 2.5] {
        let is_bad = |r: &RuntimeError| {
            // A NaN's payload is the device's: NVIDIA's driver returns its own NaN for
            // c x 1, so a NaN matches any NaN.
            matches!(r, RuntimeError::BadCount { tensor, value }
                if *tensor == count && ((value.is_nan() && bad.is_nan()) || value == &bad))
        };
        let gpu_err = ctx.execute(&gpu, &with(bad)).expect_err("bad count");
        assert!(is_bad(&gpu_err), "{bad}: {gpu_err:?}");
        let cpu_err = evaluate(&graph, &with(bad)).expect_err("bad count");
        assert!(is_bad(&cpu_err), "{bad}: {cpu_err:?}");
    }
    let above = |r: &RuntimeError| {
        matches!(
            r,
            RuntimeError::Graph(wgalloc::graph::GraphError::LengthAboveBound {
                len: 9,
                max_len: 8,
                ..
            })
        )
    };
    let gpu_err = ctx.execute(&gpu, &with(9.0)).expect_err("above the bound");
    assert!(above(&gpu_err), "{gpu_err:?}");
    assert!(above(&evaluate(&graph, &with(9.0)).expect_err("above")));
    // The context is still usable, with a count of 0 as well.
    for ok in [0.0, 3.0, 8.0] {
        let (_, result) = evaluate(&graph, &with(ok)).expect("cpu runs");
        let expected = result.last().cloned().flatten().expect("y computed");
        let run = ctx.execute(&gpu, &with(ok)).expect("gpu runs");
        let y = run.outputs[0].tensor;
        assert_eq!(
            Some(run.read_f32(&gpu, y).expect("reads")),
            expected.as_f32().map(<[f32]>::to_vec),
            "{ok}"
        );
    }
}

#[test]
fn reading_a_tensor_that_is_not_an_output_names_it() {
    let gpu = require_gpu!();
    let (graph, values, y) = mlp();
    let x = graph.tensors[0].id;
    let mut ctx = context(graph);
    let run = ctx.execute(&gpu, &values).expect("runs");
    match run.read_f32(&gpu, x) {
        Err(RuntimeError::NotAnOutput { tensor, name }) => {
            assert_eq!((tensor, name.as_str()), (x, "x"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        run.read_f32(&gpu, TensorId(9999)),
        Err(RuntimeError::Graph(
            wgalloc::graph::GraphError::UnknownTensor {
                tensor: TensorId(9999),
                ..
            }
        ))
    ));
    assert!(run.read_f32(&gpu, y).is_ok());
}

#[test]
fn copy_prefix_into_a_block_of_another_device_is_a_typed_error_not_a_panic() {
    let _ = require_gpu!();
    // Both devices from one instance: a buffer of another wgpu instance is an id
    // wgpu-core cannot look up at all and panics inside wgpu, out of any scope's reach.
    let (gpu, other) = common::two_devices_of_one_adapter();
    let desc = |label| wgpu::BufferDescriptor {
        label: Some(label),
        size: 64,
        usage: wgalloc::device::STORAGE_USAGE,
        mapped_at_creation: false,
    };
    let old = gpu.device.create_buffer(&desc("old block"));
    let foreign = other.device.create_buffer(&desc("block of another device"));
    let (old, foreign) = (Region::whole(old), Region::whole(foreign));
    let error = wgalloc::runtime::copy_prefix(&gpu, &old, &foreign, 32)
        .expect_err("another device's block");
    assert!(error.message.contains("32 bytes"), "{}", error.message);
    // The device is still fine afterwards.
    let same = gpu.device.create_buffer(&desc("same device"));
    wgalloc::runtime::copy_prefix(&gpu, &old, &Region::whole(same), 32).expect("copies");
}

#[test]
fn replacing_a_setting_calls_its_free_all_even_when_realloc_never_ran() {
    let gpu = require_gpu!();
    let (graph, values, _) = mlp();
    let first = pool(&gpu);
    let second = pool(&gpu);
    let mut ctx = context(graph);
    workspace_from(&mut ctx, &first);
    // Replaced before any execution: the first setting's free-all still runs.
    workspace_from(&mut ctx, &second);
    assert_eq!((first.calls().reallocs, first.calls().free_alls), (0, 1));
    ctx.execute(&gpu, &values).expect("runs");
    // Replaced after realloc ran: the same rule.
    ctx.set_workspace_allocation(None, None, None)
        .expect("default");
    assert_eq!((second.calls().reallocs, second.calls().free_alls), (1, 1));
    assert_balanced(&second);
    ctx.execute(&gpu, &values).expect("runs on the default");
    drop(ctx);
    assert_eq!(first.calls().free_alls, 1);
    assert_eq!(second.calls().free_alls, 1);
}
