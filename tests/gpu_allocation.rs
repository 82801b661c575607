//! `allocate_plan` on a real adapter: chunk sizes and usage, limits checked before
//! the storage is asked, no leak when a chunk fails, memory returned to its storage on
//! drop, and an adopted device keeping the limits its owner asked for.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use wgalloc::device::{
    allocate_plan, read_buffer_range, BufferAllocator, BufferStorage, CallbackAllocator,
    DeviceError, GpuContext, SharedStorage, WgpuAllocator, WgpuStorage, STORAGE_USAGE,
};
use wgalloc::error::ErrorKind;
use wgalloc::graph::TensorId;
use wgalloc::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan};
use wgalloc::storage::{CountingStorage, StorageError};

/// Buffers from `allocator`, counted: the counter, and the same storage as
/// [`allocate_plan`] takes it.
fn counted<A: BufferAllocator + Send + Sync + 'static>(
    ctx: &GpuContext,
    allocator: A,
) -> (Arc<CountingStorage<BufferStorage<A>>>, SharedStorage) {
    let counting = Arc::new(CountingStorage::new(BufferStorage::new(ctx, allocator)));
    (counting.clone(), counting)
}

fn buffer(chunks: &[u64]) -> BufferPlan {
    BufferPlan {
        buffer_type: BufferTypeDesc::new("storage", 32, u64::MAX).unwrap(),
        chunks: chunks
            .iter()
            .map(|&size| ChunkPlan {
                size,
                oversized: false,
            })
            .collect(),
        same_as: None,
    }
}

fn plan(buffers: Vec<BufferPlan>, placements: Vec<Option<Placement>>) -> Plan {
    Plan {
        planner: "hand".into(),
        placements,
        buffers,
        inplace: vec![],
    }
}

fn at(buffer: usize, chunk: usize, offset: u64, size: u64) -> Option<Placement> {
    Some(Placement {
        buffer: BufferId(buffer),
        chunk,
        offset,
        size,
    })
}

#[test]
fn every_chunk_gets_a_buffer_rounded_up_to_four_bytes() {
    let Some(ctx) = common::gpu() else { return };
    let p = plan(
        vec![buffer(&[100, 30]), buffer(&[0])],
        vec![at(0, 0, 0, 96), at(0, 1, 0, 30), None],
    );
    let (counting, storage) = counted(&ctx, WgpuAllocator);
    let memory = allocate_plan(&ctx, &p, STORAGE_USAGE, &storage).unwrap();
    let sizes: Vec<Vec<u64>> = (0..2)
        .map(|b| {
            (0..memory.chunk_count(BufferId(b)))
                .map(|c| memory.region(BufferId(b), c).unwrap().buffer.size())
                .collect()
        })
        .collect();
    assert_eq!(sizes, vec![vec![100, 32], vec![4]]);
    assert_eq!(memory.total_size(), 136);
    assert_eq!(memory.buffer_count(), 3);
    let first = memory.region(BufferId(0), 0).unwrap();
    assert_eq!((first.offset, first.size), (0, 100));
    assert_eq!(first.buffer.usage(), STORAGE_USAGE);
    let report = counting.report();
    assert_eq!((report.allocations, report.live_bytes), (3, 136));
}

#[test]
fn chunk_above_max_buffer_size_fails_before_wgpu_is_called() {
    let Some(ctx) = common::gpu() else { return };
    let max = ctx.limits.max_buffer_size;
    let p = plan(vec![buffer(&[64]), buffer(&[64, max + 1])], vec![]);
    let (counting, storage) = counted(&ctx, WgpuAllocator);
    let error = allocate_plan(&ctx, &p, STORAGE_USAGE, &storage).unwrap_err();
    assert_eq!(
        error,
        DeviceError::ChunkTooLarge {
            buffer: 1,
            chunk: 1,
            size: (max + 1).next_multiple_of(4),
            max_size: max,
        }
    );
    assert_eq!(
        counting.report().allocations + counting.report().failures,
        0
    );
}

/// The context with a storage binding limit below its buffer limit: the real one when
/// the device already has that, else a lowered copy (the check reads `ctx.limits`).
fn binding_below_buffer(ctx: &GpuContext) -> GpuContext {
    let mut ctx = ctx.clone();
    if ctx.limits.max_storage_buffer_binding_size >= ctx.limits.max_buffer_size {
        ctx.limits.max_storage_buffer_binding_size = 1 << 20;
    }
    ctx
}

