//! [`BufferStorage`]: the [`Storage`] of a device. Each region is a whole
//! `wgpu::Buffer` obtained from a [`BufferAllocator`] (wgpu's `create_buffer` inside
//! error scopes for [`WgpuStorage`], or the user's callbacks), so the whole-buffer
//! allocators of ggml's buffer types are an adapter onto the one storage trait. Wrap it
//! in a [`crate::storage::PagedStorage`] to hand out sub-ranges of larger buffers.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{
    scoped, BufferAllocator, ChunkRequest, DeviceError, GpuContext, SharedStorage, WgpuAllocator,
};
use crate::plan::BufferId;
use crate::storage::{check_copy, Region, RegionRequest, Storage, StorageError};

/// Device storage: one buffer per region from a [`BufferAllocator`], checked (size and
/// usage) before it is handed out, and taken back only if it is live.
pub struct BufferStorage<A: BufferAllocator> {
    ctx: GpuContext,
    allocator: A,
    requests: AtomicUsize,
    live: Mutex<HashSet<wgpu::Buffer>>,
}

/// The default device storage: plain `wgpu::Buffer`s, out of memory as an error value.
pub type WgpuStorage = BufferStorage<WgpuAllocator>;

impl<A: BufferAllocator> fmt::Debug for BufferStorage<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferStorage")
            .field("adapter", &self.ctx.info.name)
            .field("live", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl WgpuStorage {
    /// Plain wgpu buffers on `ctx`'s device.
    pub fn wgpu(ctx: &GpuContext) -> WgpuStorage {
        BufferStorage::new(ctx, WgpuAllocator)
    }

    /// [`WgpuStorage::wgpu`], shared: what [`super::allocate_plan`] takes when plain
    /// wgpu buffers are wanted (`allocate_plan(&ctx, &plan, STORAGE_USAGE,
    /// &WgpuStorage::shared(&ctx))`).
    pub fn shared(ctx: &GpuContext) -> SharedStorage {
        Arc::new(WgpuStorage::wgpu(ctx))
    }
}

impl<A: BufferAllocator> BufferStorage<A> {
    /// Buffers from `allocator` on `ctx`'s device.
    pub fn new(ctx: &GpuContext, allocator: A) -> BufferStorage<A> {
        BufferStorage {
            ctx: ctx.clone(),
            allocator,
            requests: AtomicUsize::new(0),
            live: Mutex::new(HashSet::new()),
        }
    }

    /// The allocator underneath.
    pub fn allocator(&self) -> &A {
        &self.allocator
    }

    /// Buffers handed out and not freed.
    pub fn live_buffers(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<wgpu::Buffer>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<A: BufferAllocator + Send + Sync> Storage for BufferStorage<A> {
    type Memory = wgpu::Buffer;

    fn allocate(&self, request: &RegionRequest) -> Result<Region, StorageError> {
        let size = request.checked_size()?;
        let max = self.ctx.limits.max_buffer_size;
        if size > max {
            return Err(StorageError::TooLarge { size, max });
        }
        let (buffer, chunk) = request
            .for_chunk
            .unwrap_or_else(|| (BufferId(0), self.requests.fetch_add(1, Ordering::Relaxed)));
        let chunk = ChunkRequest {
            buffer,
            chunk,
            size,
            usage: request.usage,
        };
        let buffer = self.allocator.allocate(&self.ctx, &chunk)?;
        if buffer.size() < size || !buffer.usage().contains(request.usage) {
            let message = format!(
                "asked for {size} bytes with {:?}, got {} bytes with {:?}",
                request.usage,
                buffer.size(),
                buffer.usage()
            );
            self.allocator.release(buffer);
            return Err(StorageError::Refused { message });
        }
        self.lock().insert(buffer.clone());
        Ok(Region::whole(buffer))
    }

    fn free(&self, region: Region) -> Result<(), StorageError> {
        let whole = region.offset == 0 && region.size == region.buffer.size();
        if !whole || !self.lock().remove(&region.buffer) {
            return Err(StorageError::UnknownRegion {
                offset: region.offset,
                size: region.size,
            });
        }
        self.allocator.release(region.buffer);
        Ok(())
    }

    fn copy(&self, from: &Region, to: &Region, bytes: u64) -> Result<(), StorageError> {
        storage_copy(&self.ctx, from, to, bytes)
    }
}

/// [`crate::storage::Storage::copy`] for any storage of `wgpu::Buffer`s on `ctx`'s
/// device (plain buffers, an ACL descriptor's blocks, a graph context's callback
/// blocks): the copy checked against the trait's contract, then [`copy_region`], a
/// device refusal as [`StorageError::Backend`].
///
/// # Errors
/// [`StorageError::BadCopy`]; [`StorageError::Backend`] when the device refuses.
pub(crate) fn storage_copy(
    ctx: &GpuContext,
    from: &Region,
    to: &Region,
    bytes: u64,
) -> Result<(), StorageError> {
    check_copy(from, to, bytes)?;
    copy_region(ctx, from, to, bytes).map_err(StorageError::from)
}

impl<A: BufferAllocator> Drop for BufferStorage<A> {
    fn drop(&mut self) {
        // Regions still out when the storage goes back to the allocator (the default
        // destroys them): a handle kept past this point is invalid.
        let live: Vec<wgpu::Buffer> = self.lock().drain().collect();
        for buffer in live {
            self.allocator.release(buffer);
        }
    }
}

/// Copies `bytes` bytes from the start of `from` to the start of `to` on the device
/// and submits the copy, inside error scopes. Nothing is submitted for 0 bytes. Two
/// ranges of one buffer (a user's pool, a page of a [`crate::storage::PagedStorage`])
/// are copied through a scratch buffer, since wgpu copies only between two buffers;
/// the ranges may then even overlap (the bytes move as `memmove` moves them).
///
/// # Errors
/// [`DeviceError::Validation`] when wgpu refuses the copy (a buffer without the copy
/// usages, of another device, or a range past a buffer's end);
/// [`DeviceError::OutOfDeviceMemory`] when the scratch buffer cannot be made.
pub fn copy_region(
    ctx: &GpuContext,
    from: &Region,
    to: &Region,
    bytes: u64,
) -> Result<(), DeviceError> {
    if bytes == 0 {
        return Ok(());
    }
    scoped(&ctx.device, bytes, || {
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgalloc region copy"),
            });
        if from.buffer == to.buffer {
            let scratch = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgalloc region copy scratch"),
                size: bytes,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            encoder.copy_buffer_to_buffer(&from.buffer, from.offset, &scratch, 0, bytes);
            encoder.copy_buffer_to_buffer(&scratch, 0, &to.buffer, to.offset, bytes);
            ctx.queue.submit([encoder.finish()]);
            // Dropped, not destroyed: wgpu frees it once the submitted copy has run.
            drop(scratch);
        } else {
            encoder.copy_buffer_to_buffer(&from.buffer, from.offset, &to.buffer, to.offset, bytes);
            ctx.queue.submit([encoder.finish()]);
        }
    })
}
