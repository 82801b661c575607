//! What the cache holds and hands out: [`PackedBuffer`], [`PackedWeight`] (which
//! frees its regions once, when the last owner lets go), the store's outcome and
//! error, and the cache's counters.

use std::fmt;
use std::sync::Arc;

use super::PrepackError;
use super::PrepackKey;
use crate::storage::{Memory, OwnedRegion, Region, Storage};

/// The storage underneath a cache: where packed buffers come from and go back to.
pub type CacheStorage<M = wgpu::Buffer> = Arc<dyn Storage<Memory = M>>;

/// One buffer of packed data: a region (a whole `wgpu::Buffer`, or a range of a page
/// of a [`crate::storage::PagedStorage`]) and the bytes of it the data uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedBuffer<M = wgpu::Buffer> {
    region: Region<M>,
    size: u64,
}

impl PackedBuffer {
    /// Wraps a whole buffer whose first `size` bytes hold packed data. The cache only
    /// accepts regions its own allocator handed out
    /// ([`CacheAllocator::allocate_packed`](super::CacheAllocator::allocate_packed));
    /// others are refused by
    /// [`PrepackedWeightCache::store`](super::PrepackedWeightCache::store).
    pub fn new(buffer: wgpu::Buffer, size: u64) -> PackedBuffer {
        PackedBuffer::from_region(Region::whole(buffer), size)
    }
}

impl<M: Memory> PackedBuffer<M> {
    /// Wraps a region whose first `size` bytes hold packed data.
    pub fn from_region(region: Region<M>, size: u64) -> PackedBuffer<M> {
        PackedBuffer { region, size }
    }

    /// The block the data lies in.
    pub fn buffer(&self) -> &M {
        &self.region.buffer
    }

    /// The region the data lies in (its offset in the block included).
    pub fn region(&self) -> &Region<M> {
        &self.region
    }

    /// Bytes of packed data.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The region, unwrapped.
    pub fn into_region(self) -> Region<M> {
        self.region
    }
}

/// The packed data of one weight, owned by the cache and shared through `Arc` handles.
/// Its regions go back to the cache's storage when the cache lets go of it (replaced
/// or dropped) and no handle is left.
pub struct PackedWeight<M: Memory = wgpu::Buffer> {
    key: PrepackKey,
    buffers: Vec<PackedBuffer<M>>,
    /// The owners of the buffers' regions (in the same order): dropping the weight
    /// frees each once.
    held: Vec<OwnedRegion<M>>,
}

impl<M: Memory> fmt::Debug for PackedWeight<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedWeight")
            .field("key", &self.key)
            .field("buffers", &self.buffers)
            .finish_non_exhaustive()
    }
}

impl<M: Memory> PackedWeight<M> {
    /// The data of `key`, whose regions `held` owns (freed to their storage when the
    /// weight is dropped).
    pub(super) fn new(
        key: PrepackKey,
        buffers: Vec<PackedBuffer<M>>,
        held: Vec<OwnedRegion<M>>,
    ) -> PackedWeight<M> {
        PackedWeight { key, buffers, held }
    }

    /// The key it is stored under.
    pub fn key(&self) -> &PrepackKey {
        &self.key
    }

    /// Its buffers, in the order they were stored.
    pub fn buffers(&self) -> &[PackedBuffer<M>] {
        &self.buffers
    }

    /// Bytes of memory it holds (its regions' sizes).
    pub fn bytes(&self) -> u64 {
        self.held
            .iter()
            .fold(0u64, |acc, r| acc.saturating_add(r.region().size))
    }
}

/// Counters of a cache: stores, replacements, refusals, hits and misses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Successful stores (replacements included).
    pub stores: u64,
    /// Stores that replaced an entry under the same key.
    pub replacements: u64,
    /// Stores refused (the buffers went back to the caller).
    pub refused_stores: u64,
    /// Lookups ([`PrepackedWeightCache::get`](super::PrepackedWeightCache::get)) that
    /// found the key.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
}

/// What a successful store did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// The key was new.
    Inserted,
    /// The key was there: its old data was released (at once, or when the last handle
    /// to it is dropped) and replaced.
    Replaced,
}

/// A refused store: why, and the buffers, which still belong to the caller.
#[derive(Debug)]
pub struct StoreError<M = wgpu::Buffer> {
    /// Why the store was refused.
    pub error: PrepackError,
    /// The buffers given to the store, unchanged.
    pub buffers: Vec<PackedBuffer<M>>,
}

impl<M> StoreError<M> {
    /// The buffers, back to the caller.
    pub fn into_buffers(self) -> Vec<PackedBuffer<M>> {
        self.buffers
    }
}

impl<M> fmt::Display for StoreError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} buffers returned to the caller)",
            self.error,
            self.buffers.len()
        )
    }
}

impl<M: fmt::Debug> std::error::Error for StoreError<M> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<M> From<StoreError<M>> for PrepackError {
    fn from(error: StoreError<M>) -> PrepackError {
        error.error
    }
}

/// The result of
/// [`PrepackedWeightCache::get_or_pack`](super::PrepackedWeightCache::get_or_pack).
#[derive(Debug, Clone)]
pub struct Lookup<M: Memory = wgpu::Buffer> {
    /// The cached data.
    pub weight: Arc<PackedWeight<M>>,
    /// Whether this call packed and stored it (false: a hit).
    pub packed: bool,
}
