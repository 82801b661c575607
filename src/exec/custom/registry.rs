//! [`UserOps`]: a set of checked user ops (no GPU needed), and the per-device set that
//! [`register_op`] fills: every executor on the device runs its ops, with pipelines
//! compiled once at registration. The set belongs to the [`GpuContext`] it was
//! registered on and its clones, not to the `wgpu::Device`: wgpu gives no way to tell
//! that two device handles are one device (a device's id is unique only within its
//! wgpu instance, and pipelines of another instance's device would crash wgpu), so a
//! context from another [`GpuContext::adopt`] of the same device starts with no user
//! ops. Adopt a device once and clone the context.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::error::RegisterError;
use super::op::{Bind, UserOp};
use super::validate::{self, Checked, CheckedEntry};
use crate::device::{scoped, GpuContext};
use crate::exec::ops::Op;
use crate::exec::pipeline::compute_pipeline;

/// Ids of registered ops, unique in the process (bind groups and pipelines are cached
/// under them).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A user op that passed registration.
#[derive(Debug)]
pub(crate) struct Registered {
    /// Unique in the process.
    pub(crate) id: u64,
    /// The definition.
    pub(crate) op: UserOp,
    /// What naga found.
    pub(crate) checked: Checked,
}

impl Registered {
    /// The entry point and binding map for a dispatch, in place or not; `None` when
    /// in place is asked of an op without an in-place entry point.
    pub(crate) fn entry(&self, inplace: bool) -> Option<(&CheckedEntry, &[Bind])> {
        if inplace {
            let (_, map) = self.op.inplace.as_ref()?;
            Some((self.checked.inplace.as_ref()?, map))
        } else {
            Some((&self.checked.entry, &self.op.bindings))
        }
    }
}

/// A set of user ops, each checked with naga when registered. The device's set
/// ([`user_ops`]) is what executors run; a set of your own serves the CPU reference
/// ([`crate::exec::cpu_ref::evaluate_with`]) with no GPU.
#[derive(Debug, Clone, Default)]
pub struct UserOps {
    ops: HashMap<String, Arc<Registered>>,
}

impl UserOps {
    /// No ops.
    pub fn new() -> UserOps {
        UserOps::default()
    }

    /// Checks `op` and adds it.
    ///
    /// # Errors
    /// [`RegisterError::NameTaken`] when a built-in op or an op of this set has the
    /// name, and every check of the WGSL and binding maps ([`RegisterError`]).
    pub fn register(&mut self, op: UserOp) -> Result<(), RegisterError> {
        let checked = self.check(&op)?;
        self.insert(op, checked);
        Ok(())
    }

    fn check(&self, op: &UserOp) -> Result<Checked, RegisterError> {
        validate::check_name(&op.name)?;
        let builtin = Op::parse(&op.name).is_some();
        if builtin || self.ops.contains_key(&op.name) {
            return Err(RegisterError::NameTaken {
                name: op.name.clone(),
                builtin,
            });
        }
        validate::check(op)
    }

    fn insert(&mut self, op: UserOp, checked: Checked) -> Arc<Registered> {
        let registered = Arc::new(Registered {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            op,
            checked,
        });
        self.ops
            .insert(registered.op.name.clone(), registered.clone());
        registered
    }

    /// Whether an op of this name is in the set.
    pub fn contains(&self, name: &str) -> bool {
        self.ops.contains_key(name)
    }

    /// The names of the ops, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.ops.keys().cloned().collect();
        names.sort();
        names
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The op named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Registered>> {
        self.ops.get(name)
    }
}

/// One entry point's pipeline and the bind-group layout naga's reflection gave it.
#[derive(Debug, Clone)]
pub(crate) struct UserPipeline {
    /// The pipeline.
    pub(crate) pipeline: wgpu::ComputePipeline,
    /// Its layout: the parameter block (dynamic offset) and storage buffers at their
    /// reflected bindings and access.
    pub(crate) layout: wgpu::BindGroupLayout,
}

/// The compiled pipelines of one registered op.
#[derive(Debug, Clone)]
pub(crate) struct UserPipelines {
    /// Out of place.
    pub(crate) out_of_place: UserPipeline,
    /// In place, when the op has an in-place entry point.
    pub(crate) inplace: Option<UserPipeline>,
}

/// A context's user ops and their pipelines ([`crate::device::DeviceShared`]).
#[derive(Debug, Default)]
struct DeviceOps(Mutex<(UserOps, HashMap<u64, UserPipelines>)>);

fn device_ops(ctx: &GpuContext) -> Arc<DeviceOps> {
    ctx.shared.get_or_init(DeviceOps::default)
}

