//! [`Planner`]: every planner wgalloc has, chosen by name (the CLI's `--planner`), for
//! graphs and for lifetime-interval problems.
//!
//! **Naming.** Plan a graph with [`crate::plan::plan`] and [`crate::plan::PlanOptions`]:
//! the one entry point, whatever the planner. [`Planner::BEST`] (the offline `best`
//! strategy, never above ggml's walk) is the default of [`Planner::default`],
//! `PlanOptions::default()` and the CLI. [`crate::plan::plan_graph`] is not the general
//! entry: it is ggml's walk alone, what [`Planner::Ggml`] runs.

use std::fmt;

use super::offline::{interval_ranges, plan_graph_offline_with, plan_ranges_to, Budget, Strategy};
use super::{
    naive_plan, plan_graph, BufferTypeDesc, IntervalPlan, IntervalProblem, Plan, PlanError,
};
use crate::graph::{Graph, TensorId};

/// A planner. The default is [`Planner::BEST`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Planner {
    /// ggml-alloc's walk in execution order (best-fit free blocks, in place over dying
    /// inputs): [`plan_graph`]. For intervals: the same online walk in time order.
    Ggml,
    /// Every tensor in memory of its own: [`naive_plan`]. The baseline.
    Naive,
    /// An offline planner that sees every lifetime at once
    /// ([`crate::plan::offline`]).
    Offline(Strategy),
}

impl Default for Planner {
    /// [`Planner::BEST`].
    fn default() -> Planner {
        Planner::BEST
    }
}

impl Planner {
    /// The default planner (`best`): the offline search with every strategy, which
    /// also runs ggml's walk and keeps the smaller verified plan. What
    /// `PlanOptions::default()`, [`Planner::default`] and the CLI use.
    pub const BEST: Planner = Planner::Offline(Strategy::Best);

    /// Every planner: `ggml`, `naive`, then the offline strategies (`best`,
    /// [`Planner::BEST`], the default, among them).
    pub fn all() -> Vec<Planner> {
        let mut all = vec![Planner::Ggml, Planner::Naive];
        all.extend(Strategy::ALL.iter().copied().map(Planner::Offline));
        all
    }

