//! A GPT-2-style decoder as a wgalloc graph: token and position embeddings; per layer
//! layer norm, multi-head causal attention, residual add, layer norm, GELU MLP,
//! residual add; a final layer norm and logits tied to the token embedding.
//!
//! Where the widths allow ([`fused_layers`]) a layer is seven nodes: layer norm, one
//! full-width QKV projection, fused causal attention (`attention_causal`, no score
//! matrix), the output projection added to the residual in place (`matmul_add`),
//! layer norm, the MLP's up projection with GELU in its epilogue (`matmul_gelu`) and
//! its down projection added to the residual in place. Otherwise attention is
//! expressed head by head with 2-D kernels: per head `q_h = h·Wq_h`, `k_h`, `v_h`
//! (`[seq, head_dim]`), scores `q_h·k_hᵀ` scaled and causally soft-maxed,
//! `o_h = p_h·v_h`, and the output projection summed over heads (`Σ_h o_h·Wo_h`,
//! which equals concatenating the heads and projecting).

use std::collections::HashMap;

use super::{ModelConfig, ModelError, SeededRng};
use crate::exec::cpu_ref;
use crate::exec::ExecError;
use crate::exec::TensorData;
use crate::graph::{DType, Graph, GraphBuilder, Role, TensorId};

/// Layer-norm epsilon.
pub const LAYER_NORM_EPS: f32 = 1e-5;

/// How a weight is initialised.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Init {
    /// Uniform in `[-scale, scale)`.
    Uniform(f32),
    /// `1 + uniform(±0.1)` (layer-norm gains).
    NearOne,
}

/// The built-in model: its graph, which tensors are weights and how to fill them.
#[derive(Debug, Clone)]
pub struct GptModel {
    /// The configuration it was built from.
    pub config: ModelConfig,
    /// The forward pass.
    pub graph: Graph,
    /// The token-id input (`u32`, `[seq]`).
    pub tokens: TensorId,
    /// The logits output (`[seq, vocab]`).
    pub logits: TensorId,
    inits: Vec<(TensorId, Init)>,
}

/// Builds the decoder's graph.
///
/// # Errors
/// [`ModelError`] when the configuration is invalid.
pub fn build_gpt(config: &ModelConfig) -> Result<GptModel, ModelError> {
    config.check()?;
    let (seq, d, vocab) = (config.seq, config.width, config.vocab);
    let heads = config.heads;
    let hd = d / heads;
    let fused = fused_layers(config);
    let mut b = GraphBuilder::new(format!(
        "gpt-l{}-w{}-h{}-s{}-v{}",
        config.layers, d, heads, seq, vocab
    ));
    let mut inits = Vec::new();
    let mut weight = |b: &mut GraphBuilder, name: String, shape: &[u64], init: Init| {
        let id = b.weight(name, DType::F32, shape);
        inits.push((id, init));
        id
    };
    let matrix_init = |fan_in: u64| Init::Uniform(1.0 / (fan_in as f32).sqrt());

    let tokens = b.input("tokens", DType::U32, &[seq]);
    let wte = weight(&mut b, "wte".into(), &[vocab, d], Init::Uniform(0.5));
    let wpe = weight(&mut b, "wpe".into(), &[seq, d], Init::Uniform(0.1));
    let emb = b.node("embedding", &[tokens, wte], &[seq, d], false);
    b.rename(emb, "tok_emb");
    let mut x = b.node("add", &[emb, wpe], &[seq, d], true);
    b.rename(x, "embed");

    for l in 0..config.layers {
        let g1 = weight(&mut b, format!("h{l}.ln1.g"), &[d], Init::NearOne);
        let b1 = weight(&mut b, format!("h{l}.ln1.b"), &[d], Init::Uniform(0.1));
        let h = b.node_with_params(
            "layer_norm",
            &[x, g1, b1],
            &[seq, d],
            false,
            &[LAYER_NORM_EPS],
        );
        b.rename(h, format!("h{l}.ln1"));
        if fused {
            // One QKV projection, one fused attention kernel, and the output projection
            // added to the residual in place.
            let wqkv = weight(
                &mut b,
                format!("h{l}.attn.wqkv"),
                &[d, 3 * d],
                matrix_init(d),
            );
            let wo = weight(&mut b, format!("h{l}.attn.wo"), &[d, d], matrix_init(d));
            let qkv = b.node("matmul", &[h, wqkv], &[seq, 3 * d], false);
            b.rename(qkv, format!("h{l}.qkv"));
            let attn = b.node_with_params(
                "attention_causal",
                &[qkv],
                &[seq, d],
                false,
                &[heads as f32, 1.0 / (hd as f32).sqrt()],
            );
            b.rename(attn, format!("h{l}.attn"));
            x = b.node("matmul_add", &[x, attn, wo], &[seq, d], true);
        } else {
            let attn = per_head_attention(&mut b, &mut weight, l, h, config)?;
            x = b.node("add", &[x, attn], &[seq, d], true);
        }
        b.rename(x, format!("h{l}.resid1"));
        let g2 = weight(&mut b, format!("h{l}.ln2.g"), &[d], Init::NearOne);
        let b2 = weight(&mut b, format!("h{l}.ln2.b"), &[d], Init::Uniform(0.1));
        let h2 = b.node_with_params(
            "layer_norm",
            &[x, g2, b2],
            &[seq, d],
            false,
            &[LAYER_NORM_EPS],
        );
        let w1 = weight(&mut b, format!("h{l}.mlp.w1"), &[d, 4 * d], matrix_init(d));
        let w2 = weight(
            &mut b,
            format!("h{l}.mlp.w2"),
            &[4 * d, d],
            matrix_init(4 * d),
        );
        if fused {
            let act = b.node("matmul_gelu", &[h2, w1], &[seq, 4 * d], false);
            b.rename(act, format!("h{l}.mlp.act"));
            x = b.node("matmul_add", &[x, act, w2], &[seq, d], true);
        } else {
            let up = b.node("matmul", &[h2, w1], &[seq, 4 * d], false);
            let act = b.node("gelu", &[up], &[seq, 4 * d], true);
            let down = b.node("matmul", &[act, w2], &[seq, d], false);
            x = b.node("add", &[x, down], &[seq, d], true);
        }
        b.rename(x, format!("h{l}.resid2"));
    }
    let gf = weight(&mut b, "ln_f.g".into(), &[d], Init::NearOne);
    let bf = weight(&mut b, "ln_f.b".into(), &[d], Init::Uniform(0.1));
    let hf = b.node_with_params(
        "layer_norm",
        &[x, gf, bf],
        &[seq, d],
        false,
        &[LAYER_NORM_EPS],
    );
    let logits = b.node("matmul_bt", &[hf, wte], &[seq, vocab], false);
    b.rename(logits, "logits");
    b.mark_output(logits);
    let mut graph = b.build().map_err(|_| ModelError::Overflow)?;
    store_floats_as(&mut graph, config.dtype.dtype());
    Ok(GptModel {
        config: *config,
        graph,
        tokens,
        logits,
        inits,
    })
}

