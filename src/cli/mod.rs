//! Command-line parsing and dispatch. Each subcommand lives in its own module.

mod generate_cmd;
mod generate_out;
mod graph_cmd;
mod info_cmd;
mod input;
mod model_cmd;
mod plan_cmd;
mod run_cmd;
mod tokenizer;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// wgalloc: plan, allocate and verify GPU memory for compute graphs on wgpu.
/// With no subcommand: run the built-in transformer end to end.
#[derive(Debug, Parser)]
#[command(
    name = "wgalloc",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do (default: run the built-in transformer end to end).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The default run's storage type (no subcommand), for its model run and its
    /// generation (weights, activations, KV-cache pages): f32, or f16 where the adapter
    /// offers shader-f16 (else the run says so and uses f32). `wgalloc model --dtype`
    /// for the model alone, `wgalloc generate --dtype` for generation alone.
    #[arg(long, value_parser = model_cmd::parse_dtype)]
    pub dtype: Option<wgalloc::exec::StorageType>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List adapters; for the chosen one, its memory limits and buffer types.
    Info {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Summarise a trace (.json), an ONNX model (.onnx) or an interval CSV: counts and
    /// bytes by role.
    Graph {
        /// A tensor-graph-trace/1 JSON file, an ONNX model or an `id,lower,upper,size` CSV.
        file: PathBuf,
        /// A symbolic dimension of an ONNX model (`--dim batch=1`; repeatable).
        #[arg(long = "dim", value_name = "NAME=VALUE", value_parser = input::parse_dim)]
        dim: Vec<(String, u64)>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Plan a trace, an ONNX model or an interval CSV (no GPU): sizes, bounds, time,
    /// verification.
    Plan {
        /// A tensor-graph-trace/1 JSON file, an ONNX model or an `id,lower,upper,size` CSV.
        file: PathBuf,
        /// A symbolic dimension of an ONNX model (`--dim batch=1`; repeatable).
        #[arg(long = "dim", value_name = "NAME=VALUE", value_parser = input::parse_dim)]
        dim: Vec<(String, u64)>,
        /// The planner (`best`: every offline strategy and ggml's walk, smallest kept).
        #[arg(long, default_value = "best")]
        planner: String,
        /// The memory the plan must fit in, in bytes: the offline planners stop once a
        /// plan fits (and search at it); the report says whether it fits, and the exit
        /// code is 1 when it does not.
        #[arg(long)]
        capacity: Option<u64>,
        /// Seconds the offline planning may take, import and verification aside; it ends
        /// with the best plan so far (default: a fixed work budget, deterministic: well
        /// under a second for a network's trace, up to about 30 s for a million
        /// intervals).
        #[arg(long, value_parser = parse_seconds)]
        time_limit: Option<std::time::Duration>,
        /// Offset alignment in bytes (default: 32 for traces, 1 for CSVs).
        #[arg(long)]
        alignment: Option<u64>,
        /// Largest chunk in bytes (default: 2 GiB for traces, unlimited for CSVs).
        #[arg(long)]
        max_size: Option<u64>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Write the plan as an SVG picture (traces).
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Plan a trace, allocate it on the GPU and prove with the checksum run that no
    /// live tensor is clobbered (exit code 1 if one is).
    Run {
        /// A tensor-graph-trace/1 JSON file or an ONNX model.
        file: PathBuf,
        /// A symbolic dimension of an ONNX model (`--dim batch=1`; repeatable).
        #[arg(long = "dim", value_name = "NAME=VALUE", value_parser = input::parse_dim)]
        dim: Vec<(String, u64)>,
        /// The planner (`best`: every offline strategy and ggml's walk, smallest kept).
        #[arg(long, default_value = "best")]
        planner: String,
        /// Seconds the offline search may take (default: a fixed work budget).
        #[arg(long, value_parser = parse_seconds)]
        time_limit: Option<std::time::Duration>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Write the plan as an SVG picture.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Testing aid: move one live tensor over another before running.
        #[arg(long, hide = true)]
        inject_clobber: bool,
    },
    /// Run the built-in GPT-2-style decoder end to end with other dimensions.
    Model(model_cmd::ModelArgs),
    /// Generate text with GPT-2 (a Hugging Face checkpoint or a seeded model) on
    /// planned memory and a paged KV cache; `--dry-run`: what it needs and whether it
    /// fits.
    Generate(generate_cmd::GenerateArgs),
}

/// Runs the parsed command line.
///
/// # Errors
/// Whatever the subcommand fails with.
pub fn run(cli: Cli) -> wgalloc::Result<ExitCode> {
    match cli.command {
        Some(Command::Info { json }) => info_cmd::run(json),
        Some(Command::Graph { file, dim, json }) => graph_cmd::run(&file, &dim, json),
        Some(Command::Plan {
            file,
            dim,
            planner,
            capacity,
            time_limit,
            alignment,
            max_size,
            json,
            svg,
        }) => plan_cmd::run(&plan_cmd::PlanArgs {
            file,
            dims: dim,
            planner,
            capacity,
            time_limit,
            alignment,
            max_size,
            json,
            svg,
        }),
        Some(Command::Run {
            file,
            dim,
            planner,
            time_limit,
            json,
            svg,
            inject_clobber,
        }) => run_cmd::run(&run_cmd::RunArgs {
            file,
            dims: dim,
            planner,
            time_limit,
            json,
            svg,
            inject_clobber,
        }),
        Some(Command::Model(args)) => model_cmd::run(&args),
        Some(Command::Generate(args)) => generate_cmd::run(&args),
        None => {
            let mut args = model_cmd::ModelArgs::default_run();
            if let Some(dtype) = cli.dtype {
                args.dtype = dtype;
            }
            let code = model_cmd::run(&args)?;
            if code == ExitCode::SUCCESS {
                // The default run ends by generating a few tokens with the seeded GPT-2
                // on planned memory and the paged KV cache.
                println!();
                println!("generate (wgalloc generate: seeded GPT-2, greedy, paged KV cache)");
                let generate = generate_cmd::GenerateArgs {
                    dtype: args.dtype,
                    ..generate_cmd::GenerateArgs::default_run()
                };
                return generate_cmd::run(&generate);
            }
            Ok(code)
        }
    }
}

/// A time limit in seconds (`0.5`, `2`): finite and not negative.
fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    std::time::Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("`{text}` is not a usable number of seconds"))
}

/// What to tell a user whose adapter is GL: Vulkan (lavapipe on a machine without a
/// GPU) is much faster, the GL driver's first run mostly translating shaders.
pub(crate) fn gl_note(backend: wgpu::Backend) -> Option<&'static str> {
    (backend == wgpu::Backend::Gl).then_some(
        "only a GL adapter was found; Vulkan is much faster (without a GPU, lavapipe: \
         `apt-get install -y mesa-vulkan-drivers`): the default run's first pass took about \
         48 s on llvmpipe's GL, mostly one-time shader translation, against 0.35 s on lavapipe's Vulkan",
    )
}
