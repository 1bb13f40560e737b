//! What the collector says: on stderr while it follows the spools, and in
//! the trace (why NVML, a spool or a forked child could not be read).

use super::numbers::count;
use crate::system::errno::describe;
use std::fmt::Display;
use std::path::Path;

/// The line `run` and `collect` print when they are done.
pub fn wrote_trace(trace: &Path, processes: u64, events: u64, folded: u64, bytes: u64) -> String {
    let events = match folded {
        0 => count(events, "event", "events"),
        folded => format!(
            "{}, and {} folded into summaries to keep it under its size cap",
            count(events, "event", "events"),
            count(folded, "record", "records")
        ),
    };
    format!(
        "cudatrace: wrote {} ({}, {events}, {bytes} bytes)",
        trace.display(),
        count(processes, "process", "processes"),
    )
}

/// A fold that kept more than its cap allows: what must stay exact (the
/// memory live, at the peaks and at the OOMs) was that large.
pub fn state_larger_than_cap(kept: u64) -> String {
    format!(
        "cudatrace: the memory live at the peaks, at the OOMs and at the end took {} of trace, more than its size \
         cap leaves room for; the trace may be larger than asked (give a larger --max-size)",
        super::numbers::bytes(kept)
    )
}

/// A file that a cudatrace killed while writing it left beside a trace
/// (an unfinished `collect`, or a fold's rewrite), removed.
pub fn removed_leftover(leftover: &crate::system::beside_file::Leftover) -> String {
    format!(
        "cudatrace: removed {} ({}), left unfinished by a cudatrace that was stopped while writing it",
        leftover.path.display(),
        super::numbers::bytes(leftover.bytes)
    )
}

/// A fold of the trace that could not be done: the trace may pass its cap.
pub fn could_not_fold(why: &str) -> String {
    format!("cudatrace: could not fold the trace to keep it under its size cap ({why}); it may be larger than asked")
}

/// Events the processes could not store for want of room (`errno`, if known).
pub fn events_not_recorded(dropped: u64, errno: Option<i32>, spool_dir: &Path) -> String {
    let reason = errno.map_or_else(|| "unknown".to_string(), describe);
    format!(
        "cudatrace: {} could not be recorded: no room for spools in {} ({reason})",
        count(dropped, "event", "events"),
        spool_dir.display()
    )
}

/// Events the trace lacks in all.
pub fn trace_lacks_events(lost: u64) -> String {
    format!(
        "cudatrace: the trace lacks {} in all (see `cudatrace report`)",
        count(lost, "event", "events")
    )
}

/// Spools that could not be read.
pub fn spools_unreadable(damaged: u64) -> String {
    format!(
        "cudatrace: {} could not be read (see `cudatrace report`)",
        count(damaged, "spool file", "spool files")
    )
}

/// A process is losing events now.
pub fn losing_events(pid: u32, spool_dir: &Path, errno: Option<i32>) -> String {
    let reason = errno.map_or_else(|| "unknown".to_string(), describe);
    format!(
        "cudatrace: pid {pid} cannot store events in {} ({reason}); they are being lost",
        spool_dir.display()
    )
}

/// The trace's writer thread died.
pub const TRACE_WRITER_FAILED: &str = "the trace writer failed";

/// The trace could not be written: `action` (write, create, ...), where,
/// and the `errno`; a full disk said plainly.
pub fn cannot_do(action: &str, path: &Path, error: &std::io::Error) -> String {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match error.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => format!(
            "cannot {action} {}: the disk holding {} is full ({})",
            path.display(),
            folder.display(),
            describe(error.raw_os_error().unwrap_or(0))
        ),
        Some(code) => format!("cannot {action} {}: {}", path.display(), describe(code)),
        None => format!("cannot {action} {}: {error}", path.display()),
    }
}

/// What a file of the collector's could not be (see [`cannot_do`]).
pub const WRITE: &str = "write";

/// What the trace's writer was doing when it failed (see [`cannot_do`]).
pub const WRITE_THE_TRACE: &str = "write the trace";

/// What the trace's writer was doing when its readers went away.
pub const COLLECT_INTO: &str = "collect into";

/// The readers went away before the end.
pub const COLLECTOR_STOPPED_EARLY: &str = "the collector stopped early";

/// The spool folder `CUDATRACE_DIR` names is not a folder.
pub const NOT_A_FOLDER: &str = "not a folder";

/// The spool folder's note names a file that is not this user's.
pub fn pointer_names_foreign_file(pointer: &Path, named: &Path, me: u32) -> String {
    format!(
        "ignoring {}: it names {}, which is not a file of this user's (uid {me})",
        pointer.display(),
        named.display()
    )
}

/// The spool folder's note names a file that is not a trace.
pub fn pointer_names_no_trace(pointer: &Path, named: &Path) -> String {
    format!(
        "ignoring {}: it names {}, which is not a cudatrace trace",
        pointer.display(),
        named.display()
    )
}

/// The spool folder `CUDATRACE_DIR` names cannot be used.
pub fn spool_dir_unusable(chosen: &Path, why: impl Display) -> String {
    format!("CUDATRACE_DIR={}: {why}", chosen.display())
}

/// No run folder could be made for the spools.
pub fn cannot_create_spool_folder(folder: &Path, error: impl Display) -> String {
    format!("cannot create a spool folder in {}: {error}", folder.display())
}

/// A folder that is not one.
pub fn not_a_folder(path: &Path) -> String {
    format!("{} is not a folder", path.display())
}

/// A spool folder of another user.
pub fn folder_of_another_user(dir: &Path, owner: u32, me: u32) -> String {
    format!("refusing {}: owned by uid {owner}, not {me}", dir.display())
}

/// The spool folder's note of its trace is not to be trusted.
pub fn pointer_ignored(pointer: &Path, why: impl Display) -> String {
    format!("ignoring {}: {why}", pointer.display())
}

/// The note of the trace is not this user's file.
pub fn not_this_users_file(me: u32) -> String {
    format!("not a file of this user's (uid {me})")
}

/// A spool file found in a spool folder that is not read.
pub fn spool_refused(owned_by_another: bool) -> &'static str {
    if owned_by_another {
        "owned by another user"
    } else {
        "not a regular file"
    }
}

/// A forked child's reason code that this version does not know.
pub fn unknown_child_reason(code: u32) -> String {
    format!("could not create its spool (reason {code} unknown to this version)")
}

/// Forked children beyond the parent header's room.
pub fn children_not_named(count: u32) -> String {
    format!("{count} more forked children could not record; their parent's spool header had no room to name them")
}

/// NVML lacks a function cudatrace reads.
pub fn nvml_lacks(name: impl Display) -> String {
    format!("NVML has no {name}")
}

/// NVML is not on the machine.
pub const NVML_NOT_INSTALLED: &str = "NVML (libnvidia-ml.so.1) is not installed";

/// NVML would not start.
pub fn nvml_did_not_start(status: i32) -> String {
    format!("NVML did not start (nvmlInit_v2 returned {status})")
}

/// NVML could not say how many devices there are.
pub const NVML_CANNOT_COUNT: &str = "NVML could not count the devices";

/// NVML's pids are another namespace's.
pub const NVML_OTHER_NAMESPACE: &str =
    "NVML lists processes, but none of the traced pids: it sees another pid namespace";

/// NVML never saw a traced process.
pub const NVML_NEVER_LISTED: &str = "NVML never listed a traced process";
