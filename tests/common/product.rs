//! A `y = x · W` graph and its run on planned memory, with the weight read as it is or
//! pre-packed into a shared cache: used by `tests/gpu_prepack.rs` and by
//! `examples/prepack_speed.rs` (through `#[path]`), so both measure the same thing.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wgalloc::device::{allocate_plan, GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE};
use wgalloc::exec::TensorMemory;
use wgalloc::graph::{DType, Graph, GraphBuilder, GraphError, TensorId};
use wgalloc::plan::{alloc_ctx_tensors, plan_graph, Plan};
use wgalloc::prepack::{
    bind_packed_weights, pack_matmul_weights, PackedLayer, PrepackedWeightCache,
};

/// The product graph and its tensors.
pub struct Product {
    /// `x [m, k]` (input) times `w` (weight, `[k, n]`, or `[n, k]` when transposed).
    pub graph: Graph,
    /// The input.
    pub x: TensorId,
    /// The weight.
    pub w: TensorId,
    /// The output `[m, n]`.
    pub y: TensorId,
}

/// `y = x · W` (`matmul`), or `y = x · Wᵀ` (`matmul_bt`) when `transposed`.
///
/// # Errors
/// When the graph does not build (a zero dimension).
pub fn product(m: u64, k: u64, n: u64, transposed: bool) -> Result<Product, GraphError> {
    let mut b = GraphBuilder::new("product");
    let x = b.input("x", DType::F32, &[m, k]);
    let (op, shape) = if transposed {
        ("matmul_bt", [n, k])
    } else {
        ("matmul", [k, n])
    };
    let w = b.weight("w", DType::F32, &shape);
    let y = b.node(op, &[x, w], &[m, n], false);
    b.mark_output(y);
    Ok(Product {
        graph: b.build()?,
        x,
        w,
        y,
    })
}

/// A graph on planned memory with its inputs and weights uploaded: activations in a
/// plan of their own, the weights its nodes read in another, and (when packed) the
/// cache's packed weights as a third layer.
pub struct PreparedProduct {
    graph: Graph,
    plan: Plan,
    activations: PlannedMemory,
    weight_plan: Plan,
    weights: PlannedMemory,
    layer: Option<PackedLayer>,
    /// The time spent packing and uploading into the cache (zero when unpacked).
    pub prepare: Duration,
}

impl PreparedProduct {
    /// Plans and allocates `graph` (rewritten to packed weights from `cache` when
    /// given) and writes every value in `values` that the graph reads.
    ///
    /// # Errors
    /// Any failure to pack, plan, allocate or upload.
    pub fn new(
        ctx: &GpuContext,
        graph: &Graph,
        values: &HashMap<TensorId, Vec<f32>>,
        cache: Option<&PrepackedWeightCache>,
    ) -> Result<PreparedProduct, wgalloc::Error> {
        let storage = ctx.buffer_types()?.storage.desc;
        let started = Instant::now();
        let (graph, layer) = match cache {
            Some(cache) => {
                let packed = pack_matmul_weights(graph)?;
                let get = |id: TensorId| values.get(&id).cloned();
                let (layer, _) = bind_packed_weights(ctx, cache, &packed, &get)?;
                (packed.graph, Some(layer))
            }
            None => (graph.clone(), None),
        };
        let prepare = started.elapsed();
        let plan = plan_graph(&graph, &storage)?;
        let activations = allocate_plan(ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(ctx))?;
        let read: Vec<TensorId> = values
            .keys()
            .copied()
            .filter(|&id| {
                graph.nodes.iter().any(|n| n.inputs.contains(&id)) && !graph.is_planned(id)
            })
            .collect();
        let weight_plan = alloc_ctx_tensors(&graph, &read, &storage)?;
        let weights = allocate_plan(ctx, &weight_plan, STORAGE_USAGE, &WgpuStorage::shared(ctx))?;
        let prepared = PreparedProduct {
            graph,
            plan,
            activations,
            weight_plan,
            weights,
            layer,
            prepare,
        };
        let memory = prepared.memory();
        for (&id, v) in values {
            if prepared.graph.is_planned(id) || read.contains(&id) {
                memory.write_f32(ctx, &prepared.graph, id, v)?;
            }
        }
        Ok(prepared)
    }

    /// The graph that runs (the packed rewrite when a cache was given).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every layer of memory the graph's tensors live in.
    pub fn memory(&self) -> TensorMemory<'_> {
        let memory = TensorMemory::single(&self.plan, &self.activations)
            .with_layer(&self.weight_plan, &self.weights);
        match &self.layer {
            Some(layer) => memory.with_layer(layer.plan(), layer.memory()),
            None => memory,
        }
    }
}
