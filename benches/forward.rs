//! The built-in decoder's warm forward pass at the two shapes of issue 17, on the
//! adapter wgpu finds, with a roofline: the adapter's own FMA and copy-bandwidth peaks
//! (`tests/shaders/roofline.wgsl`), and every distinct kernel of the model run alone
//! with its GFLOP/s, GB/s and fraction of the roofline (min(peak, intensity x
//! bandwidth)): `roofline` against the peaks measured at the start, `beside` each run
//! against the higher of two short FMA-peak probes dispatched just before and just
//! after it (the median over the runs), since a shared machine's speed drifts within a
//! run.
//!
//! Times are medians of N warm runs: wall from submit to the device finishing
//! (`RunReport::wait_time`), and GPU timestamps where the adapter has them (lavapipe
//! has them too, as software times). A kernel run alone is timed by the adapter's
//! timestamps where it has them, else from submit to done (one submit and wait, so
//! there small kernels' figures are lower bounds). `WGALLOC_BENCH_QUICK=1` runs the small shape with fewer
//! repetitions. Before the model shapes, a table of the matrix-vector path on decode
//! shapes against the copy bandwidth (`WGALLOC_BENCH_MATVEC=1`: that table only).
//! `WGALLOC_BENCH_TILES=1` prints a table of the matmul tiles the tuner offers the
//! adapter on prefill shapes instead.
//! Run: `WGPU_BACKEND=vulkan cargo bench --bench forward`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wgalloc::device::{allocate_plan, GpuContext, WgpuStorage, STORAGE_USAGE};
use wgalloc::exec::tune::{self, KernelFamily};
use wgalloc::exec::{
    resolve, AttentionForm, ExecError, Executor, MatmulTile, NormForm, OpCall, TensorMemory,
};
use wgalloc::graph::{DType, Graph, GraphBuilder, Role};
use wgalloc::model::{Forward, ModelConfig};
use wgalloc::plan::{plan_graph, plan_weights};

/// The two shapes of issue 17.
const SHAPES: [(&str, ModelConfig); 2] = [
    (
        "4L w256 h4 s128 v1024",
        ModelConfig {
            layers: 4,
            width: 256,
            heads: 4,
            seq: 128,
            vocab: 1024,
            seed: 42,
            dtype: wgalloc::exec::StorageType::F32,
        },
    ),
    (
        "6L w512 h8 s256 v4096",
        ModelConfig {
            layers: 6,
            width: 512,
            heads: 8,
            seq: 256,
            vocab: 4096,
            seed: 42,
            dtype: wgalloc::exec::StorageType::F32,
        },
    ),
];

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The adapter's measured ceilings.
struct Roofline {
    gflops: f64,
    gbps: f64,
}

impl Roofline {
    /// The attainable GFLOP/s at `flops / bytes`.
    fn attainable(&self, flops: f64, bytes: f64) -> f64 {
        if bytes <= 0.0 {
            return self.gflops;
        }
        self.gflops.min(flops / bytes * self.gbps)
    }
}

/// One kernel of `tests/shaders/roofline.wgsl`, built once and dispatched on demand.
struct RooflineKernel<'a> {
    ctx: &'a GpuContext,
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
    grid: [u32; 2],
    // Bound by `group`; kept alive with it.
    _buffers: [wgpu::Buffer; 3],
    /// Timestamp queries, their resolve target and readback, where the adapter has them.
    stamps: Option<(wgpu::QuerySet, wgpu::Buffer, wgpu::Buffer)>,
}

