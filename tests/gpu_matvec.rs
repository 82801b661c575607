//! The matrix-vector kernels (`shaders/matvec.wgsl`, issue 27 item 3): decode-shaped
//! matmuls (one row, or up to four, against a weight matrix) against the CPU
//! reference, in f32 and (where the adapter has `shader-f16`) f16, over an odd `k` (the
//! plain `matmul` takes any `k` on this path; an odd `n` keeps the dense kernel), every
//! fused epilogue the decoder dispatches, and the tiled kernel's results where both
//! run.
//!
//! No adapter: each GPU test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;
#[path = "common/kernel_run.rs"]
#[allow(dead_code)]
mod kernel_run;

use std::collections::HashMap;

use kernel_run::{assert_close, random, run_both};
use wgalloc::device::GpuContext;
use wgalloc::exec::{tune, Executor, MatmulTile, TensorData, TuneSettings};
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};

/// A device of this test's own (the tuner's settings are per device), or `None`.
fn own_device() -> Option<GpuContext> {
    common::gpu()?;
    Some(GpuContext::from_env().expect("a second device on the adapter"))
}

/// The tuner of `ctx` forced to `tile` (one candidate: nothing is timed).
fn force(ctx: &GpuContext, tile: MatmulTile) {
    tune::configure(
        ctx,
        TuneSettings {
            enabled: true,
            cache: None,
            candidates: vec![tile],
            attention: Vec::new(),
            norm: Vec::new(),
            repetitions: 1,
            budget: std::time::Duration::from_secs(30),
            decode: None,
        },
    );
}

/// A one-node graph of `op` (`matmul`, `matmul_gelu`, `matmul_bias`,
/// `matmul_bias_gelu`, `matmul_add`, `matmul_add_bias` in place,
/// `layer_norm_matmul_bias[_gelu]`, `matmul_bt`) with `m x k x n`, every tensor of
/// `dtype`, and seeded inputs.
fn graph(
    op: &str,
    (m, k, n): (u64, u64, u64),
    dtype: DType,
) -> (Graph, HashMap<TensorId, TensorData>) {
    let mut b = GraphBuilder::new(op);
    let mut values = HashMap::new();
    let mut add = |b: &mut GraphBuilder, name: &str, shape: &[u64], weight: bool| {
        let len: u64 = shape.iter().product();
        let id = if weight {
            b.weight(name, dtype, shape)
        } else {
            b.input(name, dtype, shape)
        };
        let seed = len * 7 + name.len() as u64;
        values.insert(id, TensorData::F32(random(seed, len as usize, 1.0)));
        id
    };
    match op {
        "matmul" | "matmul_gelu" | "matmul_bt" => {
            let a = add(&mut b, "a", &[m, k], false);
            let shape = if op == "matmul_bt" { [n, k] } else { [k, n] };
            let w = add(&mut b, "w", &shape, true);
            b.node(op, &[a, w], &[m, n], false);
        }
        "matmul_bias" | "matmul_bias_gelu" => {
            let a = add(&mut b, "a", &[m, k], false);
            let w = add(&mut b, "w", &[k, n], true);
            let bias = add(&mut b, "bias", &[n], true);
            b.node(op, &[a, w, bias], &[m, n], false);
        }
        "matmul_add" | "matmul_add_bias" => {
            let r = add(&mut b, "r", &[m, n], false);
            let a = add(&mut b, "a", &[m, k], false);
            let w = add(&mut b, "w", &[k, n], true);
            let mut inputs = vec![r, a, w];
            if op == "matmul_add_bias" {
                inputs.push(add(&mut b, "bias", &[n], true));
            }
            // In place over the residual, as the decoder adds its projections (an f16
            // graph is flagged once its output is f16 too, below).
            b.node(op, &inputs, &[m, n], dtype == DType::F32);
        }
        "layer_norm_matmul_bias" | "layer_norm_matmul_bias_gelu" => {
            let x = add(&mut b, "x", &[m, k], false);
            let gain = add(&mut b, "gain", &[k], true);
            let beta = add(&mut b, "beta", &[k], true);
            let w = add(&mut b, "w", &[k, n], true);
            let bias = add(&mut b, "bias", &[n], true);
            b.node_with_params(op, &[x, gain, beta, w, bias], &[m, n], false, &[1e-5]);
        }
        other => panic!("no graph for {other}"),
    }
    let mut g = b.build().expect("valid");
    if dtype == DType::F16 {
        // The nodes' outputs too (the builder makes them f32).
        for t in &mut g.tensors {
            if t.dtype == DType::F32 {
                t.dtype = DType::F16;
                t.size /= 2;
            }
        }
        g.nodes[0].inplace = op.starts_with("matmul_add");
    }
    (g, values)
}

/// Shapes with k and n multiples of 4 (every op takes them): one row and a few; n not
/// a multiple of an invocation's 16 columns nor of a workgroup's 256.
const SHAPES: [(u64, u64, u64); 6] = [
    (1, 4, 4),
    (1, 68, 132),
    (1, 516, 200),
    (1, 36, 600),
    (3, 36, 20),
    (4, 260, 64),
];

/// The narrow split tiles, offered by the tuner on GPUs only; a test forces them
/// (a tile named alone runs on any adapter), so lavapipe checks their sums too.
const NARROW_SPLITS: [MatmulTile; 2] = [MatmulTile::Rows1Split64, MatmulTile::Rows1Split256];

