//! [`PagedStorage`]: regions cut from larger pages of another storage, with the
//! planner's own best-fit free-block allocator ([`FreeBlockAllocator`]) keeping the
//! books. On a device it hands out sub-ranges of a few large `wgpu::Buffer`s, so many
//! small regions cost one buffer; on the host it tests the same rules.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

#[cfg(test)]
use super::Memory;
use super::{Region, RegionRequest, Storage, StorageError};
use crate::plan::FreeBlockAllocator;

struct PagedState<M> {
    books: FreeBlockAllocator,
    /// `pages[chunk]`: the page backing the books' chunk, `None` until needed (or after
    /// an oversized chunk's one region was freed).
    pages: Vec<Option<Region<M>>>,
    /// Live regions: (chunk, offset in the chunk) → size.
    live: HashMap<(usize, u64), u64>,
}

/// Regions cut from pages of `page_size` bytes (one page of its own for a larger
/// request) taken from `inner` with one usage. Every region starts at a multiple of
/// the pool's alignment; a request asking for more alignment or another usage is
/// refused. Pages go back to `inner` when the pool is dropped or trimmed
/// ([`PagedStorage::trim`]), an oversized page as soon as its region is freed.
pub struct PagedStorage<S: Storage> {
    inner: S,
    page_size: u64,
    alignment: u64,
    usage: wgpu::BufferUsages,
    state: Mutex<PagedState<S::Memory>>,
}

impl<S: Storage> fmt::Debug for PagedStorage<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PagedStorage")
            .field("page_size", &self.page_size)
            .field("alignment", &self.alignment)
            .field("pages", &self.page_count())
            .finish_non_exhaustive()
    }
}

