//! Tensors that come out empty at run time (a data-dependent length of 0): which
//! nodes of a phase run and which are skipped. Pure CPU; shared by
//! [`super::GraphContext`] and the CPU reference [`super::evaluate`] so both follow
//! the same rule.
//!
//! A node whose output has 0 elements is skipped: there is nothing to compute and
//! wgpu cannot bind an empty range. Its output stays empty, so the nodes after it over
//! that tensor are skipped too. A node whose output has elements but reads an empty
//! tensor cannot run (its kernel would bind an empty range) and is refused with
//! [`RuntimeError::EmptyOperand`].

use std::ops::Range;

use super::RuntimeError;
use crate::graph::{Graph, Node, TensorId};

/// Whether `id`'s root is a resolved tensor of 0 bytes.
fn is_empty(graph: &Graph, id: TensorId) -> bool {
    graph
        .root_of(id)
        .and_then(|root| graph.tensor(root))
        .is_some_and(|t| t.dynamic.is_none() && t.size == 0)
}

/// The nodes of `steps` (all of whose tensors are resolved) that run, in order: those
/// whose output has elements.
///
/// # Errors
/// [`RuntimeError::EmptyOperand`] for a node with a non-empty output that reads an
/// empty tensor.
pub(crate) fn runnable_nodes(
    graph: &Graph,
    steps: Range<usize>,
) -> Result<Vec<Node>, RuntimeError> {
    let start = steps.start;
    let nodes = graph.nodes.get(steps).unwrap_or(&[]);
    let mut runnable = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        if is_empty(graph, node.output) {
            continue;
        }
        if let Some(&tensor) = node.inputs.iter().find(|&&t| is_empty(graph, t)) {
            return Err(RuntimeError::EmptyOperand {
                node: crate::graph::NodeId(u32::try_from(start + i).unwrap_or(u32::MAX)),
                op: node.op.clone(),
                tensor,
                name: graph
                    .tensor(tensor)
                    .map(|t| t.name.clone())
                    .unwrap_or_default(),
            });
        }
        runnable.push(node.clone());
    }
    Ok(runnable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    /// x → count_positive → compact → scale, then count_positive of the compacted
    /// tensor, with the count resolved to `len`.
    fn graph(len: u64) -> (Graph, TensorId) {
        let mut b = GraphBuilder::new("empty");
        let x = b.input("x", DType::F32, &[8]);
        let count = b.node("count_positive", &[x], &[1], false);
        let kept = b.dynamic_node("compact", &[x, count], count, Some(8), &[]);
        let scaled = b.dynamic_node("scale", &[kept], count, Some(8), &[2.0]);
        b.mark_output(scaled);
        let recount = b.node("count_positive", &[kept], &[1], false);
        b.mark_output(recount);
        let graph = b.build().expect("valid");
        let resolved = graph
            .resolve_lengths(|c| (c == count).then_some(len))
            .expect("resolves");
        (resolved, kept)
    }

    #[test]
    fn nodes_with_an_empty_output_are_skipped_and_the_rest_run() {
        let (g, _) = graph(3);
        assert_eq!(runnable_nodes(&g, 0..4).expect("all run").len(), 4);
        let (g, _) = graph(0);
        let run = runnable_nodes(&g, 0..3).expect("compact and scale skipped");
        assert_eq!(
            run.iter().map(|n| n.op.as_str()).collect::<Vec<_>>(),
            ["count_positive"]
        );
    }

    #[test]
    fn a_non_empty_output_over_an_empty_tensor_is_refused_with_the_node_and_tensor() {
        let (g, kept) = graph(0);
        assert!(matches!(
            runnable_nodes(&g, 0..4),
            Err(RuntimeError::EmptyOperand { node: crate::graph::NodeId(3), tensor, .. }) if tensor == kept
        ));
    }
}
