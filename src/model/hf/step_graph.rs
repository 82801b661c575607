//! [`StepGraph`]: one step of GPT-2 as a wgalloc graph, for `rows` new tokens, built
//! from the executor's ops. Where the widths are multiples of 4: `ln_1` and `ln_2` in
//! the prologue of the projection after them (`layer_norm_matmul_bias` for QKV,
//! `layer_norm_matmul_bias_gelu` for the MLP's up projection with `gelu_new`, the tanh
//! form: no norm dispatched or stored), `matmul_add_bias` adding the output
//! projections to the residual in place; else `layer_norm`, a `matmul`, a bias `add`
//! and `gelu` in place. `ln_f` is a `layer_norm`. Attention runs either over the KV
//! cache's pages (`kv_self_attend`, `kv_attend`..., [`KvTensors::attention`]: one node
//! per page) or, for a full
//! recompute of a sequence, `attention_causal` over the chunk alone.
//!
//! The token and position embeddings are looked up on the host (the step's input is
//! `wte[token] + wpe[position]`, `[rows, n_embd]`): the embedding table of a real
//! vocabulary is larger than one storage binding (GPT-2 small's is 154 MB), and a step
//! reads only `rows` of its rows. The LM head reads the same table on the device,
//! split by rows into pieces that each fit a binding ([`head_pieces`]); each piece
//! writes its own logits output.
//!
//! The model's weights are declared first and in the same order in every step graph,
//! so their tensor ids are the same in every bucket's graph and one weight plan places
//! them all.

use super::{CheckpointError, Gpt2Config};
use crate::graph::{DType, Graph, GraphBuilder, TensorId};
use crate::kv::{KvConfig, KvTensors};

/// How a step graph attends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAttention {
    /// Over the KV cache: the chunk's keys and values are appended to it, and its
    /// queries read every cached position. `slots` page tensors are bound.
    Paged {
        /// The cache's shape.
        kv: KvConfig,
        /// Page slots the graph binds (the context bucket).
        slots: u32,
    },
    /// `attention_causal` over the chunk alone: a full recompute of a sequence from
    /// position 0, with no cache.
    Recompute,
}

/// Which rows of a step get logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogitRows {
    /// Every row (a prompt's logits at every position).
    All,
    /// The last row only (what generation needs): the final hidden state's last row
    /// is gathered (`embedding` with the row's index) before the final layer norm, so
    /// the LM head runs on one row.
    Last,
}

/// The ids of the model's weights in a step graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightIds {
    /// Per layer, the 12 tensors in [`super::LayerWeights`]' order.
    pub layers: Vec<[TensorId; 12]>,
    /// `ln_f` gain and bias.
    pub ln_f: [TensorId; 2],
    /// The LM head's pieces (`[rows_i, n_embd]`, rows in order).
    pub head: Vec<TensorId>,
}

impl WeightIds {
    /// Every weight id, in declaration order.
    pub fn all(&self) -> Vec<TensorId> {
        let mut ids: Vec<TensorId> = self.layers.iter().flatten().copied().collect();
        ids.extend(self.ln_f);
        ids.extend(&self.head);
        ids
    }
}

/// One step's graph and the tensors a runner touches.
#[derive(Debug, Clone)]
pub struct StepGraph {
    /// The graph.
    pub graph: Graph,
    /// Tokens the step runs.
    pub rows: usize,
    /// The input: embedded tokens `[rows, n_embd]`.
    pub input: TensorId,
    /// The logits outputs, one per head piece (`[logit_rows, piece_rows]`).
    pub logits: Vec<TensorId>,
    /// Rows of logits: `rows`, or 1 for [`LogitRows::Last`].
    pub logit_rows: usize,
    /// For [`LogitRows::Last`] with several rows: the input holding the last row's
    /// index (`u32 [1]`, written `rows - 1` before each run).
    pub last_row: Option<TensorId>,
    /// The model's weights.
    pub weights: WeightIds,
    /// The KV cache's tensors (paged attention only).
    pub kv: Option<KvTensors>,
}

/// The LM head's pieces: row ranges of `[vocab_size, n_embd]` of at most
/// `max_piece_bytes` each (at least one row each).
pub fn head_pieces(config: &Gpt2Config, max_piece_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let row_bytes = 4 * config.n_embd as u64;
    let rows = (max_piece_bytes / row_bytes.max(1)).max(1) as usize;
    let pieces = config.vocab_size.div_ceil(rows);
    // Even pieces: the same shape for all but the last.
    let per = config.vocab_size.div_ceil(pieces.max(1));
    (0..pieces)
        .map(|i| i * per..((i + 1) * per).min(config.vocab_size))
        .filter(|r| !r.is_empty())
        .collect()
}

