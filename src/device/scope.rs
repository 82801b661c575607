//! Error scopes: run wgpu calls so that their errors come back as values instead of
//! reaching wgpu's default handler (which panics).

use super::DeviceError;

/// Runs `work` inside out-of-memory, validation and internal error scopes on `device`
/// and turns the first error caught into a [`DeviceError`]. `size` is the byte count
/// reported in [`DeviceError::OutOfDeviceMemory`].
///
/// Error scopes are per thread, so `work` must do its wgpu calls on this thread.
///
/// # Errors
/// [`DeviceError::OutOfDeviceMemory`], [`DeviceError::Validation`] or
/// [`DeviceError::Internal`] when wgpu reported one while `work` ran.
pub fn scoped<T>(
    device: &wgpu::Device,
    size: u64,
    work: impl FnOnce() -> T,
) -> Result<T, DeviceError> {
    match scoped_keep(device, size, work) {
        (value, None) => Ok(value),
        (_, Some(error)) => Err(error),
    }
}

/// [`scoped`] that keeps `work`'s value beside the error wgpu reported, for callers
/// whose own failure takes precedence over the device's.
pub fn scoped_keep<T>(
    device: &wgpu::Device,
    size: u64,
    work: impl FnOnce() -> T,
) -> (T, Option<DeviceError>) {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let value = work();
    // Scopes pop innermost first.
    let internal = pollster::block_on(internal.pop());
    let validation = pollster::block_on(validation.pop());
    let oom = pollster::block_on(oom.pop());
    let error = oom.or(validation).or(internal).map(|e| convert(e, size));
    (value, error)
}

/// Converts a wgpu error into the device layer's error.
pub fn convert(error: wgpu::Error, size: u64) -> DeviceError {
    match error {
        wgpu::Error::OutOfMemory { .. } => DeviceError::OutOfDeviceMemory { size },
        wgpu::Error::Validation { description, .. } => DeviceError::Validation {
            message: description,
        },
        wgpu::Error::Internal { description, .. } => DeviceError::Internal {
            message: description,
        },
    }
}
