//! `wgalloc plan FILE`: plan a trace or an interval CSV and report the sizes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{json, Value};
use wgalloc::plan::{
    lower_bounds, naive_size, plan, plan_intervals, BufferTypeDesc, Plan, PlanOptions, Planner,
};

use super::input::{load, Input};

/// Options of `wgalloc plan`.
#[derive(Debug, Clone)]
pub struct PlanArgs {
    /// The trace, ONNX model or CSV.
    pub file: PathBuf,
    /// Symbolic dimensions of an ONNX model.
    pub dims: Vec<(String, u64)>,
    /// Planner name.
    pub planner: String,
    /// Capacity to fit.
    pub capacity: Option<u64>,
    /// Time limit for the offline search.
    pub time_limit: Option<std::time::Duration>,
    /// Offset alignment (default: 32 for traces, 1 for CSVs).
    pub alignment: Option<u64>,
    /// Largest chunk (default: 2 GiB for traces, unlimited for CSVs).
    pub max_size: Option<u64>,
    /// One JSON object instead of text.
    pub json: bool,
    /// Write the plan as an SVG picture here (traces only).
    pub svg: Option<PathBuf>,
}

/// Default alignment for traces: the storage-offset alignment of lavapipe and NVIDIA.
pub const TRACE_ALIGNMENT: u64 = 32;
/// Default max size for traces: the largest storage binding an H100 allows.
pub const TRACE_MAX_SIZE: u64 = 1 << 31;

/// Runs `wgalloc plan`.
pub fn run(args: &PlanArgs) -> wgalloc::Result<ExitCode> {
    let planner = Planner::from_name(&args.planner)?;
    let loading = Instant::now();
    let input = load(&args.file, &args.dims)?;
    let load_seconds = loading.elapsed().as_secs_f64();
    match input {
        Input::Trace(graph) => {
            let buffer_type = BufferTypeDesc::new(
                "storage",
                args.alignment.unwrap_or(TRACE_ALIGNMENT),
                args.max_size.unwrap_or(TRACE_MAX_SIZE),
            )?;
            let started = Instant::now();
            let options = PlanOptions {
                time_limit: args.time_limit,
                ..PlanOptions::with_planner(planner)
            };
            let plan = plan(&graph, std::slice::from_ref(&buffer_type), &options)?;
            let plan_seconds = started.elapsed().as_secs_f64();
            let verified = plan.verify(&graph).is_ok();
            let fits = fits(plan.total_size(), args.capacity);
            let bounds = lower_bounds(&graph)?;
            let naive = naive_size(&graph);
            if let Some(path) = &args.svg {
                write_svg(path, &graph, &plan, bounds.inplace_aware)?;
            }
            let report = json!({
                "kind": "trace",
                "name": graph.name,
                "planner": plan.planner,
                "tensors": graph.planned_tensors().count(),
                "nodes": graph.nodes.len(),
                "buffers": buffers_json(&plan),
                "total_bytes": plan.total_size(),
                "lower_bound_bytes": bounds.inplace_aware,
                "lower_bound_strict_bytes": bounds.strict,
                "naive_bytes": naive,
                "inplace_pairs": plan.inplace.len(),
                "plan_seconds": plan_seconds,
                "load_seconds": load_seconds,
                "verified": verified,
                "capacity": args.capacity,
                "fits": fits,
            });
            print_report(&report, args.json);
            Ok(exit_code(verified && fits))
        }
        Input::Intervals(problem) => {
            let alignment = args.alignment.unwrap_or(1);
            let max_size = args.max_size.unwrap_or(u64::MAX);
            let started = Instant::now();
            // `--max-size` is a hard limit (an error above it), `--capacity` a target
            // that is reported; the planners aim at the smaller of the two.
            let options = PlanOptions {
                time_limit: args.time_limit,
                capacity: match (args.capacity, args.max_size) {
                    (Some(c), Some(max)) => Some(c.min(max)),
                    (c, max) => c.or(max),
                },
                ..PlanOptions::with_planner(planner)
            };
            let solution = plan_intervals(&problem, alignment, &options)?;
            if solution.peak > max_size {
                return Err(wgalloc::plan::PlanError::OverCapacity {
                    planner: planner.name(),
                    needed: solution.peak,
                    capacity: max_size,
                }
                .into());
            }
            let plan_seconds = started.elapsed().as_secs_f64();
            let verified = problem.verify(&solution).is_ok();
            let fits = fits(solution.peak, args.capacity);
            let bound = problem.lower_bound();
            let report = json!({
                "kind": "intervals",
                "name": problem.name,
                "planner": solution.planner,
                "tensors": problem.intervals.len(),
                "buffers": [{
                    "id": 0,
                    "alignment": alignment,
                    "max_size": max_size,
                    "chunks": [solution.peak],
                    "size": solution.peak,
                }],
                "total_bytes": solution.peak,
                "lower_bound_bytes": bound,
                "lower_bound_strict_bytes": bound,
                "naive_bytes": problem.naive_size(),
                "plan_seconds": plan_seconds,
                "verified": verified,
                "capacity": args.capacity,
                "fits": fits,
            });
            print_report(&report, args.json);
            Ok(exit_code(verified && fits))
        }
    }
}

