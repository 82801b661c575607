//! [`Stream`]: a sequence of executions on a device's queue, each taking its
//! activation memory from the allocator registered on the stream.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::pending::{Pending, PendingWork};
use super::registered::StreamStorage;
use super::request::{ExecuteRequest, ExecutionId, ExecutionResult, SyncReport};
use super::{busy, AllocatorDesc, BlockRequest, StreamError};
use crate::device::{
    chunk_alloc_size, read_staging, scoped, GpuContext, PlannedMemory, StagingRead, STORAGE_USAGE,
};
use crate::exec::{check_plan_against_limits, Executor, RunReport, TensorMemory};
use crate::graph::TensorId;
use crate::plan::Plan;
use crate::storage::OwnedRegion;
use crate::storage::Region;
use crate::storage::Storage;

/// One output being read back: (tensor, staging buffer, bytes to keep).
type Readback = (TensorId, wgpu::Buffer, u64);

/// What a successful submission leaves: the executor's report, the read-backs, the
/// bytes of the blocks taken and the index of the last submission.
type Submitted = (RunReport, Vec<Readback>, u64, wgpu::SubmissionIndex);

/// An error after the allocator was claimed, and whether anything reached the queue.
type SubmitFailure = (StreamError, bool);

/// The outputs read back for each pending execution, in order.
type ReadOutputs = Vec<Vec<(TensorId, Vec<u8>)>>;

/// What the stream keeps of a pending execution beside its blocks.
struct Submission {
    block_bytes: u64,
    readbacks: Vec<Readback>,
    report: RunReport,
}

/// A sequence of executions on a device's queue with the allocator they take their
/// activation memory from.
///
/// Rules (those of ACL's `aclrtAllocatorRegister`):
/// * [`Stream::register_allocator`] takes a complete [`AllocatorDesc`]; the descriptor
///   may be dropped afterwards. Registering again replaces the allocator: later
///   executions use the last one; blocks of earlier executions go back through the
///   allocator they came from.
/// * With no allocator registered, the stream uses its own default (one wgpu buffer
///   per block, destroyed when freed), so a stream works out of the box.
/// * [`Stream::execute`] allocates one block per planned chunk, binds the tensors
///   inside the blocks, submits and returns without waiting.
/// * One allocator (the same object) registered on two streams: executing on one while
///   the other has unsynchronized work with it is refused
///   ([`StreamError::AllocatorBusy`]) until the other is synchronized.
/// * Blocks go back to their allocator (its `free`) only after the stream has waited
///   for the submissions that used them: in [`Stream::synchronize`], when an execution
///   fails after something was queued, and when the stream is dropped.
pub struct Stream {
    id: u64,
    name: String,
    ctx: GpuContext,
    executor: Executor,
    allocator: StreamStorage,
    next_execution: u64,
    pending: PendingWork<OwnedRegion, StreamStorage, Submission>,
    last_submission: Option<wgpu::SubmissionIndex>,
    results: HashMap<ExecutionId, ExecutionResult>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("registered", &self.has_registered_allocator())
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// A stream on `ctx`'s queue, with the default allocator until one is registered.
    pub fn new(ctx: &GpuContext, name: impl Into<String>) -> Stream {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Stream {
            id,
            name: name.into(),
            ctx: ctx.clone(),
            executor: Executor::new(ctx),
            allocator: StreamStorage::private_default(ctx),
            next_execution: 1,
            pending: PendingWork::new(id),
            last_submission: None,
            results: HashMap::new(),
        }
    }

    /// A number unique to this stream in the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether a user allocator is registered (otherwise the default is used).
    pub fn has_registered_allocator(&self) -> bool {
        self.allocator.key().is_some()
    }

    /// Executions submitted and not yet synchronized.
    pub fn pending_executions(&self) -> usize {
        self.pending.len()
    }

    /// Blocks held by unsynchronized executions.
    pub fn held_blocks(&self) -> usize {
        self.pending.held_blocks()
    }

