//! [`ModelSession`]: the built-in decoder run end to end on planned memory. Weights are
//! packed by the context-tensor allocator into their own buffer(s); activations are
//! planned by the graph allocator, which is reserved once and reused for shorter
//! sequences; every run is compared with the CPU reference and proven by the checksum
//! run.

use std::time::{Duration, Instant};

use super::{build_gpt, GptModel, ModelConfig};
use crate::device::{
    allocate_plan, measure_allocation, DeviceBytes, GpuContext, PlannedMemory, WgpuStorage,
    STORAGE_USAGE,
};
use crate::exec::checksum::{prove, ChecksumReport};
use crate::exec::{ExecError, Executor, RunReport, StorageType, TensorMemory};
use crate::plan::{
    inject_clobber, lower_bounds, naive_size,
    offline::{Budget, Strategy},
    plan_weights, BufferTypeDesc, Clobber, GraphAllocator, LowerBounds, Plan, PlanError, Planner,
    NO_CLOBBER_PAIR,
};

/// Logits pass when `max |gpu - cpu| <= LOGITS_TOLERANCE * max(1, max |cpu|)`.
pub const LOGITS_TOLERANCE: f32 = 1e-3;

/// [`LOGITS_TOLERANCE`] for a model stored as f16 ([`StorageType::F16`]). The CPU
/// reference rounds every f16 tensor as the GPU stores it, so the two differ only
/// where their f32 sums (summed in another order) round to neighbouring f16 values:
/// one f16 step is 2^-10 (about 1e-3) of a value, and such steps add up over the
/// layers and the norms' rescaling. 1e-2 allows about ten steps of the largest logit;
/// a wrong kernel or a clobbered tensor is off by far more.
pub const LOGITS_TOLERANCE_F16: f32 = 1e-2;

/// The logits tolerance of a model stored as `dtype`: [`LOGITS_TOLERANCE`] or
/// [`LOGITS_TOLERANCE_F16`].
pub fn logits_tolerance(dtype: StorageType) -> f32 {
    match dtype {
        StorageType::F32 => LOGITS_TOLERANCE,
        StorageType::F16 => LOGITS_TOLERANCE_F16,
    }
}

/// The GPU's logits against the CPU reference's.
pub(crate) struct LogitsCheck {
    /// `max |gpu - cpu|` (infinite when the lengths differ).
    pub(crate) max_abs_error: f32,
    /// `max |cpu|`.
    pub(crate) max_abs_logit: f32,
    /// Whether `max_abs_error <= tolerance * max(1, max_abs_logit)`.
    pub(crate) matches: bool,
}

impl LogitsCheck {
    /// Compares `gpu` with `cpu` within `tolerance` ([`logits_tolerance`]).
    pub(crate) fn of(gpu: &[f32], cpu: &[f32], tolerance: f32) -> LogitsCheck {
        let max_abs_logit = cpu.iter().fold(0f32, |m, v| m.max(v.abs()));
        let max_abs_error = if gpu.len() == cpu.len() {
            gpu.iter()
                .zip(cpu)
                .fold(0f32, |m, (g, c)| m.max((g - c).abs()))
        } else {
            f32::INFINITY
        };
        LogitsCheck {
            max_abs_error,
            max_abs_logit,
            matches: max_abs_error <= tolerance * max_abs_logit.max(1.0),
        }
    }
}

/// Options of one [`ModelSession::run`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Corrupt the activation plan before running (moves a live tensor over another,
    /// see [`inject_clobber`]), to show that the proof catches it. A plan with no pair
    /// to move (the fused layers have none) makes the run fail with
    /// [`PlanError::NoClobberPair`] rather than run an honest plan.
    pub inject_clobber: bool,
}

