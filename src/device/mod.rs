//! Real memory: adapter selection, buffer types from the adapter's limits, allocation.

mod context;
mod error;
mod memory;

pub use context::{backends_from_env, list_adapters, GpuContext};
pub use error::DeviceError;
pub use memory::PlannedMemory;
