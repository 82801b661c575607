//! Where a context's tensors live during one execution, phase by phase. Pure CPU.
//!
//! A [`Layout`] is one kind of memory (workspace or outputs) as chunks that only grow
//! during an execution: each phase's tensors are placed after everything placed before
//! (in the last chunk while it has room, else in new chunks), so the bytes of earlier
//! phases, and the live data in them, keep their offsets when a chunk is reallocated.
//! [`phase_graph`] cuts the nodes of one phase out of the resolved graph, as a graph
//! the existing planners accept.

use super::{MemoryRole, RuntimeError};
use crate::device::chunk_alloc_size;
use crate::graph::{Graph, Node, Role, TensorId};
use crate::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan};
use std::collections::HashSet;

/// Chunks of one kind of memory and the placements made in them so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    role: MemoryRole,
    buffer_type: BufferTypeDesc,
    /// Bytes used in each chunk; never above `buffer_type.max_size` (`reserve` refuses
    /// more with [`RuntimeError::ChunkTooLarge`]), so a storage layout's chunks fit
    /// `max_buffer_size`.
    pub chunks: Vec<u64>,
    /// By tensor id: the placement of a root placed here.
    pub placements: Vec<Option<Placement>>,
}

impl Layout {
    /// Empty, for a graph of `tensors` tensors.
    pub fn new(role: MemoryRole, buffer_type: &BufferTypeDesc, tensors: usize) -> Layout {
        Layout {
            role,
            buffer_type: buffer_type.clone(),
            chunks: Vec::new(),
            placements: vec![None; tensors],
        }
    }

    /// Whether `tensor` is placed here.
    pub fn places(&self, tensor: TensorId) -> bool {
        self.placements
            .get(tensor.index())
            .is_some_and(Option::is_some)
    }

    fn too_large(&self, size: u64) -> RuntimeError {
        RuntimeError::ChunkTooLarge {
            role: self.role,
            size,
            max_size: self.buffer_type.max_size,
        }
    }

    /// Reserves `size` bytes: after the last chunk's data while it has room, else at 0
    /// of a new chunk. Returns (chunk, offset).
    fn reserve(&mut self, size: u64, allow_tail: bool) -> Result<(usize, u64), RuntimeError> {
        let max = self.buffer_type.max_size;
        if size > max {
            return Err(self.too_large(size));
        }
        if allow_tail {
            if let Some(last) = self.chunks.len().checked_sub(1) {
                let base = self
                    .buffer_type
                    .align_up(self.chunks[last])
                    .ok_or_else(|| self.too_large(u64::MAX))?;
                if base.checked_add(size).is_some_and(|end| end <= max) {
                    self.chunks[last] = base + size;
                    return Ok((last, base));
                }
            }
        }
        self.chunks.push(size);
        Ok((self.chunks.len() - 1, 0))
    }

    /// Places each tensor one after another (its size rounded up to the alignment).
    pub fn bump(&mut self, graph: &Graph, tensors: &[TensorId]) -> Result<(), RuntimeError> {
        for &id in tensors {
            let size = graph.reserved_size(id).unwrap_or(u64::MAX);
            let reserved = self
                .buffer_type
                .align_up(size.max(1))
                .ok_or_else(|| self.too_large(size))?;
            let (chunk, offset) = self.reserve(reserved, true)?;
            self.set(id, chunk, offset, reserved);
        }
        Ok(())
    }

    fn set(&mut self, id: TensorId, chunk: usize, offset: u64, size: u64) {
        if let Some(slot) = self.placements.get_mut(id.index()) {
            *slot = Some(Placement {
                buffer: BufferId(0),
                chunk,
                offset,
                size,
            });
        }
    }

    /// Places a phase's plan after everything placed so far: its chunk 0 after the
    /// last chunk's data when it fits, its other chunks as new chunks. `original[i]`
    /// is the graph id of the phase graph's tensor `i`.
    pub fn append(&mut self, plan: &Plan, original: &[TensorId]) -> Result<(), RuntimeError> {
        let Some(buffer) = plan.buffers.first() else {
            return Ok(());
        };
        let mut targets = Vec::with_capacity(buffer.chunks.len());
        for (j, chunk) in buffer.chunks.iter().enumerate() {
            targets.push(self.reserve(chunk.size, j == 0)?);
        }
        for (i, placement) in plan.placements.iter().enumerate() {
            let (Some(p), Some(&id)) = (placement, original.get(i)) else {
                continue;
            };
            let Some(&(chunk, base)) = targets.get(p.chunk) else {
                continue;
            };
            let offset = base
                .checked_add(p.offset)
                .ok_or_else(|| self.too_large(u64::MAX))?;
            self.set(id, chunk, offset, p.size);
        }
        Ok(())
    }

