//! The end-to-end gate: every trace in `traces/` and every ONNX file in `onnx/` under
//! every planner (`naive`, `ggml`,
//! `best` and each offline strategy) is planned, verified on the CPU, checked against the
//! adapter's limits, allocated and proved by the checksum run with zero mismatches,
//! through allocation and [`wgalloc::prove`], the path `wgalloc run` takes. One process
//! and one set of checksum kernels (compiled once per device) for all of them.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use wgalloc::device::WgpuStorage;
use wgalloc::graph::{read_onnx, read_trace, Graph, OnnxOptions};
use wgalloc::plan::Planner;

/// The files of `dir` whose extension is `ext`, sorted.
fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the data folder exists")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// Every shipped network: the traces, then the ONNX files.
fn networks() -> Vec<(String, Graph)> {
    let traces = files("traces", "json");
    let onnx = files("onnx", "onnx");
    assert!(traces.len() >= 5, "traces/ lost its traces: {traces:?}");
    assert!(onnx.len() >= 5, "onnx/ lost its files: {onnx:?}");
    let mut all: Vec<(String, Graph)> = traces
        .iter()
        .map(|p| {
            let graph = read_trace(p).expect("a shipped trace imports");
            (format!("{}.json", graph.name), graph)
        })
        .collect();
    all.extend(onnx.iter().map(|p| {
        let graph = read_onnx(p, &OnnxOptions::default()).expect("a shipped ONNX file imports");
        (format!("{}.onnx", graph.name), graph)
    }));
    all
}

#[test]
fn every_network_under_every_planner_is_proved_on_the_gpu() {
    let Some(ctx) = common::gpu() else { return };
    let wgpu = WgpuStorage::shared(&ctx);
    let storage = ctx.buffer_types().expect("buffer types").storage.desc;
    let planners = Planner::all();
    let networks = networks();
    let mut failures = Vec::new();
    let mut runs = 0;
    println!(
        "{:<22} {:<22} {:>12} {:>9}",
        "network", "planner", "bytes", "proof ms"
    );
    for (name, graph) in &networks {
        for planner in &planners {
            let label = format!("{name} / {}", planner.name());
            let plan = match planner.plan_graph(graph, &storage) {
                Ok(plan) => plan,
                Err(error) => {
                    failures.push(format!("{label}: planning failed: {error}"));
                    continue;
                }
            };
            if let Err(error) = plan.verify(graph) {
                failures.push(format!("{label}: verify refused the plan: {error}"));
                continue;
            }
            let started = Instant::now();
            match common::allocate_and_prove(&ctx, graph, &plan, &wgpu) {
                Ok(report) if report.verified() && report.nodes == graph.nodes.len() => {
                    runs += 1;
                    println!(
                        "{:<22} {:<22} {:>12} {:>9.1}",
                        name,
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
        networks.len() * planners.len(),
        failures.join("\n")
    );
    assert_eq!(runs, networks.len() * planners.len());
}
