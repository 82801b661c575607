//! [`PassTimer`]: GPU time of one compute pass from two timestamp queries, shared by the
//! executor and the checksum run.

use std::time::Duration;

use super::ExecError;
use crate::device::{read_staging, GpuContext, StagingRead};

/// Timestamp queries at the start and end of a pass: the query set, its resolve target
/// and a readback buffer.
#[derive(Debug)]
pub(crate) struct PassTimer {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl PassTimer {
    /// A timer on `ctx`'s device, or `None` when the device has no timestamp queries.
    pub(crate) fn new(ctx: &GpuContext) -> Option<PassTimer> {
        if !ctx.has_timestamps() {
            return None;
        }
        let device = &ctx.device;
        let size = 2 * u64::from(wgpu::QUERY_SIZE);
        Some(PassTimer {
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("wgalloc pass time"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            }),
            resolve: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgalloc timestamps"),
                size,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            readback: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgalloc timestamps readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        })
    }

    /// The pass's timestamp writes (start and end).
    pub(crate) fn writes(&self) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        }
    }

    /// Records the resolve and the copy to the readback buffer after the pass.
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.resolve_query_set(&self.queries, 0..2, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, self.resolve.size());
    }

    /// The pass's GPU time, once the submitted work finished (waits for it).
    ///
    /// # Errors
    /// [`ExecError::Device`] when the readback fails.
    pub(crate) fn read(&self, ctx: &GpuContext) -> Result<Duration, ExecError> {
        let read = StagingRead {
            staging: &self.readback,
            skip: 0,
            len: self.readback.size(),
        };
        let bytes = read_staging(ctx, &[read])?.pop().unwrap_or_default();
        let stamp = |i: usize| {
            bytes
                .get(i * 8..i * 8 + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_le_bytes)
        };
        let ticks = stamp(1).saturating_sub(stamp(0));
        let nanos = ticks as f64 * f64::from(ctx.queue.get_timestamp_period());
        Ok(Duration::from_nanos(nanos as u64))
    }
}
