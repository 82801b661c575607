//! f16 storage (issue 27, item 2): the decoder's weights and activations stored as f16
//! where the adapter offers `shader-f16`, kernels accumulating in f32. The logits match
//! the CPU reference (which rounds every f16 tensor as the GPU stores it) within
//! [`LOGITS_TOLERANCE_F16`]; the activations and the weights are planned at half the
//! bytes; the proof covers f16 plans and still names a planted clobber; a device
//! without `shader-f16` refuses f16 with a typed error.

mod common;

use wgalloc::device::{allocate_plan, GpuContext, WgpuStorage, STORAGE_USAGE};
use wgalloc::exec::checksum::prove;
use wgalloc::exec::{ExecError, Executor, StorageType, TensorData, TensorMemory};
use wgalloc::graph::{DType, GraphBuilder};
use wgalloc::model::{
    build_gpt, fused_layers, Forward, ModelConfig, ModelRun, ModelSession, RunOptions,
    LOGITS_TOLERANCE, LOGITS_TOLERANCE_F16,
};
use wgalloc::plan::{inject_clobber, plant_clobber};

/// One run of `config` stored as `dtype` on a fresh session.
fn run_as(ctx: &GpuContext, config: &ModelConfig, dtype: StorageType) -> (ModelSession, ModelRun) {
    let config = ModelConfig { dtype, ..*config };
    let mut session = ModelSession::new(ctx, &config).expect("session");
    let run = session
        .run(config.seq, RunOptions::default())
        .expect("runs");
    (session, run)
}

/// `max |a - b|` (infinite when the lengths differ).
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn the_f16_decoder_matches_the_cpu_reference_and_plans_half_the_bytes() {
    let test = "the_f16_decoder_matches_the_cpu_reference_and_plans_half_the_bytes";
    let Some(ctx) = common::f16_gpu(test) else {
        return;
    };
    // The default run's decoder: 4 layers, width 256, 128 tokens, vocabulary 1024.
    let config = ModelConfig::default();
    assert!(fused_layers(&config));
    let (f32_session, f32_run) = run_as(&ctx, &config, StorageType::F32);
    let (f16_session, f16_run) = run_as(&ctx, &config, StorageType::F16);
    assert!(f32_run.passed(), "{f32_run:?}");
    assert!(
        f16_run.logits_match,
        "f16 logits: max error {} against max |logit| {}",
        f16_run.max_abs_error, f16_run.max_abs_logit
    );
    assert_eq!(f16_run.tolerance, LOGITS_TOLERANCE_F16);
    assert!(f16_run.proof.verified(), "{}", f16_run.proof);
    // The f16 logits are not the f32 ones by accident (the f16 path really rounds).
    assert!(f16_run.max_abs_error > 0.0 || f32_run.max_abs_error > 0.0);

    // Memory beyond the weights: every float activation is half as large; only the
    // token ids (u32, 512 bytes) keep their size. The plan for this graph alone:
    let (a32, a16) = (f32_run.graph_bytes, f16_run.graph_bytes);
    let ids = 4 * config.seq;
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    let slack = ids.next_multiple_of(alignment);
    assert!(
        2 * a16 >= a32 && 2 * a16 <= a32 + 2 * slack,
        "f16 activations {a16} B, f32 {a32} B: not half within the ids' {slack} B"
    );
    assert!(
        2 * f16_run.lower_bounds.inplace_aware <= f32_run.lower_bounds.inplace_aware + 2 * slack
    );
    // The reservation and the weights halve as well.
    assert!(2 * f16_run.activation_bytes <= f32_run.activation_bytes + 2 * slack);
    let (w32, w16) = (f32_session.weight_bytes(), f16_session.weight_bytes());
    assert!(
        2 * w16 <= w32 + 2 * alignment && 2 * w16 >= w32,
        "weights f16 {w16} B, f32 {w32} B"
    );

    // Against the f32 reference (unrounded weights and activations): the error of f16
    // storage itself, a few f16 steps of the largest logit.
    let model = build_gpt(&config).expect("model");
    let exact = model
        .reference_logits(model.token_ids())
        .expect("reference");
    let f16_model = build_gpt(&ModelConfig {
        dtype: StorageType::F16,
        ..config
    })
    .expect("model");
    let rounded = f16_model
        .reference_logits(f16_model.token_ids())
        .expect("reference");
    let storage_error = max_abs_diff(&rounded, &exact);
    let scale = exact.iter().fold(1f32, |m, v| m.max(v.abs()));
    assert!(
        storage_error <= LOGITS_TOLERANCE_F16 * scale,
        "f16 storage moves the logits by {storage_error} (max |logit| {scale})"
    );
    // And the f16 GPU logits themselves against the f32 reference.
    let mut forward = Forward::new(&ctx, &f16_model.config).expect("forward");
    forward.run().expect("runs");
    let gpu_error = max_abs_diff(&forward.logits().expect("logits"), &exact);
    assert!(
        gpu_error <= LOGITS_TOLERANCE_F16 * scale,
        "f16 GPU logits are {gpu_error} off the f32 reference (max |logit| {scale})"
    );
    eprintln!(
        "f16 vs f32 ({}): activations {a16} B vs {a32} B (ratio {:.4}), reserved {} B vs {} B, \
         weights {w16} B vs {w32} B; f16 GPU logits vs f16 CPU reference: max |error| {:.3e} \
         (max |logit| {:.3}, tolerance {LOGITS_TOLERANCE_F16:.0e} x that); f32 GPU vs CPU {:.3e} \
         (tolerance {LOGITS_TOLERANCE:.0e}); f16 CPU vs f32 CPU reference {storage_error:.3e}; \
         f16 GPU vs f32 CPU reference {gpu_error:.3e}",
        ctx.info.name,
        a16 as f64 / a32 as f64,
        f16_run.activation_bytes,
        f32_run.activation_bytes,
        f16_run.max_abs_error,
        f16_run.max_abs_logit,
        f32_run.max_abs_error,
    );
}

