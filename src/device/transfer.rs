//! Upload and readback: bytes into a planned tensor, bytes out of any buffer range,
//! through staging memory, with every failure returned as an error.

use std::sync::mpsc;

use super::scope::{self, scoped};
use super::{DeviceError, GpuContext, PlannedMemory};
use crate::graph::TensorId;
use crate::plan::{align_up, Placement};

const ALIGN: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

fn check_range(buffer: &wgpu::Buffer, offset: u64, size: u64) -> Result<u64, DeviceError> {
    let out = DeviceError::RangeOutOfBounds {
        offset,
        size,
        buffer_size: buffer.size(),
    };
    match offset.checked_add(size) {
        Some(end) if end <= buffer.size() => Ok(end),
        _ => Err(out),
    }
}

fn require_usage(buffer: &wgpu::Buffer, needed: wgpu::BufferUsages) -> Result<(), DeviceError> {
    if buffer.usage().contains(needed) {
        Ok(())
    } else {
        Err(DeviceError::MissingUsage {
            needed: format!("{needed:?}"),
            has: format!("{:?}", buffer.usage()),
        })
    }
}

/// Writes `data` at `offset` of `buffer` through the queue's staging memory. The data
/// is padded with zeros to a multiple of 4 bytes; the padded range must fit the buffer.
/// The write is ordered before the next submission on `ctx.queue`.
///
/// # Errors
/// [`DeviceError::UnalignedWrite`] when `offset` is not a multiple of
/// `wgpu::COPY_BUFFER_ALIGNMENT`; [`DeviceError::RangeOutOfBounds`];
/// [`DeviceError::MissingUsage`] without `COPY_DST`; a wgpu error caught in scope.
pub fn write_buffer(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    offset: u64,
    data: &[u8],
) -> Result<(), DeviceError> {
    if !offset.is_multiple_of(ALIGN) {
        return Err(DeviceError::UnalignedWrite {
            offset,
            alignment: ALIGN,
        });
    }
    require_usage(buffer, wgpu::BufferUsages::COPY_DST)?;
    let len = data.len() as u64;
    let padded = align_up(len, ALIGN).ok_or(DeviceError::RangeOutOfBounds {
        offset,
        size: len,
        buffer_size: buffer.size(),
    })?;
    check_range(buffer, offset, padded)?;
    if padded == 0 {
        return Ok(());
    }
    scope::scoped(&ctx.device, padded, || {
        if padded == len {
            ctx.queue.write_buffer(buffer, offset, data);
        } else {
            let mut bytes = data.to_vec();
            bytes.resize(bytes.len() + (padded - len) as usize, 0);
            ctx.queue.write_buffer(buffer, offset, &bytes);
        }
    })
}

/// Writes `data` into the memory of a planned tensor. `data` may be shorter than the
/// placement; its padding to 4 bytes stays inside the placement's reserved size.
///
/// # Errors
/// [`DeviceError::BadPlacement`] when the placement's chunk does not exist in `memory`
/// or `data` is longer than the placement; otherwise as [`write_buffer`].
pub fn write_tensor(
    ctx: &GpuContext,
    memory: &PlannedMemory,
    tensor: TensorId,
    placement: &Placement,
    data: &[u8],
) -> Result<(), DeviceError> {
    let bad = DeviceError::BadPlacement {
        tensor,
        buffer: placement.buffer.0,
        chunk: placement.chunk,
        offset: placement.offset,
        size: placement.size,
    };
    let padded = align_up(data.len() as u64, ALIGN).ok_or(bad.clone())?;
    if padded > placement.size {
        return Err(bad);
    }
    let region = memory.bindable(placement, 0, padded, 1).map_err(|_| bad)?;
    write_buffer(ctx, &region.buffer, region.offset, data)
}