#[test]
fn tensor_above_storage_binding_size_fails_before_wgpu_is_called() {
    let Some(ctx) = common::gpu() else { return };
    let ctx = binding_below_buffer(&ctx);
    let binding = ctx.limits.max_storage_buffer_binding_size;
    let size = binding + 32;
    let p = plan(
        vec![buffer(&[64 + size])],
        vec![at(0, 0, 0, 64), at(0, 0, 64, size)],
    );
    let (counting, storage) = counted(&ctx, WgpuAllocator);
    let error = allocate_plan(&ctx, &p, STORAGE_USAGE, &storage).unwrap_err();
    assert_eq!(
        error,
        DeviceError::TensorTooLarge {
            tensor: TensorId(1),
            size,
            max_size: binding,
        }
    );
    assert_eq!(
        counting.report().allocations + counting.report().failures,
        0
    );
}

#[test]
fn failing_third_chunk_releases_the_first_two_and_names_the_chunk() {
    let Some(ctx) = common::gpu() else { return };
    let calls = Arc::new(AtomicU32::new(0));
    let destroyed = Arc::new(Mutex::new(Vec::new()));
    let (calls_in, destroyed_in) = (calls.clone(), destroyed.clone());
    let callback = CallbackAllocator::new(
        move |ctx, request| {
            if calls_in.fetch_add(1, Ordering::SeqCst) + 1 == 3 {
                return Err(DeviceError::AllocatorRefused {
                    size: request.size,
                    message: "third chunk refused by test".into(),
                });
            }
            WgpuAllocator.allocate(ctx, request)
        },
        move |buffer| {
            destroyed_in.lock().unwrap().push(buffer.size());
            buffer.destroy();
        },
    );
    let (counting, storage) = counted(&ctx, callback);
    let p = plan(vec![buffer(&[64, 128]), buffer(&[256, 512])], vec![]);
    let error = allocate_plan(&ctx, &p, STORAGE_USAGE, &storage).unwrap_err();
    let refused = DeviceError::AllocatorRefused {
        size: 256,
        message: "third chunk refused by test".into(),
    };
    assert_eq!(
        error,
        DeviceError::ChunkAllocation {
            buffer: 1,
            chunk: 0,
            size: 256,
            source: Box::new(DeviceError::Storage(Box::new(StorageError::Backend {
                kind: ErrorKind::Callback,
                message: refused.to_string(),
            }))),
        }
    );
    assert_eq!(error.kind(), ErrorKind::Callback);
    let report = counting.report();
    assert_eq!(
        (report.allocations, report.failures, report.frees),
        (2, 1, 2)
    );
    assert_eq!(report.live_regions, 0);
    assert_eq!(report.live_bytes, 0);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "allocation stopped at the failing chunk"
    );
    assert_eq!(
        *destroyed.lock().unwrap(),
        vec![128, 64],
        "released last first"
    );
}

#[test]
fn invalid_usage_is_a_validation_error_not_a_panic() {
    let Some(ctx) = common::gpu() else { return };
    let p = plan(vec![buffer(&[64])], vec![]);
    let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE;
    let error = allocate_plan(&ctx, &p, usage, &WgpuStorage::shared(&ctx)).unwrap_err();
    match error {
        DeviceError::ChunkAllocation { source, .. } => {
            // wgpu's validation error, as the storage reports it: its kind and message.
            assert!(
                matches!(&*source, DeviceError::Storage(e)
                    if matches!(**e, StorageError::Backend { kind: ErrorKind::Device, .. })),
                "{source:?}"
            );
            assert!(source.to_string().contains("alidation"), "{source}");
        }
        other => panic!("expected ChunkAllocation, got {other:?}"),
    }
}

#[test]
fn dropped_memory_hands_every_region_back_to_its_storage() {
    let Some(ctx) = common::gpu() else { return };
    let p = plan(vec![buffer(&[64, 64]), buffer(&[32])], vec![]);
    let (counting, storage) = counted(&ctx, WgpuAllocator);
    let memory = allocate_plan(&ctx, &p, STORAGE_USAGE, &storage).unwrap();
    assert_eq!(counting.report().live_regions, 3);
    drop(memory);
    let report = counting.report();
    assert_eq!((report.frees, report.live_bytes), (3, 0));
    assert_eq!(counting.inner().live_buffers(), 0);
}

