//! `wgalloc graph FILE`: what a trace, an ONNX model or an interval CSV holds.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use super::input::{load, Input};

/// Prints counts and bytes by role (trace) or intervals, span and bounds (CSV).
pub fn run(path: &Path, dims: &[(String, u64)], as_json: bool) -> wgalloc::Result<ExitCode> {
    match load(path, dims)? {
        Input::Trace(graph) => {
            let s = graph.summary();
            if as_json {
                println!("{}", json!({"kind": "trace", "summary": s}));
            } else {
                println!("trace {}: {} nodes, {} tensors", s.name, s.nodes, s.tensors);
                for (role, r) in [
                    ("input", s.input),
                    ("weight", s.weight),
                    ("intermediate", s.intermediate),
                    ("output", s.output),
                    ("view", s.view),
                ] {
                    println!("  {role:<13} {:>6} tensors {:>14} bytes", r.count, r.bytes);
                }
            }
        }
        Input::Intervals(problem) => {
            let span = problem
                .intervals
                .iter()
                .fold((u64::MAX, 0u64), |(lo, hi), iv| {
                    (lo.min(iv.lower), hi.max(iv.upper))
                });
            let (bound, naive) = (problem.lower_bound(), problem.naive_size());
            if as_json {
                println!(
                    "{}",
                    json!({"kind": "intervals", "name": problem.name, "intervals": problem.intervals.len(),
                           "time_begin": span.0, "time_end": span.1,
                           "lower_bound_bytes": bound, "naive_bytes": naive})
                );
            } else {
                println!(
                    "intervals {}: {} buffers over time [{}, {}), lower bound {} bytes, naive {} bytes",
                    problem.name,
                    problem.intervals.len(),
                    span.0,
                    span.1,
                    bound,
                    naive
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
