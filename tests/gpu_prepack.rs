//! The shared pre-packed weight cache on a real device: each rule of the cache is one
//! test, with a counting storage underneath proving that every buffer goes back
//! exactly once (allocations == frees, no live bytes) on success and failure paths.
//!
//! Tolerance for products: |gpu − cpu| ≤ 1e-4 · (1 + |cpu|).
//!
//! No adapter: each test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;
#[path = "common/product.rs"]
mod product;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use product::{product, PreparedProduct, Product};
use wgalloc::device::{
    BufferAllocator, BufferStorage, ChunkRequest, DeviceError, GpuContext, WgpuAllocator,
    STORAGE_USAGE,
};
use wgalloc::error::ErrorKind;
use wgalloc::exec::cpu_ref;
use wgalloc::exec::packed as layout;
use wgalloc::exec::TensorData;
use wgalloc::exec::{ExecError, Executor, StorageType};
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};
use wgalloc::model::{ModelConfig, PrepackedModel};
use wgalloc::prepack::{
    bind_packed_weights, pack_matmul_weights, BSource, PackFormat, PackedBuffer, PrepackError,
    PrepackKey, PrepackedWeightCache, StoreOutcome,
};
use wgalloc::storage::{CountingStorage, StorageError, StorageReport};

type Counting = Arc<CountingStorage<BufferStorage<FailAfter>>>;

/// The default allocator, failing every allocation after the first `ok`.
#[derive(Debug)]
struct FailAfter {
    ok: AtomicU64,
}

impl FailAfter {
    fn new(ok: u64) -> FailAfter {
        FailAfter {
            ok: AtomicU64::new(ok),
        }
    }
}

impl BufferAllocator for FailAfter {
    fn allocate(
        &self,
        ctx: &GpuContext,
        request: &ChunkRequest,
    ) -> Result<wgpu::Buffer, DeviceError> {
        let granted = self
            .ok
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        match granted {
            Ok(_) => WgpuAllocator.allocate(ctx, request),
            Err(_) => Err(DeviceError::OutOfDeviceMemory { size: request.size }),
        }
    }
}

/// A cache over a counted storage of buffers from an allocator that succeeds `ok`
/// times.
fn counted_cache(ctx: &GpuContext, ok: u64) -> (PrepackedWeightCache, Counting) {
    let counting = Arc::new(CountingStorage::new(BufferStorage::new(
        ctx,
        FailAfter::new(ok),
    )));
    (PrepackedWeightCache::new(counting.clone()), counting)
}

/// Everything allocated was freed exactly once.
fn assert_all_released(report: StorageReport) {
    assert_eq!(report.allocations, report.frees, "{report:?}");
    assert_eq!(report.bad_frees, 0, "{report:?}");
    assert_eq!(report.live_bytes, 0, "{report:?}");
}

fn key(name: &str) -> PrepackKey {
    PrepackKey::for_f32(
        name,
        &[4, 4],
        &[1.0; 16],
        PackFormat::MatmulB {
            source: BSource::KByN,
            storage: wgalloc::exec::StorageType::F32,
        },
    )
}

fn ramp(len: u64, seed: u64) -> Vec<f32> {
    (0..len)
        .map(|i| (((i.wrapping_mul(2654435761).wrapping_add(seed)) % 1000) as f32) / 500.0 - 1.0)
        .collect()
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-4 * (1.0 + w.abs()))
}

/// Runs `graph` (optionally rewritten to packed weights from `cache`) on the GPU and
/// returns the output `out`.
fn run_on_gpu(
    ctx: &GpuContext,
    graph: &Graph,
    values: &HashMap<TensorId, Vec<f32>>,
    out: TensorId,
    cache: Option<&PrepackedWeightCache>,
) -> Result<Vec<f32>, wgalloc::Error> {
    let prepared = PreparedProduct::new(ctx, graph, values, cache)?;
    let memory = prepared.memory();
    Executor::new(ctx).run(prepared.graph(), &memory)?;
    Ok(memory.read_f32(ctx, prepared.graph(), out)?)
}