#[test]
fn dropped_memory_destroys_its_buffers() {
    let Some(ctx) = common::gpu() else { return };
    let p = plan(vec![buffer(&[64])], vec![]);
    let memory = allocate_plan(&ctx, &p, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).unwrap();
    let handle = memory.region(BufferId(0), 0).unwrap().buffer.clone();
    assert!(read_buffer_range(&ctx, &handle, 0, 64).is_ok());
    drop(memory);
    let error = read_buffer_range(&ctx, &handle, 0, 64).unwrap_err();
    assert!(matches!(error, DeviceError::Validation { .. }), "{error:?}");
}

#[test]
fn buffer_repeating_an_earlier_one_shares_its_memory() {
    let Some(ctx) = common::gpu() else { return };
    let mut repeat = buffer(&[64]);
    repeat.same_as = Some(BufferId(0));
    let p = plan(vec![buffer(&[128]), repeat], vec![]);
    let (counting, storage) = counted(&ctx, WgpuAllocator);
    let memory = allocate_plan(&ctx, &p, STORAGE_USAGE, &storage).unwrap();
    assert_eq!(counting.report().allocations, 1);
    assert_eq!(memory.buffer_count(), 1);
    assert_eq!(memory.region(BufferId(1), 0), memory.region(BufferId(0), 0));
    drop(memory);
    assert_eq!(
        counting.report().frees,
        1,
        "the shared region goes back once"
    );
}

#[test]
fn adopted_device_keeps_the_default_limits_it_was_created_with() {
    let Some(shared) = common::gpu() else { return };
    let backends =
        wgalloc::device::parse_backends(std::env::var("WGPU_BACKEND").ok().as_deref()).unwrap();
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(backends));
    let adapter = adapters
        .into_iter()
        .find(|a| a.get_info().name == shared.info.name)
        .unwrap();
    let (device, queue) =
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).unwrap();
    let ctx = GpuContext::adopt(device, queue, adapter.get_info());
    let defaults = wgpu::Limits::default();
    assert_eq!(ctx.limits.max_buffer_size, defaults.max_buffer_size);
    assert_eq!(ctx.limits.min_storage_buffer_offset_alignment, 256);
    assert_eq!(ctx.buffer_types().unwrap().storage.desc.alignment(), 256);

    let fits = plan(vec![buffer(&[1024])], vec![at(0, 0, 256, 512)]);
    let memory = allocate_plan(&ctx, &fits, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).unwrap();
    assert_eq!(memory.total_size(), 1024);

    let too_big = defaults.max_buffer_size + 4;
    let never = plan(vec![buffer(&[too_big])], vec![]);
    assert_eq!(
        allocate_plan(&ctx, &never, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).unwrap_err(),
        DeviceError::ChunkTooLarge {
            buffer: 0,
            chunk: 0,
            size: too_big,
            max_size: defaults.max_buffer_size,
        }
    );
}

#[test]
fn a_placement_resolves_to_a_bindable_region_checked_in_one_place() {
    let Some(ctx) = common::gpu() else { return };
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    let big = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("pool"),
        size: 8 * alignment,
        usage: STORAGE_USAGE,
        mapped_at_creation: false,
    });
    // The chunk is bytes [2a, 6a) of the pool.
    let chunk = wgalloc::storage::Region {
        buffer: big.clone(),
        offset: 2 * alignment,
        size: 4 * alignment,
    };
    let memory = wgalloc::device::PlannedMemory::from_regions(vec![vec![chunk]]);
    let p = Placement {
        buffer: BufferId(0),
        chunk: 0,
        offset: alignment,
        size: 2 * alignment,
    };
    let region = memory.bindable(&p, 0, 2 * alignment, alignment).unwrap();
    assert_eq!((region.offset, region.size), (3 * alignment, 2 * alignment));
    assert_eq!(region.buffer, big);
    assert!(region.binding().is_some());
    // Past the chunk (not past the pool): refused.
    assert!(matches!(
        memory.bindable(&p, 0, 3 * alignment + 4, alignment),
        Err(DeviceError::RangeOutOfBounds { .. })
    ));
    // Off the alignment: refused with the offset in the buffer.
    if alignment > 4 {
        assert_eq!(
            memory.bindable(&p, 4, 4, alignment),
            Err(DeviceError::UnalignedBinding {
                offset: 3 * alignment + 4,
                alignment
            })
        );
    }
    // A chunk the memory does not have.
    let missing = Placement { chunk: 1, ..p };
    assert!(memory.bindable(&missing, 0, 4, alignment).is_err());
}
