//! `--dtype` on the default run, on `wgalloc model` and on `wgalloc generate` (issue
//! 27, item 2): f16 storage where the adapter offers `shader-f16`, half the planned
//! activation (and KV-cache) bytes, logits within the f16 tolerance, the same greedy
//! tokens as the f16-rounding CPU reference and the proof passing; on a device without
//! it (`WGALLOC_SHADER_F16=0` stands in for such an adapter) the run says so and uses
//! f32.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

/// The binary, run in `dir` with the tuner off (`WGALLOC_TUNE=0`): these tests are about
/// what the run does, not which tiles are fastest, and on lavapipe timing the
/// candidates means compiling each (seconds apiece). The default run's test in
/// `tests/cli_main_job.rs` tunes, as a user's run does; the tuner itself, f16 tiles
/// included, is `tests/gpu_tune.rs`.
fn wgalloc_in(dir: &PathBuf) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wgalloc"));
    c.current_dir(dir);
    c.env("WGALLOC_TUNE", "0");
    c
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wgalloc-f16-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const SMALL: [&str; 13] = [
    "model",
    "--layers",
    "1",
    "--width",
    "64",
    "--heads",
    "2",
    "--seq",
    "32",
    "--vocab",
    "128",
    "--then-seq",
    "16",
];

/// `wgalloc model SMALL --dtype dtype --json`, parsed.
fn model_json(dir: &PathBuf, dtype: &str) -> serde_json::Value {
    let out = wgalloc_in(dir)
        .args(SMALL)
        .args(["--dtype", dtype, "--json"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn model_dtype_f16_halves_the_activations_and_passes() {
    let Some(ctx) = common::f16_gpu("model_dtype_f16_halves_the_activations_and_passes") else {
        return;
    };
    let dir = scratch_dir("model");
    let f32_run = model_json(&dir, "f32");
    let f16_run = model_json(&dir, "f16");
    assert_eq!(f16_run["config"]["dtype"], "f16");
    assert_eq!(f16_run["dtype_asked"], "f16");
    assert_eq!(f32_run["config"]["dtype"], "f32");
    assert_eq!(f16_run["passed"], true, "{f16_run}");
    let bytes = |v: &serde_json::Value, key: &str| v["runs"][0][key].as_u64().expect("bytes");
    // 32 token ids (128 bytes) are the only tensor that keeps its size.
    let (a32, a16) = (
        bytes(&f32_run, "graph_bytes"),
        bytes(&f16_run, "graph_bytes"),
    );
    let slack = 2 * u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(128);
    assert!(
        2 * a16 >= a32 && 2 * a16 <= a32 + slack,
        "f16 {a16} B against f32 {a32} B"
    );
    assert_eq!(
        2 * f16_run["weight_bytes"].as_u64().expect("bytes"),
        f32_run["weight_bytes"].as_u64().expect("bytes")
    );
    for run in f16_run["runs"].as_array().expect("runs") {
        assert_eq!(run["logits_match"], true, "{run}");
        assert_eq!(run["proof_verified"], true, "{run}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_shader_f16_the_run_says_so_and_uses_f32() {
    if common::gpu().is_none() {
        return;
    }
    let dir = scratch_dir("fallback");
    let out = wgalloc_in(&dir)
        .env("WGALLOC_SHADER_F16", "0")
        .args(SMALL)
        .args(["--dtype", "f16"])
        .output()
        .expect("runs");
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("shader-f16 no"), "{report}");
    assert!(
        report.contains(
            "dtype    f16 asked, but this adapter does not offer shader-f16: running f32"
        ),
        "{report}"
    );
    assert!(report.contains("f32 storage"), "{report}");
    assert!(report.contains("verdict  PASS"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_default_run_takes_dtype_f16() {
    if common::f16_gpu("the_default_run_takes_dtype_f16").is_none() {
        return;
    }
    let dir = scratch_dir("default");
    let out = wgalloc_in(&dir)
        .args(["--dtype", "f16"])
        .output()
        .expect("runs");
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("shader-f16 yes"), "{report}");
    assert!(report.contains("f16 storage"), "{report}");
    assert!(report.contains("tolerance 1.0e-2"), "{report}");
    assert!(report.contains("verdict  PASS"), "{report}");
    // Its generation stores f16 too, checked against the f16-rounding reference.
    assert!(!report.contains("generation stores f32"), "{report}");
    assert!(
        report.contains("storage  f16 (weights, activations, KV-cache pages)"),
        "{report}"
    );
    assert!(
        report.contains("check    CPU reference: tokens identical"),
        "{report}"
    );
    assert!(report.contains("(tolerance 1e-2 x max(1, "), "{report}");
    assert!(!report.contains("FAIL"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `wgalloc generate` on the gpt2-tiny fixture, `--check --prove --json`, stored as
/// `dtype`, parsed.
fn generate_json(dir: &PathBuf, dtype: &str) -> serde_json::Value {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-tiny");
    let out = wgalloc_in(dir)
        .arg("generate")
        .arg("--weights")
        .arg(&fixture)
        .args(["--prompt-ids", "5,42,79,116,153,190,227,264,301,338,375"])
        .args(["--max-new-tokens", "10", "--prefill-chunk", "8"])
        .args(["--block-tokens", "4", "--check", "--prove", "--json"])
        .args(["--dtype", dtype])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn generate_dtype_f16_matches_the_rounded_reference_in_half_the_bytes() {
    if common::f16_gpu("generate_dtype_f16_matches_the_rounded_reference_in_half_the_bytes")
        .is_none()
    {
        return;
    }
    let dir = scratch_dir("generate");
    let g32 = generate_json(&dir, "f32");
    let g16 = generate_json(&dir, "f16");
    assert_eq!(
        (g32["dtype"].as_str(), g16["dtype"].as_str()),
        (Some("f32"), Some("f16"))
    );
    let check = &g16["cpu_check"];
    assert_eq!(check["passed"], true, "{check}");
    assert_eq!(check["tokens_match"], true, "{check}");
    let tolerance = check["tolerance"].as_f64().expect("tolerance");
    assert!((tolerance - 1e-2).abs() < 1e-6, "{check}");
    for proof in g16["proofs"].as_array().expect("proofs") {
        assert_eq!(proof["verified"], true, "{proof}");
    }
    let bytes = |v: &serde_json::Value, key: &str| v["memory"][key].as_u64().expect(key);
    assert_eq!(
        2 * bytes(&g16, "kv_used_bytes"),
        bytes(&g32, "kv_used_bytes"),
        "the KV cache's blocks at half the bytes"
    );
    assert_eq!(
        2 * bytes(&g16, "weights_bytes"),
        bytes(&g32, "weights_bytes")
    );
    let (a16, a32) = (
        bytes(&g16, "activation_bytes"),
        bytes(&g32, "activation_bytes"),
    );
    assert!(
        a16 < a32 && 10 * a16 <= 6 * a32,
        "activations f16 {a16} B against f32 {a32} B"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn generate_without_shader_f16_says_so_and_uses_f32() {
    if common::gpu().is_none() {
        return;
    }
    let dir = scratch_dir("generate-fallback");
    let out = wgalloc_in(&dir)
        .env("WGALLOC_SHADER_F16", "0")
        .args([
            "generate",
            "--seeded-shape",
            "1,32,2,64,32",
            "--max-new-tokens",
            "2",
        ])
        .args(["--check", "--dtype", "f16"])
        .output()
        .expect("runs");
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains(
            "dtype    f16 asked, but this adapter does not offer shader-f16: running f32"
        ),
        "{report}"
    );
    assert!(report.contains("storage  f32"), "{report}");
    assert!(report.contains("(tolerance 1e-3 x max(1, "), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_dtype_is_refused_and_the_default_run_s_option_belongs_to_it() {
    let dir = scratch_dir("bad");
    let out = wgalloc_in(&dir)
        .args(SMALL)
        .args(["--dtype", "f64"])
        .output()
        .expect("runs");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(report.contains("use f32 or f16"), "{report}");
    // `--dtype` before a subcommand is the default run's: not mixed with a subcommand.
    let out = wgalloc_in(&dir)
        .args(["--dtype", "f16", "info"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
