//! `wgalloc generate` end to end: the Hugging Face fixture's greedy tokens from the
//! command line, the seeded default, `--dry-run`, and bad input's exit code.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/gpt2-tiny")
        .display()
        .to_string()
}

/// Runs the binary with the tuner off (`WGALLOC_TUNE=0`): these tests are about
/// generation, not which tiles are fastest, and on lavapipe timing the candidates
/// means compiling each. The default run's test in `tests/cli_main_job.rs` tunes.
fn wgalloc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wgalloc"))
        .env("WGALLOC_TUNE", "0")
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn reference() -> Value {
    let path = Path::new(&fixture()).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
}

#[test]
fn generate_with_the_fixture_prints_transformers_tokens() {
    if common::gpu().is_none() {
        return;
    }
    let r = reference();
    let prompt: Vec<String> = r["prompt_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.to_string())
        .collect();
    let prompt = prompt.join(",");
    let weights = fixture();
    let (code, out, err) = wgalloc(&[
        "generate",
        "--weights",
        &weights,
        "--prompt-ids",
        &prompt,
        "--max-new-tokens",
        "24",
        "--prove",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(json["generated_ids"], r["generated_ids"]);
    assert_eq!(json["prompt_ids"], r["prompt_ids"]);
    let warm = &json["steps"]["decode_after_warm_up"];
    assert!(warm["steps"].as_u64().unwrap_or(0) > 0, "{json}");
    for counter in [
        "planned",
        "buffers_created",
        "bind_groups_created",
        "pipelines_built",
    ] {
        assert_eq!(warm[counter], 0, "{counter}: {json}");
    }
    assert!(json["memory"]["kv_used_bytes"].as_u64().unwrap_or(0) > 0);
    let proofs = json["proofs"].as_array().expect("proofs");
    assert_eq!(
        proofs.len(),
        json["memory"]["buckets"].as_array().map_or(0, Vec::len)
    );
    assert!(proofs.iter().all(|p| p["verified"] == true), "{json}");
    assert!(
        json["timings"]["decode_tokens_per_second"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
}

#[test]
fn the_default_generate_runs_the_seeded_model() {
    if common::gpu().is_none() {
        return;
    }
    let (code, out, err) = wgalloc(&["generate", "--max-new-tokens", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("seeded (seed 42)"), "{out}");
    assert!(out.contains("tokens/s"), "{out}");
    assert!(out.contains("kv cache"), "{out}");
}

#[test]
fn dry_run_says_what_gpt2_small_needs_and_the_longest_context_a_budget_allows() {
    // `generate --dry-run --json` of GPT-2 small's shape with `extra` arguments: the
    // exit code, the JSON and stderr.
    let dry_run = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--dry-run",
            "--seeded-shape",
            "12,768,12,50257,1024",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = wgalloc(&args);
        let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("json: {e}: {err}"));
        (code, json, err)
    };
    let (code, full, err) = dry_run(&[]);
    assert_eq!(code, 0, "{err}");
    let fit = &full["fit"];
    assert_eq!(fit["longest_context"], 1024);
    let total = fit["total_bytes"].as_u64().expect("total");
    let kv = fit["kv_bytes"].as_u64().expect("kv");
    assert!(kv >= 12 * 2 * 768 * 4 * 1024, "{fit}");
    // A budget a little short of the total: a shorter context, exit code 1.
    let budget = (total - kv / 2).to_string();
    let (code, json, _) = dry_run(&["--budget", &budget]);
    assert_eq!(code, 1);
    let longest = json["fit"]["longest_context"].as_u64().expect("longest");
    assert!(longest > 0 && longest < 1024, "{json}");
    // The same budget with f16 storage: weights and cache at half the bytes, so the
    // whole context fits.
    let (code, json, err) = dry_run(&["--budget", &budget, "--dtype", "f16"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json["dtype"], "f16", "{json}");
    assert_eq!(json["fit"]["longest_context"], 1024, "{json}");
    // The cache comes in whole pages (f16 pages hold twice the tokens), so it shrinks
    // by less than half at this context; the weights halve.
    let half_kv = json["fit"]["kv_bytes"].as_u64().expect("kv");
    assert!(half_kv < kv, "{half_kv} {kv}");
    let weights = |j: &Value| j["fit"]["weight_bytes"].as_u64().expect("weights");
    assert!(weights(&json) * 2 <= weights(&full) + 4096, "{json} {full}");
}

#[test]
fn bad_prompts_and_checkpoints_exit_2_with_the_kind() {
    let weights = fixture();
    let (code, _, err) = wgalloc(&["generate", "--weights", &weights, "--prompt-ids", "1,512"]);
    assert_eq!(code, 2);
    assert!(err.contains("bad input") && err.contains("512"), "{err}");
    let (code, _, err) = wgalloc(&["generate", "--weights", "/nonexistent/dir"]);
    assert_eq!(code, 2);
    assert!(err.contains("i/o"), "{err}");
    // GPT-2's tokens for text are past the fixture's 512-token vocabulary.
    let (code, _, err) = wgalloc(&["generate", "--weights", &weights, "--prompt", "Hello world"]);
    assert_eq!(code, 2);
    assert!(err.contains("15496"), "{err}");
}

#[test]
fn a_text_prompt_is_tokenized_with_gpt2_bpe_and_the_output_decoded() {
    if common::gpu().is_none() {
        return;
    }
    // A seeded model with GPT-2's vocabulary, small enough for a software adapter.
    let (code, out, err) = wgalloc(&[
        "generate",
        "--seeded-shape",
        "1,64,4,50257,32",
        "--prompt",
        "Hello world",
        "--max-new-tokens",
        "3",
        "--check",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(json["prompt_ids"], serde_json::json!([15496, 995]));
    assert_eq!(json["generated_ids"].as_array().map(Vec::len), Some(3));
    assert!(json["text"].is_string(), "{json}");
    assert_eq!(json["cpu_check"]["passed"], true, "{json}");
}
