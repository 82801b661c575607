//! What `wgalloc generate` prints: text or one JSON object.

use std::time::Duration;

use serde_json::{json, Value};
use wgalloc::model::hf::{
    BucketKey, FitReport, FitRequest, Generation, Gpt2Config, MemoryReport, StepReport, WorstCase,
};

/// What a generation run produced and measured.
pub struct RunFacts<'a> {
    /// The adapter, in words.
    pub adapter: String,
    /// Where the weights came from.
    pub source: String,
    /// The model's config.
    pub config: &'a Gpt2Config,
    /// Tokens and times.
    pub generation: &'a Generation,
    /// The generated text, when a tokenizer applies.
    pub text: Option<String>,
    /// Every step.
    pub steps: &'a [StepReport],
    /// Memory.
    pub memory: MemoryReport,
    /// The ggml-style worst-case reservation for the model as it ran.
    pub worst_case: WorstCase,
    /// One-time pipeline build.
    pub pipeline_time: Duration,
    /// The comparison with the CPU reference, when asked for.
    pub check: Option<CpuCheck>,
    /// Each bucket's proof, when asked for: the bucket, whether it verified, and its
    /// mismatches.
    pub proofs: Vec<(BucketKey, bool, u32)>,
    /// How weights, activations and the KV cache's pages were stored.
    pub dtype: wgalloc::exec::StorageType,
}

/// The device's generation against the CPU reference's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuCheck {
    /// Whether the generated tokens are the same.
    pub tokens_match: bool,
    /// The largest `|gpu - cpu|` over every step's logits.
    pub max_abs_error: f32,
    /// The largest `|cpu|` logit.
    pub max_abs_logit: f32,
    /// The relative tolerance: 1e-3 for f32 storage, the f16 tolerance
    /// ([`wgalloc::model::LOGITS_TOLERANCE_F16`]) for f16.
    pub tolerance: f32,
    /// Tokens match and every logit is within `tolerance` x max(1, max |logit|).
    pub passed: bool,
}

impl CpuCheck {
    /// Compares two generations of the same prompt, logits within `tolerance` x
    /// max(1, max |logit|).
    pub fn within(gpu: &Generation, cpu: &Generation, tolerance: f32) -> CpuCheck {
        let mut max_abs_error = 0f32;
        let mut max_abs_logit = 0f32;
        for (g, c) in gpu.step_logits.iter().zip(&cpu.step_logits) {
            for (a, b) in g.iter().zip(c) {
                max_abs_error = max_abs_error.max((a - b).abs());
                max_abs_logit = max_abs_logit.max(b.abs());
            }
        }
        let tokens_match = gpu.generated_ids == cpu.generated_ids;
        CpuCheck {
            tokens_match,
            max_abs_error,
            max_abs_logit,
            tolerance,
            passed: tokens_match && max_abs_error <= tolerance * max_abs_logit.max(1.0),
        }
    }
}

/// Counts over a set of steps.
#[derive(Default)]
struct Counts {
    steps: usize,
    planned: usize,
    buffers: usize,
    bind_groups: usize,
    pipelines: usize,
}

impl Counts {
    fn of<'a>(steps: impl Iterator<Item = &'a StepReport>) -> Counts {
        let mut c = Counts::default();
        for s in steps {
            c.steps += 1;
            c.planned += usize::from(s.planned);
            c.buffers += s.buffers_created;
            c.bind_groups += s.bind_groups_created;
            c.pipelines += s.pipelines_built;
        }
        c
    }

    fn json(&self) -> Value {
        json!({
            "steps": self.steps,
            "planned": self.planned,
            "buffers_created": self.buffers,
            "bind_groups_created": self.bind_groups,
            "pipelines_built": self.pipelines,
        })
    }
}

fn is_decode(s: &StepReport) -> bool {
    matches!(s.key, BucketKey::Step { rows: 1, .. })
}

