//! [`prove`]: the one way to prove a plan on the GPU, for every caller (the CLI's
//! `wgalloc run`, the models, the KV cache's steps, user code): the plan and the memory
//! it was allocated into, checked against the device's limits, then the checksum run.

use super::{ChecksumKernels, ChecksumReport, ChecksumRun};
use crate::device::{GpuContext, PlannedMemory};
use crate::exec::{check_plan_against_limits, ExecError};
use crate::graph::Graph;
use crate::plan::Plan;

/// Proves that `plan` never clobbers a live tensor of `graph`, on the device, over the
/// very memory it runs in (`memory`, from [`crate::device::allocate_plan`] or a
/// caller's regions, [`PlannedMemory::from_regions`]): every node runs a checksum
/// kernel that reads its inputs where the plan put them and compares what it finds
/// with the CPU's prediction (see [`super`]).
///
/// The plan is checked against the device's limits first (every binding by the one
/// rule of [`crate::graph::extent`]). It does not call [`Plan::verify`]: the proof is
/// meant to catch plans that a verifier would refuse too (the CLI's
/// `--inject-clobber` relies on that); call `verify` first when the plan should also be
/// checked on the CPU. The checksum kernels are compiled once per device and shared.
///
/// The run overwrites every planned tensor: write your inputs again before your own
/// next run.
///
/// # Errors
/// [`ExecError::Device`] with a "never fits" variant
/// ([`crate::device::DeviceError::TensorTooLarge`]) before any wgpu call;
/// [`ExecError::ChecksumPlacement`] when a tensor lies outside `memory` (memory of
/// another plan); [`ExecError::ChecksumLimit`] when the device has too few storage
/// bindings for the run; [`ExecError::Gpu`] when wgpu fails during it.
pub fn prove(
    ctx: &GpuContext,
    graph: &Graph,
    plan: &Plan,
    memory: &PlannedMemory,
) -> Result<ChecksumReport, ExecError> {
    check_plan_against_limits(plan, graph, &ctx.limits)?;
    let kernels = ChecksumKernels::new(ctx)?;
    ChecksumRun::new(ctx, &kernels, graph, plan, memory)?.run()
}
