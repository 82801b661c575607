//! [`GraphContext`]: a graph, a planner and the memory one execution needs, with the
//! workspace and the outputs allocated through optional user callbacks.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::blocks::{grow, Blocks};
use super::callbacks::{BlockSource, FreeAllFn, ReallocFn, UserContext};
use super::empty::runnable_nodes;
use super::execution::{output_tensors, Execution};
use super::layout::{phase_graph, Layout};
use super::{MemoryRole, RuntimeError};
use crate::device::{allocate_plan, GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE};
use crate::exec::Inputs;
use crate::exec::TensorData;
use crate::exec::{Executor, TensorMemory};
use crate::graph::{Graph, Role, TensorId};
use crate::plan::{plan_weights, BufferTypeDesc, Plan, Planner};

/// A graph ready to run, with its own memory: the workspace (inputs and intermediates)
/// and the outputs, each from the default allocator or from user callbacks
/// ([`GraphContext::set_workspace_allocation`], [`GraphContext::set_output_allocation`]),
/// and the weights (default allocator).
///
/// A graph with data-dependent lengths ([`crate::graph::DynamicLen`]) runs in phases:
/// up to the first node whose lengths are unknown, then the counts are read back, the
/// rest is planned, and the workspace grows through `realloc` (the bytes of earlier
/// phases keep their offsets), and so on. A graph without them runs in one phase.
///
/// # The free-all rule
/// A user setting's `free_all` is called once at each of these events, whether or not
/// its `realloc` ever ran: the setting is replaced (a successful
/// [`GraphContext::set_workspace_allocation`] / [`GraphContext::set_output_allocation`],
/// even by an identical one), [`GraphContext::release_workspace`] (the workspace's
/// setting), and the context's drop (both settings). At one event a user context that
/// the workspace and the outputs share ([`std::sync::Arc::ptr_eq`]) gets one call,
/// which frees both memories, so the context forgets the blocks of both. Settings
/// without a user context never count as shared. A refused setting
/// ([`RuntimeError::HalfSetCallbacks`]) calls nothing; the default allocator has no
/// free-all (the context destroys its buffers itself).
pub struct GraphContext {
    graph: Graph,
    /// Tensor names by id, handed to each [`Execution`] for its errors.
    names: Arc<[String]>,
    planner: Planner,
    workspace: Blocks,
    outputs: Blocks,
    weights: Option<(Plan, PlannedMemory)>,
    executor: Option<Executor>,
}

impl std::fmt::Debug for GraphContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphContext")
            .field("graph", &self.graph.name)
            .field("planner", &self.planner)
            .field("workspace_bytes", &self.workspace.bytes())
            .field("output_bytes", &self.outputs.bytes())
            .finish_non_exhaustive()
    }
}

impl GraphContext {
    /// A context for `graph`, planned by `planner`, with the default allocators.
    ///
    /// # Errors
    /// [`RuntimeError::Graph`] when the graph does not validate.
    pub fn new(graph: Graph, planner: Planner) -> Result<GraphContext, RuntimeError> {
        graph.validate()?;
        let names = graph.tensors.iter().map(|t| t.name.clone()).collect();
        Ok(GraphContext {
            graph,
            names,
            planner,
            workspace: Blocks::new(MemoryRole::Workspace),
            outputs: Blocks::new(MemoryRole::Output),
            weights: None,
            executor: None,
        })
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Bytes of workspace held now (0 after [`GraphContext::release_workspace`]).
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.bytes()
    }

    /// Sets where the workspace comes from: both callbacks, or neither for the default
    /// allocator. The previous setting ends first: its blocks are forgotten and its
    /// free-all is called (the free-all rule of [`GraphContext`]).
    ///
    /// # Errors
    /// [`RuntimeError::HalfSetCallbacks`] when exactly one callback is given; the old
    /// setting is kept.
    pub fn set_workspace_allocation(
        &mut self,
        realloc: Option<ReallocFn>,
        free_all: Option<FreeAllFn>,
        user: Option<UserContext>,
    ) -> Result<(), RuntimeError> {
        let allocation = BlockSource::from_parts(MemoryRole::Workspace, realloc, free_all, user)?;
        self.release(MemoryRole::Workspace);
        self.workspace.set_allocation(allocation);
        Ok(())
    }

