//! [`fit`]: before loading anything, from the config alone, what a GPT-2 needs on a
//! device: the weights (as the context allocator packs them), the KV cache at the
//! longest context, each step bucket's activations (planned on the CPU, with their
//! lower bound), whether every binding and buffer fits the device's limits and the
//! whole fits a budget, and the longest context that does; and [`worst_case`], the
//! ggml-style alternative: one reservation for the worst step (the largest chunk at
//! the longest context), planned with the ggml planner.

use serde::Serialize;

use super::step_graph::{build_step_graph, head_pieces, LogitRows, StepAttention};
use super::Gpt2Config;
use crate::graph::DType;
use crate::kv::KvConfig;
use crate::plan::{alloc_ctx_tensors, lower_bounds, plan, BufferTypeDesc, PlanOptions, Planner};

/// The device and run a fit is asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct FitRequest {
    /// The device's `max_storage_buffer_binding_size`.
    pub max_binding: u64,
    /// The device's `max_buffer_size`.
    pub max_buffer: u64,
    /// The device's `min_storage_buffer_offset_alignment`.
    pub alignment: u64,
    /// The most tokens one prefill step runs.
    pub prefill_chunk: usize,
    /// Tokens per KV block.
    pub block_tokens: u32,
    /// The largest KV page in bytes (also capped by a binding).
    pub max_page_bytes: u64,
    /// The longest context wanted (`None`: `n_positions`).
    pub max_context: Option<usize>,
    /// Bytes the model may use on the device in all (`None`: no budget).
    pub budget: Option<u64>,
    /// How weights, activations and KV pages are stored (`DType::F32` or `DType::F16`,
    /// as `generate --dtype`): f16 plans them at half the bytes.
    pub dtype: DType,
}

/// One step bucket's activations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FitBucket {
    /// Tokens in the step.
    pub rows: usize,
    /// Nodes of its graph.
    pub nodes: usize,
    /// Bytes its plan needs.
    pub plan_bytes: u64,
    /// The in-place-aware lower bound.
    pub lower_bound_bytes: u64,
}

/// What a GPT-2 needs on a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FitReport {
    /// Parameters of the model.
    pub parameters: u64,
    /// Bytes of weights on the device (packed, aligned).
    pub weight_bytes: u64,
    /// Bytes of the embedding tables kept on the host.
    pub host_embedding_bytes: u64,
    /// Pieces the LM head is split into (one binding each).
    pub head_pieces: usize,
    /// The longest context asked for.
    pub max_context: usize,
    /// Tokens per KV page and bytes per page.
    pub kv_page_tokens: u64,
    /// Bytes of one KV page.
    pub kv_page_bytes: u64,
    /// Bytes of the KV cache at the longest context (pages and the block table).
    pub kv_bytes: u64,
    /// Each step bucket's activations.
    pub buckets: Vec<FitBucket>,
    /// Bytes of the activation reservation (the largest bucket).
    pub activation_bytes: u64,
    /// Weights, KV cache at the longest context and activations.
    pub total_bytes: u64,
    /// Limits the model breaks (empty when it fits them).
    pub limit_problems: Vec<String>,
    /// Whether the total fits the budget (`None`: no budget).
    pub fits_budget: Option<bool>,
    /// The longest context whose total fits the budget and the limits (`0` when even
    /// one token does not).
    pub longest_context: usize,
    /// The ggml-style worst-case reservation, for comparison with `activation_bytes`.
    pub worst_case: WorstCase,
}

/// One ggml-style worst-case reservation: the step graph at the largest chunk and the
/// longest context (every page slot bound), planned once with the ggml planner
/// ([`Planner::Ggml`], as `ggml_gallocr_reserve` sizes its compute buffer), beside the
/// same graph planned with wgalloc's planner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorstCase {
    /// Tokens in the step (the largest chunk).
    pub rows: usize,
    /// The context it is planned at (the longest).
    pub context: usize,
    /// Page slots its graph binds.
    pub slots: u32,
    /// Nodes of the worst-case graph (last row's logits).
    pub nodes: usize,
    /// The ggml planner's bytes with every row's logits (what a runtime that reserves
    /// for all outputs of a chunk holds).
    pub ggml_all_logits_bytes: u64,
    /// The ggml planner's bytes with the last row's logits only (what generation runs).
    pub ggml_last_logit_bytes: u64,
    /// wgalloc's planner (`best`) on the last-row graph.
    pub best_last_logit_bytes: u64,
}

