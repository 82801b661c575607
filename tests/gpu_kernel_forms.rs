//! The kernels chosen by form rather than by tile (issue 27): fused causal attention's
//! three forms (`exec::AttentionForm`: one invocation per query, `shaders/attention.wgsl`;
//! the keys in workgroup memory, `shaders/attention_tiled.wgsl`; four queries per
//! invocation, `shaders/attention_blocks.wgsl`) and the layer
//! norm's two (`exec::NormForm`: an invocation or a workgroup per row), each forced
//! through the tuner and checked against the CPU reference and against each other:
//! attention on sequences shorter and longer than a tile, not multiples of it, heads
//! of several widths (the widest, 256, which only the per-query form takes), in f32
//! and (where the adapter has `shader-f16`) in f16; layer norms on shapes both forms
//! take and shapes only one does. And the tuner timing the forms of each, caching
//! the choice and reading it back. No test depends on which form wins a timing. Each
//! test opens a device of its own (the tuner's settings are per device).
//!
//! No adapter: each GPU test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;
#[path = "common/kernel_run.rs"]
#[allow(dead_code)]
mod kernel_run;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use kernel_run::{assert_close, random, run_both};
use wgalloc::device::GpuContext;
use wgalloc::exec::tune::{self, AdapterKey, KernelFamily, Source, TuneCache, Variant};
use wgalloc::exec::{AttentionForm, Executor, NormForm, TensorData, TuneSettings};
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};

/// (seq, heads, head width): one query, a partial tile, exactly one tile, one past it,
/// several tiles with a partial last one, heads narrower than the four lanes' columns,
/// and the widest head. Five head widths: one `vec4` (4), part of a group of 8 `vec4`s
/// (12), a group and a part (40), two whole groups (64, GPT-2's) and the widest (256,
/// the per-query form only). The head's width is a pipeline constant, so each width
/// is a pipeline of every form to compile: lavapipe compiles each for seconds, so the
/// widths are few and the sequences vary over them.
const SHAPES: [(u64, u64, u64); 8] = [
    (1, 1, 4),
    (7, 2, 12),
    (16, 1, 64),
    (17, 2, 12),
    (70, 3, 40),
    (130, 2, 64),
    (33, 4, 4),
    (9, 1, 256),
];

/// The shapes the f16 forms are checked on: the f32 check's widths but the one-`vec4`
/// and the group-and-a-part (f16 only changes how a row is loaded and stored), over
/// a partial tile, one past a tile and several tiles.
const F16_SHAPES: [(u64, u64, u64); 4] = [(7, 2, 12), (17, 2, 12), (130, 2, 64), (9, 1, 256)];

/// A device of this test's own (the tuner's settings are per device), or `None`.
fn own_device() -> Option<GpuContext> {
    common::gpu()?;
    Some(GpuContext::from_env().expect("a second device on the adapter"))
}

/// Tuner settings that time attention's `forms` and the layer norm's `norms` (and no
/// matmul tile) with `cache`.
fn settings_with(
    cache: Option<PathBuf>,
    forms: &[AttentionForm],
    norms: &[NormForm],
) -> TuneSettings {
    TuneSettings {
        enabled: true,
        cache,
        candidates: Vec::new(),
        attention: forms.to_vec(),
        norm: norms.to_vec(),
        repetitions: 1,
        budget: Duration::from_secs(30),
        decode: None,
    }
}

/// Tuner settings that time attention's `forms` only.
fn settings(cache: Option<PathBuf>, forms: &[AttentionForm]) -> TuneSettings {
    settings_with(cache, forms, &[])
}

/// A fresh cache path under the target tmp dir.
fn cache_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tune-tests");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join(format!("{name}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// One `attention_causal` node over a seeded `qkv` (behind a `scale` by 1, so the
/// planner may reuse its bytes), every tensor of `dtype`.
fn graph(
    (seq, heads, hd): (u64, u64, u64),
    dtype: DType,
) -> (Graph, HashMap<TensorId, TensorData>) {
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
    let mut g = b.build().expect("valid");
    for t in &mut g.tensors {
        t.dtype = dtype;
        t.size = t.shape.iter().product::<u64>() * dtype.size();
    }
    let mut values = HashMap::new();
    let len = (seq * 3 * width) as usize;
    values.insert(qkv, TensorData::F32(random(seq * 31 + hd, len, 1.5)));
    (g, values)
}

/// Whether `ctx`'s device runs `form` (the shared-read form needs subgroups of 8).
fn runs(ctx: &GpuContext, form: AttentionForm) -> bool {
    !form.needs_subgroups() || ctx.has_subgroups_of(8)
}

/// The forms `ctx`'s device runs that take heads `head_dim` wide.
fn runnable(ctx: &GpuContext, head_dim: u32) -> usize {
    AttentionForm::ALL
        .iter()
        .filter(|&&f| f.fits(head_dim) && runs(ctx, f))
        .count()
}