/// What one run of the model did and found.
#[derive(Debug, Clone)]
pub struct ModelRun {
    /// The configuration run (its `seq` is this run's sequence length).
    pub config: ModelConfig,
    /// Nodes of the forward pass.
    pub nodes: usize,
    /// Tensors of the forward pass.
    pub tensors: usize,
    /// The activation plan used.
    pub plan: Plan,
    /// Bytes of activation memory allocated (the reservation's buffers).
    pub activation_bytes: u64,
    /// Bytes this graph alone needs (planned on its own, without the reservation).
    pub graph_bytes: u64,
    /// Bytes the activations would take with no reuse.
    pub naive_bytes: u64,
    /// Lower bounds of this graph's activation memory.
    pub lower_bounds: LowerBounds,
    /// Time spent planning (reserve and/or alloc_graph).
    pub plan_time: Duration,
    /// Whether the reservation of an earlier run was reused as it was
    /// (`needs_realloc` was false, no buffer was reallocated).
    pub reused_reservation: bool,
    /// Whether the weights had to be rebuilt (a sequence longer than any before).
    pub weights_rebuilt: bool,
    /// The executor's report (encode time, GPU time, dispatches).
    pub exec: RunReport,
    /// Largest absolute difference between GPU and CPU logits.
    pub max_abs_error: f32,
    /// Largest absolute CPU logit.
    pub max_abs_logit: f32,
    /// The relative tolerance the logits were checked with ([`logits_tolerance`] of
    /// the model's storage type).
    pub tolerance: f32,
    /// Whether the logits are within `tolerance`.
    pub logits_match: bool,
    /// Time the CPU reference took.
    pub reference_time: Duration,
    /// The checksum proof over the activation plan.
    pub proof: ChecksumReport,
    /// The corruption injected, if [`RunOptions::inject_clobber`] asked for one.
    pub clobber: Option<Clobber>,
    /// Whether [`Plan::verify`] accepted the plan that ran.
    pub plan_verified: bool,
    /// What the driver allocated and reserved for the activation buffers, measured
    /// when they were created (a reused reservation keeps its figures); `None` where
    /// the backend has no allocator report (Metal, GL).
    pub device_bytes: Option<DeviceBytes>,
}

impl ModelRun {
    /// Logits matched and the proof found no clobbered tensor.
    pub fn passed(&self) -> bool {
        self.logits_match && self.proof.verified()
    }
}

/// The model's weights on the device.
struct Weights {
    /// The model they were made for (the longest sequence so far).
    model: GptModel,
    plan: Plan,
    memory: PlannedMemory,
}

/// The built-in model on a device: weights uploaded once, an activation allocator
/// reserved for the longest sequence run so far, and an executor whose pipelines and
/// bind groups persist between runs.
pub struct ModelSession {
    ctx: GpuContext,
    config: ModelConfig,
    storage: BufferTypeDesc,
    weights: Weights,
    allocator: GraphAllocator,
    activations: Option<PlannedMemory>,
    activation_device_bytes: Option<DeviceBytes>,
    executor: Executor,
    pipeline_time: Duration,
}