    /// Sets where the outputs' memory comes from, like
    /// [`GraphContext::set_workspace_allocation`].
    ///
    /// # Errors
    /// [`RuntimeError::HalfSetCallbacks`] when exactly one callback is given; the old
    /// setting is kept.
    pub fn set_output_allocation(
        &mut self,
        realloc: Option<ReallocFn>,
        free_all: Option<FreeAllFn>,
        user: Option<UserContext>,
    ) -> Result<(), RuntimeError> {
        let allocation = BlockSource::from_parts(MemoryRole::Output, realloc, free_all, user)?;
        self.release(MemoryRole::Output);
        self.outputs.set_allocation(allocation);
        Ok(())
    }

    /// Frees the workspace between executions (the next execution reallocates it from
    /// nothing, `old = None`). With user callbacks their free-all is called, even when
    /// nothing was allocated since the last one; when the outputs share its user
    /// context, that frees the output memory too, so the context forgets it as well.
    pub fn release_workspace(&mut self) {
        self.release(MemoryRole::Workspace);
    }

    /// Ends one kind of memory's blocks under its current setting (the free-all rule,
    /// see [`GraphContext`]): forgets them, calls the setting's free-all once, whether
    /// or not `realloc` ran, and, when the other kind shares its user context, forgets
    /// the other's blocks too (that one call freed them).
    fn release(&mut self, role: MemoryRole) {
        let shared = self
            .workspace
            .allocation()
            .shares_user_with(self.outputs.allocation());
        let (mine, other) = match role {
            MemoryRole::Workspace => (&mut self.workspace, &mut self.outputs),
            MemoryRole::Output => (&mut self.outputs, &mut self.workspace),
        };
        mine.forget();
        mine.allocation().free_all();
        if shared {
            other.forget();
        }
    }

    /// The executor, created on the first execution; later ones must use the same
    /// device.
    fn executor(&mut self, gpu: &GpuContext) -> Result<&mut Executor, RuntimeError> {
        if let Some(first) = &self.executor {
            if first.context().device != gpu.device {
                return Err(RuntimeError::OtherDevice {
                    first: first.context().info.name.clone(),
                    given: gpu.info.name.clone(),
                });
            }
        }
        Ok(self.executor.get_or_insert_with(|| Executor::new(gpu)))
    }

