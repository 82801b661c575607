//! [`PrepackedWeightCache`]: pre-packed weight buffers shared by nodes and graphs.
//!
//! The rules (from ONNX Runtime's shared pre-packed weight cache, in Rust terms):
//! * a kernel packs a weight into one or more buffers allocated with the allocator the
//!   cache hands out ([`PrepackedWeightCache::allocator`]);
//! * [`PrepackedWeightCache::store`] takes ownership of them on success; on error the
//!   [`StoreError`] gives them back and the caller still owns them (and can release
//!   them through the same allocator);
//! * storing again under the same key releases the old buffers and replaces them;
//! * other nodes and graphs get the same buffers with [`PrepackedWeightCache::get`].
//!
//! Every buffer goes back through the allocator underneath the cache exactly once:
//! when it is replaced or the cache is dropped (deferred while a [`PackedWeight`]
//! handle still uses it, so a handle never dangles), or when the caller hands back a
//! buffer it did not store.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{PrepackError, PrepackKey};
use crate::device::{
    write_buffer, BufferAllocator, ChunkRequest, DeviceError, GpuContext, WgpuAllocator,
    DEFAULT_USAGE,
};
use crate::plan::{align_up, BufferId};

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
    /// buffers its own allocator handed out ([`CacheAllocator::allocate_packed`]);
    /// others are refused by [`PrepackedWeightCache::store`].
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
    /// [`PrepackedWeightCache::get`] calls that found the key.
    pub hits: u64,
    /// [`PrepackedWeightCache::get`] calls that did not.
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

/// A [`PrepackedWeightCache::get_or_pack`] result.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The cached data.
    pub weight: Arc<PackedWeight>,
    /// Whether this call packed and stored it (false: a hit).
    pub packed: bool,
}

#[derive(Default)]
struct State {
    entries: HashMap<PrepackKey, Arc<PackedWeight>>,
    /// Buffers the allocator handed out that are neither stored nor handed back (few
    /// at a time: a list; `wgpu::Buffer` compares by identity).
    outstanding: Vec<wgpu::Buffer>,
    stats: CacheStats,
    requests: usize,
}

struct Shared {
    allocator: SharedAllocator,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let state = std::mem::take(&mut *self.lock());
        // Entries release their buffers as they drop (or when their last handle does).
        drop(state.entries);
        for buffer in state.outstanding {
            self.allocator.release(buffer);
        }
    }
}

/// A cache of pre-packed weights: cheap to clone, every clone is the same cache, safe
/// to share between threads, graphs and sessions.
///
/// Keys are [`PrepackKey`]s (weight name, shape, content hash, packing format).
/// The cache, its clones and the [`CacheAllocator`]s it hands out keep one shared
/// state alive; when the last of them is dropped, every stored buffer (and every
/// buffer handed out but never stored nor handed back) goes back to the allocator
/// underneath, once.
#[derive(Clone)]
pub struct PrepackedWeightCache {
    shared: Arc<Shared>,
}

impl fmt::Debug for PrepackedWeightCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrepackedWeightCache")
            .field("len", &self.len())
            .field("bytes", &self.bytes())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for PrepackedWeightCache {
    fn default() -> Self {
        PrepackedWeightCache::new(Arc::new(WgpuAllocator))
    }
}

