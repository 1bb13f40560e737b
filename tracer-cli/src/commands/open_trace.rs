//! Opening the trace a command reads.

use crate::analysis::TraceIndex;
use crate::outputs::wording::unreadable_trace_text;
use crate::system::failure::Failure;
use std::path::Path;

/// Reads the trace at `path` ([`TraceIndex::read`]); a trace that cannot be
/// read at all fails the command with one line saying why.
pub fn read_trace(path: &Path) -> Result<TraceIndex, Failure> {
    TraceIndex::read(path).map_err(|fault| unreadable_trace_text(&fault).into())
}