/// Whether `total` fits the capacity asked for (always, when none was).
fn fits(total: u64, capacity: Option<u64>) -> bool {
    capacity.is_none_or(|c| total <= c)
}

fn exit_code(verified: bool) -> ExitCode {
    if verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Writes the SVG picture of a plan.
pub fn write_svg(
    path: &Path,
    graph: &wgalloc::graph::Graph,
    plan: &Plan,
    lower_bound: u64,
) -> wgalloc::Result<()> {
    let svg = wgalloc::report::plan_svg(graph, plan, Some(lower_bound));
    std::fs::write(path, svg).map_err(|source| wgalloc::Error::Io {
        path: path.display().to_string(),
        source,
    })
}

/// The `buffers` list of the JSON report.
pub fn buffers_json(plan: &Plan) -> Vec<Value> {
    plan.buffers
        .iter()
        .enumerate()
        .map(|(id, b)| {
            json!({
                "id": id,
                "name": b.buffer_type.name,
                "alignment": b.buffer_type.alignment(),
                "max_size": b.buffer_type.max_size,
                "chunks": b.chunks.iter().map(|c| c.size).collect::<Vec<_>>(),
                "oversized_chunks": b.chunks.iter().filter(|c| c.oversized).count(),
                "same_as": b.same_as.map(|s| s.0),
                "size": if b.same_as.is_some() { 0 } else { b.size() },
            })
        })
        .collect()
}

/// How far `total` is above `bound`, as `+1.23%` (`-` for a zero bound).
pub fn percent_over(total: u64, bound: u64) -> String {
    if bound == 0 {
        return String::from("-");
    }
    // Display only.
    format!("{:+.2}%", (total as f64 / bound as f64 - 1.0) * 100.0)
}

fn print_report(report: &Value, as_json: bool) {
    if as_json {
        println!("{report}");
        return;
    }
    let n = |key: &str| report[key].as_u64().unwrap_or(0);
    println!(
        "{} {} planned by {}: {} tensors",
        report["kind"].as_str().unwrap_or(""),
        report["name"].as_str().unwrap_or(""),
        report["planner"].as_str().unwrap_or(""),
        n("tensors"),
    );
    if let Some(buffers) = report["buffers"].as_array() {
        for b in buffers {
            println!(
                "  buffer {} (alignment {}, max size {}): chunks {}",
                b["id"], b["alignment"], b["max_size"], b["chunks"]
            );
        }
    }
    let total = n("total_bytes");
    let bound = n("lower_bound_bytes");
    println!("  planned      {total:>16} bytes");
    println!(
        "  lower bound  {bound:>16} bytes (planned is {} over it)",
        percent_over(total, bound)
    );
    if report["kind"] == "trace" {
        println!(
            "  strict bound {:>16} bytes (no in-place writes)",
            n("lower_bound_strict_bytes")
        );
    }
    println!(
        "  naive        {:>16} bytes (every tensor its own memory)",
        n("naive_bytes")
    );
    if let Some(capacity) = report["capacity"].as_u64() {
        let verdict = if report["fits"] == true {
            "fits"
        } else {
            "DOES NOT FIT"
        };
        println!("  capacity     {capacity:>16} bytes: {verdict}");
    }
    if let Some(load) = report["load_seconds"].as_f64() {
        println!("  loaded in {:.3} ms", load * 1e3);
    }
    println!(
        "  planned in {:.3} ms; verified: {}",
        report["plan_seconds"].as_f64().unwrap_or(0.0) * 1e3,
        report["verified"]
    );
}
