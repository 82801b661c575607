//! `wgalloc plan` and `wgalloc run` on the shared traces: the JSON fields scripts rely
//! on, the proof on real memory, and the exit code when a plan is corrupted.

mod common;

use std::process::{Command, Output};

fn wgalloc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wgalloc"))
}

fn trace(name: &str) -> String {
    format!("{}/traces/{name}.json", env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn plan_json_has_the_fields_scripts_depend_on() {
    let out = wgalloc()
        .args(["plan", &trace("bert_base_seq128"), "--json"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for key in [
        "planner",
        "tensors",
        "buffers",
        "total_bytes",
        "lower_bound_bytes",
        "lower_bound_strict_bytes",
        "naive_bytes",
        "plan_seconds",
        "verified",
    ] {
        assert!(!v[key].is_null(), "missing {key}: {v}");
    }
    let buffer = &v["buffers"][0];
    for key in ["id", "alignment", "max_size", "chunks", "size"] {
        assert!(!buffer[key].is_null(), "buffer lacks {key}: {buffer}");
    }
    // `best` is the default planner; on bert it reaches the in-place-aware bound.
    assert_eq!(v["planner"], "best");
    assert_eq!(v["verified"], true);
    assert_eq!(v["lower_bound_bytes"], 2_359_424);
    assert_eq!(v["lower_bound_strict_bytes"], 3_539_072);
    assert_eq!(v["total_bytes"], 2_359_424);
    assert!(v["capacity"].is_null() && v["fits"] == true, "{v}");
}

#[test]
fn plan_with_a_capacity_reports_whether_it_fits_and_exits_one_when_not() {
    let csv = format!("{}/dsa/C.1048576.csv", env!("CARGO_MANIFEST_DIR"));
    let fits = wgalloc()
        .args(["plan", &csv, "--json", "--capacity", "1048576"])
        .args(["--time-limit", "2"])
        .output()
        .expect("runs");
    assert!(fits.status.success(), "{}", text(&fits));
    let v: serde_json::Value = serde_json::from_slice(&fits.stdout).expect("JSON");
    assert_eq!(v["planner"], "best");
    assert_eq!(v["fits"], true);
    assert_eq!(v["verified"], true);
    assert!(
        v["total_bytes"].as_u64().expect("total") <= 1_048_576,
        "{v}"
    );
    // Below C's lower bound (1,039,360) nothing fits: the best plan is still reported.
    let tight = wgalloc()
        .args(["plan", &csv, "--capacity", "1000000", "--time-limit", "0.5"])
        .output()
        .expect("runs");
    assert_eq!(tight.status.code(), Some(1), "{}", text(&tight));
    assert!(text(&tight).contains("DOES NOT FIT"), "{}", text(&tight));
    // `--max-size` is a hard limit for a CSV: above it is an error naming the numbers.
    let over = wgalloc()
        .args(["plan", &csv, "--max-size", "1000000", "--time-limit", "0.5"])
        .output()
        .expect("runs");
    assert_eq!(over.status.code(), Some(2), "{}", text(&over));
    assert!(
        text(&over).contains("more than the capacity of 1000000"),
        "{}",
        text(&over)
    );
    let bad = wgalloc()
        .args(["plan", &csv, "--time-limit", "soon"])
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad).contains("not a number of seconds"),
        "{}",
        text(&bad)
    );
    for unusable in ["--time-limit=-1", "--time-limit=inf", "--time-limit=NaN"] {
        let bad = wgalloc()
            .args(["plan", &csv, unusable])
            .output()
            .expect("runs");
        assert_eq!(bad.status.code(), Some(2), "{unusable}");
        assert!(
            text(&bad).contains("not a usable number of seconds"),
            "{}",
            text(&bad)
        );
    }
}

#[test]
fn plan_best_is_below_the_ggml_walk_on_resnet50() {
    let run = |planner: &str| {
        let out = wgalloc()
            .args(["plan", &trace("resnet50"), "--json", "--planner", planner])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        v["total_bytes"].as_u64().expect("total")
    };
    let (best, ggml) = (run("best"), run("ggml"));
    assert_eq!(best, 9_633_792);
    assert!(best < ggml, "best {best} vs ggml {ggml}");
}

#[test]
fn plan_honours_alignment_and_max_size_and_refuses_bad_ones() {
    let out = wgalloc()
        .args([
            "plan",
            &trace("mobilenet_v2"),
            "--json",
            "--alignment",
            "256",
        ])
        .args(["--max-size", "8000000"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let buffer = &v["buffers"][0];
    assert_eq!(buffer["alignment"], 256);
    assert!(
        buffer["chunks"].as_array().expect("chunks").len() > 1,
        "{v}"
    );
    for chunk in buffer["chunks"].as_array().expect("chunks") {
        assert!(chunk.as_u64().expect("size") <= 8_000_000, "{v}");
    }
    let bad = wgalloc()
        .args(["plan", &trace("mobilenet_v2"), "--alignment", "48"])
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).contains("not a power of two"), "{}", text(&bad));
    let unknown = wgalloc()
        .args(["plan", &trace("mobilenet_v2"), "--planner", "magic"])
        .output()
        .expect("runs");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown).contains("known planners"),
        "{}",
        text(&unknown)
    );
}

