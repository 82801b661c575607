//! Registration checks that need no GPU: the name, the binding maps, and the WGSL
//! parsed, validated and reflected with naga (entry points, storage bindings used,
//! the parameter block's layout).

use naga::valid::{Capabilities, ValidationFlags, Validator};
use naga::{AddressSpace, StorageAccess};

use super::error::{RegisterError, SourcePos};
use super::op::{Bind, UserOp};
use crate::exec::params_layout_mismatch;

/// `shaders/prelude.wgsl`: joined in front of every kernel, built-in or user op (see
/// [`crate::exec::Shader::source`]); it declares the parameter block at binding 0 and
/// `grid_element`.
pub const PRELUDE_WGSL: &str = include_str!("../../../shaders/prelude.wgsl");

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
    let prelude_lines = PRELUDE_WGSL.matches('\n').count() as u32;
    let location = location?;
    let line = location.line_number.checked_sub(prelude_lines)?;
    (line > 0).then_some(SourcePos {
        line,
        column: location.line_position,
    })
}

/// An error's message followed by those of its sources ("a: b: c").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    message
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
    match params_layout_mismatch(module, params.ty) {
        Some(problem) => Err(bad(problem)),
        None => Ok(()),
    }
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
    if op.inputs == 0 {
        // The executor tells an in-place node by its output's range on input 0's.
        return Err(RegisterError::BadBindingMap {
            op: op.name.clone(),
            entry: op.entry.clone(),
            problem: "a user op takes at least one input".to_string(),
        });
    }
    check_map(op, &op.entry, &op.bindings, false)?;
    if let Some((entry, map)) = &op.inplace {
        check_map(op, entry, map, true)?;
    }
    let source = format!("{PRELUDE_WGSL}{}", op.source);
    let module = naga::front::wgsl::parse_str(&source).map_err(|e| RegisterError::Parse {
        op: op.name.clone(),
        message: e.message().to_string(),
        at: in_op_source(e.location(&source)),
    })?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(&module)
        .map_err(|e| RegisterError::Invalid {
            op: op.name.clone(),
            message: error_chain(e.as_inner()),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::exec::custom::UserOps;

    /// SwiGLU: `out = silu(gate) * up`, out of place and in place over `gate`.
    pub(crate) const SWIGLU: &str = include_str!("../../../examples/shaders/swiglu.wgsl");

    pub(crate) fn swiglu(name: &str) -> UserOp {
        UserOp::new(name, SWIGLU, "swiglu", 2)
            .inplace("swiglu_inplace", &[Bind::Input(0), Bind::Input(1)])
            .cpu(|inputs, _| {
                inputs[0]
                    .iter()
                    .zip(inputs[1])
                    .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
                    .collect()
            })
    }

    fn register(op: UserOp) -> Result<(), RegisterError> {
        UserOps::new().register(op)
    }

    #[test]
    fn a_well_formed_op_registers_with_both_entry_points() {
        let checked = check(&swiglu("swiglu")).expect("valid");
        assert_eq!(checked.entry.workgroup_size, [256, 1, 1]);
        assert_eq!(
            checked.inplace.map(|e| e.name),
            Some("swiglu_inplace".to_string())
        );
    }

    #[test]
    fn a_parse_error_carries_its_line_and_column_in_the_ops_own_source() {
        let source = SWIGLU.replace("return g / (1.0", "return g / (1.0 +");
        let line = source
            .lines()
            .position(|l| l.contains("(1.0 +"))
            .expect("the broken line") as u32
            + 1;
        match register(UserOp::new("broken", source, "swiglu", 2)) {
            Err(RegisterError::Parse { op, message, at }) => {
                assert_eq!(op, "broken");
                assert!(!message.is_empty());
                let at = at.expect("a position");
                assert_eq!(at.line, line, "{message}");
                assert!(at.column > 1);
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn a_validation_error_carries_naga_message_and_position() {
        // `params.len` is a u32: comparing it with an f32 does not validate.
        let source = SWIGLU.replacen("if i < params.len {", "if 1.5 < params.len {", 1);
        match register(UserOp::new("typo", source.clone(), "swiglu", 2)) {
            Err(RegisterError::Parse { at, message, .. })
            | Err(RegisterError::Invalid { at, message, .. }) => {
                let line = source
                    .lines()
                    .position(|l| l.contains("1.5 <"))
                    .expect("the line") as u32
                    + 1;
                assert_eq!(at.map(|p| p.line), Some(line), "{message}");
            }
            other => panic!("expected a naga error, got {other:?}"),
        }
    }

    #[test]
    fn a_binding_map_shorter_or_longer_than_the_entry_point_uses_is_refused() {
        let short = swiglu("short").bindings(&[Bind::Input(0), Bind::Output]);
        assert!(matches!(
            register(short),
            Err(RegisterError::BindingCount { expected: 2, ref found, .. }) if found == &[1, 2, 3]
        ));
        let long = UserOp::new("long", SWIGLU, "swiglu", 3);
        assert!(matches!(
            register(long),
            Err(RegisterError::BindingCount { expected: 4, .. })
        ));
    }

    #[test]
    fn read_only_bindings_other_groups_and_bad_params_are_refused() {
        let read_only = SWIGLU.replace("var<storage, read_write> up", "var<storage, read> up");
        assert!(matches!(
            register(UserOp::new("ro", read_only, "swiglu", 2)),
            Err(RegisterError::BadBinding { binding: 2, .. })
        ));
        let group = SWIGLU.replace("@group(0) @binding(2)", "@group(1) @binding(2)");
        assert!(matches!(
            register(UserOp::new("grp", group, "swiglu", 2)),
            Err(RegisterError::BadBinding { group: 1, .. })
        ));
        let params = SWIGLU.replace("unused6: f32,", "unused6: f32,\n    extra: f32,");
        assert!(matches!(
            register(UserOp::new("par", params, "swiglu", 2)),
            Err(RegisterError::BadParams { .. })
        ));
    }

    #[test]
    fn names_maps_and_entry_points_are_checked() {
        assert!(matches!(
            register(swiglu("has space")),
            Err(RegisterError::BadName { .. })
        ));
        assert!(matches!(
            register(swiglu("gelu")),
            Err(RegisterError::NameTaken { builtin: true, .. })
        ));
        let mut ops = UserOps::new();
        ops.register(swiglu("twice")).expect("first");
        assert!(matches!(
            ops.register(swiglu("twice")),
            Err(RegisterError::NameTaken { builtin: false, .. })
        ));
        assert_eq!(ops.len(), 1);
        assert!(matches!(
            register(UserOp::new("missing", SWIGLU, "nope", 2)),
            Err(RegisterError::MissingEntryPoint { .. })
        ));
        assert!(matches!(
            register(UserOp::new("none", SWIGLU, "swiglu", 0)),
            Err(RegisterError::BadBindingMap { .. })
        ));
        let past = swiglu("past").bindings(&[Bind::Input(0), Bind::Input(2), Bind::Output]);
        assert!(matches!(
            register(past),
            Err(RegisterError::BadBindingMap { .. })
        ));
        let no_output = swiglu("noout").bindings(&[Bind::Input(0), Bind::Input(1), Bind::Input(0)]);
        assert!(matches!(
            register(no_output),
            Err(RegisterError::BadBindingMap { .. })
        ));
        let inplace_output =
            swiglu("ipo").inplace("swiglu_inplace", &[Bind::Output, Bind::Input(1)]);
        assert!(matches!(
            register(inplace_output),
            Err(RegisterError::BadBindingMap { .. })
        ));
    }
}
