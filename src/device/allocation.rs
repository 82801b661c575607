//! Turning a [`Plan`] into real buffers: limits checked first ("never fits"), then one
//! `wgpu::Buffer` per planned chunk through a [`BufferAllocator`] ("does not fit now"
//! comes back from the allocator), or one region per chunk from a [`Storage`]
//! ([`allocate_plan_in`]), with no leak when a chunk fails.

use std::sync::Arc;

use super::{BufferAllocator, ChunkRequest, DeviceError, GpuContext, PlannedMemory};
use crate::graph::TensorId;
use crate::plan::{align_up, BufferId, ChunkPlan, Placement, Plan};
use crate::storage::Region;
use crate::storage::{RegionRequest, Storage};

/// Bytes a chunk is allocated with: its size rounded up to
/// `wgpu::COPY_BUFFER_ALIGNMENT`, at least 4 (so every buffer can be bound and copied);
/// `None` on overflow.
pub fn chunk_alloc_size(chunk: &ChunkPlan) -> Option<u64> {
    align_up(chunk.size.max(1), wgpu::COPY_BUFFER_ALIGNMENT)
}

/// Checks every chunk of `plan` against `max_buffer_size`.
///
/// # Errors
/// [`DeviceError::ChunkTooLarge`] for the first chunk that no buffer of the device can
/// hold.
pub fn check_chunks_against_limits(plan: &Plan, limits: &wgpu::Limits) -> Result<(), DeviceError> {
    for (b, buffer) in plan.buffers.iter().enumerate() {
        for (c, chunk) in buffer.chunks.iter().enumerate() {
            let size = chunk_alloc_size(chunk).unwrap_or(u64::MAX);
            if size > limits.max_buffer_size {
                return Err(DeviceError::ChunkTooLarge {
                    buffer: b,
                    chunk: c,
                    size,
                    max_size: limits.max_buffer_size,
                });
            }
        }
    }
    Ok(())
}

/// Checks every placement's binding against a device's limits before any wgpu call:
/// the binding `binding(tensor, placement)` returns, as `(offset from the placement's
/// start, size)`, fits `max_storage_buffer_binding_size`, starts at a multiple of
/// `min_storage_buffer_offset_alignment`, and ends inside its chunk. `None` from
/// `binding` means the tensor has no binding (a bad placement). The device layer speaks
/// placements and ids only; [`crate::exec::check_plan_against_limits`] passes each
/// tensor's extent in its graph.
///
/// # Errors
/// [`DeviceError::TensorTooLarge`] ("never fits" on this device),
/// [`DeviceError::MisalignedPlacement`] or [`DeviceError::BadPlacement`].
pub fn check_bindings(
    plan: &Plan,
    limits: &wgpu::Limits,
    binding: impl Fn(TensorId, &Placement) -> Option<(u64, u64)>,
) -> Result<(), DeviceError> {
    let alignment = u64::from(limits.min_storage_buffer_offset_alignment.max(1));
    for (i, placement) in plan.placements.iter().enumerate() {
        let Some(p) = placement else { continue };
        let tensor = TensorId(u32::try_from(i).unwrap_or(u32::MAX));
        let bad = || DeviceError::BadPlacement {
            tensor,
            buffer: p.buffer.0,
            chunk: p.chunk,
            offset: p.offset,
            size: p.size,
        };
        let (within, size) = binding(tensor, p).ok_or_else(bad)?;
        if size > limits.max_storage_buffer_binding_size {
            return Err(DeviceError::TensorTooLarge {
                tensor,
                size,
                max_size: limits.max_storage_buffer_binding_size,
            });
        }
        let offset = p.offset.checked_add(within).ok_or_else(bad)?;
        if size > 0 && !offset.is_multiple_of(alignment) {
            return Err(DeviceError::MisalignedPlacement {
                tensor,
                offset,
                alignment,
            });
        }
        let chunk = plan
            .buffers
            .get(p.buffer.0)
            .and_then(|b| b.chunks.get(p.chunk))
            .ok_or_else(bad)?;
        let chunk_size = chunk_alloc_size(chunk).ok_or_else(bad)?;
        let end = offset.checked_add(size).ok_or_else(bad)?;
        if end > chunk_size {
            return Err(bad());
        }
    }
    Ok(())
}