    /// Weight memory (default allocator, allocated once) with `values` written.
    fn upload_weights(
        &mut self,
        gpu: &GpuContext,
        storage: &BufferTypeDesc,
        values: &Inputs,
    ) -> Result<(), RuntimeError> {
        if self.weights.is_none() {
            let plan = plan_weights(&self.graph, storage)?;
            let memory = allocate_plan(gpu, &plan, STORAGE_USAGE, &WgpuStorage::shared(gpu))?;
            self.weights = Some((plan, memory));
        }
        if let Some((plan, memory)) = &self.weights {
            let layer = TensorMemory::single(plan, memory);
            for t in self.graph.tensors.iter().filter(|t| t.role == Role::Weight) {
                if t.view_of.is_none() {
                    let data = value_of(&self.graph, values, t.id)?;
                    layer.write(gpu, &self.graph, t.id, data.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Runs the graph: `values` gives every input and weight. Inputs and intermediates
    /// live in the workspace, outputs in the output memory, each grown through its
    /// allocator as the phases need.
    ///
    /// # Errors
    /// [`RuntimeError::MissingValue`]; [`RuntimeError::ChunkTooLarge`] (before any
    /// allocation of the phase); [`RuntimeError::Callback`],
    /// [`RuntimeError::ShortBlock`], [`RuntimeError::MissingUsage`],
    /// [`RuntimeError::BlockAlreadyHeld`] from an allocator;
    /// [`RuntimeError::BadCount`], [`RuntimeError::InexactCount`],
    /// [`RuntimeError::Graph`] for lengths read at run time;
    /// [`RuntimeError::EmptyOperand`] for a node with a non-empty output over a tensor
    /// that came out empty; planning, device and execution errors. After an error the
    /// context can execute again.
    ///
    /// A length of 0 is fine: the nodes whose output is empty are skipped, and such an
    /// output reads back as an empty `Vec`.
    pub fn execute(
        &mut self,
        gpu: &GpuContext,
        values: &Inputs,
    ) -> Result<Execution, RuntimeError> {
        self.executor(gpu)?;
        let storage = gpu.buffer_types()?.storage.desc;
        self.upload_weights(gpu, &storage, values)?;
        let n = self.graph.nodes.len();
        let count = self.graph.tensors.len();
        let mut ws = Layout::new(MemoryRole::Workspace, &storage, count);
        let mut outs = Layout::new(MemoryRole::Output, &storage, count);
        let inputs: Vec<TensorId> = self
            .graph
            .tensors
            .iter()
            .filter(|t| t.role == Role::Input && t.view_of.is_none())
            .map(|t| t.id)
            .collect();
        for &id in &inputs {
            value_of(&self.graph, values, id)?;
        }
        ws.bump(&self.graph, &inputs)?;
        let mut known: HashMap<TensorId, u64> = HashMap::new();
        let mut resolved = self.graph.clone();
        let mut cursor = 0;
        let mut per_phase = Vec::new();
        let mut inputs_written = false;
        loop {
            let end = resolved.first_unresolved_node(cursor).unwrap_or(n);
            let (ws_before, outs_before) = (ws.chunks.clone(), outs.chunks.clone());
            let produced: Vec<TensorId> = resolved.nodes[cursor..end]
                .iter()
                .filter_map(|node| resolved.root_of(node.output))
                .filter(|&r| resolved.tensor(r).is_some_and(|t| t.role == Role::Output))
                .filter(|&r| !outs.places(r))
                .collect();
            outs.bump(&resolved, &produced)?;
            // Nodes with an empty output are skipped (nothing to bind); their outputs
            // keep a slot and read back as empty.
            let runnable = runnable_nodes(&resolved, cursor..end)?;
            if !runnable.is_empty() {
                let keep = kept_after(&resolved, end);
                let (sub, original) = phase_graph(
                    &resolved,
                    &runnable,
                    |t| ws.places(t) || outs.places(t),
                    &keep,
                );
                let plan = self.planner.plan_graph(&sub, &storage)?;
                ws.append(&plan, &original)?;
            }
            per_phase.push(ws.chunks.iter().sum());
            grow(&mut self.workspace, gpu, &ws, &ws_before, &self.outputs)?;
            grow(&mut self.outputs, gpu, &outs, &outs_before, &self.workspace)?;
            let (ws_plan, outs_plan) = (ws.to_plan(), outs.to_plan());
            let (ws_memory, outs_memory) = (self.workspace.memory(), self.outputs.memory());
            let mut memory =
                TensorMemory::single(&outs_plan, &outs_memory).with_layer(&ws_plan, &ws_memory);
            if let Some((plan, weights)) = &self.weights {
                memory = memory.with_layer(plan, weights);
            }
            if !inputs_written {
                for &id in &inputs {
                    let data = value_of(&self.graph, values, id)?;
                    memory.write(gpu, &resolved, id, data.as_bytes())?;
                }
                inputs_written = true;
            }
            let phase = Graph {
                name: resolved.name.clone(),
                tensors: resolved.tensors.clone(),
                nodes: runnable,
            };
            if let (Some(executor), false) = (&mut self.executor, phase.nodes.is_empty()) {
                executor.run(&phase, &memory)?;
            }
            cursor = end;
            if cursor >= n {
                let outputs = output_tensors(&resolved, &outs, &self.outputs);
                return Ok(Execution {
                    outputs,
                    phases: per_phase.len(),
                    workspace_bytes: self.workspace.bytes(),
                    output_bytes: self.outputs.bytes(),
                    workspace_per_phase: per_phase,
                    names: self.names.clone(),
                });
            }
            read_counts(gpu, &resolved, &memory, end, &mut known)?;
            resolved = self.graph.resolve_lengths(|c| known.get(&c).copied())?;
            // Node `cursor` was the first unresolved one; it still is only if no count
            // it waits for was read (validation guarantees each is written before use).
            if resolved.first_unresolved_node(cursor) == Some(cursor) {
                return Err(RuntimeError::Graph(crate::graph::GraphError::BadNode {
                    node: crate::graph::NodeId(u32::try_from(cursor).unwrap_or(u32::MAX)),
                    op: resolved
                        .nodes
                        .get(cursor)
                        .map(|n| n.op.clone())
                        .unwrap_or_default(),
                    problem: "its length is still unknown after the nodes before it ran".into(),
                }));
            }
        }
    }
}

/// The value given for `id`.
fn value_of<'v>(
    graph: &Graph,
    values: &'v HashMap<TensorId, TensorData>,
    id: TensorId,
) -> Result<&'v TensorData, RuntimeError> {
    values.get(&id).ok_or_else(|| RuntimeError::MissingValue {
        tensor: id,
        name: graph.tensor(id).map(|t| t.name.clone()).unwrap_or_default(),
    })
}

/// Roots that must outlive a phase ending before node `end`: read by a later node, or
/// a count still to be read back.
fn kept_after(graph: &Graph, end: usize) -> HashSet<TensorId> {
    let mut keep: HashSet<TensorId> = graph
        .nodes
        .iter()
        .skip(end)
        .flat_map(|n| n.inputs.iter())
        .filter_map(|&i| graph.root_of(i))
        .collect();
    keep.extend(
        graph
            .tensors
            .iter()
            .filter_map(|t| t.dynamic.map(|d| d.count)),
    );
    keep
}

/// Reads the counts that nodes before `end` wrote and that some unresolved length
/// waits for.
fn read_counts(
    gpu: &GpuContext,
    graph: &Graph,
    memory: &TensorMemory<'_>,
    end: usize,
    known: &mut HashMap<TensorId, u64>,
) -> Result<(), RuntimeError> {
    let produced: HashSet<TensorId> = graph.nodes[..end].iter().map(|n| n.output).collect();
    let waiting: Vec<TensorId> = graph
        .tensors
        .iter()
        .filter_map(|t| t.dynamic.map(|d| d.count))
        .filter(|c| produced.contains(c) && !known.contains_key(c))
        .collect();
    for count in waiting {
        let value = memory
            .read_f32(gpu, graph, count)?
            .first()
            .copied()
            .unwrap_or(f32::NAN);
        known.insert(count, count_len(count, value)?);
    }
    Ok(())
}

/// First count an f32 may not hold exactly: 2^24 + 1 rounds to 2^24.
const EXACT_COUNT_LIMIT: u64 = 1 << 24;

/// The whole number an f32 count holds, however large (the CPU reference's rule).
///
/// # Errors
/// [`RuntimeError::BadCount`] for NaN, an infinity, a negative or a fractional value.
pub(super) fn whole_count(tensor: TensorId, value: f32) -> Result<u64, RuntimeError> {
    if !(value.is_finite() && value >= 0.0 && value.fract() == 0.0) {
        return Err(RuntimeError::BadCount { tensor, value });
    }
    // Whole, finite, non-negative: exact below 2^64, saturating above.
    Ok(value as u64)
}

/// The element count an f32 count tensor holds.
///
/// # Errors
/// [`RuntimeError::BadCount`] for NaN, an infinity, a negative or a fractional value;
/// [`RuntimeError::InexactCount`] from 2^24 on, where the kernel's f32 may have rounded.
fn count_len(tensor: TensorId, value: f32) -> Result<u64, RuntimeError> {
    let len = whole_count(tensor, value)?;
    if len >= EXACT_COUNT_LIMIT {
        return Err(RuntimeError::InexactCount {
            tensor,
            value,
            limit: EXACT_COUNT_LIMIT,
        });
    }
    Ok(len)
}

impl Drop for GraphContext {
    /// Calls each free-all once: once in all when workspace and outputs share a user
    /// context. Default-allocated blocks are destroyed.
    fn drop(&mut self) {
        let shared = self
            .workspace
            .allocation()
            .shares_user_with(self.outputs.allocation());
        self.release(MemoryRole::Workspace);
        if !shared {
            self.release(MemoryRole::Output);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::runtime::CallbackError;

    fn context() -> GraphContext {
        let mut b = GraphBuilder::new("relu");
        let x = b.input("x", DType::F32, &[4]);
        let y = b.node("relu", &[x], &[4], false);
        b.mark_output(y);
        GraphContext::new(b.build().expect("valid"), Planner::Ggml).expect("valid")
    }

    /// A realloc that always fails and a free-all that counts its calls on `calls`.
    fn counting(calls: &Arc<AtomicU64>) -> (ReallocFn, FreeAllFn) {
        let calls = calls.clone();
        (
            Box::new(|_| Err(CallbackError::new("unused"))),
            Box::new(move |_| {
                calls.fetch_add(1, Ordering::Relaxed);
            }),
        )
    }

    #[test]
    fn realloc_without_free_all_or_the_reverse_is_refused_and_the_old_setting_kept() {
        let mut ctx = context();
        let calls = Arc::new(AtomicU64::new(0));
        let (realloc, free_all) = counting(&calls);
        ctx.set_workspace_allocation(Some(realloc), Some(free_all), None)
            .expect("both given");
        let (realloc, _) = counting(&calls);
        assert!(matches!(
            ctx.set_workspace_allocation(Some(realloc), None, None),
            Err(RuntimeError::HalfSetCallbacks {
                role: MemoryRole::Workspace,
                realloc_given: true,
                free_all_given: false
            })
        ));
        let (_, free_all) = counting(&calls);
        assert!(matches!(
            ctx.set_output_allocation(None, Some(free_all), None),
            Err(RuntimeError::HalfSetCallbacks {
                role: MemoryRole::Output,
                realloc_given: false,
                free_all_given: true
            })
        ));
        drop(ctx);
        // The first setting survived both refusals: its free-all ran at drop.
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn free_all_is_called_once_when_workspace_and_outputs_share_a_user_context() {
        let calls = Arc::new(AtomicU64::new(0));
        let user: UserContext = Arc::new(7u32);
        let mut ctx = context();
        let (r, f) = counting(&calls);
        ctx.set_workspace_allocation(Some(r), Some(f), Some(user.clone()))
            .expect("set");
        let (r, f) = counting(&calls);
        ctx.set_output_allocation(Some(r), Some(f), Some(user))
            .expect("set");
        drop(ctx);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn free_all_is_called_per_setting_when_user_contexts_differ() {
        let calls = Arc::new(AtomicU64::new(0));
        let mut ctx = context();
        let (r, f) = counting(&calls);
        ctx.set_workspace_allocation(Some(r), Some(f), Some(Arc::new(1u8)))
            .expect("set");
        let (r, f) = counting(&calls);
        // Equal values in two Arcs are two user contexts.
        ctx.set_output_allocation(Some(r), Some(f), Some(Arc::new(1u8)))
            .expect("set");
        drop(ctx);
        assert_eq!(calls.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_dropped_context_calls_free_all_and_the_default_calls_nothing() {
        let calls = Arc::new(AtomicU64::new(0));
        let mut ctx = context();
        let (r, f) = counting(&calls);
        ctx.set_output_allocation(Some(r), Some(f), None)
            .expect("set");
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        drop(ctx);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // A default context has no free-all at all.
        drop(context());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    /// One step of a free-all scenario.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// Set the workspace's callbacks with user context 0 or 1.
        Workspace(usize),
        /// Set the outputs' callbacks with user context 0 or 1.
        Output(usize),
        /// Set the workspace back to the default.
        WorkspaceDefault,
        /// Try to set only a realloc on the workspace (refused).
        HalfWorkspace,
        /// `release_workspace`.
        Release,
        /// Drop the context.
        Drop,
    }

    #[test]
    fn free_all_runs_once_per_user_context_when_a_setting_is_replaced_released_or_dropped() {
        use Step::*;
        // (scenario, steps, free-all calls of user contexts 0 and 1 at the end)
        let table: &[(&str, &[Step], [u64; 2])] = &[
            ("dropped, realloc never ran", &[Workspace(0), Drop], [1, 0]),
            (
                "replaced by default, realloc never ran",
                &[Workspace(0), WorkspaceDefault],
                [1, 0],
            ),
            (
                "replaced by the same context",
                &[Workspace(0), Workspace(0), Drop],
                [2, 0],
            ),
            (
                "refused half setting calls nothing",
                &[Workspace(0), HalfWorkspace],
                [0, 0],
            ),
            (
                "released twice, then dropped",
                &[Workspace(0), Release, Release, Drop],
                [3, 0],
            ),
            (
                "distinct contexts, dropped",
                &[Workspace(0), Output(1), Drop],
                [1, 1],
            ),
            (
                "shared context, dropped",
                &[Workspace(0), Output(0), Drop],
                [1, 0],
            ),
            (
                "shared context, workspace replaced",
                &[Workspace(0), Output(0), Workspace(1)],
                [1, 0],
            ),
            (
                "shared, replaced, dropped",
                &[Workspace(0), Output(0), Workspace(1), Drop],
                [2, 1],
            ),
            (
                "shared context, released",
                &[Workspace(0), Output(0), Release],
                [1, 0],
            ),
        ];
        for &(name, steps, expected) in table {
            let calls = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
            let users: [UserContext; 2] = [Arc::new(0u8), Arc::new(1u8)];
            let mut ctx = Some(context());
            for &step in steps {
                let Some(c) = ctx.as_mut() else { break };
                match step {
                    Workspace(u) | Output(u) => {
                        let (r, f) = counting(&calls[u]);
                        let user = Some(users[u].clone());
                        if matches!(step, Workspace(_)) {
                            c.set_workspace_allocation(Some(r), Some(f), user)
                        } else {
                            c.set_output_allocation(Some(r), Some(f), user)
                        }
                        .expect("both given");
                    }
                    WorkspaceDefault => c
                        .set_workspace_allocation(None, None, None)
                        .expect("default"),
                    HalfWorkspace => {
                        let (r, _) = counting(&calls[0]);
                        assert!(c.set_workspace_allocation(Some(r), None, None).is_err());
                    }
                    Release => c.release_workspace(),
                    Drop => ctx = None,
                }
            }
            let got = [0, 1].map(|u| calls[u].load(Ordering::Relaxed));
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn counts_are_whole_non_negative_and_below_where_f32_stops_being_exact() {
        let t = TensorId(3);
        assert_eq!(count_len(t, 0.0).ok(), Some(0));
        assert_eq!(count_len(t, 5.0).ok(), Some(5));
        assert_eq!(count_len(t, 16_777_215.0).ok(), Some(16_777_215));
        for bad in [f32::NAN, f32::INFINITY, -1.0, 2.5] {
            assert!(
                matches!(count_len(t, bad), Err(RuntimeError::BadCount { tensor, .. }) if tensor == t),
                "{bad}"
            );
        }
        // 16777217 elements counted in f32 read back as 16777216: refused, not trusted.
        for big in [16_777_216.0, 16_777_217.0_f32, 1e30] {
            assert!(
                matches!(
                    count_len(t, big),
                    Err(RuntimeError::InexactCount {
                        limit: 16_777_216,
                        ..
                    })
                ),
                "{big}"
            );
        }
    }

    #[test]
    fn a_graph_that_does_not_validate_gives_no_context() {
        let mut b = GraphBuilder::new("bad");
        let x = b.input("x", DType::F32, &[4]);
        b.push_node("relu", &[x], x, false, &[]);
        assert!(matches!(
            GraphContext::new(b.graph().clone(), Planner::Ggml),
            Err(RuntimeError::Graph(_))
        ));
    }
}
