//! What goes into a [`super::Stream`] and what comes out: the request of one execution
//! (graph, plan, inputs, outputs to read back), its id, its result and what a
//! synchronization did.

use crate::device::PlannedMemory;
use crate::exec::{Inputs, RunReport};
use crate::graph::{Graph, Role, TensorId};
use crate::plan::Plan;

/// One execution on a stream, numbered from 1 in submission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutionId(pub u64);

/// What to execute: a graph, the plan of its activations (their memory comes from the
/// stream's allocator), input bytes, memory layers placed by other plans (e.g. weights
/// in memory of their own) and the tensors to read back.
#[derive(Debug, Clone)]
pub struct ExecuteRequest<'a> {
    /// The graph.
    pub graph: &'a Graph,
    /// Where its activations live; one block per planned chunk is allocated.
    pub plan: &'a Plan,
    /// Bytes written into the activation memory before the graph runs.
    pub inputs: Vec<(TensorId, &'a [u8])>,
    /// Further layers consulted after the activations (see [`crate::exec::TensorMemory`]); they must
    /// stay alive until the stream is synchronized.
    pub layers: Vec<(&'a Plan, &'a PlannedMemory)>,
    /// Tensors copied out when the run completes (the graph's outputs by default).
    pub outputs: Vec<TensorId>,
}

impl<'a> ExecuteRequest<'a> {
    /// `graph` with its activations placed by `plan`, reading back the graph's outputs.
    pub fn new(graph: &'a Graph, plan: &'a Plan) -> ExecuteRequest<'a> {
        let outputs = graph
            .tensors
            .iter()
            .filter(|t| t.role == Role::Output)
            .map(|t| t.id)
            .collect();
        ExecuteRequest {
            graph,
            plan,
            inputs: Vec::new(),
            layers: Vec::new(),
            outputs,
        }
    }

    /// Adds an input's bytes (exactly the tensor's size).
    pub fn input(mut self, tensor: TensorId, bytes: &'a [u8]) -> Self {
        self.inputs.push((tensor, bytes));
        self
    }

    /// Adds every value of `inputs` (the one shape every runner takes), borrowed.
    pub fn inputs(mut self, inputs: &'a Inputs) -> Self {
        let mut ids: Vec<&TensorId> = inputs.keys().collect();
        ids.sort();
        for id in ids {
            self.inputs.push((*id, inputs[id].as_bytes()));
        }
        self
    }

    /// Adds an input's f32 values.
    pub fn input_f32(self, tensor: TensorId, values: &'a [f32]) -> Self {
        self.input(tensor, bytemuck::cast_slice(values))
    }

    /// Adds a memory layer (e.g. the weights).
    pub fn layer(mut self, plan: &'a Plan, memory: &'a PlannedMemory) -> Self {
        self.layers.push((plan, memory));
        self
    }

    /// Reads back `tensor` as well.
    pub fn read_back(mut self, tensor: TensorId) -> Self {
        if !self.outputs.contains(&tensor) {
            self.outputs.push(tensor);
        }
        self
    }
}

/// What a completed execution gives back.
#[derive(Debug, Clone)]
pub struct ExecutionResult {
    /// The executor's report (dispatches, encode time; no wait or GPU time, since the
    /// stream does not wait at submit).
    pub report: RunReport,
    /// Bytes of the activation blocks the execution took.
    pub block_bytes: u64,
    /// The read-back tensors' bytes, in request order.
    pub outputs: Vec<(TensorId, Vec<u8>)>,
}

impl ExecutionResult {
    /// The bytes read back for `tensor`.
    pub fn output(&self, tensor: TensorId) -> Option<&[u8]> {
        self.outputs
            .iter()
            .find(|(t, _)| *t == tensor)
            .map(|(_, b)| b.as_slice())
    }

    /// The values read back for `tensor`, as f32.
    pub fn output_f32(&self, tensor: TensorId) -> Option<Vec<f32>> {
        self.output(tensor).map(|bytes| {
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

/// What one [`super::Stream::synchronize`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Executions that completed.
    pub executions: usize,
    /// Blocks handed back to their allocators.
    pub blocks_freed: usize,
}