/// `y = x · W` (or `x · Wᵀ`), W a weight, and its input values.
fn product_graph(
    m: u64,
    k: u64,
    n: u64,
    transposed: bool,
) -> (Graph, HashMap<TensorId, Vec<f32>>, TensorId) {
    let Product { graph, x, w, y } = product(m, k, n, transposed).expect("valid");
    let values = HashMap::from([(x, ramp(m * k, 1)), (w, ramp(k * n, 2))]);
    (graph, values, y)
}

fn cpu_output(graph: &Graph, values: &HashMap<TensorId, Vec<f32>>, out: TensorId) -> Vec<f32> {
    let inputs = values
        .iter()
        .map(|(&id, v)| (id, TensorData::F32(v.clone())))
        .collect();
    match cpu_ref::evaluate(graph, &inputs).expect("cpu")[out.index()].take() {
        Some(TensorData::F32(v)) => v,
        other => panic!("no f32 output: {other:?}"),
    }
}

#[test]
fn packed_matmul_equals_unpacked_matmul_and_the_cpu_reference_on_odd_sizes() {
    let Some(ctx) = common::gpu() else { return };
    let cache = PrepackedWeightCache::default();
    for (m, k, n) in [
        (1, 1, 1),
        (33, 65, 17),
        (70, 19, 130),
        (5, 300, 67),
        (64, 64, 64),
    ] {
        for transposed in [false, true] {
            let (graph, values, y) = product_graph(m, k, n, transposed);
            let want = cpu_output(&graph, &values, y);
            let plain = run_on_gpu(&ctx, &graph, &values, y, None).expect("unpacked runs");
            let packed = run_on_gpu(&ctx, &graph, &values, y, Some(&cache)).expect("packed runs");
            assert!(close(&plain, &want), "unpacked {m}x{k}x{n} t={transposed}");
            assert!(close(&packed, &want), "packed {m}x{k}x{n} t={transposed}");
        }
    }
    assert_eq!(cache.len(), 10, "one entry per (size, orientation)");
}

#[test]
fn a_second_node_and_a_second_graph_hit_the_cache_without_packing_again() {
    let Some(ctx) = common::gpu() else { return };
    let (cache, counting) = counted_cache(&ctx, u64::MAX);
    let (k, n) = (40u64, 90u64);
    let w_values = ramp(k * n, 9);
    let graph = |m: u64| {
        let mut b = GraphBuilder::new("two uses");
        let x = b.input("x", DType::F32, &[m, k]);
        let w = b.weight("w", DType::F32, &[k, n]);
        let y1 = b.node("matmul", &[x, w], &[m, n], false);
        let y2 = b.node("matmul", &[x, w], &[m, n], false);
        let s = b.node("add", &[y1, y2], &[m, n], false);
        b.mark_output(s);
        let g = b.build().expect("valid");
        let values = HashMap::from([(x, ramp(m * k, m)), (w, w_values.clone())]);
        (g, values, s)
    };
    let (g1, v1, s1) = graph(7);
    let p1 = pack_matmul_weights(&g1).expect("rewrites");
    let get1 = |id: TensorId| v1.get(&id).cloned();
    let (layer1, first) = bind_packed_weights(&ctx, &cache, &p1, &get1).expect("binds");
    assert_eq!((first.node_lookups, first.packed, first.hits), (2, 1, 1));
    let packed_bytes = layout::packed_len(k, n).expect("len") * 4;
    assert_eq!(first.packed_bytes, packed_bytes);
    assert_eq!(counting.report().allocations, 1);
    drop(layer1);

    let (g2, v2, s2) = graph(13);
    let p2 = pack_matmul_weights(&g2).expect("rewrites");
    let get2 = |id: TensorId| v2.get(&id).cloned();
    let (layer2, second) = bind_packed_weights(&ctx, &cache, &p2, &get2).expect("binds");
    assert_eq!((second.node_lookups, second.packed, second.hits), (2, 0, 2));
    assert_eq!(
        counting.report().allocations,
        1,
        "the second graph allocated nothing"
    );
    assert_eq!((cache.len(), cache.bytes()), (1, packed_bytes));
    assert_eq!(counting.report().live_bytes, packed_bytes);
    let stats = cache.stats();
    assert_eq!((stats.stores, stats.hits, stats.misses), (1, 3, 1));

    for (g, v, s) in [(&g1, &v1, s1), (&g2, &v2, s2)] {
        let got = run_on_gpu(&ctx, g, v, s, Some(&cache)).expect("runs");
        assert!(close(&got, &cpu_output(g, v, s)));
    }
    assert_eq!(
        counting.report().allocations,
        1,
        "running hits the cache too"
    );
    drop(cache);
    assert_eq!(counting.report().frees, 0, "a live layer keeps its weights");
    drop(layer2);
    assert_all_released(counting.report());
}

