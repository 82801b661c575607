//! Offline planners on every shared interval problem and trace: lower bound, each
//! strategy's peak, how far above the bound it lands, and the time it took.
//!
//! `cargo bench --bench offline [-- NAME]` runs every instance (or those whose name
//! contains NAME). `WGALLOC_BENCH_QUICK=1` uses small budgets;
//! `WGALLOC_BENCH_STRATEGIES=search,best` picks strategies;
//! `WGALLOC_BENCH_SEARCH_WORK` and `WGALLOC_BENCH_CLIMB_WORK` override the budgets.

mod common;

use std::time::Instant;

use wgalloc::graph::read_trace;
use wgalloc::plan::offline::{graph_live_ranges, Budget, Strategy};
use wgalloc::plan::{plan, plan_intervals, BufferTypeDesc, IntervalProblem, PlanOptions, Planner};

/// One strategy with explicit budgets, through the one entry point.
fn options(strategy: Strategy, budget: &Budget) -> PlanOptions {
    PlanOptions::with_planner(Planner::Offline(strategy)).budget(*budget)
}

fn percent(peak: u64, bound: u64) -> f64 {
    if bound == 0 {
        0.0
    } else {
        (peak as f64 / bound as f64 - 1.0) * 100.0
    }
}

fn main() {
    let quick = std::env::var_os("WGALLOC_BENCH_QUICK").is_some();
    let budget = if quick {
        Budget {
            search_work: 20_000_000,
            climb_work: 5_000_000,
            ..Budget::default()
        }
    } else {
        let env = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let d = Budget::default();
        Budget {
            search_work: env("WGALLOC_BENCH_SEARCH_WORK", d.search_work),
            climb_work: env("WGALLOC_BENCH_CLIMB_WORK", d.climb_work),
            ..d
        }
    };
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let strategies: Vec<Strategy> = match std::env::var("WGALLOC_BENCH_STRATEGIES") {
        Ok(list) => list.split(',').filter_map(Strategy::from_name).collect(),
        Err(_) => Strategy::ALL.to_vec(),
    };
    println!(
        "{:<22} {:<20} {:>14} {:>14} {:>9} {:>9}",
        "instance", "strategy", "lower bound", "peak", "% above", "ms"
    );
    for path in common::files("dsa", "csv") {
        let problem = match IntervalProblem::read_csv(&path) {
            Ok(p) => p,
            Err(e) => {
                println!("{}: {e}", path.display());
                continue;
            }
        };
        if only
            .as_ref()
            .is_some_and(|o| !problem.name.contains(o.as_str()))
        {
            continue;
        }
        let bound = problem.lower_bound();
        for &strategy in &strategies {
            let started = Instant::now();
            let plan = match plan_intervals(&problem, 1, &options(strategy, &budget)) {
                Ok(p) => p,
                Err(e) => {
                    println!("{} {strategy}: {e}", problem.name);
                    continue;
                }
            };
            let ms = started.elapsed().as_secs_f64() * 1e3;
            let ok = if problem.verify(&plan).is_ok() {
                ""
            } else {
                "  INVALID"
            };
            println!(
                "{:<22} {:<20} {:>14} {:>14} {:>8.3}% {:>9.1}{ok}",
                problem.name,
                strategy.name(),
                bound,
                plan.peak,
                percent(plan.peak, bound),
                ms
            );
        }
    }
    for path in common::files("traces", "json") {
        let graph = match read_trace(&path) {
            Ok(g) => g,
            Err(e) => {
                println!("{}: {e}", path.display());
                continue;
            }
        };
        if only
            .as_ref()
            .is_some_and(|o| !graph.name.contains(o.as_str()))
        {
            continue;
        }
        let Ok(live) = graph_live_ranges(&graph) else {
            continue;
        };
        for alignment in [1u64, 32] {
            let (Ok(bt), Ok(bound)) = (
                BufferTypeDesc::new("storage", alignment, 1 << 40),
                live.live_peak(alignment),
            ) else {
                continue;
            };
            let name = format!("{} a{alignment}", graph.name);
            for &strategy in &strategies {
                let started = Instant::now();
                match plan(
                    &graph,
                    std::slice::from_ref(&bt),
                    &options(strategy, &budget),
                ) {
                    Ok(plan) => {
                        let ms = started.elapsed().as_secs_f64() * 1e3;
                        let total = plan.total_size();
                        println!(
                            "{:<22} {:<20} {:>14} {:>14} {:>8.3}% {:>9.1}",
                            name,
                            strategy.name(),
                            bound,
                            total,
                            percent(total, bound),
                            ms
                        );
                    }
                    Err(e) => println!("{name} {strategy}: {e}"),
                }
            }
        }
    }
}
