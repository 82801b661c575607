//! [`Session`]: one type for running a graph of your own on your own device: it plans
//! the activations (the `best` planner by default) and the weights, verifies the plan,
//! checks it against the device's limits, allocates both from one [`Storage`] and owns
//! that memory; it writes inputs and weights, runs, reads outputs, proves the plan on
//! the GPU, and hands out each tensor's bindable region for an engine's own passes.
//!
//! **Inputs across runs.** The planner reuses a graph input's bytes once its last
//! reader has run, so after a run the input's memory holds something else. A session
//! states what it does about that ([`InputPolicy`]): by default it keeps every input
//! (a host copy, written to the device again before each later run, so running twice
//! gives the same result); with [`InputPolicy::Reused`] a run may consume its inputs
//! and the next run is refused ([`SessionError::NotWritten`]) until they are written
//! again. Either way a run never starts with an input or weight never written.
//!
//! ```no_run
//! use wgalloc::graph::{DType, GraphBuilder};
//! use wgalloc::session::Session;
//! use wgalloc::{GpuContext, PlanOptions};
//! # fn main() -> wgalloc::Result<()> {
//! let ctx = GpuContext::from_env()?;
//! let mut b = GraphBuilder::new("tiny");
//! let x = b.input("x", DType::F32, &[4, 8]);
//! let w = b.weight("w", DType::F32, &[8, 2]);
//! let y = b.node("matmul", &[x, w], &[4, 2], false);
//! b.mark_output(y);
//! let mut session = Session::new(&ctx, b.build()?, &PlanOptions::default())?;
//! session.write(w, &[0.5; 16])?;
//! session.write(x, &[1.0; 32])?;
//! session.run()?;
//! assert_eq!(session.read(y)?, vec![4.0; 8]);
//! assert!(session.prove()?.verified());
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use thiserror::Error;

use crate::device::{allocate_plan, DeviceError, GpuContext, PlannedMemory, WgpuStorage};
use crate::exec::checksum::{prove, ChecksumReport};
use crate::exec::{check_plan_against_limits, ExecError, Executor, RunReport, TensorMemory};
use crate::graph::{Graph, Role, TensorId};
use crate::plan::{plan, plan_weights, Plan, PlanError, PlanOptions};
use crate::storage::{Region, Storage};
use wgalloc_plan::ErrorKind;

/// Buffer usages of a session's memory: storage, and copies both ways (writes, reads).
const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);

/// What a run does to the graph's inputs (see the [module](self) docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputPolicy {
    /// The session keeps a host copy of each input and writes it again before every
    /// later run (one upload per input per run): inputs stay valid across runs.
    #[default]
    Kept,
    /// A run may reuse its inputs' memory: each run needs its inputs written before
    /// it, and a run without them is refused with [`SessionError::NotWritten`].
    Reused,
}

/// Why a session could not be made or could not do what was asked.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Planning failed, or the plan did not verify.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The plan exceeds the device's limits, or the storage refused memory.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A node cannot run (checked before planning), or a write, read or run failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The checksum proof could not run.
    #[error("the checksum proof could not run: {0}")]
    Proof(Box<ExecError>),
    /// A run was asked for before this input or weight was written (with
    /// [`InputPolicy::Reused`]: since the last run).
    #[error("tensor {tensor} ({name}) has not been written{}", if *.since_run { " since the last run (the session reuses inputs: write them before each run)" } else { "" })]
    NotWritten {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Whether it was written before an earlier run consumed it.
        since_run: bool,
    },
    /// The graph has no tensor of this id.
    #[error("tensor {tensor} is not in the session's graph")]
    UnknownTensor {
        /// The id given.
        tensor: TensorId,
    },
    /// Only graph inputs and weights are written; other tensors are computed.
    #[error("tensor {tensor} ({name}) is a {role}, not an input or weight: the run computes it")]
    NotWritable {
        /// The tensor.
        tensor: TensorId,
        /// Its name.
        name: String,
        /// Its role.
        role: &'static str,
    },
}

impl SessionError {
    /// What a caller can do about the error (the inner error's kind survives).
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionError::Plan(e) => e.kind(),
            SessionError::Device(e) => e.kind(),
            SessionError::Exec(e) => e.kind(),
            SessionError::Proof(e) => e.kind(),
            SessionError::NotWritten { .. }
            | SessionError::NotWritable { .. }
            | SessionError::UnknownTensor { .. } => ErrorKind::BadInput,
        }
    }
}

/// A user's graph on a device, planned, checked, allocated and ready to run (see the
/// [module](self) docs).
#[derive(Debug)]
pub struct Session {
    ctx: GpuContext,
    graph: Graph,
    plan: Plan,
    weights_plan: Plan,
    activations: PlannedMemory,
    weights: PlannedMemory,
    executor: Executor,
    policy: InputPolicy,
    /// Host copies of the inputs ([`InputPolicy::Kept`]).
    kept: BTreeMap<TensorId, Vec<u8>>,
    /// Inputs and weights whose device memory holds what was written.
    fresh: BTreeSet<TensorId>,
    /// Inputs written before a run that consumed them.
    consumed: BTreeSet<TensorId>,
}

