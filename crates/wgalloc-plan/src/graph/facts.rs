//! [`GraphFacts`]: what validation learns about a graph, in compact arrays the planner
//! walks instead of the graph's structs.

use super::Role;

/// `GraphFacts::kind` bits: the role in the low two bits...
pub(crate) const ROLE_MASK: u8 = 3;
/// ...the tensor is a view...
pub(crate) const K_VIEW: u8 = 4;
/// ...some node names it as its output...
pub(crate) const K_HAS_PRODUCER: u8 = 8;
// (Bits 16 and 32 are validation's own, see `validate.rs`.)

/// Role bits of an input, a weight, an intermediate and an output.
pub(crate) const ROLE_INPUT: u8 = 0;
/// See [`ROLE_INPUT`].
pub(crate) const ROLE_WEIGHT: u8 = 1;
/// See [`ROLE_INPUT`].
pub(crate) const ROLE_INTERMEDIATE: u8 = 2;
/// See [`ROLE_INPUT`].
pub(crate) const ROLE_OUTPUT: u8 = 3;

pub(crate) fn role_bits(role: Role) -> u8 {
    match role {
        Role::Input => ROLE_INPUT,
        Role::Weight => ROLE_WEIGHT,
        Role::Intermediate => ROLE_INTERMEDIATE,
        Role::Output => ROLE_OUTPUT,
    }
}

/// One node in compact form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    /// The output tensor's index.
    pub output: u32,
    /// One past the node's last input in [`GraphFacts::inputs`] (its first is the
    /// previous node's end, 0 for node 0).
    pub inputs_end: u32,
    /// The node may write in place over its first input.
    pub inplace: bool,
}

/// What validation learns about a graph, in arrays indexed by tensor id or step, so
/// that the planner's hot loops touch a few bytes per tensor and node instead of the
/// graph's `Tensor`/`Node` structs and their heap-allocated input lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GraphFacts {
    /// The root of every tensor (itself for a non-view).
    pub root: Vec<u32>,
    /// Per tensor: role bits, [`K_VIEW`], [`K_HAS_PRODUCER`].
    pub kind: Vec<u8>,
    /// Per node, in execution order.
    pub nodes: Vec<NodeFacts>,
    /// Every node's inputs (tensor indices), node after node.
    pub inputs: Vec<u32>,
}

impl GraphFacts {
    /// The inputs of the node at `step`.
    #[cfg(test)]
    pub fn node_inputs(&self, step: usize) -> &[u32] {
        let start = match step.checked_sub(1) {
            Some(prev) => self.nodes[prev].inputs_end as usize,
            None => 0,
        };
        &self.inputs[start..self.nodes[step].inputs_end as usize]
    }
}
