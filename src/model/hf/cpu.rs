//! [`CpuGpt2`]: GPT-2's forward pass on the CPU, exactly as Hugging Face's
//! `GPT2LMHeadModel` computes it (learned positions, LayerNorm with bias and the
//! config's epsilon, attention and MLP biases, `gelu_new`, causal softmax scaled by
//! `1/sqrt(head_dim)`, the LM head), with a KV cache: a prompt is prefilled, then
//! tokens are appended one at a time, each attending to the cached keys and values.
//! [`CpuGpt2::with_f16_storage`] rounds as the GPU's f16 generation stores: the
//! weights, and each tensor the step graph keeps (see [`CpuGpt2::forward`]).

use super::{CheckpointError, Gpt2Config, Gpt2Weights};

/// The keys and values of every position run so far, per layer (`[t, n_embd]` each,
/// heads side by side as in the QKV projection).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuKvCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    len: usize,
}

impl CpuKvCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// GPT-2 on the CPU: the reference GPU runs are compared with.
#[derive(Debug, Clone)]
pub struct CpuGpt2 {
    config: Gpt2Config,
    weights: Gpt2Weights,
    /// The weights rounded to f16 (every one but the embedding tables, which the
    /// host reads in f32) when the model stores f16 ([`CpuGpt2::with_f16_storage`]).
    rounded: Option<Box<Gpt2Weights>>,
}

/// Checks that `tokens` can be appended to a context of `past` positions.
///
/// # Errors
/// [`CheckpointError::EmptyPrompt`] for no tokens,
/// [`CheckpointError::TokenOutOfVocab`], [`CheckpointError::ContextTooLong`].
pub fn check_tokens(
    config: &Gpt2Config,
    past: usize,
    tokens: &[u32],
) -> Result<(), CheckpointError> {
    if tokens.is_empty() {
        return Err(CheckpointError::EmptyPrompt);
    }
    if let Some((i, &t)) = tokens
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= config.vocab_size)
    {
        return Err(CheckpointError::TokenOutOfVocab {
            token: t,
            position: past + i,
            vocab: config.vocab_size,
        });
    }
    let needed = past + tokens.len();
    if needed > config.n_positions {
        return Err(CheckpointError::ContextTooLong {
            needed,
            n_positions: config.n_positions,
        });
    }
    Ok(())
}

/// Checks that `weights` have the lengths `config` implies.
///
/// # Errors
/// A bad config, or [`CheckpointError::ConfigMismatch`] naming the first tensor whose
/// length is not the config's.
pub fn check_weights(config: &Gpt2Config, weights: &Gpt2Weights) -> Result<(), CheckpointError> {
    config.check()?;
    if weights.layers.len() != config.n_layer {
        return Err(CheckpointError::ConfigMismatch {
            name: "h".to_string(),
            problem: format!(
                "{} blocks for n_layer = {}",
                weights.layers.len(),
                config.n_layer
            ),
        });
    }
    if !config.tie_word_embeddings && weights.lm_head.is_none() {
        return Err(CheckpointError::MissingTensor {
            name: "lm_head.weight".to_string(),
            alternative: "(none: tie_word_embeddings is false)".to_string(),
        });
    }
    for (name, shape, values) in weights.named(config) {
        let expected: usize = shape.iter().product();
        if values.len() != expected {
            return Err(CheckpointError::ConfigMismatch {
                name,
                problem: format!("{} values, the config implies {expected}", values.len()),
            });
        }
    }
    Ok(())
}

impl CpuGpt2 {
    /// The model for `config` and `weights` (checked to agree in size).
    ///
    /// # Errors
    /// [`CheckpointError::ConfigMismatch`] when a tensor's length is not the config's.
    pub fn new(config: Gpt2Config, weights: Gpt2Weights) -> Result<CpuGpt2, CheckpointError> {
        check_weights(&config, &weights)?;
        Ok(CpuGpt2 {
            config,
            weights,
            rounded: None,
        })
    }

    /// The same model as the GPU runs it with f16 storage
    /// ([`crate::exec::StorageType::F16`]): the weights the kernels read (layers,
    /// `ln_f`, the LM head) rounded to f16, and in [`CpuGpt2::forward`] every tensor the
    /// fused step graph stores rounded as it is stored: the embedded input, each
    /// layer's QKV (so the cached keys and values too), attention output, residual
    /// after each projection and GELU output, the final norm and the logits. The math
    /// between stays in f32/f64 as before (the kernels accumulate in f32).
    pub fn with_f16_storage(mut self) -> CpuGpt2 {
        let round = |v: &Vec<f32>| crate::exec::cpu_ref::round_to_f16(v);
        let w = &self.weights;
        let rounded = Gpt2Weights {
            wte: w.wte.clone(),
            wpe: w.wpe.clone(),
            layers: w
                .layers
                .iter()
                .map(|l| super::LayerWeights::from_fields(l.fields().map(round).to_vec()))
                .collect(),
            ln_f_g: round(&w.ln_f_g),
            ln_f_b: round(&w.ln_f_b),
            lm_head: Some(crate::exec::cpu_ref::round_to_f16(w.head())),
        };
        self.rounded = Some(Box::new(rounded));
        self
    }

