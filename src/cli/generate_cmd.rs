//! `wgalloc generate`: greedy generation with GPT-2 on planned memory and the paged KV
//! cache, from a Hugging Face checkpoint directory or a seeded model; `--dry-run` says
//! from the config alone what the model needs and whether it fits.

use std::path::PathBuf;
use std::process::ExitCode;

use wgalloc::device::GpuContext;
use wgalloc::exec::StorageType;
use wgalloc::model::hf::{
    check_tokens, fit, generate_greedy, Checkpoint, CheckpointError, CpuDecoder, CpuGpt2,
    FitRequest, Generation, Gpt2Config, Gpt2Weights, GpuGpt2, GpuOptions, DEFAULT_PAGE_BYTES,
};
use wgalloc::model::{logits_tolerance, SeededRng};

use super::generate_out::{print_dry_run, print_generation, CpuCheck, RunFacts};
use super::tokenizer::{Gpt2Tokenizer, GPT2_VOCAB};

/// Options of `wgalloc generate`.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    /// A checkpoint directory (`config.json` + `model.safetensors`, as
    /// `save_pretrained` writes them). Without it: a seeded model.
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// The prompt as token ids (comma separated).
    #[arg(long, value_delimiter = ',', conflicts_with = "prompt")]
    pub prompt_ids: Option<Vec<u32>>,
    /// The prompt as text, tokenized with GPT-2's BPE (r50k_base, bundled).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Tokens to generate (greedy).
    #[arg(long, default_value_t = 16)]
    pub max_new_tokens: usize,
    /// The most tokens one prefill step runs.
    #[arg(long, default_value_t = 64)]
    pub prefill_chunk: usize,
    /// Tokens per KV-cache block.
    #[arg(long, default_value_t = 16)]
    pub block_tokens: u32,
    /// The largest KV-cache page in bytes (also capped by the device's largest binding).
    #[arg(long, default_value_t = DEFAULT_PAGE_BYTES)]
    pub page_bytes: u64,
    /// Seed of the seeded model's weights and prompt (without `--weights`).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Seeded model: layers, width, heads, vocabulary, positions (comma separated).
    #[arg(long, value_delimiter = ',', value_name = "L,W,H,V,P")]
    pub seeded_shape: Option<Vec<usize>>,
    /// Say what the model needs and whether it fits, from the config alone; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With `--dry-run`: the bytes the model may use on the device.
    #[arg(long)]
    pub budget: Option<u64>,
    /// Also generate with the CPU reference and compare: the same tokens, and each
    /// step's logits within 1e-3 x max(1, max |logit|) (exit code 1 otherwise).
    #[arg(long)]
    pub check: bool,
    /// Prove every bucket's plan with the checksum run, the KV cache live (exit code 1
    /// when a proof finds a clobbered tensor).
    #[arg(long)]
    pub prove: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// How weights, activations and the KV cache's pages are stored: f32, or f16 (half
    /// the bytes, f32 accumulation; needs the adapter's shader-f16, else the run says
    /// so and uses f32). `--check` then compares with a CPU reference that rounds as
    /// f16 storage does, within the f16 tolerance.
    #[arg(long, default_value = "f32", value_parser = super::model_cmd::parse_dtype)]
    pub dtype: StorageType,
}

impl GenerateArgs {
    /// What the default run (`wgalloc` with no arguments) ends with: 8 tokens from the
    /// seeded model.
    pub fn default_run() -> GenerateArgs {
        GenerateArgs {
            weights: None,
            prompt_ids: None,
            prompt: None,
            max_new_tokens: 8,
            prefill_chunk: 64,
            block_tokens: 16,
            page_bytes: DEFAULT_PAGE_BYTES,
            seed: 42,
            seeded_shape: None,
            dry_run: false,
            budget: None,
            check: true,
            prove: true,
            json: false,
            dtype: StorageType::F32,
        }
    }
}

/// The seeded model's default shape: 4 layers, width 256, 4 heads, vocabulary 1024,
/// 128 positions.
const SEEDED: [usize; 5] = [4, 256, 4, 1024, 128];

/// The config: the checkpoint's, or the seeded shape.
fn config_of(args: &GenerateArgs) -> wgalloc::Result<Gpt2Config> {
    match &args.weights {
        Some(dir) => Ok(Gpt2Config::from_file(&dir.join("config.json"))?),
        None => {
            let s = args.seeded_shape.clone().unwrap_or(SEEDED.to_vec());
            let [l, w, h, v, p] = <[usize; 5]>::try_from(s.as_slice()).map_err(|_| {
                CheckpointError::BadConfig {
                    field: "n_layer",
                    problem: format!(
                        "--seeded-shape takes 5 numbers (layers,width,heads,vocab,positions), got {}",
                        s.len()
                    ),
                }
            })?;
            let config = Gpt2Config::new(l, w, h, v, p);
            config.check()?;
            Ok(config)
        }
    }
}

