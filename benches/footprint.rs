//! Footprints of every planner on every trace and interval CSV in the repository, as
//! one markdown table: size, lower bound, ggml's walk, each offline strategy, `best`
//! (the default planner, as the CLI runs it), best / bound and best's time.
//!
//! `cargo bench --bench footprint [-- NAME]` runs every instance (dsa/, dsa/held-out/,
//! traces/; or those whose name
//! contains NAME). `WGALLOC_BENCH_QUICK=1` leaves out the slow single strategies
//! (`search`, `climb`) and gives `best` a 1 s time limit per instance. Interval files
//! named `X.CAPACITY.csv` (MiniMalloc's naming) are planned to that capacity, as
//! `wgalloc plan X.CAPACITY.csv --capacity CAPACITY` does. Traces are planned with
//! alignment 32 and a 2 GiB max size, as `wgalloc plan` does. A final line gives the
//! geometric mean of best / bound over the traces.
//!
//! Then the generated set (`wgalloc::plan::offline::generate::suite`: half guillotine,
//! half not, 150 to 500 buffers, each tiling 1,048,576 x 1,048,576 exactly): `best` at
//! capacity 1,048,576 with a time limit per instance; it prints how many fit, the
//! median, 95th-percentile and worst time of those that fit, and the ones that do not.
//! `WGALLOC_BENCH_GEN=N` sets the count (200; 40 when quick; 0 skips it),
//! `WGALLOC_BENCH_GEN_LIMIT=S` the limit in seconds (2; 1 when quick). The set runs
//! unless a NAME is given that is not part of `generated`.
//!
//! Last, the generated large set (`wgalloc::plan::offline::workload::large_suite`:
//! training steps of 5,000 to 30,000 buffers, and as many random parts of
//! dsa/iopddl_S_1.csv keeping 50% to 95% of it): the skyline alone and `best` without a
//! capacity, each one's peak over the bound and time. `WGALLOC_BENCH_LARGE=N` sets the
//! count (6; 2 when quick; 0 skips it); it runs unless a NAME is given that is not part
//! of `large`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use wgalloc::graph::{read_trace, Graph};
use wgalloc::plan::offline::generate::{self, Shape};
use wgalloc::plan::offline::workload;
use wgalloc::plan::offline::Strategy;
use wgalloc::plan::{
    lower_bounds, plan, plan_intervals, BufferTypeDesc, IntervalProblem, PlanOptions, Planner,
};

/// What a planning call may spend and aim at (made into [`PlanOptions`] per planner).
#[derive(Debug, Clone, Copy, Default)]
struct PlanLimits {
    capacity: Option<u64>,
    time_limit: Option<Duration>,
}

impl PlanLimits {
    fn options(&self, planner: Planner) -> PlanOptions {
        PlanOptions {
            capacity: self.capacity,
            time_limit: self.time_limit,
            ..PlanOptions::with_planner(planner)
        }
    }
}

/// The capacity in a MiniMalloc-style file name (`A.1048576.csv`).
fn capacity_in_name(path: &Path) -> Option<u64> {
    let stem = path.file_stem()?.to_str()?;
    stem.rsplit_once('.')?.1.parse().ok()
}

/// One planner's result: bytes (or why it failed) and time.
struct Cell {
    bytes: Option<u64>,
    seconds: f64,
}

