//! The matmul tile tuner (`wgalloc::exec::tune`): every candidate tile of every tiled
//! family against the CPU reference, a forced candidate set timed, cached and used by
//! the executor, the cache read back by a fresh tuner, `WGALLOC_TUNE=0`'s rule, and a
//! corrupt or unwritable cache ignored with a warning. No test depends on which tile
//! wins a timing. Each test opens a device of its own (the tuner's settings are per
//! device), and cache files live under Cargo's target tmp dir.
//!
//! No adapter: each GPU test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;
#[path = "common/kernel_run.rs"]
#[allow(dead_code)]
mod kernel_run;

use std::collections::HashMap;
use std::path::PathBuf;

use kernel_run::{assert_close, random, run_both};
use wgalloc::device::GpuContext;
use wgalloc::exec::tune::{
    self, AdapterKey, CacheEntry, KernelFamily, ShapeClass, Source, TuneCache, TuneError, Variant,
};
use wgalloc::exec::{
    AttentionForm, Executor, MatmulTile, StorageType, TensorData, TuneSettings, SPLIT_MAX_ROWS,
};
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};

/// A device of this test's own, or `None` (skipped) without an adapter.
fn own_device() -> Option<GpuContext> {
    common::gpu()?;
    Some(GpuContext::from_env().expect("a second device on the adapter"))
}

/// Whether the tuner offers this device the tiles that share A's reads across a
/// subgroup (for `matmul` and its fused forms): a CPU adapter with subgroups.
fn shares_a_offered(ctx: &GpuContext) -> bool {
    ctx.has_subgroups() && ctx.is_cpu_adapter()
}

/// A fresh cache path under the target tmp dir.
fn cache_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tune-tests");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join(format!("{name}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn settings(cache: Option<PathBuf>, candidates: &[MatmulTile]) -> TuneSettings {
    TuneSettings {
        enabled: true,
        cache,
        candidates: candidates.to_vec(),
        attention: Vec::new(),
        norm: Vec::new(),
        repetitions: 1,
        budget: std::time::Duration::from_secs(30),
        decode: None,
    }
}

/// A one-node graph of `op` with `m x k x n` and its inputs.
fn graph(op: &str, m: u64, k: u64, n: u64) -> (Graph, HashMap<TensorId, TensorData>) {
    let mut b = GraphBuilder::new(op);
    let mut values = HashMap::new();
    let mut add = |b: &mut GraphBuilder, name: &str, shape: &[u64], weight: bool| {
        let len: u64 = shape.iter().product();
        let id = if weight {
            b.weight(name, DType::F32, shape)
        } else {
            b.input(name, DType::F32, shape)
        };
        values.insert(
            id,
            TensorData::F32(random(len + name.len() as u64, len as usize, 1.0)),
        );
        id
    };
    match op {
        "matmul" | "matmul_bt" | "matmul_gelu" => {
            let a = add(&mut b, "a", &[m, k], false);
            let w_shape = if op == "matmul_bt" { [n, k] } else { [k, n] };
            let w = add(&mut b, "w", &w_shape, true);
            b.node(op, &[a, w], &[m, n], false);
        }
        "matmul_add" => {
            let r = add(&mut b, "r", &[m, n], false);
            let a = add(&mut b, "a", &[m, k], false);
            let w = add(&mut b, "w", &[k, n], true);
            b.node("matmul_add", &[r, a, w], &[m, n], false);
        }
        "layer_norm_matmul_bias" => {
            let x = add(&mut b, "x", &[m, k], false);
            let gain = add(&mut b, "gain", &[k], true);
            let beta = add(&mut b, "beta", &[k], true);
            let w = add(&mut b, "w", &[k, n], true);
            let bias = add(&mut b, "bias", &[n], true);
            b.node_with_params(op, &[x, gain, beta, w, bias], &[m, n], false, &[1e-3]);
        }
        other => panic!("no graph for {other}"),
    }
    (b.build().expect("valid"), values)
}

