//! Command-line parsing and dispatch. Each subcommand lives in its own module.

mod graph_cmd;
mod info_cmd;
mod input;

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
    /// List adapters; for the chosen one, its memory limits and buffer types.
    Info {
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
        Some(Command::Info { json }) => info_cmd::run(json),
        None => {
            eprintln!("no subcommand given; see --help");
            Ok(ExitCode::from(2))
        }
    }
}