impl Session {
    /// Makes a session for `graph` on `ctx`'s device with memory from plain wgpu
    /// buffers ([`WgpuStorage`]). See [`Session::with_storage`].
    ///
    /// # Errors
    /// As [`Session::with_storage`].
    pub fn new(
        ctx: &GpuContext,
        graph: Graph,
        options: &PlanOptions,
    ) -> Result<Session, SessionError> {
        Session::with_storage(ctx, graph, options, Arc::new(WgpuStorage::wgpu(ctx)))
    }

    /// Makes a session for `graph` on `ctx`'s device, in this order: every node is
    /// checked against the kernels the device runs ([`Executor::check_graph`]: unknown
    /// ops, arity, shapes, in-place flags, user ops' grids); the activations are
    /// planned as `options` say (`PlanOptions::default()`: the `best` planner) and the
    /// weights packed ([`plan_weights`]); both plans are verified
    /// ([`Plan::verify`]) and checked against the device's limits
    /// ([`check_plan_against_limits`]); then both are allocated from `storage`. These
    /// are all the checks wgalloc has; nothing else is required before a run.
    ///
    /// # Errors
    /// [`SessionError::Exec`] for a node that cannot run, [`SessionError::Plan`] when
    /// planning fails or a plan does not verify, [`SessionError::Device`] when a plan
    /// exceeds the device's limits or `storage` refuses memory.
    pub fn with_storage(
        ctx: &GpuContext,
        graph: Graph,
        options: &PlanOptions,
        storage: Arc<dyn Storage<Memory = wgpu::Buffer>>,
    ) -> Result<Session, SessionError> {
        let executor = Executor::new(ctx);
        executor.check_graph(&graph)?;
        let buffer_type = ctx.buffer_types()?.storage.desc;
        let activations_plan = plan(&graph, std::slice::from_ref(&buffer_type), options)?;
        activations_plan.verify(&graph)?;
        let weights_plan = plan_weights(&graph, &buffer_type)?;
        check_plan_against_limits(&activations_plan, &graph, &ctx.limits)?;
        check_plan_against_limits(&weights_plan, &graph, &ctx.limits)?;
        let activations = allocate_plan(ctx, &activations_plan, USAGE, &storage)?;
        let weights = allocate_plan(ctx, &weights_plan, USAGE, &storage)?;
        Ok(Session {
            ctx: ctx.clone(),
            graph,
            plan: activations_plan,
            weights_plan,
            activations,
            weights,
            executor,
            policy: InputPolicy::default(),
            kept: BTreeMap::new(),
            fresh: BTreeSet::new(),
            consumed: BTreeSet::new(),
        })
    }

    /// The same session with another [`InputPolicy`] (host copies already kept are
    /// dropped when switching to [`InputPolicy::Reused`]).
    pub fn inputs(mut self, policy: InputPolicy) -> Session {
        self.policy = policy;
        if policy == InputPolicy::Reused {
            self.kept.clear();
        }
        self
    }

    /// The policy in force.
    pub fn input_policy(&self) -> InputPolicy {
        self.policy
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The device context.
    pub fn context(&self) -> &GpuContext {
        &self.ctx
    }

    /// The activations' plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The weights' plan.
    pub fn weights_plan(&self) -> &Plan {
        &self.weights_plan
    }

    /// Bytes of the activations' memory.
    pub fn activation_bytes(&self) -> u64 {
        self.activations.total_size()
    }

    /// Bytes of the weights' memory.
    pub fn weight_bytes(&self) -> u64 {
        self.weights.total_size()
    }

    /// Both memories as the executor sees them: the activations, then the weights.
    pub fn memory(&self) -> TensorMemory<'_> {
        TensorMemory::single(&self.plan, &self.activations)
            .with_layer(&self.weights_plan, &self.weights)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<TensorId> {
        self.graph
            .tensors
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.id)
    }

    /// Writes an input's or weight's bytes (what `dtype` and shape say: 4 bytes per
    /// `f32` or `u32` element).
    ///
    /// # Errors
    /// [`SessionError::UnknownTensor`]; [`SessionError::NotWritable`] for a tensor the
    /// graph computes; [`SessionError::Exec`] for a wrong byte count.
    pub fn write_bytes(&mut self, tensor: TensorId, bytes: &[u8]) -> Result<(), SessionError> {
        let t = self.graph.tensor(tensor).ok_or(ExecError::UnknownTensor {
            node: crate::graph::NodeId(u32::MAX),
            tensor,
        })?;
        let root = t.view_of.is_none();
        if !root || !matches!(t.role, Role::Input | Role::Weight) {
            return Err(SessionError::NotWritable {
                tensor,
                name: t.name.clone(),
                role: if root { t.role.name() } else { "view" },
            });
        }
        let is_input = t.role == Role::Input;
        self.memory().write(&self.ctx, &self.graph, tensor, bytes)?;
        if is_input && self.policy == InputPolicy::Kept {
            self.kept.insert(tensor, bytes.to_vec());
        }
        self.fresh.insert(tensor);
        self.consumed.remove(&tensor);
        Ok(())
    }

