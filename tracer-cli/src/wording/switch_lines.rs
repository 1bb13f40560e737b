//! What `cudatrace pause` and `cudatrace resume` say, and why they fail;
//! and how outputs name a span of a run whose recording was paused.

use super::numbers::{count, shell_quoted};
use cudatrace_analysis::{paused_spans, TraceIndex, PAUSED_SITE};
use cudatrace_events::recording_switch::SwitchState;
use std::fmt::Display;
use std::path::Path;

/// The switch was set; `from_this_terminal` is the pid of a job that was
/// not named, but found as the one started from this terminal.
pub fn switched(state: SwitchState, before: SwitchState, dir: &Path, from_this_terminal: Option<u32>) -> String {
    let what = state_text(state);
    let job = match from_this_terminal {
        Some(pid) => format!("the job in {} (pid {pid}, started from this terminal)", dir.display()),
        None => format!("the job in {}", dir.display()),
    };
    if state == before {
        format!("cudatrace: {job} was already {what}")
    } else {
        format!("cudatrace: {job} is now {what}")
    }
}

/// A switch state in words.
pub fn state_text(state: SwitchState) -> String {
    match (state.paused, state.stacks) {
        (true, _) => "paused: events are recorded without call stacks until `cudatrace resume`".into(),
        (false, None) => "recording, with the call stacks it was started with".into(),
        (false, Some(stacks)) => format!("recording, with --stacks {stacks}"),
    }
}

/// No job named, and none is running.
pub const NO_JOB_RUNNING: &str =
    "no traced job of yours is running; name one by the pid of one of its processes, or by its spool folder";

/// A running job of this user, as listed when none was named.
pub struct ListedJob {
    /// Its spool folder.
    pub dir: String,
    /// The pid to name it by.
    pub pid: u32,
    /// Whether it was started from this terminal.
    pub from_this_terminal: bool,
}

/// No job named, and not exactly one of the user's running `jobs` was
/// started from this terminal (`here` of them were).
pub fn none_chosen(here: usize, jobs: &[ListedJob]) -> String {
    let listed: Vec<String> = jobs
        .iter()
        .map(|job| {
            let mark = if job.from_this_terminal { ", this terminal" } else { "" };
            format!("{} (pid {}{mark})", job.dir, job.pid)
        })
        .collect();
    let which = match here {
        0 => "no traced job was started from this terminal".to_string(),
        _ => format!("{here} traced jobs were started from this terminal"),
    };
    format!("{which}; name one by pid or spool folder: {}", listed.join(", "))
}

/// The pid named runs no traced job.
pub fn not_traced(pid: u32) -> String {
    format!("process {pid} is not traced by cudatrace (or is another user's)")
}

/// The pid named is not running.
pub fn no_such_process(pid: u32) -> String {
    format!("no process {pid} is running")
}

/// The job's spool folder does not exist.
pub fn no_spool_folder(dir: &Path) -> String {
    format!(
        "{} does not exist: the job has not recorded anything yet, or has finished",
        dir.display()
    )
}

/// The folder named is not a job's spool folder.
pub fn not_a_spool_folder(dir: &Path) -> String {
    format!(
        "{} is not a cudatrace spool folder (no spool, switch or notice file in it)",
        dir.display()
    )
}

/// The switch file could not be opened or written.
pub fn cannot_switch(dir: &Path, error: impl Display) -> String {
    format!(
        "cannot switch the recording of the job in {}: {error}",
        shell_quoted(dir)
    )
}

/// The line outputs give a trace whose recording was paused: how often,
/// for how long, and when (seconds from the run's start); `None` if never.
pub fn paused_line(index: &TraceIndex) -> Option<String> {
    let (spans, run_start_ns, run_end_ns) = (paused_spans(index), index.start_ns(), index.end_ns());
    if spans.is_empty() {
        return None;
    }
    let seconds = |ns: u64| ns.saturating_sub(run_start_ns) as f64 / 1e9;
    // A job started paused was switched just before its run began.
    let paused_ns: u64 = spans
        .iter()
        .map(|s| {
            s.end_ns
                .unwrap_or(run_end_ns)
                .saturating_sub(s.start_ns.max(run_start_ns))
        })
        .sum();
    let listed: Vec<String> = spans
        .iter()
        .map(|s| match s.end_ns {
            Some(end) => format!("{:.2}–{:.2} s", seconds(s.start_ns), seconds(end)),
            None => format!("{:.2} s–end", seconds(s.start_ns)),
        })
        .collect();
    Some(format!(
        "recording was paused {}, {:.2} s of {:.2} s: the events recorded then carry no call stack, and are counted at \"{PAUSED_SITE}\" ({})",
        count(spans.len() as u64, "time", "times"),
        paused_ns as f64 / 1e9,
        run_end_ns.saturating_sub(run_start_ns) as f64 / 1e9,
        listed.join(", ")
    ))
}
