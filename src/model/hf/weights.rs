//! [`Gpt2Weights`]: every parameter of a GPT-2 as f32, named as Hugging Face names
//! them, with seeded random weights for checkpoints made in code.

use super::Gpt2Config;
use crate::model::SeededRng;

/// One transformer block's parameters. Conv1D weights are `(in, out)`, row-major, as
/// HF stores them.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    /// `ln_1.weight` `[n_embd]`.
    pub ln_1_g: Vec<f32>,
    /// `ln_1.bias` `[n_embd]`.
    pub ln_1_b: Vec<f32>,
    /// `attn.c_attn.weight` `[n_embd, 3 n_embd]` (q | k | v columns).
    pub attn_w: Vec<f32>,
    /// `attn.c_attn.bias` `[3 n_embd]`.
    pub attn_b: Vec<f32>,
    /// `attn.c_proj.weight` `[n_embd, n_embd]`.
    pub proj_w: Vec<f32>,
    /// `attn.c_proj.bias` `[n_embd]`.
    pub proj_b: Vec<f32>,
    /// `ln_2.weight` `[n_embd]`.
    pub ln_2_g: Vec<f32>,
    /// `ln_2.bias` `[n_embd]`.
    pub ln_2_b: Vec<f32>,
    /// `mlp.c_fc.weight` `[n_embd, n_inner]`.
    pub fc_w: Vec<f32>,
    /// `mlp.c_fc.bias` `[n_inner]`.
    pub fc_b: Vec<f32>,
    /// `mlp.c_proj.weight` `[n_inner, n_embd]`.
    pub fc_proj_w: Vec<f32>,
    /// `mlp.c_proj.bias` `[n_embd]`.
    pub fc_proj_b: Vec<f32>,
}

/// Every parameter of a GPT-2 (`GPT2LMHeadModel`).
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Weights {
    /// `wte.weight` `[vocab_size, n_embd]`: token embeddings (and the LM head when tied).
    pub wte: Vec<f32>,
    /// `wpe.weight` `[n_positions, n_embd]`: learned position embeddings.
    pub wpe: Vec<f32>,
    /// The blocks, in order.
    pub layers: Vec<LayerWeights>,
    /// `ln_f.weight` `[n_embd]`.
    pub ln_f_g: Vec<f32>,
    /// `ln_f.bias` `[n_embd]`.
    pub ln_f_b: Vec<f32>,
    /// `lm_head.weight` `[vocab_size, n_embd]` when the head is not tied to `wte`.
    pub lm_head: Option<Vec<f32>>,
}

/// A parameter's name (without the `transformer.` prefix) and shape.
pub(crate) type Spec = (String, Vec<usize>);

/// The names and shapes of a block's parameters, in [`LayerWeights`]' field order.
pub(crate) fn layer_specs(config: &Gpt2Config, layer: usize) -> Vec<Spec> {
    let (d, i) = (config.n_embd, config.inner());
    let p = |s: &str| format!("h.{layer}.{s}");
    vec![
        (p("ln_1.weight"), vec![d]),
        (p("ln_1.bias"), vec![d]),
        (p("attn.c_attn.weight"), vec![d, 3 * d]),
        (p("attn.c_attn.bias"), vec![3 * d]),
        (p("attn.c_proj.weight"), vec![d, d]),
        (p("attn.c_proj.bias"), vec![d]),
        (p("ln_2.weight"), vec![d]),
        (p("ln_2.bias"), vec![d]),
        (p("mlp.c_fc.weight"), vec![d, i]),
        (p("mlp.c_fc.bias"), vec![i]),
        (p("mlp.c_proj.weight"), vec![i, d]),
        (p("mlp.c_proj.bias"), vec![d]),
    ]
}

impl LayerWeights {
    /// The fields in [`layer_specs`] order.
    pub(crate) fn fields(&self) -> [&Vec<f32>; 12] {
        [
            &self.ln_1_g,
            &self.ln_1_b,
            &self.attn_w,
            &self.attn_b,
            &self.proj_w,
            &self.proj_b,
            &self.ln_2_g,
            &self.ln_2_b,
            &self.fc_w,
            &self.fc_b,
            &self.fc_proj_w,
            &self.fc_proj_b,
        ]
    }

