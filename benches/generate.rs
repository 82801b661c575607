//! Generation with GPT-2 small's shape (12 layers, width 768, 12 heads, vocabulary
//! 50257, 1024 positions, seeded weights) on planned memory and the paged KV cache:
//! a prefill of 128 tokens (chunks of 64), then 64 greedy decode steps, on the adapter
//! wgpu finds. Prints tokens/s, the host overhead of a decode step after warm-up (bucket
//! lookup, input and block-table writes, the parameters, the pass, the submit: the
//! host's part of the step's critical path; the pass is recorded ahead, while the
//! device runs the step before, and that time is printed apart) against the whole
//! step, the dispatches, what steps created after warm-up, the activations
//! of every bucket against their lower bound, and the activations beside one
//! ggml-style worst-case reservation (the step graph at the largest chunk and the
//! longest context, planned with the ggml planner).
//!
//! `WGALLOC_BENCH_QUICK=1`: 4 layers, width 256, 4 heads (same vocabulary), prefill 32,
//! decode 16. `WGALLOC_GEN_PREFILL=N`, `WGALLOC_GEN_DECODE=N` set the token counts,
//! `WGALLOC_GEN_SHAPE=L,W,H,V,P` another shape (layers, width, heads, vocabulary,
//! positions), `WGALLOC_GEN_PAGE_BYTES=N` the largest KV page (default
//! `DEFAULT_PAGE_BYTES`, 16 MiB: attention takes one dispatch a page and layer, so a
//! sweep of this against the prompt tells a page's cost from a token's).
//! Run: `WGPU_BACKEND=vulkan cargo bench --bench generate`.

use std::time::Duration;