impl<'a> RooflineKernel<'a> {
    /// `entry` with its parameters, over two storage buffers of `buffer_bytes`.
    fn new(
        ctx: &'a GpuContext,
        entry: &str,
        params: [u32; 4],
        grid: [u32; 2],
        buffer_bytes: u64,
    ) -> Self {
        let device = &ctx.device;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("roofline"),
            source: wgpu::ShaderSource::Wgsl(include_str!("../tests/shaders/roofline.wgsl").into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions::default(),
            cache: None,
        });
        let buffer = |size: u64, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        let storage = wgpu::BufferUsages::STORAGE;
        let (src, dst) = (buffer(buffer_bytes, storage), buffer(buffer_bytes, storage));
        let uniform = buffer(
            32,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let mut block = [0u8; 32];
        for (i, v) in params.iter().enumerate() {
            block[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        block[16..20].copy_from_slice(&0.5f32.to_le_bytes());
        ctx.queue.write_buffer(&uniform, 0, &block);
        let layout = pipeline.get_bind_group_layout(0);
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: uniform.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: src.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: dst.as_entire_binding(),
                },
            ],
        });
        let stamps = ctx.has_timestamps().then(|| {
            let queries = device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("roofline time"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            });
            let resolve = buffer(
                16,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            );
            let readback = buffer(
                16,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            );
            (queries, resolve, readback)
        });
        let kernel = Self {
            ctx,
            pipeline,
            group,
            grid,
            _buffers: [src, dst, uniform],
            stamps,
        };
        kernel.time_once(); // warm-up
        kernel
    }

    /// Time of one submit of one dispatch: the pass's GPU timestamps where the adapter
    /// has them, else wall time from submit to done.
    fn time_once(&self) -> Duration {
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: self.stamps.as_ref().map(|(queries, ..)| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: queries,
                        beginning_of_pass_write_index: Some(0),
                        end_of_pass_write_index: Some(1),
                    }
                }),
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.group, &[]);
            pass.dispatch_workgroups(self.grid[0], self.grid[1], 1);
        }
        if let Some((queries, resolve, readback)) = &self.stamps {
            encoder.resolve_query_set(queries, 0..2, resolve, 0);
            encoder.copy_buffer_to_buffer(resolve, 0, readback, 0, 16);
        }
        let started = Instant::now();
        self.ctx.queue.submit([encoder.finish()]);
        let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
        let wall = started.elapsed();
        let Some((_, _, readback)) = &self.stamps else {
            return wall;
        };
        let slice = readback.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
        let ticks = {
            let bytes = slice.get_mapped_range().expect("the timestamps are mapped");
            let stamp = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
            stamp(1).saturating_sub(stamp(0))
        };
        readback.unmap();
        let nanos = ticks as f64 * f64::from(self.ctx.queue.get_timestamp_period());
        Duration::from_nanos(nanos as u64)
    }

    /// Median of `reps` timed dispatches.
    fn time(&self, reps: usize) -> Duration {
        median((0..reps).map(|_| self.time_once()).collect())
    }
}

/// Workgroups of the FMA-peak kernel; each invocation does 64 flops per iteration.
const PEAK_GROUPS: u32 = 512;

/// Flops of one FMA-peak dispatch of `iters` iterations.
fn peak_flops(iters: u32) -> f64 {
    f64::from(PEAK_GROUPS) * 64.0 * f64::from(iters) * 64.0
}

/// A short FMA-peak dispatch timed beside each run of the forward table's kernels.
/// The machine's speed drifts: on the shared 2-core build machine the same 20 ms
/// probe, dispatched back to back, measured 14.6 to 44.1 GFLOP/s, so a kernel's
/// fraction of the peak is also taken against the peak measured next to it.
struct PeakProbe<'a> {
    kernel: RooflineKernel<'a>,
    flops: f64,
}

impl<'a> PeakProbe<'a> {
    /// A probe sized to take about `target` at the peak `gflops` measured at the start.
    fn new(ctx: &'a GpuContext, gflops: f64, target: Duration) -> Self {
        let iters = (gflops * 1e9 * target.as_secs_f64() / peak_flops(1)).ceil();
        Self::with_iters(ctx, iters.clamp(16.0, f64::from(u32::MAX)) as u32)
    }

    /// The FMA-peak kernel of `iters` iterations an invocation.
    fn with_iters(ctx: &'a GpuContext, iters: u32) -> Self {
        let kernel = RooflineKernel::new(
            ctx,
            "fma_peak",
            [iters, 0, 0, 0],
            [PEAK_GROUPS, 1],
            u64::from(PEAK_GROUPS) * 64 * 16,
        );
        Self {
            kernel,
            flops: peak_flops(iters),
        }
    }