#[test]
fn run_proves_the_ggml_plan_of_a_trace_on_the_gpu() {
    if common::gpu().is_none() {
        return;
    }
    let out = wgalloc()
        .args(["run", &trace("mobilenet_v2"), "--json", "--planner", "ggml"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["verified"], true);
    assert_eq!(v["planner"], "ggml");
    assert!(v["total_bytes"].as_u64() < v["naive_bytes"].as_u64());
    assert_eq!(v["report"]["mismatches"], 0);
}

#[test]
fn run_proves_the_default_best_plan_at_the_bound() {
    if common::gpu().is_none() {
        return;
    }
    let out = wgalloc()
        .args(["run", &trace("mobilenet_v2"), "--json", "--time-limit", "1"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["planner"], "best");
    assert_eq!(v["verified"], true);
    assert_eq!(v["total_bytes"], 9_633_792);
    assert_eq!(v["report"]["mismatches"], 0);
}

#[test]
fn run_names_the_clobbered_tensor_and_exits_one() {
    if common::gpu().is_none() {
        return;
    }
    let out = wgalloc()
        .args(["run", &trace("mobilenet_v2"), "--inject-clobber"])
        .output()
        .expect("runs");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("INJECTED clobber"), "{report}");
    assert!(report.contains("was clobbered: node"), "{report}");
}

#[test]
fn run_proves_the_default_plan_of_bert_whose_broadcast_view_outgrows_its_root() {
    if common::gpu().is_none() {
        return;
    }
    let out = wgalloc()
        .args(["run", &trace("bert_base_seq128"), "--json"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["planner"], "best");
    assert_eq!(v["verified"], true);
    assert_eq!(v["total_bytes"], 2_359_424);
    assert_eq!(v["report"]["mismatches"], 0);
}

#[test]
fn a_tensor_over_the_devices_binding_limit_is_reported_as_never_fitting() {
    let Some(ctx) = common::gpu() else { return };
    // One input a word larger than the device's largest storage binding.
    let limit = ctx.limits.max_storage_buffer_binding_size;
    let size = limit + 4;
    let trace = format!(
        r#"{{"format":"tensor-graph-trace/1","name":"huge","dtype_bytes":4,
        "tensors":[{{"id":0,"name":"x","role":"input","bytes":{size},"shape":[{}]}},
                   {{"id":1,"name":"y","role":"output","bytes":4,"shape":[1]}}],
        "nodes":[{{"op":"sum","inputs":[0],"output":1}}]}}"#,
        size / 4
    );
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("huge-trace.json");
    std::fs::write(&path, trace).expect("write the trace");
    let out = wgalloc()
        .args([
            "run",
            path.to_str().expect("utf-8 path"),
            "--planner",
            "ggml",
        ])
        .output()
        .expect("runs");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("error (never fits on this device)"),
        "{report}"
    );
    assert!(report.contains("max storage binding size"), "{report}");
}

#[test]
fn a_malformed_trace_is_reported_as_bad_input() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("malformed-trace.json");
    std::fs::write(&path, r#"{"format":"tensor-graph-trace/1","tensors":[]}"#).expect("write");
    let out = wgalloc()
        .args(["plan", path.to_str().expect("utf-8 path")])
        .output()
        .expect("runs");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(report.contains("error (bad input)"), "{report}");
}
