//! GPT-2 on the GPU with planned memory and the paged KV cache: the Hugging Face
//! fixture generates transformers' tokens; at every decode step the KV-cached logits
//! equal a full recompute on the GPU and the CPU reference, for several configs
//! (an odd vocabulary, `n_inner` not 4 x width, head widths 16 and 64, a non-default
//! epsilon, an untied and a split LM head, contexts over several KV pages); after
//! warm-up a decode step plans nothing and creates nothing; every bucket's plan is
//! proved with the cache live; bad input is a typed error and leaks nothing.

mod common;

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serde::Deserialize;
use wgalloc::device::WgpuStorage;
use wgalloc::error::ErrorKind;
use wgalloc::model::hf::{
    generate_greedy, BucketKey, Checkpoint, CheckpointError, CpuDecoder, CpuGpt2, Decoder,
    Gpt2Config, Gpt2Weights, GpuGpt2, GpuOptions, LogitRows,
};
use wgalloc::storage::CountingStorage;

#[derive(Deserialize)]
struct Reference {
    prompt_ids: Vec<u32>,
    prompt_logits: Vec<Vec<f32>>,
    generated_ids: Vec<u32>,
    step_logits: Vec<Vec<f32>>,
}

fn fixture() -> Checkpoint {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-tiny");
    Checkpoint::load(&dir).expect("the fixture loads")
}

fn reference() -> Reference {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-tiny/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("parses")
}

/// `max |a - b| <= 1e-3 * max(1, max |b|)`.
fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err <= 1e-3 * scale,
        "{what}: max error {err} > 1e-3 x {scale}"
    );
}

/// Small pages: blocks of 4 tokens, 2 blocks a page, so contexts span several pages.
fn small_pages(config: &Gpt2Config) -> GpuOptions {
    let d = config.n_embd as u64;
    GpuOptions {
        prefill_chunk: 8,
        block_tokens: 4,
        max_page_bytes: 2 * config.n_layer as u64 * 2 * 4 * d * 4,
        ..GpuOptions::default()
    }
}

#[test]
fn the_fixture_generates_transformers_tokens_on_the_gpu() {
    let Some(ctx) = common::gpu() else { return };
    let ckpt = fixture();
    let r = reference();
    let mut gpu =
        GpuGpt2::new(&ctx, &ckpt.config, &ckpt.weights, GpuOptions::default()).expect("uploads");
    let logits = gpu.append(&r.prompt_ids).expect("prefill");
    let vocab = ckpt.config.vocab_size;
    for (pos, want) in r.prompt_logits.iter().enumerate() {
        assert_close(
            &format!("prompt {pos}"),
            &logits[pos * vocab..][..vocab],
            want,
        );
    }
    let g = generate_greedy(&mut gpu, &r.prompt_ids, r.generated_ids.len()).expect("generates");
    assert_eq!(g.generated_ids, r.generated_ids);
    for (i, (got, want)) in g.step_logits.iter().zip(&r.step_logits).enumerate() {
        assert_close(&format!("step {i}"), got, want);
    }
}

/// Generates with the GPU (small pages), then checks every step against a full
/// recompute on the GPU and the CPU reference, and proves every bucket.
fn decode_matches_recompute(config: &Gpt2Config, seed: u64, options: GpuOptions) {
    let Some(ctx) = common::gpu() else { return };
    let options_piece = options
        .head_piece_bytes
        .map(|b| (b / (4 * config.n_embd as u64)) as usize);
    let weights = Gpt2Weights::seeded(config, seed);
    let cpu = CpuGpt2::new(config.clone(), weights.clone()).expect("cpu");
    let mut gpu = GpuGpt2::new(&ctx, config, &weights, options).expect("gpu");
    let v = config.vocab_size as u32;
    let prompt: Vec<u32> = (0..11).map(|i| (i * 37 + 5) % v).collect();
    let new = 14;
    let g = generate_greedy(&mut gpu, &prompt, new).expect("gpu generates");
    let c = generate_greedy(&mut CpuDecoder::new(cpu.clone()), &prompt, new).expect("cpu");
    let mut seq = prompt.clone();
    seq.extend(&g.generated_ids[..new - 1]);
    let full_gpu = gpu.recompute(&seq).expect("recompute");
    let full_cpu = cpu.logits(&seq).expect("cpu recompute");
    let vocab = config.vocab_size;
    for (step, logits) in g.step_logits.iter().enumerate() {
        let row = (prompt.len() - 1 + step) * vocab;
        assert_close(
            &format!("step {step} vs gpu recompute"),
            logits,
            &full_gpu[row..][..vocab],
        );
        assert_close(
            &format!("step {step} vs cpu"),
            logits,
            &full_cpu[row..][..vocab],
        );
    }
    assert_eq!(
        g.generated_ids, c.generated_ids,
        "greedy tokens, gpu vs cpu"
    );
    let memory = gpu.memory_report();
    assert!(
        memory.kv.pages >= 2,
        "the context spans several pages: {memory:?}"
    );
    if let Some(piece) = options_piece {
        assert_eq!(memory.head_pieces, config.vocab_size.div_ceil(piece));
    }
    let proofs = gpu.prove_buckets().expect("proofs run");
    assert_eq!(proofs.len(), memory.buckets.len());
    for (key, report) in proofs {
        assert!(report.verified(), "{key:?}: {report:?}");
    }
}