    /// Registers `desc` as the stream's allocator; the last registration wins. The
    /// stream keeps shared handles to the object and callbacks, so `desc` may be
    /// dropped afterwards.
    ///
    /// # Errors
    /// [`StreamError::MissingCallback`] naming the first part `desc` lacks; the stream
    /// keeps its previous allocator.
    pub fn register_allocator<T, B>(
        &mut self,
        desc: &AllocatorDesc<T, B>,
    ) -> Result<(), StreamError>
    where
        T: Send + Sync + 'static,
        B: Send + 'static,
    {
        let parts = desc.parts()?;
        self.allocator = StreamStorage::from_desc(&self.ctx, parts);
        Ok(())
    }

    /// Registers any device [`Storage`] as the stream's allocator (a
    /// [`crate::storage::PagedStorage`] of large buffers, a user's own storage); the
    /// last registration wins. The same `Arc` registered on several streams is one
    /// allocator for the busy rule, as with [`Stream::register_allocator`].
    pub fn register_storage<S>(&mut self, storage: Arc<S>)
    where
        S: Storage<Memory = wgpu::Buffer> + 'static,
    {
        self.allocator = StreamStorage::registered(storage);
    }

    /// Executes `request` on the stream: checks the plan against the device's limits,
    /// claims the allocator, allocates one block per planned chunk (bound at the block's
    /// address), writes the inputs, submits the graph and the read-back copies, and
    /// returns without waiting. The results arrive with [`Stream::synchronize`].
    ///
    /// # Errors
    /// [`StreamError::Device`] when the plan cannot fit the device;
    /// [`StreamError::AllocatorBusy`] when another stream holds the allocator;
    /// [`StreamError::AllocFailed`] when `alloc` fails; [`StreamError::BlockTooSmall`],
    /// [`StreamError::MisalignedBlock`], [`StreamError::BlockPastBufferEnd`],
    /// [`StreamError::BlockMissingUsage`] for a bad `address_of`;
    /// [`StreamError::Exec`] when an input or the graph is refused (wgpu's own errors
    /// included, caught in error scopes); [`StreamError::Device`] when wgpu refuses a
    /// read-back copy. On every error the
    /// blocks already taken go back to the allocator (after waiting for the queue when
    /// anything was queued) and the stream stays usable.
    pub fn execute(&mut self, request: &ExecuteRequest<'_>) -> Result<ExecutionId, StreamError> {
        check_plan_against_limits(request.plan, request.graph, &self.ctx.limits)?;
        let allocator = self.allocator.clone();
        // Declared before `blocks`, so on any exit (a panicking callback included) the
        // blocks go back first and then a claim this execution took is let go.
        let claim = match allocator.key() {
            Some(key) => Some(busy::claim(key, self.id, &self.name)?),
            None => None,
        };
        let mut blocks: Vec<OwnedRegion> = Vec::new();
        let result = self.allocate_and_submit(request, &allocator, &mut blocks);
        match result {
            Ok((report, readbacks, block_bytes, index)) => {
                let id = ExecutionId(self.next_execution);
                self.next_execution += 1;
                self.last_submission = Some(index);
                if let Some(claim) = claim {
                    claim.keep();
                }
                self.pending.push(Pending {
                    id,
                    key: allocator.key(),
                    _allocator: allocator,
                    blocks,
                    extra: Submission {
                        block_bytes,
                        readbacks,
                        report,
                    },
                });
                Ok(id)
            }
            Err((error, queued)) => {
                if queued {
                    // Writes or a submission may touch the blocks: let them finish.
                    self.wait_idle();
                }
                drop(blocks);
                drop(claim);
                Err(error)
            }
        }
    }

