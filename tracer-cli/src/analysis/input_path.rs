//! Refusing, before anything opens it, an input that is not a regular
//! file: opening a FIFO without a writer blocks for ever, and a pipe cannot
//! be read twice, which every command does to a trace.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// `Ok` for a regular file (or a path that does not exist, which opening
/// then reports); else one line saying what it is and what to do.
pub fn check_regular_file(path: &Path) -> Result<(), String> {
    let Ok(metadata) = std::fs::metadata(path) else {
        return Ok(());
    };
    let kind = metadata.file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a pipe"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "a special file"
    };
    Err(format!(
        "{} is {what}, not a regular file: cudatrace reads its input more than once (save it to a file first)",
        path.display()
    ))
}
