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
use crate::storage::{free_last_first, Memory, OwnedRegion, RegionRequest, Storage, StorageError};
use std::sync::Arc;

/// The blocks of one kind of memory, and where they come from.
pub(super) struct Blocks {
    pub(super) role: MemoryRole,
    allocation: BlockSource,
    /// One held region per chunk (it goes back to its storage when dropped); `None`
    /// where none is held.
    pub(super) chunks: Vec<Option<OwnedRegion>>,
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

    /// Forgets every block, last first, each given back to the storage it came from:
    /// the default storage frees it; the callbacks' storage takes nothing back (their
    /// free-all, called by the caller, does).
    pub(super) fn forget(&mut self) {
        free_last_first(self.chunks.drain(..).flatten().collect());
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
        let grow = Grow {
            role,
            chunk,
            size,
            used,
            usage: STORAGE_USAGE,
        };
        grow_chunk(&mut self.chunks, grow, &other.chunks, other.role, &storage)
    }

    /// The held blocks as planned memory that does not own them.
    pub(super) fn memory(&self) -> PlannedMemory {
        let row = self
            .chunks
            .iter()
            .flatten()
            .map(|b| b.region().clone())
            .collect();
        PlannedMemory::from_regions(vec![row])
    }
}

/// Bytes of the regions held.
fn held_bytes<M: Memory>(chunks: &[Option<OwnedRegion<M>>]) -> u64 {
    chunks
        .iter()
        .flatten()
        .fold(0u64, |acc, b| acc.saturating_add(b.region().size))
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
/// chunk's block is large enough; otherwise `storage.realloc` gets the old block (taken
/// out of the chunk) and the bytes to keep. A refused realloc leaves the old block in
/// the chunk (C's `realloc` keeps it). The block it returns must be large enough, have
/// the usage, and be held by no other chunk of either memory (it would overlap live
/// tensors); a refused block goes back to the storage and the chunk is left empty.
pub(super) fn grow_chunk<M: Memory>(
    chunks: &mut Vec<Option<OwnedRegion<M>>>,
    grow: Grow,
    other: &[Option<OwnedRegion<M>>],
    other_role: MemoryRole,
    storage: &Arc<dyn Storage<Memory = M>>,
) -> Result<(), RuntimeError> {
    let Grow {
        role,
        chunk,
        size,
        used,
        usage,
    } = grow;
    if chunks.len() <= chunk {
        chunks.resize_with(chunk + 1, || None);
    }
    if chunks[chunk]
        .as_ref()
        .is_some_and(|b| b.region().size >= size)
    {
        return Ok(());
    }
    let old = chunks[chunk].take().map(OwnedRegion::into_region);
    // Nothing to keep without an old block (or past its end).
    let used = old.as_ref().map_or(0, |o| used.min(o.size));
    let request = RegionRequest::new(size)
        .usage(usage)
        .for_chunk(BufferId(0), chunk);
    let block = match storage.realloc(old, used, &request) {
        Ok(block) => OwnedRegion::new(storage.clone(), block),
        Err((e, old)) => {
            chunks[chunk] = old.map(|old| OwnedRegion::new(storage.clone(), old));
            let message = match e {
                StorageError::Refused { message } => message,
                other => other.to_string(),
            };
            return Err(RuntimeError::Callback {
                role,
                chunk,
                size,
                source: CallbackError::new(message),
            });
        }
    };
    let got = block.region();
    if got.size < size || !got.is_inside_buffer() {
        return Err(RuntimeError::ShortBlock {
            role,
            chunk,
            requested: size,
            got: got.size,
        });
    }
    // A block held elsewhere would overlap live tensors (and bind one buffer range
    // as two writable ones). This chunk's own old block was taken out above.
    let holder = |held: &[Option<OwnedRegion<M>>], held_role: MemoryRole| {
        held.iter()
            .position(|h| h.as_ref().is_some_and(|h| h.region().overlaps(got)))
            .map(|c| (held_role, c))
    };
    if let Some((held_role, held_chunk)) = holder(chunks, role).or(holder(other, other_role)) {
        // Not ours to give back: it is a live block of another chunk.
        let _ = block.into_region();
        return Err(RuntimeError::BlockAlreadyHeld {
            role,
            chunk,
            held_role,
            held_chunk,
        });
    }
    if !got.buffer.usage().contains(usage) {
        return Err(RuntimeError::MissingUsage {
            role,
            chunk,
            needed: format!("{usage:?}"),
            has: format!("{:?}", got.buffer.usage()),
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
    use crate::storage::{CountingStorage, HostMemory, HostStorage, Region};

    type Counted = Arc<CountingStorage<HostStorage>>;

    fn counted() -> Counted {
        Arc::new(CountingStorage::new(HostStorage::unlimited()))
    }

    fn grow(size: u64, used: u64, chunk: usize) -> Grow {
        Grow {
            role: MemoryRole::Workspace,
            chunk,
            size,
            used,
            usage: STORAGE_USAGE,
        }
    }

    fn grow_to(
        storage: &Counted,
        chunks: &mut Vec<Option<OwnedRegion<HostMemory>>>,
        chunk: usize,
        size: u64,
        used: u64,
    ) -> Result<(), RuntimeError> {
        let shared: Arc<dyn Storage<Memory = HostMemory>> = storage.clone();
        grow_chunk(
            chunks,
            grow(size, used, chunk),
            &[],
            MemoryRole::Output,
            &shared,
        )
    }

    fn held(chunks: &[Option<OwnedRegion<HostMemory>>], chunk: usize) -> Region<HostMemory> {
        chunks[chunk].as_ref().expect("held").region().clone()
    }

    #[test]
    fn blocks_grow_only_when_too_small_and_keep_their_live_prefix() {
        let storage = counted();
        let mut chunks = Vec::new();
        grow_to(&storage, &mut chunks, 0, 16, 0).expect("first block");
        let first = held(&chunks, 0);
        let host = storage.inner();
        host.write(&first, &[1, 2, 3, 4, 5, 6, 7, 8])
            .expect("write");
        grow_to(&storage, &mut chunks, 0, 8, 8).expect("large enough");
        assert_eq!(
            storage.report().allocations,
            1,
            "no realloc while the block is large enough"
        );
        grow_to(&storage, &mut chunks, 0, 64, 6).expect("grown");
        let grown = held(&chunks, 0);
        assert!(grown.size >= 64);
        // 6 live bytes move as two whole words.
        assert_eq!(
            &host.read(&grown).expect("read")[..8],
            &[1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert!(host.read(&first).is_err(), "the old block was freed");
        grow_to(&storage, &mut chunks, 2, 4, 0).expect("a later chunk");
        assert_eq!(chunks.len(), 3);
        assert!(chunks[1].is_none());
        assert_eq!(storage.report().live_regions, 2);
        free_last_first(chunks.into_iter().flatten().collect());
        let report = storage.report();
        assert_eq!((report.live_regions, report.bad_frees), (0, 0));
        assert!(report.balanced());
    }

    #[test]
    fn a_refused_realloc_is_a_callback_error_keeps_the_old_block_and_leaks_nothing() {
        let storage = counted();
        let mut chunks = Vec::new();
        grow_to(&storage, &mut chunks, 0, 16, 0).expect("first block");
        let first = held(&chunks, 0);
        storage.inner().refuse_after(0);
        let error = grow_to(&storage, &mut chunks, 0, 64, 16).expect_err("refused");
        assert!(matches!(
            error,
            RuntimeError::Callback {
                chunk: 0,
                size: 64,
                ..
            }
        ));
        assert_eq!(
            held(&chunks, 0),
            first,
            "the old block is still the chunk's"
        );
        drop(chunks);
        assert!(storage.report().balanced());
    }

    /// A storage whose realloc returns one fixed region (a misbehaving callback).
    struct Returns {
        host: Counted,
        block: Region<HostMemory>,
    }

    impl Storage for Returns {
        type Memory = HostMemory;

        fn allocate(&self, _: &RegionRequest) -> Result<Region<HostMemory>, StorageError> {
            Ok(self.block.clone())
        }

        fn free(&self, region: Region<HostMemory>) -> Result<(), StorageError> {
            self.host.free(region)
        }

        fn copy(
            &self,
            from: &Region<HostMemory>,
            to: &Region<HostMemory>,
            bytes: u64,
        ) -> Result<(), StorageError> {
            self.host.copy(from, to, bytes)
        }
    }

    fn returning(
        host: &Counted,
        block: Region<HostMemory>,
    ) -> Arc<dyn Storage<Memory = HostMemory>> {
        Arc::new(Returns {
            host: host.clone(),
            block,
        })
    }

    #[test]
    fn short_shared_or_unusable_blocks_are_refused() {
        let host = counted();
        let mut chunks: Vec<Option<OwnedRegion<HostMemory>>> = Vec::new();
        let small = host.allocate(&RegionRequest::new(8)).expect("small");
        let error = grow_chunk(
            &mut chunks,
            grow(32, 0, 0),
            &[],
            MemoryRole::Workspace,
            &returning(&host, small),
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
        assert_eq!(host.report().frees, 1, "the short block went back");

        let big = host.allocate(&RegionRequest::new(64)).expect("held");
        let other = vec![Some(OwnedRegion::new(
            returning(&host, big.clone()),
            big.clone(),
        ))];
        let overlapping = big.sub(32, 32).expect("part");
        let error = grow_chunk(
            &mut chunks,
            grow(32, 0, 0),
            &other,
            MemoryRole::Workspace,
            &returning(&host, overlapping),
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
        assert_eq!(
            host.report().bad_frees,
            0,
            "another chunk's block is not freed"
        );

        let unusable = host
            .allocate(&RegionRequest::new(32).usage(wgpu::BufferUsages::MAP_READ))
            .expect("map-read block");
        let error = grow_chunk(
            &mut chunks,
            grow(32, 0, 0),
            &[],
            MemoryRole::Workspace,
            &returning(&host, unusable),
        )
        .expect_err("no storage usage");
        assert!(matches!(error, RuntimeError::MissingUsage { .. }));
        assert!(chunks[0].is_none(), "nothing refused is held");
        drop(other);
        assert!(host.report().balanced(), "{:?}", host.report());
    }

    #[test]
    fn a_pool_counts_releases_it_never_handed_out() {
        let pool = BlockPool::new(CountingStorage::new(HostStorage::unlimited()));
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
        assert_eq!(pool.calls().unknown_releases, 1);
        assert!(block.size >= 16);
        pool.free_all();
        assert_eq!(pool.storage().report().live_regions, 0);
    }
}
