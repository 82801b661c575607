//! Errors of the device layer.

use thiserror::Error;
use wgalloc_plan::ErrorKind;

use crate::graph::TensorId;

/// Why the adapter, the device, an allocation or a transfer failed.
///
/// "Never fits" ([`DeviceError::ChunkTooLarge`], [`DeviceError::TensorTooLarge`]: larger
/// than the device allows for any buffer or binding, found before wgpu is called) is kept
/// apart from "does not fit now" ([`DeviceError::OutOfDeviceMemory`]: the device ran out).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// No adapter was found at all.
    #[error("no wgpu adapter found (backends: {backends})")]
    NoAdapter {
        /// The backends searched.
        backends: String,
    },
    /// `WGPU_BACKEND` names no backend wgpu knows.
    #[error("WGPU_BACKEND={value:?} names no known backend (vulkan, dx12, metal, gl)")]
    BadBackend {
        /// The value of the variable.
        value: String,
    },
    /// `WGPU_ADAPTER_NAME` (or an explicit name) matches no adapter.
    #[error("no adapter name contains {wanted:?}; adapters found: {}", found.join(", "))]
    AdapterNotFound {
        /// The name asked for.
        wanted: String,
        /// The adapters that exist (name and backend).
        found: Vec<String>,
    },
    /// The adapter refused to create a device.
    #[error("adapter {adapter} refused the device: {message}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// What wgpu said.
        message: String,
    },
    /// A device limit that cannot describe a buffer type (an alignment that is not a
    /// power of two, a zero size).
    #[error("device limit {limit} = {value} cannot describe a buffer type")]
    BadLimit {
        /// The limit's name in `wgpu::Limits`.
        limit: &'static str,
        /// Its value.
        value: u64,
    },
    /// A planned chunk is larger than the device's largest buffer: it can never be
    /// allocated on this device.
    #[error("buffer {buffer} chunk {chunk}: {size} bytes exceed the device's max buffer size {max_size}")]
    ChunkTooLarge {
        /// The plan's buffer index.
        buffer: usize,
        /// The chunk inside the buffer.
        chunk: usize,
        /// The chunk's size in bytes (rounded up to 4).
        size: u64,
        /// `max_buffer_size` of the device.
        max_size: u64,
    },
    /// A planned tensor is larger than one storage binding may be: no kernel can ever
    /// bind it on this device.
    #[error(
        "tensor {tensor}: {size} bytes exceed the device's max storage binding size {max_size}"
    )]
    TensorTooLarge {
        /// The tensor.
        tensor: TensorId,
        /// Its binding size in bytes (rounded up to 4).
        size: u64,
        /// `max_storage_buffer_binding_size` of the device.
        max_size: u64,
    },
    /// A placement names a buffer or chunk the plan does not have, or reaches past
    /// the end of its chunk.
    #[error("tensor {tensor}: placement in buffer {buffer} chunk {chunk} [{offset}, +{size}) lies outside the plan's chunks")]
    BadPlacement {
        /// The tensor.
        tensor: TensorId,
        /// The buffer it names.
        buffer: usize,
        /// The chunk it names.
        chunk: usize,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
    },
    /// A placement's binding does not start at a multiple of the device's
    /// `min_storage_buffer_offset_alignment`: the plan was made for a smaller alignment
    /// (re-plan with this device's buffer types).
    #[error("tensor {tensor}: binding at offset {offset} is not a multiple of the device's storage offset alignment {alignment}")]
    MisalignedPlacement {
        /// The tensor.
        tensor: TensorId,
        /// The binding's offset in its chunk.
        offset: u64,
        /// `min_storage_buffer_offset_alignment`.
        alignment: u64,
    },
    /// A binding whose offset in its buffer is not a multiple of the device's
    /// `min_storage_buffer_offset_alignment`.
    #[error("binding at byte {offset} of its buffer is not a multiple of the storage offset alignment {alignment}")]
    UnalignedBinding {
        /// The binding's offset in its buffer.
        offset: u64,
        /// The alignment required.
        alignment: u64,
    },
    /// A plan checked against a graph it was not made for.
    #[error("the plan has {placements} placements but the graph has {tensors} tensors")]
    PlanForAnotherGraph {
        /// Placements in the plan.
        placements: usize,
        /// Tensors in the graph.
        tensors: usize,
    },
    /// The device is out of memory for a buffer of this size (does not fit now).
    #[error("out of device memory allocating {size} bytes")]
    OutOfDeviceMemory {
        /// The size asked for.
        size: u64,
    },
    /// wgpu rejected an operation as invalid.
    #[error("wgpu validation error: {message}")]
    Validation {
        /// What wgpu said.
        message: String,
    },
    /// wgpu reported an internal error.
    #[error("wgpu internal error: {message}")]
    Internal {
        /// What wgpu said.
        message: String,
    },
    /// A user-supplied allocator refused a request.
    #[error("allocator refused {size} bytes: {message}")]
    AllocatorRefused {
        /// The size asked for.
        size: u64,
        /// The allocator's reason.
        message: String,
    },
    /// Allocating one chunk of a plan failed; every buffer created before it was released.
    #[error("allocating buffer {buffer} chunk {chunk} ({size} bytes) failed: {source}")]
    ChunkAllocation {
        /// The plan's buffer index.
        buffer: usize,
        /// The chunk inside the buffer.
        chunk: usize,
        /// The chunk's size in bytes.
        size: u64,
        /// Why.
        source: Box<DeviceError>,
    },
    /// A [`crate::storage::Storage`] refused a region.
    #[error(transparent)]
    Storage(Box<crate::storage::StorageError>),
    /// A byte range outside a buffer (or overflowing 64 bits).
    #[error("range [{offset}, +{size}) is outside a buffer of {buffer_size} bytes")]
    RangeOutOfBounds {
        /// Start of the range.
        offset: u64,
        /// Its length.
        size: u64,
        /// The buffer's size.
        buffer_size: u64,
    },
    /// A write whose offset is not a multiple of wgpu's copy alignment.
    #[error("write offset {offset} is not a multiple of {alignment}")]
    UnalignedWrite {
        /// The offset.
        offset: u64,
        /// `wgpu::COPY_BUFFER_ALIGNMENT`.
        alignment: u64,
    },
    /// A buffer lacks a usage the operation needs.
    #[error("buffer lacks usage {needed} (has {has})")]
    MissingUsage {
        /// The usage needed.
        needed: String,
        /// The usages it has.
        has: String,
    },
    /// Mapping a staging buffer failed.
    #[error("mapping a staging buffer failed: {message}")]
    Map {
        /// What wgpu said.
        message: String,
    },
    /// Waiting for the device failed.
    #[error("waiting for the device failed: {message}")]
    Poll {
        /// What wgpu said.
        message: String,
    },
}

