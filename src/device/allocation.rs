//! Turning a [`Plan`] into memory, one way for every caller ([`allocate_plan`]): limits
//! checked first ("never fits"), then one region per planned chunk from a [`Storage`]
//! ("does not fit now" comes back from the storage), with no leak when a chunk fails.

use std::sync::Arc;

use super::{ChunkRequest, DeviceError, GpuContext, PlannedMemory, SharedStorage};
use crate::graph::TensorId;
use crate::plan::{align_up, BufferId, ChunkPlan, Placement, Plan};
#[cfg(doc)]
use crate::storage::Storage;
use crate::storage::{free_last_first, OwnedRegion, Region, RegionRequest};

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

/// The one way a plan gets memory: one region per planned chunk from `storage`, each of
/// the chunk's size rounded up to whole 4-byte words (at least 4), with `usage`
/// (normally [`super::STORAGE_USAGE`]), starting at a multiple of the device's `min_storage_buffer_offset_alignment`. The storage
/// decides what a region is: a whole `wgpu::Buffer` from a [`super::WgpuStorage`]
/// ([`super::WgpuStorage::shared`]) or from a user's [`super::BufferAllocator`] through
/// a [`super::BufferStorage`], a sub-range of a page from a
/// [`crate::storage::PagedStorage`], any user [`Storage`]. A buffer whose `same_as`
/// names an earlier buffer with chunks at least as large shares that buffer's regions.
///
/// Every chunk is checked against `ctx.limits` first, and when `usage` includes
/// `STORAGE` every placement's reserved size against the storage binding limit (use
/// [`crate::exec::check_plan_against_limits`] to check exact tensor sizes). The memory
/// keeps the storage and frees its regions back to it when dropped; if a chunk fails,
/// every region already obtained is freed, last first, before the error returns.
///
/// # Errors
/// [`DeviceError::ChunkTooLarge`], [`DeviceError::TensorTooLarge`] or
/// [`DeviceError::BadPlacement`] before the storage is asked;
/// [`DeviceError::ChunkAllocation`] naming the chunk the storage refused, holding
/// [`DeviceError::Storage`] with the storage's error (whose kind tells "out of memory
/// now" from "never fits").
pub fn allocate_plan(
    ctx: &GpuContext,
    plan: &Plan,
    usage: wgpu::BufferUsages,
    storage: &SharedStorage,
) -> Result<PlannedMemory, DeviceError> {
    check_chunks_against_limits(plan, &ctx.limits)?;
    if usage.contains(wgpu::BufferUsages::STORAGE) {
        check_bindings(plan, &ctx.limits, |_, p| Some((0, p.size)))?;
    }
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
    let mut rows: Vec<Vec<Region>> = Vec::with_capacity(plan.buffers.len());
    let mut held: Vec<OwnedRegion> = Vec::new();
    for (b, buffer) in plan.buffers.iter().enumerate() {
        if let Some(shared) = shareable(plan, b, &rows) {
            rows.push(shared);
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
            let wanted = RegionRequest::new(request.size)
                .alignment(alignment)
                .usage(request.usage)
                .label(request.label())
                .for_chunk(request.buffer, request.chunk);
            match OwnedRegion::allocate(Arc::clone(storage), &wanted) {
                Ok(region) => {
                    row.push(region.region().clone());
                    held.push(region);
                }
                Err(error) => {
                    // Nothing leaks: every region already obtained goes back, last first.
                    free_last_first(held);
                    return Err(DeviceError::ChunkAllocation {
                        buffer: b,
                        chunk: c,
                        size: request.size,
                        source: Box::new(DeviceError::from(error)),
                    });
                }
            }
        }
        rows.push(row);
    }
    Ok(PlannedMemory::owning(rows, held))
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