#[test]
fn a_clobber_in_an_f16_plan_fails_the_logits_and_the_proof() {
    let test = "a_clobber_in_an_f16_plan_fails_the_logits_and_the_proof";
    let Some(ctx) = common::f16_gpu(test) else {
        return;
    };
    // Heads of width 6 keep attention head by head (2-D kernels, all with f16 forms),
    // and leave `inject_clobber` a pair to move.
    let per_head = ModelConfig {
        width: 24,
        heads: 4,
        dtype: StorageType::F16,
        ..common::tiny_model(1)
    };
    assert!(!fused_layers(&per_head));
    let mut session = ModelSession::new(&ctx, &per_head).expect("session");
    let honest = session.run(16, RunOptions::default()).expect("runs");
    assert!(honest.passed(), "{honest:?}");
    let run = session
        .run(
            16,
            RunOptions {
                inject_clobber: true,
            },
        )
        .expect("runs");
    let clobber = run.clobber.expect("the model has a pair to clobber");
    assert!(!run.plan_verified);
    assert!(!run.logits_match, "max error {}", run.max_abs_error);
    let first = run.proof.first().expect("the proof names a tensor");
    assert_eq!(first.tensor, clobber.victim, "{first}");
}

#[test]
fn a_clobber_planted_in_the_fused_f16_decoder_is_named_by_the_proof() {
    let test = "a_clobber_planted_in_the_fused_f16_decoder_is_named_by_the_proof";
    let Some(ctx) = common::f16_gpu(test) else {
        return;
    };
    let config = ModelConfig {
        dtype: StorageType::F16,
        ..common::tiny_model(2)
    };
    let model = build_gpt(&config).expect("model");
    let graph = &model.graph;
    let storage = ctx.buffer_types().expect("types").storage.desc;
    let mut plan = wgalloc::plan(graph, &[storage], &Default::default()).expect("plan");
    let memory =
        allocate_plan(&ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).expect("memory");
    assert!(prove(&ctx, graph, &plan, &memory)
        .expect("proof")
        .verified());
    assert_eq!(inject_clobber(&mut plan.clone(), graph), None);
    let named = |name: &str| {
        graph
            .tensors
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.id)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    };
    let (victim, intruder) = (named("embed"), named("h0.qkv"));
    assert_eq!(graph.tensors[victim.index()].dtype, DType::F16);
    plant_clobber(&mut plan, victim, intruder).expect("both are placed");
    let memory =
        allocate_plan(&ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).expect("memory");
    let report = prove(&ctx, graph, &plan, &memory).expect("proof");
    assert!(!report.verified(), "clobber not detected: {report}");
    assert!(
        report.first_mismatches.iter().any(|m| m.tensor == victim),
        "the residual stream is named: {report}"
    );
}

