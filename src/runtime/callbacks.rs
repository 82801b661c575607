//! BlockSource callbacks of a graph context: a `realloc` and a `free_all` with a user
//! context, for the workspace and for the outputs ([`BlockSource`]), and
//! [`BlockPool`], which turns any [`Storage`](crate::storage::Storage) into such a pair.
//!
//! Ownership follows C's `realloc`: every block `realloc` returns is the callback's
//! until its `free_all`; the context only borrows it. `realloc` takes the old block
//! (`None` the first time) and returns one of at least `new_size` bytes whose first
//! `old_used` bytes equal the old block's: **the callback copies** (see
//! [`copy_prefix`]); it may return the old block itself when it is large enough.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{CallbackError, MemoryRole, RuntimeError};
use crate::device::{copy_region, storage_copy, GpuContext, SharedStorage, WgpuStorage};
use crate::storage::Region;
use crate::storage::{check_copy, move_region, prefix_words, RegionRequest, Storage, StorageError};

/// The user context passed unchanged to every call of a callback pair. Two settings
/// share one when their `Arc`s point to the same value ([`Arc::ptr_eq`]).
pub type UserContext = Arc<dyn Any + Send + Sync>;

/// One call of a `realloc` callback.
pub struct ReallocRequest<'a> {
    /// The device to allocate on.
    pub gpu: &'a GpuContext,
    /// The user context given with the callbacks.
    pub user: Option<&'a UserContext>,
    /// Which memory the block is for.
    pub role: MemoryRole,
    /// Which chunk of that memory (a kernel binds at most one chunk per tensor).
    pub chunk: usize,
    /// The block being replaced (`None` the first time, and after a release).
    pub old: Option<Region>,
    /// Leading bytes of `old` the new block must hold too (0 when nothing is live).
    pub old_used: u64,
    /// Bytes the new block must have at least (a multiple of 4).
    pub new_size: u64,
    /// The usage the new block must have.
    pub usage: wgpu::BufferUsages,
}

impl fmt::Debug for ReallocRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReallocRequest")
            .field("role", &self.role)
            .field("chunk", &self.chunk)
            .field("old", &self.old.as_ref().map(|r| r.size))
            .field("old_used", &self.old_used)
            .field("new_size", &self.new_size)
            .finish_non_exhaustive()
    }
}

