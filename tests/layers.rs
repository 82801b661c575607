//! The layer order of docs/architecture.md, checked from the code: a module of a layer
//! names (with `crate::…`, in a `use` line or a path in code) only its own layer and
//! the layers below it. Doc comments are free to point anywhere.
//!
//! ```text
//!   wgalloc-plan:  kind ─► graph ─► plan
//!   wgalloc:       storage ─► device ─► exec ─► model / runtime / stream / prepack / report / session ─► error
//! ```

use std::path::{Path, PathBuf};

/// The layers from the bottom up; a module may name its own rank and those below.
fn rank(layer: &str) -> Option<u32> {
    Some(match layer {
        "kind" | "seeded" => 0,
        "graph" => 1,
        "plan" => 2,
        "storage" => 3,
        "device" => 4,
        "exec" => 5,
        "model" | "runtime" | "stream" | "prepack" | "report" | "kv" | "session" => 6,
        "error" => 7,
        _ => return None,
    })
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The layer a file belongs to: the first folder under `src/`, or the file's stem.
fn layer_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative.components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_string()
}

/// The layers a line of code names after `crate::` (`crate::a::…`, `crate::{a, b::c}`).
fn named_layers(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let ident: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !ident.is_empty() {
                    names.push(ident);
                }
            }
        } else {
            let ident: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(ident);
        }
        rest = after;
    }
    names
}

/// Every `file:line: layer -> named` where a module names a layer above its own.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let layer = layer_of(src, &file);
        let Some(own) = rank(&layer) else { continue };
        let text = std::fs::read_to_string(&file).expect("readable");
        for (index, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for named in named_layers(code) {
                if let Some(other) = rank(&named) {
                    if other > own {
                        found.push(format!(
                            "{}:{}: {layer} names {named}",
                            file.display(),
                            index + 1
                        ));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn no_layer_names_a_layer_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = violations(&root.join("src"));
    found.extend(violations(&root.join("crates/wgalloc-plan/src")));
    assert!(
        found.is_empty(),
        "{} upward reference(s):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_reader_sees_groups_and_paths() {
    assert_eq!(named_layers("use crate::plan::Plan;"), ["plan"]);
    assert_eq!(
        named_layers("use crate::{device::X, exec};"),
        ["device", "exec"]
    );
    assert_eq!(
        named_layers("let x = crate::storage::STORAGE_USAGE; crate::exec::run()"),
        ["storage", "exec"]
    );
    assert!(named_layers("use super::Plan;").is_empty());
}

#[test]
fn an_upward_use_is_found() {
    let dir = std::env::temp_dir().join(format!("wgalloc-layers-{}", std::process::id()));
    let storage = dir.join("storage");
    std::fs::create_dir_all(&storage).expect("temp dir");
    std::fs::write(
        storage.join("bad.rs"),
        "// crate::exec in a comment is fine\nuse crate::exec::Executor;\n",
    )
    .expect("write");
    let found = violations(&dir);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with(":2: storage names exec"), "{found:?}");
}
