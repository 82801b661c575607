//! Lower bounds on the memory of any plan of a graph, and the naive size, exactly as
//! the trace format (traces/FORMAT.md) defines them: exact unpadded byte sizes.

use serde::Serialize;

use super::PlanError;
use crate::graph::{Graph, Lifetimes};

/// Lower bounds of the bytes any valid plan of a graph needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LowerBounds {
    /// The largest, over node steps, sum of the bytes of the planned tensors live at
    /// that step (inputs count from step 0).
    pub strict: u64,
    /// As `strict`, except that at an in-place (elementwise) step whose first input's
    /// root has its last use there, that input and the step's output count once.
    /// The bound to quote for planners that write in place where the graph allows.
    pub inplace_aware: u64,
}

/// The lower bounds of `graph` (see [`LowerBounds`]).
///
/// # Errors
/// [`PlanError::InvalidGraph`] for a graph that does not validate.
pub fn lower_bounds(graph: &Graph) -> Result<LowerBounds, PlanError> {
    graph.validate()?;
    let lifetimes = Lifetimes::of(graph);
    let steps = (lifetimes.steps as usize).max(1);
    // live[s] after the prefix sum: bytes live at step s.
    let mut delta = vec![0i128; steps + 1];
    for (i, life) in lifetimes.by_tensor.iter().enumerate() {
        if let Some(life) = life {
            let size = i128::from(graph.tensors[i].size);
            delta[life.first as usize] += size;
            delta[(life.last as usize + 1).min(steps)] -= size;
        }
    }
    let (mut live, mut strict, mut inplace_aware) = (0i128, 0i128, 0i128);
    for (s, d) in delta.iter().take(steps).enumerate() {
        live += d;
        strict = strict.max(live);
        inplace_aware = inplace_aware.max(live - inplace_saving(graph, &lifetimes, s));
    }
    let clamp = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
    Ok(LowerBounds {
        strict: clamp(strict),
        inplace_aware: clamp(inplace_aware),
    })
}

/// Bytes counted twice at step `s` when node `s` writes in place over its dying first
/// input's root (the smaller of the two sizes; they are equal for elementwise ops).
fn inplace_saving(graph: &Graph, lifetimes: &Lifetimes, s: usize) -> i128 {
    let Some(node) = graph.nodes.get(s) else {
        return 0;
    };
    let Some(&first) = node.inputs.first() else {
        return 0;
    };
    if !node.inplace {
        return 0;
    }
    let (Some(input_root), Some(output_root)) = (graph.root_of(first), graph.root_of(node.output))
    else {
        return 0;
    };
    if input_root == output_root {
        return 0;
    }
    let (Some(input_life), Some(output_life)) =
        (lifetimes.get(input_root), lifetimes.get(output_root))
    else {
        return 0;
    };
    if input_life.last as usize != s || output_life.first as usize != s {
        return 0;
    }
    let size = |t: crate::graph::TensorId| graph.tensors[t.index()].size;
    i128::from(size(input_root).min(size(output_root)))
}

/// Every planned tensor (inputs, intermediates, outputs; not views, not weights) in
/// memory of its own: the sum of their exact sizes.
pub fn naive_size(graph: &Graph) -> u64 {
    graph.planned_tensors().fold(0u64, |acc, t| {
        acc.saturating_add(graph.tensors[t.index()].size)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn inplace_step_counts_the_dying_input_once() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[25]);
        let y = b.node("relu", &[x], &[25], true);
        let z = b.node("neg", &[y], &[25], false);
        b.mark_output(z);
        let g = b.build().expect("valid");
        let bounds = lower_bounds(&g).expect("valid");
        assert_eq!(bounds.strict, 200);
        assert_eq!(bounds.inplace_aware, 200, "step 1 still needs y and z");
        assert_eq!(naive_size(&g), 300);
    }

    #[test]
    fn inplace_does_not_help_when_the_input_is_read_later() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[25]);
        let y = b.node("relu", &[x], &[25], true);
        let z = b.node("add", &[y, x], &[25], true);
        b.mark_output(z);
        let g = b.build().expect("valid");
        let bounds = lower_bounds(&g).expect("valid");
        assert_eq!(bounds.strict, 300);
        assert_eq!(bounds.inplace_aware, 200, "only z over y at step 1");
    }
}
