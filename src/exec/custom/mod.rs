//! Your own kernels on planned memory.
//!
//! * **Register an op** ([`UserOp`], [`register_op`]): a name, WGSL source, an entry
//!   point and optionally an in-place one, how its storage bindings map to the node's
//!   inputs and output ([`Bind`]), the workgroup grid and parameter block computed
//!   from the node's shapes ([`OpShapes`]), and optionally a CPU reference. naga
//!   parses, validates and reflects the WGSL at registration; every problem is a
//!   [`RegisterError`] (with naga's line and column in the op's own source) before
//!   anything reaches the GPU.
//! * **Run it** with any [`crate::exec::Executor`] on the device, beside the built-in
//!   ops in the same pass and on the same planned memory; in place when the plan puts
//!   the output over input 0 and the op has an in-place entry point. A node whose op
//!   is neither built in nor registered is refused before any submit
//!   ([`crate::exec::ExecError::NoKernel`], naming the node and op).
//! * **Check it on the CPU** with [`crate::exec::cpu_ref::evaluate_with`] and the
//!   device's ops ([`user_ops`]).
//!
//! To encode passes yourself instead, take each planned tensor's bindable region from
//! [`crate::exec::TensorMemory::regions`] and prove the plan afterwards with
//! [`crate::exec::checksum::prove`] (see the README and
//! `examples/custom_op.rs`).

mod error;
mod op;
mod registry;
mod resolve;
mod validate;

pub use error::{RegisterError, SourcePos};
pub use op::{Bind, OpShapes, ShapeError, UserOp};
pub use registry::{register_op, user_ops, UserOps};
pub use validate::PRELUDE_WGSL;

pub(crate) use registry::{device_op, Registered, UserPipeline, UserPipelines};
pub(crate) use resolve::{apply_cpu, grid, resolve_user, UserCall};

/// Test helpers shared by the unit tests of exec (a SwiGLU op).
#[cfg(test)]
pub(crate) mod tests_support {
    pub(crate) use super::validate::tests::{swiglu, SWIGLU};
}
