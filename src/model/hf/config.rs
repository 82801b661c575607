//! [`Gpt2Config`]: the fields of a Hugging Face `config.json` that GPT-2's forward pass
//! reads, with their checks.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::CheckpointError;

/// The GPT-2 configuration (`GPT2Config`'s fields that change the forward pass).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpt2Config {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width.
    pub n_embd: usize,
    /// Attention heads (divides `n_embd`).
    pub n_head: usize,
    /// Width of the MLP's hidden layer; `None` (JSON `null`) means `4 * n_embd`.
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Learned positions: the longest context.
    pub n_positions: usize,
    /// Layer-norm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    /// The MLP's activation; only `gelu_new` is taken.
    #[serde(default = "default_activation")]
    pub activation_function: String,
    /// Whether the LM head is `wte` (HF's default: true).
    #[serde(default = "default_tied")]
    pub tie_word_embeddings: bool,
}

fn default_eps() -> f64 {
    1e-5
}

fn default_activation() -> String {
    "gelu_new".to_string()
}

fn default_tied() -> bool {
    true
}

impl Gpt2Config {
    /// A configuration with HF's defaults for the fields not given (`n_inner` null,
    /// epsilon 1e-5, `gelu_new`, tied head).
    pub fn new(
        n_layer: usize,
        n_embd: usize,
        n_head: usize,
        vocab_size: usize,
        n_positions: usize,
    ) -> Gpt2Config {
        Gpt2Config {
            n_layer,
            n_embd,
            n_head,
            n_inner: None,
            vocab_size,
            n_positions,
            layer_norm_epsilon: default_eps(),
            activation_function: default_activation(),
            tie_word_embeddings: true,
        }
    }

    /// GPT-2 small's shape: 12 layers, width 768, 12 heads, vocabulary 50257, 1024
    /// positions.
    pub fn gpt2_small() -> Gpt2Config {
        Gpt2Config::new(12, 768, 12, 50257, 1024)
    }

