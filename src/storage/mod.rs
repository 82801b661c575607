//! One memory model: every piece of memory wgalloc hands out is a [`Region`] of a block
//! ([`Memory`]), and every source of memory is a [`Storage`]: allocate a region of a
//! size, alignment and usage; free it; copy bytes between two regions.
//!
//! Implementations:
//! * [`crate::device::WgpuStorage`]: one `wgpu::Buffer` per region, created inside
//!   error scopes (running out of memory is an error value).
//! * [`PagedStorage`]: sub-ranges of larger pages taken from any other storage (a pool
//!   of big buffers on a device, or of host blocks in tests).
//! * [`HostStorage`]: host memory with an optional capacity, which checks every free
//!   and counts what is live, so the lifecycle rules of the runtime (graph contexts'
//!   realloc growth, streams' deferred frees, the weight cache's ownership) are tested
//!   without a GPU.
//! * [`CountingStorage`]: wraps any storage and counts allocations, frees and live
//!   bytes, to prove that nothing leaks.
//!
//! The allocation shapes of the seeds are adapters onto this trait:
//! [`crate::device::BufferAllocator`] (whole buffers, ggml's buffer types) through
//! [`crate::device::BufferStorage`]; BNNS-style `realloc`/`free_all` callbacks, whose
//! `realloc` a graph context reaches through [`Storage::realloc`] as it reaches the
//! default storage's ([`crate::runtime::BlockPool`] makes such a pair of any storage);
//! ACL-style allocators
//! registered per stream ([`crate::stream::Stream::register_storage`]); and the weight
//! cache's allocator ([`crate::prepack::PrepackedWeightCache::new`] over a `CacheStorage`).

mod counting;
mod error;
mod host;
mod owned;
mod paged;
mod region;

pub use counting::{CountingStorage, StorageReport};
pub use error::StorageError;
pub use host::{HostMemory, HostStorage};
pub use owned::{free_last_first, OwnedRegion};
pub use paged::PagedStorage;
pub use region::{Memory, Region};

use crate::plan::BufferId;

/// Usage of storage buffers: bindable read-write by kernels and copyable both ways.
pub const STORAGE_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// What a caller asks a [`Storage`] for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionRequest {
    /// Bytes needed (more may be given).
    pub size: u64,
    /// The region's offset in its block must be a multiple of this (a power of two).
    pub alignment: u64,
    /// What the region's block must allow.
    pub usage: wgpu::BufferUsages,
    /// A name for debuggers (wgpu labels).
    pub label: String,
    /// The planned chunk the region is for (the plan's buffer and the chunk in it),
    /// when it is for one; allocators that follow ggml's or ACL's shapes are told.
    pub for_chunk: Option<(BufferId, usize)>,
}

impl RegionRequest {
    /// `size` bytes, aligned to 4, with wgalloc's storage usage and no label.
    pub fn new(size: u64) -> RegionRequest {
        RegionRequest {
            size,
            alignment: wgpu::COPY_BUFFER_ALIGNMENT,
            usage: STORAGE_USAGE,
            label: String::new(),
            for_chunk: None,
        }
    }

    /// The same request, for chunk `chunk` of the plan's buffer `buffer`.
    pub fn for_chunk(mut self, buffer: BufferId, chunk: usize) -> RegionRequest {
        self.for_chunk = Some((buffer, chunk));
        self
    }

    /// The same request with another offset alignment.
    pub fn alignment(mut self, alignment: u64) -> RegionRequest {
        self.alignment = alignment;
        self
    }

    /// The same request with another usage.
    pub fn usage(mut self, usage: wgpu::BufferUsages) -> RegionRequest {
        self.usage = usage;
        self
    }

    /// The same request with a label.
    pub fn label(mut self, label: impl Into<String>) -> RegionRequest {
        self.label = label.into();
        self
    }

    /// Checks what every storage requires of a request: a power-of-two alignment and
    /// a size that rounds up to whole 4-byte words without overflow. Returns that
    /// rounded size.
    ///
    /// # Errors
    /// [`StorageError::BadAlignment`]; [`StorageError::TooLarge`] on overflow.
    pub fn checked_size(&self) -> Result<u64, StorageError> {
        if !self.alignment.is_power_of_two() {
            return Err(StorageError::BadAlignment {
                alignment: self.alignment,
            });
        }
        self.size
            .max(1)
            .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            .ok_or(StorageError::TooLarge {
                size: self.size,
                max: u64::MAX - 3,
            })
    }
}

/// A source of memory: hands out [`Region`]s and takes them back.
///
/// The contract, which every implementation keeps and every caller relies on:
/// * a region from `allocate` is at least `request.size` bytes, starts at a multiple
///   of `request.alignment`, lies inside its block, whose usage contains
///   `request.usage`, and overlaps no other live region of this storage;
/// * `free` takes back a region `allocate` gave, exactly once; a region it never gave
///   or already took back is [`StorageError::UnknownRegion`] and changes nothing;
/// * a failed `allocate` leaves nothing allocated.
pub trait Storage: Send + Sync {
    /// The blocks regions lie in.
    type Memory: Memory;

