//! `wgalloc info` reports the chosen adapter's real limits, and fails with the list of
//! adapters when `WGPU_ADAPTER_NAME` matches none.

mod common;

use std::process::Command;

fn wgalloc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wgalloc"))
}

#[test]
fn info_json_reports_the_devices_real_limits_and_buffer_types() {
    let Some(ctx) = common::gpu() else { return };
    let out = wgalloc().args(["info", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let limits = &v["limits"];
    assert_eq!(limits["max_buffer_size"], ctx.limits.max_buffer_size);
    assert_eq!(
        limits["max_storage_buffer_binding_size"],
        ctx.limits.max_storage_buffer_binding_size
    );
    assert_eq!(
        limits["min_storage_buffer_offset_alignment"],
        ctx.limits.min_storage_buffer_offset_alignment
    );
    assert_eq!(v["chosen"]["name"], ctx.info.name.as_str());
    let storage = &v["buffer_types"]["storage"]["desc"];
    assert_eq!(
        storage["alignment"],
        ctx.limits.min_storage_buffer_offset_alignment
    );
    assert_eq!(
        storage["max_size"],
        ctx.limits
            .max_buffer_size
            .min(ctx.limits.max_storage_buffer_binding_size)
    );
    assert!(v["adapters"].as_array().is_some_and(|a| !a.is_empty()));
    if ctx.info.name.contains("llvmpipe") {
        // lavapipe's own numbers, not wgpu's defaults (256 MiB buffers, alignment 256).
        assert_eq!(limits["max_buffer_size"], (2u64 << 30) - 1);
        assert_eq!(limits["max_storage_buffer_binding_size"], 128u64 << 20);
        assert_eq!(limits["min_storage_buffer_offset_alignment"], 32);
    }
}

#[test]
fn info_text_names_the_chosen_adapter() {
    let Some(ctx) = common::gpu() else { return };
    let out = wgalloc().arg("info").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("chosen: {}", ctx.info.name)),
        "{text}"
    );
    assert!(
        text.contains("min_storage_buffer_offset_alignment"),
        "{text}"
    );
    assert!(text.contains("storage  alignment"), "{text}");
}

#[test]
fn info_with_unknown_adapter_name_fails_listing_the_adapters() {
    let Some(ctx) = common::gpu() else { return };
    let out = wgalloc()
        .arg("info")
        .env("WGPU_ADAPTER_NAME", "no-such-adapter-anywhere")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-adapter-anywhere"), "{stderr}");
    assert!(stderr.contains(&ctx.info.name), "{stderr}");
}
