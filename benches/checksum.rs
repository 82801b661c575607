//! The checksum run over each shared trace, with the planned memory and with one buffer
//! per tensor (naive), in the same process: bytes and times side by side.
//!
//! `WGALLOC_BENCH_QUICK=1` runs the two smallest traces once each.
//! Run: `WGPU_BACKEND=vulkan cargo bench --bench checksum`.

use std::path::Path;
use std::time::Duration;

use wgalloc::device::GpuContext;
use wgalloc::exec::checksum::{create_plan_buffers, storage_buffer_type, ChecksumRun};
use wgalloc::graph::{read_trace, Graph};
use wgalloc::plan::{naive_plan, BufferTypeDesc, Plan};

const TRACES: &[&str] = &[
    "mobilenet_v2",
    "efficientnet_b0",
    "resnet50",
    "bert_base_seq128",
    "gpt2_seq256",
];

/// The planner under test: swap this line when a better planner lands.
fn planned(graph: &Graph, buffer_type: &BufferTypeDesc) -> wgalloc::Result<Plan> {
    Ok(naive_plan(graph, buffer_type)?)
}

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

fn measure(ctx: &GpuContext, graph: &Graph, plan: &Plan, runs: usize) -> wgalloc::Result<Measured> {
    let memory = create_plan_buffers(ctx, plan)?;
    let checksum = ChecksumRun::new(ctx, graph, plan, &memory)?;
    let warm = checksum.run()?;
    let mut verified = warm.verified();
    let (mut encode, mut gpu) = (Vec::new(), Vec::new());
    let mut timed_on_gpu = true;
    for _ in 0..runs {
        let report = checksum.run()?;
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

fn main() -> wgalloc::Result<()> {
    let quick = std::env::var("WGALLOC_BENCH_QUICK").is_ok_and(|v| v == "1");
    let ctx = match GpuContext::from_env() {
        Ok(ctx) => ctx,
        Err(error) => {
            println!("SKIPPED: no wgpu adapter ({error})");
            return Ok(());
        }
    };
    let buffer_type = storage_buffer_type(&ctx.limits)?;
    let (traces, runs) = if quick {
        (&TRACES[..2], 1)
    } else {
        (TRACES, 5)
    };
    println!(
        "adapter: {} ({:?}); median of {runs} runs after a warm-up",
        ctx.info.name, ctx.info.backend
    );
    println!(
        "{:<18} {:>9} {:>14} {:>14} {:>10} {:>10} {:>10} {:>10}  proof",
        "trace", "planner", "planned B", "naive B", "enc ms", "gpu ms", "naive enc", "naive gpu"
    );
    let mut all_verified = true;
    for name in traces {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("traces")
            .join(format!("{name}.json"));
        let graph = read_trace(&path)?;
        let plan = planned(&graph, &buffer_type)?;
        let a = measure(&ctx, &graph, &plan, runs)?;
        let b = measure(&ctx, &graph, &naive_plan(&graph, &buffer_type)?, runs)?;
        let ok = a.verified && b.verified;
        all_verified &= ok;
        let clock = if a.timed_on_gpu && b.timed_on_gpu {
            ""
        } else {
            " (wall)"
        };
        println!(
            "{:<18} {:>9} {:>14} {:>14} {:>10.3} {:>10.1} {:>10.3} {:>10.1}  {}{clock}",
            name,
            plan.planner,
            a.bytes,
            b.bytes,
            ms(a.encode),
            ms(a.gpu),
            ms(b.encode),
            ms(b.gpu),
            if ok { "verified" } else { "MISMATCH" }
        );
    }
    if !all_verified {
        eprintln!("checksum run found mismatches");
        std::process::exit(1);
    }
    Ok(())
}
