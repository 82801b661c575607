//! [`Region`], the one unit of device memory wgalloc hands out, and [`PlannedMemory`]:
//! the regions that back a plan, one per planned chunk.
//!
//! A placement (buffer, chunk, offset, size) resolves to a bindable region in one place,
//! [`PlannedMemory::bindable`], which checks that the bytes lie inside the chunk's
//! region and that the binding starts at a multiple of the device's storage offset
//! alignment. Every reader of planned memory (tensor transfers, the executor, the
//! checksum proof, streams) goes through it or through [`PlannedMemory::region`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{BufferAllocator, DeviceError};
use crate::plan::{BufferId, Placement};
use crate::storage::Region;
use crate::storage::Storage;

/// The device memory of a plan: `regions[buffer][chunk]` is the region of that chunk
/// (a whole `wgpu::Buffer` when wgalloc allocated it, or a range of a larger buffer
/// the caller owns, [`PlannedMemory::from_regions`]). A buffer of the plan that shares
/// an earlier buffer's memory (`same_as`) holds that buffer's regions and does not own
/// them.
///
/// Dropping it destroys every buffer it owns, so the memory goes back at once (handles
/// cloned out of it become invalid). [`PlannedMemory::release`] hands them back to an
/// allocator instead.
pub struct PlannedMemory {
    /// Unique to this memory in the process (never reused), so caches of bind groups
    /// can tell one allocation from another.
    id: u64,
    regions: Vec<Vec<Region>>,
    /// `owned[buffer]`: whether the row's buffers are this memory's own (false for a
    /// row that shares an earlier row's buffers, and for regions of a caller's buffers).
    owned: Vec<bool>,
    /// The storage the owned regions came from and go back to (`None`: they are whole
    /// buffers, destroyed on drop or handed back by [`PlannedMemory::release`]).
    storage: Option<SharedStorage>,
}

/// A device storage shared by the memories allocated from it.
pub type SharedStorage = Arc<dyn Storage<Memory = wgpu::Buffer>>;

impl fmt::Debug for PlannedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlannedMemory")
            .field("id", &self.id)
            .field("regions", &self.regions)
            .field("owned", &self.owned)
            .field("from_storage", &self.storage.is_some())
            .finish()
    }
}

impl PlannedMemory {
    /// Wraps buffers already created, indexed `[buffer][chunk]` like the plan's
    /// [`crate::plan::Plan::buffers`]: each chunk is a whole buffer. It owns all of
    /// them.
    pub fn from_buffers(chunks: Vec<Vec<wgpu::Buffer>>) -> PlannedMemory {
        let owned = vec![true; chunks.len()];
        PlannedMemory::with_ownership(chunks, owned)
    }

    /// Like [`PlannedMemory::from_buffers`] with `owned[buffer]` false for rows that
    /// share another row's buffers (they are neither destroyed nor released twice).
    pub(crate) fn with_ownership(chunks: Vec<Vec<wgpu::Buffer>>, owned: Vec<bool>) -> Self {
        let regions = chunks
            .into_iter()
            .map(|row| row.into_iter().map(Region::whole).collect())
            .collect();
        PlannedMemory::with_regions(regions, owned, None)
    }

    /// Regions `[buffer][chunk]`, `owned[buffer]` telling which rows are this memory's
    /// own; owned regions go back to `storage` on drop (or are destroyed whole buffers
    /// when there is none).
    pub(crate) fn with_regions(
        regions: Vec<Vec<Region>>,
        owned: Vec<bool>,
        storage: Option<SharedStorage>,
    ) -> PlannedMemory {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        PlannedMemory {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            regions,
            owned,
            storage,
        }
    }

    /// Memory whose chunks are ranges of buffers it does not own, indexed
    /// `[buffer][chunk]` like the plan's buffers: a tensor at offset `o` of a chunk
    /// lives at `region.offset + o` of `region.buffer`. Nothing is destroyed on drop
    /// nor handed back by [`PlannedMemory::release`] (the regions' owner frees them);
    /// [`PlannedMemory::total_size`] and [`PlannedMemory::buffer_count`] count only
    /// owned buffers, so they are 0.
    pub fn from_regions(regions: Vec<Vec<Region>>) -> PlannedMemory {
        let owned = vec![false; regions.len()];
        PlannedMemory::with_regions(regions, owned, None)
    }