impl PrepackedWeightCache {
    /// An empty cache whose buffers come from `allocator` (and go back to it).
    pub fn new(allocator: SharedAllocator) -> PrepackedWeightCache {
        PrepackedWeightCache {
            shared: Arc::new(Shared {
                allocator,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The allocator kernels must pack into: buffers it hands out are tagged as this
    /// cache's own until stored or handed back.
    pub fn allocator(&self) -> CacheAllocator {
        CacheAllocator {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Whether `other` is a handle to the same cache.
    pub fn same_cache(&self, other: &PrepackedWeightCache) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Stores `buffers` as the packed data of `key`. On success the cache owns them;
    /// an entry already under `key` is released and replaced.
    ///
    /// # Errors
    /// A [`StoreError`] holding the buffers, unchanged, and why:
    /// [`PrepackError::NoBuffers`], [`PrepackError::ZeroSizeBuffer`],
    /// [`PrepackError::SizeMismatch`], [`PrepackError::DuplicateBuffer`], or
    /// [`PrepackError::ForeignBuffer`] for a buffer this cache's allocator did not hand
    /// out (or that is already stored or handed back).
    pub fn store(
        &self,
        key: PrepackKey,
        buffers: Vec<PackedBuffer>,
    ) -> Result<StoreOutcome, StoreError> {
        let mut state = self.shared.lock();
        if let Err(error) = check_store(&key, &buffers, &state.outstanding) {
            state.stats.refused_stores += 1;
            return Err(StoreError { error, buffers });
        }
        state
            .outstanding
            .retain(|o| buffers.iter().all(|b| b.buffer != *o));
        let weight = Arc::new(PackedWeight {
            key: key.clone(),
            buffers,
            allocator: Arc::clone(&self.shared.allocator),
        });
        let old = state.entries.insert(key, weight);
        state.stats.stores += 1;
        if old.is_some() {
            state.stats.replacements += 1;
        }
        drop(state);
        // Released here (outside the lock) unless a handle still uses it.
        Ok(match old {
            Some(_) => StoreOutcome::Replaced,
            None => StoreOutcome::Inserted,
        })
    }

    /// The packed data under `key` (a hit), or `None` (a miss). The cache stays the
    /// owner; the handle keeps the buffers valid while it lives.
    pub fn get(&self, key: &PrepackKey) -> Option<Arc<PackedWeight>> {
        let mut state = self.shared.lock();
        let found = state.entries.get(key).cloned();
        if found.is_some() {
            state.stats.hits += 1;
        } else {
            state.stats.misses += 1;
        }
        found
    }

    /// Whether `key` is stored (counts neither a hit nor a miss).
    pub fn contains(&self, key: &PrepackKey) -> bool {
        self.shared.lock().entries.contains_key(key)
    }

    /// The data under `key`, or, on a miss, packs it with `pack` (which allocates with
    /// the given allocator) and stores it.
    ///
    /// Two threads missing the same key at once both pack; the later store replaces
    /// the earlier one.
    ///
    /// # Errors
    /// Whatever `pack` returns (it must release what it allocated before failing; what
    /// it does not is released when the cache is dropped), or the refusal of the store,
    /// in which case the packed buffers are released first.
    pub fn get_or_pack(
        &self,
        key: &PrepackKey,
        pack: impl FnOnce(&CacheAllocator) -> Result<Vec<PackedBuffer>, PrepackError>,
    ) -> Result<Lookup, PrepackError> {
        if let Some(weight) = self.get(key) {
            return Ok(Lookup {
                weight,
                packed: false,
            });
        }
        let allocator = self.allocator();
        let buffers = pack(&allocator)?;
        if let Err(refused) = self.store(key.clone(), buffers) {
            for b in refused.buffers {
                allocator.release_packed(b);
            }
            return Err(refused.error);
        }
        let weight = self
            .shared
            .lock()
            .entries
            .get(key)
            .cloned()
            .ok_or_else(|| PrepackError::NoBuffers {
                key: key.to_string(),
            })?;
        Ok(Lookup {
            weight,
            packed: true,
        })
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.shared.lock().entries.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of device memory held by stored entries.
    pub fn bytes(&self) -> u64 {
        self.shared
            .lock()
            .entries
            .values()
            .fold(0u64, |acc, w| acc.saturating_add(w.bytes()))
    }

    /// Buffers held by stored entries.
    pub fn buffer_count(&self) -> usize {
        self.shared
            .lock()
            .entries
            .values()
            .map(|w| w.buffers.len())
            .sum()
    }

    /// Buffers handed out by the allocator and neither stored nor handed back.
    pub fn outstanding_buffers(&self) -> usize {
        self.shared.lock().outstanding.len()
    }

    /// The keys stored, sorted.
    pub fn keys(&self) -> Vec<PrepackKey> {
        let mut keys: Vec<PrepackKey> = self.shared.lock().entries.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        self.shared.lock().stats
    }
}

fn check_store(
    key: &PrepackKey,
    buffers: &[PackedBuffer],
    outstanding: &[wgpu::Buffer],
) -> Result<(), PrepackError> {
    if buffers.is_empty() {
        return Err(PrepackError::NoBuffers {
            key: key.to_string(),
        });
    }
    for (index, b) in buffers.iter().enumerate() {
        if b.size == 0 {
            return Err(PrepackError::ZeroSizeBuffer { index });
        }
        if b.size > b.buffer.size() {
            return Err(PrepackError::SizeMismatch {
                index,
                size: b.size,
                buffer_size: b.buffer.size(),
            });
        }
        if let Some(first) = buffers[..index].iter().position(|e| e.buffer == b.buffer) {
            return Err(PrepackError::DuplicateBuffer { index, first });
        }
        if !outstanding.contains(&b.buffer) {
            return Err(PrepackError::ForeignBuffer { index });
        }
    }
    Ok(())
}

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
            usage: DEFAULT_USAGE,
        };
        let buffer = self
            .allocate(ctx, &request)
            .map_err(|source| PrepackError::Allocation { size, source })?;
        Ok(PackedBuffer { buffer, size })
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
        if let Err(e) = write_buffer(ctx, &buffer.buffer, 0, bytes) {
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
        self.release(buffer.buffer);
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