#[test]
fn odd_vocabulary_and_inner_width_decode_as_they_recompute() {
    // n_inner 70 is not a multiple of 4: the MLP takes the unfused nodes (matmul,
    // bias add, gelu); the other configs take the bias epilogues.
    let mut c = Gpt2Config::new(2, 32, 2, 101, 40);
    c.n_inner = Some(70);
    // The tied head split in pieces of at most 30 rows: 4 pieces, the last shorter.
    let options = GpuOptions {
        head_piece_bytes: Some(30 * 32 * 4),
        ..small_pages(&c)
    };
    decode_matches_recompute(&c, 11, options);
}

#[test]
fn head_width_64_and_another_epsilon_decode_as_they_recompute() {
    let mut c = Gpt2Config::new(2, 128, 2, 64, 32);
    c.layer_norm_epsilon = 1e-3;
    decode_matches_recompute(&c, 12, small_pages(&c));
}

#[test]
fn an_untied_head_split_in_pieces_decodes_as_it_recomputes() {
    let mut c = Gpt2Config::new(1, 48, 3, 37, 32);
    c.tie_word_embeddings = false;
    let options = GpuOptions {
        head_piece_bytes: Some(10 * 48 * 4),
        ..small_pages(&c)
    };
    decode_matches_recompute(&c, 13, options);
}

#[test]
fn after_warm_up_a_decode_step_plans_and_creates_nothing() {
    let Some(_) = common::gpu() else { return };
    // A device of its own: pipelines are built once per device, and the other tests of
    // this file, running beside it on the shared one, build theirs (one per head
    // width) while this one counts.
    let ctx = wgalloc::device::GpuContext::from_env().expect("a second device");
    let ckpt = fixture();
    let options = small_pages(&ckpt.config);
    let mut gpu = GpuGpt2::new(&ctx, &ckpt.config, &ckpt.weights, options).expect("gpu");
    let prompt = reference().prompt_ids;
    let first = generate_greedy(&mut gpu, &prompt, 20).expect("warm-up");
    let warm = gpu.steps().len();
    assert!(gpu.steps().iter().any(|s| s.planned), "the warm-up plans");
    assert!(
        gpu.steps().iter().any(|s| s.buffers_created > 0),
        "and allocates"
    );
    // Second run: every bucket exists and so does every page. Bind groups of buckets
    // made before the cache's last page was added are made once more (the cache's
    // memory changed); nothing is planned or allocated.
    let second = generate_greedy(&mut gpu, &prompt, 20).expect("again");
    assert_eq!(first.generated_ids, second.generated_ids);
    for s in &gpu.steps()[warm..] {
        assert!(!s.planned, "{s:?}");
        assert_eq!(s.buffers_created, 0, "{s:?}");
        assert_eq!(s.pipelines_built, 0, "{s:?}");
    }
    let warm = gpu.steps().len();
    let third = generate_greedy(&mut gpu, &prompt, 20).expect("once more");
    assert_eq!(first.generated_ids, third.generated_ids);
    let after = &gpu.steps()[warm..];
    assert_eq!(
        after.len(),
        2 + 19,
        "12 prompt tokens in chunks of 8, then 19 decode steps"
    );
    for s in after {
        assert!(!s.planned, "{s:?}");
        assert_eq!(s.buffers_created, 0, "{s:?}");
        assert_eq!(s.bind_groups_created, 0, "{s:?}");
        assert_eq!(s.pipelines_built, 0, "{s:?}");
    }
    let decode: Vec<_> = after
        .iter()
        .filter(|s| matches!(s.key, BucketKey::Step { rows: 1, .. }))
        .collect();
    assert_eq!(decode.len(), 19);
    // A steady step's pass was recorded ahead, during the step before: its host part
    // is the lookup, the writes and the submit; it reports its GPU time. Per layer: the
    // fused ln_1 + QKV, one attention node per page slot (the first with the chunk's
    // own keys), the output projection, the fused ln_2 + up projection, the down
    // projection; then ln_f and the head.
    let c = &ckpt.config;
    for s in &decode {
        assert!(s.submit_time <= s.host_time, "{s:?}");
        assert!(s.encode_ahead_time > std::time::Duration::ZERO, "{s:?}");
        assert_eq!(s.gpu_time.is_some(), ctx.has_timestamps(), "{s:?}");
        let BucketKey::Step { slots, .. } = s.key else {
            unreachable!("filtered")
        };
        assert_eq!(
            s.dispatches,
            c.n_layer * (4 + slots as usize) + 1 + memory_pieces(&gpu),
            "{s:?}"
        );
    }
    let memory = gpu.memory_report();
    for b in &memory.buckets {
        assert!(b.plan_bytes <= memory.activation_bytes);
        assert!(b.plan_bytes >= b.lower_bound);
    }
}