    /// The region of one chunk, if the memory has it.
    pub fn region(&self, buffer: BufferId, chunk: usize) -> Option<&Region> {
        self.regions.get(buffer.0)?.get(chunk)
    }

    /// The bytes `[placement.offset + within, +size)` of the placement's chunk, as a
    /// region that can be bound: inside the chunk's region (and its buffer), starting at
    /// a multiple of `alignment` (the device's `min_storage_buffer_offset_alignment`;
    /// pass 1 to skip the check, e.g. for copies).
    ///
    /// # Errors
    /// [`DeviceError::RangeOutOfBounds`] when the memory has no such chunk or the bytes
    /// run past it; [`DeviceError::UnalignedBinding`] when the region's offset in its
    /// buffer is not a multiple of `alignment`.
    pub fn bindable(
        &self,
        placement: &Placement,
        within: u64,
        size: u64,
        alignment: u64,
    ) -> Result<Region, DeviceError> {
        let chunk = self.region(placement.buffer, placement.chunk);
        let out_of_bounds = || DeviceError::RangeOutOfBounds {
            offset: placement.offset.saturating_add(within),
            size,
            buffer_size: chunk.map_or(0, |c| c.size),
        };
        let chunk = chunk.ok_or_else(out_of_bounds)?;
        let start = placement
            .offset
            .checked_add(within)
            .ok_or_else(out_of_bounds)?;
        let region = chunk
            .sub(start, size)
            .filter(Region::is_inside_buffer)
            .ok_or_else(out_of_bounds)?;
        if !region.offset.is_multiple_of(alignment.max(1)) {
            return Err(DeviceError::UnalignedBinding {
                offset: region.offset,
                alignment,
            });
        }
        Ok(region)
    }

    /// A number unique to this memory in the process (a new allocation gets a new one).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Every chunk's region, `[buffer][chunk]`.
    pub(crate) fn regions(&self) -> &[Vec<Region>] {
        &self.regions
    }

    /// Number of chunks of plan buffer `buffer`.
    pub fn chunk_count(&self, buffer: BufferId) -> usize {
        self.regions.get(buffer.0).map_or(0, Vec::len)
    }

    /// Total bytes of all chunks this memory owns (shared rows count once).
    pub fn total_size(&self) -> u64 {
        self.owned_rows()
            .flatten()
            .fold(0u64, |acc, r| acc.saturating_add(r.size))
    }

    /// Number of buffers this memory owns.
    pub fn buffer_count(&self) -> usize {
        self.owned_rows().map(Vec::len).sum()
    }

    fn owned_rows(&self) -> impl Iterator<Item = &Vec<Region>> {
        self.regions
            .iter()
            .enumerate()
            .filter(|(i, _)| self.owned.get(*i).copied().unwrap_or(true))
            .map(|(_, row)| row)
    }

    /// Hands every owned buffer back to `allocator` (last allocated first) instead of
    /// destroying it; use it with the allocator that allocated the memory. Memory from
    /// a storage ([`super::allocate_plan_in`]) goes back to its storage instead.
    pub fn release(mut self, allocator: &dyn BufferAllocator) {
        if self.storage.is_some() {
            return; // Drop frees the regions to their storage.
        }
        self.give_back(|region| allocator.release(region.buffer));
    }

    /// Takes the owned regions out (last allocated first) and hands each to `free`.
    fn give_back(&mut self, mut free: impl FnMut(Region)) {
        let regions = std::mem::take(&mut self.regions);
        let owned = std::mem::take(&mut self.owned);
        for (i, row) in regions.into_iter().enumerate().rev() {
            if owned.get(i).copied().unwrap_or(true) {
                for region in row.into_iter().rev() {
                    free(region);
                }
            }
        }
    }
}

impl Drop for PlannedMemory {
    fn drop(&mut self) {
        match self.storage.take() {
            Some(storage) => self.give_back(|region| {
                if let Err(e) = storage.free(region) {
                    log::warn!("a storage refused a region it handed out: {e}");
                }
            }),
            None => self.give_back(|region| region.buffer.destroy()),
        }
    }
}
