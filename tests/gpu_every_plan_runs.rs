//! The end-to-end gate: every trace in `traces/` and every ONNX file in `onnx/` under
//! every planner (`naive`, `ggml`,
//! `best` and each offline strategy) is planned, verified on the CPU, checked against the
//! adapter's limits, allocated and proved by the checksum run with zero mismatches,
//! through allocation and [`wgalloc::prove`], the path `wgalloc run` takes. One process
//! and one set of checksum kernels (compiled once per device) for all of them, two
//! runs at a time.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
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

/// What one (network, planner) run gave: its table row, or why it failed.
type RunOutcome = Result<String, String>;

/// Plans `graph` with `planner`, verifies the plan on the CPU, allocates it and proves
/// it on the GPU: the table row, or the failure.
fn plan_and_prove(
    ctx: &wgalloc::GpuContext,
    wgpu: &wgalloc::device::SharedStorage,
    storage: &wgalloc::plan::BufferTypeDesc,
    (name, graph): &(String, Graph),
    planner: Planner,
) -> RunOutcome {
    let label = format!("{name} / {}", planner.name());
    let planning = Instant::now();
    let plan = planner
        .plan_graph(graph, storage)
        .map_err(|error| format!("{label}: planning failed: {error}"))?;
    plan.verify(graph)
        .map_err(|error| format!("{label}: verify refused the plan: {error}"))?;
    let plan_ms = planning.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    match common::allocate_and_prove(ctx, graph, &plan, wgpu) {
        Ok(report) if report.verified() && report.nodes == graph.nodes.len() => Ok(format!(
            "{:<22} {:<22} {:>12} {:>9.1} {:>9.1}",
            name,
            planner.name(),
            plan.total_size(),
            plan_ms,
            started.elapsed().as_secs_f64() * 1e3
        )),
        Ok(report) => Err(format!("{label}: {report}")),
        Err(error) => Err(format!("{label}: {error}")),
    }
}

/// Two runs at a time: a proof's CPU half (the predicted checksums) overlaps another's
/// GPU half, which on a CPU adapter shares the same cores. The rows print in order.
#[test]
fn every_network_under_every_planner_is_proved_on_the_gpu() {
    let Some(ctx) = common::gpu() else { return };
    let wgpu = WgpuStorage::shared(&ctx);
    let storage = ctx.buffer_types().expect("buffer types").storage.desc;
    let planners = Planner::all();
    let networks = networks();
    let jobs: Vec<(usize, Planner)> = (0..networks.len())
        .flat_map(|n| planners.iter().map(move |&p| (n, p)))
        .collect();
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<(usize, RunOutcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let job = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(network, planner)) = jobs.get(job) else {
                    break;
                };
                let outcome = plan_and_prove(&ctx, &wgpu, &storage, &networks[network], planner);
                outcomes
                    .lock()
                    .expect("no worker panicked")
                    .push((job, outcome));
            });
        }
    });
    let mut outcomes = outcomes.into_inner().expect("no worker panicked");
    outcomes.sort_by_key(|(job, _)| *job);
    println!(
        "{:<22} {:<22} {:>12} {:>9} {:>9}",
        "network", "planner", "bytes", "plan ms", "proof ms"
    );
    let mut failures = Vec::new();
    for (_, outcome) in &outcomes {
        match outcome {
            Ok(row) => println!("{row}"),
            Err(failure) => failures.push(failure.clone()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
    assert_eq!(outcomes.len(), networks.len() * planners.len());
}