#[test]
fn a_refused_store_gives_the_buffers_back_and_the_caller_can_release_them() {
    let Some(ctx) = common::gpu() else { return };
    let (cache, counting) = counted_cache(&ctx, u64::MAX);
    let alloc = cache.allocator();
    let refuse = |buffers: Vec<PackedBuffer>| {
        let n = buffers.len();
        let refused = cache.store(key("w"), buffers).expect_err("refused");
        assert_eq!(refused.buffers.len(), n, "every buffer comes back");
        refused
    };

    assert!(matches!(
        refuse(Vec::new()).error,
        PrepackError::NoBuffers { .. }
    ));

    let good = alloc.allocate_packed(&ctx, 64).expect("allocates");
    let zero = PackedBuffer::new(
        alloc
            .allocate_packed(&ctx, 16)
            .expect("allocates")
            .into_region()
            .buffer,
        0,
    );
    let refused = refuse(vec![good.clone(), zero]);
    assert_eq!(refused.error, PrepackError::ZeroSizeBuffer { index: 1 });
    for b in refused.into_buffers() {
        alloc.release_packed(b);
    }

    let big = alloc.allocate_packed(&ctx, 32).expect("allocates");
    let claims_more = PackedBuffer::new(big.buffer().clone(), 4096);
    let refused = refuse(vec![claims_more]);
    assert_eq!(
        refused.error,
        PrepackError::SizeMismatch {
            index: 0,
            size: 4096,
            buffer_size: 32
        }
    );
    alloc.release_packed(big);

    let twice = alloc.allocate_packed(&ctx, 8).expect("allocates");
    let refused = refuse(vec![twice.clone(), twice]);
    assert_eq!(
        refused.error,
        PrepackError::DuplicateBuffer { index: 1, first: 0 }
    );
    let mut back = refused.into_buffers();
    alloc.release_packed(back.remove(0));
    alloc.release_packed(back.remove(0)); // the same buffer again: not released twice

    let foreign = WgpuAllocator
        .allocate(
            &ctx,
            &ChunkRequest {
                buffer: wgalloc::plan::BufferId(0),
                chunk: 0,
                size: 64,
                usage: STORAGE_USAGE,
            },
        )
        .expect("allocates");
    let refused = refuse(vec![PackedBuffer::new(foreign, 64)]);
    assert_eq!(refused.error, PrepackError::ForeignBuffer { index: 0 });
    alloc.release_packed(refused.into_buffers().remove(0)); // not ours: left alone

    let stats = cache.stats();
    assert_eq!((stats.refused_stores, stats.stores), (5, 0));
    assert!(cache.is_empty());
    assert_eq!(cache.outstanding_buffers(), 0);
    let report = counting.report();
    assert_eq!(report.allocations, 4);
    assert_all_released(report);
}

