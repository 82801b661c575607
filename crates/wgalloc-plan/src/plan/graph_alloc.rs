//! [`GraphAllocator`]: ggml's graph allocator (`gallocr`) over plain buffer types, and
//! the one-shot [`plan_graph`].

use super::offline::{plan_checked_graph_offline_n, Budget, Strategy};
use super::walk::{
    canonical_buffers, check_buffer_ids, graph_leaves, walk, Assignment, BufferChoice,
};
use super::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan, PlanError};
use crate::graph::{Graph, Lifetimes, Role, TensorId};

/// The planner name of plans made by the graph allocator.
pub const GGML_PLANNER: &str = "ggml";

/// Plans a graph with ggml-alloc's semantics in one buffer of `buffer_type`
/// (a `reserve` followed by `alloc_graph`, without keeping any state).
///
/// ```
/// use wgalloc_plan::graph::{DType, GraphBuilder};
/// use wgalloc_plan::plan::{plan_graph, BufferTypeDesc};
/// let mut b = GraphBuilder::new("g");
/// let x = b.input("x", DType::F32, &[64]);
/// let y = b.node("relu", &[x], &[64], true);
/// let z = b.node("neg", &[y], &[64], false);
/// b.mark_output(z);
/// let graph = b.build().unwrap();
/// let plan = plan_graph(&graph, &BufferTypeDesc::new("gpu", 256, 1 << 20).unwrap()).unwrap();
/// assert_eq!(plan.inplace, vec![(y, x)]);
/// assert_eq!(plan.total_size(), 512);
/// plan.verify(&graph).unwrap();
/// ```
///
/// # Errors
/// [`PlanError::InvalidGraph`] for a graph that does not validate;
/// [`PlanError::SizeOverflow`] for a tensor whose size overflows when aligned.
pub fn plan_graph(graph: &Graph, buffer_type: &BufferTypeDesc) -> Result<Plan, PlanError> {
    let facts = graph.validated_facts()?;
    let types = std::slice::from_ref(buffer_type);
    let a = walk(graph, facts, types, &[0], BufferChoice::Single)?;
    let plan = Plan {
        planner: GGML_PLANNER.to_string(),
        placements: a.placements,
        buffers: vec![BufferPlan {
            buffer_type: buffer_type.clone(),
            chunks: a.chunks.into_iter().next().unwrap_or_default(),
            same_as: None,
        }],
        inplace: a.inplace,
    };
    if cfg!(debug_assertions) {
        plan.verify_with(
            graph,
            &Lifetimes::of(graph),
            super::verify::Coverage::EveryPlannedTensor,
        )?;
    }
    Ok(plan)
}

/// The shape of the graph a reservation was made for: everything that decides where
/// tensors go, to tell whether a new graph can reuse the reservation.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    leaves: usize,
    tensors: Vec<(Role, Option<TensorId>)>,
    ops: String,
    op_ends: Vec<usize>,
    inputs: Vec<TensorId>,
    input_ends: Vec<usize>,
    outputs: Vec<(TensorId, bool)>,
}

impl Snapshot {
    fn of(graph: &Graph, leaves: usize) -> Snapshot {
        let mut ops = String::new();
        let mut op_ends = Vec::with_capacity(graph.nodes.len());
        let mut inputs = Vec::new();
        let mut input_ends = Vec::with_capacity(graph.nodes.len());
        let mut outputs = Vec::with_capacity(graph.nodes.len());
        for node in &graph.nodes {
            ops.push_str(&node.op);
            op_ends.push(ops.len());
            inputs.extend_from_slice(&node.inputs);
            input_ends.push(inputs.len());
            outputs.push((node.output, node.inplace));
        }
        Snapshot {
            leaves,
            tensors: graph.tensors.iter().map(|t| (t.role, t.view_of)).collect(),
            ops,
            op_ends,
            inputs,
            input_ends,
            outputs,
        }
    }

    /// Whether `graph` has the same nodes (op, inputs, output, in-place flag), the
    /// same tensor roles and views, and the same number of leaves.
    fn matches(&self, graph: &Graph) -> bool {
        if graph.nodes.len() != self.outputs.len() || graph.tensors.len() != self.tensors.len() {
            return false;
        }
        let same_tensors = graph
            .tensors
            .iter()
            .zip(&self.tensors)
            .all(|(t, &(role, view_of))| t.role == role && t.view_of == view_of);
        if !same_tensors {
            return false;
        }
        let (mut op_start, mut input_start) = (0, 0);
        for (s, node) in graph.nodes.iter().enumerate() {
            let (op_end, input_end) = (self.op_ends[s], self.input_ends[s]);
            if self.ops.get(op_start..op_end) != Some(node.op.as_str())
                || self.inputs.get(input_start..input_end) != Some(node.inputs.as_slice())
                || self.outputs[s] != (node.output, node.inplace)
            {
                return false;
            }
            (op_start, input_start) = (op_end, input_end);
        }
        graph_leaves(graph).len() == self.leaves
    }
}