/// The bind-group layout of a reflected entry point.
fn entry_layout(device: &wgpu::Device, entry: &CheckedEntry) -> wgpu::BindGroupLayout {
    let params = entry.params.map(|p| wgpu::BindGroupLayoutEntry {
        binding: p.binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: NonZeroU64::new(p.size),
        },
        count: None,
    });
    let storage = entry.storage.iter().map(|s| wgpu::BindGroupLayoutEntry {
        binding: s.binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            // Compiled read_write (see validate::bind_read_write).
            ty: wgpu::BufferBindingType::Storage { read_only: false },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    });
    let entries: Vec<wgpu::BindGroupLayoutEntry> = params.into_iter().chain(storage).collect();
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("wgalloc user op"),
        entries: &entries,
    })
}

/// Refuses an entry point whose `@workgroup_size` exceeds the device's limits.
fn check_workgroup_size(
    op: &UserOp,
    entry: &CheckedEntry,
    limits: &wgpu::Limits,
) -> Result<(), RegisterError> {
    let max_size = [
        limits.max_compute_workgroup_size_x,
        limits.max_compute_workgroup_size_y,
        limits.max_compute_workgroup_size_z,
    ];
    let size = entry.workgroup_size;
    let invocations = size
        .iter()
        .try_fold(1u32, |n, &d| n.checked_mul(d))
        .unwrap_or(u32::MAX);
    let fits = size.iter().zip(&max_size).all(|(s, m)| s <= m)
        && invocations <= limits.max_compute_invocations_per_workgroup;
    if fits {
        Ok(())
    } else {
        Err(RegisterError::WorkgroupSizeTooLarge {
            op: op.name.clone(),
            entry: entry.name.clone(),
            size,
            max_size,
            max_invocations: limits.max_compute_invocations_per_workgroup,
        })
    }
}

/// Registers `op` on `ctx`'s device: checks it with naga and against the device's
/// limits and features, then compiles its pipelines (inside error scopes). From then
/// on every executor made from `ctx` or a clone of it (sessions, model sessions, graph
/// contexts, streams included) runs nodes whose op has this name, beside the built-in
/// ops and in the same pass. A context from another [`GpuContext::adopt`] of the same
/// `wgpu::Device` does not see it (wgpu gives no way to tell that two device handles
/// are one device): its executors refuse such nodes with
/// [`crate::exec::ExecError::NoKernel`], which says so. Adopt once, clone the context.
///
/// # Errors
/// Every error of [`UserOps::register`] (a name taken on this device included),
/// [`RegisterError::WorkgroupSizeTooLarge`], [`RegisterError::MissingFeature`] (an
/// `f16` kernel on a device without `SHADER_F16`), and [`RegisterError::Device`] when wgpu
/// refuses the module or a pipeline. On any error nothing is registered and no
/// pipeline is kept.
pub fn register_op(ctx: &GpuContext, op: UserOp) -> Result<(), RegisterError> {
    let shared = device_ops(ctx);
    let mut guard = shared.0.lock().unwrap_or_else(PoisonError::into_inner);
    let (ops, pipelines) = &mut *guard;
    let checked = ops.check(&op)?;
    check_workgroup_size(&op, &checked.entry, &ctx.limits)?;
    if let Some(entry) = &checked.inplace {
        check_workgroup_size(&op, entry, &ctx.limits)?;
    }
    if checked.f16 && !ctx.device.features().contains(wgpu::Features::SHADER_F16) {
        return Err(RegisterError::MissingFeature {
            op: op.name.clone(),
            what: "f16",
            feature: "wgpu::Features::SHADER_F16",
        });
    }
    let device = &ctx.device;
    let built = scoped(device, 0, || {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&op.name),
            source: wgpu::ShaderSource::Wgsl(checked.source.as_str().into()),
        });
        let pipeline = |entry: &CheckedEntry| {
            let layout = entry_layout(device, entry);
            UserPipeline {
                pipeline: compute_pipeline(device, &module, &entry.name, &layout, &[]),
                layout,
            }
        };
        UserPipelines {
            out_of_place: pipeline(&checked.entry),
            inplace: checked.inplace.as_ref().map(pipeline),
        }
    });
    let built = built.map_err(|source| RegisterError::Device {
        op: op.name.clone(),
        source,
    })?;
    let registered = ops.insert(op, checked);
    pipelines.insert(registered.id, built);
    Ok(())
}

/// The user ops registered on `ctx` and its clones (a snapshot), e.g. for
/// [`crate::exec::cpu_ref::evaluate_with`].
pub fn user_ops(ctx: &GpuContext) -> UserOps {
    let shared = device_ops(ctx);
    let guard = shared.0.lock().unwrap_or_else(PoisonError::into_inner);
    guard.0.clone()
}

/// The op named `name` on `ctx`'s device with its pipelines.
pub(crate) fn device_op(ctx: &GpuContext, name: &str) -> Option<(Arc<Registered>, UserPipelines)> {
    let shared = device_ops(ctx);
    let guard = shared.0.lock().unwrap_or_else(PoisonError::into_inner);
    let registered = guard.0.get(name)?.clone();
    let pipelines = guard.1.get(&registered.id)?.clone();
    Some((registered, pipelines))
}
