//! Planning time of the ggml-semantics planner (`plan_graph`, validation included) on
//! every shared trace and on synthetic chain and transformer graphs of 1k to 1M nodes.
//! Prints a table with the best and median time per node, and how much of it is the
//! graph's own validation (`Graph::validate`, which `plan_graph` runs first).
//!
//! `cargo bench --bench plan_time`; `WGALLOC_BENCH_QUICK=1` skips 1M nodes and runs
//! fewer repetitions; `WGALLOC_BENCH_ONLY=transformer,chain1000000` keeps only the graphs
//! whose name contains `transformer` or is `chain1000000`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use wgalloc::graph::synthetic::{chain, transformer};
use wgalloc::graph::{read_trace, Graph};
use wgalloc::plan::{plan_graph, BufferTypeDesc};

const TRACES: [&str; 5] = [
    "bert_base_seq128",
    "efficientnet_b0",
    "gpt2_seq256",
    "mobilenet_v2",
    "resnet50",
];

fn reps_for(nodes: usize, quick: bool) -> usize {
    let budget: usize = if quick { 200_000 } else { 5_000_000 };
    (budget / nodes.max(1)).clamp(if quick { 2 } else { 8 }, 200)
}

fn measure(graph: &Graph, buffer_type: &BufferTypeDesc, reps: usize) -> (Duration, Duration, u64) {
    let mut times = Vec::with_capacity(reps);
    let mut total = 0;
    for _ in 0..reps {
        let start = Instant::now();
        let plan = plan_graph(graph, buffer_type);
        times.push(start.elapsed());
        match plan {
            Ok(plan) => total = std::hint::black_box(plan).total_size(),
            Err(e) => {
                eprintln!("{}: planning failed: {e}", graph.name);
                std::process::exit(1);
            }
        }
    }
    times.sort();
    (times[0], times[times.len() / 2], total)
}

/// Whether `WGALLOC_BENCH_ONLY` (if set) keeps the graph of this name: one of its
/// comma-separated items is the name, or has no digit and is part of the name.
fn wanted(name: &str) -> bool {
    std::env::var_os("WGALLOC_BENCH_ONLY").is_none_or(|only| {
        only.to_string_lossy().split(',').any(|item| {
            item == name || (!item.chars().any(|c| c.is_ascii_digit()) && name.contains(item))
        })
    })
}

fn row(graph: &Graph, buffer_type: &BufferTypeDesc, quick: bool) {
    let nodes = graph.nodes.len();
    let reps = reps_for(nodes, quick);
    let (best, median, total) = measure(graph, buffer_type, reps);
    let validate = (0..reps)
        .map(|_| {
            let start = Instant::now();
            let ok = std::hint::black_box(graph.validate()).is_ok();
            (start.elapsed(), ok)
        })
        .filter(|&(_, ok)| ok)
        .map(|(d, _)| d)
        .min()
        .unwrap_or_default();
    let per_node = |d: Duration| d.as_nanos() as f64 / nodes.max(1) as f64;
    println!(
        "| {:<22} | {:>9} | {:>9} | {:>5} | {:>10.3} | {:>10.1} | {:>10.1} | {:>13.1} | {:>14} |",
        graph.name,
        nodes,
        graph.tensors.len(),
        reps,
        best.as_secs_f64() * 1e3,
        per_node(best),
        per_node(median),
        per_node(validate),
        total
    );
}

fn main() {
    let quick = std::env::var_os("WGALLOC_BENCH_QUICK").is_some_and(|v| v != "0");
    let storage = match BufferTypeDesc::new("storage", 32, 1 << 31) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    println!(
        "plan_graph, alignment 32, max size 2 GiB{}",
        if quick { " (quick)" } else { "" }
    );
    println!(
        "| {:<22} | {:>9} | {:>9} | {:>5} | {:>10} | {:>10} | {:>10} | {:>13} | {:>14} |",
        "graph",
        "nodes",
        "tensors",
        "reps",
        "best ms",
        "ns/node",
        "median",
        "of it: valid.",
        "total bytes"
    );
    println!(
        "|{:-<24}|{:->11}|{:->11}|{:->7}|{:->12}|{:->12}|{:->12}|{:->15}|{:->16}|",
        "", "", "", "", "", "", "", "", ""
    );
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces");
    for name in TRACES.into_iter().filter(|name| wanted(name)) {
        match read_trace(&dir.join(format!("{name}.json"))) {
            Ok(graph) => row(&graph, &storage, quick),
            Err(e) => eprintln!("{name}: {e}"),
        }
    }
    let sizes: &[usize] = if quick {
        &[1_000, 10_000, 100_000]
    } else {
        &[1_000, 10_000, 100_000, 1_000_000]
    };
    for &n in sizes {
        for (kind, make) in [
            ("chain", chain as fn(usize) -> _),
            ("transformer", transformer),
        ] {
            if !wanted(&format!("{kind}{n}")) {
                continue;
            }
            match make(n) {
                Ok(graph) => row(&graph, &storage, quick),
                Err(e) => eprintln!("synthetic {n}: {e}"),
            }
        }
    }
}
