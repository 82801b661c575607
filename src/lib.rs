//! # wgalloc
//!
//! A GPU memory allocator runtime on [wgpu]: give it a compute graph and it plans
//! where every tensor lives, allocates real wgpu buffers that respect the adapter's
//! limits, runs WGSL kernels over that memory and proves that reused memory never
//! clobbers live data.
//!
//! Data flows one way through the layers (docs/architecture.md; `tests/layers.rs`
//! checks it):
//!
//! ```text
//!   graph ──► plan ──► storage ──► device ──► exec ──► model / runtime / stream / prepack
//!  (what)    (where)   (regions)   (memory)   (run + prove)   (the seeds' surfaces)
//! ```
//!
//! * [`graph`] and [`plan`](mod@plan) come from the `wgalloc-plan` crate (pure CPU, no
//!   wgpu in its dependency tree): tensors, nodes, a builder, trace/ONNX/CSV import;
//!   ggml-alloc's allocators, offline planners, lower bounds and a verifier.
//! * [`storage`]: `Region` and the `Storage` trait, the one source of memory.
//! * [`device`]: adapter selection, buffer types from the adapter's real limits, a
//!   plan's memory from a storage.
//! * [`exec`]: WGSL kernels, an executor and the GPU alias proof.
#![deny(clippy::unwrap_used)]
#![forbid(unsafe_code)]

pub use wgalloc_plan::graph::{self};
pub use wgalloc_plan::plan::{self};

pub mod device;
pub mod error;
pub mod exec;
pub mod kv;
pub mod model;
pub mod prepack;
pub mod report;
pub mod runtime;
pub mod session;
pub mod storage;

pub use error::{Error, Result};

// The names an engine needs first, at the crate root (each also at its layer's path,
// where the rest of the layer lives).
pub use device::GpuContext;
pub use exec::checksum::prove;
pub use exec::{Executor, TensorMemory};
pub use graph::{DType, Graph, GraphBuilder, TensorId};
pub use plan::{plan, Plan, PlanOptions, Planner};
pub use session::Session;
pub use storage::Storage;
pub mod stream;