/// Builds the graph of a step of `rows` tokens, its float tensors stored as `dtype`
/// (f32, or f16: the weights, the input, every activation and the logits at half the
/// bytes; the KV attention's online-softmax state between pages stays f32, see
/// `exec::ops::storage_of`).
///
/// # Errors
/// [`CheckpointError::BadConfig`] when the attention cannot take the model (a head
/// width that is not a multiple of 4, a cache of another shape or element type) or
/// the graph is refused.
pub fn build_step_graph(
    config: &Gpt2Config,
    rows: usize,
    attention: StepAttention,
    pieces: &[std::ops::Range<usize>],
    logit_rows: LogitRows,
    dtype: DType,
) -> Result<StepGraph, CheckpointError> {
    let bad = |problem: String| CheckpointError::BadConfig {
        field: "n_embd",
        problem,
    };
    let (d, inner, n) = (config.n_embd as u64, config.inner() as u64, rows as u64);
    if rows == 0 {
        return Err(CheckpointError::EmptyPrompt);
    }
    if !config.head_dim().is_multiple_of(4) {
        return Err(bad(format!(
            "head width {} is not a multiple of 4 (the attention kernels' vector loads)",
            config.head_dim()
        )));
    }
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(bad(format!("a model stored as {dtype:?}, not f32 or f16")));
    }
    let name = match attention {
        StepAttention::Paged { slots, .. } => format!("gpt2-step-n{rows}-s{slots}"),
        StepAttention::Recompute => format!("gpt2-recompute-n{rows}"),
    };
    let mut b = GraphBuilder::new(name);
    let weights = declare_weights(&mut b, config, pieces);
    let kv = match attention {
        StepAttention::Paged { kv, slots } => {
            if kv.layers as usize != config.n_layer || kv.width() != d || kv.dtype != dtype {
                return Err(bad(format!(
                    "a KV cache of {} layers x {} wide of {:?} for {} layers x {d} of {dtype:?}",
                    kv.layers,
                    kv.width(),
                    kv.dtype,
                    config.n_layer
                )));
            }
            // Built as f32 like every node output; an f16 step's tensors (pages
            // included) are stored as f16 below.
            let as_built = kv.with_dtype(DType::F32).map_err(|e| bad(e.to_string()))?;
            Some(KvTensors::add(&mut b, &as_built, slots))
        }
        StepAttention::Recompute => None,
    };
    // Built as f32 (the builder's node outputs are); an f16 step's tensors are stored
    // as f16 once built.
    let input = b.input("embedded", DType::F32, &[n, d]);
    let last_row =
        (logit_rows == LogitRows::Last && n > 1).then(|| b.input("last_row", DType::U32, &[1]));
    let eps = config.eps();
    // The bias epilogues' vector loads need k and n multiples of 4.
    let fused_out = d.is_multiple_of(4);
    let fused_up = d.is_multiple_of(4) && inner.is_multiple_of(4);
    let fused_down = fused_up;
    let mut x = input;
    for (l, w) in weights.layers.iter().enumerate() {
        let [g1, b1, attn_w, attn_b, proj_w, proj_b, g2, b2, fc_w, fc_b, fcp_w, fcp_b] = *w;
        // ln_1 in the QKV projection's prologue where the widths allow.
        let qkv = if fused_out {
            b.node_with_params(
                "layer_norm_matmul_bias",
                &[x, g1, b1, attn_w, attn_b],
                &[n, 3 * d],
                false,
                &[eps],
            )
        } else {
            let h = b.node_with_params("layer_norm", &[x, g1, b1], &[n, d], false, &[eps]);
            b.rename(h, format!("h{l}.ln_1"));
            linear(&mut b, h, attn_w, attn_b, [n, 3 * d], false)
        };
        b.rename(qkv, format!("h{l}.qkv"));
        let attn = match &kv {
            Some(kv) => kv
                .attention(&mut b, qkv, l as u32)
                .map_err(|e| bad(e.to_string()))?,
            None => b.node_with_params(
                "attention_causal",
                &[qkv],
                &[n, d],
                false,
                &[
                    config.n_head as f32,
                    1.0 / (config.head_dim() as f32).sqrt(),
                ],
            ),
        };
        b.rename(attn, format!("h{l}.attn"));
        x = residual(&mut b, x, attn, proj_w, proj_b, [n, d], fused_out);
        b.rename(x, format!("h{l}.resid1"));
        // ln_2 in the up projection's prologue, GELU in its epilogue.
        let act = if fused_up {
            b.node_with_params(
                "layer_norm_matmul_bias_gelu",
                &[x, g2, b2, fc_w, fc_b],
                &[n, inner],
                false,
                &[eps],
            )
        } else {
            let h2 = b.node_with_params("layer_norm", &[x, g2, b2], &[n, d], false, &[eps]);
            let up = linear(&mut b, h2, fc_w, fc_b, [n, inner], false);
            b.node("gelu", &[up], &[n, inner], true)
        };
        b.rename(act, format!("h{l}.mlp.act"));
        x = residual(&mut b, x, act, fcp_w, fcp_b, [n, d], fused_down);
        b.rename(x, format!("h{l}.resid2"));
    }
    let out_rows = if last_row.is_some() { 1 } else { n };
    if let Some(index) = last_row {
        // The last row, gathered: a row lookup of x by index.
        x = b.node("embedding", &[index, x], &[1, d], false);
        b.rename(x, "last_row_state");
    }
    let [gf, bf] = weights.ln_f;
    let hf = b.node_with_params("layer_norm", &[x, gf, bf], &[out_rows, d], false, &[eps]);
    b.rename(hf, "ln_f");
    let mut logits = Vec::with_capacity(pieces.len());
    for (i, (piece, range)) in weights.head.iter().zip(pieces).enumerate() {
        let out = b.node(
            "matmul_bt",
            &[hf, *piece],
            &[out_rows, range.len() as u64],
            false,
        );
        b.rename(out, format!("logits{i}"));
        b.mark_output(out);
        logits.push(out);
    }
    let mut graph = b.build().map_err(|e| bad(e.to_string()))?;
    let mut kv = kv;
    if dtype != DType::F32 {
        store_activations_as(&mut graph, dtype);
        if let Some(kv) = kv.as_mut() {
            kv.dtype = dtype;
        }
    }
    Ok(StepGraph {
        graph,
        rows,
        input,
        logits,
        logit_rows: out_rows as usize,
        last_row,
        weights,
        kv,
    })
}

