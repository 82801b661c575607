//! [`KvCache`]: the KV cache's memory on any [`Storage`]: pages taken from the storage
//! as the context grows (never moved, never copied), blocks booked in them, and the
//! block table that maps each logical block of the context to its page and offset.

use std::collections::BTreeSet;

use super::{KvConfig, KvError};
use crate::exec::KV_TABLE_HEADER;
use crate::storage::{Region, RegionRequest, Storage};

/// Where one logical block lives: a page and a block slot in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockSlot {
    /// Index of the page ([`KvCache::pages`]).
    pub page: u32,
    /// The block's slot in that page.
    pub slot: u32,
}

/// What the cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvReport {
    /// Pages taken from the storage.
    pub pages: usize,
    /// Logical blocks mapped to a slot.
    pub blocks: usize,
    /// Tokens committed (the context length).
    pub tokens: u64,
    /// Bytes of the pages (reserved).
    pub reserved_bytes: u64,
    /// Bytes of the mapped blocks (used).
    pub used_bytes: u64,
    /// Bytes of the block table.
    pub table_bytes: u64,
}

/// One step's view of the cache, from [`KvCache::begin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvStep {
    /// Tokens already in the cache: the chunk sits at positions `past..past + n`.
    pub past: u32,
    /// Tokens of the chunk.
    pub n: u32,
}

/// A KV cache on a storage. Pages come from the storage one at a time when a block
/// needs one; blocks are booked lowest slot first; the block table maps the context's
/// logical blocks to them. Every refused call leaves the cache as it was. Pages and
/// the table go back to the storage when the cache is dropped.
#[derive(Debug)]
pub struct KvCache<S: Storage> {
    storage: S,
    config: KvConfig,
    pages: Vec<Region<S::Memory>>,
    table_region: Option<Region<S::Memory>>,
    blocks: Vec<BlockSlot>,
    free: BTreeSet<BlockSlot>,
    past: u32,
}

impl<S: Storage> KvCache<S> {
    /// An empty cache of `config` on `storage`; allocates the block table's region.
    ///
    /// # Errors
    /// [`KvError::Storage`] when the storage refuses the table.
    pub fn new(storage: S, config: KvConfig) -> Result<KvCache<S>, KvError> {
        let bytes = config.table_words() * 4;
        let request = RegionRequest::new(bytes)
            .alignment(config.alignment)
            .label("wgalloc kv table");
        let table = storage
            .allocate(&request)
            .map_err(|source| KvError::Storage {
                what: "block table",
                bytes,
                pages: 0,
                blocks: 0,
                source,
            })?;
        Ok(KvCache {
            storage,
            config,
            pages: Vec::new(),
            table_region: Some(table),
            blocks: Vec::new(),
            free: BTreeSet::new(),
            past: 0,
        })
    }

    /// The cache's shape.
    pub fn config(&self) -> &KvConfig {
        &self.config
    }

    /// The storage pages come from.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The pages, in the order they were taken (a page's index is its number in the
    /// block table).
    pub fn pages(&self) -> &[Region<S::Memory>] {
        &self.pages
    }

    /// The block table's region (`config.table_words()` words).
    pub fn table_region(&self) -> Option<&Region<S::Memory>> {
        self.table_region.as_ref()
    }

    /// Where each logical block of the context lives.
    pub fn blocks(&self) -> &[BlockSlot] {
        &self.blocks
    }

    /// Tokens committed.
    pub fn past(&self) -> u32 {
        self.past
    }

    /// The region of logical block `block` (`None` when it is not mapped).
    pub fn block_region(&self, block: usize) -> Option<Region<S::Memory>> {
        let at = self.blocks.get(block)?;
        let bytes = self.config.block_bytes();
        self.pages
            .get(at.page as usize)?
            .sub(u64::from(at.slot) * bytes, bytes)
    }

    /// What the cache holds.
    pub fn report(&self) -> KvReport {
        KvReport {
            pages: self.pages.len(),
            blocks: self.blocks.len(),
            tokens: u64::from(self.past),
            reserved_bytes: self.pages.len() as u64 * self.config.page_bytes(),
            used_bytes: self.blocks.len() as u64 * self.config.block_bytes(),
            table_bytes: self.config.table_words() * 4,
        }
    }