/// Allocates one `wgpu::Buffer` per planned chunk through `allocator`, each of
/// [`chunk_alloc_size`] bytes with `usage` (normally [`super::STORAGE_USAGE`]). A buffer whose
/// `same_as` names an earlier buffer with chunks at least as large shares that buffer's
/// memory.
///
/// Every chunk is checked against `ctx.limits` first, and when `usage` includes
/// `STORAGE` every placement's reserved size against the storage binding limit (use
/// [`crate::exec::check_plan_against_limits`] to check exact tensor sizes). If a chunk fails, every
/// buffer obtained before it is handed back to `allocator` before the error returns.
///
/// # Errors
/// [`DeviceError::ChunkTooLarge`], [`DeviceError::TensorTooLarge`] or
/// [`DeviceError::BadPlacement`] before wgpu is called;
/// [`DeviceError::ChunkAllocation`] naming the chunk whose allocation failed, with the
/// allocator's error (e.g. [`DeviceError::OutOfDeviceMemory`]) inside.
pub fn allocate_plan(
    ctx: &GpuContext,
    plan: &Plan,
    usage: wgpu::BufferUsages,
    allocator: &dyn BufferAllocator,
) -> Result<PlannedMemory, DeviceError> {
    let (rows, owned) = allocate_rows(
        plan,
        &ctx.limits,
        usage,
        &mut |request| allocate_one(ctx, request, allocator).map(Region::whole),
        &mut |region| allocator.release(region.buffer),
    )?;
    Ok(PlannedMemory::with_regions(rows, owned, None))
}

/// [`allocate_plan`] from a [`Storage`]: each chunk is a region the storage hands out
/// (a whole buffer from a [`super::WgpuStorage`], a sub-range of a page from a
/// [`crate::storage::PagedStorage`], ...), starting at a multiple of the device's
/// `min_storage_buffer_offset_alignment`. The memory keeps the storage and frees its
/// regions back to it when dropped. The same checks run first; on a failure every
/// region already obtained is freed before the error returns.
///
/// # Errors
/// As [`allocate_plan`]; the storage's refusal is [`DeviceError::ChunkAllocation`]
/// holding [`DeviceError::Storage`] (or the device's own error).
pub fn allocate_plan_in(
    ctx: &GpuContext,
    plan: &Plan,
    usage: wgpu::BufferUsages,
    storage: Arc<dyn Storage<Memory = wgpu::Buffer>>,
) -> Result<PlannedMemory, DeviceError> {
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
    let (rows, owned) = allocate_rows(
        plan,
        &ctx.limits,
        usage,
        &mut |request| {
            let wanted = RegionRequest::new(request.size)
                .alignment(alignment)
                .usage(request.usage)
                .label(request.label())
                .for_chunk(request.buffer, request.chunk);
            storage.allocate(&wanted).map_err(DeviceError::from)
        },
        &mut |region| {
            if let Err(e) = storage.free(region) {
                log::warn!("a storage refused a region it handed out: {e}");
            }
        },
    )?;
    Ok(PlannedMemory::with_regions(rows, owned, Some(storage)))
}

type AllocateRegion<'a> = dyn FnMut(&ChunkRequest) -> Result<Region, DeviceError> + 'a;
type FreeRegion<'a> = dyn FnMut(Region) + 'a;

