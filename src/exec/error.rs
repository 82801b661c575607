//! Errors of the execution layer.

use thiserror::Error;
use wgalloc_plan::ErrorKind;

use crate::device::DeviceError;
use crate::graph::{NodeId, TensorId};

/// Why running a planned graph (or evaluating it on the CPU) failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ExecError {
    /// f16 storage was asked of a kernel that has only its f32 form
    /// ([`crate::exec::Shader::has_f16`]).
    #[error("{shader} has no f16 form: store this node's tensors as f32")]
    NoF16Kernel {
        /// The shader file.
        shader: &'static str,
    },
    /// f16 storage was asked of a device whose adapter does not offer `shader-f16`
    /// (wgpu::Features::SHADER_F16): run the graph with f32 tensors.
    #[error("this adapter does not offer shader-f16 (wgpu::Features::SHADER_F16): f16 tensors cannot run on it; use f32")]
    ShaderF16Missing,
    /// An op with no kernel: not built in, and no user op of that name is registered
    /// on the device ([`crate::exec::register_op`]).
    #[error(
        "node {node}: no kernel for op {op:?}: not built in, and not registered on this GpuContext (user ops belong to the context they are registered on and its clones; a context from another GpuContext::adopt of the same wgpu::Device starts with none)"
    )]
    NoKernel {
        /// The node's step.
        node: NodeId,
        /// The op.
        op: String,
    },
    /// A node has the wrong number of inputs for its op.
    #[error("node {node}: op {op:?} takes {expected} inputs, got {got}")]
    WrongArity {
        /// The node's step.
        node: NodeId,
        /// The op.
        op: String,
        /// Inputs the op takes.
        expected: usize,
        /// Inputs the node has.
        got: usize,
    },
    /// A node's tensors do not have the shapes or types its op needs.
    #[error("node {node}: op {op:?}: {problem}")]
    BadShape {
        /// The node's step.
        node: NodeId,
        /// The op.
        op: String,
        /// What is wrong, with the numbers.
        problem: String,
    },
    /// A node names a tensor the graph does not have.
    #[error("node {node}: unknown tensor {tensor}")]
    UnknownTensor {
        /// The node's step.
        node: NodeId,
        /// The id named.
        tensor: TensorId,
    },
    /// A dimension or element count does not fit the kernels' 32-bit indexing.
    #[error("node {node}: {len} elements exceed the kernels' 32-bit indexing (max {max})")]
    TooManyElements {
        /// The node's step.
        node: NodeId,
        /// The element count.
        len: u64,
        /// The largest count supported.
        max: u64,
    },
    /// A dispatch needs more workgroups than the device allows in one dimension.
    #[error("node {node}: {groups} workgroups exceed the device's {max} per dimension")]
    TooManyWorkgroups {
        /// The node's step.
        node: NodeId,
        /// Workgroups needed in the offending dimension.
        groups: u64,
        /// `max_compute_workgroups_per_dimension`.
        max: u32,
    },
    /// No layer of the tensor memory places this tensor (or its root).
    #[error("tensor {tensor} ({name}) has no placement in any memory layer")]
    NotPlaced {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// A placement names a chunk that has no buffer.
    #[error(
        "tensor {tensor} is placed in buffer {buffer} chunk {chunk}, which has no wgpu buffer"
    )]
    MissingChunk {
        /// The tensor.
        tensor: TensorId,
        /// The plan's buffer id.
        buffer: usize,
        /// The chunk.
        chunk: usize,
    },
    /// A tensor is larger than the placement reserved for it (or its root).
    #[error("tensor {tensor} needs {size} bytes but its placement holds {placement_size}")]
    LargerThanPlacement {
        /// The tensor.
        tensor: TensorId,
        /// Bytes it needs (rounded up to 4).
        size: u64,
        /// Bytes its placement reserves.
        placement_size: u64,
    },
    /// A tensor's range ends past the end of its wgpu buffer.
    #[error("tensor {tensor} at [{offset}, {offset}+{size}) runs past its buffer of {buffer_size} bytes")]
    PastBufferEnd {
        /// The tensor.
        tensor: TensorId,
        /// Its offset.
        offset: u64,
        /// Its bound size.
        size: u64,
        /// The buffer's size.
        buffer_size: u64,
    },
    /// A tensor's offset is not a multiple of the device's storage offset alignment.
    #[error("tensor {tensor} at offset {offset} is not aligned to {alignment} bytes")]
    MisalignedOffset {
        /// The tensor.
        tensor: TensorId,
        /// Its offset.
        offset: u64,
        /// `min_storage_buffer_offset_alignment`.
        alignment: u32,
    },
    /// A tensor is larger than the device's largest storage binding.
    #[error(
        "tensor {tensor} of {size} bytes exceeds the largest storage binding ({max_size} bytes)"
    )]
    BindingTooLarge {
        /// The tensor.
        tensor: TensorId,
        /// Its bound size.
        size: u64,
        /// `max_storage_buffer_binding_size`.
        max_size: u64,
    },
    /// A tensor of size zero cannot be bound.
    #[error("tensor {tensor} is empty and cannot be bound")]
    EmptyTensor {
        /// The tensor.
        tensor: TensorId,
    },
    /// A node's output overlaps one of its inputs other than as an in-place output over
    /// its first input (same range): a plan bug. (Inputs that overlap each other are
    /// not an error: the executor stages the later one through its workspace.)
    #[error("node {node}: tensors {first} and {second} overlap in memory")]
    OverlappingBindings {
        /// The node's step.
        node: NodeId,
        /// One tensor.
        first: TensorId,
        /// The other.
        second: TensorId,
    },
    /// The executor's workspace would exceed the device's largest buffer: the inputs a
    /// node stages (see [`crate::exec::Executor`]) need more than `max` bytes.
    #[error("node {node}: staging its overlapping inputs needs a {size}-byte workspace, over the device's {max}-byte buffer limit")]
    WorkspaceTooLarge {
        /// The node's step.
        node: NodeId,
        /// Workspace bytes the node needs (`u64::MAX` when the sum overflows).
        size: u64,
        /// `max_buffer_size`.
        max: u64,
    },
    /// The output was placed over the first input but the op has no in-place kernel.
    #[error(
        "node {node}: op {op:?} has no in-place kernel, but the node is marked in place (its output may share input 0's memory): clear the node's in-place flag or give the op an in-place entry point"
    )]
    NoInPlaceKernel {
        /// The node's step.
        node: NodeId,
        /// The op.
        op: String,
    },
    /// The device layer failed: wgpu reported an error (validation, out of memory, a
    /// failed map or poll) or a transfer was refused. The [`DeviceError`] keeps its kind
    /// (e.g. [`DeviceError::OutOfDeviceMemory`]: "does not fit now").
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The uniform parameters of one run outgrew the 32-bit dynamic offsets wgpu takes.
    #[error(
        "uniform parameters reach offset {offset}, past the {max} a dynamic offset can address"
    )]
    UniformOffsetOverflow {
        /// The offset that does not fit.
        offset: u64,
        /// The largest dynamic offset.
        max: u64,
    },
    /// A node id past the graph's nodes.
    #[error("unknown node {node}: the graph has {nodes} nodes")]
    UnknownNode {
        /// The id asked for.
        node: NodeId,
        /// How many nodes the graph has.
        nodes: usize,
    },
    /// Data given for a tensor has the wrong length.
    #[error("tensor {tensor}: expected {expected} bytes of data, got {got}")]
    WrongDataSize {
        /// The tensor.
        tensor: TensorId,
        /// Its size.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// The CPU evaluation has no value for an input or weight.
    #[error("tensor {tensor} ({name}) is read before any value was given or computed")]
    MissingValue {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// The checksum run found a graph it cannot run (a read of memory nothing wrote).
    #[error("checksum run: {}, tensor {tensor}: {problem}", node.map_or_else(|| "the final check of the outputs".to_string(), |n| format!("node {n}")))]
    ChecksumGraph {
        /// The node (`None`: the final check of the graph outputs after the last node).
        node: Option<NodeId>,
        /// The tensor read.
        tensor: TensorId,
        /// What is wrong.
        problem: String,
    },
    /// The checksum run cannot address a tensor in the plan's memory (no placement,
    /// misaligned, past its reservation or its chunk).
    #[error("checksum run: tensor {tensor}: {problem}")]
    ChecksumPlacement {
        /// The tensor.
        tensor: TensorId,
        /// What is wrong.
        problem: String,
    },
    /// A quantity of the checksum run exceeds a device or shader limit.
    #[error("checksum run: {what} needs {needed}, the limit is {limit}")]
    ChecksumLimit {
        /// What exceeds the limit.
        what: String,
        /// How much is needed.
        needed: u64,
        /// The limit.
        limit: u64,
    },
    /// A user op was refused at registration.
    #[error(transparent)]
    Register(crate::exec::RegisterError),
    /// The CPU reference met a user op registered without a CPU reference.
    #[error("node {node}: user op {op:?} has no CPU reference (UserOp::cpu)")]
    NoCpuReference {
        /// The node's step.
        node: NodeId,
        /// The op.
        op: String,
    },
    /// wgpu reported an error (validation, out of memory, mapping, polling).
    #[error("gpu error while {stage}: {source}")]
    Gpu {
        /// What was being done.
        stage: &'static str,
        /// What wgpu reported, with its kind kept.
        source: DeviceError,
    },
}

impl From<crate::exec::RegisterError> for ExecError {
    fn from(error: crate::exec::RegisterError) -> ExecError {
        ExecError::Register(error)
    }
}

impl ExecError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ExecError::Device(error) | ExecError::Gpu { source: error, .. } => error.kind(),
            ExecError::Register(error) => error.kind(),
            ExecError::TooManyElements { .. }
            | ExecError::TooManyWorkgroups { .. }
            | ExecError::BindingTooLarge { .. }
            | ExecError::WorkspaceTooLarge { .. }
            | ExecError::ChecksumLimit { .. }
            | ExecError::UniformOffsetOverflow { .. }
            | ExecError::ShaderF16Missing => ErrorKind::NeverFits,
            _ => ErrorKind::BadInput,
        }
    }
}