    /// The layout as a [`Plan`] of one buffer, for [`crate::exec::TensorMemory`].
    pub fn to_plan(&self) -> Plan {
        Plan {
            planner: format!("{} layout", self.role),
            placements: self.placements.clone(),
            buffers: vec![BufferPlan {
                buffer_type: self.buffer_type.clone(),
                chunks: self
                    .chunks
                    .iter()
                    .map(|&size| ChunkPlan {
                        size,
                        oversized: false,
                    })
                    .collect(),
                same_as: None,
            }],
            inplace: Vec::new(),
        }
    }

    /// Bytes each chunk's block must have: what the device layer allocates for a
    /// chunk of that use ([`chunk_alloc_size`]: rounded up to 4, at least 4).
    pub fn block_sizes(&self) -> Vec<u64> {
        self.chunks
            .iter()
            .map(|&size| {
                chunk_alloc_size(&ChunkPlan {
                    size,
                    oversized: false,
                })
                .unwrap_or(u64::MAX)
            })
            .collect()
    }
}

/// The `nodes` of one phase of `graph` (the tensors they touch all resolved; nodes
/// skipped for an empty output left out) as a graph of their own: tensors in `placed` (set by an earlier phase, or kept elsewhere) that
/// no node of the phase produces become weights, which planners do not place; tensors produced here that `keep`
/// holds (read after the phase, or read back by the host) become outputs; the rest
/// are intermediates. Returns the phase graph and, for each of its tensors, the id in
/// `graph`.
pub(crate) fn phase_graph(
    graph: &Graph,
    nodes: &[Node],
    placed: impl Fn(TensorId) -> bool,
    keep: &HashSet<TensorId>,
) -> (Graph, Vec<TensorId>) {
    let mut wanted = vec![false; graph.tensors.len()];
    for node in nodes {
        for &id in node.inputs.iter().chain(std::iter::once(&node.output)) {
            let mut current = Some(id);
            while let Some(t) = current.and_then(|c| graph.tensor(c)) {
                if wanted[t.id.index()] {
                    break;
                }
                wanted[t.id.index()] = true;
                current = t.view_of;
            }
        }
    }
    let original: Vec<TensorId> = graph
        .tensors
        .iter()
        .filter(|t| wanted[t.id.index()])
        .map(|t| t.id)
        .collect();
    let mut new_id = vec![TensorId(u32::MAX); graph.tensors.len()];
    for (i, id) in original.iter().enumerate() {
        new_id[id.index()] = TensorId(u32::try_from(i).unwrap_or(u32::MAX));
    }
    let produced: HashSet<TensorId> = nodes
        .iter()
        .filter_map(|n| graph.root_of(n.output))
        .collect();
    let role_of = |id: TensorId| -> Role {
        let Some(t) = graph.tensor(id) else {
            return Role::Intermediate;
        };
        if t.role == Role::Weight || (placed(id) && !produced.contains(&id)) {
            Role::Weight
        } else if keep.contains(&id) {
            Role::Output
        } else {
            Role::Intermediate
        }
    };
    let tensors = original
        .iter()
        .filter_map(|&id| graph.tensor(id))
        .map(|t| {
            let mut t = t.clone();
            let root = graph.root_of(t.id).unwrap_or(t.id);
            t.role = match (t.view_of, role_of(root)) {
                (Some(_), Role::Output) => Role::Intermediate,
                (_, role) => role,
            };
            t.view_of = t.view_of.map(|v| new_id[v.index()]);
            t.id = new_id[t.id.index()];
            t.dynamic = None;
            t
        })
        .collect();
    let nodes = nodes
        .iter()
        .map(|n| {
            let mut n = n.clone();
            n.inputs = n.inputs.iter().map(|i| new_id[i.index()]).collect();
            n.output = new_id[n.output.index()];
            n
        })
        .collect();
    let sub = Graph {
        name: format!("{} phase", graph.name),
        tensors,
        nodes,
    };
    (sub, original)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::plan::plan_graph;

    fn storage(max: u64) -> BufferTypeDesc {
        BufferTypeDesc::new("storage", 32, max).expect("valid")
    }

    #[test]
    fn a_phase_is_appended_after_earlier_data_so_live_offsets_never_move() {
        let mut b = GraphBuilder::new("two phases");
        let x = b.input("x", DType::F32, &[10]);
        let h = b.node("relu", &[x], &[10], false);
        let y = b.node("relu", &[h], &[10], false);
        let graph = b.build().expect("valid");
        let mut layout = Layout::new(MemoryRole::Workspace, &storage(1 << 20), 3);
        layout.bump(&graph, &[x]).expect("fits");
        assert_eq!(layout.chunks, vec![64]);
        let keep: HashSet<TensorId> = [h].into_iter().collect();
        let (sub, original) = phase_graph(&graph, &graph.nodes[0..1], |t| layout.places(t), &keep);
        assert_eq!(original, vec![x, h]);
        let plan = plan_graph(&sub, &storage(1 << 20)).expect("plans");
        layout.append(&plan, &original).expect("fits");
        let first = layout.placements[x.index()].expect("x placed");
        let second = layout.placements[h.index()].expect("h placed");
        assert_eq!((first.offset, second.offset), (0, 64));
        assert_eq!(layout.chunks, vec![128]);
        let (sub, original) = phase_graph(
            &graph,
            &graph.nodes[1..2],
            |t| layout.places(t),
            &HashSet::new(),
        );
        let plan = plan_graph(&sub, &storage(1 << 20)).expect("plans");
        layout.append(&plan, &original).expect("fits");
        assert_eq!(layout.placements[h.index()], Some(second));
        assert_eq!(layout.placements[y.index()].map(|p| p.offset), Some(128));
        assert_eq!(layout.block_sizes(), vec![192]);
    }

    #[test]
    fn a_phase_that_does_not_fit_the_last_chunk_opens_a_new_one() {
        let mut b = GraphBuilder::new("chunks");
        let x = b.input("x", DType::F32, &[24]);
        let y = b.node("relu", &[x], &[24], false);
        let graph = b.build().expect("valid");
        let mut layout = Layout::new(MemoryRole::Workspace, &storage(128), 2);
        layout.bump(&graph, &[x]).expect("fits");
        let (sub, original) = phase_graph(
            &graph,
            &graph.nodes[0..1],
            |t| layout.places(t),
            &HashSet::new(),
        );
        let plan = plan_graph(&sub, &storage(128)).expect("plans");
        layout.append(&plan, &original).expect("fits");
        assert_eq!(layout.chunks, vec![96, 96]);
        assert_eq!(layout.placements[y.index()].map(|p| p.chunk), Some(1));
    }

    #[test]
    fn a_tensor_larger_than_the_adapter_limit_never_fits() {
        let mut b = GraphBuilder::new("huge");
        let x = b.input("x", DType::F32, &[1 << 20]);
        let graph = b.build().expect("valid");
        let mut layout = Layout::new(MemoryRole::Workspace, &storage(1 << 16), 1);
        assert!(matches!(
            layout.bump(&graph, &[x]),
            Err(RuntimeError::ChunkTooLarge {
                size: 4194304,
                max_size: 65536,
                ..
            })
        ));
    }

    #[test]
    fn tensors_placed_earlier_become_weights_and_kept_ones_outputs() {
        let mut b = GraphBuilder::new("roles");
        let x = b.input("x", DType::F32, &[4]);
        let h = b.node("relu", &[x], &[4], false);
        let v = b.view("hv", h, &[4]);
        let y = b.node("relu", &[v], &[4], false);
        b.mark_output(y);
        let graph = b.build().expect("valid");
        let keep: HashSet<TensorId> = [h].into_iter().collect();
        let (sub, original) = phase_graph(&graph, &graph.nodes[0..1], |t| t == x, &keep);
        assert_eq!(original, vec![x, h]);
        assert_eq!(sub.tensors[0].role, Role::Weight);
        assert_eq!(sub.tensors[1].role, Role::Output);
        sub.validate().expect("a phase graph validates");
        let (sub, original) = phase_graph(&graph, &graph.nodes[1..2], |t| t == x || t == h, &keep);
        assert_eq!(original, vec![h, v, y]);
        assert_eq!(sub.tensors[1].view_of, Some(TensorId(0)));
        assert_eq!(sub.tensors[1].role, Role::Weight);
        sub.validate().expect("a phase graph validates");
    }
}
