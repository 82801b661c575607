//! Import of `tensor-graph-trace/1` files (traces/FORMAT.md): one forward pass of a
//! real network, with the exact byte size of every tensor.

use std::path::Path;

use serde_json::{Map, Value};

use super::{DType, Graph, GraphError, Node, Role, Tensor, TensorId};

/// The format tag this reader understands.
pub const TRACE_FORMAT: &str = "tensor-graph-trace/1";

/// Reads and validates a trace file.
///
/// # Errors
/// [`GraphError::Io`] if the file cannot be read, else what [`parse_trace`] finds.
pub fn read_trace(path: &Path) -> Result<Graph, GraphError> {
    let text = std::fs::read_to_string(path).map_err(|e| GraphError::io(path, &e))?;
    parse_trace(&text)
}

/// Parses and validates a trace. Unknown fields are ignored, as the format asks.
///
/// # Errors
/// A [`GraphError`] naming the offending tensor or node: not JSON, wrong format tag,
/// a missing or mistyped field, unknown ids, duplicate producers, forward references,
/// view cycles, overflowing sizes.
pub fn parse_trace(text: &str) -> Result<Graph, GraphError> {
    if text.trim().is_empty() {
        return Err(GraphError::Empty);
    }
    let value: Value = serde_json::from_str(text).map_err(|e| GraphError::NotJson {
        message: e.to_string(),
    })?;
    let top = value.as_object().ok_or_else(|| GraphError::NotJson {
        message: "the top level is not a JSON object".into(),
    })?;
    let format = string_field(top, "trace", "format")?;
    if format != TRACE_FORMAT {
        return Err(GraphError::WrongFormat {
            found: format.to_string(),
            expected: TRACE_FORMAT,
        });
    }
    let name = match top.get("name") {
        Some(_) => string_field(top, "trace", "name")?.to_string(),
        None => String::from("trace"),
    };
    let dtype_bytes = match top.get("dtype_bytes") {
        Some(_) => u64_field(top, "trace", "dtype_bytes")?,
        None => 4,
    };
    let dtype = DType::from_element_size(dtype_bytes).ok_or_else(|| GraphError::BadField {
        context: "trace".into(),
        field: "dtype_bytes",
        problem: format!("is {dtype_bytes}; expected 1, 2 or 4"),
    })?;
    let tensors = array_field(top, "trace", "tensors")?
        .iter()
        .enumerate()
        .map(|(i, v)| parse_tensor(i, v, dtype))
        .collect::<Result<Vec<_>, _>>()?;
    let nodes = array_field(top, "trace", "nodes")?
        .iter()
        .enumerate()
        .map(|(i, v)| parse_node(i, v))
        .collect::<Result<Vec<_>, _>>()?;
    let graph = Graph {
        name,
        tensors,
        nodes,
    };
    graph.validate()?;
    Ok(graph)
}

/// Writes `graph` as a `tensor-graph-trace/1` document that [`parse_trace`] reads back
/// into the same tensors and nodes (node `params` and data-dependent lengths are not
/// part of the format and are dropped). Used to save a graph that reproduces a
/// problem.
///
/// # Errors
/// [`GraphError::BadField`] when the tensors do not share one element type (the format
/// has one `dtype_bytes` per file).
pub fn write_trace(graph: &Graph) -> Result<String, GraphError> {
    let dtype = graph.tensors.first().map_or(DType::F32, |t| t.dtype);
    if let Some(other) = graph.tensors.iter().find(|t| t.dtype != dtype) {
        return Err(bad(
            &format!("tensor {}", other.id.0),
            "dtype",
            format!(
                "is {:?} but tensor 0 is {dtype:?}; a trace has one element type",
                other.dtype
            ),
        ));
    }
    let tensors: Vec<Value> = graph
        .tensors
        .iter()
        .map(|t| {
            let mut obj = serde_json::json!({
                "id": t.id.0,
                "name": t.name,
                "role": if t.view_of.is_some() { "view" } else { t.role.name() },
                "bytes": t.size,
                "shape": t.shape,
            });
            if let (Some(root), Value::Object(map)) = (t.view_of, &mut obj) {
                map.insert("view_of".into(), Value::from(root.0));
            }
            obj
        })
        .collect();
    let nodes: Vec<Value> = graph
        .nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "op": n.op,
                "inputs": n.inputs.iter().map(|t| t.0).collect::<Vec<_>>(),
                "output": n.output.0,
                "elementwise": n.inplace,
            })
        })
        .collect();
    let document = serde_json::json!({
        "format": TRACE_FORMAT,
        "name": graph.name,
        "dtype_bytes": dtype.size(),
        "tensors": tensors,
        "nodes": nodes,
    });
    serde_json::to_string_pretty(&document).map_err(|e| GraphError::NotJson {
        message: e.to_string(),
    })
}

