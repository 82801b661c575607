//! [`ChecksumRun`]: the checksum run on a wgpu device. Pipelines, bind groups and
//! tables are built once; each [`ChecksumRun::run`] records every dispatch into one
//! compute pass, submits once and reads back the mismatch records.

use std::collections::HashMap;
use std::time::Instant;

use wgpu::util::DeviceExt;

use super::predict::Prediction;
use super::report::{ChecksumReport, Mismatch};
use super::schedule::{
    Chunks, Kind, Schedule, FIXED_STORAGE_BUFFERS, MAX_RECORDS, SLOTS, SUMS_BASE,
};
use crate::device::{read_staging, scoped, DeviceError, GpuContext, PlannedMemory, StagingRead};
use crate::exec::pipeline::compute_pipeline;
use crate::exec::timer::PassTimer;
use crate::exec::ExecError;
use crate::graph::Graph;
use crate::plan::Plan;
use crate::storage::Region;

/// The WGSL of the checksum run.
pub const CHECKSUM_WGSL: &str = include_str!("../../../shaders/checksum.wgsl");

/// Bytes of the uniform parameters of one dispatch.
const PARAMS_SIZE: u64 = 64;
/// Bytes of the state buffer's header (counter and records) that is read back.
const HEADER_SIZE: u64 = (SUMS_BASE as u64) * 4;

/// The checksum run's bind-group layout and pipelines, compiled once per device and
/// shared by every [`ChecksumRun`] (compiling
/// them is most of a small run's cost on a software adapter).
#[derive(Debug, Clone)]
pub(crate) struct ChecksumKernels {
    layout: wgpu::BindGroupLayout,
    reduce: wgpu::ComputePipeline,
    write: wgpu::ComputePipeline,
}

/// The checksum kernels of one device, compiled on first use
/// ([`crate::device::DeviceShared`]).
#[derive(Debug, Default)]
struct SharedChecksumKernels(std::sync::Mutex<Option<ChecksumKernels>>);

impl ChecksumKernels {
    /// The checksum kernels of `ctx`'s device: `shaders/checksum.wgsl` and its two
    /// pipelines, compiled the first time any runner on the device asks, then shared.
    ///
    /// # Errors
    /// [`ExecError::Gpu`] when wgpu reports a validation or out-of-memory error (the
    /// next call tries again).
    pub fn new(ctx: &GpuContext) -> Result<ChecksumKernels, ExecError> {
        let shared = ctx.shared.get_or_init(SharedChecksumKernels::default);
        let mut slot = shared
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(kernels) = slot.as_ref() {
            return Ok(kernels.clone());
        }
        let kernels = ChecksumKernels::compile(ctx)?;
        *slot = Some(kernels.clone());
        Ok(kernels)
    }

    fn compile(ctx: &GpuContext) -> Result<ChecksumKernels, ExecError> {
        let device = &ctx.device;
        let compiled = scoped(device, 0, || {
            let layout = bind_group_layout(device);
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("checksum.wgsl"),
                source: wgpu::ShaderSource::Wgsl(CHECKSUM_WGSL.into()),
            });
            let pipeline = |entry: &str| compute_pipeline(device, &module, entry, &layout, &[]);
            let (reduce, write) = (pipeline("reduce"), pipeline("write"));
            (layout, reduce, write)
        });
        let (layout, reduce, write) =
            compiled.map_err(gpu_error("compiling the checksum kernels"))?;
        Ok(ChecksumKernels {
            layout,
            reduce,
            write,
        })
    }
}

/// A prepared checksum run of one graph over one plan's memory.
#[derive(Debug)]
pub(crate) struct ChecksumRun<'a> {
    ctx: &'a GpuContext,
    graph: &'a Graph,
    schedule: Schedule,
    reduce: wgpu::ComputePipeline,
    write: wgpu::ComputePipeline,
    bind_groups: Vec<wgpu::BindGroup>,
    dispatch_group: Vec<usize>,
    param_stride: u64,
    state: wgpu::Buffer,
    readback: wgpu::Buffer,
    timer: Option<PassTimer>,
}

