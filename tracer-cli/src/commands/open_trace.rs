//! Opening the trace a command reads, and failing to write: the two
//! failures every command words the same way.

use crate::analysis::TraceIndex;
use crate::outputs::wording::{unreadable_trace_text, write_failure_text};
use crate::system::failure::Failure;
use crate::system::write_failure::WriteFailure;
use std::path::Path;

/// Reads the trace at `path` ([`TraceIndex::read`]); a trace that cannot be
/// read at all fails the command with one line saying why.
pub fn read_trace(path: &Path) -> Result<TraceIndex, Failure> {
    TraceIndex::read(path).map_err(|fault| unreadable_trace_text(&fault).into())
}

/// An output that could not be written fails the command with one line.
impl From<WriteFailure> for Failure {
    fn from(failure: WriteFailure) -> Failure {
        Failure::from(write_failure_text(&failure))
    }
}
