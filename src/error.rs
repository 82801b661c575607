//! The crate-wide error: one variant per layer, each wrapping that layer's own enum.

use thiserror::Error as ThisError;

pub use wgalloc_plan::ErrorKind;

/// Any error wgalloc returns.
#[derive(Debug, ThisError)]
#[non_exhaustive]
pub enum Error {
    /// A graph, trace or interval file was malformed.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// Planning failed (a tensor that can never fit, a buffer that ran out, a bad plan).
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    /// The adapter, device or a buffer allocation failed.
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
    /// Running a planned graph failed.
    #[error(transparent)]
    Exec(#[from] crate::exec::ExecError),
    /// The built-in model's configuration was refused.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// A GPT-2 checkpoint, or the tokens given to it, were refused.
    #[error(transparent)]
    Checkpoint(#[from] crate::model::CheckpointError),
    /// The KV cache refused a configuration, a page or a step.
    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
    /// Registering an allocator on a stream, executing or synchronizing it failed.
    #[error(transparent)]
    Stream(#[from] crate::stream::StreamError),
    /// A graph context refused a setting or an execution.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that could not be read.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The pre-packed weight cache refused a store, a pack or a packed graph.
    #[error(transparent)]
    Prepack(#[from] crate::prepack::PrepackError),
    /// A session could not be made or could not run.
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
}

impl From<crate::exec::RegisterError> for Error {
    fn from(error: crate::exec::RegisterError) -> Error {
        Error::Exec(crate::exec::ExecError::Register(error))
    }
}

impl Error {
    /// What a caller can do about the error: fix the input, give up on this device,
    /// free memory and retry, look at a callback, or look at the device. The kind
    /// survives every layer: an out-of-memory inside an allocation inside an execution
    /// is still [`ErrorKind::OutOfMemory`] here.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Graph(e) => e.kind(),
            Error::Plan(e) => e.kind(),
            Error::Device(e) => e.kind(),
            Error::Exec(e) => e.kind(),
            Error::Model(e) => e.kind(),
            Error::Checkpoint(e) => e.kind(),
            Error::Kv(e) => e.kind(),
            Error::Stream(e) => e.kind(),
            Error::Runtime(e) => e.kind(),
            Error::Prepack(e) => e.kind(),
            Error::Session(e) => e.kind(),
            Error::Io { .. } => ErrorKind::Io,
        }
    }
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
