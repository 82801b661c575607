//! [`Executor`]: records a whole planned graph into one command encoder and one compute
//! pass, with pipelines built once, bind groups cached per bound range and all
//! per-dispatch parameters in one uniform buffer at dynamic offsets; submits once and
//! waits. Inputs of a node that overlap each other are staged through the executor's
//! workspace (see [`super::workspace`]) by copy dispatches in the same pass.

use std::time::{Duration, Instant};

use super::bindings::{BindGroupCache, BindGroupKey, BindingKey};
use super::custom::{self, Registered, UserCall, UserPipelines};
use super::kernels::{self, Kernel, MatmulTile, Pick, PipelineKey, SharedRegistry, StorageType};
use super::ops::{self, Op, OpCall};
use super::params::{padded_block, KernelParams, UniformPacker, PARAMS_SIZE};
use super::tensor_memory::{TensorMemory, TensorRange};
use super::timer::PassTimer;
use super::tune::{self, TunedShape};
use super::workspace::{self, Slot, Workspace};
use super::Bind;
use super::ExecError;
use crate::device::{scoped_keep, DeviceError, GpuContext};
use crate::graph::{Graph, NodeId, TensorId};

/// What one run did and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Node dispatches recorded (one per node; staging copies are counted apart).
    pub dispatches: usize,
    /// Of those, dispatches that ran an in-place kernel.
    pub inplace_dispatches: usize,
    /// Copy dispatches that staged an input overlapping another input of its node into
    /// the workspace (recorded in the same pass, just before the node).
    pub staging_copies: usize,
    /// Bytes of the executor's workspace after this run (0 while no graph has needed
    /// one): scratch memory apart from planned memory, kept and reused across runs.
    pub workspace_bytes: u64,
    /// CPU time to resolve the nodes, build missing pipelines and bind groups, and
    /// record the pass.
    pub encode_time: Duration,
    /// CPU wall time from submit until the device finished (the submit included).
    pub wait_time: Duration,
    /// Of `wait_time`, the CPU time of the `queue.submit` call itself.
    pub submit_time: Duration,
    /// CPU time a keyed run ([`Executor::run_cached`]) spent after its submit recording
    /// the same key's next pass, while the device ran this one (the next run of the key
    /// submits that pass without encoding; not part of `encode_time`).
    pub encode_ahead_time: Duration,
    /// GPU time of the compute pass from timestamp queries, when the device has
    /// `TIMESTAMP_QUERY`; `None` otherwise.
    pub gpu_time: Option<Duration>,
    /// Time this run spent choosing matmul tiles on the device ([`crate::exec::tune`]):
    /// timing candidates for shape classes met for the first time; zero once every
    /// class is chosen or cached. Not part of `encode_time`.
    pub tune_time: Duration,
    /// Bind groups created by this run (0 on a repeated run over the same memory).
    pub bind_groups_created: usize,
    /// Bind groups taken from the cache by this run.
    pub bind_groups_reused: usize,
    /// Pipelines built so far (all runs).
    pub pipelines: usize,
}

/// One recorded dispatch, ready to encode.
#[derive(Clone)]
struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
    /// The parameter block's dynamic offset (`None`: a user kernel without one).
    offset: Option<u32>,
    grid: [u32; 3],
}

/// A run recorded under a caller's key ([`Executor::run_cached`]): its dispatches
/// (pipelines and bind groups), parameter bytes and counts, valid while the memory,
/// the uniform buffer and the workspace are the ones it was recorded over.
struct Recorded {
    memory: Vec<u64>,
    uniform_generation: u64,
    workspace_generation: u64,
    nodes: usize,
    uniform: Vec<u8>,
    dispatches: Vec<Dispatch>,
    inplace_dispatches: usize,
    staging_copies: usize,
    /// The next run's pass, encoded ahead while the device ran the last one.
    ahead: Option<wgpu::CommandBuffer>,
}

/// One storage binding before its bind group exists.
#[derive(Clone, Copy)]
enum Bound<'a> {
    /// A tensor's planned range.
    Planned(TensorRange<'a>),
    /// A staged input's slot in the workspace.
    Workspace(Slot),
}

impl Bound<'_> {
    fn key(&self) -> BindingKey {
        match self {
            Bound::Planned(r) => BindingKey::Planned(r.key),
            Bound::Workspace(slot) => BindingKey::Workspace {
                offset: slot.offset,
                size: slot.size,
            },
        }
    }
}

/// The pipeline of one dispatch: a built-in kernel (built on first use) or a user
/// op's entry point (built at registration).
enum Pipe {
    /// A built-in kernel, for tensors stored as the given type.
    Builtin(Kernel, StorageType),
    /// A user op's entry point.
    User {
        /// The op's id and entry.
        key: PipelineKey,
        /// Its pipeline and layout.
        pipeline: custom::UserPipeline,
        /// Its parameter block's binding and bound size, if it has one.
        params: Option<(u32, u64)>,
        /// Its storage bindings, in map order.
        storage: Vec<u32>,
    },
}

