//! [`Forward`]: the built-in decoder's forward pass alone, for benchmarks: weights
//! packed and uploaded once, activations planned by the default (offline `best`)
//! planner and allocated once, and then the token ids written and the executor's pass
//! per call (no CPU reference, no proof: that is [`super::ModelSession`]'s job). The
//! ids are written before every run: the plan reuses their bytes once the embedding
//! has read them, so a run leaves something else there.

use super::{build_gpt, GptModel, ModelConfig};

use crate::device::{allocate_plan, GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE};
use crate::exec::{Executor, RunReport, TensorMemory};
use crate::plan::{lower_bounds, plan, plan_weights, Plan, PlanOptions};

/// The decoder on the device, ready to run its forward pass again and again.
pub struct Forward {
    ctx: GpuContext,
    model: GptModel,
    plan: Plan,
    weight_plan: Plan,
    activations: PlannedMemory,
    weights: PlannedMemory,
    executor: Executor,
    lower_bound: u64,
    /// The token ids, written before each run.
    tokens: Vec<u32>,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("config", &self.model.config)
            .finish_non_exhaustive()
    }
}

impl Forward {
    /// Builds the model, plans and allocates its activations, packs and uploads its
    /// weights, and builds every pipeline.
    ///
    /// # Errors
    /// Configuration, planning, allocation, upload and pipeline errors.
    pub fn new(ctx: &GpuContext, config: &ModelConfig) -> crate::Result<Forward> {
        config.check_against(ctx.limits.max_storage_buffer_binding_size)?;
        let model = build_gpt(config)?;
        let storage = ctx.buffer_types()?.storage.desc;
        let plan = plan(
            &model.graph,
            std::slice::from_ref(&storage),
            &PlanOptions::default(),
        )?;
        let weight_plan = plan_weights(&model.graph, &storage)?;
        let storage = WgpuStorage::shared(ctx);
        let activations = allocate_plan(ctx, &plan, STORAGE_USAGE, &storage)?;
        let weights = allocate_plan(ctx, &weight_plan, STORAGE_USAGE, &storage)?;
        let lower_bound = lower_bounds(&model.graph)?.inplace_aware;
        let mut executor = Executor::new(ctx);
        executor.build_all_pipelines_for(config.dtype)?;
        let tokens = model.token_ids();
        let forward = Forward {
            ctx: ctx.clone(),
            tokens,
            model,
            plan,
            weight_plan,
            activations,
            weights,
            executor,
            lower_bound,
        };
        {
            let memory = forward.memory();
            let graph = &forward.model.graph;
            for id in forward.model.weights() {
                memory.write_f32(ctx, graph, id, &forward.model.weight_values(id))?;
            }
        }
        Ok(forward)
    }

    fn memory(&self) -> TensorMemory<'_> {
        TensorMemory::single(&self.plan, &self.activations)
            .with_layer(&self.weight_plan, &self.weights)
    }

    /// Runs the forward pass once: writes the token ids (a run reuses their bytes),
    /// then one encoder, one pass, one submit, waits.
    ///
    /// # Errors
    /// Upload and executor errors.
    pub fn run(&mut self) -> crate::Result<RunReport> {
        let memory = TensorMemory::single(&self.plan, &self.activations)
            .with_layer(&self.weight_plan, &self.weights);
        let graph = &self.model.graph;
        memory.write_u32(&self.ctx, graph, self.model.tokens, &self.tokens)?;
        Ok(self.executor.run(graph, &memory)?)
    }

    /// The logits of the last run, read back.
    ///
    /// # Errors
    /// Readback errors.
    pub fn logits(&self) -> crate::Result<Vec<f32>> {
        Ok(self
            .memory()
            .read_f32(&self.ctx, &self.model.graph, self.model.logits)?)
    }

    /// The model (graph, weights, tokens).
    pub fn model(&self) -> &GptModel {
        &self.model
    }

    /// The activation plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Bytes of the activation plan.
    pub fn activation_bytes(&self) -> u64 {
        self.plan.total_size()
    }

    /// The in-place-aware lower bound of the activation memory.
    pub fn lower_bound_bytes(&self) -> u64 {
        self.lower_bound
    }

    /// Bytes of the weight plan.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_plan.total_size()
    }
}
