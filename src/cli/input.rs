//! Loading the files the CLI accepts: traces (JSON), ONNX models and interval
//! problems (CSV).

use std::path::Path;

use wgalloc::graph::{read_onnx, read_trace, Graph, OnnxOptions};
use wgalloc::plan::IntervalProblem;

/// A loaded input file.
pub enum Input {
    /// A tensor-graph-trace/1 file or an ONNX model.
    Trace(Graph),
    /// An `id,lower,upper,size` CSV.
    Intervals(IntervalProblem),
}

fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// Loads a graph: an ONNX model (`.onnx`, symbolic dimensions from `dims`) or a trace
/// (anything else).
pub fn load_graph(path: &Path, dims: &[(String, u64)]) -> wgalloc::Result<Graph> {
    if has_extension(path, "onnx") {
        let options = OnnxOptions {
            dims: dims.iter().cloned().collect(),
        };
        Ok(read_onnx(path, &options)?)
    } else {
        Ok(read_trace(path)?)
    }
}

/// Loads a graph or a CSV, chosen by the file's extension (`.csv` is a CSV, `.onnx` an
/// ONNX model, anything else a trace).
pub fn load(path: &Path, dims: &[(String, u64)]) -> wgalloc::Result<Input> {
    if has_extension(path, "csv") {
        Ok(Input::Intervals(IntervalProblem::read_csv(path)?))
    } else {
        Ok(Input::Trace(load_graph(path, dims)?))
    }
}

/// A `--dim NAME=VALUE` argument.
pub fn parse_dim(text: &str) -> Result<(String, u64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))?;
    let value = value
        .trim()
        .parse()
        .map_err(|_| format!("`{value}` is not a non-negative integer"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{text}` has no dimension name"));
    }
    Ok((name.to_string(), value))
}
