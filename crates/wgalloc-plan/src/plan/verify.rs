//! [`Plan::verify`]: the proof obligation of every planner. O(n log n): a sweep over the
//! steps keeping, per chunk, the live byte ranges in an ordered map.

use std::collections::BTreeMap;

use super::{Placement, Plan, PlanError};
use crate::graph::{Graph, Lifetime, Lifetimes, NodeId, TensorId};

/// Which tensors a plan must place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coverage {
    /// Every planned tensor of the graph ([`Plan::verify`]).
    EveryPlannedTensor,
    /// Only those it places ([`Plan::verify_placed`]).
    PlacedTensors,
}

/// Live ranges of one chunk: `(offset, tensor) -> end`. Ranges in the map never
/// overlap, so checking the two neighbours of a new range is enough.
type LiveRanges = BTreeMap<(u64, u32), u64>;

impl Plan {
    /// Checks the plan against the graph it was made for:
    /// * every planned tensor (non-view, non-weight) has a placement (a plan of some
    ///   tensors only, such as the weights a context allocator placed, is checked with
    ///   [`Plan::verify_placed`]);
    /// * a view's placement is its root's;
    /// * each placement names an existing buffer and chunk, starts at a multiple of the
    ///   buffer type's alignment, reserves at least the tensor's size, and ends inside
    ///   its chunk;
    /// * a chunk is at most the buffer type's max size unless marked oversized, and an
    ///   oversized chunk holds at most one tensor;
    /// * each in-place pair `(output, input)` is legal: the node producing `output` may
    ///   run in place, its first input's root is `input`, `input` dies there and
    ///   `output` is born there, no other input of the node is a view of `input`,
    ///   `input`'s memory holds no graph output, and both start at the same offset of
    ///   the same chunk;
    /// * no two tensors live at a common step overlap in one chunk, except a legal
    ///   in-place pair. Placed tensors that are not planned (weights in a context
    ///   plan) are live at every step.
    ///
    /// # Errors
    /// The first violation: [`PlanError::WrongGraph`], [`PlanError::Missing`],
    /// [`PlanError::Misaligned`], [`PlanError::OutOfBounds`],
    /// [`PlanError::ChunkTooLarge`], [`PlanError::OversizedChunkShared`],
    /// [`PlanError::BadInplace`], or [`PlanError::Overlap`] naming both tensors.
    pub fn verify(&self, graph: &Graph) -> Result<(), PlanError> {
        self.verify_checked(graph, Coverage::EveryPlannedTensor)
    }

    /// [`Plan::verify`] for a plan that places only some tensors of the graph (the
    /// weights [`crate::plan::plan_weights`] placed, a subset given to
    /// [`crate::plan::alloc_ctx_tensors`]): every rule holds for the tensors it places,
    /// and the tensors it leaves out are not an error.
    ///
    /// # Errors
    /// As [`Plan::verify`], less [`PlanError::Missing`] for an unplaced tensor.
    pub fn verify_placed(&self, graph: &Graph) -> Result<(), PlanError> {
        self.verify_checked(graph, Coverage::PlacedTensors)
    }

    fn verify_checked(&self, graph: &Graph, coverage: Coverage) -> Result<(), PlanError> {
        if self.placements.len() != graph.tensors.len() {
            return Err(PlanError::WrongGraph {
                planned: self.placements.len(),
                actual: graph.tensors.len(),
            });
        }
        graph.validate()?;
        self.verify_with(graph, &Lifetimes::of(graph), coverage)
    }

    /// [`Plan::verify`] (or [`Plan::verify_placed`]) for a validated graph whose
    /// lifetimes are known.
    pub(crate) fn verify_with(
        &self,
        graph: &Graph,
        lifetimes: &Lifetimes,
        coverage: Coverage,
    ) -> Result<(), PlanError> {
        if self.placements.len() != graph.tensors.len() {
            return Err(PlanError::WrongGraph {
                planned: self.placements.len(),
                actual: graph.tensors.len(),
            });
        }
        let root = super::walk::roots(graph);
        self.check_placements(graph, &root, coverage)?;
        self.check_chunks()?;
        let inplace_of = self.check_inplace(graph, lifetimes, &root)?;
        self.sweep(graph, lifetimes, &inplace_of)
    }