/// Stores every f32 tensor of `graph` (weights, input, activations, KV pages: the
/// builder makes node outputs f32) as `dtype`, but the KV attention's online-softmax state (the outputs of `kv_self`,
/// `kv_attend` and `kv_self_attend`), which the kernels keep in f32.
fn store_activations_as(graph: &mut Graph, dtype: DType) {
    let states: std::collections::HashSet<TensorId> = graph
        .nodes
        .iter()
        .filter(|n| matches!(n.op.as_str(), "kv_self" | "kv_attend" | "kv_self_attend"))
        .map(|n| n.output)
        .collect();
    for t in graph.tensors.iter_mut() {
        if t.dtype == DType::F32 && !states.contains(&t.id) {
            t.size = t.size / DType::F32.size() * dtype.size();
            t.dtype = dtype;
        }
    }
}

/// `a · w + bias`: one `matmul_bias` when the widths allow, else a matmul and the
/// bias added in place.
fn linear(
    b: &mut GraphBuilder,
    a: TensorId,
    w: TensorId,
    bias: TensorId,
    shape: [u64; 2],
    fused: bool,
) -> TensorId {
    if fused {
        b.node("matmul_bias", &[a, w, bias], &shape, false)
    } else {
        let p = b.node("matmul", &[a, w], &shape, false);
        b.node("add", &[p, bias], &shape, true)
    }
}

/// `x + (a · w + bias)`: one `matmul_add_bias` (in place over the residual) when the
/// widths allow, else the bias added to the residual in place and a separate matmul
/// and add.
fn residual(
    b: &mut GraphBuilder,
    x: TensorId,
    a: TensorId,
    w: TensorId,
    bias: TensorId,
    shape: [u64; 2],
    fused: bool,
) -> TensorId {
    if fused {
        b.node("matmul_add_bias", &[x, a, w, bias], &shape, true)
    } else {
        let x = b.node("add", &[x, bias], &shape, true);
        let p = b.node("matmul", &[a, w], &shape, false);
        b.node("add", &[x, p], &shape, true)
    }
}