    /// The FMA peak now, GFLOP/s (one dispatch).
    fn gflops(&self) -> f64 {
        self.flops / self.kernel.time_once().as_secs_f64() / 1e9
    }

    /// The FMA peak, GFLOP/s, from the median of `reps` dispatches.
    fn median_gflops(&self, reps: usize) -> f64 {
        self.flops / self.kernel.time(reps).as_secs_f64() / 1e9
    }
}

/// FMA and copy-bandwidth peaks of the adapter.
fn roofline(ctx: &GpuContext) -> Roofline {
    let gflops = PeakProbe::with_iters(ctx, 4096).median_gflops(5);
    let max_binding = ctx.limits.max_storage_buffer_binding_size;
    let bytes = (32u64 << 20).min(max_binding / 2 * 2);
    let elements = u32::try_from(bytes / 16).unwrap_or(u32::MAX);
    let groups = elements.div_ceil(64);
    let (gx, gy) = (groups.min(65535), groups.div_ceil(65535));
    let copy = RooflineKernel::new(ctx, "copy_bw", [0, elements, 0, 0], [gx, gy], bytes);
    let tb = copy.time(5);
    Roofline {
        gflops,
        gbps: 2.0 * bytes as f64 / tb.as_secs_f64() / 1e9,
    }
}

/// Decode-shaped products (one row against a weight matrix): `(label, family, k, n)`.
/// GPT-2 small's decode step dispatches the four `gpt2` rows per layer (QKV and MLP up
/// with the layer norm in the prologue) and its LM head in two `matmul_bt` pieces over
/// the tied embedding (the whole head, 768x50257, is over lavapipe's binding limit).
const MATVEC_SHAPES: [(&str, KernelFamily, u32, u32); 10] = [
    ("256x256", KernelFamily::Tiled, 256, 256),
    ("512x512", KernelFamily::Tiled, 512, 512),
    ("1024x1024", KernelFamily::Tiled, 1024, 1024),
    ("4096x1024", KernelFamily::Tiled, 4096, 1024),
    ("1024x4096", KernelFamily::Tiled, 1024, 4096),
    (
        "gpt2 QKV 768x2304 (norm)",
        KernelFamily::NormTiled,
        768,
        2304,
    ),
    ("gpt2 attn out 768x768", KernelFamily::Tiled, 768, 768),
    (
        "gpt2 MLP up 768x3072 (norm)",
        KernelFamily::NormTiled,
        768,
        3072,
    ),
    ("gpt2 MLP down 3072x768", KernelFamily::Tiled, 3072, 768),
    (
        "gpt2 LM head piece bt 768x25129",
        KernelFamily::BtTiled,
        768,
        25129,
    ),
];

/// The decode shapes (one row against a weight matrix), each candidate tile alone with
/// GPU timestamps (the fastest of 8 interleaved rounds after a warm-up,
/// `exec::tune::time_tiles`): the
/// matrix-vector kernels unsplit (`rows1`, `shaders/matvec.wgsl`, or the transposed
/// kernel with one row) and split over `k` (`rows1k16`, and narrower, `rows1k64` and
/// `rows1k256`; `matmul_bt` runs them unsplit),
/// and the tiled kernels the tuner may take instead (`rows4`, `rows8`, `rows4w64`). The
/// fastest tile's GB/s (weights + input row + output row over the GPU time) and its
/// ratio to the copy bandwidth measured above. The repetitions read the same weights,
/// so a matrix that fits the CPU's caches (lavapipe) is read from them after the
/// warm-up: the copy bandwidth is measured over 32 MiB.
fn matvec_table(ctx: &GpuContext, roof: &Roofline) {
    let tiles = [
        MatmulTile::Rows1,
        MatmulTile::Rows1Split,
        MatmulTile::Rows1Split64,
        MatmulTile::Rows1Split256,
        MatmulTile::Rows4,
        MatmulTile::Rows8,
        MatmulTile::Rows4Wide,
    ];
    let copy = format!("/ copy {:.1} GB/s", roof.gbps);
    let rows = MATVEC_SHAPES.map(|(label, family, k, n)| (label.to_string(), (family, k, n)));
    candidates_table(
        ctx,
        "decode matvec (m = 1), f32, GPU timestamps, fastest of 8",
        ("shape k x n", &["GB/s", &copy]),
        (&tiles, MatmulTile::name),
        rows,
        |&(family, k, n)| tune::time_tiles(ctx, family, (1, k, n), &tiles, 8),
        |&(_, k, n), fastest| {
            let bytes = 4.0 * (f64::from(k) * f64::from(n) + f64::from(k) + f64::from(n));
            let gbps = bytes / fastest.as_secs_f64() / 1e9;
            vec![format!("{gbps:.1}"), format!("{:.2}", gbps / roof.gbps)]
        },
    );
}

