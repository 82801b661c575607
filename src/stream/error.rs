//! [`StreamError`]: what registering an allocator on a stream, executing on it or
//! synchronizing it can refuse.

use thiserror::Error;
use wgalloc_plan::ErrorKind;

use crate::device::DeviceError;
use crate::exec::ExecError;

/// An error of the stream layer. Variants carry the numbers that explain them.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StreamError {
    /// A descriptor lacks a callback (or its allocator object) at registration.
    #[error("allocator descriptor has no {callback}: set it before registering")]
    MissingCallback {
        /// `"object"`, `"alloc"`, `"free"` or `"address_of"`.
        callback: &'static str,
    },
    /// The allocator has unsynchronized work on another stream: running both at once
    /// is refused until that stream is synchronized.
    #[error(
        "allocator is in use by stream {stream} ({name}) with unsynchronized work; \
         synchronize it first"
    )]
    AllocatorBusy {
        /// Id of the stream that holds the allocator.
        stream: u64,
        /// Its name.
        name: String,
    },
    /// The allocator's `alloc` callback failed.
    #[error("alloc callback failed for buffer {buffer} chunk {chunk} ({size} bytes): {message}")]
    AllocFailed {
        /// The plan's buffer.
        buffer: usize,
        /// The chunk in it.
        chunk: usize,
        /// Bytes asked for.
        size: u64,
        /// The callback's error, as text.
        message: String,
    },
    /// `address_of` gave a range smaller than the block asked for.
    #[error("block for buffer {buffer} chunk {chunk} has {got} bytes, {needed} needed")]
    BlockTooSmall {
        /// The plan's buffer.
        buffer: usize,
        /// The chunk in it.
        chunk: usize,
        /// Bytes asked for.
        needed: u64,
        /// Bytes the address covers.
        got: u64,
    },
    /// `address_of` gave an offset that is not a multiple of the device's
    /// `min_storage_buffer_offset_alignment`.
    #[error(
        "block for buffer {buffer} chunk {chunk} starts at offset {offset}, \
         not a multiple of {alignment}"
    )]
    MisalignedBlock {
        /// The plan's buffer.
        buffer: usize,
        /// The chunk in it.
        chunk: usize,
        /// The offset given.
        offset: u64,
        /// The alignment required.
        alignment: u64,
    },
    /// `address_of` gave a range that ends past its buffer.
    #[error(
        "block for buffer {buffer} chunk {chunk} at offset {offset} + {size} bytes ends \
         past its buffer of {buffer_size} bytes"
    )]
    BlockPastBufferEnd {
        /// The plan's buffer.
        buffer: usize,
        /// The chunk in it.
        chunk: usize,
        /// The offset given.
        offset: u64,
        /// The size given.
        size: u64,
        /// Bytes of the block's buffer.
        buffer_size: u64,
    },
    /// The block's buffer lacks a usage the stream needs.
    #[error("block for buffer {buffer} chunk {chunk} has usage {has}, needs {needed}")]
    BlockMissingUsage {
        /// The plan's buffer.
        buffer: usize,
        /// The chunk in it.
        chunk: usize,
        /// The usages needed.
        needed: String,
        /// The usages the buffer has.
        has: String,
    },
    /// Waiting for the stream's submissions or mapping its read-back failed.
    #[error("synchronizing stream {stream}: {message}")]
    Sync {
        /// The stream's id.
        stream: u64,
        /// What wgpu said.
        message: String,
    },
    /// The plan does not fit the device (checked before any allocation), or wgpu
    /// refused a read-back copy (caught in an error scope: e.g. a tensor in a buffer
    /// without `COPY_SRC`, or a block of another device).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Writing inputs or recording the graph failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl StreamError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            StreamError::AllocFailed { .. }
            | StreamError::BlockTooSmall { .. }
            | StreamError::MisalignedBlock { .. }
            | StreamError::BlockPastBufferEnd { .. }
            | StreamError::BlockMissingUsage { .. } => ErrorKind::Callback,
            StreamError::Sync { .. } => ErrorKind::Device,
            StreamError::Device(error) => error.kind(),
            StreamError::Exec(error) => error.kind(),
            _ => ErrorKind::BadInput,
        }
    }
}
