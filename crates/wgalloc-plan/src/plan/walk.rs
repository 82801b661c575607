//! The ggml-alloc walk: one pass over the nodes in execution order that places every
//! planned tensor with a [`FreeBlockAllocator`] per buffer, frees each tensor after its
//! last reader and lets in-place nodes take over their dying first input.
//!
//! Rules (ggml's `gallocr` semantics, with the differences noted):
//! * Leaves (graph inputs, see [`graph_leaves`]) are placed first, in tensor-id order.
//! * A node's output is placed when the node runs, *before* any tensor is freed at that
//!   step, so an output never overlaps an input unless placed in place.
//! * A tensor's memory (its root's, for views) is freed after the last node that reads
//!   it or any view of it. Outputs are never freed. A tensor nobody
//!   reads is freed right after its producer (ggml keeps it to the end).
//!   These are the rules of [`crate::graph::Lifetimes`], which [`super::Plan::verify`] uses.
//! * In place: a node with `inplace` writes over its first input `i` when `i` is not a
//!   view, is planned (not a weight), is not an output, dies at this node, has the
//!   output's exact size, lives in the same buffer as the output would and not in an
//!   oversized chunk, and no other input of the node is a view of `i` (the ggml rule
//!   "no views left" in a form that also catches a transposed view read alongside).
//! * Views share their root's placement; weights are not placed.

use super::{BufferId, BufferTypeDesc, ChunkPlan, FreeBlockAllocator, Placement, PlanError};
use crate::graph::{
    Graph, GraphFacts, Role, TensorId, K_HAS_PRODUCER, K_VIEW, ROLE_MASK, ROLE_OUTPUT, ROLE_WEIGHT,
};

/// The leaves of a graph: the planned tensors (non-view, non-weight) that no node
/// produces, i.e. the graph inputs, in tensor-id order. `reserve_n`'s
/// `leaf_buffer_ids[k]` is the buffer of `graph_leaves(graph)[k]`.
pub fn graph_leaves(graph: &Graph) -> Vec<TensorId> {
    let mut produced = vec![false; graph.tensors.len()];
    for node in &graph.nodes {
        if let Some(p) = produced.get_mut(node.output.index()) {
            *p = true;
        }
    }
    graph
        .tensors
        .iter()
        .filter(|t| t.view_of.is_none() && t.role != Role::Weight && !produced[t.id.index()])
        .map(|t| t.id)
        .collect()
}

/// Which buffer each placed tensor goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BufferChoice<'a> {
    /// Everything in buffer 0.
    Single,
    /// `nodes[s]` for node `s`'s output, `leaves[k]` for leaf `k`.
    PerTensor {
        nodes: &'a [usize],
        leaves: &'a [usize],
    },
}

/// What the walk produced.
#[derive(Debug, Clone)]
pub(crate) struct Assignment {
    /// Per tensor (views get their root's).
    pub placements: Vec<Option<Placement>>,
    /// (output, input) pairs placed in place.
    pub inplace: Vec<(TensorId, TensorId)>,
    /// Per buffer: its chunks (empty for a buffer that repeats an earlier type).
    pub chunks: Vec<Vec<ChunkPlan>>,
}

/// Checks `reserve_n`-style buffer ids: one per node and one per leaf (`leaves` of
/// them), each below `buffers`, and at least one buffer when anything is to be placed.
///
/// # Errors
/// [`PlanError::BufferIdCount`] for a list of the wrong length;
/// [`PlanError::UnknownBuffer`] for an id past the buffer types.
pub(crate) fn check_buffer_ids(
    graph: &Graph,
    leaves: usize,
    node_buffer_ids: &[usize],
    leaf_buffer_ids: &[usize],
    buffers: usize,
) -> Result<(), PlanError> {
    for (what, ids, expected) in [
        ("node_buffer_ids", node_buffer_ids, graph.nodes.len()),
        ("leaf_buffer_ids", leaf_buffer_ids, leaves),
    ] {
        if ids.len() != expected {
            return Err(PlanError::BufferIdCount {
                what,
                got: ids.len(),
                expected,
            });
        }
        if let Some(&buffer) = ids.iter().find(|&&b| b >= buffers) {
            return Err(PlanError::UnknownBuffer {
                buffer,
                count: buffers,
            });
        }
    }
    if buffers == 0 && (leaves > 0 || !graph.nodes.is_empty()) {
        return Err(PlanError::UnknownBuffer {
            buffer: 0,
            count: 0,
        });
    }
    Ok(())
}