#[derive(Debug, Clone)]
struct Reservation {
    snapshot: Snapshot,
    placements: Vec<Option<Placement>>,
    inplace: Vec<(TensorId, TensorId)>,
}

/// A graph allocator with ggml-alloc's semantics over one or more buffer types.
///
/// `reserve`/`reserve_n` plan a (worst-case) graph and remember the placements and
/// each buffer's chunk sizes; sizes only grow across reservations. `alloc_graph` hands
/// out the remembered placements for a graph of the same shape, and re-plans by itself
/// when there is one buffer and the graph changed ([`GraphAllocator::needs_realloc`]).
/// A buffer whose type equals an earlier buffer's type shares that buffer's memory: its
/// tensors are placed in the earlier buffer and its own size is 0.
///
/// ```
/// use wgalloc_plan::graph::{DType, GraphBuilder};
/// use wgalloc_plan::plan::{BufferTypeDesc, GraphAllocator};
/// let mut b = GraphBuilder::new("g");
/// let x = b.input("x", DType::F32, &[64]);
/// let y = b.node("neg", &[x], &[64], false);
/// b.mark_output(y);
/// let graph = b.build().unwrap();
/// let mut galloc = GraphAllocator::new(vec![BufferTypeDesc::new("gpu", 32, 1 << 20).unwrap()]);
/// let plan = galloc.alloc_graph(&graph).unwrap(); // one buffer: reserves by itself
/// assert_eq!(galloc.buffer_size(0).unwrap(), 512);
/// assert!(!galloc.needs_realloc(&graph));
/// # let _ = plan;
/// ```
#[derive(Debug, Clone)]
pub struct GraphAllocator {
    buffer_types: Vec<BufferTypeDesc>,
    canonical: Vec<usize>,
    /// Per buffer: chunk sizes, the largest over all reservations.
    reserved: Vec<Vec<ChunkPlan>>,
    current: Option<Reservation>,
    /// The offline strategy that plans reservations (`None`: ggml's walk).
    offline: Option<(Strategy, Budget)>,
}

impl GraphAllocator {
    /// An allocator over these buffer types (buffer id = position).
    pub fn new(buffer_types: Vec<BufferTypeDesc>) -> GraphAllocator {
        let canonical = canonical_buffers(&buffer_types);
        GraphAllocator {
            reserved: vec![Vec::new(); buffer_types.len()],
            buffer_types,
            canonical,
            current: None,
            offline: None,
        }
    }

    /// An allocator whose reservations are planned by an offline strategy (see
    /// [`crate::plan::offline`]) over the whole graph at once, instead of ggml's walk in
    /// execution order. Everything else (`reserve_n`'s buffer ids, sizes that only grow,
    /// `needs_realloc`, `alloc_graph` handing out the reservation) is unchanged.
    ///
    /// ```
    /// use wgalloc_plan::graph::{DType, GraphBuilder};
    /// // A small MLP: x -> relu(x·w1) -> ·w2.
    /// let mut b = GraphBuilder::new("mlp");
    /// let x = b.input("x", DType::F32, &[64, 256]);
    /// let w1 = b.weight("w1", DType::F32, &[256, 1024]);
    /// let w2 = b.weight("w2", DType::F32, &[1024, 256]);
    /// let h = b.node("matmul", &[x, w1], &[64, 1024], false);
    /// let a = b.node("relu", &[h], &[64, 1024], true);
    /// let y = b.node("matmul", &[a, w2], &[64, 256], false);
    /// b.mark_output(y);
    /// let graph = b.build().unwrap();
    /// use wgalloc_plan::plan::offline::{Budget, Strategy};
    /// use wgalloc_plan::plan::{lower_bounds, BufferTypeDesc, GraphAllocator};
    /// let storage = BufferTypeDesc::new("gpu", 1, 1 << 30).unwrap();
    /// let mut galloc = GraphAllocator::with_strategy(vec![storage], Strategy::Best, Budget::default());
    /// let plan = galloc.alloc_graph(&graph).unwrap();
    /// assert_eq!(plan.total_size(), lower_bounds(&graph).unwrap().inplace_aware);
    /// ```
    pub fn with_strategy(
        buffer_types: Vec<BufferTypeDesc>,
        strategy: Strategy,
        budget: Budget,
    ) -> GraphAllocator {
        let mut galloc = GraphAllocator::new(buffer_types);
        galloc.offline = Some((strategy, budget));
        galloc
    }

