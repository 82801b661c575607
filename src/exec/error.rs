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
}