#[test]
fn every_candidate_tile_of_every_family_matches_the_cpu() {
    let Some(ctx) = own_device() else { return };
    let exec = Executor::new(&ctx);
    for tile in MatmulTile::ALL {
        // One candidate: chosen without timing, so this runs without timestamps too.
        tune::configure(&ctx, settings(None, &[tile]));
        for op in [
            "matmul",
            "matmul_bt",
            "matmul_gelu",
            "matmul_add",
            "layer_norm_matmul_bias",
        ] {
            // A tile is a candidate only for the rows it fits (the matrix-vector
            // tile for at most 4).
            let shapes = [(1, 8, 4), (3, 68, 136), (37, 68, 136), (130, 64, 200)];
            for (m, k, n) in shapes.into_iter().filter(|&(m, _, _)| tile.fits(m as u32)) {
                let (g, values) = graph(op, m, k, n);
                // `matmul_bt` is not timed with the split matrix-vector tiles (it runs
                // them unsplit), the 64 x 64 tile is for `matmul` and its fused forms
                // only, and the tiles that share A's reads are offered only on a CPU
                // adapter with subgroups: the rule decides elsewhere.
                let shared_here = shares_a_offered(&ctx);
                let tile64_here = !matches!(op, "matmul_bt" | "layer_norm_matmul_bias");
                if !(op == "matmul_bt" && tile.split() > 1)
                    && (tile != MatmulTile::Tile64 || tile64_here)
                    && (!tile.shares_a() || shared_here)
                {
                    assert_eq!(exec.matmul_tile(&g, 0).expect("resolves"), Some(tile));
                }
                let (gpu, cpu) = run_both(&ctx, &g, &values);
                assert_close(&format!("{op} {m}x{k}x{n} {tile:?}"), &gpu, &cpu, 1e-4);
            }
        }
    }
}

#[test]
fn a_forced_candidate_set_is_timed_cached_and_used_by_the_executor() {
    let Some(ctx) = own_device() else { return };
    if !ctx.has_timestamps() {
        common::skip_for_capability(
            "a_forced_candidate_set_is_timed_cached_and_used_by_the_executor",
            "no TIMESTAMP_QUERY: the rule decides",
        );
        return;
    }
    let path = cache_path("forced");
    tune::configure(&ctx, settings(Some(path.clone()), &MatmulTile::ALL));
    let (g, values) = graph("matmul", 64, 128, 256);
    let exec = Executor::new(&ctx);
    let tile = exec.matmul_tile(&g, 0).expect("resolves").expect("tiled");
    let summary = tune::tuning(&ctx);
    assert_eq!(summary.choices.len(), 1, "{summary:?}");
    let choice = &summary.choices[0];
    assert_eq!(
        (choice.variant, choice.source),
        (Variant::Tile(tile), Source::Tuned)
    );
    // Every tile that fits 64 rows is timed (the matrix-vector tiles are for a few
    // rows; the shared-read tiles where the device is offered them, the tiles meant
    // for GPUs where it is not a CPU adapter).
    let gpu = !ctx.is_cpu_adapter();
    let fitting = MatmulTile::ALL
        .iter()
        .filter(|t| {
            t.fits(64) && (!t.shares_a() || shares_a_offered(&ctx)) && (!t.for_gpus_only() || gpu)
        })
        .count();
    assert!(fitting >= 5, "{fitting}");
    assert_eq!(choice.times.len(), fitting, "{choice:?}");
    assert!(summary.time > std::time::Duration::ZERO);
    // The run takes the same tile, and its report says no more tuning was needed.
    let (gpu, cpu) = run_both(&ctx, &g, &values);
    assert_close("tuned matmul", &gpu, &cpu, 1e-4);
    assert_eq!(tune::tuning(&ctx).choices.len(), 1);
    // The cache holds the choice; a fresh tuner reads it instead of timing.
    let cache = TuneCache::load(&path).expect("a valid cache");
    assert_eq!(
        cache.get(&AdapterKey::of(&ctx.info), &choice.class),
        Some(Variant::Tile(tile))
    );
    tune::configure(&ctx, settings(Some(path.clone()), &MatmulTile::ALL));
    assert_eq!(exec.matmul_tile(&g, 0).expect("resolves"), Some(tile));
    let again = tune::tuning(&ctx);
    assert_eq!(again.choices[0].source, Source::Cache, "{again:?}");
    assert_eq!(again.time, std::time::Duration::ZERO);
    // A class met for the first time is timed.
    let (g2, _) = graph("matmul_bt", 32, 64, 96);
    assert!(exec.matmul_tile(&g2, 0).expect("resolves").is_some());
    assert!(tune::tuning(&ctx).time > std::time::Duration::ZERO);
    let _ = std::fs::remove_file(&path);
}

