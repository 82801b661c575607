//! The fused and tiled kernels against their CPU references on seeded random data:
//! tiled matmuls on shapes around the tile edges (both tiles), `matmul_gelu`,
//! `matmul_add` in place and out of place, and `attention_causal` on sequences shorter
//! and longer than one key block, not multiples of the query block. Tolerance
//! |gpu − cpu| ≤ 1e-4 · (1 + |cpu|). The runner is `common/kernel_run.rs`, shared with
//! `gpu_kernels.rs`.
//!
//! No adapter: each test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;
#[path = "common/kernel_run.rs"]
mod kernel_run;

use std::collections::HashMap;

use kernel_run::{assert_close, check_matmul, random, run_both};
use wgalloc::exec::TensorData;
use wgalloc::graph::{DType, GraphBuilder};

#[test]
fn tiled_matmuls_match_cpu_around_the_tile_edges() {
    let Some(ctx) = common::gpu() else { return };
    // (3, 12, 8) takes the 4-row tile (one workgroup), the others the 8-row tile;
    // 130 columns is no multiple of 4 (matmul_bt only).
    for (m, k, n) in [(3, 12, 8), (37, 36, 132), (129, 64, 260), (9, 44, 130)] {
        for op in ["matmul", "matmul_bt"] {
            if op == "matmul" && n % 4 != 0 {
                continue;
            }
            check_matmul(&ctx, op, m, k, n);
        }
    }
}

#[test]
fn matmul_gelu_and_matmul_add_match_cpu_in_place_and_out_of_place() {
    let Some(ctx) = common::gpu() else { return };
    for (m, k, n) in [(5, 8, 4), (70, 32, 128)] {
        let mut b = GraphBuilder::new("gelu");
        let a = b.input("a", DType::F32, &[m, k]);
        let w = b.weight("w", DType::F32, &[k, n]);
        b.node("matmul_gelu", &[a, w], &[m, n], false);
        let g = b.build().expect("valid");
        let mut values = HashMap::new();
        values.insert(a, TensorData::F32(random(m * k, (m * k) as usize, 1.0)));
        values.insert(w, TensorData::F32(random(k * n + 1, (k * n) as usize, 1.0)));
        let (gpu, cpu) = run_both(&ctx, &g, &values);
        assert_close(&format!("matmul_gelu {m}x{k}x{n}"), &gpu, &cpu, 1e-4);

        for inplace in [true, false] {
            let mut b = GraphBuilder::new("add");
            let r = b.input("r", DType::F32, &[m, n]);
            let a = b.input("a", DType::F32, &[m, k]);
            let w = b.weight("w", DType::F32, &[k, n]);
            // the residual is scaled first so that it is an activation the planner
            // may write over
            let rs = b.node_with_params("scale", &[r], &[m, n], false, &[0.5]);
            b.node("matmul_add", &[rs, a, w], &[m, n], inplace);
            let g = b.build().expect("valid");
            let mut values = HashMap::new();
            values.insert(r, TensorData::F32(random(m * n + 2, (m * n) as usize, 2.0)));
            values.insert(a, TensorData::F32(random(m * k, (m * k) as usize, 1.0)));
            values.insert(w, TensorData::F32(random(k * n + 1, (k * n) as usize, 1.0)));
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(
                &format!("matmul_add {m}x{k}x{n} in place {inplace}"),
                &gpu,
                &cpu,
                1e-4,
            );
        }
    }
}

#[test]
fn fused_attention_matches_cpu_across_key_blocks() {
    let Some(ctx) = common::gpu() else { return };
    // (seq, heads, head width): one query, a partial query block, several key blocks
    // (64 keys each) with a partial last one, and the widest head.
    for (seq, heads, hd) in [(1, 1, 4), (7, 2, 8), (70, 3, 16), (130, 2, 64), (9, 1, 256)] {
        let width = heads * hd;
        let mut b = GraphBuilder::new("attention");
        let qkv = b.input("qkv", DType::F32, &[seq, 3 * width]);
        let x = b.node_with_params("scale", &[qkv], &[seq, 3 * width], false, &[1.0]);
        b.node_with_params(
            "attention_causal",
            &[x],
            &[seq, width],
            false,
            &[heads as f32, 1.0 / (hd as f32).sqrt()],
        );
        let g = b.build().expect("valid");
        let mut values = HashMap::new();
        let len = (seq * 3 * width) as usize;
        values.insert(qkv, TensorData::F32(random(seq + hd, len, 1.5)));
        let (gpu, cpu) = run_both(&ctx, &g, &values);
        assert_close(
            &format!("attention seq {seq} heads {heads} hd {hd}"),
            &gpu,
            &cpu,
            1e-4,
        );
    }
}

#[test]
fn the_fused_decoder_forward_matches_the_reference_at_the_lower_bound() {
    let Some(ctx) = common::gpu() else { return };
    let config = common::tiny_model(2);
    assert!(wgalloc::model::fused_layers(&config));
    let mut forward = wgalloc::model::Forward::new(&ctx, &config).expect("builds");
    let report = forward.run().expect("runs");
    // 2 embedding nodes, 7 per layer, final norm and logits
    assert_eq!(report.dispatches, 2 + 7 * 2 + 2);
    assert_eq!(report.dispatches, forward.model().graph.nodes.len());
    let logits = forward.logits().expect("logits");
    let reference = forward
        .model()
        .reference_logits(forward.model().token_ids())
        .expect("reference");
    let scale = reference.iter().fold(1f32, |m, v| m.max(v.abs()));
    let error = logits
        .iter()
        .zip(&reference)
        .fold(0f32, |m, (g, c)| m.max((g - c).abs()));
    assert!(error <= wgalloc::model::LOGITS_TOLERANCE * scale, "{error}");
    // aligned to the device's storage offset alignment: at most one alignment per tensor
    let tensors = forward.model().graph.tensors.len() as u64;
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    assert!(forward.activation_bytes() >= forward.lower_bound_bytes());
    assert!(
        forward.activation_bytes() <= forward.lower_bound_bytes() + tensors * alignment,
        "{} planned, bound {}",
        forward.activation_bytes(),
        forward.lower_bound_bytes()
    );
}
