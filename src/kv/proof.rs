//! [`KvProof`]: the checksum proof of a step's plan with the KV cache live for the
//! whole step.
//!
//! The proof graph is the step graph with the cache's tensors (table and pages)
//! turned from weights into inputs, and one `kv_hold` node per cache tensor after the
//! last node, each reading it into a 4-byte output: the proof fills the cache tensors
//! with its pattern before the first node and checks them at every read and once more
//! at the end, so an activation that a plan puts over the cache and a node writes is
//! named. The proof plan is the step's activation plan plus one buffer for the cache
//! tensors and the holds; the proof runs over the step's activation memory and a
//! shadow of the cache's regions (the cache itself is never overwritten).

use super::{KvError, KvTensors};
use crate::device::{GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE};
use crate::exec::checksum::{prove, ChecksumReport};
use crate::graph::{DType, Graph, Node, Role, Tensor, TensorId};
use crate::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan};
use crate::storage::Region;
use crate::storage::{RegionRequest, Storage};

/// The most bytes of a cache tensor the proof stands in for (a page may be as large as
/// a binding; the proof reads every word of its stand-in at every node that reads it).
pub const PROOF_TENSOR_BYTES: u64 = 64 * 1024;

/// Bytes between two hold outputs in their chunk (wgpu's largest storage offset
/// alignment, so any device binds them).
const HOLD_STRIDE: u64 = 256;

/// A step's proof with the cache live: the proof graph, the merged plan, and where the
/// cache's tensors sit in it.
#[derive(Debug, Clone)]
pub struct KvProof {
    graph: Graph,
    plan: Plan,
    cache_buffer: BufferId,
    cache_tensors: Vec<TensorId>,
}

/// A planted clobber: `intruder`, an activation, now placed over `victim`, a cache
/// tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePlant {
    /// The activation moved onto the cache.
    pub intruder: TensorId,
    /// The cache tensor it now overwrites.
    pub victim: TensorId,
}

impl KvProof {
    /// The proof of `graph` (a step graph with `kv`'s cache tensors) under
    /// `activations`, the step's activation plan.
    ///
    /// # Errors
    /// [`KvError::NotInGraph`] when a cache tensor is missing, not a weight, or placed
    /// by the activation plan; [`KvError::BadConfig`] when the activation plan is for
    /// another graph.
    pub fn new(graph: &Graph, kv: &KvTensors, activations: &Plan) -> Result<KvProof, KvError> {
        if activations.placements.len() != graph.tensors.len() {
            return Err(KvError::BadConfig {
                problem: format!(
                    "the activation plan places {} tensors, the graph has {}",
                    activations.placements.len(),
                    graph.tensors.len()
                ),
            });
        }
        let mut proof_graph = graph.clone();
        let cache_tensors: Vec<TensorId> = kv.tensors().collect();
        let cache_buffer = BufferId(activations.buffers.len());
        let mut plan = activations.clone();
        let mut chunks = Vec::with_capacity(cache_tensors.len() + 1);
        for (chunk, &id) in cache_tensors.iter().enumerate() {
            let not_in = |problem: &str| KvError::NotInGraph {
                tensor: id.0,
                problem: problem.to_string(),
            };
            let tensor = proof_graph
                .tensors
                .get_mut(id.index())
                .ok_or_else(|| not_in("missing"))?;
            if tensor.role != Role::Weight || tensor.view_of.is_some() {
                return Err(not_in("not a weight of the step graph"));
            }
            if activations.placement(id).is_some() {
                return Err(not_in("placed by the activation plan"));
            }
            tensor.role = Role::Input;
            // A stand-in no larger than PROOF_TENSOR_BYTES: the cache has a buffer of its
            // own in the proof plan, so its size changes nothing the proof can see, and
            // the proof hashes every word of it at every read.
            if tensor.size > PROOF_TENSOR_BYTES {
                tensor.size = PROOF_TENSOR_BYTES;
                tensor.shape = vec![PROOF_TENSOR_BYTES / tensor.dtype.size()];
            }
            let size = tensor.size.max(4).next_multiple_of(4);
            chunks.push(ChunkPlan {
                size,
                oversized: false,
            });
            plan.placements[id.index()] = Some(Placement {
                buffer: cache_buffer,
                chunk,
                offset: 0,
                size,
            });
        }
        let hold_chunk = cache_tensors.len();
        chunks.push(ChunkPlan {
            size: HOLD_STRIDE * cache_tensors.len() as u64,
            oversized: false,
        });
        for (i, &id) in cache_tensors.iter().enumerate() {
            let hold = TensorId(proof_graph.tensors.len() as u32);
            proof_graph.tensors.push(Tensor {
                id: hold,
                name: format!("kv.hold{i}"),
                dtype: DType::F32,
                shape: vec![1],
                size: 4,
                role: Role::Output,
                view_of: None,
                dynamic: None,
            });
            proof_graph.nodes.push(Node {
                op: "kv_hold".to_string(),
                inputs: vec![id],
                output: hold,
                inplace: false,
                params: Vec::new(),
            });
            plan.placements.push(Some(Placement {
                buffer: cache_buffer,
                chunk: hold_chunk,
                offset: HOLD_STRIDE * i as u64,
                size: 4,
            }));
        }
        let max = chunks.iter().map(|c| c.size).max().unwrap_or(4);
        let buffer_type =
            BufferTypeDesc::new("kv cache (proof)", 4, max).map_err(|e| KvError::BadConfig {
                problem: e.to_string(),
            })?;
        plan.buffers.push(BufferPlan {
            buffer_type,
            chunks,
            same_as: None,
        });
        Ok(KvProof {
            graph: proof_graph,
            plan,
            cache_buffer,
            cache_tensors,
        })
    }

