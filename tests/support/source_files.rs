//! The workspace's Rust sources, for the tests that read the code as text
//! (`tests/layers.rs`, `tests/code_size.rs`, the command line's
//! `tests/settings.rs`): included by path, so that each reads the same
//! files.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, at any depth, appended to `out`. A folder
/// that cannot be read is a mistake in the test's list: it panics.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
