//! Side by side on one adapter: wgalloc's built-in decoder and the same decoder in burn
//! (wgpu backend, fusion and autotune on, causal attention through burn's fused
//! `attention` op), at the shapes of issue 17. Prints both forward times (median of N
//! warm runs after warm-up runs that let burn autotune) and memory figures.
//!
//! What each timed run is checked against: wgalloc writes its token ids before every
//! run (`model::Forward::run`; the plan reuses their bytes) and every timed run's
//! logits are read back (after its clock stops) and compared with the CPU reference
//! (`LOGITS_TOLERANCE`). burn's decoder has weights of its own (burn's initialisers),
//! so its logits cannot be compared with wgalloc's: every timed run's logits are read
//! back after its clock stops and compared with its first run's (the same inputs, the
//! same weights: a run that computed something else, or nothing, fails).
//!
//! The timing rule, as coded: wgalloc's forward is `encode_time + wait_time` of its
//! `RunReport` (CPU clock from resolving and recording the pass, through the submit,
//! until the device has finished; the token ids' `write_buffer` is queued just before
//! the clock starts and copied by the same submit; the tile tuner's time, first run
//! only, is excluded). burn's forward is the CPU clock from the first op queued until
//! `device.sync()` returns. The medians are over the timed runs, interleaved one
//! wgalloc run then one burn run.
//!
//! The adapter: burn's device is chosen by the type of wgalloc's adapter (`Cpu` for
//! lavapipe, the first discrete or integrated GPU, ...) rather than burn's default,
//! and both are printed; burn's choice within a type is its own (cubecl's order).
//!
//! The decoder both run: token and position embeddings; per layer layer norm, a
//! bias-free QKV projection, causal attention, a bias-free output projection added to
//! the residual, layer norm, a bias-free GELU (tanh) MLP of width 4d added to the
//! residual; a final layer norm and logits tied to the token embedding.
//!
//! Run: `WGPU_BACKEND=vulkan cargo run --release -p wgalloc-burn-side [-- --reps 15
//! --warmup 3 --shape small|large|both]`.

use std::time::{Duration, Instant};

use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::gelu_approximate;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, DeviceKind, Int, Tensor, TensorData};
use wgalloc::device::GpuContext;
use wgalloc::model::{Forward, ModelConfig, LOGITS_TOLERANCE};

