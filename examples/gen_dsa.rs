//! Writes generated hard interval instances (see `wgalloc::plan::offline::generate`) as
//! MiniMalloc-style CSV files named `gen-<g|ng>-<seed>.1048576.csv`, each tiling the
//! 1,048,576 x 1,048,576 rectangle exactly (lower bound = capacity = 1,048,576).
//!
//! `cargo run --release --example gen_dsa -- [OUT_DIR] [COUNT]` writes the benchmark's
//! set (`generate::suite(COUNT)`, default 200) to OUT_DIR (default `target/gen-dsa`);
//! plan one with `wgalloc plan OUT_DIR/gen-ng-0001.1048576.csv --capacity 1048576`.

use std::path::PathBuf;

use wgalloc::plan::offline::generate::{generate, suite};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| String::from("target/gen-dsa")),
    );
    let count: usize = match args.next() {
        Some(c) => c.parse()?,
        None => 200,
    };
    std::fs::create_dir_all(&dir)?;
    for spec in suite(count) {
        let g = generate(&spec);
        let path = dir.join(format!("{}.1048576.csv", g.problem.name));
        std::fs::write(&path, g.to_csv())?;
    }
    println!("wrote {count} instances to {}", dir.display());
    Ok(())
}
