//! Every shader parses and validates with naga (no GPU needed), as the device compiles
//! it: an executor kernel with `shaders/prelude.wgsl` joined in front
//! ([`Shader::source`]), the checksum shader and test-only shaders as they are. Then
//! each kernel is reflected and checked against the Rust side: its parameter block has
//! [`KernelParams`]' layout, and its entry point uses only the storage bindings the
//! executor binds ([`Kernel::storage_bindings`]: 1..=n), its output among them.

use std::path::{Path, PathBuf};

use naga::AddressSpace;
use wgalloc::exec::checksum::CHECKSUM_WGSL;
use wgalloc::exec::{
    params_layout_mismatch, HeadWidth, Kernel, Shader, StorageType, TILED_ATTENTION_WORKGROUP_BYTES,
};

fn wgsl_files(dir: &Path) -> Vec<PathBuf> {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .filter(|path| path.extension().is_some_and(|ext| ext == "wgsl"))
        .collect();
    files.sort();
    files
}

fn manifest(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)
}

/// Parses and validates `source`; the error names `name` and carries naga's message
/// with line and column.
fn validate(name: &str, source: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    validate_with(name, source, naga::valid::Capabilities::all())
}

/// [`validate`] with only `capabilities` granted.
fn validate_with(
    name: &str,
    source: &str,
    capabilities: naga::valid::Capabilities,
) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| {
        format!(
            "{name}: parse error\n{}",
            e.emit_to_string_with_path(source, name)
        )
    })?;
    let mut validator =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities);
    let info = validator.validate(&module).map_err(|e| {
        format!(
            "{name}: invalid\n{}",
            e.emit_to_string_with_path(source, name)
        )
    })?;
    Ok((module, info))
}

