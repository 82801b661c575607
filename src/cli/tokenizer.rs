//! GPT-2's tokenizer for `wgalloc generate --prompt`: the r50k_base byte-pair encoding
//! (GPT-2's vocabulary of 50257 tokens), bundled in the `tiktoken-rs` crate, so it works
//! offline.

use tiktoken_rs::CoreBPE;
use wgalloc::model::hf::CheckpointError;

/// GPT-2's vocabulary size: ids the tokenizer produces are below it.
pub const GPT2_VOCAB: usize = 50257;

/// GPT-2's BPE.
pub struct Gpt2Tokenizer {
    bpe: CoreBPE,
}

impl Gpt2Tokenizer {
    /// Loads the bundled r50k_base ranks.
    ///
    /// # Errors
    /// [`CheckpointError::Tokenizer`] when the bundled table cannot be read.
    pub fn new() -> Result<Gpt2Tokenizer, CheckpointError> {
        let bpe = tiktoken_rs::r50k_base().map_err(|e| CheckpointError::Tokenizer {
            message: e.to_string(),
        })?;
        Ok(Gpt2Tokenizer { bpe })
    }

    /// The token ids of `text` (special tokens are not recognised: `<|endoftext|>` is
    /// text).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    /// The text of `ids` (bytes that are not UTF-8 on their own shown as U+FFFD).
    ///
    /// # Errors
    /// [`CheckpointError::Tokenizer`] for an id outside GPT-2's vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, CheckpointError> {
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= GPT2_VOCAB) {
            return Err(CheckpointError::Tokenizer {
                message: format!("token id {bad} is outside GPT-2's vocabulary"),
            });
        }
        let bytes = self
            .bpe
            .decode_bytes(ids)
            .map_err(|e| CheckpointError::Tokenizer {
                message: format!("{e:?}"),
            })?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_ids_of_a_known_sentence() {
        let t = Gpt2Tokenizer::new().expect("bundled");
        // GPT-2's own ids for "Hello world".
        assert_eq!(t.encode("Hello world"), vec![15496, 995]);
        assert_eq!(t.decode(&[15496, 995]).expect("decodes"), "Hello world");
        assert!(t.decode(&[50257]).is_err());
    }
}
