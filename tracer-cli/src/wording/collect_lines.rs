//! What `cudatrace collect` says on stderr, and why it fails.

use super::numbers::{count, shell_quoted};
use std::fmt::Display;
use std::path::Path;

/// The collector of a plain `LD_PRELOAD` tree could not leave the tree.
pub fn cannot_fork(error: impl Display) -> String {
    format!("cannot fork: {error}")
}

/// A folder that could not be listed.
pub fn cannot_read(path: &Path, error: impl Display) -> String {
    format!("cannot read {}: {error}", path.display())
}

/// Nothing to collect.
pub fn no_spools(dir: &Path) -> String {
    format!("{} holds no spool files: nothing to collect", dir.display())
}

/// The folder's trace is still being written.
pub fn still_being_written(trace: &Path, dir: &Path) -> String {
    format!(
        "{} is still being written by a running cudatrace, which collects {}; let it finish first",
        trace.display(),
        dir.display()
    )
}

/// Collecting failed, and changed nothing.
pub fn nothing_changed(reason: &str, dir: &Path) -> String {
    format!(
        "{reason}; nothing was changed, the spools are kept in {}",
        dir.display()
    )
}

/// The old trace was damaged; what became of what it lacked.
pub fn old_trace_damaged(trace: &Path, damage: &str, lost_events: u64) -> String {
    let outcome = if lost_events == 0 {
        "what it lacked came from the spools".to_string()
    } else {
        format!(
            "the trace lacks {} (see `cudatrace report`)",
            count(lost_events, "event", "events")
        )
    };
    format!("cudatrace: {} was damaged {damage}; {outcome}", trace.display())
}

/// Traced processes still run: collect again later.
pub fn still_running_after_collect(still_running: u64, dir: &Path) -> String {
    format!(
        "cudatrace: {} still running; their spools are kept in {}: collect again once they are done",
        count(still_running, "traced process is", "traced processes are"),
        dir.display()
    )
}

/// A folder whose name cannot name a trace.
pub fn no_name_for_trace(dir: &Path) -> String {
    format!("{} has no name to call its trace by; pass -o TRACE", dir.display())
}

/// The trace's path was taken: another one beside it is written.
pub fn writing_beside(wanted: &Path, written: &Path) -> String {
    format!(
        "cudatrace: {} is being written by another cudatrace, or holds a trace already; writing {} instead",
        wanted.display(),
        written.display()
    )
}

/// The tree's trace could not be finished (a full disk): the spools stay.
pub fn tree_spools_wait_for_room(message: &str, dir: &Path, trace: &Path) -> String {
    format!(
        "{message}; the spools are kept in {}: once there is room, `cudatrace collect {}` finishes {}",
        dir.display(),
        shell_quoted(dir),
        trace.display()
    )
}

/// The spool folder's note of the run's size cap could not be read as one.
pub fn cap_file_ignored(path: &Path) -> String {
    format!(
        "{} does not hold a size cap (bytes, at least 64 KiB, or unlimited); collecting with --max-size, CUDATRACE_MAX_SIZE or 2 GiB",
        path.display()
    )
}

/// A bad `CUDATRACE_MAX_SIZE` in a plain `LD_PRELOAD` tree, whose program
/// runs on: why, and the cap kept.
pub fn bad_cap_default_kept(why: &str) -> String {
    format!("{why}; the trace keeps the default cap, 2 GiB")
}