/// The tuner times a class's candidates in interleaved rounds: whatever wins, the choice
/// is one of the candidates offered, every candidate has a time (each was timed in every
/// round, none left out), the cache holds the choice with every candidate's time, and
/// `time_tiles` (the benchmarks' entry) gives a time to each tile it is asked for.
#[test]
fn interleaved_rounds_time_every_candidate_and_cache_one_of_them() {
    let Some(ctx) = own_device() else { return };
    if !ctx.has_timestamps() {
        common::skip_for_capability(
            "interleaved_rounds_time_every_candidate_and_cache_one_of_them",
            "no TIMESTAMP_QUERY: the rule decides",
        );
        return;
    }
    let path = cache_path("rounds");
    let tiles = [
        MatmulTile::Rows8,
        MatmulTile::Rows4,
        MatmulTile::Rows8Wide,
        MatmulTile::Rows4Wide,
    ];
    let mut rounds = settings(Some(path.clone()), &tiles);
    rounds.repetitions = 5;
    tune::configure(&ctx, rounds);
    let (g, _) = graph("matmul_bt", 48, 96, 160);
    let exec = Executor::new(&ctx);
    let tile = exec.matmul_tile(&g, 0).expect("resolves").expect("tiled");
    assert!(tiles.contains(&tile), "{tile:?}");
    let summary = tune::tuning(&ctx);
    let choice = &summary.choices[0];
    assert_eq!(
        (choice.variant, choice.source),
        (Variant::Tile(tile), Source::Tuned)
    );
    let mut timed: Vec<MatmulTile> = choice.times.iter().filter_map(|(v, _)| v.tile()).collect();
    timed.sort_by_key(|t| tiles.iter().position(|x| x == t));
    assert_eq!(timed, tiles, "every candidate timed: {choice:?}");
    assert!(
        choice
            .times
            .iter()
            .all(|(_, d)| *d > std::time::Duration::ZERO),
        "{choice:?}"
    );
    // The kept times are the candidates' fastest rounds: the choice is the fastest of
    // them, or the rule's within its margin.
    let fastest = choice.times.iter().map(|&(_, d)| d).min().expect("timed");
    let chosen_time = choice
        .times
        .iter()
        .find(|(v, _)| *v == choice.variant)
        .map(|&(_, d)| d)
        .expect("the choice was timed");
    assert!(
        chosen_time.as_secs_f64() <= fastest.as_secs_f64() * 1.05 + 1e-9,
        "{choice:?}"
    );
    let cache = TuneCache::load(&path).expect("a valid cache");
    let adapter = AdapterKey::of(&ctx.info);
    assert_eq!(
        cache.get(&adapter, &choice.class),
        Some(Variant::Tile(tile))
    );
    let entry = cache
        .entries
        .iter()
        .find(|e| e.adapter == adapter && e.class == choice.class)
        .expect("cached");
    let mut names: Vec<&str> = entry.micros.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut expected: Vec<&str> = tiles.iter().map(|t| t.name()).collect();
    expected.sort_unstable();
    assert_eq!(names, expected);
    // The benchmarks' entry times each tile it is given, in the order given.
    let times =
        tune::time_tiles(&ctx, KernelFamily::BtTiled, (48, 96, 160), &tiles, 3).expect("timed");
    let order: Vec<MatmulTile> = times.iter().map(|&(t, _)| t).collect();
    assert_eq!(order, tiles);
    assert!(times.iter().all(|&(_, d)| d > std::time::Duration::ZERO));
    let _ = std::fs::remove_file(&path);
}

/// A budget that runs out inside a class stops its timing there (building a candidate's
/// pipeline is part of the budget: on lavapipe it costs more than timing it): the
/// class takes the rule, what was timed is reported, and nothing is cached, so a later
/// process tunes the class. A tiny budget, not a timing assertion.
#[test]
fn a_budget_spent_inside_a_class_stops_its_timing_and_takes_the_rule() {
    let Some(ctx) = own_device() else { return };
    if !ctx.has_timestamps() {
        common::skip_for_capability(
            "a_budget_spent_inside_a_class_stops_its_timing_and_takes_the_rule",
            "no TIMESTAMP_QUERY: the rule decides",
        );
        return;
    }
    let path = cache_path("budget");
    let mut tiny = settings(Some(path.clone()), &MatmulTile::ALL);
    tiny.budget = std::time::Duration::from_nanos(1);
    tune::configure(&ctx, tiny);
    let (g, values) = graph("matmul", 64, 128, 256);
    let exec = Executor::new(&ctx);
    let tile = exec.matmul_tile(&g, 0).expect("resolves").expect("tiled");
    let rule = if shares_a_offered(&ctx) {
        MatmulTile::choose_shared(64)
    } else {
        MatmulTile::choose(64, 256)
    };
    assert_eq!(tile, rule);
    let summary = tune::tuning(&ctx);
    assert_eq!(summary.choices.len(), 1, "{summary:?}");
    let choice = &summary.choices[0];
    assert_eq!(choice.source, Source::Rule, "{choice:?}");
    let offered = tune::offered_tiles(&ctx, tune::KernelFamily::Tiled, (64, 128, 256));
    assert!(
        choice.times.len() < offered.len(),
        "the budget stopped the class's timing: {choice:?}"
    );
    assert!(!path.exists(), "a class cut short is not cached");
    let (gpu, cpu) = run_both(&ctx, &g, &values);
    assert_close("rule matmul after the budget", &gpu, &cpu, 1e-4);
}

