//! GPT-2 exactly as Hugging Face's `GPT2LMHeadModel` defines it: its configuration and
//! checkpoint format (`config.json` + `model.safetensors`), a CPU reference forward
//! pass with a KV cache, greedy generation, and the model on the device with planned
//! memory and a paged KV cache ([`GpuGpt2`]).

mod checkpoint;
mod config;
mod cpu;
mod error;
mod fit;
mod generate;
mod gpu;
mod readback;
mod step_graph;
mod weights;

pub use checkpoint::{weights_from_safetensors, Checkpoint};
pub use config::Gpt2Config;
pub use cpu::{check_tokens, check_weights, gelu_new, CpuGpt2, CpuKvCache};
pub use error::CheckpointError;
pub use fit::{fit, worst_case, FitBucket, FitReport, FitRequest, WorstCase};
pub use generate::{argmax, generate_greedy, CpuDecoder, Decoder, Generation};
pub use gpu::{
    BucketKey, BucketReport, GpuGpt2, GpuOptions, MemoryReport, StepReport, DEFAULT_PAGE_BYTES,
};
pub use step_graph::{
    build_step_graph, head_pieces, LogitRows, StepAttention, StepGraph, WeightIds,
};
pub use weights::{Gpt2Weights, LayerWeights};
