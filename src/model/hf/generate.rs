//! Greedy generation over any [`Decoder`] (the CPU reference or the GPU runner): the
//! prompt is prefilled, then each chosen token is fed back one step at a time, as
//! `generate(do_sample=False, use_cache=True)` does.

use std::time::{Duration, Instant};

use super::cpu::{check_tokens, CpuGpt2, CpuKvCache};
use super::{CheckpointError, Gpt2Config};

/// Something that runs GPT-2 incrementally: it keeps a context and appends tokens.
pub trait Decoder {
    /// The model's configuration.
    fn config(&self) -> &Gpt2Config;
    /// Positions in the context so far.
    fn context_len(&self) -> usize;
    /// Forgets the context.
    fn reset(&mut self);
    /// Appends `tokens` to the context and returns their logits
    /// (`[tokens.len(), vocab_size]`).
    ///
    /// # Errors
    /// A bad token or a context past `n_positions` ([`CheckpointError`]), or whatever
    /// the implementation fails with; the context is then unchanged.
    fn append(&mut self, tokens: &[u32]) -> crate::Result<Vec<f32>>;
    /// Like [`Decoder::append`], for when only the last position's logits are needed
    /// (`[vocab_size]`); implementations may compute less.
    ///
    /// # Errors
    /// As [`Decoder::append`].
    fn append_last(&mut self, tokens: &[u32]) -> crate::Result<Vec<f32>> {
        let vocab = self.config().vocab_size;
        let all = self.append(tokens)?;
        Ok(all[all.len().saturating_sub(vocab)..].to_vec())
    }
}

/// What a greedy generation produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The prompt's token ids.
    pub prompt_ids: Vec<u32>,
    /// The generated token ids, in order.
    pub generated_ids: Vec<u32>,
    /// The logits each generated token was chosen from (`[vocab_size]` each).
    pub step_logits: Vec<Vec<f32>>,
    /// Time of the prefill (the prompt's step).
    pub prefill_time: Duration,
    /// Time of each decode step (one token each).
    pub decode_times: Vec<Duration>,
}

impl Generation {
    /// Prompt tokens per second of the prefill.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_ids.len() as f64 / self.prefill_time.as_secs_f64().max(1e-12)
    }

    /// Tokens per second of the decode steps (`None` when there were none).
    pub fn decode_tokens_per_second(&self) -> Option<f64> {
        let total: Duration = self.decode_times.iter().sum();
        (!self.decode_times.is_empty())
            .then(|| self.decode_times.len() as f64 / total.as_secs_f64().max(1e-12))
    }
}

/// The index of the largest logit (the first one on a tie, as `argmax` does).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy generation of `max_new_tokens` tokens after `prompt`, from an empty context.
///
/// # Errors
/// [`CheckpointError::EmptyPrompt`], a token past the vocabulary, a context that would
/// pass `n_positions` (checked before anything runs), and the decoder's errors.
pub fn generate_greedy(
    decoder: &mut dyn Decoder,
    prompt: &[u32],
    max_new_tokens: usize,
) -> crate::Result<Generation> {
    let config = decoder.config().clone();
    check_tokens(&config, 0, prompt)?;
    // The last generated token is never fed back.
    let needed = prompt.len() + max_new_tokens.saturating_sub(1);
    if needed > config.n_positions {
        return Err(CheckpointError::ContextTooLong {
            needed,
            n_positions: config.n_positions,
        }
        .into());
    }
    decoder.reset();
    let mut generation = Generation {
        prompt_ids: prompt.to_vec(),
        generated_ids: Vec::with_capacity(max_new_tokens),
        step_logits: Vec::with_capacity(max_new_tokens),
        prefill_time: Duration::ZERO,
        decode_times: Vec::new(),
    };
    if max_new_tokens == 0 {
        return Ok(generation);
    }
    let started = Instant::now();
    let mut logits = decoder.append_last(prompt)?;
    generation.prefill_time = started.elapsed();
    loop {
        let token = argmax(&logits);
        generation.generated_ids.push(token);
        generation.step_logits.push(logits);
        if generation.generated_ids.len() == max_new_tokens {
            break;
        }
        let started = Instant::now();
        logits = decoder.append_last(&[token])?;
        generation.decode_times.push(started.elapsed());
    }
    Ok(generation)
}

/// The CPU reference as a [`Decoder`]: [`CpuGpt2`] with its KV cache.
#[derive(Debug, Clone)]
pub struct CpuDecoder {
    model: CpuGpt2,
    cache: CpuKvCache,
}

impl CpuDecoder {
    /// A decoder with an empty cache.
    pub fn new(model: CpuGpt2) -> CpuDecoder {
        let cache = model.new_cache();
        CpuDecoder { model, cache }
    }

    /// The model.
    pub fn model(&self) -> &CpuGpt2 {
        &self.model
    }
}

impl Decoder for CpuDecoder {
    fn config(&self) -> &Gpt2Config {
        self.model.config()
    }

    fn context_len(&self) -> usize {
        self.cache.len()
    }

    fn reset(&mut self) {
        self.cache = self.model.new_cache();
    }

    fn append(&mut self, tokens: &[u32]) -> crate::Result<Vec<f32>> {
        Ok(self.model.forward(&mut self.cache, tokens)?)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Gpt2Weights;
    use super::*;

    #[test]
    fn argmax_takes_the_first_of_equals() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[]), 0);
    }

    #[test]
    fn greedy_generation_feeds_back_its_tokens_and_checks_the_context_first() {
        let config = Gpt2Config::new(1, 8, 2, 9, 6);
        let model = CpuGpt2::new(config.clone(), Gpt2Weights::seeded(&config, 2)).expect("m");
        let mut d = CpuDecoder::new(model.clone());
        let g = generate_greedy(&mut d, &[1, 2], 5).expect("fits: 2 + 4 fed");
        assert_eq!(g.generated_ids.len(), 5);
        assert_eq!(g.decode_times.len(), 4);
        let mut seq = vec![1, 2];
        seq.extend(&g.generated_ids[..4]);
        let full = model.logits(&seq).expect("full");
        for (i, &t) in g.generated_ids.iter().enumerate() {
            let row = &full[(1 + i) * 9..][..9];
            assert_eq!(argmax(row), t);
        }
        let too_long = generate_greedy(&mut d, &[1, 2], 6);
        assert!(matches!(
            too_long,
            Err(crate::Error::Checkpoint(CheckpointError::ContextTooLong {
                needed: 7,
                ..
            }))
        ));
    }
}
