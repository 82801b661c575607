//! What the cache holds and hands out: [`PackedBuffer`], [`PackedWeight`] (which
//! releases its buffers once, when the last owner lets go), the store's outcome and
//! error, and the cache's counters.

use std::fmt;
use std::sync::Arc;

use super::PrepackError;
use super::PrepackKey;
use crate::device::BufferAllocator;

/// The allocator underneath a cache: any [`BufferAllocator`] that can be shared across
/// threads (e.g. a [`crate::device::CountingAllocator`] in an `Arc`).
pub type SharedAllocator = Arc<dyn BufferAllocator + Send + Sync>;

/// One buffer of packed data: a `wgpu::Buffer` and the bytes of it the data uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedBuffer {
    buffer: wgpu::Buffer,
    size: u64,
}

impl PackedBuffer {
    /// Wraps a buffer whose first `size` bytes hold packed data. The cache only accepts
    /// buffers its own allocator handed out
    /// ([`CacheAllocator::allocate_packed`](super::CacheAllocator::allocate_packed));
    /// others are refused by
    /// [`PrepackedWeightCache::store`](super::PrepackedWeightCache::store).
    pub fn new(buffer: wgpu::Buffer, size: u64) -> PackedBuffer {
        PackedBuffer { buffer, size }
    }

    /// The wgpu buffer.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Bytes of packed data.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The wgpu buffer, unwrapped.
    pub fn into_buffer(self) -> wgpu::Buffer {
        self.buffer
    }
}

/// The packed data of one weight, owned by the cache and shared through `Arc` handles.
/// Its buffers go back to the cache's allocator when the cache lets go of it (replaced
/// or dropped) and no handle is left.
pub struct PackedWeight {
    key: PrepackKey,
    buffers: Vec<PackedBuffer>,
    allocator: SharedAllocator,
}

impl fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedWeight")
            .field("key", &self.key)
            .field("buffers", &self.buffers)
            .finish_non_exhaustive()
    }
}

impl PackedWeight {
    /// The data of `key`, released through `allocator` when dropped.
    pub(super) fn new(
        key: PrepackKey,
        buffers: Vec<PackedBuffer>,
        allocator: SharedAllocator,
    ) -> PackedWeight {
        PackedWeight {
            key,
            buffers,
            allocator,
        }
    }

    /// The key it is stored under.
    pub fn key(&self) -> &PrepackKey {
        &self.key
    }

    /// Its buffers, in the order they were stored.
    pub fn buffers(&self) -> &[PackedBuffer] {
        &self.buffers
    }

    /// Bytes of device memory it holds (the wgpu buffers' sizes).
    pub fn bytes(&self) -> u64 {
        self.buffers
            .iter()
            .fold(0u64, |acc, b| acc.saturating_add(b.buffer.size()))
    }
}

impl Drop for PackedWeight {
    fn drop(&mut self) {
        for buffer in self.buffers.drain(..) {
            self.allocator.release(buffer.buffer);
        }
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
pub struct StoreError {
    /// Why the store was refused.
    pub error: PrepackError,
    /// The buffers given to the store, unchanged.
    pub buffers: Vec<PackedBuffer>,
}

impl StoreError {
    /// The buffers, back to the caller.
    pub fn into_buffers(self) -> Vec<PackedBuffer> {
        self.buffers
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} buffers returned to the caller)",
            self.error,
            self.buffers.len()
        )
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<StoreError> for PrepackError {
    fn from(error: StoreError) -> PrepackError {
        error.error
    }
}

/// The result of
/// [`PrepackedWeightCache::get_or_pack`](super::PrepackedWeightCache::get_or_pack).
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The cached data.
    pub weight: Arc<PackedWeight>,
    /// Whether this call packed and stored it (false: a hit).
    pub packed: bool,
}