#[test]
fn odd_f16_tensors_run_match_the_reference_and_are_proved() {
    let test = "odd_f16_tensors_run_match_the_reference_and_are_proved";
    let Some(ctx) = common::f16_gpu(test) else {
        return;
    };
    // 3 and 5 f16 elements: 6 and 10 bytes, bound rounded up to whole words.
    let mut b = GraphBuilder::new("odd-f16");
    let x = b.input("x", DType::F16, &[5]);
    let w = b.input("w", DType::F16, &[5]);
    let sum = b.node("add", &[x, w], &[5], false);
    let relu = b.node("relu", &[sum], &[5], true);
    let g = b.input("g", DType::F16, &[3]);
    let scaled = b.node_with_params("scale", &[g], &[3], false, &[0.5]);
    let mut graph = b.build().expect("graph");
    for t in &mut graph.tensors {
        if t.dtype == DType::F32 {
            t.dtype = DType::F16;
            t.size /= 2;
        }
    }
    graph.tensors[relu.index()].role = wgalloc::graph::Role::Output;
    graph.tensors[scaled.index()].role = wgalloc::graph::Role::Output;
    assert_eq!(graph.tensors[scaled.index()].size, 6);
    let storage = ctx.buffer_types().expect("types").storage.desc;
    let plan = wgalloc::plan(&graph, &[storage], &Default::default()).expect("plan");
    let memory =
        allocate_plan(&ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).expect("memory");
    let tensors = TensorMemory::single(&plan, &memory);
    let values = [
        (x, vec![1.0, -2.0, 0.1, 3.0, 65504.0]),
        (w, vec![0.5, 1.0, 0.2, -4.0, 0.0]),
        (g, vec![1.0 / 3.0, -7.25, 1e-3]),
    ];
    let mut inputs = std::collections::HashMap::new();
    for (id, v) in &values {
        tensors.write_f32(&ctx, &graph, *id, v).expect("write");
        inputs.insert(*id, TensorData::F32(v.clone()));
    }
    let mut executor = Executor::new(&ctx);
    executor.run(&graph, &tensors).expect("runs");
    let reference = wgalloc::exec::cpu_ref::evaluate(&graph, &inputs).expect("reference");
    for out in [relu, scaled] {
        let gpu = tensors.read_f32(&ctx, &graph, out).expect("read");
        let Some(TensorData::F32(cpu)) = reference[out.index()].clone() else {
            panic!("no reference for {out}")
        };
        // Both round the same f32 results to f16: equal, element for element.
        assert_eq!(gpu, cpu, "{out}");
    }
    assert_eq!(
        tensors.read_f32(&ctx, &graph, scaled).expect("read"),
        // 1/3 is 1365/4096 in f16 and 1e-3 is 1049/2^20; halving is exact.
        vec![1365.0 / 8192.0, -3.625, 1049.0 / 2_097_152.0]
    );
    assert!(prove(&ctx, &graph, &plan, &memory)
        .expect("proof")
        .verified());
}

#[test]
fn a_device_without_shader_f16_refuses_f16_with_a_typed_error() {
    let Some(with) = common::gpu() else { return };
    let without = common::device_without_f16(&with);
    let config = ModelConfig {
        dtype: StorageType::F16,
        ..common::tiny_model(1)
    };
    let model = build_gpt(&config).expect("model");
    let executor = Executor::new(&without);
    assert_eq!(
        executor.check_graph(&model.graph),
        Err(ExecError::ShaderF16Missing)
    );
    let error = ModelSession::new(&without, &config).expect_err("no f16 kernels here");
    assert!(
        error.to_string().contains("shader-f16"),
        "the message names the feature: {error}"
    );
    // The same model in f32 runs on that device.
    let mut session = ModelSession::new(
        &without,
        &ModelConfig {
            dtype: StorageType::F32,
            ..config
        },
    )
    .expect("session");
    assert!(session
        .run(config.seq, RunOptions::default())
        .expect("runs")
        .passed());
}
