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

use super::DeviceError;
use crate::plan::{BufferId, Placement};
use crate::storage::{free_last_first, OwnedRegion, Region, Storage};

/// The device memory of a plan: `regions[buffer][chunk]` is the region of that chunk.
/// It has one mode: the regions came from a storage through
/// [`super::allocate_plan`] and go back to it when the memory is dropped (handles
/// cloned out of it become invalid then). [`PlannedMemory::from_regions`] wraps ranges
/// of buffers a caller owns; those it never frees. A buffer of the plan that shares an
/// earlier buffer's memory (`same_as`) holds that buffer's regions and does not own
/// them.
pub struct PlannedMemory {
    /// Unique to this memory in the process (never reused), so caches of bind groups
    /// can tell one allocation from another.
    id: u64,
    regions: Vec<Vec<Region>>,
    /// The regions this memory owns, in the order they were allocated (a row that
    /// shares an earlier row's regions, and a caller's regions, are not among them):
    /// they go back to their storage on drop, last first.
    held: Vec<OwnedRegion>,
}

/// A device storage shared by the memories allocated from it.
pub type SharedStorage = Arc<dyn Storage<Memory = wgpu::Buffer>>;

impl fmt::Debug for PlannedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlannedMemory")
            .field("id", &self.id)
            .field("regions", &self.regions)
            .field("owned_regions", &self.held.len())
            .finish()
    }
}

impl PlannedMemory {
    /// Regions `[buffer][chunk]`, of which `held` are this memory's own (each a region
    /// of `regions`, in allocation order).
    pub(crate) fn owning(regions: Vec<Vec<Region>>, held: Vec<OwnedRegion>) -> PlannedMemory {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        PlannedMemory {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            regions,
            held,
        }
    }

    /// Memory whose chunks are ranges of buffers it does not own, indexed
    /// `[buffer][chunk]` like the plan's buffers: a tensor at offset `o` of a chunk
    /// lives at `region.offset + o` of `region.buffer`. Nothing is freed on drop (the
    /// regions' owner frees them);
    /// [`PlannedMemory::total_size`] and [`PlannedMemory::buffer_count`] count only
    /// owned buffers, so they are 0.
    pub fn from_regions(regions: Vec<Vec<Region>>) -> PlannedMemory {
        PlannedMemory::owning(regions, Vec::new())
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
        self.held
            .iter()
            .fold(0u64, |acc, r| acc.saturating_add(r.region().size))
    }

    /// Number of regions (buffers, or ranges of a storage's pages) this memory owns.
    pub fn buffer_count(&self) -> usize {
        self.held.len()
    }
}

impl Drop for PlannedMemory {
    fn drop(&mut self) {
        // Last allocated first, as a stack allocator underneath expects.
        free_last_first(std::mem::take(&mut self.held));
    }
}
