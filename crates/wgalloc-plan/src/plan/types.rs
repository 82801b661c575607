//! The plan: where each tensor lives, and how large each buffer's chunks are.

use serde::Serialize;

use super::BufferTypeDesc;
use crate::graph::TensorId;

/// Index of a buffer (one per buffer type given to the planner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct BufferId(pub usize);

/// Where one tensor's memory lives: `[offset, offset + size)` of chunk `chunk` of
/// buffer `buffer`. `size` is the aligned size reserved for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Placement {
    /// The buffer.
    pub buffer: BufferId,
    /// The chunk inside the buffer.
    pub chunk: usize,
    /// Byte offset inside the chunk.
    pub offset: u64,
    /// Bytes reserved (the tensor's size rounded up to the alignment).
    pub size: u64,
}

impl Placement {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }
}

/// One chunk of a buffer: one `wgpu::Buffer` once allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChunkPlan {
    /// Bytes the chunk needs (its high-water mark).
    pub size: u64,
    /// Whether the chunk holds a single tensor larger than the buffer type's max size.
    pub oversized: bool,
}

/// One buffer of the plan: its type and its chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BufferPlan {
    /// The buffer type it was planned for.
    pub buffer_type: BufferTypeDesc,
    /// Its chunks, in order.
    pub chunks: Vec<ChunkPlan>,
    /// When this buffer uses the same buffer type as an earlier one, that buffer
    /// (its memory is shared, and it reports size 0).
    pub same_as: Option<BufferId>,
}

impl BufferPlan {
    /// Sum of the chunk sizes.
    pub fn size(&self) -> u64 {
        self.chunks
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(c.size))
    }
}

/// A memory plan for one graph: a placement for every planned tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The planner that made it (`ggml`, `greedy-size`, `best`, ...).
    pub planner: String,
    /// `placements[i]` for tensor `i`: `None` for weights; a view gets its root's placement.
    pub placements: Vec<Option<Placement>>,
    /// The buffers, indexed by [`BufferId`].
    pub buffers: Vec<BufferPlan>,
    /// Nodes whose output was placed over their dying first input, as (output, input).
    pub inplace: Vec<(TensorId, TensorId)>,
}

impl Plan {
    /// Total bytes over all buffers (a buffer that repeats another counts once).
    pub fn total_size(&self) -> u64 {
        self.buffers
            .iter()
            .filter(|b| b.same_as.is_none())
            .fold(0u64, |acc, b| acc.saturating_add(b.size()))
    }

    /// The placement of a tensor (its root's for a view), if planned.
    pub fn placement(&self, id: TensorId) -> Option<Placement> {
        self.placements.get(id.index()).copied().flatten()
    }
}
