//! Every kernel against its CPU reference on seeded random data, with sizes that are
//! not multiples of the workgroup size, in place and out of place. Each graph is
//! planned by the ggml planner in the device's storage buffer type and allocated with
//! `allocate_plan`; a node flagged in place is placed over its dying first input.
//!
//! Tolerances: |gpu − cpu| ≤ tol · (1 + |cpu|), with tol = 1e-6 for copy, scale, relu,
//! add, mul and embedding; 1e-5 for gelu, silu, softmax and the norms; 1e-4 for matmul;
//! 1e-3 for rope (the GPU's sin/cos of angles up to a few hundred radians).
//!
//! No adapter: each test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;
#[path = "common/kernel_run.rs"]
mod kernel_run;

use std::collections::HashMap;

use kernel_run::{assert_close, check_matmul, random, run_both};
use wgalloc::device::GpuContext;
use wgalloc::exec::TensorData;
use wgalloc::graph::{DType, GraphBuilder, TensorId};
use wgalloc::model::SeededRng;

/// `op(x)` for one f32 input of `shape`, in place and out of place.
fn check_unary(ctx: &GpuContext, op: &str, shape: &[u64], params: &[f32], scale: f32, tol: f32) {
    for inplace in [false, true] {
        let mut b = GraphBuilder::new(op);
        let x = b.input("x", DType::F32, shape);
        b.node_with_params(op, &[x], shape, inplace, params);
        let g = b.build().expect("valid");
        let len: u64 = shape.iter().product();
        let mut values = HashMap::new();
        values.insert(x, TensorData::F32(random(len ^ 0xA5, len as usize, scale)));
        let (gpu, cpu) = run_both(ctx, &g, &values);
        assert_close(
            &format!("{op} {shape:?} inplace={inplace}"),
            &gpu,
            &cpu,
            tol,
        );
    }
}

const SIZES: [u64; 4] = [1, 7, 257, 1000];

#[test]
fn unary_kernels_match_cpu_in_place_and_out_of_place() {
    let Some(ctx) = common::gpu() else { return };
    for len in SIZES {
        check_unary(&ctx, "copy", &[len], &[], 10.0, 1e-6);
        check_unary(&ctx, "scale", &[len], &[-0.37], 10.0, 1e-6);
        check_unary(&ctx, "relu", &[len], &[], 10.0, 1e-6);
        check_unary(&ctx, "gelu", &[len], &[], 6.0, 1e-5);
        check_unary(&ctx, "silu", &[len], &[], 6.0, 1e-5);
    }
    // Saturation: large magnitudes must not give NaN.
    check_unary(&ctx, "gelu", &[257], &[], 200.0, 1e-5);
    check_unary(&ctx, "silu", &[257], &[], 200.0, 1e-5);
}

#[test]
fn binary_kernels_match_cpu_with_and_without_broadcast() {
    let Some(ctx) = common::gpu() else { return };
    for op in ["add", "mul"] {
        for (a_shape, b_shape) in [
            (vec![1], vec![1]),
            (vec![7], vec![7]),
            (vec![257], vec![257]),
            (vec![1000], vec![1000]),
            (vec![7, 33], vec![33]),
        ] {
            for inplace in [false, true] {
                let mut b = GraphBuilder::new(op);
                let x = b.input("a", DType::F32, &a_shape);
                let y = b.input("b", DType::F32, &b_shape);
                b.node(op, &[x, y], &a_shape, inplace);
                let g = b.build().expect("valid");
                let (la, lb) = (
                    a_shape.iter().product::<u64>(),
                    b_shape.iter().product::<u64>(),
                );
                let mut values = HashMap::new();
                values.insert(x, TensorData::F32(random(la, la as usize, 4.0)));
                values.insert(y, TensorData::F32(random(lb + 99, lb as usize, 4.0)));
                let (gpu, cpu) = run_both(&ctx, &g, &values);
                assert_close(
                    &format!("{op} {a_shape:?}+{b_shape:?} inplace={inplace}"),
                    &gpu,
                    &cpu,
                    1e-6,
                );
            }
        }
    }
}

