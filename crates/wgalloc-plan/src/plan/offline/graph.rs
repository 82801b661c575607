//! Offline planning of a whole graph: live ranges from the graph's lifetimes, in-place
//! outputs merged into the input they overwrite, then chunks by the buffer type's max
//! size.

use super::{plan_ranges_with, Budget, LiveRange, Strategy};
use crate::graph::{Graph, Lifetimes, Role, TensorId};
use crate::plan::walk::{canonical_buffers, check_buffer_ids, graph_leaves};
use crate::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan, PlanError};

/// The memory a graph needs, as live ranges: one per group of tensors that share
/// memory (a tensor and the in-place outputs written over it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphRanges {
    /// One range per group: `[first step, last step + 1)` and the exact (unaligned) size.
    pub ranges: Vec<LiveRange>,
    /// `group[i]`: the range holding tensor `i`'s memory (its root's for a view);
    /// `None` for weights and views of weights.
    pub group: Vec<Option<usize>>,
    /// In-place pairs `(output, input)`: the output is written over the input.
    pub inplace: Vec<(TensorId, TensorId)>,
}

impl GraphRanges {
    /// The largest total size live at one step with sizes aligned up to `alignment`: no
    /// plan that uses these in-place merges can need less. With alignment 1 it is the
    /// in-place-aware bound of the trace format.
    ///
    /// # Errors
    /// [`PlanError::BadAlignment`] or [`PlanError::SizeOverflow`], as
    /// [`super::plan_ranges`].
    pub fn live_peak(&self, alignment: u64) -> Result<u64, PlanError> {
        Ok(super::prepared::Prepared::new(&self.ranges, alignment)?.lower_bound)
    }
}

/// Builds the live ranges of a graph. A node's output is merged into its `inputs[0]`
/// when the node may work in place (`inplace`), both tensors are non-views with the
/// same size, the input is planned, is not a graph output and dies at this node, and
/// the output is not also one of the node's inputs.
///
/// # Errors
/// [`PlanError::InvalidGraph`] if the graph does not validate.
pub fn graph_live_ranges(graph: &Graph) -> Result<GraphRanges, PlanError> {
    graph.validate()?;
    Ok(live_ranges_in(graph, None))
}

/// [`graph_live_ranges`] of a validated graph; with `buffer_of` (a buffer per tensor) an
/// in-place output is merged only into an input of the same buffer.
fn live_ranges_in(graph: &Graph, buffer_of: Option<&[usize]>) -> GraphRanges {
    let lifetimes = Lifetimes::of(graph);
    let count = graph.tensors.len();
    let mut own: Vec<Option<usize>> = vec![None; count];
    let mut ranges: Vec<LiveRange> = Vec::new();
    let mut inplace = Vec::new();
    let life_range = |id: TensorId| {
        lifetimes
            .get(id)
            .map(|l| (u64::from(l.first), u64::from(l.last) + 1))
    };
    // Roots whose memory must survive the pass: an output, or a view of one.
    let mut keeps_output = vec![false; count];
    for t in &graph.tensors {
        if t.role == Role::Output {
            if let Some(root) = graph.root_of(t.id) {
                keeps_output[root.index()] = true;
            }
        }
    }
    // Inputs first (they exist from step 0), then outputs in node order, so that an
    // in-place output finds its input's range already made.
    for t in &graph.tensors {
        if t.role == Role::Input && graph.is_planned(t.id) {
            if let Some((start, end)) = life_range(t.id) {
                own[t.id.index()] = Some(ranges.len());
                ranges.push(LiveRange {
                    start,
                    end,
                    size: reserved(graph, t.id),
                });
            }
        }
    }
    for (step, node) in graph.nodes.iter().enumerate() {
        let out = node.output;
        if !graph.is_planned(out) || own[out.index()].is_some() {
            continue;
        }
        let Some((start, end)) = life_range(out) else {
            continue;
        };
        let merge_into = node
            .inplace
            .then(|| node.inputs.first().copied())
            .flatten()
            .filter(|&input| {
                !keeps_output[input.index()]
                    && buffer_of.is_none_or(|b| b.get(input.index()) == b.get(out.index()))
                    && can_overwrite(graph, &lifetimes, step, input, out, &node.inputs)
            })
            .and_then(|input| own[input.index()]);
        match merge_into {
            Some(group) => {
                let range = &mut ranges[group];
                range.end = range.end.max(end);
                range.size = range.size.max(reserved(graph, out));
                own[out.index()] = Some(group);
                if let Some(&input) = node.inputs.first() {
                    inplace.push((out, input));
                }
            }
            None => {
                own[out.index()] = Some(ranges.len());
                ranges.push(LiveRange {
                    start,
                    end,
                    size: reserved(graph, out),
                });
            }
        }
    }
    // Planned tensors no node produces and that are not inputs (a validated graph has
    // none, but a range keeps them safe): live at step 0.
    for t in &graph.tensors {
        if graph.is_planned(t.id) && own[t.id.index()].is_none() {
            let (start, end) = life_range(t.id).unwrap_or((0, 1));
            own[t.id.index()] = Some(ranges.len());
            ranges.push(LiveRange {
                start,
                end,
                size: reserved(graph, t.id),
            });
        }
    }
    let group = graph
        .tensors
        .iter()
        .map(|t| graph.root_of(t.id).and_then(|root| own[root.index()]))
        .collect();
    GraphRanges {
        ranges,
        group,
        inplace,
    }
}