#[test]
fn the_offered_tiles_are_those_the_device_and_family_run() {
    let Some(ctx) = own_device() else { return };
    let shared = shares_a_offered(&ctx);
    let tiled = tune::offered_tiles(&ctx, KernelFamily::Tiled, (256, 512, 1536));
    let bt = tune::offered_tiles(&ctx, KernelFamily::BtTiled, (256, 512, 4096));
    let gpu = !ctx.is_cpu_adapter();
    for tiles in [&tiled, &bt] {
        assert!(!tiles.is_empty() && tiles.len() <= 8, "{tiles:?}");
        assert!(shared || tiles.iter().all(|t| !t.shares_a()), "{tiles:?}");
        assert_eq!(tiles.contains(&MatmulTile::Rows32Shared), shared);
        // Of the matrix-vector tiles, only the narrow splits take 256 rows, on GPUs.
        assert!(
            tiles
                .iter()
                .filter(|t| t.is_matvec())
                .all(|&t| gpu && t.for_gpus_only() && t.fits(256)),
            "{tiles:?}"
        );
    }
    // `matmul_bt` runs no split tile (nor the 64 x 64 one); `matmul` is offered both
    // on GPUs only, the splits up to SPLIT_MAX_ROWS rows.
    assert!(bt.iter().all(|t| !t.is_matvec()), "{bt:?}");
    assert!(!bt.contains(&MatmulTile::Tile64));
    assert_eq!(tiled.contains(&MatmulTile::Tile64), gpu);
    assert_eq!(tiled.contains(&MatmulTile::Rows1Split64), gpu);
    let past = tune::offered_tiles(&ctx, KernelFamily::Tiled, (SPLIT_MAX_ROWS * 2, 512, 1536));
    assert!(past.iter().all(|t| !t.is_matvec()), "{past:?}");
}

#[test]
fn tuning_off_takes_the_rule_and_touches_no_cache() {
    let Some(ctx) = own_device() else { return };
    let path = cache_path("off");
    let mut off = settings(Some(path.clone()), &MatmulTile::ALL);
    off.enabled = false;
    tune::configure(&ctx, off);
    let exec = Executor::new(&ctx);
    for (m, k, n) in [(1, 64, 64), (512, 64, 512)] {
        let (g, values) = graph("matmul", m, k, n);
        // The plain rule, or the shared one where the shared tiles run.
        let rule = if shares_a_offered(&ctx) {
            MatmulTile::choose_shared(m as u32)
        } else {
            MatmulTile::choose(m as u32, n as u32)
        };
        assert_eq!(exec.matmul_tile(&g, 0).expect("resolves"), Some(rule));
        let (gpu, cpu) = run_both(&ctx, &g, &values);
        assert_close("rule matmul", &gpu, &cpu, 1e-4);
    }
    // The two shapes take different tiles by the rule.
    assert_ne!(MatmulTile::choose(1, 64), MatmulTile::choose(512, 512));
    let summary = tune::tuning(&ctx);
    assert!(summary.choices.iter().all(|c| c.source == Source::Rule));
    assert_eq!(summary.time, std::time::Duration::ZERO);
    assert!(!path.exists(), "tuning off writes no cache");
    // WGALLOC_TUNE=0, as the environment gives it.
    let vars = |name: &str| (name == "WGALLOC_TUNE").then(|| PathBuf::from("0"));
    assert!(!TuneSettings::from_vars(vars).enabled);
}

