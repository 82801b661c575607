//! Where every tensor lives. Pure CPU and deterministic: this layer names no wgpu type.
//!
//! # The pieces
//! * [`BufferTypeDesc`]: alignment and max size of a kind of memory.
//! * [`TensorAllocator`]: a linear (bump) allocator inside one buffer of fixed
//!   capacity (ggml's `tallocr`); running out is [`PlanError::OutOfSpace`].
//! * [`FreeBlockAllocator`]: the best-fit free-block allocator over chunks of at most
//!   the max size, with per-chunk high-water marks (ggml's dynamic allocator without
//!   its caps). Reusable for any interval problem.
//! * [`GraphAllocator`] and [`plan_graph`]: the graph planner with ggml-alloc's
//!   semantics (`reserve`, `reserve_n`, `alloc_graph`, `needs_realloc`, `buffer_size`).
//!   Inputs first, free after the last reader through any view, outputs kept, in-place
//!   over a dying first input, views share their root, weights not placed.
//! * [`alloc_ctx_tensors`] / [`plan_weights`]: weights packed into as few chunks as the
//!   max size allows, as a [`Plan`] named `"context"`.
//! * [`Plan`]: a placement `(buffer, chunk, offset, size)` per tensor, chunk sizes per
//!   buffer, in-place pairs, and [`Plan::verify`], which every returned plan passes.
//! * [`lower_bounds`] ([`LowerBounds`]) and [`naive_size`]: what any plan needs at least
//!   and what no reuse at all costs (traces/FORMAT.md definitions).
//! * [`IntervalProblem`]: lifetime-interval instances (`id,lower,upper,size` CSV).
//!
//! # Example
//! ```
//! use wgalloc_plan::graph::{DType, GraphBuilder};
//! use wgalloc_plan::plan::{lower_bounds, plan_graph, BufferTypeDesc};
//! let mut b = GraphBuilder::new("mlp");
//! let x = b.input("x", DType::F32, &[256]);
//! let w = b.weight("w", DType::F32, &[256, 256]);
//! let h = b.node("matmul", &[x, w], &[256], false);
//! let a = b.node("gelu", &[h], &[256], true);
//! let y = b.node("matmul", &[a, w], &[256], false);
//! b.mark_output(y);
//! let graph = b.build().unwrap();
//! let storage = BufferTypeDesc::new("storage", 256, 1 << 30).unwrap();
//! let plan = plan_graph(&graph, &storage).unwrap();
//! plan.verify(&graph).unwrap();
//! assert_eq!(plan.placement(w), None); // weights are placed by plan_weights
//! assert!(plan.total_size() >= lower_bounds(&graph).unwrap().inplace_aware);
//! ```

mod bounds;
mod buffer_type;
mod context;
mod error;
mod fault;
mod free_blocks;
mod gaps;
mod graph_alloc;
mod interval_walk;
mod intervals;
mod naive;
mod options;
mod planner;
mod tensor_alloc;
mod types;
mod verify;
mod walk;

pub mod offline;

pub use bounds::{lower_bounds, naive_size, LowerBounds};
pub use buffer_type::{align_up, BufferTypeDesc};
pub use context::{alloc_ctx_tensors, plan_weights, CONTEXT_PLANNER};
pub use error::PlanError;
pub use free_blocks::{ChunkRange, FreeBlockAllocator};
// Fault injection: the CLI's --inject-clobber and the tests that show the proofs
// catch a clobber.
pub use fault::{inject_clobber, plant_clobber, Clobber, NO_PAIR as NO_CLOBBER_PAIR};
pub use graph_alloc::{plan_graph, GraphAllocator, GGML_PLANNER};
pub use intervals::{Interval, IntervalPlan, IntervalProblem};
pub use naive::naive_plan;
pub use options::{plan, plan_intervals, BufferIds, PlanOptions};
pub use planner::Planner;
pub use tensor_alloc::TensorAllocator;
pub use types::{BufferId, BufferPlan, ChunkPlan, Placement, Plan};
pub use walk::graph_leaves;
