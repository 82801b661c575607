//! The blocks of a graph context's workspace or outputs: one region per planned chunk,
//! grown through one storage's `realloc` (the default `WgpuStorage`, or the user's
//! callbacks adapted onto the storage trait) with live bytes kept.
//!
//! The growth rules live in [`grow_chunk`], generic over the memory a region lies in,
//! so they are tested on host memory ([`crate::storage::HostStorage`]) as well as on a
//! device.

use super::callbacks::BlockSource;
use super::layout::Layout;
use super::{CallbackError, MemoryRole, RuntimeError};
use crate::device::{GpuContext, PlannedMemory, SharedStorage, STORAGE_USAGE};
use crate::plan::BufferId;
use crate::storage::{Memory, Region, RegionRequest, Storage, StorageError};

/// The blocks of one kind of memory, and where they come from.
pub(super) struct Blocks {
    pub(super) role: MemoryRole,
    allocation: BlockSource,
    /// One region per chunk; `None` where none is held.
    pub(super) chunks: Vec<Option<Region>>,
    /// The storage of the current setting ([`BlockSource::storage`]), made on the first
    /// growth: every block comes from it and goes back to it.
    storage: Option<SharedStorage>,
}

impl Blocks {
    pub(super) fn new(role: MemoryRole) -> Blocks {
        Blocks {
            role,
            allocation: BlockSource::Default,
            chunks: Vec::new(),
            storage: None,
        }
    }

    /// Where the blocks come from.
    pub(super) fn allocation(&self) -> &BlockSource {
        &self.allocation
    }

    /// A new setting (the caller has forgotten the old setting's blocks).
    pub(super) fn set_allocation(&mut self, allocation: BlockSource) {
        self.allocation = allocation;
        self.storage = None;
    }

    /// Bytes of the blocks held.
    pub(super) fn bytes(&self) -> u64 {
        held_bytes(&self.chunks)
    }

    /// Forgets every block, each given back to the storage it came from: the default
    /// storage frees it; the callbacks' storage takes nothing back (their free-all,
    /// called by the caller, does).
    pub(super) fn forget(&mut self) {
        let blocks: Vec<Region> = self.chunks.drain(..).flatten().collect();
        if let Some(storage) = &self.storage {
            for block in blocks {
                if let Err(e) = storage.free(block) {
                    log::warn!("a context's storage refused its own block: {e}");
                }
            }
        }
    }

    /// Makes chunk `c`'s block at least `size` bytes, keeping its first `used` bytes,
    /// through the storage's `realloc` (one way for the default and for callbacks).
    pub(super) fn grow(
        &mut self,
        gpu: &GpuContext,
        chunk: usize,
        size: u64,
        used: u64,
        other: &Blocks,
    ) -> Result<(), RuntimeError> {
        let role = self.role;
        let storage = self
            .storage
            .get_or_insert_with(|| self.allocation.storage(gpu, role))
            .clone();
        let request = RegionRequest::new(size)
            .usage(STORAGE_USAGE)
            .for_chunk(BufferId(0), chunk);
        let realloc = |old: Option<Region>, used: u64| {
            storage
                .realloc(old, used, &request)
                .map_err(|(e, _old)| match e {
                    StorageError::Refused { message } => CallbackError::new(message),
                    other => CallbackError::new(other.to_string()),
                })
        };
        let discard = |region: Region| {
            let _ = storage.free(region);
        };
        grow_chunk(
            &mut self.chunks,
            Grow {
                role,
                chunk,
                size,
                used,
                usage: STORAGE_USAGE,
            },
            &other.chunks,
            other.role,
            realloc,
            discard,
        )
    }

    /// The held blocks as planned memory that does not own them.
    pub(super) fn memory(&self) -> PlannedMemory {
        let row = self.chunks.iter().flatten().cloned().collect();
        PlannedMemory::from_regions(vec![row])
    }
}

/// Bytes of the regions held.
fn held_bytes<M>(chunks: &[Option<Region<M>>]) -> u64 {
    chunks
        .iter()
        .flatten()
        .fold(0u64, |acc, b| acc.saturating_add(b.size))
}

