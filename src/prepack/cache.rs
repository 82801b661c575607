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

use super::entry::SharedAllocator;
use super::{
    CacheAllocator, CacheStats, Lookup, PackedBuffer, PackedWeight, PrepackError, PrepackKey,
    StoreError, StoreOutcome,
};
use crate::device::WgpuAllocator;

/// The cache's state behind its mutex.
#[derive(Default)]
pub(super) struct State {
    entries: HashMap<PrepackKey, Arc<PackedWeight>>,
    /// Buffers the allocator handed out that are neither stored nor handed back (few
    /// at a time: a list; `wgpu::Buffer` compares by identity).
    pub(super) outstanding: Vec<wgpu::Buffer>,
    stats: CacheStats,
    /// Packed buffers asked for so far (labels them).
    pub(super) requests: usize,
}

/// What every clone of a cache and of its allocator shares.
pub(super) struct Shared {
    pub(super) allocator: SharedAllocator,
    state: Mutex<State>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
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
        CacheAllocator::new(Arc::clone(&self.shared))
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
            .retain(|o| buffers.iter().all(|b| b.buffer() != o));
        let weight = Arc::new(PackedWeight::new(
            key.clone(),
            buffers,
            Arc::clone(&self.shared.allocator),
        ));
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
            .map(|w| w.buffers().len())
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
        if b.size() == 0 {
            return Err(PrepackError::ZeroSizeBuffer { index });
        }
        if b.size() > b.buffer().size() {
            return Err(PrepackError::SizeMismatch {
                index,
                size: b.size(),
                buffer_size: b.buffer().size(),
            });
        }
        if let Some(first) = buffers[..index]
            .iter()
            .position(|e| e.buffer() == b.buffer())
        {
            return Err(PrepackError::DuplicateBuffer { index, first });
        }
        if !outstanding.contains(b.buffer()) {
            return Err(PrepackError::ForeignBuffer { index });
        }
    }
    Ok(())
}
