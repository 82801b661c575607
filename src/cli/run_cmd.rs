//! `wgalloc run FILE`: plan a trace, allocate its memory on the GPU and prove with the
//! checksum run that the plan never clobbers a live tensor.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use wgalloc::device::GpuContext;
use wgalloc::exec::checksum::{create_plan_buffers, storage_buffer_type, ChecksumRun};
use wgalloc::graph::{read_trace, Graph};
use wgalloc::plan::{naive_plan, BufferTypeDesc, Plan};

/// The planner `wgalloc run` uses when none is named.
pub const DEFAULT_PLANNER: &str = "naive";

/// The planners `--planner` accepts.
pub const PLANNERS: &[&str] = &["naive"];

/// Plans `graph` with the named planner; `None` for an unknown name. Add planners here.
fn plan_with(
    planner: &str,
    graph: &Graph,
    buffer_type: &BufferTypeDesc,
) -> Option<wgalloc::Result<Plan>> {
    match planner {
        "naive" => Some(naive_plan(graph, buffer_type).map_err(Into::into)),
        _ => None,
    }
}

/// Bytes of the tensors a planner places, each in memory of its own (the trace
/// format's naive size: exact bytes, no padding).
fn naive_bytes(graph: &Graph) -> u64 {
    graph
        .planned_tensors()
        .filter_map(|t| graph.tensor(t))
        .fold(0u64, |acc, t| acc.saturating_add(t.size))
}

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Loads, plans, allocates, runs the checksum run and reports. Exit code 1 when the
/// proof finds a clobbered tensor, 2 for an unknown planner.
pub fn run(path: &Path, planner: &str, as_json: bool) -> wgalloc::Result<ExitCode> {
    let graph = read_trace(path)?;
    let ctx = GpuContext::from_env()?;
    let buffer_type = storage_buffer_type(&ctx.limits)?;
    let Some(plan) = plan_with(planner, &graph, &buffer_type) else {
        eprintln!(
            "unknown planner {planner:?}; known: {}",
            PLANNERS.join(", ")
        );
        return Ok(ExitCode::from(2));
    };
    let plan = plan?;
    let memory = create_plan_buffers(&ctx, &plan)?;
    let checksum = ChecksumRun::new(&ctx, &graph, &plan, &memory)?;
    let report = checksum.run()?;
    let naive = naive_bytes(&graph);
    let planned = plan.total_size();
    if as_json {
        let buffers: Vec<_> = plan
            .buffers
            .iter()
            .map(|b| {
                json!({"type": b.buffer_type.name, "chunks": b.chunks.len(),
                       "bytes": b.size(), "same_as": b.same_as.map(|s| s.0)})
            })
            .collect();
        println!(
            "{}",
            json!({
                "trace": graph.name,
                "adapter": ctx.info.name,
                "backend": format!("{:?}", ctx.info.backend),
                "planner": plan.planner,
                "buffers": buffers,
                "planned_bytes": planned,
                "naive_bytes": naive,
                "lower_bound_bytes": null,
                "encode_ms": millis(report.encode_time),
                "gpu_ms": report.gpu_time.map(millis),
                "wall_ms": millis(report.wall_time),
                "report": report,
                "verified": report.verified(),
            })
        );
    } else {
        println!(
            "trace {}: {} nodes, {} tensors",
            graph.name,
            graph.nodes.len(),
            graph.tensors.len()
        );
        println!("adapter: {} ({:?})", ctx.info.name, ctx.info.backend);
        println!("planner: {}", plan.planner);
        for (i, b) in plan.buffers.iter().enumerate() {
            println!(
                "  buffer {i} ({}): {} chunks, {} bytes",
                b.buffer_type.name,
                b.chunks.len(),
                b.size()
            );
        }
        let ratio = if naive == 0 {
            0.0
        } else {
            planned as f64 / naive as f64
        };
        println!(
            "planned {planned} bytes vs naive {naive} bytes ({:.1}% of naive); lower bound: n/a",
            ratio * 100.0
        );
        let gpu = report.gpu_time.map_or_else(
            || "n/a (no timestamp queries)".to_string(),
            |d| format!("{:.3} ms", millis(d)),
        );
        println!(
            "checksum run: {} dispatches, encode {:.3} ms, gpu {gpu}, submit-to-readback {:.3} ms",
            report.dispatches,
            millis(report.encode_time),
            millis(report.wall_time)
        );
        println!("{report}");
        for m in report.first_mismatches.iter().skip(1) {
            println!("  also: {m}");
        }
    }
    Ok(if report.verified() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
