//! The main job: `wgalloc` with no arguments, or `wgalloc model ...`: the built-in
//! decoder end to end on planned memory, with a report, the proof and a picture.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};
use wgalloc::device::{no_report_reason, GpuContext};
use wgalloc::exec::StorageType;
use wgalloc::model::{ModelConfig, ModelRun, ModelSession, RunOptions};

use super::plan_cmd::{buffers_json, percent_over, write_svg};

/// Options of `wgalloc model` (and of the default run).
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Transformer layers.
    #[arg(long, default_value_t = ModelConfig::default().layers)]
    pub layers: u64,
    /// Model width (embedding size).
    #[arg(long, default_value_t = ModelConfig::default().width)]
    pub width: u64,
    /// Attention heads (must divide the width).
    #[arg(long, default_value_t = ModelConfig::default().heads)]
    pub heads: u64,
    /// Sequence length of the first run (the reservation's worst case).
    #[arg(long, default_value_t = ModelConfig::default().seq)]
    pub seq: u64,
    /// Vocabulary size.
    #[arg(long, default_value_t = ModelConfig::default().vocab)]
    pub vocab: u64,
    /// Seed of the weights and tokens.
    #[arg(long, default_value_t = ModelConfig::default().seed)]
    pub seed: u64,
    /// How weights and activations are stored: f32, or f16 (half the bytes, f32
    /// accumulation; needs the adapter's shader-f16, else the run says so and uses f32).
    #[arg(long, default_value = "f32", value_parser = parse_dtype)]
    pub dtype: StorageType,
    /// Sequence lengths to run after the first, reusing its reservation when they fit
    /// (comma separated; default: half the first sequence).
    #[arg(long, value_delimiter = ',')]
    pub then_seq: Option<Vec<u64>>,
    /// Write the first run's activation plan as an SVG picture here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Testing aid: corrupt the activation plan (one live tensor moved over another)
    /// to show that the logits check and the proof both fail.
    #[arg(long, hide = true)]
    pub inject_clobber: bool,
}

impl ModelArgs {
    /// The configuration these options describe.
    pub fn config(&self) -> ModelConfig {
        ModelConfig {
            layers: self.layers,
            width: self.width,
            heads: self.heads,
            seq: self.seq,
            vocab: self.vocab,
            seed: self.seed,
            dtype: self.dtype,
        }
    }

    /// The defaults, writing the picture to `wgalloc-plan.svg` (the run with no
    /// arguments).
    pub fn default_run() -> ModelArgs {
        ModelArgs {
            layers: ModelConfig::default().layers,
            width: ModelConfig::default().width,
            heads: ModelConfig::default().heads,
            seq: ModelConfig::default().seq,
            vocab: ModelConfig::default().vocab,
            seed: ModelConfig::default().seed,
            dtype: ModelConfig::default().dtype,
            then_seq: None,
            svg: Some(PathBuf::from("wgalloc-plan.svg")),
            json: false,
            inject_clobber: false,
        }
    }
}