#[test]
fn a_store_takes_ownership_and_a_stored_buffer_cannot_be_released_or_stored_again() {
    let Some(ctx) = common::gpu() else { return };
    let (cache, counting) = counted_cache(&ctx, u64::MAX);
    let alloc = cache.allocator();
    let a = alloc.upload_f32(&ctx, &[1.0, 2.0, 3.0]).expect("uploads");
    let b = alloc.upload_f32(&ctx, &[4.0; 5]).expect("uploads");
    assert_eq!(
        cache
            .store(key("w"), vec![a.clone(), b.clone()])
            .expect("stored"),
        StoreOutcome::Inserted
    );
    assert_eq!(
        (cache.len(), cache.buffer_count(), cache.bytes()),
        (1, 2, 32)
    );
    alloc.release_packed(a.clone()); // owned by the cache now: ignored
    assert_eq!(counting.report().frees, 0);
    let again = cache.store(key("v"), vec![a]).expect_err("already stored");
    assert_eq!(again.error, PrepackError::ForeignBuffer { index: 0 });
    let weight = cache.get(&key("w")).expect("a hit");
    assert_eq!(weight.buffers()[1], b);
    assert!(cache.get(&key("v")).is_none());
    drop(weight);
    drop((alloc, cache));
    assert_all_released(counting.report());
    assert_eq!(counting.report().frees, 2);
}

#[test]
fn the_allocator_failing_during_a_pack_is_a_typed_error_and_leaks_nothing() {
    let Some(ctx) = common::gpu() else { return };
    // A pack of three buffers whose second allocation fails.
    let (cache, counting) = counted_cache(&ctx, 1);
    let parts: [&[f32]; 3] = [&[1.0; 8], &[2.0; 8], &[3.0; 8]];
    let error = cache
        .get_or_pack(&key("w"), |alloc| alloc.upload_parts(&ctx, &parts))
        .expect_err("the second allocation fails");
    // The device's refusal reaches the cache through its storage: the storage layer
    // keeps the device error's kind and message (it names no layer above it).
    assert_eq!(
        error,
        PrepackError::Allocation {
            size: 32,
            source: DeviceError::Storage(Box::new(StorageError::Backend {
                kind: ErrorKind::OutOfMemory,
                message: DeviceError::OutOfDeviceMemory { size: 32 }.to_string(),
            }))
        }
    );
    let report = counting.report();
    assert_eq!((report.allocations, report.failures), (1, 1));
    assert_all_released(report);
    assert!(cache.is_empty() && cache.outstanding_buffers() == 0);

    // A graph whose first pack fails: no layer, nothing stored, nothing leaked.
    let (cache, counting) = counted_cache(&ctx, 0);
    let (graph, values, _) = product_graph(3, 20, 30, false);
    let packed = pack_matmul_weights(&graph).expect("rewrites");
    let get = |id: TensorId| values.get(&id).cloned();
    let error = bind_packed_weights(&ctx, &cache, &packed, &get).expect_err("fails");
    assert!(matches!(error, PrepackError::Allocation { .. }), "{error}");
    assert!(cache.is_empty());
    assert_eq!(counting.report().failures, 1);
    assert_all_released(counting.report());

    // A packed buffer larger than any binding never reaches the allocator.
    let too_big = ctx.limits.max_storage_buffer_binding_size + 4;
    assert!(matches!(
        cache.allocator().allocate_packed(&ctx, too_big),
        Err(PrepackError::TooLarge { .. })
    ));
    assert_eq!(
        cache.allocator().allocate_packed(&ctx, 0),
        Err(PrepackError::ZeroSizeRequest)
    );
    assert_eq!(counting.report().failures, 1);
}