impl Pipe {
    fn key(&self) -> PipelineKey {
        match self {
            Pipe::Builtin(kernel, _) => PipelineKey::Builtin(*kernel),
            Pipe::User { key, .. } => *key,
        }
    }
}

/// What a node runs: a built-in op's checked call, or a user op's.
enum Target {
    Builtin(OpCall, StorageType),
    User(std::sync::Arc<Registered>, UserPipelines, UserCall),
}

/// One dispatch before its bind group exists.
struct PendingDispatch<'a> {
    kernel: Pipe,
    bindings: Vec<Bound<'a>>,
    offset: Option<u32>,
    grid: [u32; 3],
}

/// One node's dispatches: its staging copies, then its kernel.
struct NodeDispatches<'a> {
    copies: Vec<PendingDispatch<'a>>,
    node: PendingDispatch<'a>,
    /// Workspace bytes the copies use.
    workspace: u64,
    inplace: bool,
}

/// A node's tensors (inputs then output) and their planned ranges.
struct NodeRanges<'a> {
    tensors: Vec<TensorId>,
    ranges: Vec<TensorRange<'a>>,
    /// Whether the output lies exactly over input 0.
    inplace: bool,
}

/// The pipeline for a node, in place or not, and the order in which its tensors are
/// bound: indices into `[inputs.., output]` (`out` is the output). `None` when in
/// place is asked of an op without an in-place kernel.
fn select(target: &Target, inplace: bool, out: usize, pick: Pick) -> Option<(Pipe, Vec<usize>)> {
    match target {
        Target::Builtin(call, storage) => kernels::select_with(call, inplace, pick)
            .map(|(k, order)| (Pipe::Builtin(k, *storage), order.to_vec())),
        Target::User(op, pipelines, _) => {
            let (entry, map) = op.entry(inplace)?;
            let pipeline = if inplace {
                pipelines.inplace.clone()?
            } else {
                pipelines.out_of_place.clone()
            };
            let order = map
                .iter()
                .map(|bind| match *bind {
                    Bind::Input(i) => i,
                    Bind::Output => out,
                })
                .collect();
            let key = PipelineKey::User { id: op.id, inplace };
            Some((
                Pipe::User {
                    key,
                    pipeline,
                    params: entry.params.map(|p| (p.binding, padded_block(p.size))),
                    storage: entry.storage.iter().map(|s| s.binding).collect(),
                },
                order,
            ))
        }
    }
}

/// Whether two bound ranges share a byte of one wgpu buffer.
fn ranges_overlap(a: &TensorRange<'_>, b: &TensorRange<'_>) -> bool {
    a.buffer == b.buffer
        && a.key.offset < b.key.offset.saturating_add(b.key.size)
        && b.key.offset < a.key.offset.saturating_add(a.key.size)
}

/// Runs planned graphs on one device. Pipelines and bind-group layouts are built on
/// first use and kept; bind groups are cached per kernel and bound ranges for the
/// last [`TensorMemory`] run.
///
/// **Workspace.** WebGPU forbids two overlapping writable bindings in one dispatch (and
/// every tensor is bound `read_write`). When inputs of a node share bytes (`mul(x, x)`,
/// `matmul_bt(q, q)`, `add(a, view_of_a)`, also with the output in place over input
/// 0), the executor copies each later overlapping input into its workspace (one
/// storage buffer it owns, apart from planned memory, slots aligned to
/// `min_storage_buffer_offset_alignment`) with a copy dispatch in the same pass, and
/// binds the copy. The workspace is sized to the largest need of any node, grows when a
/// graph needs more and is reused by later runs ([`RunReport::workspace_bytes`]). An
/// output that overlaps an input other than as an in-place output over input 0 is
/// still a plan bug ([`ExecError::OverlappingBindings`]).
#[derive(Debug)]
pub struct Executor {
    ctx: GpuContext,
    registry: std::sync::Arc<SharedRegistry>,
    bind_groups: BindGroupCache,
    uniform: Option<wgpu::Buffer>,
    uniform_generation: u64,
    /// The recording whose parameter bytes the uniform buffer holds (`None`: an
    /// unkeyed run's or nobody's).
    uniform_owner: Option<u64>,
    workspace: Workspace,
    timer: Option<PassTimer>,
    recorded: std::collections::HashMap<u64, Recorded>,
}

