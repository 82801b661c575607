//! What an execution of a graph context hands back: its outputs, each in a block of the
//! output memory, readable until the next execution.

use std::sync::Arc;

use super::blocks::Blocks;
use super::layout::Layout;
use super::RuntimeError;
use crate::device::{read_buffer_range, GpuContext};
use crate::graph::{Graph, Role, TensorId};
use crate::plan::Placement;

/// One graph output after an execution: where it lives in the output memory.
#[derive(Debug, Clone)]
pub struct OutputTensor {
    /// The output tensor.
    pub tensor: TensorId,
    /// The output block that holds it (valid until the next execution, a release or
    /// the context's drop).
    pub buffer: wgpu::Buffer,
    /// Byte offset in `buffer` (the block's own offset included).
    pub offset: u64,
    /// Bytes (its length is only known after the run for a dynamic tensor).
    pub size: u64,
}

/// What one [`super::GraphContext::execute`] did.
#[derive(Debug, Clone)]
pub struct Execution {
    /// Every graph output, in tensor order.
    pub outputs: Vec<OutputTensor>,
    /// Phases run: 1 for a graph with no data-dependent length, one more per point
    /// where lengths had to be read back before planning the rest.
    pub phases: usize,
    /// Bytes of workspace held after the run.
    pub workspace_bytes: u64,
    /// Bytes of output memory held after the run.
    pub output_bytes: u64,
    /// Bytes of the workspace each phase needed, summed over chunks, phase by phase.
    pub workspace_per_phase: Vec<u64>,
    /// Tensor names by id, for errors that name a tensor.
    pub(super) names: Arc<[String]>,
}

impl Execution {
    /// The output `tensor`, if it is one.
    pub fn output(&self, tensor: TensorId) -> Option<&OutputTensor> {
        self.outputs.iter().find(|o| o.tensor == tensor)
    }

    /// Reads an output's f32 values back (an empty `Vec` for an output that came out
    /// with 0 elements).
    ///
    /// # Errors
    /// [`RuntimeError::NotAnOutput`] (with the tensor's id and name) for a tensor of
    /// the graph that is not an output; [`RuntimeError::Graph`] with
    /// [`crate::graph::GraphError::UnknownTensor`] for an id the graph does not have;
    /// the device's readback errors.
    pub fn read_f32(&self, gpu: &GpuContext, tensor: TensorId) -> Result<Vec<f32>, RuntimeError> {
        let Some(out) = self.output(tensor) else {
            return Err(match self.names.get(tensor.index()) {
                Some(name) => RuntimeError::NotAnOutput {
                    tensor,
                    name: name.clone(),
                },
                None => RuntimeError::Graph(crate::graph::GraphError::UnknownTensor {
                    context: "Execution::read_f32".into(),
                    tensor,
                }),
            });
        };
        let bytes = read_buffer_range(gpu, &out.buffer, out.offset, out.size)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

/// Every graph output with its block, offset and exact size.
pub(super) fn output_tensors(graph: &Graph, layout: &Layout, blocks: &Blocks) -> Vec<OutputTensor> {
    graph
        .tensors
        .iter()
        .filter(|t| t.role == Role::Output)
        .filter_map(|t| {
            let root = graph.root_of(t.id)?;
            let p: Placement = layout.placements.get(root.index()).copied().flatten()?;
            let block = blocks.chunks.get(p.chunk)?.as_ref()?.region().clone();
            Some(OutputTensor {
                tensor: t.id,
                buffer: block.buffer,
                offset: block.offset.checked_add(p.offset)?,
                size: t.size,
            })
        })
        .collect()
}
