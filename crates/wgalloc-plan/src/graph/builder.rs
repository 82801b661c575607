//! [`GraphBuilder`]: build a graph from code, node by node in execution order.

use super::{DType, DynamicLen, Graph, GraphError, Node, Role, Tensor, TensorId};

/// Builds a [`Graph`] in execution order. Byte sizes are computed from shape and
/// element type (saturating; [`GraphBuilder::build`] rejects an overflow).
///
/// ```
/// use wgalloc_plan::graph::{DType, GraphBuilder};
/// let mut b = GraphBuilder::new("tiny");
/// let x = b.input("x", DType::F32, &[8]);
/// let w = b.weight("w", DType::F32, &[8]);
/// let y = b.node("mul", &[x, w], &[8], true);
/// b.mark_output(y);
/// let graph = b.build().unwrap();
/// assert_eq!(graph.nodes.len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// An empty graph with this name.
    pub fn new(name: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            graph: Graph {
                name: name.into(),
                tensors: Vec::new(),
                nodes: Vec::new(),
            },
        }
    }

    fn push_tensor(
        &mut self,
        name: String,
        dtype: DType,
        shape: &[u64],
        role: Role,
        view_of: Option<TensorId>,
    ) -> TensorId {
        let id = TensorId(self.graph.tensors.len() as u32);
        let size = shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX);
        self.graph.tensors.push(Tensor {
            id,
            name,
            dtype,
            shape: shape.to_vec(),
            size,
            role,
            view_of,
            dynamic: None,
        });
        id
    }

    /// A graph input, provided before the pass.
    pub fn input(&mut self, name: impl Into<String>, dtype: DType, shape: &[u64]) -> TensorId {
        self.push_tensor(name.into(), dtype, shape, Role::Input, None)
    }

    /// A weight (parameter or constant), placed outside the graph planner.
    pub fn weight(&mut self, name: impl Into<String>, dtype: DType, shape: &[u64]) -> TensorId {
        self.push_tensor(name.into(), dtype, shape, Role::Weight, None)
    }

    /// A view of `of` with a new shape, produced by no node (a reshape the runtime
    /// applies for free). Its element type is its root's; its role is its root's
    /// unless the root is an output (then intermediate).
    pub fn view(&mut self, name: impl Into<String>, of: TensorId, shape: &[u64]) -> TensorId {
        let (dtype, role) = self
            .graph
            .tensor(of)
            .map(|t| (t.dtype, t.role))
            .unwrap_or((DType::F32, Role::Intermediate));
        let role = if role == Role::Output {
            Role::Intermediate
        } else {
            role
        };
        self.push_tensor(name.into(), dtype, shape, role, Some(of))
    }

    /// Appends a node `op(inputs)` whose new f32 output has `shape`. `inplace` says
    /// the op may write its output over `inputs[0]` (elementwise, same size).
    pub fn node(
        &mut self,
        op: &str,
        inputs: &[TensorId],
        shape: &[u64],
        inplace: bool,
    ) -> TensorId {
        self.node_with_params(op, inputs, shape, inplace, &[])
    }

    /// Like [`GraphBuilder::node`], with scalar parameters for the op.
    pub fn node_with_params(
        &mut self,
        op: &str,
        inputs: &[TensorId],
        shape: &[u64],
        inplace: bool,
        params: &[f32],
    ) -> TensorId {
        let name = format!("{op}_{}", self.graph.nodes.len());
        let output = self.push_tensor(name, DType::F32, shape, Role::Intermediate, None);
        self.push_node(op, inputs, output, inplace, params);
        output
    }

    /// Appends a node `op(inputs)` whose new rank-1 f32 output has a length known only
    /// after the node that writes `count` ran (see [`DynamicLen`]): its shape is
    /// `[max_len]` until then (`[0]` when `max_len` is `None`).
    pub fn dynamic_node(
        &mut self,
        op: &str,
        inputs: &[TensorId],
        count: TensorId,
        max_len: Option<u64>,
        params: &[f32],
    ) -> TensorId {
        let name = format!("{op}_{}", self.graph.nodes.len());
        let shape = [max_len.unwrap_or(0)];
        let output = self.push_tensor(name, DType::F32, &shape, Role::Intermediate, None);
        if let Some(t) = self.graph.tensors.get_mut(output.index()) {
            t.dynamic = Some(DynamicLen { count, max_len });
        }
        self.push_node(op, inputs, output, false, params);
        output
    }

    /// Appends a node `op(inputs)` that writes an existing tensor (for example a view
    /// created with [`GraphBuilder::view`], or a tensor pushed with
    /// [`GraphBuilder::tensor`]).
    pub fn push_node(
        &mut self,
        op: &str,
        inputs: &[TensorId],
        output: TensorId,
        inplace: bool,
        params: &[f32],
    ) {
        self.graph.nodes.push(Node {
            op: op.to_string(),
            inputs: inputs.to_vec(),
            output,
            inplace,
            params: params.to_vec(),
        });
    }

    /// Adds a tensor as it is (id is assigned here). For importers and tests that need
    /// exact sizes or roles.
    pub fn tensor(&mut self, mut tensor: Tensor) -> TensorId {
        let id = TensorId(self.graph.tensors.len() as u32);
        tensor.id = id;
        self.graph.tensors.push(tensor);
        id
    }

    /// Renames a tensor.
    pub fn rename(&mut self, id: TensorId, name: impl Into<String>) {
        if let Some(t) = self.graph.tensors.get_mut(id.index()) {
            t.name = name.into();
        }
    }

    /// Marks a produced tensor as a graph output (kept alive to the end of the pass).
    pub fn mark_output(&mut self, id: TensorId) {
        if let Some(t) = self.graph.tensors.get_mut(id.index()) {
            if t.role == Role::Intermediate {
                t.role = Role::Output;
            }
        }
    }

    /// The graph so far, unvalidated.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Validates and returns the graph.
    ///
    /// # Errors
    /// Whatever [`Graph::validate`] finds.
    pub fn build(self) -> Result<Graph, GraphError> {
        self.graph.validate()?;
        Ok(self.graph)
    }
}