fn gpu_error(stage: &'static str) -> impl Fn(DeviceError) -> ExecError {
    move |source| ExecError::Gpu { stage, source }
}

fn check_limit(what: &str, needed: u64, limit: u64) -> Result<(), ExecError> {
    if needed > limit {
        return Err(ExecError::ChecksumLimit {
            what: what.to_string(),
            needed,
            limit,
        });
    }
    Ok(())
}

impl<'a> ChecksumRun<'a> {
    /// Predicts the run on the CPU, lays it out and builds everything the GPU needs, with
    /// `kernels` compiled once per device ([`ChecksumKernels::new`]).
    ///
    /// # Errors
    /// [`ExecError::ChecksumLimit`] when the device has too few storage bindings per
    /// stage, or a chunk buffer or table exceeds a binding; the errors of
    /// [`Prediction::of`] and of the layout ([`ExecError::ChecksumPlacement`] for a
    /// tensor outside its memory); [`ExecError::Gpu`] when wgpu reports an error.
    pub(crate) fn new(
        ctx: &'a GpuContext,
        kernels: &ChecksumKernels,
        graph: &'a Graph,
        plan: &Plan,
        memory: &PlannedMemory,
    ) -> Result<ChecksumRun<'a>, ExecError> {
        check_limit(
            "storage buffers per shader stage",
            u64::from(FIXED_STORAGE_BUFFERS) + SLOTS as u64,
            u64::from(ctx.limits.max_storage_buffers_per_shader_stage),
        )?;
        let windows = BufferWindows::of(memory, &ctx.limits)?;
        let (chunk_buffer, chunk_span) = windows.chunks_of(memory);
        let buffer_sizes: Vec<u64> = windows.windows.iter().map(|w| w.size).collect();
        let prediction = Prediction::of(graph)?;
        let schedule = Schedule::build(
            graph,
            plan,
            Chunks {
                chunk_buffer: &chunk_buffer,
                chunk_span: &chunk_span,
                buffer_sizes: &buffer_sizes,
            },
            &prediction,
        )?;
        let sizes = RunSizes::of(&schedule, &ctx.limits)?;
        let objects = scoped(&ctx.device, 0, || {
            RunObjects::create(ctx, kernels, &schedule, &windows, &sizes)
        })
        .map_err(gpu_error("preparing the checksum run"))?;
        let RunObjects {
            state,
            readback,
            bind_groups,
            dispatch_group,
            timer,
        } = objects;
        let (reduce, write) = (kernels.reduce.clone(), kernels.write.clone());
        let param_stride = sizes.param_stride;
        Ok(ChecksumRun {
            ctx,
            graph,
            schedule,
            reduce,
            write,
            bind_groups,
            dispatch_group,
            param_stride,
            state,
            readback,
            timer,
        })
    }

    /// Runs the graph once on the GPU: clears the state, records every dispatch into
    /// one compute pass, submits once, waits and reads back the mismatch records.
    ///
    /// # Errors
    /// [`ExecError::Gpu`] when wgpu reports a validation error, or mapping or polling
    /// fails.
    pub fn run(&self) -> Result<ChecksumReport, ExecError> {
        let device = &self.ctx.device;
        let submitted_work = scoped(device, 0, || {
            let started = Instant::now();
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgalloc checksum run"),
            });
            encoder.clear_buffer(&self.state, 0, None);
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("wgalloc checksum pass"),
                    timestamp_writes: self.timer.as_ref().map(PassTimer::writes),
                });
                let mut current: Option<Kind> = None;
                for (i, d) in self.schedule.dispatches.iter().enumerate() {
                    if current != Some(d.kind) {
                        pass.set_pipeline(match d.kind {
                            Kind::Reduce => &self.reduce,
                            Kind::Write => &self.write,
                        });
                        current = Some(d.kind);
                    }
                    let offset = (i as u64 * self.param_stride) as u32;
                    pass.set_bind_group(0, &self.bind_groups[self.dispatch_group[i]], &[offset]);
                    pass.dispatch_workgroups(d.groups.0, d.groups.1, 1);
                }
            }
            encoder.copy_buffer_to_buffer(&self.state, 0, &self.readback, 0, HEADER_SIZE);
            if let Some(t) = &self.timer {
                t.resolve(&mut encoder);
            }
            let commands = encoder.finish();
            let encode_time = started.elapsed();
            let submitted = Instant::now();
            self.ctx.queue.submit([commands]);
            (encode_time, submitted)
        });
        let (encode_time, submitted) =
            submitted_work.map_err(gpu_error("running the checksum pass"))?;
        let header = read_words(self.ctx, &self.readback)?;
        let wall_time = submitted.elapsed();
        let gpu_time = self.timer.as_ref().map(|t| t.read(self.ctx)).transpose()?;
        let mismatches = header.first().copied().unwrap_or(0);
        let kept = mismatches.min(MAX_RECORDS) as usize;
        let first_mismatches = (0..kept)
            .filter_map(|k| header.get(1 + 4 * k..5 + 4 * k))
            .map(|r| Mismatch::from_record(self.graph, r[0], r[1], r[2], r[3]))
            .collect();
        Ok(ChecksumReport {
            nodes: self.graph.nodes.len(),
            tensors: self.schedule.tensors_checked,
            checks: self.schedule.reads,
            dispatches: self.schedule.dispatches.len(),
            mismatches,
            first_mismatches,
            encode_time,
            gpu_time,
            wall_time,
        })
    }
}