impl Cell {
    fn measure(run: impl FnOnce() -> Option<u64>) -> Cell {
        let started = Instant::now();
        let bytes = run();
        Cell {
            bytes,
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    fn text(&self, bound: u64) -> String {
        match self.bytes {
            Some(b) if bound > 0 => {
                // Display only.
                let over = (b as f64 / bound as f64 - 1.0) * 100.0;
                format!("{b} ({over:+.2}%)")
            }
            Some(b) => b.to_string(),
            None => String::from("error"),
        }
    }
}

struct Row {
    name: String,
    n: usize,
    bound: u64,
    capacity: Option<u64>,
    ggml: Cell,
    strategies: Vec<Cell>,
    best: Cell,
}

impl Row {
    fn print(&self) {
        let mut cells = vec![
            self.name.clone(),
            self.n.to_string(),
            self.bound.to_string(),
            self.capacity.map_or(String::from("-"), |c| c.to_string()),
            self.ggml.text(self.bound),
        ];
        cells.extend(self.strategies.iter().map(|c| c.text(self.bound)));
        cells.push(
            self.best
                .bytes
                .map_or(String::from("error"), |b| b.to_string()),
        );
        cells.push(ratio(self.best.bytes, self.bound));
        cells.push(match (self.best.bytes, self.capacity) {
            (Some(b), Some(c)) => if b <= c { "yes" } else { "NO" }.to_string(),
            (Some(b), None) => match self.ggml.bytes {
                Some(g) if b > g => String::from("NO (above ggml)"),
                _ => String::from("yes"),
            },
            (None, _) => String::from("NO"),
        });
        cells.push(format!("{:.1}", self.best.seconds * 1e3));
        println!("| {} |", cells.join(" | "));
    }
}

fn ratio(bytes: Option<u64>, bound: u64) -> String {
    match bytes {
        // Display only.
        Some(b) if bound > 0 => format!("{:.4}", b as f64 / bound as f64),
        _ => String::from("-"),
    }
}

fn main() {
    let quick = std::env::var_os("WGALLOC_BENCH_QUICK").is_some();
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| only.as_ref().is_none_or(|o| name.contains(o.as_str()));
    let strategies: Vec<Strategy> = Strategy::ALL
        .into_iter()
        .filter(|&s| s != Strategy::Best)
        .filter(|&s| !quick || !matches!(s, Strategy::Search | Strategy::Climb))
        .collect();
    let best_limits = |capacity: Option<u64>| PlanLimits {
        capacity,
        time_limit: quick.then_some(Duration::from_secs(1)),
    };
    let mut header = vec!["instance", "n", "lower bound", "capacity", "ggml"];
    header.extend(strategies.iter().map(|s| s.name()));
    header.extend(["best", "best / bound", "fits", "best ms"]);
    println!("| {} |", header.join(" | "));
    println!("|{}", " --- |".repeat(header.len()));
    let interval_files = common::files("dsa", "csv")
        .into_iter()
        .chain(common::files("dsa/held-out", "csv"));
    for path in interval_files {
        let problem = match IntervalProblem::read_csv(&path) {
            Ok(p) => p,
            Err(e) => {
                println!("{}: {e}", path.display());
                continue;
            }
        };
        if !wanted(&problem.name) {
            continue;
        }
        let capacity = capacity_in_name(&path);
        let plan = |planner: Planner, limits: &PlanLimits| {
            Cell::measure(|| {
                let plan = plan_intervals(&problem, 1, &limits.options(planner)).ok()?;
                problem.verify(&plan).ok()?;
                Some(plan.peak)
            })
        };
        let unlimited = PlanLimits::default();
        let row = Row {
            name: problem.name.clone(),
            n: problem.intervals.len(),
            bound: problem.lower_bound(),
            capacity,
            ggml: plan(Planner::Ggml, &unlimited),
            strategies: strategies
                .iter()
                .map(|&s| plan(Planner::Offline(s), &unlimited))
                .collect(),
            best: plan(Planner::Offline(Strategy::Best), &best_limits(capacity)),
        };
        row.print();
    }
    let mut log_ratio_sum = 0.0f64;
    let mut traces = 0u32;
    for path in common::files("traces", "json") {
        let graph = match read_trace(&path) {
            Ok(g) => g,
            Err(e) => {
                println!("{}: {e}", path.display());
                continue;
            }
        };
        if !wanted(&graph.name) {
            continue;
        }
        let Some(row) = trace_row(&graph, &strategies, &best_limits(None)) else {
            println!("{}: could not be planned", graph.name);
            continue;
        };
        if let Some(b) = row.best.bytes.filter(|_| row.bound > 0) {
            // Display only.
            log_ratio_sum += (b as f64 / row.bound as f64).ln();
            traces += 1;
        }
        row.print();
    }
    if traces > 0 {
        println!(
            "\ngeometric mean of best / bound over {traces} traces: {:.5}",
            (log_ratio_sum / f64::from(traces)).exp()
        );
    }
    if only
        .as_ref()
        .is_none_or(|o| "generated".contains(o.as_str()))
    {
        generated_set(quick);
    }
    if only.as_ref().is_none_or(|o| "large".contains(o.as_str())) {
        large_set(quick);
    }
}

/// The skyline alone and `best` (as the CLI runs it, no capacity) on the generated
/// large set (`workload::large_suite`) and on parts of S_1
/// (`workload::subsample_suite`): each one's peak over the bound and time.
fn large_set(quick: bool) {
    let count = env_or("WGALLOC_BENCH_LARGE", if quick { 2usize } else { 6 });
    if count == 0 {
        return;
    }
    println!(
        "\nlarge set: {count} instances (`workload::large_suite`) and {count} parts of \
         S_1 (`workload::subsample_suite`), no capacity"
    );
    println!("| instance | n | lower bound | skyline | skyline s | best | best s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut problems = workload::large_suite(count);
    // Parts of the production instance S_1, where there is one.
    let s1 = Path::new(env!("CARGO_MANIFEST_DIR")).join("dsa/iopddl_S_1.csv");
    if let Ok(s1) = IntervalProblem::read_csv(&s1) {
        problems.extend(workload::subsample_suite(&s1, count));
    }
    for problem in problems {
        let bound = problem.lower_bound();
        let run = |strategy: Strategy| {
            Cell::measure(|| {
                let options = PlanOptions::with_planner(Planner::Offline(strategy));
                let plan = plan_intervals(&problem, 1, &options).ok()?;
                problem.verify(&plan).ok()?;
                Some(plan.peak)
            })
        };
        let (skyline, best) = (run(Strategy::Skyline), run(Strategy::Best));
        let over = |cell: &Cell| match cell.bytes {
            // Display only.
            Some(b) if bound > 0 => format!("{:+.6}%", (b as f64 / bound as f64 - 1.0) * 100.0),
            Some(b) => b.to_string(),
            None => String::from("error"),
        };
        println!(
            "| {} | {} | {bound} | {} | {:.2} | {} | {:.2} |",
            problem.name,
            problem.intervals.len(),
            over(&skyline),
            skyline.seconds,
            over(&best),
            best.seconds
        );
    }
}

/// An environment variable parsed as a number, or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `best` on the generated set at its capacity: fits, time distribution, misses.
fn generated_set(quick: bool) {
    let count = env_or("WGALLOC_BENCH_GEN", if quick { 40usize } else { 200 });
    let limit = env_or("WGALLOC_BENCH_GEN_LIMIT", if quick { 1.0f64 } else { 2.0 });
    if count == 0 {
        return;
    }
    let limits = PlanLimits {
        capacity: Some(generate::CAPACITY),
        time_limit: Some(Duration::from_secs_f64(limit)),
    };
    let mut fitted: Vec<(f64, String)> = Vec::new();
    let mut missed: Vec<String> = Vec::new();
    let mut per_shape = [(0usize, 0usize); 2];
    for spec in generate::suite(count) {
        let g = generate::generate(&spec);
        let problem = &g.problem;
        let cell = Cell::measure(|| {
            let plan = plan_intervals(
                problem,
                1,
                &limits.options(Planner::Offline(Strategy::Best)),
            )
            .ok()?;
            problem.verify(&plan).ok()?;
            Some(plan.peak)
        });
        let shape = usize::from(spec.shape == Shape::NonGuillotine);
        per_shape[shape].1 += 1;
        let name = format!("{} (n={})", problem.name, problem.intervals.len());
        match cell.bytes {
            Some(peak) if peak <= generate::CAPACITY => {
                per_shape[shape].0 += 1;
                fitted.push((cell.seconds, name));
            }
            Some(peak) => {
                // Display only.
                let over = (peak as f64 / generate::CAPACITY as f64 - 1.0) * 100.0;
                missed.push(format!("{name}: {over:+.2}% in {:.2} s", cell.seconds));
            }
            None => missed.push(format!("{name}: error")),
        }
    }
    fitted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let at = |q: f64| {
        // Display only: the q-quantile of the fitted times (nearest rank).
        let k = ((q * fitted.len() as f64).ceil() as usize).clamp(1, fitted.len().max(1));
        fitted.get(k - 1).map_or(0.0, |f| f.0)
    };
    println!(
        "\ngenerated set: {count} instances (`generate::suite`), `best` at capacity {} with a {limit} s limit each",
        generate::CAPACITY
    );
    println!("| set | fitted | median s | p95 s | worst s |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    println!(
        "| all | {} / {count} (guillotine {} / {}, non-guillotine {} / {}) | {:.3} | {:.3} | {:.3} |",
        fitted.len(),
        per_shape[0].0,
        per_shape[0].1,
        per_shape[1].0,
        per_shape[1].1,
        at(0.5),
        at(0.95),
        at(1.0)
    );
    if let Some((secs, name)) = fitted.last() {
        println!("slowest fitted: {name} in {secs:.3} s");
    }
    println!("not fitted ({}):", missed.len());
    for m in &missed {
        println!("  {m}");
    }
}

/// A trace's row: alignment 32, max size 2 GiB, as `wgalloc plan` plans traces.
fn trace_row(graph: &Graph, strategies: &[Strategy], best_limits: &PlanLimits) -> Option<Row> {
    let storage = BufferTypeDesc::new("storage", 32, 1 << 31).ok()?;
    let bound = lower_bounds(graph).ok()?.inplace_aware;
    let plan = |planner: Planner, limits: &PlanLimits| {
        Cell::measure(|| {
            let plan = plan(
                graph,
                std::slice::from_ref(&storage),
                &limits.options(planner),
            )
            .ok()?;
            plan.verify(graph).ok()?;
            Some(plan.total_size())
        })
    };
    let unlimited = PlanLimits::default();
    Some(Row {
        name: graph.name.clone(),
        n: graph.planned_tensors().count(),
        bound,
        capacity: None,
        ggml: plan(Planner::Ggml, &unlimited),
        strategies: strategies
            .iter()
            .map(|&s| plan(Planner::Offline(s), &unlimited))
            .collect(),
        best: plan(Planner::Offline(Strategy::Best), best_limits),
    })
}