#[test]
fn bad_input_is_a_typed_error_and_leaks_nothing() {
    let Some(ctx) = common::gpu() else { return };
    let ckpt = fixture();
    let counting = Arc::new(CountingStorage::new(common::CappedStorage {
        inner: WgpuStorage::wgpu(&ctx),
        left: AtomicU64::new(3), // the table and two pages (the spare one included)
    }));
    let options = GpuOptions {
        kv_storage: Some(counting.clone()),
        ..small_pages(&ckpt.config)
    };
    {
        let mut gpu = GpuGpt2::new(&ctx, &ckpt.config, &ckpt.weights, options).expect("gpu");
        let e = gpu
            .append(&[1, 512])
            .expect_err("token past the vocabulary");
        assert!(matches!(
            e,
            wgalloc::Error::Checkpoint(CheckpointError::TokenOutOfVocab { token: 512, .. })
        ));
        assert_eq!(gpu.context_len(), 0);
        let e = generate_greedy(&mut gpu, &[1; 60], 10).expect_err("past n_positions");
        assert!(matches!(
            e,
            wgalloc::Error::Checkpoint(CheckpointError::ContextTooLong { .. })
        ));
        // The budget holds one page: a context past it needs a block the storage refuses.
        let e = gpu.append(&[1; 20]).expect_err("a refused KV page");
        assert!(matches!(e, wgalloc::Error::Kv(_)), "{e:?}");
        assert_ne!(e.kind(), ErrorKind::BadInput);
        // What fits still runs.
        gpu.reset();
        gpu.append(&[1, 2, 3]).expect("a short context still runs");
    }
    let report = counting.report();
    assert_eq!(report.live_regions, 0, "every page went back: {report:?}");
    assert!(report.failures >= 1, "{report:?}");
}

#[test]
fn a_plan_that_puts_an_activation_over_the_cache_is_caught() {
    let Some(ctx) = common::gpu() else { return };
    let ckpt = fixture();
    let mut gpu =
        GpuGpt2::new(&ctx, &ckpt.config, &ckpt.weights, small_pages(&ckpt.config)).expect("gpu");
    // 10 tokens: two page slots (pages of 8 tokens), so a second page exists.
    generate_greedy(&mut gpu, &reference().prompt_ids[..6], 5).expect("runs");
    let key = BucketKey::Step {
        rows: 1,
        slots: 2,
        logits: LogitRows::Last,
    };
    let (clean, none) = gpu.prove_bucket(key, false).expect("proof");
    assert!(clean.verified() && none.is_none(), "{clean:?}");
    let (caught, planted) = gpu.prove_bucket(key, true).expect("proof");
    let planted = planted.expect("an activation to plant");
    assert!(!caught.verified(), "the clobber of {planted:?} is caught");
    assert!(
        caught
            .first_mismatches
            .iter()
            .any(|m| m.tensor == planted.victim),
        "the cache page is named: {caught:?}"
    );
}

#[test]
fn prompts_of_several_lengths_share_one_padded_bucket_and_match_the_cpu() {
    let Some(ctx) = common::gpu() else { return };
    let ckpt = fixture();
    let cpu = CpuGpt2::new(ckpt.config.clone(), ckpt.weights.clone()).expect("cpu");
    let mut gpu =
        GpuGpt2::new(&ctx, &ckpt.config, &ckpt.weights, small_pages(&ckpt.config)).expect("gpu");
    let prompt = reference().prompt_ids;
    let vocab = ckpt.config.vocab_size;
    for len in [5, 6, 7] {
        gpu.reset();
        let got = gpu.append(&prompt[..len]).expect("prefill");
        let want = cpu.logits(&prompt[..len]).expect("cpu");
        assert_eq!(got.len(), len * vocab);
        assert_close(&format!("{len} tokens"), &got, &want);
        // The next token after a padded step sees exactly the real context.
        let next = gpu.append(&[prompt[len]]).expect("decode");
        let full = cpu.logits(&prompt[..=len]).expect("cpu");
        assert_close(&format!("after {len}"), &next, &full[len * vocab..]);
    }
    let padded: Vec<_> = gpu
        .memory_report()
        .buckets
        .into_iter()
        .filter(|b| matches!(b.key, BucketKey::Step { rows: 8, .. }))
        .collect();
    assert_eq!(
        padded.len(),
        1,
        "one bucket of 8 rows for 5, 6 and 7 tokens"
    );
    assert_eq!(padded[0].runs, 3);
}

/// Pieces of the model's LM head.
fn memory_pieces(gpu: &GpuGpt2) -> usize {
    gpu.memory_report().head_pieces
}
