//! Counts and bytes of a graph's tensors by role, for `wgalloc graph`.

use serde::Serialize;

use super::{Graph, Role};

/// Count and total bytes of one kind of tensor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoleSummary {
    /// Number of tensors.
    pub count: u64,
    /// Sum of their byte sizes.
    pub bytes: u64,
}

impl RoleSummary {
    fn add(&mut self, size: u64) {
        self.count += 1;
        self.bytes = self.bytes.saturating_add(size);
    }
}

/// What a graph holds, by role. Views are counted apart (they own no memory).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GraphSummary {
    /// The graph's name.
    pub name: String,
    /// Number of nodes.
    pub nodes: u64,
    /// Number of tensors.
    pub tensors: u64,
    /// Graph inputs.
    pub input: RoleSummary,
    /// Weights (and views of weights).
    pub weight: RoleSummary,
    /// Intermediates that own memory.
    pub intermediate: RoleSummary,
    /// Outputs that own memory.
    pub output: RoleSummary,
    /// Views (no memory of their own).
    pub view: RoleSummary,
}

impl Graph {
    /// Counts and bytes by role.
    pub fn summary(&self) -> GraphSummary {
        let mut s = GraphSummary {
            name: self.name.clone(),
            nodes: self.nodes.len() as u64,
            tensors: self.tensors.len() as u64,
            ..GraphSummary::default()
        };
        for t in &self.tensors {
            let slot = if t.view_of.is_some() {
                &mut s.view
            } else {
                match t.role {
                    Role::Input => &mut s.input,
                    Role::Weight => &mut s.weight,
                    Role::Intermediate => &mut s.intermediate,
                    Role::Output => &mut s.output,
                }
            };
            slot.add(t.size);
        }
        s
    }
}
