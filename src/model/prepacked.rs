//! The built-in transformer run with its matmul weights from a shared
//! [`PrepackedWeightCache`]: the opt-in way to run [`crate::model`]'s decoder with
//! pre-packed weights (the plain [`crate::model::ModelSession`] is left unchanged).

use super::session::LogitsCheck;
use super::{build_gpt, GptModel, ModelConfig};
use crate::device::{allocate_plan, GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE};
use crate::exec::checksum::prove;
use crate::exec::{Executor, RunReport, TensorMemory};
use crate::graph::TensorId;
use crate::plan::{alloc_ctx_tensors, plan_graph, Plan};
use crate::prepack::{
    bind_packed_weights, pack_matmul_weights, PackedGraph, PackedLayer, PrepackReport,
    PrepackedWeightCache,
};

/// What one run of [`PrepackedModel`] did and found.
#[derive(Debug, Clone)]
pub struct PrepackedModelRun {
    /// Matmul nodes rewritten to read a packed weight.
    pub packed_matmuls: usize,
    /// The cache lookups made when the model was built (hits and packs).
    pub prepack: PrepackReport,
    /// The executor's report.
    pub exec: RunReport,
    /// Bytes of unpacked weights still uploaded (weights some node reads as they are).
    pub unpacked_weight_bytes: u64,
    /// Largest absolute difference between GPU logits and the CPU reference of the
    /// original (unpacked) graph.
    pub max_abs_error: f32,
    /// Largest absolute CPU logit.
    pub max_abs_logit: f32,
    /// Whether the logits are within the tolerance of the model's storage type
    /// ([`super::logits_tolerance`]).
    pub logits_match: bool,
    /// Whether the checksum proof of the activation plan found no clobbered tensor.
    pub proof_verified: bool,
}

/// The built-in decoder on the device with its weight matmuls rewritten to
/// `matmul_packed` and their packed B operands taken from (or packed into) a shared
/// cache. Two of these sharing one cache pack each weight once.
pub struct PrepackedModel {
    ctx: GpuContext,
    model: GptModel,
    packed: PackedGraph,
    weight_plan: Plan,
    weight_memory: PlannedMemory,
    layer: PackedLayer,
    report: PrepackReport,
    executor: Executor,
}

impl std::fmt::Debug for PrepackedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrepackedModel")
            .field("config", &self.model.config)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl PrepackedModel {
    /// Builds the model for `config`, rewrites its weight matmuls, gets their packed
    /// weights from `cache` (packing what it lacks) and uploads the weights still read
    /// unpacked (embeddings, norms). A config of f16 storage (`config.dtype`) packs and
    /// stores the weights as f16 (half the packed bytes; its own cache entries).
    ///
    /// # Errors
    /// Configuration, rewrite, packing, planning, allocation and upload errors;
    /// [`crate::exec::ExecError::ShaderF16Missing`] for f16 on an adapter without
    /// `shader-f16`, before anything is packed or uploaded.
    pub fn new(
        ctx: &GpuContext,
        config: &ModelConfig,
        cache: &PrepackedWeightCache,
    ) -> crate::Result<PrepackedModel> {
        config.check_against(ctx.limits.max_storage_buffer_binding_size)?;
        if config.dtype == crate::exec::StorageType::F16 && !ctx.has_f16() {
            return Err(crate::exec::ExecError::ShaderF16Missing.into());
        }
        let model = build_gpt(config)?;
        let packed = pack_matmul_weights(&model.graph)?;
        let values = |id: TensorId| Some(model.weight_values(id)).filter(|v| !v.is_empty());
        let (layer, report) = bind_packed_weights(ctx, cache, &packed, &values)?;
        let storage = ctx.buffer_types()?.storage.desc;
        let still_read = packed.weights_still_read();
        let weight_plan = alloc_ctx_tensors(&packed.graph, &still_read, &storage)?;
        let weight_memory =
            allocate_plan(ctx, &weight_plan, STORAGE_USAGE, &WgpuStorage::shared(ctx))?;
        {
            let memory = TensorMemory::single(&weight_plan, &weight_memory);
            for &id in &still_read {
                memory.write_f32(ctx, &packed.graph, id, &model.weight_values(id))?;
            }
        }
        Ok(PrepackedModel {
            ctx: ctx.clone(),
            model,
            packed,
            weight_plan,
            weight_memory,
            layer,
            report,
            executor: Executor::new(ctx),
        })
    }

    /// The cache lookups made when the model was built.
    pub fn prepack_report(&self) -> PrepackReport {
        self.report
    }

    /// The rewritten graph and its packed tensors.
    pub fn packed_graph(&self) -> &PackedGraph {
        &self.packed
    }

    /// Runs the forward pass: plans the activations (planned and allocated afresh on
    /// each run; this runner does not keep a reservation like
    /// [`crate::model::ModelSession`]), runs on the GPU, compares the
    /// logits with the CPU reference of the original graph and proves the activation
    /// plan with the checksum run.
    ///
    /// # Errors
    /// Planning, allocation and execution errors (a mismatch is not an error).
    pub fn run(&mut self) -> crate::Result<PrepackedModelRun> {
        let ctx = &self.ctx;
        let graph = &self.packed.graph;
        let storage = ctx.buffer_types()?.storage.desc;
        let plan = plan_graph(graph, &storage)?;
        let activations = allocate_plan(ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(ctx))?;
        let memory = TensorMemory::single(&plan, &activations)
            .with_layer(&self.weight_plan, &self.weight_memory)
            .with_layer(self.layer.plan(), self.layer.memory());
        let tokens = self.model.token_ids();
        memory.write_u32(ctx, graph, self.model.tokens, &tokens)?;
        let exec = self.executor.run(graph, &memory)?;
        let logits = memory.read_f32(ctx, graph, self.model.logits)?;
        let reference = self.model.reference_logits(tokens)?;
        let tolerance = super::logits_tolerance(self.model.config.dtype);
        let check = LogitsCheck::of(&logits, &reference, tolerance);
        let proof = prove(ctx, graph, &plan, &activations)?;
        Ok(PrepackedModelRun {
            packed_matmuls: self.packed.packed.iter().map(|p| p.nodes.len()).sum(),
            prepack: self.report,
            exec,
            unpacked_weight_bytes: self.weight_plan.total_size(),
            max_abs_error: check.max_abs_error,
            max_abs_logit: check.max_abs_logit,
            logits_match: check.matches,
            proof_verified: proof.verified(),
        })
    }
}