/// A `realloc` callback: returns a block (a whole buffer, or a range of a larger one)
/// of at least `new_size` bytes holding the old block's first `old_used` bytes, or
/// fails with its own message.
pub type ReallocFn = Box<dyn Fn(ReallocRequest<'_>) -> Result<Region, CallbackError> + Send + Sync>;

/// A `free_all` callback: releases every block its `realloc` handed out.
pub type FreeAllFn = Box<dyn Fn(Option<&UserContext>) + Send + Sync>;

/// A user's callback pair and its context, shared by the setting and the storage that
/// adapts it.
pub(crate) struct UserCallbacks {
    realloc: ReallocFn,
    free_all: FreeAllFn,
    user: Option<UserContext>,
}

/// Where one kind of a context's memory comes from.
pub(crate) enum BlockSource {
    /// Plain wgpu buffers the context creates, copies and destroys itself.
    Default,
    /// The user's callbacks.
    User(Arc<UserCallbacks>),
}

impl BlockSource {
    /// Both callbacks: user allocation; neither: the default; one: an error.
    pub(crate) fn from_parts(
        role: MemoryRole,
        realloc: Option<ReallocFn>,
        free_all: Option<FreeAllFn>,
        user: Option<UserContext>,
    ) -> Result<BlockSource, RuntimeError> {
        match (realloc, free_all) {
            (None, None) => Ok(BlockSource::Default),
            (Some(realloc), Some(free_all)) => Ok(BlockSource::User(Arc::new(UserCallbacks {
                realloc,
                free_all,
                user,
            }))),
            (realloc, free_all) => Err(RuntimeError::HalfSetCallbacks {
                role,
                realloc_given: realloc.is_some(),
                free_all_given: free_all.is_some(),
            }),
        }
    }

    /// The user context, if user callbacks with one are set.
    pub(crate) fn user(&self) -> Option<&UserContext> {
        match self {
            BlockSource::User(callbacks) => callbacks.user.as_ref(),
            BlockSource::Default => None,
        }
    }

    /// Whether both are user callbacks with the same user context.
    pub(crate) fn shares_user_with(&self, other: &BlockSource) -> bool {
        match (self.user(), other.user()) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Calls `free_all` (user callbacks only).
    pub(crate) fn free_all(&self) {
        if let BlockSource::User(callbacks) = self {
            (callbacks.free_all)(callbacks.user.as_ref());
        }
    }

    /// The storage blocks of `role` come from under this setting: the default's
    /// `WgpuStorage`, or the user's pair adapted onto the storage trait
    /// ([`CallbackStorage`]), so a context's blocks grow one way.
    pub(crate) fn storage(&self, gpu: &GpuContext, role: MemoryRole) -> SharedStorage {
        match self {
            BlockSource::Default => WgpuStorage::shared(gpu),
            BlockSource::User(callbacks) => Arc::new(CallbackStorage {
                gpu: gpu.clone(),
                role,
                callbacks: Arc::clone(callbacks),
            }),
        }
    }
}

/// A BNNS-style `realloc`/`free_all` pair as a [`Storage`]: `realloc` passes the old
/// block to the user's callback (which copies the live bytes, or grows the block in
/// place); `allocate` is a `realloc` with no old block; `free` takes nothing back,
/// since every block stays the callbacks' until their `free_all` (the graph context
/// calls it by its free-all rule); `copy` copies between regions on the device.
pub(crate) struct CallbackStorage {
    gpu: GpuContext,
    role: MemoryRole,
    callbacks: Arc<UserCallbacks>,
}

impl Storage for CallbackStorage {
    type Memory = wgpu::Buffer;

    fn allocate(&self, request: &RegionRequest) -> Result<Region, StorageError> {
        self.realloc(None, 0, request).map_err(|(e, _)| e)
    }

    fn free(&self, _region: Region) -> Result<(), StorageError> {
        Ok(())
    }

    fn copy(&self, from: &Region, to: &Region, bytes: u64) -> Result<(), StorageError> {
        storage_copy(&self.gpu, from, to, bytes)
    }

    fn realloc(
        &self,
        old: Option<Region>,
        keep: u64,
        request: &RegionRequest,
    ) -> Result<Region, (StorageError, Option<Region>)> {
        let call = ReallocRequest {
            gpu: &self.gpu,
            user: self.callbacks.user.as_ref(),
            role: self.role,
            chunk: request.for_chunk.map_or(0, |(_, chunk)| chunk),
            old: old.clone(),
            old_used: keep,
            new_size: request.size,
            usage: request.usage,
        };
        (self.callbacks.realloc)(call)
            .map_err(|e| (StorageError::Refused { message: e.message }, old))
    }
}

/// Copies the first `len` bytes of the region `old` (rounded up to whole 4-byte words,
/// at most `old`'s whole words) to the start of the region `new`, at their offsets in
/// their buffers, and submits the copy: what a `realloc` callback does with the live
/// bytes when it moves a block, whether its blocks are whole buffers or ranges of a
/// larger one. Nothing is submitted when `len` is 0 or `new` is `old` itself.
///
/// # Errors
/// [`CallbackError`] when `new` is too small, either region runs past its buffer, a
/// buffer lacks the copy usage, an offset is not a multiple of 4, or wgpu refuses the
/// copy (e.g. a buffer of another device): the copy runs inside error scopes, so
/// wgpu's error comes back in the message instead of panicking.
pub fn copy_prefix(
    gpu: &GpuContext,
    old: &Region,
    new: &Region,
    len: u64,
) -> Result<(), CallbackError> {
    if len == 0 || old == new {
        return Ok(());
    }
    let bytes = prefix_words(len, old.size);
    if bytes == 0 {
        return Ok(());
    }
    if !old.is_inside_buffer() || !new.is_inside_buffer() {
        return Err(CallbackError::new(
            "a block runs past the end of its buffer",
        ));
    }
    check_copy(old, new, bytes)
        .map_err(|e| CallbackError::new(format!("cannot keep the live bytes: {e}")))?;
    if !old.offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        || !new.offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
    {
        return Err(CallbackError::new(format!(
            "block offsets {} and {} must be multiples of 4 to copy",
            old.offset, new.offset
        )));
    }
    if !old.buffer.usage().contains(wgpu::BufferUsages::COPY_SRC)
        || !new.buffer.usage().contains(wgpu::BufferUsages::COPY_DST)
    {
        return Err(CallbackError::new("copy needs COPY_SRC and COPY_DST"));
    }
    // Inside error scopes: a block wgpu refuses (e.g. one made on another device)
    // becomes this error instead of reaching wgpu's panicking default handler.
    copy_region(gpu, old, new, bytes)
        .map_err(|e| CallbackError::new(format!("copying {bytes} bytes into the new block: {e}")))
}

/// The calls a [`BlockPool`]'s callback pair has taken (the protocol a graph context
/// follows). What the pool's storage handed out and took back is a
/// [`crate::storage::StorageReport`]: wrap the storage in a
/// [`crate::storage::CountingStorage`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCalls {
    /// `realloc` calls.
    pub reallocs: u64,
    /// `new_size` of the last `realloc` call.
    pub last_size: u64,
    /// `free_all` calls.
    pub free_alls: u64,
    /// Blocks given back that the pool never handed out, or had already taken back
    /// (a double free; not passed on to the storage).
    pub unknown_releases: u64,
}

/// BNNS-style realloc/free-all callbacks over any [`Storage`]: `realloc` allocates a
/// new region, copies the old block's live prefix into it and frees the old one;
/// `free_all` frees every block still out. Wrap the storage in a
/// [`crate::storage::CountingStorage`] to prove that nothing leaks; over a
/// [`crate::storage::HostStorage`] the same rules are tested without a GPU.
#[derive(Debug)]
pub struct BlockPool<S: Storage> {
    storage: S,
    outstanding: Mutex<Vec<Region<S::Memory>>>,
    calls: Mutex<PoolCalls>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<S: Storage + 'static> BlockPool<S> {
    /// A pool drawing from `storage`.
    pub fn new(storage: S) -> Arc<BlockPool<S>> {
        Arc::new(BlockPool {
            storage,
            outstanding: Mutex::new(Vec::new()),
            calls: Mutex::new(PoolCalls::default()),
        })
    }

    /// The storage underneath (e.g. to read a counting storage's report).
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The calls the pool has taken so far.
    pub fn calls(&self) -> PoolCalls {
        *lock(&self.calls)
    }

    /// Blocks handed out and not yet taken back.
    pub fn outstanding(&self) -> usize {
        lock(&self.outstanding).len()
    }

    /// Frees one block, if the pool handed it out.
    fn give_back(&self, block: Region<S::Memory>) {
        let mut out = lock(&self.outstanding);
        match out.iter().position(|b| *b == block) {
            Some(i) => {
                let block = out.swap_remove(i);
                drop(out);
                if self.storage.free(block).is_err() {
                    lock(&self.calls).unknown_releases += 1;
                }
            }
            None => lock(&self.calls).unknown_releases += 1,
        }
    }

    /// `realloc` on any memory: a new region of at least `new_size` bytes with
    /// `usage` from the storage, the old block's first `old_used` bytes copied into it,
    /// the old block freed.
    ///
    /// # Errors
    /// [`CallbackError`] with the storage's message when it fails (the old block is
    /// then kept as it is, still outstanding), or when the copy cannot be made.
    pub fn realloc_block(
        &self,
        old: Option<Region<S::Memory>>,
        old_used: u64,
        new_size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<Region<S::Memory>, CallbackError> {
        {
            let mut calls = lock(&self.calls);
            calls.reallocs += 1;
            calls.last_size = new_size;
        }
        let request = RegionRequest::new(new_size).usage(usage);
        // The one move of a realloc; the old block goes back through the pool, which
        // counts a block it never handed out instead of passing it on.
        let block = move_region(&self.storage, old, old_used, &request, |old| {
            self.give_back(old);
            Ok(())
        })
        .map_err(|(e, _old)| CallbackError::new(e.to_string()))?;
        lock(&self.outstanding).push(block.clone());
        Ok(block)
    }

    /// The `free_all` of the pair: every outstanding block back to the storage.
    pub fn free_all(&self) {
        lock(&self.calls).free_alls += 1;
        let blocks = std::mem::take(&mut *lock(&self.outstanding));
        for block in blocks.into_iter().rev() {
            if self.storage.free(block).is_err() {
                lock(&self.calls).unknown_releases += 1;
            }
        }
    }
}

impl<S: Storage<Memory = wgpu::Buffer> + 'static> BlockPool<S> {
    /// The `realloc` of the pair, for a graph context.
    ///
    /// # Errors
    /// As [`BlockPool::realloc_block`].
    pub fn realloc(&self, request: ReallocRequest<'_>) -> Result<Region, CallbackError> {
        self.realloc_block(
            request.old,
            request.old_used,
            request.new_size,
            request.usage,
        )
    }

    /// The pair as callbacks with this pool as their user context: they find the pool
    /// through the user context they are called with (a pool of another type there is
    /// a callback error).
    pub fn callbacks(self: &Arc<Self>) -> (ReallocFn, FreeAllFn, UserContext) {
        let realloc: ReallocFn = Box::new(|request| {
            let pool = request
                .user
                .and_then(|u| u.downcast_ref::<BlockPool<S>>())
                .ok_or_else(|| CallbackError::new("user context is not this block pool"))?;
            pool.realloc(request)
        });
        let free_all: FreeAllFn = Box::new(|user| {
            if let Some(pool) = user.and_then(|u| u.downcast_ref::<BlockPool<S>>()) {
                pool.free_all();
            }
        });
        let user: UserContext = self.clone();
        (realloc, free_all, user)
    }
}