    /// A region for `request`.
    ///
    /// # Errors
    /// [`StorageError::OutOfMemory`] when it does not fit now;
    /// [`StorageError::TooLarge`] when it never fits; [`StorageError::BadAlignment`];
    /// [`StorageError::Backend`] or [`StorageError::Refused`] from what lies underneath.
    fn allocate(&self, request: &RegionRequest) -> Result<Region<Self::Memory>, StorageError>;

    /// Takes back a region `allocate` gave.
    ///
    /// # Errors
    /// [`StorageError::UnknownRegion`] for a region this storage does not hold.
    fn free(&self, region: Region<Self::Memory>) -> Result<(), StorageError>;

    /// Copies the first `bytes` bytes of `from` to the start of `to` (a multiple of 4
    /// bytes, at most either region's size).
    ///
    /// # Errors
    /// [`StorageError::BadCopy`] when `bytes` does not fit in either region or is not a
    /// multiple of 4; [`StorageError::Backend`] when the device refuses the copy.
    fn copy(
        &self,
        from: &Region<Self::Memory>,
        to: &Region<Self::Memory>,
        bytes: u64,
    ) -> Result<(), StorageError>;

    /// C's `realloc`: a region for `request` holding the first `keep` bytes of `old`
    /// (`None`: a plain allocation), `old` given back unless it is the region returned.
    /// The default is [`realloc_region`] (allocate, copy, free); an adapter of a
    /// `realloc` callback passes `old` to the callback, which may grow it in place.
    ///
    /// # Errors
    /// As [`realloc_region`]: the error, with `old` still allocated beside it.
    #[allow(clippy::type_complexity)]
    fn realloc(
        &self,
        old: Option<Region<Self::Memory>>,
        keep: u64,
        request: &RegionRequest,
    ) -> Result<Region<Self::Memory>, (StorageError, Option<Region<Self::Memory>>)> {
        realloc_region(self, old, keep, request)
    }
}

impl<S: Storage + ?Sized> Storage for std::sync::Arc<S> {
    type Memory = S::Memory;

    fn allocate(&self, request: &RegionRequest) -> Result<Region<Self::Memory>, StorageError> {
        (**self).allocate(request)
    }

    fn free(&self, region: Region<Self::Memory>) -> Result<(), StorageError> {
        (**self).free(region)
    }

    fn copy(
        &self,
        from: &Region<Self::Memory>,
        to: &Region<Self::Memory>,
        bytes: u64,
    ) -> Result<(), StorageError> {
        (**self).copy(from, to, bytes)
    }

    fn realloc(
        &self,
        old: Option<Region<Self::Memory>>,
        keep: u64,
        request: &RegionRequest,
    ) -> Result<Region<Self::Memory>, (StorageError, Option<Region<Self::Memory>>)> {
        (**self).realloc(old, keep, request)
    }
}

/// Checks a copy of `bytes` from `from` to `to` against [`Storage::copy`]'s contract.
///
/// # Errors
/// [`StorageError::BadCopy`].
pub fn check_copy<M>(from: &Region<M>, to: &Region<M>, bytes: u64) -> Result<(), StorageError> {
    if !bytes.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) || bytes > from.size || bytes > to.size {
        return Err(StorageError::BadCopy {
            bytes,
            from: from.size,
            to: to.size,
        });
    }
    Ok(())
}

/// Bytes of the first `keep` bytes of a region of `old_size` bytes that a copy moves:
/// whole 4-byte words (copies move words), rounded up, but no more than the region's
/// whole words.
pub fn prefix_words(keep: u64, old_size: u64) -> u64 {
    keep.min(old_size)
        .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        .unwrap_or(u64::MAX)
        .min(old_size - old_size % wgpu::COPY_BUFFER_ALIGNMENT)
}

/// C's `realloc` on any storage: `old` itself when it is already large enough, aligned
/// and of the usage asked for; otherwise [`move_region`] with `old` freed to `storage`.
/// With no `old` it is a plain allocation.
///
/// On error `old` is returned beside it, untouched and still allocated, and nothing
/// new stays allocated.
///
/// # Errors
/// The storage's error from `allocate`, `copy` or `free`, with `old`.
#[allow(clippy::type_complexity)]
pub fn realloc_region<S: Storage + ?Sized>(
    storage: &S,
    old: Option<Region<S::Memory>>,
    keep: u64,
    request: &RegionRequest,
) -> Result<Region<S::Memory>, (StorageError, Option<Region<S::Memory>>)> {
    if let Some(old) = &old {
        let fits = old.size >= request.size
            && old.offset.is_multiple_of(request.alignment.max(1))
            && old.buffer.usage().contains(request.usage);
        if fits {
            return Ok(old.clone());
        }
    }
    move_region(storage, old, keep, request, |old| storage.free(old))
}

