//! Import of the five ONNX files in onnx/ (saved without their weight data): every one
//! imports, plans at its bound, agrees with the JSON trace of the same network, never
//! panics on corrupt bytes, and proves on the GPU with `wgalloc run`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;
use wgalloc::graph::{parse_onnx, read_onnx, read_trace, Graph, GraphError, OnnxOptions, Role};
use wgalloc::plan::{lower_bounds, BufferTypeDesc, Planner};

const MODELS: [&str; 5] = [
    "bert_base_seq128",
    "efficientnet_b0",
    "gpt2_seq256",
    "mobilenet_v2",
    "resnet50",
];

fn onnx_path(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("onnx")
        .join(format!("{model}.onnx"))
}

fn onnx(model: &str) -> Graph {
    read_onnx(&onnx_path(model), &OnnxOptions::default()).unwrap_or_else(|e| panic!("{model}: {e}"))
}

fn trace(model: &str) -> Graph {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(format!("{model}.json"));
    read_trace(&path).unwrap_or_else(|e| panic!("{model}: {e}"))
}

/// The `best` plan's size and the in-place-aware lower bound, as `wgalloc plan` reports
/// them (alignment 32, 2 GiB chunks).
fn best_and_bound(graph: &Graph) -> (u64, u64) {
    let buffer = BufferTypeDesc::new("storage", 32, 1 << 31).expect("buffer type");
    let plan = Planner::from_name("best")
        .expect("planner")
        .plan_graph(graph, &buffer)
        .expect("plans");
    plan.verify(graph).expect("verifies");
    (
        plan.total_size(),
        lower_bounds(graph).expect("bounds").inplace_aware,
    )
}

#[test]
fn every_shared_onnx_file_imports_with_its_name_and_roles() {
    for model in MODELS {
        let g = onnx(model);
        assert_eq!(g.name, model);
        let s = g.summary();
        assert_eq!(s.input.count, 1, "{model}");
        assert_eq!(s.output.count, 1, "{model}");
        assert!(s.weight.bytes > 1_000_000, "{model}");
        assert!(s.intermediate.count > 50, "{model}");
    }
}

#[test]
fn token_ids_are_int64_inputs() {
    for (model, bytes) in [("gpt2_seq256", 256 * 8), ("bert_base_seq128", 128 * 8)] {
        let g = onnx(model);
        let input = g
            .tensors
            .iter()
            .find(|t| t.role == Role::Input)
            .expect("input");
        assert_eq!(input.dtype, wgalloc::graph::DType::I64);
        assert_eq!(input.size, bytes, "{model}");
    }
}

#[test]
fn gpt2s_transposed_tied_weight_is_a_weight_not_an_activation() {
    let g = onnx("gpt2_seq256");
    let vocab_by_width = 50257 * 768 * 4;
    let big: Vec<_> = g
        .tensors
        .iter()
        .filter(|t| t.size == vocab_by_width)
        .collect();
    assert_eq!(big.len(), 2, "the embedding and its folded transpose");
    assert!(big.iter().all(|t| t.role == Role::Weight));
    assert!(g
        .nodes
        .iter()
        .all(|n| n.op != "transpose" || g.tensors[n.output.index()].size != vocab_by_width));
}

/// The ONNX import and the JSON trace of one network: `best` and the in-place-aware
/// bound, ONNX over trace. Exporters fuse and split differently (docs/onnx.md):
/// torchvision's ONNX folds batch norm into the convolutions, so a Relu can write over
/// its Conv (below the trace); bert's ONNX spells GELU as five elementwise ops whose
/// input stays live across them, where the trace has one in-place `gelu` (above it).
const AGREEMENT: [(&str, f64, f64); 5] = [
    // (model, lowest ratio, highest ratio)
    ("bert_base_seq128", 1.45, 1.55),
    ("efficientnet_b0", 0.99, 1.01),
    ("gpt2_seq256", 0.99, 1.01),
    ("mobilenet_v2", 0.60, 0.65),
    ("resnet50", 0.70, 0.80),
];

#[test]
fn onnx_and_trace_of_one_network_agree_within_the_stated_tolerance() {
    for (model, low, high) in AGREEMENT {
        let (onnx_best, onnx_bound) = best_and_bound(&onnx(model));
        let (trace_best, trace_bound) = best_and_bound(&trace(model));
        assert_eq!(onnx_best, onnx_bound, "{model}: best reaches the bound");
        for (what, a, b) in [
            ("best", onnx_best, trace_best),
            ("bound", onnx_bound, trace_bound),
        ] {
            let ratio = a as f64 / b as f64;
            assert!(
                (low..=high).contains(&ratio),
                "{model} {what}: onnx {a} / trace {b} = {ratio:.3}, outside [{low}, {high}]"
            );
        }
    }
}

#[test]
fn a_truncated_shared_file_is_a_typed_error() {
    let bytes = std::fs::read(onnx_path("resnet50")).expect("reads");
    for cut in [10, bytes.len() / 3, bytes.len() - 3] {
        match parse_onnx(&bytes[..cut], &OnnxOptions::default()) {
            Err(GraphError::NotOnnx { .. }) => {}
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

fn mobilenet_bytes() -> &'static [u8] {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(onnx_path("mobilenet_v2")).expect("reads"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("WGALLOC_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
    ))]

    /// Corrupt bytes anywhere in a real file give a graph that validates or an error,
    /// never a panic.
    #[test]
    fn mutated_onnx_bytes_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = mobilenet_bytes().to_vec();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        if let Ok(graph) = parse_onnx(&bytes, &OnnxOptions::default()) {
            prop_assert!(graph.validate().is_ok());
        }
    }
}

fn wgalloc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wgalloc"))
}

#[test]
fn plan_prints_sizes_bounds_and_verified_for_an_onnx_file() {
    let path = onnx_path("resnet50");
    let out = wgalloc()
        .args(["plan", path.to_str().expect("utf-8"), "--json"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["verified"], true);
    assert_eq!(v["name"], "resnet50");
    assert_eq!(v["total_bytes"], v["lower_bound_bytes"]);
    assert!(v["load_seconds"].as_f64().is_some());
}

#[test]
fn an_unknown_dim_flag_is_accepted_and_a_malformed_one_refused() {
    let path = onnx_path("mobilenet_v2");
    let path = path.to_str().expect("utf-8");
    let ok = wgalloc()
        .args(["graph", path, "--dim", "batch=1"])
        .output()
        .expect("runs");
    assert!(ok.status.success());
    let bad = wgalloc()
        .args(["graph", path, "--dim", "batch"])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("NAME=VALUE"));
}

#[test]
fn run_proves_every_onnx_file_on_the_gpu() {
    if common::gpu().is_none() {
        return;
    }
    for model in MODELS {
        let path = onnx_path(model);
        let out = wgalloc()
            .args(["run", path.to_str().expect("utf-8"), "--json"])
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{model}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["verified"], true, "{model}");
        assert_eq!(v["report"]["mismatches"], 0, "{model}");
    }
}
