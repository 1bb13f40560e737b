//! Processes that could not record, and forked children that left no
//! spool, in words: the lines every output uses.

use super::numbers::count;
use cudatrace_analysis::{unrecorded_count, SilentChild};
use cudatrace_trace::UnrecordedProcess;
use std::collections::BTreeMap;

/// Processes named one by one; the rest are counted.
const NAMED: usize = 5;

/// One process: `pid 4242 (python3, uid 65534): REASON (EACCES: ...)`.
pub fn unrecorded_process_text(process: &UnrecordedProcess) -> String {
    if process.pid == 0 {
        // Children that found no slot to be named in: only their parent is known.
        return format!("forked by pid {}: {}", process.ppid, process.reason);
    }
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
        count(unrecorded_count(processes), "process", "processes"),
        named.join("; ")
    ))
}

/// `N forked children left no spool (pid 11, 12 forked by pid 10): …`, or
/// `None` when every forked child is in the trace. `unnamed` gives, per
/// parent, its children that could not record and found no slot to be
/// named in: they are among these, and the line says so.
pub fn silent_children_line(children: &[SilentChild], unnamed: &BTreeMap<u32, u64>) -> Option<String> {
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
            let among = match unnamed.get(&parent) {
                Some(&n) if n as usize >= pids.len() => {
                    ", all of which could not record (too many for the parent's spool to name)".to_string()
                }
                Some(&n) => format!(", of which up to {n} could not record (too many for the parent's spool to name)"),
                None => String::new(),
            };
            format!("pid {} forked by pid {parent}{among}", named.join(", "))
        })
        .collect();
    Some(format!(
        "{} left no spool ({}): they made no CUDA call, or exec'd an image that could not record and had no way to say so",
        count(children.len() as u64, "forked child", "forked children"),
        by_parent.join("; ")
    ))
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
        let child = |pid, ppid| SilentChild {
            pid,
            ppid,
            time_ns: 0,
            parent: 0,
        };
        let none = BTreeMap::new();
        assert_eq!(silent_children_line(&[], &none), None);
        let many: Vec<SilentChild> = (11..18).map(|pid| child(pid, 10)).chain([child(30, 20)]).collect();
        assert_eq!(
            silent_children_line(&many, &none).unwrap(),
            "8 forked children left no spool (pid 11, 12, 13, 14, 15, and 2 more forked by pid 10; pid 30 forked \
             by pid 20): they made no CUDA call, or exec'd an image that could not record and had no way to say so"
        );
        // Pid 10's spool could not name 3 of its children that could not record.
        let unnamed = BTreeMap::from([(10, 3), (20, 1)]);
        assert_eq!(
            silent_children_line(&many, &unnamed).unwrap(),
            "8 forked children left no spool (pid 11, 12, 13, 14, 15, and 2 more forked by pid 10, of which up to 3 \
             could not record (too many for the parent's spool to name); pid 30 forked by pid 20, all of which could \
             not record (too many for the parent's spool to name)): they made no CUDA call, or exec'd an image that \
             could not record and had no way to say so"
        );
    }

    #[test]
    fn children_a_spool_could_not_name_count_as_many_as_they_were() {
        let unnamed = UnrecordedProcess {
            pid: 0,
            ppid: 1,
            uid: 4,
            time_ns: 0,
            errno: 0,
            name: String::new(),
            reason: "4 more forked children could not record; their parent's spool header had no room to name them"
                .into(),
        };
        let line = unrecorded_line(&[process(7, 0), unnamed]).unwrap();
        assert_eq!(
            line,
            "5 processes could not record (pid 7 (worker, parent 1, uid 65534): cannot create its spool in /tmp/run; \
             forked by pid 1: 4 more forked children could not record; their parent's spool header had no room to \
             name them)"
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
