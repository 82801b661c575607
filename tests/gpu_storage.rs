//! Plans allocated from a [`Storage`] on a real adapter: every planner's plan of the
//! shipped traces, placed in sub-ranges of shared pages that start at non-zero
//! offsets, is proved by the checksum run; every region goes back to the storage; a
//! storage that refuses leaves nothing allocated and keeps its error's kind.

mod common;

use std::path::Path;
use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use wgalloc::device::{
    BufferAllocator, BufferStorage, ChunkRequest, DeviceError, SharedStorage, WgpuAllocator,
    WgpuStorage,
};
use wgalloc::error::ErrorKind;
use wgalloc::graph::read_trace;
use wgalloc::plan::{BufferTypeDesc, Planner};
use wgalloc::storage::STORAGE_USAGE;
use wgalloc::storage::{CountingStorage, PagedStorage, RegionRequest, Storage};

type Pages = PagedStorage<Arc<CountingStorage<WgpuStorage>>>;

fn pages(
    ctx: &wgalloc::GpuContext,
    page_size: u64,
) -> (Arc<Pages>, Arc<CountingStorage<WgpuStorage>>) {
    let counting = Arc::new(CountingStorage::new(WgpuStorage::wgpu(ctx)));
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
    let pool = PagedStorage::new(counting.clone(), page_size, alignment, STORAGE_USAGE)
        .expect("a page pool");
    (Arc::new(pool), counting)
}

#[test]
fn every_planner_runs_in_sub_ranges_of_shared_pages() {
    let Some(ctx) = common::gpu() else { return };
    let buffer_type = ctx.buffer_types().expect("buffer types").storage.desc;
    let traces = ["mobilenet_v2"];
    for name in traces {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("traces/{name}.json"));
        let graph = read_trace(&path).expect("a shipped trace");
        for planner in Planner::all() {
            let plan = planner.plan_graph(&graph, &buffer_type).expect("plans");
            let (pool, counting) = pages(&ctx, 1 << 20);
            // A region already in use, so the plan's chunks start past offset 0.
            let first = pool
                .allocate(&RegionRequest::new(4))
                .expect("a small region");
            let report =
                common::allocate_and_prove(&ctx, &graph, &plan, &(pool.clone() as SharedStorage))
                    .unwrap_or_else(|e| panic!("{name} / {}: {e}", planner.name()));
            assert_eq!(
                report.mismatches,
                0,
                "{name} / {}: {:?}",
                planner.name(),
                report.first_mismatches
            );
            assert_eq!(pool.live_regions(), 1, "the plan's regions went back");
            pool.free(first).expect("free");
            drop(pool);
            let counts = counting.report();
            assert_eq!(counts.live_regions, 0, "{counts:?}");
            assert_eq!(counts.bad_frees, 0, "{counts:?}");
        }
    }
}

#[test]
fn a_refusing_storage_leaves_nothing_and_keeps_the_kind() {
    let Some(ctx) = common::gpu() else { return };
    let buffer_type = ctx.buffer_types().expect("buffer types").storage.desc;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/mobilenet_v2.json");
    let graph = read_trace(&path).expect("a shipped trace");
    // Chunks of at most 1 MiB: the plan needs several pages.
    let small = BufferTypeDesc::new("small", buffer_type.alignment(), 1 << 20).expect("type");
    let plan = Planner::Ggml.plan_graph(&graph, &small).expect("plans");
    assert!(
        plan.buffers[0].chunks.len() > 1,
        "the test needs several chunks"
    );
    // Pages smaller than the plan's chunks, from an allocator that gives one buffer and
    // then refuses.
    let allocator = OneBuffer(AtomicU64::new(0));
    let inner = Arc::new(CountingStorage::new(BufferStorage::new(&ctx, allocator)));
    let pool =
        Arc::new(PagedStorage::new(inner.clone(), 4096, 256, STORAGE_USAGE).expect("a page pool"));
    let error = common::allocate_and_prove(&ctx, &graph, &plan, &(pool.clone() as SharedStorage))
        .expect_err("the second page is refused");
    assert_eq!(error.kind(), ErrorKind::Callback, "{error}");
    assert_eq!(pool.live_regions(), 0);
    drop(pool);
    assert_eq!(inner.report().live_regions, 0, "{:?}", inner.report());
}

/// Gives one buffer, then refuses.
struct OneBuffer(AtomicU64);

impl BufferAllocator for OneBuffer {
    fn allocate(
        &self,
        ctx: &wgalloc::GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError> {
        if self.0.fetch_add(1, Ordering::SeqCst) >= 1 {
            return Err(DeviceError::AllocatorRefused {
                size: request.size,
                message: "budget spent".into(),
            });
        }
        WgpuAllocator.allocate(ctx, request)
    }
}

#[test]
fn a_plan_in_a_page_larger_than_any_binding_is_proved_over_its_window() {
    let Some(ctx) = common::gpu() else { return };
    let buffer_type = ctx.buffer_types().expect("buffer types").storage.desc;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/mobilenet_v2.json");
    let graph = read_trace(&path).expect("a shipped trace");
    let plan = Planner::Ggml
        .plan_graph(&graph, &buffer_type)
        .expect("plans");
    // One page past the binding limit: binding the page whole would be refused.
    let page = ctx.limits.max_storage_buffer_binding_size + (1 << 20);
    if page > ctx.limits.max_buffer_size {
        common::skip_for_capability(
            "gpu_storage page past the binding limit",
            "no buffer can exceed the binding limit on this adapter",
        );
        return;
    }
    let (pool, counting) = pages(&ctx, page);
    let first = pool
        .allocate(&RegionRequest::new(4))
        .expect("a small region");
    let report = common::allocate_and_prove(&ctx, &graph, &plan, &(pool.clone() as SharedStorage))
        .expect("proved");
    assert_eq!(report.mismatches, 0, "{:?}", report.first_mismatches);
    pool.free(first).expect("free");
    drop(pool);
    assert_eq!(counting.report().live_regions, 0);
}