/// Checks `plan` against `limits` (every chunk; every placement's binding when `usage`
/// includes `STORAGE`), then obtains one region per chunk (rows that repeat an earlier
/// buffer share its regions), `owned[buffer]` telling which rows hold their own. On a
/// failure every region already obtained goes back through `free`, last first.
fn allocate_rows(
    plan: &Plan,
    limits: &wgpu::Limits,
    usage: wgpu::BufferUsages,
    allocate: &mut AllocateRegion<'_>,
    free: &mut FreeRegion<'_>,
) -> Result<(Vec<Vec<Region>>, Vec<bool>), DeviceError> {
    check_chunks_against_limits(plan, limits)?;
    if usage.contains(wgpu::BufferUsages::STORAGE) {
        check_bindings(plan, limits, |_, p| Some((0, p.size)))?;
    }
    let mut rows: Vec<Vec<Region>> = Vec::with_capacity(plan.buffers.len());
    let mut owned: Vec<bool> = Vec::with_capacity(plan.buffers.len());
    for (b, buffer) in plan.buffers.iter().enumerate() {
        if let Some(shared) = shareable(plan, b, &rows) {
            rows.push(shared);
            owned.push(false);
            continue;
        }
        let mut row = Vec::with_capacity(buffer.chunks.len());
        for (c, chunk) in buffer.chunks.iter().enumerate() {
            let request = ChunkRequest {
                buffer: BufferId(b),
                chunk: c,
                size: chunk_alloc_size(chunk).unwrap_or(u64::MAX),
                usage,
            };
            match allocate(&request) {
                Ok(created) => row.push(created),
                Err(error) => {
                    rows.push(row);
                    owned.push(true);
                    roll_back(rows, &owned, free);
                    return Err(DeviceError::ChunkAllocation {
                        buffer: b,
                        chunk: c,
                        size: request.size,
                        source: Box::new(error),
                    });
                }
            }
        }
        rows.push(row);
        owned.push(true);
    }
    Ok((rows, owned))
}

/// Clones of an earlier row's regions when buffer `b` repeats it and every chunk of `b`
/// fits in the matching earlier chunk.
fn shareable(plan: &Plan, b: usize, rows: &[Vec<Region>]) -> Option<Vec<Region>> {
    let BufferId(earlier) = plan.buffers.get(b)?.same_as?;
    let row = rows.get(earlier)?;
    let chunks = &plan.buffers.get(b)?.chunks;
    let fits = chunks.len() <= row.len()
        && chunks
            .iter()
            .zip(row)
            .all(|(c, region)| chunk_alloc_size(c).is_some_and(|s| s <= region.size));
    fits.then(|| row.to_vec())
}

/// One allocation, with the returned buffer checked against the request.
fn allocate_one(
    ctx: &GpuContext,
    request: &ChunkRequest,
    allocator: &dyn BufferAllocator,
) -> Result<wgpu::Buffer, DeviceError> {
    let buffer = allocator.allocate(ctx, request)?;
    if buffer.size() < request.size {
        let got = buffer.size();
        allocator.release(buffer);
        return Err(DeviceError::ShortBuffer {
            buffer: request.buffer.0,
            chunk: request.chunk,
            expected: request.size,
            got,
        });
    }
    if !buffer.usage().contains(request.usage) {
        let has = format!("{:?}", buffer.usage());
        allocator.release(buffer);
        return Err(DeviceError::MissingUsage {
            needed: format!("{:?}", request.usage),
            has,
        });
    }
    Ok(buffer)
}

