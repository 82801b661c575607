//! `wgalloc run FILE`: plan a trace or an ONNX model, allocate its memory on the GPU and prove with the
//! checksum run that the plan never clobbers a live tensor.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;
use wgalloc::device::{
    allocate_plan, measure_allocation, no_report_reason, DeviceBytes, GpuContext, WgpuStorage,
    STORAGE_USAGE,
};
use wgalloc::exec::check_plan_against_limits;
use wgalloc::exec::checksum::{prove, ChecksumReport};
use wgalloc::graph::Graph;
use wgalloc::plan::{
    inject_clobber, lower_bounds, naive_size, plan, Clobber, Plan, PlanError, PlanOptions, Planner,
    NO_CLOBBER_PAIR,
};

use super::input::load_graph;
use super::plan_cmd::{buffers_json, percent_over, write_svg};

/// Options of `wgalloc run`.
#[derive(Debug, Clone)]
pub struct RunArgs {
    /// The trace or ONNX model.
    pub file: PathBuf,
    /// Symbolic dimensions of an ONNX model.
    pub dims: Vec<(String, u64)>,
    /// Planner name.
    pub planner: String,
    /// Time limit for the offline search.
    pub time_limit: Option<std::time::Duration>,
    /// One JSON object instead of text.
    pub json: bool,
    /// Write the plan as an SVG picture here.
    pub svg: Option<PathBuf>,
    /// Testing aid: corrupt the plan (one live tensor moved over another) first.
    pub inject_clobber: bool,
}

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Everything `wgalloc run` found, for the text or JSON report.
struct RunOutcome {
    graph: Graph,
    plan: Plan,
    plan_seconds: f64,
    plan_verified: bool,
    clobber: Option<Clobber>,
    report: ChecksumReport,
    device_bytes: Option<DeviceBytes>,
    naive: u64,
    bound: u64,
}

