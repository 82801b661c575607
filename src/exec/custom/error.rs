//! [`RegisterError`]: why a user op was refused at registration, before anything
//! reached the GPU (or, for [`RegisterError::Device`], while its pipelines were built).

use thiserror::Error;

use crate::device::DeviceError;
use wgalloc_plan::ErrorKind;

/// Where in the op's own WGSL source a problem is (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePos {
    /// Line in the op's source.
    pub line: u32,
    /// Column (bytes) in that line.
    pub column: u32,
}

impl std::fmt::Display for SourcePos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Why a user op could not be registered. Nothing is registered and no pipeline is
/// kept when registration fails.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The op's name is empty or has characters other than ASCII letters, digits and
    /// `_`.
    #[error("user op {name:?}: a name is ASCII letters, digits and '_'")]
    BadName {
        /// The name given.
        name: String,
    },
    /// A built-in op or an op registered before has this name.
    #[error("user op {name:?}: the name is taken by {}", if *.builtin { "a built-in op" } else { "an op registered before" })]
    NameTaken {
        /// The name.
        name: String,
        /// Whether a built-in op has it (else a registered user op).
        builtin: bool,
    },
    /// naga could not parse the WGSL.
    #[error("user op {op:?}: WGSL parse error{}: {message}", at.map(|p| format!(" at {p}")).unwrap_or_default())]
    Parse {
        /// The op.
        op: String,
        /// naga's message.
        message: String,
        /// Where, in the op's source.
        at: Option<SourcePos>,
    },
    /// naga parsed the WGSL but it does not validate.
    #[error("user op {op:?}: invalid WGSL{}: {message}", at.map(|p| format!(" at {p}")).unwrap_or_default())]
    Invalid {
        /// The op.
        op: String,
        /// naga's message.
        message: String,
        /// Where, in the op's source.
        at: Option<SourcePos>,
    },
    /// The entry point is missing, or is not a compute entry point.
    #[error("user op {op:?}: no compute entry point {entry:?} in its WGSL")]
    MissingEntryPoint {
        /// The op.
        op: String,
        /// The entry point asked for.
        entry: String,
    },
    /// The storage bindings the entry point uses are not exactly `1..=expected`.
    #[error(
        "user op {op:?}: entry point {entry:?} uses storage bindings {found:?}, its binding map has {expected} (bindings 1..={expected})"
    )]
    BindingCount {
        /// The op.
        op: String,
        /// The entry point.
        entry: String,
        /// Entries in the binding map.
        expected: usize,
        /// `@binding`s of group 0 the entry point uses, beyond the parameter block.
        found: Vec<u32>,
    },
    /// A binding the executor cannot bind: not in group 0, neither a `var<uniform>` nor
    /// a `var<storage>` buffer, a second `var<uniform>`, or a tensor the entry point
    /// writes (the output, input 0 in place) declared `read`.
    #[error("user op {op:?}: @group({group}) @binding({binding}): {problem}")]
    BadBinding {
        /// The op.
        op: String,
        /// The group.
        group: u32,
        /// The binding.
        binding: u32,
        /// What is wrong.
        problem: String,
    },
    /// The parameter block does not match: the Rust type given to
    /// [`crate::exec::UserOp::params`] and the WGSL `var<uniform>` differ in size, one
    /// is missing, or the WGSL declares one (other than [`crate::exec::KernelParams`]'
    /// layout) and no values were given.
    #[error("user op {op:?}: {problem}")]
    BadParams {
        /// The op.
        op: String,
        /// What differs.
        problem: String,
    },
    /// The binding map is not one the op's node can fill (an input index past the
    /// op's inputs, a tensor twice, no output; in place: an output or no input 0).
    #[error("user op {op:?}: binding map of {entry:?}: {problem}")]
    BadBindingMap {
        /// The op.
        op: String,
        /// The entry point the map belongs to.
        entry: String,
        /// What is wrong.
        problem: String,
    },
    /// The entry point's `@workgroup_size` exceeds the device's limits.
    #[error(
        "user op {op:?}: entry point {entry:?} has workgroup size {size:?}, the device allows {max_size:?} and {max_invocations} invocations"
    )]
    WorkgroupSizeTooLarge {
        /// The op.
        op: String,
        /// The entry point.
        entry: String,
        /// Its `@workgroup_size`.
        size: [u32; 3],
        /// `max_compute_workgroup_size_{x,y,z}`.
        max_size: [u32; 3],
        /// `max_compute_invocations_per_workgroup`.
        max_invocations: u32,
    },
    /// The op gives no grid ([`crate::exec::UserOp::workgroups`]) and the entry point
    /// takes no `@builtin(global_invocation_id)`, so wgalloc cannot derive one that
    /// covers the output.
    #[error(
        "user op {op:?}: entry point {entry:?} takes no @builtin(global_invocation_id), so no grid can be derived from its @workgroup_size: give one with UserOp::workgroups"
    )]
    NoGrid {
        /// The op.
        op: String,
        /// The entry point.
        entry: String,
    },
    /// The WGSL needs a device feature the device was not created with (`f16` needs
    /// `wgpu::Features::SHADER_F16`, which the adapter may or may not offer).
    #[error(
        "user op {op:?}: its WGSL uses {what}, the device was created without {feature}: create it with that feature where the adapter offers it (adapter.features())"
    )]
    MissingFeature {
        /// The op.
        op: String,
        /// What the WGSL uses.
        what: &'static str,
        /// The wgpu feature it needs.
        feature: &'static str,
    },
    /// wgpu refused the shader module or a pipeline (after naga accepted it).
    #[error("user op {op:?}: the device refused its pipeline: {source}")]
    Device {
        /// The op.
        op: String,
        /// What wgpu reported.
        source: DeviceError,
    },
}

impl RegisterError {
    /// What a caller can do about this error: a workgroup larger than the device
    /// allows never fits it; wgpu's refusals keep their kind; the rest is bad input.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RegisterError::WorkgroupSizeTooLarge { .. } | RegisterError::MissingFeature { .. } => {
                ErrorKind::NeverFits
            }
            RegisterError::Device { source, .. } => source.kind(),
            _ => ErrorKind::BadInput,
        }
    }
}
