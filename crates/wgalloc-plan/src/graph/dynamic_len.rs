//! Data-dependent lengths ([`super::DynamicLen`]): their validation rules, and the
//! resolution of a graph once the counts are known.

use super::{DType, Graph, GraphError, NodeId, Role, TensorId};

impl Graph {
    /// Whether some tensor's length is known only at run time.
    pub fn has_dynamic_lengths(&self) -> bool {
        self.tensors.iter().any(|t| t.dynamic.is_some())
    }

    /// Checks every [`super::DynamicLen`]: the tensor is produced by a node, is not a
    /// view and no view aliases it, has rank 1 and shape `[max_len]` (`[0]` when
    /// unbounded); its count exists, is a one-element f32 non-view tensor, and is
    /// written by a node that runs before the node that writes the dynamic tensor.
    /// Called by [`Graph::validate`] after the structural checks.
    pub(crate) fn check_dynamic(&self) -> Result<(), GraphError> {
        if !self.has_dynamic_lengths() {
            return Ok(());
        }
        let mut producer: Vec<Option<NodeId>> = vec![None; self.tensors.len()];
        for (step, node) in self.nodes.iter().enumerate() {
            if let Some(slot) = producer.get_mut(node.output.index()) {
                slot.get_or_insert(NodeId(u32::try_from(step).unwrap_or(u32::MAX)));
            }
        }
        for t in &self.tensors {
            if let Some(of) = t.view_of {
                if self.tensor(of).is_some_and(|root| root.dynamic.is_some()) {
                    return Err(bad(self, of, format!("view {} aliases it", t.id)));
                }
            }
            let Some(dynamic) = t.dynamic else { continue };
            if t.view_of.is_some() {
                return Err(bad(self, t.id, "it is a view".into()));
            }
            if matches!(t.role, Role::Input | Role::Weight) {
                return Err(bad(self, t.id, format!("it is an {}", t.role.name())));
            }
            let bound = dynamic.max_len.unwrap_or(0);
            if t.shape != [bound] {
                return Err(bad(
                    self,
                    t.id,
                    format!("shape {:?} is not [{bound}] (its bound)", t.shape),
                ));
            }
            let count = self
                .tensor(dynamic.count)
                .ok_or_else(|| GraphError::UnknownTensor {
                    context: format!("count of dynamic tensor {}", t.id),
                    tensor: dynamic.count,
                })?;
            if count.dtype != DType::F32 || count.size != 4 || count.view_of.is_some() {
                return Err(bad(
                    self,
                    t.id,
                    format!(
                        "its count {} must be a one-element f32 non-view tensor",
                        count.id
                    ),
                ));
            }
            let count_producer = producer.get(count.id.index()).copied().flatten();
            let own = producer.get(t.id.index()).copied().flatten();
            match (count_producer, own) {
                (Some(c), Some(p)) if c < p => {}
                (_, Some(p)) => {
                    return Err(GraphError::CountTooLate {
                        tensor: t.id,
                        count: count.id,
                        producer: p,
                        count_producer,
                    })
                }
                // Validation proper already refused an unproduced intermediate.
                (_, None) => return Err(bad(self, t.id, "no node produces it".into())),
            }
        }
        Ok(())
    }

    /// The graph with the lengths of dynamic tensors filled in: `len_of(count)` gives
    /// the value of a count tensor when it is known. Every dynamic tensor whose count is
    /// known becomes an ordinary tensor of shape `[len]`; the others stay dynamic.
    ///
    /// # Errors
    /// [`GraphError::LengthAboveBound`] when a length exceeds its declared bound;
    /// [`GraphError::BadSize`] when the byte size overflows.
    pub fn resolve_lengths(
        &self,
        len_of: impl Fn(TensorId) -> Option<u64>,
    ) -> Result<Graph, GraphError> {
        let mut graph = self.clone();
        for t in &mut graph.tensors {
            let Some(dynamic) = t.dynamic else { continue };
            let Some(len) = len_of(dynamic.count) else {
                continue;
            };
            if let Some(max_len) = dynamic.max_len {
                if len > max_len {
                    return Err(GraphError::LengthAboveBound {
                        tensor: t.id,
                        len,
                        max_len,
                    });
                }
            }
            t.size = len
                .checked_mul(t.dtype.size())
                .ok_or_else(|| GraphError::BadSize {
                    tensor: t.id,
                    name: t.name.clone(),
                    problem: format!("{len} elements overflow 64-bit bytes"),
                })?;
            t.shape = vec![len];
            t.dynamic = None;
        }
        Ok(graph)
    }

    /// The first node at or after `from` that reads or writes a tensor whose length is
    /// still unknown; `None` when every node from `from` on can run.
    pub fn first_unresolved_node(&self, from: usize) -> Option<usize> {
        let dynamic = |id: TensorId| {
            self.root_of(id)
                .and_then(|r| self.tensor(r))
                .is_some_and(|t| t.dynamic.is_some())
        };
        self.nodes
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, n)| dynamic(n.output) || n.inputs.iter().any(|&i| dynamic(i)))
            .map(|(step, _)| step)
    }
}

