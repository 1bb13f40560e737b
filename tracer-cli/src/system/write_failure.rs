//! Why an output, a trace or standard output could not be written, as data:
//! the wording says it (`wording::write_failures`).

use cudatrace_analysis::NotRegular;
use std::path::PathBuf;

/// Why something could not be written.
#[derive(Debug)]
pub enum WriteFailure {
    /// A file is there, and `--force` was not given.
    Exists(PathBuf),
    /// A file is there that may be the only copy of a trace.
    MayBeOnlyCopy(PathBuf),
    /// A file appeared there while the trace was written.
    AppearedMeanwhile(PathBuf),
    /// The path is a folder.
    Folder(PathBuf),
    /// A trace's destination is a pipe, a socket or a device.
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is.
        what: NotRegular,
    },
    /// The folder the path is in does not exist.
    NoFolder {
        /// The path.
        path: PathBuf,
        /// Its folder.
        folder: PathBuf,
    },
    /// The path names no file (`/`, `..`).
    NotAFileName(PathBuf),
    /// The path a trace was to be staged at names no file.
    TraceNotAFileName(PathBuf),
    /// The path cannot be handed to the system (it holds a NUL byte).
    InvalidPath(PathBuf),
    /// No trace may be written in the folder.
    FolderNotWritable {
        /// The folder.
        folder: PathBuf,
        /// The system's reason.
        error: std::io::Error,
    },
    /// Another cudatrace is writing the trace there now.
    BeingWritten(PathBuf),
    /// A finished trace is there.
    HoldsTrace(PathBuf),
    /// The system refused.
    Io {
        /// The path.
        path: PathBuf,
        /// The system's reason.
        error: std::io::Error,
    },
    /// Standard output could not be written.
    Stdout(std::io::Error),
}
