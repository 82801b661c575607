//! What the driver really reserves for planned memory (wgpu's allocator report), on
//! the adapter the environment picks (lavapipe in CI). The tests run one after the
//! other in one test function each, holding a lock: the measurement diffs two reports
//! of the shared device, so nothing else may allocate between them.

mod common;

use std::sync::Mutex;

use wgalloc::device::{allocate_plan, measure_allocation, WgpuStorage, STORAGE_USAGE};
use wgalloc::graph::read_trace;
use wgalloc::model::{build_gpt, ModelConfig};
use wgalloc::plan::{naive_size, Planner};

/// The most the driver may add to one buffer's size (its memory requirement's
/// rounding; lavapipe adds 48 bytes).
const PER_BUFFER_OVERHEAD: u64 = 256;
/// The largest memory block wgpu's Vulkan and DX12 backends reserve under
/// `MemoryHints::Performance` (wgpu-hal 30, `AllocationSizes::from_memory_hints`).
const MAX_BLOCK: u64 = 256 << 20;

static DEVICE: Mutex<()> = Mutex::new(());

#[test]
fn the_driver_reserves_at_least_the_planned_bytes_and_at_most_a_block_more() {
    let Some(ctx) = common::gpu() else { return };
    let _alone = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let storage = ctx.buffer_types().expect("buffer types").storage.desc;
    for trace in ["resnet50", "gpt2_seq256"] {
        let graph = read_trace(format!("traces/{trace}.json").as_ref()).expect("trace");
        let plan = Planner::from_name("best")
            .expect("planner")
            .plan_graph(&graph, &storage)
            .expect("plan");
        let planned = plan.total_size();
        let chunks: u64 = plan.buffers.iter().map(|b| b.chunks.len() as u64).sum();
        let (memory, bytes) = measure_allocation(&ctx.device, || {
            allocate_plan(&ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(&ctx))
        })
        .expect("allocate");
        let Some(bytes) = bytes else {
            eprintln!(
                "{:?} has no allocator report: nothing to check",
                ctx.info.backend
            );
            return;
        };
        println!("{trace}: planned {planned} B, {bytes:?}");
        assert!(bytes.allocated >= planned, "{trace}: {bytes:?}");
        assert!(
            bytes.allocated <= planned + chunks * PER_BUFFER_OVERHEAD,
            "{trace}: {bytes:?}"
        );
        assert!(bytes.reserved >= bytes.allocated, "{trace}: {bytes:?}");
        assert!(bytes.blocks >= 1);
        assert!(
            bytes.reserved <= planned + bytes.blocks as u64 * MAX_BLOCK,
            "{trace}: {bytes:?}"
        );
        assert!(bytes.device_reserved >= bytes.reserved);
        drop(memory);
    }
}

#[test]
fn one_buffer_per_tensor_of_the_decoder_allocates_the_naive_figure() {
    let Some(ctx) = common::gpu() else { return };
    let _alone = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let model = build_gpt(&ModelConfig::default()).expect("model");
    let graph = &model.graph;
    let naive = naive_size(graph);
    let sizes: Vec<u64> = graph
        .planned_tensors()
        .filter_map(|t| graph.reserved_size(t))
        .filter(|&s| s > 0)
        .collect();
    let (buffers, bytes) = measure_allocation(&ctx.device, || {
        Ok::<_, ()>(
            sizes
                .iter()
                .map(|&size| {
                    ctx.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("naive"),
                        size,
                        usage: STORAGE_USAGE,
                        mapped_at_creation: false,
                    })
                })
                .collect::<Vec<_>>(),
        )
    })
    .expect("buffers");
    let Some(bytes) = bytes else {
        common::skip_for_capability(
            "gpu_device_bytes",
            &format!("{:?} has no allocator report", ctx.info.backend),
        );
        return;
    };
    let reserved_sizes: u64 = sizes.iter().sum();
    println!(
        "decoder naive {naive} B ({} buffers, {reserved_sizes} B in whole words): {bytes:?}",
        sizes.len()
    );
    assert!(bytes.allocated >= naive, "{bytes:?}");
    assert!(bytes.allocated >= reserved_sizes, "{bytes:?}");
    assert!(
        bytes.allocated <= reserved_sizes + sizes.len() as u64 * PER_BUFFER_OVERHEAD,
        "{bytes:?}"
    );
    assert!(bytes.reserved >= bytes.allocated);
    drop(buffers);
}
