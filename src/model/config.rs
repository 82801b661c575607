//! Model configuration and its checks.

use serde::Serialize;

use crate::exec::StorageType;
use thiserror::Error;
use wgalloc_plan::ErrorKind;

/// Why a model configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A dimension that must be positive is zero.
    #[error("{what} must be at least 1 (got 0)")]
    Zero {
        /// The dimension (`layers`, `width`, ...).
        what: &'static str,
    },
    /// The width is not a multiple of the number of heads.
    #[error("width {width} is not divisible by heads {heads}")]
    HeadsDoNotDivide {
        /// Model width.
        width: u64,
        /// Attention heads.
        heads: u64,
    },
    /// A tensor of the model does not fit the device's largest storage binding.
    #[error("tensor {tensor} needs {size} bytes, more than the device's largest storage binding ({max_size} bytes): {hint}")]
    TooLargeForDevice {
        /// The tensor's name.
        tensor: String,
        /// Its size.
        size: u64,
        /// The limit.
        max_size: u64,
        /// What to reduce.
        hint: &'static str,
    },
    /// Sizes overflow 64 bits.
    #[error("model dimensions overflow 64-bit sizes")]
    Overflow,
}

/// Dimensions of the built-in decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModelConfig {
    /// Transformer layers.
    pub layers: u64,
    /// Model width (embedding size).
    pub width: u64,
    /// Attention heads; must divide `width`.
    pub heads: u64,
    /// Tokens in the sequence.
    pub seq: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Seed of the random weights and tokens.
    pub seed: u64,
    /// How weights and activations are stored: f32, or f16 (half the bytes; kernels
    /// accumulate in f32; the device needs `shader-f16`). Token ids stay u32.
    pub dtype: StorageType,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            layers: 4,
            width: 256,
            heads: 4,
            seq: 128,
            vocab: 1024,
            seed: 42,
            dtype: StorageType::F32,
        }
    }
}

impl ModelConfig {
    /// Checks the dimensions.
    ///
    /// # Errors
    /// [`ModelError::Zero`] for a zero dimension, [`ModelError::HeadsDoNotDivide`],
    /// [`ModelError::Overflow`].
    pub fn check(&self) -> Result<(), ModelError> {
        for (what, value) in [
            ("layers", self.layers),
            ("width", self.width),
            ("heads", self.heads),
            ("seq", self.seq),
            ("vocab", self.vocab),
        ] {
            if value == 0 {
                return Err(ModelError::Zero { what });
            }
        }
        if !self.width.is_multiple_of(self.heads) {
            return Err(ModelError::HeadsDoNotDivide {
                width: self.width,
                heads: self.heads,
            });
        }
        let biggest = [
            self.seq.checked_mul(self.seq),
            self.seq.checked_mul(self.vocab),
            self.width.checked_mul(self.width.saturating_mul(4)),
            self.vocab.checked_mul(self.width),
            self.seq.checked_mul(self.width.saturating_mul(4)),
        ];
        for elements in biggest {
            elements
                .and_then(|n| n.checked_mul(4))
                .ok_or(ModelError::Overflow)?;
        }
        Ok(())
    }

    /// Checks every tensor against the device's largest storage binding.
    ///
    /// # Errors
    /// [`ModelError::TooLargeForDevice`] naming the first tensor that cannot be bound.
    pub fn check_against(&self, max_binding: u64) -> Result<(), ModelError> {
        self.check()?;
        let element = self.dtype.dtype().size();
        let f32s = |n: u64| n.saturating_mul(element);
        let tensors = [
            (
                "attention scores",
                f32s(self.seq * self.seq),
                "reduce --seq",
            ),
            (
                "logits",
                f32s(self.seq * self.vocab),
                "reduce --seq or --vocab",
            ),
            (
                "token embedding",
                f32s(self.vocab * self.width),
                "reduce --vocab or --width",
            ),
            (
                "MLP weight",
                f32s(self.width * self.width * 4),
                "reduce --width",
            ),
            (
                "MLP activation",
                f32s(self.seq * self.width * 4),
                "reduce --seq or --width",
            ),
        ];
        for (tensor, size, hint) in tensors {
            if size > max_binding {
                return Err(ModelError::TooLargeForDevice {
                    tensor: tensor.to_string(),
                    size,
                    max_size: max_binding,
                    hint,
                });
            }
        }
        Ok(())
    }
}

impl ModelError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ModelError::TooLargeForDevice { .. } => ErrorKind::NeverFits,
            _ => ErrorKind::BadInput,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_layers_and_indivisible_heads_are_refused() {
        let zero = ModelConfig {
            layers: 0,
            ..ModelConfig::default()
        };
        assert_eq!(zero.check(), Err(ModelError::Zero { what: "layers" }));
        let bad_heads = ModelConfig {
            width: 250,
            heads: 4,
            ..ModelConfig::default()
        };
        assert!(matches!(
            bad_heads.check(),
            Err(ModelError::HeadsDoNotDivide { .. })
        ));
    }

    #[test]
    fn a_sequence_too_long_for_the_binding_limit_is_refused() {
        let long = ModelConfig {
            seq: 8192,
            ..ModelConfig::default()
        };
        // 8192 x 8192 x 4 bytes = 256 MiB of scores > 128 MiB (lavapipe's limit)
        match long.check_against(128 << 20) {
            Err(ModelError::TooLargeForDevice { tensor, .. }) => {
                assert_eq!(tensor, "attention scores")
            }
            other => panic!("{other:?}"),
        }
        assert!(ModelConfig::default().check_against(128 << 20).is_ok());
    }
}
