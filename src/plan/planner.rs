//! [`Planner`]: every graph planner wgalloc has, chosen by name (the CLI's
//! `--planner`).

use std::fmt;

use super::{naive_plan, plan_graph, BufferTypeDesc, Plan, PlanError};
use crate::graph::Graph;

/// A graph planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Planner {
    /// ggml-alloc's walk in execution order (best-fit free blocks, in place over dying
    /// inputs): [`plan_graph`].
    Ggml,
    /// Every tensor in memory of its own: [`naive_plan`]. The baseline.
    Naive,
}

impl Planner {
    /// Every planner, default first.
    pub const ALL: &'static [Planner] = &[Planner::Ggml, Planner::Naive];

    /// The planner's name, as `--planner` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Planner::Ggml => "ggml",
            Planner::Naive => "naive",
        }
    }

    /// The planner with this name.
    ///
    /// # Errors
    /// [`PlanError::UnknownPlanner`] listing the known names.
    pub fn from_name(name: &str) -> Result<Planner, PlanError> {
        Planner::ALL
            .iter()
            .copied()
            .find(|p| p.name() == name)
            .ok_or_else(|| PlanError::UnknownPlanner {
                name: name.to_string(),
                known: Planner::names(),
            })
    }

    /// The known names, comma separated.
    pub fn names() -> String {
        Planner::ALL
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Plans `graph` in one buffer of `buffer_type`.
    ///
    /// # Errors
    /// Whatever the planner returns ([`PlanError::InvalidGraph`], size overflows).
    pub fn plan_graph(
        self,
        graph: &Graph,
        buffer_type: &BufferTypeDesc,
    ) -> Result<Plan, PlanError> {
        match self {
            Planner::Ggml => plan_graph(graph, buffer_type),
            Planner::Naive => naive_plan(graph, buffer_type),
        }
    }
}

impl fmt::Display for Planner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_planner_round_trips_its_name_and_unknown_names_list_the_known() {
        for p in Planner::ALL {
            assert_eq!(Planner::from_name(p.name()), Ok(*p));
        }
        match Planner::from_name("magic") {
            Err(PlanError::UnknownPlanner { name, known }) => {
                assert_eq!(name, "magic");
                assert!(known.contains("ggml") && known.contains("naive"));
            }
            other => panic!("{other:?}"),
        }
    }
}