/// Reads `size` bytes at `offset` of `buffer` back to the CPU. Any offset and size are
/// accepted: the copy covers the range widened to `wgpu::COPY_BUFFER_ALIGNMENT` and
/// the exact bytes are cut out of it. Waits for all work submitted before.
///
/// # Errors
/// [`DeviceError::RangeOutOfBounds`]; [`DeviceError::MissingUsage`] without
/// `COPY_SRC`; [`DeviceError::Map`] or [`DeviceError::Poll`] when the staging buffer
/// cannot be mapped; a wgpu error caught in scope (e.g. out of memory for the staging
/// buffer).
pub fn read_buffer_range(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    offset: u64,
    size: u64,
) -> Result<Vec<u8>, DeviceError> {
    let end = check_range(buffer, offset, size)?;
    require_usage(buffer, wgpu::BufferUsages::COPY_SRC)?;
    if size == 0 {
        return Ok(Vec::new());
    }
    let start = offset - offset % ALIGN;
    // `end` <= buffer.size(), which is a multiple of 4 for every buffer wgpu can copy
    // from, so the widened end stays inside the buffer.
    let wide_end = align_up(end, ALIGN).filter(|e| *e <= buffer.size()).ok_or(
        DeviceError::RangeOutOfBounds {
            offset,
            size,
            buffer_size: buffer.size(),
        },
    )?;
    let wide = wide_end - start;
    let staging = scope::scoped(&ctx.device, wide, || {
        let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgalloc readback"),
            size: wide,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgalloc readback"),
            });
        encoder.copy_buffer_to_buffer(buffer, start, &staging, 0, wide);
        ctx.queue.submit([encoder.finish()]);
        staging
    })?;
    let result = read_staging(
        ctx,
        &[StagingRead {
            staging: &staging,
            skip: offset - start,
            len: size,
        }],
    )
    .map(|mut all| all.pop().unwrap_or_default());
    staging.destroy();
    result
}

/// One read of [`read_staging`]: bytes `[skip, skip + len)` of a `MAP_READ` buffer.
#[derive(Debug, Clone, Copy)]
pub struct StagingRead<'a> {
    /// The staging buffer (usage `MAP_READ | COPY_DST`), filled by submitted work.
    pub staging: &'a wgpu::Buffer,
    /// Bytes to skip at its start.
    pub skip: u64,
    /// Bytes to copy out.
    pub len: u64,
}

/// The one readback path: maps every staging buffer (in error scopes, so a refused map
/// is an error, not a panic), waits for the device once, copies each read's bytes out
/// and unmaps. Waits for all work submitted before.
///
/// # Errors
/// [`DeviceError::Map`] or [`DeviceError::Poll`] when mapping or waiting fails (or a
/// wgpu error caught in scope); [`DeviceError::RangeOutOfBounds`] when a read runs
/// past its buffer.
pub fn read_staging(
    ctx: &GpuContext,
    reads: &[StagingRead<'_>],
) -> Result<Vec<Vec<u8>>, DeviceError> {
    let (sender, receiver) = mpsc::channel();
    scoped(&ctx.device, 0, || {
        for read in reads {
            let sender = sender.clone();
            read.staging
                .map_async(wgpu::MapMode::Read, .., move |result| {
                    // The receiver outlives the poll below; a send error only means nobody waits.
                    let _ = sender.send(result);
                });
        }
    })?;
    drop(sender);
    ctx.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| DeviceError::Poll {
            message: e.to_string(),
        })?;
    let map_failed = |message: String| DeviceError::Map { message };
    for _ in reads {
        receiver
            .recv()
            .map_err(|e| map_failed(format!("the map callback never ran: {e}")))?
            .map_err(|e| map_failed(e.to_string()))?;
    }
    let copied = scoped(&ctx.device, 0, || {
        reads
            .iter()
            .map(|read| {
                let bytes = {
                    let view = read
                        .staging
                        .get_mapped_range(..)
                        .map_err(|e| map_failed(format!("mapped range: {e}")))?;
                    let from = usize::try_from(read.skip).unwrap_or(usize::MAX);
                    let to =
                        usize::try_from(read.skip.saturating_add(read.len)).unwrap_or(usize::MAX);
                    view.get(from..to)
                        .map(<[u8]>::to_vec)
                        .ok_or(DeviceError::RangeOutOfBounds {
                            offset: read.skip,
                            size: read.len,
                            buffer_size: read.staging.size(),
                        })
                };
                read.staging.unmap();
                bytes
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    copied
}

/// Reads the first `size` bytes of a planned tensor back to the CPU.
///
/// # Errors
/// [`DeviceError::BadPlacement`] when the placement's chunk does not exist in `memory`
/// or `size` exceeds the placement; otherwise as [`read_buffer_range`].
pub fn read_tensor(
    ctx: &GpuContext,
    memory: &PlannedMemory,
    tensor: TensorId,
    placement: &Placement,
    size: u64,
) -> Result<Vec<u8>, DeviceError> {
    let bad = DeviceError::BadPlacement {
        tensor,
        buffer: placement.buffer.0,
        chunk: placement.chunk,
        offset: placement.offset,
        size: placement.size,
    };
    if size > placement.size {
        return Err(bad);
    }
    let region = memory.bindable(placement, 0, size, 1).map_err(|_| bad)?;
    read_buffer_range(ctx, &region.buffer, region.offset, size)
}
