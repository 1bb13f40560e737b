//! The job's recording switches (`cudatrace pause`, `resume`), read from
//! the spool folder's switch file when a trace is finished, so that the
//! trace says which spans were paused.

use cudatrace_events::recording_switch::{self, Switch};
use cudatrace_trace::Record;
use std::path::Path;

/// The switches logged in `dir`, as trace records, in order; none when the
/// job was never switched (no file, or not a switch file).
pub fn records(dir: &Path) -> Vec<Record> {
    switches(dir).into_iter().map(Record::RecordingSwitch).collect()
}

/// The switches logged in `dir`, in order.
pub fn switches(dir: &Path) -> Vec<Switch> {
    std::fs::read(dir.join(recording_switch::FILE_NAME))
        .ok()
        .and_then(|bytes| recording_switch::read_log(&bytes))
        .unwrap_or_default()
}
