//! Opening the trace a command reads, and failing to write: the two
//! failures every command words the same way.

use crate::system::failure::Failure;
use crate::system::write_failure::WriteFailure;
use crate::wording::{unreadable_trace_text, write_failure_text};
use cudatrace_analysis::{StepCounts, TraceIndex};
use std::path::Path;

/// Reads the trace at `path` ([`TraceIndex::read`]); a trace that cannot be
/// read at all fails the command with one line saying why.
pub fn read_trace(path: &Path) -> Result<TraceIndex, Failure> {
    TraceIndex::read(path).map_err(|fault| unreadable_trace_text(&fault).into())
}

/// [`read_trace`], counting what the step finder needs as the events go
/// by, for a command that builds a [`cudatrace_analysis::Summary`].
pub fn read_trace_counting_steps(path: &Path) -> Result<(TraceIndex, StepCounts), Failure> {
    let mut counts = StepCounts::for_whole_trace();
    let index = TraceIndex::read_observing(path, &mut |index, process, offset, events| {
        counts.observe_block(index, process, offset, events)
    })
    .map_err(|fault| Failure::from(unreadable_trace_text(&fault)))?;
    Ok((index, counts))
}

/// An output that could not be written fails the command with one line.
impl From<WriteFailure> for Failure {
    fn from(failure: WriteFailure) -> Failure {
        Failure::from(write_failure_text(&failure))
    }
}