impl DeviceError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            DeviceError::ChunkTooLarge { .. } | DeviceError::TensorTooLarge { .. } => {
                ErrorKind::NeverFits
            }
            DeviceError::OutOfDeviceMemory { .. } => ErrorKind::OutOfMemory,
            DeviceError::ChunkAllocation { source, .. } => source.kind(),
            DeviceError::Storage(source) => source.kind(),
            DeviceError::AllocatorRefused { .. } => ErrorKind::Callback,
            DeviceError::NoAdapter { .. }
            | DeviceError::RequestDevice { .. }
            | DeviceError::BadLimit { .. }
            | DeviceError::Validation { .. }
            | DeviceError::Internal { .. }
            | DeviceError::Map { .. }
            | DeviceError::Poll { .. } => ErrorKind::Device,
            DeviceError::BadBackend { .. }
            | DeviceError::AdapterNotFound { .. }
            | DeviceError::BadPlacement { .. }
            | DeviceError::MisalignedPlacement { .. }
            | DeviceError::PlanForAnotherGraph { .. }
            | DeviceError::UnalignedBinding { .. }
            | DeviceError::RangeOutOfBounds { .. }
            | DeviceError::UnalignedWrite { .. }
            | DeviceError::MissingUsage { .. } => ErrorKind::BadInput,
        }
    }
}

impl From<crate::storage::StorageError> for DeviceError {
    /// A storage's refusal, wrapped; its kind is kept.
    fn from(error: crate::storage::StorageError) -> DeviceError {
        DeviceError::Storage(Box::new(error))
    }
}

impl From<DeviceError> for crate::storage::StorageError {
    /// A device error met inside a storage (wgpu refused a buffer or a copy): the
    /// storage layer keeps its kind and message, not the type, since it names no layer
    /// above it.
    fn from(error: DeviceError) -> crate::storage::StorageError {
        crate::storage::StorageError::Backend {
            kind: error.kind(),
            message: error.to_string(),
        }
    }
}