/// Bytes to reserve for a planned root (its binding size, see
/// [`crate::graph::extent`]); a validated graph never overflows, and an overflow would
/// surface as a range no buffer can hold.
fn reserved(graph: &Graph, id: TensorId) -> u64 {
    graph.reserved_size(id).unwrap_or(u64::MAX)
}

/// Whether node `step`'s output `out` may be written over `input` (its first input): both
/// are non-views of the same size, `input` dies at this step, `out` is born at it, and
/// no other input of the node is a view of `input` (it may be a transpose, read at
/// other indices; `input` itself read twice is fine for an elementwise op). The caller
/// also refuses an `input` whose memory holds an output.
fn can_overwrite(
    graph: &Graph,
    lifetimes: &Lifetimes,
    step: usize,
    input: TensorId,
    out: TensorId,
    inputs: &[TensorId],
) -> bool {
    let (Some(i), Some(o)) = (graph.tensor(input), graph.tensor(out)) else {
        return false;
    };
    graph.is_planned(input)
        && !i.is_view()
        && !o.is_view()
        && i.role != Role::Output
        && i.size == o.size
        && !inputs.contains(&out)
        && !inputs
            .iter()
            .skip(1)
            .any(|t| *t != input && graph.root_of(*t) == Some(input))
        && lifetimes
            .get(input)
            .is_some_and(|l| l.last as usize == step)
        && lifetimes.get(out).is_some_and(|l| l.first as usize == step)
}

/// Plans a graph's memory with an explicit budget. Ranges that do not fit below the
/// buffer type's max size in chunk 0 are planned again for chunk 1, and so on; a range
/// larger than the max size gets an oversized chunk of its own.
///
/// # Errors
/// As [`plan_graph_offline`].
pub(crate) fn plan_graph_offline_with(
    graph: &Graph,
    buffer_type: &BufferTypeDesc,
    strategy: Strategy,
    budget: &Budget,
) -> Result<Plan, PlanError> {
    graph.validate()?;
    let live = live_ranges_in(graph, None);
    let group_buffer = vec![0; live.ranges.len()];
    let types = std::slice::from_ref(buffer_type);
    assemble(&live, &group_buffer, types, &[0], strategy, budget)
}