/// Plans the ggml-style worst case ([`WorstCase`]) of `config` with a KV cache of
/// `kv`, LM-head pieces `pieces`, `rows` tokens a step and `context` tokens, in
/// `storage`.
///
/// # Errors
/// A config the step graph refuses; planning errors.
pub fn worst_case(
    config: &Gpt2Config,
    kv: &KvConfig,
    pieces: &[std::ops::Range<usize>],
    rows: usize,
    context: usize,
    storage: &BufferTypeDesc,
) -> crate::Result<WorstCase> {
    let slots = kv.pages_for(context as u32);
    let attention = StepAttention::Paged { kv: *kv, slots };
    let types = std::slice::from_ref(storage);
    let ggml = PlanOptions::with_planner(Planner::Ggml);
    let all = build_step_graph(config, rows, attention, pieces, LogitRows::All, kv.dtype)?;
    let last = build_step_graph(config, rows, attention, pieces, LogitRows::Last, kv.dtype)?;
    Ok(WorstCase {
        rows,
        context,
        slots,
        nodes: last.graph.nodes.len(),
        ggml_all_logits_bytes: plan(&all.graph, types, &ggml)?.total_size(),
        ggml_last_logit_bytes: plan(&last.graph, types, &ggml)?.total_size(),
        best_last_logit_bytes: plan(&last.graph, types, &PlanOptions::default())?.total_size(),
    })
}

