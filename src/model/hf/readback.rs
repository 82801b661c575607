//! [`Readback`]: one staging buffer kept across steps for reading logits back, so that
//! a steady-state step creates no buffer (it grows only when a step needs more).

use crate::device::{read_staging, scoped, DeviceError, GpuContext, StagingRead};
use crate::storage::Region;

/// A persistent `MAP_READ` staging buffer.
#[derive(Debug, Default)]
pub(crate) struct Readback {
    staging: Option<wgpu::Buffer>,
    /// Buffers this readback has created (1 per growth).
    pub(crate) created: usize,
}

impl Readback {
    /// Copies each region (sizes multiples of 4) into the staging buffer, one after
    /// the other, waits, and returns their bytes in order.
    ///
    /// # Errors
    /// [`DeviceError`] when the buffer cannot be made, the copy or the map fails.
    pub(crate) fn read(
        &mut self,
        ctx: &GpuContext,
        regions: &[Region],
    ) -> Result<Vec<Vec<u8>>, DeviceError> {
        let total: u64 = regions.iter().map(|r| r.size).sum();
        if total == 0 {
            return Ok(vec![Vec::new(); regions.len()]);
        }
        let need_new = self.staging.as_ref().is_none_or(|b| b.size() < total);
        if need_new {
            self.staging = None;
            let buffer = scoped(&ctx.device, total, || {
                ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("wgalloc generate readback"),
                    size: total,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })?;
            self.staging = Some(buffer);
            self.created += 1;
        }
        let Some(staging) = self.staging.as_ref() else {
            return Err(DeviceError::Map {
                message: "no staging buffer".to_string(),
            });
        };
        scoped(&ctx.device, 0, || {
            let mut encoder = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("wgalloc generate readback"),
                });
            let mut at = 0;
            for r in regions {
                encoder.copy_buffer_to_buffer(&r.buffer, r.offset, staging, at, r.size);
                at += r.size;
            }
            ctx.queue.submit([encoder.finish()]);
        })?;
        let all = read_staging(
            ctx,
            &[StagingRead {
                staging,
                skip: 0,
                len: total,
            }],
        )?
        .pop()
        .unwrap_or_default();
        let mut out = Vec::with_capacity(regions.len());
        let mut at = 0usize;
        for r in regions {
            let len = usize::try_from(r.size).unwrap_or(usize::MAX);
            out.push(all.get(at..at.saturating_add(len)).unwrap_or(&[]).to_vec());
            at = at.saturating_add(len);
        }
        Ok(out)
    }
}