    /// Takes one more page from the storage (its slots become free).
    fn add_page(&mut self) -> Result<(), KvError> {
        let bytes = self.config.page_bytes();
        let request = RegionRequest::new(bytes)
            .alignment(self.config.alignment)
            .label(format!("wgalloc kv page {}", self.pages.len()));
        let region = self
            .storage
            .allocate(&request)
            .map_err(|source| KvError::Storage {
                what: "page",
                bytes,
                pages: self.pages.len(),
                blocks: self.blocks.len(),
                source,
            })?;
        let page = u32::try_from(self.pages.len()).unwrap_or(u32::MAX);
        self.pages.push(region);
        self.free
            .extend((0..self.config.blocks_per_page).map(|slot| BlockSlot { page, slot }));
        Ok(())
    }

    /// Gives back the pages from `keep` on (taken by a call that failed) and their slots.
    fn drop_pages_from(&mut self, keep: usize) {
        while self.pages.len() > keep {
            let page = (self.pages.len() - 1) as u32;
            self.free.retain(|s| s.page != page);
            if let Some(region) = self.pages.pop() {
                // The region came from this storage and is freed once; a refusal would
                // be the storage's own bug, counted by it.
                let _ = self.storage.free(region);
            }
        }
    }

    /// Makes sure the cache holds at least `pages` pages (a bucket's reservation).
    ///
    /// # Errors
    /// [`KvError::Storage`] when the storage refuses a page; the pages this call took
    /// are given back, so the cache is as before.
    pub fn reserve_pages(&mut self, pages: usize) -> Result<(), KvError> {
        let before = self.pages.len();
        while self.pages.len() < pages {
            if let Err(e) = self.add_page() {
                self.drop_pages_from(before);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Maps logical blocks until `tokens` tokens have a block, lowest free slot first,
    /// taking a page only when no slot is free.
    ///
    /// # Errors
    /// [`KvError::ContextFull`] past `max_tokens`; [`KvError::Storage`] when the storage
    /// refuses a page (the blocks and pages this call took are given back).
    pub fn map(&mut self, tokens: u64) -> Result<(), KvError> {
        self.map_within(tokens, usize::MAX)
    }

    /// [`KvCache::map`] taking no page past `max_pages` pages.
    ///
    /// # Errors
    /// As [`KvCache::map`]; [`KvError::TooManyPages`] when a block would need page
    /// `max_pages` (nothing is allocated then, and the blocks this call took go back).
    pub fn map_within(&mut self, tokens: u64, max_pages: usize) -> Result<(), KvError> {
        let max = u64::from(self.config.max_tokens);
        if tokens > max {
            return Err(KvError::ContextFull {
                needed: tokens,
                max,
            });
        }
        let want = self.config.blocks_for(tokens as u32) as usize;
        let (blocks_before, pages_before) = (self.blocks.len(), self.pages.len());
        while self.blocks.len() < want {
            if self.free.is_empty() && self.pages.len() >= max_pages {
                let page = self.pages.len();
                self.unmap_to(blocks_before);
                return Err(KvError::TooManyPages {
                    page,
                    slots: max_pages,
                });
            }
            if self.free.is_empty() {
                if let Err(e) = self.add_page() {
                    self.unmap_to(blocks_before);
                    self.drop_pages_from(pages_before);
                    return Err(e);
                }
            }
            if let Some(slot) = self.free.pop_first() {
                self.blocks.push(slot);
            }
        }
        Ok(())
    }

    /// Returns the blocks from `keep` on to the free slots.
    fn unmap_to(&mut self, keep: usize) {
        while self.blocks.len() > keep {
            if let Some(slot) = self.blocks.pop() {
                self.free.insert(slot);
            }
        }
    }

    /// Starts a step of `n` tokens: maps blocks for positions `past..past + n`.
    ///
    /// # Errors
    /// As [`KvCache::map`].
    pub fn begin(&mut self, n: u32) -> Result<KvStep, KvError> {
        self.begin_within(n, usize::MAX)
    }

    /// [`KvCache::begin`] for a step graph with `slots` page slots: every block of the
    /// context must lie in a page below `slots`.
    ///
    /// # Errors
    /// As [`KvCache::map_within`]; [`KvError::TooManyPages`] also when a mapped block
    /// lies in a page past the slots (the blocks this call mapped go back).
    pub fn begin_within(&mut self, n: u32, slots: usize) -> Result<KvStep, KvError> {
        let keep = self.blocks.len();
        self.map_within(u64::from(self.past) + u64::from(n), slots)?;
        self.check_slots(slots, keep)?;
        Ok(KvStep { past: self.past, n })
    }

    /// Checks that every mapped block lies in a page below `slots` (the page slots of
    /// a step graph); when not, unmaps the blocks from `keep` on and refuses.
    ///
    /// # Errors
    /// [`KvError::TooManyPages`].
    pub fn check_slots(&mut self, slots: usize, keep: usize) -> Result<(), KvError> {
        if let Some(bad) = self.blocks.iter().find(|b| b.page as usize >= slots) {
            let page = bad.page as usize;
            self.unmap_to(keep.min(self.blocks.len()));
            return Err(KvError::TooManyPages { page, slots });
        }
        Ok(())
    }

    /// Ends a step: the `n` tokens of the chunk are now in the cache.
    ///
    /// # Errors
    /// [`KvError::NotMapped`] when they have no block (no [`KvCache::begin`] for them).
    pub fn commit(&mut self, n: u32) -> Result<(), KvError> {
        let tokens = u64::from(self.past) + u64::from(n);
        let mapped = self.blocks.len() as u64 * u64::from(self.config.block_tokens);
        if tokens > mapped {
            return Err(KvError::NotMapped { tokens, mapped });
        }
        self.past = tokens as u32;
        Ok(())
    }

    /// Keeps the first `tokens` tokens (at most the committed ones) and gives the
    /// blocks after them back to the free slots (pages stay, for reuse).
    pub fn truncate(&mut self, tokens: u32) {
        self.past = self.past.min(tokens);
        let keep = self.config.blocks_for(self.past) as usize;
        self.unmap_to(keep);
    }

    /// The block table as the kernels read it: `[past, mapped blocks, block_tokens,
    /// 0]`, then `(page, word offset of the block in its page)` per mapped block,
    /// zeros after them (`config.table_words()` words).
    pub fn table_words(&self) -> Vec<u32> {
        let mut words = vec![0u32; self.config.table_words() as usize];
        words[0] = self.past;
        words[1] = self.blocks.len() as u32;
        words[2] = self.config.block_tokens;
        let block_words = self.config.block_words();
        for (b, slot) in self.blocks.iter().enumerate() {
            let at = KV_TABLE_HEADER as usize + 2 * b;
            words[at] = slot.page;
            // A page is at most u32::MAX / 4 words (KvConfig checks it).
            words[at + 1] = (u64::from(slot.slot) * block_words) as u32;
        }
        words
    }
}

impl<S: Storage> Drop for KvCache<S> {
    fn drop(&mut self) {
        self.drop_pages_from(0);
        if let Some(table) = self.table_region.take() {
            let _ = self.storage.free(table);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::storage::{CountingStorage, HostStorage, StorageError};
    use wgalloc_plan::ErrorKind;

    fn config() -> KvConfig {
        KvConfig::new(2, 2, 4, 3, 40)
            .and_then(|c| c.with_blocks_per_page(2))
            .expect("valid")
    }

    #[test]
    fn growing_takes_a_page_only_when_no_block_slot_is_free() {
        let storage = Arc::new(CountingStorage::new(HostStorage::unlimited()));
        let mut cache = KvCache::new(Arc::clone(&storage), config()).expect("table");
        assert_eq!(storage.report().allocations, 1, "the table");
        let step = cache.begin(4).expect("two blocks, one page");
        assert_eq!(step, KvStep { past: 0, n: 4 });
        cache.commit(4).expect("mapped");
        assert_eq!(storage.report().allocations, 2);
        let pages_before: Vec<_> = cache.pages().to_vec();
        for _ in 0..5 {
            cache.begin(1).expect("grow");
            cache.commit(1).expect("mapped");
        }
        // 9 tokens: 3 blocks, 2 pages; the first page was not moved.
        assert_eq!(cache.report().blocks, 3);
        assert_eq!(cache.pages().len(), 2);
        assert_eq!(cache.pages()[0], pages_before[0]);
        assert_eq!(storage.report().allocations, 3);
        let table = cache.table_words();
        assert_eq!(&table[..4], &[9, 3, 3, 0]);
        let block_words = config().block_words() as u32;
        assert_eq!(&table[4..10], &[0, 0, 0, block_words, 1, 0]);
    }

    #[test]
    fn a_refused_page_is_a_typed_error_and_loses_nothing() {
        let host = Arc::new(HostStorage::unlimited());
        let storage = Arc::new(CountingStorage::new(Arc::clone(&host)));
        let mut cache = KvCache::new(Arc::clone(&storage), config()).expect("table");
        cache.begin(6).expect("one page");
        cache.commit(6).expect("mapped");
        let table = cache.table_words();
        host.refuse_after(0);
        match cache.begin(7) {
            Err(KvError::Storage {
                what: "page",
                pages: 1,
                blocks: 2,
                source: StorageError::Refused { .. },
                ..
            }) => {}
            other => panic!("expected a refused page, got {other:?}"),
        }
        assert_eq!(cache.table_words(), table, "nothing changed");
        assert_eq!(cache.report().blocks, 2);
        // A capacity refusal keeps its kind (does not fit now).
        let small = Arc::new(HostStorage::with_capacity(config().table_words() * 4 + 8));
        let mut tight = KvCache::new(Arc::clone(&small), config()).expect("table fits");
        let e = tight.begin(1).expect_err("no room for a page");
        assert_eq!(e.kind(), ErrorKind::NeverFits);
        drop(tight);
        drop(cache);
        let report = storage.report();
        assert_eq!(
            (report.live_regions, report.live_bytes, report.bad_frees),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_reservation_that_fails_gives_back_what_it_took() {
        let host = Arc::new(HostStorage::unlimited());
        let mut cache = KvCache::new(Arc::clone(&host), config()).expect("table");
        host.refuse_after(2);
        assert!(cache.reserve_pages(3).is_err());
        assert_eq!(cache.pages().len(), 0);
        assert_eq!(host.report().live_regions, 1, "only the table");
        host.refuse_after(2);
        cache.reserve_pages(2).expect("two fit");
        assert_eq!(host.report().live_regions, 3);
    }

    #[test]
    fn truncating_frees_blocks_for_reuse_and_the_table_follows() {
        let host = Arc::new(HostStorage::unlimited());
        let mut cache = KvCache::new(Arc::clone(&host), config()).expect("table");
        cache.begin(12).expect("four blocks");
        cache.commit(12).expect("mapped");
        cache.truncate(4);
        assert_eq!(cache.past(), 4);
        assert_eq!(cache.report().blocks, 2);
        cache.begin(5).expect("reuses freed slots");
        assert_eq!(cache.pages().len(), 2, "no new page");
        assert!(cache.commit(6).is_err(), "past the mapped blocks");
        assert!(matches!(
            cache.begin(40),
            Err(KvError::ContextFull {
                needed: 44,
                max: 40
            })
        ));
        let region = cache.block_region(2).expect("mapped");
        assert_eq!(region.size, config().block_bytes());
        assert!(cache.block_region(3).is_none());
    }

    #[test]
    fn a_step_beyond_the_graph_slots_is_refused_and_unmapped() {
        let host = Arc::new(HostStorage::unlimited());
        let mut cache = KvCache::new(Arc::clone(&host), config()).expect("table");
        cache.begin(6).expect("page 0");
        cache.commit(6).expect("mapped");
        cache.begin(1).expect("page 1");
        assert_eq!(
            cache.check_slots(1, 2),
            Err(KvError::TooManyPages { page: 1, slots: 1 })
        );
        assert_eq!(cache.report().blocks, 2);
        assert!(cache.check_slots(2, 2).is_ok());
        // Past two slots, the step is refused before a third page is asked for.
        let allocations = host.report().allocations;
        assert_eq!(
            cache.begin_within(12, 2),
            Err(KvError::TooManyPages { page: 2, slots: 2 })
        );
        assert_eq!(host.report().allocations, allocations);
        assert_eq!(cache.report().blocks, 2);
    }
}
