//! Fault injection for testing the proofs: corrupt an honest plan so that one live
//! tensor is written over another. Used by tests and by `--inject-clobber` on the CLI
//! to show that [`crate::plan::Plan::verify`] and the GPU checksum run both catch it.

use crate::graph::{Graph, Lifetimes, TensorId};

use super::Plan;

/// A corruption made by [`inject_clobber`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clobber {
    /// The tensor still live whose memory is overwritten.
    pub victim: TensorId,
    /// The tensor moved onto the victim's memory.
    pub intruder: TensorId,
}

/// Moves one tensor onto the memory of another that is still live when the first is
/// written, so a later reader of the victim sees the intruder's bytes. The pair is the
/// first (in step order of the intruder) where both have the same reserved size, the
/// victim is produced before the intruder and read after it, no node reads or writes
/// both, neither has views, and afterwards no node binds two overlapping ranges other
/// than an in-place pair (so every dispatch stays legal for wgpu and only the data is
/// wrong). Returns `None` when the graph has no such pair.
pub fn inject_clobber(plan: &mut Plan, graph: &Graph) -> Option<Clobber> {
    let lifetimes = Lifetimes::of(graph);
    let has_view: Vec<bool> = {
        let mut v = vec![false; graph.tensors.len()];
        for t in &graph.tensors {
            if let Some(root) = t.view_of.and_then(|_| graph.root_of(t.id)) {
                v[root.index()] = true;
            }
        }
        v
    };
    let candidates: Vec<TensorId> = graph
        .planned_tensors()
        .filter(|t| !has_view[t.index()] && plan.placement(*t).is_some())
        .collect();
    let touched_together = |a: TensorId, b: TensorId| {
        graph.nodes.iter().any(|n| {
            let touches = |t: TensorId| n.output == t || n.inputs.contains(&t);
            touches(a) && touches(b)
        })
    };
    let mut intruders = candidates.clone();
    intruders.sort_by_key(|t| lifetimes.get(*t).map_or(u32::MAX, |l| l.first));
    for &intruder in &intruders {
        let (Some(li), Some(pi)) = (lifetimes.get(intruder), plan.placement(intruder)) else {
            continue;
        };
        for &victim in &candidates {
            let (Some(lv), Some(pv)) = (lifetimes.get(victim), plan.placement(victim)) else {
                continue;
            };
            if victim == intruder
                || pv.size != pi.size
                || pv.buffer != pi.buffer
                || lv.first >= li.first
                || lv.last <= li.first
                || touched_together(victim, intruder)
            {
                continue;
            }
            plan.placements[intruder.index()] = Some(pv);
            if every_node_binds_disjoint_ranges(plan, graph) {
                return Some(Clobber { victim, intruder });
            }
            plan.placements[intruder.index()] = Some(pi);
        }
    }
    None
}

/// Why [`inject_clobber`] finds no pair, for [`PlanError::NoClobberPair`](super::PlanError::NoClobberPair).
pub const NO_PAIR: &str =
    "every tensor written while another is live is read or written by the same node, \
     of another size, or a view's root (see `inject_clobber`); plant one with `plant_clobber`";

/// Plants a chosen clobber: `intruder` is placed at `victim`'s offset (same buffer and
/// chunk, the intruder's own size; the chunk grows if it must), so whatever the
/// intruder's producer writes lands on the victim. Unlike [`inject_clobber`] it checks
/// nothing beyond both being placed: a test picks a pair whose lifetimes overlap to
/// show that the proof catches it. Returns `None` when either tensor has no placement.
pub fn plant_clobber(plan: &mut Plan, victim: TensorId, intruder: TensorId) -> Option<Clobber> {
    let pv = plan.placement(victim)?;
    let pi = plan.placement(intruder)?;
    let moved = super::Placement {
        size: pi.size,
        ..pv
    };
    let chunk = plan
        .buffers
        .get_mut(pv.buffer.0)?
        .chunks
        .get_mut(pv.chunk)?;
    chunk.size = chunk.size.max(moved.end());
    plan.placements[intruder.index()] = Some(moved);
    Some(Clobber { victim, intruder })
}

