//! `Graph::validate`: structural checks that every later layer relies on.

use super::{Graph, GraphError, NodeId, Role, TensorId};

impl Graph {
    /// Checks that the graph is well formed: ids match positions, every id refers to a
    /// tensor, each tensor is produced at most once and before it is read,
    /// no node produces an input or weight, every intermediate/output non-view is
    /// produced, view chains end at a real root, and sizes match shapes without overflow.
    ///
    /// # Errors
    /// The first problem found, as a [`GraphError`] naming the tensor or node.
    pub fn validate(&self) -> Result<(), GraphError> {
        self.validate_tensors()?;
        self.validate_views()?;
        self.validate_nodes()
    }

    fn validate_tensors(&self) -> Result<(), GraphError> {
        for (position, tensor) in self.tensors.iter().enumerate() {
            if tensor.id.index() != position {
                return Err(GraphError::IdMismatch {
                    position,
                    id: u64::from(tensor.id.0),
                });
            }
            let elements = tensor
                .shape
                .iter()
                .try_fold(1u64, |acc, &dim| acc.checked_mul(dim));
            let expected = elements.and_then(|n| n.checked_mul(tensor.dtype.size()));
            if expected.is_none() {
                return Err(GraphError::BadSize {
                    tensor: tensor.id,
                    name: tensor.name.clone(),
                    problem: format!(
                        "shape {:?} x {} bytes overflows 64 bits",
                        tensor.shape,
                        tensor.dtype.size()
                    ),
                });
            }
        }
        Ok(())
    }

    fn validate_views(&self) -> Result<(), GraphError> {
        for tensor in &self.tensors {
            let Some(first) = tensor.view_of else {
                continue;
            };
            if self.tensor(first).is_none() {
                return Err(GraphError::UnknownTensor {
                    context: format!("view tensor {} ({})", tensor.id, tensor.name),
                    tensor: first,
                });
            }
            if self.root_of(tensor.id).is_none() {
                return Err(GraphError::ViewCycle {
                    tensor: tensor.id,
                    name: tensor.name.clone(),
                });
            }
        }
        Ok(())
    }

    fn validate_nodes(&self) -> Result<(), GraphError> {
        let mut producer: Vec<Option<NodeId>> = vec![None; self.tensors.len()];
        let mut has_producer = vec![false; self.tensors.len()];
        for node in &self.nodes {
            if let Some(slot) = has_producer.get_mut(node.output.index()) {
                *slot = true;
            }
        }
        for (step, node) in self.nodes.iter().enumerate() {
            let id = NodeId(step as u32);
            let context = || format!("node {step} ({})", node.op);
            for &input in &node.inputs {
                if self.tensor(input).is_none() {
                    return Err(GraphError::UnknownTensor {
                        context: context(),
                        tensor: input,
                    });
                }
            }
            let Some(output) = self.tensor(node.output) else {
                return Err(GraphError::UnknownTensor {
                    context: context(),
                    tensor: node.output,
                });
            };
            if matches!(output.role, Role::Input | Role::Weight) && output.view_of.is_none() {
                return Err(GraphError::ProducesInputOrWeight {
                    node: id,
                    op: node.op.clone(),
                    tensor: output.id,
                    name: output.name.clone(),
                    role: output.role.name(),
                });
            }
            if let Some(first) = producer[output.id.index()] {
                return Err(GraphError::ProducedTwice {
                    tensor: output.id,
                    name: output.name.clone(),
                    first,
                    second: id,
                });
            }
            if node.inplace {
                let first_input = node.inputs.first().and_then(|&t| self.tensor(t));
                match first_input {
                    None => {
                        return Err(GraphError::BadNode {
                            node: id,
                            op: node.op.clone(),
                            problem: "marked in-place but has no input".into(),
                        })
                    }
                    Some(input) if input.size != output.size => {
                        return Err(GraphError::BadNode {
                            node: id,
                            op: node.op.clone(),
                            problem: format!(
                                "marked in-place but its output is {} bytes and its first input {} bytes",
                                output.size, input.size
                            ),
                        })
                    }
                    Some(_) => {}
                }
            }
            // Inputs must be available: provided from outside or produced earlier.
            for &input in &node.inputs {
                if !self.is_available(input, &producer, &has_producer) {
                    let tensor = &self.tensors[input.index()];
                    return Err(GraphError::ReadBeforeProduced {
                        node: id,
                        op: node.op.clone(),
                        tensor: input,
                        name: tensor.name.clone(),
                    });
                }
            }
            producer[output.id.index()] = Some(id);
        }
        for tensor in &self.tensors {
            let needs_producer = matches!(tensor.role, Role::Intermediate | Role::Output);
            if needs_producer && producer[tensor.id.index()].is_none() {
                // A view needs a producer only if its root is not available from outside.
                let from_outside = tensor.view_of.is_some()
                    && self.is_available(tensor.id, &producer, &has_producer);
                if !from_outside {
                    return Err(GraphError::NeverProduced {
                        tensor: tensor.id,
                        name: tensor.name.clone(),
                        role: tensor.role.name(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether a tensor can be read now: it (or, for a view not yet produced itself,
    /// its root) is an input, a weight, or already produced.
    fn is_available(
        &self,
        id: TensorId,
        producer: &[Option<NodeId>],
        has_producer: &[bool],
    ) -> bool {
        let mut current = id;
        for _ in 0..=self.tensors.len() {
            let tensor = &self.tensors[current.index()];
            if producer[current.index()].is_some() {
                return true;
            }
            match tensor.view_of {
                // A view produced by no node aliases its root directly.
                Some(next) if !has_producer[current.index()] => current = next,
                Some(_) => return false,
                None => return matches!(tensor.role, Role::Input | Role::Weight),
            }
        }
        false
    }
}
