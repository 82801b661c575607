//! [`StorageError`]: why a [`Storage`](super::Storage) refused a request.

use thiserror::Error;

use wgalloc_plan::ErrorKind;

/// Why a storage refused to allocate, free or copy.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The storage has no room for the request now (freeing something may help).
    #[error("out of memory: {size} bytes asked, {available} of {capacity} free")]
    OutOfMemory {
        /// Bytes asked for.
        size: u64,
        /// Bytes free when it was asked.
        available: u64,
        /// The storage's capacity.
        capacity: u64,
    },
    /// The request can never be met by this storage (larger than any block it can
    /// give, or a size that overflows).
    #[error("{size} bytes never fit: the largest region is {max} bytes")]
    TooLarge {
        /// Bytes asked for.
        size: u64,
        /// The largest region the storage can give.
        max: u64,
    },
    /// The alignment is not a power of two, or larger than the storage can give.
    #[error("cannot align a region to {alignment} bytes")]
    BadAlignment {
        /// The alignment asked for.
        alignment: u64,
    },
    /// A region this storage did not give, or already took back (a double free).
    #[error("region of {size} bytes at offset {offset} is not allocated from this storage")]
    UnknownRegion {
        /// The region's offset.
        offset: u64,
        /// The region's size.
        size: u64,
    },
    /// A copy that does not fit in its regions or is not whole 4-byte words.
    #[error("cannot copy {bytes} bytes from a region of {from} bytes to one of {to} bytes")]
    BadCopy {
        /// Bytes to copy.
        bytes: u64,
        /// Size of the source region.
        from: u64,
        /// Size of the destination region.
        to: u64,
    },
    /// What lies underneath refused (the device: out of device memory, a validation
    /// error, ...): its kind and its own message. A storage names no layer above it, so
    /// a device error reaches it as these two values.
    #[error("{message}")]
    Backend {
        /// What a caller can do about it.
        kind: ErrorKind,
        /// The backend's message.
        message: String,
    },
    /// A user's allocator refused, with its own message.
    #[error("the allocator refused: {message}")]
    Refused {
        /// What the allocator said.
        message: String,
    },
}

impl StorageError {
    /// What a caller can do about it (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            StorageError::OutOfMemory { .. } => ErrorKind::OutOfMemory,
            StorageError::TooLarge { .. } => ErrorKind::NeverFits,
            StorageError::BadAlignment { .. }
            | StorageError::UnknownRegion { .. }
            | StorageError::BadCopy { .. } => ErrorKind::BadInput,
            StorageError::Backend { kind, .. } => *kind,
            StorageError::Refused { .. } => ErrorKind::Callback,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_tell_now_from_never() {
        let oom = StorageError::OutOfMemory {
            size: 8,
            available: 4,
            capacity: 16,
        };
        assert_eq!(oom.kind(), ErrorKind::OutOfMemory);
        assert_eq!(
            StorageError::TooLarge { size: 8, max: 4 }.kind(),
            ErrorKind::NeverFits
        );
        assert_eq!(
            StorageError::Backend {
                kind: ErrorKind::OutOfMemory,
                message: "out of device memory".into()
            }
            .kind(),
            ErrorKind::OutOfMemory
        );
        assert_eq!(
            StorageError::Refused {
                message: "no".into()
            }
            .kind(),
            ErrorKind::Callback
        );
    }
}
