//! Shared harness for GPU tests: one device per test binary, chosen from the
//! environment (`WGPU_BACKEND`, `WGPU_ADAPTER_NAME`).
//!
//! ```ignore
//! mod common;
//! let Some(ctx) = common::gpu() else { return };
//! ```
//!
//! Without an adapter, `gpu()` prints `SKIPPED: no wgpu adapter (...)` to stderr and
//! returns `None`, so the test passes. With `WGALLOC_REQUIRE_GPU=1` it panics instead.
//!
//! The shared context does not tune: its kernels are the rule's (`TuneSettings::off`),
//! the same on every run, and no test pays for timing (and compiling) eight candidate
//! tiles of each shape it happens to use. The tuner and every candidate it can choose
//! are tested on devices of their own (`gpu_tune.rs`, `gpu_kernel_forms.rs`,
//! `gpu_matvec.rs`), and the CLI tests run the binary as a user does, tuning.
#![allow(dead_code)]

use std::sync::OnceLock;

use wgalloc::device::{DeviceError, GpuContext};
use wgalloc::exec::tune::{self, TuneSettings};
use wgalloc::exec::DecodeSlices;

static GPU: OnceLock<Result<GpuContext, DeviceError>> = OnceLock::new();

/// Whether `WGALLOC_REQUIRE_GPU=1` asks for GPU tests to fail rather than skip.
pub fn gpu_required() -> bool {
    std::env::var("WGALLOC_REQUIRE_GPU").is_ok_and(|v| v.trim() == "1")
}

/// The shared GPU context, or `None` (after printing why) when there is no adapter.
///
/// # Panics
/// When no adapter can be opened and `WGALLOC_REQUIRE_GPU=1`.
pub fn gpu() -> Option<GpuContext> {
    let open = || {
        let ctx = GpuContext::from_env()?;
        tune::configure(&ctx, TuneSettings::off());
        Ok(ctx)
    };
    match GPU.get_or_init(open) {
        Ok(ctx) => Some(ctx.clone()),
        Err(error) if gpu_required() => {
            panic!("WGALLOC_REQUIRE_GPU=1 but no GPU context could be opened: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: no wgpu adapter ({error})");
            None
        }
    }
}

/// Skips a test because the adapter lacks a capability the test needs (a limit, a
/// report, a feature). It prints a loud line either way; under `WGALLOC_REQUIRE_GPU=1`
/// it also appends the line to `capability-skips.log` in Cargo's target tmp dir, which
/// `.ci/run` counts and prints after the tests, so a skip never passes unseen.
pub fn skip_for_capability(test: &str, why: &str) {
    let line = format!("SKIPPED (capability) {test}: {why}");
    eprintln!("\n!!!!!! {line} !!!!!!\n");
    if gpu_required() {
        use std::io::Write;
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("capability-skips.log");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| writeln!(file, "{line}"));
        if let Err(error) = written {
            panic!("cannot record the skip in {}: {error}", path.display());
        }
    }
}

/// `let ctx = require_gpu!();` returns from the test (passing) when there is no GPU.
#[macro_export]
macro_rules! require_gpu {
    () => {
        match $crate::common::gpu() {
            Some(ctx) => ctx,
            None => return,
        }
    };
}

/// Two devices on one adapter of one wgpu instance (a buffer of another instance is
/// an id wgpu-core cannot look up and panics inside wgpu, out of any scope's reach).
///
/// # Panics
/// When no adapter or device can be opened.
pub fn two_devices_of_one_adapter() -> (GpuContext, GpuContext) {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = wgalloc::device::backends_from_env();
    let instance = wgpu::Instance::new(desc);
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .expect("an adapter");
    let device = || GpuContext::from_adapter(&adapter).expect("a device");
    (device(), device())
}

