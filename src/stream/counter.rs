//! [`BlockCounter`]: what a registered allocator descriptor's storage handed out and
//! took back, as a [`StorageReport`] (the one report of what a storage hands out), so
//! tests (and users) can see that every block given out came back exactly once.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::AllocatorDesc;
use crate::storage::StorageReport;

/// The counts behind a counted descriptor ([`AllocatorDesc::counted`]), shared by every
/// stream the descriptor is registered on. The stream's adapter of the descriptor onto
/// the storage trait records each block: an `alloc` that gave one (with the size
/// `address_of` reports), an `alloc` that failed, a `free`, and a block given back that
/// the descriptor never handed out (`bad_frees`; the user's `free` is not called).
#[derive(Debug, Default)]
pub struct BlockCounter {
    report: Mutex<StorageReport>,
}

impl BlockCounter {
    /// The counts so far.
    pub fn report(&self) -> StorageReport {
        *self.lock()
    }

    fn lock(&self) -> MutexGuard<'_, StorageReport> {
        self.report.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A block of `size` bytes handed out.
    pub(crate) fn record_allocation(&self, size: u64) {
        self.lock().record_allocation(size);
    }

    /// An `alloc` that failed.
    pub(crate) fn record_failure(&self) {
        self.lock().failures += 1;
    }

    /// A block of `size` bytes taken back through `free`.
    pub(crate) fn record_free(&self, size: u64) {
        self.lock().record_free(size);
    }

    /// A block given back that was not handed out (or was freed already).
    pub(crate) fn record_bad_free(&self) {
        self.lock().bad_frees += 1;
    }
}

impl<T, B> AllocatorDesc<T, B> {
    /// The same descriptor, counted: every stream it is registered on records what its
    /// callbacks hand out and take back in the returned counter.
    pub fn counted(mut self) -> (AllocatorDesc<T, B>, Arc<BlockCounter>) {
        let counter = Arc::new(BlockCounter::default());
        self.counter = Some(counter.clone());
        (self, counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_balances_when_every_block_came_back_once() {
        let (desc, counter) = AllocatorDesc::<(), u64>::new().counted();
        assert!(desc.counter.is_some(), "registration sees the counter");
        counter.record_allocation(64);
        counter.record_failure();
        let report = counter.report();
        assert_eq!(
            (report.allocations, report.failures, report.live_regions),
            (1, 1, 1)
        );
        assert_eq!((report.live_bytes, report.peak_bytes), (64, 64));
        assert!(!report.balanced());
        counter.record_free(64);
        assert!(counter.report().balanced());
        counter.record_bad_free();
        assert_eq!(counter.report().bad_frees, 1);
        assert!(!counter.report().balanced(), "a foreign free unbalances");
    }
}
