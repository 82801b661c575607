//! Writes generated large interval instances (see `wgalloc::plan::offline::workload`:
//! the memory of a training step, 5,000 to 40,000 buffers) as CSV files named
//! `train-<buffers>-<seed>.csv`, for planning large instances from the command line.
//!
//! `cargo run --release --example gen_train -- [OUT_DIR] [COUNT]` writes the footprint
//! benchmark's large set (`workload::large_suite(COUNT)`, default 12) to OUT_DIR
//! (default `target/gen-train`); plan one with `wgalloc plan OUT_DIR/train-....csv`.

use std::fmt::Write as _;
use std::path::PathBuf;

use wgalloc::plan::offline::workload::large_suite;

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
    std::fs::create_dir_all(&dir)?;
    for problem in large_suite(count) {
        let mut csv = String::from("id,lower,upper,size\n");
        for iv in &problem.intervals {
            writeln!(csv, "{},{},{},{}", iv.id, iv.lower, iv.upper, iv.size)?;
        }
        std::fs::write(dir.join(format!("{}.csv", problem.name)), csv)?;
    }
    println!("wrote {count} instances to {}", dir.display());
    Ok(())
}
