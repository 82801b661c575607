//! [`BufferAllocator`]: where the `wgpu::Buffer` of each planned chunk comes from.
//!
//! The default [`WgpuAllocator`] calls `device.create_buffer` inside error scopes, so
//! running out of memory is an error value, not a panic. Users replace it with their
//! own callbacks ([`CallbackAllocator`]), the way ggml's buffer types allocate whole
//! buffers. An allocator is a way to make a storage: [`super::BufferStorage`] turns one
//! into the [`crate::storage::Storage`] that [`super::allocate_plan`] takes (count what
//! it hands out with a [`crate::storage::CountingStorage`] around it).

use std::fmt;

use super::{scope, DeviceError, GpuContext};
use crate::plan::BufferId;

/// One buffer the plan needs: chunk `chunk` of buffer `buffer`, `size` bytes (already
/// rounded up to `wgpu::COPY_BUFFER_ALIGNMENT`) with `usage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRequest {
    /// The plan's buffer.
    pub buffer: BufferId,
    /// The chunk inside it.
    pub chunk: usize,
    /// Bytes; a multiple of 4.
    pub size: u64,
    /// The usage the buffer must have.
    pub usage: wgpu::BufferUsages,
}

impl ChunkRequest {
    /// A label for wgpu (`wgalloc b0 c1`).
    pub fn label(&self) -> String {
        format!("wgalloc b{} c{}", self.buffer.0, self.chunk)
    }
}

/// A source of `wgpu::Buffer`s for planned chunks.
///
/// Ownership: a [`super::BufferStorage`] over it calls `allocate` once per region it is
/// asked for and `release` once for every buffer it takes back (a region freed, a
/// buffer refused for being short or lacking a usage, or every buffer still out when
/// the storage is dropped).
pub trait BufferAllocator {
    /// A buffer of at least `request.size` bytes with `request.usage`.
    ///
    /// # Errors
    /// Any [`DeviceError`]; the default implementation gives
    /// [`DeviceError::OutOfDeviceMemory`] or [`DeviceError::Validation`].
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError>;

    /// Takes back a buffer this allocator handed out. The default destroys it so its
    /// memory returns at once.
    fn release(&self, buffer: wgpu::Buffer) {
        buffer.destroy();
    }
}

impl<A: BufferAllocator + ?Sized> BufferAllocator for std::sync::Arc<A> {
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError> {
        (**self).allocate(ctx, request)
    }

    fn release(&self, buffer: wgpu::Buffer) {
        (**self).release(buffer);
    }
}

/// The default allocator: `device.create_buffer` inside out-of-memory and validation
/// error scopes.
#[derive(Debug, Clone, Copy, Default)]
pub struct WgpuAllocator;

impl BufferAllocator for WgpuAllocator {
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError> {
        let label = request.label();
        scope::scoped(&ctx.device, request.size, || {
            ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(&label),
                size: request.size,
                usage: request.usage,
                mapped_at_creation: false,
            })
        })
    }
}

type AllocateFn =
    dyn Fn(&GpuContext, &ChunkRequest) -> Result<wgpu::Buffer, DeviceError> + Send + Sync;
type ReleaseFn = dyn Fn(wgpu::Buffer) + Send + Sync;

/// An allocator made of two closures: `allocate` for each chunk and `release` for each
/// buffer handed back.
pub struct CallbackAllocator {
    allocate: Box<AllocateFn>,
    release: Box<ReleaseFn>,
}

impl fmt::Debug for CallbackAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackAllocator").finish_non_exhaustive()
    }
}

impl CallbackAllocator {
    /// An allocator that calls `allocate` for every chunk and `release` for every buffer
    /// handed back (`release` should destroy the buffer or keep it for reuse).
    pub fn new(
        allocate: impl Fn(&GpuContext, &ChunkRequest) -> Result<wgpu::Buffer, DeviceError>
            + Send
            + Sync
            + 'static,
        release: impl Fn(wgpu::Buffer) + Send + Sync + 'static,
    ) -> CallbackAllocator {
        CallbackAllocator {
            allocate: Box::new(allocate),
            release: Box::new(release),
        }
    }
}

impl BufferAllocator for CallbackAllocator {
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError> {
        (self.allocate)(ctx, request)
    }

    fn release(&self, buffer: wgpu::Buffer) {
        (self.release)(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_label_names_buffer_and_chunk() {
        let request = ChunkRequest {
            buffer: BufferId(2),
            chunk: 5,
            size: 64,
            usage: wgpu::BufferUsages::STORAGE,
        };
        assert_eq!(request.label(), "wgalloc b2 c5");
    }
}