    fn check_placements(
        &self,
        graph: &Graph,
        root: &[u32],
        coverage: Coverage,
    ) -> Result<(), PlanError> {
        let partial = coverage == Coverage::PlacedTensors;
        for (i, t) in graph.tensors.iter().enumerate() {
            let id = t.id;
            let placement = self.placements[i];
            if t.view_of.is_some() {
                let r = root[i] as usize;
                if placement != self.placements[r] {
                    return Err(PlanError::Missing {
                        tensor: id,
                        problem: format!("view's placement {placement:?} is not its root t{r}'s"),
                    });
                }
                if let Some(p) = placement {
                    check_binding_fits(graph, id, &p)?;
                }
                continue;
            }
            let Some(p) = placement else {
                if !partial && graph.is_planned(id) {
                    return Err(PlanError::Missing {
                        tensor: id,
                        problem: "planned tensor has no placement".into(),
                    });
                }
                continue;
            };
            let buffer = self
                .buffers
                .get(p.buffer.0)
                .ok_or_else(|| PlanError::Missing {
                    tensor: id,
                    problem: format!("buffer {} does not exist", p.buffer.0),
                })?;
            let chunk = buffer
                .chunks
                .get(p.chunk)
                .ok_or_else(|| PlanError::Missing {
                    tensor: id,
                    problem: format!("chunk {} of buffer {} does not exist", p.chunk, p.buffer.0),
                })?;
            let alignment = buffer.buffer_type.alignment();
            if !p.offset.is_multiple_of(alignment) {
                return Err(PlanError::Misaligned {
                    tensor: id,
                    offset: p.offset,
                    alignment,
                });
            }
            check_binding_fits(graph, id, &p)?;
            match p.offset.checked_add(p.size) {
                Some(end) if end <= chunk.size => {}
                _ => {
                    return Err(PlanError::OutOfBounds {
                        tensor: id,
                        problem: format!(
                            "[{}, +{}) ends past chunk {} of buffer {} ({} bytes)",
                            p.offset, p.size, p.chunk, p.buffer.0, chunk.size
                        ),
                    })
                }
            }
        }
        Ok(())
    }

