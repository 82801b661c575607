//! The `wgalloc` command-line tool: a thin shell over the library.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error ({}): {error}", error.kind());
            ExitCode::from(2)
        }
    }
}