/// The GPU context, or `None` (after a loud skip saying why) when there is none or its
/// adapter has no `shader-f16`: the f16 tests' way in.
pub fn f16_gpu(test: &str) -> Option<GpuContext> {
    let ctx = gpu()?;
    if !ctx.has_f16() {
        skip_for_capability(test, "the adapter does not offer shader-f16");
        return None;
    }
    Some(ctx)
}

/// A device of its own on the adapter whose decode steps split the cached keys over 256
/// invocations a head (the GPU rule), also on a CPU adapter; `None` without an adapter
/// (as [`gpu`]).
pub fn wide_decode_device() -> Option<GpuContext> {
    gpu()?;
    let ctx = GpuContext::from_env().expect("a second device on the adapter");
    tune::configure(
        &ctx,
        TuneSettings {
            decode: Some(DecodeSlices::Wide),
            ..TuneSettings::off()
        },
    );
    assert_eq!(tune::decode_slices(&ctx), DecodeSlices::Wide);
    Some(ctx)
}

/// A device on `like`'s adapter created without `SHADER_F16` (the shared context asks
/// for it where the adapter offers it), for the tests of the refusals.
///
/// # Panics
/// When no such device can be opened, or it has `shader-f16` after all.
pub fn device_without_f16(like: &GpuContext) -> GpuContext {
    let without = GpuContext::select_with(
        Some(&like.info.name),
        wgalloc::device::USABLE_FEATURES.difference(wgpu::Features::SHADER_F16),
    )
    .expect("a device");
    assert!(!without.has_f16());
    without
}

/// A decoder small enough for a software adapter: `layers` layers of width 32, two
/// heads, 16 positions, a 50-token vocabulary, seed 3.
pub fn tiny_model(layers: u64) -> wgalloc::model::ModelConfig {
    wgalloc::model::ModelConfig {
        layers,
        width: 32,
        heads: 2,
        seq: 16,
        vocab: 50,
        seed: 3,
        dtype: Default::default(),
    }
}

/// A device storage that refuses (`StorageError::Refused`) once its budget of
/// allocations is spent, to test failure paths.
pub struct CappedStorage {
    /// Where the allowed allocations come from.
    pub inner: wgalloc::device::WgpuStorage,
    /// Allocations still allowed.
    pub left: std::sync::atomic::AtomicU64,
}

impl wgalloc::storage::Storage for CappedStorage {
    type Memory = wgpu::Buffer;

    fn allocate(
        &self,
        request: &wgalloc::storage::RegionRequest,
    ) -> Result<wgalloc::storage::Region, wgalloc::storage::StorageError> {
        use std::sync::atomic::Ordering;
        let left = self.left.load(Ordering::SeqCst);
        if left == 0 {
            return Err(wgalloc::storage::StorageError::Refused {
                message: "budget spent".into(),
            });
        }
        self.left.store(left - 1, Ordering::SeqCst);
        self.inner.allocate(request)
    }

    fn free(&self, region: wgalloc::storage::Region) -> Result<(), wgalloc::storage::StorageError> {
        self.inner.free(region)
    }

    fn copy(
        &self,
        from: &wgalloc::storage::Region,
        to: &wgalloc::storage::Region,
        bytes: u64,
    ) -> Result<(), wgalloc::storage::StorageError> {
        self.inner.copy(from, to, bytes)
    }
}

/// What `wgalloc run` does with a plan: its limits checked ("never fits" before any
/// allocation), its memory from `storage` (the one allocation path), the proof over
/// that memory; the memory goes back to the storage before this returns.
pub fn allocate_and_prove(
    ctx: &GpuContext,
    graph: &wgalloc::Graph,
    plan: &wgalloc::Plan,
    storage: &wgalloc::device::SharedStorage,
) -> wgalloc::Result<wgalloc::exec::checksum::ChecksumReport> {
    wgalloc::exec::check_plan_against_limits(plan, graph, &ctx.limits)?;
    let memory =
        wgalloc::device::allocate_plan(ctx, plan, wgalloc::device::STORAGE_USAGE, storage)?;
    Ok(wgalloc::prove(ctx, graph, plan, &memory)?)
}
