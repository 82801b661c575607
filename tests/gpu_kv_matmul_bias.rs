//! The bias epilogues of the tiled matmul that a GPT-2 step uses around the KV cache
//! (Conv1D is `x·W + b`): `matmul_bias`, `matmul_bias_gelu`, and `matmul_add_bias` in
//! place over the residual and out of place, against their CPU references on seeded
//! data, on both register tiles. Tolerance |gpu − cpu| ≤ 1e-4 · (1 + |cpu|).

mod common;
// The shared runner; this file uses only part of it.
#[allow(dead_code)]
#[path = "common/kernel_run.rs"]
mod kernel_run;

use std::collections::HashMap;

use kernel_run::{assert_close, random, run_both};
use wgalloc::exec::TensorData;
use wgalloc::graph::{DType, GraphBuilder};

#[test]
fn bias_epilogues_match_cpu_in_place_and_out_of_place() {
    let Some(ctx) = common::gpu() else { return };
    // (5, 8, 12) takes the 4-row tile, (70, 32, 136) the 8-row tile.
    for (m, k, n) in [(5, 8, 12), (70, 32, 136)] {
        for op in ["matmul_bias", "matmul_bias_gelu"] {
            let mut b = GraphBuilder::new(op);
            let a = b.input("a", DType::F32, &[m, k]);
            let w = b.weight("w", DType::F32, &[k, n]);
            let bias = b.weight("bias", DType::F32, &[n]);
            b.node(op, &[a, w, bias], &[m, n], false);
            let g = b.build().expect("valid");
            let mut values = HashMap::new();
            values.insert(a, TensorData::F32(random(m * k, (m * k) as usize, 1.0)));
            values.insert(w, TensorData::F32(random(k * n + 1, (k * n) as usize, 1.0)));
            values.insert(bias, TensorData::F32(random(n + 7, n as usize, 2.0)));
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(&format!("{op} {m}x{k}x{n}"), &gpu, &cpu, 1e-4);
        }
        for inplace in [true, false] {
            let mut b = GraphBuilder::new("add bias");
            let r = b.input("r", DType::F32, &[m, n]);
            let a = b.input("a", DType::F32, &[m, k]);
            let w = b.weight("w", DType::F32, &[k, n]);
            let bias = b.weight("bias", DType::F32, &[n]);
            // A scaled residual: an activation the planner may write over.
            let rs = b.node_with_params("scale", &[r], &[m, n], false, &[0.5]);
            b.node("matmul_add_bias", &[rs, a, w, bias], &[m, n], inplace);
            let g = b.build().expect("valid");
            let mut values = HashMap::new();
            values.insert(r, TensorData::F32(random(m * n + 2, (m * n) as usize, 2.0)));
            values.insert(a, TensorData::F32(random(m * k, (m * k) as usize, 1.0)));
            values.insert(w, TensorData::F32(random(k * n + 1, (k * n) as usize, 1.0)));
            values.insert(bias, TensorData::F32(random(n + 7, n as usize, 2.0)));
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(
                &format!("matmul_add_bias {m}x{k}x{n} in place {inplace}"),
                &gpu,
                &cpu,
                1e-4,
            );
        }
    }
}

/// `layer_norm_matmul_bias(_gelu)`: a layer norm in the tiled matmul's prologue (one
/// dispatch for GPT-2's ln_1 + QKV and ln_2 + up projection), against the CPU
/// reference (the norm in f64, then the product), on both register tiles and with one
/// row (a decode step).
#[test]
fn norm_prologue_matches_cpu() {
    let Some(ctx) = common::gpu() else { return };
    for (m, k, n) in [(1, 64, 192), (5, 8, 12), (70, 32, 136), (3, 768, 80)] {
        for op in ["layer_norm_matmul_bias", "layer_norm_matmul_bias_gelu"] {
            let mut b = GraphBuilder::new(op);
            let x = b.input("x", DType::F32, &[m, k]);
            let gain = b.weight("gain", DType::F32, &[k]);
            let beta = b.weight("beta", DType::F32, &[k]);
            let w = b.weight("w", DType::F32, &[k, n]);
            let bias = b.weight("bias", DType::F32, &[n]);
            b.node_with_params(op, &[x, gain, beta, w, bias], &[m, n], false, &[1e-3]);
            let g = b.build().expect("valid");
            let mut values = HashMap::new();
            // Rows with an offset, so that the mean matters.
            let rows: Vec<f32> = random(m * k, (m * k) as usize, 1.0)
                .iter()
                .enumerate()
                .map(|(i, v)| v * 3.0 + (i / k as usize) as f32)
                .collect();
            values.insert(x, TensorData::F32(rows));
            values.insert(gain, TensorData::F32(random(k + 3, k as usize, 1.0)));
            values.insert(beta, TensorData::F32(random(k + 5, k as usize, 0.5)));
            values.insert(w, TensorData::F32(random(k * n + 1, (k * n) as usize, 1.0)));
            values.insert(bias, TensorData::F32(random(n + 7, n as usize, 2.0)));
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(&format!("{op} {m}x{k}x{n}"), &gpu, &cpu, 1e-4);
        }
    }
}

/// `kv_self_attend` and `kv_self_attend_out` (a chunk's own keys and the first cache
/// page in one kernel) against their CPU reference (`kv_self`, then the page): 3
/// queries after 4 cached tokens in two blocks of one page, the chunk's rows appended
/// to the same page.
#[test]
fn self_and_first_page_in_one_kernel_match_cpu() {
    let Some(ctx) = common::gpu() else { return };
    let (n, heads, hd, bt) = (3u64, 2u64, 16u64, 4u32);
    let d = heads * hd;
    let block_words = 2 * u64::from(bt) * d; // one layer: K rows then V rows
    for (op, shape) in [
        ("kv_self_attend", vec![n, heads, hd + 4]),
        ("kv_self_attend_out", vec![n, d]),
    ] {
        let mut b = GraphBuilder::new(op);
        let qkv = b.input("qkv", DType::F32, &[n, 3 * d]);
        let table = b.weight("table", DType::U32, &[8]);
        let page = b.weight("page", DType::F32, &[2 * block_words]);
        b.node_with_params(op, &[qkv, table, page], &shape, false, &[2.0, 0.0, 0.0]);
        let g = b.build().expect("valid");
        let mut values = HashMap::new();
        values.insert(
            qkv,
            TensorData::F32(random(n * 3 * d, (n * 3 * d) as usize, 1.0)),
        );
        // past 4, 2 blocks mapped, 4 tokens a block; block b at word b * block_words.
        let words = vec![4, 2, bt, 0, 0, 0, 0, block_words as u32];
        values.insert(table, TensorData::U32(words));
        values.insert(
            page,
            TensorData::F32(random(77, (2 * block_words) as usize, 1.0)),
        );
        let (gpu, cpu) = run_both(&ctx, &g, &values);
        assert_close(op, &gpu, &cpu, 1e-4);
    }
}