use wgalloc::device::GpuContext;
use wgalloc::model::hf::{
    generate_greedy, BucketKey, Gpt2Config, Gpt2Weights, GpuGpt2, GpuOptions, StepReport,
};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn median_usize(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let quick = std::env::var("WGALLOC_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (config, prefill, decode) = if quick {
        (Gpt2Config::new(4, 256, 4, 50257, 1024), 32, 16)
    } else {
        (Gpt2Config::gpt2_small(), 128, 64)
    };
    // `WGALLOC_GEN_SHAPE=L,W,H,V,P`: another shape (layers, width, heads, vocabulary,
    // positions), e.g. GPT-2 small's dispatches on a narrow model.
    let shape: Option<Vec<usize>> = std::env::var("WGALLOC_GEN_SHAPE")
        .ok()
        .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect());
    let config = match shape.as_deref() {
        Some(&[l, w, h, v, p]) => Gpt2Config::new(l, w, h, v, p),
        _ => config,
    };
    let prefill = env_usize("WGALLOC_GEN_PREFILL", prefill).max(1);
    let decode = env_usize("WGALLOC_GEN_DECODE", decode).max(1);
    let ctx = match GpuContext::from_env() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter ({e})");
            return;
        }
    };
    let weights = Gpt2Weights::seeded(&config, 42);
    let mut options = GpuOptions::default();
    options.max_page_bytes =
        env_usize("WGALLOC_GEN_PAGE_BYTES", options.max_page_bytes as usize) as u64;
    let chunk = options.prefill_chunk;
    let mut gpu = match GpuGpt2::new(&ctx, &config, &weights, options) {
        Ok(gpu) => gpu,
        Err(e) => {
            eprintln!("error ({}): {e}", e.kind());
            return;
        }
    };
    let prompt: Vec<u32> = (0..prefill as u32)
        .map(|i| (i * 7919 + 13) % config.vocab_size as u32)
        .collect();
    // Warm-up: every bucket planned, every KV page taken, every bind group made.
    let warm = generate_greedy(&mut gpu, &prompt, decode + 1);
    let warm_steps = gpu.steps().len();
    let run = generate_greedy(&mut gpu, &prompt, decode + 1);
    let (warm, run) = match (warm, run) {
        (Ok(w), Ok(r)) => (w, r),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error ({}): {e}", e.kind());
            return;
        }
    };
    let steps: Vec<&StepReport> = gpu.steps()[warm_steps..].iter().collect();
    let decode_steps: Vec<&&StepReport> = steps
        .iter()
        .filter(|s| matches!(s.key, BucketKey::Step { rows: 1, .. }))
        .collect();
    let host = median(decode_steps.iter().map(|s| s.host_time).collect());
    let encode = median(decode_steps.iter().map(|s| s.encode_time).collect());
    let submit = median(decode_steps.iter().map(|s| s.submit_time).collect());
    let ahead = median(decode_steps.iter().map(|s| s.encode_ahead_time).collect());
    let dispatches = median_usize(decode_steps.iter().map(|s| s.dispatches).collect());
    let wall = median(decode_steps.iter().map(|s| s.wall_time()).collect());
    let gpu_time = decode_steps
        .iter()
        .filter_map(|s| s.gpu_time)
        .collect::<Vec<_>>();
    let created: (usize, usize, usize, usize) = steps.iter().fold((0, 0, 0, 0), |a, s| {
        (
            a.0 + usize::from(s.planned),
            a.1 + s.buffers_created,
            a.2 + s.bind_groups_created,
            a.3 + s.pipelines_built,
        )
    });
    println!(
        "adapter: {} ({:?}, {:?}){}",
        ctx.info.name,
        ctx.info.backend,
        ctx.info.device_type,
        if ctx.is_cpu_adapter() {
            " -- a software adapter: CPU times, not GPU times"
        } else {
            ""
        }
    );
    println!(
        "model: {} layers, width {}, {} heads, vocab {}, {} positions, seeded; prefill {prefill} (chunks of {chunk}), decode {decode}; same tokens warm and measured: {}",
        config.n_layer,
        config.n_embd,
        config.n_head,
        config.vocab_size,
        config.n_positions,
        warm.generated_ids == run.generated_ids
    );
    println!();
    println!("| phase | tokens | time | tokens/s |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| prefill | {prefill} | {:.1} ms | {:.1} |",
        ms(run.prefill_time),
        run.prefill_tokens_per_second()
    );
    let decode_total: Duration = run.decode_times.iter().sum();
    println!(
        "| decode | {} | {:.1} ms | {:.2} |",
        run.decode_times.len(),
        ms(decode_total),
        run.decode_tokens_per_second().unwrap_or(0.0)
    );
    println!();
    println!("| decode step after warm-up (median) | value |");
    println!("| --- | ---: |");
    println!("| dispatches | {dispatches} |");
    println!(
        "| host, lookup to submit (the step's overhead) | {:.1} us |",
        us(host)
    );
    println!(
        "| of which the executor (parameters, the pass) | {:.1} us |",
        us(encode)
    );
    println!("| of which the submit | {:.1} us |", us(submit));
    println!(
        "| the next pass recorded ahead, during the device's work | {:.1} us |",
        us(ahead)
    );
    println!(
        "| whole step (host, then submit to done) | {:.2} ms |",
        ms(wall)
    );
    println!(
        "| host share of the step | {:.3} % |",
        100.0 * host.as_secs_f64() / wall.as_secs_f64().max(1e-12)
    );
    println!(
        "| GPU time (timestamps) | {} |",
        if gpu_time.is_empty() {
            "n/a".to_string()
        } else {
            format!("{:.2} ms", ms(median(gpu_time)))
        }
    );
    println!(
        "| created in the measured run: plans / buffers / bind groups / pipelines | {} / {} / {} / {} |",
        created.0, created.1, created.2, created.3
    );
    let memory = gpu.memory_report();
    println!();
    println!("| bucket | nodes | activations | lower bound | plan (once) | runs |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for b in &memory.buckets {
        let name = match b.key {
            BucketKey::Step { rows, slots, .. } => format!("{rows} token(s), {slots} page(s)"),
            BucketKey::Recompute { rows } => format!("recompute {rows}"),
        };
        println!(
            "| {name} | {} | {} B | {} B | {:.1} ms | {} |",
            b.nodes,
            b.plan_bytes,
            b.lower_bound,
            ms(b.plan_time),
            b.runs
        );
    }
    // ggml-style: one reservation for the worst step (the largest chunk at the
    // longest context the cache holds), the step graph planned with the ggml planner.
    let decode_plan = memory
        .buckets
        .iter()
        .filter(|b| matches!(b.key, BucketKey::Step { rows: 1, .. }))
        .map(|b| b.plan_bytes)
        .max()
        .unwrap_or(0);
    let ours = memory.activation_bytes.max(1);
    println!();
    match gpu.worst_case() {
        Ok(w) => {
            let ratio = |b: u64| b as f64 / ours as f64;
            println!(
                "| activations (chunk {} x context {}, {} page slots, {} nodes) | bytes | vs ours |",
                w.rows, w.context, w.slots, w.nodes
            );
            println!("| --- | ---: | ---: |");
            println!(
                "| ours: one reservation shared by the buckets that ran (best planner) | {} B | 1.00x |",
                memory.activation_bytes
            );
            println!(
                "| ours: the decode bucket's plan alone | {decode_plan} B | {:.2}x |",
                ratio(decode_plan)
            );
            println!(
                "| ggml planner, worst case, last row's logits (what generation runs) | {} B | {:.2}x |",
                w.ggml_last_logit_bytes,
                ratio(w.ggml_last_logit_bytes)
            );
            println!(
                "| ggml planner, worst case, every row's logits | {} B | {:.2}x |",
                w.ggml_all_logits_bytes,
                ratio(w.ggml_all_logits_bytes)
            );
            println!(
                "| best planner, worst case, last row's logits | {} B | {:.2}x |",
                w.best_last_logit_bytes,
                ratio(w.best_last_logit_bytes)
            );
        }
        Err(e) => eprintln!("worst case not planned ({}): {e}", e.kind()),
    }
    println!();
    println!(
        "weights {} B on the device (LM head in {} pieces), kv cache {} B reserved / {} B used ({} pages)",
        memory.weight_bytes,
        memory.head_pieces,
        memory.kv.reserved_bytes + memory.kv.table_bytes,
        memory.kv.used_bytes,
        memory.kv.pages
    );
}
