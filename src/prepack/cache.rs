//! [`PrepackedWeightCache`]: pre-packed weight buffers shared by nodes and graphs.
//!
//! The rules (from ONNX Runtime's shared pre-packed weight cache, in Rust terms):
//! * a kernel packs a weight into one or more buffers allocated with the allocator the
//!   cache hands out ([`PrepackedWeightCache::allocator`]);
//! * [`PrepackedWeightCache::store`] takes ownership of them on success; on error the
//!   [`StoreError`] gives them back and the caller still owns them (and can release
//!   them through the same allocator);
//! * storing again under the same key frees the old regions and replaces them;
//! * other nodes and graphs get the same buffers with [`PrepackedWeightCache::get`].
//!
//! Packed buffers are regions of a [`crate::storage::Storage`]; every region goes back
//! to the storage underneath the cache exactly once:
//! when it is replaced or the cache is dropped (deferred while a [`PackedWeight`]
//! handle still uses it, so a handle never dangles), or when the caller hands back a
//! buffer it did not store.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::entry::CacheStorage;
use super::{
    CacheAllocator, CacheStats, Lookup, PackedBuffer, PackedWeight, PrepackError, PrepackKey,
    StoreError, StoreOutcome,
};
use crate::storage::{Memory, OwnedRegion};

/// The cache's state behind its mutex.
pub(super) struct State<M: Memory> {
    entries: HashMap<PrepackKey, Arc<PackedWeight<M>>>,
    /// Regions the allocator handed out that are neither stored nor handed back (few
    /// at a time: a list), each owned until then.
    pub(super) outstanding: Vec<OwnedRegion<M>>,
    stats: CacheStats,
    /// Packed buffers asked for so far (labels them).
    pub(super) requests: usize,
}

impl<M: Memory> Default for State<M> {
    fn default() -> Self {
        State {
            entries: HashMap::new(),
            outstanding: Vec::new(),
            stats: CacheStats::default(),
            requests: 0,
        }
    }
}

/// What every clone of a cache and of its allocator shares.
pub(super) struct Shared<M: Memory> {
    /// The storage underneath: given at creation, or (for the default device cache)
    /// the device storage of the first allocation's device.
    pub(super) storage: OnceLock<CacheStorage<M>>,
    state: Mutex<State<M>>,
}

impl<M: Memory> Shared<M> {
    pub(super) fn lock(&self) -> MutexGuard<'_, State<M>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<M: Memory> Drop for Shared<M> {
    fn drop(&mut self) {
        let state = std::mem::take(&mut *self.lock());
        // Entries free their regions as they drop (or when their last handle does),
        // then the regions handed out and never stored.
        drop(state.entries);
        drop(state.outstanding);
    }
}

/// A cache of pre-packed weights: cheap to clone, every clone is the same cache, safe
/// to share between threads, graphs and sessions.
///
/// Keys are [`PrepackKey`]s (weight name, shape, content hash, packing format).
/// The cache, its clones and the [`CacheAllocator`]s it hands out keep one shared
/// state alive; when the last of them is dropped, every stored region (and every
/// region handed out but never stored nor handed back) goes back to the storage
/// underneath, once. `M` is the memory of that storage: `wgpu::Buffer` on a device,
/// [`crate::storage::HostMemory`] in host tests of the rules.
pub struct PrepackedWeightCache<M: Memory = wgpu::Buffer> {
    shared: Arc<Shared<M>>,
}

