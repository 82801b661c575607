//! [`CountingStorage`]: counts what any storage hands out and takes back.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{Region, RegionRequest, Storage, StorageError};

/// What a storage has done, and what is live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageReport {
    /// Successful allocations.
    pub allocations: u64,
    /// Refused allocations.
    pub failures: u64,
    /// Regions taken back.
    pub frees: u64,
    /// Frees refused (a region not live: foreign, or freed twice).
    pub bad_frees: u64,
    /// Regions allocated and not freed.
    pub live_regions: u64,
    /// Bytes of those regions.
    pub live_bytes: u64,
    /// The most bytes live at once.
    pub peak_bytes: u64,
}

impl StorageReport {
    /// Every region handed out came back exactly once, and nothing else was given back.
    pub fn balanced(&self) -> bool {
        self.allocations == self.frees && self.bad_frees == 0
    }

    pub(crate) fn record_allocation(&mut self, size: u64) {
        self.allocations += 1;
        self.live_regions += 1;
        self.live_bytes = self.live_bytes.saturating_add(size);
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
    }

    pub(crate) fn record_free(&mut self, size: u64) {
        self.frees += 1;
        self.live_regions = self.live_regions.saturating_sub(1);
        self.live_bytes = self.live_bytes.saturating_sub(size);
    }
}

/// Wraps a storage and counts allocations, failures, frees and live bytes (the sizes
/// of the regions handed out), to prove that a caller leaks nothing.
#[derive(Debug)]
pub struct CountingStorage<S> {
    inner: S,
    report: Mutex<StorageReport>,
}

impl<S: Storage> CountingStorage<S> {
    /// Counts what `inner` hands out.
    pub fn new(inner: S) -> CountingStorage<S> {
        CountingStorage {
            inner,
            report: Mutex::new(StorageReport::default()),
        }
    }

    /// The storage underneath.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The counts so far.
    pub fn report(&self) -> StorageReport {
        *self.lock()
    }

    fn lock(&self) -> MutexGuard<'_, StorageReport> {
        self.report.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S: Storage> Storage for CountingStorage<S> {
    type Memory = S::Memory;

    fn allocate(&self, request: &RegionRequest) -> Result<Region<S::Memory>, StorageError> {
        let result = self.inner.allocate(request);
        let mut report = self.lock();
        match &result {
            Ok(region) => report.record_allocation(region.size),
            Err(_) => report.failures += 1,
        }
        result
    }

    fn free(&self, region: Region<S::Memory>) -> Result<(), StorageError> {
        let size = region.size;
        let result = self.inner.free(region);
        let mut report = self.lock();
        match result {
            Ok(()) => report.record_free(size),
            Err(_) => report.bad_frees += 1,
        }
        result
    }

    fn copy(
        &self,
        from: &Region<S::Memory>,
        to: &Region<S::Memory>,
        bytes: u64,
    ) -> Result<(), StorageError> {
        self.inner.copy(from, to, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::HostStorage;

    #[test]
    fn counts_follow_the_storage_underneath() {
        let counting = CountingStorage::new(HostStorage::with_capacity(32));
        let a = counting.allocate(&RegionRequest::new(20)).expect("a");
        assert!(counting.allocate(&RegionRequest::new(20)).is_err());
        counting.free(a.clone()).expect("free");
        assert!(counting.free(a).is_err());
        let report = counting.report();
        assert_eq!(
            (
                report.allocations,
                report.failures,
                report.frees,
                report.bad_frees
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(
            (report.live_regions, report.live_bytes, report.peak_bytes),
            (0, 0, 20)
        );
    }
}