/// The unsplit matrix-vector tile and every split one.
const SPLITS_AND_ONE: [MatmulTile; 4] = [
    MatmulTile::Rows1,
    MatmulTile::Rows1Split,
    MatmulTile::Rows1Split64,
    MatmulTile::Rows1Split256,
];

#[test]
fn every_matvec_op_matches_the_cpu_in_f32() {
    let Some(ctx) = own_device() else { return };
    for tile in SPLITS_AND_ONE {
        every_matvec_op_matches_the_cpu_with(&ctx, tile);
    }
}

/// Every matrix-vector op on every shape of [`SHAPES`], unsplit or split over `k`.
fn every_matvec_op_matches_the_cpu_with(ctx: &GpuContext, tile: MatmulTile) {
    force(ctx, tile);
    let exec = Executor::new(ctx);
    for op in [
        "matmul",
        "matmul_gelu",
        "matmul_bias",
        "matmul_bias_gelu",
        "matmul_add",
        "matmul_add_bias",
        "layer_norm_matmul_bias",
        "layer_norm_matmul_bias_gelu",
        "matmul_bt",
    ] {
        for shape in SHAPES {
            let (g, values) = graph(op, shape, DType::F32);
            // `matmul_bt` is not timed with the split tile (it would run it unsplit):
            // the rule decides there.
            if !(op == "matmul_bt" && tile.split() > 1) {
                assert_eq!(
                    exec.matmul_tile(&g, 0).expect("resolves"),
                    Some(tile),
                    "{op} {shape:?}"
                );
            }
            let (gpu, cpu) = run_both(ctx, &g, &values);
            assert_close(&format!("{op} {shape:?} {tile:?}"), &gpu, &cpu, 1e-4);
        }
    }
}

#[test]
fn a_plain_matvec_takes_an_odd_k_and_an_odd_n_keeps_the_dense_kernel() {
    // k not a multiple of 4: no tiled kernel takes it, the matrix-vector kernel does
    // for up to four rows (by the rule, not tuned); n not a multiple of 4 keeps the
    // 16x16 kernel. Both match the CPU.
    let Some(ctx) = common::gpu() else { return };
    let exec = Executor::new(&ctx);
    for shape in [
        (1, 1, 4),
        (1, 3, 8),
        (1, 7, 260),
        (2, 9, 12),
        (1, 257, 68),
        (4, 301, 132),
        (1, 3, 5),
        (1, 7, 13),
        (3, 257, 67),
        (1, 600, 3),
    ] {
        let (g, values) = graph("matmul", shape, DType::F32);
        assert_eq!(exec.matmul_tile(&g, 0).expect("resolves"), None);
        let (gpu, cpu) = run_both(&ctx, &g, &values);
        assert_close(&format!("matmul {shape:?}"), &gpu, &cpu, 1e-4);
    }
}

#[test]
fn the_matvec_kernel_agrees_with_the_tiled_kernel() {
    // The same product by the matrix-vector tile and by the tiled kernel's 4 rows.
    let Some(ctx) = own_device() else { return };
    for op in ["matmul", "matmul_bias_gelu", "matmul_add_bias"] {
        let (g, values) = graph(op, (1, 520, 72), DType::F32);
        let mut outs = Vec::new();
        let tiles = [MatmulTile::Rows1, MatmulTile::Rows4, MatmulTile::Rows1Split];
        for tile in tiles.into_iter().chain(NARROW_SPLITS) {
            force(&ctx, tile);
            let exec = Executor::new(&ctx);
            assert_eq!(exec.matmul_tile(&g, 0).expect("resolves"), Some(tile));
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(&format!("{op} {tile:?}"), &gpu, &cpu, 1e-4);
            outs.push(gpu);
        }
        for other in &outs[1..] {
            assert_close(op, &outs[0], other, 1e-5);
        }
    }
}

#[test]
fn the_f16_matvec_matches_the_cpu_within_f16_tolerance() {
    let Some(ctx) = own_device() else { return };
    if !ctx.has_f16() {
        common::skip_for_capability(
            "the_f16_matvec_matches_the_cpu_within_f16_tolerance",
            "the adapter does not offer shader-f16",
        );
        return;
    }
    for tile in SPLITS_AND_ONE {
        force(&ctx, tile);
        f16_matvec_ops_match_the_cpu(&ctx, tile);
    }
}

/// The f16 matrix-vector ops against the CPU reference with `tile` forced.
fn f16_matvec_ops_match_the_cpu(ctx: &GpuContext, tile: MatmulTile) {
    for (op, shape) in [
        ("matmul", (1, 3, 8)),
        ("matmul", (1, 257, 68)),
        ("matmul", (1, 68, 132)),
        ("matmul_bias_gelu", (1, 36, 20)),
        ("matmul_add_bias", (1, 260, 64)),
        ("matmul_bt", (1, 36, 20)),
    ] {
        let (g, values) = graph(op, shape, DType::F16);
        let (gpu, cpu) = run_both(ctx, &g, &values);
        // f16 storage: the inputs round to f16 (the reference rounds them as stored),
        // the sum of up to 260 products is kept in f32 and rounded once on store.
        assert_close(&format!("f16 {op} {shape:?} {tile:?}"), &gpu, &cpu, 1e-2);
    }
}
