//! [`TensorAllocator`]: a linear (bump) allocator inside one buffer (ggml's tallocr).

use super::{align_up, PlanError};
use crate::graph::TensorId;

/// Places tensors one after the other inside one buffer of fixed capacity, each at the
/// next aligned offset. Nothing is ever freed.
///
/// ```
/// use wgalloc_plan::graph::TensorId;
/// use wgalloc_plan::plan::TensorAllocator;
/// let mut t = TensorAllocator::new(256, 1000).unwrap();
/// assert_eq!(t.alloc(TensorId(0), 10).unwrap(), 0);
/// assert_eq!(t.alloc(TensorId(1), 10).unwrap(), 256);
/// assert!(t.alloc(TensorId(2), 800).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorAllocator {
    alignment: u64,
    capacity: u64,
    /// The next free byte (always a multiple of `alignment`, at most `capacity`
    /// rounded up).
    offset: u64,
}

impl TensorAllocator {
    /// An empty allocator over a buffer of `capacity` bytes.
    ///
    /// # Errors
    /// [`PlanError::BadAlignment`] unless `alignment` is a power of two.
    pub fn new(alignment: u64, capacity: u64) -> Result<Self, PlanError> {
        if !alignment.is_power_of_two() {
            return Err(PlanError::BadAlignment { alignment });
        }
        Ok(TensorAllocator {
            alignment,
            capacity,
            offset: 0,
        })
    }

    /// Places `tensor` (`size` bytes, rounded up to the alignment; 0 counts as 1) at
    /// the next aligned offset and returns that offset.
    ///
    /// # Errors
    /// [`PlanError::OutOfSpace`] with the numbers if it does not fit in the remaining
    /// capacity; [`PlanError::SizeOverflow`] if the size overflows when rounded up.
    pub fn alloc(&mut self, tensor: TensorId, size: u64) -> Result<u64, PlanError> {
        let aligned = self.reserved_size(tensor, size)?;
        let end = self
            .offset
            .checked_add(aligned)
            .ok_or(PlanError::SizeOverflow { tensor })?;
        if end > self.capacity {
            return Err(PlanError::OutOfSpace {
                tensor,
                size: aligned,
                offset: self.offset,
                capacity: self.capacity,
            });
        }
        let offset = self.offset;
        self.offset = end;
        Ok(offset)
    }

    /// The bytes `alloc` would reserve for a tensor of `size` bytes.
    ///
    /// # Errors
    /// [`PlanError::SizeOverflow`] if rounding up overflows.
    pub fn reserved_size(&self, tensor: TensorId, size: u64) -> Result<u64, PlanError> {
        align_up(size.max(1), self.alignment).ok_or(PlanError::SizeOverflow { tensor })
    }

    /// Bytes used so far (the next offset).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The buffer's capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The offset alignment.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_are_placed_one_after_another_at_aligned_offsets() {
        let mut t = TensorAllocator::new(32, 1024).expect("valid");
        assert_eq!(t.alloc(TensorId(0), 33), Ok(0));
        assert_eq!(t.alloc(TensorId(1), 1), Ok(64));
        assert_eq!(t.alloc(TensorId(2), 0), Ok(96));
        assert_eq!(t.offset(), 128);
    }

    #[test]
    fn running_out_reports_tensor_size_offset_and_capacity() {
        let mut t = TensorAllocator::new(16, 100).expect("valid");
        assert_eq!(t.alloc(TensorId(0), 90), Ok(0));
        assert_eq!(
            t.alloc(TensorId(1), 10),
            Err(PlanError::OutOfSpace {
                tensor: TensorId(1),
                size: 16,
                offset: 96,
                capacity: 100
            })
        );
        assert_eq!(t.offset(), 96, "a failed alloc changes nothing");
    }

    #[test]
    fn exact_fit_at_the_end_succeeds() {
        let mut t = TensorAllocator::new(4, 100).expect("valid");
        assert_eq!(t.alloc(TensorId(0), 96), Ok(0));
        assert_eq!(t.alloc(TensorId(1), 4), Ok(96));
        assert!(t.alloc(TensorId(2), 1).is_err());
    }

    #[test]
    fn overflowing_sizes_are_errors() {
        let mut t = TensorAllocator::new(8, u64::MAX).expect("valid");
        assert_eq!(
            t.alloc(TensorId(5), u64::MAX),
            Err(PlanError::SizeOverflow {
                tensor: TensorId(5)
            })
        );
        assert!(matches!(
            TensorAllocator::new(3, 10),
            Err(PlanError::BadAlignment { alignment: 3 })
        ));
    }
}