/// Decode steps after warm-up: not the first step of their bucket.
fn steady(steps: &[StepReport]) -> Vec<&StepReport> {
    let mut seen = std::collections::BTreeSet::new();
    steps
        .iter()
        .filter(|s| {
            let first = seen.insert(s.key);
            is_decode(s) && !first
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Option<Duration> {
    v.sort();
    v.get(v.len() / 2).copied()
}

fn key_json(key: &BucketKey) -> Value {
    match key {
        BucketKey::Step { rows, slots, .. } => json!({"rows": rows, "page_slots": slots}),
        BucketKey::Recompute { rows } => json!({"rows": rows, "recompute": true}),
    }
}

fn key_text(key: &BucketKey) -> String {
    match key {
        BucketKey::Step { rows, slots, .. } => format!("{rows} token(s), {slots} page slot(s)"),
        BucketKey::Recompute { rows } => format!("recompute of {rows} tokens"),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The decode steps' counts and medians, shared by both printers.
struct DecodeSummary {
    all: Counts,
    decode: Counts,
    warm: Counts,
    host: Option<Duration>,
    encode: Option<Duration>,
    submit: Option<Duration>,
    ahead: Option<Duration>,
    dispatches: Option<usize>,
    step_wall: Option<Duration>,
    gpu: Option<Duration>,
}

impl DecodeSummary {
    fn of(steps: &[StepReport]) -> DecodeSummary {
        let steady = steady(steps);
        DecodeSummary {
            all: Counts::of(steps.iter()),
            decode: Counts::of(steps.iter().filter(|s| is_decode(s))),
            warm: Counts::of(steady.iter().copied()),
            host: median(steady.iter().map(|s| s.host_time).collect()),
            encode: median(steady.iter().map(|s| s.encode_time).collect()),
            submit: median(steady.iter().map(|s| s.submit_time).collect()),
            ahead: median(steady.iter().map(|s| s.encode_ahead_time).collect()),
            dispatches: steady.iter().map(|s| s.dispatches).max(),
            step_wall: median(steady.iter().map(|s| s.wall_time()).collect()),
            gpu: median(steady.iter().filter_map(|s| s.gpu_time).collect()),
        }
    }
}

/// Prints a generation run, as JSON or as text.
pub fn print_generation(f: &RunFacts<'_>, as_json: bool) {
    let summary = DecodeSummary::of(f.steps);
    if as_json {
        println!("{}", generation_json(f, &summary));
    } else {
        print_generation_text(f, &summary);
    }
}

/// A generation run as one JSON value.
fn generation_json(f: &RunFacts<'_>, d: &DecodeSummary) -> Value {
    let g = f.generation;
    let m = &f.memory;
    let DecodeSummary {
        host,
        encode,
        submit,
        ahead,
        dispatches,
        step_wall,
        gpu,
        ..
    } = *d;
    let buckets: Vec<Value> = m
        .buckets
        .iter()
        .map(|b| {
            json!({
                "bucket": key_json(&b.key),
                "nodes": b.nodes,
                "plan_bytes": b.plan_bytes,
                "lower_bound_bytes": b.lower_bound,
                "runs": b.runs,
                "plan_seconds": b.plan_time.as_secs_f64(),
            })
        })
        .collect();
    json!({
        "adapter": f.adapter,
        "weights": f.source,
        "dtype": f.dtype.name(),
        "config": f.config,
        "prompt_ids": g.prompt_ids,
        "generated_ids": g.generated_ids,
        "text": f.text,
        "proofs": f.proofs.iter().map(|(key, verified, mismatches)| json!({
            "bucket": key_json(key),
            "verified": verified,
            "mismatches": mismatches,
        })).collect::<Vec<_>>(),
        "cpu_check": f.check.map(|c| json!({
            "tokens_match": c.tokens_match,
            "max_abs_error": c.max_abs_error,
            "max_abs_logit": c.max_abs_logit,
            "tolerance": c.tolerance,
            "passed": c.passed,
        })),
        "timings": {
            "pipelines_seconds": f.pipeline_time.as_secs_f64(),
            "prefill_seconds": g.prefill_time.as_secs_f64(),
            "prefill_tokens_per_second": g.prefill_tokens_per_second(),
            "decode_steps": g.decode_times.len(),
            "decode_tokens_per_second": g.decode_tokens_per_second(),
            "decode_step_median_seconds": step_wall.map(|d| d.as_secs_f64()),
            "decode_host_median_seconds": host.map(|d| d.as_secs_f64()),
            "decode_encode_median_seconds": encode.map(|d| d.as_secs_f64()),
            "decode_submit_median_seconds": submit.map(|d| d.as_secs_f64()),
            "decode_encode_ahead_median_seconds": ahead.map(|d| d.as_secs_f64()),
            "decode_dispatches": dispatches,
            "decode_gpu_median_seconds": gpu.map(|d| d.as_secs_f64()),
        },
        "steps": {"all": d.all.json(), "decode": d.decode.json(), "decode_after_warm_up": d.warm.json()},
        "memory": {
            "weights_bytes": m.weight_bytes,
            "host_embedding_bytes": m.host_embedding_bytes,
            "lm_head_pieces": m.head_pieces,
            "kv_reserved_bytes": m.kv.reserved_bytes + m.kv.table_bytes,
            "kv_used_bytes": m.kv.used_bytes,
            "kv_pages": m.kv.pages,
            "kv_tokens": m.kv.tokens,
            "activation_bytes": m.activation_bytes,
            "planned_device_bytes": m.planned_device_bytes,
            "driver_allocated_bytes": m.driver_bytes.map(|b| b.0),
            "driver_reserved_bytes": m.driver_bytes.map(|b| b.1),
            "buckets": buckets,
            "ggml_worst_case": f.worst_case,
        },
    })
}

/// A generation run as text: the run, then its timings, then its memory.
fn print_generation_text(f: &RunFacts<'_>, d: &DecodeSummary) {
    print_run_header(f);
    print_timings(f, d);
    print_memory(f);
}

/// The adapter, model, tokens, CPU check and proofs of a generation run.
fn print_run_header(f: &RunFacts<'_>) {
    let g = f.generation;
    let c = f.config;
    println!("adapter  {}", f.adapter);
    println!(
        "model    GPT-2 {}: {} layers, width {}, {} heads, vocab {}, {} positions ({:.2} M parameters)",
        f.source,
        c.n_layer,
        c.n_embd,
        c.n_head,
        c.vocab_size,
        c.n_positions,
        c.parameters() as f64 / 1e6
    );
    println!(
        "storage  {} (weights, activations, KV-cache pages)",
        f.dtype.name()
    );
    println!(
        "prompt   {} tokens: {}",
        g.prompt_ids.len(),
        ids(&g.prompt_ids)
    );
    println!("tokens   {}", ids(&g.generated_ids));
    if let Some(text) = &f.text {
        println!("text     {text:?}");
    }
    if let Some(c) = &f.check {
        println!(
            "check    CPU reference: tokens {}, max |gpu - cpu| = {:.3e} (tolerance {:.0e} x max(1, {:.3})): {}",
            if c.tokens_match { "identical" } else { "DIFFER" },
            c.max_abs_error,
            c.tolerance,
            c.max_abs_logit,
            if c.passed { "PASS" } else { "FAIL" }
        );
    }
    if !f.proofs.is_empty() {
        let failed: Vec<String> = f
            .proofs
            .iter()
            .filter(|p| !p.1)
            .map(|(key, _, m)| format!("{} ({m} mismatches)", key_text(key)))
            .collect();
        if failed.is_empty() {
            println!(
                "proof    {} bucket plan(s) proved with the KV cache live: 0 mismatches",
                f.proofs.len()
            );
        } else {
            println!("proof    FAILED: {}", failed.join(", "));
        }
    }
}

/// Prefill and decode rates, and what the decode steps created.
fn print_timings(f: &RunFacts<'_>, d: &DecodeSummary) {
    let g = f.generation;
    let DecodeSummary {
        host,
        encode,
        submit,
        ahead,
        dispatches,
        step_wall,
        gpu,
        ..
    } = *d;
    let (all, warm) = (&d.all, &d.warm);
    println!(
        "prefill  {} tokens in {:.2} ms: {:.1} tokens/s",
        g.prompt_ids.len(),
        ms(g.prefill_time),
        g.prefill_tokens_per_second()
    );
    if let Some(tps) = g.decode_tokens_per_second() {
        println!(
            "decode   {} steps: {tps:.1} tokens/s; median step {:.2} ms (host {:.1} us up to and with the submit, {:.1} us of it the submit; GPU {})",
            g.decode_times.len(),
            step_wall.map_or(0.0, ms),
            host.map_or(0.0, us),
            submit.map_or(0.0, us),
            gpu.map_or("n/a".to_string(), |d| format!("{:.2} ms", ms(d)))
        );
        if let Some(n) = dispatches {
            println!(
                "         {n} dispatches a step, recorded ahead while the device ran the step before ({:.1} us; {:.1} us left in the step)",
                ahead.map_or(0.0, us),
                encode.map_or(0.0, us)
            );
        }
    }
    println!(
        "steps    {} in all: {} planned (a new bucket each), {} buffers, {} bind groups, {} pipelines created",
        all.steps, all.planned, all.buffers, all.bind_groups, all.pipelines
    );
    println!(
        "         {} decode steps after warm-up (not their bucket's first): {} planned, {} buffers, {} bind groups, {} pipelines created",
        warm.steps, warm.planned, warm.buffers, warm.bind_groups, warm.pipelines
    );
}

/// Weights, KV cache, activations and the ggml worst case of a generation run.
fn print_memory(f: &RunFacts<'_>) {
    let m = &f.memory;
    println!(
        "memory   weights {} B on the device (LM head in {} piece(s)); embeddings {} B on the host",
        m.weight_bytes, m.head_pieces, m.host_embedding_bytes
    );
    println!(
        "         kv cache {} B reserved ({} page(s) + table), {} B used by {} tokens",
        m.kv.reserved_bytes + m.kv.table_bytes,
        m.kv.pages,
        m.kv.used_bytes,
        m.kv.tokens
    );
    println!(
        "         activations {} B, one reservation shared by {} bucket(s):",
        m.activation_bytes,
        m.buckets.len()
    );
    for b in &m.buckets {
        println!(
            "           {:<32} {:>10} B planned, bound {:>10} B, {} run(s)",
            key_text(&b.key),
            b.plan_bytes,
            b.lower_bound,
            b.runs
        );
    }
    print_worst_case(&f.worst_case, m.activation_bytes);
    let driver = m
        .driver_bytes
        .map_or(String::new(), |(allocated, reserved)| {
            format!("; the driver: {allocated} B allocated in {reserved} B of memory blocks")
        });
    println!(
        "device   {} B planned (weights + kv cache + activations){driver}",
        m.planned_device_bytes
    );
}

/// The ggml-style worst case beside `ours` (bytes of activations).
fn print_worst_case(w: &WorstCase, ours: u64) {
    let times = |b: u64| b as f64 / ours.max(1) as f64;
    println!(
        "ggml     worst case planned with the ggml planner ({} token(s) x {} context, {} page slot(s)): {} B with the last row's logits ({:.2}x ours), {} B with every row's ({:.2}x)",
        w.rows,
        w.context,
        w.slots,
        w.ggml_last_logit_bytes,
        times(w.ggml_last_logit_bytes),
        w.ggml_all_logits_bytes,
        times(w.ggml_all_logits_bytes)
    );
}

fn ids(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}

/// Prints a `--dry-run`.
pub fn print_dry_run(
    c: &Gpt2Config,
    r: &FitReport,
    adapter: Option<&str>,
    request: &FitRequest,
    as_json: bool,
) {
    if as_json {
        let out = json!({
            "adapter": adapter,
            "max_storage_binding_bytes": request.max_binding,
            "max_buffer_bytes": request.max_buffer,
            "budget_bytes": request.budget,
            "dtype": request.dtype,
            "config": c,
            "fit": r,
        });
        println!("{out}");
        return;
    }
    match adapter {
        Some(a) => println!("adapter  {a}"),
        None => println!("adapter  none found: checked against lavapipe's limits"),
    }
    println!(
        "limits   max storage binding {} B, max buffer {} B",
        request.max_binding, request.max_buffer
    );
    println!(
        "model    {} layers, width {}, {} heads, vocab {}, {} positions: {:.2} M parameters",
        c.n_layer,
        c.n_embd,
        c.n_head,
        c.vocab_size,
        c.n_positions,
        r.parameters as f64 / 1e6
    );
    println!(
        "storage  {} (weights, activations and KV pages)",
        format!("{:?}", request.dtype).to_lowercase()
    );
    println!(
        "weights  {} B on the device (LM head in {} piece(s)), {} B of embeddings on the host",
        r.weight_bytes, r.head_pieces, r.host_embedding_bytes
    );
    println!(
        "kv cache {} B at {} tokens (pages of {} tokens, {} B)",
        r.kv_bytes, r.max_context, r.kv_page_tokens, r.kv_page_bytes
    );
    for b in &r.buckets {
        println!(
            "bucket   {:>4} token(s) a step: {} nodes, activations {} B (lower bound {} B)",
            b.rows, b.nodes, b.plan_bytes, b.lower_bound_bytes
        );
    }
    println!(
        "total    {} B (weights + kv cache at the longest context + the largest bucket)",
        r.total_bytes
    );
    print_worst_case(&r.worst_case, r.activation_bytes);
    if r.limit_problems.is_empty() {
        println!("fits     every binding and buffer within the device's limits");
    } else {
        for p in &r.limit_problems {
            println!("refused  {p}");
        }
    }
    match (request.budget, r.fits_budget) {
        (Some(b), Some(true)) => println!("budget   {b} B: fits"),
        (Some(b), _) => println!("budget   {b} B: does not fit"),
        _ => {}
    }
    println!("longest  context that fits: {} tokens", r.longest_context);
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgalloc::model::hf::LogitRows;

    fn generation(ids: Vec<u32>, logits: Vec<Vec<f32>>) -> Generation {
        Generation {
            prompt_ids: vec![1],
            generated_ids: ids,
            step_logits: logits,
            prefill_time: Duration::ZERO,
            decode_times: Vec::new(),
        }
    }

    #[test]
    fn the_cpu_check_needs_the_same_tokens_and_close_logits() {
        let cpu = generation(vec![1, 0], vec![vec![0.0, 10.0], vec![5.0, 1.0]]);
        let same = generation(vec![1, 0], vec![vec![0.001, 10.0], vec![5.0, 1.0]]);
        assert!(CpuCheck::within(&same, &cpu, 1e-3).passed);
        let far = generation(vec![1, 0], vec![vec![0.2, 10.0], vec![5.0, 1.0]]);
        assert!(!CpuCheck::within(&far, &cpu, 1e-3).passed);
        let other = generation(vec![1, 1], vec![vec![0.0, 10.0], vec![5.0, 1.0]]);
        let check = CpuCheck::within(&other, &cpu, 1e-3);
        assert!(!check.tokens_match && !check.passed);
    }

    fn step(rows: usize, slots: u32) -> StepReport {
        StepReport {
            key: BucketKey::Step {
                rows,
                slots,
                logits: LogitRows::Last,
            },
            past: 0,
            planned: false,
            buffers_created: 0,
            bind_groups_created: 0,
            pipelines_built: 0,
            host_time: Duration::ZERO,
            encode_time: Duration::ZERO,
            submit_time: Duration::ZERO,
            encode_ahead_time: Duration::ZERO,
            wait_time: Duration::ZERO,
            gpu_time: None,
            readback_time: Duration::ZERO,
            dispatches: 0,
        }
    }

    #[test]
    fn steady_decode_steps_leave_out_each_buckets_first_and_prefill() {
        let steps = [step(8, 1), step(1, 1), step(1, 1), step(1, 2), step(1, 2)];
        let steady = steady(&steps);
        assert_eq!(steady.len(), 2);
        assert!(steady.iter().all(|s| is_decode(s)));
    }
}