    /// Writes an `f32` input or weight.
    ///
    /// # Errors
    /// As [`Session::write_bytes`].
    pub fn write(&mut self, tensor: TensorId, values: &[f32]) -> Result<(), SessionError> {
        self.write_bytes(tensor, bytemuck::cast_slice(values))
    }

    /// Writes a `u32` input or weight (token ids).
    ///
    /// # Errors
    /// As [`Session::write_bytes`].
    pub fn write_u32(&mut self, tensor: TensorId, values: &[u32]) -> Result<(), SessionError> {
        self.write_bytes(tensor, bytemuck::cast_slice(values))
    }

    /// Refuses a run with an input or weight not written (or consumed).
    fn check_written(&self) -> Result<(), SessionError> {
        for t in &self.graph.tensors {
            let needed = t.view_of.is_none() && matches!(t.role, Role::Input | Role::Weight);
            let written = self.fresh.contains(&t.id) || self.kept.contains_key(&t.id);
            if needed && !written {
                return Err(SessionError::NotWritten {
                    tensor: t.id,
                    name: t.name.clone(),
                    since_run: self.consumed.contains(&t.id),
                });
            }
        }
        Ok(())
    }

    /// Marks what a pass over the activations left behind: inputs no longer hold what
    /// was written.
    fn activations_overwritten(&mut self) {
        let inputs: Vec<TensorId> = self
            .graph
            .tensors
            .iter()
            .filter(|t| t.role == Role::Input && t.view_of.is_none())
            .map(|t| t.id)
            .collect();
        for id in inputs {
            if self.fresh.remove(&id) {
                self.consumed.insert(id);
            }
        }
    }

    /// Runs the graph once: (with [`InputPolicy::Kept`]) writes again the inputs an
    /// earlier run or proof overwrote, then records every node into one pass and
    /// waits for the device. Read outputs with [`Session::read`].
    ///
    /// # Errors
    /// [`SessionError::NotWritten`] before anything is submitted when an input or
    /// weight was not written; [`SessionError::Exec`] for what the executor reports.
    pub fn run(&mut self) -> Result<RunReport, SessionError> {
        self.check_written()?;
        let stale: Vec<(TensorId, Vec<u8>)> = self
            .kept
            .iter()
            .filter(|(id, _)| !self.fresh.contains(id))
            .map(|(id, bytes)| (*id, bytes.clone()))
            .collect();
        for (id, bytes) in stale {
            self.memory().write(&self.ctx, &self.graph, id, &bytes)?;
            self.fresh.insert(id);
        }
        let memory = TensorMemory::single(&self.plan, &self.activations)
            .with_layer(&self.weights_plan, &self.weights);
        let report = self.executor.run(&self.graph, &memory);
        self.activations_overwritten();
        Ok(report?)
    }

    /// Reads an `f32` tensor (an output, after a run).
    ///
    /// # Errors
    /// [`SessionError::Exec`] for an unknown or unplaced tensor.
    pub fn read(&self, tensor: TensorId) -> Result<Vec<f32>, SessionError> {
        Ok(self.memory().read_f32(&self.ctx, &self.graph, tensor)?)
    }

    /// Reads a tensor's bytes.
    ///
    /// # Errors
    /// As [`Session::read`].
    pub fn read_bytes(&self, tensor: TensorId) -> Result<Vec<u8>, SessionError> {
        Ok(self.memory().read(&self.ctx, &self.graph, tensor)?)
    }

    /// Proves the activations' plan on the GPU over this session's own memory: the
    /// checksum run ([`prove`]) writes every tensor's planned range in the
    /// graph's order and checks each node read what it should. It overwrites the
    /// activations: inputs are written again before the next run
    /// ([`InputPolicy::Kept`]) or must be ([`InputPolicy::Reused`]).
    ///
    /// # Errors
    /// [`SessionError::Proof`] when the proof cannot run.
    pub fn prove(&mut self) -> Result<ChecksumReport, SessionError> {
        let report = prove(&self.ctx, &self.graph, &self.plan, &self.activations)
            .map_err(|e| SessionError::Proof(Box::new(e)));
        self.activations_overwritten();
        report
    }

    /// Every placed tensor's bindable region (buffer, offset, size; offsets aligned to
    /// the device's `min_storage_buffer_offset_alignment`) for an engine's own
    /// passes: activations and weights.
    ///
    /// # Errors
    /// [`SessionError::Exec`] when a placement cannot be bound on this device.
    pub fn regions(&self) -> Result<Vec<(TensorId, Region)>, SessionError> {
        Ok(self.memory().regions(&self.graph, &self.ctx.limits)?)
    }
}