/// The moving half of a `realloc`, the one copy of it (the default allocation of a
/// graph context and a [`crate::runtime::BlockPool`] both use it): a new region for
/// `request` from `storage`, the first `keep` bytes of `old` copied into it (whole
/// words, at most either region's whole words, at their offsets), then `old` handed
/// to `free_old` (which frees it, or counts a block its owner never handed out).
///
/// On error `old` comes back beside it, still allocated, and the new region has gone
/// back to `storage`: a failed copy or a refused free leaks nothing.
///
/// # Errors
/// The storage's error from `allocate` or `copy`, or `free_old`'s.
#[allow(clippy::type_complexity)]
pub fn move_region<S: Storage + ?Sized>(
    storage: &S,
    old: Option<Region<S::Memory>>,
    keep: u64,
    request: &RegionRequest,
    free_old: impl FnOnce(Region<S::Memory>) -> Result<(), StorageError>,
) -> Result<Region<S::Memory>, (StorageError, Option<Region<S::Memory>>)> {
    let new = storage.allocate(request).map_err(|e| (e, old.clone()))?;
    let Some(old) = old else {
        return Ok(new);
    };
    // A failure to give the new region back would be a bug of the storage, reported by
    // its own accounting; the caller's error is the first one.
    let bytes = prefix_words(keep, old.size).min(new.size - new.size % wgpu::COPY_BUFFER_ALIGNMENT);
    if bytes > 0 {
        if let Err(e) = storage.copy(&old, &new, bytes) {
            let _ = storage.free(new);
            return Err((e, Some(old)));
        }
    }
    if let Err(e) = free_old(old.clone()) {
        let _ = storage.free(new);
        return Err((e, Some(old)));
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_check_alignment_and_round_to_words() {
        assert_eq!(RegionRequest::new(5).checked_size(), Ok(8));
        assert_eq!(RegionRequest::new(0).checked_size(), Ok(4));
        assert_eq!(
            RegionRequest::new(4).alignment(12).checked_size(),
            Err(StorageError::BadAlignment { alignment: 12 })
        );
        assert!(matches!(
            RegionRequest::new(u64::MAX).checked_size(),
            Err(StorageError::TooLarge { .. })
        ));
    }

    #[test]
    fn realloc_keeps_the_live_prefix_and_frees_the_old_region() {
        let host = HostStorage::unlimited();
        let old = host.allocate(&RegionRequest::new(8)).expect("old");
        host.write(&old, &[1, 2, 3, 4, 5, 6, 7, 8]).expect("write");
        let new =
            realloc_region(&host, Some(old.clone()), 6, &RegionRequest::new(32)).expect("grown");
        assert!(new.size >= 32);
        assert_eq!(
            &host.read(&new).expect("read")[..8],
            &[1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(
            host.free(old),
            Err(StorageError::UnknownRegion { offset: 0, size: 8 })
        );
        assert_eq!(host.report().live_regions, 1);
    }

    #[test]
    fn realloc_returns_a_large_enough_old_region_itself() {
        let host = HostStorage::unlimited();
        let old = host.allocate(&RegionRequest::new(64)).expect("old");
        let same =
            realloc_region(&host, Some(old.clone()), 64, &RegionRequest::new(16)).expect("same");
        assert_eq!(same, old);
        assert_eq!(host.report().allocations, 1);
    }

    #[test]
    fn a_refused_free_of_the_old_region_gives_the_new_one_back() {
        let host = HostStorage::unlimited();
        let foreign = HostStorage::unlimited()
            .allocate(&RegionRequest::new(8))
            .expect("a region of another storage");
        let (error, back) =
            realloc_region(&host, Some(foreign.clone()), 0, &RegionRequest::new(32))
                .expect_err("the old region is not this storage's");
        assert!(
            matches!(error, StorageError::UnknownRegion { .. }),
            "{error}"
        );
        assert_eq!(back, Some(foreign));
        let report = host.report();
        assert_eq!(
            (report.allocations, report.live_regions),
            (1, 0),
            "{report:?}"
        );
    }

    #[test]
    fn a_failed_realloc_gives_the_old_region_back_untouched() {
        let host = HostStorage::with_capacity(80);
        let old = host.allocate(&RegionRequest::new(32)).expect("old");
        host.write(&old, &[9; 32]).expect("write");
        let (error, back) = realloc_region(&host, Some(old.clone()), 32, &RegionRequest::new(64))
            .expect_err("over capacity");
        assert!(matches!(error, StorageError::OutOfMemory { .. }));
        assert_eq!(back, Some(old.clone()));
        assert_eq!(host.read(&old).expect("still live"), vec![9; 32]);
        assert_eq!(host.report().live_regions, 1);
    }
}
