//! Refusing, before anything opens it, an input or a trace's destination
//! that is not a regular file: opening a FIFO without a writer blocks for
//! ever, a pipe cannot be read twice, which every command does to a
//! trace, and a trace written in place is emptied and grown, which a pipe
//! or a device cannot be.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// What an input is when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotRegular {
    /// A folder.
    Folder,
    /// A named pipe.
    Pipe,
    /// A socket.
    Socket,
    /// A character or block device.
    Device,
    /// Anything else that is not a regular file.
    Special,
}

/// `Ok` for a regular file (or a path that does not exist, which opening
/// then reports); else what it is.
pub fn check_regular_file(path: &Path) -> Result<(), NotRegular> {
    let Ok(metadata) = std::fs::metadata(path) else {
        return Ok(());
    };
    let kind = metadata.file_type();
    Err(if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        NotRegular::Folder
    } else if kind.is_fifo() {
        NotRegular::Pipe
    } else if kind.is_socket() {
        NotRegular::Socket
    } else if kind.is_char_device() || kind.is_block_device() {
        NotRegular::Device
    } else {
        NotRegular::Special
    })
}
