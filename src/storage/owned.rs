//! [`OwnedRegion`]: a region that gives itself back to its storage when dropped, the one
//! owner of handed-out memory (a plan's chunks, a stream's blocks, a context's default
//! blocks, the weight cache's packed buffers).

use std::fmt;
use std::sync::Arc;

use super::{Memory, Region, Storage};

/// A region `storage` handed out, held until it is dropped, then freed through that
/// storage exactly once. [`OwnedRegion::region`] lends the bytes (clone the region to
/// bind it; a clone is a handle, not a second owner).
pub struct OwnedRegion<M: Memory = wgpu::Buffer> {
    storage: Arc<dyn Storage<Memory = M>>,
    region: Option<Region<M>>,
}

impl<M: Memory> OwnedRegion<M> {
    /// Holds `region`, which `storage` handed out.
    pub fn new(storage: Arc<dyn Storage<Memory = M>>, region: Region<M>) -> OwnedRegion<M> {
        OwnedRegion {
            storage,
            region: Some(region),
        }
    }

    /// Allocates a region for `request` from `storage` and holds it.
    ///
    /// # Errors
    /// The storage's refusal.
    pub fn allocate(
        storage: Arc<dyn Storage<Memory = M>>,
        request: &super::RegionRequest,
    ) -> Result<OwnedRegion<M>, super::StorageError> {
        let region = storage.allocate(request)?;
        Ok(OwnedRegion::new(storage, region))
    }

    /// The region held.
    pub fn region(&self) -> &Region<M> {
        // `region` is `Some` from construction until drop or `into_region`, which
        // consume the value.
        self.region
            .as_ref()
            .unwrap_or_else(|| unreachable!("an owned region is held until it is consumed"))
    }

    /// The storage it goes back to.
    pub fn storage(&self) -> &Arc<dyn Storage<Memory = M>> {
        &self.storage
    }

    /// Stops owning the region without freeing it: the caller frees it (or hands it
    /// to someone who will).
    pub fn into_region(mut self) -> Region<M> {
        self.region
            .take()
            .unwrap_or_else(|| unreachable!("an owned region is held until it is consumed"))
    }
}

impl<M: Memory> fmt::Debug for OwnedRegion<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedRegion")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl<M: Memory> Drop for OwnedRegion<M> {
    fn drop(&mut self) {
        if let Some(region) = self.region.take() {
            if let Err(e) = self.storage.free(region) {
                log::warn!("a storage refused a region it handed out: {e}");
            }
        }
    }
}

/// Drops `regions` last first (a `Vec` drops first to last): memory goes back in the
/// reverse of the order it was taken, as a stack allocator expects.
pub fn free_last_first<M: Memory>(mut regions: Vec<OwnedRegion<M>>) {
    while let Some(region) = regions.pop() {
        drop(region);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{HostMemory, HostStorage, RegionRequest, StorageError};

    #[test]
    fn dropping_frees_once_and_into_region_hands_it_over() {
        let host = Arc::new(HostStorage::unlimited());
        let storage: Arc<dyn Storage<Memory = HostMemory>> = host.clone();
        let held = OwnedRegion::allocate(storage.clone(), &RegionRequest::new(16)).expect("fits");
        assert_eq!(held.region().size, 16);
        assert_eq!(host.report().live_regions, 1);
        drop(held);
        assert_eq!(host.report().live_regions, 0);
        assert_eq!(host.report().bad_frees, 0);

        let kept = OwnedRegion::allocate(storage.clone(), &RegionRequest::new(8)).expect("fits");
        let region = kept.into_region();
        assert_eq!(host.report().live_regions, 1, "handed over, not freed");
        storage.free(region).expect("the caller frees it");
        assert_eq!(host.report().live_regions, 0);
    }

    /// Host memory that records the size of every region freed, in order.
    struct Recording {
        host: HostStorage,
        freed: std::sync::Mutex<Vec<u64>>,
    }

    impl Storage for Recording {
        type Memory = HostMemory;

        fn allocate(&self, request: &RegionRequest) -> Result<Region<HostMemory>, StorageError> {
            self.host.allocate(request)
        }

        fn free(&self, region: Region<HostMemory>) -> Result<(), StorageError> {
            self.freed.lock().expect("not poisoned").push(region.size);
            self.host.free(region)
        }

        fn copy(
            &self,
            from: &Region<HostMemory>,
            to: &Region<HostMemory>,
            bytes: u64,
        ) -> Result<(), StorageError> {
            self.host.copy(from, to, bytes)
        }
    }

    #[test]
    fn a_stack_of_regions_goes_back_last_first() {
        let recording = Arc::new(Recording {
            host: HostStorage::unlimited(),
            freed: std::sync::Mutex::new(Vec::new()),
        });
        let storage: Arc<dyn Storage<Memory = HostMemory>> = recording.clone();
        let regions: Vec<OwnedRegion<HostMemory>> = (1..=3)
            .map(|i| OwnedRegion::allocate(storage.clone(), &RegionRequest::new(4 * i)))
            .collect::<Result<_, _>>()
            .expect("fits");
        free_last_first(regions);
        assert_eq!(
            *recording.freed.lock().expect("not poisoned"),
            vec![12, 8, 4]
        );
        assert_eq!(recording.host.report().live_regions, 0);
    }
}
