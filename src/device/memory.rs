//! [`PlannedMemory`]: the `wgpu::Buffer`s that back a plan, one per planned chunk.

use crate::plan::{BufferId, Placement};

/// The device memory of a plan: `chunks[buffer][chunk]` is the `wgpu::Buffer` of that
/// chunk. Dropping it releases every buffer.
#[derive(Debug, Default)]
pub struct PlannedMemory {
    chunks: Vec<Vec<wgpu::Buffer>>,
}

impl PlannedMemory {
    /// Wraps buffers already created, indexed `[buffer][chunk]` like the plan's
    /// [`crate::plan::Plan::buffers`].
    pub fn from_buffers(chunks: Vec<Vec<wgpu::Buffer>>) -> PlannedMemory {
        PlannedMemory { chunks }
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

    /// Total bytes of all chunks.
    pub fn total_size(&self) -> u64 {
        self.chunks.iter().flatten().map(|b| b.size()).sum()
    }
}