    /// Whether the model rounds as f16 storage does ([`CpuGpt2::with_f16_storage`]).
    pub fn stores_f16(&self) -> bool {
        self.rounded.is_some()
    }

    /// The configuration.
    pub fn config(&self) -> &Gpt2Config {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &Gpt2Weights {
        &self.weights
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> CpuKvCache {
        CpuKvCache {
            keys: vec![Vec::new(); self.config.n_layer],
            values: vec![Vec::new(); self.config.n_layer],
            len: 0,
        }
    }

    /// The logits of the whole sequence `tokens` (`[tokens.len(), vocab_size]`), from
    /// an empty cache: the full recompute.
    ///
    /// # Errors
    /// See [`check_tokens`].
    pub fn logits(&self, tokens: &[u32]) -> Result<Vec<f32>, CheckpointError> {
        let mut cache = self.new_cache();
        self.forward(&mut cache, tokens)
    }

    /// Runs `tokens` after the positions in `cache`, appends their keys and values to
    /// it, and returns their logits (`[tokens.len(), vocab_size]`).
    ///
    /// # Errors
    /// See [`check_tokens`]; the cache is unchanged on error.
    pub fn forward(
        &self,
        cache: &mut CpuKvCache,
        tokens: &[u32],
    ) -> Result<Vec<f32>, CheckpointError> {
        let c = &self.config;
        check_tokens(c, cache.len, tokens)?;
        if cache.keys.len() != c.n_layer {
            *cache = self.new_cache();
        }
        let (d, n, past) = (c.n_embd, tokens.len(), cache.len);
        let w = &self.weights;
        // What an f16 tensor holds (unchanged for f32 storage).
        let f16 = self.rounded.is_some();
        let st = |v: Vec<f32>| {
            if f16 {
                crate::exec::cpu_ref::round_to_f16(&v)
            } else {
                v
            }
        };
        let mut x = vec![0f32; n * d];
        for (row, &t) in tokens.iter().enumerate() {
            let pos = past + row;
            let (te, pe) = (&w.wte[t as usize * d..][..d], &w.wpe[pos * d..][..d]);
            for j in 0..d {
                x[row * d + j] = te[j] + pe[j];
            }
        }
        let mut x = st(x);
        let w = self.rounded.as_deref().unwrap_or(w);
        for (l, layer) in w.layers.iter().enumerate() {
            let h = layer_norm(&x, &layer.ln_1_g, &layer.ln_1_b, c.eps());
            let qkv = st(linear(&h, &layer.attn_w, &layer.attn_b, d, 3 * d));
            for row in 0..n {
                cache.keys[l].extend_from_slice(&qkv[row * 3 * d + d..][..d]);
                cache.values[l].extend_from_slice(&qkv[row * 3 * d + 2 * d..][..d]);
            }
            let attn = st(attention(c, &qkv, &cache.keys[l], &cache.values[l], past));
            let proj = linear(&attn, &layer.proj_w, &layer.proj_b, d, d);
            add_into(&mut x, &proj);
            x = st(x);
            let h2 = layer_norm(&x, &layer.ln_2_g, &layer.ln_2_b, c.eps());
            let mut up = linear(&h2, &layer.fc_w, &layer.fc_b, d, c.inner());
            up.iter_mut().for_each(|v| *v = gelu_new(*v));
            let up = st(up);
            let down = linear(&up, &layer.fc_proj_w, &layer.fc_proj_b, c.inner(), d);
            add_into(&mut x, &down);
            x = st(x);
        }
        cache.len += n;
        let hf = st(layer_norm(&x, &w.ln_f_g, &w.ln_f_b, c.eps()));
        Ok(st(lm_head(&hf, w.head(), d, c.vocab_size)))
    }
}

/// `gelu_new`: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu_new(x: f32) -> f32 {
    let x64 = f64::from(x);
    let inner = (2.0 / std::f64::consts::PI).sqrt() * (x64 + 0.044715 * x64 * x64 * x64);
    (0.5 * x64 * (1.0 + inner.tanh())) as f32
}

/// Row-wise layer norm over rows of `gain.len()` values (biased variance).
fn layer_norm(x: &[f32], gain: &[f32], bias: &[f32], eps: f32) -> Vec<f32> {
    let d = gain.len().max(1);
    let mut out = vec![0f32; x.len()];
    for (row, o) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
        let var = row
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / d as f64;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        for j in 0..d {
            o[j] = ((f64::from(row[j]) - mean) * inv) as f32 * gain[j] + bias[j];
        }
    }
    out
}

