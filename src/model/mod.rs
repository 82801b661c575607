//! The built-in model: a GPT-2-style decoder built with the graph builder from the
//! real kernels' ops, with seeded random weights.

mod config;
mod forward;
mod gpt;
pub mod hf;
mod prepacked;
mod session;
mod weights;

pub use config::{ModelConfig, ModelError};
pub use forward::Forward;
pub use gpt::{build_gpt, fused_layers, GptModel};
pub use hf::CheckpointError;
pub use prepacked::{PrepackedModel, PrepackedModelRun};
pub use session::{
    logits_tolerance, ModelRun, ModelSession, RunOptions, LOGITS_TOLERANCE, LOGITS_TOLERANCE_F16,
};
#[doc(hidden)] // The seeded weights' generator, for tests.
pub use weights::SeededRng;
