//! Errors of the execution layer.

use thiserror::Error;

/// Why running a planned graph failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ExecError {
    /// An op with no kernel.
    #[error("node {node}: no kernel for op {op:?}")]
    NoKernel {
        /// The node's step.
        node: u32,
        /// The op.
        op: String,
    },
    /// The checksum run found a graph it cannot run (a read of memory nothing wrote).
    #[error("checksum run: node {node}, tensor t{tensor}: {problem}")]
    ChecksumGraph {
        /// The node's step (`u32::MAX`: the final check of the outputs).
        node: u32,
        /// The tensor read.
        tensor: u32,
        /// What is wrong.
        problem: String,
    },
    /// The checksum run cannot address a tensor in the plan's memory (no placement,
    /// misaligned, past its reservation or its chunk).
    #[error("checksum run: tensor t{tensor}: {problem}")]
    ChecksumPlacement {
        /// The tensor.
        tensor: u32,
        /// What is wrong.
        problem: String,
    },
    /// A quantity of the checksum run exceeds a device or shader limit.
    #[error("checksum run: {what} needs {needed}, the limit is {limit}")]
    ChecksumLimit {
        /// What exceeds the limit.
        what: String,
        /// How much is needed.
        needed: u64,
        /// The limit.
        limit: u64,
    },
    /// wgpu reported an error (validation, out of memory, mapping, polling).
    #[error("gpu error while {stage}: {message}")]
    Gpu {
        /// What was being done.
        stage: &'static str,
        /// What wgpu said.
        message: String,
    },
}
