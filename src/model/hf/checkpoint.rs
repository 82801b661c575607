//! Reading and writing a GPT-2 checkpoint directory: `config.json` +
//! `model.safetensors`, as `GPT2LMHeadModel.save_pretrained` writes it.
//!
//! Names are taken with or without the `transformer.` prefix (`save_pretrained`
//! writes it, the original hub files do not); Conv1D weights are `(in, out)`;
//! `lm_head.weight` may be absent when the head is tied; the old causal-mask buffers
//! (`h.N.attn.bias` of shape `[1, 1, P, P]`, `h.N.attn.masked_bias`) are ignored.

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::weights::{layer_specs, LayerWeights};
use super::{CheckpointError, Gpt2Config, Gpt2Weights};

/// A loaded checkpoint: its configuration and weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// `config.json`.
    pub config: Gpt2Config,
    /// `model.safetensors`, as f32.
    pub weights: Gpt2Weights,
}

const PREFIX: &str = "transformer.";

impl Checkpoint {
    /// Loads `dir/config.json` and `dir/model.safetensors`, checking every tensor
    /// against the config.
    ///
    /// # Errors
    /// [`CheckpointError`]: unreadable files, a bad config, a corrupt or truncated
    /// safetensors file, a missing tensor, a wrong shape or dtype, a tensor the config
    /// does not account for.
    pub fn load(dir: &Path) -> Result<Checkpoint, CheckpointError> {
        let config = Gpt2Config::from_file(&dir.join("config.json"))?;
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path).map_err(|source| CheckpointError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let weights = weights_from_safetensors(&config, &bytes, &path.display().to_string())?;
        Ok(Checkpoint { config, weights })
    }

    /// Writes `dir/config.json` and `dir/model.safetensors` (names with the
    /// `transformer.` prefix when `prefixed`, as `save_pretrained` does). Creates `dir`.
    ///
    /// # Errors
    /// [`CheckpointError::Write`] when a file cannot be written.
    pub fn save(&self, dir: &Path, prefixed: bool) -> Result<(), CheckpointError> {
        let write = |e: String| CheckpointError::Write { message: e };
        std::fs::create_dir_all(dir).map_err(|e| write(format!("{}: {e}", dir.display())))?;
        let json = serde_json::to_string_pretty(&self.config).map_err(|e| write(e.to_string()))?;
        std::fs::write(dir.join("config.json"), json)
            .map_err(|e| write(format!("config.json: {e}")))?;
        let bytes = self.safetensors_bytes(prefixed)?;
        std::fs::write(dir.join("model.safetensors"), bytes)
            .map_err(|e| write(format!("model.safetensors: {e}")))
    }

    /// The weights as a safetensors file's bytes.
    ///
    /// # Errors
    /// [`CheckpointError::Write`] when the serializer refuses a tensor.
    pub fn safetensors_bytes(&self, prefixed: bool) -> Result<Vec<u8>, CheckpointError> {
        let named = self.weights.named(&self.config);
        let data: Vec<(String, Vec<usize>, Vec<u8>)> = named
            .into_iter()
            .map(|(name, shape, values)| {
                let name = if prefixed && name != "lm_head.weight" {
                    format!("{PREFIX}{name}")
                } else {
                    name
                };
                let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                (name, shape, bytes)
            })
            .collect();
        let views = data
            .iter()
            .map(|(name, shape, bytes)| {
                safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytes)
                    .map(|view| (name.clone(), view))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CheckpointError::Write {
                message: e.to_string(),
            })?;
        safetensors::serialize(views, None).map_err(|e| CheckpointError::Write {
            message: e.to_string(),
        })
    }
}