/// `x [n, k] · w [k, m] + b [m]` (a Conv1D: weights stored `(in, out)`).
fn linear(x: &[f32], w: &[f32], b: &[f32], k: usize, m: usize) -> Vec<f32> {
    let n = x.len() / k.max(1);
    let mut out = vec![0f32; n * m];
    let mut acc = vec![0f64; m];
    for row in 0..n {
        acc.iter_mut()
            .zip(b)
            .for_each(|(a, &bias)| *a = f64::from(bias));
        for (i, &xi) in x[row * k..][..k].iter().enumerate() {
            let xi = f64::from(xi);
            for (a, &wv) in acc.iter_mut().zip(&w[i * m..][..m]) {
                *a += xi * f64::from(wv);
            }
        }
        for (o, a) in out[row * m..][..m].iter_mut().zip(&acc) {
            *o = *a as f32;
        }
    }
    out
}

/// The logits `h [n, d] · headᵀ` with `head [vocab, d]`.
fn lm_head(h: &[f32], head: &[f32], d: usize, vocab: usize) -> Vec<f32> {
    let n = h.len() / d.max(1);
    let mut out = vec![0f32; n * vocab];
    for row in 0..n {
        let x = &h[row * d..][..d];
        for (t, o) in out[row * vocab..][..vocab].iter_mut().enumerate() {
            let w = &head[t * d..][..d];
            *o = x
                .iter()
                .zip(w)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum::<f64>() as f32;
        }
    }
    out
}

fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// Causal multi-head attention of the new rows' queries (in `qkv`, `[n, 3d]`) over
/// every cached key and value (`[past + n, d]`): row `r` sees positions
/// `0..=past + r`.
fn attention(c: &Gpt2Config, qkv: &[f32], keys: &[f32], values: &[f32], past: usize) -> Vec<f32> {
    let (d, hd) = (c.n_embd, c.head_dim());
    let n = qkv.len() / (3 * d);
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f32; n * d];
    let mut scores = Vec::new();
    for row in 0..n {
        let seen = past + row + 1;
        for head in 0..c.n_head {
            let q = &qkv[row * 3 * d + head * hd..][..hd];
            scores.clear();
            for t in 0..seen {
                let k = &keys[t * d + head * hd..][..hd];
                let dot: f64 = q
                    .iter()
                    .zip(k)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                scores.push(dot * scale);
            }
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let o = &mut out[row * d + head * hd..][..hd];
            for (j, slot) in o.iter_mut().enumerate() {
                let mut acc = 0.0;
                for (t, p) in scores.iter().enumerate() {
                    acc += p * f64::from(values[t * d + head * hd + j]);
                }
                *slot = (acc / sum) as f32;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CpuGpt2 {
        let mut config = Gpt2Config::new(2, 16, 2, 13, 10);
        config.n_inner = Some(24);
        let weights = Gpt2Weights::seeded(&config, 9);
        CpuGpt2::new(config, weights).expect("model")
    }

    #[test]
    fn cached_steps_equal_a_full_recompute() {
        let m = model();
        let tokens = [3u32, 1, 12, 0, 7, 7, 2];
        let full = m.logits(&tokens).expect("full");
        let mut cache = m.new_cache();
        let mut stepped = m.forward(&mut cache, &tokens[..4]).expect("prefill");
        for &t in &tokens[4..] {
            stepped.extend(m.forward(&mut cache, &[t]).expect("step"));
        }
        assert_eq!(cache.len(), tokens.len());
        assert_eq!(full.len(), stepped.len());
        for (a, b) in full.iter().zip(&stepped) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn bad_tokens_and_long_contexts_are_typed_errors_and_leave_the_cache() {
        let m = model();
        let mut cache = m.new_cache();
        assert!(matches!(
            m.forward(&mut cache, &[13]),
            Err(CheckpointError::TokenOutOfVocab { token: 13, .. })
        ));
        assert!(matches!(
            m.forward(&mut cache, &[]),
            Err(CheckpointError::EmptyPrompt)
        ));
        m.forward(&mut cache, &[1; 8]).expect("fits");
        assert!(matches!(
            m.forward(&mut cache, &[1; 3]),
            Err(CheckpointError::ContextTooLong {
                needed: 11,
                n_positions: 10
            })
        ));
        assert_eq!(cache.len(), 8);
    }

    #[test]
    fn gelu_new_is_the_tanh_form() {
        assert_eq!(gelu_new(0.0), 0.0);
        assert!((gelu_new(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_new(-3.0) + 0.003_637_7).abs() < 1e-5);
    }
}
