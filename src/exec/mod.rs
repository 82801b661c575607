//! Running and proving: WGSL kernels, the executor, CPU references and the alias proof.
//!
//! * [`Executor`]: runs a planned graph on the GPU. [`Executor::new`] takes a
//!   [`crate::device::GpuContext`]; [`Executor::run`] records every node into one
//!   compute pass, submits once, waits, and returns a [`RunReport`] (CPU encode time,
//!   GPU pass time from timestamp queries when the device has them, bind groups
//!   created and reused). Pipelines are built once per kernel; bind groups are cached
//!   per kernel and planned ranges; parameters share one uniform buffer with dynamic
//!   offsets.
//! * [`TensorMemory`]: where tensors live: layers of ([`crate::plan::Plan`],
//!   [`crate::device::PlannedMemory`]), e.g. activations then weights. It also writes
//!   tensors ([`TensorMemory::write_f32`], [`TensorMemory::write_u32`]) and reads them
//!   back ([`TensorMemory::read_f32`]).
//! * [`cpu_ref`]: the same math on the CPU, per op and for a whole graph
//!   ([`cpu_ref::evaluate`]).
//! * Supported ops ([`Executor::supports`], [`SUPPORTED_OPS`]): `copy`, `scale`
//!   (`params[0]`), `relu`, `gelu` (tanh form), `silu`, `add`, `mul` (second input
//!   repeated to the first's length), `softmax`, `softmax_causal` (rows of the last
//!   dimension; row `r` of each `[n, cols]` block sees columns `0..=r % n`),
//!   `layer_norm` (x, gain, bias; eps = `params[0]`, default 1e-5), `rms_norm`
//!   (x, gain; eps), `matmul` (`[m,k]×[k,n]`), `matmul_bt` (`[m,k]×[n,k]ᵀ`),
//!   `embedding` (u32 ids × `[vocab, d]` table; an id ≥ vocab gives a zero row), `rope`
//!   (`[rows, d]`, row = position, base `params[0]`, default 10000).
//!   `count_positive` (`x → [1]`, how many elements are > 0) and `compact`
//!   (`(x, count) → out`, the elements > 0 in order; `out` has a data-dependent length,
//!   see [`crate::graph::DynamicLen`] and [`crate::runtime`]).
//!   `kv_self`, `kv_attend`, `kv_attend_out`: causal attention of a chunk of new
//!   queries against the paged KV cache of [`crate::kv`], through its block table
//!   (one dispatch per page; see [`OpCall::KvAttend`]).
//!   Elementwise ops, both softmaxes and rope also run in place: when the plan puts a
//!   node's output on its first input's range, the in-place kernel binds it once.
//! * User ops ([`UserOp`], [`register_op`]): ops wgalloc does not ship, registered on
//!   the device with their WGSL (checked by naga at registration, [`RegisterError`]),
//!   run by every executor beside the built-in ops, with a CPU reference for
//!   [`cpu_ref::evaluate_with`]. Engines that encode their own passes bind
//!   [`TensorMemory::regions`] and prove the plan with [`checksum::prove`].
//! * Inputs of one node that share bytes (`mul(x, x)`, `add(a, view_of_a)`) are legal:
//!   the executor stages the later one through its workspace (scratch memory it owns,
//!   apart from planned memory) with a copy dispatch in the same pass
//!   ([`RunReport::staging_copies`], [`RunReport::workspace_bytes`]).

mod bindings;
mod cpu_kv;
pub mod cpu_ref;
mod custom;
mod error;
mod executor;
mod inputs;
mod kernels;
mod limits;
mod ops;
pub mod packed;
mod params;
mod pipeline;
mod tensor_memory;
mod timer;
pub mod tune;
mod workspace;

pub use bindings::RangeKey;
pub use custom::{
    register_op, user_ops, Bind, OpShapes, RegisterError, ShapeError, SourcePos, UserOp, UserOps,
    PRELUDE_WGSL,
};
pub use error::ExecError;
pub use executor::{Executor, RunReport};
pub use inputs::{Inputs, TensorData};
pub use kernels::{
    AttentionForm, DecodeSlices, MatmulTile, NormForm, StorageType, MATVEC_MAX_ROWS, SPLIT_MAX_ROWS,
};
/// Test aids: the built-in kernels and their shader files (the `testing` feature).
#[cfg(feature = "testing")]
pub use kernels::{HeadWidth, Kernel, Shader, TILED_ATTENTION_WORKGROUP_BYTES};
#[cfg(not(feature = "testing"))]
#[allow(unused_imports)]
pub(crate) use kernels::{HeadWidth, Kernel, Shader, TILED_ATTENTION_WORKGROUP_BYTES};
pub use limits::check_plan_against_limits;
pub use ops::{
    resolve, supports, BinaryOp, Op, OpCall, UnaryOp, DEFAULT_EPS, DEFAULT_ROPE_BASE, MAX_ELEMENTS,
    SUPPORTED_OPS,
};
/// Test aid: the parameter block's layout check (the `testing` feature).
#[cfg(feature = "testing")]
pub use params::params_layout_mismatch;
#[cfg(not(feature = "testing"))]
#[allow(unused_imports)]
pub(crate) use params::params_layout_mismatch;
pub use params::KernelParams;
pub(crate) use tensor_memory::{f16_bytes, f32_from_f16_bytes};
pub use tensor_memory::{TensorMemory, TensorRange};
pub use tune::{TuneError, TuneSettings};
pub mod checksum;
/// A node's storage type, for the tests of the layers that build f16 graphs.
#[cfg(test)]
pub(crate) use ops::storage_of;
pub(crate) use ops::{kv_state_row, KV_TABLE_HEADER};
pub use ops::{Epilogue, MAX_ATTENTION_HEAD_DIM};
