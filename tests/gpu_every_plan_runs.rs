//! The end-to-end gate: every trace in `traces/` and every ONNX file in `onnx/` under
//! every planner (`naive`, `ggml`,
//! `best` and each offline strategy) is planned, verified on the CPU, checked against the
//! adapter's limits, allocated and proved by the checksum run with zero mismatches,
//! through allocation and [`wgalloc::prove`], the path `wgalloc run` takes. One process
//! and one set of checksum kernels (compiled once per device) for all of them, two
//! proofs at a time. Planners that give a network the very same layout (every
//! placement, buffer and in-place pair equal) share one proof: the proof is a function
//! of the graph and the layout alone, so proving it again would repeat the same run.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use wgalloc::device::WgpuStorage;
use wgalloc::graph::{read_onnx, read_trace, Graph, OnnxOptions};
use wgalloc::plan::Planner;
use wgalloc::Plan;

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

/// A plan of one (network, planner) job, verified on the CPU, with its planning time
/// in ms; or why planning or the verifier failed.
type Planned = Result<(Plan, f64), String>;

/// Plans `graph` with `planner` and verifies the plan on the CPU.
fn plan_and_verify(
    storage: &wgalloc::plan::BufferTypeDesc,
    (name, graph): &(String, Graph),
    planner: Planner,
) -> Planned {
    let label = format!("{name} / {}", planner.name());
    let planning = Instant::now();
    let plan = planner
        .plan_graph(graph, storage)
        .map_err(|error| format!("{label}: planning failed: {error}"))?;
    plan.verify(graph)
        .map_err(|error| format!("{label}: verify refused the plan: {error}"))?;
    Ok((plan, planning.elapsed().as_secs_f64() * 1e3))
}

/// Whether two plans lay memory out the same way: what the proof depends on (every
/// placement, the buffers, the in-place pairs), not the planner's name.
fn same_layout(a: &Plan, b: &Plan) -> bool {
    a.placements == b.placements && a.buffers == b.buffers && a.inplace == b.inplace
}

/// Allocates `plan` and proves it on the GPU: the proof's time in ms, or the failure.
fn prove(
    ctx: &wgalloc::GpuContext,
    wgpu: &wgalloc::device::SharedStorage,
    graph: &Graph,
    plan: &Plan,
) -> Result<f64, String> {
    let started = Instant::now();
    match common::allocate_and_prove(ctx, graph, plan, wgpu) {
        Ok(report) if report.verified() && report.nodes == graph.nodes.len() => {
            Ok(started.elapsed().as_secs_f64() * 1e3)
        }
        Ok(report) => Err(report.to_string()),
        Err(error) => Err(error.to_string()),
    }
}

/// Every plan is made and verified first (milliseconds each); the distinct layouts are
/// then proved two at a time: a proof's CPU half (the predicted checksums) overlaps
/// another's GPU half, which on a CPU adapter shares the same cores. The rows print in
/// order; a plan that shares another's layout names the planner whose proof it shares.
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
    let planned: Vec<Planned> = jobs
        .iter()
        .map(|&(network, planner)| plan_and_verify(&storage, &networks[network], planner))
        .collect();
    // `proved_by[j]`: the first job of the same network with the same layout as job j.
    let proved_by: Vec<Option<usize>> = (0..jobs.len())
        .map(|j| {
            let (plan, _) = planned[j].as_ref().ok()?;
            (0..=j).find(|&k| {
                jobs[k].0 == jobs[j].0
                    && planned[k]
                        .as_ref()
                        .is_ok_and(|(other, _)| same_layout(other, plan))
            })
        })
        .collect();
    let distinct: Vec<usize> = (0..jobs.len())
        .filter(|&j| proved_by[j] == Some(j))
        .collect();
    let next = AtomicUsize::new(0);
    let proofs: Mutex<Vec<Option<Result<f64, String>>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while let Some(&job) = distinct.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let Ok((plan, _)) = &planned[job] else {
                        unreachable!("only planned jobs are proved")
                    };
                    let outcome = prove(&ctx, &wgpu, &networks[jobs[job].0].1, plan);
                    proofs.lock().expect("no worker panicked")[job] = Some(outcome);
                }
            });
        }
    });
    let proofs = proofs.into_inner().expect("no worker panicked");
    println!(
        "{:<22} {:<22} {:>12} {:>9} {:>9}",
        "network", "planner", "bytes", "plan ms", "proof ms"
    );
    let mut failures = Vec::new();
    let mut rows = 0;
    for (j, &(network, planner)) in jobs.iter().enumerate() {
        let (plan, plan_ms) = match &planned[j] {
            Ok(planned) => planned,
            Err(failure) => {
                failures.push(failure.clone());
                continue;
            }
        };
        let rep = proved_by[j].expect("a planned job has a layout of its own or an earlier one");
        let proof = match proofs[rep]
            .as_ref()
            .expect("every distinct layout was proved")
        {
            Ok(_) if rep != j => format!("= {}", jobs[rep].1.name()),
            Ok(ms) => format!("{ms:.1}"),
            Err(failure) => {
                let shared = if rep == j {
                    String::new()
                } else {
                    format!(" (the layout of {})", jobs[rep].1.name())
                };
                let name = &networks[network].0;
                failures.push(format!("{name} / {}{shared}: {failure}", planner.name()));
                continue;
            }
        };
        println!(
            "{:<22} {:<22} {:>12} {:>9.1} {:>9}",
            networks[network].0,
            planner.name(),
            plan.total_size(),
            plan_ms,
            proof
        );
        rows += 1;
    }
    println!(
        "{} distinct layouts proved for {} (network, planner) pairs",
        distinct.len(),
        jobs.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
    assert_eq!(rows, networks.len() * planners.len());
}