    /// Reads and checks `config.json`.
    ///
    /// # Errors
    /// [`CheckpointError::Io`], [`CheckpointError::BadConfigJson`] and whatever
    /// [`Gpt2Config::check`] refuses.
    pub fn from_file(path: &Path) -> Result<Gpt2Config, CheckpointError> {
        let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Gpt2Config::from_json(&text).map_err(|e| match e {
            CheckpointError::BadConfigJson { message, .. } => CheckpointError::BadConfigJson {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parses and checks a `config.json` text.
    ///
    /// # Errors
    /// [`CheckpointError::BadConfigJson`] and whatever [`Gpt2Config::check`] refuses.
    pub fn from_json(text: &str) -> Result<Gpt2Config, CheckpointError> {
        let config: Gpt2Config =
            serde_json::from_str(text).map_err(|e| CheckpointError::BadConfigJson {
                path: "config.json".to_string(),
                message: e.to_string(),
            })?;
        config.check()?;
        Ok(config)
    }

    /// The MLP's hidden width (`n_inner`, or `4 * n_embd` when null; saturating, so
    /// that [`Gpt2Config::check`] can refuse a width past `usize`).
    pub fn inner(&self) -> usize {
        self.n_inner.unwrap_or(self.n_embd.saturating_mul(4))
    }

    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head.max(1)
    }

    /// Layer-norm epsilon as f32 (what the kernels take).
    pub fn eps(&self) -> f32 {
        self.layer_norm_epsilon as f32
    }

    /// Parameters of the model (the LM head counted when it is not tied); saturates at
    /// `u64::MAX`, which [`Gpt2Config::check`] refuses.
    pub fn parameters(&self) -> u64 {
        u64::try_from(self.parameters_wide()).unwrap_or(u64::MAX)
    }

    /// [`Gpt2Config::parameters`] in 128 bits, saturating: no config wraps it.
    fn parameters_wide(&self) -> u128 {
        let (d, i, v, p) = (
            self.n_embd as u128,
            self.inner() as u128,
            self.vocab_size as u128,
            self.n_positions as u128,
        );
        let mul = u128::saturating_mul;
        // ln_1, attn (c_attn, c_proj), ln_2, mlp (c_fc, c_proj): weights and biases.
        let layer = [
            2 * d,
            mul(3 * d, d),
            3 * d,
            mul(d, d),
            d,
            2 * d,
            mul(d, i),
            i,
            mul(i, d),
            d,
        ]
        .into_iter()
        .fold(0u128, u128::saturating_add);
        let head = if self.tie_word_embeddings {
            0
        } else {
            mul(v, d)
        };
        [
            mul(v, d),
            mul(p, d),
            mul(self.n_layer as u128, layer),
            2 * d,
            head,
        ]
        .into_iter()
        .fold(0u128, u128::saturating_add)
    }

    /// Checks the fields: positive dimensions, heads dividing the width, a finite
    /// positive epsilon, `gelu_new`, sizes within 32-bit element counts (computed
    /// without wrapping), a 32-bit block count and a parameter count within 64 bits.
    ///
    /// # Errors
    /// [`CheckpointError::BadConfig`] naming the field, or
    /// [`CheckpointError::UnsupportedActivation`].
    pub fn check(&self) -> Result<(), CheckpointError> {
        for (field, value) in [
            ("n_layer", self.n_layer),
            ("n_embd", self.n_embd),
            ("n_head", self.n_head),
            ("vocab_size", self.vocab_size),
            ("n_positions", self.n_positions),
            ("n_inner", self.inner()),
        ] {
            if value == 0 {
                return Err(CheckpointError::BadConfig {
                    field,
                    problem: "must be at least 1".to_string(),
                });
            }
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(CheckpointError::BadConfig {
                field: "n_head",
                problem: format!("{} does not divide n_embd = {}", self.n_head, self.n_embd),
            });
        }
        let eps = self.layer_norm_epsilon;
        if !(eps.is_finite() && eps > 0.0 && (eps as f32) > 0.0) {
            return Err(CheckpointError::BadConfig {
                field: "layer_norm_epsilon",
                problem: format!("{eps} is not a positive finite f32"),
            });
        }
        if self.activation_function != "gelu_new" {
            return Err(CheckpointError::UnsupportedActivation {
                found: self.activation_function.clone(),
            });
        }
        // The numbers come from a file: 128-bit products, so that none wraps to a
        // small size.
        let limit = u128::from(u32::MAX);
        let elements = |a: usize, b: usize| (a as u128).saturating_mul(b as u128);
        let big = [
            ("vocab_size", elements(self.vocab_size, self.n_embd)),
            ("n_positions", elements(self.n_positions, self.n_embd)),
            ("n_inner", elements(self.inner(), self.n_embd)),
            (
                "n_embd",
                elements(self.n_embd, self.n_embd).saturating_mul(3),
            ),
        ];
        for (field, elements) in big {
            if elements > limit {
                return Err(CheckpointError::BadConfig {
                    field,
                    problem: format!("a tensor of {elements} elements is past 32-bit indexing"),
                });
            }
        }
        if u32::try_from(self.n_layer).is_err() {
            return Err(CheckpointError::BadConfig {
                field: "n_layer",
                problem: format!("{} blocks are past a 32-bit count", self.n_layer),
            });
        }
        if u64::try_from(self.parameters_wide()).is_err() {
            return Err(CheckpointError::BadConfig {
                field: "n_layer",
                problem: "the parameter count overflows 64 bits".to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_inner_is_four_times_the_width_and_defaults_apply() {
        let c = Gpt2Config::from_json(
            r#"{"n_layer":2,"n_embd":64,"n_head":4,"n_inner":null,"vocab_size":512,
                "n_positions":64}"#,
        )
        .expect("parses");
        assert_eq!(c.inner(), 256);
        assert_eq!(c.head_dim(), 16);
        assert!(c.tie_word_embeddings);
        assert_eq!(c.eps(), 1e-5);
    }

    #[test]
    fn another_activation_is_a_typed_error() {
        let e = Gpt2Config::from_json(
            r#"{"n_layer":1,"n_embd":8,"n_head":2,"vocab_size":5,"n_positions":4,
                "activation_function":"relu"}"#,
        );
        assert!(
            matches!(e, Err(CheckpointError::UnsupportedActivation { ref found }) if found == "relu")
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let mut c = Gpt2Config::new(1, 10, 3, 5, 4);
        assert!(matches!(
            c.check(),
            Err(CheckpointError::BadConfig {
                field: "n_head",
                ..
            })
        ));
        c.n_head = 2;
        c.layer_norm_epsilon = -1.0;
        assert!(matches!(
            c.check(),
            Err(CheckpointError::BadConfig {
                field: "layer_norm_epsilon",
                ..
            })
        ));
        let e = Gpt2Config::from_json(r#"{"n_layer":1}"#);
        assert!(matches!(e, Err(CheckpointError::BadConfigJson { .. })));
    }

    #[test]
    fn gpt2_small_has_124m_parameters() {
        let p = Gpt2Config::gpt2_small().parameters();
        assert!((124_000_000..125_000_000).contains(&p), "{p}");
    }
}