/// Prints a table of `candidates` timed on shapes, under the heading `title` (not
/// timed where the adapter has no GPU timestamps): for each `(label, shape)` of `rows`,
/// each candidate's time from `time` (`-` for one it could not time; a shape it could
/// not time at all says why), the fastest, and the cells `metrics` makes of the shape
/// and the fastest time. After `title`: the first column's name and the metrics'
/// names, then the candidates and what names one.
fn candidates_table<V: Copy + PartialEq, S>(
    ctx: &GpuContext,
    title: &str,
    (first, metric_names): (&str, &[&str]),
    (candidates, name): (&[V], fn(V) -> &'static str),
    rows: impl IntoIterator<Item = (String, S)>,
    time: impl Fn(&S) -> Result<Vec<(V, Duration)>, ExecError>,
    metrics: impl Fn(&S, Duration) -> Vec<String>,
) {
    println!();
    println!("## {title}");
    if !ctx.has_timestamps() {
        println!("no GPU timestamps: not timed");
        return;
    }
    let names: Vec<&str> = candidates.iter().map(|&c| name(c)).collect();
    candidates_header(first, &names, metric_names);
    for (label, shape) in rows {
        let times = match time(&shape) {
            Ok(times) => times,
            Err(e) => {
                println!("| {label} | not timed: {e} |");
                continue;
            }
        };
        let Some(&(best, fastest)) = times.iter().min_by_key(|(_, d)| *d) else {
            continue;
        };
        let cells = micros_cells(candidates, &times);
        println!(
            "| {label} | {} | {} | {} |",
            cells.join(" | "),
            name(best),
            metrics(&shape, fastest).join(" | ")
        );
    }
}

/// Prints the header of a table of candidates timed on shapes: `first`, a `name us`
/// column per candidate, `fastest`, then the `metrics` columns.
fn candidates_header(first: &str, names: &[&str], metrics: &[&str]) {
    let cells: Vec<String> = names.iter().map(|n| format!("{n} us")).collect();
    println!(
        "| {first} | {} | fastest | {} |",
        cells.join(" | "),
        metrics.join(" | ")
    );
    println!(
        "| --- |{} --- |{}",
        " ---: |".repeat(names.len()),
        " ---: |".repeat(metrics.len())
    );
}

/// Whether the environment variable `name` is `1`.
fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == "1")
}

/// Prefill matmul shapes `m x k x n` for the tile table: this bench's large shape
/// (256 rows), GPT-2 small's projections for a prefill chunk of 64 rows, the two
/// shapes' LM heads (`matmul_bt` by the tied embedding), then GPT-2 small's projections
/// for 1024 rows and a wider model's MLP (the last three on GPUs only).
const TILE_SHAPES: [(KernelFamily, u32, u32, u32); 9] = [
    (KernelFamily::Tiled, 256, 512, 1536),
    (KernelFamily::Tiled, 256, 2048, 512),
    (KernelFamily::Tiled, 64, 768, 2304),
    (KernelFamily::Tiled, 64, 3072, 768),
    (KernelFamily::BtTiled, 128, 256, 1024),
    (KernelFamily::BtTiled, 256, 512, 4096),
    (KernelFamily::Tiled, 1024, 768, 3072),
    (KernelFamily::Tiled, 1024, 3072, 768),
    (KernelFamily::Tiled, 2048, 1024, 4096),
];

