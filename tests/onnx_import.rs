//! Import of the five ONNX files in onnx/ (saved without their weight data): every one
//! imports, plans at its bound, agrees with the JSON trace of the same network, never
//! panics on corrupt bytes, and proves on the GPU with `wgalloc run`. With their
//! `value_info` stripped, tract's shape inference (feature `onnx-infer`) gives the same
//! graphs; without the feature, a value the file does not type is a `ShapeUnknown`.

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

/// The files whose `value_info` does not type every value: bert's leaves the batch
/// dimension after its embedding `Expand` symbolic (`unk__N`), and it propagates.
const NEEDS_LIBRARY: [&str; 1] = ["bert_base_seq128"];

/// Whether `model` imports in this build: all of them with the `onnx-infer` feature.
fn importable(model: &str) -> bool {
    cfg!(feature = "onnx-infer") || !NEEDS_LIBRARY.contains(&model)
}

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
    for model in MODELS.into_iter().filter(|m| importable(m)) {
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
        if !importable(model) {
            continue;
        }
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
    for (model, low, high) in AGREEMENT.into_iter().filter(|a| importable(a.0)) {
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

/// Reads a protobuf varint at `at` and moves `at` past it.
fn varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return value;
        }
    }
    panic!("varint longer than 10 bytes");
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The protobuf `message` with every field number `drop` of the sub-message at `path`
/// (field numbers, outermost first) removed; every other byte is copied as it is, so
/// nothing the crate's own schema subset does not know is lost.
fn without_field(message: &[u8], path: &[u64], drop: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len());
    let mut at = 0;
    while at < message.len() {
        let start = at;
        let key = varint(message, &mut at);
        let (field, wire) = (key >> 3, key & 7);
        let mut body = at;
        let end = match wire {
            0 => {
                varint(message, &mut at);
                at
            }
            1 => at + 8,
            2 => {
                let len = varint(message, &mut at) as usize;
                body = at;
                at + len
            }
            5 => at + 4,
            other => panic!("wire type {other} at byte {start}"),
        };
        match path.split_first() {
            Some((&f, rest)) if f == field && wire == 2 => {
                let inner = without_field(&message[body..end], rest, drop);
                put_varint(&mut out, key);
                put_varint(&mut out, inner.len() as u64);
                out.extend_from_slice(&inner);
            }
            None if field == drop => {}
            _ => out.extend_from_slice(&message[start..end]),
        }
        at = end;
    }
    out
}

/// A shipped file with its graph's `value_info` (ModelProto.graph = 7,
/// GraphProto.value_info = 13) removed: only inputs, outputs and initializers are typed.
fn without_value_info(model: &str) -> Vec<u8> {
    let bytes = std::fs::read(onnx_path(model)).expect("reads");
    let stripped = without_field(&bytes, &[7], 13);
    assert!(stripped.len() < bytes.len(), "{model} had value_info");
    stripped
}

/// What must not change when tract, not the file, gives the shapes: every tensor as the
/// planner sees it (name, element type, shape, size, role, root), one line each.
#[cfg(feature = "onnx-infer")]
fn tensors(graph: &Graph) -> Vec<String> {
    graph
        .tensors
        .iter()
        .map(|t| {
            format!(
                "{} {:?} {:?} {} {:?} {:?}",
                t.name, t.dtype, t.shape, t.size, t.role, t.view_of
            )
        })
        .collect()
}

/// The file whose shape arithmetic reads initializers kept in the missing weight file
/// (the dynamo exporter stores even gpt2's two-element reshape targets externally):
/// without `value_info`, nothing in the file gives those shapes.
#[cfg(feature = "onnx-infer")]
const SHAPES_IN_WEIGHT_FILE: [&str; 1] = ["gpt2_seq256"];

#[cfg(feature = "onnx-infer")]
#[test]
fn without_value_info_tract_types_every_value_and_the_plans_are_unchanged() {
    for model in MODELS {
        if SHAPES_IN_WEIGHT_FILE.contains(&model) {
            continue;
        }
        let original = onnx(model);
        let stripped = parse_onnx(&without_value_info(model), &OnnxOptions::default())
            .unwrap_or_else(|e| panic!("{model} without value_info: {e}"));
        assert_eq!(tensors(&stripped), tensors(&original), "{model}");
        assert_eq!(stripped.nodes.len(), original.nodes.len(), "{model}");
        assert_eq!(
            best_and_bound(&stripped),
            best_and_bound(&original),
            "{model}: best plan and in-place-aware bound"
        );
    }
}

#[cfg(feature = "onnx-infer")]
#[test]
fn without_value_info_a_shape_held_in_the_missing_weight_file_is_shape_unknown() {
    for model in SHAPES_IN_WEIGHT_FILE {
        match parse_onnx(&without_value_info(model), &OnnxOptions::default()) {
            Err(GraphError::ShapeUnknown {
                value,
                node,
                problem,
            }) => {
                // gpt2's first node reshapes the ids by an external initializer.
                assert_eq!(value, "view", "{model}");
                assert!(node.contains("Reshape"), "{node}");
                assert!(problem.contains("tract"), "{problem}");
                assert!(problem.contains("external"), "{problem}");
            }
            other => panic!("{model}: {other:?}"),
        }
    }
}

#[cfg(not(feature = "onnx-infer"))]
#[test]
fn without_value_info_and_without_the_library_a_value_is_shape_unknown() {
    for model in MODELS {
        match parse_onnx(&without_value_info(model), &OnnxOptions::default()) {
            Err(GraphError::ShapeUnknown {
                value,
                node,
                problem,
            }) => {
                assert!(!value.is_empty() && !node.is_empty(), "{model}");
                assert!(
                    problem.contains("no value_info gives its shape"),
                    "{problem}"
                );
                assert!(problem.contains("--features onnx-infer"), "{problem}");
                assert!(problem.contains("infer_shapes"), "{problem}");
            }
            other => panic!("{model}: {other:?}"),
        }
    }
}

#[cfg(not(feature = "onnx-infer"))]
#[test]
fn bert_needs_the_library_and_its_error_names_the_symbol() {
    for model in NEEDS_LIBRARY {
        let bytes = std::fs::read(onnx_path(model)).expect("reads");
        match parse_onnx(&bytes, &OnnxOptions::default()) {
            Err(GraphError::ShapeUnknown { value, problem, .. }) => {
                assert!(value.starts_with("/inner/embeddings/"), "{model}: {value}");
                assert!(problem.contains("\"unk__"), "{problem}");
                assert!(problem.contains("--features onnx-infer"), "{problem}");
            }
            other => panic!("{model}: {other:?}"),
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
    for model in MODELS.into_iter().filter(|m| importable(m)) {
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
