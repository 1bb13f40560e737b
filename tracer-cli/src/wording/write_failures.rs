//! Why an output, a trace or standard output could not be written, in words.

use crate::system::write_failure::WriteFailure;

/// One line saying why.
pub fn write_failure_text(failure: &WriteFailure) -> String {
    match failure {
        WriteFailure::Exists(path) => format!("{} exists; pass --force to replace it", path.display()),
        WriteFailure::MayBeOnlyCopy(path) => format!(
            "{} exists and may be the only copy of a trace; pass --force to replace it",
            path.display()
        ),
        WriteFailure::AppearedMeanwhile(path) => format!(
            "{} appeared while the trace was written; pass --force to replace it",
            path.display()
        ),
        WriteFailure::Folder(path) => format!("cannot write {}: it is a folder", path.display()),
        WriteFailure::NotRegular { path, what } => format!(
            "cannot write {}: it is {}; a trace is written to a regular file",
            path.display(),
            super::trace_damage::not_regular_name(*what)
        ),
        WriteFailure::NoFolder { path, folder } => format!(
            "cannot write {}: folder {} does not exist",
            path.display(),
            folder.display()
        ),
        WriteFailure::NotAFileName(path) => format!("cannot write {}: not a file name", path.display()),
        WriteFailure::TraceNotAFileName(path) => format!("{} is not a file name", path.display()),
        WriteFailure::InvalidPath(path) => format!("{} is not a valid path", path.display()),
        WriteFailure::FolderNotWritable { folder, error } => {
            format!("cannot write a trace in {}: {error}", folder.display())
        }
        WriteFailure::BeingWritten(path) => format!(
            "{} is being written by another cudatrace right now; choose another -o",
            path.display()
        ),
        WriteFailure::HoldsTrace(path) => format!("{} holds a trace already", path.display()),
        WriteFailure::Io { path, error } => super::output_lines::cannot_write(path, error),
        WriteFailure::Stdout(error) => format!("cannot write to stdout: {error}"),
    }
}
