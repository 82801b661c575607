//! Errors of the device layer.

use thiserror::Error;

/// Why the adapter, the device or an allocation failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// No adapter was found at all.
    #[error("no wgpu adapter found (backends: {backends})")]
    NoAdapter {
        /// The backends searched.
        backends: String,
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
}
