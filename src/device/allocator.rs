//! [`BufferAllocator`]: where the `wgpu::Buffer` of each planned chunk comes from.
//!
//! The default [`WgpuAllocator`] calls `device.create_buffer` inside error scopes, so
//! running out of memory is an error value, not a panic. Users replace it with their
//! own callbacks ([`CallbackAllocator`]), the way BNNS lets a graph context take
//! workspace `realloc`/`free` callbacks and ACL registers an allocator per stream.
//! [`CountingAllocator`] wraps any allocator and counts what it hands out.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

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
/// Ownership: [`crate::device::allocate_plan`] calls `allocate` once per chunk. When a
/// later chunk fails it hands every buffer already obtained back through `release`
/// before returning the error. A [`crate::device::PlannedMemory`] hands its buffers back
/// through `release` when the caller calls
/// [`crate::device::PlannedMemory::release`]; one that is simply dropped destroys its
/// buffers itself.
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

type AllocateFn = dyn Fn(&GpuContext, &ChunkRequest) -> Result<wgpu::Buffer, DeviceError>;
type ReleaseFn = dyn Fn(wgpu::Buffer);

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
        allocate: impl Fn(&GpuContext, &ChunkRequest) -> Result<wgpu::Buffer, DeviceError> + 'static,
        release: impl Fn(wgpu::Buffer) + 'static,
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

/// What a [`CountingAllocator`] has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocatorReport {
    /// Successful allocations.
    pub allocations: u64,
    /// Failed allocations.
    pub failures: u64,
    /// Buffers handed back.
    pub releases: u64,
    /// Bytes allocated and not yet released (saturating).
    pub live_bytes: u64,
}

impl AllocatorReport {
    /// Buffers allocated and not released.
    pub fn live_buffers(&self) -> u64 {
        self.allocations.saturating_sub(self.releases)
    }
}

/// Wraps an allocator and counts allocations, failures and releases.
#[derive(Debug, Default)]
pub struct CountingAllocator<A> {
    inner: A,
    allocations: AtomicU64,
    failures: AtomicU64,
    releases: AtomicU64,
    live_bytes: AtomicU64,
}

impl<A: BufferAllocator> CountingAllocator<A> {
    /// Counts what `inner` hands out.
    pub fn new(inner: A) -> CountingAllocator<A> {
        CountingAllocator {
            inner,
            allocations: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn report(&self) -> AllocatorReport {
        AllocatorReport {
            allocations: self.allocations.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            releases: self.releases.load(Ordering::Relaxed),
            live_bytes: self.live_bytes.load(Ordering::Relaxed),
        }
    }
}

impl<A: BufferAllocator> BufferAllocator for CountingAllocator<A> {
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError> {
        let result = self.inner.allocate(ctx, request);
        match &result {
            Ok(buffer) => {
                self.allocations.fetch_add(1, Ordering::Relaxed);
                let size = buffer.size();
                let _ = self
                    .live_bytes
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                        Some(v.saturating_add(size))
                    });
            }
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    fn release(&self, buffer: wgpu::Buffer) {
        self.releases.fetch_add(1, Ordering::Relaxed);
        let size = buffer.size();
        let _ = self
            .live_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(size))
            });
        self.inner.release(buffer);
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

    #[test]
    fn report_counts_live_buffers_without_underflow() {
        let report = AllocatorReport {
            allocations: 2,
            failures: 1,
            releases: 3,
            live_bytes: 0,
        };
        assert_eq!(report.live_buffers(), 0);
        let report = AllocatorReport {
            allocations: 5,
            releases: 2,
            ..AllocatorReport::default()
        };
        assert_eq!(report.live_buffers(), 3);
    }
}
