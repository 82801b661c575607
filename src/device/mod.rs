//! Real memory: adapter selection, buffer types from the adapter's limits, allocation
//! of planned chunks from a storage (one path, [`allocate_plan`]), upload and readback.

mod allocation;
mod allocator;
mod buffer_storage;
mod buffer_types;
mod context;
mod device_bytes;
mod error;
mod memory;
mod scope;
mod shared;
mod transfer;

pub use allocation::allocate_plan;
pub(crate) use allocation::{check_bindings, check_chunks_against_limits, chunk_alloc_size};
pub use allocator::{BufferAllocator, CallbackAllocator, ChunkRequest, WgpuAllocator};
pub(crate) use buffer_storage::storage_copy;
pub use buffer_storage::{copy_region, BufferStorage, WgpuStorage};
pub use buffer_types::usage_names;
pub use buffer_types::{DeviceBufferType, DeviceBufferTypes, STORAGE_USAGE};
pub use context::{
    backends_from_env, describe_adapter, features_from_env, list_adapters, parse_backends,
    GpuContext, USABLE_FEATURES,
};
pub use device_bytes::{allocator_report, measure_allocation, no_report_reason, DeviceBytes};
pub use error::DeviceError;
pub use memory::{PlannedMemory, SharedStorage};
pub use scope::scoped;
pub(crate) use scope::scoped_keep;
pub use shared::DeviceShared;
pub use transfer::{read_buffer_range, read_tensor, write_buffer, write_tensor};
pub(crate) use transfer::{read_staging, StagingRead};