impl<M: Memory> Clone for PrepackedWeightCache<M> {
    fn clone(&self) -> Self {
        PrepackedWeightCache {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<M: Memory> fmt::Debug for PrepackedWeightCache<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrepackedWeightCache")
            .field("len", &self.len())
            .field("bytes", &self.bytes())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for PrepackedWeightCache {
    /// A device cache whose packed buffers are plain wgpu buffers of the device the
    /// first one is allocated on.
    fn default() -> Self {
        PrepackedWeightCache::with_shared(OnceLock::new())
    }
}

impl<M: Memory> PrepackedWeightCache<M> {
    /// An empty cache whose packed regions come from `storage` (and go back to it): a
    /// [`crate::device::WgpuStorage`], a [`crate::storage::PagedStorage`] to pack many
    /// small weights into a few buffers, a counting or user storage.
    pub fn new(storage: CacheStorage<M>) -> PrepackedWeightCache<M> {
        PrepackedWeightCache::with_shared(OnceLock::from(storage))
    }

    fn with_shared(storage: OnceLock<CacheStorage<M>>) -> PrepackedWeightCache<M> {
        PrepackedWeightCache {
            shared: Arc::new(Shared {
                storage,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The allocator kernels must pack into: regions it hands out are tagged as this
    /// cache's own until stored or handed back.
    pub fn allocator(&self) -> CacheAllocator<M> {
        CacheAllocator::new(Arc::clone(&self.shared))
    }

    /// Whether `other` is a handle to the same cache.
    pub fn same_cache(&self, other: &PrepackedWeightCache<M>) -> bool {
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
        buffers: Vec<PackedBuffer<M>>,
    ) -> Result<StoreOutcome, StoreError<M>> {
        let mut state = self.shared.lock();
        if let Err(error) = check_store(&key, &buffers, &state.outstanding) {
            state.stats.refused_stores += 1;
            return Err(StoreError { error, buffers });
        }
        // Each buffer is outstanding (check_store saw to it): its owner moves into the
        // weight, in the buffers' order.
        let held = buffers
            .iter()
            .filter_map(|b| {
                let at = state
                    .outstanding
                    .iter()
                    .position(|o| o.region() == b.region())?;
                Some(state.outstanding.swap_remove(at))
            })
            .collect();
        let weight = Arc::new(PackedWeight::new(key.clone(), buffers, held));
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
    pub fn get(&self, key: &PrepackKey) -> Option<Arc<PackedWeight<M>>> {
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
        pack: impl FnOnce(&CacheAllocator<M>) -> Result<Vec<PackedBuffer<M>>, PrepackError>,
    ) -> Result<Lookup<M>, PrepackError> {
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

fn check_store<M: Memory>(
    key: &PrepackKey,
    buffers: &[PackedBuffer<M>],
    outstanding: &[OwnedRegion<M>],
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
        if b.size() > b.region().size {
            return Err(PrepackError::SizeMismatch {
                index,
                size: b.size(),
                buffer_size: b.region().size,
            });
        }
        if let Some(first) = buffers[..index]
            .iter()
            .position(|e| e.region().overlaps(b.region()))
        {
            return Err(PrepackError::DuplicateBuffer { index, first });
        }
        if !outstanding.iter().any(|o| o.region() == b.region()) {
            return Err(PrepackError::ForeignBuffer { index });
        }
    }
    Ok(())
}

/// The cache's ownership rules on host memory: no GPU needed.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::packed::BSource;
    use crate::prepack::PackFormat;
    use crate::storage::{CountingStorage, HostMemory, HostStorage, Storage, StorageError};
    use wgalloc_plan::ErrorKind;

    type Host = Arc<CountingStorage<HostStorage>>;

    fn cache() -> (PrepackedWeightCache<HostMemory>, Host) {
        let host: Host = Arc::new(CountingStorage::new(HostStorage::with_capacity(1 << 12)));
        (PrepackedWeightCache::new(host.clone()), host)
    }

    fn key(name: &str) -> PrepackKey {
        PrepackKey::for_f32(
            name,
            &[2, 2],
            &[1.0, 2.0, 3.0, 4.0],
            PackFormat::MatmulB {
                source: BSource::KByN,
                storage: crate::exec::StorageType::F32,
            },
        )
    }

    fn live(host: &Host) -> u64 {
        let report = host.report();
        assert_eq!(report.bad_frees, 0, "{report:?}");
        report.live_regions
    }

    #[test]
    fn a_store_takes_ownership_and_the_last_owner_frees_once() {
        let (cache, host) = cache();
        let alloc = cache.allocator();
        let a = alloc.allocate_region(16, 4).expect("a");
        let b = alloc.allocate_region(8, 4).expect("b");
        assert_eq!(cache.outstanding_buffers(), 2);
        assert_eq!(
            cache.store(key("w"), vec![a, b]).expect("stored"),
            StoreOutcome::Inserted
        );
        assert_eq!(
            (
                cache.outstanding_buffers(),
                cache.len(),
                cache.buffer_count()
            ),
            (0, 1, 2)
        );
        let handle = cache.get(&key("w")).expect("hit");
        assert_eq!(handle.bytes(), 24);
        let clone = cache.clone();
        drop((cache, alloc));
        assert_eq!(live(&host), 2, "a clone keeps the cache");
        drop(clone);
        assert_eq!(live(&host), 2, "a handle keeps its regions");
        drop(handle);
        assert_eq!(live(&host), 0);
        assert_eq!(host.report().frees, 2);
    }

    #[test]
    fn a_replaced_entry_is_freed_when_its_last_handle_goes() {
        let (cache, host) = cache();
        let alloc = cache.allocator();
        let first = alloc.allocate_region(16, 4).expect("first");
        cache.store(key("w"), vec![first]).expect("stored");
        let old = cache.get(&key("w")).expect("hit");
        let second = alloc.allocate_region(32, 4).expect("second");
        assert_eq!(
            cache.store(key("w"), vec![second]).expect("replaced"),
            StoreOutcome::Replaced
        );
        assert_eq!(live(&host), 2, "the old entry lives while a handle uses it");
        drop(old);
        assert_eq!(live(&host), 1);
        let third = alloc.allocate_region(8, 4).expect("third");
        cache.store(key("w"), vec![third]).expect("replaced again");
        assert_eq!(live(&host), 1, "no handle: freed at once");
        assert_eq!(cache.stats().replacements, 2);
        drop((cache, alloc));
        assert_eq!(live(&host), 0);
    }

    #[test]
    fn refused_stores_give_every_region_back_and_nothing_is_freed_twice() {
        let (cache, host) = cache();
        let alloc = cache.allocator();
        let refuse = |buffers: Vec<PackedBuffer<HostMemory>>| {
            let n = buffers.len();
            let refused = cache.store(key("w"), buffers).expect_err("refused");
            assert_eq!(refused.buffers.len(), n);
            refused
        };
        assert!(matches!(
            refuse(Vec::new()).error,
            PrepackError::NoBuffers { .. }
        ));
        let good = alloc.allocate_region(16, 4).expect("good");
        let zero = PackedBuffer::from_region(good.region().clone(), 0);
        assert_eq!(
            refuse(vec![zero]).error,
            PrepackError::ZeroSizeBuffer { index: 0 }
        );
        let claims_more = PackedBuffer::from_region(good.region().clone(), 64);
        assert!(matches!(
            refuse(vec![claims_more]).error,
            PrepackError::SizeMismatch {
                index: 0,
                size: 64,
                ..
            }
        ));
        let part = PackedBuffer::from_region(good.region().sub(0, 8).expect("part"), 8);
        assert_eq!(
            refuse(vec![good.clone(), part]).error,
            PrepackError::DuplicateBuffer { index: 1, first: 0 }
        );
        let foreign = HostStorage::unlimited()
            .allocate(&crate::storage::RegionRequest::new(16))
            .expect("foreign");
        let refused = refuse(vec![PackedBuffer::from_region(foreign, 16)]);
        assert_eq!(refused.error, PrepackError::ForeignBuffer { index: 0 });
        alloc.release_packed(refused.into_buffers().remove(0)); // not ours: left alone
        alloc.release_packed(good.clone());
        alloc.release_packed(good); // again: left alone
        assert_eq!(cache.stats().refused_stores, 5);
        assert_eq!(live(&host), 0);
        assert_eq!(host.report().frees, 1);
    }

    #[test]
    fn regions_never_stored_go_back_when_the_cache_drops() {
        let (cache, host) = cache();
        let alloc = cache.allocator();
        let _kept_by_caller = alloc.allocate_region(16, 4).expect("a");
        drop(cache);
        assert_eq!(live(&host), 1, "the allocator keeps the cache alive");
        drop(alloc);
        assert_eq!(live(&host), 0);
    }

    #[test]
    fn a_storage_that_runs_out_is_a_typed_error_and_a_pack_leaks_nothing() {
        let (cache, host) = cache();
        let error = cache
            .get_or_pack(&key("w"), |alloc| {
                let first = alloc.allocate_region(1 << 11, 4)?;
                // The second does not fit in what is left: hand the first back.
                match alloc.allocate_region(1 << 12, 4) {
                    Ok(second) => Ok(vec![first, second]),
                    Err(e) => {
                        alloc.release_packed(first);
                        Err(e)
                    }
                }
            })
            .expect_err("out of memory");
        assert_eq!(error.kind(), ErrorKind::OutOfMemory, "{error}");
        assert!(matches!(error, PrepackError::Allocation { .. }));
        assert_eq!(live(&host), 0);
        let lookup = cache
            .get_or_pack(&key("w"), |alloc| Ok(vec![alloc.allocate_region(64, 4)?]))
            .expect("packs");
        assert!(lookup.packed);
        let again = cache
            .get_or_pack(&key("w"), |_| Err(PrepackError::ZeroSizeRequest))
            .expect("a hit never packs");
        assert!(!again.packed);
        assert!(Arc::ptr_eq(&lookup.weight, &again.weight));
        assert!(matches!(
            cache
                .allocator()
                .allocate(&crate::storage::RegionRequest::new(8).alignment(3)),
            Err(StorageError::BadAlignment { .. })
        ));
    }
}