/// Reads every tensor `config` needs from a safetensors file's bytes (`path` is for
/// messages only).
///
/// # Errors
/// See [`Checkpoint::load`].
pub fn weights_from_safetensors(
    config: &Gpt2Config,
    bytes: &[u8],
    path: &str,
) -> Result<Gpt2Weights, CheckpointError> {
    check_offsets_within(bytes, path)?;
    let file =
        SafeTensors::deserialize(bytes).map_err(|e| CheckpointError::CorruptSafetensors {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
    let names: HashMap<&str, ()> = file.names().into_iter().map(|n| (n, ())).collect();
    check_no_extra_layers(config, names.keys().copied())?;
    let read = |name: &str, shape: &[usize]| -> Result<Vec<f32>, CheckpointError> {
        let prefixed = format!("{PREFIX}{name}");
        let stored = if names.contains_key(prefixed.as_str()) {
            prefixed
        } else if names.contains_key(name) {
            name.to_string()
        } else {
            return Err(CheckpointError::MissingTensor {
                name: name.to_string(),
                alternative: prefixed,
            });
        };
        let view = file
            .tensor(&stored)
            .map_err(|e| CheckpointError::CorruptSafetensors {
                path: path.to_string(),
                reason: e.to_string(),
            })?;
        if view.shape() != shape {
            return Err(CheckpointError::WrongShape {
                name: stored,
                expected: shape.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        to_f32(&stored, view.dtype(), view.data())
    };
    let (d, v, p) = (config.n_embd, config.vocab_size, config.n_positions);
    let wte = read("wte.weight", &[v, d])?;
    let wpe = read("wpe.weight", &[p, d])?;
    // `n_layer` is a number from the file: blocks are collected as they are read (the
    // first missing one ends the loop), never reserved up front.
    let mut layers = Vec::new();
    for l in 0..config.n_layer {
        let fields = layer_specs(config, l)
            .iter()
            .map(|(name, shape)| read(name, shape))
            .collect::<Result<Vec<_>, _>>()?;
        layers.push(LayerWeights::from_fields(fields));
    }
    let ln_f_g = read("ln_f.weight", &[d])?;
    let ln_f_b = read("ln_f.bias", &[d])?;
    // A tied head is `wte` (as HF ties it, a stored `lm_head.weight` is not read).
    let lm_head = if config.tie_word_embeddings {
        None
    } else {
        Some(read("lm_head.weight", &[v, d])?)
    };
    Ok(Gpt2Weights {
        wte,
        wpe,
        layers,
        ln_f_g,
        ln_f_b,
        lm_head,
    })
}

/// Refuses a header whose tensors end past the data, before safetensors reads it:
/// safetensors 0.8 adds the last tensor's end to the header length unchecked
/// (`read_metadata`), so offsets that chain validly up to near `usize::MAX` overflow
/// there, a panic where overflow checks are on. A header it cannot read is left to
/// safetensors to refuse.
///
/// # Errors
/// [`CheckpointError::CorruptSafetensors`] naming the first tensor (by name) that ends
/// past the data.
fn check_offsets_within(bytes: &[u8], path: &str) -> Result<(), CheckpointError> {
    let Some((declared, rest)) = bytes.split_first_chunk::<8>() else {
        return Ok(());
    };
    let header = usize::try_from(u64::from_le_bytes(*declared))
        .ok()
        .and_then(|n| rest.get(..n));
    let Some(header) = header else {
        return Ok(());
    };
    let Ok(serde_json::Value::Object(tensors)) = serde_json::from_slice(header) else {
        return Ok(());
    };
    let data = (rest.len() - header.len()) as u64;
    for (name, info) in &tensors {
        let end = info
            .get("data_offsets")
            .and_then(|o| o.get(1))
            .and_then(serde_json::Value::as_u64);
        if let Some(end) = end.filter(|&end| end > data) {
            return Err(CheckpointError::CorruptSafetensors {
                path: path.to_string(),
                reason: format!(
                    "tensor {name} ends at byte {end} of the data, past the {data} bytes after the header"
                ),
            });
        }
    }
    Ok(())
}

/// A block numbered at or past `n_layer` means the weights are of another config.
fn check_no_extra_layers<'a>(
    config: &Gpt2Config,
    names: impl Iterator<Item = &'a str>,
) -> Result<(), CheckpointError> {
    for name in names {
        let bare = name.strip_prefix(PREFIX).unwrap_or(name);
        let Some(rest) = bare.strip_prefix("h.") else {
            continue;
        };
        let layer = rest.split('.').next().and_then(|n| n.parse::<usize>().ok());
        if let Some(layer) = layer {
            if layer >= config.n_layer {
                return Err(CheckpointError::ConfigMismatch {
                    name: name.to_string(),
                    problem: format!(
                        "block {layer} is in the weights but the config has n_layer = {}",
                        config.n_layer
                    ),
                });
            }
        }
    }
    Ok(())
}

/// A tensor's bytes as f32 (F32 as is; F16 and BF16 widened).
fn to_f32(name: &str, dtype: Dtype, data: &[u8]) -> Result<Vec<f32>, CheckpointError> {
    let wrong = || CheckpointError::WrongDtype {
        name: name.to_string(),
        found: format!("{dtype:?}"),
    };
    match dtype {
        Dtype::F32 => Ok(data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()),
        Dtype::F16 => Ok(data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect()),
        Dtype::BF16 => Ok(data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect()),
        _ => Err(wrong()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Checkpoint {
        let config = Gpt2Config::new(2, 8, 2, 7, 5);
        let weights = Gpt2Weights::seeded(&config, 1);
        Checkpoint { config, weights }
    }

    #[test]
    fn written_weights_read_back_with_and_without_the_prefix() {
        let c = small();
        for prefixed in [true, false] {
            let bytes = c.safetensors_bytes(prefixed).expect("serializes");
            let back = weights_from_safetensors(&c.config, &bytes, "mem").expect("reads");
            assert_eq!(back, c.weights);
        }
    }

    #[test]
    fn a_missing_tensor_and_an_extra_layer_are_named() {
        let c = small();
        let bytes = c.safetensors_bytes(true).expect("serializes");
        let mut fewer = c.config.clone();
        fewer.n_layer = 1;
        match weights_from_safetensors(&fewer, &bytes, "mem") {
            Err(CheckpointError::ConfigMismatch { name, .. }) => assert!(name.contains("h.1.")),
            other => panic!("{other:?}"),
        }
        let mut more = c.config.clone();
        more.n_layer = 3;
        match weights_from_safetensors(&more, &bytes, "mem") {
            Err(CheckpointError::MissingTensor { name, .. }) => {
                assert_eq!(name, "h.2.ln_1.weight")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn half_precision_widens_and_ints_are_refused() {
        let h = half::f16::from_f32(1.5).to_le_bytes();
        assert_eq!(to_f32("x", Dtype::F16, &h).expect("f16"), vec![1.5]);
        let b = half::bf16::from_f32(-2.0).to_le_bytes();
        assert_eq!(to_f32("x", Dtype::BF16, &b).expect("bf16"), vec![-2.0]);
        assert!(matches!(
            to_f32("x", Dtype::I32, &[0; 4]),
            Err(CheckpointError::WrongDtype { .. })
        ));
    }
}
