//! Plan a trace of a real network with every planner and print the report (no GPU).
//!
//! ```sh
//! cargo run --release --example plan_trace -- traces/resnet50.json
//! ```

use std::time::Instant;

use wgalloc::graph::read_trace;
use wgalloc::plan::{lower_bounds, naive_size, BufferTypeDesc, Planner};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "traces/resnet50.json".to_string());
    let graph = read_trace(path.as_ref())?;
    // 32-byte offsets and 128 MiB chunks: lavapipe's storage buffer type.
    let storage = BufferTypeDesc::new("storage", 32, 128 << 20)?;
    let bounds = lower_bounds(&graph)?;
    println!(
        "{}: {} nodes, {} tensors; lower bound {} B (strict {} B), naive {} B",
        graph.name,
        graph.nodes.len(),
        graph.tensors.len(),
        bounds.inplace_aware,
        bounds.strict,
        naive_size(&graph)
    );
    println!(
        "{:<22} {:>14} {:>9} {:>10}",
        "planner", "bytes", "vs bound", "time"
    );
    for planner in Planner::all() {
        let started = Instant::now();
        let plan = planner.plan_graph(&graph, &storage)?;
        let elapsed = started.elapsed();
        plan.verify(&graph)?;
        let total = plan.total_size();
        println!(
            "{:<22} {:>14} {:>+8.2}% {:>8.2}ms",
            planner.name(),
            total,
            (total as f64 / bounds.inplace_aware as f64 - 1.0) * 100.0,
            elapsed.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
