//! Errors of the planning layer.

use crate::ErrorKind;
use thiserror::Error;

use crate::graph::{NodeId, TensorId};

/// Why planning, or checking a plan, failed. "Never fits" (a tensor larger than any
/// buffer could be) is kept apart from "does not fit now" (a buffer ran out).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A clobber was asked for (`--inject-clobber`, a test's planted fault) but the plan
    /// has no pair of tensors it can be planted on without an illegal dispatch.
    #[error("no clobber can be planted in the plan of {graph}: {why}")]
    NoClobberPair {
        /// The graph's name.
        graph: String,
        /// Why no pair qualifies.
        why: &'static str,
    },
    /// An alignment that is not a power of two.
    #[error("alignment {alignment} is not a power of two")]
    BadAlignment {
        /// The rejected alignment.
        alignment: u64,
    },
    /// A max size of zero.
    #[error("max size {max_size} is invalid (must be at least 1)")]
    BadMaxSize {
        /// The rejected max size.
        max_size: u64,
    },
    /// A fixed-size buffer has no room left for a tensor (does not fit now).
    #[error("out of space for tensor {tensor}: needs {size} bytes at offset {offset}, buffer holds {capacity}")]
    OutOfSpace {
        /// The tensor being placed.
        tensor: TensorId,
        /// Its aligned size.
        size: u64,
        /// Where it would start.
        offset: u64,
        /// The buffer's capacity.
        capacity: u64,
    },
    /// A size or offset computation overflowed 64 bits.
    #[error("size overflow placing tensor {tensor}")]
    SizeOverflow {
        /// The tensor being placed.
        tensor: TensorId,
    },
    /// A buffer id that the allocator does not have.
    #[error("buffer id {buffer} out of range: the allocator has {count} buffer types")]
    UnknownBuffer {
        /// The id asked for.
        buffer: usize,
        /// How many buffer types exist.
        count: usize,
    },
    /// Per-node or per-leaf buffer ids of the wrong length.
    #[error("{what}: {got} buffer ids given, the graph needs {expected}")]
    BufferIdCount {
        /// `node_buffer_ids` or `leaf_buffer_ids`.
        what: &'static str,
        /// How many were given.
        got: usize,
        /// How many are needed.
        expected: usize,
    },
    /// `alloc_graph` with several buffers on a graph that needs re-planning.
    #[error("the graph needs a new reservation and the allocator has {buffers} buffers: call reserve_n first")]
    NeedsReserve {
        /// The number of buffers.
        buffers: usize,
    },
    /// The graph passed to the planner is invalid.
    #[error("invalid graph: {0}")]
    InvalidGraph(#[from] crate::graph::GraphError),
    /// Two tensors live at a common step overlap in memory.
    #[error("tensors {first} ({first_name}) and {second} ({second_name}) overlap in buffer {buffer} chunk {chunk} while both live at step {step}")]
    Overlap {
        /// One tensor.
        first: TensorId,
        /// Its name.
        first_name: String,
        /// The other tensor.
        second: TensorId,
        /// Its name.
        second_name: String,
        /// The buffer.
        buffer: usize,
        /// The chunk.
        chunk: usize,
        /// A step at which both are live.
        step: u32,
    },
    /// An offset that is not a multiple of its buffer type's alignment.
    #[error("tensor {tensor} at offset {offset} is not aligned to {alignment}")]
    Misaligned {
        /// The tensor.
        tensor: TensorId,
        /// Its offset.
        offset: u64,
        /// The required alignment.
        alignment: u64,
    },
    /// A tensor placed past the end of its chunk, or a chunk larger than the max size
    /// without being marked oversized.
    #[error("tensor {tensor}: {problem}")]
    OutOfBounds {
        /// The tensor.
        tensor: TensorId,
        /// What exceeds what.
        problem: String,
    },
    /// A planned tensor has no placement, or a placement refers to a missing chunk.
    #[error("tensor {tensor}: {problem}")]
    Missing {
        /// The tensor.
        tensor: TensorId,
        /// What is missing.
        problem: String,
    },
    /// A node's in-place claim is not legal.
    #[error("node {node}: {problem}")]
    BadInplace {
        /// The node.
        node: NodeId,
        /// Why it is not legal.
        problem: String,
    },
    /// A plan made for another graph (tensor counts differ).
    #[error("plan is for {planned} tensors, graph has {actual}")]
    WrongGraph {
        /// Tensors in the plan.
        planned: usize,
        /// Tensors in the graph.
        actual: usize,
    },
    /// Rounding a size up to the alignment overflowed 64 bits (allocator level,
    /// where no tensor is known).
    #[error("size {size} rounded up to alignment {alignment} overflows 64 bits")]
    AlignOverflow {
        /// The requested size.
        size: u64,
        /// The alignment.
        alignment: u64,
    },
    /// A `free` that does not match a live allocation of the free-block allocator.
    #[error("bad free of {size} bytes at offset {offset} of chunk {chunk}: {problem}")]
    BadFree {
        /// The chunk named.
        chunk: usize,
        /// The offset named.
        offset: u64,
        /// The size named.
        size: u64,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A chunk larger than its buffer type's max size that is not marked oversized.
    #[error("buffer {buffer} chunk {chunk} is {size} bytes, above the max size {max_size}, and not marked oversized")]
    ChunkTooLarge {
        /// The buffer.
        buffer: usize,
        /// The chunk.
        chunk: usize,
        /// Its size.
        size: u64,
        /// The buffer type's max size.
        max_size: u64,
    },
    /// An oversized chunk that holds other than exactly one tensor.
    #[error("buffer {buffer} chunk {chunk} is oversized but holds {tensors} tensors (must hold exactly 1)")]
    OversizedChunkShared {
        /// The buffer.
        buffer: usize,
        /// The chunk.
        chunk: usize,
        /// How many tensors it holds.
        tensors: usize,
    },
    /// `alloc_graph`/`buffer_size` before any reservation was made.
    #[error("no reservation: call reserve or reserve_n first")]
    NotReserved,
    /// A tensor id (in a context-tensor list) that the graph does not have.
    #[error("tensor {tensor} is not in the graph ({count} tensors)")]
    UnknownTensor {
        /// The id asked for.
        tensor: TensorId,
        /// How many tensors the graph has.
        count: usize,
    },
    /// An interval plan that needs more memory than the capacity asked for.
    #[error("planner {planner} needs {needed} bytes, more than the capacity of {capacity}")]
    OverCapacity {
        /// The planner.
        planner: &'static str,
        /// What its plan needs.
        needed: u64,
        /// The capacity given.
        capacity: u64,
    },
    /// A planner name that does not exist.
    #[error("unknown planner {name:?}; known planners: {known}")]
    UnknownPlanner {
        /// The name asked for.
        name: String,
        /// The known names.
        known: String,
    },
    /// Two intervals of an interval problem that are live at a common time overlap in
    /// memory (found by [`crate::plan::IntervalProblem::verify`]).
    #[error("intervals {first} at [{first_offset}, +{first_size}) and {second} at [{second_offset}, +{second_size}) overlap while both live at time {time}")]
    IntervalOverlap {
        /// The id of the interval live first.
        first: String,
        /// Its offset.
        first_offset: u64,
        /// Its size.
        first_size: u64,
        /// The id of the other interval.
        second: String,
        /// Its offset.
        second_offset: u64,
        /// Its size.
        second_size: u64,
        /// A time at which both are live.
        time: u64,
    },
}

impl PlanError {
    /// What a caller can do about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            PlanError::OutOfSpace { .. } => ErrorKind::OutOfMemory,
            PlanError::OverCapacity { .. } => ErrorKind::NeverFits,
            PlanError::InvalidGraph(error) => error.kind(),
            _ => ErrorKind::BadInput,
        }
    }
}
