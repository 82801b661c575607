//! [`RuntimeError`]: why a graph context refused a setting or an execution, and
//! [`CallbackError`], what a user's allocation callback returns when it fails.

use thiserror::Error;
use wgalloc_plan::ErrorKind;

use super::MemoryRole;
use crate::device::DeviceError;
use crate::exec::ExecError;
use crate::graph::{GraphError, TensorId};
use crate::plan::PlanError;

/// A user allocation callback's failure, with its own message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct CallbackError {
    /// What the callback says went wrong.
    pub message: String,
}

impl CallbackError {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> CallbackError {
        CallbackError {
            message: message.into(),
        }
    }
}

/// Errors of [`super::GraphContext`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Exactly one of `realloc` and `free_all` was given; the old setting is kept.
    #[error("{role} allocation: realloc given = {realloc_given}, free-all given = {free_all_given}; give both or neither")]
    HalfSetCallbacks {
        /// Which memory the callbacks were for.
        role: MemoryRole,
        /// Whether `realloc` was given.
        realloc_given: bool,
        /// Whether `free_all` was given.
        free_all_given: bool,
    },
    /// A user `realloc` failed; the context keeps no block for that chunk and stays
    /// usable.
    #[error("{role} realloc of chunk {chunk} to {size} bytes failed: {source}")]
    Callback {
        /// Which memory.
        role: MemoryRole,
        /// The chunk.
        chunk: usize,
        /// Bytes asked for.
        size: u64,
        /// The callback's error.
        source: CallbackError,
    },
    /// A `realloc` returned a block smaller than asked for. The block stays the
    /// callback's (its free-all releases it); the context does not use it.
    #[error("{role} realloc of chunk {chunk} returned {got} bytes, {requested} were asked for")]
    ShortBlock {
        /// Which memory.
        role: MemoryRole,
        /// The chunk.
        chunk: usize,
        /// Bytes asked for.
        requested: u64,
        /// Bytes returned.
        got: u64,
    },
    /// A `realloc` returned a block without the usage the kernels need.
    #[error("{role} realloc of chunk {chunk} returned a block with usage {has}, needs {needed}")]
    MissingUsage {
        /// Which memory.
        role: MemoryRole,
        /// The chunk.
        chunk: usize,
        /// The usage needed.
        needed: String,
        /// The usage the block has.
        has: String,
    },
    /// A chunk of planned memory is larger than one buffer of this adapter may be
    /// (never fits on this device; nothing was allocated for the phase).
    #[error("{role} chunk of {size} bytes exceeds the adapter's limit of {max_size} bytes")]
    ChunkTooLarge {
        /// Which memory.
        role: MemoryRole,
        /// Bytes the chunk needs.
        size: u64,
        /// The largest buffer a kernel can bind on this adapter.
        max_size: u64,
    },
    /// A count read back at run time is not a whole number of elements.
    #[error("count tensor {tensor} holds {value}, not a whole number of elements")]
    BadCount {
        /// The count tensor.
        tensor: TensorId,
        /// The value read back.
        value: f32,
    },
    /// A count read back at run time is at or above 2^24: an f32 count there may be
    /// a rounded value (2^24 + 1 reads as 2^24), so the length cannot be trusted.
    #[error("count tensor {tensor} holds {value}, at or above {limit} where f32 counts stop being exact")]
    InexactCount {
        /// The count tensor.
        tensor: TensorId,
        /// The value read back.
        value: f32,
        /// The first count that may be inexact (2^24).
        limit: u64,
    },
    /// A `realloc` returned a block the context already holds for another chunk or
    /// for the other kind of memory: the two would overlap. The block stays the
    /// callback's; the context does not use it.
    #[error("{role} realloc of chunk {chunk} returned the block already held as {held_role} chunk {held_chunk}")]
    BlockAlreadyHeld {
        /// Which memory asked.
        role: MemoryRole,
        /// The chunk asked for.
        chunk: usize,
        /// Which memory holds the block.
        held_role: MemoryRole,
        /// The chunk that holds it.
        held_chunk: usize,
    },
    /// A node whose output has elements reads a tensor that came out empty at run
    /// time (e.g. `count_positive` of an empty `compact`): a kernel cannot bind an
    /// empty range. Nodes whose own output is empty are skipped instead.
    #[error("node {node} ({op}) has a non-empty output but reads tensor {tensor} ({name}), which has 0 elements at run time")]
    EmptyOperand {
        /// The node.
        node: crate::graph::NodeId,
        /// Its op.
        op: String,
        /// The empty tensor it reads.
        tensor: TensorId,
        /// That tensor's name.
        name: String,
    },
    /// A tensor asked of an [`super::Execution`] is not one of the graph's outputs.
    #[error("tensor {tensor} ({name}) is not an output of the graph")]
    NotAnOutput {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// An input or weight has no value in the map given to `execute`.
    #[error("no value given for tensor {tensor} ({name})")]
    MissingValue {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// The context was first executed on another device.
    #[error("the context runs on {first}, not on {given}")]
    OtherDevice {
        /// The device it first ran on.
        first: String,
        /// The device given now.
        given: String,
    },
    /// The graph is malformed, or a length read at run time breaks its bound.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// Planning a phase failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The device refused something (buffer types, weight memory, a copy).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Running a phase failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl RuntimeError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            RuntimeError::Callback { .. }
            | RuntimeError::ShortBlock { .. }
            | RuntimeError::BlockAlreadyHeld { .. }
            | RuntimeError::MissingUsage { .. }
            | RuntimeError::OtherDevice { .. } => ErrorKind::Callback,
            RuntimeError::ChunkTooLarge { .. } => ErrorKind::NeverFits,
            RuntimeError::Graph(error) => error.kind(),
            RuntimeError::Plan(error) => error.kind(),
            RuntimeError::Device(error) => error.kind(),
            RuntimeError::Exec(error) => error.kind(),
            _ => ErrorKind::BadInput,
        }
    }
}
