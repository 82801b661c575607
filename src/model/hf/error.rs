//! [`CheckpointError`]: why a GPT-2 checkpoint, or the tokens given to it, were refused.

use thiserror::Error;
use wgalloc_plan::ErrorKind;

/// Why a GPT-2 checkpoint (`config.json` + `model.safetensors`) or a request to it was
/// refused. Variants name the file or tensor and carry the numbers.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file of the checkpoint could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `config.json` is not valid JSON or lacks a field GPT-2 needs.
    #[error("{path}: not a GPT-2 config: {message}")]
    BadConfigJson {
        /// The file.
        path: String,
        /// serde's message.
        message: String,
    },
    /// A config field has a value this implementation does not take.
    #[error("config field {field}: {problem}")]
    BadConfig {
        /// The field (`n_head`, `layer_norm_epsilon`, ...).
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The activation is not `gelu_new` (the tanh form every GPT-2 checkpoint uses).
    #[error("activation_function {found:?} is not supported (only \"gelu_new\")")]
    UnsupportedActivation {
        /// The config's value.
        found: String,
    },
    /// `model.safetensors` is truncated or corrupt (its header or offsets are invalid).
    #[error("{path}: corrupt or truncated safetensors file: {reason}")]
    CorruptSafetensors {
        /// The file.
        path: String,
        /// What the safetensors reader found.
        reason: String,
    },
    /// A tensor the config needs is not in the file (under either name).
    #[error("tensor {name} is missing from the checkpoint (also looked for {alternative})")]
    MissingTensor {
        /// The name without the `transformer.` prefix (`h.0.attn.c_attn.weight`).
        name: String,
        /// The other name that was tried.
        alternative: String,
    },
    /// A tensor has another shape than the config implies.
    #[error("tensor {name} has shape {found:?}, the config implies {expected:?}")]
    WrongShape {
        /// The tensor's name as stored.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not one that converts to f32 (F32, F16, BF16).
    #[error("tensor {name} has dtype {found}; only F32, F16 and BF16 are read")]
    WrongDtype {
        /// The tensor's name as stored.
        name: String,
        /// The dtype in the file.
        found: String,
    },
    /// The weights hold something the config does not account for (a layer past
    /// `n_layer`).
    #[error("tensor {name} does not match the config: {problem}")]
    ConfigMismatch {
        /// The tensor's name as stored.
        name: String,
        /// How it disagrees.
        problem: String,
    },
    /// A token id is not below the vocabulary size.
    #[error("token id {token} at position {position} is past the vocabulary ({vocab} tokens)")]
    TokenOutOfVocab {
        /// The id.
        token: u32,
        /// Its position in the sequence.
        position: usize,
        /// `vocab_size`.
        vocab: usize,
    },
    /// The sequence would be longer than the model's learned positions.
    #[error("a context of {needed} tokens is past n_positions = {n_positions}")]
    ContextTooLong {
        /// Tokens the request needs.
        needed: usize,
        /// The model's `n_positions`.
        n_positions: usize,
    },
    /// The prompt has no tokens.
    #[error("the prompt is empty: generation needs at least one token")]
    EmptyPrompt,
    /// Text could not be turned into tokens, or tokens into text.
    #[error("tokenizer: {message}")]
    Tokenizer {
        /// What failed.
        message: String,
    },
    /// Writing a checkpoint failed.
    #[error("cannot write the checkpoint: {message}")]
    Write {
        /// What failed.
        message: String,
    },
}

impl CheckpointError {
    /// What a caller can do about this error (see [`ErrorKind`]): [`ErrorKind::Io`] for
    /// a file that cannot be read or written, [`ErrorKind::BadInput`] otherwise.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CheckpointError::Io { .. } | CheckpointError::Write { .. } => ErrorKind::Io,
            _ => ErrorKind::BadInput,
        }
    }
}
