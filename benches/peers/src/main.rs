//! wgalloc beside the allocators people use: every trace in `traces/` and every ONNX
//! file in `onnx/` replayed through CubeCL's memory management (as burn's wgpu backend
//! configures it), offset-allocator, range-alloc and greedy by size over whole
//! buffers, and planned by wgalloc's `ggml` and `best`. Prints one markdown table of
//! peak bytes, the geometric mean over the strict lower bound and the time each took.
//!
//! `cargo run --release -p wgalloc-peers [-- ROOT]` (ROOT: the repository, default `.`;
//! `WGALLOC_BENCH_QUICK=1` times one repetition instead of the best of five).

mod arena;
mod cubecl;
mod error;
mod greedy;
mod replay;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wgalloc_plan::graph::{read_onnx, read_trace, Graph, OnnxOptions};
use wgalloc_plan::plan::{lower_bounds, BufferTypeDesc, Planner};

use crate::cubecl::{cubecl_peak, CubeclLimits, CUBECL};
use crate::error::{PeersError, Result, WgallocError};
use crate::replay::Replay;

/// One network to replay.
struct Network {
    name: String,
    graph: Graph,
    strict: u64,
}

/// A column of the table: a name, whether it is online, and how to get its bytes.
struct Column {
    name: &'static str,
    kind: &'static str,
    run: fn(&Network, &Replay) -> Result<u64>,
}

/// One cell: bytes and the best time over the repetitions.
#[derive(Clone, Copy)]
struct Cell {
    bytes: u64,
    time: Duration,
}

fn wgalloc_plan(network: &Network, planner: &str) -> Result<u64> {
    let wrap = |source: WgallocError| PeersError::Wgalloc {
        network: network.name.clone(),
        source,
    };
    let planner = Planner::from_name(planner).map_err(|e| wrap(e.into()))?;
    let storage = BufferTypeDesc::new(
        "storage",
        replay::GRANULE,
        CubeclLimits::LAVAPIPE.max_page_size,
    )
    .map_err(|e| wrap(e.into()))?;
    let plan = planner
        .plan_graph(&network.graph, &storage)
        .map_err(|e| wrap(e.into()))?;
    Ok(plan.total_size())
}

fn columns() -> Vec<Column> {
    vec![
        Column {
            name: CUBECL,
            kind: "online, pages",
            run: |_, r| cubecl_peak(r, CubeclLimits::LAVAPIPE),
        },
        Column {
            name: arena::OFFSET_ALLOCATOR,
            kind: "online",
            run: |_, r| arena::offset_allocator_peak(r),
        },
        Column {
            name: arena::RANGE_ALLOC,
            kind: "online",
            run: |_, r| arena::range_alloc_peak(r),
        },
        Column {
            name: greedy::GREEDY_BY_SIZE,
            kind: "offline, whole buffers",
            run: |_, r| Ok(greedy::greedy_by_size_total(r)),
        },
        Column {
            name: "wgalloc ggml",
            kind: "online walk, in place",
            run: |n, _| wgalloc_plan(n, "ggml"),
        },
        Column {
            name: "wgalloc best",
            kind: "offline, in place",
            run: |n, _| wgalloc_plan(n, "best"),
        },
    ]
}

/// The files to replay: `traces/*.json`, then `onnx/*.onnx`, each sorted by name.
fn inputs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    for (dir, ext) in [("traces", "json"), ("onnx", "onnx")] {
        let dir = root.join(dir);
        let entries = std::fs::read_dir(&dir).map_err(|source| PeersError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        files.sort();
        all.extend(files);
    }
    if all.is_empty() {
        return Err(PeersError::NothingToReplay {
            root: root.display().to_string(),
        });
    }
    Ok(all)
}

