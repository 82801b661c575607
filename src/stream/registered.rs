//! What a stream keeps of its allocator: one [`Storage`] of device memory and, for a
//! registered one, the identity that the busy rule claims ([`StreamStorage`]).
//!
//! Every allocator shape a stream accepts is adapted onto the one storage trait: the
//! default is a [`WgpuStorage`] of the stream's own; [`super::Stream::register_storage`]
//! takes any storage (a page pool, a user's implementation); an ACL-style
//! [`super::AllocatorDesc`] becomes a [`DescStorage`]. A block taken from any of them
//! is held in an [`OwnedRegion`] whose drop frees it, so a block is freed exactly once
//! however an execution ends.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::descriptor::Parts;
use super::{AllocFailure, BlockRequest};
use crate::device::{storage_copy, GpuContext, SharedStorage, WgpuStorage};
use crate::plan::BufferId;
use crate::storage::{OwnedRegion, Region, RegionRequest, Storage, StorageError};

/// A stream's source of blocks: a storage, and the identity of its owner when it is
/// shared (registered) rather than the stream's private default.
#[derive(Clone)]
pub(crate) struct StreamStorage {
    storage: SharedStorage,
    /// The identity of the allocator object, shared by every registration of it;
    /// `None` for a stream's private default.
    key: Option<usize>,
}

impl StreamStorage {
    /// The stream's private default: one wgpu buffer per block.
    pub(crate) fn private_default(ctx: &GpuContext) -> StreamStorage {
        StreamStorage {
            storage: Arc::new(WgpuStorage::wgpu(ctx)),
            key: None,
        }
    }

    /// A registered storage; registrations of the same `Arc` share a key.
    pub(crate) fn registered<S>(storage: Arc<S>) -> StreamStorage
    where
        S: Storage<Memory = wgpu::Buffer> + 'static,
    {
        let key = Arc::as_ptr(&storage).cast::<()>().addr();
        StreamStorage {
            storage,
            key: Some(key),
        }
    }

    /// A registered ACL-style descriptor, keyed by its object.
    pub(crate) fn from_desc<T, B>(ctx: &GpuContext, parts: Parts<T, B>) -> StreamStorage
    where
        T: Send + Sync + 'static,
        B: Send + 'static,
    {
        let key = Arc::as_ptr(&parts.object).cast::<()>().addr();
        StreamStorage {
            storage: Arc::new(DescStorage::new(ctx, parts)),
            key: Some(key),
        }
    }

    /// The claimed identity (`None` for the private default).
    pub(crate) fn key(&self) -> Option<usize> {
        self.key
    }

    /// A block for `request`, held, and where it lives.
    pub(crate) fn allocate(
        &self,
        request: &BlockRequest,
    ) -> Result<(OwnedRegion, Region), AllocFailure> {
        let wanted = RegionRequest::new(request.size)
            .alignment(request.alignment)
            .usage(request.usage)
            .label(format!(
                "wgalloc stream b{} c{}",
                request.buffer, request.chunk
            ))
            .for_chunk(BufferId(request.buffer), request.chunk);
        let region = self.storage.allocate(&wanted)?;
        Ok((
            OwnedRegion::new(self.storage.clone(), region.clone()),
            region,
        ))
    }
}

/// An ACL-style allocator (an object and `alloc`/`free`/`address_of` callbacks) as a
/// [`Storage`]: `allocate` calls `alloc` and `address_of`, and remembers the user's
/// block of each region so that `free` hands exactly that block to `free`.
pub(crate) struct DescStorage<T, B> {
    ctx: GpuContext,
    parts: Parts<T, B>,
    live: Mutex<Vec<(Region, B)>>,
}

impl<T, B> DescStorage<T, B> {
    pub(crate) fn new(ctx: &GpuContext, parts: Parts<T, B>) -> DescStorage<T, B> {
        DescStorage {
            ctx: ctx.clone(),
            parts,
            live: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(Region, B)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `block` (`size` bytes) to the user's `free`, counted.
    fn give_back(&self, size: u64, block: B) {
        (self.parts.free)(&self.parts.object, block);
        if let Some(counter) = &self.parts.counter {
            counter.record_free(size);
        }
    }
}

impl<T, B> Storage for DescStorage<T, B>
where
    T: Send + Sync + 'static,
    B: Send + 'static,
{
    type Memory = wgpu::Buffer;

    fn allocate(&self, request: &RegionRequest) -> Result<Region, StorageError> {
        let (buffer, chunk) = request.for_chunk.unwrap_or((BufferId(0), 0));
        let block_request = BlockRequest {
            buffer: buffer.0,
            chunk,
            size: request.checked_size()?,
            alignment: request.alignment,
            usage: request.usage,
        };
        let parts = &self.parts;
        let block = match (parts.alloc)(&parts.object, &block_request) {
            Ok(block) => block,
            Err(e) => {
                if let Some(counter) = &parts.counter {
                    counter.record_failure();
                }
                return Err(StorageError::Refused {
                    message: e.to_string(),
                });
            }
        };
        let address = (parts.address_of)(&parts.object, &block);
        if let Some(counter) = &parts.counter {
            counter.record_allocation(address.size);
        }
        self.lock().push((address.clone(), block));
        Ok(address)
    }

    fn free(&self, region: Region) -> Result<(), StorageError> {
        let block = {
            let mut live = self.lock();
            let at = live.iter().position(|(r, _)| *r == region);
            at.map(|i| live.swap_remove(i).1)
        };
        match block {
            Some(block) => {
                self.give_back(region.size, block);
                Ok(())
            }
            None => {
                if let Some(counter) = &self.parts.counter {
                    counter.record_bad_free();
                }
                Err(StorageError::UnknownRegion {
                    offset: region.offset,
                    size: region.size,
                })
            }
        }
    }

    fn copy(&self, from: &Region, to: &Region, bytes: u64) -> Result<(), StorageError> {
        storage_copy(&self.ctx, from, to, bytes)
    }
}

impl<T, B> Drop for DescStorage<T, B> {
    fn drop(&mut self) {
        // Blocks still live go back through the user's `free` (none are, once every
        // held region has dropped: they hold this storage).
        let live = std::mem::take(&mut *self.lock());
        for (region, block) in live {
            self.give_back(region.size, block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{CountingStorage, HostStorage};

    #[test]
    fn dropping_a_held_region_frees_it_once() {
        let storage = Arc::new(CountingStorage::new(HostStorage::unlimited()));
        let region = storage.allocate(&RegionRequest::new(16)).expect("region");
        let held = OwnedRegion::new(storage.clone(), region.clone());
        assert_eq!(storage.report().live_regions, 1);
        drop(held);
        let report = storage.report();
        assert_eq!(
            (report.live_regions, report.frees, report.bad_frees),
            (0, 1, 0)
        );
        assert!(storage.free(region).is_err(), "already freed");
    }
}