/// The tiles the tuner offers this adapter on prefill shapes (`tune::offered_tiles`),
/// each alone with GPU timestamps (the fastest of 4 interleaved rounds after a warm-up),
/// with the fastest tile's GFLOP/s and its fraction of the FMA peak: on a GPU the
/// register tiles and the 64 x 64 staged tile (`shaders/matmul_block_tile64.wgsl`), on
/// a CPU adapter the register tiles and, with subgroups, the shared-read tiles
/// (`shaders/matmul_block_shared.wgsl`), there on the first six shapes (the 1024- and
/// 2048-row ones take seconds a dispatch on a CPU).
fn tile_table(ctx: &GpuContext, roof: &Roofline) {
    let shapes = if ctx.is_cpu_adapter() {
        &TILE_SHAPES[..6]
    } else {
        &TILE_SHAPES[..]
    };
    // A column for every tile the tuner offers at one of the shapes.
    let offered = |&(family, m, k, n): &(KernelFamily, u32, u32, u32)| {
        tune::offered_tiles(ctx, family, (m, k, n))
    };
    let tiles: Vec<MatmulTile> = MatmulTile::ALL
        .into_iter()
        .filter(|t| shapes.iter().any(|s| offered(s).contains(t)))
        .collect();
    let rows = shapes.iter().map(|&(family, m, k, n)| {
        let bt = if family == KernelFamily::BtTiled {
            " bt"
        } else {
            ""
        };
        (format!("{m}x{k}x{n}{bt}"), (family, m, k, n))
    });
    candidates_table(
        ctx,
        "matmul tiles on prefill shapes, f32, GPU timestamps, fastest of 4",
        ("m x k x n", &["GFLOP/s", "/ FMA peak"]),
        (&tiles, MatmulTile::name),
        rows,
        |shape| {
            let &(family, m, k, n) = shape;
            tune::time_tiles(ctx, family, (m, k, n), &offered(shape), 4)
        },
        |&(_, m, k, n), fastest| {
            let flops = 2.0 * f64::from(m) * f64::from(k) * f64::from(n);
            let gflops = flops / fastest.as_secs_f64() / 1e9;
            vec![
                format!("{gflops:.0}"),
                format!("{:.2}", gflops / roof.gflops),
            ]
        },
    );
}

/// Prefill attention shapes `(seq, heads, head width)`: the two decoder shapes of this
/// bench and `burn-side` (4L w256 h4, 6L w512 h8), GPT-2 small at 1024 tokens, and a
/// head the tiled form does not take.
const ATTENTION_SHAPES: [(u32, u32, u32); 5] = [
    (128, 4, 64),
    (256, 8, 64),
    (1024, 12, 64),
    (512, 16, 32),
    (128, 2, 128),
];

/// Prefill attention, each form alone with GPU timestamps (the fastest of 8 interleaved
/// rounds after a warm-up, `exec::tune::time_attention`): one invocation per query
/// (`shaders/attention.wgsl`) and the keys in workgroup memory
/// (`shaders/attention_tiled.wgsl`), with the fastest form's GFLOP/s (the causal
/// half of `4 seq^2 d` flops).
fn attention_table(ctx: &GpuContext) {
    let forms = AttentionForm::ALL;
    let rows = ATTENTION_SHAPES.map(|shape| {
        let (seq, heads, hd) = shape;
        (format!("{seq} x {heads} x {hd}"), shape)
    });
    candidates_table(
        ctx,
        "prefill attention forms, f32, GPU timestamps, fastest of 8",
        ("seq x heads x hd", &["GFLOP/s"]),
        (&forms, AttentionForm::name),
        rows,
        |&shape| tune::time_attention(ctx, shape, &forms, 8),
        |&(seq, heads, hd), fastest| {
            let flops = 2.0 * f64::from(seq) * f64::from(seq) * f64::from(heads * hd);
            vec![format!("{:.1}", flops / fastest.as_secs_f64() / 1e9)]
        },
    );
}

/// Layer norm shapes `(rows, cols)`: the decoder shapes' final norms and GPT-2 small's
/// at 1024 tokens.
const NORM_SHAPES: [(u32, u32); 3] = [(128, 256), (256, 512), (1024, 768)];