    fn check_chunks(&self) -> Result<(), PlanError> {
        for (b, buffer) in self.buffers.iter().enumerate() {
            for (c, chunk) in buffer.chunks.iter().enumerate() {
                if chunk.size > buffer.buffer_type.max_size && !chunk.oversized {
                    return Err(PlanError::ChunkTooLarge {
                        buffer: b,
                        chunk: c,
                        size: chunk.size,
                        max_size: buffer.buffer_type.max_size,
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks each in-place pair; returns, per tensor, the input it replaces.
    fn check_inplace(
        &self,
        graph: &Graph,
        lifetimes: &Lifetimes,
        root: &[u32],
    ) -> Result<Vec<Option<TensorId>>, PlanError> {
        let mut producer: Vec<Option<u32>> = vec![None; graph.tensors.len()];
        for (s, node) in graph.nodes.iter().enumerate() {
            producer[node.output.index()] = Some(s as u32);
        }
        let mut keeps_output = vec![false; graph.tensors.len()];
        for t in &graph.tensors {
            if t.role == crate::graph::Role::Output {
                keeps_output[root[t.id.index()] as usize] = true;
            }
        }
        let mut inplace_of = vec![None; graph.tensors.len()];
        for &(out, input) in &self.inplace {
            let Some(step) = producer.get(out.index()).copied().flatten() else {
                return Err(PlanError::Missing {
                    tensor: out,
                    problem: format!("in-place over {input}, but no node produces it"),
                });
            };
            let node = &graph.nodes[step as usize];
            let bad = |problem: String| PlanError::BadInplace {
                node: NodeId(step),
                problem,
            };
            if !node.inplace {
                return Err(bad(format!(
                    "{out} placed over {input}, but the op may not run in place"
                )));
            }
            let first_root = node.inputs.first().map(|t| root[t.index()]);
            if first_root != Some(input.0) {
                return Err(bad(format!(
                    "{out} placed over {input}, which is not the root of its first input"
                )));
            }
            if lifetimes.get(input).map(|l| l.last) != Some(step) {
                return Err(bad(format!(
                    "{out} placed over {input}, which is still read after step {step}"
                )));
            }
            if lifetimes.get(out).map(|l| l.first) != Some(step) {
                return Err(bad(format!(
                    "{out} placed over {input}, but {out}'s memory is written before step {step}"
                )));
            }
            if keeps_output.get(input.index()).copied().unwrap_or(true) {
                return Err(bad(format!(
                    "{out} placed over {input}, whose memory holds a graph output"
                )));
            }
            let first = node.inputs.first().copied();
            if node
                .inputs
                .iter()
                .skip(1)
                .any(|t| Some(*t) != first && root[t.index()] == input.0)
            {
                return Err(bad(format!(
                    "{out} placed over {input}, which the node also reads through a view"
                )));
            }
            let (Some(po), Some(pi)) =
                (self.placements[out.index()], self.placements[input.index()])
            else {
                return Err(bad(format!("{out} or {input} has no placement")));
            };
            if (po.buffer, po.chunk, po.offset) != (pi.buffer, pi.chunk, pi.offset) {
                return Err(bad(format!(
                    "{out} at buffer {} chunk {} offset {} does not start where {input} does (buffer {} chunk {} offset {})",
                    po.buffer.0, po.chunk, po.offset, pi.buffer.0, pi.chunk, pi.offset
                )));
            }
            inplace_of[out.index()] = Some(input);
        }
        Ok(inplace_of)
    }

    fn sweep(
        &self,
        graph: &Graph,
        lifetimes: &Lifetimes,
        inplace_of: &[Option<TensorId>],
    ) -> Result<(), PlanError> {
        let steps = lifetimes.steps.max(1) as usize;
        let whole = Lifetime {
            first: 0,
            last: steps as u32 - 1,
        };
        // Memory owners (non-views with a placement and some bytes), bucketed by the
        // step they start and the step they end.
        let mut starts: Vec<Vec<u32>> = vec![Vec::new(); steps];
        let mut ends: Vec<Vec<u32>> = vec![Vec::new(); steps];
        let mut held: Vec<Vec<usize>> = self
            .buffers
            .iter()
            .map(|b| vec![0; b.chunks.len()])
            .collect();
        for (i, t) in graph.tensors.iter().enumerate() {
            let Some(p) = self.placements[i] else {
                continue;
            };
            if t.view_of.is_some() {
                continue;
            }
            if p.size == 0 {
                // Zero bytes occupy nothing: not even an oversized chunk's one slot.
                continue;
            }
            if inplace_of[i].is_none() {
                held[p.buffer.0][p.chunk] += 1;
            }
            let life = lifetimes.get(t.id).unwrap_or(whole);
            let (first, last) = (life.first as usize, (life.last as usize).min(steps - 1));
            starts[first.min(steps - 1)].push(i as u32);
            ends[last].push(i as u32);
        }
        for (b, buffer) in self.buffers.iter().enumerate() {
            for (c, chunk) in buffer.chunks.iter().enumerate() {
                if chunk.oversized && held[b][c] > 1 {
                    return Err(PlanError::OversizedChunkShared {
                        buffer: b,
                        chunk: c,
                        tensors: held[b][c],
                    });
                }
            }
        }
        let mut live: Vec<Vec<LiveRanges>> = self
            .buffers
            .iter()
            .map(|b| vec![LiveRanges::new(); b.chunks.len()])
            .collect();
        let mut removed = vec![false; graph.tensors.len()];
        for step in 0..steps {
            // Plain starters first, so they are also checked against the inputs that
            // in-place outputs are about to replace.
            for pass in [false, true] {
                for &t in &starts[step] {
                    let replaces = inplace_of[t as usize];
                    if replaces.is_some() != pass {
                        continue;
                    }
                    let p = self.placements[t as usize].unwrap_or(ZERO);
                    if let Some(input) = replaces {
                        if let Some(q) = self.placements[input.index()] {
                            if (q.buffer, q.chunk) == (p.buffer, p.chunk) && !removed[input.index()]
                            {
                                live[q.buffer.0][q.chunk].remove(&(q.offset, input.0));
                                removed[input.index()] = true;
                            }
                        }
                    }
                    self.insert(graph, &mut live[p.buffer.0][p.chunk], t, p, step as u32)?;
                }
            }
            for &t in &ends[step] {
                if !removed[t as usize] {
                    let p = self.placements[t as usize].unwrap_or(ZERO);
                    live[p.buffer.0][p.chunk].remove(&(p.offset, t));
                    removed[t as usize] = true;
                }
            }
        }
        Ok(())
    }

    fn insert(
        &self,
        graph: &Graph,
        ranges: &mut LiveRanges,
        t: u32,
        p: Placement,
        step: u32,
    ) -> Result<(), PlanError> {
        let end = p.end();
        let before = ranges.range(..=(p.offset, u32::MAX)).next_back();
        let after = ranges.range((p.offset, u32::MAX)..).next();
        let clash = match (before, after) {
            (Some((&(_, other), &other_end)), _) if other_end > p.offset => Some(other),
            (_, Some((&(other_offset, other), _))) if other_offset < end => Some(other),
            _ => None,
        };
        if let Some(other) = clash {
            let name = |id: u32| graph.tensors[id as usize].name.clone();
            return Err(PlanError::Overlap {
                first: TensorId(other),
                first_name: name(other),
                second: TensorId(t),
                second_name: name(t),
                buffer: p.buffer.0,
                chunk: p.chunk,
                step,
            });
        }
        ranges.insert((p.offset, t), end);
        Ok(())
    }
}

const ZERO: Placement = Placement {
    buffer: super::BufferId(0),
    chunk: 0,
    offset: 0,
    size: 0,
};

/// A tensor's binding ([`crate::graph::extent`]: its bytes in its root, rounded up to
/// whole words) must lie inside the placement of its root.
fn check_binding_fits(graph: &Graph, id: TensorId, p: &Placement) -> Result<(), PlanError> {
    let extent = graph.extent(id).ok_or_else(|| PlanError::Missing {
        tensor: id,
        problem: "its view chain has no root".into(),
    })?;
    match extent.binding_end() {
        Some(end) if end <= p.size => Ok(()),
        end => Err(PlanError::OutOfBounds {
            tensor: id,
            problem: format!(
                "{} bytes reserved, but its {}-byte extent binds {} bytes",
                p.size,
                extent.size,
                end.map_or_else(|| "an overflowing number of".to_string(), |e| e.to_string())
            ),
        }),
    }
}