/// Why the comparison could not run.
#[derive(Debug, thiserror::Error)]
enum SideError {
    /// A command-line argument was not understood.
    #[error("bad argument: {0} (expected --reps N, --warmup N, --shape small|large|both)")]
    BadArgument(String),
    /// wgalloc failed.
    #[error("wgalloc: {0}")]
    Wgalloc(#[from] wgalloc::Error),
    /// wgalloc found no adapter.
    #[error("wgalloc: {0}")]
    Device(#[from] wgalloc::device::DeviceError),
    /// burn failed to finish its work.
    #[error("burn: {0}")]
    Burn(String),
    /// A timed run's logits were not what they should be.
    #[error("{side}: timed run {run}: max |logit - expected| = {error:e} over the tolerance {tolerance:e}")]
    Logits {
        /// Which side.
        side: &'static str,
        /// The timed run (0-based).
        run: usize,
        /// The largest difference.
        error: f32,
        /// The allowed difference.
        tolerance: f32,
    },
}

/// Checks `got` against `expected`: `max |got - expected| <= LOGITS_TOLERANCE *
/// max(1, max |expected|)`, and the lengths agree.
fn check_logits(
    side: &'static str,
    run: usize,
    got: &[f32],
    expected: &[f32],
) -> Result<(), SideError> {
    let scale = expected.iter().fold(1f32, |m, v| m.max(v.abs()));
    let tolerance = LOGITS_TOLERANCE * scale;
    let error = if got.len() == expected.len() {
        got.iter()
            .zip(expected)
            .fold(0f32, |m, (g, e)| m.max((g - e).abs()))
    } else {
        f32::INFINITY
    };
    // NaN fails too.
    if error <= tolerance {
        Ok(())
    } else {
        Err(SideError::Logits {
            side,
            run,
            error,
            tolerance,
        })
    }
}

/// The shapes of issue 17.
fn shapes() -> [(&'static str, ModelConfig); 2] {
    let config = |layers, width, heads, seq, vocab| ModelConfig {
        layers,
        width,
        heads,
        seq,
        vocab,
        seed: 42,
        dtype: Default::default(),
    };
    [
        ("4L w256 h4 s128 v1024", config(4, 256, 4, 128, 1024)),
        ("6L w512 h8 s256 v4096", config(6, 512, 8, 256, 4096)),
    ]
}

/// One layer of burn's decoder.
struct BurnLayer {
    ln1: LayerNorm,
    qkv: Linear,
    out: Linear,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

/// burn's decoder of the same shape.
struct BurnDecoder {
    config: ModelConfig,
    wte: Embedding,
    wpe: Embedding,
    layers: Vec<BurnLayer>,
    ln_f: LayerNorm,
}

impl BurnDecoder {
    fn new(config: &ModelConfig, device: &Device) -> BurnDecoder {
        let (d, vocab, seq) = (
            config.width as usize,
            config.vocab as usize,
            config.seq as usize,
        );
        let linear = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
        let norm = || LayerNormConfig::new(d).init(device);
        BurnDecoder {
            config: *config,
            wte: EmbeddingConfig::new(vocab, d).init(device),
            wpe: EmbeddingConfig::new(seq, d).init(device),
            layers: (0..config.layers)
                .map(|_| BurnLayer {
                    ln1: norm(),
                    qkv: linear(d, 3 * d),
                    out: linear(d, d),
                    ln2: norm(),
                    up: linear(d, 4 * d),
                    down: linear(4 * d, d),
                })
                .collect(),
            ln_f: norm(),
        }
    }

    /// Parameters (the same count as wgalloc's decoder).
    fn parameters(&self) -> u64 {
        let c = &self.config;
        let d = c.width;
        c.vocab * d + c.seq * d + c.layers * (12 * d * d + 4 * d) + 2 * d
    }

    fn forward(&self, tokens: Tensor<2, Int>, positions: Tensor<2, Int>) -> Tensor<3> {
        let c = &self.config;
        let (seq, d, heads) = (c.seq as usize, c.width as usize, c.heads as usize);
        let hd = d / heads;
        let mut x = self.wte.forward(tokens) + self.wpe.forward(positions);
        let split = |t: Tensor<3>, part: usize| {
            t.narrow(2, part * d, d)
                .reshape([1, seq, heads, hd])
                .swap_dims(1, 2)
        };
        for layer in &self.layers {
            let qkv = layer.qkv.forward(layer.ln1.forward(x.clone()));
            let (q, k, v) = (split(qkv.clone(), 0), split(qkv.clone(), 1), split(qkv, 2));
            let options = AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal: true,
            };
            let o = attention(q, k, v, None, None, options)
                .swap_dims(1, 2)
                .reshape([1, seq, d]);
            x = x + layer.out.forward(o);
            let h = layer.up.forward(layer.ln2.forward(x.clone()));
            x = x + layer.down.forward(gelu_approximate(h));
        }
        let h = self.ln_f.forward(x);
        let table = self.wte.weight.val().transpose().unsqueeze::<3>();
        h.matmul(table)
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Options from the command line.
struct Args {
    reps: usize,
    warmup: usize,
    shapes: Vec<usize>,
}

fn parse_args() -> Result<Args, SideError> {
    let mut args = Args {
        reps: 15,
        warmup: 3,
        shapes: vec![0, 1],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| SideError::BadArgument(arg.clone()));
        match arg.as_str() {
            "--reps" | "--warmup" => {
                let v = value()?;
                let n: usize = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| SideError::BadArgument(format!("{arg} {v}")))?;
                if arg == "--reps" {
                    args.reps = n;
                } else {
                    args.warmup = n;
                }
            }
            "--shape" => {
                args.shapes = match value()?.as_str() {
                    "small" => vec![0],
                    "large" => vec![1],
                    "both" => vec![0, 1],
                    other => return Err(SideError::BadArgument(format!("--shape {other}"))),
                }
            }
            _ => return Err(SideError::BadArgument(arg)),
        }
    }
    Ok(args)
}

/// Figures of one runtime at one shape (GPU time and dispatches: wgalloc's only).
struct Figures {
    forward: Duration,
    gpu: Option<Duration>,
    dispatches: Option<usize>,
    beyond_weights: u64,
    detail: String,
}

/// burn's decoder with its inputs on the device.
struct BurnRun {
    model: BurnDecoder,
    tokens: Tensor<2, Int>,
    positions: Tensor<2, Int>,
    device: Device,
}

impl BurnRun {
    fn new(device: &Device, config: &ModelConfig) -> Result<BurnRun, SideError> {
        let seq = config.seq as usize;
        let ids: Vec<i32> = wgalloc::model::build_gpt(config)
            .map_err(|e| SideError::Wgalloc(e.into()))?
            .token_ids()
            .iter()
            .map(|&t| t as i32)
            .collect();
        Ok(BurnRun {
            model: BurnDecoder::new(config, device),
            tokens: Tensor::<2, Int>::from_data(TensorData::new(ids, [1, seq]), device),
            positions: Tensor::<1, Int>::arange(0..seq as i64, device).reshape([1, seq]),
            device: device.clone(),
        })
    }

    /// One forward pass, timed from the first op queued until the device has finished;
    /// its logits, read back after the clock stopped.
    fn once(&self) -> Result<(Duration, Vec<f32>), SideError> {
        let started = Instant::now();
        let logits = self
            .model
            .forward(self.tokens.clone(), self.positions.clone());
        self.device
            .sync()
            .map_err(|e| SideError::Burn(format!("{e:?}")))?;
        let elapsed = started.elapsed();
        let values = logits
            .into_data()
            .try_to_vec::<f32>()
            .map_err(|e| SideError::Burn(format!("logits readback: {e:?}")))?;
        Ok((elapsed, values))
    }
}

/// Runs both at one shape: warm-up runs of each, then `reps` rounds of one wgalloc
/// forward and one burn forward, interleaved so that a busy machine slows both alike.
fn compare(
    ctx: &GpuContext,
    device: &Device,
    config: &ModelConfig,
    args: &Args,
) -> Result<(Figures, Figures), SideError> {
    let mut forward = Forward::new(ctx, config)?;
    let burn = BurnRun::new(device, config)?;
    let reference = forward
        .model()
        .reference_logits(forward.model().token_ids())?;
    let first = forward.run()?;
    check_logits("wgalloc", 0, &forward.logits()?, &reference)?;
    let (cold, burn_first) = burn.once()?;
    for _ in 1..args.warmup {
        forward.run()?;
        burn.once()?;
    }
    let mut ours = Vec::with_capacity(args.reps);
    let mut theirs = Vec::with_capacity(args.reps);
    for run in 0..args.reps {
        ours.push(forward.run()?);
        check_logits("wgalloc", run, &forward.logits()?, &reference)?;
        let (time, logits) = burn.once()?;
        check_logits("burn", run, &logits, &burn_first)?;
        theirs.push(time);
    }
    let gpu = ours
        .iter()
        .map(|r| r.gpu_time)
        .collect::<Option<Vec<_>>>()
        .map(median);
    let wgalloc = Figures {
        forward: median(ours.iter().map(|r| r.wait_time + r.encode_time).collect()),
        gpu,
        dispatches: Some(first.dispatches),
        beyond_weights: forward.activation_bytes(),
        detail: format!(
            "activations {:.3} MB planned (in-place lower bound {:.3} MB), weights {:.2} MB",
            mb(forward.activation_bytes()),
            mb(forward.lower_bound_bytes()),
            mb(forward.weight_bytes())
        ),
    };
    let weights = 4 * burn.model.parameters();
    let (beyond, detail) = match device.memory_pool_usage() {
        Some(u) => (
            u.bytes_reserved.saturating_sub(weights),
            format!(
                "pools reserve {:.2} MB, {:.2} MB in use ({} allocations), weights {:.2} MB; cold first forward {:.0} ms",
                mb(u.bytes_reserved),
                mb(u.bytes_in_use),
                u.number_allocs,
                mb(weights),
                ms(cold)
            ),
        ),
        None => (0, format!("no pool report; cold first forward {:.0} ms", ms(cold))),
    };
    let burn_figures = Figures {
        forward: median(theirs),
        gpu: None,
        dispatches: None,
        beyond_weights: beyond,
        detail,
    };
    Ok((wgalloc, burn_figures))
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), SideError> {
    let args = parse_args()?;
    let ctx = GpuContext::from_env()?;
    // burn's device of the same type as wgalloc's adapter.
    // (By the type's name: this package does not depend on wgpu itself.)
    let kind = match format!("{:?}", ctx.info.device_type).as_str() {
        "Cpu" => DeviceKind::Cpu,
        "DiscreteGpu" => DeviceKind::DiscreteGpu(0),
        "IntegratedGpu" => DeviceKind::IntegratedGpu(0),
        "VirtualGpu" => DeviceKind::VirtualGpu(0),
        _ => DeviceKind::DefaultDevice,
    };
    let device = Device::wgpu(kind.clone());
    println!(
        "adapter (wgalloc): {} ({:?}, {:?}, driver {} {})",
        ctx.info.name,
        ctx.info.device_type,
        ctx.info.backend,
        ctx.info.driver,
        ctx.info.driver_info
    );
    println!(
        "adapter (burn): wgpu device {kind:?} (the type of wgalloc's adapter; burn's choice within the type)"
    );
    println!(
        "timing: median of {} timed runs after {} warm-up runs, interleaved; wgalloc = encode + submit-to-done \
         (ids written before each run), burn = first op queued to device.sync(); every timed run's logits \
         checked (wgalloc: the CPU reference; burn: its first run's)",
        args.reps, args.warmup
    );
    let mut rows = Vec::new();
    for &i in &args.shapes {
        let (label, config) = shapes()[i];
        let (ours, theirs) = compare(&ctx, &device, &config, &args)?;
        println!("{label}: wgalloc {}", ours.detail);
        println!("{label}: burn    {}", theirs.detail);
        rows.push((label, ours, theirs));
    }
    println!();
    println!("| shape | wgalloc forward | wgalloc GPU | dispatches | burn forward (fused attention) | wgalloc / burn | memory beyond weights wgalloc / burn |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (label, ours, theirs) in rows {
        println!(
            "| {label} | {:.1} ms | {} | {} | {:.1} ms | {:.2} | {:.2} / {:.2} MB |",
            ms(ours.forward),
            ours.gpu
                .map_or("n/a".into(), |g| format!("{:.1} ms", ms(g))),
            ours.dispatches.map_or("n/a".into(), |d| d.to_string()),
            ms(theirs.forward),
            ours.forward.as_secs_f64() / theirs.forward.as_secs_f64().max(1e-12),
            mb(ours.beyond_weights),
            mb(theirs.beyond_weights),
        );
    }
    Ok(())
}
