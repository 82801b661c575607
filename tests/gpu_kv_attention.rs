//! The paged KV cache on a real adapter: decode steps (n = 1) and prefill chunks
//! (n > 1, more than one workgroup of queries) over a context that spans several
//! blocks and pages (block sizes that do not divide it), for head widths 16 and 64,
//! equal the CPU's full causal attention and the existing `attention_causal` kernel
//! over the whole sequence; the K and V rows the kernels appended are where the block
//! table says; a storage that refuses a page is a typed error that loses nothing; the
//! proof holds the cache live (a planted clobber over a page is named).

mod common;

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wgalloc::device::{allocate_plan, PlannedMemory, WgpuStorage};
use wgalloc::exec::cpu_ref::attention_causal;
use wgalloc::exec::{Executor, TensorMemory};
use wgalloc::kv::{
    prove_step, DeviceKvCache, KvConfig, KvError, KvProof, KvTensors, PROOF_TENSOR_BYTES,
};
use wgalloc::plan::{inject_clobber, Plan};
use wgalloc::storage::{
    CountingStorage, PagedStorage, RegionRequest, Storage, StorageError, STORAGE_USAGE,
};
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

/// A step graph for chunks of `n` tokens: per layer an input `qkv [n, 3d]` and the
/// cache's attention over it, marked as an output.
struct Step {
    graph: Graph,
    kv: KvTensors,
    qkv: Vec<TensorId>,
    out: Vec<TensorId>,
    plan: Plan,
    memory: PlannedMemory,
    layer: Plan,
}

