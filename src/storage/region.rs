//! [`Region`]: `size` bytes of a block of memory from an offset, the one unit of memory
//! wgalloc hands out, and [`Memory`], what a block of memory must tell about itself.

use std::fmt;

/// A block of memory a [`Region`] lies in: a `wgpu::Buffer` on a device, a
/// [`HostMemory`](super::HostMemory) block on the host. Two handles are equal when they
/// name the same block (identity, not contents).
pub trait Memory: Clone + PartialEq + fmt::Debug + Send + Sync + 'static {
    /// Bytes in the whole block.
    fn size(&self) -> u64;
    /// What the block may be used for.
    fn usage(&self) -> wgpu::BufferUsages;
}

impl Memory for wgpu::Buffer {
    fn size(&self) -> u64 {
        wgpu::Buffer::size(self)
    }

    fn usage(&self) -> wgpu::BufferUsages {
        wgpu::Buffer::usage(self)
    }
}

/// `size` bytes of `buffer` from byte `offset`: a planned chunk, a tensor's binding, a
/// block of a user's pool /// a `Region`). `M` is the block the bytes lie in; on a device it is a `wgpu::Buffer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region<M = wgpu::Buffer> {
    /// The block that holds the bytes.
    pub buffer: M,
    /// Where they start in `buffer`.
    pub offset: u64,
    /// How many bytes.
    pub size: u64,
}

impl<M> Region<M> {
    /// One past the last byte, in `buffer`; `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }

    /// Whether `[offset, offset + size)` of `other` overlaps this region's bytes (both
    /// in the same block; empty regions overlap nothing).
    pub fn overlaps(&self, other: &Region<M>) -> bool
    where
        M: PartialEq,
    {
        self.buffer == other.buffer
            && self.size > 0
            && other.size > 0
            && self.offset < other.offset.saturating_add(other.size)
            && other.offset < self.offset.saturating_add(self.size)
    }
}

impl<M: Memory> Region<M> {
    /// The whole of `buffer`.
    pub fn whole(buffer: M) -> Region<M> {
        let size = buffer.size();
        Region {
            buffer,
            offset: 0,
            size,
        }
    }

    /// Whether the region lies inside its block.
    pub fn is_inside_buffer(&self) -> bool {
        self.end().is_some_and(|end| end <= self.buffer.size())
    }

    /// `size` bytes from `offset` of this region (offsets relative to the region's
    /// start), as a region of the same block; `None` when they do not lie inside it.
    pub fn sub(&self, offset: u64, size: u64) -> Option<Region<M>> {
        let end = offset.checked_add(size)?;
        (end <= self.size).then(|| Region {
            buffer: self.buffer.clone(),
            offset: self.offset + offset,
            size,
        })
    }
}

impl Region<wgpu::Buffer> {
    /// The region as a storage binding (`None` for an empty region, which wgpu cannot
    /// bind).
    pub fn binding(&self) -> Option<wgpu::BufferBinding<'_>> {
        Some(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: Some(wgpu::BufferSize::new(self.size)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{HostStorage, RegionRequest, Storage};

    #[test]
    fn sub_regions_stay_inside_and_overlap_only_in_the_same_block() {
        let host = HostStorage::unlimited();
        let a = host.allocate(&RegionRequest::new(64)).expect("a");
        let b = host.allocate(&RegionRequest::new(64)).expect("b");
        let left = a.sub(0, 32).expect("left");
        let right = a.sub(32, 32).expect("right");
        assert!(a.sub(40, 32).is_none(), "runs past the region");
        assert!(a.sub(u64::MAX, 2).is_none(), "overflow");
        assert!(!left.overlaps(&right));
        assert!(left.overlaps(&a));
        assert!(!a.overlaps(&b), "another block");
        assert!(!a.sub(8, 0).expect("empty").overlaps(&a));
        assert!(right.is_inside_buffer());
        assert_eq!(Region::whole(a.buffer.clone()).size, 64);
    }
}
