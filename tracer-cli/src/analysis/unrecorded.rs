//! Processes that could not record, in words: the line every output uses.

use crate::wording::count;
use cudatrace_trace::UnrecordedProcess;

/// Processes named one by one; the rest are counted.
const NAMED: usize = 5;

/// One process: `pid 4242 (python3, uid 65534): REASON (EACCES: ...)`.
pub fn unrecorded_process_text(process: &UnrecordedProcess) -> String {
    let errno = if process.errno != 0 {
        format!(" ({})", crate::errno::describe(process.errno))
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