    /// The name of the planner behind reservations (`ggml` or the offline strategy's).
    pub fn planner_name(&self) -> &'static str {
        self.offline
            .map_or(GGML_PLANNER, |(strategy, _)| strategy.name())
    }

    /// The buffer types, indexed by buffer id.
    pub fn buffer_types(&self) -> &[BufferTypeDesc] {
        &self.buffer_types
    }

    /// Plans `graph` with every tensor in buffer 0 and keeps the result.
    ///
    /// # Errors
    /// As [`GraphAllocator::reserve_n`].
    pub fn reserve(&mut self, graph: &Graph) -> Result<(), PlanError> {
        let leaves = graph_leaves(graph).len();
        let nodes = vec![0; graph.nodes.len()];
        self.reserve_n(graph, &nodes, &vec![0; leaves])
    }

    /// Plans `graph` with node `s`'s output in buffer `node_buffer_ids[s]` and leaf `k`
    /// ([`graph_leaves`]`(graph)[k]`, the k-th graph input in tensor-id order) in
    /// `leaf_buffer_ids[k]`, and keeps the placements. Each buffer's chunk sizes become
    /// the larger of the old and the new ones (a chunk whose oversized flag changed
    /// takes the new size).
    ///
    /// # Errors
    /// [`PlanError::InvalidGraph`] for a graph that does not validate;
    /// [`PlanError::BufferIdCount`] if a list's length is not the number of nodes or
    /// leaves; [`PlanError::UnknownBuffer`] for an id past the buffer types;
    /// [`PlanError::SizeOverflow`] for a tensor whose size overflows when aligned.
    pub fn reserve_n(
        &mut self,
        graph: &Graph,
        node_buffer_ids: &[usize],
        leaf_buffer_ids: &[usize],
    ) -> Result<(), PlanError> {
        let facts = graph.validated_facts()?;
        let leaves = graph_leaves(graph).len();
        check_buffer_ids(
            graph,
            leaves,
            node_buffer_ids,
            leaf_buffer_ids,
            self.buffer_types.len(),
        )?;
        let Assignment {
            placements,
            inplace,
            chunks,
        } = match self.offline {
            Some((strategy, budget)) => {
                // The graph and the ids were checked above.
                let plan = plan_checked_graph_offline_n(
                    graph,
                    &self.buffer_types,
                    node_buffer_ids,
                    leaf_buffer_ids,
                    strategy,
                    &budget,
                )?;
                Assignment {
                    placements: plan.placements,
                    inplace: plan.inplace,
                    chunks: plan.buffers.into_iter().map(|b| b.chunks).collect(),
                }
            }
            None => {
                let choice = BufferChoice::PerTensor {
                    nodes: node_buffer_ids,
                    leaves: leaf_buffer_ids,
                };
                walk(graph, facts, &self.buffer_types, &self.canonical, choice)?
            }
        };
        for (old, new) in self.reserved.iter_mut().zip(chunks) {
            merge_chunks(old, &new);
        }
        self.current = Some(Reservation {
            snapshot: Snapshot::of(graph, leaves),
            placements,
            inplace,
        });
        Ok(())
    }

    /// Whether `graph` cannot use the current reservation: there is none; the number
    /// of nodes, leaves or tensors changed; a node's op, inputs, output or in-place
    /// flag changed at the same position (ggml misses this); a tensor's role or view
    /// changed; a tensor newly needs memory or grew past its reserved bytes.
    pub fn needs_realloc(&self, graph: &Graph) -> bool {
        let Some(current) = &self.current else {
            return true;
        };
        if !current.snapshot.matches(graph) {
            return true;
        }
        graph.tensors.iter().any(|t| {
            graph.is_planned(t.id)
                && current
                    .placements
                    .get(t.id.index())
                    .copied()
                    .flatten()
                    .is_none_or(|p| graph.reserved_size(t.id).unwrap_or(u64::MAX) > p.size)
        })
    }

    /// The plan for `graph`. With one buffer, re-plans first when
    /// [`GraphAllocator::needs_realloc`] says so; with several, that is an error.
    ///
    /// # Errors
    /// [`PlanError::NeedsReserve`] with several buffers when the graph needs a new
    /// reservation; [`PlanError::InvalidGraph`]; whatever `reserve` returns.
    pub fn alloc_graph(&mut self, graph: &Graph) -> Result<Plan, PlanError> {
        graph.validate()?;
        if self.needs_realloc(graph) {
            if self.buffer_types.len() != 1 {
                return Err(PlanError::NeedsReserve {
                    buffers: self.buffer_types.len(),
                });
            }
            self.reserve(graph)?;
        }
        let current = self.current.as_ref().ok_or(PlanError::NotReserved)?;
        let buffers = self
            .buffer_types
            .iter()
            .enumerate()
            .map(|(b, buffer_type)| {
                let canonical = self.canonical[b];
                BufferPlan {
                    buffer_type: buffer_type.clone(),
                    chunks: if canonical == b {
                        self.reserved[b].clone()
                    } else {
                        Vec::new()
                    },
                    same_as: (canonical != b).then_some(BufferId(canonical)),
                }
            })
            .collect();
        let plan = Plan {
            planner: self.planner_name().to_string(),
            placements: current.placements.clone(),
            buffers,
            inplace: current.inplace.clone(),
        };
        if cfg!(debug_assertions) {
            plan.verify(graph)?;
        }
        Ok(plan)
    }

    /// Bytes reserved for a buffer (the sum of its chunk sizes): 0 before any
    /// reservation and for a buffer that repeats an earlier buffer's type.
    ///
    /// # Errors
    /// [`PlanError::UnknownBuffer`] for an id past the buffer types.
    pub fn buffer_size(&self, buffer_id: usize) -> Result<u64, PlanError> {
        let count = self.buffer_types.len();
        if buffer_id >= count {
            return Err(PlanError::UnknownBuffer {
                buffer: buffer_id,
                count,
            });
        }
        if self.canonical[buffer_id] != buffer_id {
            return Ok(0);
        }
        Ok(self.reserved[buffer_id]
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(c.size)))
    }

    /// The chunk sizes reserved for a buffer (empty for a repeating buffer).
    pub fn chunks(&self, buffer_id: usize) -> Option<&[ChunkPlan]> {
        self.reserved.get(buffer_id).map(Vec::as_slice)
    }
}

