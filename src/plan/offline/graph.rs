//! Offline planning of a whole graph: live ranges from the graph's lifetimes, in-place
//! outputs merged into the input they overwrite, then chunks by the buffer type's max
//! size.

use super::{plan_ranges_with, Budget, LiveRange, Strategy};
use crate::graph::{Graph, Lifetimes, Role, TensorId};
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
                    size: t.size,
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
                    && can_overwrite(graph, &lifetimes, step, input, out, &node.inputs)
            })
            .and_then(|input| own[input.index()]);
        match merge_into {
            Some(group) => {
                let range = &mut ranges[group];
                range.end = range.end.max(end);
                range.size = range.size.max(graph.tensors[out.index()].size);
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
                    size: graph.tensors[out.index()].size,
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
                size: t.size,
            });
        }
    }
    let group = graph
        .tensors
        .iter()
        .map(|t| graph.root_of(t.id).and_then(|root| own[root.index()]))
        .collect();
    Ok(GraphRanges {
        ranges,
        group,
        inplace,
    })
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

/// Plans a graph's memory in one buffer of type `buffer_type` with the default
/// [`Budget`].
///
/// # Errors
/// [`PlanError::InvalidGraph`] for a graph that does not validate;
/// [`PlanError::SizeOverflow`] if an aligned size or a sum of sizes overflows.
pub fn plan_graph_offline(
    graph: &Graph,
    buffer_type: &BufferTypeDesc,
    strategy: Strategy,
) -> Result<Plan, PlanError> {
    plan_graph_offline_with(graph, buffer_type, strategy, &Budget::default())
}

/// Plans a graph's memory with an explicit budget. Ranges that do not fit below the
/// buffer type's max size in chunk 0 are planned again for chunk 1, and so on; a range
/// larger than the max size gets an oversized chunk of its own.
///
/// # Errors
/// As [`plan_graph_offline`].
pub fn plan_graph_offline_with(
    graph: &Graph,
    buffer_type: &BufferTypeDesc,
    strategy: Strategy,
    budget: &Budget,
) -> Result<Plan, PlanError> {
    let live = graph_live_ranges(graph)?;
    let alignment = buffer_type.alignment();
    let mut aligned = Vec::with_capacity(live.ranges.len());
    for (g, range) in live.ranges.iter().enumerate() {
        let size = buffer_type
            .align_up(range.size)
            .ok_or_else(|| PlanError::SizeOverflow {
                tensor: first_tensor_of(&live, g),
            })?;
        aligned.push(size);
    }
    // (chunk, offset) per group.
    let mut spot: Vec<(usize, u64)> = vec![(0, 0); live.ranges.len()];
    let mut chunks: Vec<ChunkPlan> = Vec::new();
    let mut pending: Vec<usize> = (0..live.ranges.len())
        .filter(|&g| aligned[g] > 0 && aligned[g] <= buffer_type.max_size)
        .collect();
    while !pending.is_empty() {
        let sub: Vec<LiveRange> = pending.iter().map(|&g| live.ranges[g]).collect();
        let plan = plan_ranges_with(&sub, alignment, strategy, budget)?;
        let chunk = chunks.len();
        let fits =
            |k: usize| plan.offsets[k].saturating_add(aligned[pending[k]]) <= buffer_type.max_size;
        let mut rest = Vec::new();
        let mut size = 0u64;
        for (k, &g) in pending.iter().enumerate() {
            if fits(k) {
                spot[g] = (chunk, plan.offsets[k]);
                size = size.max(plan.offsets[k].saturating_add(aligned[g]));
            } else {
                rest.push(g);
            }
        }
        if rest.len() == pending.len() {
            // Nothing fitted (no strategy leaves offset 0 empty, but never loop): the
            // first range goes alone at offset 0; it fits, being at most the max size.
            let g = rest.remove(0);
            spot[g] = (chunk, 0);
            size = aligned[g];
        }
        chunks.push(ChunkPlan {
            size,
            oversized: false,
        });
        pending = rest;
    }
    for (g, &size) in aligned.iter().enumerate() {
        if size > buffer_type.max_size {
            spot[g] = (chunks.len(), 0);
            chunks.push(ChunkPlan {
                size,
                oversized: true,
            });
        }
    }
    if chunks.is_empty() && live.group.iter().any(Option::is_some) {
        chunks.push(ChunkPlan {
            size: 0,
            oversized: false,
        });
    }
    let placements = live
        .group
        .iter()
        .map(|g| {
            g.map(|g| Placement {
                buffer: BufferId(0),
                chunk: spot[g].0,
                offset: spot[g].1,
                size: aligned[g],
            })
        })
        .collect();
    Ok(Plan {
        planner: strategy.name().to_string(),
        placements,
        buffers: vec![BufferPlan {
            buffer_type: buffer_type.clone(),
            chunks,
            same_as: None,
        }],
        inplace: live.inplace,
    })
}

/// A tensor whose memory is range `g` (for error messages).
fn first_tensor_of(live: &GraphRanges, g: usize) -> TensorId {
    let index = live.group.iter().position(|&x| x == Some(g)).unwrap_or(0);
    TensorId(u32::try_from(index).unwrap_or(u32::MAX))
}