/// Declares the model's weights (f32, stored as the step's type once built), always in
/// the same order.
fn declare_weights(
    b: &mut GraphBuilder,
    config: &Gpt2Config,
    pieces: &[std::ops::Range<usize>],
) -> WeightIds {
    let layers = (0..config.n_layer)
        .map(|l| {
            let specs = super::weights::layer_specs(config, l);
            let mut ids = [crate::graph::TensorId(0); 12];
            for (slot, (name, shape)) in ids.iter_mut().zip(specs) {
                let shape: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
                *slot = b.weight(name, DType::F32, &shape);
            }
            ids
        })
        .collect();
    let d = config.n_embd as u64;
    let ln_f = [
        b.weight("ln_f.weight", DType::F32, &[d]),
        b.weight("ln_f.bias", DType::F32, &[d]),
    ];
    let head = pieces
        .iter()
        .enumerate()
        .map(|(i, r)| b.weight(format!("lm_head.{i}"), DType::F32, &[r.len() as u64, d]))
        .collect();
    WeightIds { layers, ln_f, head }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::resolve;

    #[test]
    fn head_pieces_cover_the_vocabulary_within_the_limit() {
        let c = Gpt2Config::gpt2_small();
        let pieces = head_pieces(&c, 128 << 20);
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].start, 0);
        assert_eq!(pieces.last().map(|r| r.end), Some(50257));
        for r in &pieces {
            assert!(r.len() as u64 * 768 * 4 <= 128 << 20);
        }
        assert_eq!(
            head_pieces(&Gpt2Config::new(1, 8, 2, 10, 4), 1 << 20).len(),
            1
        );
        assert_eq!(
            head_pieces(&Gpt2Config::new(1, 8, 2, 10, 4), 3 * 32).len(),
            4
        );
    }

    #[test]
    fn every_node_of_both_step_kinds_resolves_and_weight_ids_repeat() {
        let mut c = Gpt2Config::new(2, 32, 2, 101, 40);
        c.n_inner = Some(70);
        let pieces = head_pieces(&c, 40 * 32 * 4);
        let kv = KvConfig::new(2, 2, 16, 4, 40).expect("kv");
        let paged = build_step_graph(
            &c,
            3,
            StepAttention::Paged { kv, slots: 2 },
            &pieces,
            LogitRows::Last,
            DType::F32,
        )
        .expect("paged");
        let full = build_step_graph(
            &c,
            5,
            StepAttention::Recompute,
            &pieces,
            LogitRows::All,
            DType::F32,
        )
        .expect("full");
        for g in [&paged.graph, &full.graph] {
            g.validate().expect("valid");
            for step in 0..g.nodes.len() {
                resolve(g, step).unwrap_or_else(|e| panic!("node {step}: {e}"));
            }
        }
        assert_eq!(paged.weights, full.weights);
        assert_eq!(paged.logits.len(), 3);
        assert!(paged.kv.is_some() && full.kv.is_none());
        assert_eq!((paged.logit_rows, full.logit_rows), (1, 5));
        assert!(paged.last_row.is_some() && full.last_row.is_none());
        let odd_heads = Gpt2Config::new(1, 6, 2, 5, 4);
        let one_piece = head_pieces(&odd_heads, 1 << 20);
        let refused = build_step_graph(
            &odd_heads,
            1,
            StepAttention::Recompute,
            &one_piece,
            LogitRows::All,
            DType::F32,
        );
        assert!(refused.is_err());
    }

    #[test]
    fn an_f16_step_stores_everything_f16_but_the_attention_state() {
        let c = Gpt2Config::new(2, 32, 2, 101, 40);
        let pieces = head_pieces(&c, 40 * 32 * 4);
        let kv = KvConfig::new(2, 2, 16, 4, 40).expect("kv");
        let kv16 = kv.with_dtype(DType::F16).expect("f16 pages");
        let build = |kv: KvConfig, dtype| {
            build_step_graph(
                &c,
                3,
                StepAttention::Paged { kv, slots: 2 },
                &pieces,
                LogitRows::Last,
                dtype,
            )
        };
        let f32_step = build(kv, DType::F32).expect("f32");
        let f16_step = build(kv16, DType::F16).expect("f16");
        assert!(
            build(kv, DType::F16).is_err(),
            "f32 pages under an f16 model"
        );
        let g = &f16_step.graph;
        g.validate().expect("valid");
        let kv_tensors = f16_step.kv.as_ref().expect("paged");
        kv_tensors
            .check(g, &kv16)
            .expect("f16 pages as the cache lays them out");
        let mut states = 0;
        for step in 0..g.nodes.len() {
            resolve(g, step).unwrap_or_else(|e| panic!("node {step}: {e}"));
            let node = &g.nodes[step];
            let out = g.tensor(node.output).expect("output");
            if node.op == "kv_self_attend" || node.op == "kv_attend" {
                assert_eq!(out.dtype, DType::F32, "{}", node.op);
                states += 1;
            } else {
                assert_eq!(out.dtype, DType::F16, "{}", node.op);
            }
            assert_eq!(
                crate::exec::storage_of(g, step),
                crate::exec::StorageType::F16,
                "{}",
                node.op
            );
        }
        assert_eq!(states, 2, "one state per layer between its two pages");
        for (a, b) in f32_step.graph.tensors.iter().zip(&g.tensors) {
            if a.dtype == DType::F32 && b.dtype == DType::F16 {
                assert_eq!(a.size, 2 * b.size, "{}", a.name);
            }
        }
    }
}
