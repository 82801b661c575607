//! Allocators registered per stream: the built-in decoder run on two streams whose
//! activation memory comes from a user pool (sub-ranges of one wgpu buffer), with the
//! callbacks counted. Prints what each stream did and the time to submit a batch of
//! executions without waiting versus running them one by one with `Executor::run`.
//!
//! ```sh
//! WGPU_BACKEND=vulkan cargo run --release --example stream_pool
//! ```

use std::sync::{Arc, Mutex};
use std::time::Instant;

use wgalloc::device::{allocate_plan, GpuContext, WgpuStorage, STORAGE_USAGE};
use wgalloc::exec::{Executor, TensorMemory};
use wgalloc::model::{build_gpt, ModelConfig};
use wgalloc::plan::{plan_graph, plan_weights};
use wgalloc::storage::Region;
use wgalloc::stream::{AllocatorDesc, ExecuteRequest, Stream, StreamError};

/// A bump pool over one buffer with a free list of exact-size ranges.
struct Pool {
    buffer: wgpu::Buffer,
    state: Mutex<(u64, Vec<(u64, u64)>)>,
}

struct Block {
    offset: u64,
    size: u64,
}

fn pool_desc(pool: Arc<Pool>) -> AllocatorDesc<Pool, Block> {
    AllocatorDesc::new()
        .object(pool)
        .alloc(|pool: &Pool, request| {
            let mut state = pool.state.lock().map_err(|e| e.to_string())?;
            let reuse = state.1.iter().position(|&(_, s)| s == request.size);
            let offset = match reuse {
                Some(i) => state.1.swap_remove(i).0,
                None => {
                    let offset = state.0.next_multiple_of(request.alignment);
                    let end = offset + request.size;
                    if end > pool.buffer.size() {
                        return Err(format!("pool full: {end} > {}", pool.buffer.size()).into());
                    }
                    state.0 = end;
                    offset
                }
            };
            Ok(Block {
                offset,
                size: request.size,
            })
        })
        .free(|pool: &Pool, block| {
            if let Ok(mut state) = pool.state.lock() {
                state.1.push((block.offset, block.size));
            }
        })
        .address_of(|pool: &Pool, block| Region {
            buffer: pool.buffer.clone(),
            offset: block.offset,
            size: block.size,
        })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = match GpuContext::from_env() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter ({e})");
            return Ok(());
        }
    };
    let runs: usize = std::env::var("WGALLOC_STREAM_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    // A small decoder, so the example runs in seconds on a software adapter.
    let config = ModelConfig {
        layers: 2,
        width: 64,
        heads: 4,
        seq: 16,
        vocab: 128,
        seed: 7,
        dtype: Default::default(),
    };
    let model = build_gpt(&config)?;
    let graph = &model.graph;
    let storage = ctx.buffer_types()?.storage.desc;
    let weight_plan = plan_weights(graph, &storage)?;
    let weights = allocate_plan(
        &ctx,
        &weight_plan,
        STORAGE_USAGE,
        &WgpuStorage::shared(&ctx),
    )?;
    for w in model.weights() {
        TensorMemory::single(&weight_plan, &weights).write_f32(
            &ctx,
            graph,
            w,
            &model.weight_values(w),
        )?;
    }
    let plan = plan_graph(graph, &storage)?;
    let tokens = model.token_ids();

    // One pool big enough for `runs` executions in flight at once.
    let block = plan.total_size().next_multiple_of(256);
    let pool = Arc::new(Pool {
        buffer: ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("user pool"),
            size: block * runs as u64 + 256,
            usage: STORAGE_USAGE,
            mapped_at_creation: false,
        }),
        state: Mutex::new((0, Vec::new())),
    });
    let (desc, counter) = pool_desc(pool.clone()).counted();
    let mut a = Stream::new(&ctx, "a");
    let mut b = Stream::new(&ctx, "b");
    a.register_allocator(&desc)?;
    b.register_allocator(&desc)?;
    drop(desc); // the streams keep what they need
    let request = ExecuteRequest::new(graph, &plan)
        .input(model.tokens, bytemuck::cast_slice(&tokens))
        .layer(&weight_plan, &weights)
        .read_back(model.logits);

    // Warm up pipelines, then time a batch submitted without waiting.
    a.execute(&request)?;
    a.synchronize()?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..runs {
        ids.push(a.execute(&request)?);
    }
    let submitted = started.elapsed();
    match b.execute(&request) {
        Err(StreamError::AllocatorBusy { stream, name }) => {
            println!("stream b refused while stream {stream} ({name}) holds the pool")
        }
        other => println!("stream b: unexpected {other:?}"),
    }
    let sync = a.synchronize()?;
    let total = started.elapsed();
    let first = a.result(ids[0]).and_then(|r| r.output_f32(model.logits));
    let same = ids
        .iter()
        .all(|&id| a.result(id).and_then(|r| r.output_f32(model.logits)) == first);
    b.execute(&request)?;
    b.synchronize()?;

    let mut executor = Executor::new(&ctx);
    let act = allocate_plan(&ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(&ctx))?;
    let memory = TensorMemory::single(&plan, &act).with_layer(&weight_plan, &weights);
    memory.write_u32(&ctx, graph, model.tokens, &tokens)?;
    executor.run(graph, &memory)?;
    let one_by_one = Instant::now();
    for _ in 0..runs {
        memory.write_u32(&ctx, graph, model.tokens, &tokens)?;
        executor.run(graph, &memory)?;
    }
    let one_by_one = one_by_one.elapsed();

    let report = counter.report();
    println!(
        "adapter {}: model {} nodes, activations {} B per execution ({} block(s))",
        ctx.info.name,
        graph.nodes.len(),
        plan.total_size(),
        plan.buffers.iter().map(|b| b.chunks.len()).sum::<usize>()
    );
    println!(
        "stream a: {runs} executions submitted in {submitted:?}, synchronized after {total:?} \
         ({} executions, {} blocks freed); all logits identical: {same}",
        sync.executions, sync.blocks_freed
    );
    println!("Executor::run one by one (wait each): {runs} runs in {one_by_one:?}");
    println!(
        "pool callbacks: {} allocations (at most {} B live), {} failures, {} frees, balanced: {}",
        report.allocations,
        report.peak_bytes,
        report.failures,
        report.frees,
        report.balanced()
    );
    Ok(())
}
