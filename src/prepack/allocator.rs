//! [`CacheAllocator`]: the allocator a cache hands to the kernels that pack weights.

use std::fmt;
use std::sync::Arc;

use super::cache::Shared;
use super::{PackedBuffer, PrepackError};
use crate::device::{
    write_buffer, BufferAllocator, ChunkRequest, DeviceError, GpuContext, STORAGE_USAGE,
};
use crate::plan::{align_up, BufferId};

/// The allocator a cache hands to kernels that pack weights: it allocates through the
/// cache's underlying allocator and tags each buffer as the cache's own, so that only
/// such buffers can be stored. Also a [`BufferAllocator`].
#[derive(Clone)]
pub struct CacheAllocator {
    shared: Arc<Shared>,
}

impl fmt::Debug for CacheAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheAllocator").finish_non_exhaustive()
    }
}

impl CacheAllocator {
    /// The allocator of the cache whose state is `shared`.
    pub(super) fn new(shared: Arc<Shared>) -> CacheAllocator {
        CacheAllocator { shared }
    }

    /// A storage buffer for `size` bytes of packed data (`STORAGE | COPY_SRC |
    /// COPY_DST`, rounded up to 4 bytes).
    ///
    /// # Errors
    /// [`PrepackError::ZeroSizeRequest`]; [`PrepackError::TooLarge`] beyond the
    /// device's buffer or storage-binding limit (checked before the allocator is
    /// called); [`PrepackError::Allocation`] with the allocator's error.
    pub fn allocate_packed(
        &self,
        ctx: &GpuContext,
        size: u64,
    ) -> Result<PackedBuffer, PrepackError> {
        if size == 0 {
            return Err(PrepackError::ZeroSizeRequest);
        }
        let max_size = ctx
            .limits
            .max_buffer_size
            .min(ctx.limits.max_storage_buffer_binding_size);
        let padded = align_up(size, wgpu::COPY_BUFFER_ALIGNMENT)
            .filter(|&p| p <= max_size)
            .ok_or(PrepackError::TooLarge { size, max_size })?;
        let chunk = {
            let mut state = self.shared.lock();
            state.requests += 1;
            state.requests
        };
        let request = ChunkRequest {
            buffer: BufferId(0),
            chunk,
            size: padded,
            usage: STORAGE_USAGE,
        };
        let buffer = self
            .allocate(ctx, &request)
            .map_err(|source| PrepackError::Allocation { size, source })?;
        Ok(PackedBuffer::new(buffer, size))
    }

    /// Allocates a buffer for `values` and writes them to it; on a failed write the
    /// buffer is handed back before the error returns.
    ///
    /// # Errors
    /// As [`CacheAllocator::allocate_packed`]; [`PrepackError::Upload`] when the write
    /// fails.
    pub fn upload_f32(
        &self,
        ctx: &GpuContext,
        values: &[f32],
    ) -> Result<PackedBuffer, PrepackError> {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        let buffer = self.allocate_packed(ctx, bytes.len() as u64)?;
        if let Err(e) = write_buffer(ctx, buffer.buffer(), 0, bytes) {
            self.release_packed(buffer);
            return Err(PrepackError::Upload {
                size: bytes.len() as u64,
                message: e.to_string(),
            });
        }
        Ok(buffer)
    }

    /// Uploads each part into a buffer of its own ([`CacheAllocator::upload_f32`]);
    /// when one fails, the buffers of the parts before it are handed back before the
    /// error returns.
    ///
    /// # Errors
    /// As [`CacheAllocator::upload_f32`].
    pub fn upload_parts(
        &self,
        ctx: &GpuContext,
        parts: &[&[f32]],
    ) -> Result<Vec<PackedBuffer>, PrepackError> {
        let mut done = Vec::with_capacity(parts.len());
        for part in parts {
            match self.upload_f32(ctx, part) {
                Ok(b) => done.push(b),
                Err(e) => {
                    for b in done.into_iter().rev() {
                        self.release_packed(b);
                    }
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// Hands back a buffer this allocator handed out and that was not stored (for
    /// example one a refused store returned). A buffer that is not outstanding (stored,
    /// already handed back, or foreign) is left alone: never released twice.
    pub fn release_packed(&self, buffer: PackedBuffer) {
        self.release(buffer.into_buffer());
    }
}

impl BufferAllocator for CacheAllocator {
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError> {
        let buffer = self.shared.allocator.allocate(ctx, request)?;
        self.shared.lock().outstanding.push(buffer.clone());
        Ok(buffer)
    }

    fn release(&self, buffer: wgpu::Buffer) {
        let was_outstanding = {
            let mut state = self.shared.lock();
            let at = state.outstanding.iter().position(|o| *o == buffer);
            at.map(|i| state.outstanding.swap_remove(i)).is_some()
        };
        if was_outstanding {
            self.shared.allocator.release(buffer);
        }
    }
}
