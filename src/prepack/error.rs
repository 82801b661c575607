//! Errors of the pre-packed weight cache.

use thiserror::Error;
use wgalloc_plan::ErrorKind;

use crate::device::DeviceError;

/// Why packing, storing or using a pre-packed weight failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PrepackError {
    /// A store with no buffer.
    #[error("store of {key}: no buffers")]
    NoBuffers {
        /// The key (its display form).
        key: String,
    },
    /// A buffer of a store declares 0 bytes.
    #[error("store: buffer {index} has size 0")]
    ZeroSizeBuffer {
        /// Its position in the store's list.
        index: usize,
    },
    /// A buffer of a store declares more bytes than its `wgpu::Buffer` has.
    #[error("store: buffer {index} declares {size} bytes but its wgpu buffer has {buffer_size}")]
    SizeMismatch {
        /// Its position in the store's list.
        index: usize,
        /// Bytes declared.
        size: u64,
        /// Bytes of the wgpu buffer.
        buffer_size: u64,
    },
    /// A buffer of a store was not handed out by this cache's allocator (or was
    /// already stored or released).
    #[error("store: buffer {index} was not allocated by this cache's allocator (or is already stored or released)")]
    ForeignBuffer {
        /// Its position in the store's list.
        index: usize,
    },
    /// The same buffer appears twice in one store.
    #[error("store: buffer {index} repeats buffer {first}")]
    DuplicateBuffer {
        /// Its position in the store's list.
        index: usize,
        /// The earlier position of the same buffer.
        first: usize,
    },
    /// A packed buffer of 0 bytes was asked for.
    #[error("a packed buffer of 0 bytes was asked for")]
    ZeroSizeRequest,
    /// A packed buffer larger than any storage binding of the device ("never fits").
    #[error("a packed buffer of {size} bytes exceeds the device's limit of {max_size}")]
    TooLarge {
        /// Bytes asked for.
        size: u64,
        /// The device's limit (`min(max_buffer_size, max_storage_buffer_binding_size)`).
        max_size: u64,
    },
    /// The allocator underneath the cache refused a packed buffer ("does not fit now",
    /// or a user allocator's failure).
    #[error("allocating a packed buffer of {size} bytes failed: {source}")]
    Allocation {
        /// Bytes asked for.
        size: u64,
        /// The allocator's error.
        source: DeviceError,
    },
    /// Writing packed data to the device failed.
    #[error("uploading {size} packed bytes failed: {message}")]
    Upload {
        /// Bytes being written.
        size: u64,
        /// What wgpu said.
        message: String,
    },
    /// A matrix that cannot be packed (a zero or overflowing dimension, or values that
    /// do not match its element count).
    #[error(transparent)]
    Pack(#[from] crate::exec::packed::PackError),
    /// A weight whose values were needed was not given any.
    #[error("no values for weight {tensor} ({name})")]
    MissingWeight {
        /// The weight's id.
        tensor: crate::graph::TensorId,
        /// Its name.
        name: String,
    },
    /// A packed tensor of the graph has no cached buffers bound for it.
    #[error("packed tensor {tensor} ({name}) has no cached buffers")]
    NotPacked {
        /// The packed tensor's id.
        tensor: crate::graph::TensorId,
        /// Its name.
        name: String,
    },
    /// The rewritten graph failed validation.
    #[error("the rewritten graph is invalid: {message}")]
    Graph {
        /// The validator's message.
        message: String,
    },
}

impl PrepackError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            PrepackError::TooLarge { .. } => ErrorKind::NeverFits,
            PrepackError::Allocation { source, .. } => source.kind(),
            PrepackError::Upload { .. } => ErrorKind::Device,
            _ => ErrorKind::BadInput,
        }
    }
}
