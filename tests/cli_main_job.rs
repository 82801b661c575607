//! The main job run as a user runs it: the binary with no arguments (the default
//! transformer), `wgalloc model` with other sizes, the exit code when the logits or the
//! proof fail, and clear errors for bad arguments.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

/// The binary, run in `dir` with the tuner off (`WGALLOC_TUNE=0`): these tests are about
/// what the run does, not which tiles are fastest, and on lavapipe timing the
/// candidates means compiling each (seconds apiece). The default run's test tunes, as a
/// user's run does; the tuner itself is `tests/gpu_tune.rs`.
fn wgalloc_in(dir: &PathBuf) -> Command {
    let mut c = tuning_wgalloc_in(dir);
    c.env("WGALLOC_TUNE", "0");
    c
}

/// The binary, run in `dir` with the tuner as the environment sets it (on by default).
fn tuning_wgalloc_in(dir: &PathBuf) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wgalloc"));
    c.current_dir(dir);
    c
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wgalloc-{name}-{}", std::process::id()));
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

const SMALL: [&str; 11] = [
    "model", "--layers", "1", "--width", "64", "--heads", "2", "--seq", "32", "--vocab", "128",
];

/// A model whose attention runs head by head (head width 6).
const PER_HEAD: [&str; 11] = [
    "model", "--layers", "1", "--width", "24", "--heads", "4", "--seq", "32", "--vocab", "128",
];

#[test]
fn the_default_run_passes_reuses_its_reservation_and_draws_the_plan() {
    if common::gpu().is_none() {
        return;
    }
    let dir = scratch_dir("default");
    let out = tuning_wgalloc_in(&dir).output().expect("runs");
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    for expected in [
        "adapter",
        "max storage binding",
        "weights",
        "lower bound",
        "logits",
        "PASS",
        "0 mismatches",
        "reused the reservation (needs_realloc false)",
        "verdict  PASS",
        "compile  every compute pipeline built once",
        "device   ",
        "tuning   ",
        "timing kernels",
    ] {
        assert!(
            report.contains(expected),
            "missing {expected:?} in:\n{report}"
        );
    }
    // Planned and device bytes side by side, where the backend has an allocator report.
    if report.contains("(Vulkan,") || report.contains("(Dx12,") {
        assert!(
            report.contains("device   planned 786432 B; the driver allocated"),
            "{report}"
        );
    } else {
        common::skip_for_capability(
            "the_default_run device bytes",
            "the backend has no allocator report",
        );
    }
    let svg = std::fs::read_to_string(dir.join("wgalloc-plan.svg")).expect("picture written");
    assert!(svg.starts_with("<svg") && svg.contains("<rect"), "{svg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_longer_sequence_replans_and_a_shorter_one_reuses_in_json() {
    if common::gpu().is_none() {
        return;
    }
    let dir = scratch_dir("json");
    let out = wgalloc_in(&dir)
        .args(SMALL)
        .args(["--then-seq", "16,48", "--json"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["reused_reservation"], false);
    assert_eq!(runs[1]["reused_reservation"], true);
    assert_eq!(runs[2]["reused_reservation"], false);
    assert_eq!(runs[2]["weights_rebuilt"], true);
    for run in runs {
        assert_eq!(run["passed"], true, "{run}");
        assert_eq!(run["proof_verified"], true, "{run}");
        let planned = run["graph_bytes"].as_u64().expect("bytes");
        assert!(planned >= run["lower_bound_bytes"].as_u64().expect("bound"));
        assert!(planned < run["naive_bytes"].as_u64().expect("naive"));
    }
    // The reservation made for 32 tokens serves 16 without growing.
    assert_eq!(runs[1]["activation_bytes"], runs[0]["activation_bytes"]);
    assert!(runs[2]["activation_bytes"].as_u64() > runs[0]["activation_bytes"].as_u64());
    assert_eq!(v["passed"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_clobbered_plan_fails_the_logits_and_the_proof_and_exits_non_zero() {
    if common::gpu().is_none() {
        return;
    }
    let dir = scratch_dir("clobber");
    // Heads of width 6 (not a multiple of 4) keep attention head by head: the fused
    // layers have no pair to clobber (every tensor live while another is written is
    // read by the same node, or the other is too large to move beside it).
    let out = wgalloc_in(&dir)
        .args(PER_HEAD)
        .args(["--inject-clobber", "--then-seq", "16"])
        .output()
        .expect("runs");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("INJECTED clobber"), "{report}");
    assert!(report.contains("proof    FAILED: tensor"), "{report}");
    assert!(report.contains("): FAIL"), "{report}");
    assert!(report.contains("verdict  FAIL"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inject_clobber_on_the_fused_decoder_is_refused_with_the_reason() {
    if common::gpu().is_none() {
        return;
    }
    let dir = scratch_dir("clobber-fused");
    // SMALL is fused (head width 32): no pair qualifies, so nothing would be planted
    // and an honest PASS would be printed; the run refuses instead.
    let out = wgalloc_in(&dir)
        .args(SMALL)
        .arg("--inject-clobber")
        .output()
        .expect("runs");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(report.contains("no clobber can be planted"), "{report}");
    assert!(!report.contains("verdict  PASS"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_model_arguments_give_clear_errors() {
    let dir = scratch_dir("bad-args");
    let cases: [(&[&str], &str); 4] = [
        (&["model", "--layers", "0"], "layers must be at least 1"),
        (
            &["model", "--width", "250", "--heads", "4"],
            "not divisible by heads",
        ),
        (&["model", "--vocab", "0"], "vocab must be at least 1"),
        (&["model", "--layers", "x"], "invalid value"),
    ];
    for (args, expected) in cases {
        let out = wgalloc_in(&dir).args(args).output().expect("runs");
        let report = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {report}");
        assert!(report.contains(expected), "{args:?}: {report}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sequence_too_long_for_the_device_is_refused_before_anything_runs() {
    let Some(ctx) = common::gpu() else { return };
    // seq x seq f32 scores just above the device's largest storage binding.
    let binding = ctx.limits.max_storage_buffer_binding_size;
    let mut seq = 1u64;
    while seq * seq * 4 <= binding {
        seq *= 2;
    }
    let dir = scratch_dir("too-long");
    let out = wgalloc_in(&dir)
        .args([
            "model", "--layers", "1", "--width", "64", "--heads", "2", "--vocab", "64",
        ])
        .args(["--seq", &seq.to_string()])
        .output()
        .expect("runs");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("attention scores") && report.contains("reduce --seq"),
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
