//! The blocks of a graph context's workspace or outputs: one per planned chunk, grown
//! through the `realloc` callback (or wgalloc's default) with live bytes kept.

use super::callbacks::{copy_prefix, Allocation, ReallocRequest};
use super::layout::Layout;
use super::{MemoryRole, RuntimeError};
use crate::device::{GpuContext, PlannedMemory, WgpuAllocator, STORAGE_USAGE};

/// The blocks of one kind of memory, and where they come from.
pub(super) struct Blocks {
    pub(super) role: MemoryRole,
    pub(super) allocation: Allocation,
    /// One block per chunk; `None` where none is held.
    pub(super) chunks: Vec<Option<wgpu::Buffer>>,
}

impl Blocks {
    pub(super) fn new(role: MemoryRole) -> Blocks {
        Blocks {
            role,
            allocation: Allocation::Default,
            chunks: Vec::new(),
        }
    }

    /// Bytes of the blocks held.
    pub(super) fn bytes(&self) -> u64 {
        self.chunks
            .iter()
            .flatten()
            .fold(0u64, |acc, b| acc.saturating_add(b.size()))
    }

    /// Forgets every block: destroys them under the default allocation; under user
    /// callbacks they are the callbacks' (their free-all is called by the caller).
    pub(super) fn forget(&mut self) {
        for block in self.chunks.drain(..).flatten() {
            if matches!(self.allocation, Allocation::Default) {
                block.destroy();
            }
        }
    }

    /// Makes chunk `c`'s block at least `size` bytes, keeping its first `used` bytes.
    pub(super) fn grow(
        &mut self,
        gpu: &GpuContext,
        chunk: usize,
        size: u64,
        used: u64,
        other: &Blocks,
    ) -> Result<(), RuntimeError> {
        if self.chunks.len() <= chunk {
            self.chunks.resize(chunk + 1, None);
        }
        if self.chunks[chunk]
            .as_ref()
            .is_some_and(|b| b.size() >= size)
        {
            return Ok(());
        }
        let old = self.chunks[chunk].take();
        // Nothing to keep without an old block (or past its end).
        let used = old.as_ref().map_or(0, |o| used.min(o.size()));
        let role = self.role;
        let block = match &self.allocation {
            Allocation::Default => default_realloc(gpu, old, used, size),
            Allocation::User { realloc, user, .. } => realloc(ReallocRequest {
                gpu,
                user: user.as_ref(),
                role,
                chunk,
                old,
                old_used: used,
                new_size: size,
                usage: STORAGE_USAGE,
            }),
        }
        .map_err(|source| RuntimeError::Callback {
            role,
            chunk,
            size,
            source,
        })?;
        if block.size() < size {
            let got = block.size();
            if matches!(self.allocation, Allocation::Default) {
                block.destroy();
            }
            return Err(RuntimeError::ShortBlock {
                role,
                chunk,
                requested: size,
                got,
            });
        }
        // A block held elsewhere would overlap live tensors (and bind one buffer as
        // two writable ranges). This chunk's own old block was taken out above.
        if let Some((held_role, held_chunk)) = self.holder_of(&block).or(other.holder_of(&block)) {
            return Err(RuntimeError::BlockAlreadyHeld {
                role,
                chunk,
                held_role,
                held_chunk,
            });
        }
        if !block.usage().contains(STORAGE_USAGE) {
            return Err(RuntimeError::MissingUsage {
                role,
                chunk,
                needed: format!("{STORAGE_USAGE:?}"),
                has: format!("{:?}", block.usage()),
            });
        }
        self.chunks[chunk] = Some(block);
        Ok(())
    }

    /// The role and chunk holding `block`, if one of these chunks does.
    pub(super) fn holder_of(&self, block: &wgpu::Buffer) -> Option<(MemoryRole, usize)> {
        self.chunks
            .iter()
            .position(|held| held.as_ref() == Some(block))
            .map(|chunk| (self.role, chunk))
    }

    /// The held blocks as planned memory that does not own them.
    pub(super) fn memory(&self) -> PlannedMemory {
        let row = self.chunks.iter().flatten().cloned().collect();
        PlannedMemory::with_ownership(vec![row], vec![false])
    }
}

/// The default `realloc`: a new wgpu buffer (out of memory is an error), the old
/// block's live bytes copied, the old block destroyed.
fn default_realloc(
    gpu: &GpuContext,
    old: Option<wgpu::Buffer>,
    used: u64,
    size: u64,
) -> Result<wgpu::Buffer, super::CallbackError> {
    use crate::device::BufferAllocator;
    let request = crate::device::ChunkRequest {
        buffer: crate::plan::BufferId(0),
        chunk: 0,
        size,
        usage: STORAGE_USAGE,
    };
    let block = WgpuAllocator
        .allocate(gpu, &request)
        .map_err(|e| super::CallbackError::new(e.to_string()))?;
    if let Some(old) = old {
        copy_prefix(gpu, &old, &block, used)?;
        old.destroy();
    }
    Ok(block)
}

/// Grows each chunk's block to what the layout needs, keeping what earlier phases
/// placed (`before`).
pub(super) fn grow(
    blocks: &mut Blocks,
    gpu: &GpuContext,
    layout: &Layout,
    before: &[u64],
    other: &Blocks,
) -> Result<(), RuntimeError> {
    for (chunk, &size) in layout.block_sizes().iter().enumerate() {
        let used = before.get(chunk).copied().unwrap_or(0);
        blocks.grow(gpu, chunk, size, used, other)?;
    }
    Ok(())
}