impl<S: Storage> PagedStorage<S> {
    /// A pool over `inner` with pages of `page_size` bytes of `usage`, handing out
    /// regions aligned to `alignment` (e.g. the device's
    /// `min_storage_buffer_offset_alignment`).
    ///
    /// # Errors
    /// [`StorageError::BadAlignment`] unless `alignment` is a power of two of at least
    /// 4; [`StorageError::TooLarge`] for a page size of 0.
    pub fn new(
        inner: S,
        page_size: u64,
        alignment: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<PagedStorage<S>, StorageError> {
        if alignment < wgpu::COPY_BUFFER_ALIGNMENT {
            return Err(StorageError::BadAlignment { alignment });
        }
        let books = FreeBlockAllocator::new(alignment, page_size).map_err(|_| {
            if alignment.is_power_of_two() {
                StorageError::TooLarge {
                    size: page_size,
                    max: 0,
                }
            } else {
                StorageError::BadAlignment { alignment }
            }
        })?;
        Ok(PagedStorage {
            inner,
            page_size,
            alignment,
            usage,
            state: Mutex::new(PagedState {
                books,
                pages: Vec::new(),
                live: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, PagedState<S::Memory>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The storage pages come from.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Pages held now.
    pub fn page_count(&self) -> usize {
        self.lock().pages.iter().flatten().count()
    }

    /// Regions handed out and not freed.
    pub fn live_regions(&self) -> usize {
        self.lock().live.len()
    }

    /// Hands every page that holds no live region back to the storage underneath and
    /// returns how many went. The books keep the space: a later request that lands
    /// there gets a fresh page.
    ///
    /// # Errors
    /// The first refusal of the storage underneath (the pages before it are freed;
    /// that page and the rest stay held).
    pub fn trim(&self) -> Result<usize, StorageError> {
        let mut state = self.lock();
        let mut freed = 0;
        for chunk in 0..state.pages.len() {
            let in_use = state.live.keys().any(|&(c, _)| c == chunk);
            if in_use {
                continue;
            }
            if let Some(page) = state.pages[chunk].take() {
                if let Err(e) = self.inner.free(page.clone()) {
                    state.pages[chunk] = Some(page);
                    return Err(e);
                }
                freed += 1;
            }
        }
        Ok(freed)
    }

    /// The chunk of the books whose page holds `region`, and its offset in that page.
    fn locate(state: &PagedState<S::Memory>, region: &Region<S::Memory>) -> Option<(usize, u64)> {
        state.pages.iter().enumerate().find_map(|(chunk, page)| {
            let page = page.as_ref()?;
            let inside = page.buffer == region.buffer
                && region.offset >= page.offset
                && region.end()? <= page.end()?;
            inside.then(|| (chunk, region.offset - page.offset))
        })
    }
}

impl<S: Storage> Storage for PagedStorage<S> {
    type Memory = S::Memory;

    fn allocate(&self, request: &RegionRequest) -> Result<Region<S::Memory>, StorageError> {
        let size = request.checked_size()?;
        if request.alignment > self.alignment {
            return Err(StorageError::BadAlignment {
                alignment: request.alignment,
            });
        }
        if !self.usage.contains(request.usage) {
            return Err(StorageError::Refused {
                message: format!(
                    "pages have usage {:?}, the request needs {:?}",
                    self.usage, request.usage
                ),
            });
        }
        let mut state = self.lock();
        let placed = state
            .books
            .alloc(size)
            .map_err(|_| StorageError::TooLarge {
                size,
                max: u64::MAX,
            })?;
        if state.pages.len() <= placed.chunk {
            state.pages.resize(placed.chunk + 1, None);
        }
        if state.pages[placed.chunk].is_none() {
            let page_size = if state.books.is_oversized(placed.chunk) {
                placed.size
            } else {
                self.page_size
            };
            let page_request = RegionRequest::new(page_size)
                .alignment(self.alignment)
                .usage(self.usage)
                .label(format!("wgalloc page {}", placed.chunk));
            match self.inner.allocate(&page_request) {
                Ok(page) => state.pages[placed.chunk] = Some(page),
                Err(e) => {
                    // Nothing of this request stays booked.
                    let _ = state.books.free(placed.chunk, placed.offset, placed.size);
                    return Err(e);
                }
            }
        }
        let page = state.pages[placed.chunk]
            .as_ref()
            .and_then(|page| page.sub(placed.offset, size));
        let Some(region) = page else {
            let _ = state.books.free(placed.chunk, placed.offset, placed.size);
            return Err(StorageError::TooLarge {
                size,
                max: self.page_size,
            });
        };
        state.live.insert((placed.chunk, placed.offset), size);
        Ok(region)
    }

    fn free(&self, region: Region<S::Memory>) -> Result<(), StorageError> {
        let unknown = StorageError::UnknownRegion {
            offset: region.offset,
            size: region.size,
        };
        let mut state = self.lock();
        let Some((chunk, offset)) = Self::locate(&state, &region) else {
            return Err(unknown);
        };
        if state.live.get(&(chunk, offset)) != Some(&region.size) {
            return Err(unknown);
        }
        state
            .books
            .free(chunk, offset, region.size)
            .map_err(|_| unknown)?;
        state.live.remove(&(chunk, offset));
        if state.books.is_oversized(chunk) {
            if let Some(page) = state.pages[chunk].take() {
                drop(state);
                return self.inner.free(page);
            }
        }
        Ok(())
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

impl<S: Storage> Drop for PagedStorage<S> {
    fn drop(&mut self) {
        let pages = std::mem::take(&mut self.lock().pages);
        for page in pages.into_iter().flatten().rev() {
            // A page the storage underneath refuses to take back is its own bug, and
            // shows in its own accounting.
            let _ = self.inner.free(page);
        }
    }
}

/// Whether two pages of `M` never overlap (used by tests).
#[cfg(test)]
fn disjoint<M: Memory>(regions: &[Region<M>]) -> bool {
    regions
        .iter()
        .enumerate()
        .all(|(i, a)| regions[i + 1..].iter().all(|b| !a.overlaps(b)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::storage::{CountingStorage, HostStorage};

    fn pool(page: u64) -> PagedStorage<CountingStorage<HostStorage>> {
        PagedStorage::new(
            CountingStorage::new(HostStorage::unlimited()),
            page,
            256,
            crate::storage::STORAGE_USAGE,
        )
        .expect("pool")
    }

    #[test]
    fn small_regions_share_a_page_and_large_ones_get_their_own() {
        let pool = pool(4096);
        let a = pool.allocate(&RegionRequest::new(100)).expect("a");
        let b = pool
            .allocate(&RegionRequest::new(100).alignment(256))
            .expect("b");
        assert_eq!(a.buffer, b.buffer);
        assert_eq!(b.offset % 256, 0);
        let big = pool.allocate(&RegionRequest::new(10_000)).expect("big");
        assert_ne!(big.buffer, a.buffer);
        assert_eq!(pool.page_count(), 2);
        pool.free(big).expect("free big");
        assert_eq!(pool.page_count(), 1, "an oversized page goes back at once");
        pool.free(a).expect("a");
        pool.free(b).expect("b");
        assert_eq!(pool.live_regions(), 0);
    }

    #[test]
    fn refusals_name_the_reason_and_book_nothing() {
        let pool = pool(1024);
        assert_eq!(
            pool.allocate(&RegionRequest::new(4).alignment(512)),
            Err(StorageError::BadAlignment { alignment: 512 })
        );
        assert!(matches!(
            pool.allocate(&RegionRequest::new(4).usage(wgpu::BufferUsages::VERTEX)),
            Err(StorageError::Refused { .. })
        ));
        pool.inner().inner().refuse_after(0);
        assert!(matches!(
            pool.allocate(&RegionRequest::new(4)),
            Err(StorageError::Refused { .. })
        ));
        assert_eq!(pool.live_regions(), 0);
        assert_eq!(pool.page_count(), 0);
        pool.inner().inner().refuse_after(u64::MAX);
        let a = pool
            .allocate(&RegionRequest::new(4))
            .expect("the books were left clean");
        assert_eq!(a.offset, 0);
        assert!(pool.free(a.clone()).is_ok());
        assert!(pool.free(a).is_err(), "double free");
    }

    #[test]
    fn trimming_returns_empty_pages_and_a_later_request_gets_a_fresh_one() {
        let pool = pool(1024);
        let a = pool.allocate(&RegionRequest::new(600)).expect("a");
        let b = pool
            .allocate(&RegionRequest::new(600))
            .expect("b, on a second page");
        assert_ne!(a.buffer, b.buffer);
        pool.free(a).expect("free a");
        assert_eq!(pool.trim(), Ok(1), "the first page is empty");
        assert_eq!(pool.page_count(), 1);
        assert_eq!(pool.inner().report().live_regions, 1);
        let c = pool.allocate(&RegionRequest::new(600)).expect("c");
        assert!(c.is_inside_buffer());
        assert_eq!(pool.page_count(), 2, "a fresh page for the trimmed space");
        assert_eq!(pool.trim(), Ok(0), "both pages hold a region");
        pool.free(b).expect("b");
        pool.free(c).expect("c");
        assert_eq!(pool.trim(), Ok(2));
        let report = pool.inner().report();
        assert_eq!((report.live_regions, report.bad_frees), (0, 0));
    }

    #[test]
    fn dropping_the_pool_returns_every_page() {
        let inner = std::sync::Arc::new(CountingStorage::new(HostStorage::unlimited()));
        {
            let pool = PagedStorage::new(inner.clone(), 512, 4, crate::storage::STORAGE_USAGE)
                .expect("pool");
            for size in [100, 300, 500, 700] {
                pool.allocate(&RegionRequest::new(size)).expect("region");
            }
            assert!(inner.report().live_regions >= 2);
        }
        assert_eq!(inner.report().live_regions, 0);
        assert_eq!(inner.report().bad_frees, 0);
    }

    proptest! {
        /// Any sequence of allocations and frees keeps live regions disjoint, aligned,
        /// inside their pages, and frees exactly what it allocated.
        #[test]
        fn live_regions_never_overlap(ops in proptest::collection::vec((1u64..3000, any::<bool>()), 1..80)) {
            let pool = pool(2048);
            let mut live: Vec<Region<HostMemory>> = Vec::new();
            for (size, free_one) in ops {
                if free_one && !live.is_empty() {
                    let r = live.swap_remove(size as usize % live.len());
                    pool.free(r).expect("free a live region");
                } else {
                    let r = pool.allocate(&RegionRequest::new(size).alignment(64)).expect("alloc");
                    prop_assert!(r.size >= size && r.offset.is_multiple_of(64) && r.is_inside_buffer());
                    live.push(r);
                }
                prop_assert!(disjoint(&live));
            }
            for r in live {
                pool.free(r).expect("free");
            }
            prop_assert_eq!(pool.live_regions(), 0);
        }
    }

    use crate::storage::HostMemory;
}
