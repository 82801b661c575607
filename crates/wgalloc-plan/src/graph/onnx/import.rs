//! Maps a decoded ONNX graph onto a [`Graph`]: checks that values are defined once and
//! read after they are written, folds constants, finds every shape (from the file, else
//! from a shape-inference library), and builds tensors and nodes (docs/onnx.md describes
//! the mapping).

use std::collections::{HashMap, HashSet};

use super::ops::{classify, is_commutative, is_random, node_op_name, OpKind};
use super::proto::{GraphProto, NodeProto, ATTRIBUTE_GRAPH, ATTRIBUTE_GRAPHS};
use super::values::{from_tensor, from_value_info, merge, Dim, ValueType};
use super::OnnxOptions;
use crate::graph::{DType, Graph, GraphError, Node, Role, Tensor, TensorId};

/// Where a value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Def {
    Input,
    Initializer,
    Node(usize),
}

/// How node `index` is named in errors: `node 12 "Conv_3" (Conv)`.
fn describe(index: usize, node: &NodeProto) -> String {
    if node.name.is_empty() {
        format!("node {index} ({})", node.op_type)
    } else {
        format!("node {index} {:?} ({})", node.name, node.op_type)
    }
}

fn describe_def(def: Def, nodes: &[NodeProto]) -> String {
    match def {
        Def::Input => "a graph input".into(),
        Def::Initializer => "an initializer".into(),
        Def::Node(i) => describe(i, &nodes[i]),
    }
}

fn present(names: &[String]) -> impl Iterator<Item = &str> {
    names.iter().map(String::as_str).filter(|n| !n.is_empty())
}

/// What a shape-inference library found for the values the file does not type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inferred {
    /// Shape and element type of each value the library pinned down, by name.
    pub types: HashMap<String, (Vec<u64>, DType)>,
    /// The library's first error, when its analysis stopped short somewhere.
    pub error: Option<String>,
}

/// The import of one graph, built up in passes.
struct Importer<'a> {
    graph: &'a GraphProto,
    options: &'a OnnxOptions,
    defs: HashMap<&'a str, Def>,
    types: HashMap<&'a str, ValueType>,
    constants: HashSet<&'a str>,
    shapes: HashMap<&'a str, Vec<u64>>,
    dtypes: HashMap<&'a str, DType>,
    /// Why a value has no shape (raised only if the value is needed).
    missing: HashMap<&'a str, GraphError>,
}

/// Maps `graph` onto a [`Graph`] named `name`. `library` runs shape inference on the
/// whole model; it is called at most once, and only when a node's output has no complete
/// shape and element type in the file (`None`: no library is built in).
///
/// # Errors
/// A [`GraphError`] naming the node or value at fault.
pub fn import(
    graph: &GraphProto,
    name: &str,
    options: &OnnxOptions,
    library: impl FnOnce() -> Option<Inferred>,
) -> Result<Graph, GraphError> {
    let mut importer = Importer {
        graph,
        options,
        defs: HashMap::new(),
        types: HashMap::new(),
        constants: HashSet::new(),
        shapes: HashMap::new(),
        dtypes: HashMap::new(),
        missing: HashMap::new(),
    };
    importer.definitions()?;
    importer.collect_types()?;
    importer.fold_constants();
    importer.find_shapes(library)?;
    let built = importer.build(name)?;
    built.validate()?;
    Ok(built)
}

