//! [`PlanOptions`] and [`plan`]: one entry point for planning a graph, with every choice
//! in one options struct (planner, buffer types, buffer ids, capacity, time limit)
//! instead of a family of functions told apart by suffixes.

use std::time::Duration;

use super::offline::{plan_graph_offline_n, Budget};
use super::{
    BufferTypeDesc, GraphAllocator, IntervalPlan, IntervalProblem, Plan, PlanError, Planner,
};
use crate::graph::Graph;

/// Which buffer each tensor goes to, as ggml's `reserve_n` takes them: node `s`'s output
/// in `nodes[s]`, leaf `k` (the k-th graph input in tensor-id order,
/// [`super::graph_leaves`]) in `leaves[k]`. Ids index the buffer types given to [`plan`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BufferIds {
    /// One buffer id per node.
    pub nodes: Vec<usize>,
    /// One buffer id per leaf.
    pub leaves: Vec<usize>,
}

/// How to plan a graph. `PlanOptions::default()` is the CLI's default: the `best`
/// planner ([`Planner::BEST`]), every tensor in buffer 0, no capacity, no time limit
/// (deterministic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// The planner (`--planner`).
    pub planner: Planner,
    /// Which buffer each tensor goes to; `None`: all in buffer 0.
    pub buffer_ids: Option<BufferIds>,
    /// Wall-clock time the offline search may take; `None`: a fixed work budget, so the
    /// plan is deterministic.
    pub time_limit: Option<Duration>,
    /// Interval problems: the memory the plan should fit in. The offline planners stop
    /// improving once a plan fits it (and search at it rather than at the lower bound);
    /// [`plan_intervals`] returns the best plan found even when it does not fit, so the
    /// caller can report it. Graphs ignore it: a buffer type's max size bounds every
    /// chunk.
    pub capacity: Option<u64>,
    /// The offline search's work budgets; `None`: [`Budget::default`]. A deadline of
    /// its own wins over `time_limit`.
    pub budget: Option<Budget>,
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            planner: Planner::BEST,
            buffer_ids: None,
            time_limit: None,
            capacity: None,
            budget: None,
        }
    }
}

impl PlanOptions {
    /// The default options with this planner.
    pub fn with_planner(planner: Planner) -> PlanOptions {
        PlanOptions {
            planner,
            ..PlanOptions::default()
        }
    }

    /// The same options with a time limit for the offline search.
    pub fn time_limit(mut self, limit: Duration) -> PlanOptions {
        self.time_limit = Some(limit);
        self
    }

    /// The same options with per-node and per-leaf buffer ids.
    pub fn buffer_ids(mut self, ids: BufferIds) -> PlanOptions {
        self.buffer_ids = Some(ids);
        self
    }

    /// The same options aiming at a capacity (interval problems).
    pub fn capacity(mut self, capacity: u64) -> PlanOptions {
        self.capacity = Some(capacity);
        self
    }

    /// The same options with explicit work budgets for the offline search.
    pub fn budget(mut self, budget: Budget) -> PlanOptions {
        self.budget = Some(budget);
        self
    }

    /// The budget the offline search gets: the work budgets asked for (or the
    /// default), with the time limit's deadline unless they carry one.
    fn work_budget(&self) -> Budget {
        let deadline = self
            .time_limit
            .and_then(|limit| Budget::with_time_limit(limit).deadline);
        let budget = self.budget.unwrap_or_default();
        Budget {
            deadline: budget.deadline.or(deadline),
            ..budget
        }
    }
}

/// Plans `graph` over `buffer_types` (buffer id = position) as `options` say: the one
/// entry point for planning a graph, whatever the planner (`PlanOptions::default()`:
/// [`Planner::BEST`]; [`super::plan_graph`] is ggml's walk alone). One buffer
/// (the first type) without buffer ids, several as ggml's `reserve_n` with them. The
/// `naive` planner takes no buffer ids (every tensor gets memory of its own in buffer 0).
///
/// ```
/// use wgalloc_plan::graph::{DType, GraphBuilder};
/// // A small MLP: x -> relu(x·w1) -> ·w2.
/// let mut b = GraphBuilder::new("mlp");
/// let x = b.input("x", DType::F32, &[64, 256]);
/// let w1 = b.weight("w1", DType::F32, &[256, 1024]);
/// let w2 = b.weight("w2", DType::F32, &[1024, 256]);
/// let h = b.node("matmul", &[x, w1], &[64, 1024], false);
/// let a = b.node("relu", &[h], &[64, 1024], true);
/// let y = b.node("matmul", &[a, w2], &[64, 256], false);
/// b.mark_output(y);
/// let graph = b.build().unwrap();
/// use wgalloc_plan::plan::{lower_bounds, plan, BufferTypeDesc, PlanOptions};
/// let storage = BufferTypeDesc::new("gpu", 32, 1 << 30).unwrap();
/// let p = plan(&graph, &[storage], &PlanOptions::default()).unwrap();
/// p.verify(&graph).unwrap();
/// ```
///
/// # Errors
/// [`PlanError::UnknownBuffer`] with no buffer types (or an id past them, or buffer ids
/// for the naive planner); [`PlanError::BufferIdCount`] for id lists of the wrong
/// length; what the planner returns ([`PlanError::InvalidGraph`], size overflows).
pub fn plan(
    graph: &Graph,
    buffer_types: &[BufferTypeDesc],
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    let first = buffer_types.first().ok_or(PlanError::UnknownBuffer {
        buffer: 0,
        count: 0,
    })?;
    let Some(ids) = &options.buffer_ids else {
        return options
            .planner
            .plan_graph_within(graph, first, &options.work_budget());
    };
    match options.planner {
        Planner::Naive => Err(PlanError::UnknownBuffer {
            buffer: ids
                .nodes
                .iter()
                .chain(&ids.leaves)
                .copied()
                .max()
                .unwrap_or(0),
            count: 1,
        }),
        Planner::Ggml => {
            let mut galloc = GraphAllocator::new(buffer_types.to_vec());
            galloc.reserve_n(graph, &ids.nodes, &ids.leaves)?;
            galloc.alloc_graph(graph)
        }
        Planner::Offline(strategy) => plan_graph_offline_n(
            graph,
            buffer_types,
            &ids.nodes,
            &ids.leaves,
            strategy,
            &options.work_budget(),
        ),
    }
}

