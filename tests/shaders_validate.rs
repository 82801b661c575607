//! Every `shaders/*.wgsl` parses and validates with naga (no GPU needed). New files are
//! picked up automatically.

use std::path::{Path, PathBuf};

fn shader_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
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

/// The error naga gives for `source`, if any, starting with the file's path.
fn validate(path: &Path, source: &str) -> Result<(), String> {
    let name = path.display().to_string();
    let module = naga::front::wgsl::parse_str(source).map_err(|e| {
        format!(
            "{name}: parse error\n{}",
            e.emit_to_string_with_path(source, &name)
        )
    })?;
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    validator.validate(&module).map_err(|e| {
        format!(
            "{name}: invalid\n{}",
            e.emit_to_string_with_path(source, &name)
        )
    })?;
    Ok(())
}

#[test]
fn every_wgsl_file_parses_and_validates() {
    let files = shader_files();
    assert!(!files.is_empty(), "no .wgsl files under shaders/");
    let mut failures = Vec::new();
    for path in &files {
        let source = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        if let Err(message) = validate(path, &source) {
            failures.push(message);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} shaders failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn broken_wgsl_is_reported_with_its_file_name() {
    let path = Path::new("shaders/broken.wgsl");
    let message = validate(path, "fn main( { }").unwrap_err();
    assert!(
        message.starts_with("shaders/broken.wgsl: parse error"),
        "{message}"
    );
    let message = validate(path, "fn f() -> u32 { return 1.5; }").unwrap_err();
    assert!(message.starts_with("shaders/broken.wgsl:"), "{message}");
}

#[test]
fn fill_shader_is_among_the_validated_files() {
    let names: Vec<String> = shader_files()
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert!(names.iter().any(|n| n == "fill.wgsl"), "{names:?}");
}