/// Plans what `config` needs for `request`, on the CPU.
///
/// # Errors
/// A config the step graph refuses, a KV shape the cache refuses, planning errors.
pub fn fit(config: &Gpt2Config, request: &FitRequest) -> crate::Result<FitReport> {
    config.check()?;
    let pieces = head_pieces(config, request.max_binding);
    let max_context = request
        .max_context
        .unwrap_or(config.n_positions)
        .min(config.n_positions)
        .max(1);
    let limits = wgpu::Limits {
        max_storage_buffer_binding_size: request.max_binding,
        max_buffer_size: request.max_buffer,
        min_storage_buffer_offset_alignment: u32::try_from(request.alignment).unwrap_or(256),
        ..wgpu::Limits::default()
    };
    let kv = KvConfig::new(
        config.n_layer as u32,
        config.n_head as u32,
        config.head_dim() as u32,
        request.block_tokens,
        max_context as u32,
    )?
    .with_dtype(request.dtype)?
    .fit_pages(&limits, request.max_page_bytes)?;
    let storage = BufferTypeDesc::new("storage", request.alignment.max(4), request.max_buffer)?;
    let mut buckets = Vec::new();
    let mut weight_bytes = 0;
    let mut limit_problems = Vec::new();
    let mut rows_list = vec![1, request.prefill_chunk.clamp(1, max_context)];
    rows_list.dedup();
    for rows in rows_list {
        let attention = StepAttention::Paged {
            kv,
            slots: kv.pages_for(max_context as u32),
        };
        let step = build_step_graph(config, rows, attention, &pieces, LogitRows::Last, kv.dtype)?;
        if weight_bytes == 0 {
            let weight_plan = alloc_ctx_tensors(&step.graph, &step.weights.all(), &storage)?;
            weight_bytes = weight_plan.total_size();
        }
        for t in &step.graph.tensors {
            if t.size > request.max_binding && !t.is_view() {
                limit_problems.push(format!(
                    "{} ({} bytes) is larger than a storage binding ({} bytes)",
                    t.name, t.size, request.max_binding
                ));
            }
        }
        let plan = plan(
            &step.graph,
            std::slice::from_ref(&storage),
            &PlanOptions::default(),
        )?;
        buckets.push(FitBucket {
            rows,
            nodes: step.graph.nodes.len(),
            plan_bytes: plan.total_size(),
            lower_bound_bytes: lower_bounds(&step.graph)?.inplace_aware,
        });
    }
    let activation_bytes = buckets.iter().map(|b| b.plan_bytes).max().unwrap_or(0);
    let worst_case = worst_case(
        config,
        &kv,
        &pieces,
        request.prefill_chunk.clamp(1, max_context),
        max_context,
        &storage,
    )?;
    let kv_for = |tokens: usize| -> u64 {
        u64::from(kv.pages_for(tokens as u32)) * kv.page_bytes() + kv.table_words() * 4
    };
    let kv_bytes = kv_for(max_context);
    let total_bytes = weight_bytes + kv_bytes + activation_bytes;
    if activation_bytes > request.max_buffer {
        limit_problems.push(format!(
            "the activations ({activation_bytes} bytes) are larger than a buffer ({} bytes)",
            request.max_buffer
        ));
    }
    let fits_budget = request.budget.map(|b| total_bytes <= b);
    let longest_context = if !limit_problems.is_empty() {
        0
    } else {
        match request.budget {
            None => max_context,
            Some(budget) => {
                let fixed = weight_bytes + activation_bytes;
                // kv_for grows with the context: take the longest that fits.
                let mut lo = 0usize;
                let mut hi = max_context;
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if fixed + kv_for(mid) <= budget {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            }
        }
    };
    Ok(FitReport {
        parameters: config.parameters(),
        weight_bytes,
        host_embedding_bytes: 4 * ((config.vocab_size + config.n_positions) * config.n_embd) as u64,
        head_pieces: pieces.len(),
        max_context,
        kv_page_tokens: u64::from(kv.blocks_per_page) * u64::from(kv.block_tokens),
        kv_page_bytes: kv.page_bytes(),
        kv_bytes,
        buckets,
        activation_bytes,
        total_bytes,
        limit_problems,
        fits_budget,
        longest_context,
        worst_case,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(budget: Option<u64>) -> FitRequest {
        FitRequest {
            max_binding: 128 << 20,
            max_buffer: 1 << 31,
            alignment: 32,
            prefill_chunk: 16,
            block_tokens: 16,
            max_page_bytes: 64 << 10,
            max_context: None,
            budget,
            dtype: DType::F32,
        }
    }

    #[test]
    fn a_budget_bounds_the_context_and_the_kv_cache_grows_with_it() {
        let c = Gpt2Config::new(2, 64, 4, 512, 256);
        let all = fit(&c, &request(None)).expect("fits");
        assert_eq!(all.longest_context, 256);
        assert_eq!(all.buckets.len(), 2);
        assert!(all
            .buckets
            .iter()
            .all(|b| b.plan_bytes >= b.lower_bound_bytes));
        assert!(all.weight_bytes >= 4 * (c.parameters() - 512 * 64 - 256 * 64));
        // 2 layers x K,V x 64 wide x 4 bytes = 1 KiB a token.
        assert!(all.kv_bytes >= 256 * 1024);
        let tight = all.total_bytes - 100 * 1024;
        let part = fit(&c, &request(Some(tight))).expect("fits");
        assert_eq!(part.fits_budget, Some(false));
        // Pages of 64 KiB hold 64 tokens: 100 KiB less than 4 pages leaves 2.
        assert_eq!(part.kv_page_tokens, 64);
        assert_eq!(part.longest_context, 128, "{part:?}");
        let none = fit(&c, &request(Some(1000))).expect("runs");
        assert_eq!(none.longest_context, 0);
        // The ggml planner's worst case: the chunk's graph at the longest context.
        let w = &all.worst_case;
        assert_eq!((w.rows, w.context, w.slots), (16, 256, 4));
        assert!(w.ggml_last_logit_bytes >= w.best_last_logit_bytes);
        assert!(w.ggml_all_logits_bytes > w.ggml_last_logit_bytes);
        assert!(w.best_last_logit_bytes >= all.activation_bytes);
    }

    #[test]
    fn gpt2_small_splits_its_head_and_fits_lavapipe_limits() {
        let r = fit(&Gpt2Config::gpt2_small(), &request(None)).expect("fits");
        assert_eq!(r.head_pieces, 2);
        assert!(r.limit_problems.is_empty(), "{:?}", r.limit_problems);
        // 12 layers x K,V x 768 x 4 bytes x 1024 tokens = 72 MiB of cache.
        assert!(r.kv_bytes >= 72 << 20);
    }

    #[test]
    fn f16_storage_halves_weights_kv_cache_and_activations() {
        let c = Gpt2Config::new(3, 96, 4, 300, 192);
        let f32s = fit(&c, &request(None)).expect("fits");
        let half = FitRequest {
            dtype: DType::F16,
            ..request(None)
        };
        let f16s = fit(&c, &half).expect("fits");
        // Within the alignment of a few tensors and the table's words.
        let near_half = |f16: u64, f32: u64| f16 * 2 >= f32 - 4096 && f16 * 2 <= f32 + 4096;
        assert!(
            near_half(f16s.weight_bytes, f32s.weight_bytes),
            "{f16s:?} {f32s:?}"
        );
        assert!(near_half(f16s.kv_bytes, f32s.kv_bytes), "{f16s:?} {f32s:?}");
        assert!(
            f16s.activation_bytes < f32s.activation_bytes,
            "{f16s:?} {f32s:?}"
        );
        assert!(f16s.total_bytes * 2 <= f32s.total_bytes + 16384);
        assert_eq!(f16s.longest_context, f32s.longest_context);
    }
}