    /// The proof graph (cache tensors as inputs, `kv_hold` nodes at the end).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The merged plan: the activation plan, plus buffer [`KvProof::cache_buffer`] for
    /// the cache tensors and the holds.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The merged plan, to corrupt on purpose (see [`KvProof::plant_over_cache`]).
    pub fn plan_mut(&mut self) -> &mut Plan {
        &mut self.plan
    }

    /// The plan buffer that holds the cache tensors.
    pub fn cache_buffer(&self) -> BufferId {
        self.cache_buffer
    }

    /// Plants a clobber: moves the last activation a node writes onto the first page
    /// of the cache, as a buggy plan or storage would (the page's chunk grows to hold
    /// it when it is larger). `None` when the graph writes no activation.
    pub fn plant_over_cache(&mut self) -> Option<CachePlant> {
        let victim = *self.cache_tensors.get(1)?;
        let victim_at = self.plan.placement(victim)?;
        let intruder = self
            .graph
            .nodes
            .iter()
            .rev()
            .filter(|n| n.op != "kv_hold")
            .map(|n| n.output)
            .find(|&t| {
                self.graph.is_planned(t)
                    && self
                        .plan
                        .placement(t)
                        .is_some_and(|p| p.buffer != self.cache_buffer)
            })?;
        let size = self.plan.placement(intruder)?.size;
        self.plan.placements[intruder.index()] = Some(Placement { size, ..victim_at });
        let buffer = self.plan.buffers.get_mut(self.cache_buffer.0)?;
        buffer.buffer_type.max_size = buffer.buffer_type.max_size.max(size);
        let chunk = buffer.chunks.get_mut(victim_at.chunk)?;
        chunk.size = chunk.size.max(size);
        Some(CachePlant { intruder, victim })
    }