/// Each form forced in turn on each of `shapes`, in `dtype`, against the CPU reference
/// (`tol`) and the other forms against the per-query one (`agree`).
fn check_forms(ctx: &GpuContext, shapes: &[(u64, u64, u64)], dtype: DType, tol: f32, agree: f32) {
    let exec = Executor::new(ctx);
    for &shape in shapes {
        let (g, values) = graph(shape, dtype);
        let mut outs = Vec::new();
        for form in AttentionForm::ALL {
            // One candidate: chosen without timing. A form that does not take the head
            // width is no candidate, and the rule (by adapter type) decides.
            tune::configure(ctx, settings(None, &[form]));
            let cpu = ctx.is_cpu_adapter();
            let expected = if form.fits(shape.2 as u32) && runs(ctx, form) {
                form
            } else {
                AttentionForm::rule_for(cpu, ctx.has_subgroups_of(8), shape.2 as u32)
            };
            assert_eq!(
                exec.tuned_choice(&g, 1).expect("resolves"),
                Some(Variant::Attention(expected)),
                "{shape:?} {form:?}"
            );
            let (gpu, cpu) = run_both(ctx, &g, &values);
            assert_close(&format!("{shape:?} {form:?} {dtype:?}"), &gpu, &cpu, tol);
            outs.push(gpu);
        }
        for (form, out) in AttentionForm::ALL.iter().zip(&outs).skip(1) {
            assert_close(&format!("{shape:?} {form:?} agrees"), &outs[0], out, agree);
        }
    }
}

#[test]
fn every_attention_form_matches_the_cpu_reference_and_the_others() {
    let Some(ctx) = own_device() else { return };
    check_forms(&ctx, &SHAPES, DType::F32, 1e-4, 1e-5);
}

#[test]
fn every_attention_form_in_f16_matches_the_cpu_reference() {
    let Some(shared) = common::f16_gpu("every_attention_form_in_f16_matches_the_cpu_reference")
    else {
        return;
    };
    drop(shared);
    let ctx = own_device().expect("a device");
    assert!(
        ctx.has_f16(),
        "a second device on the same adapter has shader-f16"
    );
    // The CPU reference rounds the inputs and the output to f16 as the GPU stores
    // them; the two differ by f32 rounding inside, at most about one f16 step of the
    // output (2^-11 relative), and the forms rescale after 8 or 16 keys.
    check_forms(&ctx, &F16_SHAPES, DType::F16, 4e-3, 4e-3);
}

#[test]
fn the_tuner_times_the_attention_forms_caches_the_choice_and_reads_it_back() {
    let Some(ctx) = own_device() else { return };
    if !ctx.has_timestamps() {
        common::skip_for_capability(
            "the_tuner_times_the_attention_forms_caches_the_choice_and_reads_it_back",
            "no TIMESTAMP_QUERY: the rule decides",
        );
        return;
    }
    let path = cache_path("attention");
    tune::configure(&ctx, settings(Some(path.clone()), &AttentionForm::ALL));
    let shape = (64, 2, 64);
    let (g, values) = graph(shape, DType::F32);
    let exec = Executor::new(&ctx);
    let chosen = exec
        .tuned_choice(&g, 1)
        .expect("resolves")
        .expect("attention is tuned");
    let summary = tune::tuning(&ctx);
    assert_eq!(summary.choices.len(), 1, "{summary:?}");
    let choice = &summary.choices[0];
    assert_eq!(choice.class.family, KernelFamily::Attention);
    assert_eq!(
        (choice.class.m, choice.class.k, choice.class.n),
        (64, 64, 2)
    );
    assert_eq!((choice.variant, choice.source), (chosen, Source::Tuned));
    assert_eq!(
        choice.times.len(),
        runnable(&ctx, 64),
        "every form the device runs is timed: {choice:?}"
    );
    assert!(
        choice.line().starts_with("attention seq 64 hd 64 heads 2"),
        "{}",
        choice.line()
    );
    // The run takes the choice and matches the CPU.
    let (gpu, cpu) = run_both(&ctx, &g, &values);
    assert_close("tuned attention", &gpu, &cpu, 1e-4);
    assert_eq!(tune::tuning(&ctx).choices.len(), 1);
    // Cached under the attention class; a fresh tuner reads it and times nothing.
    let cache = TuneCache::load(&path).expect("a valid cache");
    assert_eq!(
        cache.get(&AdapterKey::of(&ctx.info), &choice.class),
        Some(chosen)
    );
    tune::configure(&ctx, settings(Some(path.clone()), &AttentionForm::ALL));
    assert_eq!(exec.tuned_choice(&g, 1).expect("resolves"), Some(chosen));
    let again = tune::tuning(&ctx);
    assert_eq!(again.choices[0].source, Source::Cache, "{again:?}");
    assert_eq!(again.time, Duration::ZERO);
    // The widest head: neither the key tiles nor the query blocks take it.
    let (wide, _) = graph((9, 1, 256), DType::F32);
    let wide_choice = exec.tuned_choice(&wide, 1).expect("resolves");
    assert_ne!(
        wide_choice,
        Some(Variant::Attention(AttentionForm::KeyTiles))
    );
    let last = tune::tuning(&ctx)
        .choices
        .last()
        .cloned()
        .expect("a choice");
    // Only the per-query form takes it: one candidate, chosen without timing.
    assert_eq!(runnable(&ctx, 256), 1);
    assert_eq!(last.variant, Variant::Attention(AttentionForm::PerQuery));
    assert!(last.times.is_empty(), "{last:?}");
    // `time_attention` (the benchmarks' entry) times what takes the head.
    let timed = tune::time_attention(&ctx, (9, 1, 256), &AttentionForm::ALL, 1).expect("timed");
    assert_eq!(timed.len(), runnable(&ctx, 256));
    assert!(timed.iter().all(|(f, _)| *f != AttentionForm::KeyTiles));
    let _ = std::fs::remove_file(&path);
}

