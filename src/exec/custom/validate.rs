//! Registration checks that need no GPU: the name, the binding maps, and the WGSL
//! parsed, validated and reflected with naga (entry points, storage bindings used,
//! the parameter block's layout).

use naga::valid::{Capabilities, ValidationFlags, Validator};
use naga::{AddressSpace, ScalarKind, StorageAccess, TypeInner};

use super::error::{RegisterError, SourcePos};
use super::op::{Bind, UserOp};

/// The prelude joined in front of every kernel (see [`crate::exec::Shader::source`]).
pub(super) const PRELUDE: &str = include_str!("../../../shaders/prelude.wgsl");

/// An entry point that passed the checks: its name, storage bindings and
/// `@workgroup_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckedEntry {
    /// The entry point.
    pub(crate) name: String,
    /// Its `@workgroup_size`.
    pub(crate) workgroup_size: [u32; 3],
}

/// What naga found in an op that passed every check.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    /// The source the device compiles: the prelude, then the op's.
    pub(crate) source: String,
    /// The out-of-place entry point.
    pub(crate) entry: CheckedEntry,
    /// The in-place one, if any.
    pub(crate) inplace: Option<CheckedEntry>,
}

/// A name graphs can write: ASCII letters, digits and `_`, not empty.
pub(super) fn check_name(name: &str) -> Result<(), RegisterError> {
    let fine = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if fine {
        Ok(())
    } else {
        Err(RegisterError::BadName {
            name: name.to_string(),
        })
    }
}

/// The position of a naga location in the op's own source (the prelude's lines not
/// counted); `None` inside the prelude.
fn in_op_source(location: Option<naga::SourceLocation>) -> Option<SourcePos> {
    let prelude_lines = PRELUDE.matches('\n').count() as u32;
    let location = location?;
    let line = location.line_number.checked_sub(prelude_lines)?;
    (line > 0).then_some(SourcePos {
        line,
        column: location.line_position,
    })
}

/// Checks a binding map: out of place, every index within the op's inputs, no tensor
/// twice, the output once; in place, no output and input 0 present.
fn check_map(op: &UserOp, entry: &str, map: &[Bind], inplace: bool) -> Result<(), RegisterError> {
    let bad = |problem: String| RegisterError::BadBindingMap {
        op: op.name.clone(),
        entry: entry.to_string(),
        problem,
    };
    for (k, bind) in map.iter().enumerate() {
        if map[..k].contains(bind) {
            return Err(bad(format!("{bind:?} is bound twice")));
        }
        match *bind {
            Bind::Input(i) if i >= op.inputs => {
                return Err(bad(format!("input {i}, but the op takes {}", op.inputs)))
            }
            Bind::Output if inplace => {
                return Err(bad(
                    "an in-place map binds no output: input 0 is rewritten".to_string()
                ))
            }
            _ => {}
        }
    }
    if inplace && !map.contains(&Bind::Input(0)) {
        return Err(bad("an in-place map must bind input 0".to_string()));
    }
    if !inplace && !map.contains(&Bind::Output) {
        return Err(bad("the map binds no output".to_string()));
    }
    Ok(())
}

/// The `Params` struct at binding 0 has [`crate::exec::KernelParams`]' layout.
fn check_params(op: &UserOp, module: &naga::Module) -> Result<(), RegisterError> {
    let bad = |problem: String| RegisterError::BadParams {
        op: op.name.clone(),
        problem,
    };
    let params = module
        .global_variables
        .iter()
        .map(|(_, v)| v)
        .find(|v| v.name.as_deref() == Some("params"))
        .ok_or_else(|| bad("the prelude's `params` is missing".to_string()))?;
    let TypeInner::Struct { members, span } = &module.types[params.ty].inner else {
        return Err(bad("Params is not a struct".to_string()));
    };
    let mut slots = Vec::new();
    for member in members {
        match &module.types[member.ty].inner {
            TypeInner::Scalar(s) => slots.push((member.offset, s.kind, s.width)),
            TypeInner::Vector { size, scalar } => {
                for k in 0..*size as u32 {
                    slots.push((member.offset + 4 * k, scalar.kind, scalar.width));
                }
            }
            other => return Err(bad(format!("Params has a member of type {other:?}"))),
        }
    }
    let expected: Vec<(u32, ScalarKind, u8)> = (0..8u32)
        .map(|k| {
            let kind = if k < 4 {
                ScalarKind::Uint
            } else {
                ScalarKind::Float
            };
            (4 * k, kind, 4)
        })
        .collect();
    if *span != 32 || slots != expected {
        return Err(bad(format!(
            "Params is {span} bytes with slots {slots:?}; it must be 4 x u32 then 4 x f32 (32 bytes, KernelParams)"
        )));
    }
    Ok(())
}

