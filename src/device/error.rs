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
}