/// Loads, plans, allocates, runs the checksum run and reports. Exit code 1 when the
/// proof finds a clobbered tensor.
pub fn run(args: &RunArgs) -> wgalloc::Result<ExitCode> {
    let graph = load_graph(&args.file, &args.dims)?;
    let ctx = GpuContext::from_env()?;
    let (plan, plan_seconds, clobber) = plan_for_run(args, &graph, &ctx)?;
    let plan_verified = plan.verify(&graph).is_ok();
    let (report, device_bytes) = prove_on_device(&ctx, &graph, &plan)?;
    let naive = naive_size(&graph);
    let bound = lower_bounds(&graph)?.inplace_aware;
    if let Some(path) = &args.svg {
        write_svg(path, &graph, &plan, bound)?;
    }
    let outcome = RunOutcome {
        graph,
        plan,
        plan_seconds,
        plan_verified,
        clobber,
        report,
        device_bytes,
        naive,
        bound,
    };
    if args.json {
        print_json(&ctx, &outcome);
    } else {
        print_text(&ctx, &outcome);
    }
    Ok(if outcome.report.verified() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The plan `args` ask for, how long it took, and the clobber planted in it when
/// `--inject-clobber` asks for one.
fn plan_for_run(
    args: &RunArgs,
    graph: &Graph,
    ctx: &GpuContext,
) -> wgalloc::Result<(Plan, f64, Option<Clobber>)> {
    let planner = Planner::from_name(&args.planner)?;
    let storage = ctx.buffer_types()?.storage.desc;
    let started = Instant::now();
    let options = PlanOptions {
        time_limit: args.time_limit,
        ..PlanOptions::with_planner(planner)
    };
    let mut plan = plan(graph, &[storage], &options)?;
    let plan_seconds = started.elapsed().as_secs_f64();
    let clobber = if args.inject_clobber {
        Some(
            inject_clobber(&mut plan, graph).ok_or_else(|| PlanError::NoClobberPair {
                graph: graph.name.clone(),
                why: NO_CLOBBER_PAIR,
            })?,
        )
    } else {
        None
    };
    Ok((plan, plan_seconds, clobber))
}

/// "Never fits" before anything is allocated; then the plan's memory, once, with what
/// the driver allocated and reserved for it, and the proof over it.
fn prove_on_device(
    ctx: &GpuContext,
    graph: &Graph,
    plan: &Plan,
) -> wgalloc::Result<(ChecksumReport, Option<DeviceBytes>)> {
    check_plan_against_limits(plan, graph, &ctx.limits)?;
    let storage = WgpuStorage::shared(ctx);
    let (memory, device_bytes) = measure_allocation(&ctx.device, || {
        allocate_plan(ctx, plan, STORAGE_USAGE, &storage)
    })?;
    let report = prove(ctx, graph, plan, &memory)?;
    Ok((report, device_bytes))
}

fn print_json(ctx: &GpuContext, o: &RunOutcome) {
    let planned = o.plan.total_size();
    println!(
        "{}",
        json!({
            "trace": o.graph.name,
            "adapter": ctx.info.name,
            "backend": format!("{:?}", ctx.info.backend),
            "planner": o.plan.planner,
            "buffers": buffers_json(&o.plan),
            "total_bytes": planned,
            "device_allocated_bytes": o.device_bytes.map(|d| d.allocated),
            "device_reserved_bytes": o.device_bytes.map(|d| d.reserved),
            "device_bytes": o.device_bytes,
            "naive_bytes": o.naive,
            "lower_bound_bytes": o.bound,
            "plan_seconds": o.plan_seconds,
            "plan_verified": o.plan_verified,
            "encode_ms": millis(o.report.encode_time),
            "gpu_ms": o.report.gpu_time.map(millis),
            "wall_ms": millis(o.report.wall_time),
            "report": o.report,
            "clobber": o.clobber.as_ref().map(|c| json!({"victim": c.victim.0, "intruder": c.intruder.0})),
            "verified": o.report.verified(),
        })
    );
}

fn print_text(ctx: &GpuContext, outcome: &RunOutcome) {
    let RunOutcome {
        graph,
        plan,
        plan_seconds,
        plan_verified,
        clobber,
        report,
        device_bytes,
        naive,
        bound,
    } = outcome;
    let (naive, bound) = (*naive, *bound);
    let planned = plan.total_size();
    println!(
        "trace {}: {} nodes, {} tensors",
        graph.name,
        graph.nodes.len(),
        graph.tensors.len()
    );
    println!("adapter: {} ({:?})", ctx.info.name, ctx.info.backend);
    if let Some(note) = super::gl_note(ctx.info.backend) {
        println!("note: {note}");
    }
    println!(
        "planner: {} ({:.3} ms; plan verify: {})",
        plan.planner,
        plan_seconds * 1e3,
        if *plan_verified { "passed" } else { "REJECTED" }
    );
    if let Some(c) = clobber {
        println!(
            "INJECTED clobber: tensor {} moved over live tensor {}",
            c.intruder, c.victim
        );
    }
    for (i, b) in plan.buffers.iter().enumerate() {
        println!(
            "  buffer {i} ({}): {} chunks, {} bytes",
            b.buffer_type.name,
            b.chunks.len(),
            b.size()
        );
    }
    println!(
        "planned {planned} bytes; naive {naive} bytes ({:.1}x more); lower bound {bound} bytes (planned {})",
        naive as f64 / planned.max(1) as f64,
        percent_over(planned, bound)
    );
    match device_bytes {
        Some(d) => println!(
        "device: planned {planned} bytes; the driver allocated {} bytes to the plan's buffers, in {} memory block(s) of {} bytes reserved ({} newly); device total {} reserved, {} allocated",
        d.allocated, d.blocks, d.reserved, d.newly_reserved, d.device_reserved, d.device_allocated
        ),
        None => println!("device: {}", no_report_reason(ctx.info.backend)),
    }
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