/// One growth: chunk `chunk` of `role`'s memory to at least `size` bytes keeping its
/// first `used`, in a block with `usage`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grow {
    pub(super) role: MemoryRole,
    pub(super) chunk: usize,
    pub(super) size: u64,
    pub(super) used: u64,
    pub(super) usage: wgpu::BufferUsages,
}

/// The growth rule of a context's blocks, on any memory: nothing happens while the
/// chunk's block is large enough; otherwise `realloc` gets the old block (taken out of
/// the chunk) and the bytes to keep, and the block it returns must be large enough,
/// have the usage, and be held by no other chunk of either memory (it would overlap
/// live tensors). A refused block is handed to `discard` (which frees it when the
/// context owns it) and the chunk is left empty.
pub(super) fn grow_chunk<M: Memory>(
    chunks: &mut Vec<Option<Region<M>>>,
    grow: Grow,
    other: &[Option<Region<M>>],
    other_role: MemoryRole,
    realloc: impl FnOnce(Option<Region<M>>, u64) -> Result<Region<M>, CallbackError>,
    discard: impl FnOnce(Region<M>),
) -> Result<(), RuntimeError> {
    let Grow {
        role,
        chunk,
        size,
        used,
        usage,
    } = grow;
    if chunks.len() <= chunk {
        chunks.resize(chunk + 1, None);
    }
    if chunks[chunk].as_ref().is_some_and(|b| b.size >= size) {
        return Ok(());
    }
    let old = chunks[chunk].take();
    // Nothing to keep without an old block (or past its end).
    let used = old.as_ref().map_or(0, |o| used.min(o.size));
    let block = realloc(old, used).map_err(|source| RuntimeError::Callback {
        role,
        chunk,
        size,
        source,
    })?;
    if block.size < size || !block.is_inside_buffer() {
        let got = block.size;
        discard(block);
        return Err(RuntimeError::ShortBlock {
            role,
            chunk,
            requested: size,
            got,
        });
    }
    // A block held elsewhere would overlap live tensors (and bind one buffer range
    // as two writable ones). This chunk's own old block was taken out above.
    let holder = |held: &[Option<Region<M>>], held_role: MemoryRole| {
        held.iter()
            .position(|h| h.as_ref().is_some_and(|h| h.overlaps(&block)))
            .map(|c| (held_role, c))
    };
    if let Some((held_role, held_chunk)) = holder(chunks, role).or(holder(other, other_role)) {
        return Err(RuntimeError::BlockAlreadyHeld {
            role,
            chunk,
            held_role,
            held_chunk,
        });
    }
    if !block.buffer.usage().contains(usage) {
        let has = format!("{:?}", block.buffer.usage());
        discard(block);
        return Err(RuntimeError::MissingUsage {
            role,
            chunk,
            needed: format!("{usage:?}"),
            has,
        });
    }
    chunks[chunk] = Some(block);
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::BlockPool;
    use crate::storage::{CountingStorage, HostMemory, HostStorage};
    use std::sync::Arc;

    type Pool = Arc<BlockPool<CountingStorage<HostStorage>>>;

    fn pool() -> Pool {
        BlockPool::new(CountingStorage::new(HostStorage::unlimited()))
    }

    fn grow_to(
        pool: &Pool,
        chunks: &mut Vec<Option<Region<HostMemory>>>,
        chunk: usize,
        size: u64,
        used: u64,
    ) -> Result<(), RuntimeError> {
        let grow = Grow {
            role: MemoryRole::Workspace,
            chunk,
            size,
            used,
            usage: STORAGE_USAGE,
        };
        grow_chunk(
            chunks,
            grow,
            &[],
            MemoryRole::Output,
            |old, used| pool.realloc_block(old, used, size, STORAGE_USAGE),
            |_| {},
        )
    }

    #[test]
    fn blocks_grow_only_when_too_small_and_keep_their_live_prefix() {
        let pool = pool();
        let mut chunks = Vec::new();
        grow_to(&pool, &mut chunks, 0, 16, 0).expect("first block");
        let first = chunks[0].clone().expect("held");
        let host = pool.storage().inner();
        host.write(&first, &[1, 2, 3, 4, 5, 6, 7, 8])
            .expect("write");
        grow_to(&pool, &mut chunks, 0, 8, 8).expect("large enough");
        assert_eq!(
            pool.stats().reallocs,
            1,
            "no realloc while the block is large enough"
        );
        grow_to(&pool, &mut chunks, 0, 64, 6).expect("grown");
        let grown = chunks[0].clone().expect("held");
        assert!(grown.size >= 64);
        // 6 live bytes move as two whole words.
        assert_eq!(
            &host.read(&grown).expect("read")[..8],
            &[1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert!(host.read(&first).is_err(), "the old block was freed");
        grow_to(&pool, &mut chunks, 2, 4, 0).expect("a later chunk");
        assert_eq!(chunks.len(), 3);
        assert!(chunks[1].is_none());
        assert_eq!(pool.outstanding(), 2);
        pool.free_all();
        let report = pool.storage().report();
        assert_eq!((report.live_regions, report.bad_frees), (0, 0));
        assert_eq!(pool.stats().free_alls, 1);
    }

    #[test]
    fn a_failed_realloc_is_a_callback_error_and_leaks_nothing() {
        let pool = pool();
        let mut chunks = Vec::new();
        grow_to(&pool, &mut chunks, 0, 16, 0).expect("first block");
        pool.storage().inner().refuse_after(0);
        let error = grow_to(&pool, &mut chunks, 0, 64, 16).expect_err("refused");
        assert!(matches!(
            error,
            RuntimeError::Callback {
                chunk: 0,
                size: 64,
                ..
            }
        ));
        pool.free_all();
        assert_eq!(pool.storage().report().live_regions, 0);
    }

    #[test]
    fn short_shared_or_unusable_blocks_are_refused() {
        let host = HostStorage::unlimited();
        let mut chunks: Vec<Option<Region<HostMemory>>> = Vec::new();
        let grow = |size| Grow {
            role: MemoryRole::Output,
            chunk: 0,
            size,
            used: 0,
            usage: STORAGE_USAGE,
        };
        let small = host.allocate(&RegionRequest::new(8)).expect("small");
        let mut discarded = 0;
        let error = grow_chunk(
            &mut chunks,
            grow(32),
            &[],
            MemoryRole::Workspace,
            |_, _| Ok(small.clone()),
            |_| discarded += 1,
        )
        .expect_err("short");
        assert!(matches!(
            error,
            RuntimeError::ShortBlock {
                requested: 32,
                got: 8,
                ..
            }
        ));
        assert_eq!(discarded, 1);

        let held = host.allocate(&RegionRequest::new(64)).expect("held");
        let other = vec![Some(held.clone())];
        let overlapping = held.sub(32, 32).expect("part");
        let error = grow_chunk(
            &mut chunks,
            grow(32),
            &other,
            MemoryRole::Workspace,
            |_, _| Ok(overlapping),
            |_| {},
        )
        .expect_err("overlaps the other memory's block");
        assert!(matches!(
            error,
            RuntimeError::BlockAlreadyHeld {
                held_role: MemoryRole::Workspace,
                held_chunk: 0,
                ..
            }
        ));

        let unusable = host
            .allocate(&RegionRequest::new(32).usage(wgpu::BufferUsages::MAP_READ))
            .expect("map-read block");
        let error = grow_chunk(
            &mut chunks,
            grow(32),
            &[],
            MemoryRole::Workspace,
            |_, _| Ok(unusable),
            |_| {},
        )
        .expect_err("no storage usage");
        assert!(matches!(error, RuntimeError::MissingUsage { .. }));
        assert!(chunks[0].is_none(), "nothing refused is held");
    }

    #[test]
    fn a_pool_counts_releases_it_never_handed_out() {
        let pool = pool();
        let foreign = HostStorage::unlimited()
            .allocate(&RegionRequest::new(8))
            .expect("foreign");
        let block = pool
            .realloc_block(Some(foreign.clone()), 0, 16, STORAGE_USAGE)
            .expect("new block, the foreign one not taken");
        // Keeping bytes of a block the storage does not hold is refused, and the new
        // block goes back.
        assert!(pool
            .realloc_block(Some(foreign), 8, 16, STORAGE_USAGE)
            .is_err());
        assert_eq!(pool.outstanding(), 1);
        assert_eq!(pool.stats().unknown_releases, 1);
        assert!(block.size >= 16);
        pool.free_all();
        assert_eq!(pool.storage().report().live_regions, 0);
    }
}