/// Hands every owned region back, last allocated first.
fn roll_back(rows: Vec<Vec<Region>>, owned: &[bool], free: &mut FreeRegion<'_>) {
    for (i, row) in rows.into_iter().enumerate().rev() {
        if owned.get(i).copied().unwrap_or(true) {
            for region in row.into_iter().rev() {
                free(region);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::plan::{BufferPlan, BufferTypeDesc};

    fn plan(chunks: &[u64], placements: Vec<Option<Placement>>) -> Plan {
        Plan {
            planner: "test".into(),
            placements,
            buffers: vec![BufferPlan {
                buffer_type: BufferTypeDesc::new("storage", 32, 1 << 20).unwrap(),
                chunks: chunks
                    .iter()
                    .map(|&size| ChunkPlan {
                        size,
                        oversized: false,
                    })
                    .collect(),
                same_as: None,
            }],
            inplace: vec![],
        }
    }

    fn at(chunk: usize, offset: u64, size: u64) -> Option<Placement> {
        Some(Placement {
            buffer: BufferId(0),
            chunk,
            offset,
            size,
        })
    }

    fn limits(max_buffer: u64, max_binding: u64) -> wgpu::Limits {
        wgpu::Limits {
            max_buffer_size: max_buffer,
            max_storage_buffer_binding_size: max_binding,
            min_storage_buffer_offset_alignment: 32,
            ..wgpu::Limits::default()
        }
    }

    #[test]
    fn placement_off_the_devices_offset_alignment_is_misaligned() {
        let p = plan(&[256], vec![at(0, 48, 64)]);
        assert_eq!(
            check_bindings(&p, &limits(4096, 4096), |_, p| Some((0, p.size))),
            Err(DeviceError::MisalignedPlacement {
                tensor: TensorId(0),
                offset: 48,
                alignment: 32
            })
        );
    }

    #[test]
    fn chunk_size_rounds_up_to_copy_alignment_and_never_zero() {
        let c = |size| ChunkPlan {
            size,
            oversized: false,
        };
        assert_eq!(chunk_alloc_size(&c(0)), Some(4));
        assert_eq!(chunk_alloc_size(&c(5)), Some(8));
        assert_eq!(chunk_alloc_size(&c(64)), Some(64));
        assert_eq!(chunk_alloc_size(&c(u64::MAX)), None);
    }

    #[test]
    fn chunk_above_max_buffer_size_never_fits() {
        let p = plan(&[64, 1001], vec![]);
        assert_eq!(
            check_chunks_against_limits(&p, &limits(1000, 1000)),
            Err(DeviceError::ChunkTooLarge {
                buffer: 0,
                chunk: 1,
                size: 1004,
                max_size: 1000
            })
        );
        assert!(check_chunks_against_limits(&p, &limits(1004, 1000)).is_ok());
    }

    #[test]
    fn chunk_of_u64_max_is_too_large_not_an_overflow_panic() {
        let p = plan(&[u64::MAX], vec![]);
        assert!(matches!(
            check_chunks_against_limits(&p, &limits(1 << 30, 1 << 27)),
            Err(DeviceError::ChunkTooLarge { size: u64::MAX, .. })
        ));
    }

    #[test]
    fn placement_above_binding_size_is_tensor_too_large() {
        let p = plan(&[4096], vec![at(0, 0, 64), at(0, 64, 2048)]);
        assert_eq!(
            check_bindings(&p, &limits(4096, 1024), |_, p| Some((0, p.size))),
            Err(DeviceError::TensorTooLarge {
                tensor: TensorId(1),
                size: 2048,
                max_size: 1024
            })
        );
    }

    #[test]
    fn placement_past_its_chunk_is_bad() {
        let p = plan(&[128], vec![at(0, 96, 64)]);
        assert!(matches!(
            check_bindings(&p, &limits(4096, 4096), |_, p| Some((0, p.size))),
            Err(DeviceError::BadPlacement {
                offset: 96,
                size: 64,
                ..
            })
        ));
    }

    #[test]
    fn placement_in_missing_chunk_is_bad() {
        let p = plan(&[128], vec![None, at(3, 0, 32)]);
        assert!(matches!(
            check_bindings(&p, &limits(4096, 4096), |_, p| Some((0, p.size))),
            Err(DeviceError::BadPlacement {
                tensor: TensorId(1),
                chunk: 3,
                ..
            })
        ));
    }
}
