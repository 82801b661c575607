//! Lifetimes of planned tensors, in node steps, following the trace format's rules.

use super::{Graph, Role, TensorId};

/// The steps over which a planned (non-view, non-weight) tensor's memory must hold
/// its value: `[first, last]`, both inclusive. Step `i` is node `i`'s execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// First step the memory is live (its producer's step, or 0 for inputs).
    pub first: u32,
    /// Last step the memory is live (its last reader through any view; the last
    /// step for outputs and for tensors read by nobody, which live at their producer).
    pub last: u32,
}

impl Lifetime {
    /// Whether the two lifetimes share a step.
    pub fn overlaps(&self, other: &Lifetime) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Lifetimes of every tensor of a graph, indexed by tensor id (`None` for tensors that
/// are not planned: weights and views).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifetimes {
    /// `by_tensor[i]` is the lifetime of tensor `i`'s memory, if the planner places it.
    pub by_tensor: Vec<Option<Lifetime>>,
    /// Number of steps (nodes) in the graph.
    pub steps: u32,
}

impl Lifetimes {
    /// Computes lifetimes for a validated graph (see [`Graph::validate`]). Tensors that
    /// are never used by any node (an input nobody reads) get a lifetime at step 0.
    pub fn of(graph: &Graph) -> Lifetimes {
        let steps = graph.nodes.len() as u32;
        let last_step = steps.saturating_sub(1);
        let mut by_tensor: Vec<Option<Lifetime>> = graph
            .tensors
            .iter()
            .map(|t| {
                (t.view_of.is_none() && t.role != Role::Weight)
                    .then_some(Lifetime { first: 0, last: 0 })
            })
            .collect();
        let root = roots(graph);
        let mut produced = vec![false; graph.tensors.len()];
        for (step, node) in graph.nodes.iter().enumerate() {
            let step = step as u32;
            let out_root = root[node.output.index()];
            if let Some(Some(life)) = by_tensor.get_mut(out_root.index()) {
                if !produced[out_root.index()]
                    && graph.tensors[out_root.index()].role != Role::Input
                {
                    produced[out_root.index()] = true;
                    life.first = step;
                    life.last = step;
                } else {
                    life.last = life.last.max(step);
                }
            }
            for input in &node.inputs {
                let r = root[input.index()];
                if let Some(Some(life)) = by_tensor.get_mut(r.index()) {
                    life.last = life.last.max(step);
                }
            }
        }
        for tensor in &graph.tensors {
            if tensor.role == Role::Output {
                let r = root[tensor.id.index()];
                if let Some(Some(life)) = by_tensor.get_mut(r.index()) {
                    life.last = last_step.max(life.last);
                }
            }
        }
        Lifetimes { by_tensor, steps }
    }

    /// The lifetime of a tensor's memory, if it is planned.
    pub fn get(&self, id: TensorId) -> Option<Lifetime> {
        self.by_tensor.get(id.index()).copied().flatten()
    }
}

/// The root of every tensor (itself for non-views). Assumes a validated graph; a
/// broken chain maps to the tensor itself.
pub(crate) fn roots(graph: &Graph) -> Vec<TensorId> {
    graph
        .tensors
        .iter()
        .map(|t| graph.root_of(t.id).unwrap_or(t.id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn intermediate_lives_from_producer_to_last_reader_through_views() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[4]);
        let a = b.node("relu", &[x], &[4], false);
        let v = b.view("v", a, &[2, 2]);
        let c = b.node("neg", &[x], &[4], false);
        let d = b.node("add", &[v, c], &[2, 2], false);
        b.mark_output(d);
        let g = b.build().expect("valid");
        let l = Lifetimes::of(&g);
        assert_eq!(l.get(x), Some(Lifetime { first: 0, last: 1 }));
        assert_eq!(l.get(a), Some(Lifetime { first: 0, last: 2 }));
        assert_eq!(l.get(v), None);
        assert_eq!(l.get(d), Some(Lifetime { first: 2, last: 2 }));
    }

    #[test]
    fn outputs_live_to_the_last_step() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[4]);
        let a = b.node("relu", &[x], &[4], false);
        b.mark_output(a);
        let _c = b.node("neg", &[x], &[4], false);
        let g = b.build().expect("valid");
        let l = Lifetimes::of(&g);
        assert_eq!(l.get(a), Some(Lifetime { first: 0, last: 1 }));
    }
}
