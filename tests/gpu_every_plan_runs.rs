//! The end-to-end gate: every trace in `traces/` under every planner (`naive`, `ggml`,
//! `best` and each offline strategy) is planned, verified on the CPU, checked against the
//! adapter's limits, allocated and proved by the checksum run with zero mismatches,
//! through [`prove_plan`], the path `wgalloc run` takes. One process and one set of
//! checksum kernels for all of them.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use wgalloc::device::WgpuAllocator;
use wgalloc::exec::checksum::{prove_plan, ChecksumKernels};
use wgalloc::graph::read_trace;
use wgalloc::plan::Planner;

fn traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("traces/ exists")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_trace_under_every_planner_is_proved_on_the_gpu() {
    let Some(ctx) = common::gpu() else { return };
    let kernels = ChecksumKernels::new(&ctx).expect("checksum kernels compile");
    let storage = ctx.buffer_types().expect("buffer types").storage.desc;
    let planners = Planner::all();
    let files = traces();
    assert!(files.len() >= 5, "traces/ lost its traces: {files:?}");
    let mut failures = Vec::new();
    let mut runs = 0;
    println!(
        "{:<18} {:<22} {:>12} {:>9}",
        "trace", "planner", "bytes", "proof ms"
    );
    for file in &files {
        let graph = read_trace(file).expect("a shipped trace imports");
        for planner in &planners {
            let label = format!("{} / {}", graph.name, planner.name());
            let plan = match planner.plan_graph(&graph, &storage) {
                Ok(plan) => plan,
                Err(error) => {
                    failures.push(format!("{label}: planning failed: {error}"));
                    continue;
                }
            };
            if let Err(error) = plan.verify(&graph) {
                failures.push(format!("{label}: verify refused the plan: {error}"));
                continue;
            }
            let started = Instant::now();
            match prove_plan(&ctx, &kernels, &graph, &plan, &WgpuAllocator) {
                Ok(report) if report.verified() && report.nodes == graph.nodes.len() => {
                    runs += 1;
                    println!(
                        "{:<18} {:<22} {:>12} {:>9.1}",
                        graph.name,
                        planner.name(),
                        plan.total_size(),
                        started.elapsed().as_secs_f64() * 1e3
                    );
                }
                Ok(report) => failures.push(format!("{label}: {report}")),
                Err(error) => failures.push(format!("{label}: {error}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        files.len() * planners.len(),
        failures.join("\n")
    );
    assert_eq!(runs, files.len() * planners.len());
}
