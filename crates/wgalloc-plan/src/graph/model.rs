//! The graph model: tensors with roles and optional view roots, nodes in execution order.

use std::fmt;

use serde::Serialize;

/// Index of a tensor in [`Graph::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TensorId(pub u32);

impl TensorId {
    /// The position of the tensor in [`Graph::tensors`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// Index of a node in [`Graph::nodes`]; also the node's execution step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The position of the node in [`Graph::nodes`] (its step).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
    /// Raw bytes (ONNX `uint8`).
    U8,
    /// 8-bit signed integer.
    I8,
    /// 16-bit unsigned integer.
    U16,
    /// 16-bit signed integer.
    I16,
    /// 64-bit signed integer (ONNX token ids and shapes).
    I64,
    /// 64-bit unsigned integer.
    U64,
    /// 64-bit float.
    F64,
    /// bfloat16.
    Bf16,
    /// A boolean stored in one byte.
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::I64 | DType::U64 | DType::F64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::Bf16 | DType::U16 | DType::I16 => 2,
            DType::U8 | DType::I8 | DType::Bool => 1,
        }
    }

    /// The type a trace means by its `dtype_bytes`.
    pub fn from_element_size(bytes: u64) -> Option<DType> {
        match bytes {
            4 => Some(DType::F32),
            2 => Some(DType::F16),
            1 => Some(DType::U8),
            _ => None,
        }
    }
}

/// What a tensor is to the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Provided before the pass; lives from the start until its last reader.
    Input,
    /// A parameter or constant: never planned by the graph planner, lives for the
    /// whole pass (placed by the context-tensor allocator instead).
    Weight,
    /// Produced by one node, dies after its last reader.
    Intermediate,
    /// Produced by one node and must survive until the end of the pass.
    Output,
}

impl Role {
    /// The role's name as written in traces.
    pub fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Weight => "weight",
            Role::Intermediate => "intermediate",
            Role::Output => "output",
        }
    }
}

/// A tensor: shape, element type, exact byte size and role. A tensor with
/// `view_of` set has no memory of its own and aliases its root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tensor {
    /// Its id (equal to its position in [`Graph::tensors`]).
    pub id: TensorId,
    /// A human-readable name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost dimension first.
    pub shape: Vec<u64>,
    /// Exact byte size, unpadded.
    pub size: u64,
    /// What the tensor is to the graph.
    pub role: Role,
    /// The tensor this one aliases, if it is a view.
    pub view_of: Option<TensorId>,
    /// Set when the tensor's length is known only after an earlier node ran (see
    /// [`DynamicLen`]); `None` for the usual tensor whose size is known up front.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<DynamicLen>,
}

/// A data-dependent length: the tensor is rank 1 and its element count is the value
/// of `count` (a one-element f32 tensor holding a whole number), which an earlier node
/// writes. Until that node has run, `shape` is `[max_len]` (`[0]` when unbounded) and
/// `size` is the matching byte size: a planner that sees the unresolved graph plans
/// the bound. [`Graph::resolve_lengths`] turns it into an ordinary tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct DynamicLen {
    /// The one-element tensor whose value is the length.
    pub count: TensorId,
    /// An upper bound on the length, when the graph knows one.
    pub max_len: Option<u64>,
}

impl Tensor {
    /// Whether the tensor is a view (has no memory of its own).
    pub fn is_view(&self) -> bool {
        self.view_of.is_some()
    }
}

/// One operation in execution order, producing one tensor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    /// The op's name (`add`, `matmul`, `conv2d`, ...). Kernels are looked up by it.
    pub op: String,
    /// Tensors read, in the op's argument order.
    pub inputs: Vec<TensorId>,
    /// The tensor written.
    pub output: TensorId,
    /// Whether the op may write its output in place over `inputs[0]`
    /// (elementwise: same size and layout).
    pub inplace: bool,
    /// Scalar parameters of the op (a scale factor, an epsilon, ...).
    pub params: Vec<f32>,
}

/// A compute graph: tensors and the nodes that produce them, in execution order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Graph {
    /// The graph's name.
    pub name: String,
    /// Every tensor; `tensors[i].id == TensorId(i)`.
    pub tensors: Vec<Tensor>,
    /// Nodes in execution order.
    pub nodes: Vec<Node>,
}

impl Graph {
    /// The tensor with this id, if it exists.
    pub fn tensor(&self, id: TensorId) -> Option<&Tensor> {
        self.tensors.get(id.index())
    }

    /// The node at this step, if it exists.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// Follows `view_of` to the tensor that owns the memory. Returns `id` itself for a
    /// non-view, and `None` for an unknown id or a cyclic chain (see [`Graph::validate`]).
    pub fn root_of(&self, id: TensorId) -> Option<TensorId> {
        let mut current = id;
        for _ in 0..=self.tensors.len() {
            let tensor = self.tensor(current)?;
            match tensor.view_of {
                Some(next) => current = next,
                None => return Some(current),
            }
        }
        None
    }

    /// Whether the tensor's memory is placed by the graph planner: a non-view that is
    /// not a weight (a view whose root is a weight belongs to the weights).
    pub fn is_planned(&self, id: TensorId) -> bool {
        self.tensor(id)
            .is_some_and(|t| t.view_of.is_none() && t.role != Role::Weight)
    }

    /// Ids of all tensors that are planned (see [`Graph::is_planned`]).
    pub fn planned_tensors(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.tensors
            .iter()
            .filter(|t| t.view_of.is_none() && t.role != Role::Weight)
            .map(|t| t.id)
    }
}