/// Plans an interval problem as `options` say (planner, capacity to aim at, time
/// limit, budgets), every offset a multiple of `alignment`. The result is the best
/// plan found, which may exceed `options.capacity`: compare its `peak`.
///
/// ```
/// use wgalloc_plan::plan::{plan_intervals, IntervalProblem, PlanOptions};
/// let problem = IntervalProblem::parse_csv("t", "a,0,2,8\nb,1,3,8\nc,2,4,8\n").unwrap();
/// let p = plan_intervals(&problem, 1, &PlanOptions::default().capacity(16)).unwrap();
/// assert_eq!(p.peak, 16);
/// problem.verify(&p).unwrap();
/// ```
///
/// # Errors
/// [`PlanError::BadAlignment`]; [`PlanError::SizeOverflow`] when sizes overflow;
/// [`PlanError::UnknownBuffer`] for buffer ids (an interval problem has one memory).
pub fn plan_intervals(
    problem: &IntervalProblem,
    alignment: u64,
    options: &PlanOptions,
) -> Result<IntervalPlan, PlanError> {
    if options.buffer_ids.is_some() {
        return Err(PlanError::UnknownBuffer {
            buffer: 1,
            count: 1,
        });
    }
    options.planner.plan_intervals_within(
        problem,
        alignment,
        &options.work_budget(),
        options.capacity,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::synthetic::random_graph;
    use crate::plan::graph_leaves;

    fn types(n: usize) -> Vec<BufferTypeDesc> {
        (0..n)
            .map(|k| BufferTypeDesc::new(format!("b{k}"), 32, 1 << 20).expect("valid"))
            .collect()
    }

    #[test]
    fn one_buffer_plans_as_the_planner_does() {
        let graph = random_graph(7, 20).expect("graph");
        for planner in Planner::all() {
            let direct = planner.plan_graph(&graph, &types(1)[0]).expect("plans");
            let via = plan(&graph, &types(1), &PlanOptions::with_planner(planner)).expect("plans");
            assert_eq!(via, direct, "{}", planner.name());
        }
    }

    #[test]
    fn buffer_ids_place_each_tensor_in_its_buffer() {
        let graph = random_graph(11, 20).expect("graph");
        let ids = BufferIds {
            nodes: (0..graph.nodes.len()).map(|s| s % 2).collect(),
            leaves: vec![1; graph_leaves(&graph).len()],
        };
        for planner in [Planner::Ggml, Planner::BEST] {
            let p = plan(
                &graph,
                &types(2),
                &PlanOptions::with_planner(planner).buffer_ids(ids.clone()),
            )
            .expect("plans");
            p.verify(&graph).expect("verifies");
            for (s, node) in graph.nodes.iter().enumerate() {
                if let (true, Some(placement)) =
                    (graph.is_planned(node.output), p.placement(node.output))
                {
                    // In place over an input: the input's buffer.
                    let inplace = p.inplace.iter().any(|&(o, _)| o == node.output);
                    if !inplace {
                        assert_eq!(placement.buffer.0, s % 2, "{}", planner.name());
                    }
                }
            }
        }
    }

    #[test]
    fn refusals_are_typed() {
        let graph = random_graph(3, 10).expect("graph");
        assert!(matches!(
            plan(&graph, &[], &PlanOptions::default()),
            Err(PlanError::UnknownBuffer { .. })
        ));
        let ids = BufferIds {
            nodes: vec![0; graph.nodes.len()],
            leaves: vec![0; graph_leaves(&graph).len()],
        };
        assert!(matches!(
            plan(
                &graph,
                &types(1),
                &PlanOptions::with_planner(Planner::Naive).buffer_ids(ids)
            ),
            Err(PlanError::UnknownBuffer { .. })
        ));
        let short = BufferIds {
            nodes: vec![0],
            leaves: vec![],
        };
        assert!(matches!(
            plan(
                &graph,
                &types(2),
                &PlanOptions::with_planner(Planner::Ggml).buffer_ids(short)
            ),
            Err(PlanError::BufferIdCount { .. })
        ));
    }
}
