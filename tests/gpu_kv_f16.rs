//! The paged KV cache with f16 pages (issue 27, item 2, the generation path): qkv, the
//! pages and the attention output stored as f16, the online-softmax state between
//! the pages and every score, sum and accumulator in f32. Prefill chunks and decode
//! steps over several blocks and pages equal the CPU's causal attention over the
//! f16-rounded sequence within one f16 step of the output; the cached K and V rows are
//! exactly the rounded rows; the cache takes half the bytes of the f32 cache for the
//! same context; the proof holds the f16 cache live and names a planted clobber.

mod common;

use wgalloc::device::{allocate_plan, PlannedMemory, WgpuStorage};
use wgalloc::exec::cpu_ref::{attention_causal, round_to_f16};
use wgalloc::exec::{Executor, TensorMemory};
use wgalloc::kv::{prove_step, DeviceKvCache, KvConfig, KvProof, KvReport, KvTensors};
use wgalloc::plan::Plan;
use wgalloc::storage::STORAGE_USAGE;
use wgalloc::{DType, GpuContext, Graph, GraphBuilder, Planner, TensorId};

/// Deterministic values in [-1, 1].
fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let x = (i as u32 ^ seed.wrapping_mul(0x9e37_79b9))
                .wrapping_mul(2_654_435_761)
                .rotate_left(13);
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Two layers of `heads` x `head_dim`, blocks of 5 tokens, 2 blocks a page, stored as
/// `dtype`.
fn config(ctx: &GpuContext, dtype: DType) -> KvConfig {
    let base = KvConfig::new(2, 2, 16, 5, 64)
        .and_then(|c| c.with_dtype(dtype))
        .expect("valid");
    base.fit_pages(&ctx.limits, 2 * base.block_bytes())
        .expect("fits a binding")
}

/// A step graph for chunks of `n` tokens: per layer an input `qkv [n, 3d]` of the
/// cache's element type and the cache's attention over it (its output of that type
/// too), marked as an output; planned and allocated.
struct Step {
    graph: Graph,
    kv: KvTensors,
    qkv: Vec<TensorId>,
    out: Vec<TensorId>,
    plan: Plan,
    memory: PlannedMemory,
}