#[test]
fn softmax_kernels_match_cpu_and_rows_sum_to_one() {
    let Some(ctx) = common::gpu() else { return };
    for shape in [vec![1, 1], vec![3, 7], vec![5, 257], vec![2, 1000]] {
        check_unary(&ctx, "softmax", &shape, &[], 8.0, 1e-5);
    }
    for shape in [vec![8, 8], vec![33, 33], vec![2, 17, 17], vec![300, 300]] {
        check_unary(&ctx, "softmax_causal", &shape, &[], 8.0, 1e-5);
    }
    // Row sums on the GPU itself, and the causal mask's zeros.
    let mut b = GraphBuilder::new("softmax");
    let x = b.input("x", DType::F32, &[9, 9]);
    b.node("softmax_causal", &[x], &[9, 9], true);
    let g = b.build().expect("valid");
    let mut values = HashMap::new();
    values.insert(x, TensorData::F32(random(81, 81, 30.0)));
    let (gpu, _) = run_both(&ctx, &g, &values);
    for (r, row) in gpu.chunks(9).enumerate() {
        let sum: f32 = row.iter().sum();
        assert!((sum - 1.0).abs() < 1e-5, "row {r} sums to {sum}");
        assert!(
            row[r + 1..].iter().all(|&p| p == 0.0),
            "row {r} sees the future"
        );
    }
}

#[test]
fn norm_kernels_match_cpu() {
    let Some(ctx) = common::gpu() else { return };
    for shape in [
        vec![1, 1],
        vec![1, 7],
        vec![5, 257],
        vec![3, 1000],
        vec![70_000, 2],
    ] {
        let cols = *shape.last().expect("dims");
        let rows: u64 = shape.iter().product::<u64>() / cols;
        for op in ["layer_norm", "rms_norm"] {
            let mut b = GraphBuilder::new(op);
            let x = b.input("x", DType::F32, &shape);
            let gain = b.weight("g", DType::F32, &[cols]);
            let bias = b.weight("b", DType::F32, &[cols]);
            let inputs: Vec<TensorId> = if op == "layer_norm" {
                vec![x, gain, bias]
            } else {
                vec![x, gain]
            };
            b.node_with_params(op, &inputs, &shape, false, &[1e-5]);
            let g = b.build().expect("valid");
            let mut values = HashMap::new();
            values.insert(
                x,
                TensorData::F32(random(rows * cols, (rows * cols) as usize, 3.0)),
            );
            values.insert(gain, TensorData::F32(random(cols + 1, cols as usize, 1.0)));
            values.insert(bias, TensorData::F32(random(cols + 2, cols as usize, 1.0)));
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(&format!("{op} {shape:?}"), &gpu, &cpu, 1e-4);
        }
    }
}

#[test]
fn matmul_kernels_match_cpu_on_odd_shapes() {
    let Some(ctx) = common::gpu() else { return };
    for (m, k, n) in [
        (1, 1, 1),
        (33, 65, 17),
        (7, 257, 3),
        (64, 64, 64),
        (5, 1000, 9),
    ] {
        for op in ["matmul", "matmul_bt"] {
            check_matmul(&ctx, op, m, k, n);
        }
    }
}

#[test]
fn embedding_kernel_matches_cpu_and_zeroes_unknown_ids() {
    let Some(ctx) = common::gpu() else { return };
    for (rows, vocab, dim) in [(1, 1, 1), (7, 50, 33), (257, 1000, 8)] {
        let mut b = GraphBuilder::new("embedding");
        let ids = b.input("ids", DType::U32, &[rows]);
        let table = b.weight("table", DType::F32, &[vocab, dim]);
        b.node("embedding", &[ids, table], &[rows, dim], false);
        let g = b.build().expect("valid");
        let mut rng = SeededRng::new(rows);
        let mut id_values: Vec<u32> = (0..rows).map(|_| rng.below(vocab) as u32).collect();
        if rows > 1 {
            id_values[1] = vocab as u32 + 3; // out of range: a zero row
        }
        let mut values = HashMap::new();
        values.insert(ids, TensorData::U32(id_values));
        values.insert(
            table,
            TensorData::F32(random(vocab, (vocab * dim) as usize, 1.0)),
        );
        let (gpu, cpu) = run_both(&ctx, &g, &values);
        assert_close(&format!("embedding {rows}x{vocab}x{dim}"), &gpu, &cpu, 1e-6);
        if rows > 1 {
            assert!(gpu[dim as usize..2 * dim as usize]
                .iter()
                .all(|&v| v == 0.0));
        }
    }
}

