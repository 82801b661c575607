//! Command-line parsing and dispatch. Each subcommand lives in its own module.

mod graph_cmd;
mod input;
mod run_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// wgalloc: plan, allocate and verify GPU memory for compute graphs on wgpu.
#[derive(Debug, Parser)]
#[command(name = "wgalloc", version, about)]
pub struct Cli {
    /// What to do (default: run the built-in transformer end to end).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Summarise a trace (.json) or an interval CSV: counts and bytes by role.
    Graph {
        /// A tensor-graph-trace/1 JSON file or an `id,lower,upper,size` CSV.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Plan a trace, allocate it on the GPU and prove with the checksum run that no
    /// live tensor is clobbered (exit code 1 if one is).
    Run {
        /// A tensor-graph-trace/1 JSON file.
        file: PathBuf,
        /// The planner (see `run_cmd::PLANNERS`).
        #[arg(long, default_value = run_cmd::DEFAULT_PLANNER)]
        planner: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the parsed command line.
///
/// # Errors
/// Whatever the subcommand fails with.
pub fn run(cli: Cli) -> wgalloc::Result<ExitCode> {
    match cli.command {
        Some(Command::Graph { file, json }) => graph_cmd::run(&file, json),
        Some(Command::Run {
            file,
            planner,
            json,
        }) => run_cmd::run(&file, &planner, json),
        None => {
            eprintln!("no subcommand given; see --help");
            Ok(ExitCode::from(2))
        }
    }
}
