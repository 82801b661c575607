//! The alias proof ("checksum run"): every node of any graph, kernel or not, runs a
//! validation kernel whose output words are a hash of (node, word index, checksums of
//! all its inputs); each input's checksum is summed from memory as it is when the node
//! reads it and compared with the CPU's exact prediction. A tensor clobbered while still
//! live is named, with the node that saw it.
//!
//! Decisions:
//! * Weights (and views of weights) are not bound: they are read-only constants outside
//!   the activation plan, so no plan of the graph can clobber them. Each stands in a
//!   node's key as a constant (`hash::weight_checksum`).
//! * Graph inputs are filled on the GPU with a pattern of their tensor id.
//! * A view reads its root's memory: its checksum is the root's, over the root's bytes
//!   (so an `expand` view larger than its root is clamped to the root). Nodes whose
//!   output is a view write nothing (they are aliases); they still check their inputs.
//! * Words are 4 bytes; a size that is not a multiple of 4 is rounded up, and the padding
//!   of the last word is part of the tensor's aligned reservation (the run refuses a plan
//!   whose reservation is smaller).
//! * Elementwise (`inplace`) nodes derive output word `i` from input word `i` only, so a
//!   plan may legally write them over their first input.
//! * Graph outputs are checked once more after the last node.

mod gpu;
pub(crate) mod hash;
mod predict;
mod prove;
mod report;
mod schedule;

pub use gpu::CHECKSUM_WGSL;
pub(crate) use gpu::{ChecksumKernels, ChecksumRun};
pub use predict::Prediction;
pub use prove::prove;
pub use report::{ChecksumReport, Mismatch};
