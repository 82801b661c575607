//! Registration checks that need no GPU: the name, the binding maps, and the WGSL
//! module parsed, validated and reflected with naga (entry points, the storage buffers
//! each uses and their access, its parameter block and `@workgroup_size`).

use naga::valid::{Capabilities, ValidationFlags, Validator};
use naga::{AddressSpace, StorageAccess};

use super::error::{RegisterError, SourcePos};
use super::op::{Bind, ParamsBlock, UserOp};
use crate::exec::{params_layout_mismatch, KernelParams};

/// `shaders/prelude.wgsl`: joined in front of every built-in kernel (see
/// [`crate::exec::Shader::source`]); it declares the parameter block at binding 0 and
/// `grid_element`. A user op's WGSL is a module of its own: nothing is joined in front
/// of it (paste this in yourself to reuse `grid_element`).
pub const PRELUDE_WGSL: &str = include_str!("../../../shaders/prelude.wgsl");

/// A storage buffer an entry point binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StorageSlot {
    /// Its `@binding`.
    pub(crate) binding: u32,
    /// Declared `var<storage, read>`.
    pub(crate) read_only: bool,
}

/// The parameter block an entry point binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamsSlot {
    /// Its `@binding`.
    pub(crate) binding: u32,
    /// Bytes of its WGSL type.
    pub(crate) size: u64,
}

/// An entry point that passed the checks, as naga reflects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckedEntry {
    /// The entry point.
    pub(crate) name: String,
    /// Its `@workgroup_size`.
    pub(crate) workgroup_size: [u32; 3],
    /// Its `var<uniform>`, if it uses one.
    pub(crate) params: Option<ParamsSlot>,
    /// Its storage buffers in `@binding` order (entry `k` binds map entry `k`).
    pub(crate) storage: Vec<StorageSlot>,
    /// Whether it takes `@builtin(global_invocation_id)`.
    pub(crate) global_id: bool,
}

impl CheckedEntry {
    /// Invocations per workgroup.
    pub(crate) fn invocations(&self) -> u64 {
        self.workgroup_size.iter().map(|&d| u64::from(d)).product()
    }
}

/// What naga found in an op that passed every check.
#[derive(Clone)]
pub(crate) struct Checked {
    /// The source the device compiles (the op's own module).
    pub(crate) source: String,
    /// The out-of-place entry point.
    pub(crate) entry: CheckedEntry,
    /// The in-place one, if any.
    pub(crate) inplace: Option<CheckedEntry>,
    /// The parameter block's bytes per node (the op's, or [`KernelParams`]' default
    /// for a WGSL block of that layout); `None` when no entry point has one.
    pub(crate) params: Option<ParamsBlock>,
    /// Whether the module uses `f16` (the device needs `SHADER_F16`).
    pub(crate) f16: bool,
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("entry", &self.entry)
            .field("inplace", &self.inplace)
            .field("params", &self.params.as_ref().map(|p| p.size))
            .field("f16", &self.f16)
            .finish_non_exhaustive()
    }
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

