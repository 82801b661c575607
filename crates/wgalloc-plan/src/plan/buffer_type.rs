//! [`BufferTypeDesc`]: the plain description of a kind of memory that the planner sees.

use serde::Serialize;

use super::PlanError;

/// A kind of buffer as the planner sees it: a name, an alignment for every offset
/// (a checked power of two) and the largest size one buffer (chunk) may have.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct BufferTypeDesc {
    /// A name for reports (`storage`, `cpu`, ...).
    pub name: String,
    /// Every offset is a multiple of this; a power of two.
    alignment: u64,
    /// The largest chunk; a tensor larger than this gets an oversized chunk of its own.
    pub max_size: u64,
}

impl BufferTypeDesc {
    /// A buffer type description.
    ///
    /// # Errors
    /// [`PlanError::BadAlignment`] unless `alignment` is a power of two;
    /// [`PlanError::BadMaxSize`] if `max_size` is 0.
    pub fn new(name: impl Into<String>, alignment: u64, max_size: u64) -> Result<Self, PlanError> {
        if !alignment.is_power_of_two() {
            return Err(PlanError::BadAlignment { alignment });
        }
        if max_size == 0 {
            return Err(PlanError::BadMaxSize { max_size });
        }
        Ok(BufferTypeDesc {
            name: name.into(),
            alignment,
            max_size,
        })
    }

    /// The offset alignment (a power of two).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// `size` rounded up to the alignment, or `None` on overflow.
    pub fn align_up(&self, size: u64) -> Option<u64> {
        align_up(size, self.alignment)
    }
}

/// `value` rounded up to a multiple of `alignment` (a power of two); `None` on overflow.
pub fn align_up(value: u64, alignment: u64) -> Option<u64> {
    debug_assert!(alignment.is_power_of_two());
    let mask = alignment - 1;
    value.checked_add(mask).map(|v| v & !mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_must_be_a_power_of_two() {
        assert!(matches!(
            BufferTypeDesc::new("x", 24, 100),
            Err(PlanError::BadAlignment { alignment: 24 })
        ));
        assert!(matches!(
            BufferTypeDesc::new("x", 0, 100),
            Err(PlanError::BadAlignment { .. })
        ));
        assert!(BufferTypeDesc::new("x", 32, 100).is_ok());
    }

    #[test]
    fn align_up_rounds_and_reports_overflow() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
    }
}
