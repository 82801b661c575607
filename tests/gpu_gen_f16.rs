//! Generation with f16 storage (issue 27, item 2, the generation path): the Hugging
//! Face fixture (`tests/data/gpt2-tiny`) generated greedily on the GPU with f16
//! weights, activations and KV-cache pages gives the same tokens as the CPU reference
//! that rounds as f16 storage does ([`CpuGpt2::with_f16_storage`]), every step's
//! logits within [`LOGITS_TOLERANCE_F16`] of it; the KV cache holds half the bytes of
//! the f32 run's and the activations about half (the attention state between pages
//! stays f32); every bucket's plan is proved with the f16 cache live; a device without
//! `shader-f16` refuses f16 generation with a typed error.

mod common;

use std::path::Path;

use wgalloc::device::GpuContext;
use wgalloc::exec::{ExecError, StorageType};
use wgalloc::model::hf::{
    generate_greedy, Checkpoint, CpuDecoder, CpuGpt2, Generation, GpuGpt2, GpuOptions, MemoryReport,
};
use wgalloc::model::LOGITS_TOLERANCE_F16;

fn fixture() -> Checkpoint {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-tiny");
    Checkpoint::load(&dir).expect("the fixture loads")
}

/// The largest `|a - b|` over every step's logits, and the largest `|b|`.
fn max_error(a: &Generation, b: &Generation) -> (f32, f32) {
    assert_eq!(a.step_logits.len(), b.step_logits.len());
    let mut err = 0f32;
    let mut scale = 1f32;
    for (x, y) in a.step_logits.iter().zip(&b.step_logits) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            err = err.max((p - q).abs());
            scale = scale.max(q.abs());
        }
    }
    (err, scale)
}

/// Small pages (blocks of 4 tokens, 2 a page whatever the element type: the context
/// spans several pages), a prefill chunk of 8 (a 11-token prompt runs in two chunks),
/// stored as `dtype`.
fn options(ckpt: &Checkpoint, dtype: StorageType) -> GpuOptions {
    let c = &ckpt.config;
    GpuOptions {
        prefill_chunk: 8,
        block_tokens: 4,
        max_page_bytes: 2 * c.n_layer as u64 * 2 * 4 * c.n_embd as u64 * dtype.dtype().size(),
        dtype,
        ..GpuOptions::default()
    }
}

/// Generates `new` tokens after `prompt` on the GPU stored as `dtype`: the
/// generation, the memory report, and whether every bucket's proof verified.
fn generate(
    ctx: &GpuContext,
    ckpt: &Checkpoint,
    dtype: StorageType,
    prompt: &[u32],
    new: usize,
) -> (Generation, MemoryReport, bool) {
    let mut gpu =
        GpuGpt2::new(ctx, &ckpt.config, &ckpt.weights, options(ckpt, dtype)).expect("uploads");
    assert_eq!(gpu.kv_config().dtype, dtype.dtype());
    let g = generate_greedy(&mut gpu, prompt, new).expect("generates");
    let proofs = gpu.prove_buckets().expect("the proofs run");
    assert!(!proofs.is_empty());
    let proved = proofs.iter().all(|(_, report)| report.verified());
    (g, gpu.memory_report(), proved)
}