    /// Everything after the claim; on error, says whether anything reached the queue.
    fn allocate_and_submit(
        &mut self,
        request: &ExecuteRequest<'_>,
        allocator: &StreamStorage,
        blocks: &mut Vec<OwnedRegion>,
    ) -> Result<Submitted, SubmitFailure> {
        let not_queued = |e: StreamError| (e, false);
        let queued = |e: StreamError| (e, true);
        let regions = self
            .take_blocks(request.plan, allocator, blocks)
            .map_err(not_queued)?;
        let block_bytes = regions
            .iter()
            .flatten()
            .fold(0u64, |acc, r| acc.saturating_add(r.size));
        let memory = PlannedMemory::from_regions(regions);
        let mut tensors = TensorMemory::single(request.plan, &memory);
        for &(plan, layer) in &request.layers {
            tensors = tensors.with_layer(plan, layer);
        }
        for &(tensor, bytes) in &request.inputs {
            tensors
                .write(&self.ctx, request.graph, tensor, bytes)
                .map_err(|e| queued(e.into()))?;
        }
        let (report, _) = self
            .executor
            .submit(request.graph, &tensors)
            .map_err(|e| queued(e.into()))?;
        let (readbacks, index) = self.submit_readbacks(request, &tensors).map_err(queued)?;
        Ok((report, readbacks, block_bytes, index))
    }

    /// One block per chunk of `plan`, each checked; blocks go into `blocks` as soon as
    /// they are taken, so the caller frees them on any error.
    fn take_blocks(
        &self,
        plan: &Plan,
        allocator: &StreamStorage,
        blocks: &mut Vec<OwnedRegion>,
    ) -> Result<Vec<Vec<Region>>, StreamError> {
        let alignment = u64::from(self.ctx.limits.min_storage_buffer_offset_alignment.max(1));
        let mut regions = Vec::with_capacity(plan.buffers.len());
        for (b, buffer) in plan.buffers.iter().enumerate() {
            let mut row = Vec::with_capacity(buffer.chunks.len());
            for (c, chunk) in buffer.chunks.iter().enumerate() {
                let request = BlockRequest {
                    buffer: b,
                    chunk: c,
                    size: chunk_alloc_size(chunk).unwrap_or(u64::MAX),
                    alignment,
                    usage: STORAGE_USAGE,
                };
                let (held, address) =
                    allocator
                        .allocate(&request)
                        .map_err(|e| StreamError::AllocFailed {
                            buffer: b,
                            chunk: c,
                            size: request.size,
                            message: e.to_string(),
                        })?;
                blocks.push(held);
                check_address(&request, &address)?;
                row.push(address);
            }
            regions.push(row);
        }
        Ok(regions)
    }