/// Plans a graph over several buffers, as ggml's `reserve_n`: node `s`'s output goes to
/// buffer `node_buffer_ids[s]`, leaf `k` (the k-th graph input in tensor-id order, see
/// [`graph_leaves`](crate::plan::graph_leaves)) to `leaf_buffer_ids[k]`, a view to its
/// root's buffer. Each buffer is planned on its own with its type's alignment and max
/// size; an in-place output is merged only into an input of the same buffer. A buffer
/// whose type equals an earlier buffer's shares that buffer's memory (its tensors are
/// planned there, its own chunk list is empty and `same_as` names the earlier one).
///
/// ```
/// use wgalloc_plan::graph::{DType, GraphBuilder};
/// use wgalloc_plan::plan::offline::Strategy;
/// use wgalloc_plan::plan::{plan, BufferIds, BufferTypeDesc, PlanOptions, Planner};
/// let mut b = GraphBuilder::new("g");
/// let x = b.input("x", DType::F32, &[64]);
/// let y = b.node("neg", &[x], &[64], true);
/// let z = b.node("exp", &[y], &[64], true);
/// b.mark_output(z);
/// let graph = b.build().unwrap();
/// let types = [
///     BufferTypeDesc::new("gpu", 32, 1 << 20).unwrap(),
///     BufferTypeDesc::new("host", 64, 1 << 20).unwrap(),
/// ];
/// let ids = BufferIds { nodes: vec![0, 1], leaves: vec![0] };
/// let options = PlanOptions::with_planner(Planner::Offline(Strategy::Best)).buffer_ids(ids);
/// let plan = plan(&graph, &types, &options).unwrap(); // the public way in
/// assert_eq!(plan.placement(z).unwrap().buffer.0, 1);
/// assert_eq!(plan.inplace.len(), 1); // y over x (same buffer), not z over y
/// plan.verify(&graph).unwrap();
/// ```
///
/// # Errors
/// [`PlanError::InvalidGraph`]; [`PlanError::BufferIdCount`] if a list's length is not
/// the number of nodes or leaves; [`PlanError::UnknownBuffer`] for an id past the buffer
/// types (or any tensor to place with no buffer types); [`PlanError::SizeOverflow`].
pub(crate) fn plan_graph_offline_n(
    graph: &Graph,
    buffer_types: &[BufferTypeDesc],
    node_buffer_ids: &[usize],
    leaf_buffer_ids: &[usize],
    strategy: Strategy,
    budget: &Budget,
) -> Result<Plan, PlanError> {
    graph.validate()?;
    let leaves = graph_leaves(graph).len();
    check_buffer_ids(
        graph,
        leaves,
        node_buffer_ids,
        leaf_buffer_ids,
        buffer_types.len(),
    )?;
    plan_checked_graph_offline_n(
        graph,
        buffer_types,
        node_buffer_ids,
        leaf_buffer_ids,
        strategy,
        budget,
    )
}

/// [`plan_graph_offline_n`] of a graph that validates, with ids that
/// [`check_buffer_ids`] accepts (the graph allocator checks both itself first).
///
/// # Errors
/// [`PlanError::SizeOverflow`].
pub(crate) fn plan_checked_graph_offline_n(
    graph: &Graph,
    buffer_types: &[BufferTypeDesc],
    node_buffer_ids: &[usize],
    leaf_buffer_ids: &[usize],
    strategy: Strategy,
    budget: &Budget,
) -> Result<Plan, PlanError> {
    let leaves = graph_leaves(graph);
    let canonical = canonical_buffers(buffer_types);
    let mut buffer_of = vec![0usize; graph.tensors.len()];
    for (&leaf, &b) in leaves.iter().zip(leaf_buffer_ids) {
        buffer_of[leaf.index()] = canonical[b];
    }
    for (node, &b) in graph.nodes.iter().zip(node_buffer_ids) {
        if let Some(slot) = buffer_of.get_mut(node.output.index()) {
            *slot = canonical[b];
        }
    }
    let live = live_ranges_in(graph, Some(&buffer_of));
    let mut group_buffer = vec![0usize; live.ranges.len()];
    for (t, g) in live.group.iter().enumerate() {
        if let (Some(g), Some(root)) = (g, graph.root_of(TensorId(t as u32))) {
            group_buffer[*g] = buffer_of[root.index()];
        }
    }
    assemble(
        &live,
        &group_buffer,
        buffer_types,
        &canonical,
        strategy,
        budget,
    )
}

/// Where each group went: its buffer, chunk, offset and aligned size.
#[derive(Debug, Clone, Copy, Default)]
struct Spot {
    chunk: usize,
    offset: u64,
    size: u64,
}