#[test]
fn rope_kernel_matches_cpu_in_place_and_out_of_place() {
    let Some(ctx) = common::gpu() else { return };
    for shape in [vec![1, 2], vec![7, 8], vec![257, 64]] {
        check_unary(&ctx, "rope", &shape, &[], 2.0, 1e-3);
    }
}

#[test]
fn rope_kernel_in_f16_matches_cpu_in_place_and_out_of_place() {
    let Some(ctx) = common::f16_gpu("rope_kernel_in_f16_matches_cpu_in_place_and_out_of_place")
    else {
        return;
    };
    for shape in [vec![1u64, 2], vec![7, 8], vec![257, 64]] {
        for inplace in [false, true] {
            let mut b = GraphBuilder::new("rope f16");
            let x = b.input("x", DType::F32, &shape);
            b.node_with_params("rope", &[x], &shape, inplace, &[]);
            let mut g = b.build().expect("valid");
            // Input and output stored as f16 (the builder makes them f32).
            for t in &mut g.tensors {
                t.dtype = DType::F16;
                t.size /= 2;
            }
            let len: u64 = shape.iter().product();
            let mut values = HashMap::new();
            values.insert(x, TensorData::F32(random(len ^ 0x5A, len as usize, 2.0)));
            // The CPU reference rounds to f16 as the GPU stores; the two differ by the
            // f32 rotation's last bits, at most one f16 step (2^-9 near 2).
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(
                &format!("rope f16 {shape:?} inplace={inplace}"),
                &gpu,
                &cpu,
                4e-3,
            );
        }
    }
}

#[test]
fn count_and_compact_in_f16_match_cpu_with_an_exact_f32_count() {
    let Some(ctx) = common::f16_gpu("count_and_compact_in_f16_match_cpu_with_an_exact_f32_count")
    else {
        return;
    };
    // Across one thread's slice, several, and more elements than threads.
    for n in [1u64, 7, 300, 5000] {
        for last in ["count_positive", "compact"] {
            let mut b = GraphBuilder::new("compaction f16");
            let x = b.input("x", DType::F32, &[n]);
            let count = b.node("count_positive", &[x], &[1], false);
            if last == "compact" {
                b.node("compact", &[x, count], &[n], false);
            }
            let mut g = b.build().expect("valid");
            // The values (and compact's output) f16, the count f32.
            for t in &mut g.tensors {
                if t.id != count {
                    t.dtype = DType::F16;
                    t.size = t.shape.iter().product::<u64>() * 2;
                }
            }
            let mut values = HashMap::new();
            values.insert(x, TensorData::F32(random(n ^ 0x3C, n as usize, 1.0)));
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            // Kept values are copied, not computed: equal, as is the count.
            assert_eq!(gpu, cpu, "{last} f16 n={n}");
        }
    }
}

#[test]
fn elementwise_grid_beyond_65535_workgroups_covers_every_element() {
    let Some(ctx) = common::gpu() else { return };
    let len = 65_536 * 256 + 3; // needs 65537 workgroups of 256
    if len * 4 > ctx.limits.max_storage_buffer_binding_size {
        common::skip_for_capability(
            "gpu_kernels large grid",
            "the storage binding limit is too small for the large-grid test",
        );
        return;
    }
    check_unary(&ctx, "scale", &[len], &[3.0], 1.0, 1e-6);
}
