//! Processes that could not record, in words: the line every output uses.

use super::trace_index::TraceIndex;
use crate::system::wording::count;
use cudatrace_trace::UnrecordedProcess;
use std::collections::HashSet;

/// Processes named one by one; the rest are counted.
const NAMED: usize = 5;

/// One process: `pid 4242 (python3, uid 65534): REASON (EACCES: ...)`.
pub fn unrecorded_process_text(process: &UnrecordedProcess) -> String {
    let errno = if process.errno != 0 {
        format!(" ({})", crate::system::errno::describe(process.errno))
    } else {
        String::new()
    };
    let name = if process.name.is_empty() { "?" } else { &process.name };
    format!(
        "pid {} ({name}, parent {}, uid {}): {}{errno}",
        process.pid, process.ppid, process.uid, process.reason
    )
}

/// `N processes could not record (…; …)`, or `None` when every process
/// could.
pub fn unrecorded_line(processes: &[UnrecordedProcess]) -> Option<String> {
    if processes.is_empty() {
        return None;
    }
    let mut named: Vec<String> = processes.iter().take(NAMED).map(unrecorded_process_text).collect();
    if processes.len() > NAMED {
        named.push(format!("and {} more", processes.len() - NAMED));
    }
    Some(format!(
        "{} could not record ({})",
        count(processes.len() as u64, "process", "processes"),
        named.join("; ")
    ))
}

/// A child that a recorded process forked, that left no spool and did not
/// say it could not record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SilentChild {
    /// Its pid.
    pub pid: u32,
    /// The pid of the process that forked it.
    pub ppid: u32,
    /// When it was forked (`CLOCK_MONOTONIC`).
    pub time_ns: u64,
}

/// The forked children that left no spool: neither an image of theirs is
/// in the trace nor did they say they could not record. Most made no CUDA
/// call (a DataLoader worker, a shell); the rest exec'd an image that could
/// not record, outside `cudatrace run`, with no way to say so.
pub fn silent_children(index: &TraceIndex) -> Vec<SilentChild> {
    let known: HashSet<u32> = index
        .processes
        .iter()
        .map(|p| p.start.pid)
        .chain(index.unrecorded.iter().map(|p| p.pid))
        .collect();
    let mut children: Vec<SilentChild> = index
        .processes
        .iter()
        .flat_map(|parent| {
            parent.forks.iter().map(|&(time_ns, pid)| SilentChild {
                pid,
                ppid: parent.start.pid,
                time_ns,
            })
        })
        .filter(|child| !known.contains(&child.pid))
        .collect();
    children.sort_by_key(|child| (child.time_ns, child.pid));
    children.dedup_by_key(|child| child.pid);
    children
}

/// `N forked children left no spool (pid 11, 12 forked by pid 10): …`, or
/// `None` when every forked child is in the trace.
pub fn silent_children_line(children: &[SilentChild]) -> Option<String> {
    if children.is_empty() {
        return None;
    }
    let mut parents: Vec<u32> = children.iter().map(|c| c.ppid).collect();
    parents.sort_unstable();
    parents.dedup();
    let by_parent: Vec<String> = parents
        .iter()
        .map(|&parent| {
            let pids: Vec<u32> = children.iter().filter(|c| c.ppid == parent).map(|c| c.pid).collect();
            let mut named: Vec<String> = pids.iter().take(NAMED).map(u32::to_string).collect();
            if pids.len() > NAMED {
                named.push(format!("and {} more", pids.len() - NAMED));
            }
            format!("pid {} forked by pid {parent}", named.join(", "))
        })
        .collect();
    Some(format!(
        "{} left no spool ({}): they made no CUDA call, or exec'd an image that could not record and had no way to say so",
        count(children.len() as u64, "forked child", "forked children"),
        by_parent.join("; ")
    ))
}

/// A silent child, as the JSON report shows it.
pub fn silent_child_json(child: &SilentChild) -> serde_json::Value {
    serde_json::json!({ "pid": child.pid, "ppid": child.ppid, "time_ns": child.time_ns })
}

/// A process that could not record, as `dump` and the JSON report show it.
pub fn unrecorded_json(process: &UnrecordedProcess) -> serde_json::Value {
    serde_json::json!({
        "pid": process.pid,
        "ppid": process.ppid,
        "uid": process.uid,
        "time_ns": process.time_ns,
        "errno": process.errno,
        "name": process.name,
        "reason": process.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, errno: i32) -> UnrecordedProcess {
        UnrecordedProcess {
            pid,
            ppid: 1,
            uid: 65534,
            time_ns: 0,
            errno,
            name: "worker".into(),
            reason: "cannot create its spool in /tmp/run".into(),
        }
    }

    #[test]
    fn silent_children_are_named_by_parent_and_counted_past_five() {
        let child = |pid, ppid| SilentChild { pid, ppid, time_ns: 0 };
        assert_eq!(silent_children_line(&[]), None);
        let many: Vec<SilentChild> = (11..18).map(|pid| child(pid, 10)).chain([child(30, 20)]).collect();
        assert_eq!(
            silent_children_line(&many).unwrap(),
            "8 forked children left no spool (pid 11, 12, 13, 14, 15, and 2 more forked by pid 10; pid 30 forked \
             by pid 20): they made no CUDA call, or exec'd an image that could not record and had no way to say so"
        );
    }

    #[test]
    fn the_line_names_each_process_its_reason_and_errno() {
        assert_eq!(unrecorded_line(&[]), None);
        assert_eq!(
            unrecorded_line(&[process(7, libc::EACCES), process(8, 0)]).unwrap(),
            "2 processes could not record (pid 7 (worker, parent 1, uid 65534): cannot create its spool in \
             /tmp/run (EACCES: Permission denied); pid 8 (worker, parent 1, uid 65534): cannot create its \
             spool in /tmp/run)"
        );
    }

    #[test]
    fn past_five_processes_the_rest_are_counted() {
        let many: Vec<_> = (1..=7).map(|pid| process(pid, libc::EMFILE)).collect();
        let line = unrecorded_line(&many).unwrap();
        assert!(line.starts_with("7 processes could not record (pid 1 "), "{line}");
        assert!(line.ends_with("; and 2 more)"), "{line}");
        assert_eq!(line.matches("EMFILE").count(), 5);
    }
}