/// One `layer_norm` node of `rows x cols` over a seeded input (behind a `scale` by 1),
/// with seeded gain and bias.
fn norm_graph(rows: u64, cols: u64) -> (Graph, HashMap<TensorId, TensorData>) {
    let mut b = GraphBuilder::new("layer norm");
    let x = b.input("x", DType::F32, &[rows, cols]);
    let gain = b.weight("gain", DType::F32, &[cols]);
    let bias = b.weight("bias", DType::F32, &[cols]);
    let xs = b.node_with_params("scale", &[x], &[rows, cols], false, &[1.0]);
    b.node_with_params(
        "layer_norm",
        &[xs, gain, bias],
        &[rows, cols],
        false,
        &[1e-5],
    );
    let g = b.build().expect("valid");
    let mut values = HashMap::new();
    let len = (rows * cols) as usize;
    values.insert(x, TensorData::F32(random(rows + cols, len, 3.0)));
    values.insert(gain, TensorData::F32(random(cols + 1, cols as usize, 1.0)));
    values.insert(bias, TensorData::F32(random(cols + 2, cols as usize, 0.5)));
    (g, values)
}

#[test]
fn both_layer_norm_forms_match_the_cpu_reference_and_each_other() {
    let Some(ctx) = own_device() else { return };
    let exec = Executor::new(&ctx);
    // Both forms take the first two; too few rows, then too long rows, leave one.
    for (rows, cols) in [(64, 512), (100, 33), (8, 4096), (70, 5000)] {
        let (g, values) = norm_graph(rows, cols);
        let mut outs = Vec::new();
        for form in NormForm::ALL {
            tune::configure(&ctx, settings_with(None, &[], &[form]));
            let expected = if form.fits(rows as u32, cols as u32) {
                form
            } else {
                NormForm::WorkgroupPerRow
            };
            assert_eq!(
                exec.tuned_choice(&g, 1).expect("resolves"),
                Some(Variant::Norm(expected)),
                "{rows}x{cols} {form:?}"
            );
            let (gpu, cpu) = run_both(&ctx, &g, &values);
            assert_close(
                &format!("layer norm {rows}x{cols} {form:?}"),
                &gpu,
                &cpu,
                1e-4,
            );
            outs.push(gpu);
        }
        assert_close(
            &format!("{rows}x{cols} forms agree"),
            &outs[0],
            &outs[1],
            1e-4,
        );
    }
}

#[test]
fn the_tuner_times_both_layer_norm_forms_and_caches_the_choice() {
    let Some(ctx) = own_device() else { return };
    if !ctx.has_timestamps() {
        common::skip_for_capability(
            "the_tuner_times_both_layer_norm_forms_and_caches_the_choice",
            "no TIMESTAMP_QUERY: the rule decides",
        );
        return;
    }
    let path = cache_path("norm");
    tune::configure(&ctx, settings_with(Some(path.clone()), &[], &NormForm::ALL));
    let (g, values) = norm_graph(256, 512);
    let exec = Executor::new(&ctx);
    let chosen = exec
        .tuned_choice(&g, 1)
        .expect("resolves")
        .expect("the layer norm is tuned");
    let summary = tune::tuning(&ctx);
    let choice = &summary.choices[0];
    assert_eq!(choice.class.family, KernelFamily::LayerNorm);
    assert_eq!((choice.variant, choice.source), (chosen, Source::Tuned));
    assert_eq!(choice.times.len(), 2, "both forms are timed: {choice:?}");
    assert!(
        choice.line().starts_with("layer_norm 256 rows x 512"),
        "{}",
        choice.line()
    );
    let (gpu, cpu) = run_both(&ctx, &g, &values);
    assert_close("tuned layer norm", &gpu, &cpu, 1e-4);
    let cache = TuneCache::load(&path).expect("a valid cache");
    assert_eq!(
        cache.get(&AdapterKey::of(&ctx.info), &choice.class),
        Some(chosen)
    );
    // Too few rows for a row per invocation: the one form left, by the rule, untimed.
    let (few, _) = norm_graph(8, 512);
    assert_eq!(
        exec.tuned_choice(&few, 1).expect("resolves"),
        Some(Variant::Norm(NormForm::WorkgroupPerRow))
    );
    let last = tune::tuning(&ctx)
        .choices
        .last()
        .cloned()
        .expect("a choice");
    assert_eq!((last.source, last.times.len()), (Source::Rule, 0));
    let _ = std::fs::remove_file(&path);
}
