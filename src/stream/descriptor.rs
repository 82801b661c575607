//! [`AllocatorDesc`]: a user's allocator as an object and three callbacks (`alloc`,
//! `free`, `address_of`), built step by step and then registered on a
//! [`super::Stream`]. Registration copies what it needs (shared handles to the object
//! and the callbacks), so the descriptor can be dropped right after.

use std::fmt;
use std::sync::Arc;

use super::{BlockCounter, StreamError};
use crate::storage::Region;

/// The error an `alloc` callback returns (any error type, boxed).
pub type AllocFailure = Box<dyn std::error::Error + Send + Sync>;

/// What the stream asks an allocator for: memory for chunk `chunk` of the plan's
/// buffer `buffer`, at least `size` bytes, starting at a multiple of `alignment`
/// (the device's `min_storage_buffer_offset_alignment`) in a buffer with `usage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRequest {
    /// The plan's buffer.
    pub buffer: usize,
    /// The chunk inside it.
    pub chunk: usize,
    /// Bytes needed; a multiple of 4.
    pub size: u64,
    /// The block's offset in its buffer must be a multiple of this.
    pub alignment: u64,
    /// Usages the block's buffer must have.
    pub usage: wgpu::BufferUsages,
}

pub(crate) type AllocCallback<T, B> =
    dyn Fn(&T, &BlockRequest) -> Result<B, AllocFailure> + Send + Sync;
pub(crate) type FreeCallback<T, B> = dyn Fn(&T, B) + Send + Sync;
pub(crate) type AddressCallback<T, B> = dyn Fn(&T, &B) -> Region + Send + Sync;

/// A user allocator: an object of type `T` and the callbacks that allocate a block of
/// type `B` from it, free a block, and tell where a block lives. Every part must be set
/// before [`super::Stream::register_allocator`] accepts it.
///
/// Two streams use *the same allocator* when their descriptors hold the same object
/// (the same `Arc`): such streams may not run at once (see [`super::Stream`]).
pub struct AllocatorDesc<T, B> {
    pub(crate) object: Option<Arc<T>>,
    pub(crate) alloc: Option<Arc<AllocCallback<T, B>>>,
    pub(crate) free: Option<Arc<FreeCallback<T, B>>>,
    pub(crate) address_of: Option<Arc<AddressCallback<T, B>>>,
    /// Where the registered storage records what it hands out
    /// ([`AllocatorDesc::counted`]).
    pub(crate) counter: Option<Arc<BlockCounter>>,
}

impl<T, B> fmt::Debug for AllocatorDesc<T, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllocatorDesc")
            .field("object", &self.object.is_some())
            .field("alloc", &self.alloc.is_some())
            .field("free", &self.free.is_some())
            .field("address_of", &self.address_of.is_some())
            .field("counted", &self.counter.is_some())
            .finish()
    }
}

impl<T, B> Default for AllocatorDesc<T, B> {
    fn default() -> Self {
        AllocatorDesc {
            object: None,
            alloc: None,
            free: None,
            address_of: None,
            counter: None,
        }
    }
}

impl<T, B> Clone for AllocatorDesc<T, B> {
    fn clone(&self) -> Self {
        AllocatorDesc {
            object: self.object.clone(),
            alloc: self.alloc.clone(),
            free: self.free.clone(),
            address_of: self.address_of.clone(),
            counter: self.counter.clone(),
        }
    }
}

impl<T, B> AllocatorDesc<T, B> {
    /// An empty descriptor (nothing set).
    pub fn new() -> AllocatorDesc<T, B> {
        AllocatorDesc::default()
    }

    /// Sets the allocator object every callback receives.
    pub fn object(mut self, object: Arc<T>) -> Self {
        self.object = Some(object);
        self
    }

    /// Sets the `alloc` callback: a block of at least `request.size` bytes, or an error
    /// (the stream reports it as [`StreamError::AllocFailed`] with its message).
    pub fn alloc(
        mut self,
        alloc: impl Fn(&T, &BlockRequest) -> Result<B, AllocFailure> + Send + Sync + 'static,
    ) -> Self {
        self.alloc = Some(Arc::new(alloc));
        self
    }

    /// Sets the `free` callback, which takes back a block `alloc` gave. The stream calls
    /// it exactly once per block, and only once the stream's work that used the block
    /// has completed.
    pub fn free(mut self, free: impl Fn(&T, B) + Send + Sync + 'static) -> Self {
        self.free = Some(Arc::new(free));
        self
    }

    /// Sets the `address_of` callback: the buffer range of a block.
    pub fn address_of(
        mut self,
        address_of: impl Fn(&T, &B) -> Region + Send + Sync + 'static,
    ) -> Self {
        self.address_of = Some(Arc::new(address_of));
        self
    }

    /// Whether every part is set.
    pub fn is_complete(&self) -> bool {
        self.object.is_some()
            && self.alloc.is_some()
            && self.free.is_some()
            && self.address_of.is_some()
    }

    /// The parts, or the first one missing.
    pub(crate) fn parts(&self) -> Result<Parts<T, B>, StreamError> {
        let missing = |callback| StreamError::MissingCallback { callback };
        Ok(Parts {
            object: self.object.clone().ok_or(missing("object"))?,
            alloc: self.alloc.clone().ok_or(missing("alloc"))?,
            free: self.free.clone().ok_or(missing("free"))?,
            address_of: self.address_of.clone().ok_or(missing("address_of"))?,
            counter: self.counter.clone(),
        })
    }
}

/// Every part of a complete descriptor, shared with it.
pub(crate) struct Parts<T, B> {
    pub(crate) object: Arc<T>,
    pub(crate) alloc: Arc<AllocCallback<T, B>>,
    pub(crate) free: Arc<FreeCallback<T, B>>,
    pub(crate) address_of: Arc<AddressCallback<T, B>>,
    pub(crate) counter: Option<Arc<BlockCounter>>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn complete() -> AllocatorDesc<(), u32> {
        AllocatorDesc::new()
            .object(Arc::new(()))
            .alloc(|_, _| Ok(1))
            .free(|_, _| {})
            .address_of(|_, _| unreachable!("not called by these tests"))
    }

    #[test]
    fn each_missing_part_is_named_at_the_door() {
        let cases: [(&str, AllocatorDesc<(), u32>); 4] = [
            (
                "object",
                AllocatorDesc {
                    object: None,
                    ..complete()
                },
            ),
            (
                "alloc",
                AllocatorDesc {
                    alloc: None,
                    ..complete()
                },
            ),
            (
                "free",
                AllocatorDesc {
                    free: None,
                    ..complete()
                },
            ),
            (
                "address_of",
                AllocatorDesc {
                    address_of: None,
                    ..complete()
                },
            ),
        ];
        for (name, desc) in cases {
            assert!(!desc.is_complete());
            assert_eq!(
                desc.parts().err(),
                Some(StreamError::MissingCallback { callback: name })
            );
        }
        assert!(complete().is_complete());
        assert!(complete().parts().is_ok());
    }

    #[test]
    fn parts_share_the_object_so_the_descriptor_can_go() {
        let object = Arc::new(());
        let desc = complete().object(object.clone());
        let parts = desc.parts().unwrap();
        drop(desc);
        assert!(Arc::ptr_eq(&parts.object, &object));
        assert_eq!(Arc::strong_count(&object), 2);
    }
}