/// The layer norm's two forms alone with GPU timestamps (the fastest of 8 interleaved
/// rounds after a warm-up, `exec::tune::time_norm`), with the fastest form's GB/s (input, output,
/// gain and bias once) and its ratio to the copy bandwidth.
fn norm_table(ctx: &GpuContext, roof: &Roofline) {
    let forms = NormForm::ALL;
    let rows = NORM_SHAPES.map(|(r, c)| (format!("{r} x {c}"), (r, c)));
    candidates_table(
        ctx,
        "layer norm forms, f32, GPU timestamps, fastest of 8",
        ("rows x cols", &["GB/s", "/ copy"]),
        (&forms, NormForm::name),
        rows,
        |&shape| tune::time_norm(ctx, shape, &forms, 8),
        |&(r, c), fastest| {
            let bytes = 4.0 * (2.0 * f64::from(r) * f64::from(c) + 2.0 * f64::from(c));
            let gbps = bytes / fastest.as_secs_f64() / 1e9;
            vec![format!("{gbps:.1}"), format!("{:.2}", gbps / roof.gbps)]
        },
    );
}

/// One cell per candidate: its time in microseconds, or `-` when it was not timed.
fn micros_cells<V: PartialEq>(candidates: &[V], times: &[(V, Duration)]) -> Vec<String> {
    candidates
        .iter()
        .map(|c| {
            times
                .iter()
                .find(|(t, _)| t == c)
                .map_or("-".to_string(), |(_, d)| {
                    format!("{:.0}", d.as_secs_f64() * 1e6)
                })
        })
        .collect()
}

/// Floating-point operations and bytes moved by one call (the minimum traffic: each
/// operand read once, the output written once).
fn work(call: &OpCall) -> (f64, f64) {
    let f = |v: u32| f64::from(v);
    match *call {
        OpCall::Matmul { m, k, n, .. } | OpCall::MatmulPacked { m, k, n } => (
            2.0 * f(m) * f(k) * f(n),
            4.0 * (f(m) * f(k) + f(k) * f(n) + f(m) * f(n)),
        ),
        OpCall::MatmulFused { m, k, n, .. } => (
            2.0 * f(m) * f(k) * f(n),
            4.0 * (f(m) * f(k) + f(k) * f(n) + 2.0 * f(m) * f(n)),
        ),
        OpCall::Attention {
            seq,
            heads,
            head_dim,
            ..
        } => {
            let pairs = f(seq) * (f(seq) + 1.0) / 2.0;
            (
                4.0 * f(heads) * pairs * f(head_dim),
                4.0 * 4.0 * f(seq) * f(heads) * f(head_dim),
            )
        }
        OpCall::LayerNorm { rows, cols, .. } | OpCall::RmsNorm { rows, cols, .. } => (
            8.0 * f(rows) * f(cols),
            4.0 * (2.0 * f(rows) * f(cols) + 2.0 * f(cols)),
        ),
        OpCall::Softmax { rows, cols, .. } => (5.0 * f(rows) * f(cols), 8.0 * f(rows) * f(cols)),
        OpCall::Unary { len, .. } => (f(len), 8.0 * f(len)),
        OpCall::Binary { len, len_b, .. } => (f(len), 4.0 * (2.0 * f(len) + f(len_b))),
        OpCall::Embedding { rows, dim, .. } => (0.0, 8.0 * f(rows) * f(dim) + 4.0 * f(rows)),
        _ => (0.0, 0.0),
    }
}

/// Node `step` of `graph` alone: its inputs as graph inputs (weights stay weights),
/// out of place.
fn lone_node(graph: &Graph, step: usize) -> (Graph, Vec<wgalloc::graph::TensorId>) {
    let node = &graph.nodes[step];
    let mut b = GraphBuilder::new(format!("{}-alone", node.op));
    let inputs: Vec<_> = node
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let t = &graph.tensors[id.index()];
            let name = format!("in{i}");
            if t.role == Role::Weight {
                b.weight(name, t.dtype, &t.shape)
            } else {
                b.input(name, t.dtype, &t.shape)
            }
        })
        .collect();
    let out = &graph.tensors[node.output.index()];
    let y = b.node_with_params(&node.op, &inputs, &out.shape, false, &node.params);
    b.mark_output(y);
    (b.build().expect("a one-node graph is valid"), inputs)
}

