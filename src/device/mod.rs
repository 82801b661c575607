//! Real memory: adapter selection, buffer types from the adapter's limits, allocation.

mod error;

pub use error::DeviceError;