fn step_graph(
    ctx: &GpuContext,
    config: &KvConfig,
    n: u64,
    planner: &str,
) -> (
    Graph,
    KvTensors,
    Vec<TensorId>,
    Vec<TensorId>,
    Plan,
    PlannedMemory,
) {
    let mut b = GraphBuilder::new(format!("step n={n}"));
    let width = config.width();
    let kv = KvTensors::add(&mut b, config, config.pages_for(config.max_tokens));
    let mut qkv = Vec::new();
    let mut out = Vec::new();
    for layer in 0..config.layers {
        let x = b.input(format!("qkv{layer}"), DType::F32, &[n, 3 * width]);
        let y = kv
            .attention(&mut b, x, layer)
            .expect("attention over the cache");
        b.mark_output(y);
        qkv.push(x);
        out.push(y);
    }
    let graph = b.build().expect("a valid step graph");
    let desc = ctx.buffer_types().expect("buffer types").storage.desc;
    let plan = Planner::from_name(planner)
        .and_then(|p| p.plan_graph(&graph, &desc))
        .expect("the activation plan");
    for id in kv.tensors() {
        assert!(
            plan.placement(id).is_none(),
            "the cache is not planned memory"
        );
    }
    let memory =
        allocate_plan(ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("activations");
    (graph, kv, qkv, out, plan, memory)
}

/// Runs `chunks` through a cache on `storage` and checks every output against the
/// CPU's full attention; at the end the whole sequence against `attention_causal` on
/// the GPU and every cached K/V row against the sequence.
fn run_chunks<S: Storage<Memory = wgpu::Buffer>>(
    ctx: &GpuContext,
    storage: S,
    config: KvConfig,
    chunks: &[u32],
    planner: &str,
) {
    let mut cache = DeviceKvCache::new(ctx, storage, config).expect("a cache");
    let mut inplace = 0;
    let mut steps: HashMap<u32, Step> = HashMap::new();
    let mut exec = Executor::new(ctx);
    let w = config.width() as usize;
    let total: u32 = chunks.iter().sum();
    let seqs: Vec<Vec<f32>> = (0..config.layers)
        .map(|l| values(total as usize * 3 * w, 7 + l))
        .collect();
    let scale = 1.0 / (config.head_dim as f32).sqrt();
    let mut got_all: Vec<Vec<f32>> = vec![Vec::new(); config.layers as usize];
    let mut past = 0usize;
    let mut previous = None;
    let mut seen = std::collections::HashSet::new();
    for &n in chunks {
        if let Entry::Vacant(slot) = steps.entry(n) {
            let (graph, kv, qkv, out, plan, memory) =
                step_graph(ctx, &config, u64::from(n), planner);
            let layer = cache.layer(&graph, &kv).expect("the cache's layer");
            slot.insert(Step {
                graph,
                kv,
                qkv,
                out,
                plan,
                memory,
                layer,
            });
        }
        let step = &steps[&n];
        let info = cache.begin_step(&step.kv, n).expect("blocks for the chunk");
        assert_eq!(info.past as usize, past);
        let memory =
            TensorMemory::single(&step.plan, &step.memory).with_layer(&step.layer, cache.memory());
        let end = past + n as usize;
        for (l, seq) in seqs.iter().enumerate() {
            memory
                .write_f32(
                    ctx,
                    &step.graph,
                    step.qkv[l],
                    &seq[past * 3 * w..end * 3 * w],
                )
                .expect("qkv written");
        }
        // The naive-plan test runs through the executor's kept recordings (one per
        // chunk size), the others record every step.
        let report = if planner == "naive" {
            exec.run_cached(u64::from(n), &step.graph, &memory)
        } else {
            exec.run(&step.graph, &memory)
        }
        .expect("the step runs");
        inplace += report.inplace_dispatches;
        if previous == Some(n) {
            // The same graph over the same memory: a steady step creates no bind group.
            assert_eq!(report.bind_groups_created, 0, "n {n}, past {past}");
        }
        previous = Some(n);
        if planner == "naive" && !seen.insert(n) {
            // A kept recording: nothing resolved, no bind group created or looked up.
            assert_eq!(
                (report.bind_groups_created, report.bind_groups_reused),
                (0, 0),
                "n {n}, past {past}"
            );
        }
        for (l, seq) in seqs.iter().enumerate() {
            let got = memory
                .read_f32(ctx, &step.graph, step.out[l])
                .expect("read back");
            let full = attention_causal(
                &seq[..end * 3 * w],
                end,
                config.heads as usize,
                config.head_dim as usize,
                scale,
            );
            for (i, (g, e)) in got.iter().zip(&full[past * w..end * w]).enumerate() {
                assert!(
                    (g - e).abs() < 2e-4,
                    "hd {} layer {l}, past {past}, n {n}, [{i}]: gpu {g} vs cpu {e}",
                    config.head_dim
                );
            }
            got_all[l].extend_from_slice(&got);
        }
        cache.commit(n).expect("committed");
        past = end;
    }
    assert!(cache.report().pages > 1, "the context spans several pages");
    // Both kv_attend kernels ran: in place over the state (ggml), and not (naive).
    match planner {
        "naive" => assert_eq!(inplace, 0),
        _ => assert!(inplace > 0, "no kv_attend ran in place"),
    }
    assert!(cache.report().blocks > 2, "and several blocks");
    // Every cached row is the sequence's K and V, where the table says.
    let bt = config.block_tokens as usize;
    for block in 0..cache.report().blocks {
        let Some(words) = cache.read_block(block).expect("readback") else {
            panic!("block {block} not mapped");
        };
        for (l, seq) in seqs.iter().enumerate() {
            for r in 0..bt {
                let pos = block * bt + r;
                if pos >= past {
                    break;
                }
                let at = l * 2 * bt * w + r * w;
                assert_eq!(
                    &words[at..at + w],
                    &seq[pos * 3 * w + w..pos * 3 * w + 2 * w],
                    "K of {pos}"
                );
                let v = at + bt * w;
                assert_eq!(
                    &words[v..v + w],
                    &seq[pos * 3 * w + 2 * w..pos * 3 * w + 3 * w],
                    "V of {pos}"
                );
            }
        }
    }
    // The existing fused kernel over the whole sequence agrees.
    let mut b = GraphBuilder::new("full");
    let x = b.input("qkv", DType::F32, &[u64::from(total), 3 * config.width()]);
    let y = b.node_with_params(
        "attention_causal",
        &[x],
        &[u64::from(total), config.width()],
        false,
        &[config.heads as f32],
    );
    b.mark_output(y);
    let graph = b.build().expect("valid");
    let desc = ctx.buffer_types().expect("buffer types").storage.desc;
    let plan = Planner::from_name("ggml")
        .and_then(|p| p.plan_graph(&graph, &desc))
        .expect("plan");
    let mem = allocate_plan(ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("memory");
    let memory = TensorMemory::single(&plan, &mem);
    for (l, seq) in seqs.iter().enumerate() {
        memory.write_f32(ctx, &graph, x, seq).expect("written");
        exec.run(&graph, &memory).expect("runs");
        let full = memory.read_f32(ctx, &graph, y).expect("read");
        for (i, (g, e)) in got_all[l].iter().zip(&full).enumerate() {
            assert!(
                (g - e).abs() < 2e-4,
                "layer {l} [{i}]: paged {g} vs attention_causal {e}"
            );
        }
    }
}

fn limits_config(
    ctx: &GpuContext,
    heads: u32,
    head_dim: u32,
    block_tokens: u32,
    blocks_per_page: u32,
) -> KvConfig {
    let base = KvConfig::new(2, heads, head_dim, block_tokens, 64).expect("valid");
    let fitted = base
        .fit_pages(&ctx.limits, base.block_bytes() * u64::from(blocks_per_page))
        .expect("fits a binding");
    assert_eq!(fitted.blocks_per_page, blocks_per_page);
    fitted
}

/// Blocks of 5 tokens, 2 a page, every page a buffer of its own: 43 tokens = 9 blocks
/// in 5 pages. Chunks: a prefill of 19 (two workgroups of queries), decode steps,
/// chunks that start and end inside blocks. Every page goes back.
fn pages_in_separate_buffers_head_width_16(ctx: &GpuContext) {
    let config = limits_config(ctx, 2, 16, 5, 2);
    let storage = Arc::new(CountingStorage::new(WgpuStorage::wgpu(ctx)));
    run_chunks(
        ctx,
        Arc::clone(&storage),
        config,
        &[19, 1, 1, 7, 1, 3, 1, 1, 9],
        "ggml",
    );
    let report = storage.report();
    assert_eq!(
        (report.live_regions, report.bad_frees),
        (0, 0),
        "every page went back: {report:?}"
    );
}

/// Three heads of 32, blocks of 7 tokens, one block a page: 30 tokens in 5 pages; the
/// naive plan never writes in place, so the state goes from buffer to buffer.
fn one_block_a_page_head_width_32_not_in_place(ctx: &GpuContext) {
    let config = limits_config(ctx, 3, 32, 7, 1);
    run_chunks(
        ctx,
        WgpuStorage::wgpu(ctx),
        config,
        &[3, 1, 12, 1, 1, 12],
        "naive",
    );
}

#[test]
fn decode_and_prefill_over_pages_in_separate_buffers_head_width_16() {
    let Some(ctx) = common::gpu() else { return };
    pages_in_separate_buffers_head_width_16(&ctx);
}

#[test]
fn decode_and_prefill_over_shared_pages_head_width_64() {
    let Some(ctx) = common::gpu() else { return };
    // Blocks of 3 tokens, 3 a page; pages are sub-ranges of shared buffers at non-zero
    // offsets.
    let config = limits_config(&ctx, 2, 64, 3, 3);
    let counting = Arc::new(CountingStorage::new(WgpuStorage::wgpu(&ctx)));
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
    let pool = PagedStorage::new(
        Arc::clone(&counting),
        3 * config.page_bytes() + 4 * alignment,
        alignment,
        STORAGE_USAGE,
    )
    .expect("a page pool");
    let pool = Arc::new(pool);
    let first = pool
        .allocate(&RegionRequest::new(4))
        .expect("a region before the cache");
    run_chunks(
        &ctx,
        Arc::clone(&pool),
        config,
        &[1, 1, 11, 1, 1, 17, 1, 2],
        "ggml",
    );
    pool.free(first).expect("freed");
}

#[test]
fn decode_and_prefill_with_one_block_a_page_head_width_32_not_in_place() {
    let Some(ctx) = common::gpu() else { return };
    one_block_a_page_head_width_32_not_in_place(&ctx);
}

#[test]
fn a_storage_that_refuses_a_page_loses_nothing() {
    let Some(ctx) = common::gpu() else { return };
    let config = limits_config(&ctx, 2, 16, 4, 2);
    let budget = common::CappedStorage {
        inner: WgpuStorage::wgpu(&ctx),
        left: AtomicU64::new(3), // the table and two pages
    };
    let counting = Arc::new(CountingStorage::new(budget));
    let mut cache = DeviceKvCache::new(&ctx, Arc::clone(&counting), config).expect("a cache");
    let (graph, kv, qkv, out, plan, memory) = step_graph(&ctx, &config, 1, "ggml");
    // The graph binds 8 page slots; the storage gives two pages, then refuses.
    match cache.layer(&graph, &kv) {
        Err(KvError::Storage {
            what: "page",
            source: StorageError::Refused { .. },
            pages: 2,
            ..
        }) => {}
        other => panic!("expected a refused page, got {other:?}"),
    }
    assert_eq!(
        cache.report().pages,
        0,
        "the pages of the failed reservation went back"
    );
    assert_eq!(counting.report().live_regions, 1, "only the table is live");
    // A graph with the two slots the storage can give runs.
    let mut b = GraphBuilder::new("two slots");
    let small = KvTensors::add(&mut b, &config, 2);
    let x = b.input("qkv", DType::F32, &[1, 3 * config.width()]);
    let y = small.attention(&mut b, x, 0).expect("attention");
    b.mark_output(y);
    let g = b.build().expect("valid");
    counting.inner().left.store(2, Ordering::SeqCst);
    let layer = cache.layer(&g, &small).expect("two pages");
    let desc = ctx.buffer_types().expect("buffer types").storage.desc;
    let p = Planner::from_name("ggml")
        .and_then(|p| p.plan_graph(&g, &desc))
        .expect("plan");
    let m = allocate_plan(&ctx, &p, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).expect("memory");
    let seq = values(20 * 3 * config.width() as usize, 3);
    let w = config.width() as usize;
    for t in 0..16usize {
        cache.begin_step(&small, 1).expect("inside two pages");
        let tm = TensorMemory::single(&p, &m).with_layer(&layer, cache.memory());
        tm.write_f32(&ctx, &g, x, &seq[t * 3 * w..(t + 1) * 3 * w])
            .expect("written");
        Executor::new(&ctx).run(&g, &tm).expect("runs");
        cache.commit(1).expect("committed");
    }
    // Token 17 needs a third page, which the graph has no slot for: refused before
    // the storage is asked.
    counting.inner().left.store(5, Ordering::SeqCst);
    let asked = counting.report().allocations + counting.report().failures;
    let table = cache.read_table().expect("table");
    assert!(matches!(
        cache.begin_step(&small, 1),
        Err(KvError::TooManyPages { page: 2, slots: 2 })
    ));
    assert_eq!(
        cache.read_table().expect("table"),
        table,
        "the device's table is unchanged"
    );
    assert_eq!(cache.report().blocks, 4);
    assert_eq!(
        counting.report().allocations + counting.report().failures,
        asked
    );
    drop((graph, kv, qkv, out, plan, memory));
    drop(cache);
    let report = counting.report();
    assert_eq!(
        (report.live_regions, report.bad_frees),
        (0, 0),
        "{report:?}"
    );
}

#[test]
fn the_proof_holds_the_cache_live_and_names_a_planted_clobber() {
    let Some(ctx) = common::gpu() else { return };
    let config = limits_config(&ctx, 2, 16, 4, 2);
    let (graph, kv, _qkv, _out, plan, memory) = step_graph(&ctx, &config, 5, "ggml");
    let report = prove_step(&ctx, &graph, &kv, &plan, &memory).expect("the proof runs");
    assert!(report.verified(), "{report}");
    // The same through the cache, which also checks the real memory is apart.
    let mut cache = DeviceKvCache::new(&ctx, WgpuStorage::wgpu(&ctx), config).expect("a cache");
    cache.layer(&graph, &kv).expect("pages");
    let report = cache
        .prove_step(&graph, &kv, &plan, &memory)
        .expect("apart, and the proof runs");
    assert!(report.verified(), "{report}");
    // Activation memory that is the cache's own page is refused before any proof.
    let page = cache.cache().pages()[0].clone();
    let aliased = PlannedMemory::from_regions(vec![vec![page]]);
    assert!(matches!(
        cache.check_apart(&aliased),
        Err(KvError::OverlapsCache {
            buffer: 0,
            chunk: 0,
            ..
        })
    ));
    let mut proof = KvProof::new(&graph, &kv, &plan).expect("the proof graph");
    let plant = proof.plant_over_cache().expect("an activation to plant");
    let report = proof.run(&ctx, &memory).expect("the proof runs");
    assert!(!report.verified(), "the clobber went unseen: {report}");
    assert!(
        report
            .first_mismatches
            .iter()
            .any(|m| m.tensor == plant.victim),
        "the page {:?} is named: {report}",
        plant.victim
    );
    // The generic planted-clobber path on the proof plan is caught too.
    let mut proof = KvProof::new(&graph, &kv, &plan).expect("the proof graph");
    let proof_graph = proof.graph().clone();
    let clobber = inject_clobber(proof.plan_mut(), &proof_graph).expect("a clobber to plant");
    let report = proof.run(&ctx, &memory).expect("the proof runs");
    assert!(!report.verified(), "{clobber:?} went unseen: {report}");
}

#[test]
fn the_proof_stands_in_for_large_pages_and_still_names_a_clobber() {
    let Some(ctx) = common::gpu() else { return };
    // Blocks of 32 KiB, 4 a page: pages of 128 KiB, proved through 64 KiB stand-ins.
    let config = limits_config(&ctx, 2, 64, 16, 4);
    assert!(config.page_bytes() > PROOF_TENSOR_BYTES);
    let (graph, kv, _qkv, _out, plan, memory) = step_graph(&ctx, &config, 3, "ggml");
    let report = prove_step(&ctx, &graph, &kv, &plan, &memory).expect("the proof runs");
    assert!(report.verified(), "{report}");
    let mut proof = KvProof::new(&graph, &kv, &plan).expect("the proof graph");
    let plant = proof.plant_over_cache().expect("an activation to plant");
    let report = proof.run(&ctx, &memory).expect("the proof runs");
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
fn decode_with_256_slices_a_head_matches_the_cpu_over_pages() {
    // The merge of 256 slices' states as trees: fewer keys than slices (most slices
    // empty), pages in separate buffers, chunks in between.
    let Some(ctx) = common::wide_decode_device() else {
        return;
    };
    pages_in_separate_buffers_head_width_16(&ctx);
    one_block_a_page_head_width_32_not_in_place(&ctx);
}

#[test]
fn decode_with_256_slices_a_head_matches_the_cpu_past_256_keys() {
    // A context longer than the slices (every slice scans one key or more), heads of 64
    // over pages of 4 blocks of 16 tokens.
    let Some(ctx) = common::wide_decode_device() else {
        return;
    };
    let base = KvConfig::new(2, 2, 64, 16, 512).expect("valid");
    let config = base
        .fit_pages(&ctx.limits, base.block_bytes() * 4)
        .expect("fits a binding");
    run_chunks(
        &ctx,
        WgpuStorage::wgpu(&ctx),
        config,
        &[300, 1, 1, 40, 1, 1],
        "ggml",
    );
}
