//! [`ErrorKind`]: what a caller can do about an error. It depends on nothing, so every
//! layer's error, in this crate and above it, can name it.

/// The kind of an error: what the caller can do about it. Every layer's error enum
/// (here and in `wgalloc`) has a `kind()` that returns one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input is malformed or inconsistent: a graph, trace, CSV, plan, argument or
    /// setting. Fix the input; retrying the same call fails the same way.
    BadInput,
    /// Never fits on this device: a tensor, chunk, dispatch or table larger than a
    /// limit of the device (`max_buffer_size`, `max_storage_buffer_binding_size`,
    /// workgroup counts, 32-bit indexing) or than a capacity asked for. Found before
    /// wgpu is called; freeing memory does not help: split the work or use a larger
    /// device.
    NeverFits,
    /// Does not fit now: the device (or a fixed buffer) ran out of memory. Free
    /// something and retry.
    OutOfMemory,
    /// A user callback or allocator failed or broke its contract (an error it
    /// returned, a block too small, misaligned or of another device).
    Callback,
    /// The adapter, device or driver failed: no adapter, a refused device, a wgpu
    /// validation or internal error, a failed map or poll.
    Device,
    /// Reading a file failed.
    Io,
}

impl ErrorKind {
    /// A short phrase for messages (`"never fits on this device"`, ...).
    pub fn describe(self) -> &'static str {
        match self {
            ErrorKind::BadInput => "bad input",
            ErrorKind::NeverFits => "never fits on this device",
            ErrorKind::OutOfMemory => "does not fit now: out of memory",
            ErrorKind::Callback => "a user callback failed",
            ErrorKind::Device => "device failure",
            ErrorKind::Io => "i/o",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}