#[test]
fn replacing_a_key_frees_the_old_buffers_exactly_once() {
    let Some(ctx) = common::gpu() else { return };
    let (cache, counting) = counted_cache(&ctx, u64::MAX);
    let alloc = cache.allocator();
    let pack = |v: f32| {
        alloc
            .upload_parts(&ctx, &[&[v; 4], &[v; 4]])
            .expect("uploads")
    };
    cache.store(key("w"), pack(1.0)).expect("stored");
    assert_eq!(
        cache.store(key("w"), pack(2.0)).expect("stored"),
        StoreOutcome::Replaced
    );
    let report = counting.report();
    assert_eq!(
        (report.allocations, report.frees),
        (4, 2),
        "old pair released"
    );
    assert_eq!((cache.len(), cache.buffer_count()), (1, 2));

    // While a handle uses the data, replacing it defers the release to the handle.
    let held = cache.get(&key("w")).expect("a hit");
    cache.store(key("w"), pack(3.0)).expect("stored");
    assert_eq!(counting.report().frees, 2, "the handle keeps it valid");
    drop(held);
    assert_eq!(counting.report().frees, 4);
    assert_eq!(cache.stats().replacements, 2);
    drop((alloc, cache));
    assert_all_released(counting.report());
    assert_eq!(counting.report().frees, 6);
}

#[test]
fn dropping_the_cache_frees_everything_once() {
    let Some(ctx) = common::gpu() else { return };
    let (cache, counting) = counted_cache(&ctx, u64::MAX);
    let alloc = cache.allocator();
    for name in ["a", "b", "c"] {
        let buffers = alloc.upload_parts(&ctx, &[&[1.0; 16]]).expect("uploads");
        cache.store(key(name), buffers).expect("stored");
    }
    let _never_stored = alloc.allocate_packed(&ctx, 64).expect("allocates");
    let clone = cache.clone();
    assert!(clone.same_cache(&cache));
    drop(cache);
    assert_eq!(counting.report().frees, 0, "a clone keeps the cache");
    assert_eq!(clone.len(), 3);
    drop((clone, alloc));
    let report = counting.report();
    assert_eq!((report.allocations, report.frees), (4, 4));
    assert_all_released(report);
}

fn tiny() -> ModelConfig {
    common::tiny_model(2)
}

#[test]
fn the_transformer_shares_one_cached_copy_of_each_weight_across_sessions() {
    let Some(ctx) = common::gpu() else { return };
    let (cache, counting) = counted_cache(&ctx, u64::MAX);
    let mut first = PrepackedModel::new(&ctx, &tiny(), &cache).expect("builds");
    let run = first.run().expect("runs");
    assert!(run.logits_match, "{run:?}");
    assert!(run.proof_verified);
    let distinct = first.packed_graph().packed.len();
    // 2 layers x the QKV projection + the tied lm head (the output projection and the
    // MLP are fused matmuls, which read their weights unpacked).
    assert_eq!(distinct, 2 + 1);
    assert_eq!(run.packed_matmuls, distinct);
    assert_eq!((run.prepack.packed, run.prepack.hits), (distinct, 0));
    let packed_sum: u64 = first
        .packed_graph()
        .packed
        .iter()
        .map(|p| layout::packed_len(p.k, p.n).expect("len") * 4)
        .sum();
    assert_eq!(cache.len(), distinct);
    assert_eq!(cache.bytes(), packed_sum, "each weight held once");
    assert_eq!(counting.report().allocations, distinct as u64);

    // A second session, with a shorter sequence (another graph), same weights.
    let shorter = ModelConfig { seq: 8, ..tiny() };
    let mut second = PrepackedModel::new(&ctx, &shorter, &cache).expect("builds");
    let again = second.run().expect("runs");
    assert!(again.logits_match && again.proof_verified, "{again:?}");
    assert_eq!((again.prepack.packed, again.prepack.hits), (0, distinct));
    assert_eq!(
        counting.report().allocations,
        distinct as u64,
        "nothing packed again"
    );
    assert_eq!(cache.bytes(), packed_sum);

    // Another seed changes every weight's content: new keys, packed anew.
    let other = ModelConfig { seed: 4, ..tiny() };
    let third = PrepackedModel::new(&ctx, &other, &cache).expect("builds");
    assert_eq!(third.prepack_report().packed, distinct);
    assert_eq!(cache.len(), 2 * distinct);
    drop((first, second, third, cache));
    assert_all_released(counting.report());
}

