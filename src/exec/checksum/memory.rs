//! Plain memory for the checksum run: the storage buffer type of a device and one
//! `wgpu::Buffer` per planned chunk (a stand-in until the device layer's allocator is
//! used; it checks the limits before calling wgpu and turns device errors into values).

use crate::device::{GpuContext, PlannedMemory};
use crate::exec::ExecError;
use crate::plan::{align_up, BufferTypeDesc, Plan, PlanError};

/// The storage buffer type of a device: alignment `min_storage_buffer_offset_alignment`,
/// max size `min(max_buffer_size, max_storage_buffer_binding_size)`.
///
/// # Errors
/// [`PlanError`] when the limits make no valid buffer type.
pub fn storage_buffer_type(limits: &wgpu::Limits) -> Result<BufferTypeDesc, PlanError> {
    let max = limits
        .max_buffer_size
        .min(limits.max_storage_buffer_binding_size);
    BufferTypeDesc::new(
        "storage",
        u64::from(limits.min_storage_buffer_offset_alignment),
        max,
    )
}

/// Creates one storage buffer (`STORAGE | COPY_SRC | COPY_DST`) per chunk of `plan`,
/// each rounded up to whole words (at least one). A buffer that repeats an earlier one
/// (`same_as`) shares its buffers.
///
/// # Errors
/// [`ExecError::ChecksumLimit`] when a chunk exceeds the device's buffer or storage
/// binding size; [`ExecError::Gpu`] when wgpu reports an error (out of memory).
pub fn create_plan_buffers(ctx: &GpuContext, plan: &Plan) -> Result<PlannedMemory, ExecError> {
    let limit = ctx
        .limits
        .max_buffer_size
        .min(ctx.limits.max_storage_buffer_binding_size);
    let mut sizes: Vec<Vec<u64>> = Vec::with_capacity(plan.buffers.len());
    for (b, buffer) in plan.buffers.iter().enumerate() {
        let mut chunk_sizes = Vec::with_capacity(buffer.chunks.len());
        for (c, chunk) in buffer.chunks.iter().enumerate() {
            let size = align_up(chunk.size.max(4), 4).ok_or(ExecError::ChecksumLimit {
                what: format!("buffer {b} chunk {c}"),
                needed: chunk.size,
                limit,
            })?;
            if size > limit {
                return Err(ExecError::ChecksumLimit {
                    what: format!("buffer {b} chunk {c} (one storage binding)"),
                    needed: size,
                    limit,
                });
            }
            chunk_sizes.push(size);
        }
        sizes.push(chunk_sizes);
    }
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let mut chunks: Vec<Vec<wgpu::Buffer>> = Vec::with_capacity(sizes.len());
    for (b, chunk_sizes) in sizes.iter().enumerate() {
        let repeated = plan.buffers[b]
            .same_as
            .and_then(|earlier| chunks.get(earlier.0).cloned());
        if let Some(shared) = repeated {
            chunks.push(shared);
            continue;
        }
        let buffers = chunk_sizes
            .iter()
            .enumerate()
            .map(|(c, &size)| {
                ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(&format!("wgalloc buffer {b} chunk {c}")),
                    size,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .collect();
        chunks.push(buffers);
    }
    if let Some(error) = pollster::block_on(scope.pop()) {
        return Err(ExecError::Gpu {
            stage: "creating the plan's buffers",
            message: error.to_string(),
        });
    }
    Ok(PlannedMemory::from_buffers(chunks))
}
