//! How steady the tuner's choices are: tunes a few shape classes in this process and
//! prints each class's choice and the time spent tuning, for `tools/tune_steadiness.sh`
//! to run in many processes and count how often each class's choice agrees with its
//! most common one (docs/tune.md, "Interleaved rounds").
//!
//! `WGALLOC_TUNE_CACHE=<fresh file> cargo run --release --example tune_steadiness`
//! prints `choice <class> <tile or form>` per class, then `tune_ms <ms>`. Only the
//! public tuner and executor are used, so the same file builds on earlier commits.
//! The cache file must not hold the classes yet (each process must time them).

use wgalloc::device::GpuContext;
use wgalloc::exec::{tune, Executor, TuneSettings};
use wgalloc::graph::{DType, Graph, GraphBuilder};

/// A graph of one node of `op` over inputs of `shapes` with `params`, its output
/// `out`; the node to ask the tuner about is the last one.
fn one_node(op: &str, shapes: &[&[u64]], out: &[u64], params: &[f32]) -> Graph {
    let mut b = GraphBuilder::new(op);
    let ids: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| b.input(format!("x{i}"), DType::F32, s))
        .collect();
    b.node_with_params(op, &ids, out, false, params);
    b.build().expect("a valid graph")
}

/// The classes timed: a label and a one-node graph each.
fn classes() -> Vec<(&'static str, Graph)> {
    let matmul = |m: u64, k: u64, n: u64| one_node("matmul", &[&[m, k], &[k, n]], &[m, n], &[]);
    let bt = |m: u64, k: u64, n: u64| one_node("matmul_bt", &[&[m, k], &[n, k]], &[m, n], &[]);
    let attention = |seq: u64, heads: u64, hd: u64| {
        one_node(
            "attention_causal",
            &[&[seq, 3 * heads * hd]],
            &[seq, heads * hd],
            &[heads as f32, 1.0 / (hd as f32).sqrt()],
        )
    };
    let norm = |rows: u64, cols: u64| {
        one_node(
            "layer_norm",
            &[&[rows, cols], &[cols], &[cols]],
            &[rows, cols],
            &[1e-5],
        )
    };
    let (short_attention, short_norm) = (attention(32, 8, 32), norm(64, 768));
    let (attention, norm) = (attention(128, 4, 64), norm(256, 512));
    vec![
        ("matmul_128x256x768", matmul(128, 256, 768)),
        ("matmul_64x768x3072", matmul(64, 768, 3072)),
        ("matmul_bt_64x256x1024", bt(64, 256, 1024)),
        ("matvec_1x768x768", matmul(1, 768, 768)),
        ("matvec_4x768x768", matmul(4, 768, 768)),
        ("matmul_16x256x1024", matmul(16, 256, 1024)),
        ("matmul_bt_32x512x512", bt(32, 512, 512)),
        ("attention_s128_h4_d64", attention),
        ("attention_s32_h8_d32", short_attention),
        ("layer_norm_256x512", norm),
        ("layer_norm_64x768", short_norm),
    ]
}

fn main() {
    let ctx = GpuContext::from_env().expect("a device");
    tune::configure(&ctx, TuneSettings::from_env());
    let exec = Executor::new(&ctx);
    for (label, graph) in classes() {
        let step = graph.nodes.len() - 1;
        let choice = exec.tuned_choice(&graph, step).expect("resolves");
        let name = choice.map_or("-", |v| v.name());
        println!("choice {label} {name}");
    }
    let summary = tune::tuning(&ctx);
    for choice in &summary.choices {
        eprintln!("  {}", choice.line());
    }
    println!("tune_ms {:.1}", summary.time.as_secs_f64() * 1e3);
}