/// Checks one entry point: it exists as a compute entry point, and the storage
/// bindings it uses are exactly `1..=map.len()`, each `var<storage, read_write>` in
/// group 0.
fn check_entry(
    op: &UserOp,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    map: &[Bind],
) -> Result<CheckedEntry, RegisterError> {
    let missing = || RegisterError::MissingEntryPoint {
        op: op.name.clone(),
        entry: entry.to_string(),
    };
    let index = module
        .entry_points
        .iter()
        .position(|e| e.name == entry)
        .ok_or_else(missing)?;
    let ep = &module.entry_points[index];
    if ep.stage != naga::ShaderStage::Compute {
        return Err(missing());
    }
    let uses = info.get_entry_point(index);
    let mut found = Vec::new();
    for (handle, var) in module.global_variables.iter() {
        let Some(binding) = &var.binding else {
            continue;
        };
        if uses[handle].is_empty() {
            continue;
        }
        let bad = |problem: &str| RegisterError::BadBinding {
            op: op.name.clone(),
            group: binding.group,
            binding: binding.binding,
            problem: problem.to_string(),
        };
        if binding.group != 0 {
            return Err(bad("every binding is in group 0"));
        }
        if binding.binding == 0 {
            if var.name.as_deref() != Some("params") || var.space != AddressSpace::Uniform {
                return Err(bad("binding 0 is the prelude's parameter block"));
            }
            continue;
        }
        match var.space {
            AddressSpace::Storage { access }
                if access.contains(StorageAccess::LOAD | StorageAccess::STORE) => {}
            AddressSpace::Storage { .. } => {
                return Err(bad(
                    "tensors are bound read_write: declare var<storage, read_write>",
                ))
            }
            _ => return Err(bad("a tensor binding must be var<storage, read_write>")),
        }
        found.push(binding.binding);
    }
    found.sort_unstable();
    let expected: Vec<u32> = (1..=map.len() as u32).collect();
    if found != expected {
        return Err(RegisterError::BindingCount {
            op: op.name.clone(),
            entry: entry.to_string(),
            expected: map.len(),
            found,
        });
    }
    Ok(CheckedEntry {
        name: entry.to_string(),
        workgroup_size: ep.workgroup_size,
    })
}

/// Every check of a user op that needs no device.
///
/// # Errors
/// [`RegisterError::BadName`], [`RegisterError::BadBindingMap`],
/// [`RegisterError::Parse`] / [`RegisterError::Invalid`] with naga's message and its
/// line and column in the op's source, [`RegisterError::MissingEntryPoint`],
/// [`RegisterError::BadBinding`], [`RegisterError::BindingCount`],
/// [`RegisterError::BadParams`].
pub(super) fn check(op: &UserOp) -> Result<Checked, RegisterError> {
    check_name(&op.name)?;
    check_map(op, &op.entry, &op.bindings, false)?;
    if let Some((entry, map)) = &op.inplace {
        check_map(op, entry, map, true)?;
    }
    let source = format!("{PRELUDE}{}", op.source);
    let module = naga::front::wgsl::parse_str(&source).map_err(|e| RegisterError::Parse {
        op: op.name.clone(),
        message: e.message().to_string(),
        at: in_op_source(e.location(&source)),
    })?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(&module)
        .map_err(|e| RegisterError::Invalid {
            op: op.name.clone(),
            message: e.as_inner().to_string(),
            at: in_op_source(e.location(&source)),
        })?;
    check_params(op, &module)?;
    let entry = check_entry(op, &module, &info, &op.entry, &op.bindings)?;
    let inplace = match &op.inplace {
        Some((name, map)) => Some(check_entry(op, &module, &info, name, map)?),
        None => None,
    };
    Ok(Checked {
        source,
        entry,
        inplace,
    })
}