#[test]
fn every_shader_parses_and_validates_as_the_device_compiles_it() {
    let mut failures = Vec::new();
    let mut covered = vec![
        "prelude.wgsl".to_string(),
        "checksum.wgsl".to_string(),
        "storage_f32.wgsl".to_string(),
        "storage_f16.wgsl".to_string(),
        // Joined in front of kv_attend.wgsl and kv_self_attend.wgsl.
        "kv_pages.wgsl".to_string(),
        // Joined in front of matmul_tiled.wgsl, matmul_bt_tiled.wgsl and
        // matmul_norm.wgsl: each family's product, and its plain or shared-read form.
        "matmul_block.wgsl".to_string(),
        "matmul_block_plain.wgsl".to_string(),
        "matmul_block_shared.wgsl".to_string(),
        "matmul_block_tile64.wgsl".to_string(),
        "matmul_bt_block.wgsl".to_string(),
        "matmul_bt_block_plain.wgsl".to_string(),
        "matmul_bt_block_shared.wgsl".to_string(),
        "matmul_norm_block.wgsl".to_string(),
        "matmul_norm_block_plain.wgsl".to_string(),
        "matmul_norm_block_shared.wgsl".to_string(),
        // Joined in front of the three shared-read forms.
        "matmul_shared_groups.wgsl".to_string(),
        // Joined after the 8-row products (the plain tiles, the staged tile).
        "matmul_rows8.wgsl".to_string(),
        // Joined in front of the three fused attention kernels.
        "attention_io.wgsl".to_string(),
        // Joined in front of every attention and KV-cache kernel.
        "head_width.wgsl".to_string(),
        // Joined in front of attention_blocks.wgsl: its plain or shared reads.
        "attention_blocks_plain.wgsl".to_string(),
        "attention_blocks_shared.wgsl".to_string(),
    ];
    for shader in Shader::ALL {
        covered.push(shader.file().to_string());
        if let Err(message) = validate(shader.file(), shader.source()) {
            failures.push(message);
        }
    }
    if let Err(message) = validate("checksum.wgsl", CHECKSUM_WGSL) {
        failures.push(message);
    }
    for path in wgsl_files(&manifest("tests/shaders")) {
        let source = std::fs::read_to_string(&path).expect("readable");
        if let Err(message) = validate(&path.display().to_string(), &source) {
            failures.push(message);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // No file in shaders/ escapes validation.
    for path in wgsl_files(&manifest("shaders")) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        assert!(
            name.as_ref().is_some_and(|n| covered.contains(n)),
            "{} is not compiled by any kernel; test-only shaders live in tests/shaders",
            path.display()
        );
    }
}

#[test]
fn broken_wgsl_is_reported_with_its_file_name_line_and_column() {
    let message = validate("shaders/broken.wgsl", "fn main( { }").unwrap_err();
    assert!(
        message.starts_with("shaders/broken.wgsl: parse error"),
        "{message}"
    );
    assert!(message.contains("shaders/broken.wgsl:1:"), "{message}");
    let message = validate("shaders/broken.wgsl", "fn f() -> u32 { return 1.5; }").unwrap_err();
    assert!(message.starts_with("shaders/broken.wgsl:"), "{message}");
}

/// The global variable at `@group(0) @binding(binding)`, if any.
fn global_at(module: &naga::Module, binding: u32) -> Option<&naga::GlobalVariable> {
    module.global_variables.iter().map(|(_, v)| v).find(|v| {
        v.binding
            .as_ref()
            .is_some_and(|b| b.group == 0 && b.binding == binding)
    })
}

/// Checks the kernel's `Params` against `KernelParams`: a uniform struct of 32 bytes,
/// four u32 at offsets 0..16 then four f32 at 16..32.
fn check_params(shader: Shader, module: &naga::Module) -> Result<(), String> {
    let name = shader.file();
    let params = global_at(module, 0).ok_or(format!("{name}: nothing at binding 0"))?;
    if params.space != AddressSpace::Uniform {
        return Err(format!("{name}: binding 0 is not a uniform"));
    }
    match params_layout_mismatch(module, params.ty) {
        Some(problem) => Err(format!("{name}: {problem}")),
        None => Ok(()),
    }
}

#[test]
fn every_f16_form_validates_with_naga_s_float16_capability_and_needs_it() {
    let mut failures = Vec::new();
    let mut forms = 0;
    for shader in Shader::ALL {
        // A shader with subgroup operations needs that capability in both forms.
        let base = if shader.needs_subgroups() {
            naga::valid::Capabilities::SUBGROUP
        } else {
            naga::valid::Capabilities::empty()
        };
        let f16 = base | naga::valid::Capabilities::SHADER_FLOAT16;
        let Some(source) = shader.source_for(StorageType::F16) else {
            assert!(!shader.has_f16());
            continue;
        };
        forms += 1;
        let name = format!("{} (f16)", shader.file());
        if let Err(message) = validate_with(&name, source, f16) {
            failures.push(message);
        }
        // The f16 form really stores f16: without the capability naga refuses it.
        if validate_with(&name, source, base).is_ok() {
            failures.push(format!("{name}: validates without SHADER_FLOAT16"));
        }
        // And the f32 form needs no f16.
        if let Err(message) = validate_with(shader.file(), shader.source(), base) {
            failures.push(message);
        }
        // A shader said to need subgroups does; the others do not.
        let without = validate_with(
            shader.file(),
            shader.source(),
            naga::valid::Capabilities::empty(),
        );
        if shader.needs_subgroups() == without.is_ok() {
            failures.push(format!(
                "{}: needs_subgroups() is {} but naga says otherwise",
                shader.file(),
                shader.needs_subgroups()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The forward pass's shaders (elementwise, softmax, norms, dense and tiled
    // matmuls, embedding, fused attention in both forms, the matrix-vector kernels) and the
    // generation step's (the paged KV cache's kv_self, kv_attend, kv_self_attend, the
    // norm-fused matmul), rope, the compaction and the packed matmul: every shader but
    // the staging copy (the staged 64 x 64 matmul tile and the shared-read query
    // blocks among them).
    assert_eq!(forms, 24);
}

#[test]
fn every_kernel_matches_the_rust_side_params_and_bindings() {
    let mut failures = Vec::new();
    // Each kernel's own source: the attention kernels' with their arrays sized for
    // their head width (`Kernel::source_for`), as the executor builds them.
    let forms = Kernel::ALL.into_iter().flat_map(|kernel| {
        [StorageType::F32, StorageType::F16]
            .into_iter()
            .filter_map(move |t| kernel.source_for(t).map(|s| (kernel, t, s)))
    });
    for (kernel, storage_type, source) in forms {
        let (shader, entry) = kernel.entry();
        let name = format!("{} ({})", shader.file(), storage_type.name());
        let (module, info) = validate(&name, &source).expect("validates");
        if let Err(message) = check_params(shader, &module) {
            failures.push(message);
        }
        let Some(index) = module.entry_points.iter().position(|e| e.name == entry) else {
            failures.push(format!(
                "{kernel:?}: no entry point {entry} in {}",
                shader.file()
            ));
            continue;
        };
        let uses = info.get_entry_point(index);
        let mut storage: Vec<u32> = module
            .global_variables
            .iter()
            .filter(|(handle, v)| {
                matches!(v.space, AddressSpace::Storage { .. }) && !uses[*handle].is_empty()
            })
            .filter_map(|(_, v)| v.binding.as_ref().map(|b| b.binding))
            .collect();
        storage.sort_unstable();
        // The entry point may leave a bound range unread (compact takes the count from
        // its parameters), but must not use a binding the executor does not bind, and
        // must write its output, the last binding.
        let expected: Vec<u32> = (1..=kernel.storage_bindings() as u32).collect();
        let within = storage.iter().all(|b| expected.contains(b));
        let writes_output = expected.last().is_some_and(|out| storage.contains(out));
        if !within || !writes_output {
            failures.push(format!(
                "{kernel:?} ({name}::{entry}): uses storage bindings {storage:?}, the executor binds {expected:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_params_block_out_of_step_with_the_rust_side_is_caught() {
    // Same size, but the float slots first: the check names the mismatch.
    let source = concat!(
        include_str!("../shaders/prelude.wgsl"),
        "struct Params { alpha: f32, b: f32, c: f32, d: f32, len: u32, e: u32, f: u32, g: u32 }\n",
        "@compute @workgroup_size(1) fn main() { _ = params.len; }\n"
    );
    let (module, _) = validate("swapped.wgsl", source).expect("valid WGSL");
    let message = check_params(Shader::Unary, &module).unwrap_err();
    assert!(message.contains("Params slots"), "{message}");
}

/// WebGPU's default `maxComputeWorkgroupStorageSize`, which wgpu's default limits keep.
const DEFAULT_WORKGROUP_STORAGE: u32 = 16384;

#[test]
fn every_kernel_s_workgroup_memory_fits_the_default_limit() {
    let mut tiled = None;
    for shader in Shader::ALL {
        for storage in [StorageType::F32, StorageType::F16] {
            let Some(source) = shader.source_for(storage) else {
                continue;
            };
            let name = format!("{} ({})", shader.file(), storage.name());
            let (module, _) = validate(&name, source).expect("validates");
            let bytes: u32 = module
                .global_variables
                .iter()
                .filter(|(_, v)| v.space == AddressSpace::WorkGroup)
                .map(|(_, v)| module.types[v.ty].inner.size(module.to_ctx()))
                .sum();
            assert!(
                bytes <= DEFAULT_WORKGROUP_STORAGE,
                "{name}: {bytes} bytes of workgroup memory"
            );
            if shader == Shader::AttentionTiled {
                tiled = Some(bytes);
            }
        }
    }
    // The tuner checks the device's limit against the tiled attention's own figure.
    assert_eq!(tiled, Some(TILED_ATTENTION_WORKGROUP_BYTES));
}

/// The attention and KV-cache kernels' sources sized for other head widths than
/// `Kernel::ALL`'s (GPT-2's 64): the narrowest, a width between groups of 8 `vec4`s,
/// and the widest, in both storage types, validate; the rewrite of `MAX_HD4` took.
#[test]
fn attention_sources_sized_for_every_head_width_validate() {
    let mut sized = 0;
    for kernel in Kernel::ALL {
        if kernel.head_width().is_none() {
            continue;
        }
        let (shader, _) = kernel.entry();
        for storage in [StorageType::F32, StorageType::F16] {
            let Some(source) = shader.source_for(storage) else {
                continue;
            };
            for hd in [4, 40, 256] {
                let width = HeadWidth::of(hd);
                let text = width.sized(source);
                let line = format!("const MAX_HD4: u32 = {}u;", hd / 4);
                assert_eq!(text.matches(&line).count(), 1, "{kernel:?} {hd}");
                assert_eq!(text.matches("const MAX_HD4").count(), 1, "{kernel:?}");
                let name = format!("{} ({}, hd {hd})", shader.file(), storage.name());
                validate(&name, &text).expect("validates");
                sized += 1;
            }
        }
    }
    // Every attention form and KV-cache kernel of Kernel::ALL, f32 and f16, 3 widths.
    assert!(sized >= 3 * 2 * 10, "{sized}");
}
