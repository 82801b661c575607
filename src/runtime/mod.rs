//! Running a graph with memory the user owns: a [`GraphContext`] takes optional
//! workspace and output allocation callbacks (a `realloc` and a `free_all` with a user
//! context, as BNNS graph contexts do), and grows its workspace during execution when
//! a length is known only after an earlier node ran ([`crate::graph::DynamicLen`]).
//!
//! * [`GraphContext::set_workspace_allocation`] / [`GraphContext::set_output_allocation`]:
//!   both callbacks or neither (the default allocator); one alone is
//!   [`RuntimeError::HalfSetCallbacks`] and the old setting stays.
//! * `realloc` follows C's `realloc`: it gets the old block and returns one of at least
//!   the new size that holds the old block's live prefix; **the callback copies**
//!   ([`copy_prefix`] does it). Blocks stay the callback's until its `free_all`.
//! * A setting's `free_all` runs when it is replaced, at
//!   [`GraphContext::release_workspace`] (the workspace's) and at the context's drop,
//!   whether or not `realloc` ran; once per event for a user context both settings
//!   share ([`std::sync::Arc::ptr_eq`]). See the rule on [`GraphContext`].
//! * A data-dependent length of 0 gives empty tensors: nodes with an empty output
//!   are skipped and such an output reads back as an empty `Vec`.
//! * [`BlockPool`] makes the callback pair from any [`crate::storage::Storage`]; over a
//!   [`crate::storage::CountingStorage`] it proves that nothing leaks and nothing is
//!   freed twice.
//! * [`evaluate`]: the CPU reference of a graph with data-dependent lengths.

mod blocks;
mod callbacks;
mod empty;
mod error;
mod execution;
mod graph_context;
mod layout;
mod reference;

use std::fmt;

pub use callbacks::{
    copy_prefix, BlockPool, FreeAllFn, PoolCalls, ReallocFn, ReallocRequest, UserContext,
};
pub use error::{CallbackError, RuntimeError};
pub use execution::{Execution, OutputTensor};
pub use graph_context::GraphContext;
pub use reference::evaluate;

/// Which memory of a context an allocation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryRole {
    /// Inputs and intermediates.
    Workspace,
    /// The graph's outputs.
    Output,
}

impl MemoryRole {
    /// 0 for the workspace, 1 for the outputs (the buffer id a [`BlockPool`] names in
    /// its chunk requests).
    pub fn index(self) -> usize {
        match self {
            MemoryRole::Workspace => 0,
            MemoryRole::Output => 1,
        }
    }
}

impl fmt::Display for MemoryRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryRole::Workspace => "workspace",
            MemoryRole::Output => "output",
        })
    }
}