/// `old` becomes the chunk-wise larger of `old` and `new`; where the oversized flag
/// differs, the new chunk wins.
fn merge_chunks(old: &mut Vec<ChunkPlan>, new: &[ChunkPlan]) {
    for (i, &n) in new.iter().enumerate() {
        match old.get_mut(i) {
            Some(o) if o.oversized == n.oversized => o.size = o.size.max(n.size),
            Some(o) => *o = n,
            None => old.push(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    fn buft(alignment: u64, max_size: u64) -> BufferTypeDesc {
        BufferTypeDesc::new("t", alignment, max_size).expect("valid")
    }

    #[test]
    fn sizes_only_grow_across_reserves() {
        let small = {
            let mut b = GraphBuilder::new("g");
            let x = b.input("x", DType::F32, &[4]);
            let y = b.node("neg", &[x], &[4], false);
            b.mark_output(y);
            b.build().expect("valid")
        };
        let big = {
            let mut b = GraphBuilder::new("g");
            let x = b.input("x", DType::F32, &[64]);
            let y = b.node("neg", &[x], &[64], false);
            b.mark_output(y);
            b.build().expect("valid")
        };
        let mut g = GraphAllocator::new(vec![buft(1, 1 << 20)]);
        g.reserve(&big).expect("reserve");
        assert_eq!(g.buffer_size(0), Ok(512));
        g.reserve(&small).expect("reserve");
        assert_eq!(g.buffer_size(0), Ok(512));
        let plan = g.alloc_graph(&small).expect("alloc");
        assert_eq!(plan.total_size(), 512);
        plan.verify(&small).expect("valid");
    }

    #[test]
    fn buffer_size_of_unknown_buffer_is_an_error() {
        let g = GraphAllocator::new(vec![buft(1, 100)]);
        assert_eq!(g.buffer_size(0), Ok(0));
        assert_eq!(
            g.buffer_size(1),
            Err(PlanError::UnknownBuffer {
                buffer: 1,
                count: 1
            })
        );
    }

    #[test]
    fn merged_chunks_keep_the_larger_size() {
        let mut old = vec![ChunkPlan {
            size: 10,
            oversized: false,
        }];
        merge_chunks(
            &mut old,
            &[
                ChunkPlan {
                    size: 5,
                    oversized: false,
                },
                ChunkPlan {
                    size: 7,
                    oversized: true,
                },
            ],
        );
        assert_eq!(old[0].size, 10);
        assert_eq!(old.len(), 2);
        assert!(old[1].oversized);
    }
}
