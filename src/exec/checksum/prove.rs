//! [`prove_plan`]: the whole path from a plan to a proof that `wgalloc run` takes, as one
//! call, so that the CLI, the end-to-end gate and user code cannot drift apart;
//! [`prove_plan_in`] does the same over memory from a [`crate::storage::Storage`].

use super::{ChecksumKernels, ChecksumReport, ChecksumRun};
use crate::device::{
    allocate_plan, allocate_plan_in, measure_allocation, BufferAllocator, GpuContext,
    PlannedMemory, SharedStorage, STORAGE_USAGE,
};
use crate::exec::check_plan_against_limits;
use crate::graph::Graph;
use crate::plan::Plan;

/// The checksum run over memory you already hold (e.g. after encoding your own
/// passes on its regions, [`crate::exec::TensorMemory::regions`]): the same proof as
/// [`prove_plan`] on the same plan and the same buffers, with the device's shared
/// checksum kernels. It overwrites every planned tensor (write your inputs again
/// before the next run of your own).
///
/// # Errors
/// [`crate::Error::Exec`] when the plan exceeds the device's limits, the run cannot be
/// laid out, or wgpu fails during it.
pub fn prove_memory(
    ctx: &GpuContext,
    graph: &Graph,
    plan: &Plan,
    memory: &PlannedMemory,
) -> crate::Result<ChecksumReport> {
    check_plan_against_limits(plan, graph, &ctx.limits)?;
    let kernels = ChecksumKernels::new(ctx)?;
    Ok(ChecksumRun::with_kernels(ctx, &kernels, graph, plan, memory)?.run()?)
}

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

/// [`prove_plan`] with the plan's memory taken from a [`crate::storage::Storage`] (sub-ranges of
/// pages, a user's storage) instead of whole buffers from an allocator: each chunk is a
/// region at a storage offset the device can bind, and the proof runs over exactly
/// those regions. The memory goes back to the storage before this returns.
///
/// # Errors
/// As [`prove_plan`]; the storage's refusal is [`crate::device::DeviceError::ChunkAllocation`]
/// holding its error.
pub fn prove_plan_in(
    ctx: &GpuContext,
    kernels: &ChecksumKernels,
    graph: &Graph,
    plan: &Plan,
    storage: SharedStorage,
) -> crate::Result<ChecksumReport> {
    check_plan_against_limits(plan, graph, &ctx.limits)?;
    let memory = allocate_plan_in(ctx, plan, STORAGE_USAGE, storage)?;
    let report = ChecksumRun::with_kernels(ctx, kernels, graph, plan, &memory)?.run()?;
    Ok(report)
}