#[test]
fn the_f16_transformer_packs_half_the_bytes_under_keys_of_its_own() {
    let Some(ctx) =
        common::f16_gpu("the_f16_transformer_packs_half_the_bytes_under_keys_of_its_own")
    else {
        return;
    };
    let (cache, counting) = counted_cache(&ctx, u64::MAX);
    let mut single = PrepackedModel::new(&ctx, &tiny(), &cache).expect("builds");
    let f32_run = single.run().expect("runs");
    let half_config = ModelConfig {
        dtype: StorageType::F16,
        ..tiny()
    };
    let mut half = PrepackedModel::new(&ctx, &half_config, &cache).expect("builds");
    let run = half.run().expect("runs");
    // Within f16's tolerance of the CPU reference (which rounds as the GPU stores),
    // and the activation plan proved.
    assert!(run.logits_match, "{run:?}");
    assert!(run.proof_verified);
    // The same weights, packed again as f16: no hit on the f32 entries, half the bytes.
    let distinct = half.packed_graph().packed.len();
    assert_eq!(distinct, single.packed_graph().packed.len());
    assert_eq!((run.prepack.packed, run.prepack.hits), (distinct, 0));
    assert_eq!(2 * run.prepack.packed_bytes, f32_run.prepack.packed_bytes);
    for p in &half.packed_graph().packed {
        assert!(
            matches!(
                p.format,
                PackFormat::MatmulB {
                    storage: StorageType::F16,
                    ..
                }
            ),
            "{:?}",
            p.format
        );
        let t = half
            .packed_graph()
            .graph
            .tensor(p.packed)
            .expect("packed tensor");
        assert_eq!(t.dtype, DType::F16);
    }
    assert_eq!(cache.len(), 2 * distinct);
    drop((single, half, cache));
    assert_all_released(counting.report());
}

#[test]
fn f16_is_refused_before_packing_on_an_adapter_without_it() {
    let Some(ctx) = common::gpu() else { return };
    let without = common::device_without_f16(&ctx);
    let cache = PrepackedWeightCache::default();
    let config = ModelConfig {
        dtype: StorageType::F16,
        ..tiny()
    };
    let error = PrepackedModel::new(&without, &config, &cache).expect_err("no shader-f16");
    assert!(
        matches!(error, wgalloc::Error::Exec(ExecError::ShaderF16Missing)),
        "{error}"
    );
    assert_eq!(cache.len(), 0, "nothing packed");
}

#[test]
fn packed_weights_in_sub_ranges_of_shared_pages_match_the_cpu_reference() {
    use wgalloc::storage::PagedStorage;
    let Some(ctx) = common::gpu() else { return };
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
    let pages = Arc::new(CountingStorage::new(wgalloc::device::WgpuStorage::wgpu(
        &ctx,
    )));
    let pool = PagedStorage::new(pages.clone(), 1 << 20, alignment, STORAGE_USAGE).expect("a pool");
    let cache = PrepackedWeightCache::new(Arc::new(pool));
    for (m, k, n) in [(33, 65, 17), (5, 300, 67), (64, 64, 64)] {
        for transposed in [false, true] {
            let (graph, values, y) = product_graph(m, k, n, transposed);
            let want = cpu_output(&graph, &values, y);
            let packed = run_on_gpu(&ctx, &graph, &values, y, Some(&cache)).expect("packed runs");
            assert!(close(&packed, &want), "packed {m}x{k}x{n} t={transposed}");
        }
    }
    assert_eq!(cache.len(), 6);
    assert_eq!(
        pages.report().allocations,
        1,
        "every packed weight shares one page"
    );
    drop(cache);
    assert_eq!(pages.report().live_regions, 0, "{:?}", pages.report());
}