#[test]
fn a_corrupt_or_unwritable_cache_is_ignored_with_a_warning() {
    let Some(ctx) = own_device() else { return };
    let path = cache_path("corrupt");
    std::fs::write(&path, "{ not json").expect("write");
    assert!(matches!(
        TuneCache::load(&path),
        Err(TuneError::Corrupt { .. })
    ));
    tune::configure(&ctx, settings(Some(path.clone()), &MatmulTile::ALL));
    let exec = Executor::new(&ctx);
    let (g, values) = graph("matmul", 16, 32, 64);
    assert!(exec.matmul_tile(&g, 0).expect("no panic").is_some());
    let (gpu, cpu) = run_both(&ctx, &g, &values);
    assert_close("matmul over a corrupt cache", &gpu, &cpu, 1e-4);
    if ctx.has_timestamps() {
        // The choice was timed and the file rewritten whole.
        assert!(TuneCache::load(&path).is_ok());
    }
    // A cache whose directory is a file: nothing can be written, the run goes on.
    let blocker = cache_path("blocker");
    std::fs::write(&blocker, "a file").expect("write");
    tune::configure(
        &ctx,
        settings(Some(blocker.join("tune.json")), &MatmulTile::ALL),
    );
    assert!(exec.matmul_tile(&g, 0).expect("no panic").is_some());
    let (gpu, cpu) = run_both(&ctx, &g, &values);
    assert_close("matmul with an unwritable cache", &gpu, &cpu, 1e-4);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&blocker);
}

