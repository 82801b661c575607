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
