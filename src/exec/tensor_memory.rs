//! [`TensorMemory`]: where each tensor of a graph lives on the device, as a list of
//! (plan, planned memory) layers, and the upload and readback of tensor bytes.

use super::bindings::RangeKey;
use super::{ExecError, Inputs, TensorData};
use crate::device::{read_buffer_range, write_buffer, DeviceError, GpuContext, PlannedMemory};
use crate::graph::{Graph, TensorId};
use crate::plan::Plan;
use crate::storage::Region;

fn device_error(error: DeviceError) -> ExecError {
    ExecError::Device(error)
}

/// The device memory of a graph: layers of (plan, memory), e.g. the activations placed
/// by the graph planner, then the weights placed by a context allocator. A tensor lives
/// where the first layer that places its root says (a view aliases its root at
/// offset 0).
#[derive(Debug, Clone)]
pub struct TensorMemory<'a> {
    layers: Vec<(&'a Plan, &'a PlannedMemory)>,
}

/// A tensor's bound range: its buffer, offset and size rounded up to 4 bytes. The key's
/// offset is the byte offset in `buffer` (the placement's offset plus the chunk's base
/// offset when the chunk is a region of a larger buffer, see
/// [`PlannedMemory::from_regions`]).
#[derive(Debug, Clone, Copy)]
pub struct TensorRange<'a> {
    /// The range as the plan names it (the bind-group cache key).
    pub key: RangeKey,
    /// The wgpu buffer of the chunk.
    pub buffer: &'a wgpu::Buffer,
}

impl<'a> TensorRange<'a> {
    /// The bytes as a [`Region`] of their buffer.
    pub fn region(&self) -> Region {
        Region {
            buffer: self.buffer.clone(),
            offset: self.key.offset,
            size: self.key.size,
        }
    }

    /// The range as a storage binding for a bind group of your own (its offset already
    /// checked against the alignment [`TensorMemory::range`] was given).
    pub fn binding(&self) -> Option<wgpu::BufferBinding<'a>> {
        Some(wgpu::BufferBinding {
            buffer: self.buffer,
            offset: self.key.offset,
            size: Some(wgpu::BufferSize::new(self.key.size)?),
        })
    }
}

impl Default for TensorMemory<'_> {
    fn default() -> Self {
        TensorMemory::new()
    }
}

