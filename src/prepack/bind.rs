//! Getting the packed weights of a rewritten graph from the cache (packing and storing
//! the ones it lacks) and presenting them to the executor as one more memory layer.

use std::sync::Arc;

use super::graph::{PackedGraph, PackedTensor};
use super::{PackFormat, PackedWeight, PrepackError, PrepackKey, PrepackedWeightCache};
use crate::device::{GpuContext, PlannedMemory};
use crate::exec::packed::pack_b;
use crate::exec::StorageType;
use crate::graph::TensorId;
use crate::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan};

/// What binding one graph's packed weights did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrepackReport {
    /// Matmul nodes that read a packed weight (one cache lookup each).
    pub node_lookups: usize,
    /// Lookups that missed, so the weight was packed and stored.
    pub packed: usize,
    /// Lookups served from the cache without packing.
    pub hits: usize,
    /// Bytes packed and stored by this call.
    pub packed_bytes: u64,
    /// Bytes of the cached packed weights this graph reads.
    pub bytes_in_use: u64,
}

/// The packed weights of one graph as a layer of [`crate::exec::TensorMemory`]: a plan
/// placing each packed tensor at offset 0 of its own buffer, and memory over the
/// cache's buffers that does not own them (the cache stays the owner; the handles
/// held here keep them valid while the layer lives).
#[derive(Debug)]
pub struct PackedLayer {
    plan: Plan,
    memory: PlannedMemory,
    weights: Vec<Arc<PackedWeight>>,
}

impl PackedLayer {
    /// The plan of the layer.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The memory of the layer (the cache's buffers, not owned).
    pub fn memory(&self) -> &PlannedMemory {
        &self.memory
    }

    /// The cached weights the layer reads, one per packed tensor.
    pub fn weights(&self) -> &[Arc<PackedWeight>] {
        &self.weights
    }
}

/// The cache key of one packed tensor, from its source weight's values.
///
/// # Errors
/// [`PrepackError::MissingWeight`] when `values` has none for the weight.
pub fn key_of(
    packed: &PackedGraph,
    p: &PackedTensor,
    values: &dyn Fn(TensorId) -> Option<Vec<f32>>,
) -> Result<(PrepackKey, Vec<f32>), PrepackError> {
    let t = packed.graph.tensor(p.weight);
    let missing = || PrepackError::MissingWeight {
        tensor: p.weight,
        name: t.map_or_else(String::new, |t| t.name.clone()),
    };
    let t = t.ok_or_else(missing)?;
    let v = values(p.weight).ok_or_else(missing)?;
    Ok((PrepackKey::for_f32(&t.name, &t.shape, &v, p.format), v))
}

/// For every packed tensor of `packed`, looks its weight up in `cache` once per node
/// that reads it; the first lookup of a weight the cache lacks packs it on the CPU
/// ([`pack_b`]), uploads it with the cache's allocator and stores it; later lookups
/// (other nodes, other graphs, other sessions sharing the cache) are hits. `values`
/// gives the f32 values of a source weight; an f16 weight's packed data is uploaded
/// as f16 (rounded, as the weight itself would be).
///
/// # Errors
/// [`PrepackError::MissingWeight`]; packing, allocation and upload errors (nothing is
/// stored and nothing leaks); [`PrepackError::NotPacked`] when a cached entry does not
/// fit its packed tensor (stored under the same key by someone else with other data).
pub fn bind_packed_weights(
    ctx: &GpuContext,
    cache: &PrepackedWeightCache,
    packed: &PackedGraph,
    values: &dyn Fn(TensorId) -> Option<Vec<f32>>,
) -> Result<(PackedLayer, PrepackReport), PrepackError> {
    let mut report = PrepackReport::default();
    let mut weights = Vec::with_capacity(packed.packed.len());
    let mut placements = vec![None; packed.graph.tensors.len()];
    let mut buffers = Vec::with_capacity(packed.packed.len());
    let mut chunks = Vec::with_capacity(packed.packed.len());
    let buffer_type = BufferTypeDesc::new("prepacked", 4, ctx.limits.max_buffer_size.max(1))
        .map_err(|e| PrepackError::Graph {
            message: e.to_string(),
        })?;
    for p in &packed.packed {
        let (key, source) = key_of(packed, p, values)?;
        let mut weight = None;
        for _ in &p.nodes {
            let lookup = cache.get_or_pack(&key, |allocator| {
                let PackFormat::MatmulB {
                    source: layout,
                    storage,
                } = p.format;
                let data = pack_b(p.k, p.n, layout, &source)?;
                Ok(vec![match storage {
                    StorageType::F32 => allocator.upload_f32(ctx, &data)?,
                    StorageType::F16 => allocator.upload_f16(ctx, &data)?,
                }])
            })?;
            report.node_lookups += 1;
            if lookup.packed {
                report.packed += 1;
                report.packed_bytes = report.packed_bytes.saturating_add(lookup.weight.bytes());
            } else {
                report.hits += 1;
            }
            weight = Some(lookup.weight);
        }
        let Some(weight) = weight else { continue };
        let tensor = packed.graph.tensor(p.packed);
        let not_packed = || PrepackError::NotPacked {
            tensor: p.packed,
            name: tensor.map_or_else(String::new, |t| t.name.clone()),
        };
        let size = packed
            .graph
            .reserved_size(p.packed)
            .ok_or_else(not_packed)?;
        let [only] = weight.buffers() else {
            return Err(not_packed());
        };
        if only.size() < size || only.region().size < size {
            return Err(not_packed());
        }
        let slot = placements
            .get_mut(p.packed.index())
            .ok_or_else(not_packed)?;
        *slot = Some(Placement {
            buffer: BufferId(buffers.len()),
            chunk: 0,
            offset: 0,
            size,
        });
        buffers.push(BufferPlan {
            buffer_type: buffer_type.clone(),
            chunks: vec![ChunkPlan {
                size: only.region().size,
                oversized: false,
            }],
            same_as: None,
        });
        chunks.push(vec![only.region().clone()]);
        report.bytes_in_use = report.bytes_in_use.saturating_add(weight.bytes());
        weights.push(weight);
    }
    let layer = PackedLayer {
        plan: Plan {
            planner: "prepacked".into(),
            placements,
            buffers,
            inplace: Vec::new(),
        },
        memory: PlannedMemory::from_regions(chunks),
        weights,
    };
    Ok((layer, report))
}
