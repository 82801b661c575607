//! Real memory: adapter selection, buffer types from the adapter's limits, allocation.

mod context;
mod error;

pub use context::{backends_from_env, list_adapters, GpuContext};
pub use error::DeviceError;