/// Places every group in its (canonical) buffer and builds the plan.
fn assemble(
    live: &GraphRanges,
    group_buffer: &[usize],
    buffer_types: &[BufferTypeDesc],
    canonical: &[usize],
    strategy: Strategy,
    budget: &Budget,
) -> Result<Plan, PlanError> {
    let mut spots = vec![Spot::default(); live.ranges.len()];
    let mut buffers = Vec::with_capacity(buffer_types.len());
    for (b, buffer_type) in buffer_types.iter().enumerate() {
        if canonical[b] != b {
            buffers.push(BufferPlan {
                buffer_type: buffer_type.clone(),
                chunks: Vec::new(),
                same_as: Some(BufferId(canonical[b])),
            });
            continue;
        }
        let groups: Vec<usize> = (0..live.ranges.len())
            .filter(|&g| group_buffer[g] == b)
            .collect();
        let chunks = place_in_chunks(live, &groups, buffer_type, strategy, budget, &mut spots)?;
        buffers.push(BufferPlan {
            buffer_type: buffer_type.clone(),
            chunks,
            same_as: None,
        });
    }
    let placements = live
        .group
        .iter()
        .map(|g| {
            g.map(|g| Placement {
                buffer: BufferId(group_buffer[g]),
                chunk: spots[g].chunk,
                offset: spots[g].offset,
                size: spots[g].size,
            })
        })
        .collect();
    Ok(Plan {
        planner: strategy.name().to_string(),
        placements,
        buffers,
        inplace: live.inplace.clone(),
    })
}

/// Plans `groups` into chunks of one buffer type: the ranges that do not fit below the
/// max size in chunk 0 are planned again for chunk 1, and so on; a range larger than
/// the max size gets an oversized chunk of its own. Fills `spots` for those groups.
fn place_in_chunks(
    live: &GraphRanges,
    groups: &[usize],
    buffer_type: &BufferTypeDesc,
    strategy: Strategy,
    budget: &Budget,
    spots: &mut [Spot],
) -> Result<Vec<ChunkPlan>, PlanError> {
    let alignment = buffer_type.alignment();
    for &g in groups {
        spots[g].size =
            buffer_type
                .align_up(live.ranges[g].size)
                .ok_or_else(|| PlanError::SizeOverflow {
                    tensor: first_tensor_of(live, g),
                })?;
    }
    let mut chunks: Vec<ChunkPlan> = Vec::new();
    let mut pending: Vec<usize> = groups
        .iter()
        .copied()
        .filter(|&g| spots[g].size > 0 && spots[g].size <= buffer_type.max_size)
        .collect();
    while !pending.is_empty() {
        let sub: Vec<LiveRange> = pending.iter().map(|&g| live.ranges[g]).collect();
        let plan = plan_ranges_with(&sub, alignment, strategy, budget)?;
        let chunk = chunks.len();
        let mut rest = Vec::new();
        let mut size = 0u64;
        for (k, &g) in pending.iter().enumerate() {
            let end = plan.offsets[k].saturating_add(spots[g].size);
            if end <= buffer_type.max_size {
                spots[g].chunk = chunk;
                spots[g].offset = plan.offsets[k];
                size = size.max(end);
            } else {
                rest.push(g);
            }
        }
        if rest.len() == pending.len() {
            // Nothing fitted (no strategy leaves offset 0 empty, but never loop): the
            // first range goes alone at offset 0; it fits, being at most the max size.
            let g = rest.remove(0);
            spots[g].chunk = chunk;
            spots[g].offset = 0;
            size = spots[g].size;
        }
        chunks.push(ChunkPlan {
            size,
            oversized: false,
        });
        pending = rest;
    }
    for &g in groups {
        if spots[g].size > buffer_type.max_size {
            spots[g].chunk = chunks.len();
            spots[g].offset = 0;
            chunks.push(ChunkPlan {
                size: spots[g].size,
                oversized: true,
            });
        }
    }
    if chunks.is_empty() && !groups.is_empty() {
        chunks.push(ChunkPlan {
            size: 0,
            oversized: false,
        });
    }
    Ok(chunks)
}

/// A tensor whose memory is range `g` (for error messages).
fn first_tensor_of(live: &GraphRanges, g: usize) -> TensorId {
    let index = live.group.iter().position(|&x| x == Some(g)).unwrap_or(0);
    TensorId(u32::try_from(index).unwrap_or(u32::MAX))
}
