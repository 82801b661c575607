//! Loading the files the CLI accepts: traces (JSON) and interval problems (CSV).

use std::path::Path;

use wgalloc::graph::{read_trace, Graph};
use wgalloc::plan::IntervalProblem;

/// A loaded input file.
pub enum Input {
    /// A tensor-graph-trace/1 file.
    Trace(Graph),
    /// An `id,lower,upper,size` CSV.
    Intervals(IntervalProblem),
}

/// Loads a trace or a CSV, chosen by the file's extension (`.csv` is a CSV, anything
/// else a trace).
pub fn load(path: &Path) -> wgalloc::Result<Input> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        Ok(Input::Intervals(IntervalProblem::read_csv(path)?))
    } else {
        Ok(Input::Trace(read_trace(path)?))
    }
}
