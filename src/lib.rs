//! # wgalloc
//!
//! A GPU memory allocator runtime on [wgpu]: give it a compute graph and it plans
//! where every tensor lives, allocates real wgpu buffers that respect the adapter's
//! limits, runs WGSL kernels over that memory and proves that reused memory never
//! clobbers live data.
//!
//! Data flows one way through four layers:
//!
//! ```text
//!   graph ──► plan ──► device ──► exec
//!  (what)    (where)   (memory)   (run + prove)
//! ```
//!
//! * [`graph`]: tensors, nodes in execution order, a builder and trace import.
//! * [`plan`](mod@plan): pure CPU planning (ggml-alloc semantics, offline planners, lower
//!   bounds, a verifier). Names no wgpu type.
//! * [`device`]: adapter selection, buffer types from the adapter's real limits,
//!   buffer allocation through a replaceable allocator.
//! * [`exec`]: WGSL kernels, an executor and the GPU alias proof.
#![deny(clippy::unwrap_used)]
#![forbid(unsafe_code)]

pub mod device;
pub mod error;
pub mod exec;
pub mod graph;
pub mod kv;
pub mod model;
pub mod plan;
pub mod prepack;
pub mod report;
pub mod runtime;
mod seeded;
pub mod storage;

pub use error::{Error, ErrorKind, Result};

// The types a user needs, at the crate root; the layers' modules hold the rest.
pub use device::{
    allocate_plan, allocate_plan_in, GpuContext, PlannedMemory, Region, WgpuAllocator, WgpuStorage,
    STORAGE_USAGE,
};
pub use exec::checksum::{prove_plan, prove_plan_in, ChecksumKernels, ChecksumReport};
pub use exec::{check_plan_against_limits, Executor, Inputs, TensorData, TensorMemory};
pub use graph::{read_onnx, read_trace, DType, Graph, GraphBuilder, NodeId, OnnxOptions, TensorId};
pub use plan::{plan, BufferTypeDesc, Plan, PlanOptions, Planner};
pub use storage::{HostStorage, PagedStorage, RegionRequest, Storage, StorageError};
pub mod stream;