impl std::fmt::Debug for ModelSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSession")
            .field("adapter", &self.ctx.info.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ModelSession {
    /// Builds the model for `config` and packs and uploads its weights. The first
    /// [`ModelSession::run`] reserves the activation memory; run the longest sequence
    /// first so that shorter ones reuse it.
    ///
    /// # Errors
    /// [`crate::model::ModelError`] for a bad configuration or one whose tensors exceed
    /// the device's storage binding; [`ExecError::ShaderF16Missing`] for an f16
    /// configuration on a device without `shader-f16`; planning, allocation and upload
    /// errors.
    pub fn new(ctx: &GpuContext, config: &ModelConfig) -> crate::Result<ModelSession> {
        config.check_against(ctx.limits.max_storage_buffer_binding_size)?;
        let storage = ctx.buffer_types()?.storage.desc;
        // Every pipeline up front, so that the forward pass's times do not include
        // compiling them (a one-time cost, reported apart); f16 on a device without
        // shader-f16 is refused here, before any upload.
        let mut executor = Executor::new(ctx);
        let pipelines_started = Instant::now();
        executor.build_all_pipelines_for(config.dtype)?;
        let pipeline_time = pipelines_started.elapsed();
        let weights = upload_weights(ctx, config, &storage)?;
        // ggml's reserve / needs_realloc / alloc_graph, with every reservation planned by
        // the offline `best` planner: activations at the in-place lower bound.
        let allocator =
            GraphAllocator::with_strategy(vec![storage.clone()], Strategy::Best, Budget::default());
        Ok(ModelSession {
            ctx: ctx.clone(),
            config: *config,
            storage,
            weights,
            allocator,
            activations: None,
            activation_device_bytes: None,
            executor,
            pipeline_time,
        })
    }

    /// The configuration the session was created with.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The weights' plan (the context allocator's packing).
    pub fn weight_plan(&self) -> &Plan {
        &self.weights.plan
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> u64 {
        self.weights.plan.total_size()
    }

    /// Time [`ModelSession::new`] took to build every compute pipeline: a one-time
    /// cost, apart from the forward passes' times.
    pub fn pipeline_time(&self) -> Duration {
        self.pipeline_time
    }

    /// Bytes the activation allocator has reserved.
    pub fn reserved_activation_bytes(&self) -> u64 {
        self.allocator.buffer_size(0).unwrap_or(0)
    }

    /// Runs the model on `seq` tokens: plans (reusing the reservation when
    /// `needs_realloc` says it can), runs on the GPU, compares the logits with the CPU
    /// reference and proves the activation plan with the checksum run.
    ///
    /// # Errors
    /// Configuration, planning, allocation and execution errors. A logits mismatch or a
    /// clobbered tensor is not an error: [`ModelRun::passed`] says so.
    pub fn run(&mut self, seq: u64, options: RunOptions) -> crate::Result<ModelRun> {
        let config = ModelConfig { seq, ..self.config };
        config.check_against(self.ctx.limits.max_storage_buffer_binding_size)?;
        let mut weights_rebuilt = false;
        if seq > self.weights.model.config.seq {
            // The position table grows with the sequence: pack and upload it again.
            self.weights = upload_weights(&self.ctx, &config, &self.storage)?;
            weights_rebuilt = true;
        }
        let model = build_gpt(&config)?;
        let graph = &model.graph;

        let started = Instant::now();
        let needs_realloc = self.allocator.needs_realloc(graph);
        let mut plan = self.allocator.alloc_graph(graph)?;
        let plan_time = started.elapsed();
        let reused_reservation = !needs_realloc && self.activations.is_some();
        if !reused_reservation {
            // A new reservation: release the old buffers before allocating the new ones.
            self.activations = None;
            let (memory, device_bytes) = measure_allocation(&self.ctx.device, || {
                allocate_plan(
                    &self.ctx,
                    &plan,
                    STORAGE_USAGE,
                    &WgpuStorage::shared(&self.ctx),
                )
            })?;
            self.activations = Some(memory);
            self.activation_device_bytes = device_bytes;
        }
        let clobber = if options.inject_clobber {
            Some(
                inject_clobber(&mut plan, graph).ok_or_else(|| PlanError::NoClobberPair {
                    graph: graph.name.clone(),
                    why: NO_CLOBBER_PAIR,
                })?,
            )
        } else {
            None
        };
        let plan_verified = plan.verify(graph).is_ok();
        let activations = self.activations.as_ref().ok_or(ExecError::NotPlaced {
            tensor: model.logits,
            name: "activations".into(),
        })?;

        let memory = TensorMemory::single(&plan, activations)
            .with_layer(&self.weights.plan, &self.weights.memory);
        let tokens = model.token_ids();
        memory.write_u32(&self.ctx, graph, model.tokens, &tokens)?;
        let exec = self.executor.run(graph, &memory)?;
        let logits = memory.read_f32(&self.ctx, graph, model.logits)?;

        let reference_started = Instant::now();
        let reference = model.reference_logits(tokens)?;
        let reference_time = reference_started.elapsed();
        let LogitsCheck {
            max_abs_error,
            max_abs_logit,
            matches: logits_match,
        } = LogitsCheck::of(&logits, &reference, logits_tolerance(config.dtype));

        let proof = prove(&self.ctx, graph, &plan, activations)?;
        let graph_bytes = Planner::Offline(Strategy::Best)
            .plan_graph(graph, &self.storage)?
            .total_size();
        Ok(ModelRun {
            config,
            nodes: graph.nodes.len(),
            tensors: graph.tensors.len(),
            activation_bytes: self.reserved_activation_bytes(),
            graph_bytes,
            naive_bytes: naive_size(graph),
            lower_bounds: lower_bounds(graph)?,
            plan,
            plan_time,
            reused_reservation,
            weights_rebuilt,
            exec,
            max_abs_error,
            max_abs_logit,
            tolerance: logits_tolerance(config.dtype),
            logits_match,
            reference_time,
            proof,
            clobber,
            plan_verified,
            device_bytes: self.activation_device_bytes,
        })
    }
}

/// Builds the model, packs its weights with the context allocator and uploads them.
fn upload_weights(
    ctx: &GpuContext,
    config: &ModelConfig,
    storage: &BufferTypeDesc,
) -> crate::Result<Weights> {
    let model = build_gpt(config)?;
    let plan = plan_weights(&model.graph, storage)?;
    let memory = allocate_plan(ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(ctx))?;
    {
        let layer = TensorMemory::single(&plan, &memory);
        for id in model.weights() {
            layer.write_f32(ctx, &model.graph, id, &model.weight_values(id))?;
        }
    }
    Ok(Weights {
        model,
        plan,
        memory,
    })
}