/// For every buffer id, the first buffer id with an equal buffer type.
pub(crate) fn canonical_buffers(buffer_types: &[BufferTypeDesc]) -> Vec<usize> {
    (0..buffer_types.len())
        .map(|b| {
            buffer_types[..b]
                .iter()
                .position(|earlier| *earlier == buffer_types[b])
                .unwrap_or(b)
        })
        .collect()
}

/// The root of every tensor (itself for non-views). Assumes a validated graph.
pub(crate) fn roots(graph: &Graph) -> Vec<u32> {
    let mut root: Vec<u32> = Vec::with_capacity(graph.tensors.len());
    for (i, t) in graph.tensors.iter().enumerate() {
        let r = match t.view_of {
            None => i as u32,
            Some(v) if v.index() < i => root[v.index()],
            Some(_) => graph.root_of(t.id).unwrap_or(t.id).0,
        };
        root.push(r);
    }
    root
}

// Per-tensor flags during the walk.
const PLANNED: u8 = 1;
const OUTPUT: u8 = 2;
const NODE_OUTPUT: u8 = 8;
const VIEW: u8 = 16;
const FREED: u8 = 32;
const HANDED_OVER: u8 = 64;
const PLACED: u8 = 4;

/// Compact per-tensor facts: roots, flags and the last step of each planned tensor's
/// memory, from the graph's validated [`GraphFacts`] in one pass over the tensor
/// bytes and one over the compact node lists. The same rules as
/// [`crate::graph::Lifetimes`] (which `verify` uses), without its per-tensor
/// `Option`s and repeated root walks.
struct Prep {
    root: Vec<u32>,
    flags: Vec<u8>,
    last: Vec<u32>,
}

impl Prep {
    fn of(facts: &mut GraphFacts) -> Prep {
        let root = std::mem::take(&mut facts.root);
        let n = root.len();
        let mut flags = vec![0u8; n];
        for (i, &kind) in facts.kind.iter().enumerate() {
            let role = kind & ROLE_MASK;
            let own = if kind & K_VIEW != 0 {
                VIEW
            } else if role == ROLE_WEIGHT {
                0
            } else {
                PLANNED
            };
            let produced = if kind & K_HAS_PRODUCER != 0 {
                NODE_OUTPUT
            } else {
                0
            };
            flags[i] |= own | produced;
            if role == ROLE_OUTPUT {
                flags[root[i] as usize] |= OUTPUT;
            }
        }
        let mut last = vec![0u32; n];
        let mut start = 0usize;
        for (s, node) in facts.nodes.iter().enumerate() {
            let s = s as u32;
            let end = node.inputs_end as usize;
            let r = root[node.output as usize] as usize;
            last[r] = last[r].max(s);
            for &input in &facts.inputs[start..end] {
                let r = root[input as usize] as usize;
                last[r] = last[r].max(s);
            }
            start = end;
        }
        let last_step = (facts.nodes.len() as u32).saturating_sub(1);
        for (l, &f) in last.iter_mut().zip(&flags) {
            if f & (OUTPUT | PLANNED) == OUTPUT | PLANNED {
                *l = (*l).max(last_step);
            }
        }
        Prep { root, flags, last }
    }
}

struct Walk<'a> {
    graph: &'a Graph,
    facts: GraphFacts,
    prep: Prep,
    canonical: &'a [usize],
    allocators: Vec<FreeBlockAllocator>,
    placements: Vec<Option<Placement>>,
    inplace: Vec<(TensorId, TensorId)>,
}

