//! [`prove_plan`]: the whole path from a plan to a proof that `wgalloc run` takes, as one
//! call, so that the CLI, the end-to-end gate and user code cannot drift apart.

use super::{ChecksumKernels, ChecksumReport, ChecksumRun};
use crate::device::{
    allocate_plan, measure_allocation, BufferAllocator, GpuContext, STORAGE_USAGE,
};
use crate::exec::check_plan_against_limits;
use crate::graph::Graph;
use crate::plan::Plan;

/// Checks `plan` against the device's limits (every binding by the one rule of
/// [`crate::graph::extent`]), allocates its memory through `allocator`, runs the checksum
/// run over it with `kernels` and hands the memory back to `allocator`.
///
/// It does not call [`Plan::verify`]: the proof is meant to catch plans that a verifier
/// would refuse too (the CLI's `--inject-clobber` relies on that). Call `verify` first
/// when the plan should also be checked on the CPU.
///
/// # Errors
/// [`crate::Error::Device`] with a "never fits" variant
/// ([`crate::device::DeviceError::TensorTooLarge`],
/// [`crate::device::DeviceError::ChunkTooLarge`]) before any wgpu call, or with the
/// allocator's failure (out of device memory: "does not fit now"), after every buffer
/// already created was released; [`crate::Error::Exec`] when the checksum run cannot be
/// laid out or wgpu fails during it.
pub fn prove_plan(
    ctx: &GpuContext,
    kernels: &ChecksumKernels,
    graph: &Graph,
    plan: &Plan,
    allocator: &dyn BufferAllocator,
) -> crate::Result<ChecksumReport> {
    check_plan_against_limits(plan, graph, &ctx.limits)?;
    let (memory, device_bytes) = measure_allocation(&ctx.device, || {
        allocate_plan(ctx, plan, STORAGE_USAGE, allocator)
    })?;
    let report =
        ChecksumRun::with_kernels(ctx, kernels, graph, plan, &memory).and_then(|run| run.run());
    memory.release(allocator);
    Ok(ChecksumReport {
        device_bytes,
        ..report?
    })
}
