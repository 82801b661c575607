//! What the bench binaries share: the repository's test data, found by extension.

use std::path::{Path, PathBuf};

/// The files in the repository folder `dir` whose extension is `ext`, sorted by name
/// (none when the folder cannot be read).
pub fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<PathBuf> = match std::fs::read_dir(root) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}