fn bind_group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries = vec![
        wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: true,
                min_binding_size: wgpu::BufferSize::new(PARAMS_SIZE),
            },
            count: None,
        },
        storage(1, true),
        storage(2, false),
    ];
    entries.extend((0..SLOTS as u32).map(|s| storage(3 + s, false)));
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("wgalloc checksum"),
        entries: &entries,
    })
}

/// Reads a `MAP_READ` buffer back (the device's one readback path) as words.
fn read_words(ctx: &GpuContext, buffer: &wgpu::Buffer) -> Result<Vec<u32>, ExecError> {
    let read = StagingRead {
        staging: buffer,
        skip: 0,
        len: buffer.size(),
    };
    let bytes = read_staging(ctx, &[read])
        .map_err(gpu_error("reading back results"))?
        .pop()
        .unwrap_or_default();
    Ok(bytemuck::pod_collect_to_vec::<u8, u32>(&bytes))
}

/// The sizes of a run's own buffers, each checked against the device's limits.
struct RunSizes {
    table_bytes: u64,
    state_bytes: u64,
    param_stride: u64,
    params_bytes: u64,
}

impl RunSizes {
    fn of(schedule: &Schedule, limits: &wgpu::Limits) -> Result<RunSizes, ExecError> {
        let binding_limit = limits.max_storage_buffer_binding_size;
        let table_bytes = (schedule.table.len().max(1) as u64).saturating_mul(4);
        check_limit("checksum table", table_bytes, binding_limit)?;
        let state_bytes = (u64::from(SUMS_BASE) + u64::from(schedule.reads)).saturating_mul(4);
        check_limit("checksum state", state_bytes, binding_limit)?;
        let param_stride = PARAMS_SIZE.max(u64::from(limits.min_uniform_buffer_offset_alignment));
        let params_bytes = param_stride.saturating_mul(schedule.dispatches.len().max(1) as u64);
        check_limit("checksum parameters", params_bytes, limits.max_buffer_size)?;
        Ok(RunSizes {
            table_bytes,
            state_bytes,
            param_stride,
            params_bytes,
        })
    }
}