impl<'a> TensorMemory<'a> {
    /// No layers yet.
    pub fn new() -> TensorMemory<'a> {
        TensorMemory { layers: Vec::new() }
    }

    /// One layer: everything the plan places.
    pub fn single(plan: &'a Plan, memory: &'a PlannedMemory) -> TensorMemory<'a> {
        TensorMemory::new().with_layer(plan, memory)
    }

    /// Adds a layer, consulted after the earlier ones.
    pub fn with_layer(mut self, plan: &'a Plan, memory: &'a PlannedMemory) -> TensorMemory<'a> {
        self.layers.push((plan, memory));
        self
    }

    /// The ids of the layers' memories ([`PlannedMemory::id`]), in layer order: two
    /// `TensorMemory`s over the same allocations have the same key, so bind groups
    /// cached for one serve the other.
    pub fn memory_key(&self) -> Vec<u64> {
        self.layers.iter().map(|(_, memory)| memory.id()).collect()
    }

    /// Number of layers.
    pub fn layer_count(&self) -> usize {
        self.layers.len()
    }

    /// Where `tensor` lives and the range it is bound as: its extent
    /// ([`crate::graph::extent`]) in its root's placement, resolved to a region by
    /// [`PlannedMemory::bindable`], starting at a multiple of `alignment` (the device's
    /// `min_storage_buffer_offset_alignment` for a binding, 4 for a copy).
    ///
    /// # Errors
    /// [`ExecError::NotPlaced`] when no layer places its root,
    /// [`ExecError::MissingChunk`] when the memory lacks the placement's chunk,
    /// [`ExecError::EmptyTensor`], [`ExecError::LargerThanPlacement`],
    /// [`ExecError::PastBufferEnd`], [`ExecError::MisalignedOffset`].
    pub fn range(
        &self,
        graph: &Graph,
        tensor: TensorId,
        alignment: u32,
    ) -> Result<TensorRange<'a>, ExecError> {
        let t = graph.tensor(tensor).ok_or(ExecError::NotPlaced {
            tensor,
            name: String::new(),
        })?;
        let not_placed = || ExecError::NotPlaced {
            tensor,
            name: t.name.clone(),
        };
        // The one rule (graph::extent): the tensor's bytes in its root.
        let extent = graph.extent(tensor).ok_or_else(not_placed)?;
        let (layer, placement, memory) = self
            .layers
            .iter()
            .enumerate()
            .find_map(|(i, (plan, memory))| plan.placement(extent.root).map(|p| (i, p, *memory)))
            .ok_or_else(not_placed)?;
        let chunk =
            memory
                .region(placement.buffer, placement.chunk)
                .ok_or(ExecError::MissingChunk {
                    tensor,
                    buffer: placement.buffer.0,
                    chunk: placement.chunk,
                })?;
        if extent.is_empty() {
            return Err(ExecError::EmptyTensor { tensor });
        }
        // Bound as whole words.
        let too_large = || ExecError::LargerThanPlacement {
            tensor,
            size: extent.size,
            placement_size: placement.size,
        };
        let size = extent.binding_size().ok_or_else(too_large)?;
        let within = extent.binding_end().ok_or_else(too_large)?;
        if within > placement.size {
            return Err(ExecError::LargerThanPlacement {
                tensor,
                size,
                placement_size: placement.size,
            });
        }
        let region = memory
            .bindable(&placement, extent.offset, size, u64::from(alignment))
            .map_err(|error| match error {
                DeviceError::UnalignedBinding { offset, .. } => ExecError::MisalignedOffset {
                    tensor,
                    offset,
                    alignment,
                },
                _ => ExecError::PastBufferEnd {
                    tensor,
                    offset: placement.offset.saturating_add(extent.offset),
                    size,
                    buffer_size: chunk.size.min(chunk.buffer.size()),
                },
            })?;
        Ok(TensorRange {
            key: RangeKey {
                layer,
                buffer: placement.buffer,
                chunk: placement.chunk,
                offset: region.offset,
                size,
            },
            buffer: &chunk.buffer,
        })
    }

    /// The bindable region of `tensor` for a bind group of your own: its range
    /// ([`TensorMemory::range`]) at the device's `min_storage_buffer_offset_alignment`,
    /// no larger than `max_storage_buffer_binding_size`.
    ///
    /// # Errors
    /// The errors of [`TensorMemory::range`], and [`ExecError::BindingTooLarge`].
    pub fn bindable(
        &self,
        graph: &Graph,
        tensor: TensorId,
        limits: &wgpu::Limits,
    ) -> Result<Region, ExecError> {
        let range = self.range(graph, tensor, limits.min_storage_buffer_offset_alignment)?;
        if range.key.size > limits.max_storage_buffer_binding_size {
            return Err(ExecError::BindingTooLarge {
                tensor,
                size: range.key.size,
                max_size: limits.max_storage_buffer_binding_size,
            });
        }
        Ok(range.region())
    }

    /// Every tensor of `graph` that a layer places (views included, each as its bytes
    /// in its root), with its bindable region ([`TensorMemory::bindable`]): what an
    /// engine that records its own passes binds. Tensors no layer places (weights of a
    /// layer not added, say) and empty tensors (nothing to bind) are left out.
    ///
    /// # Errors
    /// The errors of [`TensorMemory::bindable`] for a placed tensor (misaligned,
    /// larger than a binding, past its buffer's end).
    pub fn regions(
        &self,
        graph: &Graph,
        limits: &wgpu::Limits,
    ) -> Result<Vec<(TensorId, Region)>, ExecError> {
        let mut regions = Vec::new();
        for t in &graph.tensors {
            match self.bindable(graph, t.id, limits) {
                Ok(region) => regions.push((t.id, region)),
                Err(ExecError::NotPlaced { .. } | ExecError::EmptyTensor { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(regions)
    }

    fn copyable(&self, graph: &Graph, tensor: TensorId) -> Result<TensorRange<'a>, ExecError> {
        self.range(graph, tensor, wgpu::COPY_BUFFER_ALIGNMENT as u32)
    }

    /// Writes a tensor's bytes (exactly the bytes it occupies, [`Graph::extent`]: its
    /// size, or for a view its bytes in its root) at its placement, through the queue
    /// (visible to the next submit).
    ///
    /// # Errors
    /// [`ExecError::WrongDataSize`] when `bytes` is not the tensor's size, and the
    /// errors of [`TensorMemory::range`].
    pub fn write(
        &self,
        ctx: &GpuContext,
        graph: &Graph,
        tensor: TensorId,
        bytes: &[u8],
    ) -> Result<(), ExecError> {
        let range = self.copyable(graph, tensor)?;
        // The bytes the tensor occupies (a broadcast view: its root's).
        let expected = graph.extent(tensor).map_or(0, |e| e.size);
        if bytes.len() as u64 != expected {
            return Err(ExecError::WrongDataSize {
                tensor,
                expected,
                got: bytes.len() as u64,
            });
        }
        // The bound range is the size rounded up to 4: the zero padding stays inside it.
        write_buffer(ctx, range.buffer, range.key.offset, bytes).map_err(device_error)
    }

    /// Writes every value of `inputs` to its tensor ([`TensorMemory::write`] each).
    ///
    /// # Errors
    /// As [`TensorMemory::write`], for the first tensor that fails.
    pub fn write_inputs(
        &self,
        ctx: &GpuContext,
        graph: &Graph,
        inputs: &Inputs,
    ) -> Result<(), ExecError> {
        let mut ids: Vec<&TensorId> = inputs.keys().collect();
        ids.sort();
        for &id in ids {
            match &inputs[&id] {
                TensorData::F32(values) if is_f16(graph, id) => {
                    self.write(ctx, graph, id, &f16_bytes(values))?;
                }
                data => self.write(ctx, graph, id, data.as_bytes())?,
            }
        }
        Ok(())
    }

    /// Writes f32 values (see [`TensorMemory::write`]); an f16 tensor
    /// ([`crate::graph::DType::F16`]) gets them rounded to f16 (to nearest, ties to
    /// even).
    ///
    /// # Errors
    /// As [`TensorMemory::write`].
    pub fn write_f32(
        &self,
        ctx: &GpuContext,
        graph: &Graph,
        tensor: TensorId,
        values: &[f32],
    ) -> Result<(), ExecError> {
        if is_f16(graph, tensor) {
            return self.write(ctx, graph, tensor, &f16_bytes(values));
        }
        self.write(ctx, graph, tensor, bytemuck::cast_slice(values))
    }

    /// Writes u32 values (token ids; see [`TensorMemory::write`]).
    ///
    /// # Errors
    /// As [`TensorMemory::write`].
    pub fn write_u32(
        &self,
        ctx: &GpuContext,
        graph: &Graph,
        tensor: TensorId,
        values: &[u32],
    ) -> Result<(), ExecError> {
        self.write(ctx, graph, tensor, bytemuck::cast_slice(values))
    }

    /// Reads back the bytes a tensor occupies ([`Graph::extent`]; copy to a staging
    /// buffer, map, wait).
    ///
    /// # Errors
    /// The errors of [`TensorMemory::range`]; [`ExecError::Device`] when the copy,
    /// the map or the poll fails.
    pub fn read(
        &self,
        ctx: &GpuContext,
        graph: &Graph,
        tensor: TensorId,
    ) -> Result<Vec<u8>, ExecError> {
        let range = self.copyable(graph, tensor)?;
        let len = graph.extent(tensor).map_or(0, |e| e.size);
        read_buffer_range(ctx, range.buffer, range.key.offset, len).map_err(device_error)
    }

    /// Reads f32 values back (see [`TensorMemory::read`]); an f16 tensor's values
    /// are widened to f32 (exactly).
    ///
    /// # Errors
    /// As [`TensorMemory::read`].
    pub fn read_f32(
        &self,
        ctx: &GpuContext,
        graph: &Graph,
        tensor: TensorId,
    ) -> Result<Vec<f32>, ExecError> {
        let bytes = self.read(ctx, graph, tensor)?;
        if is_f16(graph, tensor) {
            return Ok(f32_from_f16_bytes(&bytes));
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// Whether `tensor` is stored as f16.
fn is_f16(graph: &Graph, tensor: TensorId) -> bool {
    graph
        .tensor(tensor)
        .is_some_and(|t| t.dtype == crate::graph::DType::F16)
}

/// `values` rounded to f16 (to nearest, ties to even), as little-endian bytes.
pub(crate) fn f16_bytes(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect()
}

/// Little-endian f16 bytes widened to f32 (a trailing odd byte is ignored).
pub(crate) fn f32_from_f16_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}