/// Stores every f32 tensor of `graph` (weights and activations; the token ids are
/// u32) as `dtype`: an f16 model is the f32 one at half the bytes per float.
fn store_floats_as(graph: &mut Graph, dtype: DType) {
    for t in graph.tensors.iter_mut().filter(|t| t.dtype == DType::F32) {
        t.size = t.size / DType::F32.size() * dtype.size();
        t.dtype = dtype;
    }
}

/// Whether the decoder's layers use the fused kernels (one QKV projection, fused
/// attention, GELU and residual adds in the matmul epilogues): their vector loads need
/// the width and the head width to be multiples of 4, and the attention kernel a head
/// width of at most [`crate::exec::MAX_ATTENTION_HEAD_DIM`]. Otherwise attention runs
/// head by head on 2-D kernels.
pub fn fused_layers(config: &ModelConfig) -> bool {
    let hd = config.width / config.heads.max(1);
    config.width.is_multiple_of(4)
        && hd.is_multiple_of(4)
        && hd <= crate::exec::MAX_ATTENTION_HEAD_DIM
}

/// Attention head by head with 2-D kernels (for widths the fused kernels do not take):
/// per head `q_h = h·Wq_h`, `k_h`, `v_h`, scores `q_h·k_hᵀ` scaled and causally
/// soft-maxed, `o_h = p_h·v_h`, and the output projection summed over heads.
fn per_head_attention(
    b: &mut GraphBuilder,
    weight: &mut impl FnMut(&mut GraphBuilder, String, &[u64], Init) -> TensorId,
    l: u64,
    h: TensorId,
    config: &ModelConfig,
) -> Result<TensorId, ModelError> {
    let (seq, d, heads) = (config.seq, config.width, config.heads);
    let hd = d / heads;
    let init = Init::Uniform(1.0 / (d as f32).sqrt());
    let mut attn: Option<TensorId> = None;
    for head in 0..heads {
        let p = format!("h{l}.attn.{head}");
        let wq = weight(b, format!("{p}.wq"), &[d, hd], init);
        let wk = weight(b, format!("{p}.wk"), &[d, hd], init);
        let wv = weight(b, format!("{p}.wv"), &[d, hd], init);
        let wo = weight(b, format!("{p}.wo"), &[hd, d], init);
        let q = b.node("matmul", &[h, wq], &[seq, hd], false);
        let k = b.node("matmul", &[h, wk], &[seq, hd], false);
        let v = b.node("matmul", &[h, wv], &[seq, hd], false);
        let scores = b.node("matmul_bt", &[q, k], &[seq, seq], false);
        let scaled = b.node_with_params(
            "scale",
            &[scores],
            &[seq, seq],
            true,
            &[1.0 / (hd as f32).sqrt()],
        );
        let probs = b.node("softmax_causal", &[scaled], &[seq, seq], true);
        let o = b.node("matmul", &[probs, v], &[seq, hd], false);
        let proj = b.node("matmul", &[o, wo], &[seq, d], false);
        attn = Some(match attn {
            None => proj,
            Some(acc) => b.node("add", &[acc, proj], &[seq, d], true),
        });
    }
    attn.ok_or(ModelError::Zero { what: "heads" })
}

