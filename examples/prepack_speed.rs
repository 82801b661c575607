//! Packed vs unpacked matmul on the default adapter: one `x · W` node per graph (and
//! `x · Wᵀ`), the weight either read as it is (`matmul` / `matmul_bt`) or pre-packed
//! into the shared cache (`matmul_packed`). Prints the median of the executor's wait
//! time (GPU pass time when the device has timestamps) over repeated runs, and the
//! one-off cost of packing on the CPU and uploading.
//!
//! ```sh
//! WGPU_BACKEND=vulkan cargo run --example prepack_speed -- 15
//! ```

#[path = "../tests/common/product.rs"]
mod product;

use std::collections::HashMap;
use std::time::Duration;

use product::{product, PreparedProduct, Product};
use wgalloc::device::GpuContext;
use wgalloc::exec::Executor;
use wgalloc::graph::{Graph, TensorId};
use wgalloc::prepack::PrepackedWeightCache;

fn values(len: u64) -> Vec<f32> {
    (0..len)
        .map(|i| ((i % 251) as f32 - 125.0) / 125.0)
        .collect()
}

/// Median time of `runs` runs of `graph` (the weight packed into `cache` if given),
/// and the time packing and uploading took.
fn time_runs(
    ctx: &GpuContext,
    graph: &Graph,
    inputs: &HashMap<TensorId, Vec<f32>>,
    cache: Option<&PrepackedWeightCache>,
    runs: usize,
) -> Result<(Duration, Duration), wgalloc::Error> {
    let prepared = PreparedProduct::new(ctx, graph, inputs, cache)?;
    let memory = prepared.memory();
    let mut executor = Executor::new(ctx);
    executor.run(prepared.graph(), &memory)?; // pipelines and bind groups
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            executor
                .run(prepared.graph(), &memory)
                .map(|r| r.gpu_time.unwrap_or(r.wait_time))
        })
        .collect::<Result<_, _>>()?;
    times.sort();
    Ok((times[times.len() / 2], prepared.prepare))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(15)
        .max(1);
    let ctx = GpuContext::from_env()?;
    println!(
        "adapter: {} ({:?}); times: {}, median of {runs}",
        ctx.info.name,
        ctx.info.backend,
        if ctx.has_timestamps() {
            "GPU pass (timestamp queries)"
        } else {
            "submit-to-done wall time"
        }
    );
    println!(
        "{:<22} {:>12} {:>12} {:>8} {:>14}",
        "m x k x n", "unpacked", "packed", "speedup", "pack+upload"
    );
    for (m, k, n) in [
        (128, 256, 256),
        (128, 256, 1024),
        (128, 1024, 256),
        (512, 512, 512),
        (1, 1024, 1024),
        (100, 300, 500),
    ] {
        for transposed in [false, true] {
            let Product { graph, x, w, .. } = product(m, k, n, transposed)?;
            let inputs = HashMap::from([(x, values(m * k)), (w, values(k * n))]);
            let cache = PrepackedWeightCache::default();
            let (plain, _) = time_runs(&ctx, &graph, &inputs, None, runs)?;
            let (packed, prepare) = time_runs(&ctx, &graph, &inputs, Some(&cache), runs)?;
            println!(
                "{:<22} {:>10.3}ms {:>10.3}ms {:>7.2}x {:>12.3}ms",
                format!("{m}x{k}x{n}{}", if transposed { " (bt)" } else { "" }),
                plain.as_secs_f64() * 1e3,
                packed.as_secs_f64() * 1e3,
                plain.as_secs_f64() / packed.as_secs_f64().max(1e-9),
                prepare.as_secs_f64() * 1e3,
            );
        }
    }
    Ok(())
}