fn parse_tensor(position: usize, value: &Value, dtype: DType) -> Result<Tensor, GraphError> {
    let context = format!("tensor {position}");
    let obj = value.as_object().ok_or_else(|| GraphError::BadField {
        context: context.clone(),
        field: "tensors",
        problem: "entry is not an object".into(),
    })?;
    let id = u64_field(obj, &context, "id")?;
    if id != position as u64 {
        return Err(GraphError::IdMismatch { position, id });
    }
    let name = match obj.get("name") {
        Some(_) => string_field(obj, &context, "name")?.to_string(),
        None => format!("t{position}"),
    };
    let context = format!("tensor {position} ({name})");
    let role_name = string_field(obj, &context, "role")?;
    let size = u64_field(obj, &context, "bytes")?;
    let shape = match obj.get("shape") {
        Some(Value::Array(dims)) => dims
            .iter()
            .map(|d| {
                as_u64(d).ok_or_else(|| {
                    bad(
                        &context,
                        "shape",
                        format!("has {d}, not a non-negative integer"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => return Err(bad(&context, "shape", format!("is {other}, not an array"))),
        None => Vec::new(),
    };
    let (role, view_of) = match role_name {
        "input" => (Role::Input, None),
        "weight" => (Role::Weight, None),
        "intermediate" => (Role::Intermediate, None),
        "output" => (Role::Output, None),
        "view" => {
            let root = match obj.get("view_of") {
                Some(_) => u64_field(obj, &context, "view_of")?,
                None => {
                    return Err(GraphError::ViewWithoutRoot {
                        tensor: TensorId(position as u32),
                        name,
                        problem: "role is `view` but `view_of` is missing".into(),
                    })
                }
            };
            let root = u32::try_from(root)
                .map_err(|_| bad(&context, "view_of", format!("{root} is out of range")))?;
            (Role::Intermediate, Some(TensorId(root)))
        }
        other => {
            return Err(bad(
                &context,
                "role",
                format!("is {other:?}; expected input, weight, intermediate, view or output"),
            ))
        }
    };
    Ok(Tensor {
        id: TensorId(position as u32),
        name,
        dtype,
        shape,
        size,
        role,
        view_of,
        dynamic: None,
    })
}

fn parse_node(position: usize, value: &Value) -> Result<Node, GraphError> {
    let context = format!("node {position}");
    let obj = value
        .as_object()
        .ok_or_else(|| bad(&context, "nodes", "entry is not an object".into()))?;
    let op = string_field(obj, &context, "op")?.to_string();
    let context = format!("node {position} ({op})");
    let inputs = array_field(obj, &context, "inputs")?
        .iter()
        .map(|v| tensor_ref(v, &context, "inputs"))
        .collect::<Result<Vec<_>, _>>()?;
    let output = match obj.get("output") {
        Some(v) => tensor_ref(v, &context, "output")?,
        None => return Err(missing(&context, "output")),
    };
    let inplace = match obj.get("elementwise") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(bad(
                &context,
                "elementwise",
                format!("is {other}, not a boolean"),
            ))
        }
    };
    Ok(Node {
        op,
        inputs,
        output,
        inplace,
        params: Vec::new(),
    })
}

fn tensor_ref(value: &Value, context: &str, field: &'static str) -> Result<TensorId, GraphError> {
    let id = as_u64(value)
        .ok_or_else(|| bad(context, field, format!("has {value}, not a tensor id")))?;
    u32::try_from(id).map(TensorId).map_err(|_| {
        bad(
            context,
            field,
            format!("has {id}, above the largest tensor id {}", u32::MAX),
        )
    })
}

fn as_u64(value: &Value) -> Option<u64> {
    value.as_u64()
}

fn missing(context: &str, field: &'static str) -> GraphError {
    GraphError::MissingField {
        context: context.to_string(),
        field,
    }
}

fn bad(context: &str, field: &'static str, problem: String) -> GraphError {
    GraphError::BadField {
        context: context.to_string(),
        field,
        problem,
    }
}

fn string_field<'a>(
    obj: &'a Map<String, Value>,
    context: &str,
    field: &'static str,
) -> Result<&'a str, GraphError> {
    match obj.get(field) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(bad(context, field, format!("is {other}, not a string"))),
        None => Err(missing(context, field)),
    }
}

fn u64_field(
    obj: &Map<String, Value>,
    context: &str,
    field: &'static str,
) -> Result<u64, GraphError> {
    match obj.get(field) {
        Some(v) => as_u64(v).ok_or_else(|| {
            let problem = if v.is_number() {
                format!("is {v}, not a non-negative integer that fits in 64 bits")
            } else {
                format!("is {v}, not a number")
            };
            bad(context, field, problem)
        }),
        None => Err(missing(context, field)),
    }
}

fn array_field<'a>(
    obj: &'a Map<String, Value>,
    context: &str,
    field: &'static str,
) -> Result<&'a Vec<Value>, GraphError> {
    match obj.get(field) {
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(bad(
            context,
            field,
            format!("is {}, not an array", kind(other)),
        )),
        None => Err(missing(context, field)),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