/// What a run keeps on the device: its state and readback buffers, one bind group per
/// distinct set of bound windows (each holds the parameter, table and empty-slot
/// buffers it binds), and which group each dispatch uses.
struct RunObjects {
    state: wgpu::Buffer,
    readback: wgpu::Buffer,
    bind_groups: Vec<wgpu::BindGroup>,
    dispatch_group: Vec<usize>,
    timer: Option<PassTimer>,
}

impl RunObjects {
    /// Creates them (call inside error scopes: wgpu reports failures there).
    fn create(
        ctx: &GpuContext,
        kernels: &ChecksumKernels,
        schedule: &Schedule,
        windows: &BufferWindows,
        sizes: &RunSizes,
    ) -> RunObjects {
        let device = &ctx.device;
        let params = params_buffer(device, schedule, sizes);
        let mut table_words = schedule.table.clone();
        if table_words.is_empty() {
            table_words.push(0);
        }
        debug_assert_eq!(table_words.len() as u64 * 4, sizes.table_bytes);
        let table = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("wgalloc checksum table"),
            contents: bytemuck::cast_slice(&table_words),
            usage: wgpu::BufferUsages::STORAGE,
        });
        let state = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgalloc checksum state"),
            size: sizes.state_bytes,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgalloc checksum readback"),
            size: HEADER_SIZE,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let fixed = FixedBindings {
            params: &params,
            table: &table,
            state: &state,
        };
        let (bind_groups, dispatch_group) =
            bind_groups(device, &kernels.layout, schedule, windows, &fixed);
        RunObjects {
            state,
            readback,
            bind_groups,
            dispatch_group,
            timer: PassTimer::new(ctx),
        }
    }
}

/// Every dispatch's parameters in one uniform buffer, one per `param_stride` bytes.
fn params_buffer(device: &wgpu::Device, schedule: &Schedule, sizes: &RunSizes) -> wgpu::Buffer {
    let mut param_bytes = vec![0u8; sizes.params_bytes as usize];
    for (i, d) in schedule.dispatches.iter().enumerate() {
        let at = i * sizes.param_stride as usize;
        param_bytes[at..at + PARAMS_SIZE as usize].copy_from_slice(bytemuck::cast_slice(&d.params));
    }
    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("wgalloc checksum params"),
        contents: &param_bytes,
        usage: wgpu::BufferUsages::UNIFORM,
    })
}

/// The buffers every bind group of a run binds at 0, 1 and 2.
struct FixedBindings<'b> {
    params: &'b wgpu::Buffer,
    table: &'b wgpu::Buffer,
    state: &'b wgpu::Buffer,
}

/// One bind group per distinct set of windows the dispatches bind (a slot no window
/// fills binds a small empty buffer), and the group of each dispatch.
fn bind_groups(
    device: &wgpu::Device,
    layout: &wgpu::BindGroupLayout,
    schedule: &Schedule,
    windows: &BufferWindows,
    fixed: &FixedBindings<'_>,
) -> (Vec<wgpu::BindGroup>, Vec<usize>) {
    let empty: Vec<wgpu::Buffer> = (0..SLOTS)
        .map(|_| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgalloc checksum empty slot"),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        })
        .collect();
    let mut groups = Vec::new();
    let mut group_of: HashMap<[Option<usize>; SLOTS], usize> = HashMap::new();
    let mut dispatch_group = Vec::with_capacity(schedule.dispatches.len());
    for d in &schedule.dispatches {
        let index = *group_of.entry(d.slots).or_insert_with(|| {
            let mut entries = vec![
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: fixed.params,
                        offset: 0,
                        size: wgpu::BufferSize::new(PARAMS_SIZE),
                    }),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: fixed.table.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: fixed.state.as_entire_binding(),
                },
            ];
            for (s, slot) in d.slots.iter().enumerate() {
                let window = slot.and_then(|u| windows.windows.get(u));
                let resource = match window.and_then(Region::binding) {
                    Some(binding) => wgpu::BindingResource::Buffer(binding),
                    None => empty[s].as_entire_binding(),
                };
                entries.push(wgpu::BindGroupEntry {
                    binding: 3 + s as u32,
                    resource,
                });
            }
            groups.push(device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("wgalloc checksum"),
                layout,
                entries: &entries,
            }));
            groups.len() - 1
        });
        dispatch_group.push(index);
    }
    (groups, dispatch_group)
}