    /// Runs the proof over `activations` (the step's activation memory, the plan's
    /// buffers in order) and a shadow of the cache taken from plain device buffers,
    /// given back before this returns.
    ///
    /// # Errors
    /// [`KvError::Exec`] when the run cannot be laid out or the device fails;
    /// [`KvError::Storage`] when a shadow buffer cannot be had.
    pub fn run(
        &self,
        ctx: &GpuContext,
        activations: &PlannedMemory,
    ) -> Result<ChecksumReport, KvError> {
        let storage = WgpuStorage::wgpu(ctx);
        let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
        let mut shadow: Vec<Region> = Vec::new();
        let chunks = self
            .plan
            .buffers
            .get(self.cache_buffer.0)
            .map(|b| b.chunks.clone())
            .unwrap_or_default();
        let mut refused = None;
        for chunk in &chunks {
            let request = RegionRequest::new(chunk.size)
                .alignment(align)
                .usage(STORAGE_USAGE)
                .label("wgalloc kv proof shadow");
            match storage.allocate(&request) {
                Ok(region) => shadow.push(region),
                Err(source) => {
                    refused = Some(KvError::Storage {
                        what: "proof shadow",
                        bytes: chunk.size,
                        pages: 0,
                        blocks: 0,
                        source,
                    });
                    break;
                }
            }
        }
        let result = match refused {
            Some(e) => Err(e),
            None => {
                let mut rows: Vec<Vec<Region>> = activations.regions().to_vec();
                rows.resize(self.cache_buffer.0, Vec::new());
                rows.push(shadow.clone());
                let memory = PlannedMemory::from_regions(rows);
                prove(ctx, &self.graph, &self.plan, &memory).map_err(KvError::from)
            }
        };
        for region in shadow {
            // Each region came from this storage once; a refusal would be its own bug.
            let _ = storage.free(region);
        }
        result
    }
}

/// Proves a step's plan with the cache live: [`KvProof::new`] then [`KvProof::run`].
///
/// # Errors
/// As [`KvProof::new`] and [`KvProof::run`].
pub fn prove_step(
    ctx: &GpuContext,
    graph: &Graph,
    kv: &KvTensors,
    activations: &Plan,
    memory: &PlannedMemory,
) -> Result<ChecksumReport, KvError> {
    KvProof::new(graph, kv, activations)?.run(ctx, memory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::kv::KvConfig;
    use crate::plan::{naive_plan, BufferTypeDesc};

    #[test]
    fn the_proof_graph_holds_every_cache_tensor_to_the_end() {
        // Pages of 128 KiB: the proof stands in for them with 64 KiB.
        let config = KvConfig::new(1, 2, 4, 4, 16)
            .and_then(|c| c.with_blocks_per_page(512))
            .expect("valid");
        let mut b = GraphBuilder::new("step");
        let qkv = b.input("qkv", DType::F32, &[2, 24]);
        let kv = KvTensors::add(&mut b, &config, 2);
        let out = kv.attention(&mut b, qkv, 0).expect("fits");
        b.mark_output(out);
        let graph = b.build().expect("valid");
        let storage = BufferTypeDesc::new("storage", 256, 1 << 20).expect("valid");
        let plan = naive_plan(&graph, &storage).expect("naive");
        let mut proof = KvProof::new(&graph, &kv, &plan).expect("proof");
        let g = proof.graph();
        assert!(g.validate().is_ok());
        let holds: Vec<&Node> = g.nodes.iter().filter(|n| n.op == "kv_hold").collect();
        assert_eq!(holds.len(), 3);
        assert!(g.nodes[g.nodes.len() - 3..]
            .iter()
            .all(|n| n.op == "kv_hold"));
        for id in kv.tensors() {
            assert_eq!(g.tensor(id).map(|t| t.role), Some(Role::Input));
            assert!(g.tensor(id).is_some_and(|t| t.size <= PROOF_TENSOR_BYTES));
            assert_eq!(
                proof.plan().placement(id).map(|p| p.buffer),
                Some(proof.cache_buffer())
            );
        }
        let plant = proof.plant_over_cache().expect("an activation to move");
        assert_eq!(plant.victim, kv.pages[0]);
        assert_eq!(
            proof
                .plan()
                .placement(plant.intruder)
                .map(|p| (p.buffer, p.chunk)),
            proof
                .plan()
                .placement(plant.victim)
                .map(|p| (p.buffer, p.chunk))
        );
        // A cache tensor the activation plan placed is refused.
        let mut wrong = plan.clone();
        wrong.placements[kv.table.index()] = plan.placement(qkv);
        assert!(matches!(
            KvProof::new(&graph, &kv, &wrong),
            Err(KvError::NotInGraph { .. })
        ));
    }
}