/// Runs `wgalloc generate`.
///
/// # Errors
/// A bad checkpoint, prompt or option; device, planning and execution errors.
pub fn run(args: &GenerateArgs) -> wgalloc::Result<ExitCode> {
    let config = config_of(args)?;
    if args.dry_run {
        return dry_run(args, &config);
    }
    let (weights, source) = match &args.weights {
        Some(dir) => {
            let ckpt = Checkpoint::load(dir)?;
            (ckpt.weights, dir.display().to_string())
        }
        None => (
            Gpt2Weights::seeded(&config, args.seed),
            format!("seeded (seed {})", args.seed),
        ),
    };
    let tokenizer = if args.prompt.is_some() || config.vocab_size == GPT2_VOCAB {
        Some(Gpt2Tokenizer::new()?)
    } else {
        None
    };
    let prompt_ids = match (&args.prompt_ids, &args.prompt, &tokenizer) {
        (Some(ids), _, _) => ids.clone(),
        (None, Some(text), Some(t)) => t.encode(text),
        _ => seeded_prompt(&config, args.seed),
    };
    // Bad prompts are refused before a device is opened.
    check_tokens(&config, 0, &prompt_ids)?;
    let ctx = GpuContext::from_env()?;
    let dtype = super::model_cmd::usable_dtype(&ctx, args.dtype);
    if dtype != args.dtype {
        let note = format!(
            "dtype    {} asked, but this adapter does not offer shader-f16: running {}",
            args.dtype.name(),
            dtype.name()
        );
        if args.json {
            eprintln!("{note}");
        } else {
            println!("{note}");
        }
    }
    let options = GpuOptions {
        prefill_chunk: args.prefill_chunk.max(1),
        block_tokens: args.block_tokens,
        max_page_bytes: args.page_bytes,
        dtype,
        ..GpuOptions::default()
    };
    let mut gpu = GpuGpt2::new(&ctx, &config, &weights, options)?;
    let generation: Generation = generate_greedy(&mut gpu, &prompt_ids, args.max_new_tokens)?;
    let check = if args.check {
        let mut cpu = CpuGpt2::new(config.clone(), weights)?;
        // f16 storage: the reference rounds as the device stores, within f16's
        // tolerance; f32: 1e-3 as before.
        let tolerance = match dtype {
            StorageType::F16 => {
                cpu = cpu.with_f16_storage();
                logits_tolerance(dtype)
            }
            StorageType::F32 => 1e-3,
        };
        let reference =
            generate_greedy(&mut CpuDecoder::new(cpu), &prompt_ids, args.max_new_tokens)?;
        Some(CpuCheck::within(&generation, &reference, tolerance))
    } else {
        None
    };
    let proofs = if args.prove {
        gpu.prove_buckets()?
            .into_iter()
            .map(|(key, report)| (key, report.verified(), report.mismatches))
            .collect()
    } else {
        Vec::new()
    };
    let text = match &tokenizer {
        Some(t) => Some(t.decode(&generation.generated_ids)?),
        None => None,
    };
    let facts = RunFacts {
        adapter: format!("{} ({:?})", ctx.info.name, ctx.info.backend),
        source,
        config: &config,
        generation: &generation,
        text,
        steps: gpu.steps(),
        memory: gpu.memory_report(),
        worst_case: gpu.worst_case()?,
        pipeline_time: gpu.pipeline_time(),
        check,
        proofs,
        dtype,
    };
    print_generation(&facts, args.json);
    let proved = facts.proofs.iter().all(|p| p.1);
    Ok(if proved && check.is_none_or(|c| c.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Eight seeded prompt ids below the vocabulary.
fn seeded_prompt(config: &Gpt2Config, seed: u64) -> Vec<u32> {
    let mut rng = SeededRng::new(seed.wrapping_add(0x5EED));
    let n = 8.min(config.n_positions);
    (0..n)
        .map(|_| rng.below(config.vocab_size as u64) as u32)
        .collect()
}

/// `--dry-run`: the fit from the config alone, against the adapter's limits when an
/// adapter is found (else lavapipe's: 128 MiB bindings, 2 GiB buffers).
fn dry_run(args: &GenerateArgs, config: &Gpt2Config) -> wgalloc::Result<ExitCode> {
    let (adapter, max_binding, max_buffer, alignment) = match GpuContext::from_env() {
        Ok(ctx) => (
            Some(ctx.info.name.clone()),
            ctx.limits.max_storage_buffer_binding_size,
            ctx.limits.max_buffer_size,
            u64::from(ctx.limits.min_storage_buffer_offset_alignment),
        ),
        Err(_) => (None, 128 << 20, (1 << 31) - 1, 256),
    };
    let request = FitRequest {
        max_binding,
        max_buffer,
        alignment,
        prefill_chunk: args.prefill_chunk.max(1),
        block_tokens: args.block_tokens,
        max_page_bytes: args.page_bytes,
        max_context: None,
        budget: args.budget,
        dtype: args.dtype.dtype(),
    };
    let report = fit(config, &request)?;
    print_dry_run(config, &report, adapter.as_deref(), &request, args.json);
    let fits = report.limit_problems.is_empty() && report.fits_budget != Some(false);
    Ok(if fits {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