/// The part of each buffer a checksum run binds: per distinct buffer of the memory, one
/// window from the first chunk's start (rounded down to the storage offset alignment)
/// to the last chunk's end (rounded up to whole words), so a chunk that is a sub-range
/// of a large page binds only the bytes the plan uses.
struct BufferWindows {
    windows: Vec<Region>,
}

impl BufferWindows {
    fn of(memory: &PlannedMemory, limits: &wgpu::Limits) -> Result<BufferWindows, ExecError> {
        let alignment = u64::from(limits.min_storage_buffer_offset_alignment).max(4);
        let mut spans: Vec<(wgpu::Buffer, u64, u64)> = Vec::new();
        for region in memory.regions().iter().flatten() {
            let end = region.end().ok_or_else(|| ExecError::ChecksumLimit {
                what: "a chunk's end".into(),
                needed: u64::MAX,
                limit: region.buffer.size(),
            })?;
            match spans.iter_mut().find(|(b, _, _)| *b == region.buffer) {
                Some((_, lo, hi)) => {
                    *lo = (*lo).min(region.offset);
                    *hi = (*hi).max(end);
                }
                None => spans.push((region.buffer.clone(), region.offset, end)),
            }
        }
        let windows = spans
            .into_iter()
            .enumerate()
            .map(|(i, (buffer, lo, hi))| {
                let lo = lo - lo % alignment;
                let hi = hi.next_multiple_of(4).min(buffer.size() / 4 * 4);
                let size = hi.saturating_sub(lo);
                check_limit(
                    &format!("buffer window {i} bound for the proof"),
                    size,
                    limits.max_storage_buffer_binding_size,
                )?;
                Ok(Region {
                    buffer,
                    offset: lo,
                    size,
                })
            })
            .collect::<Result<Vec<Region>, ExecError>>()?;
        Ok(BufferWindows { windows })
    }

    /// For each chunk of `memory` (`[buffer][chunk]`), the window it lies in and its
    /// span (offset inside that window, size).
    #[allow(clippy::type_complexity)]
    fn chunks_of(&self, memory: &PlannedMemory) -> (Vec<Vec<usize>>, Vec<Vec<(u64, u64)>>) {
        memory
            .regions()
            .iter()
            .map(|regions| {
                regions
                    .iter()
                    .map(|region| {
                        let i = self.index_of(&region.buffer);
                        (i, (region.offset - self.windows[i].offset, region.size))
                    })
                    .unzip()
            })
            .unzip()
    }

    /// The window of `buffer` (every buffer of the memory has one).
    fn index_of(&self, buffer: &wgpu::Buffer) -> usize {
        self.windows
            .iter()
            .position(|w| w.buffer == *buffer)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::checksum::schedule::{READ_STRIDE, WORKGROUP};

    #[test]
    fn checksum_wgsl_validates_with_naga() {
        let module = naga::front::wgsl::parse_str(CHECKSUM_WGSL).expect("parses");
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .expect("validates");
    }

    #[test]
    fn shader_constants_match_the_rust_layout() {
        for line in [
            format!("const WORKGROUP: u32 = {WORKGROUP}u;"),
            format!("const READ_STRIDE: u32 = {READ_STRIDE}u;"),
            format!("const MAX_RECORDS: u32 = {MAX_RECORDS}u;"),
            format!("const SUMS_BASE: u32 = {SUMS_BASE}u;"),
            format!("@workgroup_size({WORKGROUP})"),
            format!(
                "@binding({}) var<storage, read_write> slot{}",
                2 + SLOTS,
                SLOTS - 1
            ),
        ] {
            assert!(CHECKSUM_WGSL.contains(&line), "shader lacks {line:?}");
        }
    }
}