fn load(path: &Path) -> Result<Network> {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = file.trim_end_matches(".json").to_string();
    let wrap = |source: WgallocError| PeersError::Wgalloc {
        network: file.clone(),
        source,
    };
    let graph = if file.ends_with(".onnx") {
        read_onnx(path, &OnnxOptions::default()).map_err(|e| wrap(e.into()))?
    } else {
        read_trace(path).map_err(|e| wrap(e.into()))?
    };
    let strict = lower_bounds(&graph).map_err(|e| wrap(e.into()))?.strict;
    Ok(Network {
        name,
        graph,
        strict,
    })
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn millis(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} us")
    } else {
        format!("{:.2} ms", us / 1e3)
    }
}

fn run() -> Result<()> {
    let root = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let reps = if std::env::var_os("WGALLOC_BENCH_QUICK").is_some() {
        1
    } else {
        5
    };
    let columns = columns();
    let mut rows: Vec<(Network, Vec<Cell>)> = Vec::new();
    for path in inputs(&root)? {
        let network = load(&path)?;
        let replay = Replay::of(&network.graph);
        let live_peak = replay.live_peak();
        let mut cells = Vec::new();
        for column in &columns {
            let mut best: Option<Cell> = None;
            for _ in 0..reps {
                let start = Instant::now();
                let bytes = (column.run)(&network, &replay)?;
                let time = start.elapsed();
                best = Some(match best {
                    Some(b) if b.time <= time => Cell { bytes, ..b },
                    _ => Cell { bytes, time },
                });
            }
            if let Some(cell) = best {
                if column.kind.starts_with("online,") || column.kind == "online" {
                    // No allocator without in-place writes can hold less than what is
                    // live at once: a figure below it would be a bug in the replay.
                    if cell.bytes < live_peak {
                        eprintln!(
                            "warning: {} on {}: {} bytes, below the {} bytes live at once",
                            column.name, network.name, cell.bytes, live_peak
                        );
                    }
                }
                cells.push(cell);
            }
        }
        rows.push((network, cells));
    }

    let header: Vec<&str> = columns.iter().map(|c| c.name).collect();
    println!(
        "peak bytes (alignment 32; lavapipe's limits for CubeCL and wgalloc: 128 MiB pages)\n"
    );
    println!("| network | strict bound | {} |", header.join(" | "));
    println!("| --- | ---: |{}", " ---: |".repeat(columns.len()));
    for (network, cells) in &rows {
        let smallest = cells.iter().map(|c| c.bytes).min().unwrap_or(0);
        let shown: Vec<String> = cells
            .iter()
            .map(|c| {
                let b = thousands(c.bytes);
                if c.bytes == smallest {
                    format!("**{b}**")
                } else {
                    b
                }
            })
            .collect();
        println!(
            "| {} | {} | {} |",
            network.name,
            thousands(network.strict),
            shown.join(" | ")
        );
    }
    let means: Vec<f64> = (0..columns.len())
        .map(|i| {
            let logs: f64 = rows
                .iter()
                .map(|(n, cells)| (cells[i].bytes as f64 / n.strict.max(1) as f64).ln())
                .sum();
            (logs / rows.len().max(1) as f64).exp()
        })
        .collect();
    let lowest = means.iter().copied().fold(f64::INFINITY, f64::min);
    let geomean: Vec<String> = means
        .iter()
        .map(|&m| {
            if m == lowest {
                format!("**{m:.3}**")
            } else {
                format!("{m:.3}")
            }
        })
        .collect();
    println!(
        "| geometric mean / strict bound ({} networks) | 1 | {} |",
        rows.len(),
        geomean.join(" | ")
    );
    let times: Vec<String> = (0..columns.len())
        .map(|i| millis(rows.iter().map(|(_, cells)| cells[i].time).sum()))
        .collect();
    println!(
        "| time, all networks (best of {reps} each) | | {} |",
        times.join(" | ")
    );
    let kinds: Vec<&str> = columns.iter().map(|c| c.kind).collect();
    println!("| kind | | {} |", kinds.join(" | "));

    println!("\ntime per network (best of {reps})\n");
    println!("| network | {} |", header.join(" | "));
    println!("| --- |{}", " ---: |".repeat(columns.len()));
    for (network, cells) in &rows {
        let t: Vec<String> = cells.iter().map(|c| millis(c.time)).collect();
        println!("| {} | {} |", network.name, t.join(" | "));
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}