/// Runs the model and prints the report; exits 1 when the logits or the proof fail.
pub fn run(args: &ModelArgs) -> wgalloc::Result<ExitCode> {
    let mut config = args.config();
    config.check()?;
    let ctx = GpuContext::from_env()?;
    let text = !args.json;
    if text {
        print_device(&ctx);
    }
    let asked = config.dtype;
    config.dtype = usable_dtype(&ctx, asked);
    if config.dtype != asked {
        // On stderr too in JSON mode, so that stdout stays one JSON object.
        let line = format!(
            "dtype    {} asked, but this adapter does not offer shader-f16: running {}",
            asked.name(),
            config.dtype.name()
        );
        if text {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
    }
    let mut session = ModelSession::new(&ctx, &config)?;
    let params = session.weight_bytes() / config.dtype.dtype().size();
    if text {
        println!(
            "compile  every compute pipeline built once, before the first run: {:.2} ms (one-time; \
             run 1's GPU time still holds the driver's first-use work)",
            session.pipeline_time().as_secs_f64() * 1e3
        );
        println!(
            "model    GPT-2-style decoder: {} layers, width {}, {} heads, vocab {}, seed {}, {} storage",
            config.layers,
            config.width,
            config.heads,
            config.vocab,
            config.seed,
            config.dtype.name()
        );
        let chunks = &session.weight_plan().buffers[0].chunks;
        println!(
            "weights  {} tensors, {} bytes ({:.2} M parameters) packed into {} chunk(s) by the context allocator",
            session
                .weight_plan()
                .placements
                .iter()
                .filter(|p| p.is_some())
                .count(),
            session.weight_bytes(),
            params as f64 / 1e6,
            chunks.len(),
        );
    }
    let mut sequences = vec![config.seq];
    sequences.extend(
        args.then_seq
            .clone()
            .unwrap_or_else(|| vec![(config.seq / 2).max(1)]),
    );
    let mut runs = Vec::new();
    for (i, &seq) in sequences.iter().enumerate() {
        let options = RunOptions {
            inject_clobber: args.inject_clobber && i == 0,
        };
        let run = session.run(seq, options)?;
        if i == 0 {
            if let Some(path) = &args.svg {
                let graph = wgalloc::model::build_gpt(&run.config)?.graph;
                write_svg(path, &graph, &run.plan, run.lower_bounds.inplace_aware)?;
                if text {
                    println!("picture  {} (the activation plan)", path.display());
                }
            }
        }
        if text {
            print_run(&run, i, ctx.info.backend);
        }
        runs.push(run);
    }
    let passed = runs.iter().all(ModelRun::passed);
    let tuning = wgalloc::exec::tune::tuning(&ctx);
    if text {
        println!("tuning   {}", tuning.line());
        for choice in &tuning.choices {
            println!("         {}", choice.line());
        }
    }
    if args.json {
        println!(
            "{}",
            json!({
                "adapter": ctx.info.name,
                "backend": format!("{:?}", ctx.info.backend),
                "config": config,
                "dtype_asked": asked,
                "weight_bytes": session.weight_bytes(),
                "pipeline_seconds": session.pipeline_time().as_secs_f64(),
                "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
                "tune_seconds": tuning.time.as_secs_f64(),
                "tune_choices": tuning.choices,
                "passed": passed,
            })
        );
    } else if passed {
        println!(
            "verdict  PASS: {} run(s) matched the CPU reference and the proof found no clobbered tensor",
            runs.len()
        );
    } else {
        println!("verdict  FAIL: see the runs above");
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `asked`, or f32 when `asked` is f16 and the device has no `shader-f16`.
pub(crate) fn usable_dtype(ctx: &GpuContext, asked: StorageType) -> StorageType {
    if asked == StorageType::F16 && !ctx.has_f16() {
        StorageType::F32
    } else {
        asked
    }
}

/// Parses `--dtype` (`f32` or `f16`).
pub(crate) fn parse_dtype(text: &str) -> Result<StorageType, String> {
    StorageType::from_name(text.trim())
        .ok_or_else(|| format!("`{text}` is not a storage type: use f32 or f16"))
}

fn print_device(ctx: &GpuContext) {
    let l = &ctx.limits;
    println!(
        "adapter  {} ({:?}, {:?}, driver {} {})",
        ctx.info.name,
        ctx.info.backend,
        ctx.info.device_type,
        ctx.info.driver,
        ctx.info.driver_info
    );
    println!(
        "limits   max buffer {} B, max storage binding {} B, storage offset alignment {}, timestamps {}, shader-f16 {}",
        l.max_buffer_size,
        l.max_storage_buffer_binding_size,
        l.min_storage_buffer_offset_alignment,
        if ctx.has_timestamps() { "yes" } else { "no" },
        if ctx.has_f16() { "yes" } else { "no" }
    );
    if let Some(note) = super::gl_note(ctx.info.backend) {
        println!("note     {note}");
    }
}

fn print_run(run: &ModelRun, index: usize, backend: wgpu::Backend) {
    let seq = run.config.seq;
    println!(
        "run {}    seq {seq}: {} nodes, {} tensors",
        index + 1,
        run.nodes,
        run.tensors
    );
    if index > 0 {
        if run.reused_reservation {
            println!("         plan     reused the reservation (needs_realloc false): buffers kept, no re-plan of memory");
        } else if run.weights_rebuilt {
            println!("         plan     longer than any run before: weights and activations re-planned and reallocated");
        } else {
            println!(
                "         plan     needs_realloc true: activations re-planned and reallocated"
            );
        }
    }
    if let Some(c) = run.clobber {
        println!(
            "         INJECTED clobber: tensor t{} moved over live tensor t{} (plan verify: {})",
            c.intruder.0,
            c.victim.0,
            if run.plan_verified {
                "passed"
            } else {
                "rejected"
            }
        );
    }
    println!(
        "         memory   activations {} B allocated; this graph alone plans to {} B; naive {} B; lower bound {} B ({})",
        run.activation_bytes,
        run.graph_bytes,
        run.naive_bytes,
        run.lower_bounds.inplace_aware,
        percent_over(run.graph_bytes, run.lower_bounds.inplace_aware),
    );
    print_device_bytes(run, backend);
    println!(
        "         saving   {:.1}x less than naive; {} in-place writes",
        run.naive_bytes as f64 / run.activation_bytes.max(1) as f64,
        run.plan.inplace.len()
    );
    let gpu = run.exec.gpu_time.map_or_else(
        || "n/a (no timestamp queries)".to_string(),
        |d| format!("{:.2} ms", d.as_secs_f64() * 1e3),
    );
    println!(
        "         time     plan {:.3} ms, encode {:.2} ms, wall (submit to done) {:.2} ms, GPU {gpu}, {} dispatches in one pass",
        run.plan_time.as_secs_f64() * 1e3,
        run.exec.encode_time.as_secs_f64() * 1e3,
        run.exec.wait_time.as_secs_f64() * 1e3,
        run.exec.dispatches
    );
    println!(
        "         logits   max |gpu - cpu| = {:.3e} (tolerance {:.1e} x max(1, max|logit| = {:.3})): {}",
        run.max_abs_error,
        run.tolerance,
        run.max_abs_logit,
        if run.logits_match { "PASS" } else { "FAIL" }
    );
    match run.proof.first() {
        None => println!(
            "         proof    verified: {} nodes, {} tensors, 0 mismatches",
            run.proof.nodes, run.proof.tensors
        ),
        Some(m) => println!("         proof    FAILED: {m}"),
    }
}

/// The driver's view of the activation memory, beside the planned bytes.
fn print_device_bytes(run: &ModelRun, backend: wgpu::Backend) {
    match &run.device_bytes {
        Some(d) => println!(
            "         device   planned {} B; the driver allocated {} B to the activation buffers, in {} memory block(s) of {} B reserved ({} B newly); device total {} B reserved, {} B allocated",
            run.activation_bytes,
            d.allocated,
            d.blocks,
            d.reserved,
            d.newly_reserved,
            d.device_reserved,
            d.device_allocated
        ),
        None => println!("         device   {}", no_report_reason(backend)),
    }
}

fn run_json(run: &ModelRun) -> Value {
    json!({
        "device_allocated_bytes": run.device_bytes.map(|d| d.allocated),
        "device_reserved_bytes": run.device_bytes.map(|d| d.reserved),
        "device_bytes": run.device_bytes,
        "seq": run.config.seq,
        "nodes": run.nodes,
        "tensors": run.tensors,
        "buffers": buffers_json(&run.plan),
        "activation_bytes": run.activation_bytes,
        "graph_bytes": run.graph_bytes,
        "naive_bytes": run.naive_bytes,
        "lower_bound_bytes": run.lower_bounds.inplace_aware,
        "lower_bound_strict_bytes": run.lower_bounds.strict,
        "inplace_pairs": run.plan.inplace.len(),
        "plan_seconds": run.plan_time.as_secs_f64(),
        "reused_reservation": run.reused_reservation,
        "weights_rebuilt": run.weights_rebuilt,
        "encode_seconds": run.exec.encode_time.as_secs_f64(),
        "gpu_seconds": run.exec.gpu_time.map(|d| d.as_secs_f64()),
        "wall_seconds": run.exec.wait_time.as_secs_f64(),
        "dispatches": run.exec.dispatches,
        "max_abs_error": run.max_abs_error,
        "logits_match": run.logits_match,
        "proof": run.proof,
        "proof_verified": run.proof.verified(),
        "clobber": run.clobber.map(|c| json!({"victim": c.victim.0, "intruder": c.intruder.0})),
        "passed": run.passed(),
    })
}