fn step(ctx: &GpuContext, config: &KvConfig, n: u64) -> Step {
    let mut b = GraphBuilder::new(format!("step n={n}"));
    let kv = KvTensors::add(&mut b, config, config.pages_for(config.max_tokens));
    let mut qkv = Vec::new();
    let mut out = Vec::new();
    for layer in 0..config.layers {
        let x = b.input(
            format!("qkv{layer}"),
            config.dtype,
            &[n, 3 * config.width()],
        );
        let y = kv.attention(&mut b, x, layer).expect("attention");
        b.mark_output(y);
        qkv.push(x);
        out.push(y);
    }
    let graph = b.build().expect("a valid step graph");
    // The normalised outputs are of the cache's type; the states stay f32.
    for &y in &out {
        assert_eq!(graph.tensors[y.index()].dtype, config.dtype);
    }
    let desc = ctx.buffer_types().expect("buffer types").storage.desc;
    let plan = Planner::from_name("ggml")
        .and_then(|p| p.plan_graph(&graph, &desc))
        .expect("the activation plan");
    let memory =
        allocate_plan(ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("activations");
    Step {
        graph,
        kv,
        qkv,
        out,
        plan,
        memory,
    }
}

/// Runs `chunks` through a cache of `config` and returns the largest error of any
/// output against the CPU's causal attention over the sequence as the cache stores
/// it (rounded to f16 for an f16 cache), and the cache's report at the end. Checks
/// every cached K and V row against the stored sequence, exactly.
fn run_chunks(ctx: &GpuContext, config: KvConfig, chunks: &[u32]) -> (f32, KvReport) {
    let mut cache = DeviceKvCache::new(ctx, WgpuStorage::wgpu(ctx), config).expect("a cache");
    let mut exec = Executor::new(ctx);
    let w = config.width() as usize;
    let total: u32 = chunks.iter().sum();
    let stored = |v: Vec<f32>| match config.dtype {
        DType::F16 => round_to_f16(&v),
        _ => v,
    };
    let seqs: Vec<Vec<f32>> = (0..config.layers)
        .map(|l| stored(values(total as usize * 3 * w, 7 + l)))
        .collect();
    let scale = 1.0 / (config.head_dim as f32).sqrt();
    let mut steps: std::collections::HashMap<u32, (Step, Plan)> = Default::default();
    let mut worst = 0f32;
    let mut past = 0usize;
    for &n in chunks {
        steps.entry(n).or_insert_with(|| {
            let s = step(ctx, &config, u64::from(n));
            let layer = cache.layer(&s.graph, &s.kv).expect("the cache's layer");
            (s, layer)
        });
        let (s, layer) = &steps[&n];
        let info = cache.begin_step(&s.kv, n).expect("blocks for the chunk");
        assert_eq!(info.past as usize, past);
        let memory = TensorMemory::single(&s.plan, &s.memory).with_layer(layer, cache.memory());
        let end = past + n as usize;
        for (l, seq) in seqs.iter().enumerate() {
            memory
                .write_f32(ctx, &s.graph, s.qkv[l], &seq[past * 3 * w..end * 3 * w])
                .expect("qkv written");
        }
        exec.run(&s.graph, &memory).expect("the step runs");
        for (l, seq) in seqs.iter().enumerate() {
            let got = memory.read_f32(ctx, &s.graph, s.out[l]).expect("read");
            let full = attention_causal(
                &seq[..end * 3 * w],
                end,
                config.heads as usize,
                config.head_dim as usize,
                scale,
            );
            assert_eq!(got.len(), n as usize * w);
            for (g, e) in got.iter().zip(&full[past * w..end * w]) {
                worst = worst.max((g - e).abs());
            }
        }
        cache.commit(n).expect("committed");
        past = end;
    }
    let report = cache.report();
    assert!(report.pages > 1, "the context spans several pages");
    let bt = config.block_tokens as usize;
    for block in 0..report.blocks {
        let words = cache.read_block(block).expect("readback").expect("mapped");
        assert_eq!(words.len() as u64, config.block_words());
        for (l, seq) in seqs.iter().enumerate() {
            for r in 0..bt {
                let pos = block * bt + r;
                if pos >= past {
                    break;
                }
                let at = l * 2 * bt * w + r * w;
                let row = pos * 3 * w;
                assert_eq!(&words[at..at + w], &seq[row + w..row + 2 * w], "K {pos}");
                let v = at + bt * w;
                assert_eq!(&words[v..v + w], &seq[row + 2 * w..row + 3 * w], "V {pos}");
            }
        }
    }
    (worst, report)
}

#[test]
fn f16_pages_decode_and_prefill_match_the_rounded_reference_in_half_the_bytes() {
    let test = "f16_pages_decode_and_prefill_match_the_rounded_reference_in_half_the_bytes";
    let Some(ctx) = common::f16_gpu(test) else {
        return;
    };
    // 33 tokens: 7 blocks of 5 in 4 pages; a prefill of 19 (two workgroups of queries),
    // decode steps, chunks that start and end inside blocks.
    let chunks = [19, 1, 1, 7, 1, 3, 1];
    let (err16, r16) = run_chunks(&ctx, config(&ctx, DType::F16), &chunks);
    let (err32, r32) = run_chunks(&ctx, config(&ctx, DType::F32), &chunks);
    eprintln!(
        "KV cache for {} tokens: f32 {} B reserved ({} B used), f16 {} B reserved ({} B used); \
         max error f16 {err16:.3e}, f32 {err32:.3e}",
        r16.tokens, r32.reserved_bytes, r32.used_bytes, r16.reserved_bytes, r16.used_bytes
    );
    assert_eq!(
        (r16.tokens, r16.pages, r16.blocks),
        (r32.tokens, r32.pages, r32.blocks)
    );
    assert_eq!(2 * r16.reserved_bytes, r32.reserved_bytes);
    assert_eq!(2 * r16.used_bytes, r32.used_bytes);
    assert_eq!(
        r16.table_bytes, r32.table_bytes,
        "the table is u32 either way"
    );
    // Outputs in [-1, 1] stored as f16: one f16 step (2^-11) and the f32 math's noise.
    assert!(err16 <= 1e-3, "f16 paged attention off by {err16}");
    assert!(err32 <= 2e-4, "f32 paged attention off by {err32}");
}

#[test]
fn the_proof_holds_the_f16_cache_live_and_names_a_planted_clobber() {
    let test = "the_proof_holds_the_f16_cache_live_and_names_a_planted_clobber";
    let Some(ctx) = common::f16_gpu(test) else {
        return;
    };
    let config = config(&ctx, DType::F16);
    let s = step(&ctx, &config, 5);
    let report = prove_step(&ctx, &s.graph, &s.kv, &s.plan, &s.memory).expect("the proof runs");
    assert!(report.verified(), "{report}");
    let mut cache = DeviceKvCache::new(&ctx, WgpuStorage::wgpu(&ctx), config).expect("a cache");
    cache.layer(&s.graph, &s.kv).expect("pages");
    let report = cache
        .prove_step(&s.graph, &s.kv, &s.plan, &s.memory)
        .expect("apart, and the proof runs");
    assert!(report.verified(), "{report}");
    let mut proof = KvProof::new(&s.graph, &s.kv, &s.plan).expect("the proof graph");
    let plant = proof.plant_over_cache().expect("an activation to plant");
    let report = proof.run(&ctx, &s.memory).expect("the proof runs");
    assert!(!report.verified(), "the clobber went unseen: {report}");
    assert!(
        report
            .first_mismatches
            .iter()
            .any(|m| m.tensor == plant.victim),
        "the page {:?} is named: {report}",
        plant.victim
    );
}

#[test]
fn f16_pages_decode_with_256_slices_a_head_within_the_same_bound() {
    // The GPU rule's width (256 invocations a head, their states merged as trees),
    // forced on a device of its own so that a CPU adapter runs it too.
    let test = "f16_pages_decode_with_256_slices_a_head_within_the_same_bound";
    if common::f16_gpu(test).is_none() {
        return;
    }
    let ctx = common::wide_decode_device().expect("the adapter of f16_gpu");
    assert!(ctx.has_f16());
    let chunks = [19, 1, 1, 7, 1, 3, 1];
    let (err16, _) = run_chunks(&ctx, config(&ctx, DType::F16), &chunks);
    assert!(err16 <= 1e-3, "f16 paged attention off by {err16}");
}
