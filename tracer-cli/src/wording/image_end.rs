//! How a process image ended, in words: every output says it alike.

use cudatrace_trace::ProcessEnd;

/// `exit 3`, `killed by signal 9 (status 137)`, `still running at the
/// end`, `exit status unknown`, or for an image that replaced itself,
/// `exec'd /bin/sh`, with its process's own end where known: `exec'd
/// /bin/sh; the process exited 7`.
pub fn image_end_text(end: Option<&ProcessEnd>) -> String {
    let Some(end) = end else {
        return "exit status unknown".to_string();
    };
    if end.still_running {
        return "still running at the end".to_string();
    }
    if let Some(path) = &end.exec_into {
        return match end.process_exit_status {
            Some(status) => format!("exec'd {path}; the process {}", status_text(status, "exited")),
            None => format!("exec'd {path}"),
        };
    }
    match end.exit_status {
        Some(status) => status_text(status, "exit"),
        None => "exit status unknown".to_string(),
    }
}

/// A wait status as the shell gives it: above 128, a signal. `exited` is
/// the verb for an exit ("exit 1", "exited 1"); a signal reads "killed by
/// signal 9 (status 137)", or "was killed …" after "exited".
pub(super) fn status_text(status: i32, exited: &str) -> String {
    if status > 128 {
        let killed = if exited == "exit" { "killed" } else { "was killed" };
        format!("{killed} by signal {} (status {status})", status - 128)
    } else {
        format!("{exited} {status}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(exit_status: Option<i32>, exec_into: Option<&str>, process_exit_status: Option<i32>) -> ProcessEnd {
        ProcessEnd {
            process: 0,
            exit_status,
            exit_time_ns: None,
            still_running: false,
            unfinished_records: 0,
            unknown_frees: 0,
            registry_overflows: 0,
            dropped_records: 0,
            drop_errno: None,
            reserved_events: 0,
            damaged_records: 0,
            ranks_at_end: [None; 3],
            exec_into: exec_into.map(str::to_owned),
            process_exit_status,
        }
    }

    #[test]
    fn an_image_that_exec_d_says_into_what_and_how_its_process_ended() {
        assert_eq!(image_end_text(Some(&end(Some(3), None, None))), "exit 3");
        assert_eq!(
            image_end_text(Some(&end(Some(137), None, None))),
            "killed by signal 9 (status 137)"
        );
        assert_eq!(image_end_text(Some(&end(None, None, None))), "exit status unknown");
        assert_eq!(image_end_text(None), "exit status unknown");
        assert_eq!(image_end_text(Some(&end(None, Some("/bin/b"), None))), "exec'd /bin/b");
        assert_eq!(
            image_end_text(Some(&end(None, Some("/bin/sh"), Some(7)))),
            "exec'd /bin/sh; the process exited 7"
        );
        assert_eq!(
            image_end_text(Some(&end(None, Some("/bin/sh"), Some(143)))),
            "exec'd /bin/sh; the process was killed by signal 15 (status 143)"
        );
    }
}