    /// Copies every requested output into a staging buffer in one submission, inside
    /// error scopes: a copy wgpu refuses (e.g. from a layer buffer without
    /// `COPY_SRC`, or a block of another device) is [`StreamError::Device`], not a
    /// panic in wgpu's default handler.
    fn submit_readbacks(
        &self,
        request: &ExecuteRequest<'_>,
        tensors: &TensorMemory<'_>,
    ) -> Result<(Vec<Readback>, wgpu::SubmissionIndex), StreamError> {
        let mut ranges = Vec::with_capacity(request.outputs.len());
        let mut staged = 0u64;
        for &tensor in &request.outputs {
            let range = tensors.range(request.graph, tensor, wgpu::COPY_BUFFER_ALIGNMENT as u32)?;
            staged = staged.saturating_add(range.key.size);
            ranges.push((tensor, range));
        }
        let device = &self.ctx.device;
        let (readbacks, index) = scoped(device, staged, || {
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgalloc stream read-back"),
            });
            let mut readbacks = Vec::with_capacity(ranges.len());
            for (tensor, range) in &ranges {
                let len = request.graph.extent(*tensor).map_or(0, |e| e.size);
                let staging = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("wgalloc stream output"),
                    size: range.key.size,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                encoder.copy_buffer_to_buffer(
                    range.buffer,
                    range.key.offset,
                    &staging,
                    0,
                    range.key.size,
                );
                readbacks.push((*tensor, staging, len));
            }
            let index = self.ctx.queue.submit([encoder.finish()]);
            (readbacks, index)
        })?;
        Ok((readbacks, index))
    }

    /// Submits nothing and waits for everything queued so far (errors are ignored:
    /// a device that cannot be polled runs nothing more on the blocks).
    fn wait_idle(&self) {
        let index = self.ctx.queue.submit([]);
        let _ = self.ctx.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
    }

    /// Waits until every submission of the stream has completed, reads back the
    /// requested outputs, then hands every block of those executions back to its
    /// allocator and lets go of the allocators this stream held.
    ///
    /// # Errors
    /// [`StreamError::Sync`] when the wait or a read-back map fails; the blocks are
    /// then kept (and freed when the stream is dropped).
    pub fn synchronize(&mut self) -> Result<SyncReport, StreamError> {
        if self.pending.is_empty() {
            return Ok(SyncReport::default());
        }
        let sync_error = |message: String| StreamError::Sync {
            stream: self.id,
            message,
        };
        self.ctx
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: self.last_submission.clone(),
                timeout: None,
            })
            .map_err(|e| sync_error(format!("poll: {e}")))?;
        let outputs = self.read_outputs().map_err(sync_error)?;
        // The submissions are complete: the blocks go back now.
        let mut report = SyncReport::default();
        for ((id, blocks, submission), outputs) in self.pending.finish().into_iter().zip(outputs) {
            report.executions += 1;
            report.blocks_freed += blocks;
            self.results.insert(
                id,
                ExecutionResult {
                    report: submission.report,
                    block_bytes: submission.block_bytes,
                    outputs,
                },
            );
        }
        self.last_submission = None;
        Ok(report)
    }

    /// Maps every pending read-back (one poll for all) and copies the bytes out, per
    /// pending execution in order.
    fn read_outputs(&self) -> Result<ReadOutputs, String> {
        let reads: Vec<StagingRead<'_>> = self
            .pending
            .extras()
            .flat_map(|p| p.readbacks.iter())
            .map(|(_, staging, len)| StagingRead {
                staging,
                skip: 0,
                len: (*len).min(staging.size()),
            })
            .collect();
        let mut bytes = read_staging(&self.ctx, &reads)
            .map_err(|e| e.to_string())?
            .into_iter();
        Ok(self
            .pending
            .extras()
            .map(|p| {
                p.readbacks
                    .iter()
                    .map(|(tensor, _, _)| (*tensor, bytes.next().unwrap_or_default()))
                    .collect()
            })
            .collect())
    }

    /// The result of a synchronized execution, if it has not been taken.
    pub fn result(&self, id: ExecutionId) -> Option<&ExecutionResult> {
        self.results.get(&id)
    }

    /// Takes the result of a synchronized execution out of the stream.
    pub fn take_result(&mut self, id: ExecutionId) -> Option<ExecutionResult> {
        self.results.remove(&id)
    }
}

/// Checks a block's address against its request and the device's alignment.
fn check_address(request: &BlockRequest, address: &Region) -> Result<(), StreamError> {
    let (buffer, chunk) = (request.buffer, request.chunk);
    if address.size < request.size {
        return Err(StreamError::BlockTooSmall {
            buffer,
            chunk,
            needed: request.size,
            got: address.size,
        });
    }
    if !address.offset.is_multiple_of(request.alignment.max(1)) {
        return Err(StreamError::MisalignedBlock {
            buffer,
            chunk,
            offset: address.offset,
            alignment: request.alignment,
        });
    }
    let buffer_size = address.buffer.size();
    // The whole range the address claims (at least the request, checked above) must
    // lie in its buffer: the region bound for the tensors is that range.
    if address
        .offset
        .checked_add(address.size)
        .is_none_or(|end| end > buffer_size)
    {
        return Err(StreamError::BlockPastBufferEnd {
            buffer,
            chunk,
            offset: address.offset,
            size: address.size,
            buffer_size,
        });
    }
    if !address.buffer.usage().contains(request.usage) {
        return Err(StreamError::BlockMissingUsage {
            buffer,
            chunk,
            needed: format!("{:?}", request.usage),
            has: format!("{:?}", address.buffer.usage()),
        });
    }
    Ok(())
}

impl Drop for Stream {
    /// Waits for the stream's work, then frees its blocks (even if the wait failed: a
    /// device that cannot be waited on runs nothing more on them).
    fn drop(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if self.synchronize().is_err() {
            self.wait_idle();
            self.pending.abandon();
        }
    }
}