impl<'a> Importer<'a> {
    /// Every value defined once; every read after its definition.
    fn definitions(&mut self) -> Result<(), GraphError> {
        let nodes = &self.graph.node;
        let define = |defs: &mut HashMap<&'a str, Def>, name: &'a str, def: Def| match defs
            .insert(name, def)
        {
            Some(first) => Err(GraphError::DefinedTwice {
                value: name.to_string(),
                first: describe_def(first, nodes),
                second: describe_def(def, nodes),
            }),
            None => Ok(()),
        };
        let mut defs = HashMap::new();
        for init in &self.graph.initializer {
            define(&mut defs, &init.name, Def::Initializer)?;
        }
        for input in &self.graph.input {
            // Before IR 4 initializers were listed as inputs too: they stay weights.
            if defs.get(input.name.as_str()) != Some(&Def::Initializer) {
                define(&mut defs, &input.name, Def::Input)?;
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            if let Some(a) = node
                .attribute
                .iter()
                .find(|a| a.r#type == ATTRIBUTE_GRAPH || a.r#type == ATTRIBUTE_GRAPHS)
            {
                return Err(GraphError::UnsupportedNode {
                    node: describe(i, node),
                    problem: format!("attribute {:?} is a subgraph (control flow)", a.name),
                });
            }
            for out in present(&node.output) {
                define(&mut defs, out, Def::Node(i))?;
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            for input in present(&node.input) {
                match defs.get(input) {
                    None => {
                        return Err(GraphError::UnknownValue {
                            node: describe(i, node),
                            value: input.to_string(),
                        })
                    }
                    Some(Def::Node(j)) if *j >= i => {
                        return Err(GraphError::NotTopological {
                            node: describe(i, node),
                            value: input.to_string(),
                            producer: describe(*j, &nodes[*j]),
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        for output in &self.graph.output {
            if !defs.contains_key(output.name.as_str()) {
                return Err(GraphError::UnknownValue {
                    node: "the graph's output list".into(),
                    value: output.name.clone(),
                });
            }
        }
        self.defs = defs;
        Ok(())
    }

    fn add_type(&mut self, name: &'a str, t: ValueType) {
        let merged = match self.types.get(name) {
            Some(old) => merge(old, &t),
            None => t,
        };
        self.types.insert(name, merged);
    }

    /// Element types and shapes the file states.
    fn collect_types(&mut self) -> Result<(), GraphError> {
        let dims = &self.options.dims;
        for init in &self.graph.initializer {
            self.add_type(&init.name, from_tensor(init, &init.name)?);
        }
        let infos = self
            .graph
            .input
            .iter()
            .chain(&self.graph.output)
            .chain(&self.graph.value_info);
        for info in infos {
            self.add_type(&info.name, from_value_info(info, dims)?);
        }
        for node in &self.graph.node {
            let Some(out) = present(&node.output).next() else {
                continue;
            };
            if node.op_type != "Constant" {
                continue;
            }
            for a in &node.attribute {
                let t = match (a.name.as_str(), &a.t) {
                    ("value", Some(t)) => from_tensor(t, out)?,
                    ("value_int", _) => scalar_type(DType::I64, None),
                    ("value_float", _) => scalar_type(DType::F32, None),
                    ("value_ints", _) => scalar_type(DType::I64, Some(a.ints.len())),
                    _ => continue,
                };
                self.add_type(out, t);
            }
        }
        Ok(())
    }

    /// Marks every value known before the pass: initializers, and the outputs of nodes
    /// that read only constants, or only shapes.
    fn fold_constants(&mut self) {
        for init in &self.graph.initializer {
            self.constants.insert(&init.name);
        }
        for node in &self.graph.node {
            let kind = classify(&node.domain, &node.op_type);
            let constant = !is_random(&node.op_type)
                && (kind == OpKind::ShapeOf
                    || present(&node.input).all(|i| self.constants.contains(i)));
            if constant {
                for out in present(&node.output) {
                    self.constants.insert(out);
                }
            }
        }
    }

    /// The shape and element type of every value: from the file, else from `library`.
    /// A node output neither gives is an error only if the graph needs it
    /// (`self.missing`).
    fn find_shapes(
        &mut self,
        library: impl FnOnce() -> Option<Inferred>,
    ) -> Result<(), GraphError> {
        for input in &self.graph.input {
            let name = input.name.as_str();
            if self.defs.get(name) != Some(&Def::Input) {
                continue;
            }
            let t = self.types.get(name).cloned().unwrap_or_default();
            let shape = t
                .concrete()
                .ok_or_else(|| unresolved(&t, name, "a graph input"))?;
            let dtype = t.dtype.ok_or_else(|| GraphError::ShapeUnknown {
                value: name.to_string(),
                node: "a graph input".into(),
                problem: "no element type".into(),
            })?;
            self.shapes.insert(name, shape);
            self.dtypes.insert(name, dtype);
        }
        let mut unknown = Vec::new();
        for init in &self.graph.initializer {
            self.known(&init.name);
        }
        for (i, node) in self.graph.node.iter().enumerate() {
            for out in present(&node.output) {
                if !self.known(out) {
                    unknown.push((i, out));
                }
            }
        }
        if unknown.is_empty() {
            return Ok(());
        }
        let inferred = library();
        for (i, out) in unknown {
            let declared = self.types.get(out).cloned().unwrap_or_default();
            match inferred.as_ref().and_then(|l| l.types.get(out)) {
                Some((shape, dtype)) => {
                    self.shapes.insert(out, shape.clone());
                    self.dtypes.insert(out, declared.dtype.unwrap_or(*dtype));
                }
                None => {
                    let node = describe(i, &self.graph.node[i]);
                    let problem = not_found(&declared, inferred.as_ref());
                    let error = GraphError::ShapeUnknown {
                        value: out.to_string(),
                        node,
                        problem,
                    };
                    self.missing.insert(out, error);
                }
            }
        }
        Ok(())
    }

    /// Records the shape and element type of `name` when the file gives both; whether
    /// it does.
    fn known(&mut self, name: &'a str) -> bool {
        let Some(t) = self.types.get(name) else {
            return false;
        };
        match (t.concrete(), t.dtype) {
            (Some(shape), Some(dtype)) => {
                self.shapes.insert(name, shape);
                self.dtypes.insert(name, dtype);
                true
            }
            _ => false,
        }
    }

    /// Builds the graph: inputs, the runtime nodes (constants folded away) and the
    /// weights they read.
    fn build(&self, name: &str) -> Result<Graph, GraphError> {
        let mut b = Builder {
            importer: self,
            graph: Graph {
                name: name.to_string(),
                tensors: Vec::new(),
                nodes: Vec::new(),
            },
            ids: HashMap::new(),
            outputs: self.graph.output.iter().map(|o| o.name.as_str()).collect(),
        };
        for input in &self.graph.input {
            if self.defs.get(input.name.as_str()) == Some(&Def::Input) {
                b.value(&input.name, Role::Input, None)?;
            }
        }
        for node in &self.graph.node {
            if present(&node.output).all(|o| self.constants.contains(o)) {
                continue;
            }
            b.node(node)?;
        }
        Ok(b.graph)
    }
}

/// The error for a value whose shape stays unknown: its unresolved symbol if it has
/// one, else that the shape is unknown.
fn unresolved(t: &ValueType, value: &str, node: &str) -> GraphError {
    match t.symbol() {
        Some(dim) => GraphError::UnresolvedDim {
            dim: dim.to_string(),
            value: value.to_string(),
        },
        None => GraphError::ShapeUnknown {
            value: value.to_string(),
            node: node.to_string(),
            problem: match &t.dims {
                None => "its rank is unknown".into(),
                Some(_) => "a dimension is unknown".into(),
            },
        },
    }
}

fn scalar_type(dtype: DType, len: Option<usize>) -> ValueType {
    ValueType {
        dtype: Some(dtype),
        dims: Some(len.map(|n| vec![Dim::Fixed(n as u64)]).unwrap_or_default()),
    }
}

/// Why a node output has no shape: what the file leaves open, and what the library
/// (or its absence) adds.
fn not_found(declared: &ValueType, inferred: Option<&Inferred>) -> String {
    let file = match (&declared.dims, declared.symbol(), declared.dtype) {
        (_, Some(dim), _) => format!("its value_info leaves dimension {dim:?} symbolic"),
        (None, _, _) => "no value_info gives its shape".to_string(),
        (Some(_), _, None) => "no value_info gives its element type".to_string(),
        (Some(_), _, Some(_)) => "its value_info leaves a dimension unknown".to_string(),
    };
    match inferred {
        None => format!(
            "{file}; build wgalloc with its default feature onnx-infer \
             (`--features onnx-infer`) to infer it with tract, or run \
             `onnx.shape_inference.infer_shapes` on the file"
        ),
        Some(Inferred { error: Some(e), .. }) => format!(
            "{file}, and tract's shape inference did not find it (it reads no external \
             data, so a shape held in an external initializer is unknown to it): {e}"
        ),
        Some(Inferred { error: None, .. }) => format!(
            "{file}, and tract's shape inference did not find it (it reads no external \
             data, so a shape held in an external initializer is unknown to it)"
        ),
    }
}

/// The tensors and nodes under construction.
struct Builder<'i, 'a> {
    importer: &'i Importer<'a>,
    graph: Graph,
    ids: HashMap<&'a str, TensorId>,
    outputs: HashSet<&'a str>,
}

impl<'a> Builder<'_, 'a> {
    /// The tensor of value `name`, created with this role on first use.
    fn value(
        &mut self,
        name: &'a str,
        role: Role,
        view_of: Option<TensorId>,
    ) -> Result<TensorId, GraphError> {
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        let (shape, dtype) = self.shape_of(name)?;
        let id = self.push(name.to_string(), dtype, shape, role, view_of)?;
        self.ids.insert(name, id);
        Ok(id)
    }

    fn shape_of(&self, name: &str) -> Result<(Vec<u64>, DType), GraphError> {
        match (
            self.importer.shapes.get(name),
            self.importer.dtypes.get(name),
        ) {
            (Some(s), Some(d)) => Ok((s.clone(), *d)),
            _ => Err(self.importer.missing.get(name).cloned().unwrap_or_else(|| {
                let t = self.importer.types.get(name).cloned().unwrap_or_default();
                unresolved(&t, name, "its producer")
            })),
        }
    }

    fn push(
        &mut self,
        name: String,
        dtype: DType,
        shape: Vec<u64>,
        role: Role,
        view_of: Option<TensorId>,
    ) -> Result<TensorId, GraphError> {
        let size = shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| GraphError::BadShape {
                value: name.clone(),
                problem: format!("shape {shape:?} x {} bytes overflows 64 bits", dtype.size()),
            })?;
        let id = TensorId(u32::try_from(self.graph.tensors.len()).map_err(|_| {
            GraphError::BadShape {
                value: name.clone(),
                problem: "more than 2^32 tensors".into(),
            }
        })?);
        self.graph.tensors.push(Tensor {
            id,
            name,
            dtype,
            shape,
            size,
            role,
            view_of,
            dynamic: None,
        });
        Ok(id)
    }

    fn is_weight(&self, id: TensorId) -> bool {
        let graph = &self.graph;
        graph
            .root_of(id)
            .and_then(|r| graph.tensor(r))
            .is_some_and(|t| t.role == Role::Weight)
    }

    /// One runtime node (at least one output is not a constant).
    fn node(&mut self, node: &'a NodeProto) -> Result<(), GraphError> {
        let constants = &self.importer.constants;
        let mut inputs = Vec::new();
        for input in present(&node.input) {
            let role = if constants.contains(input) {
                Role::Weight
            } else {
                Role::Intermediate
            };
            inputs.push(self.value(input, role, None)?);
        }
        let outs: Vec<&'a str> = present(&node.output).collect();
        let kind = classify(&node.domain, &node.op_type);
        let op = node_op_name(&node.op_type);
        let role_of = |b: &Self, name: &str| {
            if b.outputs.contains(name) {
                Role::Output
            } else {
                Role::Intermediate
            }
        };
        let output = match outs.as_slice() {
            [] => return Ok(()),
            [out] => {
                let role = role_of(self, out);
                let view = kind == OpKind::View && role != Role::Output;
                let root = inputs.first().copied().filter(|_| view);
                self.value(out, role, root)?
            }
            several => {
                // One packed tensor holds every output; each output is a view of it.
                let mut size = 0u64;
                let mut role = Role::Intermediate;
                for out in several {
                    let (shape, dtype) = self.shape_of(out)?;
                    let bytes = shape
                        .iter()
                        .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
                        .and_then(|b| size.checked_add(b));
                    size = bytes.ok_or_else(|| GraphError::BadShape {
                        value: out.to_string(),
                        problem: "the packed outputs' sizes overflow 64 bits".into(),
                    })?;
                    if role_of(self, out) == Role::Output {
                        role = Role::Output;
                    }
                }
                let packed = self.push(
                    format!("{}..packed", several.join("+")),
                    DType::U8,
                    vec![size],
                    role,
                    None,
                )?;
                for out in several {
                    self.value(out, Role::Intermediate, Some(packed))?;
                }
                packed
            }
        };
        let mut inplace = false;
        if kind == OpKind::Elementwise && outs.len() == 1 {
            let out_size = self.graph.tensors[output.index()].size;
            let fits = |b: &Self, id: TensorId| {
                !b.is_weight(id) && b.graph.tensors[id.index()].size == out_size
            };
            if inputs.first().is_some_and(|&i| fits(self, i)) {
                inplace = true;
            } else if is_commutative(&node.op_type) {
                if let Some(j) = inputs.iter().position(|&i| fits(self, i)) {
                    inputs.swap(0, j);
                    inplace = true;
                }
            }
        }
        self.graph.nodes.push(Node {
            op,
            inputs,
            output,
            inplace,
            params: Vec::new(),
        });
        Ok(())
    }
}
