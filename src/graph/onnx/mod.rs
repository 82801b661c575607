//! Import of ONNX models (`.onnx`): every intermediate value becomes a tensor with its
//! exact byte size, so any exported model can be planned, drawn and proved. The
//! weights' bytes are never read: a file saved without its external weight data
//! imports the same. docs/onnx.md has the op table and the rules.

mod import;
mod infer;
mod ops;
mod proto;
#[cfg(test)]
mod tests;
mod values;

use std::collections::HashMap;
use std::path::Path;

use super::{Graph, GraphError};

/// Options of the ONNX import.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnnxOptions {
    /// Values of symbolic dimensions (`batch` -> 1, `seq` -> 128). A symbol the file
    /// uses for a graph input, or that inference cannot find, must be given here.
    pub dims: HashMap<String, u64>,
}

/// Reads an ONNX file and maps it onto a [`Graph`] named after the file (its stem).
///
/// # Errors
/// [`crate::Error::Io`] if the file cannot be read, else what [`parse_onnx`] finds.
pub fn read_onnx(path: &Path, options: &OnnxOptions) -> crate::Result<Graph> {
    let bytes = std::fs::read(path).map_err(|source| crate::Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "onnx".into());
    let mut graph = parse_onnx(&bytes, options)?;
    graph.name = name;
    Ok(graph)
}

/// Decodes a serialized ONNX model and maps its graph onto a [`Graph`] (named after the
/// ONNX graph), which is validated before it is returned.
///
/// # Errors
/// A [`GraphError`] naming the value or node at fault: [`GraphError::Empty`],
/// [`GraphError::NotOnnx`] (truncated or corrupt protobuf),
/// [`GraphError::MissingField`] (no graph), [`GraphError::UnknownElementType`],
/// [`GraphError::UnknownValue`] (used but never produced),
/// [`GraphError::NotTopological`] (a cycle or nodes out of order),
/// [`GraphError::DefinedTwice`], [`GraphError::UnsupportedNode`] (subgraphs),
/// [`GraphError::UnresolvedDim`], [`GraphError::ShapeUnknown`],
/// [`GraphError::BadShape`] (negative or overflowing dimensions).
pub fn parse_onnx(bytes: &[u8], options: &OnnxOptions) -> Result<Graph, GraphError> {
    if bytes.is_empty() {
        return Err(GraphError::Empty);
    }
    let model = proto::decode_model(bytes).map_err(|e| GraphError::NotOnnx {
        message: e.to_string(),
    })?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| GraphError::MissingField {
            context: "ONNX model".into(),
            field: "graph",
        })?;
    let name = if graph.name.is_empty() {
        "onnx"
    } else {
        graph.name.as_str()
    };
    import::import(graph, name, options)
}
