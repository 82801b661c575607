//! [`evaluate`]: the CPU reference of a graph whose lengths may depend on data, run
//! in the same phases as a [`super::GraphContext`].

use std::collections::HashMap;

use super::empty::runnable_nodes;
use super::graph_context::whole_count;
use super::RuntimeError;
use crate::exec::cpu_ref;
use crate::exec::TensorData;
use crate::graph::{DType, Graph, TensorId};

/// Evaluates `graph` on the CPU (see [`cpu_ref::evaluate`]): runs the nodes whose
/// lengths are known, reads the counts they wrote, resolves the lengths and goes on.
/// Returns the resolved graph and every tensor's value.
///
/// # Errors
/// [`RuntimeError::BadCount`] for a count that is not a whole number,
/// [`RuntimeError::Graph`] for a length above its bound,
/// [`RuntimeError::EmptyOperand`] for a node with a non-empty output over a tensor
/// that came out empty (as on the GPU), and the CPU reference's errors. A length of 0
/// gives empty tensors.
pub fn evaluate(
    graph: &Graph,
    values: &HashMap<TensorId, TensorData>,
) -> Result<(Graph, Vec<Option<TensorData>>), RuntimeError> {
    let mut known: HashMap<TensorId, u64> = HashMap::new();
    loop {
        let resolved = graph.resolve_lengths(|c| known.get(&c).copied())?;
        let end = resolved.first_unresolved_node(0);
        // The GPU's rule for empty tensors: nodes with an empty output are skipped
        // (their output is empty), a non-empty output over an empty tensor is refused.
        let prefix = Graph {
            name: resolved.name.clone(),
            tensors: resolved.tensors.clone(),
            nodes: runnable_nodes(&resolved, 0..end.unwrap_or(resolved.nodes.len()))?,
        };
        let mut result = cpu_ref::evaluate(&prefix, values)?;
        let Some(end) = end else {
            for t in &resolved.tensors {
                let produced = resolved.nodes.iter().any(|n| n.output == t.id);
                if let (true, true, Some(slot)) =
                    (produced, t.size == 0, result.get_mut(t.id.index()))
                {
                    slot.get_or_insert_with(|| empty_of(t.dtype));
                }
            }
            return Ok((resolved, result));
        };
        let before = known.len();
        for t in &resolved.tensors {
            let Some(dynamic) = t.dynamic else { continue };
            let value = result
                .get(dynamic.count.index())
                .and_then(|v| v.as_ref())
                .and_then(|v| v.as_f32())
                .and_then(|v| v.first().copied());
            if let Some(value) = value {
                known.insert(dynamic.count, whole_count(dynamic.count, value)?);
            }
        }
        if known.len() == before {
            return Err(RuntimeError::Graph(crate::graph::GraphError::BadNode {
                node: crate::graph::NodeId(u32::try_from(end).unwrap_or(u32::MAX)),
                op: resolved.nodes[end].op.clone(),
                problem: "its length is still unknown after the nodes before it ran".into(),
            }));
        }
    }
}

/// No values of `dtype`.
fn empty_of(dtype: DType) -> TensorData {
    match dtype {
        DType::U32 => TensorData::U32(Vec::new()),
        _ => TensorData::F32(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn the_reference_compacts_then_scales_the_kept_elements() {
        let mut b = GraphBuilder::new("compact");
        let x = b.input("x", DType::F32, &[6]);
        let count = b.node("count_positive", &[x], &[1], false);
        let kept = b.dynamic_node("compact", &[x, count], count, Some(6), &[]);
        let y = b.dynamic_node("scale", &[kept], count, Some(6), &[10.0]);
        b.mark_output(y);
        let graph = b.build().expect("valid");
        let values: HashMap<TensorId, TensorData> =
            [(x, TensorData::F32(vec![1.0, -2.0, 3.0, 0.0, -5.0, 0.5]))]
                .into_iter()
                .collect();
        let (resolved, result) = evaluate(&graph, &values).expect("runs");
        assert_eq!(resolved.tensors[y.index()].shape, vec![3]);
        assert_eq!(
            result[y.index()],
            Some(TensorData::F32(vec![10.0, 30.0, 5.0]))
        );
        assert_eq!(result[count.index()], Some(TensorData::F32(vec![3.0])));
    }
}