#[test]
fn the_cache_round_trips_and_refuses_other_versions() {
    let path = cache_path("round-trip");
    let adapter = AdapterKey {
        name: "test adapter".into(),
        driver: "d".into(),
        driver_info: "1.0".into(),
        backend: "Vulkan".into(),
    };
    let class = ShapeClass {
        family: KernelFamily::BtTiled,
        storage: StorageType::F32,
        m: 128,
        k: 512,
        n: 2048,
    };
    let mut cache = TuneCache::new();
    cache.insert(CacheEntry {
        adapter: adapter.clone(),
        class,
        tile: MatmulTile::Rows4.name().into(),
        micros: [("rows4".to_string(), 10.0), ("rows8".to_string(), 12.5)].into(),
    });
    cache.save(&path).expect("save");
    let read = TuneCache::load(&path).expect("load");
    assert_eq!(read, cache);
    assert_eq!(
        read.get(&adapter, &class),
        Some(Variant::Tile(MatmulTile::Rows4))
    );
    // A name of the other family's (an attention form for a matmul class, a tile for
    // attention) is no choice: the class is tuned anew.
    let attention = ShapeClass {
        family: KernelFamily::Attention,
        ..class
    };
    let mut mixed = TuneCache::new();
    mixed.insert(CacheEntry {
        adapter: adapter.clone(),
        class: attention,
        tile: MatmulTile::Rows4.name().into(),
        micros: Default::default(),
    });
    mixed.insert(CacheEntry {
        adapter: adapter.clone(),
        class,
        tile: AttentionForm::KeyTiles.name().into(),
        micros: Default::default(),
    });
    assert_eq!(mixed.get(&adapter, &attention), None);
    assert_eq!(mixed.get(&adapter, &class), None);
    let other = AdapterKey {
        driver_info: "2.0".into(),
        ..adapter.clone()
    };
    assert_eq!(read.get(&other, &class), None, "another driver tunes anew");
    let half = ShapeClass {
        storage: StorageType::F16,
        ..class
    };
    assert_eq!(
        read.get(&adapter, &half),
        None,
        "f16 kernels are tuned apart"
    );
    // A missing file is an empty cache; another version is refused.
    let _ = std::fs::remove_file(&path);
    assert_eq!(TuneCache::load(&path).expect("absent"), TuneCache::new());
    std::fs::write(&path, r#"{"version": 999, "entries": []}"#).expect("write");
    assert!(matches!(
        TuneCache::load(&path),
        Err(TuneError::Corrupt { .. })
    ));
    assert_eq!(TuneCache::load_or_warn(&path), TuneCache::new());
    let _ = std::fs::remove_file(&path);
}

#[test]
fn f16_kernels_are_timed_apart_from_f32_ones() {
    let Some(ctx) = own_device() else { return };
    if !ctx.has_timestamps() || !ctx.has_f16() {
        common::skip_for_capability(
            "f16_kernels_are_timed_apart_from_f32_ones",
            "no TIMESTAMP_QUERY or no shader-f16",
        );
        return;
    }
    let path = cache_path("f16-apart");
    tune::configure(&ctx, settings(Some(path.clone()), &MatmulTile::ALL));
    let exec = Executor::new(&ctx);
    let one = |dtype: DType| {
        let mut b = GraphBuilder::new("matmul");
        let a = b.input("a", dtype, &[64, 128]);
        let w = b.weight("w", dtype, &[128, 256]);
        b.node("matmul", &[a, w], &[64, 256], false);
        let mut g = b.build().expect("valid");
        // The builder's node outputs are f32: store this one as the operands are.
        for t in &mut g.tensors {
            t.dtype = dtype;
            t.size = t.shape.iter().product::<u64>() * dtype.size();
        }
        g
    };
    let f32_tile = exec.matmul_tile(&one(DType::F32), 0).expect("resolves");
    let f16_tile = exec.matmul_tile(&one(DType::F16), 0).expect("resolves");
    assert!(f32_tile.is_some() && f16_tile.is_some());
    let summary = tune::tuning(&ctx);
    assert_eq!(summary.choices.len(), 2, "{summary:?}");
    let storages: Vec<StorageType> = summary.choices.iter().map(|c| c.class.storage).collect();
    assert_eq!(storages, [StorageType::F32, StorageType::F16]);
    assert!(summary.choices.iter().all(|c| c.source == Source::Tuned));
    assert!(
        summary.choices[1].line().contains("f16"),
        "{}",
        summary.choices[1].line()
    );
    // Both are cached under their own class.
    let cache = TuneCache::load(&path).expect("a valid cache");
    let adapter = AdapterKey::of(&ctx.info);
    for choice in &summary.choices {
        assert_eq!(cache.get(&adapter, &choice.class), Some(choice.variant));
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_shared_read_tiles_give_the_plain_tiles_results_bit_for_bit() {
    let Some(ctx) = own_device() else { return };
    if !shares_a_offered(&ctx) {
        common::skip_for_capability(
            "the_shared_read_tiles_give_the_plain_tiles_results_bit_for_bit",
            "not a CPU adapter with subgroups: the shared-read tiles are not offered",
        );
        return;
    }
    // Rows that fill the tile, a partial last tile, fewer rows than the tile; columns
    // past a workgroup's.
    for (m, k, n) in [(64, 128, 256), (37, 68, 136), (3, 36, 72), (130, 64, 200)] {
        for op in [
            "matmul",
            "matmul_gelu",
            "matmul_add",
            "matmul_bt",
            "layer_norm_matmul_bias",
        ] {
            let (g, values) = graph(op, m, k, n);
            for (plain, shared) in [
                (MatmulTile::Rows8, MatmulTile::Rows8Shared),
                (MatmulTile::Rows4, MatmulTile::Rows4Shared),
                (MatmulTile::Rows8, MatmulTile::Rows16Shared),
                (MatmulTile::Rows8, MatmulTile::Rows32Shared),
            ] {
                let label = format!("{op} {m}x{k}x{n}");
                let outs = [plain, shared].map(|t| forced_output(&ctx, &g, &values, &label, t));
                assert_eq!(outs[0], outs[1], "{label} {shared:?}");
            }
        }
    }
}

#[test]
fn the_64_by_64_tile_sums_in_the_register_tiles_order() {
    // The staged 64 x 64 tile adds the products of each output element in the same
    // order as the register tiles (k + 3, k + 2, k + 1, k per group of four, zeros for
    // the steps past k): the same bits, on shapes that cover partial blocks and a k
    // that is not a multiple of the staged 16.
    let Some(ctx) = own_device() else { return };
    for (op, m, k, n) in [
        ("matmul", 37, 68, 136),
        ("matmul", 130, 64, 200),
        ("matmul_gelu", 70, 36, 68),
        ("matmul_add", 65, 132, 260),
    ] {
        let (g, values) = graph(op, m, k, n);
        let label = format!("{op} {m}x{k}x{n}");
        let outs = [MatmulTile::Rows4, MatmulTile::Tile64]
            .map(|t| forced_output(&ctx, &g, &values, &label, t));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&outs[0]), bits(&outs[1]), "{label}");
    }
}

/// Node 0's output with `tile` forced (the executor is checked to take it), after
/// checking it against the CPU reference.
fn forced_output(
    ctx: &GpuContext,
    g: &Graph,
    values: &HashMap<TensorId, TensorData>,
    label: &str,
    tile: MatmulTile,
) -> Vec<f32> {
    tune::configure(ctx, settings(None, &[tile]));
    let exec = Executor::new(ctx);
    assert_eq!(exec.matmul_tile(g, 0).expect("resolves"), Some(tile));
    let (gpu, cpu) = run_both(ctx, g, values);
    assert_close(&format!("{label} {tile:?}"), &gpu, &cpu, 1e-4);
    gpu
}