impl GptModel {
    /// The logits for `tokens` computed on the CPU ([`cpu_ref::evaluate`]) with the
    /// model's own weights: the reference a GPU run is compared with.
    ///
    /// # Errors
    /// Whatever [`cpu_ref::evaluate`] returns for this graph (a token out of range, a
    /// wrong number of tokens).
    pub fn reference_logits(&self, tokens: Vec<u32>) -> crate::Result<Vec<f32>> {
        let mut values: HashMap<TensorId, TensorData> = HashMap::new();
        values.insert(self.tokens, TensorData::U32(tokens));
        for id in self.weights() {
            values.insert(id, TensorData::F32(self.weight_values(id)));
        }
        let mut all = cpu_ref::evaluate(&self.graph, &values)?;
        match all.get_mut(self.logits.index()).and_then(Option::take) {
            Some(TensorData::F32(v)) => Ok(v),
            _ => Err(ExecError::MissingValue {
                tensor: self.logits,
                name: "logits".into(),
            }
            .into()),
        }
    }

    /// The seeded values of a weight tensor (empty for a tensor that is not a weight).
    pub fn weight_values(&self, id: TensorId) -> Vec<f32> {
        let Some((index, &(_, init))) = self.inits.iter().enumerate().find(|(_, (t, _))| *t == id)
        else {
            return Vec::new();
        };
        let tensor = &self.graph.tensors[id.index()];
        let len = tensor.size / tensor.dtype.size();
        let mut rng = SeededRng::new(self.config.seed ^ ((index as u64 + 1) << 32));
        (0..len)
            .map(|_| match init {
                Init::Uniform(scale) => rng.next_signed() * scale,
                Init::NearOne => 1.0 + 0.1 * rng.next_signed(),
            })
            .collect()
    }

    /// The seeded token ids.
    pub fn token_ids(&self) -> Vec<u32> {
        let mut rng = SeededRng::new(self.config.seed.wrapping_add(0x5EED));
        (0..self.config.seq)
            .map(|_| rng.below(self.config.vocab) as u32)
            .collect()
    }

    /// Ids of every weight, in graph order.
    pub fn weights(&self) -> Vec<TensorId> {
        self.graph
            .tensors
            .iter()
            .filter(|t| t.role == Role::Weight)
            .map(|t| t.id)
            .collect()
    }

    /// Bytes of all weights.
    pub fn weight_bytes(&self) -> u64 {
        self.weights()
            .iter()
            .map(|t| self.graph.tensors[t.index()].size)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_model_builds_a_valid_graph_with_inplace_residuals() {
        let m = build_gpt(&ModelConfig::default()).expect("builds");
        m.graph.validate().expect("valid");
        assert!(m.graph.nodes.iter().filter(|n| n.inplace).count() > 8);
        assert_eq!(m.graph.tensors[m.logits.index()].role, Role::Output);
        assert_eq!(m.graph.tensors[m.logits.index()].size, 128 * 1024 * 4);
        assert_eq!(m.token_ids().len(), 128);
        assert!(m.token_ids().iter().all(|&t| t < 1024));
        let wte = m.weights()[0];
        assert_eq!(m.weight_values(wte).len(), 1024 * 256);
        // The seeded weights are a function of the seed: the same model built again
        // gives the same values, and another seed other values.
        let again = build_gpt(&ModelConfig::default()).expect("builds");
        assert_eq!(m.weight_values(wte), again.weight_values(wte));
        let other = build_gpt(&ModelConfig {
            seed: ModelConfig::default().seed + 1,
            ..ModelConfig::default()
        })
        .expect("builds");
        assert_ne!(m.weight_values(wte), other.weight_values(wte));
    }
}