/// One node run alone, `reps` times, each run between two FMA-peak probes: each run's
/// time (GPU timestamps, else wall time) with the higher of the two peaks beside it
/// (GFLOP/s).
fn time_lone_node(
    ctx: &GpuContext,
    graph: &Graph,
    step: usize,
    reps: usize,
    probe: &PeakProbe,
) -> Vec<(Duration, f64)> {
    let (g, inputs) = lone_node(graph, step);
    let storage = ctx.buffer_types().expect("buffer types").storage.desc;
    let plan = plan_graph(&g, &storage).expect("plan");
    let weights = plan_weights(&g, &storage).expect("weight plan");
    let allocate =
        |p| allocate_plan(ctx, p, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("allocate");
    let (memory, weight_memory) = (allocate(&plan), allocate(&weights));
    let tm = TensorMemory::single(&plan, &memory).with_layer(&weights, &weight_memory);
    for &id in &inputs {
        let t = &g.tensors[id.index()];
        let len = (t.size / 4) as usize;
        if t.dtype == DType::U32 {
            tm.write_u32(ctx, &g, id, &vec![1; len]).expect("upload");
        } else {
            let values: Vec<f32> = (0..len).map(|i| ((i % 17) as f32 - 8.0) * 0.01).collect();
            tm.write_f32(ctx, &g, id, &values).expect("upload");
        }
    }
    let mut exec = Executor::new(ctx);
    exec.run(&g, &tm).expect("warm-up");
    let mut before = probe.gflops();
    (0..reps)
        .map(|_| {
            let report = exec.run(&g, &tm).expect("run");
            // The kernel's own time where the adapter has timestamps (no submit floor).
            let time = report.gpu_time.unwrap_or(report.wait_time);
            let after = probe.gflops();
            let peak = before.max(after);
            before = after;
            (time, peak)
        })
        .collect()
}

fn main() {
    let quick = flag("WGALLOC_BENCH_QUICK");
    let ctx = match GpuContext::from_env() {
        Ok(ctx) => ctx,
        Err(error) => {
            eprintln!("SKIPPED: no wgpu adapter ({error})");
            return;
        }
    };
    let reps = if quick { 3 } else { 15 };
    println!(
        "adapter: {} ({:?}, {:?}); GPU timestamps: {}",
        ctx.info.name,
        ctx.info.device_type,
        ctx.info.backend,
        if ctx.has_timestamps() { "yes" } else { "no" }
    );
    let roof = roofline(&ctx);
    println!(
        "roofline: FMA peak {:.1} GFLOP/s, copy bandwidth {:.1} GB/s (ridge at {:.1} flop/byte)",
        roof.gflops,
        roof.gbps,
        roof.gflops / roof.gbps
    );
    let probe = PeakProbe::new(&ctx, roof.gflops, Duration::from_millis(20));
    if flag("WGALLOC_BENCH_TILES") {
        tile_table(&ctx, &roof);
        return;
    }
    matvec_table(&ctx, &roof);
    attention_table(&ctx);
    norm_table(&ctx, &roof);
    if flag("WGALLOC_BENCH_MATVEC") {
        return;
    }
    let shapes: &[(&str, ModelConfig)] = if quick { &SHAPES[..1] } else { &SHAPES };
    for (label, config) in shapes {
        let mut forward = Forward::new(&ctx, config).expect("the model builds");
        let first = forward.run().expect("first run");
        // One check that the pass computes the model: the CPU reference's logits.
        let logits = forward.logits().expect("logits");
        let reference = forward
            .model()
            .reference_logits(forward.model().token_ids())
            .expect("reference");
        let max_ref = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
        let max_err = logits
            .iter()
            .zip(&reference)
            .fold(0f32, |m, (g, c)| m.max((g - c).abs()));
        let runs: Vec<_> = (0..reps).map(|_| forward.run().expect("run")).collect();
        let wall = median(runs.iter().map(|r| r.wait_time).collect());
        let encode = median(runs.iter().map(|r| r.encode_time).collect());
        let gpu = runs
            .iter()
            .map(|r| r.gpu_time)
            .collect::<Option<Vec<_>>>()
            .map(median);
        println!();
        println!("## {label}");
        println!(
            "forward: median of {reps} warm runs: wall {:.2} ms (submit to done), encode {:.2} ms, GPU {}; {} nodes = {} dispatches; max |gpu - cpu| logit {:.2e} (max |logit| {:.2})",
            ms(wall),
            ms(encode),
            gpu.map_or("n/a".into(), |g| format!("{:.2} ms", ms(g))),
            forward.model().graph.nodes.len(),
            first.dispatches,
            max_err,
            max_ref
        );
        println!(
            "memory: activations {} B planned (in-place lower bound {} B), weights {} B",
            forward.activation_bytes(),
            forward.lower_bound_bytes(),
            forward.weight_bytes()
        );
        // The tile tuner's work (on the first run only; the device's whole tally).
        let tuning = wgalloc::exec::tune::tuning(&ctx);
        println!(
            "tuning: {:.1} ms in this shape's first run; device so far: {}",
            ms(first.tune_time),
            tuning.line()
        );
        for choice in &tuning.choices {
            println!("  {}", choice.line());
        }
        // Every distinct kernel of the model, alone.
        let graph = &forward.model().graph;
        let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
        let mut order = Vec::new();
        for step in 0..graph.nodes.len() {
            let call = resolve(graph, step).expect("resolves");
            let key = format!("{} {:?}", graph.nodes[step].op, call);
            match seen.get_mut(&key) {
                Some((_, count)) => *count += 1,
                None => {
                    seen.insert(key.clone(), (step, 1));
                    order.push(key);
                }
            }
        }
        println!(
            "| kernel | shape | count | ms each | ms total | GFLOP/s | GB/s | roofline | beside |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        let mut peaks_beside: Vec<f64> = Vec::new();
        for key in order {
            let (step, count) = seen[&key];
            let call = resolve(graph, step).expect("resolves");
            let runs = time_lone_node(&ctx, graph, step, reps.min(7), &probe);
            let t = median(runs.iter().map(|r| r.0).collect());
            let (flops, bytes) = work(&call);
            let secs = t.as_secs_f64();
            let gflops = flops / secs / 1e9;
            let fraction = gflops / roof.attainable(flops, bytes);
            peaks_beside.extend(runs.iter().map(|r| r.1));
            // Each run against the higher FMA peak measured just before or after it.
            let beside = median_f64(
                runs.iter()
                    .map(|&(time, peak)| {
                        let now = Roofline {
                            gflops: peak,
                            gbps: roof.gbps,
                        };
                        flops / time.as_secs_f64() / 1e9 / now.attainable(flops, bytes)
                    })
                    .collect(),
            );
            let shape = graph.nodes[step]
                .inputs
                .iter()
                .map(|&i| format!("{:?}", graph.tensors[i.index()].shape))
                .collect::<Vec<_>>()
                .join(" ");
            let (roofline, beside) = if flops > 0.0 {
                (
                    format!("{:.0}%", 100.0 * fraction),
                    format!("{:.0}%", 100.0 * beside),
                )
            } else {
                (
                    format!("{:.0}%", 100.0 * (bytes / secs / 1e9) / roof.gbps),
                    "-".into(),
                )
            };
            println!(
                "| {} | {shape} | {count} | {:.3} | {:.2} | {:.2} | {:.2} | {roofline} | {beside} |",
                graph.nodes[step].op,
                ms(t),
                ms(t) * count as f64,
                gflops,
                bytes / secs / 1e9,
            );
        }
        let low = peaks_beside.iter().copied().fold(f64::INFINITY, f64::min);
        let high = peaks_beside.iter().copied().fold(0.0, f64::max);
        println!(
            "FMA peak beside the kernels: {low:.1}-{high:.1} GFLOP/s (at the start {:.1}); \
             `roofline` is against the start's peak, `beside` the median of each run \
             against the higher probe just before or after it",
            roof.gflops
        );
    }
}
