//! Writes generated large interval instances (see `wgalloc::plan::offline::workload`:
//! the memory of a training step, 5,000 to 40,000 buffers) as CSV files named
//! `train-<buffers>-<seed>.csv`, for planning large instances from the command line.
//!
//! `cargo run --release --example gen_train -- [OUT_DIR] [COUNT] [SOURCE.csv]` writes
//! the footprint benchmark's large set (`workload::large_suite(COUNT)`, default 12) to
//! OUT_DIR (default `target/gen-train`), and with a SOURCE, COUNT random parts of it
//! (`workload::subsample_suite`, named `<source>-sub<percent>-<seed>.csv`); plan one
//! with `wgalloc plan OUT_DIR/train-....csv`.

use std::fmt::Write as _;
use std::path::PathBuf;

use wgalloc::plan::offline::workload::{large_suite, subsample_suite};
use wgalloc::plan::IntervalProblem;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| String::from("target/gen-train")),
    );
    let count: usize = match args.next() {
        Some(c) => c.parse()?,
        None => 12,
    };
    let mut problems = large_suite(count);
    if let Some(source) = args.next() {
        let source = IntervalProblem::read_csv(source.as_ref())?;
        problems.extend(subsample_suite(&source, count));
    }
    std::fs::create_dir_all(&dir)?;
    for problem in &problems {
        let mut csv = String::from("id,lower,upper,size\n");
        for iv in &problem.intervals {
            writeln!(csv, "{},{},{},{}", iv.id, iv.lower, iv.upper, iv.size)?;
        }
        std::fs::write(dir.join(format!("{}.csv", problem.name)), csv)?;
    }
    let count = problems.len();
    println!("wrote {count} instances to {}", dir.display());
    Ok(())
}
