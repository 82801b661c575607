//! What a stream keeps of a registered allocator: the descriptor's parts behind one
//! object-safe trait ([`StreamAllocator`]), and the built-in default used while no
//! allocator is registered. A block taken from either is held in a box whose drop
//! hands it back (the user's `free`, or destroying the default's buffer), so a block
//! is freed exactly once however an execution ends.

use std::sync::Arc;

use super::descriptor::Parts;
use super::{AllocFailure, BlockAddress, BlockRequest};
use crate::device::{BufferAllocator, ChunkRequest, GpuContext, WgpuAllocator};
use crate::plan::BufferId;

/// A block held by a stream: dropping it frees it.
pub(crate) type HeldBlock = Box<dyn Send>;

/// An allocator a stream can take blocks from.
pub(crate) trait StreamAllocator: Send + Sync {
    /// The identity of the allocator object, shared by every registration of it;
    /// `None` for a stream's private default allocator.
    fn key(&self) -> Option<usize>;

    /// A block for `request` and where it lives.
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &BlockRequest,
    ) -> Result<(HeldBlock, BlockAddress), AllocFailure>;
}

/// A registered descriptor's parts.
pub(crate) struct UserAllocator<T, B> {
    parts: Arc<Parts<T, B>>,
}

impl<T, B> UserAllocator<T, B> {
    pub(crate) fn new(parts: Parts<T, B>) -> UserAllocator<T, B> {
        UserAllocator {
            parts: Arc::new(parts),
        }
    }
}

/// A user's block: freed through the user's `free` on drop.
struct UserBlock<T, B> {
    parts: Arc<Parts<T, B>>,
    block: Option<B>,
}

impl<T, B> Drop for UserBlock<T, B> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            (self.parts.free)(&self.parts.object, block);
        }
    }
}

impl<T, B> StreamAllocator for UserAllocator<T, B>
where
    T: Send + Sync + 'static,
    B: Send + 'static,
{
    fn key(&self) -> Option<usize> {
        Some(Arc::as_ptr(&self.parts.object).cast::<()>().addr())
    }

    fn allocate(
        &self,
        _ctx: &GpuContext,
        request: &BlockRequest,
    ) -> Result<(HeldBlock, BlockAddress), AllocFailure> {
        let parts = &self.parts;
        let block = (parts.alloc)(&parts.object, request)?;
        let address = (parts.address_of)(&parts.object, &block);
        let held = UserBlock {
            parts: parts.clone(),
            block: Some(block),
        };
        Ok((Box::new(held), address))
    }
}

/// The allocator of a stream with none registered: one buffer per block from
/// [`WgpuAllocator`] (inside error scopes), destroyed when freed.
#[derive(Debug, Default)]
pub(crate) struct DefaultAllocator;

/// A default block: its buffer, destroyed on drop.
struct OwnedBuffer(wgpu::Buffer);

impl Drop for OwnedBuffer {
    fn drop(&mut self) {
        self.0.destroy();
    }
}

impl StreamAllocator for DefaultAllocator {
    fn key(&self) -> Option<usize> {
        None
    }

    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &BlockRequest,
    ) -> Result<(HeldBlock, BlockAddress), AllocFailure> {
        let chunk = ChunkRequest {
            buffer: BufferId(request.buffer),
            chunk: request.chunk,
            size: request.size,
            usage: request.usage,
        };
        let buffer = WgpuAllocator.allocate(ctx, &chunk)?;
        let address = BlockAddress {
            buffer: buffer.clone(),
            offset: 0,
            size: buffer.size(),
        };
        Ok((Box::new(OwnedBuffer(buffer)), address))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::stream::AllocatorDesc;

    #[test]
    fn dropping_a_held_user_block_frees_it_once() {
        let freed = Arc::new(AtomicU64::new(0));
        let f = freed.clone();
        let desc: AllocatorDesc<(), u32> = AllocatorDesc::new()
            .object(Arc::new(()))
            .alloc(|_, _| Ok(5))
            .free(move |_, block| {
                assert_eq!(block, 5);
                f.fetch_add(1, Ordering::SeqCst);
            })
            .address_of(|_, _| unreachable!("not needed"));
        let parts = desc.parts().expect("complete");
        let held = UserBlock {
            parts: Arc::new(parts),
            block: Some(5u32),
        };
        assert_eq!(freed.load(Ordering::SeqCst), 0);
        drop(held);
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn registrations_of_one_object_share_a_key_and_others_do_not() {
        let object = Arc::new(7u8);
        let desc = |o: Arc<u8>| -> AllocatorDesc<u8, u32> {
            AllocatorDesc::new()
                .object(o)
                .alloc(|_, _| Ok(0))
                .free(|_, _| {})
                .address_of(|_, _| unreachable!("not needed"))
        };
        let a = UserAllocator::new(desc(object.clone()).parts().expect("a"));
        let b = UserAllocator::new(desc(object).parts().expect("b"));
        let c = UserAllocator::new(desc(Arc::new(7u8)).parts().expect("c"));
        assert!(a.key().is_some());
        assert_eq!(a.key(), b.key());
        assert_ne!(a.key(), c.key());
        assert_eq!(DefaultAllocator.key(), None);
    }
}