/// Whether every node's tensors (through their roots) occupy pairwise disjoint memory,
/// except a recorded in-place output over its first input.
fn every_node_binds_disjoint_ranges(plan: &Plan, graph: &Graph) -> bool {
    graph.nodes.iter().all(|node| {
        let mut ranges: Vec<(TensorId, super::Placement)> = node
            .inputs
            .iter()
            .chain(std::iter::once(&node.output))
            .filter_map(|t| graph.root_of(*t))
            .filter_map(|root| plan.placement(root).map(|p| (root, p)))
            .collect();
        ranges.sort_by_key(|(t, _)| *t);
        ranges.dedup_by_key(|(t, _)| *t);
        let out = graph.root_of(node.output);
        let first = node.inputs.first().and_then(|t| graph.root_of(*t));
        ranges.iter().enumerate().all(|(i, (a, pa))| {
            ranges[i + 1..].iter().all(|(b, pb)| {
                let overlap = pa.buffer == pb.buffer
                    && pa.chunk == pb.chunk
                    && pa.offset < pb.end()
                    && pb.offset < pa.end();
                let inplace_pair = (Some(*a) == out && Some(*b) == first)
                    || (Some(*b) == out && Some(*a) == first);
                !overlap
                    || (inplace_pair
                        && plan
                            .inplace
                            .contains(&(out.unwrap_or(*a), first.unwrap_or(*b))))
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::plan::{plan_graph, BufferTypeDesc, PlanError};

    #[test]
    fn a_planted_clobber_overlaps_its_victim_and_fits_its_chunk() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[16]);
        let a = b.node("relu", &[x], &[16], false);
        let big = b.node("relu", &[x], &[64], false);
        let f = b.node("add", &[a, big], &[16], false);
        b.mark_output(f);
        let graph = b.build().expect("valid");
        let storage = BufferTypeDesc::new("s", 4, 1 << 20).expect("valid");
        let mut plan = plan_graph(&graph, &storage).expect("plans");
        let clobber = plant_clobber(&mut plan, a, big).expect("both placed");
        assert_eq!(clobber.victim, a);
        let (pa, pb) = (
            plan.placement(a).expect("a"),
            plan.placement(big).expect("big"),
        );
        assert_eq!(pa.offset, pb.offset);
        assert_eq!(pb.size, 256);
        assert!(plan.buffers[0].chunks[pa.chunk].size >= pb.end());
        assert!(matches!(
            plan.verify(&graph),
            Err(PlanError::Overlap { .. })
        ));
    }

    #[test]
    fn injected_clobber_is_caught_by_verify() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[16]);
        let a = b.node("relu", &[x], &[16], false);
        let c = b.node("relu", &[x], &[16], false);
        let e = b.node("relu", &[c], &[16], false);
        let f = b.node("add", &[a, e], &[16], false);
        b.mark_output(f);
        let graph = b.build().expect("valid");
        let storage = BufferTypeDesc::new("s", 4, 1 << 20).expect("valid");
        let mut plan = plan_graph(&graph, &storage).expect("plans");
        plan.verify(&graph).expect("honest plan verifies");
        // a is live from step 0 to 3; c is written at step 1 and no node touches both.
        let clobber = inject_clobber(&mut plan, &graph).expect("a pair exists");
        assert_eq!(
            clobber,
            Clobber {
                victim: a,
                intruder: c
            }
        );
        assert!(matches!(
            plan.verify(&graph),
            Err(PlanError::Overlap { .. })
        ));
    }

    #[test]
    fn a_chain_has_nothing_to_clobber() {
        let mut b = GraphBuilder::new("chain");
        let x = b.input("x", DType::F32, &[16]);
        let a = b.node("relu", &[x], &[16], false);
        let c = b.node("relu", &[a], &[16], false);
        b.mark_output(c);
        let graph = b.build().expect("valid");
        let storage = BufferTypeDesc::new("s", 4, 1 << 20).expect("valid");
        let mut plan = plan_graph(&graph, &storage).expect("plans");
        assert_eq!(inject_clobber(&mut plan, &graph), None);
    }
}
