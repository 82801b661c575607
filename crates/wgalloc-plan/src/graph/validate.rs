//! `Graph::validate`: structural checks that every later layer relies on, in linear
//! time over compact per-tensor bytes (no per-tensor `Option`s, no hashing), filling
//! the [`GraphFacts`] (`facts.rs`) the planner reuses instead of walking the graph's
//! structs again.

use super::facts::{
    role_bits, GraphFacts, NodeFacts, K_HAS_PRODUCER, K_VIEW, ROLE_MASK, ROLE_WEIGHT,
};
use super::{Graph, GraphError, NodeId};

/// `GraphFacts::kind` bit, during validation: a node before the current one produced
/// the tensor.
const K_PRODUCED: u8 = 16;
/// `GraphFacts::kind` bit, during fast validation: a node read the tensor as an alias
/// of its root, before anyone knew whether a later node produces it.
const K_READ_AS_ALIAS: u8 = 32;

impl Graph {
    /// Checks that the graph is well formed: ids match positions, every id refers to a
    /// tensor, each tensor is produced at most once and before it is read,
    /// no node produces an input or weight, every intermediate/output non-view is
    /// produced, view chains end at a real root, and sizes match shapes without overflow;
    /// then that data-dependent lengths follow [`super::DynamicLen`]'s rules.
    ///
    /// # Errors
    /// The first problem found, as a [`GraphError`] naming the tensor or node.
    pub fn validate(&self) -> Result<(), GraphError> {
        self.check(false)?;
        self.check_dynamic()
    }

    /// [`Graph::validate`], keeping the compact facts the planner walks.
    ///
    /// # Errors
    /// As [`Graph::validate`].
    pub(crate) fn validated_facts(&self) -> Result<GraphFacts, GraphError> {
        let facts = self.check(true)?;
        self.check_dynamic()?;
        Ok(facts)
    }

    /// Validation in four linear passes (tensors, node outputs, nodes, tensors again
    /// over the compact bytes). Problems are reported in the order of the checks'
    /// documentation: tensor ids and sizes, then views, then nodes in execution order,
    /// then tensors never produced. With `facts`, also fills roots and the node lists.
    fn check(&self, facts: bool) -> Result<GraphFacts, GraphError> {
        // The fast pass skips the pass over node outputs; any problem (or a view read
        // as an alias and produced later) sends it to the exact pass, which finds the
        // first problem in the documented order.
        self.check_pass(facts, false)
            .or_else(|_| self.check_pass(facts, true))
    }

    /// One validation. `exact`: first mark every tensor some node produces (a view
    /// read before its producer runs is then an error at the read). Otherwise such a
    /// view is read as an alias of its root and marked, and producing a marked view
    /// later fails the pass (the exact pass then reports it at the read). The steps:
    /// [`Graph::tensor_pass`], [`Graph::node_pass`], [`Graph::check_all_produced`].
    fn check_pass(&self, facts: bool, exact: bool) -> Result<GraphFacts, GraphError> {
        let (mut kind, root) = self.tensor_pass(facts)?;
        if exact {
            for node in &self.nodes {
                if let Some(k) = kind.get_mut(node.output.index()) {
                    *k |= K_HAS_PRODUCER;
                }
            }
        }
        let (nodes, inputs) = self.node_pass(&mut kind, facts, exact)?;
        if !exact {
            // Every node produced its output: the producers are known now.
            for k in &mut kind {
                if *k & K_PRODUCED != 0 {
                    *k |= K_HAS_PRODUCER;
                }
            }
        }
        self.check_all_produced(&mut kind)?;
        for k in &mut kind {
            *k &= !(K_PRODUCED | K_READ_AS_ALIAS);
        }
        Ok(GraphFacts {
            root,
            kind,
            nodes,
            inputs,
        })
    }

