//! Where every tensor lives. Pure CPU and deterministic: this layer names no wgpu type.
//!
//! * [`BufferTypeDesc`]: alignment and max size of a kind of memory.
//! * [`Plan`]: a placement `(buffer, chunk, offset, size)` per tensor, chunk sizes per
//!   buffer, and [`Plan::verify`].
//! * [`IntervalProblem`]: lifetime-interval instances (`id,lower,upper,size` CSV).

mod buffer_type;
mod error;
mod intervals;
mod types;

pub mod offline;

pub use buffer_type::{align_up, BufferTypeDesc};
pub use error::PlanError;
pub use intervals::{Interval, IntervalProblem};
pub use types::{BufferId, BufferPlan, ChunkPlan, Placement, Plan};