fn bad(graph: &Graph, tensor: TensorId, problem: String) -> GraphError {
    GraphError::BadDynamicLen {
        tensor,
        name: graph
            .tensor(tensor)
            .map(|t| t.name.clone())
            .unwrap_or_default(),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;

    /// x → count_positive → compact(x, count) → scale, the compacted length bounded
    /// by `bound`.
    fn compacting(bound: Option<u64>) -> (GraphBuilder, TensorId, TensorId, TensorId) {
        let mut b = GraphBuilder::new("compacting");
        let x = b.input("x", DType::F32, &[16]);
        let count = b.node("count_positive", &[x], &[1], false);
        let kept = b.dynamic_node("compact", &[x, count], count, bound, &[]);
        let scaled = b.dynamic_node("scale", &[kept], count, bound, &[2.0]);
        b.mark_output(scaled);
        (b, count, kept, scaled)
    }

    #[test]
    fn a_compacting_graph_validates_with_and_without_a_bound() {
        for bound in [Some(16), None] {
            let (b, _, kept, _) = compacting(bound);
            let graph = b.build().expect("valid");
            assert!(graph.has_dynamic_lengths());
            assert_eq!(graph.tensors[kept.index()].shape, vec![bound.unwrap_or(0)]);
        }
    }

    #[test]
    fn resolving_lengths_gives_ordinary_tensors_of_the_counted_size() {
        let (b, count, kept, scaled) = compacting(None);
        let graph = b.build().expect("valid");
        assert_eq!(graph.first_unresolved_node(0), Some(1));
        let unresolved = graph.resolve_lengths(|_| None).expect("nothing known");
        assert_eq!(unresolved, graph);
        let resolved = graph
            .resolve_lengths(|c| (c == count).then_some(5))
            .expect("resolves");
        for t in [kept, scaled] {
            let tensor = &resolved.tensors[t.index()];
            assert_eq!((tensor.shape.clone(), tensor.size), (vec![5], 20));
            assert!(tensor.dynamic.is_none());
        }
        assert!(!resolved.has_dynamic_lengths());
        assert_eq!(resolved.first_unresolved_node(0), None);
        resolved.validate().expect("still valid");
    }

    #[test]
    fn a_length_above_the_bound_is_refused_with_the_numbers() {
        let (b, _, kept, _) = compacting(Some(4));
        let graph = b.build().expect("valid");
        assert_eq!(
            graph.resolve_lengths(|_| Some(9)),
            Err(GraphError::LengthAboveBound {
                tensor: kept,
                len: 9,
                max_len: 4
            })
        );
    }

    #[test]
    fn a_count_written_after_its_dynamic_tensor_is_refused() {
        let mut b = GraphBuilder::new("late");
        let x = b.input("x", DType::F32, &[8]);
        let kept = b.dynamic_node("compact", &[x], TensorId(3), None, &[]);
        let _ = b.node("relu", &[x], &[8], false);
        let count = b.node("count_positive", &[x], &[1], false);
        assert_eq!(count, TensorId(3));
        assert_eq!(
            b.build(),
            Err(GraphError::CountTooLate {
                tensor: kept,
                count,
                producer: NodeId(0),
                count_producer: Some(NodeId(2)),
            })
        );
    }

    #[test]
    fn a_count_that_is_not_one_f32_element_is_refused() {
        let mut b = GraphBuilder::new("wide count");
        let x = b.input("x", DType::F32, &[8]);
        let count = b.node("relu", &[x], &[2], false);
        b.dynamic_node("compact", &[x, count], count, None, &[]);
        assert!(matches!(b.build(), Err(GraphError::BadDynamicLen { .. })));
    }

    #[test]
    fn a_view_of_a_dynamic_tensor_and_a_wrong_bound_shape_are_refused() {
        let (mut b, _, kept, _) = compacting(Some(16));
        b.view("v", kept, &[16]);
        assert!(matches!(
            b.build(),
            Err(GraphError::BadDynamicLen { tensor, .. }) if tensor == kept
        ));
        let (b, _, kept, _) = compacting(Some(16));
        let mut graph = b.graph().clone();
        graph.tensors[kept.index()].shape = vec![4, 4];
        assert!(matches!(
            graph.validate(),
            Err(GraphError::BadDynamicLen { tensor, .. }) if tensor == kept
        ));
    }

    #[test]
    fn a_dynamic_input_is_refused() {
        let mut b = GraphBuilder::new("dyn input");
        let x = b.input("x", DType::F32, &[0]);
        let count = b.node("count_positive", &[x], &[1], false);
        let mut graph = b.graph().clone();
        graph.tensors[x.index()].dynamic = Some(crate::graph::DynamicLen {
            count,
            max_len: None,
        });
        assert!(matches!(
            graph.validate(),
            Err(GraphError::BadDynamicLen { tensor, .. }) if tensor == x
        ));
    }
}