    /// Builds a block from its 12 tensors in [`layer_specs`] order.
    pub(crate) fn from_fields(mut f: Vec<Vec<f32>>) -> LayerWeights {
        f.resize(12, Vec::new());
        let mut it = f.into_iter();
        let mut next = || it.next().unwrap_or_default();
        LayerWeights {
            ln_1_g: next(),
            ln_1_b: next(),
            attn_w: next(),
            attn_b: next(),
            proj_w: next(),
            proj_b: next(),
            ln_2_g: next(),
            ln_2_b: next(),
            fc_w: next(),
            fc_b: next(),
            fc_proj_w: next(),
            fc_proj_b: next(),
        }
    }
}

impl Gpt2Weights {
    /// Seeded random weights for `config` (uniform; layer-norm gains near 1), so that
    /// a model needs no file. The same seed gives the same weights on every platform.
    pub fn seeded(config: &Gpt2Config, seed: u64) -> Gpt2Weights {
        let mut rng = SeededRng::new(seed);
        let (d, v, p) = (config.n_embd, config.vocab_size, config.n_positions);
        let mut uniform = |n: usize, scale: f32| -> Vec<f32> {
            (0..n).map(|_| rng.next_signed() * scale).collect()
        };
        let wte = uniform(v * d, 0.3);
        let wpe = uniform(p * d, 0.5);
        let mut layers = Vec::with_capacity(config.n_layer);
        for l in 0..config.n_layer {
            let fields = layer_specs(config, l)
                .into_iter()
                .map(|(name, shape)| {
                    let n: usize = shape.iter().product();
                    if name.ends_with("ln_1.weight") || name.ends_with("ln_2.weight") {
                        uniform(n, 0.1).into_iter().map(|x| 1.0 + x).collect()
                    } else if shape.len() == 2 {
                        uniform(n, 3.0 / (shape[0] as f32).sqrt())
                    } else {
                        uniform(n, 0.05)
                    }
                })
                .collect();
            layers.push(LayerWeights::from_fields(fields));
        }
        let ln_f_g = uniform(d, 0.1).into_iter().map(|x| 1.0 + x).collect();
        let ln_f_b = uniform(d, 0.05);
        let lm_head = (!config.tie_word_embeddings).then(|| uniform(v * d, 0.2));
        Gpt2Weights {
            wte,
            wpe,
            layers,
            ln_f_g,
            ln_f_b,
            lm_head,
        }
    }

    /// The LM head `[vocab_size, n_embd]`: `lm_head` when untied, else `wte`.
    pub fn head(&self) -> &[f32] {
        self.lm_head.as_deref().unwrap_or(&self.wte)
    }

    /// Every tensor with its name (without the `transformer.` prefix, `lm_head.weight`
    /// as is) and shape.
    pub fn named(&self, config: &Gpt2Config) -> Vec<(String, Vec<usize>, &[f32])> {
        let (d, v, p) = (config.n_embd, config.vocab_size, config.n_positions);
        let mut out: Vec<(String, Vec<usize>, &[f32])> = vec![
            ("wte.weight".into(), vec![v, d], &self.wte),
            ("wpe.weight".into(), vec![p, d], &self.wpe),
        ];
        for (l, layer) in self.layers.iter().enumerate() {
            for ((name, shape), values) in layer_specs(config, l).into_iter().zip(layer.fields()) {
                out.push((name, shape, values));
            }
        }
        out.push(("ln_f.weight".into(), vec![d], &self.ln_f_g));
        out.push(("ln_f.bias".into(), vec![d], &self.ln_f_b));
        if let Some(head) = &self.lm_head {
            out.push(("lm_head.weight".into(), vec![v, d], head));
        }
        out
    }

    /// Bytes of all parameters (f32).
    pub fn bytes(&self, config: &Gpt2Config) -> u64 {
        self.named(config)
            .iter()
            .map(|(_, _, v)| 4 * v.len() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_weights_have_the_config_shapes_and_repeat() {
        let mut c = Gpt2Config::new(2, 16, 2, 11, 8);
        c.n_inner = Some(20);
        let w = Gpt2Weights::seeded(&c, 5);
        assert_eq!(w, Gpt2Weights::seeded(&c, 5));
        assert_ne!(w.wte, Gpt2Weights::seeded(&c, 6).wte);
        for (name, shape, values) in w.named(&c) {
            assert_eq!(shape.iter().product::<usize>(), values.len(), "{name}");
        }
        assert_eq!(w.layers[1].fc_w.len(), 16 * 20);
        assert_eq!(w.bytes(&c), 4 * c.parameters());
        assert!(w.lm_head.is_none());
    }
}
