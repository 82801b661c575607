//! [`PlannedMemory`]: the `wgpu::Buffer`s that back a plan, one per planned chunk.

use std::sync::atomic::{AtomicU64, Ordering};

use super::BufferAllocator;
use crate::plan::{BufferId, Placement};

/// The device memory of a plan: `chunks[buffer][chunk]` is the `wgpu::Buffer` of that
/// chunk. A buffer of the plan that shares an earlier buffer's memory (`same_as`)
/// holds handles to that buffer's chunks and does not own them.
///
/// Dropping it destroys every buffer it owns, so the memory goes back at once (handles
/// cloned out of it become invalid). [`PlannedMemory::release`] hands them back to an
/// allocator instead.
#[derive(Debug)]
pub struct PlannedMemory {
    /// Unique to this memory in the process (never reused), so caches of bind groups
    /// can tell one allocation from another.
    id: u64,
    chunks: Vec<Vec<wgpu::Buffer>>,
    /// `owned[buffer]`: whether the row's buffers are this memory's own (false for a
    /// row that shares an earlier row's buffers).
    owned: Vec<bool>,
    /// `regions[buffer][chunk] = (base offset, size)` when the chunks are ranges of
    /// larger buffers ([`PlannedMemory::from_regions`]); `None` when each chunk is a
    /// whole buffer.
    regions: Option<Vec<Vec<(u64, u64)>>>,
}

/// One planned chunk's memory as a range of a larger buffer: `size` bytes of `buffer`
/// from byte `offset` (e.g. a block of a user's pool: a stream's
/// [`BlockAddress`](crate::stream::BlockAddress) is a `Region`).
#[derive(Debug, Clone)]
pub struct Region {
    /// The buffer that holds the chunk.
    pub buffer: wgpu::Buffer,
    /// Where the chunk starts in `buffer`.
    pub offset: u64,
    /// Bytes of the chunk.
    pub size: u64,
}

impl PlannedMemory {
    /// Wraps buffers already created, indexed `[buffer][chunk]` like the plan's
    /// [`crate::plan::Plan::buffers`]. It owns all of them.
    pub fn from_buffers(chunks: Vec<Vec<wgpu::Buffer>>) -> PlannedMemory {
        let owned = vec![true; chunks.len()];
        PlannedMemory::with_ownership(chunks, owned)
    }

    /// Like [`PlannedMemory::from_buffers`] with `owned[buffer]` false for rows that
    /// share another row's buffers (they are neither destroyed nor released twice).
    pub(crate) fn with_ownership(chunks: Vec<Vec<wgpu::Buffer>>, owned: Vec<bool>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        PlannedMemory {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            chunks,
            owned,
            regions: None,
        }
    }

    /// Memory whose chunks are ranges of buffers it does not own, indexed
    /// `[buffer][chunk]` like the plan's buffers: a tensor at offset `o` of a chunk
    /// lives at `region.offset + o` of `region.buffer`. Nothing is destroyed on drop
    /// nor handed back by [`PlannedMemory::release`] (the regions' owner frees them);
    /// [`PlannedMemory::total_size`] and [`PlannedMemory::buffer_count`] count only
    /// owned buffers, so they are 0.
    pub fn from_regions(regions: Vec<Vec<Region>>) -> PlannedMemory {
        let spans = regions
            .iter()
            .map(|row| row.iter().map(|r| (r.offset, r.size)).collect())
            .collect();
        let owned = vec![false; regions.len()];
        let chunks = regions
            .into_iter()
            .map(|row| row.into_iter().map(|r| r.buffer).collect())
            .collect();
        let mut memory = PlannedMemory::with_ownership(chunks, owned);
        memory.regions = Some(spans);
        memory
    }

    /// The buffer of one chunk with the chunk's base offset and size in it: `(buffer,
    /// 0, buffer size)` for a chunk that is a whole buffer.
    pub fn region(&self, buffer: BufferId, chunk: usize) -> Option<(&wgpu::Buffer, u64, u64)> {
        let whole = self.chunk(buffer, chunk)?;
        match &self.regions {
            None => Some((whole, 0, whole.size())),
            Some(spans) => {
                let &(offset, size) = spans.get(buffer.0)?.get(chunk)?;
                Some((whole, offset, size))
            }
        }
    }

    /// A number unique to this memory in the process (a new allocation gets a new one).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The buffer of one chunk, if it exists.
    pub fn chunk(&self, buffer: BufferId, chunk: usize) -> Option<&wgpu::Buffer> {
        self.chunks.get(buffer.0)?.get(chunk)
    }

    /// The buffer that holds `placement`, if it exists.
    pub fn buffer_of(&self, placement: &Placement) -> Option<&wgpu::Buffer> {
        self.chunk(placement.buffer, placement.chunk)
    }

    /// Every chunk's buffer, `[buffer][chunk]`.
    pub fn chunks(&self) -> &[Vec<wgpu::Buffer>] {
        &self.chunks
    }

    /// Total bytes of all chunks this memory owns (shared rows count once).
    pub fn total_size(&self) -> u64 {
        self.owned_rows()
            .flatten()
            .fold(0u64, |acc, b| acc.saturating_add(b.size()))
    }

    /// Number of buffers this memory owns.
    pub fn buffer_count(&self) -> usize {
        self.owned_rows().map(Vec::len).sum()
    }

    fn owned_rows(&self) -> impl Iterator<Item = &Vec<wgpu::Buffer>> {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(i, _)| self.owned.get(*i).copied().unwrap_or(true))
            .map(|(_, row)| row)
    }

    /// Hands every owned buffer back to `allocator` (last allocated first) instead of
    /// destroying it; use it with the allocator that allocated the memory.
    pub fn release(mut self, allocator: &dyn BufferAllocator) {
        let chunks = std::mem::take(&mut self.chunks);
        let owned = std::mem::take(&mut self.owned);
        for (i, row) in chunks.into_iter().enumerate().rev() {
            if owned.get(i).copied().unwrap_or(true) {
                for buffer in row.into_iter().rev() {
                    allocator.release(buffer);
                }
            }
        }
    }
}

impl Drop for PlannedMemory {
    fn drop(&mut self) {
        for (i, row) in self.chunks.iter().enumerate() {
            if self.owned.get(i).copied().unwrap_or(true) {
                for buffer in row {
                    buffer.destroy();
                }
            }
        }
    }
}