impl std::fmt::Debug for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorded")
            .field("nodes", &self.nodes)
            .field("dispatches", &self.dispatches.len())
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor on `ctx`'s device (cheap: pipelines are built when first needed, once
    /// per device, and shared with every other executor on it).
    pub fn new(ctx: &GpuContext) -> Executor {
        Executor {
            ctx: ctx.clone(),
            registry: SharedRegistry::of(ctx),
            bind_groups: BindGroupCache::new(),
            uniform: None,
            uniform_generation: 0,
            uniform_owner: None,
            workspace: Workspace::new(),
            timer: PassTimer::new(ctx),
            recorded: std::collections::HashMap::new(),
        }
    }

    /// Whether `op` has a built-in kernel; the list is [`ops::SUPPORTED_OPS`].
    pub fn supports(op: &str) -> bool {
        ops::supports(op)
    }

    /// Whether this executor runs `op`: a built-in op, or a user op registered on its
    /// device ([`crate::exec::register_op`]).
    pub fn runs(&self, op: &str) -> bool {
        ops::supports(op) || custom::device_op(&self.ctx, op).is_some()
    }

    /// Checks every node of `graph` against the kernels this executor runs, before
    /// anything is planned or allocated: each op is built in or registered on the
    /// device, takes the node's inputs and shapes (the op's own shape check, parameter
    /// block and grid included), and has an in-place kernel when the node is marked
    /// in place (the planner may put such a node's output over its input 0).
    /// [`crate::session::Session::new`] runs it first; [`Executor::run`] finds the
    /// same problems only after planning and allocation.
    ///
    /// # Errors
    /// [`ExecError::NoKernel`], [`ExecError::WrongArity`], [`ExecError::BadShape`],
    /// [`ExecError::NoInPlaceKernel`], [`ExecError::TooManyWorkgroups`] and the other
    /// per-node errors of [`crate::exec::resolve`].
    pub fn check_graph(&self, graph: &Graph) -> Result<(), ExecError> {
        let max_groups = self.ctx.limits.max_compute_workgroups_per_dimension;
        for (step, node) in graph.nodes.iter().enumerate() {
            let node_id = u32::try_from(step).unwrap_or(u32::MAX);
            let has_inplace = if Op::parse(&node.op).is_some() {
                let call = ops::resolve(graph, step)?;
                if ops::storage_of(graph, step) == StorageType::F16 && !self.has_f16() {
                    return Err(ExecError::ShaderF16Missing);
                }
                kernels::select(&call, true).is_some()
            } else {
                let (op, _) =
                    custom::device_op(&self.ctx, &node.op).ok_or_else(|| ExecError::NoKernel {
                        node: NodeId(node_id),
                        op: node.op.clone(),
                    })?;
                let call = custom::resolve_user(graph, step, &op)?;
                custom::grid(&op, &call, node_id, max_groups, false)?;
                if node.inplace && op.op.has_inplace() {
                    custom::grid(&op, &call, node_id, max_groups, true)?;
                }
                op.op.has_inplace()
            };
            if node.inplace && !has_inplace {
                return Err(ExecError::NoInPlaceKernel {
                    node: NodeId(node_id),
                    op: node.op.clone(),
                });
            }
        }
        Ok(())
    }

    /// The tuner's choice for `call` on this device ([`crate::exec::tune`]: a tiled
    /// matmul's tile or fused attention's form), timed now if its shape class is new;
    /// `None` for a call that runs neither.
    fn variant_of(&self, call: &OpCall, storage: StorageType) -> Option<tune::Variant> {
        TunedShape::of(call, storage).map(|shape| tune::variant_for(&self.ctx, shape))
    }

    /// What this device runs `call` with: the tuner's tile, attention form or layer
    /// norm form.
    fn pick(&self, call: &OpCall, storage: StorageType) -> Pick {
        let pick = self
            .variant_of(call, storage)
            .map_or_else(Pick::default, tune::Variant::pick);
        match call {
            OpCall::KvAttend { .. } | OpCall::KvSelfAttend { .. } => Pick {
                decode: tune::decode_slices(&self.ctx),
                ..pick
            },
            _ => pick,
        }
    }

    /// The register tile node `step` of `graph` runs with on this device ([`MatmulTile`],
    /// chosen as [`Executor::run`] chooses it: tuned, cached or by the rule, see
    /// [`crate::exec::tune`]); `None` when the node runs no tiled matmul.
    ///
    /// # Errors
    /// The errors of [`crate::exec::resolve`] for a node its op cannot take.
    pub fn matmul_tile(&self, graph: &Graph, step: usize) -> Result<Option<MatmulTile>, ExecError> {
        Ok(self
            .tuned_choice(graph, step)?
            .and_then(tune::Variant::tile))
    }

    /// The tuner's choice for node `step` of `graph` on this device (a tiled matmul's
    /// tile or fused attention's form, chosen as [`Executor::run`] chooses it); `None`
    /// when the node runs neither.
    ///
    /// # Errors
    /// The errors of [`crate::exec::resolve`] for a node its op cannot take.
    pub fn tuned_choice(
        &self,
        graph: &Graph,
        step: usize,
    ) -> Result<Option<tune::Variant>, ExecError> {
        let Some(node) = graph.nodes.get(step) else {
            return Err(ExecError::UnknownNode {
                node: NodeId(u32::try_from(step).unwrap_or(u32::MAX)),
                nodes: graph.nodes.len(),
            });
        };
        if Op::parse(&node.op).is_none() {
            return Ok(None);
        }
        let storage = ops::storage_of(graph, step);
        Ok(self.variant_of(&ops::resolve(graph, step)?, storage))
    }

    /// Whether this device runs f16 kernels (its adapter offers `shader-f16` and the
    /// context asked for it, see [`GpuContext::has_f16`]).
    pub fn has_f16(&self) -> bool {
        self.ctx.has_f16()
    }

    /// The device context.
    pub fn context(&self) -> &GpuContext {
        &self.ctx
    }

    /// Bytes of the workspace where overlapping inputs are staged (0 until a graph
    /// needs one).
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.bytes()
    }

    /// Builds every kernel's pipeline now instead of on first use.
    ///
    /// # Errors
    /// [`ExecError::Device`] when wgpu rejects a shader or pipeline.
    pub fn build_all_pipelines(&mut self) -> Result<(), ExecError> {
        self.build_all_pipelines_for(StorageType::F32)
    }

    /// Builds every kernel's pipeline for tensors stored as `storage` now (for f16,
    /// the kernels that have an f16 form, [`crate::exec::Shader::has_f16`]).
    ///
    /// # Errors
    /// [`ExecError::ShaderF16Missing`] for f16 on a device without `shader-f16`;
    /// [`ExecError::Device`] when wgpu rejects a shader or pipeline.
    pub fn build_all_pipelines_for(&mut self, storage: StorageType) -> Result<(), ExecError> {
        if storage == StorageType::F16 && !self.has_f16() {
            return Err(ExecError::ShaderF16Missing);
        }
        for kernel in Kernel::ALL {
            let shader = kernel.entry().0;
            if shader.source_for(storage).is_none()
                || (shader.needs_subgroups() && !self.ctx.has_subgroups())
            {
                continue;
            }
            self.registry
                .with(|r| r.pipeline_for(&self.ctx.device, kernel, storage))?;
        }
        Ok(())
    }

    /// The uniform buffer, grown to at least `size` bytes (growing drops the cached
    /// bind groups, which name the old buffer).
    fn uniform_of_size(&mut self, size: u64) -> wgpu::Buffer {
        if let Some(buffer) = &self.uniform {
            if buffer.size() >= size {
                return buffer.clone();
            }
        }
        let buffer = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgalloc kernel params"),
            size: size.next_power_of_two().max(size),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.uniform_generation += 1;
        self.uniform = Some(buffer.clone());
        buffer
    }

    /// Checks the binding size limit on one bound range (its offset alignment was
    /// checked when it was resolved, [`TensorMemory::range`]).
    fn check_binding(&self, tensor: u32, range: &TensorRange<'_>) -> Result<(), ExecError> {
        let max_size = self.ctx.limits.max_storage_buffer_binding_size;
        if range.key.size > max_size {
            return Err(ExecError::BindingTooLarge {
                tensor: TensorId(tensor),
                size: range.key.size,
                max_size,
            });
        }
        Ok(())
    }

    /// Resolves node `step`: its call, kernel (in place when the output shares input
    /// 0's range), the inputs it stages through the workspace, bound ranges in binding
    /// order and grids. The steps: [`Executor::target_of`], [`Executor::bound_ranges`],
    /// [`Executor::staging_copies`], then the node's own dispatch.
    fn prepare<'m>(
        &self,
        graph: &Graph,
        memory: &TensorMemory<'m>,
        step: usize,
        packer: &mut UniformPacker,
    ) -> Result<NodeDispatches<'m>, ExecError> {
        let node_id = u32::try_from(step).unwrap_or(u32::MAX);
        let target = self.target_of(graph, step, node_id)?;
        let node = &graph.nodes[step];
        let bound = self.bound_ranges(graph, memory, step, node_id)?;
        let (tensors, ranges, inplace) = (&bound.tensors, &bound.ranges, bound.inplace);
        let out = ranges.len() - 1;
        let pick = match &target {
            Target::Builtin(call, storage) => self.pick(call, *storage),
            Target::User(..) => Pick::default(),
        };
        let (kernel, order) =
            select(&target, inplace, out, pick).ok_or_else(|| ExecError::NoInPlaceKernel {
                node: NodeId(node_id),
                op: node.op.clone(),
            })?;
        for &i in &order {
            self.check_binding(tensors[i].0, &ranges[i])?;
        }
        let (copies, staging) = self.staging_copies(&ranges[..out], node_id, packer)?;
        let bindings = order
            .iter()
            .map(|&i| match staging.slots.get(i).copied().flatten() {
                Some(slot) => Bound::Workspace(slot),
                None => Bound::Planned(ranges[i]),
            })
            .collect();
        let (grid, offset) = self.grid_and_params(&target, &kernel, node_id, inplace, packer)?;
        Ok(NodeDispatches {
            copies,
            node: PendingDispatch {
                kernel,
                bindings,
                offset,
                grid,
            },
            workspace: staging.bytes,
            inplace,
        })
    }

    /// What node `step` runs: a built-in op's checked call, or a registered user op's.
    fn target_of(&self, graph: &Graph, step: usize, node_id: u32) -> Result<Target, ExecError> {
        let node = graph.nodes.get(step).ok_or(ExecError::UnknownNode {
            node: NodeId(node_id),
            nodes: graph.nodes.len(),
        })?;
        if Op::parse(&node.op).is_some() {
            return Ok(Target::Builtin(
                ops::resolve(graph, step)?,
                ops::storage_of(graph, step),
            ));
        }
        let (op, pipelines) =
            custom::device_op(&self.ctx, &node.op).ok_or_else(|| ExecError::NoKernel {
                node: NodeId(node_id),
                op: node.op.clone(),
            })?;
        let call = custom::resolve_user(graph, step, &op)?;
        Ok(Target::User(op, pipelines, call))
    }

    /// The planned ranges of node `step`'s inputs then output, and whether the output
    /// lies in place over input 0. The output may share bytes with an input only as an
    /// in-place output exactly over input 0 ([`ExecError::OverlappingBindings`]
    /// otherwise); inputs that overlap each other are staged later.
    fn bound_ranges<'m>(
        &self,
        graph: &Graph,
        memory: &TensorMemory<'m>,
        step: usize,
        node_id: u32,
    ) -> Result<NodeRanges<'m>, ExecError> {
        let node = &graph.nodes[step];
        let mut tensors = node.inputs.clone();
        tensors.push(node.output);
        let alignment = self.ctx.limits.min_storage_buffer_offset_alignment;
        let ranges = tensors
            .iter()
            .map(|&t| memory.range(graph, t, alignment))
            .collect::<Result<Vec<_>, _>>()?;
        let out = ranges.len() - 1;
        let inplace = ranges[out].buffer == ranges[0].buffer
            && ranges[out].key.offset == ranges[0].key.offset;
        for i in 0..out {
            let legal = inplace && (i > 0 || ranges[0].key.size == ranges[out].key.size);
            if ranges_overlap(&ranges[i], &ranges[out]) && !legal {
                return Err(ExecError::OverlappingBindings {
                    node: NodeId(node_id),
                    first: tensors[i],
                    second: tensors[out],
                });
            }
        }
        Ok(NodeRanges {
            tensors,
            ranges,
            inplace,
        })
    }

    /// The workspace slots of the inputs that overlap an earlier input, and the copy
    /// dispatches that fill them ([`ExecError::WorkspaceTooLarge`] when the slots exceed
    /// the adapter's largest buffer).
    fn staging_copies<'m>(
        &self,
        inputs: &[TensorRange<'m>],
        node_id: u32,
        packer: &mut UniformPacker,
    ) -> Result<(Vec<PendingDispatch<'m>>, workspace::Staging), ExecError> {
        let limits = &self.ctx.limits;
        let sizes: Vec<u64> = inputs.iter().map(|r| r.key.size).collect();
        let staging = workspace::stage_overlapping(
            &sizes,
            |i, j| ranges_overlap(&inputs[i], &inputs[j]),
            u64::from(limits.min_storage_buffer_offset_alignment),
        );
        let staging = match staging {
            Some(s) if s.bytes <= limits.max_buffer_size => s,
            other => {
                return Err(ExecError::WorkspaceTooLarge {
                    node: NodeId(node_id),
                    size: other.map_or(u64::MAX, |s| s.bytes),
                    max: limits.max_buffer_size,
                })
            }
        };
        let mut copies = Vec::with_capacity(staging.count());
        for (i, slot) in staging.slots.iter().enumerate() {
            let Some(slot) = *slot else { continue };
            let words = slot.size / 4;
            let small = u32::try_from(words).map_err(|_| ExecError::TooManyElements {
                node: NodeId(node_id),
                len: words,
                max: u64::from(u32::MAX),
            })?;
            copies.push(PendingDispatch {
                kernel: Pipe::Builtin(Kernel::CopyWords, StorageType::F32),
                bindings: vec![Bound::Planned(inputs[i]), Bound::Workspace(slot)],
                offset: Some(packer.push(&KernelParams::copy(small))?),
                grid: kernels::copy_workgroups(
                    words,
                    node_id,
                    limits.max_compute_workgroups_per_dimension,
                )?,
            });
        }
        Ok((copies, staging))
    }

    /// A node's workgroup grid and the offset of its parameter block in the uniform
    /// buffer (`None` for a user op without one).
    fn grid_and_params(
        &self,
        target: &Target,
        kernel: &Pipe,
        node_id: u32,
        inplace: bool,
        packer: &mut UniformPacker,
    ) -> Result<([u32; 3], Option<u32>), ExecError> {
        let max_groups = self.ctx.limits.max_compute_workgroups_per_dimension;
        match target {
            Target::Builtin(call, storage) => Ok((
                kernels::workgroups_with(call, node_id, max_groups, self.pick(call, *storage))?,
                Some(packer.push(&KernelParams::for_call(call))?),
            )),
            Target::User(op, _, call) => {
                let grid = custom::grid(op, call, node_id, max_groups, inplace)?;
                let uses_params = matches!(
                    kernel,
                    Pipe::User {
                        params: Some(_),
                        ..
                    }
                );
                let offset = match (&call.params, uses_params) {
                    (Some(block), true) => Some(packer.push_bytes(block)?),
                    _ => None,
                };
                Ok((grid, offset))
            }
        }
    }

    /// The pipeline and (cached) bind group of one prepared dispatch.
    fn record(
        &mut self,
        p: &PendingDispatch<'_>,
        uniform: &wgpu::Buffer,
    ) -> Result<Dispatch, ExecError> {
        let device = &self.ctx.device;
        let (pipeline, layout) = self.registry.with(|r| match &p.kernel {
            Pipe::Builtin(kernel, storage) => {
                let pipeline = r.pipeline_for(device, *kernel, *storage)?;
                Ok::<_, ExecError>((pipeline, r.layout(device, kernel.storage_bindings())))
            }
            Pipe::User { pipeline, .. } => Ok((pipeline.pipeline.clone(), pipeline.layout.clone())),
        })?;
        // The parameter block's binding and size, then each storage binding's number.
        let (params, numbers): (Option<(u32, u64)>, Vec<u32>) = match &p.kernel {
            Pipe::Builtin(..) => (
                Some((0, PARAMS_SIZE)),
                (1..=p.bindings.len() as u32).collect(),
            ),
            Pipe::User {
                params, storage, ..
            } => (*params, storage.clone()),
        };
        let workspace = self.workspace.buffer();
        let staged = p.bindings.iter().any(|b| matches!(b, Bound::Workspace(_)));
        if staged && workspace.is_none() {
            return Err(ExecError::Device(DeviceError::Internal {
                message: "a staged input has no workspace buffer".into(),
            }));
        }
        let key = BindGroupKey {
            kernel: p.kernel.key(),
            ranges: p.bindings.iter().map(Bound::key).collect(),
        };
        let group = self.bind_groups.get_or_create(key, || {
            let uniform = params.map(|(binding, size)| (binding, uniform, 0, size));
            let storage = p
                .bindings
                .iter()
                .zip(&numbers)
                .filter_map(|(b, &n)| match b {
                    Bound::Planned(r) => Some((n, r.buffer, r.key.offset, r.key.size)),
                    Bound::Workspace(slot) => workspace.map(|w| (n, w, slot.offset, slot.size)),
                });
            let entries: Vec<wgpu::BindGroupEntry<'_>> = uniform
                .into_iter()
                .chain(storage)
                .map(|(binding, buffer, offset, size)| wgpu::BindGroupEntry {
                    binding,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer,
                        offset,
                        size: wgpu::BufferSize::new(size),
                    }),
                })
                .collect();
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            })
        });
        Ok(Dispatch {
            pipeline,
            group,
            offset: p.offset,
            grid: p.grid,
        })
    }

    /// Runs every node of `graph` over `memory`: one encoder, one compute pass, one
    /// submit, then waits for the device. Inputs and weights must have been written
    /// (see [`TensorMemory::write`]); outputs are read with [`TensorMemory::read`].
    ///
    /// # Errors
    /// Before anything is submitted: [`ExecError::NoKernel`] for an op without a kernel,
    /// [`ExecError::BadShape`] / [`ExecError::WrongArity`] for a node its op cannot
    /// take, [`ExecError::NotPlaced`] and the other placement errors of
    /// [`TensorMemory::range`], [`ExecError::OverlappingBindings`] (an output over an
    /// input other than in place over input 0), [`ExecError::NoInPlaceKernel`],
    /// [`ExecError::MisalignedOffset`], [`ExecError::BindingTooLarge`],
    /// [`ExecError::TooManyWorkgroups`], [`ExecError::WorkspaceTooLarge`]. After:
    /// [`ExecError::Device`] for anything wgpu reports.
    pub fn run(
        &mut self,
        graph: &Graph,
        memory: &TensorMemory<'_>,
    ) -> Result<RunReport, ExecError> {
        self.record_and_submit(graph, memory, true, None)
            .map(|(report, _)| report)
    }

    /// [`Executor::run`] that keeps what it recorded under `key` and, on a later call
    /// with the same key, only submits it again: no node is resolved, no range looked
    /// up, no bind group looked up or created (the steady decode step of a generation
    /// loop). After each submit the key's next pass is encoded while the device runs
    /// this one ([`RunReport::encode_ahead_time`]), so the next call submits without
    /// encoding; the parameters are written again only when another run used the
    /// uniform buffer since. The recording is redone when the memory's ids
    /// ([`TensorMemory::memory_key`]), the node count, the executor's uniform buffer or
    /// its workspace changed.
    ///
    /// The caller promises that one key always names the same graph (nodes, shapes,
    /// parameters) and the same plans in `memory`'s layers; a different graph or plan
    /// under a used key runs the old recording. [`Executor::forget`] drops one.
    ///
    /// # Errors
    /// As [`Executor::run`].
    pub fn run_cached(
        &mut self,
        key: u64,
        graph: &Graph,
        memory: &TensorMemory<'_>,
    ) -> Result<RunReport, ExecError> {
        self.record_and_submit(graph, memory, true, Some(key))
            .map(|(report, _)| report)
    }

    /// Drops the recording kept under `key` by [`Executor::run_cached`] (when the graph
    /// or plan it named is gone); whether there was one.
    pub fn forget(&mut self, key: u64) -> bool {
        self.recorded.remove(&key).is_some()
    }

    /// The recording under `key`, when it is still valid for `graph` over `memory`.
    fn recorded_for(
        &self,
        key: Option<u64>,
        graph: &Graph,
        memory: &TensorMemory<'_>,
    ) -> Option<&Recorded> {
        let recorded = self.recorded.get(&key?)?;
        let valid = recorded.nodes == graph.nodes.len()
            && recorded.uniform_generation == self.uniform_generation
            && recorded.workspace_generation == self.workspace.generation()
            && recorded.memory == memory.memory_key();
        valid.then_some(recorded)
    }

    /// Encodes `dispatches` into one compute pass (with the pass timer's writes).
    fn encode(&self, dispatches: &[Dispatch]) -> wgpu::CommandBuffer {
        encode(&self.ctx, self.timer.as_ref(), dispatches)
    }

    /// Submits a recording kept by [`Executor::run_cached`] again.
    fn resubmit(
        &mut self,
        key: u64,
        wait: bool,
    ) -> Result<(RunReport, wgpu::SubmissionIndex), ExecError> {
        let started = Instant::now();
        let device = self.ctx.device.clone();
        let owner = self.uniform_owner;
        let Some(recorded) = self.recorded.get_mut(&key) else {
            return Err(ExecError::Device(DeviceError::Internal {
                message: "no recording under this key".into(),
            }));
        };
        let uniform = self.uniform.as_ref();
        let (ctx, timer) = (&self.ctx, self.timer.as_ref());
        let (done, device_error) = scoped_keep(&device, 0, || {
            // The parameters are the recording's own: rewritten only when another
            // run's took the buffer since.
            if let (Some(uniform), false) = (uniform, recorded.uniform.is_empty()) {
                if owner != Some(key) {
                    ctx.queue.write_buffer(uniform, 0, &recorded.uniform);
                }
            }
            let commands = recorded
                .ahead
                .take()
                .unwrap_or_else(|| encode(ctx, timer, &recorded.dispatches));
            let encode_time = started.elapsed();
            let submitted = Instant::now();
            let index = ctx.queue.submit([commands]);
            let submit_time = submitted.elapsed();
            // The next run's pass, recorded while the device runs this one.
            let ahead_started = Instant::now();
            recorded.ahead = Some(encode(ctx, timer, &recorded.dispatches));
            let encode_ahead_time = ahead_started.elapsed();
            let poll = wait.then(|| device.poll(wgpu::PollType::wait_indefinitely()));
            let times = [
                encode_time,
                submit_time,
                encode_ahead_time,
                submitted.elapsed(),
            ];
            (index, poll, times)
        });
        self.uniform_owner = Some(key);
        let (index, poll, [encode_time, submit_time, encode_ahead_time, wait_time]) = done;
        if let Some(error) = device_error {
            // A pass recorded while the device failed is not kept.
            if let Some(recorded) = self.recorded.get_mut(&key) {
                recorded.ahead = None;
            }
            return Err(ExecError::Device(error));
        }
        let Some(recorded) = self.recorded.get(&key) else {
            return Err(ExecError::Device(DeviceError::Internal {
                message: "no recording under this key".into(),
            }));
        };
        if let Some(poll) = poll {
            poll.map_err(|e| DeviceError::Poll {
                message: e.to_string(),
            })?;
        }
        let gpu_time = match &self.timer {
            Some(t) if wait => Some(t.read(&self.ctx)?),
            _ => None,
        };
        let report = RunReport {
            dispatches: recorded.dispatches.len() - recorded.staging_copies,
            inplace_dispatches: recorded.inplace_dispatches,
            staging_copies: recorded.staging_copies,
            workspace_bytes: self.workspace.bytes(),
            encode_time,
            wait_time,
            submit_time,
            encode_ahead_time,
            gpu_time,
            tune_time: Duration::ZERO,
            bind_groups_created: 0,
            bind_groups_reused: 0,
            pipelines: self.registry.with(|r| r.pipelines_built()),
        };
        Ok((report, index))
    }

    /// Like [`Executor::run`] but returns as soon as the pass is submitted, with the
    /// submission's index: the caller waits for it (e.g. `device.poll` with
    /// `PollType::Wait`) before reading results or reusing the memory. The report's
    /// `wait_time` covers only the submit and its `gpu_time` is `None`.
    ///
    /// # Errors
    /// As [`Executor::run`], except that nothing is waited for.
    pub fn submit(
        &mut self,
        graph: &Graph,
        memory: &TensorMemory<'_>,
    ) -> Result<(RunReport, wgpu::SubmissionIndex), ExecError> {
        self.record_and_submit(graph, memory, false, None)
    }

    /// Every node's dispatches, copies first, in execution order; on the first
    /// failure, those recorded before it and the failure.
    fn record_all(
        &mut self,
        prepared: &[NodeDispatches<'_>],
        staging_copies: usize,
        uniform: &wgpu::Buffer,
    ) -> (Vec<Dispatch>, Option<ExecError>) {
        let mut dispatches = Vec::with_capacity(prepared.len() + staging_copies);
        for p in prepared {
            for d in p.copies.iter().chain(std::iter::once(&p.node)) {
                match self.record(d, uniform) {
                    Ok(dispatch) => dispatches.push(dispatch),
                    Err(e) => return (dispatches, Some(e)),
                }
            }
        }
        (dispatches, None)
    }

    /// Records and submits the graph (or resubmits the recording under `key`); waits
    /// for the device when `wait`.
    fn record_and_submit(
        &mut self,
        graph: &Graph,
        memory: &TensorMemory<'_>,
        wait: bool,
        key: Option<u64>,
    ) -> Result<(RunReport, wgpu::SubmissionIndex), ExecError> {
        if let Some(key) = key {
            if self.recorded_for(Some(key), graph, memory).is_some() {
                return self.resubmit(key, wait);
            }
        }
        let started = Instant::now();
        let tuned_before = tune::time_spent(&self.ctx);
        let mut packer = UniformPacker::new(self.ctx.limits.min_uniform_buffer_offset_alignment)?;
        let prepared = (0..graph.nodes.len())
            .map(|step| self.prepare(graph, memory, step, &mut packer))
            .collect::<Result<Vec<_>, _>>()?;
        let tune_time = tune::time_spent(&self.ctx).saturating_sub(tuned_before);
        // The tuning time is reported on its own, not as encoding.
        let started = started.checked_add(tune_time).unwrap_or(started);
        let inplace_dispatches = prepared.iter().filter(|p| p.inplace).count();
        let staging_copies = prepared.iter().map(|p| p.copies.len()).sum();
        let workspace_need = prepared.iter().map(|p| p.workspace).max().unwrap_or(0);
        let (created_before, reused_before) = self.bind_groups.counts();
        let device = self.ctx.device.clone();
        // Everything wgpu does for the run happens inside the device's error scopes; a
        // failure while recording takes precedence over what wgpu reported.
        let (recorded, device_error) = scoped_keep(&device, 0, || {
            let uniform_size = (packer.bytes().len() as u64).max(PARAMS_SIZE);
            let uniform = self.uniform_of_size(uniform_size);
            if !packer.bytes().is_empty() {
                self.ctx.queue.write_buffer(&uniform, 0, packer.bytes());
            }
            self.workspace
                .ensure(&device, workspace_need, self.ctx.limits.max_buffer_size);
            self.bind_groups.bind_to(
                &memory.memory_key(),
                self.uniform_generation,
                self.workspace.generation(),
            );
            let (dispatches, failure) = self.record_all(&prepared, staging_copies, &uniform);
            let commands = self.encode(&dispatches);
            let encode_time = started.elapsed();
            let submitted = Instant::now();
            let index = failure.is_none().then(|| self.ctx.queue.submit([commands]));
            let submit_time = submitted.elapsed();
            // A keyed run's next pass, recorded while the device runs this one.
            let ahead_started = Instant::now();
            let ahead = (key.is_some() && failure.is_none()).then(|| self.encode(&dispatches));
            let encode_ahead_time = ahead_started.elapsed();
            let poll = wait.then(|| device.poll(wgpu::PollType::wait_indefinitely()));
            let wait_time = submitted.elapsed();
            let times = [encode_time, submit_time, encode_ahead_time, wait_time];
            (failure, index, poll, times, dispatches, ahead)
        });
        let (failure, index, poll, times, dispatches, ahead) = recorded;
        let [encode_time, submit_time, encode_ahead_time, wait_time] = times;
        self.uniform_owner = key;
        if let Some(e) = failure {
            return Err(e);
        }
        if let Some(error) = device_error {
            return Err(ExecError::Device(error));
        }
        if let Some(key) = key {
            self.recorded.insert(
                key,
                Recorded {
                    memory: memory.memory_key(),
                    uniform_generation: self.uniform_generation,
                    workspace_generation: self.workspace.generation(),
                    nodes: graph.nodes.len(),
                    uniform: packer.bytes().to_vec(),
                    dispatches,
                    inplace_dispatches,
                    staging_copies,
                    ahead,
                },
            );
        }
        if let Some(poll) = poll {
            poll.map_err(|e| DeviceError::Poll {
                message: e.to_string(),
            })?;
        }
        let index = index.ok_or_else(|| DeviceError::Internal {
            message: "the pass was not submitted".into(),
        })?;
        let gpu_time = match &self.timer {
            Some(t) if wait => Some(t.read(&self.ctx)?),
            _ => None,
        };
        let (created, reused) = self.bind_groups.counts();
        let report = RunReport {
            dispatches: prepared.len(),
            inplace_dispatches,
            staging_copies,
            workspace_bytes: self.workspace.bytes(),
            encode_time,
            wait_time,
            submit_time,
            encode_ahead_time,
            gpu_time,
            tune_time,
            bind_groups_created: created - created_before,
            bind_groups_reused: reused - reused_before,
            pipelines: self.registry.with(|r| r.pipelines_built()),
        };
        Ok((report, index))
    }
}

/// Encodes `dispatches` into one compute pass on `ctx`'s device (with `timer`'s writes).
fn encode(
    ctx: &GpuContext,
    timer: Option<&PassTimer>,
    dispatches: &[Dispatch],
) -> wgpu::CommandBuffer {
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("wgalloc graph"),
        });
    {
        let timestamp_writes = timer.map(PassTimer::writes);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgalloc graph"),
            timestamp_writes,
        });
        for d in dispatches {
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, &d.group, d.offset.as_slice());
            pass.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
        }
    }
    if let Some(t) = timer {
        t.resolve(&mut encoder);
    }
    encoder.finish()
}
