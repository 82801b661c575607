//! [`CacheAllocator`]: the allocator a cache hands to the kernels that pack weights.

use std::fmt;
use std::sync::Arc;

use super::cache::Shared;
use super::entry::CacheStorage;
use super::{PackedBuffer, PrepackError};
use crate::device::{write_buffer, DeviceError, GpuContext, WgpuStorage};
use crate::plan::align_up;
use crate::storage::{Memory, OwnedRegion, Region, RegionRequest, Storage, StorageError};

/// The allocator a cache hands to kernels that pack weights: it allocates regions from
/// the cache's storage and tags each as the cache's own, so that only such regions can
/// be stored. Also a [`Storage`] itself.
pub struct CacheAllocator<M: Memory = wgpu::Buffer> {
    shared: Arc<Shared<M>>,
}

impl<M: Memory> Clone for CacheAllocator<M> {
    fn clone(&self) -> Self {
        CacheAllocator {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<M: Memory> fmt::Debug for CacheAllocator<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheAllocator").finish_non_exhaustive()
    }
}

impl<M: Memory> CacheAllocator<M> {
    /// The allocator of the cache whose state is `shared`.
    pub(super) fn new(shared: Arc<Shared<M>>) -> CacheAllocator<M> {
        CacheAllocator { shared }
    }

    /// The storage underneath, if the cache has one yet.
    fn storage(&self) -> Result<&CacheStorage<M>, StorageError> {
        self.shared.storage.get().ok_or(StorageError::Refused {
            message: "the cache has no storage yet".into(),
        })
    }

    /// A region for `size` bytes of packed data (rounded up to 4 bytes) starting at a
    /// multiple of `alignment` (a power of two) from the cache's storage, tagged as the
    /// cache's own.
    ///
    /// # Errors
    /// [`PrepackError::ZeroSizeRequest`]; [`PrepackError::Allocation`] with the
    /// storage's error.
    pub fn allocate_region(
        &self,
        size: u64,
        alignment: u64,
    ) -> Result<PackedBuffer<M>, PrepackError> {
        if size == 0 {
            return Err(PrepackError::ZeroSizeRequest);
        }
        let label = {
            let mut state = self.shared.lock();
            state.requests += 1;
            format!("wgalloc packed {}", state.requests)
        };
        let request = RegionRequest::new(size).alignment(alignment).label(label);
        let region = self
            .allocate(&request)
            .map_err(|e| PrepackError::Allocation {
                size,
                source: DeviceError::from(e),
            })?;
        Ok(PackedBuffer::from_region(region, size))
    }

    /// Hands back a region this allocator handed out and that was not stored (for
    /// example one a refused store returned). A region that is not outstanding (stored,
    /// already handed back, or foreign) is left alone: never freed twice.
    pub fn release_packed(&self, buffer: PackedBuffer<M>) {
        // Only an outstanding region reaches the storage; the rest is left alone.
        let _ = self.free(buffer.into_region());
    }
}

impl CacheAllocator {
    /// A storage buffer region for `size` bytes of packed data (`STORAGE | COPY_SRC |
    /// COPY_DST`, rounded up to 4 bytes, at an offset the device can bind). A default cache takes its storage from
    /// `ctx` on the first call.
    ///
    /// # Errors
    /// [`PrepackError::ZeroSizeRequest`]; [`PrepackError::TooLarge`] beyond the
    /// device's buffer or storage-binding limit (checked before the storage is
    /// called); [`PrepackError::Allocation`] with the storage's error.
    pub fn allocate_packed(
        &self,
        ctx: &GpuContext,
        size: u64,
    ) -> Result<PackedBuffer, PrepackError> {
        let max_size = ctx
            .limits
            .max_buffer_size
            .min(ctx.limits.max_storage_buffer_binding_size);
        align_up(size, wgpu::COPY_BUFFER_ALIGNMENT)
            .filter(|&p| p <= max_size)
            .ok_or(PrepackError::TooLarge { size, max_size })?;
        self.shared
            .storage
            .get_or_init(|| Arc::new(WgpuStorage::wgpu(ctx)));
        let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
        self.allocate_region(size, alignment)
    }

    /// Allocates a region for `values` and writes them to it; on a failed write the
    /// region is handed back before the error returns.
    ///
    /// # Errors
    /// As [`CacheAllocator::allocate_packed`]; [`PrepackError::Upload`] when the write
    /// fails.
    pub fn upload_f32(
        &self,
        ctx: &GpuContext,
        values: &[f32],
    ) -> Result<PackedBuffer, PrepackError> {
        self.upload_bytes(ctx, bytemuck::cast_slice(values))
    }

    /// [`CacheAllocator::upload_f32`] for a tensor stored as f16: `values` rounded to
    /// the nearest f16 (ties to even), two bytes each (zero-padded to a multiple of 4).
    ///
    /// # Errors
    /// As [`CacheAllocator::upload_f32`].
    pub fn upload_f16(
        &self,
        ctx: &GpuContext,
        values: &[f32],
    ) -> Result<PackedBuffer, PrepackError> {
        let mut bytes: Vec<u8> = values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        self.upload_bytes(ctx, &bytes)
    }

    /// Allocates a region for `bytes` (a multiple of 4) and writes them to it; on a
    /// failed write the region is handed back before the error returns.
    fn upload_bytes(&self, ctx: &GpuContext, bytes: &[u8]) -> Result<PackedBuffer, PrepackError> {
        let buffer = self.allocate_packed(ctx, bytes.len() as u64)?;
        let region = buffer.region();
        if let Err(e) = write_buffer(ctx, &region.buffer, region.offset, bytes) {
            self.release_packed(buffer);
            return Err(PrepackError::Upload {
                size: bytes.len() as u64,
                message: e.to_string(),
            });
        }
        Ok(buffer)
    }

    /// Uploads each part into a region of its own ([`CacheAllocator::upload_f32`]);
    /// when one fails, the regions of the parts before it are handed back before the
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
}

impl<M: Memory> Storage for CacheAllocator<M> {
    type Memory = M;

    fn allocate(&self, request: &RegionRequest) -> Result<Region<M>, StorageError> {
        let storage = self.storage()?;
        let owned = OwnedRegion::allocate(Arc::clone(storage), request)?;
        let region = owned.region().clone();
        self.shared.lock().outstanding.push(owned);
        Ok(region)
    }

    fn free(&self, region: Region<M>) -> Result<(), StorageError> {
        let owned = {
            let mut state = self.shared.lock();
            let at = state.outstanding.iter().position(|o| *o.region() == region);
            at.map(|i| state.outstanding.swap_remove(i))
        };
        let Some(owned) = owned else {
            return Err(StorageError::UnknownRegion {
                offset: region.offset,
                size: region.size,
            });
        };
        // Freed here, outside the cache's lock, with the storage's answer.
        let storage = Arc::clone(owned.storage());
        storage.free(owned.into_region())
    }

    fn copy(&self, from: &Region<M>, to: &Region<M>, bytes: u64) -> Result<(), StorageError> {
        self.storage()?.copy(from, to, bytes)
    }
}