    /// The planner's name, as `--planner` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Planner::Ggml => "ggml",
            Planner::Naive => "naive",
            Planner::Offline(strategy) => strategy.name(),
        }
    }

    /// The planner with this name.
    ///
    /// # Errors
    /// [`PlanError::UnknownPlanner`] listing the known names.
    pub fn from_name(name: &str) -> Result<Planner, PlanError> {
        Planner::all()
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| PlanError::UnknownPlanner {
                name: name.to_string(),
                known: Planner::names(),
            })
    }

    /// The known names, comma separated.
    pub fn names() -> String {
        Planner::all()
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Plans `graph` in one buffer of `buffer_type` with this planner (the entry point
    /// with every option is [`crate::plan::plan`]).
    ///
    /// # Errors
    /// Whatever the planner returns ([`PlanError::InvalidGraph`], size overflows).
    pub fn plan_graph(
        self,
        graph: &Graph,
        buffer_type: &BufferTypeDesc,
    ) -> Result<Plan, PlanError> {
        self.plan_graph_within(graph, buffer_type, &Budget::default())
    }

    /// Plans `graph` in one buffer of `buffer_type` within `budget` (the public entry
    /// point is [`crate::plan::plan`] with [`crate::plan::PlanOptions`]). `best` also
    /// runs ggml's walk and keeps whichever verified plan is smaller, so it is never
    /// above the ggml planner.
    pub(crate) fn plan_graph_within(
        self,
        graph: &Graph,
        buffer_type: &BufferTypeDesc,
        budget: &Budget,
    ) -> Result<Plan, PlanError> {
        match self {
            Planner::Ggml => plan_graph(graph, buffer_type),
            Planner::Naive => naive_plan(graph, buffer_type),
            Planner::Offline(Strategy::Best) => {
                let offline = plan_graph_offline_with(graph, buffer_type, Strategy::Best, budget)?;
                let ggml = plan_graph(graph, buffer_type)?;
                let offline_ok = offline.verify(graph).is_ok();
                Ok(if !offline_ok || ggml.total_size() < offline.total_size() {
                    ggml
                } else {
                    offline
                })
            }
            Planner::Offline(strategy) => {
                plan_graph_offline_with(graph, buffer_type, strategy, budget)
            }
        }
    }

    /// Plans an interval problem into one memory of at most `capacity` bytes, every
    /// offset a multiple of `alignment`.
    ///
    /// # Errors
    /// [`PlanError::BadAlignment`]; [`PlanError::SizeOverflow`] when sizes overflow;
    /// [`PlanError::OverCapacity`] when the plan needs more than `capacity`.
    pub fn plan_intervals(
        self,
        problem: &IntervalProblem,
        alignment: u64,
        capacity: u64,
    ) -> Result<IntervalPlan, PlanError> {
        let plan =
            self.plan_intervals_within(problem, alignment, &Budget::default(), Some(capacity))?;
        if plan.peak > capacity {
            return Err(PlanError::OverCapacity {
                planner: self.name(),
                needed: plan.peak,
                capacity,
            });
        }
        Ok(plan)
    }

    /// Plans an interval problem within `budget`, aiming at `capacity`, every offset a
    /// multiple of `alignment` (the public entry point is
    /// [`crate::plan::plan_intervals`]). The result is the best plan found, which may
    /// exceed `capacity`: compare its `peak`.
    pub(crate) fn plan_intervals_within(
        self,
        problem: &IntervalProblem,
        alignment: u64,
        budget: &Budget,
        capacity: Option<u64>,
    ) -> Result<IntervalPlan, PlanError> {
        if !alignment.is_power_of_two() {
            return Err(PlanError::BadAlignment { alignment });
        }
        let (offsets, peak) = match self {
            Planner::Ggml => super::interval_walk::online_walk(problem, alignment)?,
            Planner::Naive => stacked(problem, alignment)?,
            Planner::Offline(strategy) => {
                let ranges = interval_ranges(problem);
                let plan = plan_ranges_to(&ranges, alignment, strategy, budget, capacity)?;
                (plan.offsets, plan.peak)
            }
        };
        Ok(IntervalPlan {
            offsets,
            peak,
            planner: self.name().to_string(),
        })
    }
}

/// Every interval in memory of its own, one after another.
fn stacked(problem: &IntervalProblem, alignment: u64) -> Result<(Vec<u64>, u64), PlanError> {
    let mut offsets = Vec::with_capacity(problem.intervals.len());
    let mut end = 0u64;
    for (i, iv) in problem.intervals.iter().enumerate() {
        let overflow = || PlanError::SizeOverflow {
            tensor: TensorId(u32::try_from(i).unwrap_or(u32::MAX)),
        };
        let size = super::align_up(iv.size, alignment).ok_or_else(overflow)?;
        offsets.push(end);
        end = end.checked_add(size).ok_or_else(overflow)?;
    }
    Ok((offsets, end))
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
    fn best_is_the_default_everywhere_and_by_name() {
        assert_eq!(Planner::default(), Planner::BEST);
        assert_eq!(crate::plan::PlanOptions::default().planner, Planner::BEST);
        assert_eq!(Planner::from_name("best"), Ok(Planner::BEST));
        assert_eq!(Planner::BEST.name(), "best");
        assert!(Planner::all().contains(&Planner::BEST));
    }

    fn example() -> IntervalProblem {
        IntervalProblem::parse_csv(
            "x",
            "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n",
        )
        .expect("valid")
    }

    #[test]
    fn every_planner_round_trips_its_name_and_unknown_names_list_the_known() {
        for p in Planner::all() {
            assert_eq!(Planner::from_name(p.name()), Ok(p));
        }
        match Planner::from_name("magic") {
            Err(PlanError::UnknownPlanner { name, known }) => {
                assert_eq!(name, "magic");
                assert!(known.contains("ggml") && known.contains("best"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_planner_gives_a_verified_interval_plan_between_bound_and_naive() {
        let problem = example();
        for p in Planner::all() {
            let plan = p.plan_intervals(&problem, 1, u64::MAX).expect("plans");
            problem.verify(&plan).expect("verifies");
            assert!(plan.peak >= problem.lower_bound(), "{p}");
            assert!(plan.peak <= problem.naive_size(), "{p}");
        }
        let best = Planner::from_name("best").expect("exists");
        assert_eq!(best.plan_intervals(&problem, 1, 12).expect("fits").peak, 12);
    }

    #[test]
    fn the_online_walk_reuses_freed_memory_and_keeps_alignment() {
        let problem = example();
        let plan = Planner::Ggml
            .plan_intervals(&problem, 8, u64::MAX)
            .expect("plans");
        problem.verify(&plan).expect("verifies");
        assert!(plan.offsets.iter().all(|o| o.is_multiple_of(8)));
        // b2 starts when b1 ends and takes its place.
        assert_eq!(plan.offsets[1], plan.offsets[0]);
    }

    #[test]
    fn intervals_that_overflow_64_bits_are_an_error_for_every_planner() {
        let problem = IntervalProblem::parse_csv("x", "a,0,2,18446744073709551615\nb,0,2,1\n")
            .expect("valid rows");
        for p in Planner::all() {
            assert!(
                matches!(
                    p.plan_intervals(&problem, 1, u64::MAX),
                    Err(PlanError::SizeOverflow { .. })
                ),
                "{p}"
            );
        }
    }

    #[test]
    fn a_plan_above_the_capacity_is_refused_with_the_numbers() {
        let problem = example();
        match Planner::Naive.plan_intervals(&problem, 1, 12) {
            Err(PlanError::OverCapacity {
                needed, capacity, ..
            }) => assert_eq!((needed, capacity), (20, 12)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Planner::Ggml.plan_intervals(&problem, 3, u64::MAX),
            Err(PlanError::BadAlignment { alignment: 3 })
        ));
    }
}