    /// The pass over tensors: ids match positions, sizes are representable and
    /// bindable, view chains end at a real root. Returns each tensor's kind bits and,
    /// with `facts`, its root.
    fn tensor_pass(&self, facts: bool) -> Result<(Vec<u8>, Vec<u32>), GraphError> {
        const PENDING: u32 = u32::MAX;
        let n = self.tensors.len();
        let mut kind = vec![0u8; n];
        let mut root: Vec<u32> = Vec::with_capacity(if facts { n } else { 0 });
        // A view whose target is unknown or comes later (a cycle needs one).
        let mut view_problem = false;
        let mut forward_views = false;
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
            if elements
                .and_then(|e| e.checked_mul(tensor.dtype.size()))
                .is_none()
            {
                return Err(bad_size(tensor));
            }
            if super::extent::binding_size(tensor.size).is_none() {
                return Err(unbindable_size(tensor));
            }
            let mut k = role_bits(tensor.role);
            let r = match tensor.view_of {
                None => position as u32,
                Some(v) => {
                    k |= K_VIEW;
                    if v.index() >= n {
                        view_problem = true;
                        PENDING
                    } else if v.index() < position && !facts {
                        v.0
                    } else if v.index() < position && root[v.index()] != PENDING {
                        root[v.index()]
                    } else {
                        forward_views = true;
                        PENDING
                    }
                }
            };
            kind[position] = k;
            if facts {
                root.push(r);
            }
        }
        if forward_views && !view_problem {
            for (i, tensor) in self.tensors.iter().enumerate() {
                let pending = if facts {
                    root[i] == PENDING
                } else {
                    tensor.view_of.is_some_and(|v| v.index() >= i)
                };
                if pending {
                    match self.root_of(tensor.id) {
                        Some(r) if facts => root[i] = r.0,
                        Some(_) => {}
                        None => view_problem = true,
                    }
                }
            }
        }
        if view_problem {
            self.first_view_error()?;
        }
        Ok((kind, root))
    }

    /// The pass over nodes in execution order: known tensors, no input or weight
    /// produced, each tensor produced once and read after it is produced, in-place
    /// rules. Marks each output produced; with `facts`, returns the node lists.
    fn node_pass(
        &self,
        kind: &mut [u8],
        facts: bool,
        exact: bool,
    ) -> Result<(Vec<NodeFacts>, Vec<u32>), GraphError> {
        let n = self.tensors.len();
        let mut nodes = Vec::with_capacity(if facts { self.nodes.len() } else { 0 });
        let mut inputs = Vec::with_capacity(if facts { self.nodes.len() * 2 } else { 0 });
        for (step, node) in self.nodes.iter().enumerate() {
            if let Some(&input) = node.inputs.iter().find(|t| t.index() >= n) {
                return Err(GraphError::UnknownTensor {
                    context: node_context(step, &node.op),
                    tensor: input,
                });
            }
            let out = node.output.index();
            if out >= n {
                return Err(GraphError::UnknownTensor {
                    context: node_context(step, &node.op),
                    tensor: node.output,
                });
            }
            let out_kind = kind[out];
            if out_kind & (K_VIEW | ROLE_MASK) <= 1 {
                // Not a view, role input (0) or weight (1).
                return Err(self.produces_input_or_weight(step));
            }
            if out_kind & K_PRODUCED != 0 {
                return Err(self.produced_twice(step));
            }
            if node.inplace {
                self.check_inplace(step)?;
            }
            for &input in &node.inputs {
                if !self.is_available(input.index(), kind, exact) {
                    return Err(GraphError::ReadBeforeProduced {
                        node: NodeId(step as u32),
                        op: node.op.clone(),
                        tensor: input,
                        name: self.tensors[input.index()].name.clone(),
                    });
                }
            }
            if kind[out] & K_READ_AS_ALIAS != 0 {
                // Read before this node produced it: an error at the earlier read.
                return Err(GraphError::ReadBeforeProduced {
                    node: NodeId(step as u32),
                    op: node.op.clone(),
                    tensor: node.output,
                    name: self.tensors[out].name.clone(),
                });
            }
            kind[out] |= K_PRODUCED;
            if facts {
                inputs.extend(node.inputs.iter().map(|t| t.0));
                nodes.push(NodeFacts {
                    output: node.output.0,
                    inputs_end: u32::try_from(inputs.len()).unwrap_or(u32::MAX),
                    inplace: node.inplace,
                });
            }
        }
        Ok((nodes, inputs))
    }

    /// Every intermediate or output tensor is produced by a node, or is a view of
    /// memory available from outside.
    fn check_all_produced(&self, kind: &mut [u8]) -> Result<(), GraphError> {
        for i in 0..self.tensors.len() {
            // Intermediate (2) or output (3), not produced by any node.
            let needs_producer =
                kind[i] & (ROLE_MASK | K_PRODUCED) >= 2 && kind[i] & (ROLE_MASK | K_PRODUCED) <= 3;
            if needs_producer {
                // A view needs a producer only if its root is not available from outside.
                let from_outside = kind[i] & K_VIEW != 0 && self.is_available(i, kind, true);
                if !from_outside {
                    let tensor = &self.tensors[i];
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

    /// The first view problem, in tensor order: an unknown target or a cyclic chain.
    fn first_view_error(&self) -> Result<(), GraphError> {
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

    #[cold]
    fn produces_input_or_weight(&self, step: usize) -> GraphError {
        let node = &self.nodes[step];
        let output = &self.tensors[node.output.index()];
        GraphError::ProducesInputOrWeight {
            node: NodeId(step as u32),
            op: node.op.clone(),
            tensor: output.id,
            name: output.name.clone(),
            role: output.role.name(),
        }
    }

    #[cold]
    fn produced_twice(&self, step: usize) -> GraphError {
        let node = &self.nodes[step];
        let output = &self.tensors[node.output.index()];
        let first = self.nodes[..step]
            .iter()
            .position(|earlier| earlier.output == node.output)
            .unwrap_or(step);
        GraphError::ProducedTwice {
            tensor: output.id,
            name: output.name.clone(),
            first: NodeId(first as u32),
            second: NodeId(step as u32),
        }
    }

    /// An in-place node needs a first input of its output's size.
    fn check_inplace(&self, step: usize) -> Result<(), GraphError> {
        let node = &self.nodes[step];
        let output = &self.tensors[node.output.index()];
        match node.inputs.first().map(|t| &self.tensors[t.index()]) {
            None => Err(GraphError::BadNode {
                node: NodeId(step as u32),
                op: node.op.clone(),
                problem: "marked in-place but has no input".into(),
            }),
            Some(input) if input.size != output.size => Err(GraphError::BadNode {
                node: NodeId(step as u32),
                op: node.op.clone(),
                problem: format!(
                    "marked in-place but its output is {} bytes and its first input {} bytes",
                    output.size, input.size
                ),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Whether tensor `id` can be read now: it (or, for a view not yet produced
    /// itself, its root) is an input, a weight, or already produced. With `known`
    /// producers, a view some node produces is not readable before that node; else
    /// the views passed through are marked [`K_READ_AS_ALIAS`].
    fn is_available(&self, id: usize, kind: &mut [u8], known: bool) -> bool {
        let mut current = id;
        for _ in 0..=self.tensors.len() {
            let k = kind[current];
            if k & K_PRODUCED != 0 {
                return true;
            }
            if k & K_VIEW == 0 {
                return k & ROLE_MASK <= ROLE_WEIGHT;
            }
            if known && k & K_HAS_PRODUCER != 0 {
                return false;
            }
            if !known {
                kind[current] |= K_READ_AS_ALIAS;
            }
            // A view produced by no node aliases its root directly.
            match self.tensors[current].view_of {
                Some(next) if next.index() < kind.len() => current = next.index(),
                _ => return false,
            }
        }
        false
    }
}

fn node_context(step: usize, op: &str) -> String {
    format!("node {step} ({op})")
}

#[cold]
fn unbindable_size(tensor: &super::Tensor) -> GraphError {
    GraphError::BadSize {
        tensor: tensor.id,
        name: tensor.name.clone(),
        problem: format!(
            "{} bytes overflow 64 bits when rounded up to whole 4-byte words",
            tensor.size
        ),
    }
}

#[cold]
fn bad_size(tensor: &super::Tensor) -> GraphError {
    GraphError::BadSize {
        tensor: tensor.id,
        name: tensor.name.clone(),
        problem: format!(
            "shape {:?} x {} bytes overflows 64 bits",
            tensor.shape,
            tensor.dtype.size()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::synthetic::{chain, random_graph, transformer};
    use crate::graph::{DType, GraphBuilder, Role, TensorId};

    /// The validator before the compact rewrite, kept to pin that the errors (and
    /// their order) did not change.
    mod reference {
        use crate::graph::{Graph, GraphError, NodeId, Role, TensorId};

        pub struct Ref<'a>(pub &'a Graph);

        impl std::ops::Deref for Ref<'_> {
            type Target = Graph;
            fn deref(&self) -> &Graph {
                self.0
            }
        }

        pub fn validate(graph: &Graph) -> Result<(), GraphError> {
            Ref(graph).validate()
        }

        impl Ref<'_> {
            /// Checks that the graph is well formed: ids match positions, every id refers to a
            /// tensor, each tensor is produced at most once and before it is read,
            /// no node produces an input or weight, every intermediate/output non-view is
            /// produced, view chains end at a real root, and sizes match shapes without overflow.
            ///
            /// # Errors
            /// The first problem found, as a [`GraphError`] naming the tensor or node.
            fn validate(&self) -> Result<(), GraphError> {
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
                    if matches!(output.role, Role::Input | Role::Weight) && output.view_of.is_none()
                    {
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
    }

    /// SplitMix64 for the mutations.
    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// One random structural damage (or none) to a valid graph.
    fn mutate(graph: &mut Graph, state: &mut u64) {
        let n = graph.tensors.len() as u64;
        let pick = |state: &mut u64, bound: u64| (next(state) % bound.max(1)) as usize;
        let any_id = |state: &mut u64| TensorId((next(state) % (n + 2)) as u32);
        match next(state) % 9 {
            0 => {}
            1 if !graph.nodes.is_empty() => {
                let s = pick(state, graph.nodes.len() as u64);
                let node = &mut graph.nodes[s];
                if !node.inputs.is_empty() {
                    let k = pick(state, node.inputs.len() as u64);
                    node.inputs[k] = any_id(state);
                }
            }
            2 if !graph.nodes.is_empty() => {
                let s = pick(state, graph.nodes.len() as u64);
                graph.nodes[s].output = any_id(state);
            }
            3 => {
                let i = pick(state, n);
                graph.tensors[i].view_of = Some(any_id(state));
            }
            4 => {
                let i = pick(state, n);
                graph.tensors[i].role =
                    [Role::Input, Role::Weight, Role::Intermediate, Role::Output][pick(state, 4)];
            }
            5 => {
                let i = pick(state, n);
                graph.tensors[i].id = any_id(state);
            }
            6 => {
                let i = pick(state, n);
                graph.tensors[i].shape = vec![u64::MAX / 2, 3];
            }
            7 if !graph.nodes.is_empty() => {
                let s = pick(state, graph.nodes.len() as u64);
                let node = &mut graph.nodes[s];
                node.inplace = !node.inplace;
            }
            _ if graph.nodes.len() > 1 => {
                let s = pick(state, graph.nodes.len() as u64 - 1);
                graph.nodes.swap(s, s + 1);
            }
            _ => {}
        }
    }

    #[test]
    fn errors_and_their_order_match_the_reference_validator() {
        let mut state = 7u64;
        let (mut valid, mut invalid) = (0, 0);
        for seed in 0..1500u64 {
            let mut graph = random_graph(seed, 24).expect("valid");
            for _ in 0..1 + seed % 3 {
                mutate(&mut graph, &mut state);
            }
            let expected = reference::validate(&graph);
            assert_eq!(graph.validate(), expected, "seed {seed}: {graph:?}");
            match graph.validated_facts() {
                Ok(facts) => {
                    valid += 1;
                    for t in &graph.tensors {
                        assert_eq!(
                            Some(TensorId(facts.root[t.id.index()])),
                            graph.root_of(t.id)
                        );
                    }
                    for (s, node) in graph.nodes.iter().enumerate() {
                        let ids: Vec<u32> = node.inputs.iter().map(|t| t.0).collect();
                        assert_eq!(facts.node_inputs(s), ids.as_slice());
                        assert_eq!(facts.nodes[s].output, node.output.0);
                        assert_eq!(facts.nodes[s].inplace, node.inplace);
                    }
                }
                Err(e) => {
                    invalid += 1;
                    assert_eq!(Err(e), expected);
                }
            }
        }
        assert!(
            valid > 200 && invalid > 200,
            "{valid} valid, {invalid} invalid"
        );
    }

    #[test]
    fn views_of_later_tensors_get_their_roots() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[4]);
        let y = b.node("neg", &[x], &[4], false);
        b.mark_output(y);
        let mut graph = b.build().expect("valid");
        // t2 -> t3 -> t1 (a view that names a later view).
        let mut v2 = graph.tensors[1].clone();
        v2.id = TensorId(2);
        v2.view_of = Some(TensorId(3));
        v2.role = Role::Intermediate;
        let mut v3 = v2.clone();
        v3.id = TensorId(3);
        v3.view_of = Some(y);
        graph.tensors.push(v2);
        graph.tensors.push(v3);
        let facts = graph.validated_facts().expect("valid");
        assert_eq!(facts.root, vec![0, 1, 1, 1]);
        assert_eq!(facts.kind[2] & K_VIEW, K_VIEW);
        // Closing the loop is a cycle.
        graph.tensors[3].view_of = Some(TensorId(2));
        assert!(matches!(
            graph.validate(),
            Err(GraphError::ViewCycle {
                tensor: TensorId(2),
                ..
            })
        ));
    }

    #[test]
    fn view_read_before_the_node_that_produces_it_is_an_error_at_the_read() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[4]);
        let a = b.node("relu", &[x], &[4], false);
        let v = b.view("v", a, &[2, 2]);
        let c = b.node("neg", &[v], &[2, 2], false);
        b.push_node("view", &[a], v, false, &[]);
        b.mark_output(c);
        let graph = b.graph().clone();
        assert_eq!(graph.validate(), reference::validate(&graph));
        assert!(matches!(
            graph.validate(),
            Err(GraphError::ReadBeforeProduced { node: NodeId(1), tensor, .. }) if tensor == v
        ));
    }

    #[test]
    fn synthetic_graphs_validate_with_compact_facts() {
        for graph in [chain(50).expect("valid"), transformer(50).expect("valid")] {
            assert_eq!(reference::validate(&graph), Ok(()));
            let facts = graph.validated_facts().expect("valid");
            assert_eq!(facts.nodes.len(), 50);
            assert!(facts.kind.iter().all(|k| k & K_PRODUCED == 0));
        }
    }
}
