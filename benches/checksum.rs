//! The checksum run over each shared trace with three plans of the same graph, in one
//! process: one buffer per tensor (`naive`), ggml's walk (`ggml`) and the offline
//! `best`. Bytes, median encode time and median GPU time side by side, one row per
//! trace; every run must verify (exit 1 otherwise). The last column runs `best` once
//! more over regions of a `PagedStorage` (sub-ranges of shared pages at non-zero
//! offsets, the storage path) instead of whole buffers, to show what regions cost.
//!
//! `WGALLOC_BENCH_QUICK=1` runs the two smallest traces once each.
//! Run: `WGPU_BACKEND=vulkan cargo bench --bench checksum`.

use std::path::Path;
use std::time::Duration;

use std::sync::Arc;

use wgalloc::device::{
    allocate_plan, GpuContext, PlannedMemory, SharedStorage, WgpuStorage, STORAGE_USAGE,
};
use wgalloc::exec::checksum::prove;
use wgalloc::graph::{read_trace, Graph};
use wgalloc::plan::{BufferTypeDesc, Plan, Planner};
use wgalloc::storage::{PagedStorage, RegionRequest, Storage};

const TRACES: &[&str] = &[
    "mobilenet_v2",
    "efficientnet_b0",
    "resnet50",
    "bert_base_seq128",
    "gpt2_seq256",
];

/// The plans compared, baseline first.
const PLANNERS: [&str; 3] = ["naive", "ggml", "best"];

/// Bytes, median encode time and median GPU (or submit-to-readback) time of `runs` runs.
struct Measured {
    bytes: u64,
    encode: Duration,
    gpu: Duration,
    timed_on_gpu: bool,
    verified: bool,
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// Where a measured plan's memory comes from.
#[derive(Clone, Copy, PartialEq)]
enum Memory {
    /// One whole buffer per chunk.
    Buffers,
    /// Regions of 256 MiB pages, the first bytes of the first page taken already.
    Pages,
}

fn measure(
    ctx: &GpuContext,
    graph: &Graph,
    plan: &Plan,
    runs: usize,
    from: Memory,
) -> wgalloc::Result<Measured> {
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
    let pages = Arc::new(
        PagedStorage::new(WgpuStorage::wgpu(ctx), 256 << 20, alignment, STORAGE_USAGE)
            .map_err(wgalloc::device::DeviceError::from)?,
    );
    let memory: PlannedMemory = match from {
        Memory::Buffers => allocate_plan(ctx, plan, STORAGE_USAGE, &WgpuStorage::shared(ctx))?,
        Memory::Pages => {
            let _taken = pages
                .allocate(&RegionRequest::new(4))
                .map_err(wgalloc::device::DeviceError::from)?;
            allocate_plan(ctx, plan, STORAGE_USAGE, &(pages.clone() as SharedStorage))?
        }
    };
    // Each run is the one proof entry point; its report times the recording and the
    // GPU pass alone (the CPU prediction and setup before them are not counted).
    let warm = prove(ctx, graph, plan, &memory)?;
    let mut verified = warm.verified();
    let (mut encode, mut gpu) = (Vec::new(), Vec::new());
    let mut timed_on_gpu = true;
    for _ in 0..runs {
        let report = prove(ctx, graph, plan, &memory)?;
        verified &= report.verified();
        encode.push(report.encode_time);
        timed_on_gpu &= report.gpu_time.is_some();
        gpu.push(report.gpu_time.unwrap_or(report.wall_time));
    }
    Ok(Measured {
        bytes: plan.total_size(),
        encode: median(encode),
        gpu: median(gpu),
        timed_on_gpu,
        verified,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Measures every planner of [`PLANNERS`] on one trace, in that order, then `best`
/// over regions of pages.
fn measure_trace(
    ctx: &GpuContext,
    graph: &Graph,
    storage: &BufferTypeDesc,
    runs: usize,
) -> wgalloc::Result<Vec<Measured>> {
    let mut all = PLANNERS
        .iter()
        .map(|name| {
            let plan = Planner::from_name(name)?.plan_graph(graph, storage)?;
            measure(ctx, graph, &plan, runs, Memory::Buffers)
        })
        .collect::<wgalloc::Result<Vec<Measured>>>()?;
    let best = Planner::from_name("best")?.plan_graph(graph, storage)?;
    all.push(measure(ctx, graph, &best, runs, Memory::Pages)?);
    Ok(all)
}

fn main() -> wgalloc::Result<()> {
    let quick = std::env::var("WGALLOC_BENCH_QUICK").is_ok_and(|v| v == "1");
    let ctx = match GpuContext::from_env() {
        Ok(ctx) => ctx,
        Err(error) => {
            println!("SKIPPED: no wgpu adapter ({error})");
            return Ok(());
        }
    };
    let storage = ctx.buffer_types()?.storage.desc;
    let (traces, runs) = if quick {
        (&TRACES[..2], 1)
    } else {
        (TRACES, 3)
    };
    println!(
        "adapter: {} ({:?}); median of {runs} runs after a warm-up; bytes and ms per plan: {} (n / g / b)",
        ctx.info.name,
        ctx.info.backend,
        PLANNERS.join(" / ")
    );
    println!(
        "{:<17} {:>11} {:>11} {:>11} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}  proof",
        "trace",
        "naive B",
        "ggml B",
        "best B",
        "ggml%",
        "best%",
        "n enc",
        "g enc",
        "b enc",
        "n gpu",
        "g gpu",
        "b gpu",
        "b pages"
    );
    let mut all_verified = true;
    for name in traces {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("traces")
            .join(format!("{name}.json"));
        let graph = read_trace(&path)?;
        let m = measure_trace(&ctx, &graph, &storage, runs)?;
        let ok = m.iter().all(|m| m.verified);
        all_verified &= ok;
        let clock = if m.iter().all(|m| m.timed_on_gpu) {
            ""
        } else {
            " (wall)"
        };
        let pct = |b: u64| 100.0 * b as f64 / (m[0].bytes.max(1)) as f64;
        println!(
            "{:<17} {:>11} {:>11} {:>11} {:>5.1}% {:>5.1}% {:>7.2} {:>7.2} {:>7.2} {:>7.0} {:>7.0} {:>7.0} {:>7.0}  {}{clock}",
            name,
            m[0].bytes,
            m[1].bytes,
            m[2].bytes,
            pct(m[1].bytes),
            pct(m[2].bytes),
            ms(m[0].encode),
            ms(m[1].encode),
            ms(m[2].encode),
            ms(m[0].gpu),
            ms(m[1].gpu),
            ms(m[2].gpu),
            ms(m[3].gpu),
            if ok { "verified" } else { "MISMATCH" }
        );
    }
    if !all_verified {
        eprintln!("checksum run found mismatches");
        std::process::exit(1);
    }
    Ok(())
}