/// The position of a naga location in the op's source.
fn in_op_source(location: Option<naga::SourceLocation>) -> Option<SourcePos> {
    let location = location?;
    Some(SourcePos {
        line: location.line_number,
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

/// Reflects one entry point: it exists as a compute entry point; the buffers it uses
/// are in group 0, at most one `var<uniform>` and `map.len()` storage buffers; the
/// tensors it writes (the output, input 0 in place) are `read_write`.
fn check_entry(
    op: &UserOp,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    map: &[Bind],
    inplace: bool,
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
    let mut params = None;
    let mut storage = Vec::new();
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
        match var.space {
            AddressSpace::Uniform => {
                if params.is_some() {
                    return Err(bad("an entry point binds at most one var<uniform>"));
                }
                params = Some(ParamsSlot {
                    binding: binding.binding,
                    size: u64::from(module.types[var.ty].inner.size(module.to_ctx())),
                });
            }
            AddressSpace::Storage { access } => storage.push(StorageSlot {
                binding: binding.binding,
                read_only: !access.contains(StorageAccess::STORE),
            }),
            _ => {
                return Err(bad(
                    "a user kernel binds one var<uniform> and var<storage> buffers only",
                ))
            }
        }
    }
    storage.sort_unstable_by_key(|s| s.binding);
    if storage.len() != map.len() {
        return Err(RegisterError::BindingCount {
            op: op.name.clone(),
            entry: entry.to_string(),
            expected: map.len(),
            found: storage.iter().map(|s| s.binding).collect(),
        });
    }
    for (slot, bind) in storage.iter().zip(map) {
        let written = *bind == Bind::Output || (inplace && *bind == Bind::Input(0));
        if written && slot.read_only {
            return Err(RegisterError::BadBinding {
                op: op.name.clone(),
                group: 0,
                binding: slot.binding,
                problem: format!("{bind:?} is written: declare it var<storage, read_write>"),
            });
        }
    }
    let global_id = ep.function.arguments.iter().any(|a| {
        matches!(
            a.binding,
            Some(naga::Binding::BuiltIn(naga::BuiltIn::GlobalInvocationId))
        )
    });
    Ok(CheckedEntry {
        name: entry.to_string(),
        workgroup_size: ep.workgroup_size,
        params,
        storage,
        global_id,
    })
}

/// The source wgalloc compiles: the op's, with every `var<storage, ..>` declared
/// `read_write`. Planned tensors share buffers, and WebGPU forbids binding one buffer
/// read-only and writable in one dispatch, so every storage binding is bound
/// `read_write`; naga has already checked that the op writes none it declared `read`.
/// Comments are copied as they are.
pub(crate) fn bind_read_write(source: &str) -> String {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len() + 64);
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"//") {
            i += source[i..].find('\n').unwrap_or(source.len() - i);
            continue;
        }
        if bytes[i..].starts_with(b"/*") {
            let mut depth = 0usize;
            while i < bytes.len() {
                if bytes[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if bytes[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            continue;
        }
        let at_var = bytes[i..].starts_with(b"var")
            && (i == 0 || !ident(bytes[i - 1]))
            && bytes.get(i + 3).is_none_or(|&c| !ident(c));
        if at_var {
            let after = i + 3;
            let open = after + source[after..].len() - source[after..].trim_start().len();
            if bytes.get(open) == Some(&b'<') {
                if let Some(close) = source[open..].find('>').map(|k| open + k) {
                    let space = source[open + 1..close]
                        .split(',')
                        .next()
                        .unwrap_or("")
                        .trim();
                    if space == "storage" {
                        out.push_str(&source[copied..i]);
                        out.push_str("var<storage, read_write>");
                        copied = close + 1;
                        i = close + 1;
                        continue;
                    }
                }
            }
        }
        i += 1;
    }
    out.push_str(&source[copied..]);
    out
}

/// The parameter block: the op's own (its size must be the WGSL type's), or the
/// [`KernelParams`] default for a WGSL block of exactly that layout, or none.
fn check_params(
    op: &UserOp,
    module: &naga::Module,
    entries: &[&CheckedEntry],
) -> Result<Option<ParamsBlock>, RegisterError> {
    let bad = |problem: String| RegisterError::BadParams {
        op: op.name.clone(),
        problem,
    };
    let mut declared = None;
    for entry in entries {
        let Some(slot) = entry.params else { continue };
        match declared {
            Some(size) if size != slot.size => {
                return Err(bad(format!(
                    "the entry points' var<uniform> differ in size ({size} and {} bytes)",
                    slot.size
                )))
            }
            _ => declared = Some(slot.size),
        }
    }
    match (&op.params, declared) {
        (Some(block), Some(size)) if block.size as u64 == size => Ok(Some(block.clone())),
        (Some(block), Some(size)) => Err(bad(format!(
            "the WGSL var<uniform> is {size} bytes, the Rust type given to UserOp::params is {}",
            block.size
        ))),
        (Some(_), None) => Err(bad(
            "UserOp::params was given but no entry point uses a var<uniform>".to_string(),
        )),
        (None, None) => Ok(None),
        (None, Some(_)) => {
            let ty = module
                .global_variables
                .iter()
                .find(|(_, v)| v.space == AddressSpace::Uniform)
                .map(|(_, v)| v.ty);
            match ty {
                Some(ty) if params_layout_mismatch(module, ty).is_none() => {
                    Ok(Some(default_params()))
                }
                _ => Err(bad(
                    "the WGSL declares a var<uniform>: give its values with UserOp::params"
                        .to_string(),
                )),
            }
        }
    }
}

/// [`KernelParams`] filled as before user kernels had their own blocks: `ints =
/// [output elements, input 0 elements, 0, 0]`, `floats` = the node's first four
/// parameters.
fn default_params() -> ParamsBlock {
    ParamsBlock {
        size: std::mem::size_of::<KernelParams>(),
        bytes: std::sync::Arc::new(|s| {
            let small = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            let mut floats = [0.0; 4];
            for (slot, value) in floats.iter_mut().zip(s.params()) {
                *slot = *value;
            }
            let p = KernelParams {
                ints: [small(s.output_len()), small(s.input_len(0)), 0, 0],
                floats,
            };
            Ok(bytemuck::bytes_of(&p).to_vec())
        }),
    }
}

/// Every check of a user op that needs no device.
///
/// # Errors
/// [`RegisterError::BadName`], [`RegisterError::BadBindingMap`],
/// [`RegisterError::Parse`] / [`RegisterError::Invalid`] with naga's message and its
/// line and column in the op's source, [`RegisterError::MissingEntryPoint`],
/// [`RegisterError::BadBinding`], [`RegisterError::BindingCount`],
/// [`RegisterError::BadParams`], [`RegisterError::NoGrid`].
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
    let source = op.source.clone();
    let module = naga::front::wgsl::parse_str(&source).map_err(|e| RegisterError::Parse {
        op: op.name.clone(),
        message: e.message().to_string(),
        at: in_op_source(e.location(&source)),
    })?;
    // A module that validates only with `f16` needs SHADER_F16 on the device.
    let validate = |capabilities| {
        Validator::new(ValidationFlags::all(), capabilities)
            .validate(&module)
            .map_err(|e| RegisterError::Invalid {
                op: op.name.clone(),
                message: error_chain(e.as_inner()),
                at: in_op_source(e.location(&source)),
            })
    };
    let (info, f16) = match validate(Capabilities::empty()) {
        Ok(info) => (info, false),
        Err(_) => (validate(Capabilities::SHADER_FLOAT16)?, true),
    };
    let entry = check_entry(op, &module, &info, &op.entry, &op.bindings, false)?;
    let inplace = match &op.inplace {
        Some((name, map)) => Some(check_entry(op, &module, &info, name, map, true)?),
        None => None,
    };
    if op.grid.is_none() {
        for e in std::iter::once(&entry).chain(inplace.as_ref()) {
            if !e.global_id {
                return Err(RegisterError::NoGrid {
                    op: op.name.clone(),
                    entry: e.name.clone(),
                });
            }
        }
    }
    let entries: Vec<&CheckedEntry> = std::iter::once(&entry).chain(inplace.as_ref()).collect();
    let params = check_params(op, &module, &entries)?;
    let source = bind_read_write(&source);
    let compiled = naga::front::wgsl::parse_str(&source)
        .map_err(|e| e.message().to_string())
        .and_then(|module| {
            Validator::new(ValidationFlags::all(), Capabilities::SHADER_FLOAT16)
                .validate(&module)
                .map_err(|e| error_chain(e.as_inner()))
        });
    if let Err(message) = compiled {
        return Err(RegisterError::Invalid {
            op: op.name.clone(),
            message: format!("with its storage bound read_write: {message}"),
            at: None,
        });
    }
    Ok(Checked {
        f16,
        source,
        entry,
        inplace,
        params,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::exec::custom::{OpShapes, UserOps};

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
    fn read_bindings_are_reflected_and_a_read_only_output_is_refused() {
        let checked = check(&axpy("axpy")).expect("valid");
        let access: Vec<(u32, bool)> = checked
            .entry
            .storage
            .iter()
            .map(|s| (s.binding, s.read_only))
            .collect();
        assert_eq!(access, vec![(2, true), (7, true), (9, false)]);
        assert_eq!(checked.source.matches("read_write").count(), 3);
        let swiglu = check(&swiglu("rw")).expect("valid");
        assert_eq!(
            swiglu.entry.params,
            Some(ParamsSlot {
                binding: 0,
                size: 32
            })
        );
        // naga refuses a store to a read binding; a map that puts the output on one
        // is refused by wgalloc.
        let read_out = SWIGLU.replace("read_write> out", "read> out");
        assert!(matches!(
            register(UserOp::new("ro", read_out, "swiglu", 2)),
            Err(RegisterError::Invalid { .. })
        ));
        let out_on_read = axpy("axpy").bindings(&[Bind::Output, Bind::Input(0), Bind::Input(1)]);
        assert!(matches!(
            register(out_on_read),
            Err(RegisterError::BadBinding { binding: 2, ref problem, .. }) if problem.contains("read_write")
        ));
        let group = SWIGLU.replace("@group(0) @binding(2)", "@group(1) @binding(2)");
        assert!(matches!(
            register(UserOp::new("grp", group, "swiglu", 2)),
            Err(RegisterError::BadBinding { group: 1, .. })
        ));
    }

    /// A plain module: its own 16-byte parameter block at binding 5, read inputs at
    /// bindings 7 and 2, no prelude.
    const AXPY: &str = "struct P { a: f32, n: u32, pad0: u32, pad1: u32 }
@group(0) @binding(5) var<uniform> p: P;
@group(0) @binding(7) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(9) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn axpy(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < p.n { out[id.x] = p.a * x[id.x] + y[id.x]; }
}
@compute @workgroup_size(64)
fn axpy_flat(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let i = w.x * 64u + l;
    if i < p.n { out[i] = p.a * x[i] + y[i]; }
}
";

    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Axpy {
        a: f32,
        n: u32,
        pad: [u32; 2],
    }

    fn axpy(entry: &str) -> UserOp {
        UserOp::new("axpy", AXPY, entry, 2).params(|s| {
            Ok(Axpy {
                a: s.param(0)?,
                n: OpShapes::u32(s.output_len())?,
                pad: [0; 2],
            })
        })
    }

    #[test]
    fn a_plain_module_declares_its_own_params_and_bindings() {
        let checked = check(&axpy("axpy")).expect("valid");
        let bindings: Vec<u32> = checked.entry.storage.iter().map(|s| s.binding).collect();
        // The map's entries follow the @binding order: x is 2nd, y 1st.
        assert_eq!(bindings, vec![2, 7, 9]);
        assert_eq!(
            checked.entry.params.map(|p| (p.binding, p.size)),
            Some((5, 16))
        );
        let block = checked.params.expect("a parameter block");
        let shapes = OpShapes::new(vec![vec![8], vec![8]], vec![8], vec![2.5]);
        let bytes = (block.bytes)(&shapes).expect("bytes");
        assert_eq!(bytes.len(), 16);
        assert_eq!(&bytes[..8], bytemuck::bytes_of(&[2.5f32.to_bits(), 8u32]));
        // No parameter closure for a block that is not KernelParams' layout.
        assert!(matches!(
            register(UserOp::new("nop", AXPY, "axpy", 2)),
            Err(RegisterError::BadParams { .. })
        ));
        // A Rust type of another size.
        let wrong = UserOp::new("wrong", AXPY, "axpy", 2).params(|_| Ok([0u32; 8]));
        assert!(matches!(
            register(wrong),
            Err(RegisterError::BadParams { ref problem, .. }) if problem.contains("16 bytes")
        ));
        // The KernelParams-shaped block of SWIGLU with an extra field is not filled by
        // default either.
        let params = SWIGLU.replace("unused6: f32,", "unused6: f32,\n    extra: f32,");
        assert!(matches!(
            register(UserOp::new("par", params, "swiglu", 2)),
            Err(RegisterError::BadParams { .. })
        ));
    }

    #[test]
    fn an_entry_point_without_global_invocation_id_needs_an_explicit_grid() {
        assert!(matches!(
            register(axpy("axpy_flat")),
            Err(RegisterError::NoGrid { ref entry, .. }) if entry == "axpy_flat"
        ));
        register(axpy("axpy_flat").workgroups(|s| Ok([s.output_len().div_ceil(64), 1, 1])))
            .expect("an explicit grid");
    }

    #[test]
    fn read_storage_is_compiled_read_write_and_comments_are_kept() {
        let source = "// var<storage, read> in a comment
/* var<storage> /* nested */ still a comment */
@group(0) @binding(1) var<storage> a: array<f32>;
@group(0) @binding(2) var <storage , read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@group(0) @binding(0) var<uniform> u: vec4<u32>;
fn f() { var<function> avar: f32 = 1.0; }
";
        let out = bind_read_write(source);
        assert_eq!(out.matches("var<storage, read_write>").count(), 3, "{out}");
        assert!(out.starts_with("// var<storage, read> in a comment\n/* var<storage> /* nested */"));
        assert!(out.contains("var<uniform> u") && out.contains("var<function> avar"));
    }

    #[test]
    fn an_f16_kernel_validates_and_is_marked() {
        let source = "enable f16;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn half(@builtin(global_invocation_id) id: vec3<u32>) {
    y[id.x] = f32(f16(x[id.x]));
}
";
        let checked = check(&UserOp::new("half", source, "half", 1)).expect("valid");
        assert!(checked.f16);
        assert!(!check(&swiglu("sw")).expect("valid").f16);
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