#[test]
fn the_fixture_generates_in_f16_the_rounded_reference_s_tokens_in_half_the_bytes() {
    let Some(ctx) = common::f16_gpu(
        "the_fixture_generates_in_f16_the_rounded_reference_s_tokens_in_half_the_bytes",
    ) else {
        return;
    };
    let ckpt = fixture();
    let v = ckpt.config.vocab_size as u32;
    let prompt: Vec<u32> = (0..11).map(|i| (i * 37 + 5) % v).collect();
    let new = 12;
    let (g16, m16, proved16) = generate(&ctx, &ckpt, StorageType::F16, &prompt, new);
    let (g32, m32, proved32) = generate(&ctx, &ckpt, StorageType::F32, &prompt, new);
    assert!(
        proved16,
        "every f16 bucket's plan is proved with the cache live"
    );
    assert!(proved32);
    let cpu = CpuGpt2::new(ckpt.config.clone(), ckpt.weights.clone()).expect("cpu");
    let cpu16 = cpu.clone().with_f16_storage();
    assert!(cpu16.stores_f16() && !cpu.stores_f16());
    let c16 = generate_greedy(&mut CpuDecoder::new(cpu16), &prompt, new).expect("cpu f16");
    let c32 = generate_greedy(&mut CpuDecoder::new(cpu), &prompt, new).expect("cpu f32");
    let (err16, scale16) = max_error(&g16, &c16);
    let (err_vs_f32, scale32) = max_error(&g16, &c32);
    let (err32, _) = max_error(&g32, &c32);
    eprintln!(
        "gpt2-tiny, {} prompt + {new} tokens: tokens f16 {:?}, f32 {:?}; \
         max |logit err| f16 GPU vs f16 CPU {err16:.3e} (max |logit| {scale16:.2}), \
         vs f32 CPU {err_vs_f32:.3e} ({scale32:.2}); f32 GPU vs f32 CPU {err32:.3e}",
        prompt.len(),
        g16.generated_ids,
        g32.generated_ids
    );
    eprintln!(
        "memory f32 / f16: KV reserved {} / {} B (used {} / {} B, {} tokens), activations {} / {} B, weights {} / {} B",
        m32.kv.reserved_bytes,
        m16.kv.reserved_bytes,
        m32.kv.used_bytes,
        m16.kv.used_bytes,
        m16.kv.tokens,
        m32.activation_bytes,
        m16.activation_bytes,
        m32.weight_bytes,
        m16.weight_bytes
    );
    // Greedy tokens of a short generation are the rounded reference's.
    assert_eq!(g16.generated_ids, c16.generated_ids);
    assert!(
        err16 <= LOGITS_TOLERANCE_F16 * scale16,
        "f16 logits off the rounded reference by {err16} > {LOGITS_TOLERANCE_F16} x {scale16}"
    );
    assert!(err32 <= 1e-3 * scale32);
    // The cache: the same pages and tokens at half the bytes; the table is u32.
    assert_eq!(m16.kv.tokens, m32.kv.tokens);
    assert_eq!(m16.kv.pages, m32.kv.pages);
    assert_eq!(2 * m16.kv.reserved_bytes, m32.kv.reserved_bytes);
    assert_eq!(2 * m16.kv.used_bytes, m32.kv.used_bytes);
    assert_eq!(m16.kv.table_bytes, m32.kv.table_bytes);
    // Activations: everything but the f32 attention state halves.
    assert!(
        m16.activation_bytes < m32.activation_bytes
            && 10 * m16.activation_bytes <= 6 * m32.activation_bytes,
        "activations {} B (f16) against {} B (f32)",
        m16.activation_bytes,
        m32.activation_bytes
    );
    assert!(2 * m16.weight_bytes <= m32.weight_bytes + 4096);
}

#[test]
fn a_device_without_shader_f16_refuses_f16_generation_with_a_typed_error() {
    let Some(with) = common::gpu() else { return };
    let without = common::device_without_f16(&with);
    let ckpt = fixture();
    let refused = GpuGpt2::new(
        &without,
        &ckpt.config,
        &ckpt.weights,
        options(&ckpt, StorageType::F16),
    );
    match refused {
        Err(wgalloc::Error::Exec(ExecError::ShaderF16Missing)) => {}
        Err(other) => panic!("expected ShaderF16Missing, got {other}"),
        Ok(_) => panic!("f16 generation on a device without shader-f16"),
    }
    // f32 runs there.
    let mut gpu = GpuGpt2::new(
        &without,
        &ckpt.config,
        &ckpt.weights,
        options(&ckpt, StorageType::F32),
    )
    .expect("f32 uploads");
    generate_greedy(&mut gpu, &[1, 2, 3], 2).expect("generates");
}
