//! Import of ONNX models (`.onnx`): every intermediate value becomes a tensor with its
//! exact byte size, so any exported model can be planned, drawn and proved. The
//! weights' bytes are never read: a file saved without its external weight data
//! imports the same. Shapes come from the file; with the `onnx-infer` feature, tract's
//! shape inference gives the ones it leaves out. docs/onnx.md has the op table and the
//! rules.

mod import;
mod ops;
mod proto;
#[cfg(test)]
mod tests;
#[cfg(feature = "onnx-infer")]
mod tract;
mod values;

use std::collections::HashMap;
use std::path::Path;

use super::{Graph, GraphError};

/// Options of the ONNX import.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnnxOptions {
    /// Values of symbolic dimensions (`batch` -> 1, `seq` -> 128). A symbol the file
    /// uses for a graph input must be given here; the library inference (feature
    /// `onnx-infer`) sees these values as fixed dimensions.
    pub dims: HashMap<String, u64>,
}

/// Reads an ONNX file and maps it onto a [`Graph`] named after the file (its stem).
///
/// # Errors
/// [`GraphError::Io`] if the file cannot be read, else what [`parse_onnx`] finds.
pub fn read_onnx(path: &Path, options: &OnnxOptions) -> Result<Graph, GraphError> {
    let bytes = std::fs::read(path).map_err(|e| GraphError::io(path, &e))?;
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
/// [`GraphError::UnresolvedDim`] (a graph input's symbol `options` does not give),
/// [`GraphError::ShapeUnknown`] (a value the runtime needs whose shape neither the file
/// nor, with the `onnx-infer` feature, tract's shape inference gives),
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
    import::import(graph, name, options, || library(bytes, options))
}

/// Shape inference for the values the file does not type: tract's, with the
/// `onnx-infer` feature.
#[cfg(feature = "onnx-infer")]
fn library(bytes: &[u8], options: &OnnxOptions) -> Option<import::Inferred> {
    Some(tract::infer(bytes, &options.dims))
}

/// Without the `onnx-infer` feature there is no library: a value the file does not type
/// is a [`GraphError::ShapeUnknown`] that says how to get it.
#[cfg(not(feature = "onnx-infer"))]
fn library(_bytes: &[u8], _options: &OnnxOptions) -> Option<import::Inferred> {
    None
}
