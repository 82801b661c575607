//! Errors of the graph layer: malformed graphs and traces.

use crate::ErrorKind;
use thiserror::Error;

use super::{NodeId, TensorId};

/// Why a graph or trace was rejected. Every variant names the tensor or node at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What the operating system said.
        kind: std::io::ErrorKind,
        /// Its message.
        message: String,
    },
    /// The text is not JSON at all (or not the JSON shape expected).
    #[error("not a valid trace: {message}")]
    NotJson {
        /// What the JSON parser said, with line and column.
        message: String,
    },
    /// The file was empty.
    #[error("empty input")]
    Empty,
    /// The `format` tag is not `tensor-graph-trace/1`.
    #[error("unsupported trace format {found:?} (expected {expected:?})")]
    WrongFormat {
        /// What the file says.
        found: String,
        /// What this reader understands.
        expected: &'static str,
    },
    /// A required field is missing.
    #[error("{context}: missing field `{field}`")]
    MissingField {
        /// Where (e.g. `tensor 3`, `node 7`, `trace`).
        context: String,
        /// The missing field's name.
        field: &'static str,
    },
    /// A field has the wrong type or an invalid value (negative, fractional, unknown role...).
    #[error("{context}: field `{field}` {problem}")]
    BadField {
        /// Where (e.g. `tensor 3`).
        context: String,
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// `tensors[i].id != i`.
    #[error("tensor at position {position} has id {id}; ids must equal positions")]
    IdMismatch {
        /// Its position in the list.
        position: usize,
        /// The id it declares.
        id: u64,
    },
    /// A node or view refers to a tensor id that does not exist.
    #[error("{context} refers to unknown tensor {tensor}")]
    UnknownTensor {
        /// Who refers to it (e.g. `node 4 (add)`).
        context: String,
        /// The missing id.
        tensor: TensorId,
    },
    /// Two nodes produce the same tensor.
    #[error("tensor {tensor} ({name}) is produced twice: by node {first} and node {second}")]
    ProducedTwice {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// The first producer.
        first: NodeId,
        /// The second producer.
        second: NodeId,
    },
    /// A node reads a tensor that a later node produces (or that no node produces).
    #[error("node {node} ({op}) reads tensor {tensor} ({name}) before it is produced")]
    ReadBeforeProduced {
        /// The reading node.
        node: NodeId,
        /// Its op.
        op: String,
        /// The tensor read too early.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// A node writes a tensor that must be provided from outside (an input or weight).
    #[error("node {node} ({op}) produces tensor {tensor} ({name}), which is a {role}")]
    ProducesInputOrWeight {
        /// The node.
        node: NodeId,
        /// Its op.
        op: String,
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// `input` or `weight`.
        role: &'static str,
    },
    /// An intermediate or output tensor that no node produces.
    #[error("tensor {tensor} ({name}) is an {role} but no node produces it")]
    NeverProduced {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its role.
        role: &'static str,
    },
    /// Following `view_of` from this tensor comes back to it.
    #[error("view chain from tensor {tensor} ({name}) is cyclic")]
    ViewCycle {
        /// A tensor on the cycle.
        tensor: TensorId,
        /// Its name.
        name: String,
    },
    /// A tensor with role `view` has no `view_of`, or a view's root is not a tensor.
    #[error("view tensor {tensor} ({name}) has no root: {problem}")]
    ViewWithoutRoot {
        /// The view.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// What is missing.
        problem: String,
    },
    /// A byte size does not fit in 64 bits (shape product times element size), or
    /// disagrees with the shape.
    #[error("tensor {tensor} ({name}): {problem}")]
    BadSize {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// What overflowed or disagreed.
        problem: String,
    },
    /// A node with no inputs where the op needs one, or other structural node error.
    #[error("node {node} ({op}): {problem}")]
    BadNode {
        /// The node.
        node: NodeId,
        /// Its op.
        op: String,
        /// What is wrong.
        problem: String,
    },
    /// A row of an interval CSV is malformed.
    #[error("line {line}: {problem}")]
    BadCsvRow {
        /// 1-based line number in the file.
        line: usize,
        /// What is wrong with the row.
        problem: String,
    },
    /// A tensor with a data-dependent length breaks one of [`super::DynamicLen`]'s
    /// rules (its count is not a one-element f32 tensor, it is a view or an input,
    /// it is not rank 1, its shape is not `[max_len]`, a view aliases it).
    #[error("dynamic tensor {tensor} ({name}): {problem}")]
    BadDynamicLen {
        /// The dynamic tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Which rule it breaks.
        problem: String,
    },
    /// The node that writes a dynamic tensor's count does not run before the node that
    /// writes the dynamic tensor (or no node writes the count).
    #[error("dynamic tensor {tensor} is written by node {producer}, but its count {count} is written by {count_producer:?}")]
    CountTooLate {
        /// The dynamic tensor.
        tensor: TensorId,
        /// Its count tensor.
        count: TensorId,
        /// The node that writes the dynamic tensor.
        producer: NodeId,
        /// The node that writes the count, if any.
        count_producer: Option<NodeId>,
    },
    /// A length read at run time exceeds the bound the graph declared.
    #[error("dynamic tensor {tensor} has {len} elements at run time, above its bound {max_len}")]
    LengthAboveBound {
        /// The dynamic tensor.
        tensor: TensorId,
        /// The length found.
        len: u64,
        /// The declared bound.
        max_len: u64,
    },
    /// The bytes are not an ONNX model (a truncated or corrupt protobuf).
    #[error("not a valid ONNX model: {message}")]
    NotOnnx {
        /// What the protobuf decoder said.
        message: String,
    },
    /// An ONNX value has an element type the importer cannot size (string, complex,
    /// 8-bit and 4-bit floats, or a number outside `TensorProto.DataType`).
    #[error("value {value:?}: unsupported ONNX element type {elem_type}")]
    UnknownElementType {
        /// The value.
        value: String,
        /// Its `TensorProto.DataType` number.
        elem_type: i32,
    },
    /// A node reads a value that no node, initializer or graph input defines.
    #[error("{node} reads value {value:?}, which nothing produces")]
    UnknownValue {
        /// The reading node (`node 12 "name" (Op)`).
        node: String,
        /// The value's name.
        value: String,
    },
    /// A node reads a value that a later node produces: the file's nodes are not in
    /// topological order (or form a cycle).
    #[error("{node} reads value {value:?} before {producer} produces it (nodes not in topological order, or a cycle)")]
    NotTopological {
        /// The reading node.
        node: String,
        /// The value read too early.
        value: String,
        /// The later node that produces it.
        producer: String,
    },
    /// Two nodes (or a node and an initializer or graph input) define the same value.
    #[error("value {value:?} is defined twice: by {first} and by {second}")]
    DefinedTwice {
        /// The value.
        value: String,
        /// The first definition.
        first: String,
        /// The second one.
        second: String,
    },
    /// A value's shape is neither in the file nor inferable.
    #[error("value {value:?} (written by {node}): shape unknown: {problem}")]
    ShapeUnknown {
        /// The value.
        value: String,
        /// The node that writes it (or `graph input`).
        node: String,
        /// Why inference could not find it.
        problem: String,
    },
    /// A symbolic dimension that `--dim` did not give and inference could not find.
    #[error("symbolic dimension {dim:?} of value {value:?} is not resolved (pass --dim {dim}=N)")]
    UnresolvedDim {
        /// The symbol.
        dim: String,
        /// A value whose shape uses it.
        value: String,
    },
    /// A dimension is negative, or the value's byte size overflows 64 bits.
    #[error("value {value:?}: {problem}")]
    BadShape {
        /// The value.
        value: String,
        /// What is wrong (the dimension or the product that overflowed).
        problem: String,
    },
    /// An ONNX node the importer cannot map (a control-flow op with a subgraph).
    #[error("{node}: unsupported: {problem}")]
    UnsupportedNode {
        /// The node.
        node: String,
        /// Why.
        problem: String,
    },
}

impl GraphError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            GraphError::Io { .. } => ErrorKind::Io,
            _ => ErrorKind::BadInput,
        }
    }

    /// The error for a file that could not be read.
    pub(crate) fn io(path: &std::path::Path, error: &std::io::Error) -> GraphError {
        GraphError::Io {
            path: path.display().to_string(),
            kind: error.kind(),
            message: error.to_string(),
        }
    }
}
