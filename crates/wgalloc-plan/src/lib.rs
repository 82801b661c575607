//! # wgalloc-plan
//!
//! The planning half of [wgalloc](https://crates.io/crates/wgalloc), on its own: the
//! compute-graph model, import of traces, ONNX files and interval CSVs, ggml-alloc's
//! tensor and graph allocators, the offline planners, lower bounds and the verifier that
//! no two live tensors overlap. Pure CPU and deterministic; nothing here names a GPU
//! API, and wgpu is not in this crate's dependency tree, so an engine on another backend
//! (CUDA, Metal, CubeCL) can plan with it alone.
//!
//! ```text
//!   graph ──► plan
//!  (what)    (where)
//! ```
//!
//! * [`graph`]: tensors, views, nodes in execution order, a builder and the importers.
//! * [`plan`](mod@plan): `reserve`, `alloc_graph`, `needs_realloc`, chunks, the offline
//!   planners, bounds and `Plan::verify`.
//! * [`ErrorKind`]: what a caller can do about any error of either layer.
//!
//! ```
//! use wgalloc_plan::graph::{DType, GraphBuilder};
//! use wgalloc_plan::plan::{lower_bounds, plan, BufferTypeDesc, PlanOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut b = GraphBuilder::new("mlp");
//! let x = b.input("x", DType::F32, &[64, 256]);
//! let w = b.weight("w", DType::F32, &[256, 1024]);
//! let h = b.node("matmul", &[x, w], &[64, 1024], false);
//! let y = b.node("relu", &[h], &[64, 1024], true);
//! b.mark_output(y);
//! let graph = b.build()?;
//! let memory = BufferTypeDesc::new("device", 256, 1 << 30)?; // your alignment and max size
//! let p = plan(&graph, &[memory], &PlanOptions::default())?; // `best` by default
//! p.verify(&graph)?; // no two live tensors overlap
//! for t in graph.planned_tensors() {
//!     let at = p.placement(t).expect("planned"); // buffer, chunk, offset, size
//!     assert_eq!(at.offset % 256, 0);
//! }
//! assert_eq!(p.total_size(), lower_bounds(&graph)?.inplace_aware);
//! # Ok(())
//! # }
//! ```
#![deny(clippy::unwrap_used)]
#![forbid(unsafe_code)]

pub mod graph;
mod kind;
pub mod plan;
pub mod seeded;

pub use graph::{
    parse_onnx, parse_trace, read_onnx, read_trace, DType, Graph, GraphBuilder, GraphError, NodeId,
    OnnxOptions, TensorId,
};
pub use kind::ErrorKind;
pub use plan::{
    plan, plan_intervals, BufferTypeDesc, IntervalProblem, Plan, PlanError, PlanOptions, Planner,
};