/// Runs the walk over a graph validated into `facts` (`Graph::validated_facts`).
///
/// # Errors
/// [`PlanError::SizeOverflow`] for a tensor whose size overflows when aligned.
pub(crate) fn walk(
    graph: &Graph,
    mut facts: GraphFacts,
    buffer_types: &[BufferTypeDesc],
    canonical: &[usize],
    choice: BufferChoice<'_>,
) -> Result<Assignment, PlanError> {
    let n = graph.tensors.len();
    let prep = Prep::of(&mut facts);
    let mut w = Walk {
        graph,
        facts,
        prep,
        canonical,
        allocators: buffer_types
            .iter()
            .map(FreeBlockAllocator::for_buffer_type)
            .collect(),
        placements: vec![None; n],
        inplace: Vec::new(),
    };
    // The leaves (see `graph_leaves`), from the flags.
    let leaves: Vec<u32> = (0..n)
        .filter(|&i| w.prep.flags[i] & (PLANNED | NODE_OUTPUT) == PLANNED)
        .map(|i| i as u32)
        .collect();
    for (k, &leaf) in leaves.iter().enumerate() {
        let buffer = match choice {
            BufferChoice::Single => 0,
            BufferChoice::PerTensor { leaves, .. } => leaves.get(k).copied().unwrap_or(0),
        };
        w.place(leaf as usize, buffer)?;
    }
    let mut start = 0usize;
    for s in 0..w.facts.nodes.len() {
        let step = s as u32;
        let node = w.facts.nodes[s];
        let end = node.inputs_end as usize;
        let out = node.output as usize;
        let r = w.prep.root[out] as usize;
        // The first node whose output is (a view of) a planned tensor places it.
        if w.prep.flags[r] & (PLANNED | PLACED) == PLANNED {
            let buffer = match choice {
                BufferChoice::Single => 0,
                BufferChoice::PerTensor { nodes, .. } => nodes.get(s).copied().unwrap_or(0),
            };
            let source = if node.inplace && r == out {
                w.inplace_source(step, out, (start, end), buffer)
            } else {
                None
            };
            match source {
                Some(input) => {
                    w.placements[out] = w.placements[input];
                    w.prep.flags[out] |= PLACED;
                    w.prep.flags[input] |= HANDED_OVER;
                    w.inplace
                        .push((TensorId(out as u32), TensorId(input as u32)));
                }
                None => w.place(r, buffer)?,
            }
        }
        for k in start..end {
            let r = w.prep.root[w.facts.inputs[k] as usize] as usize;
            w.free_if_dead(r, step)?;
        }
        w.free_if_dead(r, step)?;
        if s == 0 {
            // Inputs nobody reads live at step 0 only.
            for &leaf in &leaves {
                w.free_if_dead(leaf as usize, 0)?;
            }
        }
        start = end;
    }
    // Views share their root's placement.
    for i in 0..n {
        if w.prep.flags[i] & VIEW != 0 {
            w.placements[i] = w.placements[w.prep.root[i] as usize];
        }
    }
    let chunks = (0..buffer_types.len())
        .map(|b| {
            if canonical[b] == b {
                w.allocators[b].chunks()
            } else {
                Vec::new()
            }
        })
        .collect();
    Ok(Assignment {
        placements: w.placements,
        inplace: w.inplace,
        chunks,
    })
}

impl Walk<'_> {
    fn place(&mut self, tensor: usize, buffer: usize) -> Result<(), PlanError> {
        let b = self.canonical[buffer];
        let size =
            self.graph
                .reserved_size(TensorId(tensor as u32))
                .ok_or(PlanError::SizeOverflow {
                    tensor: TensorId(tensor as u32),
                })?;
        let a = self.allocators[b]
            .alloc(size)
            .map_err(|_| PlanError::SizeOverflow {
                tensor: TensorId(tensor as u32),
            })?;
        self.placements[tensor] = Some(Placement {
            buffer: BufferId(b),
            chunk: a.chunk,
            offset: a.offset,
            size: a.size,
        });
        self.prep.flags[tensor] |= PLACED;
        Ok(())
    }

    /// The first input of the in-place node at `step` writing `out` (a non-view),
    /// whose inputs are `facts.inputs[start..end]`, if the node may write its output
    /// over it.
    fn inplace_source(
        &self,
        step: u32,
        out: usize,
        inputs: (usize, usize),
        buffer: usize,
    ) -> Option<usize> {
        let inputs = self.facts.inputs.get(inputs.0..inputs.1)?;
        let (&first, others) = inputs.split_first()?;
        let i = first as usize;
        let flags = self.prep.flags[i];
        if flags & (PLANNED | PLACED) != PLANNED | PLACED
            || flags & (OUTPUT | FREED | HANDED_OVER) != 0
        {
            return None;
        }
        let placement = self.placements[i]?;
        let legal = self.prep.last[i] == step
            && self.graph.tensors[i].size == self.graph.tensors[out].size
            && placement.buffer.0 == self.canonical[buffer]
            && !self.allocators[placement.buffer.0].is_oversized(placement.chunk)
            && others
                .iter()
                .all(|&other| other == first || self.prep.root[other as usize] != first);
        legal.then_some(i)
    }

    #[inline]
    fn free_if_dead(&mut self, r: usize, step: u32) -> Result<(), PlanError> {
        let flags = self.prep.flags[r];
        if flags & (FREED | OUTPUT) != 0 || flags & PLANNED == 0 || self.prep.last[r] != step {
            return Ok(());
        }
        let Some(p) = self.placements[r] else {
            return Ok(());
        };
        self.prep.flags[r] |= FREED;
        if flags & HANDED_OVER == 0 {
            self.allocators[p.buffer.0].free(p.chunk, p.offset, p.size)?;
        }
        Ok(())
    }
}
