//! Probes that time the search on the shared and generated instances (ignored tests).

use super::*;
use crate::plan::offline::interval_ranges;
use crate::plan::IntervalProblem;

/// Time and nodes to fit each shared dsa instance at 1,048,576:
/// `cargo test --release --lib search::probe -- --ignored --nocapture`
/// (`PROBE=B,E` picks instances, `PROBE_WORK` sets the budget, `PROBE_CAP` another
/// capacity, `PROBE_DIR` another folder of `NAME.1048576.csv` files).
#[test]
#[ignore]
fn dsa_instances_at_capacity() {
    let names = std::env::var("PROBE").unwrap_or_else(|_| "A,B,C,D,E,F".into());
    let budget: u64 = std::env::var("PROBE_WORK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000_000);
    for name in names.split(',') {
        let dir = std::env::var("PROBE_DIR")
            .unwrap_or_else(|_| format!("{}/../../dsa", env!("CARGO_MANIFEST_DIR")));
        let path = format!("{dir}/{name}.1048576.csv");
        let problem = IntervalProblem::read_csv(path.as_ref()).expect("reads");
        let p = Prepared::new(&interval_ranges(&problem), 1).expect("valid");
        let started = std::time::Instant::now();
        let cap: u64 = std::env::var("PROBE_CAP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_048_576);
        let tuning = Tuning {
            lds: std::env::var("PROBE_LDS").is_ok_and(|v| v == "1"),
            orders: std::env::var("PROBE_ORDERS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(3),
            corners: std::env::var("PROBE_CORNERS").map_or(true, |v| v != "0"),
            corners_anywhere: std::env::var("PROBE_CORNERS").is_ok_and(|v| v == "2"),
            cover: std::env::var("PROBE_COVER").map_or(true, |v| v != "0"),
            restart_all: std::env::var("PROBE_RESTART_ALL").is_ok_and(|v| v == "1"),
            threads: std::env::var("PROBE_THREADS").map_or(true, |v| v != "0"),
            rerank: std::env::var("PROBE_RERANK").map_or(true, |v| v != "0"),
            static_too: std::env::var("PROBE_RERANK").is_ok_and(|v| v == "2"),
            memo: std::env::var("PROBE_MEMO").map_or(true, |v| v != "0"),
            restart_nodes: std::env::var("PROBE_RESTART")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1024),
            ..Tuning::default()
        };
        let (found, stats) = Searcher::tuned(&p, tuning).run(cap, budget, None);
        let secs = started.elapsed().as_secs_f64();
        let what = match &found {
            Found::Plan(_, peak) => format!("plan {peak}"),
            other => format!("{other:?}"),
        };
        println!(
            "{name}: {what} in {secs:.3} s, {} nodes, {} memo hits",
            stats.nodes, stats.memo_hits
        );
    }
}
/// Fits of the generated set (`generate::suite`) at its capacity with a fixed work
/// budget per instance (deterministic, unlike the benchmark's time limit):
/// `PROBE_GEN=200 PROBE_WORK=200000000 cargo test --release --lib
/// search::probe::generated -- --ignored --nocapture` (`PROBE_GEN_FROM` skips the
/// first instances, `PROBE_VERBOSE=1` prints every instance).
#[test]
#[ignore]
fn generated_at_capacity() {
    use crate::plan::offline::generate::{generate, suite, CAPACITY};
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let count = var("PROBE_GEN", 40) as usize;
    let from = var("PROBE_GEN_FROM", 0) as usize;
    let budget = var("PROBE_WORK", 200_000_000);
    let verbose = std::env::var_os("PROBE_VERBOSE").is_some();
    let tuning = Tuning {
        lds: var("PROBE_LDS", 0) == 1,
        orders: var("PROBE_ORDERS", 3) as usize,
        corners: var("PROBE_CORNERS", 1) != 0,
        corners_anywhere: var("PROBE_CORNERS", 1) == 2,
        cover: var("PROBE_COVER", 1) == 1,
        restart_nodes: var("PROBE_RESTART", 1024),
        spread_div: var("PROBE_SPREAD", 8) as u32,
        restart_all: var("PROBE_RESTART_ALL", 0) == 1,
        threads: var("PROBE_THREADS", 1) == 1,
        rerank: var("PROBE_RERANK", 1) >= 1,
        static_too: var("PROBE_RERANK", 1) == 2,
        memo: var("PROBE_MEMO", 1) == 1,
    };
    let (mut fitted, mut nodes, mut secs) = (0, 0u64, Vec::new());
    let mut missed = Vec::new();
    for spec in suite(count).into_iter().skip(from) {
        let g = generate(&spec);
        let p = Prepared::new(&interval_ranges(&g.problem), 1).expect("valid");
        let started = std::time::Instant::now();
        let (found, stats) = Searcher::tuned(&p, tuning).run(CAPACITY, budget, None);
        let s = started.elapsed().as_secs_f64();
        nodes += stats.nodes;
        if verbose {
            println!(
                "{} n={}: {:?} {s:.3} s {} nodes, deepest {}",
                g.problem.name,
                p.items.len(),
                matches!(found, Found::Plan(..)),
                stats.nodes,
                stats.deepest
            );
        }
        match found {
            Found::Plan(offsets, peak) => {
                p.assert_valid(&offsets, peak);
                fitted += 1;
                secs.push(s);
            }
            _ => missed.push(g.problem.name.clone()),
        }
    }
    secs.sort_by(f64::total_cmp);
    let q = |f: f64| {
        secs.get(((f * secs.len() as f64).ceil() as usize).max(1) - 1)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "fitted {fitted} / {}; median {:.3} s, p95 {:.3} s, worst {:.3} s; {nodes} nodes; missed {missed:?}",
        count - from.min(count),
        q(0.5),
        q(0.95),
        q(1.0)
    );
}
