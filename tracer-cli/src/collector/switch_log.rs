//! The job's recording switches (`cudatrace pause`, `resume`), read from
//! the spool folder's switch file when a trace is finished, so that the
//! trace says which spans were paused.

use cudatrace_events::recording_switch::{self, Switch};
use cudatrace_trace::Record;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The switches logged in `dir`, as trace records, in order; none when the
/// job was never switched (no file, or not a switch file).
pub fn records(dir: &Path) -> Vec<Record> {
    switches(dir).into_iter().map(Record::RecordingSwitch).collect()
}

/// Most bytes of switch file read: a million switches and more.
const MOST_BYTES: u64 = 64 << 20;

/// The switches logged in `dir`, in order. Only a regular file is read,
/// never through a link, and never a FIFO (whose read could wait forever).
fn switches(dir: &Path) -> Vec<Switch> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(recording_switch::FILE_NAME));
    let Ok(file) = opened else {
        return Vec::new();
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    if file.take(MOST_BYTES).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    recording_switch::read_log(&bytes).unwrap_or_default()
}
